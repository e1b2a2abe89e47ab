//! What the client tests share: building the engine and the examples,
//! spawning an engine on a unique file prefix with hugepages, stopping it
//! for its exit JSON, DPDK's telemetry client, and the example runners.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

mod finite;
// Not every test binary that includes this module replays the finite pcap.
#[allow(unused_imports)]
pub use finite::*;

/// The workspace's root: the nearest directory above the crate with a
/// Cargo.lock (this module also serves client/capi's tests, one level deeper).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .expect("the workspace root (a Cargo.lock above the crate)")
        .to_path_buf()
}

/// `target/<profile>` of this test binary (it lives in `<profile>/deps`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The engine binary and the attach example, built once per test run.
pub fn binaries() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let prof = profile_dir();
        let target = prof.parent().unwrap().to_path_buf();
        let profile = prof.file_name().unwrap().to_string_lossy().into_owned();
        for args in [
            &["-p", "udpdemux", "--bin", "udpdemux"][..],
            &["-p", "udpdemux-client", "--example", "attach"][..],
            &["-p", "udpdemux-client", "--example", "recv"][..],
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

pub static SEQ: AtomicU32 = AtomicU32::new(0);

pub fn unique(tag: &str) -> String {
    format!(
        "t-client-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn hugepages_ready(min_free: u64) {
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

/// The engine config after `[eal]` the attach tests use: an endless
/// replay counted into two sockets.
pub const DEFAULT_BODY: &str = r#"[engine]
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
"#;

pub struct Engine {
    pub child: Option<Child>,
    pub prefix: String,
    pub json: PathBuf,
    pub log: PathBuf,
}

impl Engine {
    /// An engine on `vdev` (port `port`), counting into two sockets; not
    /// waited for.
    pub fn spawn(tag: &str, vdev: &str, port: &str, no_huge: bool) -> Engine {
        Engine::spawn_with(tag, vdev, port, no_huge, DEFAULT_BODY)
    }

    /// As [`Engine::spawn`], with `body` (the config after `[eal]`, where
    /// `{port}` stands for the port's name) instead of [`DEFAULT_BODY`].
    pub fn spawn_with(tag: &str, vdev: &str, port: &str, no_huge: bool, body: &str) -> Engine {
        Engine::spawn_lcores(tag, vdev, port, no_huge, "0,1", body)
    }

    /// As [`Engine::spawn_with`], with `eal.lcores = lcores`.
    pub fn spawn_lcores(
        tag: &str,
        vdev: &str,
        port: &str,
        no_huge: bool,
        lcores: &str,
        body: &str,
    ) -> Engine {
        let (bin, _) = binaries();
        let prefix = unique(tag);
        let dir = std::env::temp_dir().join(format!("udpdemux-client-{prefix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                r#"[eal]
lcores = "{lcores}"
no_huge = {no_huge}
memory_mb = 64
no_pci = true
file_prefix = "{prefix}"
vdevs = ["{vdev}"]

{}"#,
                body.replace("{port}", port)
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
    pub fn start(tag: &str, vdev: &str, port: &str, no_huge: bool) -> Engine {
        Engine::start_with(tag, vdev, port, no_huge, DEFAULT_BODY)
    }

    /// [`Engine::spawn_with`], then wait until its port is up.
    pub fn start_with(tag: &str, vdev: &str, port: &str, no_huge: bool, body: &str) -> Engine {
        Engine::start_lcores(tag, vdev, port, no_huge, "0,1", body)
    }

    /// [`Engine::spawn_lcores`], then wait until its port is up.
    pub fn start_lcores(
        tag: &str,
        vdev: &str,
        port: &str,
        no_huge: bool,
        lcores: &str,
        body: &str,
    ) -> Engine {
        let mut e = Engine::spawn_lcores(tag, vdev, port, no_huge, lcores, body);
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
    pub fn stop(&mut self) -> Value {
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

    pub fn log_text(&self) -> String {
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
pub fn remove_runtime_dir(prefix: &str) {
    let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(prefix));
}

pub const TELEMETRY_PY: &str = "/usr/bin/dpdk-telemetry.py";

/// Replies of DPDK's own telemetry client, one JSON value per command.
pub fn telemetry(prefix: &str, cmds: &[&str]) -> Vec<Value> {
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
pub struct PortState {
    pub link_up: bool,
    pub started: bool,
    pub rxq_started: bool,
}

pub fn port_state(prefix: &str) -> (PortState, u64, Value) {
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

pub const UP: PortState = PortState {
    link_up: true,
    started: true,
    rxq_started: true,
};

pub fn attach(prefix: &str) -> Output {
    let (_, example) = binaries();
    Command::new(example)
        .arg(prefix)
        .output()
        .expect("spawn the attach example")
}

/// Files in the engine's runtime directory (a secondary adds `_<pid>`
/// fbarray copies and an `mp_socket_<pid>_..` socket; detach removes them).
pub fn runtime_files(prefix: &str) -> Vec<String> {
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

/// `examples/recv.rs` against `prefix` with `args`.
pub fn recv(prefix: &str, args: &[&str]) -> Output {
    let ex = profile_dir().join("examples").join("recv");
    binaries();
    Command::new(ex)
        .arg(prefix)
        .args(args)
        .output()
        .expect("spawn the recv example")
}
