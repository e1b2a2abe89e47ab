//! The QUIC echo example end to end: `quic_echo` (quinn on udpdemux, the
//! engine on `net_af_packet` on one end of a veth pair) and `quic_client`
//! (quinn on the kernel's UDP) in a network namespace on the other end.
//! The client opens 100 bidirectional streams at once and echoes 10 MB on
//! each (`QUIC_ECHO_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6. The server's exit line must show the ECN codepoint quinn's
//! client sets (ECT(0)) arriving in `RecvMeta`, receives coalesced
//! (more datagrams than `RecvMeta`s), and the engine's books balanced.
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

fn bytes_per_stream() -> u64 {
    std::env::var("QUIC_ECHO_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10 << 20)
}

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
    let mut server = Command::new(env!("CARGO_BIN_EXE_quic_echo"))
        .args(["--iface", &net.host])
        .args(["--addr", "198.18.0.1/24", "--addr", "fd00::1/64"])
        .args(["--listen", "198.18.0.1:4433", "--listen", "[fd00::1]:4433"])
        .args(["--prefix", &format!("t-quic-{pid}")])
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
        "server did not start"
    );
    let bytes = bytes_per_stream();
    for to in ["198.18.0.1:4433", "[fd00::1]:4433"] {
        let out = net
            .command(&[env!("CARGO_BIN_EXE_quic_client"), "--connect", to])
            .arg("--cert")
            .arg(&cert)
            .args(["--streams", "100", "--bytes", &bytes.to_string()])
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
                r#""streams_ok":100,"bytes_echoed":{},"#,
                100 * bytes
            )),
            "{text}"
        );
    }
    drop(server.stdin.take().map(|mut s| s.write_all(b"stop\n")));
    let summary = lines
        .map_while(Result::ok)
        .find(|l| l.starts_with('{'))
        .expect("server's exit line");
    let st = server.wait().unwrap();
    eprintln!("server: {summary}");
    assert!(st.success(), "server failed: {summary}");
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    // Per socket (IPv4, then IPv6): ECT(0) datagrams arrived (quinn's
    // client marks everything ECT(0) once ECN is validated), no not-ECT
    // beyond the handshake's, and at least one receive carried several
    // datagrams (GRO-style coalescing).
    let j: serde_json::Value = serde_json::from_str(&summary).expect("server JSON");
    let socks = j["sockets"].as_array().expect("sockets");
    assert_eq!(socks.len(), 2, "{summary}");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    for (i, s) in socks.iter().enumerate() {
        let e: Vec<u64> = s["rx_ecn"].as_array().unwrap().iter().map(n).collect();
        let datagrams: u64 = e.iter().sum();
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
        assert_eq!(n(&s["rx_too_long"]), 0, "{summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(net);
    std::thread::sleep(Duration::from_millis(10));
}
