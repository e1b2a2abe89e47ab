//! Transmit mode: a cycle of pre-built frames sent on a DPDK port at a
//! TSC-paced rate, with pktgen-style per-second lines.
//!
//! Frames are kept in one plain byte arena and copied into freshly
//! bulk-allocated mbufs at send time (as testpmd's txonly does), not sent
//! as refcount-bumped pre-built mbufs: with `net_ring` (and any same-process
//! vdev) the receiver gets the very mbuf we hand the PMD, and the engine is
//! free to write into it (echo replies, condensing) and to hold it on a
//! delivery ring; a shared pre-built mbuf would be corrupted or pinned. The
//! copy of at most ~1.5 KB stays in L1/L2 for small cycles and costs less
//! than the atomic refcount updates it replaces. Nothing on the per-burst
//! path allocates or locks.
use std::time::Duration;

use anyhow::{bail, Context};
use dpdk_sys::{eal, lcore, mbuf, port, Eal, MbufBurst, Mempool, Port, PortConf};
use serde::Serialize;

use super::{FrameClass, GenArgs, Manifest, RxDrain, Tally, TrafficSpec};
use udpdemux::runtime::signals;

/// Largest burst accepted on the command line (DPDK examples use 32; PMDs
/// take at most their ring size per call anyway).
pub const MAX_BURST: usize = 512;
/// mbufs in the generator's pool: TX ring (1024) + RX ring (1024) + the
/// per-lcore cache + bursts in flight, rounded to 2^n - 1 (DPDK's advice).
const POOL_MBUFS: u32 = 8191;
const POOL_CACHE: u32 = 256;
/// DPDK's default data room (`RTE_MBUF_DEFAULT_BUF_SIZE`: 2048 + headroom).
const DATA_ROOM: u16 = mbuf::DEFAULT_BUF_SIZE;
const HEADROOM: usize = mbuf::HEADROOM as usize;

/// The pre-built frames: one arena, a span and a class per frame.
pub struct Cycle {
    arena: Vec<u8>,
    spans: Vec<(usize, u16)>,
    classes: Vec<FrameClass>,
}

impl Cycle {
    /// The first `n` frames of the spec's stream (so a cycle of `count`
    /// frames is exactly the pcap's content).
    pub fn build(spec: &TrafficSpec, n: usize) -> anyhow::Result<Cycle> {
        if n == 0 {
            bail!("--cycle must be at least 1");
        }
        let max = usize::from(DATA_ROOM) - HEADROOM;
        let mut c = Cycle {
            arena: Vec::new(),
            spans: Vec::with_capacity(n),
            classes: Vec::with_capacity(n),
        };
        for f in spec.stream().take(n) {
            let len = u16::try_from(f.bytes.len())
                .ok()
                .filter(|&l| usize::from(l) <= max);
            let Some(len) = len else {
                bail!(
                    "frame of {} bytes does not fit one {max}-byte mbuf segment",
                    f.bytes.len()
                );
            };
            c.spans.push((c.arena.len(), len));
            c.arena.extend_from_slice(&f.bytes);
            c.classes.push(f.class());
        }
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Bytes and class of frame `i` (taken modulo the cycle length).
    #[inline]
    pub fn frame(&self, i: usize) -> (&[u8], &FrameClass) {
        let i = i % self.spans.len();
        let (off, len) = self.spans[i];
        (&self.arena[off..off + usize::from(len)], &self.classes[i])
    }
}

/// Totals written by `--stats-json`: the manifest of what the PMD accepted,
/// plus the transmit counters.
#[derive(Debug, Clone, Serialize)]
pub struct TxSummary {
    #[serde(flatten)]
    pub sent: Manifest,
    pub seconds: f64,
    /// Frames offered to the PMD (accepted + refused).
    pub attempted: u64,
    /// Frames the PMD refused (freed and counted, not retried).
    pub tx_errors: u64,
    /// Bursts skipped because the pool was empty.
    pub alloc_failures: u64,
    /// Frames received and freed on the port's RX queue.
    pub rx_drained: u64,
    /// The port's own counters (`rte_eth_stats`).
    pub port_opackets: u64,
    pub port_obytes: u64,
    pub port_oerrors: u64,
    pub pps: f64,
    pub mbps: f64,
}

pub fn run(spec: &TrafficSpec, args: &GenArgs) -> anyhow::Result<()> {
    let name = args
        .port
        .as_deref()
        .context("--port is required to transmit")?;
    let eal_args: Vec<&str> = args
        .eal
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    if eal_args.is_empty() {
        bail!("--eal ARGS is required to transmit (e.g. \"--no-huge -m 256 --no-pci --vdev=net_null0 -l 0\")");
    }
    let burst = usize::from(args.burst);
    if burst == 0 || burst > MAX_BURST {
        bail!("--burst {burst}: must be 1..={MAX_BURST}");
    }
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if !(args.link_wait.is_finite() && args.link_wait >= 0.0) {
        bail!("--link-wait must be a non-negative number of seconds");
    }
    // Built before the EAL: a bad spec fails fast, and no DPDK memory is
    // held while 4096 frames are generated.
    let cycle = Cycle::build(spec, args.cycle)?;
    let eal = Eal::init(&eal_args)
        .context("EAL init failed (run as root; check --eal arguments and -l lcores)")?;
    let res = run_with_eal(spec, args, name, &cycle);
    drop(eal);
    res
}

fn run_with_eal(
    spec: &TrafficSpec,
    args: &GenArgs,
    name: &str,
    cycle: &Cycle,
) -> anyhow::Result<()> {
    if lcore::current().is_none() {
        bail!("the transmit loop must run on the EAL's main lcore");
    }
    let id = port::by_name(name).with_context(|| {
        format!(
            "port {name:?} not found: {} port(s) probed; add --vdev=... or -a PCI to --eal",
            port::count()
        )
    })?;
    let info = port::info(id)?;
    let socket = if info.socket < 0 {
        lcore::socket_id(lcore::main_lcore()) as i32
    } else {
        info.socket
    };
    let pool = Mempool::new("gen_pool", POOL_MBUFS, POOL_CACHE, 0, DATA_ROOM, socket)?;
    // One RX queue too: ethdev needs one for most PMDs (memif, ring), and
    // net_ring loops our TX back into it.
    let conf = PortConf {
        rx_queues: 1,
        tx_queues: 1,
        rx_desc: 1024,
        tx_desc: 1024,
        rss: false,
        promiscuous: false,
        allmulticast: false,
        rx_checksum_offload: false,
        tx_checksum_offload: false,
    };
    let mut p = Port::configure(id, &conf, &[&pool])?;
    p.start()?;
    let drain = match args.rx_drain {
        RxDrain::On => true,
        RxDrain::Off => false,
        RxDrain::Auto => info.driver != "net_null",
    };
    signals::install();
    let waited = wait_link(&p, args.link_wait);
    println!(
        "gen: port {name} ({}) link {}, {} frames in the cycle, burst {}, rate {}, rx drain {}",
        info.driver,
        if waited {
            "up"
        } else {
            "DOWN (sending anyway; frames the PMD refuses count as tx errors)"
        },
        cycle.len(),
        args.burst,
        if args.rate == 0 {
            "max".to_string()
        } else {
            format!("{} pps", args.rate)
        },
        if drain { "on" } else { "off" }
    );

    let mut tally = Tally::new(spec);
    let c = send_loop(id, &pool, cycle, args, drain, &mut tally);
    let st = p.stats();
    let summary = TxSummary {
        sent: tally.manifest(spec),
        seconds: c.seconds,
        attempted: c.attempted,
        tx_errors: c.tx_errors,
        alloc_failures: c.alloc_failures,
        rx_drained: c.rx,
        port_opackets: st.opackets,
        port_obytes: st.obytes,
        port_oerrors: st.oerrors,
        pps: tally.frames as f64 / c.seconds.max(1e-9),
        mbps: tally.bytes as f64 * 8.0 / 1e6 / c.seconds.max(1e-9),
    };
    if let Some(path) = &args.stats_json {
        let text = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.linger > 0.0 {
        println!(
            "gen: sent; keeping the port open for up to {} s (SIGTERM ends it)",
            args.linger
        );
        let until = std::time::Instant::now() + Duration::from_secs_f64(args.linger);
        let mut bufs: MbufBurst<32> = MbufBurst::new();
        while std::time::Instant::now() < until && !signals::stop_requested() {
            if drain {
                port::rx_into(id, 0, &mut bufs, 32);
                bufs.clear();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    p.stop()?;
    drop(p);
    drop(pool);
    println!(
        "total: {} frames sent in {:.3} s ({:.0} pps, {:.2} Mbit/s), tx errors {}, alloc failures {}, rx drained {}; port opackets {} oerrors {}",
        summary.sent.frames,
        summary.seconds,
        summary.pps,
        summary.mbps,
        summary.tx_errors,
        summary.alloc_failures,
        summary.rx_drained,
        summary.port_opackets,
        summary.port_oerrors
    );
    Ok(())
}

/// Waits up to `secs` for link up (memif's server side is down until its
/// client connects); a signal ends the wait.
fn wait_link(p: &Port, secs: f64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if p.link().0 {
            return true;
        }
        if signals::stop_requested() || std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Counters {
    attempted: u64,
    tx_errors: u64,
    alloc_failures: u64,
    rx: u64,
    seconds: f64,
}

fn send_loop(
    id: u16,
    pool: &Mempool,
    cycle: &Cycle,
    args: &GenArgs,
    drain: bool,
    tally: &mut Tally,
) -> Counters {
    let hz = eal::tsc_hz().max(1);
    let start = eal::rdtsc();
    let end = args
        .duration
        .map(|d| start.saturating_add((d * hz as f64) as u64));
    let burst = usize::from(args.burst).min(MAX_BURST);
    let mut bufs: MbufBurst<MAX_BURST> = MbufBurst::new();
    let mut rxb: MbufBurst<32> = MbufBurst::new();
    let mut c = Counters {
        attempted: 0,
        tx_errors: 0,
        alloc_failures: 0,
        rx: 0,
        seconds: 0.0,
    };
    let mut slot = 0usize;
    let mut next_report = start + hz;
    let (mut last_tsc, mut last_frames, mut last_bytes, mut last_err) = (start, 0u64, 0u64, 0u64);
    loop {
        if signals::stop_requested() {
            break;
        }
        let now = eal::rdtsc();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let remaining = args
            .count
            .map_or(u64::MAX, |n| n.saturating_sub(tally.frames));
        if remaining == 0 {
            break;
        }
        if now >= next_report {
            let secs = (now - last_tsc) as f64 / hz as f64;
            println!(
                "tx {:>12.0} pps {:>10.2} Mbit/s tx errors {:>10} total {:>12}",
                (tally.frames - last_frames) as f64 / secs,
                (tally.bytes - last_bytes) as f64 * 8.0 / 1e6 / secs,
                c.tx_errors - last_err,
                tally.frames
            );
            (last_tsc, last_frames, last_bytes, last_err) =
                (now, tally.frames, tally.bytes, c.tx_errors);
            next_report += hz;
        }
        if drain {
            let n = port::rx_into(id, 0, &mut rxb, 32);
            if n > 0 {
                rxb.clear();
                c.rx += n as u64;
            }
        }
        let mut want = (burst as u64).min(remaining);
        if args.rate > 0 {
            // Frames due since start at the target rate, less those offered:
            // exact on average, no drift, and at most one burst of catch-up
            // per iteration after a stall.
            let due = (u128::from(now - start) * u128::from(args.rate) / u128::from(hz)) as u64;
            want = want.min(due.saturating_sub(c.attempted));
            if want == 0 {
                std::hint::spin_loop();
                continue;
            }
        }
        let want = want as usize;
        if pool.alloc_into(&mut bufs, want).is_err() {
            c.alloc_failures += 1;
            continue;
        }
        for k in 0..want {
            let (bytes, _) = cycle.frame(slot + k);
            if let Some(mut m) = bufs.get_mut(k) {
                // Cycle::build checked every frame fits the data room, so
                // append cannot fail; an empty mbuf would still be freed by the PMD.
                if let Some(dst) = m.append(bytes.len() as u16) {
                    dst.copy_from_slice(bytes);
                }
            }
        }
        let sent = port::tx_from(id, 0, &mut bufs);
        for k in 0..sent {
            tally.add(cycle.frame(slot + k).1);
        }
        if sent < want {
            // The PMD did not take these: freed.
            bufs.clear();
            c.tx_errors += (want - sent) as u64;
        }
        c.attempted += want as u64;
        slot = (slot + want) % cycle.len();
    }
    c.seconds = (eal::rdtsc() - start) as f64 / hz as f64;
    c
}
