//! `rte_prefetch0` as a safe call: a hint that starts loading a cache line
//! into every level, for code that knows where it will read a few hundred
//! nanoseconds before it does (a burst's flow-table slots, an mbuf's
//! private area). It never faults and never changes a value, whatever the
//! address, so any pointer, dangling or not, may be passed.

/// Starts loading the cache line that holds `p`.
#[inline(always)]
pub fn prefetch0<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it does not fault on any address and
    // writes nothing.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
