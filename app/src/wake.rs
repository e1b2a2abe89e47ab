//! Waking a sleeping main lcore when an in-process sender queues frames.
//!
//! Why: the main lcore drains `send_burst`'s ring, and it sleeps when no
//! send came lately (5 ms) or, with `engine.idle_sleep_us`, through gaps
//! between a sender's bursts. A reply queued during such a nap waited for
//! its end: a QUIC handshake's flights are a round trip apart, so each one
//! paid the nap. A sender now wakes a sleeping main lcore itself, the way
//! a socket's `sk_data_ready` wakes a reader: the nap costs no latency and
//! can be long, and a main lcore that is awake costs a sender one fence and
//! one load of a flag it only writes around its sleeps.
//!
//! The protocol is the classic lost-wakeup pair (Dekker): the sleeper
//! raises its flag, fences, and looks at the ring once more before it
//! parks; the sender fills the ring, fences, and reads the flag. With both
//! fences sequentially consistent, at least one of them sees the other's
//! write: either the sleeper sees the frames and does not park, or the
//! sender sees the flag and unparks it (a park whose unpark came first
//! returns at once). `app/tests/loom_wake.rs` checks it, with parks that
//! have no timeout, so a lost wakeup is a deadlock loom reports.
//!
//! The sleeper may instead be a task (an async reader: the QUIC adapter's
//! `poll_recv`), which leaves its waker ([`Wake::arm`]) where a thread
//! would park. The protocol is the same pair, with `armed` for the flag;
//! the kick that finds it raised takes the waker and wakes the task
//! itself, as the kernel's `sk_data_ready` wakes an epoll waiter from the
//! softirq: no thread in between to be woken first and wake it in turn.
use std::sync::OnceLock;
use std::task::Waker;
use std::time::Duration;

use crate::receive::sync::{fence, AtomicBool, Ordering, SpinLock};

#[cfg(loom)]
use loom::thread::{self as thr, Thread};
#[cfg(not(loom))]
use std::thread::{self as thr, Thread};

/// One sleeper (the thread that registered, or the task that armed) and
/// any number of wakers.
#[derive(Debug)]
pub struct Wake {
    sleeping: AtomicBool,
    sleeper: OnceLock<Thread>,
    /// Kicks that found the sleeper asleep and unparked it, or the task
    /// armed and woke it (a statistic: outside the model, as the receive
    /// heart's counters are).
    unparks: std::sync::atomic::AtomicU64,
    /// Times the sleeper parked (the same kind of statistic).
    parks: std::sync::atomic::AtomicU64,
    /// TSC of the last kick that unparked the sleeper: from it the sleeper
    /// learns how long it waited for its CPU after the kick (a hint for
    /// `runtime::idle::Contention`, outside the model).
    kicked_at: std::sync::atomic::AtomicU64,
    /// A task's waker left by [`Wake::arm`]; a kick takes it when it finds
    /// `armed` raised (and only then, so the lock is never taken while the
    /// task is awake).
    task: SpinLock<Option<Waker>>,
    /// The task's flag: its waker is there and it is about to wait.
    armed: AtomicBool,
    /// Whether a task may arm ([`Wake::expect_tasks`], before any kicker
    /// can reach this `Wake`): a kick with no sleeper of either kind is one
    /// load of each of this and `sleeper`, and no fence.
    tasks: AtomicBool,
}

impl Default for Wake {
    fn default() -> Self {
        Wake {
            sleeping: AtomicBool::new(false),
            sleeper: OnceLock::new(),
            unparks: Default::default(),
            parks: Default::default(),
            kicked_at: Default::default(),
            task: SpinLock::new(None),
            armed: AtomicBool::new(false),
            tasks: AtomicBool::new(false),
        }
    }
}

impl Wake {
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the calling thread the sleeper (the first call wins: the main
    /// lcore, which is the process's main thread for the engine's life).
    pub fn register(&self) {
        let _ = self.sleeper.set(thr::current());
    }

    /// After queueing work: wake the sleeper if it is asleep (or about to
    /// be), the thread by an unpark, the task by its waker. An awake
    /// sleeper costs a fence and a load of each flag; no sleeper (no thread
    /// registered, no task expected) two loads.
    #[inline]
    pub fn kick(&self) {
        let thread = self.sleeper.get();
        if thread.is_none() && !self.tasks.load(Ordering::Relaxed) {
            return;
        }
        fence(Ordering::SeqCst);
        if let Some(t) = thread {
            if self.sleeping.load(Ordering::Relaxed) {
                self.kicked_at
                    .store(dpdk_sys::eal::rdtsc(), std::sync::atomic::Ordering::Relaxed);
                t.unpark();
                self.unparks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // One kicker takes the flag down and the waker with it; the others
        // (and every kick while the task runs) pay the load.
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::Acquire) {
            self.wake_task();
        }
    }

    /// Out of line: the task's runtime code (scheduling it, waking a
    /// worker) runs here, on the kicker's thread, once per wait.
    #[cold]
    #[inline(never)]
    fn wake_task(&self) {
        if let Some(w) = self.task.with(Option::take) {
            w.wake();
            self.unparks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Let tasks [`arm`](Self::arm). Before any kicker can reach this
    /// `Wake` (a socket's: before it is published to the RX lcores), so
    /// that every kick sees it: a kick that read it stale would skip its
    /// fence, and the Dekker pair fails (`app/tests/loom_wake.rs`).
    pub fn expect_tasks(&self) {
        self.tasks.store(true, Ordering::Relaxed);
    }

    /// Whether [`expect_tasks`](Self::expect_tasks) was called.
    pub fn expects_tasks(&self) -> bool {
        self.tasks.load(Ordering::Relaxed)
    }

    /// For a task about to wait (`Poll::Pending`) for work: leave `waker`
    /// for the next kick, which must come after
    /// [`expect_tasks`](Self::expect_tasks). True when `pending` (work queued) says so after
    /// the flag is up: then the task must not wait, and look again. False:
    /// wait, a kick after work is queued will wake it. One task at a time
    /// (a second one's waker replaces the first's, as quinn's
    /// `poll_recv` has one receiving task).
    pub fn arm(&self, waker: &Waker, pending: impl Fn() -> bool) -> bool {
        debug_assert!(self.expects_tasks(), "arm without expect_tasks");
        self.task.with(|t| match t {
            Some(w) if w.will_wake(waker) => {}
            _ => *t = Some(waker.clone()),
        });
        self.armed.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if pending() {
            // No wait: a kick may still find the flag up and wake the
            // task once more, which costs a spurious poll, nothing else.
            self.armed.store(false, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// How many kicks found the sleeper asleep and woke it.
    pub fn unparks(&self) -> u64 {
        self.unparks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// TSC of the last kick that unparked the sleeper (0: none yet).
    pub fn kicked_at(&self) -> u64 {
        self.kicked_at.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times the sleeper parked (each a timer armed for its nap).
    pub fn parks(&self) -> u64 {
        self.parks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sleep up to `nap`, or until a [`kick`](Self::kick); not at all when
    /// `pending` (work queued) says so after the flag is up. On any thread
    /// but the registered one (or with none) it is a plain sleep.
    pub fn sleep(&self, nap: Duration, pending: impl Fn() -> bool) {
        if !self.try_sleep(nap, pending) {
            plain_sleep(nap);
        }
    }

    /// [`sleep`](Self::sleep) for the registered thread only: false (and
    /// no sleep) on any other, which then has no one to wake it.
    pub fn try_sleep(&self, nap: Duration, pending: impl Fn() -> bool) -> bool {
        match self.sleeper.get() {
            Some(t) if t.id() == thr::current().id() => {}
            _ => return false,
        }
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !pending() {
            park(nap);
            self.parks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.sleeping.store(false, Ordering::Relaxed);
        true
    }

    /// [`arm`](Self::arm) without the second look (for the model check
    /// only: it must find the lost wakeup this makes possible).
    #[cfg(loom)]
    pub fn arm_without_recheck(&self, waker: &Waker) {
        self.task.with(|t| *t = Some(waker.clone()));
        self.armed.store(true, Ordering::Relaxed);
    }

    /// The protocol without the second look (for the model check only: it
    /// must find the lost wakeup this makes possible).
    #[cfg(loom)]
    pub fn sleep_without_recheck(&self, nap: Duration) {
        self.sleeping.store(true, Ordering::Relaxed);
        park(nap);
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

#[cfg(not(loom))]
fn park(nap: Duration) {
    thr::park_timeout(nap);
}

/// loom has no timed park: a sleep that nothing wakes is a deadlock.
#[cfg(loom)]
fn park(_nap: Duration) {
    thr::park();
}

#[cfg(not(loom))]
fn plain_sleep(nap: Duration) {
    thr::sleep(nap);
}

#[cfg(loom)]
fn plain_sleep(_nap: Duration) {
    thr::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_kick_ends_a_long_sleep_early() {
        let w = Arc::new(Wake::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            w2.register();
            tx.send(()).unwrap();
            let t0 = Instant::now();
            w2.sleep(Duration::from_secs(30), || false);
            t0.elapsed()
        });
        rx.recv().unwrap();
        // Kick until the sleeper is asleep and woken (a kick before its flag
        // is up finds nobody to wake).
        while !t.is_finished() {
            w.kick();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(t.join().unwrap() < Duration::from_secs(30));
    }

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counted() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(Default::default()));
        (Arc::clone(&c), Waker::from(c))
    }

    #[test]
    fn an_armed_task_is_woken_once_by_the_next_kick() {
        let w = Wake::new();
        w.expect_tasks();
        let (c, waker) = counted();
        let wakes = || c.0.load(std::sync::atomic::Ordering::SeqCst);
        w.kick();
        assert_eq!(wakes(), 0, "not armed: no wake");
        assert!(!w.arm(&waker, || false), "nothing pending: wait");
        w.kick();
        w.kick();
        assert_eq!(wakes(), 1, "one wake per wait, not per kick");
        assert_eq!(w.unparks(), 1);
        // Work already queued: look again, and no wake is left behind.
        assert!(w.arm(&waker, || true));
        w.kick();
        assert_eq!(wakes(), 1);
    }

    #[test]
    fn a_kick_from_another_thread_wakes_the_task_it_finds_waiting() {
        let w = Arc::new(Wake::new());
        w.expect_tasks();
        let (c, waker) = counted();
        assert!(!w.arm(&waker, || false));
        let w2 = Arc::clone(&w);
        std::thread::spawn(move || w2.kick()).join().unwrap();
        assert_eq!(c.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn only_the_registered_thread_sleeps_wakeably() {
        let w = Arc::new(Wake::new());
        w.register();
        let w2 = Arc::clone(&w);
        let other = std::thread::spawn(move || w2.try_sleep(Duration::from_secs(30), || false));
        assert!(!other.join().unwrap(), "another thread is not the sleeper");
        assert!(w.try_sleep(Duration::from_millis(1), || true));
    }

    #[test]
    fn pending_work_means_no_sleep_and_no_sleeper_means_a_plain_one() {
        let w = Wake::new();
        let t0 = Instant::now();
        w.sleep(Duration::from_millis(1), || true);
        assert!(
            t0.elapsed() >= Duration::from_millis(1),
            "unregistered: slept"
        );
        w.register();
        let t0 = Instant::now();
        w.sleep(Duration::from_secs(30), || true);
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
}
