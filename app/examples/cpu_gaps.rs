//! The reference for issue 13's default-rcvbuf goal: how long a thread that
//! never sleeps loses its CPU at once, with nothing of the engine in it.
//!
//! A socket's rcvbuf has to hold what arrives while its consumer is away; the
//! default 212 992 B lasts about 30 µs at the pipeline's rate. This spins on
//! the TSC for a while and counts the gaps between consecutive reads: the
//! timer tick, interrupts, other tasks and the hypervisor taking the CPU.
//! Whatever a consumer loop does, it loses at least these. Run it pinned, as
//! the benchmark does on the consumers' CPU:
//!
//!     taskset -c 0 target/release/examples/cpu_gaps --secs 3 [--json]
//!
//! No EAL: the TSC's rate is measured against the monotonic clock first.
use std::time::{Duration, Instant};

/// Gap floors reported, µs: a gap counts in every floor it reaches.
const FLOORS_US: [u64; 9] = [5, 10, 20, 30, 50, 100, 200, 500, 1000];

#[derive(Debug, thiserror::Error)]
enum GapsError {
    #[error("bad argument: {0} (usage: cpu_gaps [--secs S] [--json])")]
    Arg(String),
}

struct Gaps {
    secs: f64,
    /// Gaps of at least `FLOORS_US[i]`.
    at_least: [u64; FLOORS_US.len()],
    longest_us: f64,
    /// Time in gaps of 5 µs or more.
    lost_ms: f64,
}

fn tsc_hz() -> f64 {
    let (t0, c0) = (Instant::now(), dpdk_sys::eal::rdtsc());
    while t0.elapsed() < Duration::from_millis(200) {
        std::hint::spin_loop();
    }
    let (t1, c1) = (Instant::now(), dpdk_sys::eal::rdtsc());
    (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
}

fn measure(secs: f64) -> Gaps {
    let hz = tsc_hz();
    let floor0 = (FLOORS_US[0] as f64 * hz / 1e6) as u64;
    let end = dpdk_sys::eal::rdtsc() + (secs * hz) as u64;
    let mut g = Gaps {
        secs,
        at_least: [0; FLOORS_US.len()],
        longest_us: 0.0,
        lost_ms: 0.0,
    };
    let mut last = dpdk_sys::eal::rdtsc();
    loop {
        let t = dpdk_sys::eal::rdtsc();
        let d = t.wrapping_sub(last);
        last = t;
        if d >= floor0 {
            // Rare (a few thousand a run): the float work stays off the spin.
            let us = d as f64 * 1e6 / hz;
            for (n, &f) in g.at_least.iter_mut().zip(&FLOORS_US) {
                *n += u64::from(us >= f as f64);
            }
            g.longest_us = g.longest_us.max(us);
            g.lost_ms += us / 1e3;
        }
        if t >= end {
            return g;
        }
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cpu_gaps: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), GapsError> {
    let mut secs = 3.0;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => {
                let v = args
                    .next()
                    .ok_or_else(|| GapsError::Arg("--secs needs a value".into()))?;
                secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && *s <= 3600.0)
                    .ok_or_else(|| GapsError::Arg(format!("--secs {v}: seconds, 0 to 3600")))?;
            }
            "--json" => json = true,
            other => return Err(GapsError::Arg(other.to_string())),
        }
    }
    let g = measure(secs);
    let floors: Vec<String> = FLOORS_US
        .iter()
        .zip(&g.at_least)
        .map(|(f, n)| format!("\"{f}\":{n}"))
        .collect();
    if json {
        println!(
            "{{\"secs\":{},\"gaps_at_least_us\":{{{}}},\"longest_us\":{:.1},\"lost_ms\":{:.2}}}",
            g.secs,
            floors.join(","),
            g.longest_us,
            g.lost_ms
        );
    } else {
        let list: Vec<String> = FLOORS_US
            .iter()
            .zip(&g.at_least)
            .map(|(f, n)| format!(">= {f} µs: {n}"))
            .collect();
        println!(
            "{:.1} s spinning: gaps {}; longest {:.0} µs; {:.1} ms in gaps of 5 µs or more",
            g.secs,
            list.join(", "),
            g.longest_us,
            g.lost_ms
        );
    }
    Ok(())
}
