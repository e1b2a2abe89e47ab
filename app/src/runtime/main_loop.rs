//! The main lcore's loop: its share of consuming, the timers (duration,
//! stats lines, flow-table GC, idleness), signals and SIGHUP reloads, and
//! the starvation watch of the RX pools.
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dpdk_sys::{eal, Mempool};

use super::consumer::Consumer;
use super::idle::{Contention, IdleBackoff, SchedBatch};
use super::report::snapshot;
use super::shared::Shared;
use super::thread_time::GapMeter;
use super::{clients, reload, signals};
use crate::config::Config;
use crate::counters;
use crate::nstat::{self, StatsFormat};
use crate::starvation::Sampler;

/// Polls of the main lcore's consumer between two looks at its timers and
/// signals (a poll over a few empty rings takes tens of ns; a loaded one a
/// few µs, so timers fire within a millisecond or so).
pub const MAIN_CHECK_POLLS: u32 = 64;

/// The main lcore's nap when it has nothing to do: its timers (stats,
/// signals, the neighbour table's) are checked this often, and an
/// in-process sender's frames end it early (`crate::wake`).
const IDLE_NAP: Duration = Duration::from_millis(5);

/// Seconds between two `malloc_trim`s on the main lcore: often enough that
/// a soak's RSS does not drift, rare enough to cost nothing measurable (a
/// trim of the engine's small heaps takes microseconds).
const TRIM_EVERY_SECS: u64 = 10;

/// What the main lcore's loop works with, lent by the engine.
pub struct MainLcore<'a> {
    pub shared: &'a Arc<Shared>,
    pub cfg: &'a Config,
    /// The config file, re-read on SIGHUP.
    pub config_path: Option<&'a Path>,
    /// When the worker lcores were launched (the duration counts from it).
    pub started: Instant,
    pub stats_format: StatsFormat,
    pub pools: &'a [(u32, Mempool)],
    /// Each RX pool's low-water mark and its pollers (same order as `pools`).
    pub pool_marks: &'a [(u32, Vec<u32>)],
    /// RX pools' free mbufs per stats interval.
    pub pool_samples: &'a mut Vec<u32>,
}

/// Print a stats line per interval; return on a signal, the duration, or idleness.
///
/// When the main lcore consumes, this is a poll loop like DPDK's
/// examples: the per-poll path is one pass of the [`Consumer`];
/// every [`MAIN_CHECK_POLLS`] polls one TSC read decides which timer is
/// due (duration, stats interval, flow-table GC, idle check) and the
/// signal flags are read. No system clock per poll.
pub fn run(m: MainLcore<'_>, consumer: &mut Consumer, duration: Option<f64>) {
    let shared = Arc::clone(m.shared);
    let clock = super::thread_time::LoopClock::start();
    // `engine.idle_sched_batch` (`idle::SchedBatch`): the thread is the
    // application's again, under its own policy, when the loop returns.
    let batch = SchedBatch::enter_if(shared.idle_sched_batch, &shared.main_thread);
    CONTENTION.with(|c| {
        let mut c = c.borrow_mut();
        let c = c.get_or_insert_with(|| Contention::new(shared.tsc_hz, false));
        c.resume(batch.is_some());
    });
    let hz = shared.tsc_hz.max(1);
    let ms_ticks = (hz / 1000).max(1);
    let interval_ticks = m
        .cfg
        .engine
        .stats_interval_ms
        .max(1)
        .saturating_mul(ms_ticks);
    let idle_ticks = m.cfg.engine.stop_when_idle_ms.saturating_mul(hz) / 1000;
    // Duration counts from `started` (set when the lcores were launched).
    let start_tsc = eal::rdtsc();
    let left = duration.map(|d| (d - m.started.elapsed().as_secs_f64()).max(0.0));
    let end_tsc = left.map(|l| start_tsc.saturating_add((l * hz as f64) as u64));
    let mut last_print = start_tsc;
    let mut next_print = start_tsc + interval_ticks;
    let mut next_gc = start_tsc + hz;
    // Client liveness (a dead client's sockets and mbufs come back).
    let live_ticks = crate::client_proto::LIVENESS_MS * ms_ticks;
    let mut next_live = start_tsc + live_ticks;
    let mut next_trim = start_tsc + TRIM_EVERY_SECS * hz;
    // The idle check sums every RX queue's counters (lines the RX lcores
    // write): once per millisecond is plenty for a timeout in ms.
    let mut next_idle = start_tsc + ms_ticks;
    let mut last_pkts = 0u64;
    let mut last_bytes = 0u64;
    let mut last_delivered = 0u64;
    let mut last_drops = 0u64;
    let mut last_nstat: Option<nstat::Counters> = None;
    let mut polls = 0u32;
    // The RX pools' free counts, once per millisecond at most (TSC).
    let mut sampler = Sampler::new(start_tsc);
    let mut next_sample = start_tsc;
    // The send path moved frames less than a millisecond ago: poll it
    // again at once rather than sleep (a sender's next burst comes within
    // microseconds, and the rings would fill while this lcore slept).
    let mut tx_busy_until = 0u64;
    // ... unless `engine.idle_sleep_us` says the CPU is shared: then,
    // for longer after the last send (a QUIC sender's flights come a round
    // trip apart, often more than a millisecond on a loaded machine), it
    // naps after a few empty passes, and the nap is the long one: the
    // sender's next frames end it (`crate::wake`), so its length costs no
    // latency, while RX-style short naps doubling up to the cap armed a
    // timer each, about seven per gap between flights (on a VM each arm
    // is a hypervisor exit: 8% of both CPUs' samples in the QUIC handshake
    // benchmark, which went from 0.57-0.62 to 0.72-0.76 of the kernel's
    // rate without them).
    let mut tx_backoff = IdleBackoff::new(shared.idle_sleep_us, super::idle::MAIN_SPIN_POLLS);
    // Its naps end when a sender queues frames (`crate::wake`).
    if let Some(tx) = shared.send.as_ref() {
        tx.wake.register();
    }
    let tx_window = if shared.idle_sleep_us > 0 { 10 * ms_ticks } else { ms_ticks };
    // IGMP / MLD: joins and leaves announced, queries answered.
    let mut reporter = crate::mcast::membership::Reporter::new(eal::rdtsc());
    // The longest time between two polls of the sockets consumed here.
    let mut gap = GapMeter::default();
    loop {
        // The poll re-reads the registry when it changed: sockets added
        // on SIGHUP are consumed too.
        consumer.poll(&shared);
        if consumer.sockets() > 0 {
            gap.mark(eal::rdtsc());
            polls += 1;
            if polls < MAIN_CHECK_POLLS {
                continue;
            }
            polls = 0;
        } else {
            // Every branch below naps, or waits on a sender: the time
            // until the next poll is no gap.
            gap.restart();
            if shared.exception.is_some() {
                // The kernel's frames wait on the tap for this loop: a short
                // nap keeps the exception path's round trip well under a
                // millisecond (a TCP peer's delayed ACK is 40 ms) while the
                // main lcore stays mostly asleep.
                std::thread::sleep(Duration::from_micros(100));
            } else if shared.clients.open.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                // Nothing to consume here, but a client's frees to fold soon:
                // its socket's budget waits for them. A client most likely
                // shares this lcore's CPU: no busy polling of its TX ring (1024
                // frames per 100 µs is 10 Mpps).
                std::thread::sleep(Duration::from_micros(100));
            } else if eal::rdtsc() < tx_busy_until {
                // An in-process sender is busy: poll again at once, as an lcore
                // does (a yield here hands the CPU to any other runnable task
                // for a whole time slice, and the TX ring fills meanwhile).
                if tx_backoff.idle().is_some() {
                    nap_until_sent(&shared, IDLE_NAP);
                }
            } else {
                // Nothing to consume here: the main lcore only keeps time (and
                // wakes for a sender's frames: `wake`).
                nap_until_sent(&shared, IDLE_NAP);
            }
        }
        clients::serve(&shared);
        // send_burst's and the clients' TX rings into the main lcore's TX
        // queue, and the neighbour table's timers, unless an RX lcore that
        // runs an application's task took them over (`lcore_task`).
        let now = eal::rdtsc();
        if main_sends(&shared) && crate::send::service(&shared, shared.main_tx_queue, now) > 0 {
            tx_busy_until = now + tx_window;
            tx_backoff.busy();
        }
        reporter.service(&shared, now);
        // The kernel's frames on the exception tap, out of the data port.
        if let (Some(x), Some(q)) = (&shared.exception, shared.main_tx_queue) {
            x.from_kernel(q);
        }
        if signals::stop_requested() {
            if signals::stop_by_worker() {
                log::info!("a worker lcore asked to stop (its error is above), stopping");
            } else {
                log::info!("signal received, stopping");
            }
            break;
        }
        if signals::take_reload() {
            reload::on_sighup(m.config_path, m.cfg, &shared);
        }
        let now = eal::rdtsc();
        if end_tsc.is_some_and(|e| now >= e) {
            break;
        }
        if idle_ticks > 0 && now >= next_idle {
            next_idle = now + ms_ticks;
            let total: u64 = shared
                .rx
                .iter()
                .flat_map(|l| l.qstats.iter())
                .map(|q| q.packets.get())
                .sum();
            // An lcore that never received (stamp 0) counts as idle only once others have.
            let all_idle = shared
                .rx
                .iter()
                .all(|l| now.saturating_sub(l.last_rx_tsc.get()) > idle_ticks);
            let any_seen = shared.rx.iter().any(|l| l.last_rx_tsc.get() != 0);
            if total > 0 && any_seen && all_idle {
                log::info!(
                    "all RX queues idle for {} ms, stopping",
                    m.cfg.engine.stop_when_idle_ms
                );
                break;
            }
        }
        if now >= next_live {
            clients::check_liveness(&shared);
            next_live = now + live_ticks;
        }
        if now >= next_gc {
            shared.table.collect_garbage();
            next_gc = now + hz;
        }
        if now >= next_trim {
            // Pages that reloads, telemetry and log formatting freed go
            // back to the kernel, so a long run's RSS stays flat.
            dpdk_sys::os::release_free_heap();
            next_trim = now + TRIM_EVERY_SECS * hz;
        }
        if now >= next_sample {
            next_sample = now + ms_ticks;
            sample_pools(&m, &mut sampler, now);
        }
        if now >= next_print {
            let secs = now.saturating_sub(last_print) as f64 / hz as f64;
            last_print = now;
            next_print = now + interval_ticks;
            let pkts: u64 = shared
                .rx
                .iter()
                .flat_map(|l| l.qstats.iter())
                .map(|q| q.packets.get())
                .sum();
            let bytes: u64 = shared
                .rx
                .iter()
                .flat_map(|l| l.qstats.iter())
                .map(|q| q.bytes.get())
                .sum();
            let socks = shared.sockets.load();
            // Removed sockets keep their books in `removed`: count them too,
            // so a SIGHUP does not make the totals (and rates) go backwards.
            // The floor pipeline's own counters are zero in other modes.
            let removed = shared.removed.lock().expect("removed lock");
            let delivered: u64 = socks
                .iter()
                .map(|e| e.sock.stats().delivered + e.sock.floor.delivered())
                .sum::<u64>()
                + removed.iter().map(|s| s.delivered).sum::<u64>();
            let drops: u64 = socks
                .iter()
                .map(|e| e.sock.stats().drops_total() + e.sock.floor.ring_full())
                .sum::<u64>()
                + removed
                    .iter()
                    .map(|s| s.drops.values().sum::<u64>())
                    .sum::<u64>();
            drop(removed);
            // A fresh sample for the line, then the warning if the pool
            // was below its mark at any sample of the interval.
            sample_pools(&m, &mut sampler, now);
            if let Some(w) = sampler.check(&shared.pool_watch, || top_holders(&shared, 3)) {
                log::warn!("{w}");
            }
            let pw = &shared.pool_watch;
            if m.stats_format == StatsFormat::Nstat {
                let now = nstat::counters(&snapshot(&shared, m.started.elapsed().as_secs_f64()));
                print!("{}", nstat::render(&now, last_nstat.as_ref(), secs));
                last_nstat = Some(now);
            } else {
                // The exception path's totals, when it is on.
                let exc = shared
                    .exception
                    .as_ref()
                    .map(|x| {
                        let to: u64 = shared.rx.iter().map(|l| l.exception.stats.to_kernel.get()).sum();
                        let lim: u64 = shared.rx.iter().map(|l| l.exception.stats.rate_limited.get()).sum();
                        format!(" | kernel: to {to} from {} rate-limited {lim}", x.from.sent.get())
                    })
                    .unwrap_or_default();
                log::info!(
                    "rx {} pps {} bit/s | delivered {}/s drops {}/s | total rx {} delivered {} drops {} | pool free {}/{} low-water {}{exc}",
                    counters::human(counters::rate(pkts, last_pkts, secs)),
                    counters::human(counters::rate(bytes, last_bytes, secs) * 8.0),
                    counters::human(counters::rate(delivered, last_delivered, secs)),
                    counters::human(counters::rate(drops, last_drops, secs)),
                    pkts,
                    delivered,
                    drops,
                    pw.free.get(),
                    pw.size.get(),
                    pw.low_water.get()
                );
            }
            last_pkts = pkts;
            last_bytes = bytes;
            last_delivered = delivered;
            last_drops = drops;
            m.pool_samples
                .push(m.pools.iter().map(|(_, mp)| mp.avail()).sum());
        }
    }
    // The engine leaves its groups as the kernel does when its sockets close.
    reporter.leave_all(&shared, eal::rdtsc());
    clock.stop(&shared.main_thread);
    gap.store(&shared.main_thread, shared.tsc_hz);
    drop(batch);
}

/// One starvation sample (main lcore): the RX pools' free counts
/// against their marks, and the RX lcores' poll counters.
/// Sleep up to `nap`, or until an in-process sender queues frames.
fn nap_until_sent(shared: &Shared, nap: Duration) {
    let start = eal::rdtsc();
    match shared.send.as_ref() {
        Some(tx) if main_sends(shared) => tx.wake.sleep(nap, || tx.pending()),
        // Senders' frames are an RX lcore's now: a kick must not wake us.
        _ => std::thread::sleep(nap),
    }
    let end = eal::rdtsc();
    // How long the thread waited for its CPU: after the kick that woke it,
    // or after the nap's end.
    let kicked = shared.send.as_ref().map_or(0, |tx| tx.wake.kicked_at());
    CONTENTION.with(|c| {
        let mut c = c.borrow_mut();
        let Some(c) = c.as_mut() else { return };
        let spell = if kicked > start {
            c.waited(end.saturating_sub(kicked), end)
        } else {
            c.napped(super::idle::Nap::Sleep(nap), start, end)
        };
        if spell == Some(true) {
            shared.main_thread.contended.add(1);
        }
    });
}

/// Whether the main lcore services the send path (`send::TxPath::servicer`).
fn main_sends(shared: &Shared) -> bool {
    shared
        .send
        .as_ref()
        .is_some_and(|tx| tx.servicer() == crate::send::MAIN_LCORE)
}

thread_local! {
    /// The main lcore's watch for a CPU hog beside it (`idle::Contention`):
    /// its thread's, kept across the calls of an application that runs the
    /// main loop in slices (`Engine::main_loop`).
    static CONTENTION: std::cell::RefCell<Option<Contention>> = const { std::cell::RefCell::new(None) };
}

fn sample_pools(m: &MainLcore<'_>, sampler: &mut Sampler, now: u64) {
    let mut free = 0u64;
    let mut low = false;
    for ((_, mp), (mark, pollers)) in m.pools.iter().zip(m.pool_marks) {
        // What RX can still allocate: not what sits in consumers' caches.
        let a = mp.avail_to(pollers);
        free += a as u64;
        low |= a < *mark;
    }
    let polls: u64 = m.shared.rx.iter().map(|l| l.lstats.polls.get()).sum();
    sampler.sample(&m.shared.pool_watch, now, free, low, polls);
}

/// The `n` live sockets with the most `rmem`: `name rmem B ring N`, joined.
pub fn top_holders(shared: &Shared, n: usize) -> String {
    let socks = shared.sockets.load();
    let mut v: Vec<(u64, u32, &str)> = socks
        .iter()
        .map(|e| {
            (
                e.sock.stats().rmem as u64,
                e.sock.ring.count(),
                e.sock.name(),
            )
        })
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let parts: Vec<String> = v
        .iter()
        .take(n)
        .map(|(rmem, ring, name)| format!("socket {name:?} rmem {rmem} B ring {ring}"))
        .collect();
    if parts.is_empty() {
        "no socket".into()
    } else {
        parts.join(", ")
    }
}
