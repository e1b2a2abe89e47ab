//! The QUIC echo client on the kernel's UDP (quinn's default tokio socket):
//! connects to a `quic_echo` server, opens `--streams` bidirectional
//! streams at once, writes `--bytes` of a known pattern on each and checks
//! every byte that comes back. Prints one JSON line; exits non-zero unless
//! every stream came back whole.
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
}

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
        let out = echo::run_client(&ep, a.connect, a.streams, a.bytes).await;
        ep.wait_idle().await;
        Ok::<_, String>(out)
    });
    match out {
        Ok(o) => {
            println!(
                r#"{{"streams_ok":{},"bytes_echoed":{},"secs":{:.3},"bytes_per_sec":{:.0},"error":{:?}}}"#,
                o.streams_ok,
                o.bytes_echoed,
                o.secs,
                o.bytes_echoed as f64 / o.secs.max(1e-9),
                o.first_error.unwrap_or_default()
            );
            if o.streams_ok == a.streams && o.bytes_echoed == u64::from(a.streams) * a.bytes {
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
