//! `send_burst`'s rate to one destination (scripts/bench.sh, section
//! `send`): the engine runs in-process on a config whose port has an
//! address and a static neighbour for the destination (so nothing waits
//! for ARP: on `net_null` nobody answers); an application thread pinned to
//! `--cpu` calls `send_burst` with bursts of `--burst` datagrams of
//! `--size` payload bytes as fast as it can, while the main lcore (this
//! thread) drains the TX ring into the port.
//!
//!     send_bench CONFIG --local 198.18.0.1:5000 --dst 198.18.0.2:9 [--size 64] [--burst 32] [--secs 3] [--cpu 1]
//!
//! The RX lcores of the config have nothing to receive on a `no-rx=1`
//! null port but still poll; they are put under `SCHED_IDLE` so that one
//! sharing the sender's CPU runs only when the sender does not.
//! Prints one JSON line: the measured window's seconds, datagrams taken by
//! `send_burst`, refused (no mbuf / no ring room), handed to the port
//! (`UdpOutDatagrams`), the rate of the last in Mpps, and whether the
//! engine's books balance at exit.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use udpdemux::api::{self, SocketOptions};
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};
use udpdemux::send::SendSummary;

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

/// The EAL's worker threads (`rte-worker-N` here, `lcore-worker-N` in other builds) to SCHED_IDLE.
fn idle_workers() -> usize {
    let mut n = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if comm.starts_with("lcore-worker") || comm.starts_with("rte-worker") {
            let p = libc::sched_param { sched_priority: 0 };
            // SAFETY: a plain syscall on a thread id of this process, with a
            // valid parameter struct.
            if unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &p) } == 0 {
                n += 1;
            }
        }
    }
    n
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity(0, ...) act on this thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let usage = "usage: send_bench CONFIG --local ADDR:PORT --dst ADDR:PORT [--size N] [--burst N] [--secs S] [--cpu N]";
    let mut args = std::env::args().skip(1);
    let config = PathBuf::from(args.next().unwrap_or_else(|| fail(usage)));
    let (mut local, mut dst): (Option<SocketAddr>, Option<SocketAddr>) = (None, None);
    let (mut size, mut burst, mut secs, mut cpu) = (64usize, 32usize, 3.0f64, 1usize);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| fail(usage));
        match a.as_str() {
            "--local" => local = v.parse().ok(),
            "--dst" => dst = v.parse().ok(),
            "--size" => size = v.parse().unwrap_or_else(|_| fail(usage)),
            "--burst" => burst = v.parse().unwrap_or_else(|_| fail(usage)),
            "--secs" => secs = v.parse().unwrap_or_else(|_| fail(usage)),
            "--cpu" => cpu = v.parse().unwrap_or_else(|_| fail(usage)),
            _ => fail(usage),
        }
    }
    let (Some(local), Some(dst)) = (local, dst) else {
        fail(usage)
    };
    let burst = burst.clamp(1, 64);
    let cfg = Config::load(&config).unwrap_or_else(|e| fail(&e.to_string()));
    let mut engine =
        Engine::start(&cfg, &RunOptions::default()).unwrap_or_else(|e| fail(&e.to_string()));
    let idled = idle_workers();
    let sock = api::open(&engine, SocketOptions::new("bench_tx", local))
        .unwrap_or_else(|e| fail(&e.to_string()));
    let tx = api::sender(&engine).unwrap_or_else(|| fail("no port has an address"));
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let sender = {
        let (stop, refused, sock) = (Arc::clone(&stop), Arc::clone(&refused), Arc::clone(&sock));
        std::thread::spawn(move || {
            pin(cpu);
            let payload = vec![0x5au8; size];
            let d: Vec<(SocketAddr, &[u8])> = (0..burst).map(|_| (dst, &payload[..])).collect();
            let mut taken = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = api::send_burst(&tx, &sock, &d);
                taken += n as u64;
                if n < burst {
                    refused.fetch_add((burst - n) as u64, Ordering::Relaxed);
                }
            }
            taken
        })
    };
    let path = Arc::clone(engine.shared());
    let of = || SendSummary::of(path.send.as_ref().expect("the send path"), &path.rx);
    // Warm up half a second, then measure.
    engine.main_loop(Some(0.5));
    let (a, ta, ra) = (of(), Instant::now(), refused.load(Ordering::Relaxed));
    engine.main_loop(Some(0.5 + secs));
    let (b, tb, rb) = (of(), Instant::now(), refused.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    let taken = sender.join().unwrap_or(0);
    // What the ring still holds goes out.
    engine.main_loop(Some(0.6 + secs));
    let out = |s: &SendSummary| s.out_datagrams.iter().sum::<u64>();
    let acc = |s: &SendSummary| s.accepted.iter().sum::<u64>();
    let window = (tb - ta).as_secs_f64();
    let sent = out(&b) - out(&a);
    drop(path);
    let summary = engine.stop().unwrap_or_else(|e| fail(&e.to_string()));
    println!(
        "{}",
        serde_json::json!({
            "seconds": window,
            "size": size,
            "burst": burst,
            "taken": acc(&b) - acc(&a),
            "refused": rb - ra,
            "out_datagrams": sent,
            "mpps": sent as f64 / window / 1e6,
            "taken_total": taken,
            "idled_workers": idled,
            "tx_errors": b.tx_errors.iter().sum::<u64>(),
            "books_balanced": summary.books_balanced,
        })
    );
}
