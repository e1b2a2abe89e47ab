//! The DNS example against `dig` (issue 17, item 2): real kernel clients in
//! a network namespace query the `udpdemux-dns` server, first on the engine
//! (`udpdemux run` on `net_af_packet` over a veth pair, the server a client
//! process that binds port 53 on IPv4 and IPv6), then over kernel sockets
//! (`--kernel`, in a namespace of its own). Both get the same dig checks,
//! answers read field by field, and the same two non-DNS datagrams (one
//! ignored, one answered FORMERR). At the end the engine's books balance
//! and its `UdpOutDatagrams`/`Udp6OutDatagrams` are the replies the
//! kernel clients received (dig's answers and the FORMERR).
#[path = "../../tests/common/mod.rs"]
mod common;
use common::*;
#[path = "../../../app/tests/common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

const SERVER: &str = env!("CARGO_BIN_EXE_udpdemux-dns");

fn zone_file() -> String {
    repo().join("conf/dns-zone.toml").display().to_string()
}

/// One dig answer, from `+noall +comments +answer` output.
#[derive(Debug, Default)]
struct Reply {
    status: String,
    flags: Vec<String>,
    /// QUERY, ANSWER, AUTHORITY, ADDITIONAL.
    counts: [u32; 4],
    /// The EDNS UDP size the server advertised (None: no OPT record).
    edns_udp: Option<u32>,
    /// (name, TTL, class, type, data) per answer record.
    answers: Vec<(String, u32, String, String, String)>,
}

fn parse_dig(out: &str) -> Reply {
    let mut r = Reply::default();
    let mut got_header = false;
    for l in out.lines() {
        if let Some(rest) = l.strip_prefix(";; ->>HEADER<<- ") {
            got_header = true;
            r.status = rest
                .split(", ")
                .find_map(|f| f.strip_prefix("status: "))
                .unwrap_or_else(|| panic!("no status: {out}"))
                .to_string();
        } else if let Some(rest) = l.strip_prefix(";; flags:") {
            let (flags, counts) = rest.split_once(';').unwrap();
            r.flags = flags.split_whitespace().map(String::from).collect();
            for (i, c) in counts.split(',').enumerate() {
                r.counts[i] = c.split(':').nth(1).unwrap().trim().parse().unwrap();
            }
        } else if let Some(rest) = l.strip_prefix("; EDNS:") {
            r.edns_udp = rest
                .split("udp: ")
                .nth(1)
                .map(|u| u.trim().parse().unwrap());
        } else if !l.starts_with(';') && !l.trim().is_empty() {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 5, "answer line {l:?}");
            r.answers.push((
                w[0].into(),
                w[1].parse().unwrap(),
                w[2].into(),
                w[3].into(),
                w[4].into(),
            ));
        }
    }
    assert!(got_header, "dig got no answer: {out}");
    r
}

/// `dig @server NAME TYPE` from the namespace, one try, no recursion.
fn dig(net: &netns::Net, server: &str, name: &str, qtype: &str, extra: &[&str]) -> Reply {
    let mut args = vec![
        "dig",
        "-p",
        "53",
        name,
        qtype,
        "+norecurse",
        "+tries=1",
        "+time=5",
        "+noall",
        "+comments",
        "+answer",
    ];
    let at = format!("@{server}");
    args.insert(1, &at);
    args.extend_from_slice(extra);
    let o = net.exec(&args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "dig {args:?}: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    parse_dig(&out)
}

fn rr(name: &str, t: &str, data: &str) -> (String, u32, String, String, String) {
    (name.into(), 300, "IN".into(), t.into(), data.into())
}

/// The checks both modes share, against `server` (an address in the
/// namespace's view); `edns_udp` is what the server advertises. How many
/// answers dig received (each query is one datagram each way).
fn dig_checks(net: &netns::Net, server: &str, edns_udp: u32) -> u64 {
    let aa = vec!["qr".to_string(), "aa".to_string()];
    // A: two records, authoritative, TTL 300, with EDNS (dig's default).
    let r = dig(net, server, "www.example.test", "A", &[]);
    assert_eq!((r.status.as_str(), &r.flags), ("NOERROR", &aa), "{r:?}");
    assert_eq!(r.counts, [1, 2, 0, 1], "{r:?}");
    assert_eq!(r.edns_udp, Some(edns_udp), "{r:?}");
    assert_eq!(
        r.answers,
        vec![
            rr("www.example.test.", "A", "198.18.5.10"),
            rr("www.example.test.", "A", "198.18.5.11")
        ]
    );
    // AAAA, the name in another case (answered with the case asked).
    let r = dig(net, server, "WWW.Example.TEST", "AAAA", &[]);
    assert_eq!((r.status.as_str(), &r.flags), ("NOERROR", &aa), "{r:?}");
    assert_eq!(r.counts, [1, 1, 0, 1], "{r:?}");
    assert_eq!(
        r.answers,
        vec![rr("WWW.Example.TEST.", "AAAA", "fd00:5::10")]
    );
    // Unknown name: NXDOMAIN, authoritative, nothing in it.
    let r = dig(net, server, "nope.example.test", "A", &[]);
    assert_eq!((r.status.as_str(), &r.flags), ("NXDOMAIN", &aa), "{r:?}");
    assert_eq!(r.counts, [1, 0, 0, 1], "{r:?}");
    assert!(r.answers.is_empty());
    // A known name without that type: NODATA.
    let r = dig(net, server, "v4only.example.test", "AAAA", &[]);
    assert_eq!((r.status.as_str(), &r.flags), ("NOERROR", &aa), "{r:?}");
    assert_eq!(r.counts, [1, 0, 0, 1], "{r:?}");
    // Outside the zone: REFUSED, not authoritative.
    let r = dig(net, server, "example.org", "A", &[]);
    assert_eq!(
        (r.status.as_str(), &r.flags),
        ("REFUSED", &vec!["qr".to_string()]),
        "{r:?}"
    );
    // 40 records: over 512 bytes without EDNS, so truncated (TC, no
    // answers; +ignore keeps dig from retrying over TCP).
    let r = dig(
        net,
        server,
        "big.example.test",
        "A",
        &["+noedns", "+ignore"],
    );
    let tc = vec!["qr".to_string(), "aa".to_string(), "tc".to_string()];
    assert_eq!((r.status.as_str(), &r.flags), ("NOERROR", &tc), "{r:?}");
    assert_eq!(r.counts, [1, 0, 0, 0], "{r:?}");
    assert_eq!(r.edns_udp, None);
    // With EDNS (dig's 1232 bytes) all 40 fit.
    let r = dig(net, server, "big.example.test", "A", &["+bufsize=1232"]);
    assert_eq!((r.status.as_str(), &r.flags), ("NOERROR", &aa), "{r:?}");
    assert_eq!(r.counts, [1, 40, 0, 1], "{r:?}");
    let want: Vec<_> = (1..=40)
        .map(|i| rr("big.example.test.", "A", &format!("198.18.6.{i}")))
        .collect();
    assert_eq!(r.answers, want);
    7
}

/// A running `udpdemux-dns`, killed if a failed test drops it.
struct Server {
    child: Option<Child>,
    out: BufReader<ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Not DNS, from a kernel socket in the namespace: 3 bytes (no header:
/// no reply), then a header claiming two questions and holding none
/// (FORMERR: the 12-byte header back, ID kept, QR and RCODE 1). How many
/// replies came (1).
fn garbage_checks(net: &netns::Net, server: &str) -> u64 {
    let script = format!(
        r#"
import socket
s = socket.socket(socket.AF_INET6 if ":" in "{server}" else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(b"\x12\x34\x00", ("{server}", 53))
s.sendto(bytes.fromhex("beef0100000200000000000000"), ("{server}", 53))
print(s.recv(4096).hex())
s.settimeout(0.5)
try:
    print("extra", s.recv(4096).hex())
except socket.timeout:
    pass
"#
    );
    let o = net.exec(&["python3", "-c", &script]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(out, "beef81010000000000000000\n");
    1
}

/// Start the server with `args` (in the namespace when `net` is given);
/// wait for its `ready` line.
fn server(net: Option<&netns::Net>, args: &[&str]) -> Server {
    let mut c = match net {
        Some(n) => {
            let mut c = n.command(&[SERVER]);
            c.args(args);
            c
        }
        None => {
            let mut c = Command::new(SERVER);
            c.args(args);
            c
        }
    };
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn udpdemux-dns");
    let out = BufReader::new(child.stdout.take().unwrap());
    // Dropped (killed) if this panics. The server prints `ready` or exits.
    let mut s = Server {
        child: Some(child),
        out,
    };
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        let n = s.out.read_line(&mut l).unwrap();
        if l.trim() == "ready" {
            return s;
        }
        seen.push_str(&l);
        assert!(n > 0, "udpdemux-dns never got ready: {seen}");
    }
}

/// SIGTERM, then the counters line it prints on the way out.
fn stop_server(mut s: Server) -> serde_json::Value {
    let mut child = s.child.take().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = wait_exit(
        &mut child,
        Duration::from_secs(20),
        "udpdemux-dns did not stop on SIGTERM",
        String::new,
    );
    assert!(status.success(), "udpdemux-dns exited {status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut s.out, &mut rest).unwrap();
    let line = rest
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no counters line: {rest}"));
    serde_json::from_str(line).unwrap()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// What both modes' counters must say after [`dig_checks`] on both families
/// and [`garbage_checks`] (one reply for two datagrams).
fn check_counters(c: &serde_json::Value, answers: u64) {
    assert_eq!(n(&c["queries"]), answers + 1, "{c}");
    assert_eq!(n(&c["responses"]), answers, "{c}");
    assert_eq!(n(&c["send_failed"]), 0, "{c}");
    assert_eq!(n(&c["ignored"]), 1, "{c}");
    // Per family: www A, www AAAA, NODATA, big truncated, big whole.
    assert_eq!(n(&c["noerror"]), 10, "{c}");
    assert_eq!((n(&c["nxdomain"]), n(&c["refused"])), (2, 2), "{c}");
    assert_eq!((n(&c["truncated"]), n(&c["formerr"])), (2, 1), "{c}");
    assert_eq!(n(&c["answer_records"]), 2 * (2 + 1 + 40), "{c}");
    // The serving loop allocated nothing (the binary counts: CountingAlloc).
    assert_eq!(n(&c["hot_path_allocations"]), 0, "{c}");
}

#[test]
fn dig_queries_the_dns_example_on_the_engine() {
    if !netns::can_run(&["ip", "ethtool", "sysctl", "dig"]) {
        return;
    }
    hugepages_ready(64).unwrap();
    let net = netns::Net::create("dns", "198.18.0.2/24", "fd00::2/64");
    // The RX lcore polls both queues; the main lcore transmits the
    // client's replies (its TX ring) on its own queue. The server binds
    // dns4 and opens dns6, a socket of the engine's config.
    let body = format!(
        r#"[engine]
duration_secs = 60

[mempool]
mbufs = 4095
cache = 128
{}
[[socket]]
name = "dns6"
local = "[fd00::1]:53"
handler = "none"
"#,
        veth_port("{port}")
    );
    let mut engine = Engine::start(
        "dns",
        &format!("net_af_packet0,iface={},qpairs=2", net.host),
        "net_af_packet0",
        Opts {
            lcores: "0@0,1@1".into(),
            ..Opts::body(body)
        },
    );
    let srv = server(
        None,
        &[
            "--zone",
            &zone_file(),
            &engine.prefix,
            "--bind",
            "dns4@198.18.0.1:53",
            "--open",
            "dns6",
        ],
    );
    let v4 = dig_checks(&net, "198.18.0.1", 1472) + garbage_checks(&net, "198.18.0.1");
    let v6 = dig_checks(&net, "fd00::1", 1452);
    let c = stop_server(srv);
    assert_eq!(c["mode"], "engine");
    check_counters(&c, v4 + v6);
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), v4, "{udp}");
    assert_eq!(n(&udp["Udp6OutDatagrams"]), v6, "{udp}");
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0, "{udp}");
    // Each query went to the server's socket and was taken by it; the
    // bound socket was unbound when it stopped, the opened one given back.
    for (name, want, removed) in [("dns4", 9, true), ("dns6", 7, false)] {
        let s = socket_named(&j, name);
        assert_eq!(
            (n(&s["delivered"]), n(&s["client_consumed"])),
            (want, want),
            "{s}"
        );
        assert_eq!(s["removed"], removed, "{s}");
    }
    let s = &j["send"];
    assert_eq!(n(&s["client_requests"]), v4 + v6, "{s}");
    assert_eq!(n(&j["udp"]["UdpInDatagrams"]), 9, "{}", j["udp"]);
}

#[test]
fn dig_queries_the_dns_example_on_kernel_sockets() {
    if !netns::can_run(&["ip", "ethtool", "sysctl", "dig"]) {
        return;
    }
    let net = netns::Net::create("dnk", "198.18.0.2/24", "fd00::2/64");
    let srv = server(
        Some(&net),
        &[
            "--zone",
            &zone_file(),
            "--kernel",
            "198.18.0.2:53",
            "--kernel",
            "[fd00::2]:53",
        ],
    );
    let v4 = dig_checks(&net, "198.18.0.2", 1452) + garbage_checks(&net, "198.18.0.2");
    let v6 = dig_checks(&net, "fd00::2", 1452);
    let c = stop_server(srv);
    assert_eq!(c["mode"], "kernel");
    check_counters(&c, v4 + v6);
}
