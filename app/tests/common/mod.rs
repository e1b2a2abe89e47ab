//! Helpers for tests that run the `udpdemux` binary as a subprocess (the EAL
//! initialises once per process, so each EAL-backed case is its own process).
#![allow(dead_code)]
// What the client crate's tests need too (one file both include).
mod shared;
#[allow(unused_imports)]
pub use shared::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

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
