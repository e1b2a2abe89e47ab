//! DPDK telemetry commands, so `dpdk-telemetry.py -f FILE_PREFIX` (Debian's
//! `dpdk` package) reads a running engine:
//!
//! | command | params | reply |
//! |---|---|---|
//! | `/udpdemux/stats` | - | kernel-named UDP MIB, totals, RX pool watch (`pool_free`, `pool_low_water`, `pool_low_ms` ...), `memzones` and `heap_alloc_*`, parse drops (`parse_FAM_REASON`), per node drops (`node_N_REASON`), per RX lcore and consumer lcore loop counters |
//! | `/udpdemux/sockets` | socket name (optional) | per socket: offered, delivered, consumed, drops by reason, rmem and its high-water mark, condensed ... |
//! | `/udpdemux/memory` | - | `memzones`, `heap_alloc_bytes`, `heap_alloc_count`, then each memzone's name and length in bytes (leak hunting) |
//! | `/udpdemux/latency` | socket name (optional) | log2 µs histograms: all sockets' RX-to-consumer buckets, or one socket's stage and consumer buckets with p50/p99 |
//!
//! Every reply is built from [`snapshot`], the code path of the
//! `--stats-json` file, so a finished replay shows the same numbers in both.
//! Callbacks run on DPDK's telemetry threads, never on an RX lcore.
//! An output format, like `summary` and `nstat`: the live counter cells
//! are in `crate::counters`.
use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use dpdk_sys::telemetry::{self as tel, TelData};

use super::report::snapshot;
use super::shared::Shared;
use crate::summary::{SocketSummary, Summary};

/// The engine telemetry reads from, published by `Engine::start`.
struct Published {
    shared: Arc<Shared>,
    started: Instant,
}

static STATE: ArcSwapOption<Published> = ArcSwapOption::const_empty();
static REGISTER: Once = Once::new();
/// Callbacks inside a snapshot: `stop` waits for them, so no telemetry
/// thread still holds the engine's sockets (and their rings) when the
/// engine tears down and the EAL goes.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// A `&CStr` from a literal at compile time (C-string literals need Rust 1.77;
/// the workspace's rust-version is 1.75).
const fn cstr(b: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(b) {
        Ok(c) => c,
        Err(_) => panic!("missing NUL"),
    }
}

pub const CMD_STATS: &CStr = cstr(b"/udpdemux/stats\0");
pub const CMD_SOCKETS: &CStr = cstr(b"/udpdemux/sockets\0");
pub const CMD_LATENCY: &CStr = cstr(b"/udpdemux/latency\0");
pub const CMD_MEMORY: &CStr = cstr(b"/udpdemux/memory\0");

/// Builds one command's reply from a snapshot and the command's params.
type Build = fn(&Summary, &str, &mut TelData) -> dpdk_sys::Result<bool>;

/// Register the commands (once per process) and publish `shared` to them.
pub fn start(shared: &Arc<Shared>) {
    REGISTER.call_once(|| {
        let cmds: [(&CStr, Build, &CStr); 4] = [
            (
                CMD_STATS,
                build_stats,
                cstr(b"udpdemux MIB and totals. No parameters\0"),
            ),
            (
                CMD_SOCKETS,
                build_sockets,
                cstr(b"Per-socket counters. Param: socket name\0"),
            ),
            (
                CMD_LATENCY,
                build_latency,
                cstr(b"Latency log2 us histograms. Param: socket\0"),
            ),
            (
                CMD_MEMORY,
                build_memory,
                cstr(b"DPDK memzones (name: bytes) and heap. No parameters\0"),
            ),
        ];
        for (cmd, build, help) in cmds {
            if let Err(e) = tel::register(cmd, help, move |p, t| reply(p, t, build)) {
                log::warn!("telemetry: cannot register {cmd:?}: {e}");
            }
        }
    });
    STATE.store(Some(Arc::new(Published {
        shared: Arc::clone(shared),
        started: Instant::now(),
    })));
}

/// Stop answering for the current engine (commands then reply `null`) and
/// wait (bounded) for snapshots being taken to let go of it.
pub fn stop() {
    STATE.store(None);
    let deadline = Instant::now() + Duration::from_secs(2);
    while ACTIVE.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn current() -> Option<Summary> {
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    // Loaded after the increment: `stop` either sees us active or we see None.
    let s = STATE
        .load_full()
        .map(|p| snapshot(&p.shared, p.started.elapsed().as_secs_f64()));
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
    s
}

/// Run a reply builder; false makes DPDK reply `{"cmd": null}`.
fn reply(params: &str, t: &mut TelData, f: Build) -> bool {
    let Some(s) = current() else {
        return false;
    };
    match f(&s, params, t) {
        Ok(ok) => ok,
        Err(e) => {
            log::debug!("telemetry reply: {e}");
            false
        }
    }
}

/// `/udpdemux/memory`: the memzone count, the heap, then every memzone by
/// name with its length (as many as a dict holds), so a leak names itself.
fn build_memory(s: &Summary, _p: &str, t: &mut TelData) -> dpdk_sys::Result<bool> {
    t.start_dict()?;
    t.add_u64("memzones", s.memzones)?;
    t.add_u64("heap_alloc_bytes", s.heap_alloc_bytes)?;
    t.add_u64("heap_alloc_count", s.heap_alloc_count)?;
    let zones = dpdk_sys::memory::memzones().unwrap_or_default();
    for (name, len) in zones.into_iter().take(tel::MAX_DICT_ENTRIES - 3) {
        t.add_u64(&name, len)?;
    }
    Ok(true)
}

/// Every u64 of `/udpdemux/stats`, flat (DPDK 22.11 nests containers one level
/// only, and a flat dict is what `jq` users want). Shared with tests.
pub fn stats_entries(s: &Summary) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s.udp.iter().map(|(k, v)| (k.clone(), *v)).collect();
    v.push(("rx_packets".into(), s.rx_packets));
    v.push(("rx_bytes".into(), s.rx_bytes));
    v.push(("lookups".into(), s.lookups));
    v.push(("control".into(), s.control));
    v.push(("exception".into(), s.exception));
    for (k, x) in &s.exception_path {
        v.push((format!("exception_{k}"), *x));
    }
    v.push(("hot_path_allocations".into(), s.hot_path_allocations));
    let p = &s.rx_pool;
    for (name, x) in [
        ("pool_size", p.size),
        ("pool_free", p.free),
        ("pool_low_water", p.low_water),
        ("pool_min_free", p.min_free),
        ("pool_low_samples", p.low_samples),
        ("pool_low_polls", p.low_polls),
        ("pool_low_ms", p.low_ms),
        ("pool_low_episodes", p.episodes),
        ("pool_warnings", p.warnings),
        ("memzones", s.memzones),
        ("heap_alloc_bytes", s.heap_alloc_bytes),
        ("heap_alloc_count", s.heap_alloc_count),
    ] {
        v.push((name.into(), x));
    }
    v.push((
        "sockets".into(),
        s.sockets.iter().filter(|k| !k.removed).count() as u64,
    ));
    for (fam, m) in &s.reasons {
        for (r, n) in m {
            v.push((format!("parse_{fam}_{r}"), *n));
        }
    }
    for n in &s.nodes {
        for (r, c) in &n.drops {
            v.push((format!("node_{}_{r}", n.node), *c));
        }
    }
    for l in &s.lcores {
        v.push((format!("lcore_{}_polls", l.lcore), l.polls));
        v.push((format!("lcore_{}_idle_polls", l.lcore), l.idle_polls));
        v.push((format!("lcore_{}_idle_sleeps", l.lcore), l.idle_sleeps));
        v.push((format!("lcore_{}_idle_yields", l.lcore), l.idle_yields));
        v.push((
            format!("lcore_{}_packets", l.lcore),
            l.queues.iter().map(|q| q.packets).sum(),
        ));
        v.push((
            format!("lcore_{}_bursts", l.lcore),
            l.queues.iter().map(|q| q.bursts).sum(),
        ));
    }
    for c in &s.consumers {
        v.push((format!("consumer_{}_polls", c.lcore), c.polls));
        v.push((format!("consumer_{}_idle_polls", c.lcore), c.idle_polls));
        v.push((format!("consumer_{}_datagrams", c.lcore), c.datagrams));
    }
    v
}

/// The u64 fields of one socket, as in the JSON's `sockets[]` (drops as `drop_REASON`).
pub fn socket_entries(k: &SocketSummary) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = [
        ("id", k.id as u64),
        ("offered", k.offered),
        ("delivered", k.delivered),
        ("consumed", k.consumed),
        ("consumed_bytes", k.consumed_bytes),
        ("freed_at_close", k.freed_at_close),
        ("rcvbuf", k.rcvbuf),
        ("rmem", k.rmem),
        ("rmem_high_water", k.rmem_high_water),
        ("condensed", k.condensed),
        ("batches", k.batches),
        ("batch_max", k.batch_max),
        ("direct_batches", k.direct_batches),
        ("delivery_lock_acquisitions", k.delivery_lock_acquisitions),
        ("busylock_acquisitions", k.busylock_acquisitions),
        ("removed", k.removed as u64),
        ("stage_p50_us", k.stage_p50_us),
        ("stage_p99_us", k.stage_p99_us),
        ("consumer_p50_us", k.consumer_p50_us),
        ("consumer_p99_us", k.consumer_p99_us),
    ]
    .iter()
    .map(|(n, x)| (n.to_string(), *x))
    .collect();
    for (r, n) in &k.drops {
        v.push((format!("drop_{r}"), *n));
    }
    v
}

fn build_stats(s: &Summary, _p: &str, t: &mut TelData) -> dpdk_sys::Result<bool> {
    t.start_dict()?;
    t.add_str("strategy", &s.strategy)?;
    // A full dict refuses the rest (and would turn the reply into null): keep the first ones.
    for (k, v) in stats_entries(s).into_iter().take(tel::MAX_DICT_ENTRIES - 1) {
        t.add_u64(&k, v)?;
    }
    Ok(true)
}

fn find<'a>(s: &'a Summary, name: &str) -> Option<&'a SocketSummary> {
    // A live socket wins over a removed one of the same name (re-added by SIGHUP).
    s.sockets
        .iter()
        .find(|k| k.name == name && !k.removed)
        .or_else(|| s.sockets.iter().find(|k| k.name == name))
}

fn build_sockets(s: &Summary, p: &str, t: &mut TelData) -> dpdk_sys::Result<bool> {
    t.start_dict()?;
    if !p.is_empty() {
        let Some(k) = find(s, p) else {
            return Ok(false);
        };
        t.add_str("local", &k.local)?;
        t.add_str("handler", &k.handler)?;
        for (n, v) in socket_entries(k) {
            t.add_u64(&n, v)?;
        }
        return Ok(true);
    }
    for k in s
        .sockets
        .iter()
        .filter(|k| !k.removed)
        .take(tel::MAX_DICT_ENTRIES)
    {
        t.add_dict(&k.name, |c| {
            for (n, v) in socket_entries(k) {
                c.add_u64(&n, v)?;
            }
            Ok(())
        })?;
    }
    Ok(true)
}

fn build_latency(s: &Summary, p: &str, t: &mut TelData) -> dpdk_sys::Result<bool> {
    t.start_dict()?;
    if !p.is_empty() {
        let Some(k) = find(s, p) else {
            return Ok(false);
        };
        t.add_u64_array("stage_us", &k.stage_latency_us)?;
        t.add_u64_array("consumer_us", &k.consumer_latency_us)?;
        t.add_u64("stage_p50_us", k.stage_p50_us)?;
        t.add_u64("stage_p99_us", k.stage_p99_us)?;
        t.add_u64("consumer_p50_us", k.consumer_p50_us)?;
        t.add_u64("consumer_p99_us", k.consumer_p99_us)?;
        return Ok(true);
    }
    for k in s
        .sockets
        .iter()
        .filter(|k| !k.removed)
        .take(tel::MAX_DICT_ENTRIES)
    {
        t.add_u64_array(&k.name, &k.consumer_latency_us)?;
    }
    Ok(true)
}
