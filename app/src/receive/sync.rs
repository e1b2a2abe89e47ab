//! Synchronisation building blocks for the receive path, with loom shims.
//!
//! Everything the stage/admission/drain protocol depends on for correctness
//! (the stage heads, packet links, memory counters, the spinlocks) goes
//! through the re-exports below, so `RUSTFLAGS="--cfg loom"` model-checks
//! the real code. Statistics counters deliberately do not (see
//! `crate::counters::stat`).

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub use loom::hint::spin_loop;
#[cfg(not(loom))]
pub use std::hint::spin_loop;

#[cfg(loom)]
type CellInner<T> = loom::cell::UnsafeCell<T>;
#[cfg(not(loom))]
type CellInner<T> = core::cell::UnsafeCell<T>;

/// `UnsafeCell` with loom's closure API on both builds, so loom can track
/// accesses to data guarded by [`SpinLock`].
#[derive(Debug)]
pub struct UnsafeCell<T>(CellInner<T>);

impl<T> UnsafeCell<T> {
    pub fn new(v: T) -> Self {
        Self(CellInner::new(v))
    }

    /// Gives `f` the raw pointer; dereferencing it is the caller's unsafe.
    #[cfg(loom)]
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }

    /// Gives `f` the raw pointer; dereferencing it is the caller's unsafe.
    #[cfg(not(loom))]
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

/// Aligns `T` to 128 bytes: x86 prefetches cache lines in adjacent pairs, so
/// 64-byte alignment still lets two writers on "different" lines collide
/// (the same choice crossbeam-utils makes for x86_64).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A test-and-test-and-set spinlock (the kernel's `spin_lock` analogue).
///
/// Held only for short, bounded critical sections on lcores that never
/// sleep; there is no fairness, as with `rte_spinlock`.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct SpinLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `T` to one thread at a time, so the
// data only needs to be sendable between threads, exactly like std's Mutex.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the `T` it owns; no thread-bound state.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for SpinLock<T> {}

/// After this many failed spins a non-loom build yields the CPU: on lcores
/// pinned one per core this is never reached in practice, but tests and
/// oversubscribed hosts run more threads than cores and a preempted holder
/// would otherwise burn whole time slices of every waiter.
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

#[cfg(not(loom))]
struct Unlock<'a>(&'a AtomicBool);
#[cfg(not(loom))]
impl Drop for Unlock<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release publishes the critical section's writes to the next owner.
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(not(loom))]
impl<T> SpinLock<T> {
    pub fn new(v: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(v),
        }
    }

    #[inline]
    fn acquire(&self) {
        // Fast path: one RMW when uncontended.
        if !self.locked.swap(true, Ordering::Acquire) {
            return;
        }
        self.acquire_slow();
    }

    #[cold]
    fn acquire_slow(&self) {
        loop {
            self.wait_while_locked();
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }

    /// Spins on a plain load so waiters share the line instead of bouncing
    /// it with RMWs; the caller then tries once it looks free.
    #[inline]
    fn wait_while_locked(&self) {
        let mut spins: u32 = 0;
        while self.locked.load(Ordering::Relaxed) {
            spin_loop();
            spins = spins.wrapping_add(1);
            // A power of two, so a mask (and no `is_multiple_of`, MSRV 1.75).
            if spins & (SPINS_BEFORE_YIELD - 1) == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Runs `f` with the lock held. The lock is released even if `f`
    /// unwinds (tests), so a failing assertion cannot wedge other threads.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.acquire();
        let _unlock = Unlock(&self.locked);
        self.data.with_mut(|p| {
            // SAFETY: we hold the lock, so no other thread accesses the data
            // until `_unlock` runs after `f` returns.
            f(unsafe { &mut *p })
        })
    }

    /// Runs `f` with the lock held if it is free now; `None` (and `f` not
    /// run) if someone holds it. Never waits: one load when held, one RMW
    /// when free.
    #[inline]
    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.locked.load(Ordering::Relaxed) || self.locked.swap(true, Ordering::Acquire) {
            return None;
        }
        let _unlock = Unlock(&self.locked);
        Some(self.data.with_mut(|p| {
            // SAFETY: we hold the lock (the swap above found it free), so no
            // other thread accesses the data until `_unlock` runs.
            f(unsafe { &mut *p })
        }))
    }

    /// Whether someone holds the lock right now (diagnostics and tests only:
    /// the answer may be stale by the time it is read).
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

/// Under loom the spinlock is modelled by loom's own `Mutex`: loom cannot
/// explore spin-wait loops (its issue #162, "Model exceeded maximum number
/// of branches"), and the lock's mutual exclusion is not what the model is
/// about (std-thread tests below cover it). The stage, election, drain and
/// accounting code around the lock is the real code.
#[cfg(loom)]
#[derive(Debug)]
pub struct SpinLock<T> {
    inner: loom::sync::Mutex<T>,
}

#[cfg(loom)]
impl<T> SpinLock<T> {
    pub fn new(v: T) -> Self {
        Self {
            inner: loom::sync::Mutex::new(v),
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        match self.inner.try_lock() {
            Ok(mut g) => Some(f(&mut g)),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(e)) => Some(f(&mut e.into_inner())),
        }
    }

    pub fn is_locked(&self) -> bool {
        self.inner.try_lock().is_err()
    }

    pub fn into_inner(self) -> T {
        self.inner.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cache_padded_is_two_lines() {
        assert_eq!(core::mem::align_of::<CachePadded<u8>>(), 128);
        assert_eq!(core::mem::size_of::<CachePadded<u64>>(), 128);
    }

    #[test]
    fn spinlock_excludes() {
        // Non-atomic read-modify-write under the lock: lost updates would
        // show up as a short count if exclusion were broken.
        let l = Arc::new(SpinLock::new(0u64));
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        l.with(|v| {
                            let x = *v;
                            std::hint::black_box(&x);
                            *v = x + 1;
                        });
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(Arc::try_unwrap(l).unwrap().into_inner(), 60_000);
    }

    #[test]
    fn spinlock_released_on_unwind() {
        let l = SpinLock::new(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.with(|_| panic!("boom"));
        }));
        assert!(r.is_err());
        assert!(!l.is_locked());
        assert_eq!(l.with(|v| *v), 1);
    }
}
