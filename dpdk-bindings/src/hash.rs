//! DPDK's exact-match table (`rte_hash`: cuckoo hashing, buckets of 8
//! signatures, keys in a separate store), with `rte_hash_lookup_bulk_data`
//! as l3fwd's exact-match mode uses it. The engine's own flow table is
//! Rust; this one is the benchmark reference a DPDK-native lookup is
//! measured by (`run --floor rte-hash`).
use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr::NonNull;

use crate::error::{DpdkError, Result};
use crate::ffi;

/// Most keys one `lookup_bulk` call takes (`RTE_HASH_LOOKUP_BULK_MAX`).
pub const LOOKUP_BULK_MAX: usize = 64;

/// An `rte_hash` whose keys are `K` bytes and whose values are `u64`s
/// (stored in the table's per-key data pointer). Single writer; lookups
/// from the owning thread only (created without DPDK's RW-concurrency flags).
#[derive(Debug)]
pub struct ExactTable<const K: usize> {
    raw: NonNull<ffi::rte_hash>,
}

// SAFETY: the table is only reached through &self / &mut self: lookups
// (&self) never run concurrently with inserts (&mut self), which is the
// single-writer contract of an rte_hash created without RW flags. Moving
// it to another thread moves that contract with it.
unsafe impl<const K: usize> Send for ExactTable<K> {}

impl<const K: usize> ExactTable<K> {
    /// A table for at least `entries` keys, in hugepage memory of `socket`,
    /// hashed with DPDK's default (CRC32 where the CPU has it).
    pub fn create(name: &str, entries: u32, socket: i32) -> Result<Self> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Usage(format!("bad hash name {name:?}")))?;
        let params = ffi::rte_hash_parameters {
            name: cname.as_ptr(),
            // The cuckoo table fills to ~95% before an insert fails; a
            // quarter more leaves room for an unlucky key set.
            entries: entries.max(8).saturating_add(entries / 4),
            key_len: K as u32,
            hash_func: None,
            hash_func_init_val: 0,
            socket_id: socket,
            ..Default::default()
        };
        // SAFETY: params is fully initialised; DPDK copies the name.
        let p = unsafe { ffi::rte_hash_create(&params) };
        NonNull::new(p)
            .map(|raw| ExactTable { raw })
            .ok_or_else(|| {
                // rte_hash_create leaves rte_errno as it was when an allocation
                // fails (22.11): only the codes it sets are worth reporting.
                let e = crate::error::rte_errno();
                let why = if [libc::EEXIST, libc::EINVAL, libc::ENOMEM].contains(&e) {
                    crate::error::strerror(e)
                } else {
                    "out of EAL memory".into()
                };
                DpdkError::Usage(format!("rte_hash_create({name}, {entries}): {why}"))
            })
    }

    /// Add `key` with `value` (replacing the value of a key already there).
    pub fn insert(&mut self, key: &[u8; K], value: u64) -> Result<()> {
        // SAFETY: a live table we alone write; the key is K bytes, the
        // table's key_len, and is copied; the value is stored as a pointer
        // that is never dereferenced.
        let r = unsafe {
            ffi::rte_hash_add_key_data(
                self.raw.as_ptr(),
                key.as_ptr().cast(),
                value as usize as *mut c_void,
            )
        };
        if r < 0 {
            return Err(DpdkError::from_ret("rte_hash_add_key_data", r));
        }
        Ok(())
    }

    /// Look up `keys` (at most [`LOOKUP_BULK_MAX`]) in one
    /// `rte_hash_lookup_bulk_data`: bit i of the result is set when
    /// `keys[i]` is in the table, and then `values[i]` is its value.
    #[inline]
    pub fn lookup_bulk(&self, keys: &[[u8; K]], values: &mut [u64; LOOKUP_BULK_MAX]) -> u64 {
        let n = keys.len().min(LOOKUP_BULK_MAX);
        if n == 0 {
            return 0;
        }
        let mut ptrs = [std::ptr::null::<c_void>(); LOOKUP_BULK_MAX];
        for (p, k) in ptrs.iter_mut().zip(keys) {
            *p = k.as_ptr().cast();
        }
        let mut data = [std::ptr::null_mut::<c_void>(); LOOKUP_BULK_MAX];
        let mut hits = 0u64;
        // SAFETY: a live table; n <= 64 pointers to K-byte keys that
        // outlive the call; data has room for n values.
        unsafe {
            ffi::rte_hash_lookup_bulk_data(
                self.raw.as_ptr(),
                ptrs.as_mut_ptr(),
                n as u32,
                &mut hits,
                data.as_mut_ptr(),
            )
        };
        for (v, d) in values.iter_mut().zip(&data[..n]) {
            *v = *d as usize as u64;
        }
        hits
    }
}

impl<const K: usize> Drop for ExactTable<K> {
    fn drop(&mut self) {
        // After rte_eal_cleanup the table's memory is gone with the heap.
        if crate::eal::is_up() {
            // SAFETY: a table we created and nobody uses after this.
            unsafe { ffi::rte_hash_free(self.raw.as_ptr()) }
        }
    }
}
