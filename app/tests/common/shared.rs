//! Test helpers both the engine's tests (`app/tests`) and the client's
//! (`client/tests`, through a `#[path]` module) use: nothing here may
//! depend on the including crate (no `CARGO_BIN_EXE_*`).
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn repo() -> PathBuf {
    // The nearest directory above the crate with a Cargo.lock: this module
    // serves app/, client/ and client/capi/ (one level deeper).
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .expect("the workspace root (a Cargo.lock above the crate)")
        .to_path_buf()
}

/// DPDK's own telemetry client (package `dpdk`).
pub const TELEMETRY_PY: &str = "/usr/bin/dpdk-telemetry.py";

/// Sends `cmds` to a running instance's telemetry through DPDK's own client
/// and returns its JSON replies, one per line; `None` if the client has not
/// finished within `timeout` (it is killed).
pub fn telemetry_query(
    prefix: &str,
    cmds: &[&str],
    timeout: Duration,
) -> Option<Vec<serde_json::Value>> {
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
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect(),
    )
}

/// Wait up to `timeout` for `child` to exit; past it, kill it and panic
/// with `what` and `log()` (never leave an engine polling behind a test).
pub fn wait_exit(
    child: &mut Child,
    timeout: Duration,
    what: &str,
    log: impl Fn() -> String,
) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: {}", log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `dpdk-testpmd` (package `dpdk-dev`) under a 30 s `timeout`, both lcores
/// on CPU 0, 64 MB, no PCI, on file prefix `prefix`; the caller adds the
/// vdev and testpmd's own arguments.
pub fn testpmd(prefix: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args([
        "30",
        "dpdk-testpmd",
        "--lcores",
        "0@0,1@0",
        "-m",
        "64",
        "--no-pci",
    ])
    .arg(format!("--file-prefix={prefix}"));
    c
}

/// `port` and one RX lcore (id 1) polling its queue 0: the smallest valid
/// `[[port]]` + `[[lcore]]` pair, which most configs here need.
pub fn rx_port(port: &str) -> String {
    format!(
        "\n[[port]]\nname = \"{port}\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"{port}:0\"]\n"
    )
}

/// `port` (`net_af_packet` with `qpairs=2` on a veth end) with the
/// test's addresses 198.18.0.1/24 and fd00::1/64, both its queues polled
/// by RX lcore 1, without RX checksum offload: two TX queues, the RX
/// lcore's and the main lcore's (which sends ARP/ND/ICMP and what
/// clients enqueue).
pub fn veth_port(port: &str) -> String {
    format!(
        r#"
[[port]]
name = "{port}"
rx_queues = 2
tx_queues = 2
rx_checksum_offload = false
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0", "{port}:1"]
"#
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
        .unwrap_or_else(|| panic!("no socket with {key} {val} in {j}"))
}

/// The generator's manifest of `conf/default.pcap` (what each socket and
/// each drop reason must count when it is replayed once).
pub fn manifest() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("conf/default.pcap.json")).unwrap())
        .unwrap()
}

/// The five sockets `conf/default.pcap` is made for: (name, local).
pub const PCAP_SOCKETS: [(&str, &str); 5] = [
    ("dns4", "198.18.1.1:53"),
    ("echo4", "198.18.1.2:7"),
    ("app4", "198.18.1.3:5000"),
    ("dns6", "[fd00::1]:53"),
    ("app6", "[fd00::2]:5000"),
];

/// [`PCAP_SOCKETS`] as `[[socket]]` tables with a 4 MiB rcvbuf; `extra`
/// gives each its own further lines.
pub fn pcap_sockets(extra: impl Fn(&str) -> &'static str) -> String {
    PCAP_SOCKETS
        .iter()
        .map(|(n, l)| {
            format!(
                "\n[[socket]]\nname = \"{n}\"\nlocal = \"{l}\"\n{}rcvbuf = 4194304\n",
                extra(n)
            )
        })
        .collect()
}

/// Hugepages for tests that cannot run with `no_huge` (memif, clients):
/// hugetlbfs mounted and at least `min_free` free 2 MB pages.
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

/// Fragments of a UDP datagram with `payload` bytes of data over a link of
/// `mtu` bytes (IPv4: a 20-byte header; IPv6: 40 and the 8-byte fragment
/// header; every fragment but the last a multiple of 8).
pub fn fragments(v6: bool, payload: usize, mtu: usize) -> u64 {
    let room = if v6 { mtu - 48 } else { mtu - 20 } & !7;
    (payload + 8).div_ceil(room) as u64
}

/// Numbers as one comma-separated argument.
pub fn csv(s: &[usize]) -> String {
    s.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A kernel client's list of echo requests sent, `[[is_ipv6, size], ...]`.
pub fn echo_sends(v: &serde_json::Value) -> Vec<(bool, usize)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|p| (p[0].as_bool().unwrap(), p[1].as_u64().unwrap() as usize))
        .collect()
}

/// The echo sockets `echo4` and `echo6` answered every request of `sends`
/// (one each, no error), every reply over the 1500-byte MTU and sent as
/// fragments: `Ip[6]FragOKs` one per reply, `FragCreates` exact, no
/// `FragFails`.
pub fn check_fragmented_echo(j: &serde_json::Value, sends: &[(bool, usize)]) {
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    let ip = &j["ip"];
    for (name, six) in [("echo4", false), ("echo6", true)] {
        let e = socket_named(j, name);
        let mine = || sends.iter().filter(move |s| s.0 == six);
        let sent = mine().count() as u64;
        assert_eq!(u(&e["offered"]), sent, "{e}");
        assert_eq!(u(&e["tx"]), sent, "{e}");
        assert_eq!(u(&e["tx_errors"]), 0, "{e}");
        let pre = if six { "Ip6" } else { "Ip" };
        let made: u64 = mine().map(|s| fragments(six, s.1, 1500)).sum();
        assert_eq!(u(&ip[&format!("{pre}FragOKs")]), sent, "{ip}");
        assert_eq!(u(&ip[&format!("{pre}FragCreates")]), made, "{ip}");
        assert_eq!(u(&ip[&format!("{pre}FragFails")]), 0, "{ip}");
    }
}
