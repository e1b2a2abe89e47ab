//! What the QUIC echo tests share: the server's start and exit line, the
//! kernel-socket client's runs (bulk over IPv4 and IPv6, handshakes), and
//! the checks of the adapter's and the server's connection counters.
#![allow(dead_code)]
#[path = "../../../app/tests/common/netns.rs"]
pub mod netns;

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// A running `quic_echo` and its stdout's lines.
pub struct Server {
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Server {
    /// Start `quic_echo` with `args` and wait for its `ready` (`why` is
    /// shown if it never comes).
    pub fn start(args: &[&str], why: impl FnOnce() -> String) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_quic_echo"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("quic_echo");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok);
        if first.as_deref() != Some("ready") {
            let _ = child.kill();
            panic!("server did not start ({first:?}): {}", why());
        }
        Server { child, lines }
    }

    /// Tell it to stop: its exit line (JSON), after it exited successfully.
    pub fn stop(mut self) -> (String, Value) {
        drop(self.child.stdin.take().map(|mut s| s.write_all(b"stop\n")));
        let summary = self
            .lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.starts_with('{'))
            .expect("server's exit line");
        let st = self.child.wait().unwrap();
        eprintln!("server: {summary}");
        assert!(st.success(), "server failed: {summary}");
        let j = serde_json::from_str(&summary).expect("server JSON");
        (summary, j)
    }
}

/// From the namespace, `quic_client --connect to --cert cert` with `args`:
/// its JSON line, after it exited successfully.
fn client(net: &netns::Net, cert: &Path, to: &str, args: &[String]) -> String {
    let out = net
        .command(&[env!("CARGO_BIN_EXE_quic_client"), "--connect", to])
        .arg("--cert")
        .arg(cert)
        .args(args)
        .output()
        .expect("quic_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{to}: {text}");
    assert!(
        out.status.success(),
        "client to {to} failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// From the namespace, `quic_client` to the server's IPv4 and then IPv6
/// address (port 4433): `streams` streams of `bytes` each, every byte
/// echoed and checked.
pub fn echo_both(net: &netns::Net, cert: &Path, streams: u32, bytes: u64) {
    for to in ["198.18.0.1:4433", "[fd00::1]:4433"] {
        echo(net, cert, to, streams, bytes);
    }
}

/// From the namespace, `quic_client` to `to`: `streams` streams of `bytes`
/// each, every byte echoed and checked.
pub fn echo(net: &netns::Net, cert: &Path, to: &str, streams: u32, bytes: u64) {
    let args = [
        "--streams".into(),
        streams.to_string(),
        "--bytes".into(),
        bytes.to_string(),
    ];
    let text = client(net, cert, to, &args);
    assert!(
        text.contains(&format!(
            r#""streams_ok":{streams},"bytes_echoed":{},"#,
            u64::from(streams) * bytes
        )),
        "{text}"
    );
    // The client reports its path (RTT, losses) for the benchmark.
    assert!(text.contains(r#""path":{"rtt_us":"#), "{text}");
}

/// Bytes per stream: `var` from the environment, else `default`.
pub fn bytes_per_stream(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A counter of the JSON.
pub fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Per socket of the server's exit line (IPv4, then IPv6): ECT(0)
/// datagrams arrived (quinn's client marks everything ECT(0) once ECN is
/// validated), no not-ECT beyond the handshake's, at least one receive
/// carried several datagrams (GRO-style coalescing), the poller woke
/// quinn, nothing was too long for quinn's buffers. The datagrams handed
/// to quinn, per socket.
pub fn check_sockets(summary: &str, j: &Value) -> Vec<u64> {
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
            "socket {i}: nothing ever woke quinn's receive: {summary}"
        );
        assert!(n(&s["tx_datagrams"]) > 0, "socket {i}: {summary}");
        assert_eq!(n(&s["rx_too_long"]), 0, "{summary}");
    }
    handed
}

/// From the namespace, `quic_client --handshakes count --concurrency
/// concurrency` to `to`: every connection a full handshake and a 32-byte
/// echo, none may fail.
pub fn handshakes(net: &netns::Net, cert: &Path, to: &str, count: u32, concurrency: u32) {
    let args = [
        "--handshakes".into(),
        count.to_string(),
        "--concurrency".into(),
        concurrency.to_string(),
    ];
    let text = client(net, cert, to, &args);
    let c: Value = serde_json::from_str(text.trim()).expect("client JSON");
    assert_eq!(n(&c["handshakes_ok"]), u64::from(count), "{text}");
    assert_eq!(n(&c["failures"]), 0, "{text}");
}

/// The server's connections (its exit line's `connections`): `accepted`
/// attempts, each accepted and closed by the client, none failed, none
/// ended otherwise, none left open.
pub fn check_connections(summary: &str, j: &Value, accepted: u64) {
    let c = &j["connections"];
    assert_eq!(n(&c["incoming"]), accepted, "{summary}");
    assert_eq!(n(&c["accepted"]), accepted, "{summary}");
    assert_eq!(n(&c["closed_by_peer"]), accepted, "{summary}");
    assert_eq!(n(&c["failed"]), 0, "{summary}");
    assert_eq!(n(&c["closed_other"]), 0, "{summary}");
    assert_eq!(n(&c["open"]), 0, "{summary}");
    // quinn's ConnectionStats, summed: every connection sent and received
    // datagrams, and acknowledged some.
    assert!(
        n(&c["udp_tx"]) >= accepted && n(&c["udp_rx"]) >= accepted,
        "{summary}"
    );
    assert!(
        n(&c["udp_tx_ios"]) >= 1 && n(&c["udp_tx_ios"]) <= n(&c["udp_tx"]),
        "{summary}"
    );
    assert!(
        n(&c["acks_tx"]) >= accepted && n(&c["acks_rx"]) >= accepted,
        "{summary}"
    );
}
