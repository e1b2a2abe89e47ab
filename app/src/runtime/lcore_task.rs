//! Application work an RX lcore runs between its bursts: run to
//! completion, as DPDK applications that embed a protocol stack run it
//! (receive, the stack, transmit, one thread).
//!
//! Why: an application on its own threads pays a thread hand-off at each
//! hop of a request. The RX lcore wakes the application's thread or task
//! when it delivers, the application's sends wake the main lcore that
//! drains the send ring, and on a machine with few CPUs each wake-up waits
//! for a CPU. A QUIC server (quinn) does a little work per datagram and
//! many round trips, so those hops were most of what kept it behind the
//! kernel's UDP (docs/benchmarks.md). A task on the RX lcore is polled
//! right after the burst that woke it, and the datagrams it sends leave
//! from the same lcore before the next poll.
//!
//! Protocol: the application hands a task to an RX lcore's [`TaskSlot`]
//! ([`crate::api::run_on_rx_lcore`]); the lcore takes it at its next
//! quiescent point (a look at two flags per loop while the slot is empty,
//! the rest out of line) and from then on calls it once per loop, at that
//! point: it holds no
//! flow-table snapshot and is inside no socket's enqueue while the task
//! runs. The task is dropped on the lcore when its loop ends (the engine's
//! stop). The task's allocations are the application's: the loop's
//! hot-path count leaves them out ([`super::alloc_guard::ColdSection`]).
//!
//! This module holds state only (it imports no runtime file): the RX loop
//! (`rx`) runs the task, the registry asks [`on_rx_lcore`] whether it is
//! called from inside one.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What an RX lcore runs once per loop. Returns whether it did work (the
/// lcore then stays awake for the next loop rather than backing off
/// towards a nap); `false` is always safe: a task woken later is run at
/// the lcore's next loop, at most `engine.idle_sleep_us` away.
pub type LcoreTask = Box<dyn FnMut() -> bool + Send>;

/// Where a task waits for its RX lcore.
#[derive(Default)]
pub struct TaskSlot {
    /// A task is in `task`, not yet taken by the lcore.
    ready: AtomicBool,
    task: Mutex<Option<LcoreTask>>,
    /// The lcore has taken a task (it runs it until its loop ends).
    taken: AtomicBool,
}

impl std::fmt::Debug for TaskSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSlot")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish()
    }
}

impl TaskSlot {
    /// Give the lcore `task`; gives it back when the lcore already has
    /// one (one task per lcore: a task that drives an async runtime runs
    /// any number of the application's futures).
    pub fn offer(&self, task: LcoreTask) -> Result<(), LcoreTask> {
        let mut slot = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() || self.taken.load(Ordering::Acquire) {
            return Err(task);
        }
        *slot = Some(task);
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the lcore runs a task or has one waiting for it: the loop's
    /// one look per pass (a relaxed load of each flag; `take` clears
    /// `ready` as it sets `taken`, which stays set), and `api`'s check
    /// before it hands the send path over.
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.ready.load(Ordering::Relaxed) || self.taken.load(Ordering::Relaxed)
    }

    /// The lcore's side: the task offered, if one was (once).
    pub fn take(&self) -> Option<LcoreTask> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        // Both flags change under the lock `offer` takes: a second offer
        // sees `taken` and is refused, never left in the slot unrun.
        let mut slot = self.task.lock().unwrap_or_else(|p| p.into_inner());
        let t = slot.take();
        if t.is_some() {
            self.taken.store(true, Ordering::Release);
        }
        self.ready.store(false, Ordering::Relaxed);
        t
    }
}

thread_local! {
    /// The RX lcore (its index in `Shared::rx`) whose task this thread is
    /// running right now.
    static RUNNING: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Marks the calling thread as RX lcore `index` running its task, until
/// dropped.
pub struct Running(());

impl Running {
    pub fn enter(index: usize) -> Running {
        RUNNING.with(|r| r.set(Some(index)));
        Running(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(None));
    }
}

/// The RX lcore whose task the calling thread is running, if any: that
/// lcore is at its quiescent point (a socket removed from inside its task
/// must not wait for it to pass one).
pub fn on_rx_lcore() -> Option<usize> {
    RUNNING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_task_per_lcore_taken_once() {
        let slot = TaskSlot::default();
        assert!(slot.take().is_none());
        assert!(!slot.active());
        assert!(slot.offer(Box::new(|| true)).is_ok());
        assert!(slot.active());
        assert!(slot.offer(Box::new(|| false)).is_err(), "a second task waits for none");
        let mut t = slot.take().expect("the offered task");
        assert!(t());
        assert!(slot.take().is_none());
        assert!(slot.active(), "taken, so still the lcore's");
        assert!(slot.offer(Box::new(|| false)).is_err());
    }

    #[test]
    fn running_marks_the_thread() {
        assert_eq!(on_rx_lcore(), None);
        let r = Running::enter(3);
        assert_eq!(on_rx_lcore(), Some(3));
        std::thread::spawn(|| assert_eq!(on_rx_lcore(), None)).join().unwrap();
        drop(r);
        assert_eq!(on_rx_lcore(), None);
    }
}
