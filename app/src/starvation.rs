//! Pool starvation, made visible (issue 14, defect 6).
//!
//! When every RX mbuf sits in socket rings behind a slow consumer, the PMD
//! has nothing to refill its descriptors with and RX stalls; on `net_pcap`
//! (and other vdevs) neither `rx_nombuf` nor `imissed` moves, so the stall
//! looked like silence. The main lcore therefore samples the RX pools'
//! free counts itself, about once per millisecond by the TSC (never per
//! packet: the RX and consumer lcores do nothing new), and keeps:
//!
//! - the free count, its minimum and the low-water mark;
//! - samples, RX polls and milliseconds spent below the mark, and the
//!   number of episodes (entries below it);
//! - a warning per stats interval with any low sample, naming the three
//!   sockets holding the most memory (`rmem`) and their ring counts.
//!
//! Everything here is written by the main lcore only (single-writer
//! [`Counter`]s) and read by stats lines, telemetry and the exit summary.
use crate::counters::Counter;

/// The low-water mark of a pool of `size` mbufs polled by `rx_lcores` RX
/// lcores with bursts of `burst`: the larger of
///
/// - `size / 16`: with less than ~6% of the pool free, a big pool is as good
///   as empty (the mempool's per-lcore caches alone can hold that much, and
///   those mbufs are counted free but out of the RX lcore's reach); and
/// - two bursts per RX lcore: each rx_burst refills up to one burst of
///   descriptors, so below two bursts per poller the next poll or the one
///   after finds no buffer. For small pools (a 1023-mbuf pool has 63/16ths
///   of nothing) this is the mark that matters.
pub fn low_water(size: u32, burst: u16, rx_lcores: usize) -> u32 {
    let bursts = 2u64 * burst as u64 * rx_lcores.max(1) as u64;
    (size / 16).max(bursts.min(u32::MAX as u64) as u32)
}

/// The RX pools' watch: what the main lcore saw.
#[derive(Debug, Default)]
pub struct PoolWatch {
    /// Mbufs in the RX pools (sum over NUMA nodes).
    pub size: Counter,
    /// The sum of the pools' low-water marks.
    pub low_water: Counter,
    /// Free mbufs at the last sample (sum) that the RX lcores can take:
    /// the pools' common stores plus the RX lcores' own caches. Mbufs in a
    /// consumer's or the main lcore's cache are free but out of RX's reach
    /// (with a 1023-mbuf pool and a 256 cache that can be a third of it).
    pub free: Counter,
    /// The lowest `free` seen (u64::MAX until the first sample).
    pub min_free: Counter,
    pub samples: Counter,
    /// Samples with a pool below its low-water mark.
    pub low_samples: Counter,
    /// RX polls (all RX lcores) in the sample periods that ended low.
    pub low_polls: Counter,
    /// TSC ticks of the sample periods that ended low.
    pub low_ticks: Counter,
    /// Times a sample went below the mark after one that was not.
    pub episodes: Counter,
    /// Warning lines logged.
    pub warnings: Counter,
    /// TSC ticks per ms, to report `low_ticks` in ms.
    pub ms_ticks: Counter,
}

impl PoolWatch {
    pub fn set_pools(&self, size: u64, low_water: u64, ms_ticks: u64) {
        self.size.set(size);
        self.low_water.set(low_water);
        self.free.set(size);
        self.min_free.set(u64::MAX);
        self.ms_ticks.set(ms_ticks.max(1));
    }

    pub fn low_ms(&self) -> u64 {
        self.low_ticks.get() / self.ms_ticks.get().max(1)
    }

    pub fn summary(&self) -> PoolWatchSummary {
        let min = self.min_free.get();
        PoolWatchSummary {
            size: self.size.get(),
            free: self.free.get(),
            low_water: self.low_water.get(),
            min_free: if min == u64::MAX {
                self.free.get()
            } else {
                min
            },
            samples: self.samples.get(),
            low_samples: self.low_samples.get(),
            low_polls: self.low_polls.get(),
            low_ms: self.low_ms(),
            episodes: self.episodes.get(),
            warnings: self.warnings.get(),
        }
    }
}

/// The watch as reported (JSON `rx_pool`, telemetry `pool_*`, nstat `UdpDemuxPool*`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PoolWatchSummary {
    pub size: u64,
    pub free: u64,
    pub low_water: u64,
    pub min_free: u64,
    pub samples: u64,
    pub low_samples: u64,
    pub low_polls: u64,
    pub low_ms: u64,
    pub episodes: u64,
    pub warnings: u64,
}

/// The main lcore's sampler state (not shared).
#[derive(Debug, Default)]
pub struct Sampler {
    last_tsc: u64,
    last_polls: u64,
    was_low: bool,
    /// A low sample since the last warning check.
    pub low_since_check: bool,
    /// Low ticks at the last warning check, for "for N ms of the interval".
    ticks_at_check: u64,
}

impl Sampler {
    pub fn new(now: u64) -> Sampler {
        Sampler {
            last_tsc: now,
            ..Default::default()
        }
    }

    /// One sample: `free` (sum of the pools' free counts), `low` (some pool
    /// is below its mark), `polls` (sum of the RX lcores' poll counters).
    pub fn sample(&mut self, w: &PoolWatch, now: u64, free: u64, low: bool, polls: u64) {
        w.free.set(free);
        if free < w.min_free.get() {
            w.min_free.set(free);
        }
        w.samples.add(1);
        // The period since the last sample is charged to whatever this
        // sample found: at ~1 ms per sample that is the sampling error.
        if low {
            w.low_samples.add(1);
            w.low_polls.add(polls.saturating_sub(self.last_polls));
            w.low_ticks.add(now.saturating_sub(self.last_tsc));
            if !self.was_low {
                w.episodes.add(1);
            }
            self.low_since_check = true;
        }
        self.was_low = low;
        self.last_tsc = now;
        self.last_polls = polls;
    }

    /// Once per stats interval: the warning line to log (and count), if a
    /// sample of the interval was low.
    /// `holders` names the sockets holding the most memory; it is called
    /// only when there is a warning to make.
    pub fn check(&mut self, w: &PoolWatch, holders: impl FnOnce() -> String) -> Option<String> {
        let ticks = w.low_ticks.get();
        let low_ms = ticks.saturating_sub(self.ticks_at_check) / w.ms_ticks.get().max(1);
        self.ticks_at_check = ticks;
        if !std::mem::take(&mut self.low_since_check) {
            return None;
        }
        w.warnings.add(1);
        Some(format!(
            "RX pool starving: {} of {} mbufs free (low-water {}, below it for {low_ms} ms since the last stats line; {} ms and {} RX polls in all): RX stalls until consumers free buffers; most memory held by {}",
            w.free.get(),
            w.size.get(),
            w.low_water.get(),
            w.low_ms(),
            w.low_polls.get(),
            holders()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_water_is_the_larger_of_a_sixteenth_and_two_bursts_per_rx_lcore() {
        assert_eq!(low_water(1023, 32, 1), 64);
        assert_eq!(low_water(16383, 32, 1), 1023);
        assert_eq!(low_water(1023, 64, 2), 256);
        assert_eq!(low_water(0, 32, 0), 64);
    }

    #[test]
    fn sampler_counts_time_polls_and_episodes_below_the_mark() {
        let w = PoolWatch::default();
        w.set_pools(1023, 64, 1000);
        let mut s = Sampler::new(0);
        s.sample(&w, 1000, 500, false, 10);
        assert_eq!(
            (w.low_samples.get(), w.episodes.get(), w.low_ms()),
            (0, 0, 0)
        );
        s.sample(&w, 3000, 10, true, 30);
        s.sample(&w, 4000, 0, true, 45);
        assert_eq!(w.low_samples.get(), 2);
        assert_eq!(w.low_polls.get(), 35);
        assert_eq!(w.low_ms(), 3);
        assert_eq!(w.episodes.get(), 1);
        assert_eq!(w.min_free.get(), 0);
        s.sample(&w, 5000, 900, false, 50);
        s.sample(&w, 6000, 1, true, 60);
        assert_eq!(w.episodes.get(), 2);
        assert_eq!(w.free.get(), 1);
        let sum = w.summary();
        assert_eq!(
            (sum.low_ms, sum.min_free, sum.samples, sum.size),
            (4, 0, 5, 1023)
        );
    }
}
