//! The QUIC echo server as a client of an engine in another process:
//! `udpdemux run` drives `net_af_packet` on one end of a veth pair (its
//! config binds no socket), `quic_echo --attach PREFIX` attaches to it
//! (`udpdemux_client`) and binds its two listen addresses there
//! (`UdxSocket::attach`), and `quic_client` (quinn on the kernel's UDP) in
//! the namespace at the other end echoes 20 streams of 128 KiB each
//! (`QUIC_ATTACH_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6, then makes 20 fresh connections over IPv6, 4 at once (the
//! handshake mode: a full handshake, a 32-byte echo and a close each).
//! The server's exit line must show ECT(0) arriving in `RecvMeta`,
//! receives coalesced (more datagrams than `RecvMeta`s), the poller waking
//! quinn, and all 22 connections accepted and closed by the client; the
//! engine's exit JSON its books balanced, both sockets unbound by the
//! server itself and nothing left to reap.
mod common;
#[path = "../../client/tests/common/mod.rs"]
mod engine;

use common::{n, netns};

#[test]
fn quic_echo_attached_to_an_engine_process_is_byte_exact_over_ipv4_and_ipv6_with_ecn() {
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return;
    }
    let net = netns::Net::create("qa", "198.18.0.2/24", "fd00::2/64");
    // No socket in the config: the server binds them.
    let mut engine = engine::Engine::start(
        "quic",
        &format!("net_af_packet0,iface={},qpairs=2", net.host),
        "net_af_packet0",
        engine::Opts::body(format!(
            "[mempool]\nmbufs = 4095\ncache = 128\n{}",
            engine::veth_port("{port}")
        )),
    );
    let dir = std::env::temp_dir().join(format!("udx-quic-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let cert_arg = cert.to_string_lossy().into_owned();
    let server = common::Server::start(
        &[
            "--attach",
            &engine.prefix,
            "--listen",
            "198.18.0.1:4433",
            "--listen",
            "[fd00::1]:4433",
            "--cert-out",
            &cert_arg,
        ],
        || engine.log_text(),
    );
    let server_pid = server.child.id();
    common::echo_both(
        &net,
        &cert,
        20,
        common::bytes_per_stream("QUIC_ATTACH_BYTES", 128 << 10),
    );
    common::handshakes(&net, &cert, "[fd00::1]:4433", 20, 4);
    let (summary, j) = server.stop();
    assert_eq!(j["attached"], engine.prefix.as_str(), "{summary}");
    assert_eq!(j["detached_cleanly"], true, "{summary}");
    // The two bulk connections and the 20 of the handshakes.
    common::check_connections(&summary, &j, 22);
    let handed = common::check_sockets(&summary, &j);
    let e = engine.stop();
    assert_eq!(e["books_balanced"], true, "{}", e["problems"]);
    // The server unbound both sockets and detached itself (the sockets
    // close from the runtime's threads, both at once): nothing was left
    // for the engine to reap after it exited.
    let c = &e["clients"];
    assert_eq!(c["attached"], 0, "{c}");
    assert_eq!(c["reaped"], 0, "{c}");
    assert_eq!(c["open"], 0, "{c}");
    let log = engine.log_text();
    // Each socket: removed at the unbind; all it delivered consumed by
    // the client or freed at the close; the client consumed at least what
    // quinn was handed (a batch taken but not handed out before the
    // endpoint went is consumed too).
    for (i, h) in handed.iter().enumerate() {
        let line = format!("socket quic{i} unbound by client pid {server_pid}");
        assert!(log.contains(&line), "no {line:?} in {log}");
        let s = engine::socket_named(&e, &format!("quic{i}"));
        assert_eq!(s["removed"], true, "{s}");
        assert_eq!(s["client_consumed"], s["consumed"], "{s}");
        assert_eq!(
            n(&s["delivered"]),
            n(&s["consumed"]) + n(&s["freed_at_close"]),
            "{s}"
        );
        assert!(n(&s["consumed"]) >= *h, "quic{i}: handed {h}: {s}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(net);
}
