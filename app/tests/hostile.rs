//! Hostile operation (issue 14): reloads that must fail without touching the
//! live sockets, reloads that change a socket in place, a second instance
//! on the same file prefix, failures that must come at start rather than
//! at exit, SIGINT during setup and the first seconds, pool exhaustion
//! (reported and recovered) and 200 random reloads that must leak no
//! memzone. Every case is a subprocess (one EAL
//! per process) and every wait has a deadline: no case can hang.
mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The destinations of conf/traffic/flood.toml (victim first).
const SOCKETS: &[(&str, &str)] = &[
    ("victim", "198.18.1.9:9999"),
    ("dns4", "198.18.1.1:53"),
    ("echo4", "198.18.1.2:7"),
    ("dns6", "[fd00::1]:53"),
    ("app6", "[fd00::2]:5000"),
];

/// The flood capture, generated once per test process.
fn flood_pcap() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| gen_flood("flood", 4096))
}

/// `count` frames of conf/traffic/flood.toml in a fresh capture.
fn gen_flood(tag: &str, count: u32) -> PathBuf {
    let d = scratch(tag);
    let p = d.join("flood.pcap");
    let o = run(&[
        "gen",
        "--config",
        repo().join("conf/traffic/flood.toml").to_str().unwrap(),
        "--count",
        &count.to_string(),
        "--out",
        p.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "gen: {}", stderr(&o));
    p
}

/// One `[[socket]]` table; `extra` is added inside it.
fn socket(name: &str, local: &str, extra: &str) -> String {
    let rcvbuf = if name == "victim" { 65536 } else { 4 << 20 };
    socket_toml(name, local, &format!("rcvbuf = {rcvbuf}\n{extra}"))
}

fn all_sockets() -> String {
    SOCKETS.iter().map(|(n, a)| socket(n, a, "")).collect()
}

/// An infinite replay of the flood; returns (config path, everything
/// before the sockets, file prefix).
fn flood_cfg(tag: &str, extra_engine: &str) -> (PathBuf, String, String) {
    flood_cfg_from(tag, extra_engine, flood_pcap())
}

/// As `flood_cfg`, replaying `pcap`.
fn flood_cfg_from(tag: &str, extra_engine: &str, pcap: &Path) -> (PathBuf, String, String) {
    let d = scratch(tag);
    let vdev = format!("net_pcap0,rx_pcap={},infinite_rx=1", pcap.display());
    let eal_text = eal(tag, &[&vdev]);
    let prefix = prefix_of(&eal_text);
    let head = format!(
        "{eal_text}\n[engine]\nstats_interval_ms = 250\n{extra_engine}\n{}",
        rx_port("net_pcap0")
    );
    let cfg = write(&d, "c.toml", &format!("{head}{}", all_sockets()));
    (cfg, head, prefix)
}

/// A running engine whose stderr lines arrive on a channel.
struct Running {
    child: Child,
    lines: Receiver<String>,
    log: Vec<String>,
}

fn spawn(cfg: &Path, json: &Path, extra: &[&str]) -> Running {
    let mut child = run_command(cfg, json, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn udpdemux");
    let err: ChildStderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    Running {
        child,
        lines: rx,
        log: Vec::new(),
    }
}

impl Running {
    /// The next stderr line containing `needle`, within `secs`.
    fn wait_line(&mut self, needle: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.log.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?} within {secs} s; stderr so far:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// SIGINT, then the exit status, stdout and every stderr line, within 30 s.
    fn stop(self) -> (std::process::ExitStatus, String, Vec<String>) {
        self.signal(libc::SIGINT);
        finish(self)
    }
}

/// Wait (30 s at most) for the process to end; collect its output.
fn finish(mut r: Running) -> (std::process::ExitStatus, String, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = r.child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = r.child.kill();
            let _ = r.child.wait();
            panic!("no exit within 30 s; stderr:\n{}", r.log.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    if let Some(mut o) = r.child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    // The reader thread ends at EOF; take what it still has.
    while let Ok(l) = r.lines.recv_timeout(Duration::from_secs(2)) {
        r.log.push(l);
    }
    (status, out, r.log)
}

/// `/udpdemux/stats` and `/udpdemux/sockets` through DPDK's own client.
fn telemetry(prefix: &str) -> Option<(Value, Value)> {
    let r = telemetry_query(
        prefix,
        &["/udpdemux/stats", "/udpdemux/sockets"],
        Duration::from_secs(15),
    )?;
    if r.len() != 2 {
        return None;
    }
    let (st, so) = (
        r[0]["/udpdemux/stats"].clone(),
        r[1]["/udpdemux/sockets"].clone(),
    );
    (st.is_object() && so.is_object()).then_some((st, so))
}

/// `/udpdemux/memory`: memzones by name (for a leak's failure message).
fn telemetry_memory(prefix: &str) -> Value {
    telemetry_query(prefix, &["/udpdemux/memory"], Duration::from_secs(15))
        .and_then(|r| {
            r.into_iter()
                .map(|v| v["/udpdemux/memory"].clone())
                .find(|v| v.is_object())
        })
        .unwrap_or(Value::Null)
}

/// Poll telemetry (20 s at most) until `done` holds.
fn wait_telemetry(
    prefix: &str,
    what: &str,
    done: impl Fn(&Value, &Value) -> bool,
) -> (Value, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        if let Some((st, so)) = telemetry(prefix) {
            if done(&st, &so) {
                return (st, so);
            }
            last = Some((st, so));
        }
        assert!(
            Instant::now() < deadline,
            "telemetry never showed {what}: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn no_ports(st: &Value) -> u64 {
    u(&st["UdpNoPorts"]) + u(&st["Udp6NoPorts"])
}

fn exit_json(json: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn live<'a>(j: &'a Value, name: &str) -> &'a Value {
    let hits: Vec<&Value> = j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name && s["removed"] == false)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "exactly one live socket {name}: {}",
        j["sockets"]
    );
    hits[0]
}

fn removed_named(j: &Value, name: &str) -> usize {
    j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name && s["removed"] == true)
        .count()
}

/// The socket ids and delivered counts, once every socket has delivered.
fn baseline(prefix: &str) -> (Value, Value) {
    wait_telemetry(prefix, "every socket delivering", |_, so| {
        SOCKETS
            .iter()
            .all(|(n, _)| so[*n]["delivered"].as_u64().is_some_and(|d| d > 0))
    })
}

/// (a) and (b): reloads that must be refused leave the live sockets as they
/// were: the socket keeps its id and keeps receiving, no datagram turns into
/// NoPorts, nothing is dropped as `closed`, and one error line names it.
#[test]
fn failed_reloads_keep_the_live_sockets_and_their_books() {
    let (cfg, head, prefix) = flood_cfg("hostile-fail", "");
    let json = cfg.with_extension("json");
    let mut r = spawn(&cfg, &json, &["--duration", "60"]);
    r.wait_line("socket(s), strategy", 20);
    let (st0, so0) = baseline(&prefix);
    assert_eq!(
        no_ports(&st0),
        0,
        "the flood only targets bound sockets: {st0}"
    );

    // (a) dns4 becomes a pcap socket whose file cannot be created.
    let text: String = SOCKETS
        .iter()
        .map(|(n, a)| {
            let extra = if *n == "dns4" {
                "handler = \"pcap\"\npcap_file = \"/proc/nope/x.pcap\"\n"
            } else {
                ""
            };
            socket(n, a, extra)
        })
        .collect();
    std::fs::write(&cfg, format!("{head}{text}")).unwrap();
    r.signal(libc::SIGHUP);
    let line = r.wait_line("SIGHUP:", 20);
    assert!(
        line.contains("reload rejected, sockets unchanged"),
        "{line}"
    );
    assert!(
        line.contains("socket \"dns4\"") && line.contains("/proc/nope/x.pcap"),
        "{line}"
    );
    let d0 = u(&so0["dns4"]["delivered"]);
    let (st1, so1) = wait_telemetry(&prefix, "dns4 still delivering after (a)", |_, so| {
        so["dns4"]["delivered"]
            .as_u64()
            .is_some_and(|d| d > d0 + 1000)
    });
    assert_eq!(
        so1["dns4"]["id"], so0["dns4"]["id"],
        "dns4 is the same socket"
    );
    assert_eq!(
        no_ports(&st1),
        0,
        "dns4's traffic never became NoPorts: {st1}"
    );

    // (b) app6 moves onto dns6's address: a collision with a socket that stays.
    let text: String = SOCKETS
        .iter()
        .map(|(n, a)| socket(n, if *n == "app6" { "[fd00::1]:53" } else { a }, ""))
        .collect();
    std::fs::write(&cfg, format!("{head}{text}")).unwrap();
    r.signal(libc::SIGHUP);
    let line = r.wait_line("SIGHUP:", 20);
    assert!(
        line.contains("reload rejected, sockets unchanged"),
        "{line}"
    );
    assert!(
        line.contains("socket \"app6\"") && line.contains("socket \"dns6\""),
        "names both: {line}"
    );
    let a1 = u(&so1["app6"]["delivered"]);
    let (st2, so2) = wait_telemetry(&prefix, "app6 still delivering after (b)", |_, so| {
        so["app6"]["delivered"]
            .as_u64()
            .is_some_and(|d| d > a1 + 1000)
    });
    for (n, _) in SOCKETS {
        assert_eq!(so2[*n]["id"], so0[*n]["id"], "{n} is the same socket");
        assert_eq!(so2[*n]["removed"], 0, "{n}");
    }
    assert_eq!(no_ports(&st2), 0, "{st2}");

    // All or nothing: a valid in-place change (dns4's rcvbuf) in the same
    // reload as two new sockets that collide with each other is not applied.
    let mut text: String = SOCKETS
        .iter()
        .map(|(n, a)| socket(n, a, ""))
        .collect::<String>()
        .replacen("rcvbuf = 4194304", "rcvbuf = 1048576", 1);
    text.push_str(&socket("n1", "198.18.1.50:1", ""));
    text.push_str(&socket("n2", "198.18.1.50:1", ""));
    text.push_str(&socket(
        "n3",
        "198.18.1.51:1",
        "handler = \"pcap\"\npcap_file = \"/proc/nope/y.pcap\"\n",
    ));
    std::fs::write(&cfg, format!("{head}{text}")).unwrap();
    r.signal(libc::SIGHUP);
    let line = r.wait_line("SIGHUP:", 20);
    assert!(
        line.contains("reload rejected, sockets unchanged"),
        "{line}"
    );
    assert!(
        line.contains("socket \"n2\"")
            && line.contains("collides with socket \"n1\"")
            && line.contains("socket \"n3\"")
            && line.contains("/proc/nope/y.pcap"),
        "{line}"
    );
    let (_, so3) = wait_telemetry(&prefix, "the socket set after the third reload", |_, _| {
        true
    });
    assert_eq!(
        so3["dns4"]["rcvbuf"], 4_194_304,
        "the in-place change was not applied either"
    );
    assert!(
        so3.get("n1").is_none() && so3.get("n2").is_none() && so3.get("n3").is_none(),
        "{so3}"
    );

    let (status, out, log) = r.stop();
    let log = log.join("\n");
    assert!(status.success(), "exit: {status}\n{log}\n{out}");
    let rejected = log
        .lines()
        .filter(|l| l.contains("reload rejected"))
        .count();
    assert_eq!(rejected, 3, "one error line per failed reload:\n{log}");
    assert!(!log.contains(") removed"), "no socket was removed:\n{log}");
    let j = exit_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(
        u(&j["udp"]["UdpNoPorts"]) + u(&j["udp"]["Udp6NoPorts"]),
        0,
        "{}",
        j["udp"]
    );
    for (n, _) in SOCKETS {
        let s = live(&j, n);
        assert_eq!(removed_named(&j, n), 0, "{n}");
        assert_eq!(s["id"], so0[*n]["id"], "{n}");
        assert_eq!(
            s["drops"]["closed"], 0,
            "{n}: nothing dropped as closed: {s}"
        );
        assert_eq!(s["freed_at_close"], 0, "{n}: {s}");
    }
    assert!(!Path::new("/proc/nope/x.pcap").exists());
}

/// (c) changes applied in place: dns4's rcvbuf, dns6's consume_rate_pps and
/// app6's pcap file: same ids, new settings in effect, nothing dropped as
/// `closed`; an `[engine]` edit in the same reload is reported as not
/// applied; (d) a valid remove + add on the same address, in the same
/// reload, is one switch: no datagram to it becomes NoPorts.
#[test]
fn rcvbuf_changes_in_place_and_a_valid_add_and_remove_still_work() {
    let (cfg, head, prefix) = flood_cfg("hostile-ok", "");
    let dir = cfg.parent().unwrap().to_path_buf();
    let (pa, pb) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let sockets = |f: &dyn Fn(&str) -> String| -> String {
        SOCKETS.iter().map(|(n, a)| socket(n, a, &f(n))).collect()
    };
    let pcap = |p: &Path| format!("handler = \"pcap\"\npcap_file = \"{}\"\n", p.display());
    std::fs::write(
        &cfg,
        format!(
            "{head}{}",
            sockets(&|n| if n == "app6" {
                pcap(&pa)
            } else {
                String::new()
            })
        ),
    )
    .unwrap();
    let json = cfg.with_extension("json");
    let mut r = spawn(&cfg, &json, &["--duration", "60"]);
    r.wait_line("socket(s), strategy", 20);
    let (_, so0) = baseline(&prefix);

    // (c) dns4: 4 MiB -> 1 MiB; dns6: at most 1000 datagrams/s; app6: b.pcap.
    let text = sockets(&|n| match n {
        "app6" => pcap(&pb),
        "dns6" => "consume_rate_pps = 1000\n".into(),
        _ => String::new(),
    })
    .replacen("rcvbuf = 4194304", "rcvbuf = 1048576", 1);
    assert!(
        text.contains("name = \"dns4\"\nlocal = \"198.18.1.1:53\"\nrcvbuf = 1048576"),
        "{text}"
    );
    let head2 = head.replace("stats_interval_ms = 250", "stats_interval_ms = 300");
    std::fs::write(&cfg, format!("{head2}{text}")).unwrap();
    r.signal(libc::SIGHUP);
    let warn = r.wait_line("SIGHUP:", 20);
    assert!(
        warn.contains("edits to [engine] cannot be applied"),
        "{warn}"
    );
    let line = r.wait_line("SIGHUP:", 20);
    assert!(
        line.contains("SIGHUP: 0 socket(s) removed, 0 added, 0 replaced, 3 changed in place"),
        "{line}"
    );
    let d0 = u(&so0["dns4"]["delivered"]);
    let (_, so1) = wait_telemetry(&prefix, "dns4 with its new rcvbuf, delivering", |_, so| {
        so["dns4"]["rcvbuf"] == 1_048_576
            && so["dns4"]["delivered"]
                .as_u64()
                .is_some_and(|d| d > d0 + 1000)
    });
    for n in ["dns4", "dns6", "app6"] {
        assert_eq!(
            so1[n]["id"], so0[n]["id"],
            "{n}: changed in place, not replaced"
        );
        assert_eq!(so1[n]["drop_closed"], 0, "{n}: {}", so1[n]);
    }
    // dns6's consumer now takes at most 1000/s (plus one burst of credit).
    let t = Instant::now();
    let c0 = u(&so1["dns6"]["consumed"]);
    std::thread::sleep(Duration::from_millis(1000));
    let (_, so2) = wait_telemetry(&prefix, "dns6", |_, _| true);
    let c1 = u(&so2["dns6"]["consumed"]);
    let bound = (1000.0 * (t.elapsed().as_secs_f64() + 0.3)) as u64 + 64;
    assert!(
        c1 - c0 <= bound,
        "dns6 consumed {} in {:?}: over its rate",
        c1 - c0,
        t.elapsed()
    );
    // app6 writes to b.pcap now.
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while size(&pb) <= 24 {
        assert!(
            Instant::now() < deadline,
            "app6 never wrote to {}",
            pb.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let a_size = size(&pa);
    assert!(a_size > 24, "a.pcap had records before the switch");

    // (d) echo4 goes, echo4b takes its address, in one reload.
    let text = text.replace("name = \"echo4\"", "name = \"echo4b\"");
    std::fs::write(&cfg, format!("{head2}{text}")).unwrap();
    r.signal(libc::SIGHUP);
    let line = r.wait_line("SIGHUP: ", 20);
    let line = if line.contains("edits to") {
        r.wait_line("SIGHUP: ", 20)
    } else {
        line
    };
    assert!(
        line.contains("SIGHUP: 1 socket(s) removed, 1 added, 0 replaced, 0 changed in place"),
        "{line}"
    );
    wait_telemetry(&prefix, "echo4b delivering", |_, so| {
        so["echo4b"]["delivered"].as_u64().is_some_and(|d| d > 1000)
    });

    let (status, out, log) = r.stop();
    let log = log.join("\n");
    assert!(status.success(), "exit: {status}\n{log}\n{out}");
    let j = exit_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(
        u(&j["udp"]["UdpNoPorts"]) + u(&j["udp"]["Udp6NoPorts"]),
        0,
        "one switch: {}",
        j["udp"]
    );
    for n in ["dns4", "dns6", "app6"] {
        let s = live(&j, n);
        assert_eq!(s["id"], so0[n]["id"], "{n}");
        assert_eq!(s["drops"]["closed"], 0, "{n}: {s}");
        assert_eq!(removed_named(&j, n), 0, "{n}");
    }
    assert_eq!(live(&j, "dns4")["rcvbuf"], 1_048_576);
    assert_eq!(
        size(&pa),
        a_size,
        "the old file is closed, not written any more"
    );
    assert!(u(&live(&j, "app6")["written"]) > 0);
    assert_eq!(removed_named(&j, "echo4"), 1, "{}", j["sockets"]);
    assert!(u(&live(&j, "echo4b")["delivered"]) > 0);
}

/// A second `run` on the same file prefix is refused, naming the first pid.
#[test]
fn a_second_instance_on_the_same_prefix_is_refused_with_the_first_pid() {
    let (cfg, _, _) = flood_cfg("hostile-twice", "");
    let json = cfg.with_extension("json");
    let mut first = spawn(&cfg, &json, &["--duration", "60"]);
    first.wait_line("socket(s), strategy", 20);
    let json2 = cfg.with_extension("second.json");
    let o = run_command(&cfg, &json2, &["--duration", "5"])
        .output()
        .expect("spawn the second");
    let err = error_line(&o);
    assert!(
        !o.status.success(),
        "the second instance must not start: {}",
        stderr(&o)
    );
    assert!(
        err.contains(&format!("pid {}", first.child.id())),
        "names the first pid: {err}"
    );
    assert!(err.contains("file_prefix"), "{err}");
    assert!(!err.contains('\n'));
    let (status, _, log) = first.stop();
    assert!(
        status.success(),
        "the first one is unharmed: {}",
        log.join("\n")
    );
}

/// `--stats-json` to a path that cannot be written fails before the EAL
/// starts, not after the run.
#[test]
fn an_unwritable_stats_json_fails_at_start() {
    let (cfg, _, _) = flood_cfg("hostile-json", "");
    for bad in ["/proc/nope/stats.json", "/tmp"] {
        let t = Instant::now();
        let o = run(&[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--duration",
            "30",
            "--stats-json",
            bad,
        ]);
        let err = error_line(&o);
        assert!(!o.status.success(), "{bad}");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{bad}: failed only after {:?}",
            t.elapsed()
        );
        assert!(err.contains("--stats-json") && err.contains(bad), "{err}");
        assert!(
            !stderr(&o).contains("EAL"),
            "before the EAL starts: {}",
            stderr(&o)
        );
    }
}

/// `check` leaves no runtime directory of its own behind.
#[test]
fn check_leaves_no_runtime_directory_behind() {
    let (cfg, _, _) = flood_cfg("hostile-check", "");
    let child = Command::new(bin())
        .args(["check", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let dir = Path::new("/var/run/dpdk").join(format!("udpdemux-check-{pid}"));
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// The line that ends one reload (skipping the `[engine]`-edits warning).
fn reload_result(r: &mut Running) -> String {
    loop {
        let l = r.wait_line("SIGHUP: ", 20);
        if !l.contains("SIGHUP: edits to") {
            return l;
        }
    }
}

/// The sockets of the starvation case: dns4 holds up to `dns4_rcvbuf`
/// and is consumed at `dns4_rate` datagrams/s; the others are small and
/// consumed at full speed (victim 64 KiB, the rest 128 KiB: ~50 mbufs each).
fn starve_sockets(dns4_rcvbuf: u64, dns4_rate: u64) -> String {
    SOCKETS
        .iter()
        .map(|(n, a)| {
            let (rcvbuf, extra) = match *n {
                "victim" => (65536, String::new()),
                "dns4" => (dns4_rcvbuf, format!("consume_rate_pps = {dns4_rate}\n")),
                _ => (131072, String::new()),
            };
            format!("\n[[socket]]\nname = \"{n}\"\nlocal = \"{a}\"\nrcvbuf = {rcvbuf}\n{extra}")
        })
        .collect()
}

/// Pool exhaustion (defect 6): a 1023-mbuf pool, dns4 with an 8 MiB rcvbuf
/// read at 10 datagrams/s soaks up every mbuf and RX stalls. The warning
/// line (naming dns4 as the biggest holder) comes within one stats
/// interval of the first low sample, telemetry shows the low-water
/// counters moving, and after a SIGHUP lets dns4's consumer run free the
/// pool recovers: no more low samples or warnings. The books balance.
#[test]
fn pool_exhaustion_is_reported_within_one_interval_and_recovers() {
    let t0 = Instant::now();
    // net_pcap's infinite replay keeps a copy of every frame of the capture
    // in mbufs of the RX pool: 256 frames leave 767 of the 1023 to starve.
    let pcap = gen_flood("starve-pcap", 256);
    let (cfg, head, prefix) =
        flood_cfg_from("hostile-starve", "\n[mempool]\nmbufs = 1023\n", &pcap);
    std::fs::write(&cfg, format!("{head}{}", starve_sockets(8 << 20, 10))).unwrap();
    let json = cfg.with_extension("json");
    let mut r = spawn(&cfg, &json, &["--duration", "60"]);
    r.wait_line("socket(s), strategy", 20);
    let up = Instant::now();
    let warn = r.wait_line("RX pool starving", 10);
    eprintln!("first warning {:?} after start: {warn}", up.elapsed());
    assert!(
        warn.contains("held by socket \"dns4\" rmem"),
        "dns4 holds the most: {warn}"
    );
    // "below it for N ms since the last stats line": the first low sample
    // was at most one interval (250 ms, plus sampling slack) before it.
    let ms: u64 = warn
        .split("below it for ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {warn}"));
    assert!(ms <= 350, "reported within one interval: {warn}");
    // No interval went by starving without its warning: every stats line
    // before the first warning had the pool at or above its mark, and the
    // warning is followed by its own interval's stats line, pool below it.
    let pool = |l: &str| -> Option<(u64, u64)> {
        let t = l.split("| pool free ").nth(1)?;
        let (free, rest) = t.split_once('/')?;
        let low = rest.split("low-water ").nth(1)?.trim();
        Some((free.parse().ok()?, low.parse().ok()?))
    };
    for l in r.log.iter().filter(|l| l.contains("| pool free ")) {
        let (f, low) = pool(l).unwrap_or_else(|| panic!("stats line: {l}"));
        assert!(f >= low, "a starving interval without a warning: {l}");
    }
    let next = r.wait_line("| pool free ", 5);
    let (f, low) = pool(&next).unwrap_or_else(|| panic!("stats line: {next}"));
    assert!(f < low, "the warning's interval: {next}");
    let (st, so) = wait_telemetry(&prefix, "the pool below its low-water mark", |st, _| {
        u(&st["pool_low_ms"]) > 0 && u(&st["pool_free"]) < u(&st["pool_low_water"])
    });
    assert!(u(&st["pool_warnings"]) >= 1, "{st}");
    assert!(u(&st["pool_low_polls"]) > 0, "RX kept polling: {st}");
    assert!(u(&st["pool_low_episodes"]) >= 1, "{st}");
    assert_eq!(u(&st["pool_size"]), 1023, "{st}");
    // More than four times any other socket's rcvbuf: ~200+ of the ~767 mbufs
    // left (the rest sit in the main lcore's mempool cache, out of RX's reach).
    assert!(
        u(&so["dns4"]["rmem"]) > 4 * 131072,
        "dns4 holds the pool: {}",
        so["dns4"]
    );

    // The consumer resumes: rate unlimited, rcvbuf 128 KiB, changed in place.
    std::fs::write(&cfg, format!("{head}{}", starve_sockets(131072, 0))).unwrap();
    r.signal(libc::SIGHUP);
    let line = reload_result(&mut r);
    assert!(line.contains("1 changed in place"), "{line}");
    wait_telemetry(
        &prefix,
        "the pool above its low-water mark again",
        |st, so| {
            u(&st["pool_free"]) >= u(&st["pool_low_water"]) && u(&so["dns4"]["rmem"]) <= 131072
        },
    );
    // Let the interval that saw the last low sample warn, then nothing more.
    std::thread::sleep(Duration::from_millis(600));
    let (st1, _) = wait_telemetry(&prefix, "counters", |_, _| true);
    std::thread::sleep(Duration::from_millis(1000));
    let (st2, so2) = wait_telemetry(&prefix, "counters", |_, _| true);
    for k in ["pool_low_samples", "pool_warnings", "pool_low_episodes"] {
        assert_eq!(
            st1[k], st2[k],
            "{k}: starving again after recovery: {st1} -> {st2}"
        );
    }
    assert!(u(&st2["pool_free"]) >= u(&st2["pool_low_water"]), "{st2}");
    assert!(
        u(&so2["dns4"]["consumed"]) > u(&so["dns4"]["consumed"]) + 1000,
        "dns4 consumes again"
    );

    let (status, out, log) = r.stop();
    let log = log.join("\n");
    assert!(status.success(), "exit: {status}\n{log}\n{out}");
    assert!(out.contains("rx pool: free"), "{out}");
    let j = exit_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let p = &j["rx_pool"];
    assert!(
        u(&p["low_ms"]) > 0 && u(&p["warnings"]) >= 1 && u(&p["episodes"]) >= 1,
        "{p}"
    );
    assert_eq!(u(&p["warnings"]), u(&st2["pool_warnings"]), "{p}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("RX pool starving"))
            .count() as u64,
        u(&p["warnings"]),
        "one line per counted warning"
    );
    eprintln!("pool exhaustion case: {:?}", t0.elapsed());
}

/// 200 SIGHUPs during a flood, each a random edit of the socket set: valid
/// ones (rcvbuf, consume rate, ring size, add, remove, rename, an
/// `[engine]` edit) must apply, invalid ones (a collision, a duplicate
/// name, port 0, a tiny rcvbuf or ring, an uncreatable pcap file, a TOML
/// syntax error) must be refused. Afterwards the original set is put back:
/// the memzone count and the DPDK heap return to their baseline (no ring
/// leaked by a replaced, removed or rejected socket), and the books balance.
#[test]
fn two_hundred_random_reloads_leak_no_memzone_and_balance() {
    let t0 = Instant::now();
    let (cfg, head, prefix) = flood_cfg("hostile-churn", "");
    let json = cfg.with_extension("json");
    let mut r = spawn(&cfg, &json, &["--duration", "120"]);
    r.wait_line("socket(s), strategy", 20);
    let (st0, _) = baseline(&prefix);
    let (mz0, heap0) = (u(&st0["memzones"]), u(&st0["heap_alloc_bytes"]));
    let zones0 = telemetry_memory(&prefix);
    assert_eq!(u(&zones0["memzones"]), mz0, "{zones0}");
    assert!(
        mz0 > SOCKETS.len() as u64,
        "a ring per socket at least: {st0}"
    );

    #[derive(Clone)]
    struct S {
        name: String,
        local: String,
        rcvbuf: u64,
        rate: u64,
        ring: u32,
    }
    let render = |set: &[S]| -> String {
        set.iter()
            .map(|s| {
                format!(
                    "\n[[socket]]\nname = \"{}\"\nlocal = \"{}\"\nrcvbuf = {}\nconsume_rate_pps = {}\nring_size = {}\n",
                    s.name, s.local, s.rcvbuf, s.rate, s.ring
                )
            })
            .collect()
    };
    let original: Vec<S> = SOCKETS
        .iter()
        .map(|(n, a)| S {
            name: n.to_string(),
            local: a.to_string(),
            rcvbuf: if *n == "victim" { 65536 } else { 4 << 20 },
            rate: 0,
            ring: 4096,
        })
        .collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ std::process::id() as u64;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut set = original.clone();
    let mut next_extra = 0u32;
    let (mut applied, mut refused) = (0, 0);
    for i in 0..200 {
        let mut new = set.clone();
        let mut engine_head = head.clone();
        let mut text: Option<String> = None;
        let valid = rnd(10) < 6;
        if valid {
            let k = rnd(new.len() as u64) as usize;
            match rnd(7) {
                0 => new[k].rcvbuf = [65536, 1 << 20, 4 << 20][rnd(3) as usize],
                1 => new[k].rate = [0, 1000, 100_000][rnd(3) as usize],
                2 => new[k].ring = [1024, 4096, 8192][rnd(3) as usize],
                3 if new.len() < 9 => {
                    next_extra += 1;
                    new.push(S {
                        name: format!("x{next_extra}"),
                        local: format!("198.18.2.{}:1000", next_extra % 250 + 1),
                        rcvbuf: 1 << 20,
                        rate: 0,
                        ring: 1024,
                    });
                }
                4 if new.len() > 2 => {
                    new.remove(k);
                }
                5 => {
                    new[k].name = match new[k].name.strip_suffix("_r") {
                        Some(n) => n.to_string(),
                        None => format!("{}_r", new[k].name),
                    }
                }
                _ => {
                    engine_head = head.replace("stats_interval_ms = 250", "stats_interval_ms = 251")
                }
            }
        } else {
            let k = rnd(new.len() as u64) as usize;
            match rnd(7) {
                0 => {
                    let mut c = new[k].clone();
                    c.name = "clash".into();
                    new.push(c);
                }
                1 => {
                    let c = new[k].clone();
                    new.push(c);
                }
                2 => {
                    new[k].local = new[k]
                        .local
                        .rsplit_once(':')
                        .map(|(h, _)| format!("{h}:0"))
                        .unwrap()
                }
                3 => new[k].rcvbuf = 100,
                4 => new[k].ring = 1,
                5 => {
                    text = Some(format!(
                        "{}\nhandler = \"pcap\"\npcap_file = \"/proc/nope/{i}.pcap\"\n",
                        render(&new)
                    ))
                }
                _ => text = Some(format!("{}\n[[socket]\nname = ", render(&new))),
            }
        }
        let body = text.unwrap_or_else(|| render(&new));
        std::fs::write(&cfg, format!("{engine_head}{body}")).unwrap();
        r.signal(libc::SIGHUP);
        let line = reload_result(&mut r);
        if valid {
            assert!(
                line.contains("socket(s) removed"),
                "edit {i} must apply: {line}"
            );
            set = new;
            applied += 1;
        } else {
            assert!(
                line.contains("sockets unchanged"),
                "edit {i} must be refused: {line}"
            );
            refused += 1;
        }
    }
    assert!(
        applied > 50 && refused > 40,
        "{applied} applied, {refused} refused"
    );

    // The original set again: every ring a replaced, removed or refused
    // socket had is gone once the flow table has let go of them.
    std::fs::write(&cfg, format!("{head}{}", render(&original))).unwrap();
    r.signal(libc::SIGHUP);
    let line = reload_result(&mut r);
    assert!(line.contains("socket(s) removed"), "{line}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (st1, so1) = loop {
        let (st, so) = wait_telemetry(&prefix, "counters", |_, _| true);
        // The heap's byte count moves by a few alignment pads when the same
        // rings land at other addresses (seen: +128 B with the same element
        // count); a leaked ring is 33 KB, so a 1 KiB band still catches it.
        if u(&st["memzones"]) == mz0 && u(&st["heap_alloc_bytes"]).abs_diff(heap0) <= 1024 {
            break (st, so);
        }
        assert!(
            Instant::now() < deadline,
            "memzones {} heap {} B, baseline {mz0} and {heap0} B: before {zones0}, now {}",
            st["memzones"],
            st["heap_alloc_bytes"],
            telemetry_memory(&prefix)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(u(&st1["sockets"]), SOCKETS.len() as u64, "{so1}");

    let (status, out, log) = r.stop();
    let log = log.join("\n");
    assert!(status.success(), "exit: {status}\n{log}\n{out}");
    let j = exit_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    for s in j["sockets"].as_array().unwrap() {
        assert_eq!(s["rmem"], 0, "{s}");
    }
    assert_eq!(u(&j["memzones"]), mz0, "at exit, before teardown");
    eprintln!(
        "200 reloads ({applied} applied, {refused} refused): {:?}; memzones {mz0}, heap {heap0} B",
        t0.elapsed()
    );
}

/// Whether `pid` has a handler for SIGINT installed (SigCgt bit 2).
fn catches_sigint(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0)
}

/// SIGINT at 20 random moments of the first two seconds of the EAL (EAL,
/// pool and port setup, the first bursts, the flood), counted from the
/// EAL's first log line, one in each 100 ms slot, and once as soon as the
/// process catches SIGINT (before the EAL starts): always a clean exit 0
/// with a summary and balanced books.
#[test]
fn sigint_during_setup_exits_cleanly_with_a_summary() {
    let (cfg, _, _) = flood_cfg("hostile-int", "");
    // Deterministic pseudo-random moments in 0..1000 ms, plus fixed early ones.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ std::process::id() as u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 1000
    };
    let t0 = Instant::now();
    let mut moments: Vec<Option<u64>> = vec![None];
    moments.extend((0..20).map(|slot| Some(slot * 100 + rnd() % 100)));
    for m in moments {
        let json = cfg.with_extension(format!("{m:?}.json"));
        let mut r = spawn(&cfg, &json, &["--duration", "30"]);
        match m {
            None => {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !catches_sigint(r.child.id()) {
                    assert!(Instant::now() < deadline, "SIGINT handler never installed");
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            Some(ms) => {
                r.wait_line("EAL: ", 20);
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        let (status, out, log) = r.stop();
        let log = log.join("\n");
        assert!(
            status.success(),
            "SIGINT at {m:?} ms: {status}\n{log}\n{out}"
        );
        assert!(
            out.contains("books: balanced"),
            "summary at {m:?} ms:\n{out}\n{log}"
        );
        let j = exit_json(&json);
        assert_eq!(j["books_balanced"], true, "{m:?} ms: {}", j["problems"]);
    }
    eprintln!("21 SIGINTs: {:?}", t0.elapsed());
}
