//! Proof that the per-packet path does not allocate.
//!
//! The binary installs [`CountingAlloc`] as its global allocator. A lcore
//! marks itself "hot" while it runs its poll loop; any heap allocation made
//! by a hot thread is counted, the summary reports the count, and the tests
//! require it to be zero. A thread-local flag (const-initialised, so reading
//! it never allocates) keeps the main lcore's stats printing out of the count.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    static HOT: Cell<bool> = const { Cell::new(false) };
    /// This thread's share of `HOT_ALLOCS`: tests that run in parallel
    /// threads each read their own.
    static THREAD_HOT_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

static HOT_ALLOCS: AtomicU64 = AtomicU64::new(0);

pub struct CountingAlloc;

// SAFETY: forwards every call to the system allocator unchanged; the only
// extra work is a thread-local read and a relaxed atomic add.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[inline(always)]
fn note() {
    // try_with: during thread teardown the TLS may be gone; such frees/allocs are not hot.
    if HOT.try_with(|h| h.get()).unwrap_or(false) {
        HOT_ALLOCS.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD_HOT_ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

/// Marks the calling thread hot until the guard drops.
pub struct HotSection(());

impl HotSection {
    pub fn enter() -> HotSection {
        HOT.with(|h| h.set(true));
        HotSection(())
    }
}

impl Drop for HotSection {
    fn drop(&mut self) {
        HOT.with(|h| h.set(false));
    }
}

/// Leaves the calling thread's hot section until dropped: application
/// code a hot loop calls (a task on an RX lcore, `lcore_task`) allocates on
/// its own account, not the per-packet path's.
pub struct ColdSection {
    was_hot: bool,
}

impl ColdSection {
    pub fn enter() -> ColdSection {
        ColdSection {
            was_hot: HOT.with(|h| h.replace(false)),
        }
    }
}

impl Drop for ColdSection {
    fn drop(&mut self) {
        HOT.with(|h| h.set(self.was_hot));
    }
}

/// Allocations made by hot threads so far (only meaningful where
/// `CountingAlloc` is the global allocator: the `udpdemux` binary and tests that install it).
pub fn hot_allocations() -> u64 {
    HOT_ALLOCS.load(Ordering::Relaxed)
}

/// Allocations the calling thread made while hot, so far.
pub fn thread_hot_allocations() -> u64 {
    THREAD_HOT_ALLOCS.with(Cell::get)
}

/// Run `f` with the calling thread marked hot; its result and what it
/// allocated (this thread only: tests running in parallel threads each
/// count their own).
pub fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = thread_hot_allocations();
    let hot = HotSection::enter();
    let r = f();
    drop(hot);
    (r, thread_hot_allocations() - before)
}
