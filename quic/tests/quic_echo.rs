//! The QUIC echo example end to end: `quic_echo` (quinn on udpdemux, the
//! engine on `net_af_packet` on one end of a veth pair) and `quic_client`
//! (quinn on the kernel's UDP) in a network namespace on the other end.
//! The client opens 100 bidirectional streams at once and echoes 10 MB on
//! each (`QUIC_ECHO_BYTES` overrides), checking every byte, over IPv4 and
//! then IPv6. The server's exit line must show the ECN codepoint quinn's
//! client sets (ECT(0)) arriving in `RecvMeta`, receives coalesced
//! (more datagrams than `RecvMeta`s), and the engine's books balanced.
//!
//! The handshake mode: 50 fresh connections, 8 at once, each a full
//! handshake and a 32-byte echo, against the same server: none may fail,
//! the server must have accepted exactly 50, each closed by the client, none
//! left open, and its books must balance.
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

fn bytes_per_stream() -> u64 {
    std::env::var("QUIC_ECHO_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10 << 20)
}

/// When the machine can (root, the tools): a fresh namespace (`tag` in its names), a directory for the
/// certificate, and a `quic_echo` server on the namespace's host end,
/// listening on 198.18.0.1:4433 and [fd00::1]:4433, ready.
struct Rig {
    net: netns::Net,
    dir: PathBuf,
    cert: PathBuf,
    server: Child,
    /// The server's stdout, after `ready`.
    lines: Lines<BufReader<ChildStdout>>,
}

fn start(tag: &str) -> Option<Rig> {
    if !netns::can_run(&["ip", "ethtool", "sysctl"]) {
        return None;
    }
    let pid = std::process::id();
    let net = netns::Net::create(tag, "198.18.0.2/24", "fd00::2/64");
    let dir = std::env::temp_dir().join(format!("udx-{tag}-test-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.der");
    let mut server = Command::new(env!("CARGO_BIN_EXE_quic_echo"))
        .args(["--iface", &net.host])
        .args(["--addr", "198.18.0.1/24", "--addr", "fd00::1/64"])
        .args(["--listen", "198.18.0.1:4433", "--listen", "[fd00::1]:4433"])
        .args(["--prefix", &format!("t-{tag}-{pid}")])
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
    Some(Rig {
        net,
        dir,
        cert,
        server,
        lines,
    })
}

/// Stop the server; its exit line, parsed, after checking it exited well
/// with its books balanced.
fn stop_server(
    mut server: Child,
    lines: Lines<BufReader<ChildStdout>>,
) -> (String, serde_json::Value) {
    drop(server.stdin.take().map(|mut s| s.write_all(b"stop\n")));
    let summary = lines
        .map_while(Result::ok)
        .find(|l| l.starts_with('{'))
        .expect("server's exit line");
    let st = server.wait().unwrap();
    eprintln!("server: {summary}");
    assert!(st.success(), "server failed: {summary}");
    assert!(summary.contains(r#""books_balanced":true"#), "{summary}");
    let j = serde_json::from_str(&summary).expect("server JSON");
    (summary, j)
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The server's connections: `accepted` of them, each closed by the
/// client, none failed, none left open.
fn assert_connections(j: &serde_json::Value, summary: &str, accepted: u64) {
    let c = &j["connections"];
    assert_eq!(n(&c["incoming"]), accepted, "{summary}");
    assert_eq!(n(&c["accepted"]), accepted, "{summary}");
    assert_eq!(n(&c["closed_by_peer"]), accepted, "{summary}");
    assert_eq!(n(&c["failed"]), 0, "{summary}");
    assert_eq!(n(&c["closed_other"]), 0, "{summary}");
    assert_eq!(n(&c["open"]), 0, "{summary}");
}

#[test]
fn quic_echo_100_streams_byte_exact_over_ipv4_and_ipv6_with_ecn() {
    // Without root and the tools, nothing to run.
    let Some(r) = start("qe") else { return };
    let bytes = bytes_per_stream();
    for to in ["198.18.0.1:4433", "[fd00::1]:4433"] {
        let out = r
            .net
            .command(&[env!("CARGO_BIN_EXE_quic_client"), "--connect", to])
            .arg("--cert")
            .arg(&r.cert)
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
    let (summary, j) = stop_server(r.server, r.lines);
    // One connection over IPv4, one over IPv6, both closed by the client.
    assert_connections(&j, &summary, 2);
    // Per socket (IPv4, then IPv6): ECT(0) datagrams arrived (quinn's
    // client marks everything ECT(0) once ECN is validated), no not-ECT
    // beyond the handshake's, and at least one receive carried several
    // datagrams (GRO-style coalescing).
    let socks = j["sockets"].as_array().expect("sockets");
    assert_eq!(socks.len(), 2, "{summary}");
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
    let _ = std::fs::remove_dir_all(&r.dir);
    drop(r.net);
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn quic_handshakes_50_at_8_at_once_all_accepted_and_closed() {
    // Without root and the tools, nothing to run.
    let Some(r) = start("qh") else { return };
    let out = r
        .net
        .command(&[
            env!("CARGO_BIN_EXE_quic_client"),
            "--connect",
            "198.18.0.1:4433",
        ])
        .arg("--cert")
        .arg(&r.cert)
        .args(["--handshakes", "50", "--concurrency", "8"])
        .output()
        .expect("quic_client");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("client: {text}");
    assert!(
        out.status.success(),
        "client failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_str(text.trim()).expect("client JSON");
    assert_eq!(n(&c["handshakes_ok"]), 50, "{text}");
    assert_eq!(n(&c["failures"]), 0, "{text}");
    let (summary, j) = stop_server(r.server, r.lines);
    assert_connections(&j, &summary, 50);
    // Every datagram the engine delivered went to quinn whole.
    assert_eq!(n(&j["sockets"][0]["rx_too_long"]), 0, "{summary}");
    let _ = std::fs::remove_dir_all(&r.dir);
    drop(r.net);
}
