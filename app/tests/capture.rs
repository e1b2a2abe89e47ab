//! DPDK's own tools against a running engine, attached as secondary
//! processes (the engine starts `rte_pdump_init`, `[capture] pdump`):
//! `dpdk-dumpcap` with a BPF filter captures exactly the IPv6 frames of a
//! finite replay, which tshark reads back; `dpdk-proc-info --stats` reads the
//! port's counters; neither stops RX. Secondaries need the engine's shared
//! memory, so these engines run with hugepages (scripts/setup.sh reserves
//! them), on their own file prefix.
//!
//! The finite replay comes over `net_memif` from `udpdemux gen`, started
//! once the capture is attached: a `net_pcap` replay starts the moment the
//! port does, before any secondary can attach, so only an endless one could
//! be captured, where `dpdk-dumpcap -c N` stops at the end of a ring burst
//! (up to 31 frames past N), never exactly at N; the second test checks
//! that bound on the default job's vdev, with the capture stopping under
//! full-rate traffic.
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::can_run;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const TOOLS: &[&str] = &["dpdk-dumpcap", "dpdk-proc-info", "tshark", "timeout"];

/// dumpcap takes at most this many frames off its ring per write, and
/// checks `-c` only between writes (app/dumpcap/main.c, `BURST_SIZE`).
const DUMPCAP_BURST: u64 = 32;

/// An engine config with hugepages on a fresh prefix: `vdev`, its port
/// polled by lcore 1, the five sockets of `conf/default.pcap`; with `echo`,
/// `dns6` ([fd00::1]:53) echoes what it receives, so the port transmits too
/// (a port with a TX queue per sending lcore: not `net_pcap` with one file).
fn engine_cfg(
    tag: &str,
    vdev: &str,
    port: &str,
    engine: &str,
    echo: bool,
) -> (std::path::PathBuf, String) {
    let d = scratch(tag);
    let prefix = prefix(tag);
    let text = format!(
        "[eal]\nlcores = \"0,1\"\nno_huge = false\nmemory_mb = 64\nno_pci = true\n\
         file_prefix = \"{prefix}\"\nvdevs = [\"{vdev}\"]\n\n[engine]\n{engine}\n\n\
         [mempool]\nmbufs = 4095\ncache = 128\n{}{}",
        rx_port(port),
        pcap_sockets(|n| if echo && n == "dns6" {
            "handler = \"echo\"\n"
        } else {
            ""
        })
    );
    (write(&d, "c.toml", &text), prefix)
}

/// `dpdk-dumpcap` on `prefix`'s `port` with filter `filter`, stopping after
/// `count` frames, writing `out`; returns once the capture is enabled in the
/// engine (dumpcap prints "Packets captured:" right after `rte_pdump_enable`)
/// with the child and its collected stderr.
fn dumpcap(
    prefix: &str,
    port: &str,
    filter: &str,
    count: u64,
    out: &Path,
) -> (Child, Arc<Mutex<String>>) {
    let mut child = Command::new("timeout")
        // -p: without it dumpcap turns promiscuous mode on, and off at its
        // exit, whatever the engine configured.
        .args([
            "30",
            "dpdk-dumpcap",
            "--file-prefix",
            prefix,
            "-p",
            "-i",
            port,
        ])
        .args(["-f", filter, "-c", &count.to_string(), "-w"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dpdk-dumpcap");
    let log = Arc::new(Mutex::new(String::new()));
    let l2 = Arc::clone(&log);
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        // dumpcap rewrites its count in place with backspaces, never ending
        // the line until it stops: read whatever arrives.
        let mut err = err;
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = err.read(&mut buf) {
            l2.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]).replace('\u{8}', " "));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if log.lock().unwrap().contains("Packets captured:") {
            return (child, log);
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("dpdk-dumpcap exited ({st}): {}", log.lock().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "dpdk-dumpcap not capturing after 20 s: {}",
                log.lock().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait (bounded) for dumpcap to stop by its `-c`; its stderr.
fn dumpcap_done(mut child: Child, log: &Arc<Mutex<String>>) -> String {
    let st = wait_exit(
        &mut child,
        Duration::from_secs(25),
        "dpdk-dumpcap did not stop at its -c",
        || log.lock().unwrap().clone(),
    );
    // The reader thread gets the last lines once the pipe closes.
    std::thread::sleep(Duration::from_millis(100));
    let text = log.lock().unwrap().clone();
    assert!(st.success(), "dpdk-dumpcap failed ({st}): {text}");
    text
}

/// dumpcap's own final count ("Packets captured: 0 32 ... N").
fn dumpcap_captured(log: &str) -> u64 {
    log.split("Packets captured:")
        .nth(1)
        .and_then(|s| {
            s.split_whitespace()
                .take_while(|w| w.parse::<u64>().is_ok())
                .last()
        })
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no final count in dumpcap's output: {log}"))
}

/// One captured frame as tshark dissects it.
struct Frame {
    /// Ethertype after any VLAN tags ("0x86dd").
    eth_type: String,
    /// IPv6 source address, if tshark found an IPv6 header.
    ip6_src: String,
    udp_src_port: String,
}

impl Frame {
    fn is_ipv6(&self) -> bool {
        self.eth_type == "0x86dd" && !self.ip6_src.is_empty()
    }

    /// A reply of the `dns6` echo socket (the engine's TX).
    fn is_dns6_echo(&self) -> bool {
        self.ip6_src == "fd00::1" && self.udp_src_port == "53"
    }
}

/// tshark's reading of a capture file.
fn tshark_frames(file: &Path) -> Vec<Frame> {
    let o = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args(["-T", "fields", "-E", "separator=|", "-e", "eth.type"])
        .args(["-e", "ipv6.src", "-e", "udp.srcport"])
        .output()
        .expect("spawn tshark");
    assert!(o.status.success(), "tshark: {}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let at = |i: usize| f.get(i).unwrap_or(&"").to_string();
            Frame {
                eth_type: at(0),
                ip6_src: at(1),
                udp_src_port: at(2),
            }
        })
        .collect()
}

/// The port's link status and RX packets as the engine's telemetry shows them.
fn port_now(prefix: &str) -> (bool, u64) {
    let r: Vec<Value> = telemetry_query(
        prefix,
        &["/ethdev/link_status,0", "/ethdev/stats,0"],
        Duration::from_secs(30),
    )
    .expect("dpdk-telemetry.py did not finish within 30 s")
    .into_iter()
    .filter(|v| v.get("version").is_none())
    .collect();
    assert_eq!(r.len(), 2, "telemetry: {r:?}");
    (
        r[0]["/ethdev/link_status"]["status"] == "UP",
        r[1]["/ethdev/stats"]["ipackets"]
            .as_u64()
            .expect("ipackets"),
    )
}

/// `dpdk-proc-info --file-prefix P --no-pci -- --stats` against a running
/// engine (under `timeout`).
fn proc_info_stats(prefix: &str) -> Output {
    Command::new("timeout")
        .args(["30", "dpdk-proc-info", "--file-prefix", prefix, "--no-pci"])
        .args(["--", "--stats"])
        .output()
        .expect("spawn dpdk-proc-info")
}

/// A `KEY: N` figure of proc-info's "NIC statistics for port 0" block.
fn proc_info_figure(out: &str, key: &str) -> u64 {
    let block = out
        .split("NIC statistics for port 0")
        .nth(1)
        .unwrap_or_else(|| panic!("no port 0 block: {out}"));
    let mut w = block.split_whitespace();
    w.find(|t| *t == key)
        .and_then(|_| w.next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {block}"))
}

/// The engine stops on SIGTERM with its books balanced; its stats JSON and log.
fn stop_engine(e: EngineProc, json: &Path) -> (Value, String) {
    let (st, log) = e.stop();
    assert!(st.success(), "engine exited with {st}: {log}");
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(json).expect("stats json")).unwrap();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    (j, log)
}

/// Removes, when dropped (also when the test fails), the scratch directory
/// (with its capture) and the EAL runtime directories its processes left.
/// Made before the engine starts, so it is dropped after the engine is gone.
struct Leftovers {
    dir: std::path::PathBuf,
    prefixes: Vec<String>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        for p in &self.prefixes {
            let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(p));
        }
    }
}

fn ready_to_run() -> bool {
    if !can_run(TOOLS) {
        return false;
    }
    hugepages_ready(128).unwrap();
    true
}

/// `udpdemux gen` replays the 1000 frames of `conf/default.pcap` (the same
/// spec and seed) over memif into the engine, after dumpcap attached with
/// `-f ip6 -c N`, N the manifest's IPv6 frames plus the dns6 socket's
/// echoes (TX): dumpcap stops with exactly those, tshark reads exactly N
/// frames, every one IPv6, exactly the manifest's IPv6 frames received and
/// dns6's datagrams echoed; proc-info then reads the port's RX packets as
/// the 1000 frames sent (exit 0), the link stays up, and the engine
/// received and accounted every frame.
#[test]
fn dumpcap_captures_exactly_the_ipv6_frames_of_a_replay_and_proc_info_reads_the_port() {
    if !ready_to_run() {
        return;
    }
    let m = manifest();
    let frames = m["frames"].as_u64().unwrap();
    let v6 = m["family"]["v6"].as_u64().unwrap();
    // Without VLAN tags the filter's "ip6" (ethertype 0x86dd) is the family.
    assert_eq!(m["vlan_tagged"], 0);
    assert!(v6 > 0 && v6 < frames, "a mixed replay: {m}");
    // dumpcap captures both directions: every IPv6 frame received, and the
    // dns6 socket's echo of each of its datagrams, handed to TX.
    let echoes = m["per_dst"]["[fd00::1]:53"].as_u64().unwrap();
    let n = v6 + echoes;

    let sock = format!("/run/udpdemux-{}", prefix("capsock"));
    let (cfg, pfx) = engine_cfg(
        "capture",
        &format!("net_memif0,role=server,socket={sock}"),
        "net_memif0",
        // A bound on the run; the test stops it with SIGTERM.
        "duration_secs = 60",
        true,
    );
    let gen_pfx = prefix("capgen");
    let _leftovers = Leftovers {
        dir: cfg.parent().unwrap().to_path_buf(),
        prefixes: vec![pfx.clone(), gen_pfx.clone()],
    };
    let json = cfg.with_extension("json");
    let mut engine = EngineProc::start(&cfg, &json);
    engine.wait_ready();

    let out = cfg.with_file_name("v6.pcapng");
    let (cap, cap_log) = dumpcap(&pfx, "net_memif0", "ip6", n, &out);

    let tx_json = cfg.with_file_name("tx.json");
    let eal_args = format!(
        "--lcores 0@0 -m 64 --no-pci --file-prefix={gen_pfx} --vdev=net_memif0,role=client,socket={sock}"
    );
    // It lingers with the port open after sending (net_memif 22.11 can crash
    // a receiver whose peer disconnects while it reads): the engine stops
    // first, then the sender is told to go.
    let mut sender = Command::new(bin())
        .args(["gen", "--config"])
        .arg(repo().join("conf/traffic/default.toml"))
        .args(["--port", "net_memif0", "--count", &frames.to_string()])
        .args(["--duration", "20", "--linger", "40", "--eal", &eal_args])
        .arg("--stats-json")
        .arg(&tx_json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn udpdemux gen");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let log = dumpcap_done(cap, &cap_log);
        assert_eq!(dumpcap_captured(&log), n, "dumpcap's own count: {log}");
        let got = tshark_frames(&out);
        assert_eq!(got.len() as u64, n, "frames tshark reads in {out:?}");
        for f in &got {
            assert!(f.is_ipv6(), "a non-IPv6 frame captured: {}", f.eth_type);
        }
        let tx = got.iter().filter(|f| f.is_dns6_echo()).count() as u64;
        assert_eq!((n - tx, tx), (v6, echoes), "(RX, TX) frames captured");

        // Every frame has arrived once the port counted them all.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut up, mut rx) = port_now(&pfx);
        while rx < frames && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            (up, rx) = port_now(&pfx);
        }
        assert_eq!(rx, frames, "the port received what gen sent");
        assert!(up, "link up after dumpcap detached");

        let o = proc_info_stats(&pfx);
        assert!(
            o.status.success(),
            "dpdk-proc-info exit {}: {}{}",
            o.status,
            stdout(&o),
            stderr(&o)
        );
        let text = stdout(&o);
        assert_eq!(proc_info_figure(&text, "RX-packets:"), frames, "{text}");
        assert_eq!(proc_info_figure(&text, "RX-errors:"), 0, "{text}");
        assert!(proc_info_figure(&text, "RX-bytes:") > 0, "{text}");
        let (up, rx) = port_now(&pfx);
        assert!(up && rx == frames, "port after proc-info: up {up}, rx {rx}");
    }));
    let (j, log) = stop_engine(engine, &json);
    // dumpcap's stop went through the engine's interposed remove-callback
    // functions, which waited for the RX lcore (docs/operations.md,
    // "Capture"): the binary still exports them and librte_pdump binds there.
    assert!(
        log.contains("pdump: a capture callback was removed; the RX lcores left it within"),
        "no quiesce after the capture stopped: {log}"
    );
    // The engine is gone: the sender may go (SIGTERM: it writes its JSON).
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(sender.id() as i32, libc::SIGTERM) };
    let st = wait_exit(
        &mut sender,
        Duration::from_secs(15),
        "gen did not exit",
        String::new,
    );
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(st.success(), "gen exited with {st}");
    // What was sent is conf/default.pcap's manifest (same spec, seed, count).
    let tx: Value = serde_json::from_str(&std::fs::read_to_string(&tx_json).unwrap()).unwrap();
    let sent = if tx["sent"].is_object() {
        &tx["sent"]
    } else {
        &tx
    };
    for k in ["frames", "family", "per_dst", "vlan_tagged"] {
        assert_eq!(sent[k], m[k], "gen's transmit manifest: {k}");
    }
    assert_eq!(j["rx_packets"].as_u64().unwrap(), frames, "engine's rx");
    for (dst, n) in m["per_dst"].as_object().unwrap() {
        assert_eq!(&socket(&j, dst)["offered"], n, "socket {dst}");
    }
    let dns6 = socket_named(&j, "dns6");
    assert_eq!(
        dns6["tx"].as_u64().unwrap() + dns6["tx_errors"].as_u64().unwrap(),
        echoes,
        "every echo was handed to TX: {dns6}"
    );
}

/// On the default job's vdev (an endless `net_pcap` replay), dumpcap with
/// `-f ip6 -c N` stops between N and one ring burst past it, every frame
/// IPv6; it stops while the RX lcore is busy in its callback, which the
/// engine waits out (without that wait this crashed the engine in about
/// one stop in four here), and the engine goes on receiving after it.
#[test]
fn dumpcap_on_an_endless_pcap_replay_stops_near_its_count_and_rx_goes_on() {
    if !ready_to_run() {
        return;
    }
    const N: u64 = 2000;
    let pcap = repo().join("conf/default.pcap");
    let (cfg, pfx) = engine_cfg(
        "capture-pcap",
        &format!("net_pcap0,rx_pcap={},infinite_rx=1", pcap.display()),
        "net_pcap0",
        "duration_secs = 60",
        false,
    );
    let _leftovers = Leftovers {
        dir: cfg.parent().unwrap().to_path_buf(),
        prefixes: vec![pfx.clone()],
    };
    let json = cfg.with_extension("json");
    let mut engine = EngineProc::start(&cfg, &json);
    engine.wait_ready();
    let out = cfg.with_file_name("v6.pcapng");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (cap, cap_log) = dumpcap(&pfx, "net_pcap0", "ip6", N, &out);
        let log = dumpcap_done(cap, &cap_log);
        let captured = dumpcap_captured(&log);
        assert!(
            (N..N + DUMPCAP_BURST).contains(&captured),
            "dumpcap stopped at {captured}: {log}"
        );
        let got = tshark_frames(&out);
        assert_eq!(
            got.len() as u64,
            captured,
            "tshark reads what dumpcap wrote"
        );
        for f in &got {
            assert!(f.is_ipv6(), "a non-IPv6 frame captured: {}", f.eth_type);
        }
        let (_, before) = port_now(&pfx);
        std::thread::sleep(Duration::from_millis(300));
        let (_, after) = port_now(&pfx);
        assert!(
            after > before,
            "RX stopped after dumpcap: {before} -> {after}"
        );
    }));
    let (j, log) = stop_engine(engine, &json);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(j["rx_packets"].as_u64().unwrap() > N);
    assert!(
        log.contains("pdump: a capture callback was removed; the RX lcores left it within"),
        "no quiesce after the capture stopped: {log}"
    );
}
