//! The embedding API hands out `Arc<Socket>`s, so an application may keep a
//! socket and a receive batch after `Engine::stop` has cleaned up the EAL.
//! Receiving on it, and dropping both, must then leave the unmapped DPDK
//! memory alone (dropping the socket used to read its ring there and die
//! with SIGSEGV). While it runs, `api::stats` reads any socket's counters
//! by name (the in-process twin of a client's `stats`) and refuses an
//! unknown name in one line. The engine runs in this test's own process: one EAL per
//! process, so this file holds one test.
#![cfg(not(loom))]
mod common;

use udpdemux::api::{self, RecvBatch, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};

#[test]
fn a_socket_and_a_batch_held_past_stop_are_inert() {
    let dir = common::scratch("api-lifetime");
    let text = format!(
        "{}\n[[port]]\nname = \"net_null0\"\nrx_queues = 1\n\n\
         [[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n\n{}",
        common::eal("api-lifetime", &["net_null0"]),
        common::socket_toml("cfg", "198.18.1.1:53", "")
    );
    let path = common::write(&dir, "c.toml", &text);
    let cfg = Config::load(&path).expect("config");
    let engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let sock = api::open(
        &engine,
        SocketOptions::new("held", "198.18.1.2:5000".parse().unwrap()),
    )
    .expect("socket opens");
    let mut batch = RecvBatch::new();
    // net_null sends nothing to it: nothing to receive, but the batch now
    // refers to the socket.
    assert_eq!(api::recv_burst(&sock, &mut batch), 0);
    // In-process stats (`api::stats`, the type a client's `stats` gives):
    // any live socket by name, and a clear refusal for an unknown one.
    let held = api::stats(&engine, "held").expect("stats of held");
    assert_eq!(held.id, sock.id);
    assert_eq!(held.local, "198.18.1.2:5000".parse().unwrap());
    assert_eq!((held.handler.as_str(), held.client_pid), ("none", 0));
    assert_eq!((held.delivered, held.ring_count, held.rmem), (0, 0, 0));
    assert!(held.ring_size >= 4095 && held.rcvbuf == 212_992, "{held:?}");
    let cfg_stats = api::stats(&engine, "cfg").expect("stats of cfg");
    assert_eq!(cfg_stats.local, "198.18.1.1:53".parse().unwrap());
    let e = api::stats(&engine, "nosuch").unwrap_err().to_string();
    assert_eq!(
        e,
        "no stats for socket \"nosuch\": no socket named \"nosuch\" in this engine (its sockets: cfg, held)"
    );
    let summary = engine.stop().expect("engine stops");
    assert!(summary.books_balanced, "{:?}", summary.problems);
    // Nothing flowed after the read: it is the exit's row.
    let row = summary.sockets.iter().find(|s| s.name == "held").unwrap();
    assert_eq!(
        (
            held.offered,
            held.delivered,
            held.consumed,
            held.rcvbuf,
            held.rmem_high_water
        ),
        (
            row.offered,
            row.delivered,
            row.consumed,
            row.rcvbuf,
            row.rmem_high_water
        )
    );
    assert!(!dpdk_sys::eal::is_up());
    // After stop: receiving gives nothing, and dropping touches nothing.
    assert_eq!(api::recv_burst(&sock, &mut batch), 0);
    drop(batch);
    drop(sock);
}
