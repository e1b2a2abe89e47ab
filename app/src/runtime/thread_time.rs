//! How much of its loop an lcore's thread spent on its CPU, and how often
//! the kernel switched it out.
//!
//! Why: a poll-mode lcore owns its CPU only if the operator isolated it.
//! On a shared CPU the scheduler hands other tasks a slice now and then,
//! and a consumer that is off its CPU for longer than its socket's budget
//! lasts at line rate (89 datagrams of truesize 2 368 B in the default
//! 212 992 B: about 33 µs at 2.7 M datagrams/s) drops, whatever the
//! engine does. On the project's VM the sandbox's own agent took slices of
//! 10-375 ms on the lcores' CPUs during benchmark runs: those runs are the
//! ones with the most `rcvbuf_full` drops. The summary gives each lcore's
//! figures so that such drops can be told from the engine's own.
//!
//! Each loop reads `getrusage(RUSAGE_THREAD)` (its CPU time to the
//! microsecond and its context switches) and the wall clock when it starts
//! and when it ends, and stores the difference in its [`ThreadStats`]. Two
//! system calls a loop, none per poll. The kernel here keeps no schedstats
//! (`/proc/<pid>/task/<tid>/schedstat` reads zero), so the time a thread
//! waited on the run queue is not known as such: the wall time less the
//! CPU time is, and for a loop that never sleeps (no voluntary switches)
//! that is the time it was preempted.
use std::time::Instant;

use crate::counters::ThreadStats;

/// A thread's CPU time (µs) and context switches so far.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu_us: u64,
    voluntary: u64,
    involuntary: u64,
}

fn usage() -> Usage {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `struct rusage` into the pointer, which
    // points at one (zero-initialised) of the right size; RUSAGE_THREAD is
    // the calling thread (Linux since 2.6.26).
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) };
    if rc != 0 {
        return Usage::default();
    }
    // SAFETY: zero-initialised, and written by the successful call.
    let ru = unsafe { ru.assume_init() };
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
    Usage {
        cpu_us: us(ru.ru_utime) + us(ru.ru_stime),
        voluntary: ru.ru_nvcsw.max(0) as u64,
        involuntary: ru.ru_nivcsw.max(0) as u64,
    }
}

/// Started by a loop on its own thread; [`LoopClock::stop`] on the same
/// thread stores what the loop took.
pub struct LoopClock {
    wall: Instant,
    at: Usage,
}

impl LoopClock {
    pub fn start() -> LoopClock {
        LoopClock {
            wall: Instant::now(),
            at: usage(),
        }
    }

    /// The loop's wall time, CPU time and switches since [`LoopClock::start`]
    /// into `into` (added: a loop stopped twice counts both spans).
    pub fn stop(&self, into: &ThreadStats) {
        let now = usage();
        into.wall_us.add(self.wall.elapsed().as_micros() as u64);
        into.cpu_us.add(now.cpu_us.saturating_sub(self.at.cpu_us));
        into.voluntary.add(now.voluntary.saturating_sub(self.at.voluntary));
        into.involuntary
            .add(now.involuntary.saturating_sub(self.at.involuntary));
    }
}

/// The longest time between two consecutive polls of a consumer loop.
///
/// A socket's rcvbuf must hold what arrives while its consumer is away; the
/// default 212 992 B holds 89 datagrams of truesize 2 368, tens of
/// microseconds at line rate. `getrusage` says how long a thread was off its
/// CPU in all, not for how long at once: this says the once. One TSC read a
/// poll, on the consumer side only (a second TSC read per burst cost the RX
/// loop 4%, `rx.rs`).
#[derive(Debug, Default)]
pub struct GapMeter {
    last: u64,
    longest: u64,
}

impl GapMeter {
    /// A poll at TSC `now`.
    #[inline(always)]
    pub fn mark(&mut self, now: u64) {
        if self.last != 0 {
            self.longest = self.longest.max(now.saturating_sub(self.last));
        }
        self.last = now;
    }

    /// The loop chose to sleep (nothing to consume): the time until its
    /// next poll is no gap.
    #[inline(always)]
    pub fn restart(&mut self) {
        self.last = 0;
    }

    /// The longest gap so far, in ns, at `tsc_hz`.
    pub fn longest_ns(&self, tsc_hz: u64) -> u64 {
        (u128::from(self.longest) * 1_000_000_000 / u128::from(tsc_hz.max(1))) as u64
    }

    /// Into `into`, keeping the longer of the two (a loop run twice).
    pub fn store(&self, into: &ThreadStats, tsc_hz: u64) {
        let ns = self.longest_ns(tsc_hz);
        if ns > into.longest_gap_ns.get() {
            into.longest_gap_ns.set(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that spins is on its CPU for most of its wall time; one
    /// that sleeps is not, and its sleeps are voluntary switches.
    #[test]
    fn spinning_and_sleeping() {
        let spun = ThreadStats::default();
        let c = LoopClock::start();
        let t = Instant::now();
        while t.elapsed().as_millis() < 50 {
            std::hint::spin_loop();
        }
        c.stop(&spun);
        assert!(spun.wall_us.get() >= 50_000);
        assert!(spun.cpu_us.get() > 0 && spun.cpu_us.get() <= spun.wall_us.get() + 10_000);

        let slept = ThreadStats::default();
        let c = LoopClock::start();
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        c.stop(&slept);
        assert!(slept.voluntary.get() >= 5, "{slept:?}");
        assert!(slept.wall_us.get() >= 25_000);
        assert!(slept.cpu_us.get() < slept.wall_us.get() / 2, "{slept:?}");
    }

    /// The longest interval between marks, in ns at the given rate; a
    /// restart leaves the time until the next mark out.
    #[test]
    fn gap_meter() {
        let mut g = GapMeter::default();
        g.mark(1_000);
        g.mark(1_500);
        g.mark(4_500);
        g.mark(4_600);
        g.restart();
        g.mark(1_000_000);
        g.mark(1_000_100);
        // 3 000 ticks at 1 GHz.
        assert_eq!(g.longest_ns(1_000_000_000), 3_000);
        // At 3 GHz, 1 000 ns.
        assert_eq!(g.longest_ns(3_000_000_000), 1_000);
        let t = ThreadStats::default();
        g.store(&t, 1_000_000_000);
        GapMeter::default().store(&t, 1_000_000_000);
        assert_eq!(t.longest_gap_ns.get(), 3_000);
    }
}
