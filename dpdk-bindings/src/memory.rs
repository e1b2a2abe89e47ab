//! What the EAL has handed out, for leak checks: memzones (every ring and
//! pool lives in one) and the DPDK malloc heap. Both are read under the
//! EAL's own locks, so any thread may call these while the EAL is up.
use std::ffi::c_void;

use crate::ffi;

/// Reserved memzones in this process (`rte_memzone_walk`), or `None` when
/// the EAL is not up.
pub fn memzone_count() -> Option<u64> {
    unsafe extern "C" fn one(_mz: *const ffi::rte_memzone, arg: *mut c_void) {
        // SAFETY: `arg` is the `&mut u64` `memzone_count` passes; it lives
        // until `rte_memzone_walk` returns and only this walk touches it.
        let n = unsafe { &mut *(arg as *mut u64) };
        *n += 1;
    }
    if !crate::eal::is_up() {
        return None;
    }
    let mut n: u64 = 0;
    // SAFETY: the EAL is up (its memory config exists); the callback only
    // increments the counter `arg` points at, which outlives the walk; the
    // walk takes the memzone list's read lock itself.
    unsafe { ffi::rte_memzone_walk(Some(one), &mut n as *mut u64 as *mut c_void) };
    Some(n)
}

/// Every reserved memzone's name and length in bytes (for diagnostics:
/// which ring or pool is still there), or `None` when the EAL is not up.
pub fn memzones() -> Option<Vec<(String, u64)>> {
    unsafe extern "C" fn one(mz: *const ffi::rte_memzone, arg: *mut c_void) {
        // SAFETY: `arg` is the `&mut Vec` `memzones` passes; it outlives the
        // walk and only this walk touches it.
        let v = unsafe { &mut *(arg as *mut Vec<(String, u64)>) };
        // SAFETY: the walk passes a live memzone (under the list's read
        // lock); its name is a NUL-terminated array the EAL filled.
        let (name, len) = unsafe {
            let name = std::ffi::CStr::from_ptr((*mz).name.as_ptr())
                .to_string_lossy()
                .into_owned();
            (name, (*mz).len as u64)
        };
        v.push((name, len));
    }
    if !crate::eal::is_up() {
        return None;
    }
    let mut v: Vec<(String, u64)> = Vec::new();
    // SAFETY: the EAL is up; the callback only pushes onto the Vec `arg`
    // points at, which outlives the walk.
    unsafe { ffi::rte_memzone_walk(Some(one), &mut v as *mut Vec<(String, u64)> as *mut c_void) };
    Some(v)
}

/// The DPDK heap summed over NUMA sockets (`rte_malloc_get_socket_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes allocated (memzones included: they are carved from the heap).
    pub alloc_bytes: u64,
    /// Allocated elements.
    pub alloc_count: u64,
    /// Bytes the heap holds (allocated + free).
    pub total_bytes: u64,
}

/// The heap's totals, or `None` when the EAL is not up.
pub fn heap_stats() -> Option<HeapStats> {
    if !crate::eal::is_up() {
        return None;
    }
    let mut out = HeapStats::default();
    // SAFETY: plain reads of values the EAL set at init.
    let sockets = unsafe { ffi::rte_socket_count() };
    for i in 0..sockets {
        // SAFETY: i < rte_socket_count(), as the function requires.
        let sock = unsafe { ffi::rte_socket_id_by_idx(i) };
        if sock < 0 {
            continue;
        }
        let mut s = ffi::rte_malloc_socket_stats {
            heap_totalsz_bytes: 0,
            heap_freesz_bytes: 0,
            greatest_free_size: 0,
            free_count: 0,
            alloc_count: 0,
            heap_allocsz_bytes: 0,
        };
        // SAFETY: the EAL is up; `s` is a valid, writable stats struct for
        // the call; the function takes the heap's lock itself.
        if unsafe { ffi::rte_malloc_get_socket_stats(sock, &mut s) } == 0 {
            out.alloc_bytes += s.heap_allocsz_bytes as u64;
            out.alloc_count += s.alloc_count as u64;
            out.total_bytes += s.heap_totalsz_bytes as u64;
        }
    }
    Some(out)
}
