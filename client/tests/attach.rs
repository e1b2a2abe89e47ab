//! A secondary-process client against a real engine (issue 16, first
//! slice): attach/detach cycles leave the engine's port running and leak
//! nothing, bad prefixes get one clear line, and DPDK's own secondary,
//! `dpdk-proc-info`, exits 0 against an engine it does not crash on.
//!
//! The EAL initialises once per process, so every attach is a fresh run of
//! `examples/attach.rs`. The engine and the example are built by a nested
//! `cargo build` in the same target directory and profile (a no-op when
//! they are fresh). Engines here use hugepages: a client can only attach to
//! shared memory (`eal.no_huge = true` runs the EAL with `--no-shconf`).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `target/<profile>` of this test binary (it lives in `<profile>/deps`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The engine binary and the attach example, built once per test run.
fn binaries() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let prof = profile_dir();
        let target = prof.parent().unwrap().to_path_buf();
        let profile = prof.file_name().unwrap().to_string_lossy().into_owned();
        for args in [
            &["-p", "udpdemux", "--bin", "udpdemux"][..],
            &["-p", "udpdemux-client", "--example", "attach"][..],
        ] {
            let mut c = Command::new(env!("CARGO"));
            c.arg("build")
                .args(args)
                .arg("--target-dir")
                .arg(&target)
                .current_dir(repo());
            match profile.as_str() {
                "debug" => {}
                "release" => {
                    c.arg("--release");
                }
                other => {
                    c.args(["--profile", other]);
                }
            }
            let o = c.output().expect("spawn cargo build");
            assert!(
                o.status.success(),
                "cargo build {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        (prof.join("udpdemux"), prof.join("examples").join("attach"))
    })
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "t-client-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

fn hugepages_ready(min_free: u64) {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        mounts.contains("hugetlbfs") && free >= min_free,
        "these tests need hugepages (hugetlbfs mounted, >= {min_free} free 2 MB pages; {free} free): run scripts/setup.sh"
    );
}

struct Engine {
    child: Option<Child>,
    prefix: String,
    json: PathBuf,
    log: PathBuf,
}

impl Engine {
    /// An engine on `vdev` (port `port`), counting into two sockets; not
    /// waited for.
    fn spawn(tag: &str, vdev: &str, port: &str, no_huge: bool) -> Engine {
        let (bin, _) = binaries();
        let prefix = unique(tag);
        let dir = std::env::temp_dir().join(format!("udpdemux-client-{prefix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                r#"[eal]
lcores = "0,1"
no_huge = {no_huge}
memory_mb = 64
no_pci = true
file_prefix = "{prefix}"
vdevs = ["{vdev}"]

[engine]
duration_secs = 60

[mempool]
mbufs = 4095
cache = 128

[[port]]
name = "{port}"

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0"]

[[socket]]
name = "dns4"
local = "198.18.1.1:53"
rcvbuf = 4194304

[[socket]]
name = "dns6"
local = "[fd00::1]:53"
rcvbuf = 4194304
"#
            ),
        )
        .unwrap();
        let json = dir.join("stats.json");
        let log = dir.join("engine.log");
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(&cfg)
            .arg("--stats-json")
            .arg(&json)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn udpdemux");
        Engine {
            child: Some(child),
            prefix,
            json,
            log,
        }
    }

    /// [`Engine::spawn`], then wait until its port is up.
    fn start(tag: &str, vdev: &str, port: &str, no_huge: bool) -> Engine {
        let mut e = Engine::spawn(tag, vdev, port, no_huge);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&e.log).unwrap_or_default();
            if text.contains(&format!("port {port}")) {
                break;
            }
            let exited = e.child.as_mut().unwrap().try_wait().unwrap().is_some();
            assert!(
                !exited && !text.contains("udpdemux: error") && Instant::now() < deadline,
                "engine did not bring {port} up: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        e
    }

    /// SIGINT, then the final counters.
    fn stop(&mut self) -> Value {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("engine did not stop on SIGINT: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "engine exited {status}: {}",
            self.log_text()
        );
        serde_json::from_str(&std::fs::read_to_string(&self.json).expect("stats json"))
            .expect("json parses")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Never leave an engine polling behind a failed test.
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        remove_runtime_dir(&self.prefix);
        if let Some(d) = self.log.parent() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The EAL runtime directory a test's process left (its processes are gone).
fn remove_runtime_dir(prefix: &str) {
    let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(prefix));
}

const TELEMETRY_PY: &str = "/usr/bin/dpdk-telemetry.py";

/// Replies of DPDK's own telemetry client, one JSON value per command.
fn telemetry(prefix: &str, cmds: &[&str]) -> Vec<Value> {
    use std::io::Write;
    assert!(
        Path::new(TELEMETRY_PY).exists(),
        "{TELEMETRY_PY} missing: apt-get install dpdk (scripts/setup.sh)"
    );
    let mut child = Command::new("python3")
        .args([TELEMETRY_PY, "-f", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dpdk-telemetry.py");
    {
        let mut stdin = child.stdin.take().unwrap();
        for c in cmds {
            writeln!(stdin, "{c}").unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dpdk-telemetry.py did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let v: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("version").is_none())
        .collect();
    assert_eq!(v.len(), cmds.len(), "telemetry {cmds:?}: {v:?}");
    v
}

/// The port's state as the engine's telemetry shows it.
#[derive(Debug, PartialEq)]
struct PortState {
    link_up: bool,
    started: bool,
    rxq_started: bool,
}

fn port_state(prefix: &str) -> (PortState, u64, Value) {
    let r = telemetry(
        prefix,
        &[
            "/ethdev/link_status,0",
            "/ethdev/info,0",
            "/ethdev/stats,0",
            "/udpdemux/memory",
        ],
    );
    let st = PortState {
        link_up: r[0]["/ethdev/link_status"]["status"] == "UP",
        started: r[1]["/ethdev/info"]["dev_started"] == 1,
        rxq_started: r[1]["/ethdev/info"]["rxq_state"] == serde_json::json!([1]),
    };
    let ipackets = r[2]["/ethdev/stats"]["ipackets"]
        .as_u64()
        .expect("ipackets");
    (st, ipackets, r[3]["/udpdemux/memory"].clone())
}

const UP: PortState = PortState {
    link_up: true,
    started: true,
    rxq_started: true,
};

fn attach(prefix: &str) -> Output {
    let (_, example) = binaries();
    Command::new(example)
        .arg(prefix)
        .output()
        .expect("spawn the attach example")
}

/// Files in the engine's runtime directory (a secondary adds `_<pid>`
/// fbarray copies and an `mp_socket_<pid>_..` socket; detach removes them).
fn runtime_files(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new("/var/run/dpdk").join(prefix))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// 20 attach/detach cycles, each in a fresh process, during an endless
/// replay: every attach succeeds and sees the engine's vdev without
/// probing it; the port stays up and started with its queue started, and
/// its packet count grows across the cycles; the engine's memzones (by
/// name and length, rings included) and heap (count and bytes) and its
/// runtime files are what they were before the first attach; at exit the
/// books balance.
#[test]
fn attach_detach_cycles_leave_the_engine_running_and_leak_nothing() {
    hugepages_ready(64);
    let pcap = repo().join("conf/default.pcap");
    let vdev = format!("net_pcap0,rx_pcap={},infinite_rx=1", pcap.display());
    let mut engine = Engine::start("cycles", &vdev, "net_pcap0", false);
    let p = engine.prefix.clone();
    let (st0, rx0, mem0) = port_state(&p);
    assert_eq!(st0, UP, "before any attach");
    let files0 = runtime_files(&p);
    let mut last = rx0;
    let t0 = Instant::now();
    for i in 0..20 {
        let o = attach(&p);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "cycle {i}: {} {out} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains(&format!("attached {p} vdevs=[\"net_pcap0\"]"))
                && out.contains("cleanup=true engine_alive=true"),
            "cycle {i}: {out}"
        );
        if i % 5 == 4 {
            let (st, rx, _) = port_state(&p);
            assert_eq!(st, UP, "cycle {i}: the engine's port changed");
            assert!(rx > last, "cycle {i}: ipackets stalled at {rx}");
            last = rx;
        }
    }
    eprintln!("20 cycles in {:?}", t0.elapsed());
    let (st1, rx1, mem1) = port_state(&p);
    assert_eq!(st1, UP);
    assert!(rx1 > rx0);
    // Memzones by name and length (rings are the RG_ ones), the heap's
    // bytes and allocation count: all as before the first attach.
    assert!(mem0["memzones"].as_u64().unwrap() > 0, "{mem0}");
    assert_eq!(
        mem1, mem0,
        "the engine's memory before and after the cycles"
    );
    assert_eq!(runtime_files(&p), files0, "runtime files left behind");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert!(j["rx_packets"].as_u64().unwrap() >= rx1);
    // The engine is gone: the same prefix now gets a clear error.
    let o = attach(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: no engine is running on file prefix")
            && err.contains("start the engine")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// A prefix no engine ever used: one line naming the fix, exit 1, no crash.
#[test]
fn a_wrong_prefix_is_one_clear_line_and_exit_1() {
    let p = unique("nobody");
    let o = attach(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: no DPDK process has run with file prefix \"{p}\""
        )) && err.contains("eal.file_prefix")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// An engine without hugepages shares no memory: the client says how to
/// make it attachable instead of letting the EAL fail obscurely.
#[test]
fn an_engine_without_shared_memory_is_refused_with_the_fix() {
    let engine = Engine::start("nohuge", "net_null0", "net_null0", true);
    let o = attach(&engine.prefix);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("shares no memory") && err.contains("eal.no_huge = false"),
        "{err}"
    );
    drop(engine);
}

/// DPDK's own secondary against the engine exits 0 and leaves the port as
/// it was. On `net_null`: against `net_pcap`, DPDK 22.11's pcap PMD crashes
/// proc-info at its exit and marks the primary's port down (docs/design.md).
#[test]
fn dpdk_proc_info_stats_exits_0_against_a_running_engine() {
    hugepages_ready(64);
    assert!(
        Path::new("/usr/bin/dpdk-proc-info").exists(),
        "dpdk-proc-info missing: apt-get install dpdk (scripts/setup.sh)"
    );
    let mut engine = Engine::start("procinfo", "net_null0", "net_null0", false);
    let p = engine.prefix.clone();
    let (st0, rx0, _) = port_state(&p);
    assert_eq!(st0, UP);
    let o = Command::new("timeout")
        .args([
            "30",
            "dpdk-proc-info",
            "--file-prefix",
            &p,
            "--no-pci",
            "--",
            "--stats",
        ])
        .output()
        .expect("spawn dpdk-proc-info");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "dpdk-proc-info: {} {out} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("NIC statistics for port 0"), "{out}");
    let (st1, rx1, _) = port_state(&p);
    assert_eq!(st1, UP, "proc-info changed the engine's port");
    assert!(rx1 > rx0);
    // The client attaches beside it as well.
    let o = attach(&p);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
}

/// A client started together with the engine either attaches or gets one
/// clear line (exit 1), never a crash or a hang, and attaches once the
/// engine is up; the engine comes up untouched.
#[test]
fn a_client_racing_the_engine_start_errs_cleanly_or_attaches() {
    hugepages_ready(64);
    let mut engine = Engine::spawn("race", "net_null0", "net_null0", false);
    let p = engine.prefix.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = Vec::new();
    loop {
        let o = attach(&p);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        match o.status.code() {
            Some(0) => break,
            Some(1) if err.starts_with("error: ") && err.trim_end().lines().count() == 1 => {
                errors.push(err)
            }
            _ => panic!("attach during the engine's start: {} {err}", o.status),
        }
        assert!(
            Instant::now() < deadline,
            "never attached: {errors:?} {}",
            engine.log_text()
        );
        let exited = engine.child.as_mut().unwrap().try_wait().unwrap();
        assert!(exited.is_none(), "engine exited: {}", engine.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("errors before the engine was up: {errors:?}");
    let (st, _, _) = port_state(&p);
    assert_eq!(st, UP);
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
}

/// A DPDK primary that is not udpdemux (dpdk-testpmd) is named as such.
#[test]
fn a_primary_that_is_not_udpdemux_is_refused() {
    hugepages_ready(64);
    let p = unique("testpmd");
    let mut tp = Command::new("timeout")
        .args([
            "30",
            "dpdk-testpmd",
            "--lcores",
            "0@0,1@0",
            "-m",
            "64",
            "--no-pci",
        ])
        .arg(format!("--file-prefix={p}"))
        .args(["--vdev=net_null0", "--", "-i", "--total-num-mbufs=2048"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dpdk-testpmd (package dpdk-dev)");
    let config = Path::new("/var/run/dpdk").join(&p).join("config");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut o = attach(&p);
    while !String::from_utf8_lossy(&o.stderr).contains("not a udpdemux engine")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        o = attach(&p);
    }
    drop(tp.stdin.take());
    let _ = tp.kill();
    let _ = tp.wait();
    let had_config = config.exists();
    remove_runtime_dir(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not a udpdemux engine") && had_config,
        "{err}"
    );
}
