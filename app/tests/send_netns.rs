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
//! Datagrams over the 1500-byte MTU (1473 to 65 000 bytes) leave as
//! fragments the kernel must reassemble into the bytes sent.
//!
//! One EAL per process: this file holds one test.
#![cfg(not(loom))]
mod common;
#[path = "common/netns.rs"]
mod netns;
use common::n;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use udpdemux::api::{self, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::alloc_guard::{thread_hot_allocations, CountingAlloc, HotSection};
use udpdemux::runtime::engine::{Engine, RunOptions};

// The binary's counting allocator: send_burst must allocate nothing, and
// the engine's lcore loops (the RX lcore learning neighbours among them)
// report `hot_path_allocations` through it.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

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

/// Send `p` to `to` from `sock`; how many send_burst took. It must not
/// allocate (this thread is marked hot around the call alone).
fn send(tx: &api::Sender, sock: &udpdemux::socket::Socket, to: &str, p: &[String]) -> usize {
    let d: Vec<(SocketAddr, &[u8])> = p.iter().map(|x| (addr(to), x.as_bytes())).collect();
    let before = thread_hot_allocations();
    let hot = HotSection::enter();
    let n = api::send_burst(tx, sock, &d);
    drop(hot);
    assert_eq!(thread_hot_allocations() - before, 0, "send_burst allocated");
    n
}

/// The GSO payloads: 19 of 5 bytes and a shorter last one (the kernel's
/// `UDP_SEGMENT` rule), as one buffer.
fn gso_payloads(tag: &str) -> Vec<String> {
    let mut p = payloads(tag, 0..19);
    p.push(format!("{tag}end"));
    p
}

/// A GSO send of `p` (concatenated, cut every 5 bytes) with ECN `ecn`;
/// it must not allocate.
fn send_gso(
    tx: &api::Sender,
    sock: &udpdemux::socket::Socket,
    to: &str,
    p: &[String],
    ecn: u8,
) -> usize {
    let buf = p.concat();
    let before = thread_hot_allocations();
    let hot = HotSection::enter();
    let n = api::send_gso(tx, sock, addr(to), buf.as_bytes(), 5, ecn);
    drop(hot);
    assert_eq!(thread_hot_allocations() - before, 0, "send_gso allocated");
    n
}

/// Datagrams over the 1500-byte MTU (text, so the kernel side can print them).
const BIG: [usize; 4] = [1473, 3000, 9000, 65_000];

fn bigs(tag: &str) -> Vec<String> {
    BIG.iter()
        .map(|&len| {
            let unit = format!("{tag}{len:05}|");
            unit.repeat(len.div_ceil(unit.len()))[..len].to_string()
        })
        .collect()
}

#[test]
fn send_burst_resolves_delivers_expires_and_counts_every_sender() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    let t_start = Instant::now();
    let net = netns::Net::new("snd");
    let mut kernel = netns::Kernel::start(
        &net,
        &[
            "v4=198.18.0.2:7000",
            "v6=fd00::2:7000",
            "many4=198.18.0.2:7001",
            "many6=fd00::2:7001",
            "big4=198.18.0.2:7002",
            "big6=fd00::2:7002",
            "gso4=198.18.0.2:7003",
            "gso6=fd00::2:7003",
            "--echo",
            "198.18.0.1:7:300",
        ],
    );

    let dir = common::scratch("send-netns");
    // Three TX queues: the RX lcore (ARP/ND/ICMP replies), the consumer
    // lcore (echo) and the main lcore (send_burst's ring) each have one.
    let rest = r#"
[[lcore]]
id = 2
role = "consumer"

[[socket]]
name = "echo4"
local = "198.18.0.1:7"
handler = "echo"
rcvbuf = 4194304
"#;
    let text = netns::EngineToml::af_packet(&net, 3)
        .lcores("0@0,1@1,2@1")
        .text(common::eal, "send-netns", rest);
    let cfg = Config::load(&common::write(&dir, "c.toml", &text)).expect("config");
    let mut engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let tx4 = api::open(&engine, SocketOptions::new("tx4", addr("198.18.0.1:5000"))).unwrap();
    // A wildcard socket: its datagrams leave from the port's fd00::1.
    let tx6 = api::open(&engine, SocketOptions::new("tx6", addr("[::]:5001"))).unwrap();
    let tx = api::sender(&engine).expect("the port has addresses");
    let shared = std::sync::Arc::clone(engine.shared());
    let watch = std::sync::Arc::clone(engine.shared());
    let go = std::sync::Arc::new(AtomicBool::new(false));
    let go_flag = std::sync::Arc::clone(&go);

    let driver = std::thread::spawn(move || {
        let go = go_flag;
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
        // GSO: one buffer, 20 datagrams each, in order (ECN set per call).
        taken += send_gso(&tx, &tx4, "198.18.0.2:7003", &gso_payloads("g"), 2);
        taken += send_gso(&tx, &tx6, "[fd00::2]:7003", &gso_payloads("h"), 1);
        // Above the kernel's 64 segments: refused whole, counted as too big.
        assert_eq!(api::send_gso(&tx, &tx4, addr(PEER4), &[7u8; 65], 1, 0), 0);
        // Over the MTU: sent as fragments, one datagram each.
        for (sock, to, tag) in [
            (&tx4, "198.18.0.2:7002", "B"),
            (&tx6, "[fd00::2]:7002", "C"),
        ] {
            for p in bigs(tag) {
                taken += send(&tx, sock, to, &[p]);
            }
        }
        // Refused and counted: above what one IPv4 datagram holds, and
        // off-link (no gateway).
        let big = vec![0u8; 65_508];
        assert_eq!(api::send_burst(&tx, &tx4, &[(addr(PEER4), &big[..])]), 0);
        assert_eq!(
            api::send_burst(&tx, &tx4, &[(addr("198.19.0.1:7000"), &b"x"[..])]),
            0
        );
        // Three application threads at once, while the kernel's echo
        // traffic (started only now, so the kernel spoke first to neither
        // address above) is answered from the consumer lcore.
        go.store(true, Ordering::SeqCst);
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
    // timers), in slices, until the senders are done, the silent
    // neighbours have failed (three solicits a second apart), the kernel
    // has everything and the echo traffic had its second.
    let t0 = Instant::now();
    let mut go_at: Option<Instant> = None;
    loop {
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.05));
        if go_at.is_none() && go.load(Ordering::SeqCst) {
            kernel.say("go");
            go_at = Some(Instant::now());
        }
        let failed = watch.send.as_ref().unwrap().neigh_stats().failed;
        let got = kernel.wait_total(20 + 20 + 40 + 900 + 8, 0);
        let echo_done = go_at.is_some_and(|t| t.elapsed() > Duration::from_millis(1500));
        if (driver.is_finished() && failed >= 2 && got >= 988 && echo_done)
            || t0.elapsed() > Duration::from_secs(60)
        {
            break;
        }
    }
    drop(watch);
    let taken = driver.join().expect("driver");
    let summary = engine.stop().expect("engine stops");
    let k = kernel.finish();
    let j = serde_json::to_value(&summary).unwrap();
    eprintln!("took {:?}", t_start.elapsed());

    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
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
    // The GSO sends: 20 datagrams each, in order, the last one shorter.
    assert_eq!(strs(&k["got"]["gso4"]), gso_payloads("g"));
    assert_eq!(strs(&k["got"]["gso6"]), gso_payloads("h"));
    assert_eq!(strs(&k["from"]["gso6"]), vec!["fd00::1:5001"]);
    // ECN set per call: ECT(0) on the IPv4 send, ECT(1) on the IPv6 one,
    // not-ECT on send_burst's.
    assert_eq!(k["ecn"]["gso4"], serde_json::json!([2]));
    assert_eq!(k["ecn"]["gso6"], serde_json::json!([1]));
    assert_eq!(k["ecn"]["v4"], serde_json::json!([0]));
    assert_eq!(k["ecn"]["v6"], serde_json::json!([0]));
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

    // The fragmented ones, whole, byte for byte.
    assert_eq!(strs(&k["got"]["big4"]), bigs("B"));
    assert_eq!(strs(&k["got"]["big6"]), bigs("C"));
    assert_eq!(strs(&k["from"]["big6"]), vec!["fd00::1:5001"]);

    let s = &j["send"];
    let neigh = &s["neigh"];
    assert_eq!(taken, 3 + 3 + 5 + 5 + 17 + 17 + 40 + 900 + 8);
    // Frames: every fragment of the big ones is one.
    let made = |v6: bool| {
        BIG.iter()
            .map(|&p| common::fragments(v6, p, 1500))
            .sum::<u64>()
    };
    assert_eq!(
        (n(&s["accepted"][0]), n(&s["accepted"][1])),
        (
            3 + 5 + 17 + 20 + 600 + made(false),
            3 + 5 + 17 + 20 + 300 + made(true)
        )
    );
    assert_eq!(
        (n(&s["accepted_later"][0]), n(&s["accepted_later"][1])),
        (made(false) - 4, made(true) - 4)
    );
    assert_eq!(
        (n(&s["out_datagrams"][0]), n(&s["out_datagrams"][1])),
        (20 + 20 + 600 + 4, 20 + 20 + 300 + 4)
    );
    assert_eq!(
        (n(&s["out_later"][0]), n(&s["out_later"][1])),
        (made(false) - 4, made(true) - 4)
    );
    let ip = &j["ip"];
    assert_eq!(
        (n(&ip["IpFragOKs"]), n(&ip["IpFragCreates"])),
        (4, made(false)),
        "{ip}"
    );
    assert_eq!(
        (n(&ip["Ip6FragOKs"]), n(&ip["Ip6FragCreates"])),
        (4, made(true)),
        "{ip}"
    );
    assert_eq!(n(&ip["IpFragFails"]) + n(&ip["Ip6FragFails"]), 0, "{ip}");
    assert_eq!((n(&s["too_big"][0]), n(&s["no_route"][0])), (1 + 65, 1));
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
    let echo_got = n(&k["echo_got"]);
    assert_eq!(n(&k["echo_sent"]), 300);
    let echo = common::socket_named(&j, "echo4");
    assert!(echo_got > 0, "no echo reply: {echo} {}", j["ports"]);
    assert_eq!(n(&echo["tx"]), echo_got, "{echo}");
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), 20 + 20 + 600 + 4 + echo_got);
    assert_eq!(n(&udp["Udp6OutDatagrams"]), 20 + 20 + 300 + 4);
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0);
    assert_eq!(n(&udp["Udp6SndbufErrors"]), 0);
}
