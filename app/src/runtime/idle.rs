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
//!
//! Between the spin and the sleeps an RX lcore may yield its CPU
//! (`engine.idle_yield_us`): `sched_yield(2)` between polls for that long
//! after it went idle. Why: a sleep arms a timer, and on a VM each arm is
//! a hypervisor exit; in a QUIC bulk echo half the RX lcore's CPU time went
//! to arming the timers of its short sleeps (`perf`: `clock_nanosleep`'s
//! `hrtimer` path, 1 721 of its 3 413 samples). A yield arms nothing,
//! hands the CPU to the application's threads when they are runnable, and
//! leaves the loop runnable, so the next frame waits for no wake-up.
use std::time::Duration;

use dpdk_sys::eal;

use crate::counters::ThreadStats;

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

/// What an idle loop does after an empty pass, once it has spun enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nap {
    /// Give the CPU to any other runnable task (`std::thread::yield_now`,
    /// `sched_yield(2)` on Linux): no timer.
    Yield,
    /// Sleep this long.
    Sleep(Duration),
}

/// One loop's idle state (no atomics: the loop's own).
#[derive(Debug, Clone)]
pub struct IdleBackoff {
    cap_ns: u32,
    spin: u32,
    empty: u32,
    next_ns: u32,
    /// `engine.idle_yield_us`, in TSC cycles (0: no yield phase).
    yield_cycles: u64,
    /// When (TSC) the current gap's yield phase began.
    yielding_since: Option<u64>,
    /// Another task holding the CPU for whole slices: no yield phase.
    contention: Option<Contention>,
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
            yield_cycles: 0,
            yielding_since: None,
            contention: None,
        }
    }

    /// Watch the naps' waits for a CPU hog ([`Contention`]); `batch`: the
    /// loop's thread is under `SCHED_BATCH`, which a contended spell leaves.
    /// Nothing without a sleep cap (a pure poll loop never gives its CPU up).
    pub fn with_contention(mut self, tsc_hz: u64, batch: bool) -> Self {
        if self.cap_ns > 0 {
            self.contention = Some(Contention::new(tsc_hz, batch));
        }
        self
    }

    /// A nap taken after [`idle`](Self::idle) ran from TSC `start` to `end`:
    /// how long the loop waited for its CPU beyond what it asked for goes to
    /// the contention watch. `Some(true)` when a contended spell began,
    /// `Some(false)` when one ended.
    pub fn napped(&mut self, nap: Nap, start: u64, end: u64) -> Option<bool> {
        self.contention.as_mut()?.napped(nap, start, end)
    }

    /// In a contended spell (its yields would each hand a hog a slice).
    pub fn contended(&self) -> bool {
        self.contention.as_ref().is_some_and(Contention::is_contended)
    }

    /// Yield between polls for `yield_us` after the spin, before the first
    /// sleep (`engine.idle_yield_us`), timed on the TSC at `tsc_hz` (a
    /// vDSO `clock_gettime` per yield was 2% of a QUIC echo's samples);
    /// nothing without a sleep cap.
    pub fn with_yield(mut self, yield_us: u32, tsc_hz: u64) -> Self {
        if self.cap_ns > 0 {
            self.yield_cycles = u64::from(yield_us).saturating_mul(tsc_hz) / 1_000_000;
        }
        self
    }

    /// The loop did work this pass.
    #[inline(always)]
    pub fn busy(&mut self) {
        self.empty = 0;
    }

    /// The loop found nothing this pass: what to do now, if anything.
    #[inline]
    pub fn idle(&mut self) -> Option<Nap> {
        if self.cap_ns == 0 {
            return None;
        }
        if self.empty < self.spin {
            self.spin_pass();
            return None;
        }
        if self.yield_cycles != 0 && !self.contended() {
            // The clock only once the spin is over: the spin's polls stay
            // as cheap as they were.
            return Some(self.after_spin(eal::rdtsc()));
        }
        Some(self.sleep())
    }

    #[inline(always)]
    fn spin_pass(&mut self) {
        if self.empty == 0 {
            self.next_ns = FIRST_SLEEP_NS.min(self.cap_ns);
            self.yielding_since = None;
        }
        self.empty += 1;
    }

    /// Past the spin with a yield phase: yield until `yield_cycles` have
    /// passed since the phase began (TSC `now`), then the sleeps as
    /// without one.
    fn after_spin(&mut self, now: u64) -> Nap {
        let since = *self.yielding_since.get_or_insert(now);
        if now.saturating_sub(since) < self.yield_cycles {
            Nap::Yield
        } else {
            self.sleep()
        }
    }

    #[inline(always)]
    fn sleep(&mut self) -> Nap {
        let ns = self.next_ns;
        self.next_ns = ns.saturating_mul(GROWTH).min(self.cap_ns);
        Nap::Sleep(Duration::from_nanos(u64::from(ns)))
    }
}

/// A wait for the CPU at least this long is another task's whole time
/// slice: the application's threads block within a few hundred µs
/// (a QUIC echo's longest waits of the RX lcore's yields: 14 of 4.6 M
/// took 2 ms or more in a bulk run, 1 of 640 000 in 2 000 handshakes), a
/// CPU hog beside a pinned lcore never does (3 720 of 10 500 yields took
/// 2-16 ms: the scheduler's slice on two CPUs). 1 ms also caught the
/// benchmark's own client in bulk runs (a spell in 3 of 6).
const LONG_WAIT_US: u64 = 2_000;
/// The window over which long waits are summed.
const CONTENTION_WINDOW_MS: u64 = 50;
/// Long waits a window needs besides their sum: one stall of the whole VM
/// (the host's, seen from inside as a single wait of tens of ms) is no hog,
/// whose slices come one after another (9 of 3 ms in 27 ms).
const CONTENTION_MIN_WAITS: u32 = 5;
/// How long a contended spell lasts before the loop tries its yields and
/// `SCHED_BATCH` again (a hog still there ends that try within a window).
const CONTENTION_HOLD_MS: u64 = 2_000;

/// Another task holding an idle loop's CPU for whole time slices, such as
/// a CPU hog on the core of a pinned lcore. Yielding then hands the hog a
/// slice per empty poll, and under `SCHED_BATCH` a wake-up waits for the
/// hog's slice to end instead of preempting it: a QUIC bulk echo fell from
/// 180-200 to 28 MB/s with a busy loop on the RX lcore's CPU, the
/// round-trip time from 0.2 to 2-3.7 ms. When half a window went to
/// waits of a slice or more, at least `CONTENTION_MIN_WAITS` of them, the
/// loop is contended for a while: it sleeps
/// instead of yielding (a sleeper wakes with the lag to preempt), and
/// leaves `SCHED_BATCH` if it was under it.
#[derive(Debug, Clone)]
pub struct Contention {
    long: u64,
    window: u64,
    hold: u64,
    hz: u64,
    window_start: u64,
    waited: u64,
    /// Long waits in the window.
    waits: u32,
    /// TSC at which the current spell ends.
    until: Option<u64>,
    /// The thread entered `SCHED_BATCH`: a spell leaves it, its end returns.
    batch: bool,
}

impl Contention {
    pub fn new(tsc_hz: u64, batch: bool) -> Self {
        let ms = (tsc_hz / 1000).max(1);
        Contention {
            long: LONG_WAIT_US * ms / 1000,
            window: CONTENTION_WINDOW_MS * ms,
            hold: CONTENTION_HOLD_MS * ms,
            hz: tsc_hz.max(1),
            window_start: 0,
            waited: 0,
            waits: 0,
            until: None,
            batch,
        }
    }

    /// A loop (re)entered with its thread under `SCHED_BATCH` or not: a
    /// spell in course keeps it out.
    pub fn resume(&mut self, batch: bool) {
        self.batch = batch;
        if batch && self.is_contended() {
            set_policy(libc::SCHED_OTHER);
        }
    }

    /// A nap from TSC `start` to `end`: a yield waited all of it, a sleep
    /// what it took beyond what it asked for. As [`waited`](Self::waited).
    pub fn napped(&mut self, nap: Nap, start: u64, end: u64) -> Option<bool> {
        let took = end.saturating_sub(start);
        let wait = match nap {
            Nap::Yield => took,
            Nap::Sleep(d) => {
                took.saturating_sub((d.as_nanos() as u64).saturating_mul(self.hz) / 1_000_000_000)
            }
        };
        self.waited(wait, end)
    }

    pub fn is_contended(&self) -> bool {
        self.until.is_some()
    }

    /// The loop waited `ticks` for its CPU, up to TSC `now`. `Some(true)`
    /// when this began a spell, `Some(false)` when the spell in course
    /// ended (the policy switched accordingly).
    pub fn waited(&mut self, ticks: u64, now: u64) -> Option<bool> {
        if let Some(until) = self.until {
            if now < until {
                return None;
            }
            self.until = None;
            self.window_start = now;
            self.waited = 0;
            self.waits = 0;
            if self.batch {
                set_policy(libc::SCHED_BATCH);
            }
            return Some(false);
        }
        if now.saturating_sub(self.window_start) >= self.window {
            self.window_start = now;
            self.waited = 0;
            self.waits = 0;
        }
        if ticks >= self.long {
            self.waited += ticks;
            self.waits += 1;
        }
        if self.waited.saturating_mul(2) < self.window || self.waits < CONTENTION_MIN_WAITS {
            return None;
        }
        self.until = Some(now + self.hold);
        if self.batch {
            set_policy(libc::SCHED_OTHER);
        }
        Some(true)
    }
}

/// The calling thread under `SCHED_BATCH` while this lives, back under
/// `SCHED_OTHER` when it is dropped (`engine.idle_sched_batch`).
///
/// Why: a loop that sleeps through gaps shares its CPU with the
/// application. Under `SCHED_OTHER` each of its wake-ups (tens of
/// thousands a second from short sleeps) preempts whatever runs there, the
/// application's threads included. Under `SCHED_BATCH` the same thread gets
/// the same share of the CPU, but its wake-ups wait for the running task to
/// block or for the scheduler's tick instead of preempting it. QUIC
/// handshakes, 16 at once on quinn over `net_af_packet` (docs/benchmarks.md):
/// 1 349-1 663 per second against 1 100-1 280 (4 alternating pairs),
/// context switches -60-75%; one at a time 629-661 against 533-596; the
/// bulk echo -1 to +6%.
///
/// Only a thread under `SCHED_OTHER` is moved: a real-time or idle policy
/// the operator chose (`chrt`) stays.
#[derive(Debug)]
pub struct SchedBatch {
    /// The policy is the thread's: the guard must be dropped on it.
    _thread: std::marker::PhantomData<*const ()>,
}

impl SchedBatch {
    /// A loop's entry: when `on` (`Shared::idle_sched_batch`), enter, and
    /// record in the loop's `into` whether it did (`thread.sched_batch`).
    pub fn enter_if(on: bool, into: &ThreadStats) -> Option<SchedBatch> {
        let batch = on.then(Self::enter).flatten();
        into.sched_batch.set(u64::from(batch.is_some()));
        batch
    }

    /// `None` when the thread is not under `SCHED_OTHER` or the kernel
    /// refused (a seccomp filter: logged at debug level).
    pub fn enter() -> Option<SchedBatch> {
        // SAFETY: no memory is passed; 0 is the calling thread on Linux.
        let policy = unsafe { libc::sched_getscheduler(0) };
        // `then`, not `then_some`: a guard made and dropped would reset it.
        (policy == libc::SCHED_OTHER && set_policy(libc::SCHED_BATCH)).then(|| SchedBatch {
            _thread: std::marker::PhantomData,
        })
    }
}

impl Drop for SchedBatch {
    fn drop(&mut self) {
        set_policy(libc::SCHED_OTHER);
    }
}

/// The calling thread's policy (priority 0: `SCHED_OTHER` and `SCHED_BATCH`
/// have no other); false if the kernel refused.
fn set_policy(policy: libc::c_int) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a live sched_param for the call's duration; pid 0
    // is the calling thread (Linux sets the policy per thread).
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc != 0 {
        log::debug!("sched_setscheduler({policy}): {}", std::io::Error::last_os_error());
    }
    rc == 0
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
            .map(|_| match b.idle() {
                Some(Nap::Sleep(d)) => d.as_nanos() as u64 / 1000,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(us, [1, 4, 16, 64, 100, 100]);
        b.busy();
        for _ in 0..SPIN_POLLS {
            assert_eq!(b.idle(), None);
        }
        assert_eq!(b.idle(), Some(Nap::Sleep(Duration::from_micros(1))));
    }

    #[test]
    fn yields_for_the_window_after_the_spin_then_sleeps_and_starts_over_on_work() {
        // A 1 MHz TSC: one cycle a µs.
        let mut b = IdleBackoff::new(100, 4).with_yield(1000, 1_000_000);
        let t0 = 5_000_000u64;
        let at = |us: u64| t0 + us;
        for _ in 0..2 {
            for _ in 0..4 {
                b.spin_pass();
            }
            // The window runs from the first yield, not from the spin.
            assert_eq!(b.after_spin(at(10)), Nap::Yield);
            assert_eq!(b.after_spin(at(500)), Nap::Yield);
            assert_eq!(b.after_spin(at(1009)), Nap::Yield);
            // Then the sleeps, growing as without a yield phase.
            assert_eq!(b.after_spin(at(1010)), Nap::Sleep(Duration::from_micros(1)));
            assert_eq!(b.after_spin(at(1011)), Nap::Sleep(Duration::from_micros(4)));
            b.busy();
        }
        // Through idle(): the spin first, then yields on the real clock.
        let mut b = IdleBackoff::new(100, 4).with_yield(60_000_000, 3_000_000_000);
        assert!((0..4).all(|_| b.idle().is_none()));
        assert_eq!(b.idle(), Some(Nap::Yield));
    }

    #[test]
    fn no_yield_phase_without_a_sleep_cap() {
        let mut b = IdleBackoff::new(0, 4).with_yield(1000, 1_000_000);
        assert!((0..1000).all(|_| b.idle().is_none()));
    }

    /// The calling thread's policy.
    fn policy() -> libc::c_int {
        // SAFETY: no memory is passed; 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn batch_while_held_and_the_old_policy_after() {
        // A thread of its own: the harness's is left as it was.
        // A thread that already runs when the other enters (a new one
        // would inherit the policy of the thread that made it).
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            wait.recv().unwrap();
            policy()
        });
        std::thread::spawn(move || {
            assert_eq!(policy(), libc::SCHED_OTHER);
            let b = SchedBatch::enter().expect("SCHED_OTHER to SCHED_BATCH needs no privilege");
            assert_eq!(policy(), libc::SCHED_BATCH);
            // Per thread: the other thread of the process is not moved.
            go.send(()).unwrap();
            assert_eq!(other.join().unwrap(), libc::SCHED_OTHER);
            drop(b);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    /// A hog's slices (waits of 2 ms or more) filling half a window start
    /// a spell: the loop stops yielding and leaves `SCHED_BATCH` for the
    /// hold, then goes back to both. The application's own short waits,
    /// and a few long ones spread over windows, never do.
    #[test]
    fn a_hogs_slices_start_a_spell_that_leaves_batch_and_yields_until_the_hold_ends() {
        std::thread::spawn(|| {
            // A 1 MHz TSC: one cycle a µs.
            let hz = 1_000_000;
            let mut b = IdleBackoff::new(100, 4)
                .with_yield(1000, hz)
                .with_contention(hz, true);
            let batch = SchedBatch::enter().expect("SCHED_OTHER to SCHED_BATCH needs no privilege");
            let mut now = 1_000_000u64;
            // 10 000 yields of 100 µs (the application's threads taking
            // turns) and one of 3 ms every 60 ms: never contended.
            for i in 0..10_000u64 {
                let w = if i % 600 == 599 { 3_000 } else { 100 };
                assert_eq!(b.napped(Nap::Yield, now, now + w), None);
                now += w;
            }
            assert!(!b.contended());
            assert_eq!(policy(), libc::SCHED_BATCH);
            // One stall of 40 ms (the whole VM descheduled) is no hog.
            assert_eq!(b.napped(Nap::Yield, now, now + 40_000), None);
            now += 100_000;
            // A sleep of 64 µs that took 70 µs waited 6: not long.
            assert_eq!(b.napped(Nap::Sleep(Duration::from_micros(64)), now, now + 70), None);
            now += 100_000;
            // A hog's 3 ms slices: the ninth in a row makes 27 of 50 ms.
            for k in 0..9 {
                let r = b.napped(Nap::Yield, now, now + 3_000);
                now += 3_000;
                assert_eq!(r, (k == 8).then_some(true));
            }
            assert!(b.contended());
            assert_eq!(policy(), libc::SCHED_OTHER);
            // In the spell: sleeps only, past the spin.
            for _ in 0..4 {
                b.spin_pass();
            }
            assert!(matches!(b.idle(), Some(Nap::Sleep(_))));
            // The hold (2 s) ends at the first nap after it.
            assert_eq!(b.napped(Nap::Sleep(Duration::from_micros(100)), now, now + 100), None);
            now += 2_000_000;
            assert_eq!(b.napped(Nap::Sleep(Duration::from_micros(100)), now, now + 100), Some(false));
            assert!(!b.contended());
            assert_eq!(policy(), libc::SCHED_BATCH);
            // A loop entered again during a spell stays out of batch.
            let mut c = Contention::new(hz, false);
            for _ in 0..9 {
                c.waited(3_000, now);
                now += 3_000;
            }
            assert!(c.is_contended());
            c.resume(true);
            assert_eq!(policy(), libc::SCHED_OTHER);
            drop(batch);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_policy_the_operator_chose_stays() {
        std::thread::spawn(|| {
            assert!(set_policy(libc::SCHED_BATCH));
            // Not SCHED_OTHER: left alone, and left alone when dropped.
            assert!(SchedBatch::enter().is_none());
            assert_eq!(policy(), libc::SCHED_BATCH);
            assert!(set_policy(libc::SCHED_OTHER));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_cap_under_the_first_sleep_is_the_sleep() {
        let mut b = IdleBackoff::new(1, MAIN_SPIN_POLLS);
        for _ in 0..MAIN_SPIN_POLLS {
            b.idle();
        }
        assert_eq!(b.idle(), Some(Nap::Sleep(Duration::from_micros(1))));
        assert_eq!(b.idle(), Some(Nap::Sleep(Duration::from_micros(1))));
    }
}
