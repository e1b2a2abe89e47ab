//! A client killed with requests over the MTU still on its TX ring (issue
//! 18 part 3): the client process (the `send` example) queues 65 000-byte
//! datagrams, each one chained request of 32 mbufs of the engine's
//! `tx_pool`, while this thread keeps the engine's main loop stopped, and
//! is killed with SIGKILL before the engine has seen any of them. The
//! engine then drains and fragments what the dead client left (or frees it,
//! once its socket is reaped): every chain ends once, the pool ends where
//! it was before the client sent, the books balance and the counters are
//! exact. The engine runs in this process on `net_null` (no RX traffic,
//! TX frees what it is given) with static neighbours, so nothing waits on
//! resolution.
//!
//! One EAL per process: this file holds one test.
mod common;
use common::*;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use dpdk_sys::Mempool;
use udpdemux::config::Config;
use udpdemux::runtime::alloc_guard::CountingAlloc;
use udpdemux::runtime::engine::{Engine as InProcess, RunOptions};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const COUNT: u64 = 20;
const SIZE: usize = 65_000;

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_client_killed_with_chained_requests_queued_leaks_nothing() {
    if hugepages_ready(64).is_err() {
        return;
    }
    let (_, _) = binaries();
    let send_bin = profile_dir().join("examples").join("send");
    let (prefix, dir, cfg_path) = in_process_config(
        "sendkill",
        "0@0,1@1",
        "net_null0,no-rx=1",
        r#"[mempool]
mbufs = 2047
cache = 64

[[port]]
name = "net_null0"
rx_queues = 1
tx_queues = 2
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]

[[neighbour.static]]
ip = "198.18.0.2"
mac = "02:00:00:00:00:02"
"#,
    );
    let cfg = Config::load(&cfg_path).expect("config");
    let mut engine = InProcess::start(&cfg, &RunOptions::default()).expect("engine starts");
    let pool = Mempool::lookup("tx_pool").expect("the port has addresses: a TX pool");
    let t0 = Instant::now();
    let slice = |engine: &mut InProcess, ms: f64| {
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + ms / 1000.0));
    };

    let (mut client, lines) = spawn_with_lines(Command::new(&send_bin).args([
        prefix.as_str(),
        "big4",
        "198.18.0.1:6000",
        "198.18.0.2:7000",
        &COUNT.to_string(),
        "--burst",
        "1",
        "--size",
        &SIZE.to_string(),
        "--go",
        "--wait",
    ]));
    let mut said: Vec<String> = Vec::new();
    // Attach and bind need the main loop (it serves the client).
    while !said.iter().any(|l| l.starts_with("bound")) {
        assert!(t0.elapsed() < Duration::from_secs(30), "client: {said:?}");
        slice(&mut engine, 5.0);
        while let Ok(l) = lines.try_recv() {
            said.push(l);
        }
    }
    // Settled: what the pool lends out now is the engine's own.
    slice(&mut engine, 50.0);
    let before = pool.in_use();
    // The main loop stopped: the client's requests stay on its ring.
    writeln!(client.stdin.as_mut().unwrap(), "go").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !said.iter().any(|l| l.starts_with("sent")) {
        assert!(Instant::now() < deadline, "client: {said:?}");
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(100)) {
            said.push(l);
        }
    }
    assert!(said.contains(&format!("sent {COUNT}")), "client: {said:?}");
    let segs = (16 + 12 + SIZE).div_ceil(2048) as u64;
    assert_eq!(segs, 32);
    let queued = u64::from(pool.in_use().saturating_sub(before));
    assert!(queued >= COUNT * segs, "{queued} mbufs lent out");
    client.kill().expect("SIGKILL the client");
    let _ = client.wait();
    // Drained (or freed once the dead client's socket is reaped).
    let end = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < end {
        slice(&mut engine, 20.0);
    }
    assert_eq!(pool.in_use(), before, "mbufs of tx_pool lost");
    drop(pool);
    let summary = engine.stop().expect("engine stops");
    let j = serde_json::to_value(&summary).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
    let s = &j["send"];
    assert_eq!(n(&s["client_requests"]), COUNT, "{s}");
    assert_eq!(n(&s["bad_requests"]), 0, "{s}");
    // Each request either went out whole, as its fragments, or was freed
    // whole with the dead client's ring.
    let frags = (SIZE as u64 + 8).div_ceil(1480);
    let sent = n(&s["out_datagrams"][0]);
    assert_eq!(sent + n(&s["client_freed"]), COUNT, "{s}");
    assert_eq!(n(&s["out_later"][0]), sent * (frags - 1), "{s}");
    assert_eq!(n(&s["accepted"][0]), sent * frags, "{s}");
    let ip = &j["ip"];
    assert_eq!(
        (
            n(&ip["IpFragOKs"]),
            n(&ip["IpFragCreates"]),
            n(&ip["IpFragFails"])
        ),
        (sent, sent * frags, 0),
        "{ip}"
    );
}
