//! The QUIC echo server as a client of an engine in another process:
//! `udpdemux run` drives `net_af_packet` on one end of a veth pair (its
//! config binds no socket), `quic_echo --attach PREFIX` attaches to it
//! (`udpdemux_client`) and binds its two listen addresses there
//! (`UdxSocket::attach`), and `quic_client` (quinn on the kernel's UDP) in
//! the namespace at the other end echoes 20 streams of 128 KiB each
//! (`QUIC_ATTACH_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6. The server's exit line must show ECT(0) arriving in
//! `RecvMeta`, receives coalesced (more datagrams than `RecvMeta`s) and
//! the poller waking quinn; the engine's exit JSON its books balanced,
//! with what the two bound sockets took in.
#[path = "../../client/tests/common/mod.rs"]
mod common;
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn bytes_per_stream() -> u64 {
    std::env::var("QUIC_ATTACH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128 << 10)
}

const STREAMS: u32 = 20;

/// The engine's config after `[eal]`: the port with the server's
/// addresses, both queues polled by RX lcore 1 (two TX queues: the RX
/// lcore's and the main lcore's, which also sends what clients enqueue);
/// no socket (the client binds them).
fn engine_body() -> String {
    r#"[mempool]
mbufs = 4095
cache = 128

[[port]]
name = "{port}"
rx_queues = 2
tx_queues = 2
rx_checksum_offload = false
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0", "{port}:1"]
"#
    .into()
}

#[test]
fn quic_echo_attached_to_an_engine_process_is_byte_exact_over_ipv4_and_ipv6_with_ecn() {
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return;
    }
    let net = netns::Net::create("qa", "198.18.0.2/24", "fd00::2/64");
    let mut engine = common::Engine::start(
        "quic",
        &format!("net_af_packet0,iface={},qpairs=2", net.host),
        "net_af_packet0",
        common::Opts::body(engine_body()),
    );
    let dir = std::env::temp_dir().join(format!("udx-quic-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let mut server = Command::new(env!("CARGO_BIN_EXE_quic_echo"))
        .args(["--attach", &engine.prefix])
        .args(["--listen", "198.18.0.1:4433", "--listen", "[fd00::1]:4433"])
        .arg("--cert-out")
        .arg(&cert)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("quic_echo");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("ready"),
        "server did not attach: {}",
        engine.log_text()
    );
    let bytes = bytes_per_stream();
    for to in ["198.18.0.1:4433", "[fd00::1]:4433"] {
        let out = net
            .command(&[env!("CARGO_BIN_EXE_quic_client"), "--connect", to])
            .arg("--cert")
            .arg(&cert)
            .args(["--streams", &STREAMS.to_string()])
            .args(["--bytes", &bytes.to_string()])
            .output()
            .expect("quic_client");
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("{to}: {text}");
        assert!(
            out.status.success(),
            "client to {to} failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(&format!(
                r#""streams_ok":{STREAMS},"bytes_echoed":{},"#,
                u64::from(STREAMS) * bytes
            )),
            "{text}"
        );
    }
    drop(server.stdin.take().map(|mut s| s.write_all(b"stop\n")));
    let summary = lines
        .map_while(Result::ok)
        .find(|l| l.starts_with('{'))
        .expect("server's exit line");
    let server_pid = server.id();
    let st = server.wait().unwrap();
    eprintln!("server: {summary}");
    assert!(st.success(), "server failed: {summary}");
    let j: serde_json::Value = serde_json::from_str(&summary).expect("server JSON");
    assert_eq!(j["attached"], engine.prefix.as_str(), "{summary}");
    assert_eq!(j["detached_cleanly"], true, "{summary}");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    let socks = j["sockets"].as_array().expect("sockets");
    assert_eq!(socks.len(), 2, "{summary}");
    let mut handed = Vec::new();
    for (i, s) in socks.iter().enumerate() {
        let e: Vec<u64> = s["rx_ecn"].as_array().unwrap().iter().map(n).collect();
        let datagrams: u64 = e.iter().sum();
        handed.push(datagrams);
        assert!(e[2] > 0, "socket {i}: no ECT(0) datagram: {summary}");
        assert!(e[2] > 10 * e[0], "socket {i}: mostly not-ECT: {summary}");
        assert!(
            datagrams > n(&s["rx_metas"]),
            "socket {i}: nothing coalesced: {summary}"
        );
        assert!(
            n(&s["wakeups"]) > 0,
            "socket {i}: the poller never woke quinn: {summary}"
        );
        assert!(n(&s["tx_datagrams"]) > 0, "socket {i}: {summary}");
        assert_eq!(n(&s["rx_too_long"]), 0, "{summary}");
    }
    // The engine's books: balanced; each socket the client bound was
    // removed at its unbind, everything it delivered was consumed by the
    // client or freed at the close, and the client consumed at least what
    // quinn was handed (a batch taken but not handed out before the
    // endpoint went is consumed too).
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
    for i in 0..2 {
        let line = format!("socket quic{i} unbound by client pid {server_pid}");
        assert!(log.contains(&line), "no {line:?} in {log}");
    }
    for (i, h) in handed.iter().enumerate() {
        let s = common::socket_named(&e, &format!("quic{i}"));
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
