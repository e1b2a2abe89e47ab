//! Sending from three places at once (issue 17): the main lcore (this
//! test's thread runs the engine in-process and calls `send_burst` between
//! slices of its main loop), a consumer lcore (the `echo` handler answers
//! the kernel's echo traffic) and a client process (the `send` example,
//! through its own TX ring), all to kernel sockets in a network namespace.
//! Each lcore transmits on its own TX queue (RX lcore: queue 0, consumer:
//! 1, main: 2) and no queue is shared: the port's per-queue counters must
//! be exactly what each lcore sent. Every datagram is counted once: the
//! kernel receives each payload exactly once, and `UdpOutDatagrams` /
//! `Udp6OutDatagrams` equal what it received. No lcore loop allocates.
//!
//! One EAL per process: this file holds one test.
mod common;
use common::*;
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use udpdemux::api::{self, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::alloc_guard::CountingAlloc;
use udpdemux::runtime::engine::{Engine as InProcess, RunOptions};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const EACH: usize = 300;

fn payloads(tag: &str, r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("{tag}{i:04}")).collect()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    let mut s: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    s.sort();
    s
}

#[test]
fn main_lcore_consumer_lcore_and_a_client_send_at_once() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    hugepages_ready(64).unwrap();
    let (_, _) = binaries();
    let send_bin = profile_dir().join("examples").join("send");
    let net = netns::Net::new("sal");
    let mut kernel = netns::Kernel::start(
        &net,
        &[
            "main4=198.18.0.2:7000",
            "main6=fd00::2:7000",
            "client4=198.18.0.2:7001",
            "--echo",
            &format!("198.18.0.1:7:{EACH}"),
        ],
    );
    let (prefix, dir, cfg_path) = in_process_config(
        "sendall",
        "0@0,1@1,2@1",
        &format!("net_af_packet0,iface={},qpairs=3", net.host),
        r#"[mempool]
mbufs = 4095
cache = 128

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
"#,
    );
    let cfg = Config::load(&cfg_path).expect("config");
    let mut engine = InProcess::start(&cfg, &RunOptions::default()).expect("engine starts");
    let m4 = api::open(
        &engine,
        SocketOptions::new("main4", "198.18.0.1:5000".parse().unwrap()),
    )
    .unwrap();
    let m6 = api::open(
        &engine,
        SocketOptions::new("main6", "[fd00::1]:5000".parse().unwrap()),
    )
    .unwrap();
    let tx = api::sender(&engine).expect("the port has addresses");
    let t0 = Instant::now();
    let slice = |engine: &mut InProcess, ms: f64| {
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + ms / 1000.0));
    };
    let main_send = |sock: &udpdemux::socket::Socket, to: &str, p: &[String]| -> usize {
        let to: SocketAddr = to.parse().unwrap();
        let d: Vec<(SocketAddr, &[u8])> = p.iter().map(|x| (to, x.as_bytes())).collect();
        api::send_burst(&tx, sock, &d)
    };
    // Resolve both peers first (from the main lcore): what follows is
    // about sharing, not about the unresolved queue's bound.
    assert_eq!(main_send(&m4, "198.18.0.2:7000", &payloads("r", 0..1)), 1);
    assert_eq!(main_send(&m6, "[fd00::2]:7000", &payloads("r", 1..2)), 1);
    while kernel.wait_total(2, 0) < 2 {
        assert!(t0.elapsed() < Duration::from_secs(10), "peers not resolved");
        slice(&mut engine, 10.0);
    }

    // The client process: attaches while this thread keeps the main loop
    // running (it serves the client's requests).
    let (mut client, lines) = spawn_with_lines(Command::new(&send_bin).args([
        prefix.as_str(),
        "client4",
        "198.18.0.1:6000",
        "198.18.0.2:7001",
        &EACH.to_string(),
        "--burst",
        "10",
        "--gap-ms",
        "3",
        "--tag",
        "c",
        "--wait",
    ]));
    let mut client_said: Vec<String> = Vec::new();
    let poll_client = |said: &mut Vec<String>| {
        while let Ok(l) = lines.try_recv() {
            said.push(l);
        }
    };
    while !client_said.iter().any(|l| l.starts_with("bound")) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "client: {client_said:?}"
        );
        slice(&mut engine, 5.0);
        poll_client(&mut client_said);
    }
    // All three at once: the echo traffic starts, the client is sending,
    // and this thread sends from the main lcore between main-loop slices.
    kernel.say("go");
    let mut k = 0;
    while k < EACH {
        let r = k..(k + 10).min(EACH);
        assert_eq!(
            main_send(&m4, "198.18.0.2:7000", &payloads("m", r.clone())),
            r.len()
        );
        assert_eq!(
            main_send(&m6, "[fd00::2]:7000", &payloads("s", r.clone())),
            r.len()
        );
        k = r.end;
        slice(&mut engine, 3.0);
        poll_client(&mut client_said);
    }
    let want = (2 + 3 * EACH) as u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while kernel.wait_total(want, 0) < want || !client_said.iter().any(|l| l.starts_with("sent")) {
        if Instant::now() > deadline {
            break;
        }
        slice(&mut engine, 10.0);
        poll_client(&mut client_said);
    }
    // The echo traffic's last replies, then the client closes (its ring is
    // empty by now: the kernel has everything it sent).
    let echo_end = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < echo_end {
        slice(&mut engine, 20.0);
    }
    let _ = writeln!(client.stdin.as_mut().unwrap(), "close");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = client.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "client did not exit");
        slice(&mut engine, 10.0);
    };
    poll_client(&mut client_said);
    assert!(status.success(), "client: {client_said:?}");
    assert!(
        client_said.contains(&format!("sent {EACH}")),
        "client: {client_said:?}"
    );
    slice(&mut engine, 50.0);
    let summary = engine.stop().expect("engine stops");
    let k = kernel.finish();
    let j = serde_json::to_value(&summary).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(summary.books_balanced, "{:?}", summary.problems);
    assert_eq!(summary.hot_path_allocations, 0);
    // Every payload exactly once.
    let mut want4 = payloads("m", 0..EACH);
    want4.push("r0000".into());
    want4.sort();
    assert_eq!(strs(&k["got"]["main4"]), want4);
    let mut want6 = payloads("s", 0..EACH);
    want6.push("r0001".into());
    want6.sort();
    assert_eq!(strs(&k["got"]["main6"]), want6);
    assert_eq!(strs(&k["got"]["client4"]), payloads("c", 0..EACH));
    let echo_got = n(&k["echo_got"]);
    assert_eq!(n(&k["echo_sent"]), EACH as u64);
    assert!(echo_got > 0, "no echo reply");
    let echo = socket_named(&j, "echo4");
    assert_eq!(n(&echo["tx"]), echo_got, "{echo}");

    // UdpOutDatagrams is what the kernel received, counted once.
    let udp = &j["udp"];
    let got4 = (EACH + 1 + EACH) as u64 + echo_got;
    assert_eq!(n(&udp["UdpOutDatagrams"]), got4, "{udp}");
    assert_eq!(n(&udp["Udp6OutDatagrams"]), EACH as u64 + 1, "{udp}");
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0, "{udp}");
    assert_eq!(n(&udp["Udp6SndbufErrors"]), 0, "{udp}");
    let s = &j["send"];
    assert_eq!(n(&s["client_requests"]), EACH as u64, "{s}");
    assert_eq!(
        (n(&s["bad_requests"]), n(&s["client_freed"])),
        (0, 0),
        "{s}"
    );

    eprintln!(
        "echo replies {echo_got}, queues {} / {} / {}, send {s}",
        j["ports"][0]["xstats"]["tx_q0_packets"],
        j["ports"][0]["xstats"]["tx_q1_packets"],
        j["ports"][0]["xstats"]["tx_q2_packets"]
    );
    // One lcore per TX queue: each queue sent exactly what its lcore did.
    let port = &j["ports"][0];
    let xs = &port["xstats"];
    let q = |i: u32| n(&xs[format!("tx_q{i}_packets")]);
    let r = &j["responder"];
    assert_eq!(
        q(0),
        n(&r["arp_replies"])
            + n(&r["nd_advertisements"])
            + n(&r["icmp_echo_replies"])
            + n(&r["icmp6_echo_replies"]),
        "RX lcore's queue: {xs} {r}"
    );
    assert_eq!(q(1), echo_got, "consumer lcore's queue: {xs}");
    let out: u64 = n(&s["out_datagrams"][0]) + n(&s["out_datagrams"][1]);
    assert_eq!(
        q(2),
        out + n(&s["solicits_sent"]),
        "main lcore's queue: {xs} {s}"
    );
}
