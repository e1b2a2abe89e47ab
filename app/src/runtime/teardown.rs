//! Teardown, the reverse of setup: stop RX, drain every stage, let the
//! consumers finish, then check the books before ports and pools go.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use dpdk_sys::{lcore, Mempool, Port};

use super::bench;
use super::consumer::Consumer;
use super::error::EngineError;
use super::report::summarize;
use super::shared::Shared;
use super::telemetry;
use crate::nstat::StatsFormat;
use crate::summary::{print_histograms, print_summary, PoolSummary, Summary};

/// What an orderly stop works with, lent by the engine (which still owns
/// and later drops the ports, pools and the EAL).
pub struct Stopping<'a> {
    pub shared: &'a Arc<Shared>,
    pub launched: Vec<lcore::Launched>,
    pub started: Instant,
    pub ports: &'a mut [Port],
    pub port_names: &'a [String],
    pub pools: &'a [(u32, Mempool)],
    pub small_pools: &'a [(u32, Mempool)],
    pub clone_pool: Option<&'a Mempool>,
    pub pool_samples: Vec<u32>,
    pub main_consumer: &'a mut Consumer,
    pub stats_format: StatsFormat,
    pub histograms: bool,
}

/// Stop RX, drain every stage, let consumers finish, check the books.
pub fn stop(mut t: Stopping<'_>) -> Result<Summary, EngineError> {
    let shared = Arc::clone(t.shared);
    shared.stop.store(true, Ordering::SeqCst);
    let mut failed = Vec::new();
    // RX lcores first (they were launched last).
    let (rx_handles, cons_handles): (Vec<_>, Vec<_>) = t
        .launched
        .drain(..)
        .partition(|h| shared.rx.iter().any(|l| l.lcore == h.lcore()));
    for h in rx_handles {
        let lc = h.lcore();
        if h.join() != 0 {
            failed.push(lc);
        }
    }
    let seconds = t.started.elapsed().as_secs_f64();
    let mut problems = Vec::new();
    // The election protocol leaves no packet on a stage once producers stop.
    for e in shared.sockets.load().iter() {
        let stranded = e.sock.free_stages();
        if stranded > 0 {
            problems.push(format!(
                "socket {}: {stranded} packet(s) stranded in a stage",
                e.sock.name()
            ));
        }
    }
    shared.consumers_stop.store(true, Ordering::SeqCst);
    for h in cons_handles {
        let lc = h.lcore();
        if h.join() != 0 {
            failed.push(lc);
        }
    }
    // Main-lcore sockets: consume what is left.
    while t.main_consumer.poll(&shared) > 0 {}
    t.main_consumer.release();
    // A client that died since the last liveness check: what it held is
    // reclaimed (and its sockets given back) before the books are closed.
    super::clients::check_liveness(&shared);
    // send_burst: what is still on the ring goes out (or is freed), then
    // what waits for a neighbour is freed and counted as expired.
    crate::send::finish(&shared, lcore_tsc());
    // External consumers: whatever they did not take is freed and counted
    // (what clients freed is folded in first).
    for e in shared.sockets.load().iter() {
        e.sock.fold_client();
        e.sock.free_ring();
    }
    // Every small-cache entry is back (only the cache holds it).
    for l in &shared.rx {
        if let Some(c) = l.small.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let held = c.in_use();
            if held > 0 {
                problems.push(format!(
                    "lcore {}: {held} small-cache entries still held at exit",
                    l.lcore
                ));
            }
        }
    }
    // Fragments still waiting for the rest of their datagram are freed
    // (counted as dropped, and as freed at exit) before the books close,
    // and so are those still on their way to their owner lcore.
    super::steer::clear(&shared);
    for l in &shared.rx {
        super::frag::clear(l);
    }
    let mut summary = summarize(&shared, t.ports, t.port_names, seconds, problems);
    // The cache gives its entries back: the small pools must be full again.
    release_small_caches(&shared);
    for (name, pools) in [("rx_pool", t.pools), ("small_pool", t.small_pools)] {
        for (sock, mp) in pools {
            summary.pools.push(PoolSummary {
                name: format!("{name}_s{sock}"),
                size: mp.size(),
                avail: mp.avail(),
                client_cached: crate::client_proto::CLIENT_LCORES
                    .map(|l| mp.cached(l))
                    .sum(),
            });
        }
    }
    if let Some(mp) = t.clone_pool {
        summary.pools.push(PoolSummary {
            name: super::setup::CLONE_POOL.to_string(),
            size: mp.size(),
            avail: mp.avail(),
            client_cached: crate::client_proto::CLIENT_LCORES
                .map(|l| mp.cached(l))
                .sum(),
        });
        // Every copy was consumed, dropped or freed at close: a clone not
        // back is a leak (and the RX mbuf it holds with it).
        if mp.avail() != mp.size() {
            summary.problems.push(format!(
                "{}: {} of {} clones back at exit",
                super::setup::CLONE_POOL,
                mp.avail(),
                mp.size()
            ));
            summary.books_balanced = false;
        }
    }
    summary.peak_rss_kb = crate::counters::proc_number("/proc/self/status", "VmHWM:");
    summary.pool_avail_samples = t.pool_samples;
    for (sock, mp) in t.small_pools {
        if mp.avail() != mp.size() {
            summary.problems.push(format!(
                "small_pool_s{sock}: {} of {} mbufs back at exit",
                mp.avail(),
                mp.size()
            ));
            summary.books_balanced = false;
        }
    }
    for p in t.ports.iter_mut() {
        p.stop()?;
    }
    for w in crate::summary::preemption_warnings(&summary) {
        log::warn!("{w}");
    }
    match t.stats_format {
        StatsFormat::Text => print_summary(&summary),
        StatsFormat::Nstat => {
            print!(
                "{}",
                crate::nstat::render(&crate::nstat::counters(&summary), None, summary.seconds)
            );
            println!(
                "#books {}",
                if summary.books_balanced {
                    "balanced".to_string()
                } else {
                    summary.problems.join("; ")
                }
            );
        }
    }
    if t.histograms {
        print_histograms(&summary);
    }
    if !failed.is_empty() {
        return Err(EngineError::Setup(format!(
            "worker lcores {failed:?} failed (see log)"
        )));
    }
    Ok(summary)
}

fn lcore_tsc() -> u64 {
    dpdk_sys::eal::rdtsc()
}

/// On drop, whether or not an orderly stop came first (setup may have
/// failed halfway): stop and join every worker lcore, then unpublish and
/// drop every socket, since sockets hold rte_rings that must go before the
/// EAL does.
pub fn release(shared: &Shared, launched: &mut Vec<lcore::Launched>, main_consumer: &mut Consumer) {
    // Telemetry stops answering for this engine before its sockets go.
    telemetry::stop();
    shared.stop.store(true, Ordering::SeqCst);
    shared.consumers_stop.store(true, Ordering::SeqCst);
    for h in launched.drain(..) {
        h.join();
    }
    // Sockets hold rte_rings: release them before the EAL goes.
    main_consumer.release();
    let entries = shared.sockets.swap(Arc::new(Vec::new()));
    shared.sockets_gen.fetch_add(1, Ordering::Release);
    let fillers = bench::filler::take_bindings(shared);
    let _ = shared.table.update(|ed| {
        for e in entries.iter() {
            ed.remove(e.handle)?;
        }
        for h in fillers {
            ed.remove(h)?;
        }
        Ok(())
    });
    drop(entries);
    shared.table.collect_garbage();
}

/// Give the small-buffer caches' entries back to their pools.
pub fn release_small_caches(shared: &Shared) {
    for l in &shared.rx {
        if let Some(c) = l.small.lock().unwrap_or_else(|p| p.into_inner()).take() {
            c.release();
        }
    }
}
