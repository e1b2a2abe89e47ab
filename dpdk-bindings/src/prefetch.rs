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

/// Starts loading the cache line that holds `p` for writing (`PREFETCHW`,
/// DPDK's `rte_prefetch0_write`): the line comes in exclusive, so a store
/// to it a few hundred nanoseconds later does not wait for another core to
/// give it up, and the stores queued behind that one do not back up.
/// On a CPU without the instruction (asked once, then a load), it is a
/// read prefetch, which still brings the line in.
#[inline(always)]
pub fn prefetch_w<T>(p: *const T) {
    prefetch_w_each(std::iter::once(p as *const u8), &[0]);
}

/// [`prefetch_w`] of every line at `offsets` from each of `bases`: the
/// CPU's support is asked once for all of them.
#[inline(always)]
pub fn prefetch_w_each(bases: impl Iterator<Item = *const u8>, offsets: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_prefetchw() {
            for b in bases {
                for &o in offsets {
                    // SAFETY: the CPU has PREFETCHW (tested above), a hint:
                    // it does not fault on any address and writes nothing.
                    // Rust's `_MM_HINT_ET0` would compile to PREFETCHT0
                    // unless the whole build targets `prfchw`, hence the
                    // instruction by hand.
                    unsafe {
                        std::arch::asm!("prefetchw [{0}]", in(reg) b.wrapping_add(o), options(nostack, readonly, preserves_flags));
                    }
                }
            }
        } else {
            for b in bases {
                for &o in offsets {
                    prefetch0(b.wrapping_add(o));
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bases, offsets);
}

/// CPUID's PRFCHW bit (leaf 0x8000_0001, ECX bit 8; Linux's
/// `3dnowprefetch`), asked once: 0 not yet, 1 absent, 2 present.
#[cfg(target_arch = "x86_64")]
static PRFCHW: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_prefetchw() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match PRFCHW.load(Relaxed) {
        0 => {
            // The extended leaf is asked only when the CPU reports it.
            use std::arch::x86_64::__cpuid;
            let yes =
                __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0;
            PRFCHW.store(if yes { 2 } else { 1 }, Relaxed);
            yes
        }
        v => v == 2,
    }
}
