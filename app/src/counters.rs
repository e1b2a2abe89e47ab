//! The live counter cells, in one module. Two kinds:
//!
//! * [`Counter`], one writer: each lcore owns its counter blocks and is
//!   their only writer, so an update is a relaxed load+store, not a locked
//!   read-modify-write; the main lcore reads them relaxed at any time. The
//!   blocks here are [`QueueStats`], [`LoopStats`], [`UdpMib`],
//!   [`ConsumerLoopStats`] and a socket's [`ConsumerStats`]; other modules
//!   build theirs from it (latency histograms, the small-buffer cache, the
//!   control path, the pool watch). Each block sits on its own cache lines
//!   (`receive::sync::CachePadded`).
//! * [`stat`], helpers for the receive heart's counters: bare `AtomicU64`
//!   fields (`receive::accounting::NodeCounters`, a socket's delivery
//!   counters) that several lcores write at once, or one at a time under a
//!   lock.
//!
//! [`rate`], [`human`] and [`proc_number`] help read and show counters.
//!
//! What reports them are output formats, kept apart and holding no counter
//! of their own: `summary` (the books of a run: `--stats-json`, the exit
//! printout), `nstat` (iproute2's layout) and `runtime::telemetry` (DPDK
//! telemetry replies). `receive::SocketStats` is one socket's snapshot.
use std::sync::atomic::{AtomicU64, Ordering};

/// Statistics counters: always plain std atomics, even under loom.
///
/// They never decide anything on the packet path, so modelling them would
/// only multiply loom's state space; the model still checks their final
/// values once all threads have joined.
pub mod stat {
    pub use std::sync::atomic::{AtomicU64, Ordering};

    /// Adds to a counter that only one thread writes at a time (it is
    /// protected by a lock): a plain load+store avoids a locked RMW while
    /// readers elsewhere still see a torn-free value.
    #[inline]
    pub fn add_exclusive(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Adds to a counter shared by several writers (all lcores of a node).
    #[inline]
    pub fn add_shared(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub fn read(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A counter with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// Per (lcore, RX queue) counters.
#[derive(Debug, Default)]
pub struct QueueStats {
    pub packets: Counter,
    pub bytes: Counter,
    pub bursts: Counter,
}

/// Per-lcore loop counters.
#[derive(Debug, Default)]
pub struct LoopStats {
    pub polls: Counter,
    pub idle_polls: Counter,
    /// Sleeps after a run of empty polls (`engine.idle_sleep_us`).
    pub idle_sleeps: Counter,
    /// `sched_yield` calls between empty polls (`engine.idle_yield_us`).
    pub idle_yields: Counter,
    /// TSC cycles from each poll that received something to the next poll's
    /// return (busy time, as DPDK's lcore poll busyness counts it).
    pub busy_cycles: Counter,
    /// Heap allocations made by this lcore's thread while in its loop (must stay 0).
    pub hot_allocs: Counter,
    /// `run --floor pipeline`: frames freed because no socket's port matched
    /// (or the ethertype was neither IPv4 nor IPv6, or the frame too short).
    pub floor_no_socket: Counter,
    /// `engine.rx_prefetch_alternate`: packets received while the prefetch
    /// ahead was off, and while it was on.
    pub alternate: [Counter; 2],
    /// `run --alternate-floor`: received by the floor's half and the
    /// pipeline's, then delivered by each (`bench::alternate::Halves`).
    pub floor_alternate: [Counter; 4],
}

/// What an lcore's loop took of its thread (`runtime::thread_time`): wall
/// time, CPU time, and the kernel's context switches, written once when
/// the loop ends by the loop's own thread.
#[derive(Debug, Default)]
pub struct ThreadStats {
    pub wall_us: Counter,
    pub cpu_us: Counter,
    /// Switches the thread asked for (sleeps, blocking calls).
    pub voluntary: Counter,
    /// Switches the scheduler imposed: another task took the CPU.
    pub involuntary: Counter,
    /// 1 when the loop ran under `SCHED_BATCH` (`engine.idle_sched_batch`).
    pub sched_batch: Counter,
    /// Spells in which another task held the loop's CPU for whole time
    /// slices (`runtime::idle::Contention`): no yields, no `SCHED_BATCH`.
    pub contended: Counter,
    /// The longest time between two consecutive polls of the loop's
    /// sockets, in ns (`runtime::thread_time::GapMeter`); 0 where not
    /// measured (RX lcores).
    pub longest_gap_ns: Counter,
}

/// A consumer lcore's loop counters.
#[derive(Debug, Default)]
pub struct ConsumerLoopStats {
    pub polls: Counter,
    pub idle_polls: Counter,
    pub datagrams: Counter,
}

/// Rate helper: (now - before) / seconds.
pub fn rate(now: u64, before: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        now.saturating_sub(before) as f64 / secs
    }
}

/// "12.3M" style formatting for stats lines.
pub fn human(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The first number after `key` on its line of a /proc file (0 if absent).
pub fn proc_number(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Counters of the socket's consumer (one consumer per socket at a time).
#[derive(Debug, Default)]
pub struct ConsumerStats {
    /// Datagrams taken out of the ring and released.
    pub consumed: Counter,
    pub bytes: Counter,
    /// Echo: replies handed to the NIC / refused by it.
    pub tx: Counter,
    pub tx_errors: Counter,
    /// pcap: datagrams written / not written (file limit reached, write error).
    pub written: Counter,
    pub not_written: Counter,
    /// Left in the ring when the socket was torn down (freed, counted here).
    pub freed_at_close: Counter,
    /// `consume_rate_pps` token bucket: TSC credited up to, and datagrams of credit.
    pub rate_tsc: Counter,
    pub rate_credit: Counter,
    /// `consume_rate_pps` as it is now (0: unlimited). Here, beside the
    /// bucket, because only the consumer reads it per burst; a reload
    /// changes it in place.
    pub rate_pps: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_adds_and_wraps() {
        let c = Counter::default();
        c.add(3);
        c.add(4);
        assert_eq!(c.get(), 7);
        c.set(u64::MAX);
        c.add(2);
        assert_eq!(c.get(), 1);
    }

    #[test]
    fn human_units() {
        assert_eq!(human(12_345_678.0), "12.35M");
        assert_eq!(human(999.0), "999");
        assert_eq!(human(1500.0), "1.5k");
        assert_eq!(rate(10, 4, 2.0), 3.0);
        assert_eq!(rate(1, 4, 2.0), 0.0);
    }
}

/// The UDP MIB of one RX lcore, with the kernel's names where one exists.
/// Every received frame lands in exactly one of these counters.
#[derive(Debug, Default)]
pub struct UdpMib {
    /// Demuxed to a socket (`UdpInDatagrams` / `Udp6InDatagrams` at demux time).
    pub in_datagrams: [Counter; 2],
    /// Valid UDP with no socket (`UdpNoPorts`).
    pub no_ports: [Counter; 2],
    /// Parse failures by reason: index 0 IPv4, 1 IPv6, 2 family unknown (not IP, bad VLAN stack).
    pub errors: [[Counter; crate::parse::Reason::COUNT]; 3],
    /// Frames taken by the control path (ARP, ICMP echo, neighbour discovery).
    pub control: Counter,
    /// Frames taken by the exception path (to the kernel, or dropped by
    /// its rate limit; `exception::ToKernelStats` has the breakdown).
    pub exception: Counter,
    /// Flow-table lookups (exactly one per valid UDP datagram).
    pub lookups: Counter,
    /// `run --demux-only`: datagrams demuxed (and in `in_datagrams`) then
    /// freed instead of staged.
    pub demux_only_freed: Counter,
    /// Valid UDP to a group joined on the port it came in on
    /// (`IpInMcastPkts` / `Ip6InMcastPkts`; one per datagram, however many
    /// copies): fanned out to member sockets, or `ignored_multi`.
    pub in_mcast: [Counter; 2],
    /// Of `in_mcast`: no socket matched (`UdpIgnoredMulti`, freed).
    pub ignored_multi: [Counter; 2],
    /// Valid UDP to a group not joined on that port: dropped, as the
    /// kernel's route lookup does (`ip_check_mc_rcu`; no kernel counter).
    pub mcast_unjoined: [Counter; 2],
    /// Copies of `in_mcast` datagrams offered to sockets, the original
    /// included (the sum of the sockets' `multicast` counters).
    pub mcast_copies: [Counter; 2],
    /// Member sockets that got no copy: the clone pool was empty (the
    /// kernel's failed `skb_clone`: `UdpRcvbufErrors` and `UdpInErrors`).
    pub mcast_nobufs: [Counter; 2],
    /// IGMP and MLD queries taken for the main lcore to answer (freed here).
    pub mcast_queries: Counter,
}

impl UdpMib {
    /// Every frame this lcore classified.
    pub fn total(&self) -> u64 {
        let e: u64 = self
            .errors
            .iter()
            .flat_map(|f| f.iter())
            .map(|c| c.get())
            .sum();
        self.in_datagrams
            .iter()
            .chain(&self.no_ports)
            .chain(&self.in_mcast)
            .chain(&self.mcast_unjoined)
            .map(|c| c.get())
            .sum::<u64>()
            + e
            + self.control.get()
            + self.exception.get()
            + self.mcast_queries.get()
    }
}
