//! The QUIC echo example end to end: `quic_echo` (quinn on udpdemux, the
//! engine on `net_af_packet` on one end of a veth pair) and `quic_client`
//! (quinn on the kernel's UDP) in a network namespace on the other end.
//! The client opens 100 bidirectional streams at once and echoes 10 MB on
//! each (`QUIC_ECHO_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6. The server's exit line must show the ECN codepoint quinn's
//! client sets (ECT(0)) arriving in `RecvMeta`, receives coalesced
//! (more datagrams than `RecvMeta`s), and the engine's books balanced.
mod common;

use common::netns;

#[test]
fn quic_echo_100_streams_byte_exact_over_ipv4_and_ipv6_with_ecn() {
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return;
    }
    let pid = std::process::id();
    let net = netns::Net::create("qe", "198.18.0.2/24", "fd00::2/64");
    let dir = std::env::temp_dir().join(format!("udx-quic-test-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let cert_arg = cert.to_string_lossy().into_owned();
    let prefix = format!("t-quic-{pid}");
    let server = common::Server::start(
        &[
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
        ],
        String::new,
    );
    common::echo_both(
        &net,
        &cert,
        100,
        common::bytes_per_stream("QUIC_ECHO_BYTES", 10 << 20),
    );
    let (summary, j) = server.stop();
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    common::check_sockets(&summary, &j);
    let _ = std::fs::remove_dir_all(&dir);
    drop(net);
}
