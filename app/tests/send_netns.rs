//! `send_burst` end to end, with the kernel as the receiver: the engine runs
//! in this test's process on one end of a veth pair (`net_af_packet`), the
//! other end is in a network namespace made here, where kernel UDP sockets
//! receive. No static neighbour entries anywhere: the engine must resolve
//! 198.18.0.2 by ARP and fd00::2 by neighbour discovery before it can
//! deliver, and addresses nobody holds (198.18.0.99, fd00::99) must see
//! their queues bounded and expired, counted exactly.
//!
//! At the same time the kernel pings an `echo` socket served by a consumer
//! lcore (its own TX queue), while three application threads call
//! `send_burst` (drained by the main lcore on its TX queue): the exit
//! JSON's `UdpOutDatagrams` must be exactly what the kernel received.
//!
//! One EAL per process: this file holds one test.
#![cfg(not(loom))]
mod common;
#[path = "common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use udpdemux::api::{self, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};

/// The kernel side: receivers on 198.18.0.2 / fd00::2 ports 7000 (the
/// resolution test) and 7001 (the concurrent senders), and an echo client
/// to the engine's echo socket, started by a line on stdin. Runs for
/// argv[1] seconds, prints JSON.
const KERNEL: &str = r#"
import json, select, socket, sys, time
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
dur, echo_n = float(sys.argv[1]), int(sys.argv[2])
def rx(fam, addr, port):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.bind((addr, port))
    s.setblocking(False)
    return s
socks = {
    "v4": rx(socket.AF_INET, "198.18.0.2", 7000),
    "v6": rx(socket.AF_INET6, "fd00::2", 7000),
    "many4": rx(socket.AF_INET, "198.18.0.2", 7001),
    "many6": rx(socket.AF_INET6, "fd00::2", 7001),
}
echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
echo.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
echo.setblocking(False)
got = {k: [] for k in socks}
frm = {k: [] for k in socks}
echo_sent, echo_got = 0, []
print("ready", flush=True)
t0 = time.time()
next_echo = None  # set by a line on stdin: after the resolution checks
names = {s: k for k, s in socks.items()}
while time.time() < t0 + dur:
    now = time.time()
    if next_echo is not None and echo_sent < echo_n and now >= next_echo:
        try:
            echo.sendto(b"echo%05d" % echo_sent, ("198.18.0.1", 7))
            echo_sent += 1
        except BlockingIOError:
            pass  # still resolving the engine's MAC: again at the next tick
        next_echo = now + 0.003
    r, _, _ = select.select(list(socks.values()) + [echo, sys.stdin], [], [], 0.001)
    if sys.stdin in r:
        sys.stdin.readline()
        next_echo = time.time()
        r.remove(sys.stdin)
    for s in r:
        while True:
            try:
                data, src = s.recvfrom(65535)
            except BlockingIOError:
                break
            if s is echo:
                echo_got.append(data.decode())
            else:
                k = names[s]
                got[k].append(data.decode())
                a = "%s:%d" % (src[0], src[1])
                if a not in frm[k]:
                    frm[k].append(a)
print(json.dumps({"got": got, "from": frm, "echo_sent": echo_sent, "echo_got": echo_got}), flush=True)
"#;

const PEER4: &str = "198.18.0.2:7000";
const PEER6: &str = "[fd00::2]:7000";
const SILENT4: &str = "198.18.0.99:7000";
const SILENT6: &str = "[fd00::99]:7000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn payloads(tag: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{tag}{i:04}")).collect()
}

/// Send `p` to `to` from `sock`; how many send_burst took.
fn send(tx: &api::Sender, sock: &udpdemux::socket::Socket, to: &str, p: &[String]) -> usize {
    let d: Vec<(SocketAddr, &[u8])> = p.iter().map(|x| (addr(to), x.as_bytes())).collect();
    api::send_burst(tx, sock, &d)
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn send_burst_resolves_delivers_expires_and_counts_every_sender() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    let t_start = Instant::now();
    let net = netns::Net::create("snd", "198.18.0.2/24", "fd00::2/64");
    let mut kernel = net
        .command(&["python3", "-c", KERNEL, "13", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 in the namespace");
    let mut go = kernel.stdin.take().unwrap();
    let mut out = BufReader::new(kernel.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    let dir = common::scratch("send-netns");
    // Three TX queues: the RX lcore (ARP/ND/ICMP replies), the consumer
    // lcore (echo) and the main lcore (send_burst's ring) each have one.
    let eal = common::eal(
        "send-netns",
        &[&format!("net_af_packet0,iface={},qpairs=3", net.host)],
    )
    .replace("lcores = \"0,1\"", "lcores = \"0@0,1@1,2@1\"");
    let text = format!(
        r#"{eal}
[engine]
stats_interval_ms = 1000

[mempool]
mbufs = 4095
cache = 64

[[port]]
name = "net_af_packet0"
rx_queues = 3
tx_queues = 3
rx_checksum_offload = false
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_af_packet0:0", "net_af_packet0:1", "net_af_packet0:2"]

[[lcore]]
id = 2
role = "consumer"

[[socket]]
name = "echo4"
local = "198.18.0.1:7"
handler = "echo"
rcvbuf = 4194304
"#
    );
    let cfg = Config::load(&common::write(&dir, "c.toml", &text)).expect("config");
    let mut engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let tx4 = api::open(&engine, SocketOptions::new("tx4", addr("198.18.0.1:5000"))).unwrap();
    // A wildcard socket: its datagrams leave from the port's fd00::1.
    let tx6 = api::open(&engine, SocketOptions::new("tx6", addr("[::]:5001"))).unwrap();
    let tx = api::sender(&engine).expect("the port has addresses");
    let shared = std::sync::Arc::clone(engine.shared());

    let driver = std::thread::spawn(move || {
        let path = shared.send.as_ref().unwrap();
        let mut taken = 0usize;
        // Unresolved: at most unres_qlen (3) wait per neighbour; exactly 3
        // to each peer, so none gives way; 5 to each silent address.
        taken += send(&tx, &tx4, PEER4, &payloads("a", 0..3));
        taken += send(&tx, &tx6, PEER6, &payloads("b", 0..3));
        taken += send(&tx, &tx4, SILENT4, &payloads("s", 0..5));
        taken += send(&tx, &tx6, SILENT6, &payloads("t", 0..5));
        let deadline = Instant::now() + Duration::from_secs(5);
        while path.neigh_stats().resolved < 2 {
            assert!(
                Instant::now() < deadline,
                "not resolved: {:?}",
                path.neigh_stats()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Resolved: the rest goes straight out, after the held three.
        taken += send(&tx, &tx4, PEER4, &payloads("a", 3..20));
        taken += send(&tx, &tx6, PEER6, &payloads("b", 3..20));
        // Refused and counted: above the MTU, and off-link (no gateway).
        let big = vec![0u8; 1473];
        assert_eq!(api::send_burst(&tx, &tx4, &[(addr(PEER4), &big[..])]), 0);
        assert_eq!(
            api::send_burst(&tx, &tx4, &[(addr("198.19.0.1:7000"), &b"x"[..])]),
            0
        );
        // Three application threads at once, while the kernel's echo
        // traffic (started only now, so the kernel spoke first to neither
        // address above) is answered from the consumer lcore.
        writeln!(go, "go").unwrap();
        let many: Vec<_> = [
            ("m", &tx4, "198.18.0.2:7001"),
            ("n", &tx4, "198.18.0.2:7001"),
            ("o", &tx6, "[fd00::2]:7001"),
        ]
        .into_iter()
        .map(|(tag, sock, to)| {
            let (tx, sock) = (tx.clone(), std::sync::Arc::clone(sock));
            std::thread::spawn(move || {
                let mut t = 0;
                for k in 0..30 {
                    t += send(&tx, &sock, to, &payloads(tag, k * 10..k * 10 + 10));
                    std::thread::sleep(Duration::from_millis(20));
                }
                t
            })
        })
        .collect();
        for h in many {
            taken += h.join().unwrap();
        }
        taken
    });
    // The main lcore's loop (it drains the TX ring and runs the neighbour
    // timers) for 9 s from start: long enough for the silent neighbours to
    // fail (three solicits a second apart).
    engine.main_loop(Some(9.0));
    let taken = driver.join().expect("driver");
    let summary = engine.stop().expect("engine stops");
    let status = kernel.wait().unwrap();
    let mut json = String::new();
    out.read_line(&mut json).unwrap();
    assert!(status.success(), "kernel side failed");
    let k: serde_json::Value = serde_json::from_str(&json).expect("kernel JSON");
    let j = serde_json::to_value(&summary).unwrap();
    eprintln!("took {:?}", t_start.elapsed());

    assert!(summary.books_balanced, "{:?}", summary.problems);
    // Resolved and delivered, exactly, in order, from the right sources.
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(strs(&k["got"]["v4"]), payloads("a", 0..20));
    assert_eq!(strs(&k["got"]["v6"]), payloads("b", 0..20));
    assert_eq!(strs(&k["from"]["v4"]), vec!["198.18.0.1:5000"]);
    assert_eq!(strs(&k["from"]["v6"]), vec!["fd00::1:5001"]);
    // Every concurrent datagram once.
    let mut many4 = strs(&k["got"]["many4"]);
    many4.sort();
    let mut want4 = payloads("m", 0..300);
    want4.extend(payloads("n", 0..300));
    want4.sort();
    assert_eq!(many4, want4);
    let mut many6 = strs(&k["got"]["many6"]);
    many6.sort();
    assert_eq!(many6, payloads("o", 0..300));

    let s = &j["send"];
    let neigh = &s["neigh"];
    assert_eq!(taken, 3 + 3 + 5 + 5 + 17 + 17 + 900);
    assert_eq!(
        (n(&s["accepted"][0]), n(&s["accepted"][1])),
        (3 + 5 + 17 + 600, 3 + 5 + 17 + 300)
    );
    assert_eq!(
        (n(&s["out_datagrams"][0]), n(&s["out_datagrams"][1])),
        (20 + 600, 20 + 300)
    );
    assert_eq!((n(&s["too_big"][0]), n(&s["no_route"][0])), (1, 1));
    // The silent neighbours: 3 held and 2 gave way each, then the 3 expired.
    assert_eq!(n(&neigh["unres_discards"]), 4, "{s}");
    assert_eq!(n(&neigh["expired"]), 6, "{s}");
    assert_eq!(n(&neigh["failed"]), 2, "{s}");
    assert_eq!(n(&neigh["resolved"]), 2, "{s}");
    assert_eq!(n(&neigh["table_full"]), 0, "{s}");
    assert_eq!(n(&neigh["queued"]), 3 + 3 + 5 + 5, "{s}");
    assert_eq!(n(&neigh["released"]), 6, "{s}");
    assert_eq!(n(&s["freed_at_stop"]), 0, "{s}");
    // First solicits and two retries for each silent address.
    assert!(n(&neigh["solicits"]) >= 2 + 3 * 2, "{s}");
    assert_eq!(n(&s["solicits_sent"]), n(&neigh["solicits"]), "{s}");

    // The MIB: UdpOutDatagrams is what the kernel received, echo replies
    // from the consumer lcore included.
    let echo_got = k["echo_got"].as_array().unwrap().len() as u64;
    assert_eq!(n(&k["echo_sent"]), 300);
    let echo = common::socket_named(&j, "echo4");
    assert!(echo_got > 0, "no echo reply: {echo} {}", j["ports"]);
    assert_eq!(n(&echo["tx"]), echo_got, "{echo}");
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), 20 + 600 + echo_got);
    assert_eq!(n(&udp["Udp6OutDatagrams"]), 20 + 300);
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0);
    assert_eq!(n(&udp["Udp6SndbufErrors"]), 0);
}
