//! Log2 latency histograms in microseconds, printed like bpftrace's `hist()`
//! (the seed measured `__udp_enqueue_schedule_skb` that way).
use crate::counters::Counter;

/// Buckets: [0], [1], [2,4), [4,8) ... [2^30, inf).
pub const BUCKETS: usize = 32;

/// Written by one thread at a time (the holder of the delivery lock, or the
/// socket's single consumer), read by anyone.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [Counter; BUCKETS],
    sum_us: Counter,
}

/// Bucket of a value in microseconds.
#[inline(always)]
pub fn bucket(us: u64) -> usize {
    if us == 0 {
        0
    } else {
        ((64 - us.leading_zeros()) as usize).min(BUCKETS - 1)
    }
}

/// Label of a bucket: "0", "1", "[2, 4)", ...
pub fn label(b: usize) -> String {
    match b {
        0 => "[0]".into(),
        1 => "[1]".into(),
        _ => {
            let lo = 1u64 << (b - 1);
            if b == BUCKETS - 1 {
                format!("[{lo}, ...)")
            } else {
                format!("[{lo}, {})", lo * 2)
            }
        }
    }
}

/// `2^64 / cycles_per_us`, so that TSC deltas become microseconds with a
/// multiply instead of a 64-bit division (tens of cycles, per datagram, on
/// both the RX lcore and the consumer).
pub fn inverse(cycles_per_us: u64) -> u64 {
    (u64::MAX / cycles_per_us.max(1)).max(1)
}

/// Microseconds of `cycles` given [`inverse`] (floor, exact up to one µs).
#[inline(always)]
pub fn us_of(cycles: u64, inv: u64) -> u64 {
    ((cycles as u128 * inv as u128) >> 64) as u64
}

/// The TSC at which the calling thread's current RX burst returned from
/// `rx_burst` (0 on threads outside an RX lcore's loop). The stage
/// histogram measures a datagram's wait until the burst that put it in its
/// delivery ring began, read here: a TSC read of its own at each socket
/// group's enqueue waited for the enqueue's stores to lines the consumer's
/// CPU holds, 4.5% of the pipeline's rate (alternating pairs). A datagram
/// put in the ring by the burst it arrived in counts 0 µs.
pub mod burst_clock {
    use std::cell::Cell;

    thread_local! {
        static AT: Cell<u64> = const { Cell::new(0) };
    }

    /// The RX loop, as a burst begins (`tsc` its stamp), and with 0 when
    /// it leaves.
    #[inline(always)]
    pub fn set(tsc: u64) {
        AT.with(|c| c.set(tsc));
    }

    /// The current burst's start, or `None` outside a burst.
    #[inline(always)]
    pub fn get() -> Option<u64> {
        Some(AT.with(Cell::get)).filter(|&t| t != 0)
    }
}

impl Histogram {
    /// Record one sample of `cycles` TSC ticks, scaled with [`inverse`].
    #[inline(always)]
    pub fn record_scaled(&self, cycles: u64, inv: u64) {
        let us = us_of(cycles, inv);
        self.buckets[bucket(us)].add(1);
        self.sum_us.add(us);
    }

    /// Record `n` samples of the same `cycles` at once (a burst's packets
    /// share their RX stamp, so a drain records one run per burst).
    #[inline(always)]
    pub fn record_scaled_n(&self, cycles: u64, inv: u64, n: u64) {
        let us = us_of(cycles, inv);
        self.buckets[bucket(us)].add(n);
        self.sum_us.add(us.wrapping_mul(n));
    }

    pub fn snapshot(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].get())
    }

    /// Sum of the recorded samples, in µs (the Prometheus histogram's `_sum`).
    pub fn sum_us(&self) -> u64 {
        self.sum_us.get()
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.get()).sum()
    }
}

/// Percentile (0..=100) from bucket counts: the lower bound, in µs, of the bucket holding it.
pub fn percentile(b: &[u64; BUCKETS], pct: f64) -> u64 {
    let total: u64 = b.iter().sum();
    if total == 0 {
        return 0;
    }
    let want = ((pct / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut acc = 0;
    for (i, &c) in b.iter().enumerate() {
        acc += c;
        if acc >= want {
            return if i == 0 { 0 } else { 1u64 << (i - 1) };
        }
    }
    0
}

/// bpftrace-style text.
pub fn render(title: &str, b: &[u64; BUCKETS]) -> String {
    let max = b.iter().copied().max().unwrap_or(0);
    let last = b.iter().rposition(|&c| c > 0);
    let mut out = format!("{title}:\n");
    let Some(last) = last else {
        out.push_str("(empty)\n");
        return out;
    };
    let first = b.iter().position(|&c| c > 0).unwrap_or(0);
    for (i, &c) in b.iter().enumerate().take(last + 1).skip(first) {
        let bar = if max == 0 {
            0
        } else {
            (c * 52).div_ceil(max) as usize
        };
        out.push_str(&format!(
            "{:<16} {:>10} |{:<52}|\n",
            label(i),
            c,
            "@".repeat(bar.min(52))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock is the calling thread's: another thread (a teardown's
    /// drain on the main lcore) sees none and reads the TSC itself.
    #[test]
    fn burst_clock_is_per_thread_and_zero_is_none() {
        assert_eq!(burst_clock::get(), None);
        burst_clock::set(12_345);
        assert_eq!(burst_clock::get(), Some(12_345));
        assert_eq!(std::thread::spawn(burst_clock::get).join().unwrap(), None);
        burst_clock::set(0);
        assert_eq!(burst_clock::get(), None);
    }

    #[test]
    fn buckets_match_bpftrace() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4), 3);
        assert_eq!(bucket(7), 3);
        assert_eq!(bucket(8), 4);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(label(2), "[2, 4)");
        assert_eq!(label(4), "[8, 16)");
    }

    #[test]
    fn multiply_matches_division() {
        for cpu in [1u64, 1000, 2600, 2_999, 3_700] {
            let inv = inverse(cpu);
            for c in [
                0u64,
                1,
                cpu - 1,
                cpu,
                cpu + 1,
                10 * cpu,
                12_345_678,
                u64::MAX / 3,
            ] {
                let exact = c / cpu;
                let fast = us_of(c, inv);
                assert!(
                    fast == exact || fast + 1 == exact,
                    "cpu {cpu} cycles {c}: {fast} vs {exact}"
                );
                assert!(bucket(fast).abs_diff(bucket(exact)) <= 1);
            }
        }
    }

    #[test]
    fn record_and_render() {
        let h = Histogram::default();
        let inv = inverse(1_000);
        h.record_scaled(5_000, inv); // 5 us
        h.record_scaled(500, inv); // 0 us
        for _ in 0..3 {
            h.record_scaled(40_000, inv); // 40 us
        }
        let s = h.snapshot();
        assert_eq!(s[0], 1);
        assert_eq!(s[bucket(5)], 1);
        assert_eq!(s[bucket(40)], 3);
        assert_eq!(h.count(), 5);
        let r = render("@lat_us", &s);
        assert!(r.contains("[4, 8)"), "{r}");
        assert!(r.contains("[32, 64)"), "{r}");
        assert_eq!(percentile(&s, 50.0), 32);
        assert_eq!(percentile(&s, 1.0), 0);
    }
}
