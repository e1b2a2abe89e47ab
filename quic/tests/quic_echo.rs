//! The QUIC echo example end to end: `quic_echo` (quinn on udpdemux, the
//! engine on `net_af_packet` on one end of a veth pair) and `quic_client`
//! (quinn on the kernel's UDP) in a network namespace on the other end.
//! The client opens 100 bidirectional streams at once and echoes 10 MB on
//! each (`QUIC_ECHO_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6. The server's exit line must show the ECN codepoint quinn's
//! client sets (ECT(0)) arriving in `RecvMeta`, receives coalesced
//! (more datagrams than `RecvMeta`s), both connections closed by the
//! client, and the engine's books balanced.
//!
//! The handshake mode: 50 fresh connections, 8 at once, each a full
//! handshake and a 32-byte echo, against the same server: none may fail,
//! the server must have accepted exactly 50, each closed by the client, none
//! left open, and its books must balance.
//!
//! The benchmark's other side, `--kernel` (quinn on the kernel's UDP), with
//! a receive buffer of its own (`--kernel-rcvbuf`): byte-exact too, and the
//! buffer the kernel granted in its exit line.
mod common;

use std::path::PathBuf;

use common::{n, netns};

/// A fresh namespace (`tag` in its names), a directory for the
/// certificate, and a `quic_echo` server on the namespace's host end,
/// listening on 198.18.0.1:4433 and [fd00::1]:4433, ready.
struct Rig {
    net: netns::Net,
    dir: PathBuf,
    cert: PathBuf,
    server: common::Server,
}

/// The rig, when the machine can run it (root, the tools); `extra`:
/// more `quic_echo` arguments.
fn start(tag: &str, extra: &[&str]) -> Option<Rig> {
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return None;
    }
    let pid = std::process::id();
    let net = netns::Net::create(tag, "198.18.0.2/24", "fd00::2/64");
    let dir = std::env::temp_dir().join(format!("udx-{tag}-test-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let cert_arg = cert.to_string_lossy().into_owned();
    let prefix = format!("t-{tag}-{pid}");
    let mut args = vec![
        "--iface",
        &net.host,
        "--addr",
        "198.18.0.1/24",
        "--addr",
        "fd00::1/64",
        "--listen",
        "198.18.0.1:4433",
        "--listen",
        "[fd00::1]:4433",
        "--prefix",
        &prefix,
        "--cert-out",
        &cert_arg,
    ];
    args.extend_from_slice(extra);
    let server = common::Server::start(&args, String::new);
    Some(Rig {
        net,
        dir,
        cert,
        server,
    })
}

#[test]
fn quic_echo_100_streams_byte_exact_over_ipv4_and_ipv6_with_ecn() {
    // Without root and the tools, nothing to run.
    let Some(r) = start("qe", &[]) else { return };
    common::echo_both(
        &r.net,
        &r.cert,
        100,
        common::bytes_per_stream("QUIC_ECHO_BYTES", 10 << 20),
    );
    let (summary, j) = r.server.stop();
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    // One connection over IPv4, one over IPv6, both closed by the client.
    common::check_connections(&summary, &j, 2);
    common::check_sockets(&summary, &j);
    woken_by_the_rx_lcore(&summary, &j);
    // `--runtime lcore` (the default): quinn ran on the RX lcore (lcore
    // 1), which sent what it queued.
    assert_eq!(j["sent_from_rx_lcore"], 1, "{summary}");
    let _ = std::fs::remove_dir_all(&r.dir);
    drop(r.net);
}

/// In process, the task waits until an RX lcore's delivery wakes it.
fn woken_by_the_rx_lcore(summary: &str, j: &serde_json::Value) {
    for (i, s) in j["sockets"].as_array().unwrap().iter().enumerate() {
        assert!(
            n(&s["rx_wakes"]) > 0,
            "socket {i}: no RX lcore ever woke the waiting task: {summary}"
        );
    }
}

#[test]
fn quic_echo_with_quinn_on_runtime_threads_is_byte_exact_too() {
    // Without root and the tools, nothing to run.
    let Some(r) = start("qt", &["--runtime", "threads"]) else {
        return;
    };
    common::echo_both(
        &r.net,
        &r.cert,
        100,
        common::bytes_per_stream("QUIC_ECHO_BYTES", 10 << 20) / 4,
    );
    let (summary, j) = r.server.stop();
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    common::check_connections(&summary, &j, 2);
    common::check_sockets(&summary, &j);
    woken_by_the_rx_lcore(&summary, &j);
    // quinn on the runtime's threads: the main lcore sent what it queued.
    assert!(j["sent_from_rx_lcore"].is_null(), "{summary}");
    let _ = std::fs::remove_dir_all(&r.dir);
    drop(r.net);
}

#[test]
fn quic_handshakes_50_at_8_at_once_all_accepted_and_closed() {
    // Without root and the tools, nothing to run.
    let Some(r) = start("qh", &[]) else { return };
    common::handshakes(&r.net, &r.cert, "198.18.0.1:4433", 50, 8);
    let (summary, j) = r.server.stop();
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    common::check_connections(&summary, &j, 50);
    // Every datagram the engine delivered went to quinn whole.
    assert_eq!(n(&j["sockets"][0]["rx_too_long"]), 0, "{summary}");
    let _ = std::fs::remove_dir_all(&r.dir);
    drop(r.net);
}

#[test]
fn the_kernel_backend_with_a_receive_buffer_of_its_own_is_byte_exact() {
    // Without root and the tools, nothing to run.
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return;
    }
    let pid = std::process::id();
    let net = netns::Net::create("qk", "198.18.0.2/24", "fd00::2/64");
    // The kernel serves: its end of the pair holds the server's address.
    netns::must("ip", &["addr", "add", "198.18.0.1/24", "dev", &net.host]);
    let dir = std::env::temp_dir().join(format!("udx-qk-test-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let cert_arg = cert.to_string_lossy().into_owned();
    let asked: u64 = 1 << 20;
    let server = common::Server::start(
        &[
            "--kernel",
            "--kernel-rcvbuf",
            &asked.to_string(),
            "--listen",
            "198.18.0.1:4433",
            "--cert-out",
            &cert_arg,
        ],
        String::new,
    );
    common::echo(&net, &cert, "198.18.0.1:4433", 20, 1 << 20);
    common::handshakes(&net, &cert, "198.18.0.1:4433", 20, 4);
    let (summary, j) = server.stop();
    common::check_connections(&summary, &j, 21);
    // What SO_RCVBUF gives: twice the request, capped at rmem_max first.
    let max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        j["kernel_rcvbuf"],
        serde_json::json!([2 * asked.min(max)]),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    drop(net);
}
