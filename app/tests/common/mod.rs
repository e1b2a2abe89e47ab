//! Helpers for tests that run the `udpdemux` binary as a subprocess (the EAL
//! initialises once per process, so each EAL-backed case is its own process).
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_udpdemux")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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

/// DPDK's own telemetry client (package `dpdk`).
pub const TELEMETRY_PY: &str = "/usr/bin/dpdk-telemetry.py";

/// Sends `cmds` to a running instance's telemetry through DPDK's own client
/// and returns its JSON replies, one per line; `None` if the client has not
/// finished within `timeout` (it is killed).
pub fn telemetry_query(
    prefix: &str,
    cmds: &[&str],
    timeout: std::time::Duration,
) -> Option<Vec<serde_json::Value>> {
    use std::io::Write;
    use std::process::Stdio;
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
    let deadline = std::time::Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect(),
    )
}

/// The EAL file prefix of a config text made with [`eal`].
pub fn prefix_of(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("file_prefix = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("eal() sets file_prefix")
        .to_string()
}

/// `port` and one RX lcore (id 1) polling its queue 0: the smallest valid
/// `[[port]]` + `[[lcore]]` pair, which most configs here need.
pub fn rx_port(port: &str) -> String {
    format!(
        "\n[[port]]\nname = \"{port}\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"{port}:0\"]\n"
    )
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

/// A socket of a stats JSON, found by its `local` address.
pub fn socket<'a>(j: &'a serde_json::Value, local: &str) -> &'a serde_json::Value {
    socket_where(j, "local", local)
}

/// A socket of a stats JSON, found by its name.
pub fn socket_named<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    socket_where(j, "name", name)
}

fn socket_where<'a>(j: &'a serde_json::Value, key: &str, val: &str) -> &'a serde_json::Value {
    j["sockets"]
        .as_array()
        .unwrap_or_else(|| panic!("no sockets in {j}"))
        .iter()
        .find(|s| s[key] == val)
        .unwrap_or_else(|| panic!("no socket with {key} {val}"))
}

/// The generator's manifest of `conf/default.pcap` (what each socket and
/// each drop reason must count when it is replayed once).
pub fn manifest() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("conf/default.pcap.json")).unwrap())
        .unwrap()
}

/// Hugepages for tests that cannot run with `no_huge` (memif): hugetlbfs
/// mounted and at least `min_free` free 2 MB pages.
pub fn hugepages_ready(min_free: u64) -> Result<(), String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    if !mounts.contains("hugetlbfs") || free < min_free {
        return Err(format!(
            "this test needs hugepages (hugetlbfs mounted, >= {min_free} free 2 MB pages; {free} free): run scripts/setup.sh"
        ));
    }
    Ok(())
}
