//! Receive as fast as possible from some of an engine's sockets for a
//! while, and say how many: the out-of-process side of `scripts/bench.sh`'s
//! `client` section.
//!
//!     cargo run --release -p udpdemux-client --example bench -- PREFIX --secs S NAME...
//!
//! Attaches, opens every NAME (all must open), then receives round-robin
//! from them (zero-copy `recv_burst`, each batch freed by the next) for S
//! seconds, touching each datagram's payload length as a consumer would.
//! Prints one line `received N datagrams bytes B in T s lcore L` (T: the
//! receiving, after the opens), closes the sockets and detaches.
//! Errors: one line `error: ...` on stderr, exit status 1.
use std::time::{Duration, Instant};

use udpdemux_client::{Client, RecvBatch};

fn main() {
    let usage = "usage: bench PREFIX --secs S NAME...";
    let mut args = std::env::args().skip(1);
    let mut prefix = None;
    let mut secs: Option<f64> = None;
    let mut names = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()),
            "-h" | "--help" => {
                println!("{usage}");
                return;
            }
            _ if prefix.is_none() => prefix = Some(a),
            _ => names.push(a),
        }
    }
    let (Some(prefix), Some(secs)) = (prefix, secs) else {
        fail(usage)
    };
    if names.is_empty() || secs.is_nan() || secs <= 0.0 {
        fail(usage);
    }
    let client = Client::attach(&prefix).unwrap_or_else(|e| fail(&e.to_string()));
    let mut socks: Vec<_> = names
        .iter()
        .map(|n| client.open(n).unwrap_or_else(|e| fail(&e.to_string())))
        .collect();
    let mut batch = RecvBatch::new();
    let (mut n, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    loop {
        let mut got = 0;
        for s in socks.iter_mut() {
            got += s.recv_burst(&mut batch);
            for d in batch.iter() {
                bytes += d.payload().len() as u64;
            }
        }
        n += got as u64;
        // One clock read per round of the sockets.
        if Instant::now() >= end {
            break;
        }
    }
    let took = start.elapsed().as_secs_f64();
    drop(batch);
    println!(
        "received {n} datagrams bytes {bytes} in {took:.6} s lcore {}",
        client.lcore()
    );
    for s in socks {
        let name = s.name().to_string();
        if let Err(e) = s.close() {
            eprintln!("error: closing {name}: {e}");
        }
    }
    client.detach();
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}
