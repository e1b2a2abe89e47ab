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
}
