//! loom model of the main lcore's sleep and a sender's kick (`udpdemux::wake`,
//! the real code). In the model a park has no timeout, so a lost wakeup
//! leaves the sleeper parked forever, which loom reports as a deadlock.
//!
//! Run: `bash scripts/loom.sh` (from the workspace root; it checks both
//! loom models).
#![cfg(loom)]

use std::task::Waker;
use std::time::Duration;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use udpdemux::wake::Wake;

const NAP: Duration = Duration::from_millis(5);

/// Two senders each queue one frame (the ring: a counter) and kick; the
/// sleeper takes frames and sleeps whenever it found none, until it has
/// both. `sleep` is the sleeper's way to nap.
fn model(sleep: fn(&Wake, &AtomicUsize)) {
    loom::model(move || {
        let wake = Arc::new(Wake::new());
        let ring = Arc::new(AtomicUsize::new(0));
        wake.register();
        // Not joined: loom's join waits on the thread's park token, which a
        // kick may have left set (std keeps them apart); the model still
        // runs every thread to its end.
        for _ in 0..2 {
            let (wake, ring) = (Arc::clone(&wake), Arc::clone(&ring));
            thread::spawn(move || {
                ring.fetch_add(1, Ordering::Release);
                wake.kick();
            });
        }
        let mut taken = 0;
        while taken < 2 {
            let n = ring.swap(0, Ordering::Acquire);
            if n == 0 {
                sleep(&wake, &ring);
            }
            taken += n;
        }
        assert_eq!(ring.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn no_kick_is_lost() {
    model(|wake, ring| wake.sleep(NAP, || ring.load(Ordering::Relaxed) > 0));
}

/// The model finds the lost wakeup when the sleeper does not look at the
/// ring again after raising its flag.
#[test]
#[should_panic(expected = "deadlock")]
fn without_the_second_look_a_kick_is_lost() {
    model(|wake, _| wake.sleep_without_recheck(NAP));
}

/// A task as the sleeper (the QUIC adapter's `poll_recv`): it takes
/// frames and, whenever it found none, arms (`arm` returns true when it
/// must look again instead of waiting) and waits for a kick to wake it.
/// A lost wakeup leaves `block_on` parked forever: loom's deadlock.
fn task_model(arm: fn(&Wake, &Waker, &AtomicUsize) -> bool) {
    loom::model(move || {
        let wake = Arc::new(Wake::new());
        // As a socket's, before the kickers can reach it.
        wake.expect_tasks();
        let ring = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let (wake, ring) = (Arc::clone(&wake), Arc::clone(&ring));
            thread::spawn(move || {
                ring.fetch_add(1, Ordering::Release);
                wake.kick();
            });
        }
        // The task's poll, run until ready; between polls the thread parks
        // until the task's waker unparks it.
        let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
        let mut taken = 0;
        loop {
            let n = ring.swap(0, Ordering::Acquire);
            taken += n;
            if taken == 2 {
                break;
            }
            if n == 0 && !arm(&wake, &waker, &ring) {
                // Poll::Pending: parked until woken.
                thread::park();
            }
        }
        assert_eq!(ring.load(Ordering::Relaxed), 0);
    });
}

/// A waker that unparks the task's thread (loom's own `block_on` needs a
/// feature, and is this).
struct Unpark(thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

#[test]
fn no_kick_is_lost_to_a_task() {
    task_model(|wake, waker, ring| wake.arm(waker, || ring.load(Ordering::Relaxed) > 0));
}

/// The model finds the lost wakeup when the task does not look at the
/// ring again after raising its flag.
#[test]
#[should_panic(expected = "deadlock")]
fn without_the_second_look_a_task_misses_a_kick() {
    task_model(|wake, waker, _| {
        wake.arm_without_recheck(waker);
        false
    });
}
