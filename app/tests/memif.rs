//! External senders over `net_memif`: a DPDK program no one here wrote
//! (`dpdk-testpmd --forward-mode=txonly`) and our own `udpdemux gen` feed the
//! engine from another process; the engine's books must balance against what
//! the sender reports it sent.
//!
//! memif shares memory between the two processes, so these runs use
//! hugepages (scripts/setup.sh reserves them): with `--no-huge` the EAL has no
//! shareable memory and the peers do not exchange packets reliably.
mod common;
use common::*;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The engine is the memif server (started first); the sender connects as client.
fn engine_cfg(tag: &str, sock: &str, sockets: &str) -> PathBuf {
    let d = scratch(tag);
    let text = format!(
        r#"[eal]
lcores = "0,1"
no_huge = false
memory_mb = 64
no_pci = true
file_prefix = "{prefix}"
vdevs = ["net_memif0,role=server,socket={sock}"]

[engine]
# The sender stops first; the engine then drains the memif ring and stops.
stop_when_idle_ms = 1000
duration_secs = 30

[mempool]
mbufs = 4095
cache = 128

{port}{sockets}"#,
        prefix = prefix(tag),
        port = rx_port("net_memif0"),
    );
    write(&d, "c.toml", &text)
}

/// A unique memif socket name (22.11 puts it in the abstract namespace).
fn memif_socket(tag: &str) -> String {
    format!("/run/udpdemux-{}", prefix(tag))
}

/// Start the engine with stderr in a file; wait until its memif port is up.
fn start_engine(cfg: &Path) -> (Child, PathBuf, PathBuf) {
    let json = cfg.with_extension("json");
    let log = cfg.with_extension("log");
    let mut child = run_command(cfg, &json, &[])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn udpdemux");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut text = String::new();
    while Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("port net_memif0") {
            return (child, json, log);
        }
        if text.contains("udpdemux: error") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Never leave an engine polling behind a failed test.
    let _ = child.kill();
    let _ = child.wait();
    panic!("engine did not bring net_memif0 up: {text}");
}

/// Wait (bounded) for the engine to stop by itself once the sender is gone.
fn finish_engine(mut child: Child, json: &Path, log: &Path) -> Value {
    let status = wait_exit(
        &mut child,
        Duration::from_secs(40),
        "engine did not stop when idle",
        || std::fs::read_to_string(log).unwrap_or_default(),
    );
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "engine exited with {status}: {text}");
    serde_json::from_str(&std::fs::read_to_string(json).expect("stats json")).expect("json parses")
}

/// testpmd's final "Accumulated forward statistics" TX-packets.
fn testpmd_tx_packets(out: &str) -> Option<u64> {
    let acc = out.find("Accumulated forward statistics")?;
    let line = out[acc..].lines().find(|l| l.contains("TX-packets:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn testpmd_accumulated_tx_is_parsed() {
    let out = "  ---- Forward statistics for port 0 ----\n  TX-packets: 5 TX-dropped: 0\n\
               +++ Accumulated forward statistics for all ports+++\n  RX-packets: 0  RX-dropped: 0  RX-total: 0\n  TX-packets: 573856  TX-dropped: 24  TX-total: 573880\n";
    assert_eq!(testpmd_tx_packets(out), Some(573856));
    assert_eq!(
        testpmd_tx_packets("TX-packets: 3\n"),
        None,
        "only the accumulated block counts"
    );
}

#[test]
fn testpmd_txonly_over_memif_books_balance_against_the_sender() {
    hugepages_ready(128).unwrap();
    let sock = memif_socket("tpmemif");
    let cfg = engine_cfg(
        "tpmemif",
        &sock,
        "\n[[socket]]\nname = \"dns4\"\nlocal = \"198.18.1.1:53\"\nrcvbuf = 4194304\n",
    );
    let (engine, json, log) = start_engine(&cfg);
    // testpmd's txonly datagram: IPv4 UDP 198.18.0.7:4000 -> 198.18.1.1:53,
    // 106-byte frames (64-byte payload), UDP checksum 0 (allowed for IPv4).
    // Both of its lcores on CPU 0: the engine polls on CPU 1.
    // Interactive, commands on stdin: `stop` ends the sending and prints the
    // totals; the port stays open until `quit`, so nothing is lost in the
    // memif ring (a disconnect drops whatever is still in it).
    let mut tp = testpmd(&prefix("tpsend"))
        .arg(format!("--vdev=net_memif0,role=client,socket={sock}"))
        .args(["--", "-i", "--forward-mode=txonly", "--txpkts=106"])
        .args([
            "--tx-ip=198.18.0.7,198.18.1.1",
            "--tx-udp=4000,53",
            "--total-num-mbufs=2048",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dpdk-testpmd (package dpdk-dev) runs");
    let mut cmd = tp.stdin.take().unwrap();
    // Write errors mean testpmd already exited: its output says why.
    let _ = cmd.write_all(b"start\n");
    std::thread::sleep(Duration::from_secs(2));
    let _ = cmd.write_all(b"stop\n");
    // The engine drains the ring and stops (idle) before testpmd disconnects:
    // net_memif (22.11) unmaps the rings on disconnect under a polling lcore.
    let j = finish_engine(engine, &json, &log);
    let _ = cmd.write_all(b"quit\n");
    drop(cmd);
    let out = tp.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let sent = testpmd_tx_packets(&text).unwrap_or_else(|| panic!("no testpmd totals: {text}"));
    assert!(sent > 1000, "testpmd sent only {sent}: {text}");
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(
        j["rx_packets"].as_u64().unwrap(),
        sent,
        "every frame testpmd reports sent was received once"
    );
    let s = socket(&j, "198.18.1.1:53");
    assert_eq!(
        s["offered"].as_u64().unwrap(),
        sent,
        "every one is a valid datagram for dns4"
    );
    let drops: u64 = s["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(s["delivered"].as_u64().unwrap() + drops, sent);
    assert_eq!(
        s["consumed"].as_u64().unwrap(),
        s["delivered"].as_u64().unwrap()
    );
}

/// `udpdemux gen` as the sender over memif. It lingers after sending with the
/// port open (net_memif 22.11 can crash a receiver whose peer disconnects
/// while it reads), so the engine drains the ring, goes idle and stops first;
/// then the sender is told to go. Counts must match the sender's manifest exactly.
#[test]
fn gen_over_memif_matches_its_transmit_manifest() {
    hugepages_ready(128).unwrap();
    let sock = memif_socket("genmemif");
    let sockets = pcap_sockets(|_| "");
    let cfg = engine_cfg("genmemif", &sock, &sockets);
    let (engine, json, log) = start_engine(&cfg);
    let spec = repo().join("conf/traffic/default.toml");
    let tx_json = cfg.with_file_name("tx.json");
    let eal_args = format!(
        "--lcores 0@0 -m 64 --no-pci --file-prefix={} --vdev=net_memif0,role=client,socket={sock}",
        prefix("gensend")
    );
    let mut sender = Command::new(bin())
        .args([
            "gen",
            "--config",
            spec.to_str().unwrap(),
            "--port",
            "net_memif0",
            "--count",
            "20000",
        ])
        .args([
            "--duration",
            "10",
            "--linger",
            "30",
            "--eal",
            &eal_args,
            "--stats-json",
            tx_json.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn udpdemux gen");
    // The engine stops once idle after the sender is done; only then does the sender go.
    let j = finish_engine_or_kill(engine, &json, &log, &mut sender);
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(sender.id() as i32, libc::SIGTERM) };
    let st = sender.wait().expect("gen exits");
    assert!(st.success(), "gen failed: {st}");
    let tx: Value = serde_json::from_str(&std::fs::read_to_string(&tx_json).unwrap()).unwrap();
    let sent = tx["sent"]["frames"]
        .as_u64()
        .or_else(|| tx["frames"].as_u64())
        .unwrap();
    let m = if tx["sent"].is_object() {
        &tx["sent"]
    } else {
        &tx
    };
    assert_eq!(sent, 20000, "gen sends its --count");
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(
        j["rx_packets"].as_u64().unwrap(),
        sent,
        "every frame gen sent was received"
    );
    for (dst, n) in m["per_dst"].as_object().unwrap() {
        assert_eq!(&socket(&j, dst)["offered"], n, "socket {dst}");
    }
    for (reason, n) in m["per_reason"].as_object().unwrap() {
        let counted: u64 = ["v4", "v6", "other"]
            .iter()
            .filter_map(|f| j["reasons"][f][reason].as_u64())
            .sum::<u64>()
            + reassembled_reason(&j, reason);
        assert_eq!(counted, n.as_u64().unwrap(), "reason {reason}");
    }
    let no_ports =
        j["udp"]["UdpNoPorts"].as_u64().unwrap() + j["udp"]["Udp6NoPorts"].as_u64().unwrap();
    assert_eq!(no_ports, m["no_socket"].as_u64().unwrap());
}

/// Like `finish_engine`, but a sender still running is killed if the engine fails.
fn finish_engine_or_kill(engine: Child, json: &Path, log: &Path, sender: &mut Child) -> Value {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        finish_engine(engine, json, log)
    }));
    match r {
        Ok(v) => v,
        Err(e) => {
            let _ = sender.kill();
            let _ = sender.wait();
            std::panic::resume_unwind(e)
        }
    }
}
