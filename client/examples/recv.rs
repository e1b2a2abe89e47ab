//! Attach to a running engine, open some of its sockets, receive, close.
//!
//!     cargo run -p udpdemux-client --example recv -- PREFIX [--secs S] [--idle-ms N] [--hold H] [--stop-file F] [--min N] [--bind NAME@LOCAL[@RCVBUF]]... [--stats NAME]... [--stats-final] NAME[=EXPECT]...
//!
//! Prints `attached lcore L` (its EAL lcore id) once attached, then
//! binds every `--bind` socket (`bound NAME id=ID`, or `bind-error NAME:
//! ...`), opens every NAME (one line each: `open NAME id=ID`, or `open-error NAME:
//! ...` and goes on), then receives from the sockets it has: for S
//! seconds with `--secs`, else until every NAME=EXPECT has its EXPECT
//! datagrams and nothing more came for N ms (default 300), or 30 s passed;
//! with `--stop-file F`, not before file F exists (a test holds clients
//! attached side by side that way); with `--min N`, not before every
//! socket it has received N datagrams (at most 30 s more).
//! Then one line per socket:
//! `socket NAME received N bytes B dsts [..] srcs K tsc_ok BOOL drops D`,
//! `closed NAME`, and `detached`. With `--stats NAME` (any socket of
//! the engine, opened here or not), every 50 ms while it receives it
//! prints `stats NAME key=value ...` (`Client::stats`, the report's
//! keys), or once `stats-error NAME: ...`; with `--stats-final`, after
//! receiving (its batch freed, before closing), it reads again until two
//! reads 100 ms apart agree (5 s at most) and prints that one as
//! `stats-final NAME ...` (for a replay that has ended).
//! With `--hold H`, before those lines it
//! receives until its batch holds datagrams again, prints `holding N from
//! NAME pid P`, and keeps them H seconds (a test kills it meanwhile: the
//! engine must reclaim them). Errors: one line `error: ...` on stderr,
//! exit status 1. The tests run it against a spawned engine.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use udpdemux_client::{Client, RecvBatch};

#[derive(Default)]
struct Tally {
    n: u64,
    bytes: u64,
    dsts: BTreeSet<String>,
    srcs: BTreeSet<String>,
    tsc_ok: bool,
    drops: u32,
}

fn main() {
    let usage = "usage: recv PREFIX [--secs S] [--idle-ms N] [--hold H] [--stop-file F] [--min N] [--bind NAME@LOCAL[@RCVBUF]]... [--stats NAME]... [--stats-final] NAME[=EXPECT]...";
    let mut args = std::env::args().skip(1);
    let mut prefix = None;
    let mut secs: Option<f64> = None;
    let mut idle_ms = 300u64;
    let mut hold: Option<f64> = None;
    let mut stop_file: Option<std::path::PathBuf> = None;
    let mut min = 0u64;
    let mut binds: Vec<String> = Vec::new();
    let mut stats: Vec<String> = Vec::new();
    let mut stats_final = false;
    let mut names: Vec<(String, Option<u64>)> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => {
                secs = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| fail(usage)),
                )
            }
            "--idle-ms" => {
                idle_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail(usage))
            }
            "--bind" => binds.push(args.next().unwrap_or_else(|| fail(usage))),
            "--stats" => stats.push(args.next().unwrap_or_else(|| fail(usage))),
            "--stats-final" => stats_final = true,
            "--min" => {
                min = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail(usage))
            }
            "--stop-file" => stop_file = Some(args.next().unwrap_or_else(|| fail(usage)).into()),
            "--hold" => {
                hold = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| fail(usage)),
                )
            }
            "-h" | "--help" => {
                println!("{usage}");
                return;
            }
            _ if prefix.is_none() => prefix = Some(a),
            _ => {
                let (n, e) = match a.split_once('=') {
                    Some((n, e)) => (
                        n.to_string(),
                        Some(e.parse().unwrap_or_else(|_| fail(usage))),
                    ),
                    None => (a.clone(), None),
                };
                names.push((n, e));
            }
        }
    }
    let Some(prefix) = prefix else { fail(usage) };
    let client = Client::attach(&prefix).unwrap_or_else(|e| fail(&e.to_string()));
    println!("attached lcore {}", client.lcore());
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    let mut socks = Vec::new();
    for spec in &binds {
        let w: Vec<&str> = spec.split('@').collect();
        let (name, local) = match w.as_slice() {
            [n, l, ..] => (*n, l.parse().unwrap_or_else(|_| fail(usage))),
            _ => fail(usage),
        };
        let mut o = udpdemux_client::SocketOptions::new(name, local);
        if let Some(r) = w.get(2) {
            o.rcvbuf = r.parse().unwrap_or_else(|_| fail(usage));
        }
        match client.bind(o) {
            Ok(s) => {
                println!("bound {name} id={}", s.id());
                socks.push((
                    s,
                    None,
                    Tally {
                        tsc_ok: true,
                        ..Tally::default()
                    },
                ));
            }
            Err(e) => println!("bind-error {name}: {e}"),
        }
    }
    for (name, expect) in &names {
        match client.open(name) {
            Ok(s) => {
                println!("open {name} id={}", s.id());
                socks.push((
                    s,
                    *expect,
                    Tally {
                        tsc_ok: true,
                        ..Tally::default()
                    },
                ));
            }
            Err(e) => println!("open-error {name}: {e}"),
        }
    }
    let mut batch = RecvBatch::new();
    let start = Instant::now();
    let mut last_rx = Instant::now();
    let mut last_stats: Option<Instant> = None;
    loop {
        if last_stats.is_none_or(|t| t.elapsed() >= Duration::from_millis(50)) {
            print_stats(&client, &mut stats);
            last_stats = Some(Instant::now());
        }
        let mut got = 0;
        for (s, _, t) in socks.iter_mut() {
            let n = udpdemux_client::recv_burst(s, &mut batch);
            got += n;
            let now = dpdk_sys::eal::rdtsc();
            for d in batch.iter() {
                t.n += 1;
                t.bytes += d.payload().len() as u64;
                t.dsts.insert(d.dst().to_string());
                t.srcs.insert(d.src().to_string());
                t.tsc_ok &= d.rx_tsc() > 0 && d.rx_tsc() <= now;
                t.drops = t.drops.max(d.drops());
            }
        }
        let now = Instant::now();
        if got > 0 {
            last_rx = now;
        }
        let stop = stop_file.as_ref().is_none_or(|f| f.exists())
            && socks.iter().all(|(_, _, t)| t.n >= min);
        let done = match secs {
            Some(s) => {
                let t = now.duration_since(start).as_secs_f64();
                (stop && t >= s) || t >= s + 30.0
            }
            None => {
                let met = socks.iter().all(|(_, e, t)| !e.is_some_and(|e| t.n < e));
                (stop && met && now.duration_since(last_rx) >= Duration::from_millis(idle_ms))
                    || now.duration_since(start) >= Duration::from_secs(30)
            }
        };
        if done {
            break;
        }
        if got == 0 {
            std::thread::yield_now();
        }
    }
    if let Some(h) = hold {
        hold_one(&mut socks, &mut batch, h);
    }
    // Free the last batch (its memory goes back to its socket) before closing.
    drop(batch);
    if stats_final {
        for name in &stats {
            final_stats(&client, name);
        }
    }
    for (s, _, t) in socks {
        let name = s.name().to_string();
        println!(
            "socket {name} received {} bytes {} dsts {:?} srcs {} tsc_ok {} drops {}",
            t.n,
            t.bytes,
            t.dsts,
            t.srcs.len(),
            t.tsc_ok,
            t.drops
        );
        let verb = if s.is_bound() { "unbound" } else { "closed" };
        match s.close() {
            Ok(()) => println!("{verb} {name}"),
            Err(e) => println!("close-error {name}: {e}"),
        }
    }
    let clean = client.detach();
    println!("detached cleanup={clean}");
}

/// One `stats NAME ...` line per name; a name the engine refuses is
/// printed once (`stats-error`) and dropped.
fn print_stats(client: &Client, names: &mut Vec<String>) {
    names.retain(|name| match client.stats(name) {
        Ok(st) => {
            println!("stats {name} {}", st.encode().trim_end().replace('\n', " "));
            true
        }
        Err(e) => {
            println!("stats-error {name}: {e}");
            false
        }
    });
}

/// Read `name`'s stats until two reads 100 ms apart agree (5 s at most):
/// `stats-final NAME ...`.
fn final_stats(client: &Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut prev = None;
    loop {
        let st = match client.stats(name) {
            Ok(st) => st,
            Err(e) => fail(&e.to_string()),
        };
        if prev.as_ref() == Some(&st) || Instant::now() >= deadline {
            println!(
                "stats-final {name} {}",
                st.encode().trim_end().replace('\n', " ")
            );
            return;
        }
        prev = Some(st);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Receive (counting as before) until the batch holds datagrams, say so,
/// and keep them `secs` seconds.
fn hold_one(
    socks: &mut [(udpdemux_client::ClientSocket<'_>, Option<u64>, Tally)],
    batch: &mut RecvBatch,
    secs: f64,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for (s, _, t) in socks.iter_mut() {
            if udpdemux_client::recv_burst(s, batch) > 0 {
                t.n += batch.len() as u64;
                t.bytes += batch.iter().map(|d| d.payload().len() as u64).sum::<u64>();
                println!(
                    "holding {} from {} pid {}",
                    batch.len(),
                    s.name(),
                    std::process::id()
                );
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::thread::sleep(Duration::from_secs_f64(secs));
                return;
            }
        }
        std::thread::yield_now();
    }
    fail("nothing to hold within 10 s");
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}
