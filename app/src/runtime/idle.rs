//! Giving the CPU back when a poll loop has nothing to do
//! (`engine.idle_sleep_us`), in the shape of DPDK's l3fwd-power: keep
//! polling through short gaps, and only after a run of empty polls sleep,
//! for 1 µs at first and four times as long after each further empty poll,
//! up to the configured cap; the first frame resets it.
//!
//! Why: a poll-mode lcore holds its CPU at 100% whether traffic flows or
//! not. That is right on a dedicated core, and wrong where the application
//! shares the machine with the engine (a QUIC server whose crypto needs the
//! CPU the RX lcore spins on: docs/benchmarks.md). The cost is latency on
//! the first frame after a gap, at most the cap; frames wait in the NIC's
//! (or the vdev's) RX ring meanwhile, so a cap well under the ring's depth
//! at line rate loses nothing. 0 (the default) keeps the pure poll loop.
use std::time::Duration;

/// An RX lcore's empty polls in a row before its first sleep: ten-odd µs
/// of polling at an empty `rx_burst`'s cost, so bursts that close together
/// never wait for a sleep.
pub const SPIN_POLLS: u32 = 256;
/// The main lcore's (each of its passes does more: consumers, clients, the
/// TX rings, timers).
pub const MAIN_SPIN_POLLS: u32 = 16;
/// The first sleep; each further empty poll multiplies it by `GROWTH` up
/// to the cap.
const FIRST_SLEEP_NS: u32 = 1_000;
/// Each sleep is a timer armed and two context switches, which on a VM
/// cost more than the short sleeps themselves: growing by 4 instead of 2
/// reaches the cap in half as many sleeps (1, 4, 16, 64 µs: 4 sleeps for a
/// gap of 85 µs, where doubling took 7 for 127 µs). QUIC handshakes, 16 at
/// once on quinn over `net_af_packet`: 1 112-1 426 per second against
/// 1 042-1 189 (6 alternating pairs, 5 won), context switches -10%.
const GROWTH: u32 = 4;

/// One loop's idle state (no atomics: the loop's own).
#[derive(Debug, Clone)]
pub struct IdleBackoff {
    cap_ns: u32,
    spin: u32,
    empty: u32,
    next_ns: u32,
}

impl IdleBackoff {
    /// Sleep after `spin` empty polls, up to `cap_us` (0: never sleep).
    pub fn new(cap_us: u32, spin: u32) -> Self {
        let cap_ns = cap_us.saturating_mul(1000);
        if cap_ns > 0 {
            reduce_timer_slack();
        }
        IdleBackoff {
            cap_ns,
            spin,
            empty: 0,
            next_ns: FIRST_SLEEP_NS.min(cap_ns),
        }
    }

    /// The loop did work this pass.
    #[inline(always)]
    pub fn busy(&mut self) {
        self.empty = 0;
    }

    /// The loop found nothing this pass: how long to sleep now, if at all.
    #[inline]
    pub fn idle(&mut self) -> Option<Duration> {
        if self.cap_ns == 0 {
            return None;
        }
        if self.empty < self.spin {
            if self.empty == 0 {
                self.next_ns = FIRST_SLEEP_NS.min(self.cap_ns);
            }
            self.empty += 1;
            return None;
        }
        let ns = self.next_ns;
        self.next_ns = ns.saturating_mul(GROWTH).min(self.cap_ns);
        Some(Duration::from_nanos(u64::from(ns)))
    }
}

/// Linux rounds a sleep up by the thread's timer slack (50 µs by default),
/// which would make every sleep at least 50 µs: ask for 1 µs on this thread.
pub fn reduce_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes
    // only this thread's timer slack; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        log::debug!(
            "prctl(PR_SET_TIMERSLACK): {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_never_sleeps() {
        let mut b = IdleBackoff::new(0, SPIN_POLLS);
        assert!((0..10_000).all(|_| b.idle().is_none()));
    }

    #[test]
    fn spins_then_grows_up_to_the_cap_and_resets_on_work() {
        let mut b = IdleBackoff::new(100, SPIN_POLLS);
        for _ in 0..SPIN_POLLS {
            assert_eq!(b.idle(), None);
        }
        let us: Vec<u64> = (0..6)
            .map(|_| b.idle().unwrap().as_nanos() as u64 / 1000)
            .collect();
        assert_eq!(us, [1, 4, 16, 64, 100, 100]);
        b.busy();
        for _ in 0..SPIN_POLLS {
            assert_eq!(b.idle(), None);
        }
        assert_eq!(b.idle(), Some(Duration::from_micros(1)));
    }

    #[test]
    fn a_cap_under_the_first_sleep_is_the_sleep() {
        let mut b = IdleBackoff::new(1, MAIN_SPIN_POLLS);
        for _ in 0..MAIN_SPIN_POLLS {
            b.idle();
        }
        assert_eq!(b.idle(), Some(Duration::from_micros(1)));
        assert_eq!(b.idle(), Some(Duration::from_micros(1)));
    }
}
