//! What the client tests share: building the engine and the examples,
//! spawning an engine on a unique file prefix with hugepages, stopping it
//! for its exit JSON, DPDK's telemetry client, and the example runners.
#![allow(dead_code)]
// The helpers the engine's own tests have too.
#[path = "../../../app/tests/common/shared.rs"]
mod shared;
#[allow(unused_imports)]
pub use shared::*;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// conf/default.pcap replayed once: three sockets counted by the engine,
/// two (`handler = "none"`) left for a client, whose datagrams wait in
/// their rings until it opens them.
pub fn finite() -> String {
    body(
        "duration_secs = 60\nstop_when_idle_ms = 0",
        &pcap_sockets(|n| {
            if n.ends_with('6') {
                "handler = \"none\"\n"
            } else {
                ""
            }
        }),
    )
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
            &["-p", "udpdemux-client", "--example", "send"][..],
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

/// An engine config after `[eal]`: `[engine]` with `engine` in it, a
/// 4095-mbuf pool, the port (`{port}`) polled by RX lcore 1, then `sockets`.
pub fn body(engine: &str, sockets: &str) -> String {
    format!(
        "[engine]\n{engine}\n\n[mempool]\nmbufs = 4095\ncache = 128\n{}{sockets}",
        rx_port("{port}")
    )
}

/// The engine config after `[eal]` the attach tests use: an endless
/// replay counted into two sockets.
pub fn default_body() -> String {
    body(
        "duration_secs = 60",
        "\n[[socket]]\nname = \"dns4\"\nlocal = \"198.18.1.1:53\"\nrcvbuf = 4194304\n\n[[socket]]\nname = \"dns6\"\nlocal = \"[fd00::1]:53\"\nrcvbuf = 4194304\n",
    )
}

/// How to run an engine: hugepages or not, `eal.lcores`, and the config
/// after `[eal]` (`{port}` stands for the port's name).
pub struct Opts {
    pub no_huge: bool,
    pub lcores: String,
    pub body: String,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            no_huge: false,
            lcores: "0,1".into(),
            body: default_body(),
        }
    }
}

impl Opts {
    /// The defaults with `body`.
    pub fn body(body: impl Into<String>) -> Opts {
        Opts {
            body: body.into(),
            ..Opts::default()
        }
    }
}

pub struct Engine {
    pub child: Option<Child>,
    pub prefix: String,
    pub json: PathBuf,
    pub log: PathBuf,
}

impl Engine {
    /// An engine on `vdev` (port `port`) run as `o` says; not waited for.
    pub fn spawn(tag: &str, vdev: &str, port: &str, o: Opts) -> Engine {
        let Opts {
            no_huge,
            lcores,
            body,
        } = o;
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
    pub fn start(tag: &str, vdev: &str, port: &str, o: Opts) -> Engine {
        let mut e = Engine::spawn(tag, vdev, port, o);
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
        let status = wait_exit(
            &mut child,
            Duration::from_secs(30),
            "engine did not stop on SIGINT",
            || self.log_text(),
        );
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

/// Replies of DPDK's own telemetry client, one JSON value per command.
pub fn telemetry(prefix: &str, cmds: &[&str]) -> Vec<Value> {
    let v: Vec<Value> = telemetry_query(prefix, cmds, Duration::from_secs(30))
        .expect("dpdk-telemetry.py did not finish within 30 s")
        .into_iter()
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

/// The stdout of an example run that must have succeeded and printed
/// `must` (the failure shows both streams).
pub fn stdout_of_success(o: &Output, must: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && out.contains(must),
        "{} {out} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `socket NAME received N bytes B ...` of the recv example: (N, B).
pub fn received(out: &str, name: &str) -> (u64, u64) {
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("socket {name} received ")))
        .unwrap_or_else(|| panic!("no tally for {name}: {out}"));
    let w: Vec<&str> = l.split(' ').collect();
    (w[3].parse().unwrap(), w[5].parse().unwrap())
}

/// `examples/recv.rs PREFIX --secs 0.3 --hold SECS ARGS..`, its stdout
/// piped: it receives, then holds a batch SECS seconds.
pub fn holder(prefix: &str, secs: &str, args: &[&str]) -> Child {
    binaries();
    Command::new(profile_dir().join("examples").join("recv"))
        .args([prefix, "--secs", "0.3", "--hold", secs])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the recv example")
}

/// Read the holder's stdout up to its `holding N from NAME pid P` line: N.
pub fn holding(out: &mut BufReader<ChildStdout>, child: &mut Child) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        let got = out.read_line(&mut l).unwrap();
        if let Some(rest) = l.strip_prefix("holding ") {
            let n: u64 = rest.split(' ').next().unwrap().parse().unwrap();
            assert!(rest.contains(&format!("pid {}", child.id())), "{l}");
            return n;
        }
        seen.push_str(&l);
        if got == 0 || Instant::now() > deadline {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the client never held a batch: {seen} {err}");
        }
    }
}

/// The `net_pcap0` vdev replaying `conf/default.pcap` without end.
pub fn endless_pcap() -> String {
    format!(
        "net_pcap0,rx_pcap={},infinite_rx=1",
        repo().join("conf/default.pcap").display()
    )
}

/// Spawn `cmd` (an example) with piped stdin and stdout; its stdout lines
/// arrive on the receiver (a reader thread), so a test can poll them
/// while it runs an in-process engine's main loop.
pub fn spawn_with_lines(cmd: &mut Command) -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the example");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let out = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if lines_tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// An in-process engine's config for a test: `[eal]` on a fresh file
/// prefix (64 MB of hugepages, no PCI) with `lcores` and `vdev`, then
/// `rest`, written to a scratch directory. The prefix, the directory (the
/// test removes it) and the config's path.
pub fn in_process_config(
    tag: &str,
    lcores: &str,
    vdev: &str,
    rest: &str,
) -> (String, PathBuf, PathBuf) {
    let prefix = unique(tag);
    let dir = std::env::temp_dir().join(format!("udpdemux-client-{prefix}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    let text = format!(
        "[eal]\nlcores = \"{lcores}\"\nno_huge = false\nmemory_mb = 64\nno_pci = true\n\
         file_prefix = \"{prefix}\"\nvdevs = [\"{vdev}\"]\n\n{rest}"
    );
    std::fs::write(&path, text).unwrap();
    (prefix, dir, path)
}
