//! Embedding udpdemux as a library: start the engine from a config, open a
//! socket through the API (no built-in handler consumes it), and consume its
//! datagrams with `recv_burst`, zero copy, in batches.
//!
//!     cargo run --release --example embed -- conf/af_packet.toml 198.18.0.1:5000 10
//!
//! arguments: config file, local address to open, seconds to run (default
//! 10). With `conf/af_packet.toml` and the veth pair from docs/veth.md, send
//! from the namespace:
//!
//!     ip netns exec udx-client sh -c 'echo hi | socat - UDP4:198.18.0.1:5000'
//!
//! The engine keeps answering ARP/ND/ping and running the config's own
//! sockets; this program prints every datagram it takes.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use udpdemux::api::{self, RecvBatch, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut args = std::env::args().skip(1);
    let config = PathBuf::from(args.next().unwrap_or_else(|| "conf/af_packet.toml".into()));
    let local: SocketAddr = args
        .next()
        .unwrap_or_else(|| "198.18.0.1:5000".into())
        .parse()?;
    let secs: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10.0);

    let cfg = Config::load(&config)?;
    let engine = Engine::start(
        &cfg,
        &RunOptions {
            config_path: Some(config),
            ..RunOptions::default()
        },
    )?;
    let sock = api::open(&engine, SocketOptions::new("embedded", local))?;
    println!("listening on {local} for {secs} s");

    let mut batch = RecvBatch::new();
    let (mut count, mut bytes) = (0u64, 0u64);
    let mut last_drops = 0u32;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        // The previous batch is freed (and its memory released) here.
        if api::recv_burst(&sock, &mut batch) == 0 {
            // Sockets the config leaves to the main lcore are consumed by us too.
            if engine.poll_main() == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            continue;
        }
        for dg in batch.iter() {
            if dg.drops() != last_drops {
                println!(
                    "  ({} datagrams dropped before this one)",
                    dg.drops().wrapping_sub(last_drops)
                );
                last_drops = dg.drops();
            }
            let text = String::from_utf8_lossy(dg.payload());
            println!(
                "{:?} {} -> {}: {} bytes {:?}",
                dg.family(),
                dg.src(),
                dg.dst(),
                dg.payload().len(),
                text.trim_end()
            );
            count += 1;
            bytes += dg.payload().len() as u64;
        }
    }
    // Give the mbufs back before the socket and the engine go away.
    drop(batch);
    api::close(&engine, &sock)?;
    let summary = engine.stop()?;
    println!(
        "received {count} datagrams, {bytes} bytes; books balanced: {}",
        summary.books_balanced
    );
    Ok(())
}
