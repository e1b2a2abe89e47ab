//! The QUIC echo client on the kernel's UDP (quinn's default tokio socket),
//! for a `quic_echo` server. Two modes, each printing one JSON line and
//! exiting non-zero unless everything came back whole:
//!
//! * bulk (the default): one connection, `--streams` bidirectional streams
//!   at once, `--bytes` of a known pattern written on each and every byte
//!   that comes back checked;
//! * handshakes (`--handshakes N`): N fresh connections, `--concurrency`
//!   of them in flight at once, each a full TLS 1.3 handshake (no session
//!   resumption, no 0-RTT), one stream echoing `--handshake-bytes` (checked;
//!   0: none), then a clean close.
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use udpdemux_quinn::echo;

#[derive(Parser)]
#[command(about = "QUIC echo client (kernel UDP) for quic_echo")]
struct Args {
    /// The server's address.
    #[arg(long)]
    connect: SocketAddr,
    /// The server's certificate (DER), the only one trusted.
    #[arg(long)]
    cert: std::path::PathBuf,
    #[arg(long, default_value_t = 100)]
    streams: u32,
    /// Bytes echoed per stream.
    #[arg(long, default_value_t = 10 << 20)]
    bytes: u64,
    /// Handshake mode: make this many fresh connections instead of the
    /// bulk transfer.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with_all = ["streams", "bytes"])]
    handshakes: Option<u32>,
    /// Handshake mode: connections in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), requires = "handshakes")]
    concurrency: u32,
    /// Handshake mode: bytes echoed on one stream of each connection, to
    /// show it works (0: handshake and close only).
    #[arg(long, default_value_t = 32, requires = "handshakes")]
    handshake_bytes: u64,
}

/// What a run printed and whether it was whole.
type Report = (String, bool);

fn main() -> ExitCode {
    let a = Args::parse();
    let cert = match std::fs::read(&a.cert) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quic_client: cannot read {}: {e}", a.cert.display());
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quic_client: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = rt.block_on(async {
        let bind: SocketAddr = if a.connect.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let mut ep = quinn::Endpoint::client(bind).map_err(|e| format!("bind {bind}: {e}"))?;
        ep.set_default_client_config(echo::client_config(&cert, a.streams)?);
        let report = match a.handshakes {
            Some(n) => handshakes(&ep, &a, n).await,
            None => bulk(&ep, &a).await,
        };
        // Let the closes reach the server (the time is already taken).
        ep.wait_idle().await;
        Ok::<Report, String>(report)
    });
    match out {
        Ok((line, whole)) => {
            println!("{line}");
            if whole {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("quic_client: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bulk(ep: &quinn::Endpoint, a: &Args) -> Report {
    let o = echo::run_client(ep, a.connect, a.streams, a.bytes).await;
    // The client's side of the path at the end (none if no connection).
    let path = o.path.map_or_else(
        || "null".to_string(),
        |p| {
            format!(
                r#"{{"rtt_us":{},"cwnd":{},"sent_packets":{},"lost_packets":{},"congestion_events":{},"mtu":{}}}"#,
                p.rtt.as_micros(),
                p.cwnd,
                p.sent_packets,
                p.lost_packets,
                p.congestion_events,
                p.current_mtu
            )
        },
    );
    let line = format!(
        r#"{{"streams_ok":{},"bytes_echoed":{},"secs":{:.3},"bytes_per_sec":{:.0},"path":{path},"error":{:?}}}"#,
        o.streams_ok,
        o.bytes_echoed,
        o.secs,
        o.bytes_echoed as f64 / o.secs.max(1e-9),
        o.first_error.unwrap_or_default()
    );
    let whole = o.streams_ok == a.streams && o.bytes_echoed == u64::from(a.streams) * a.bytes;
    (line, whole)
}

async fn handshakes(ep: &quinn::Endpoint, a: &Args, n: u32) -> Report {
    let o = echo::run_handshakes(ep, a.connect, n, a.concurrency, a.handshake_bytes).await;
    let line = format!(
        r#"{{"handshakes_ok":{},"failures":{},"concurrency":{},"secs":{:.3},"handshakes_per_sec":{:.1},"error":{:?}}}"#,
        o.ok,
        o.failures,
        a.concurrency,
        o.secs,
        f64::from(o.ok) / o.secs.max(1e-9),
        o.first_error.unwrap_or_default()
    );
    (line, o.ok == n && o.failures == 0)
}
