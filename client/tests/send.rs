//! `ClientSocket::send_burst` (issue 17): a client process sends through a
//! running engine (`udpdemux run` on `net_af_packet`, one end of a veth
//! pair) to kernel sockets in a network namespace made here. The engine
//! resolves the kernel's addresses by ARP and neighbour discovery (no
//! static neighbours), builds the frames from the client's requests and
//! transmits them from its main lcore, while a consumer lcore answers the
//! kernel's echo traffic on its own TX queue. The kernel must receive
//! exactly what was sent, and the exit JSON's `UdpOutDatagrams` must be
//! exactly what the kernel received. Datagrams over the 1500-byte MTU,
//! up to the largest one IP datagram holds, go as chained requests the
//! engine fragments: the kernel must reassemble them into the bytes sent,
//! and the fragmentation counters must be exact. This test's process is
//! the client (one EAL per process: one test in this file).
mod common;
use common::*;
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::net::SocketAddr;
use std::time::Duration;

use udpdemux_client::Client;

fn payloads(tag: &str, r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("{tag}{i:04}")).collect()
}

fn send(sock: &udpdemux_client::ClientSocket<'_>, to: &str, p: &[String]) -> usize {
    let to: SocketAddr = to.parse().unwrap();
    let d: Vec<(SocketAddr, &[u8])> = p.iter().map(|x| (to, x.as_bytes())).collect();
    sock.send_burst(&d)
}

/// Datagrams over the MTU, the largest of each family last (text, so the
/// kernel side can print them).
const BIG: [usize; 4] = [1473, 3000, 9000, 65_000];
const MAX4: usize = 65_507;
const MAX6: usize = 65_527;

fn big(tag: &str, len: usize) -> String {
    let unit = format!("{tag}{len:05}|");
    unit.repeat(len.div_ceil(unit.len()))[..len].to_string()
}

fn bigs(tag: &str, max: usize) -> Vec<String> {
    BIG.iter().chain([&max]).map(|&len| big(tag, len)).collect()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_client_sends_through_the_engine_to_kernel_sockets() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    hugepages_ready(64).unwrap();
    let net = netns::Net::new("csd");
    let mut kernel = netns::Kernel::start(
        &net,
        &[
            "v4=198.18.0.2:7000",
            "v6=fd00::2:7000",
            "gso4=198.18.0.2:7003",
            "gso6=fd00::2:7003",
            "big4=198.18.0.2:7002",
            "big6=fd00::2:7002",
            "--echo",
            "198.18.0.1:7:300",
        ],
    );

    // Three queue pairs: the RX lcore, the consumer lcore (echo) and the
    // main lcore (the clients' TX rings) each transmit on their own.
    let body = r#"[engine]
duration_secs = 60

[mempool]
mbufs = 4095
cache = 128

[[port]]
name = "{port}"
rx_queues = 3
tx_queues = 3
rx_checksum_offload = false
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0", "{port}:1", "{port}:2"]

[[lcore]]
id = 2
role = "consumer"

[[socket]]
name = "echo4"
local = "198.18.0.1:7"
handler = "echo"
rcvbuf = 4194304
"#;
    let mut engine = Engine::start(
        "send",
        &format!("net_af_packet0,iface={},qpairs=3", net.host),
        "net_af_packet0",
        Opts {
            lcores: "0@0,1@1,2@1".into(),
            ..Opts::body(body)
        },
    );
    let client = Client::attach(&engine.prefix).expect("attach");
    let o =
        |name: &str, local: &str| udpdemux::api::SocketOptions::new(name, local.parse().unwrap());
    let s4 = client
        .bind(o("ctx4", "198.18.0.1:6000"))
        .expect("bind ctx4");
    // A wildcard socket: the engine sends from the port's fd00::1.
    let s6 = client.bind(o("ctx6", "[::]:6001")).expect("bind ctx6");
    // Unresolved: three each (unres_qlen), none gives way.
    assert_eq!(send(&s4, "198.18.0.2:7000", &payloads("c", 0..3)), 3);
    assert_eq!(send(&s6, "[fd00::2]:7000", &payloads("d", 0..3)), 3);
    // Resolved and delivered (the kernel spoke first to neither address:
    // its echo traffic starts only now).
    assert_eq!(kernel.wait_total(6, 20), 6, "the first six arrive");
    kernel.say("go");
    // Sent while the kernel's echo traffic is answered from the consumer lcore.
    for k in 0..20 {
        let r = k * 10 + 3..k * 10 + 13;
        assert_eq!(send(&s4, "198.18.0.2:7000", &payloads("c", r.clone())), 10);
        assert_eq!(send(&s6, "[fd00::2]:7000", &payloads("d", r)), 10);
        std::thread::sleep(Duration::from_millis(50));
    }
    // GSO from the client: one buffer each, 20 datagrams (the last
    // shorter), ECN per call, in order.
    let gso = |tag: &str| -> Vec<String> {
        let mut p = payloads(tag, 0..19);
        p.push(format!("{tag}end"));
        p
    };
    let dst4: std::net::SocketAddr = "198.18.0.2:7003".parse().unwrap();
    let dst6: std::net::SocketAddr = "[fd00::2]:7003".parse().unwrap();
    assert_eq!(s4.send_gso(dst4, gso("g").concat().as_bytes(), 5, 2), 20);
    assert_eq!(s6.send_gso(dst6, gso("h").concat().as_bytes(), 5, 1), 20);
    // More than 64 segments: refused whole, nothing handed over.
    assert_eq!(s4.send_gso(dst4, &[1u8; 65], 1, 0), 0);
    // Over the MTU: one chained request each, fragmented by the engine.
    // One byte more than an IP datagram holds is refused by the client.
    for (sock, to, tag, max) in [
        (&s4, "198.18.0.2:7002", "B", MAX4),
        (&s6, "[fd00::2]:7002", "C", MAX6),
    ] {
        let b = bigs(tag, max);
        assert_eq!(send(sock, to, &b), b.len(), "{tag}");
        let over = vec![b'x'; max + 1];
        assert_eq!(sock.send_burst(&[(to.parse().unwrap(), &over[..])]), 0);
    }
    // Everything arrived before the sockets close (a closed client's
    // ring is freed, counted as `client_freed`).
    assert_eq!(kernel.wait_total(456, 30), 456);
    std::thread::sleep(Duration::from_millis(500));
    s4.close().expect("close ctx4");
    s6.close().expect("close ctx6");
    client.detach();
    let j = engine.stop();
    let k = kernel.finish();

    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    // The main lcore turned the requests into frames and fragments
    // without allocating (it runs that part hot).
    assert_eq!(n(&j["hot_path_allocations"]), 0);
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(strs(&k["got"]["v4"]), payloads("c", 0..203));
    assert_eq!(strs(&k["got"]["v6"]), payloads("d", 0..203));
    assert_eq!(strs(&k["from"]["v4"]), vec!["198.18.0.1:6000"]);
    assert_eq!(strs(&k["from"]["v6"]), vec!["fd00::1:6001"]);
    assert_eq!(strs(&k["got"]["gso4"]), gso("g"));
    assert_eq!(strs(&k["got"]["gso6"]), gso("h"));
    assert_eq!(k["ecn"]["gso4"], serde_json::json!([2]));
    assert_eq!(k["ecn"]["gso6"], serde_json::json!([1]));
    assert_eq!(k["ecn"]["v4"], serde_json::json!([0]));
    // Reassembled by the kernel, byte for byte.
    assert_eq!(strs(&k["got"]["big4"]), bigs("B", MAX4));
    assert_eq!(strs(&k["got"]["big6"]), bigs("C", MAX6));
    assert_eq!(strs(&k["from"]["big4"]), vec!["198.18.0.1:6000"]);
    assert_eq!(strs(&k["from"]["big6"]), vec!["fd00::1:6001"]);
    let s = &j["send"];
    assert_eq!(n(&s["client_requests"]), 406 + 40 + 10, "{s}");
    assert_eq!(
        (n(&s["bad_requests"]), n(&s["client_freed"])),
        (0, 0),
        "{s}"
    );
    // Frames: every fragment of the big ones is one.
    let made = |v6: bool, max: usize| {
        BIG.iter()
            .chain([&max])
            .map(|&p| fragments(v6, p, 1500))
            .sum::<u64>()
    };
    let (made4, made6) = (made(false, MAX4), made(true, MAX6));
    assert_eq!(
        (n(&s["accepted"][0]), n(&s["accepted"][1])),
        (203 + 20 + made4, 203 + 20 + made6),
        "{s}"
    );
    assert_eq!(
        (n(&s["accepted_later"][0]), n(&s["accepted_later"][1])),
        (made4 - 5, made6 - 5),
        "{s}"
    );
    assert_eq!(
        (n(&s["out_datagrams"][0]), n(&s["out_datagrams"][1])),
        (203 + 20 + 5, 203 + 20 + 5),
        "{s}"
    );
    assert_eq!(
        (n(&s["out_later"][0]), n(&s["out_later"][1])),
        (made4 - 5, made6 - 5),
        "{s}"
    );
    assert_eq!((n(&s["too_big"][0]), n(&s["too_big"][1])), (0, 0), "{s}");
    let ip = &j["ip"];
    for (pre, made) in [("Ip", made4), ("Ip6", made6)] {
        let c = |name: &str| n(&ip[format!("{pre}{name}")]);
        assert_eq!(
            (c("FragOKs"), c("FragCreates"), c("FragFails")),
            (5, made, 0),
            "{ip}"
        );
    }
    assert_eq!(n(&s["neigh"]["resolved"]), 2, "{s}");
    assert_eq!(n(&s["neigh"]["released"]), 6, "{s}");
    let echo_got = n(&k["echo_got"]);
    assert_eq!(n(&k["echo_sent"]), 300);
    // Some of the echo traffic overlapped the client's sends (all of it,
    // unless the machine is so busy the engine's lcores, which share a
    // CPU here, miss frames: those are not sent, so not counted either).
    let echo = socket_named(&j, "echo4");
    assert!(echo_got > 0, "no echo reply: {echo} {}", j["ports"]);
    assert_eq!(n(&echo["tx"]), echo_got, "{echo}");
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), 228 + echo_got, "{udp}");
    assert_eq!(n(&udp["Udp6OutDatagrams"]), 228, "{udp}");
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0, "{udp}");
}
