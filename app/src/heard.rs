//! Neighbours heard in received traffic: an IPv4 or IPv6 datagram from an
//! on-link source carries that source's MAC, so a reply to it needs no ARP
//! or ND exchange (the "learned ... from traffic"; the kernel gets
//! the same effect from the ARP request / solicitation its peer sent first,
//! and confirms entries from upper-layer progress, `neigh_confirm`).
//!
//! The RX lcore may neither lock nor allocate per datagram, and the table
//! is the main lcore's (behind a lock). So the RX lcore only *reports*:
//! [`HeardFilter`], a small direct-mapped cache of its own (no sharing),
//! remembers the (port, source, MAC) it reported last per slot and when;
//! a datagram whose source is in it with the same MAC, reported less than
//! `interval` ago, costs a hash and a compare. More sources than slots (a
//! scan, or a flood from many addresses) would make every datagram a
//! report, so an lcore reports at most [`REPORTS_PER_WINDOW`] per window
//! (a millisecond); the rest are counted as `suppressed` in a plain
//! counter of the lcore's, added to the shared one once per window.
//! Anything else is pushed onto
//! [`HeardQueue`], a bounded lock-free queue allocated once; when it is
//! full the report is dropped and counted (the next datagram from that
//! source reports again). The main lcore pops the queue at the start of
//! each send pass, before it resolves what the senders queued, and teaches
//! the table ([`crate::neigh::Learn::Traffic`]) after checking that the
//! source is on-link and the MAC unicast.
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

/// One report: `ip` sent from `mac`, received on `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    pub port: u16,
    pub ip: IpAddr,
    pub mac: [u8; 6],
}

/// Reports waiting for the main lcore.
pub const QUEUE_LEN: usize = 256;

/// The RX lcores' reports to the main lcore, and their counters.
#[derive(Debug)]
pub struct HeardQueue {
    q: ArrayQueue<Heard>,
    /// Reports pushed (RX lcores; rare: at most one per source per interval).
    pub reported: AtomicU64,
    /// Reports dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Reports the main lcore took (every one pushed is taken or still queued).
    pub taken: AtomicU64,
    /// Reports an RX lcore did not make: over its per-window budget.
    pub suppressed: AtomicU64,
}

impl HeardQueue {
    pub fn new(len: usize) -> HeardQueue {
        HeardQueue {
            q: ArrayQueue::new(len.max(1)),
            reported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Lock-free, no allocation; false (and counted) when full.
    #[inline]
    pub fn push(&self, h: Heard) -> bool {
        match self.q.push(h) {
            Ok(()) => {
                self.reported.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Every report queued now (at most the queue's length: reports pushed
    /// meanwhile wait for the next pass).
    pub fn take(&self, mut f: impl FnMut(Heard)) {
        for _ in 0..self.q.capacity() {
            let Some(h) = self.q.pop() else { break };
            self.taken.fetch_add(1, Ordering::Relaxed);
            f(h);
        }
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// Slots of an RX lcore's filter (a power of two).
const SLOTS: usize = 64;
/// Reports an RX lcore may make per window.
pub const REPORTS_PER_WINDOW: u32 = 32;

#[derive(Debug, Clone, Copy)]
struct Slot {
    port: u16,
    ip: IpAddr,
    mac: [u8; 6],
    /// TSC of the report; 0: empty.
    at: u64,
}

/// An RX lcore's memory of what it reported (owned by its loop).
#[derive(Debug)]
pub struct HeardFilter {
    slots: [Slot; SLOTS],
    /// Report a known source again after this many ticks (so the main lcore
    /// keeps its entry fresh while it talks).
    interval: u64,
    /// The rate limit: window length in ticks, its start, reports in it,
    /// and those suppressed not yet added to the queue's counter.
    window: u64,
    window_start: u64,
    in_window: u32,
    suppressed: u64,
}

impl HeardFilter {
    /// `interval` and `window` in the caller's ticks.
    pub fn new(interval: u64, window: u64) -> HeardFilter {
        HeardFilter {
            slots: [Slot {
                port: 0,
                ip: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                mac: [0; 6],
                at: 0,
            }; SLOTS],
            interval: interval.max(1),
            window: window.max(1),
            window_start: 0,
            in_window: 0,
            suppressed: 0,
        }
    }

    /// Add what this filter suppressed to the queue's counter.
    pub fn flush(&mut self, q: &HeardQueue) {
        if self.suppressed != 0 {
            q.suppressed.fetch_add(self.suppressed, Ordering::Relaxed);
            self.suppressed = 0;
        }
    }

    #[inline]
    fn index(ip: &IpAddr) -> usize {
        // Fibonacci hashing of the address's low bits: the slot only
        // spreads sources, a collision costs one extra report.
        let k = match ip {
            IpAddr::V4(a) => u64::from(u32::from(*a)),
            IpAddr::V6(a) => {
                let x = u128::from(*a);
                (x as u64) ^ ((x >> 64) as u64)
            }
        };
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// A datagram from `ip` at `mac` on `port` at TSC `now`: pushed onto `q`
    /// unless reported within the interval or over the window's budget.
    /// True when a report was pushed or dropped (counted by the queue).
    #[inline]
    pub fn offer(&mut self, q: &HeardQueue, port: u16, ip: IpAddr, mac: [u8; 6], now: u64) -> bool {
        let i = Self::index(&ip);
        let s = &self.slots[i];
        if s.at != 0
            && s.ip == ip
            && s.mac == mac
            && s.port == port
            && now.wrapping_sub(s.at) < self.interval
        {
            return false;
        }
        if now.wrapping_sub(self.window_start) >= self.window {
            self.window_start = now;
            self.in_window = 0;
            self.flush(q);
        }
        if self.in_window >= REPORTS_PER_WINDOW {
            // Not remembered: reported once the budget allows.
            self.suppressed += 1;
            return false;
        }
        self.in_window += 1;
        // Remembered even when the queue was full: the report is retried
        // after the interval, not on every datagram of a flood.
        self.slots[i] = Slot {
            port,
            ip,
            mac,
            at: now.max(1),
        };
        q.push(Heard { port, ip, mac });
        true
    }
}

/// An RX lcore's side: its filter and the queue it reports to.
#[derive(Debug)]
pub struct Listener<'q> {
    q: &'q HeardQueue,
    f: HeardFilter,
}

impl<'q> Listener<'q> {
    pub fn new(q: &'q HeardQueue, interval: u64, window: u64) -> Listener<'q> {
        Listener {
            q,
            f: HeardFilter::new(interval, window),
        }
    }

    #[inline]
    pub fn offer(&mut self, port: u16, ip: IpAddr, mac: [u8; 6], now: u64) -> bool {
        self.f.offer(self.q, port, ip, mac, now)
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        self.f.flush(self.q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_is_reported_once_per_interval_and_again_when_it_moves() {
        let q = HeardQueue::new(8);
        let mut f = HeardFilter::new(100, 1000);
        let a = ip("198.18.0.2");
        assert!(f.offer(&q, 0, a, A, 10));
        for t in 11..110 {
            assert!(!f.offer(&q, 0, a, A, t));
        }
        assert!(f.offer(&q, 0, a, A, 110), "the interval passed");
        // Another MAC, another port, another source: reported at once.
        assert!(f.offer(&q, 0, a, [2, 0, 0, 0, 0, 3], 111));
        assert!(f.offer(&q, 1, a, [2, 0, 0, 0, 0, 3], 112));
        assert!(f.offer(&q, 1, ip("fd00::2"), A, 113));
        let mut got = Vec::new();
        q.take(|h| got.push(h));
        assert_eq!(got.len(), 5);
        assert_eq!(
            got[0],
            Heard {
                port: 0,
                ip: a,
                mac: A
            }
        );
        assert_eq!(q.reported.load(Ordering::Relaxed), 5);
        assert_eq!(q.taken.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_a_flood_does_not_retry_per_datagram() {
        let q = HeardQueue::new(2);
        let mut f = HeardFilter::new(1000, 1000);
        for i in 0..4u8 {
            f.offer(&q, 0, IpAddr::V4([198, 18, 0, 10 + i].into()), A, 1);
        }
        assert_eq!(q.len(), 2);
        assert_eq!(q.dropped.load(Ordering::Relaxed), 2);
        // The dropped sources were remembered: no new attempt within the interval.
        for i in 0..4u8 {
            f.offer(&q, 0, IpAddr::V4([198, 18, 0, 10 + i].into()), A, 2);
        }
        assert_eq!(
            q.reported.load(Ordering::Relaxed) + q.dropped.load(Ordering::Relaxed),
            4
        );
    }

    #[test]
    fn an_lcore_reports_at_most_its_budget_per_window() {
        let q = HeardQueue::new(1024);
        let mut f = HeardFilter::new(1_000_000, 100);
        // 200 distinct sources in one window: the budget, the rest counted.
        for i in 0..200u32 {
            f.offer(&q, 0, IpAddr::V4((0xc612_0000 + i).into()), A, 1);
        }
        assert_eq!(q.len(), REPORTS_PER_WINDOW as usize);
        f.flush(&q);
        assert_eq!(
            q.suppressed.load(Ordering::Relaxed),
            200 - u64::from(REPORTS_PER_WINDOW)
        );
        // The next window reports again.
        assert!(f.offer(&q, 0, IpAddr::V4((0xc612_1000u32).into()), A, 101));
    }

    #[test]
    fn take_is_bounded_by_the_queue_length() {
        let q = HeardQueue::new(4);
        for i in 0..4u8 {
            q.push(Heard {
                port: 0,
                ip: IpAddr::V4([198, 18, 0, i].into()),
                mac: A,
            });
        }
        let mut n = 0;
        q.take(|_| n += 1);
        assert_eq!((n, q.len()), (4, 0));
    }
}
