//! An application's task on the RX lcore (`api::run_on_rx_lcore`) end to
//! end, with the kernel on the other side: the engine runs in this test's
//! process on one end of a veth pair (`net_af_packet`), a kernel UDP client
//! in a network namespace sends 300 datagrams (3 ms apart) to an engine
//! socket, and the task, called by the RX lcore between its bursts, takes
//! each from the socket and sends it back (a UDP echo server run to
//! completion). The task owns the send path from its first call: the
//! replies, the client's resolution (by ARP, or learned from its
//! datagrams, whichever comes first), and 20 datagrams
//! the test's own thread sends meanwhile all leave from the RX lcore's TX
//! queue, and the main lcore is never woken for them.
//!
//! Also: the task runs on the RX lcore's thread; it can remove a socket
//! without waiting for its own lcore to pass a quiescent point (it is at
//! one); a second task for the lcore and a task for an RX lcore that does
//! not exist are refused; the task is dropped when the engine stops.
//!
//! One EAL per process: this file holds one test.
#![cfg(not(loom))]
mod common;
#[path = "common/netns.rs"]
mod netns;
use common::n;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use udpdemux::api::{self, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::alloc_guard::CountingAlloc;
use udpdemux::runtime::engine::{Engine, RunOptions};
use udpdemux::runtime::registry;

// The binary's counting allocator: the RX lcore's loop must still report
// no hot-path allocation (the task's own are on the application's account).
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const ECHOES: u64 = 300;
const FROM_THREAD: usize = 20;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Sets its flag when dropped (the task holds one).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_task_on_the_rx_lcore_echoes_and_its_sends_leave_from_that_lcore() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    let net = netns::Net::new("ltk");
    let mut kernel =
        netns::Kernel::start(&net, &["v4=198.18.0.2:7000", "--echo", "198.18.0.1:7:300"]);
    let dir = common::scratch("lcore-task");
    // Two TX queues: the RX lcore's (its ARP/ND replies, and the send path
    // once its task runs) and the main lcore's.
    let text = netns::EngineToml::af_packet(&net, 2).text(common::eal, "lcore-task", "");
    let cfg = Config::load(&common::write(&dir, "c.toml", &text)).expect("config");
    let mut engine = Engine::start(&cfg, &RunOptions::default()).expect("engine starts");
    let echo = api::open(&engine, SocketOptions::new("echo4", addr("198.18.0.1:7"))).unwrap();
    api::open(&engine, SocketOptions::new("gone", addr("198.18.0.1:9"))).unwrap();
    let tx = api::sender(&engine).expect("the port has addresses");

    // Refused: an RX lcore that does not exist.
    let e = api::run_on_rx_lcore(&engine, 1, Box::new(|| false)).unwrap_err();
    assert!(e.to_string().contains("no RX lcore 1"), "{e}");

    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let ran_on = Arc::new(AtomicU32::new(u32::MAX));
    let removal_ms = Arc::new(AtomicU64::new(u64::MAX));
    let echoed = Arc::new(AtomicU64::new(0));
    let (on, took, count) = (
        Arc::clone(&ran_on),
        Arc::clone(&removal_ms),
        Arc::clone(&echoed),
    );
    let (shared, task_tx) = (Arc::clone(engine.shared()), tx.clone());
    let mut batch = api::RecvBatch::new();
    let mut first = true;
    let task = move || {
        let _held = &flag;
        if first {
            first = false;
            on.store(
                dpdk_sys::lcore::current().unwrap_or(u32::MAX),
                Ordering::SeqCst,
            );
            // This lcore is at its quiescent point: the removal must not
            // wait for it (it would spin to its 5 s deadline).
            let t = Instant::now();
            registry::remove_socket(&shared, "gone").expect("removed");
            took.store(t.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
        let got = api::recv_burst(&echo, &mut batch);
        for d in batch.iter() {
            let sent = api::send_burst(&task_tx, &echo, &[(d.src(), d.payload())]);
            count.fetch_add(sent as u64, Ordering::Relaxed);
        }
        batch.clear();
        got > 0
    };
    api::run_on_rx_lcore(&engine, 0, Box::new(task)).expect("the RX lcore takes the task");
    // Refused: a second task for the same lcore.
    let e = api::run_on_rx_lcore(&engine, 0, Box::new(|| false)).unwrap_err();
    assert!(e.to_string().contains("runs a task already"), "{e}");

    let t0 = Instant::now();
    let slice = |engine: &mut Engine| engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.05));
    while ran_on.load(Ordering::SeqCst) == u32::MAX && t0.elapsed() < Duration::from_secs(10) {
        slice(&mut engine);
    }
    kernel.say("go");
    // From this thread (not the lcore's) while the RX lcore owns the path.
    let mut from_thread = 0;
    for i in 0..FROM_THREAD {
        let p = format!("thread{i:02}");
        from_thread += api::send_burst(
            &tx,
            &engine.socket("echo4").unwrap(),
            &[(addr("198.18.0.2:7000"), p.as_bytes())],
        );
        slice(&mut engine);
    }
    assert_eq!(from_thread, FROM_THREAD);
    while (echoed.load(Ordering::SeqCst) < ECHOES
        || kernel.wait_total(FROM_THREAD as u64, 0) < FROM_THREAD as u64)
        && t0.elapsed() < Duration::from_secs(30)
    {
        slice(&mut engine);
    }
    // The echo client's last replies land while it reads for 0.3 s more.
    for _ in 0..10 {
        slice(&mut engine);
    }
    let summary = engine.stop().expect("engine stops");
    let k = kernel.finish();
    let j = serde_json::to_value(&summary).unwrap();

    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
    let rx_lcore = cfg.lcores[0].id;
    assert_eq!(
        ran_on.load(Ordering::SeqCst),
        rx_lcore,
        "the task ran on the RX lcore's thread"
    );
    assert!(
        removal_ms.load(Ordering::SeqCst) < 1000,
        "removal from the task waited for its own lcore"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the task was not dropped at the engine's stop"
    );
    // Every request echoed, every reply at the client.
    assert_eq!(echoed.load(Ordering::SeqCst), ECHOES);
    assert_eq!(
        (n(&k["echo_sent"]), n(&k["echo_got"])),
        (ECHOES, ECHOES),
        "{k}"
    );
    let got: Vec<&str> = k["got"]["v4"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(got.len(), FROM_THREAD, "{k}");
    // Sent from the RX lcore, the main lcore never woken for a send.
    let s = &j["send"];
    assert_eq!(n(&s["serviced_by_lcore"]), u64::from(rx_lcore), "{s}");
    assert_eq!(
        n(&s["out_datagrams"][0]),
        ECHOES + FROM_THREAD as u64,
        "{s}"
    );
    assert_eq!(n(&s["main_naps_ended_by_send"]), 0, "{s}");
    // The client's MAC: resolved by ARP, or learned from its datagrams,
    // either way by the RX lcore's pass over the send path.
    assert!(
        n(&s["neigh"]["resolved"]) + n(&s["heard_taken"]) >= 1,
        "the client was neither resolved nor heard: {s}"
    );
    let sock = j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "echo4")
        .unwrap();
    assert_eq!(n(&sock["delivered"]), ECHOES, "{sock}");
    let _ = std::fs::remove_dir_all(&dir);
}
