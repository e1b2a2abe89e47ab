use std::ptr::NonNull;

use crate::ffi;

/// An owned mbuf (one reference); `Drop` frees it (segments and refcount handled by DPDK).
pub struct Mbuf {
    raw: NonNull<ffi::rte_mbuf>,
}

// SAFETY: an mbuf we own is exclusively ours and may move between lcores
// (DPDK frees into the calling lcore's mempool cache, or the ring without one).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// # Safety
    /// `raw` must be a valid mbuf whose one reference the caller gives to us.
    pub unsafe fn from_raw(raw: NonNull<ffi::rte_mbuf>) -> Mbuf {
        Mbuf { raw }
    }
    pub fn into_raw(self) -> NonNull<ffi::rte_mbuf> {
        let p = self.raw;
        std::mem::forget(self);
        p
    }
    pub fn as_ptr(&self) -> *mut ffi::rte_mbuf {
        self.raw.as_ptr()
    }
    /// The first segment's bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the mbuf is valid and we hold a reference.
        unsafe { data(self.raw.as_ptr()) }
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: we own the mbuf exclusively (one reference, not shared).
        unsafe { data_mut(self.raw.as_ptr()) }
    }
    pub fn pkt_len(&self) -> u32 {
        // SAFETY: valid mbuf.
        unsafe { (*self.raw.as_ptr()).pkt_len }
    }
    pub fn ol_flags(&self) -> u64 {
        // SAFETY: valid mbuf.
        unsafe { (*self.raw.as_ptr()).ol_flags }
    }
    /// Grow the packet by `len` bytes at the tail; the new bytes, or None if it does not fit.
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: valid, exclusively owned mbuf.
        let p = unsafe { ffi::rte_pktmbuf_append(self.raw.as_ptr(), len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: DPDK returned a pointer to `len` writable bytes inside our data room.
        Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len as usize) })
    }
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid mbuf.
        unsafe { ffi::rte_mbuf_refcnt_read(self.raw.as_ptr()) }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we hold one reference; DPDK decrements and frees at zero.
        unsafe { ffi::rte_pktmbuf_free(self.raw.as_ptr()) }
    }
}

/// The first segment's bytes of a raw mbuf (`rte_pktmbuf_mtod` + `data_len`).
///
/// # Safety
/// `m` must be a valid mbuf that stays alive and unmodified for the returned lifetime.
#[inline(always)]
pub unsafe fn data<'a>(m: *const ffi::rte_mbuf) -> &'a [u8] {
    // SAFETY: per the caller's contract; buf_addr + data_off .. + data_len is in the data room.
    unsafe {
        let m = &*m;
        std::slice::from_raw_parts(
            (m.buf_addr as *const u8).add(m.data_off as usize),
            m.data_len as usize,
        )
    }
}

/// Mutable variant of [`data`].
///
/// # Safety
/// As [`data`], and the caller must hold the only reference to the mbuf.
#[inline(always)]
pub unsafe fn data_mut<'a>(m: *mut ffi::rte_mbuf) -> &'a mut [u8] {
    // SAFETY: per the caller's contract.
    unsafe {
        let m = &*m;
        std::slice::from_raw_parts_mut(
            (m.buf_addr as *mut u8).add(m.data_off as usize),
            m.data_len as usize,
        )
    }
}

/// The application private area (`rte_mbuf_to_priv`): `priv_size` bytes right after the struct.
#[inline(always)]
pub fn priv_area(m: *mut ffi::rte_mbuf) -> *mut u8 {
    // Pointer arithmetic only; valid to dereference only if the pool has priv_size > 0.
    (m as *mut u8).wrapping_add(std::mem::size_of::<ffi::rte_mbuf>())
}

/// Free many raw mbufs at once (handles refcounts, chains and mixed pools).
///
/// # Safety
/// Every pointer must be a valid mbuf whose reference the caller gives up.
#[inline]
pub unsafe fn free_bulk(mbufs: &mut [*mut ffi::rte_mbuf]) {
    if !mbufs.is_empty() {
        // SAFETY: per the caller's contract.
        unsafe { ffi::rte_pktmbuf_free_bulk(mbufs.as_mut_ptr(), mbufs.len() as u32) }
    }
}

/// Reference count of a raw mbuf.
///
/// # Safety
/// `m` must be a valid mbuf.
#[inline(always)]
pub unsafe fn refcnt(m: *const ffi::rte_mbuf) -> u16 {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_mbuf_refcnt_read(m) }
}

/// Atomically add `delta` to the reference count; the new value.
///
/// # Safety
/// `m` must be a valid mbuf the caller holds a reference to.
#[inline(always)]
pub unsafe fn refcnt_update(m: *mut ffi::rte_mbuf, delta: i16) -> u16 {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_mbuf_refcnt_update(m, delta) }
}

/// Reset a single-segment mbuf's packet fields for reuse (`rte_pktmbuf_reset`).
///
/// # Safety
/// The caller must be the only user of `m` (no other reference reads it).
#[inline(always)]
pub unsafe fn reset(m: *mut ffi::rte_mbuf) {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_pktmbuf_reset(m) }
}

/// Free one raw mbuf (drops one reference).
///
/// # Safety
/// `m` must be a valid mbuf whose reference the caller gives up.
#[inline(always)]
pub unsafe fn free(m: *mut ffi::rte_mbuf) {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_pktmbuf_free(m) }
}

/// Register a dynamic mbuf field (`rte_mbuf_dynfield_register`), or find the
/// one already registered under `name` with the same size and alignment:
/// its byte offset inside `struct rte_mbuf`. Needs an initialised EAL.
pub fn dynfield_register(name: &str, size: usize, align: usize) -> crate::Result<usize> {
    let mut params = ffi::rte_mbuf_dynfield {
        size,
        align,
        ..Default::default()
    };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= params.name.len() || bytes.contains(&0) {
        return Err(crate::DpdkError::Usage(format!(
            "bad dynfield name {name:?}"
        )));
    }
    for (d, &s) in params.name.iter_mut().zip(bytes) {
        *d = s as std::os::raw::c_char;
    }
    // SAFETY: params is a valid, NUL-terminated (zeroed tail) descriptor; DPDK copies it.
    let off = unsafe { ffi::rte_mbuf_dynfield_register(&params) };
    if off < 0 {
        return Err(crate::DpdkError::from_errno(format!(
            "rte_mbuf_dynfield_register({name})"
        )));
    }
    Ok(off as usize)
}

/// A dynamic field of `m` at `offset` (`RTE_MBUF_DYNFIELD`): pointer
/// arithmetic only; dereference it only with an offset from
/// [`dynfield_register`] for a field of type `T`.
#[inline(always)]
pub fn dynfield<T>(m: *mut ffi::rte_mbuf, offset: usize) -> *mut T {
    (m as *mut u8).wrapping_add(offset) as *mut T
}
