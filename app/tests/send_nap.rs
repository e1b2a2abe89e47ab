//! With `engine.idle_sleep_us` (an engine sharing its CPUs with the
//! application), the main lcore naps between an in-process sender's
//! datagrams instead of polling, and the sender's next frames end the nap
//! (`wake`). Each nap arms a timer, which on a VM is a hypervisor exit: the
//! main lcore must take about one nap per gap between sends, not one per
//! doubling of an RX-style backoff (which took about seven per gap between
//! QUIC flights, and about 21 per 2 ms gap here). A sender paces 100 datagrams 2 ms
//! apart over `net_null`; the counts in the exit's `send` say how the main
//! lcore slept, and every datagram is sent.
//!
//! One EAL per process: this file holds one test.
#![cfg(not(loom))]
mod common;
use common::n;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use udpdemux::api;
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};

const SENDS: u64 = 100;
const GAP: Duration = Duration::from_millis(2);

#[test]
fn a_paced_sender_costs_the_main_lcore_one_nap_per_gap() {
    let dir = common::scratch("send-nap");
    let text = format!(
        r#"{}
[engine]
idle_sleep_us = 100

[[port]]
name = "net_null0"
rx_queues = 1
tx_queues = 2
addresses = ["198.18.0.1/24"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]

[[neighbour.static]]
ip = "198.18.0.2"
mac = "02:00:00:00:00:02"
"#,
        common::eal("send-nap", &["net_null0,no-rx=1"])
    );
    let cfg = Config::load(&common::write(&dir, "c.toml", &text)).expect("config");
    let mut engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let tx = api::sender(&engine).expect("the port has an address");
    let t0 = Instant::now();
    let sender = std::thread::spawn(move || {
        let (from, to): (SocketAddr, SocketAddr) = (
            "198.18.0.1:9000".parse().unwrap(),
            "198.18.0.2:7000".parse().unwrap(),
        );
        // Start once the main lcore is in its loop and napping.
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..SENDS {
            assert_eq!(api::send_from(&tx, from, &[(to, &b"paced"[..])]), 1);
            std::thread::sleep(GAP);
        }
    });
    // The main lcore is this thread: it drains the sender's ring until the
    // sender is done and a little after (its last frame sent).
    let run_for = |extra: f64| t0.elapsed().as_secs_f64() + extra;
    while !sender.is_finished() {
        engine.main_loop(Some(run_for(0.05)));
    }
    sender.join().expect("sender");
    engine.main_loop(Some(run_for(0.1)));
    let elapsed = t0.elapsed();
    let summary = engine.stop().expect("engine stops");
    let j = serde_json::to_value(&summary).unwrap();
    let s = &j["send"];
    eprintln!("{elapsed:?}: {s}");
    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
    let sent: u64 = s["out_datagrams"].as_array().unwrap().iter().map(n).sum();
    assert_eq!(sent, SENDS, "every datagram sent: {s}");
    let (naps, ended) = (n(&s["main_naps"]), n(&s["main_naps_ended_by_send"]));
    // Naps outside the sends are at most one per 5 ms; during them about
    // one per gap, ended by the next send. An RX-style backoff (1 µs
    // doubling to 100, then 100 µs naps) took about 21 per 2 ms gap.
    let quiet_naps = elapsed.as_millis() as u64 / 5;
    assert!(
        naps <= 4 * SENDS + quiet_naps,
        "{naps} naps for {SENDS} sends {GAP:?} apart in {elapsed:?}: {s}"
    );
    assert!(ended >= SENDS / 2, "most gaps' naps ended by the send: {s}");
}
