//! The neighbour table learns from traffic (issue 17): a kernel client in a
//! network namespace, which knows the engine's MAC from a permanent entry
//! (so it never sends an ARP request or a neighbour solicitation the
//! engine could learn from), sends one datagram over IPv4 and one over
//! IPv6 to engine sockets. The application answers each with `send_burst`
//! to the datagram's source: the reply must go out at once, with no
//! solicit and nothing held, because the RX lcore reported the source's
//! MAC to the table. Beside them, a static entry (`[[neighbour.static]]`)
//! sends with no solicit either, and an address that never spoke needs one
//! (the counters tell the three apart). The RX path's learning allocates
//! nothing (`hot_path_allocations`).
//!
//! One EAL per process: this file holds one test.
#![cfg(not(loom))]
mod common;
#[path = "common/netns.rs"]
mod netns;
use common::n;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use udpdemux::api::{self, RecvBatch, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::alloc_guard::CountingAlloc;
use udpdemux::runtime::engine::{Engine, RunOptions};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn a_reply_to_a_datagram_needs_no_solicit() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    let net = netns::Net::new("lrn");
    // Two more addresses of the kernel's: one only a static entry knows,
    // one the engine must resolve.
    for a in ["198.18.0.3/24", "198.18.0.4/24"] {
        net.add_addr(a);
    }
    let engine_mac = net.host_mac();
    for ip in [netns::ENGINE_V4, netns::ENGINE_V6] {
        net.neigh_permanent(ip, &engine_mac);
    }
    let peer_mac = net.peer_mac();
    let mut kernel = netns::Kernel::start(
        &net,
        &[
            "v4=198.18.0.2:7000",
            "v6=fd00::2:7000",
            "stat=198.18.0.4:7000",
            "quiet=198.18.0.3:7000",
        ],
    );

    let dir = common::scratch("send-learn");
    // Two queue pairs: the RX lcore (control replies) and the main lcore
    // (send_burst's ring) each transmit on their own.
    let rest = format!(
        r#"
[neighbour]
unres_qlen = 4

[[neighbour.static]]
ip = "198.18.0.4"
mac = "{peer_mac}"
"#
    );
    let text = netns::EngineToml::af_packet(&net, 2)
        .lcores("0@0,1@1")
        .no_periodic_stats()
        .mbufs(2047)
        .text(common::eal, "send-learn", &rest);
    let cfg = Config::load(&common::write(&dir, "c.toml", &text)).expect("config");
    let mut engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let srv4 = api::open(&engine, SocketOptions::new("srv4", addr("198.18.0.1:9000"))).unwrap();
    let srv6 = api::open(&engine, SocketOptions::new("srv6", addr("[fd00::1]:9000"))).unwrap();
    let tx = api::sender(&engine).expect("the port has addresses");

    let t0 = Instant::now();
    let mut hello_at: Option<Instant> = None;
    let mut batch = RecvBatch::new();
    let mut replied = Vec::new();
    let mut extra_sent = false;
    loop {
        // Until the engine has both (the veth's first frames may be lost
        // while its ends come up): said again every 200 ms.
        if replied.len() < 2 && hello_at.is_none_or(|t| t.elapsed() > Duration::from_millis(200)) {
            if !replied.contains(&addr("198.18.0.2:7000")) {
                kernel.say("send v4 198.18.0.1 9000 hello4");
            }
            if !replied.contains(&addr("[fd00::2]:7000")) {
                kernel.say("send v6 fd00::1 9000 hello6");
            }
            hello_at = Some(Instant::now());
        }
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.02));
        for sock in [&srv4, &srv6] {
            api::recv_burst(sock, &mut batch);
            let got: Vec<(SocketAddr, Vec<u8>)> = batch
                .iter()
                .map(|r| (r.src(), r.payload().to_vec()))
                .collect();
            batch.clear();
            for (src, p) in got {
                if replied.contains(&src) {
                    continue;
                }
                let mut reply = b"re:".to_vec();
                reply.extend_from_slice(&p);
                assert_eq!(api::send_burst(&tx, sock, &[(src, &reply[..])]), 1);
                replied.push(src);
            }
        }
        if replied.len() == 2 && !extra_sent {
            // After the replies: to the static entry, and to the address
            // that never spoke.
            assert_eq!(
                api::send_from(
                    &tx,
                    addr("198.18.0.1:9001"),
                    &[(addr("198.18.0.4:7000"), &b"static"[..])]
                ),
                1
            );
            assert_eq!(
                api::send_from(
                    &tx,
                    addr("198.18.0.1:9001"),
                    &[(addr("198.18.0.3:7000"), &b"quiet"[..])]
                ),
                1
            );
            extra_sent = true;
        }
        if kernel.wait_total(4, 0) >= 4 || t0.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    eprintln!(
        "replied {replied:?} after {:?}; {:?}",
        t0.elapsed(),
        engine.shared().send.as_ref().unwrap().neigh_stats()
    );
    // The table's state before the engine stops.
    let shared = std::sync::Arc::clone(engine.shared());
    let path = shared.send.as_ref().unwrap();
    let neigh = path.neigh.lock().unwrap();
    use udpdemux::neigh::State;
    let st = |ip: &str| neigh.get(0, ip.parse().unwrap()).map(|(s, _)| s);
    assert_eq!(st("198.18.0.2"), Some(State::Stale), "learned from traffic");
    assert_eq!(st("fd00::2"), Some(State::Stale), "learned from traffic");
    assert_eq!(st("198.18.0.4"), Some(State::Permanent));
    assert_eq!(st("198.18.0.3"), Some(State::Reachable), "resolved by ARP");
    drop(neigh);
    drop(shared);
    let summary = engine.stop().expect("engine stops");
    let k = kernel.finish();
    let j = serde_json::to_value(&summary).unwrap();

    assert_eq!(
        replied,
        vec![addr("198.18.0.2:7000"), addr("[fd00::2]:7000")]
    );
    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
    assert_eq!(k["got"]["v4"], serde_json::json!(["re:hello4"]), "{k}");
    assert_eq!(k["got"]["v6"], serde_json::json!(["re:hello6"]), "{k}");
    assert_eq!(k["got"]["stat"], serde_json::json!(["static"]), "{k}");
    assert_eq!(k["got"]["quiet"], serde_json::json!(["quiet"]), "{k}");
    assert_eq!(k["from"]["v4"], serde_json::json!(["198.18.0.1:9000"]));

    let s = &j["send"];
    let nb = &s["neigh"];
    // The kernel never asked for the engine's MAC, so only traffic taught it.
    assert_eq!(n(&j["responder"]["arp_replies"]), 0, "{}", j["responder"]);
    assert_eq!(
        n(&j["responder"]["nd_advertisements"]),
        0,
        "{}",
        j["responder"]
    );
    assert_eq!(n(&nb["from_traffic"]), 2, "{s}");
    assert_eq!(n(&nb["permanent"]), 1, "{s}");
    assert!(n(&s["heard_reported"]) >= 2, "{s}");
    assert_eq!(n(&s["heard_dropped"]), 0, "{s}");
    assert_eq!(n(&s["heard_taken"]), n(&s["heard_reported"]), "{s}");
    // One solicit in all, for the address that never spoke, and one
    // datagram held behind it: the replies and the static entry's went
    // straight out.
    assert_eq!(n(&nb["solicits"]), 1, "{s}");
    assert_eq!(n(&s["solicits_sent"]), 1, "{s}");
    assert_eq!(n(&nb["queued"]), 1, "{s}");
    assert_eq!(n(&nb["resolved"]), 1, "{s}");
    assert_eq!(
        (n(&s["out_datagrams"][0]), n(&s["out_datagrams"][1])),
        (3, 1),
        "{s}"
    );
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), 3);
    assert_eq!(n(&udp["Udp6OutDatagrams"]), 1);
}
