//! The table-driven bad-config suite (issue 14): every case must fail in
//! `check` and in `run` (no_huge, a unique file prefix, `--duration 1`)
//! with the same one-line message, non-zero exit and no panic. `check`'s
//! message is its first `error:` line (or its own error line when the
//! config does not even parse); `run`'s is its `udpdemux: error:` line
//! without the `config PATH: ` prefix. Cases run on a few threads, each
//! process under a deadline, so the suite takes seconds, not minutes.
//!
//! Not here: `check`'s sizing errors that `run` deliberately accepts (a pool
//! smaller than the RX descriptors, an rcvbuf below one truesize): they
//! are what the pool-exhaustion and rcvbuf tests run on purpose.
mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One bad config: how to make it from the valid base, and a piece of the
/// message it must produce (so each case fails for the reason it is about).
struct Case {
    name: &'static str,
    edit: Box<dyn Fn(&str) -> String + Sync>,
    want: &'static str,
}

fn case(
    name: &'static str,
    want: &'static str,
    edit: impl Fn(&str) -> String + Sync + 'static,
) -> Case {
    Case {
        name,
        edit: Box::new(edit),
        want,
    }
}

/// Replaces `from` (which must occur) in the base.
fn swap(from: &'static str, to: impl Into<String>) -> impl Fn(&str) -> String + Sync {
    let to = to.into();
    move |b: &str| {
        assert!(b.contains(from), "{from:?} not in the base");
        b.replacen(from, &to, 1)
    }
}

/// Appends `more` to the base.
fn add(more: impl Into<String>) -> impl Fn(&str) -> String + Sync {
    let more = more.into();
    move |b: &str| format!("{b}\n{more}\n")
}

/// The valid base: a null port, one RX lcore, one socket.
fn base(tag: &str) -> String {
    format!(
        "{}{}{}",
        eal(tag, &["net_null0"]),
        rx_port("net_null0"),
        socket_toml("a", "198.18.0.1:53", "")
    )
}

fn sock(name: &str, local: &str, extra: &str) -> String {
    socket_toml(name, local, extra)
        .trim_start_matches('\n')
        .to_string()
}

fn cases() -> Vec<Case> {
    let many: String = (0..2049)
        .map(|i| {
            sock(
                &format!("s{i}"),
                &format!("198.18.{}.{}:53", 1 + i / 250, 1 + i % 250),
                "ring_size = 2\n",
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    vec![
        // TOML and keys.
        case("toml syntax", "TOML parse error", |b| format!("{b}\n[engine\n")),
        case("unknown top-level key", "unknown field `bogus`", add("[bogus]\nx = 1")),
        case("unknown eal key", "unknown field `foo`", swap("[eal]\n", "[eal]\nfoo = 1\n")),
        case("unknown socket key", "unknown field `colour`", add(sock("b", "198.18.0.2:53", "colour = 1\n"))),
        case("missing eal.lcores", "missing field `lcores`", swap("lcores = \"0,1\"\n", "")),
        case("memory_mb negative", "invalid value", swap("memory_mb = 256", "memory_mb = -1")),
        case("memory_mb a string", "invalid type", swap("memory_mb = 256", "memory_mb = \"lots\"")),
        case("unknown strategy", "unknown enqueue strategy", add("[engine]\nstrategy = \"fast\"")),
        case("unknown role", "unknown variant `tx`", add("[[lcore]]\nid = 2\nrole = \"tx\"")),
        case("unknown handler", "unknown variant `bogus`", add(sock("b", "198.18.0.2:53", "handler = \"bogus\"\n"))),
        case("local not an address", "invalid socket address", add(sock("b", "nonsense", ""))),
        case("local without port", "invalid socket address", add(sock("b", "198.18.0.2", ""))),
        // [engine], [mempool], [small_cache].
        case("burst 0", "engine.burst = 0", add("[engine]\nburst = 0")),
        case("burst 513", "engine.burst = 513", add("[engine]\nburst = 513")),
        case("stats interval 0", "engine.stats_interval_ms must be > 0", add("[engine]\nstats_interval_ms = 0")),
        case(
            "yield without sleeps",
            "engine.idle_yield_us = 500 needs engine.idle_sleep_us > 0",
            add("[engine]\nidle_yield_us = 500"),
        ),
        case("negative duration", "engine.duration_secs must be >= 0", add("[engine]\nduration_secs = -1.0")),
        case("control_pps 0", "engine.control_pps and engine.control_burst", add("[engine]\ncontrol_pps = 0")),
        case("control_burst 0", "engine.control_pps and engine.control_burst", add("[engine]\ncontrol_burst = 0")),
        case("filler_sockets 100M", "engine.filler_sockets = 100000000: at most 10000000", add("[engine]\nfiller_sockets = 100000000")),
        case("mbufs 10", "mempool.mbufs = 10: too small", add("[mempool]\nmbufs = 10")),
        case("data_room 100", "mempool.data_room = 100", add("[mempool]\ndata_room = 100")),
        case("cache 1000", "mempool.cache = 1000", add("[mempool]\ncache = 1000")),
        case("cache over 2/3 of mbufs", "mempool.cache = 256", add("[mempool]\nmbufs = 300\ncache = 256")),
        case("small_cache.entries 0", "small_cache.entries = 0", add("[small_cache]\nentries = 0")),
        case("small_cache.data_room 100", "small_cache.data_room = 100", add("[small_cache]\ndata_room = 100")),
        case("small data_room >= pool's", "small_cache.data_room = 4000", add("[small_cache]\ndata_room = 4000")),
        // [reassembly].
        case("reassembly.max_datagrams 0", "reassembly.max_datagrams = 0", add("[reassembly]\nmax_datagrams = 0")),
        case("reassembly.max_frags 1", "reassembly.max_frags = 1", add("[reassembly]\nmax_frags = 1")),
        case("exception device not a tap", "must be a net_tapN or virtio_userN vdev", add("[exception]\ndevice = \"net_ring0\"")),
        case("exception iface too long", "is not a usable interface name", add("[exception]\ndevice = \"net_tap0,iface=a-very-long-name\"")),
        case("exception port unknown", "exception.port = \"net_x\" is not a [[port]]", add("[exception]\ndevice = \"net_tap0\"\nport = \"net_x\"")),
        case("exception rate 0", "exception.rate_pps = 0", add("[exception]\ndevice = \"net_tap0\"\nrate_pps = 0")),
        case("reassembly.high_thresh 1000", "reassembly.high_thresh = 1000", add("[reassembly]\nhigh_thresh = 1000")),
        case("reassembly.timeout_secs 0", "reassembly.timeout_secs = 0", add("[reassembly]\ntimeout_secs = 0")),
        case("reassembly.steer_ring 8", "reassembly.steer_ring = 8", add("[reassembly]\nsteer_ring = 8")),
        case("reassembly unknown key", "unknown field `ipfrag_time`", add("[reassembly]\nipfrag_time = 30")),
        // [neighbour].
        case("neighbour.entries 0", "neighbour.entries = 0: must be 1..=4096", add("[neighbour]\nentries = 0")),
        case("neighbour.unres_qlen 1000", "neighbour.unres_qlen = 1000: must be 0..=256", add("[neighbour]\nunres_qlen = 1000")),
        case("neighbour.mcast_solicit 0", "neighbour.mcast_solicit = 0", add("[neighbour]\nmcast_solicit = 0")),
        case("neighbour.reachable_ms 0", "neighbour.reachable_ms = 0: must be 1..=3600000", add("[neighbour]\nreachable_ms = 0")),
        case("neighbour.retrans_ms 0", "neighbour.retrans_ms = 0", add("[neighbour]\nretrans_ms = 0")),
        case("neighbour unknown key", "unknown field `gc_thresh3`", add("[neighbour]\ngc_thresh3 = 1")),
        case("neighbour.static bad mac", "mac = \"02:00:00:00:02\" is not a MAC address", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.18.0.2\"\nmac = \"02:00:00:00:02\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        case("neighbour.static multicast mac", "is a multicast or zero MAC", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.18.0.2\"\nmac = \"01:00:5e:00:00:01\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        case("neighbour.static off-link", "neighbour.static ip = \"198.19.0.2\": on no port's subnet", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.19.0.2\"\nmac = \"02:00:00:00:00:02\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        case("neighbour.static unknown port", "port = \"net_null9\" is no [[port]]", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.18.0.2\"\nmac = \"02:00:00:00:00:02\"\nport = \"net_null9\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        case("neighbour.static own address", "is a port's own address", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.18.0.1\"\nmac = \"02:00:00:00:00:02\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        case("neighbour.static twice", "listed twice", |b: &str| format!("{}\n[[neighbour.static]]\nip = \"198.18.0.2\"\nmac = \"02:00:00:00:00:02\"\n[[neighbour.static]]\nip = \"198.18.0.2\"\nmac = \"02:00:00:00:00:03\"\n", (swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/24\"]\n"))(b))),
        // [eal]: memory, prefix.
        case("memory_mb 1", "eal.memory_mb = 1 is too small", swap("memory_mb = 256", "memory_mb = 1")),
        case("memory_mb 16", "eal.memory_mb = 16 is too small", swap("memory_mb = 256", "memory_mb = 16")),
        case("memory_mb beyond RAM", "more than this machine's memory", swap("memory_mb = 256", "memory_mb = 9999999")),
        case("memory_mb beyond hugepages", "more than the free hugepages", |b: &str| {
            b.replacen("memory_mb = 256", "memory_mb = 9999999", 1).replacen("no_huge = true", "no_huge = false", 1)
        }),
        case("empty file_prefix", "eal.file_prefix is empty", |b: &str| {
            let i = b.find("file_prefix = \"").unwrap();
            let j = b[i..].find('\n').unwrap() + i;
            format!("{}file_prefix = \"\"{}", &b[..i], &b[j..])
        }),
        case("file_prefix with a slash", "eal.file_prefix = \"a/b\"", |b: &str| {
            let i = b.find("file_prefix = \"").unwrap();
            let j = b[i..].find('\n').unwrap() + i;
            format!("{}file_prefix = \"a/b\"{}", &b[..i], &b[j..])
        }),
        case("empty --file-prefix in extra_args", "--file-prefix in eal.extra_args is empty", swap("[eal]\n", "[eal]\nextra_args = [\"--file-prefix=\"]\n")),
        // [[port]] and [[lcore]].
        case("no port", "no [[port]] configured", |b: &str| b.replacen("[[port]]\nname = \"net_null0\"\n", "", 1)),
        case("port twice", "port \"net_null0\" is listed twice", add("[[port]]\nname = \"net_null0\"")),
        case("rx_queues 0", "rx_queues must be >= 1", swap("name = \"net_null0\"\n", "name = \"net_null0\"\nrx_queues = 0\n")),
        case("queue without a poller", "\"net_null0:1\" has no rx lcore polling it", swap("name = \"net_null0\"\n", "name = \"net_null0\"\nrx_queues = 2\n")),
        case("queue polled twice", "exactly one poller per queue", add("[[lcore]]\nid = 2\nrole = \"rx\"\nqueues = [\"net_null0:0\"]")),
        case("lcore twice", "lcore 1 is listed twice", add("[[lcore]]\nid = 1\nrole = \"consumer\"")),
        case("consumer with queues", "a consumer lcore polls no queues", add("[[lcore]]\nid = 2\nrole = \"consumer\"\nqueues = [\"net_null0:0\"]")),
        case("rx lcore without queues", "an rx lcore needs `queues", add("[[lcore]]\nid = 2\nrole = \"rx\"")),
        case("queue ref malformed", "is not \"PORT:QUEUE\"", swap("queues = [\"net_null0:0\"]", "queues = [\"net_null0\"]")),
        case("queue names no port", "which is not a [[port]]", swap("queues = [\"net_null0:0\"]", "queues = [\"net_nul0:0\"]")),
        case("queue index too high", "port \"net_null0\" has 1 RX queues", swap("queues = [\"net_null0:0\"]", "queues = [\"net_null0:0\", \"net_null0:1\"]")),
        case("interface prefix 33", "prefix length 33 is over 32", swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1/33\"]\n")),
        case("interface address without prefix", "ADDR/PREFIXLEN", swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"198.18.0.1\"]\n")),
        case("interface address multicast", "is not a unicast address", swap("name = \"net_null0\"\n", "name = \"net_null0\"\naddresses = [\"224.0.0.1/4\"]\n")),
        // [[socket]]: names.
        case("empty socket name", "socket name \"\" is empty", swap("name = \"a\"", "name = \"\"")),
        case("5000-character name", "is 5000 bytes long", move |b: &str| b.replacen("name = \"a\"", &format!("name = \"{}\"", "x".repeat(5000)), 1)),
        case("64-character name", "is 64 bytes long", move |b: &str| b.replacen("name = \"a\"", &format!("name = \"{}\"", "y".repeat(64)), 1)),
        case("name with a newline", "contains '\\n'", swap("name = \"a\"", "name = \"a\\nb\"")),
        case("name with NUL", "contains '\\0'", swap("name = \"a\"", "name = \"a\\u0000b\"")),
        case("name with a space", "contains ' '", swap("name = \"a\"", "name = \"a b\"")),
        case("name with a quote", "contains '\"'", swap("name = \"a\"", "name = \"a\\\"b\"")),
        case("name with a slash", "contains '/'", swap("name = \"a\"", "name = \"dns/4\"")),
        case("non-ASCII name", "contains 'é'", swap("name = \"a\"", "name = \"café\"")),
        case("socket name twice", "socket \"a\" is listed twice", add(sock("a", "198.18.0.2:53", ""))),
        // [[socket]]: addresses.
        case("IPv6 zone in local", "has an IPv6 zone (%2)", add(sock("z", "[fe80::1%2]:53", ""))),
        case("IPv6 zone in remote", "remote [fe80::9%7]:9 has an IPv6 zone", add(sock("z", "[fd00::1]:53", "remote = \"[fe80::9%7]:9\"\n"))),
        case("local port 0", "local port 0", add(sock("b", "198.18.0.2:0", ""))),
        case("families differ", "local and remote are of different families", add(sock("b", "[fd00::1]:53", "remote = \"198.18.0.9:5\"\n"))),
        case("remote port 0", "remote must be a specific address and port", add(sock("b", "198.18.0.2:53", "remote = \"198.18.0.9:0\"\n"))),
        case("remote wildcard", "remote must be a specific address and port", add(sock("b", "198.18.0.2:53", "remote = \"0.0.0.0:5\"\n"))),
        case("multicast remote", "unsupported address 239.1.2.3", add(sock("b", "198.18.0.2:53", "remote = \"239.1.2.3:5\"\n"))),
        // [[socket]]: multicast.
        case("multicast not a group", "multicast = \"198.18.0.9\" is not a multicast group", add(sock("b", "0.0.0.0:5000", "multicast = \"198.18.0.9\"\n"))),
        case("multicast all-hosts", "is the all-hosts group", add(sock("b", "224.0.0.1:5000", "multicast = \"224.0.0.1\"\n"))),
        case("multicast interface-local", "has scope 0 (reserved) or 1", add(sock("b", "[::]:5000", "multicast = \"ff01::1\"\n"))),
        case("multicast family", "are of different families", add(sock("b", "0.0.0.0:5000", "multicast = \"ff15::1\"\n"))),
        case("multicast on a unicast binding", "would never receive group 239.1.2.3", add(sock("b", "198.18.0.2:5000", "multicast = \"239.1.2.3\"\n"))),
        case("multicast_port alone", "multicast_port without multicast", add(sock("b", "198.18.0.2:53", "multicast_port = \"net_null0\"\n"))),
        case("multicast_port unknown", "multicast_port \"net_null9\" is not a [[port]]", add(sock("b", "239.1.2.3:5000", "multicast = \"239.1.2.3\"\nmulticast_port = \"net_null9\"\n"))),
        case("multicast not an address", "invalid IP address syntax", add(sock("b", "239.1.2.3:5000", "multicast = \"group\"\n"))),
        case("v4-mapped local", "unsupported address ::ffff:198.18.0.2", add(sock("b", "[::ffff:198.18.0.2]:53", ""))),
        case("collision", "socket \"b\": address in use: 198.18.0.1:53 collides with socket \"a\"", add(sock("b", "198.18.0.1:53", ""))),
        case("collision, only one reuseport", "collides with socket \"a\"", add(sock("b", "198.18.0.1:53", "reuseport = true\n"))),
        case("connected socket in a reuseport group", "a connected socket cannot join a reuseport group", add(sock("b", "198.18.0.2:53", "remote = \"198.18.0.9:5\"\nreuseport = true\n"))),
        case("2050 sockets", "2050 sockets: at most 2048", move |b: &str| format!("{b}\n{many}\n")),
        // [[socket]]: sizes and handlers.
        case("rcvbuf 100", "rcvbuf = 100 is below 4096", add(sock("b", "198.18.0.2:53", "rcvbuf = 100\n"))),
        case("ring_size 1", "ring_size = 1 must be", add(sock("b", "198.18.0.2:53", "ring_size = 1\n"))),
        case("ring_size 2^25", "ring_size = 33554432 must be", add(sock("b", "198.18.0.2:53", "ring_size = 33554432\n"))),
        case("pcap without a file", "handler \"pcap\" needs pcap_file", add(sock("b", "198.18.0.2:53", "handler = \"pcap\"\n"))),
        case("pcap_file without pcap", "pcap_file is only for handler \"pcap\"", add(sock("b", "198.18.0.2:53", "pcap_file = \"/tmp/x.pcap\"\n"))),
        case("pcap_limit_bytes 1", "pcap_limit_bytes = 1 is too small", add(sock("b", "198.18.0.2:53", "handler = \"pcap\"\npcap_file = \"/tmp/udpdemux-bad.pcap\"\npcap_limit_bytes = 1\n"))),
        case("pcap in a missing directory", "directory /proc/nope does not exist", add(sock("b", "198.18.0.2:53", "handler = \"pcap\"\npcap_file = \"/proc/nope/x.pcap\"\n"))),
        case("pcap_file is a directory", "pcap_file /tmp is a directory", add(sock("b", "198.18.0.2:53", "handler = \"pcap\"\npcap_file = \"/tmp\"\n"))),
        // Only the EAL can tell (check initialises it too).
        case("lcores names a missing CPU", "core 7 unavailable", |b: &str| {
            b.replacen("lcores = \"0,1\"", "lcores = \"0,7\"", 1).replacen("id = 1\n", "id = 7\n", 1)
        }),
        case("unknown vdev", "failed to parse device \"net_bogus0\"", swap("vdevs = [\"net_null0\"", "vdevs = [\"net_null0\", \"net_bogus0\"")),
        case("unknown EAL option", "check eal.extra_args [\"--bogus-flag\"]", swap("[eal]\n", "[eal]\nextra_args = [\"--bogus-flag\"]\n")),
        case("lcore not enabled", "lcore 5 is not enabled by eal.lcores", |b: &str| b.replacen("id = 1\n", "id = 5\n", 1)),
        case("main lcore as rx", "lcore 0 is the main lcore", |b: &str| b.replacen("id = 1\n", "id = 0\n", 1)),
        case("port not probed", "port \"net_null1\" not found", |b: &str| {
            b.replacen("name = \"net_null0\"\n", "name = \"net_null1\"\n", 1).replacen("\"net_null0:0\"", "\"net_null1:0\"", 1)
        }),
    ]
}

/// Runs `bin() args` with a deadline; kills it past the deadline.
fn run_for(args: &[&str], secs: u64) -> (Output, Duration) {
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn udpdemux");
    // Drain the pipes while waiting (the EAL's usage text can fill one).
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let o = Output {
        status,
        stdout: ro.join().unwrap(),
        stderr: re.join().unwrap(),
    };
    (o, t.elapsed())
}

/// `udpdemux: error: config PATH: MSG` -> `MSG`.
fn strip(line: &str, cfg: &Path) -> String {
    let l = line.strip_prefix("udpdemux: error: ").unwrap_or(line);
    let p = format!("config {}: ", cfg.display());
    l.strip_prefix(&p).unwrap_or(l).to_string()
}

fn check_message(o: &Output, cfg: &Path) -> String {
    match stdout(o).lines().find_map(|l| l.strip_prefix("error: ")) {
        Some(m) => m.to_string(),
        None => strip(&error_line(o), cfg),
    }
}

/// One case; `Err` says what went wrong.
fn one(c: &Case, dir: &Path, i: usize) -> Result<String, String> {
    let tag = format!("bad{i}");
    let text = (c.edit)(&base(&tag));
    let cfg: PathBuf = write(dir, &format!("{i}.toml"), &text);
    let cfg_s = cfg.to_str().unwrap();
    let (co, ct) = run_for(&["check", "--config", cfg_s], 60);
    let json = dir.join(format!("{i}.json"));
    let (ro, rt) = run_for(
        &[
            "run",
            "--config",
            cfg_s,
            "--duration",
            "1",
            "--stats-json",
            json.to_str().unwrap(),
        ],
        60,
    );
    let (cm, rm) = (check_message(&co, &cfg), strip(&error_line(&ro), &cfg));
    let ctx = || {
        format!(
            "check ({ct:?}, {}): {cm:?}\n  run ({rt:?}, {}): {rm:?}\n  run stderr tail: {:?}",
            co.status,
            ro.status,
            stderr(&ro).lines().rev().take(3).collect::<Vec<_>>()
        )
    };
    for (what, o) in [("check", &co), ("run", &ro)] {
        if o.status.success() || o.status.code().is_none() {
            return Err(format!("{what} did not fail cleanly\n  {}", ctx()));
        }
        let all = format!("{}{}", stdout(o), stderr(o));
        if all.contains("panicked") || all.contains("RUST_BACKTRACE") {
            return Err(format!("{what} panicked\n  {}", ctx()));
        }
    }
    if cm.is_empty() || cm != rm {
        return Err(format!("check and run disagree\n  {}", ctx()));
    }
    if !cm.contains(c.want) {
        return Err(format!("message lacks {:?}\n  {}", c.want, ctx()));
    }
    Ok(cm)
}

#[test]
fn bad_configs_fail_in_check_and_run_with_the_same_line() {
    let cases = cases();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let dir = scratch("bad-config");
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(c) = cases.get(i) else { break };
                match one(c, &dir, i) {
                    Ok(m) => eprintln!("ok   {:>2} {}: {m:.160}", i, c.name),
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{} ({i}): {e}", c.name)),
                }
            });
        }
    });
    let f = failures.into_inner().unwrap();
    eprintln!("{} cases in {:?}", cases.len(), t.elapsed());
    assert!(
        f.is_empty(),
        "{} of {} cases failed:\n{}",
        f.len(),
        cases.len(),
        f.join("\n")
    );
}
