//! Helpers for tests that run the `udpdemux` binary as a subprocess (the EAL
//! initialises once per process, so each EAL-backed case is its own process).
#![allow(dead_code)]
// What the client crate's tests need too (one file both include).
mod shared;
#[allow(unused_imports)]
pub use shared::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_udpdemux")
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch directory unique to this test process and call.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "udpdemux-test-{}-{}-{}",
        tag,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A unique EAL file prefix so concurrent tests never share runtime files.
pub fn prefix(tag: &str) -> String {
    format!(
        "t-{}-{}-{}",
        tag,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// The [eal] table every functional test uses: no hugepages, no PCI, two lcores.
pub fn eal(tag: &str, vdevs: &[&str]) -> String {
    let v: Vec<String> = vdevs.iter().map(|d| format!("{d:?}")).collect();
    format!(
        "[eal]\nlcores = \"0,1\"\nno_huge = true\nmemory_mb = 256\nno_pci = true\nfile_prefix = \"{}\"\nvdevs = [{}]\n",
        prefix(tag),
        v.join(", ")
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("spawn udpdemux")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `udpdemux run --config CFG --stats-json JSON EXTRA..` with `RUST_LOG=info`,
/// for a test that spawns it and wires stdout/stderr itself.
pub fn run_command(cfg: &Path, json: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--stats-json",
        json.to_str().unwrap(),
    ])
    .args(extra)
    .env("RUST_LOG", "info");
    c
}

/// Run with a config, expect success, return the JSON stats.
pub fn run_ok_json(cfg: &Path, extra: &[&str]) -> serde_json::Value {
    let json = cfg.with_extension("json");
    let mut args = vec![
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--stats-json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(
        o.status.success(),
        "udpdemux failed: {}\n{}",
        stderr(&o),
        stdout(&o)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// The stats JSON an engine wrote at exit (`--stats-json`).
pub fn stats_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("stats json")).unwrap()
}

/// A kernel-side program (`what`) run beside an engine succeeded; else
/// its stderr and the engine's log.
pub fn assert_ran(o: &Output, what: &str, log: &str) {
    assert!(
        o.status.success(),
        "{what} failed: {}\nengine log:\n{log}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The last line of stderr that is ours (the EAL logs its own lines first).
pub fn error_line(o: &Output) -> String {
    stderr(o)
        .lines()
        .rfind(|l| l.starts_with("udpdemux: error:"))
        .unwrap_or_default()
        .to_string()
}

/// The EAL file prefix of a config text made with [`eal`].
pub fn prefix_of(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("file_prefix = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("eal() sets file_prefix")
        .to_string()
}

/// A TOML basic string (control characters escaped, as a real file would
/// hold them).
pub fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => o.push_str(&format!("\\u{:04X}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number of the stats, or a panic naming what it is instead.
pub fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Bytes from hex text (the kernel-side scripts print payloads as hex).
pub fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

/// A list of hex strings (a kernel-side script's payloads) as bytes.
pub fn unhex_all(v: &serde_json::Value) -> Vec<Vec<u8>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| unhex(h.as_str().unwrap()))
        .collect()
}

/// One `[[socket]]` table; `extra` lines go inside it.
pub fn socket_toml(name: &str, local: &str, extra: &str) -> String {
    format!(
        "\n[[socket]]\nname = {}\nlocal = \"{local}\"\n{extra}",
        toml_str(name)
    )
}

/// Frames of parse reason `reason` that the engine's reassembler took
/// instead (`traffic gen`'s "fragment" kind is a UDP first fragment: with
/// reassembly on it counts in `reassembly.fragments`, not in `reasons`).
pub fn reassembled_reason(j: &serde_json::Value, reason: &str) -> u64 {
    if reason == "fragment_first" {
        j["reassembly"]["fragments"].as_u64().unwrap_or(0)
    } else {
        0
    }
}

/// The engine as a child process, its stderr collected as it runs (the
/// netns tests); killed on drop if still running.
pub struct EngineProc {
    child: Option<Child>,
    log: Arc<Mutex<String>>,
}

impl EngineProc {
    pub fn start(cfg: &std::path::Path, json: &std::path::Path) -> EngineProc {
        let mut child = run_command(cfg, json, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn udpdemux");
        let log = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().expect("stderr");
        let l2 = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut g = l2.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        EngineProc {
            child: Some(child),
            log,
        }
    }

    /// Write `text` as `dir/c.toml` and start the engine on it (its stats
    /// JSON: `dir/c.json`), back once its sockets are up: the engine, the
    /// config's path and the JSON's.
    pub fn start_ready(dir: &Path, text: &str) -> (EngineProc, PathBuf, PathBuf) {
        let cfg = write(dir, "c.toml", text);
        let json = dir.join("c.json");
        let mut engine = EngineProc::start(&cfg, &json);
        engine.wait_ready();
        (engine, cfg, json)
    }

    /// Wait until the engine says its sockets are up (or it died).
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.log.lock().unwrap().contains("socket(s), strategy") {
                // The RX lcore is launched right after this line.
                std::thread::sleep(Duration::from_millis(300));
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("engine exited early ({st}):\n{}", self.log.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("engine not ready after 30 s:\n{}", self.log.lock().unwrap());
    }

    /// Send `sig` to the engine (SIGHUP: reload).
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, sig) };
    }

    /// Everything the engine logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        let log = self.log.lock().unwrap().clone();
        (st, log)
    }
}

impl Drop for EngineProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
