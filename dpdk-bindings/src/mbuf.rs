//! Mbufs, the only place that reads `struct rte_mbuf`'s fields.
//!
//! * [`RawMbuf`] is `struct rte_mbuf` made opaque: engine code passes mbufs
//!   around as `*mut RawMbuf` (what DPDK's burst calls, rings and bulk frees
//!   take), and reads one only through a view.
//! * [`MbufRef`] and [`MbufMut`] are those views: the first segment's data,
//!   the lengths, the offload flags, the pool and buffer sizes, the
//!   reference count, where the private area is. Making one from a raw
//!   pointer is the single `unsafe` step, with one contract each.
//! * [`Mbuf`] owns one mbuf (freed on drop), [`MbufBurst`] owns a burst of
//!   them (freed in bulk on drop), and [`FreeList`] gathers mbufs to free in
//!   bulk. Through these, code that receives, transmits, rings and frees
//!   mbufs needs no `unsafe` at all.
//!
//! The views are `Copy` wrappers of the raw pointer (not references to the
//! struct), so a view may reach the private area right after the struct
//! and the data room it points to.
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::ffi;

/// `struct rte_mbuf`, opaque: only this module reads or writes its fields.
/// Engine code holds `*mut RawMbuf` and reads it through [`MbufRef`].
#[repr(transparent)]
pub struct RawMbuf(ffi::rte_mbuf);

impl RawMbuf {
    /// A zeroed `struct rte_mbuf` with only `buf_len` and `priv_size` set:
    /// not an mbuf of any pool (no buffer: its data is empty), for tests of
    /// code that reads those fields through a view.
    #[doc(hidden)]
    pub fn detached(buf_len: u16, priv_size: u16) -> RawMbuf {
        RawMbuf(ffi::rte_mbuf {
            buf_addr: NonNull::<u8>::dangling().as_ptr().cast(),
            buf_len,
            priv_size,
            ..Default::default()
        })
    }
}

impl RawMbuf {
    /// A `struct rte_mbuf` over the caller's `buf` (not of any pool), one
    /// segment holding `len` bytes at `data_off`: for tests of code that
    /// reads, narrows and chains segments (never freed through DPDK).
    /// `None` unless the data fits the buffer.
    #[doc(hidden)]
    pub fn over(buf: &mut [u8], data_off: u16, len: u16) -> Option<RawMbuf> {
        let buf_len = u16::try_from(buf.len()).ok()?;
        if u32::from(data_off) + u32::from(len) > u32::from(buf_len) {
            return None;
        }
        let mut m = ffi::rte_mbuf {
            buf_addr: buf.as_mut_ptr().cast(),
            buf_len,
            ..Default::default()
        };
        m.data_off = data_off;
        m.data_len = len;
        m.pkt_len = u32::from(len);
        m.nb_segs = 1;
        Some(RawMbuf(m))
    }
}

/// Bytes of `struct rte_mbuf` (two cache lines); the private area starts here.
pub const MBUF_SIZE: usize = std::mem::size_of::<ffi::rte_mbuf>();
/// Headroom DPDK leaves before the data of a fresh mbuf (`RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: u16 = ffi::RTE_PKTMBUF_HEADROOM as u16;
/// DPDK's default data room, headroom included (`RTE_MBUF_DEFAULT_BUF_SIZE`).
pub const DEFAULT_BUF_SIZE: u16 = ffi::RTE_MBUF_DEFAULT_BUF_SIZE as u16;

/// TX checksum requests ([`MbufMut::set_tx_offload`]) and the port
/// offloads they need.
pub mod tx_cksum {
    use crate::ffi;
    pub const IPV4: u64 = ffi::RTE_MBUF_F_TX_IPV4;
    pub const IPV6: u64 = ffi::RTE_MBUF_F_TX_IPV6;
    pub const IP_CKSUM: u64 = ffi::RTE_MBUF_F_TX_IP_CKSUM;
    pub const UDP_CKSUM: u64 = ffi::RTE_MBUF_F_TX_UDP_CKSUM;
    /// `RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM`.
    pub const PORT_OFFLOADS: u64 =
        ffi::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | ffi::RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
}

/// The RX checksum verdicts in [`MbufRef::ol_flags`] (DPDK 22.11 semantics:
/// GOOD, BAD, NONE = header valid but checksum field not filled, UNKNOWN = 0).
pub mod rx_cksum {
    use crate::ffi;
    pub const IP_MASK: u64 = ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK;
    pub const IP_UNKNOWN: u64 = ffi::RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN;
    pub const IP_BAD: u64 = ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD;
    pub const IP_GOOD: u64 = ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD;
    pub const IP_NONE: u64 = ffi::RTE_MBUF_F_RX_IP_CKSUM_NONE;
    pub const L4_MASK: u64 = ffi::RTE_MBUF_F_RX_L4_CKSUM_MASK;
    pub const L4_UNKNOWN: u64 = ffi::RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN;
    pub const L4_BAD: u64 = ffi::RTE_MBUF_F_RX_L4_CKSUM_BAD;
    pub const L4_GOOD: u64 = ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD;
    pub const L4_NONE: u64 = ffi::RTE_MBUF_F_RX_L4_CKSUM_NONE;
}

#[inline(always)]
fn raw(m: *mut RawMbuf) -> *mut ffi::rte_mbuf {
    m.cast()
}

/// A read-only view of a live mbuf for `'a`.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct MbufRef<'a> {
    m: NonNull<RawMbuf>,
    _life: PhantomData<&'a RawMbuf>,
}

impl<'a> MbufRef<'a> {
    /// View the mbuf `m`.
    ///
    /// # Safety
    /// `m` is a live mbuf (of a pktmbuf pool), and during `'a` nobody
    /// writes it (its struct, private area or data) other than by DPDK's
    /// atomic reference count updates.
    #[inline(always)]
    pub unsafe fn from_ptr(m: *mut RawMbuf) -> MbufRef<'a> {
        MbufRef {
            // SAFETY: a live mbuf is not null (per the contract).
            m: unsafe { NonNull::new_unchecked(m) },
            _life: PhantomData,
        }
    }

    #[inline(always)]
    pub fn as_ptr(self) -> *mut RawMbuf {
        self.m.as_ptr()
    }

    #[inline(always)]
    fn r(self) -> *const ffi::rte_mbuf {
        raw(self.m.as_ptr())
    }

    /// The first segment's bytes (`rte_pktmbuf_mtod` .. `data_len`).
    #[inline(always)]
    pub fn data(self) -> &'a [u8] {
        let m = self.r();
        // SAFETY: a live mbuf (the view's contract): buf_addr + data_off ..
        // + data_len lies in its data room, which nobody writes during 'a.
        unsafe {
            std::slice::from_raw_parts(
                ((*m).buf_addr as *const u8).add(usize::from((*m).data_off)),
                usize::from((*m).data_len),
            )
        }
    }

    /// The next segment of a chain, if any.
    #[inline]
    pub fn next(self) -> Option<MbufRef<'a>> {
        // SAFETY: a plain field of a live mbuf; a chained segment is a live
        // mbuf owned with this one (nobody writes it during 'a either).
        let n = unsafe { (*self.r()).next };
        NonNull::new(n.cast::<RawMbuf>()).map(|m| MbufRef {
            m,
            _life: PhantomData,
        })
    }

    /// Every segment's bytes, in order (one slice for a single segment).
    #[inline]
    pub fn segments(self) -> impl Iterator<Item = &'a [u8]> {
        std::iter::successors(Some(self), |s| s.next()).map(|s| s.data())
    }

    /// The sum of every segment's truesize.
    #[cold]
    pub fn chain_truesize(self) -> u32 {
        std::iter::successors(Some(self), |s| s.next())
            .map(|s| s.seg_truesize())
            .sum()
    }

    /// Bytes of the first segment.
    #[inline(always)]
    pub fn data_len(self) -> u16 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).data_len }
    }

    /// Bytes of the whole packet (every segment).
    #[inline(always)]
    pub fn pkt_len(self) -> u32 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).pkt_len }
    }

    #[inline(always)]
    pub fn nb_segs(self) -> u16 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).nb_segs }
    }

    /// The port the mbuf was received on (what the PMD wrote).
    #[inline(always)]
    pub fn port(self) -> u16 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).port }
    }

    /// The offload flags (see [`rx_cksum`] for the RX checksum verdicts).
    #[inline(always)]
    pub fn ol_flags(self) -> u64 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).ol_flags }
    }

    /// Bytes of the data room (headroom included), first cache line.
    #[inline(always)]
    pub fn buf_len(self) -> u16 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).buf_len }
    }

    /// Bytes of the pool's private area after the struct (second cache line).
    #[inline(always)]
    pub fn priv_size(self) -> u16 {
        // SAFETY: a plain field of a live mbuf.
        unsafe { (*self.r()).priv_size }
    }

    /// What the packet costs its pools: struct, private area and data room
    /// of each of its segments (a reassembled datagram has several).
    #[inline(always)]
    pub fn truesize(self) -> u32 {
        if self.nb_segs() == 1 {
            self.seg_truesize()
        } else {
            self.chain_truesize()
        }
    }

    /// One segment's struct, private area and data room.
    #[inline(always)]
    fn seg_truesize(self) -> u32 {
        MBUF_SIZE as u32 + u32::from(self.priv_size()) + u32::from(self.buf_len())
    }

    /// The reference count (an atomic load).
    #[inline(always)]
    pub fn refcnt(self) -> u16 {
        // SAFETY: a live mbuf; DPDK reads the count atomically.
        unsafe { ffi::rte_mbuf_refcnt_read(self.r()) }
    }

    /// Where the private area starts ([`priv_area`]).
    #[inline(always)]
    pub fn priv_area(self) -> *mut u8 {
        priv_area(self.as_ptr())
    }

    /// A fresh mbuf from the pool this one's data lives in
    /// (`rte_pktmbuf_alloc`): for an indirect mbuf ([`clone_into`]), the
    /// pool of the direct mbuf it is attached to, not the clone pool,
    /// whose mbufs have no data room.
    #[inline]
    pub fn alloc_from_pool(self) -> Option<Mbuf> {
        // SAFETY: a live mbuf's pool pointer is a live pool; so is that of
        // the direct mbuf a live indirect one holds a reference to (its
        // buf_addr is that mbuf's data room, after its struct and private
        // area: DPDK's rte_mbuf_from_indirect). A non-null result is a
        // fresh mbuf that only we hold.
        unsafe {
            let r = self.r();
            let pool = if (*r).ol_flags & ffi::RTE_MBUF_F_INDIRECT != 0 {
                let direct = (*r)
                    .buf_addr
                    .cast::<u8>()
                    .sub(MBUF_SIZE + usize::from((*r).priv_size))
                    .cast::<ffi::rte_mbuf>();
                (*direct).pool
            } else {
                (*r).pool
            };
            let m = ffi::rte_pktmbuf_alloc(pool);
            NonNull::new(m.cast()).map(|p| Mbuf::from_raw(p))
        }
    }

    /// Whether this mbuf is attached to another's data (a clone).
    #[inline(always)]
    pub fn is_indirect(self) -> bool {
        self.ol_flags() & ffi::RTE_MBUF_F_INDIRECT != 0
    }
}

/// A view of a live mbuf the holder uses exclusively for `'a`.
#[derive(Debug)]
#[repr(transparent)]
pub struct MbufMut<'a> {
    m: NonNull<RawMbuf>,
    _life: PhantomData<&'a mut RawMbuf>,
}

impl<'a> MbufMut<'a> {
    /// View the mbuf `m` for writing.
    ///
    /// # Safety
    /// `m` is a live mbuf (of a pktmbuf pool), and during `'a` nobody else
    /// reads or writes it (struct, private area or data) other than by
    /// DPDK's atomic reference count updates.
    #[inline(always)]
    pub unsafe fn from_ptr(m: *mut RawMbuf) -> MbufMut<'a> {
        MbufMut {
            // SAFETY: a live mbuf is not null (per the contract).
            m: unsafe { NonNull::new_unchecked(m) },
            _life: PhantomData,
        }
    }

    #[inline(always)]
    pub fn as_ptr(&self) -> *mut RawMbuf {
        self.m.as_ptr()
    }

    /// The read-only view, for the reads.
    #[inline(always)]
    pub fn view(&self) -> MbufRef<'_> {
        MbufRef {
            m: self.m,
            _life: PhantomData,
        }
    }

    #[inline(always)]
    fn r(&self) -> *mut ffi::rte_mbuf {
        raw(self.m.as_ptr())
    }

    /// The first segment's bytes, writable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: a live mbuf we use exclusively (the contract), borrowed
        // mutably for the slice's life.
        unsafe { data_mut(self.r()) }
    }

    /// The first segment's buffer from the data start to the end of its data
    /// room (`data_off` .. `buf_len`): where a reply written in place may go.
    #[inline]
    pub fn room_mut(&mut self) -> &mut [u8] {
        let m = self.r();
        // SAFETY: buf_addr .. + buf_len is the mbuf's data room; the use is exclusive.
        unsafe {
            let off = usize::from((*m).data_off);
            let len = usize::from((*m).buf_len).saturating_sub(off);
            std::slice::from_raw_parts_mut(((*m).buf_addr as *mut u8).add(off), len)
        }
    }

    /// Make a single-segment mbuf `len` bytes long (`data_len` and
    /// `pkt_len`). False, and nothing changed, if that passes the end of
    /// the data room.
    #[inline]
    #[must_use]
    pub fn set_len(&mut self, len: u16) -> bool {
        let m = self.r();
        // SAFETY: plain fields of a live mbuf we use exclusively.
        unsafe {
            if u32::from((*m).data_off) + u32::from(len) > u32::from((*m).buf_len) {
                return false;
            }
            (*m).data_len = len;
            (*m).pkt_len = u32::from(len);
        }
        true
    }

    /// Narrow the first segment to `len` bytes from `start` (relative to
    /// the current data start): `data_off += start`, `data_len` and
    /// `pkt_len = len`. False, and nothing changed, unless the window lies
    /// inside the current data.
    #[inline]
    #[must_use]
    pub fn set_window(&mut self, start: u16, len: u16) -> bool {
        let m = self.r();
        // SAFETY: plain fields of a live mbuf we use exclusively.
        unsafe {
            if u32::from(start) + u32::from(len) > u32::from((*m).data_len) {
                return false;
            }
            (*m).data_off += start;
            (*m).data_len = len;
            (*m).pkt_len = u32::from(len);
        }
        true
    }

    /// Append `tail` (a single segment or a chain) to this packet's chain
    /// (`rte_pktmbuf_chain`): false, and nothing changed, when the segment
    /// count would pass `RTE_MBUF_MAX_NB_SEGS` or the length u32.
    ///
    /// # Safety
    /// `tail` is a live mbuf we own exclusively, not part of this chain; on
    /// success it belongs to this packet (freed with it).
    #[inline]
    #[must_use]
    pub unsafe fn chain(&mut self, tail: *mut RawMbuf) -> bool {
        // SAFETY: both are live mbufs we own exclusively (the contract).
        unsafe { ffi::rte_pktmbuf_chain(self.r(), raw(tail)) == 0 }
    }

    /// Set the port field (a copy keeps its original's).
    #[inline]
    pub fn set_port(&mut self, port: u16) {
        // SAFETY: a plain field of a live mbuf we use exclusively.
        unsafe { (*self.r()).port = port }
    }

    /// Set `flags` in the offload flags, the others kept (a dynamic flag
    /// from [`dynflag_register`], for instance).
    #[inline(always)]
    pub fn add_ol_flags(&mut self, flags: u64) {
        // SAFETY: a plain field of a live mbuf we use exclusively.
        unsafe { (*self.r()).ol_flags |= flags }
    }

    /// Clear the offload flags (RX verdicts mean nothing on TX, and no TX
    /// offload is asked).
    #[inline]
    pub fn clear_ol_flags(&mut self) {
        // SAFETY: a plain field of a live mbuf we use exclusively.
        unsafe { (*self.r()).ol_flags = 0 }
    }

    /// Ask the NIC for checksums on TX: the header lengths it needs
    /// (`l2_len`, `l3_len`) and the `RTE_MBUF_F_TX_*` request `flags`
    /// (which replace the offload flags). The caller prepares the headers
    /// as the flags require (IPv4 checksum 0, UDP checksum = pseudo-header sum).
    #[inline]
    pub fn set_tx_offload(&mut self, l2_len: u8, l3_len: u16, flags: u64) {
        let m = self.r();
        // l2_len is the low 7 bits of tx_offload, l3_len the next 9
        // (struct rte_mbuf); the other lengths stay 0.
        let packed = u64::from(l2_len & 0x7f) | (u64::from(l3_len & 0x1ff) << 7);
        // SAFETY: plain fields of a live mbuf we use exclusively; the
        // tx_offload union member is a u64 covering every length field.
        unsafe {
            (*m).__bindgen_anon_3.tx_offload = packed;
            (*m).ol_flags = flags;
        }
    }

    /// Reset the packet fields for reuse as a fresh, empty single segment
    /// (`rte_pktmbuf_reset`).
    #[inline]
    pub fn reset(&mut self) {
        // SAFETY: a live mbuf we use exclusively.
        unsafe { ffi::rte_pktmbuf_reset(self.r()) }
    }

    /// Grow the packet by `len` bytes at the tail; the new bytes, or None if
    /// they do not fit (`rte_pktmbuf_append`).
    #[inline]
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: as in data_mut.
        unsafe { append(self.r(), len) }
    }
}

/// The first segment's bytes of `m`, writable.
///
/// # Safety
/// `m` is a live mbuf used exclusively by the caller for `'x`.
#[inline(always)]
unsafe fn data_mut<'x>(m: *mut ffi::rte_mbuf) -> &'x mut [u8] {
    // SAFETY: per the contract; buf_addr + data_off .. + data_len is in the data room.
    unsafe {
        std::slice::from_raw_parts_mut(
            ((*m).buf_addr as *mut u8).add(usize::from((*m).data_off)),
            usize::from((*m).data_len),
        )
    }
}

/// `rte_pktmbuf_append`: `len` new bytes at the tail of `m`, or None.
///
/// # Safety
/// As [`data_mut`].
#[inline]
unsafe fn append<'x>(m: *mut ffi::rte_mbuf, len: u16) -> Option<&'x mut [u8]> {
    // SAFETY: per the contract.
    let p = unsafe { ffi::rte_pktmbuf_append(m, len) };
    if p.is_null() {
        return None;
    }
    // SAFETY: DPDK returned `len` writable bytes inside the data room.
    Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, usize::from(len)) })
}

/// An owned mbuf (one reference); `Drop` frees it (segments and refcount handled by DPDK).
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf {
    raw: NonNull<RawMbuf>,
}

// SAFETY: an mbuf we own is exclusively ours and may move between lcores
// (DPDK frees into the calling lcore's mempool cache, or the ring without one).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// # Safety
    /// `raw` must be a live mbuf whose one reference the caller gives to us,
    /// and nobody else may read or write it (DPDK's refcount updates aside)
    /// while the `Mbuf` lives.
    #[inline(always)]
    pub unsafe fn from_raw(raw: NonNull<RawMbuf>) -> Mbuf {
        Mbuf { raw }
    }
    /// Give up ownership without freeing: the caller now holds the reference.
    #[inline(always)]
    pub fn into_raw(self) -> NonNull<RawMbuf> {
        let p = self.raw;
        std::mem::forget(self);
        p
    }
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut RawMbuf {
        self.raw.as_ptr()
    }
    #[inline(always)]
    pub fn view(&self) -> MbufRef<'_> {
        MbufRef {
            m: self.raw,
            _life: PhantomData,
        }
    }
    #[inline(always)]
    pub fn view_mut(&mut self) -> MbufMut<'_> {
        MbufMut {
            m: self.raw,
            _life: PhantomData,
        }
    }
    /// The first segment's bytes.
    pub fn data(&self) -> &[u8] {
        self.view().data()
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: we own the mbuf exclusively, borrowed mutably for the slice's life.
        unsafe { data_mut(raw(self.raw.as_ptr())) }
    }
    pub fn pkt_len(&self) -> u32 {
        self.view().pkt_len()
    }
    pub fn ol_flags(&self) -> u64 {
        self.view().ol_flags()
    }
    /// Grow the packet by `len` bytes at the tail; the new bytes, or None if it does not fit.
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: as in data_mut.
        unsafe { append(raw(self.raw.as_ptr()), len) }
    }
    pub fn refcnt(&self) -> u16 {
        self.view().refcnt()
    }
    /// Append `tail` (and its own segments) to this packet's chain
    /// (`rte_pktmbuf_chain`); on success it is freed with this packet. The
    /// segment count would pass `RTE_MBUF_MAX_NB_SEGS`, or the length u32:
    /// `tail` back, nothing changed.
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        // SAFETY: both are live mbufs we own exclusively (two `Mbuf`s never
        // share a reference), so `tail` is no segment of this chain; on
        // success its reference belongs to this packet (forgotten here).
        if unsafe { self.view_mut().chain(tail.as_ptr()) } {
            std::mem::forget(tail);
            Ok(())
        } else {
            Err(tail)
        }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // After rte_eal_cleanup the mbuf's memory is unmapped: nothing to free.
        if !crate::eal::is_up() {
            return;
        }
        // SAFETY: we hold one reference; DPDK decrements and frees at zero.
        unsafe { ffi::rte_pktmbuf_free(raw(self.raw.as_ptr())) }
    }
}

/// Up to `N` owned mbufs in a plain array (the shape DPDK's burst calls
/// fill), freed in bulk by [`MbufBurst::clear`] or on drop.
pub struct MbufBurst<const N: usize> {
    /// The first `n` are live mbufs we own exclusively (one reference each).
    bufs: [*mut RawMbuf; N],
    n: usize,
}

// SAFETY: as for Mbuf: every held mbuf is exclusively ours.
unsafe impl<const N: usize> Send for MbufBurst<N> {}

impl<const N: usize> Default for MbufBurst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> std::fmt::Debug for MbufBurst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbufBurst").field("len", &self.n).finish()
    }
}

impl<const N: usize> MbufBurst<N> {
    pub const fn new() -> Self {
        MbufBurst {
            bufs: [std::ptr::null_mut(); N],
            n: 0,
        }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.n
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Room left.
    #[inline(always)]
    pub fn spare(&self) -> usize {
        N - self.n
    }

    /// Mbuf `i`, viewed.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<MbufRef<'_>> {
        let m = *self.bufs[..self.n].get(i)?;
        // SAFETY: a live mbuf we own; `&self` keeps writers away for the view's life.
        Some(unsafe { MbufRef::from_ptr(m) })
    }

    /// Mbuf `i`, for writing.
    #[inline(always)]
    pub fn get_mut(&mut self, i: usize) -> Option<MbufMut<'_>> {
        let m = *self.bufs[..self.n].get(i)?;
        // SAFETY: a live mbuf we own exclusively; `&mut self` for the view's life.
        Some(unsafe { MbufMut::from_ptr(m) })
    }

    /// Every mbuf, viewed, in order.
    #[inline(always)]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = MbufRef<'_>> + '_ {
        self.bufs[..self.n].iter().map(|&m| {
            // SAFETY: as in get.
            unsafe { MbufRef::from_ptr(m) }
        })
    }

    /// Add an owned mbuf; given back if the burst is full.
    #[inline(always)]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.n == N {
            return Err(m);
        }
        self.bufs[self.n] = m.into_raw().as_ptr();
        self.n += 1;
        Ok(())
    }

    /// Take every mbuf out, in order, as owned ones. Those the iterator
    /// does not yield are freed when it drops.
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = std::mem::replace(&mut self.n, 0);
        Drain {
            burst: self,
            at: 0,
            end,
        }
    }

    /// Hand every mbuf to the caller as raw pointers (it now holds their
    /// references): the burst is empty afterwards, and frees none of them.
    #[inline(always)]
    pub fn take_raw(&mut self) -> &[*mut RawMbuf] {
        let n = std::mem::replace(&mut self.n, 0);
        &self.bufs[..n]
    }

    /// Free every mbuf (one `rte_pktmbuf_free_bulk`).
    #[inline]
    pub fn clear(&mut self) {
        let n = std::mem::replace(&mut self.n, 0);
        // SAFETY: the first n are live mbufs we own; we give them up once
        // (n is 0 from here on).
        unsafe { free_bulk(&mut self.bufs[..n]) };
    }

    /// The unused slots, for a DPDK call to fill; [`MbufBurst::filled`] then
    /// counts what it wrote.
    #[inline(always)]
    pub(crate) fn spare_mut(&mut self) -> &mut [*mut RawMbuf] {
        &mut self.bufs[self.n..]
    }

    /// `k` more mbufs were written into the spare slots, each a live mbuf
    /// now ours.
    ///
    /// # Safety
    /// `k <= self.spare()`, and DPDK wrote `k` owned mbufs there.
    #[inline(always)]
    pub(crate) unsafe fn filled(&mut self, k: usize) {
        debug_assert!(k <= self.spare());
        self.n += k;
    }

    /// The held mbufs as raw pointers (still ours).
    #[inline(always)]
    pub(crate) fn as_raw(&self) -> &[*mut RawMbuf] {
        &self.bufs[..self.n]
    }

    /// The held mbufs as raw pointers (still ours), for a DPDK call that
    /// reads the array.
    #[inline(always)]
    pub(crate) fn as_raw_mut(&mut self) -> &mut [*mut RawMbuf] {
        &mut self.bufs[..self.n]
    }

    /// The first `k` mbufs were handed to DPDK (a ring, a PMD): forget them
    /// and move the rest to the front, in order.
    ///
    /// # Safety
    /// `k <= self.len()`, and DPDK took ownership of exactly the first `k`.
    #[inline(always)]
    pub(crate) unsafe fn consumed(&mut self, k: usize) {
        debug_assert!(k <= self.n);
        if k < self.n {
            self.bufs.copy_within(k..self.n, 0);
        }
        self.n -= k;
    }
}

impl<const N: usize> Drop for MbufBurst<N> {
    fn drop(&mut self) {
        // After rte_eal_cleanup the mbufs' memory is unmapped: nothing to free.
        if crate::eal::is_up() {
            self.clear();
        }
    }
}

/// What [`MbufBurst::drain`] returns.
pub struct Drain<'b, const N: usize> {
    burst: &'b mut MbufBurst<N>,
    at: usize,
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;
    #[inline(always)]
    fn next(&mut self) -> Option<Mbuf> {
        if self.at == self.end {
            return None;
        }
        let m = self.burst.bufs[self.at];
        self.at += 1;
        // SAFETY: a live mbuf the burst owned; the burst forgot it (its
        // length is 0) and this iterator yields each slot once.
        Some(unsafe { Mbuf::from_raw(NonNull::new_unchecked(m)) })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.end - self.at, Some(self.end - self.at))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        let (at, end) = (self.at, self.end);
        // SAFETY: the slots not yielded still hold live mbufs we own.
        unsafe { free_bulk(&mut self.burst.bufs[at..end]) };
    }
}

/// mbufs to free, flushed with one `rte_pktmbuf_free_bulk` per 64 (and on drop).
pub struct FreeList {
    bufs: [*mut RawMbuf; 64],
    n: usize,
    /// Pushed since [`FreeList::take_pushed`] last read it.
    pushed: usize,
}

impl Default for FreeList {
    fn default() -> Self {
        FreeList {
            bufs: [std::ptr::null_mut(); 64],
            n: 0,
            pushed: 0,
        }
    }
}

impl FreeList {
    /// Queue `m` for freeing.
    ///
    /// # Safety
    /// `m` is a live mbuf whose reference the caller gives up: nobody
    /// touches it through this reference afterwards.
    #[inline(always)]
    pub unsafe fn push(&mut self, m: *mut RawMbuf) {
        if self.n == self.bufs.len() {
            self.flush();
        }
        self.bufs[self.n] = m;
        self.n += 1;
        self.pushed += 1;
    }

    /// How many mbufs were pushed since the last call (flushed or not).
    /// Freed from this thread, they went (or go) to the top of its lcore's
    /// cache of their pool, which hands them out next.
    #[inline]
    pub fn take_pushed(&mut self) -> usize {
        std::mem::take(&mut self.pushed)
    }

    /// Queue an owned mbuf for freeing.
    #[inline(always)]
    pub fn push_mbuf(&mut self, m: Mbuf) {
        // SAFETY: an owned mbuf, whose reference we take over here.
        unsafe { self.push(m.into_raw().as_ptr()) }
    }

    #[inline]
    pub fn flush(&mut self) {
        let n = std::mem::replace(&mut self.n, 0);
        // SAFETY: every pointer pushed is an mbuf whose ownership the pusher gave up.
        unsafe { free_bulk(&mut self.bufs[..n]) };
    }
}

impl Drop for FreeList {
    fn drop(&mut self) {
        // After rte_eal_cleanup the mbufs' memory is unmapped: nothing to free.
        if crate::eal::is_up() {
            self.flush();
        }
    }
}

/// The application private area (`rte_mbuf_to_priv`): `priv_size` bytes
/// right after the struct. Pointer arithmetic only: dereference it only
/// for an mbuf whose pool has a large enough `priv_size`.
#[inline(always)]
pub fn priv_area(m: *mut RawMbuf) -> *mut u8 {
    (m as *mut u8).wrapping_add(MBUF_SIZE)
}

/// Free many raw mbufs at once (handles refcounts, chains and mixed pools;
/// null entries are skipped).
///
/// # Safety
/// Every pointer must be null or a live mbuf whose reference the caller gives up.
#[inline]
pub unsafe fn free_bulk(mbufs: &mut [*mut RawMbuf]) {
    if !mbufs.is_empty() {
        // SAFETY: per the caller's contract; RawMbuf is rte_mbuf (repr(transparent)).
        unsafe { ffi::rte_pktmbuf_free_bulk(mbufs.as_mut_ptr().cast(), mbufs.len() as u32) }
    }
}

/// Free one raw mbuf (drops one reference).
///
/// # Safety
/// `m` must be a live mbuf whose reference the caller gives up.
#[inline(always)]
pub unsafe fn free(m: *mut RawMbuf) {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_pktmbuf_free(raw(m)) }
}

/// Atomically add `delta` to the reference count; the new value. A count
/// taken must be given back by a free; a negative delta must never drop
/// the count below the references really held.
///
/// # Safety
/// `m` must be a live mbuf the caller holds a reference to, and `delta`
/// must keep the count equal to the references held.
#[inline(always)]
pub unsafe fn refcnt_update(m: *mut RawMbuf, delta: i16) -> u16 {
    // SAFETY: per the caller's contract.
    unsafe { ffi::rte_mbuf_refcnt_update(raw(m), delta) }
}

/// A read-only copy of packet `m` by reference (`rte_pktmbuf_clone`):
/// one indirect mbuf of `pool` per segment, attached to `m`'s data, which
/// each takes a reference on; `None` when `pool` is out of mbufs. The
/// clone's struct and private area are its own (header fields and
/// dynfields copied from `m`), its data is `m`'s: neither may be written
/// while both live. Freeing the clone drops its references, and the data
/// goes back to its pool with the last one.
///
/// # Safety
/// `m` must be a live mbuf the caller holds a reference to, of a pool
/// whose private area is as large as `pool`'s (DPDK keeps the
/// direct's `priv_size` in the clone), and nobody may write its data while
/// the clone lives. `pool` is a pktmbuf pool (its data room is unused).
#[inline]
pub unsafe fn clone_into(m: *mut RawMbuf, pool: &crate::Mempool) -> Option<NonNull<RawMbuf>> {
    // SAFETY: per the caller's contract; DPDK allocates from the pool
    // (per-lcore cache) and attaches each segment.
    NonNull::new(unsafe { ffi::rte_pktmbuf_clone(raw(m), pool.as_ptr()) }.cast())
}

/// Where the mbuf's reserved dynamic-field space (`dynfield1`) starts:
/// from there to the struct's end ([`MBUF_SIZE`]) DPDK hands out dynfields.
pub const DYNFIELD1_OFFSET: usize = std::mem::offset_of!(ffi::rte_mbuf, dynfield1);

/// Register a dynamic mbuf field (`rte_mbuf_dynfield_register`), or find the
/// one already registered under `name` with the same size and alignment:
/// its byte offset inside `struct rte_mbuf` (the field lies wholly inside
/// the struct). Needs an initialised EAL.
pub fn dynfield_register(name: &str, size: usize, align: usize) -> crate::Result<usize> {
    dynfield_register_impl(name, size, align, None)
}

/// [`dynfield_register`] at a chosen byte offset
/// (`rte_mbuf_dynfield_register_offset`), so that the field's users can
/// take its address without loading a registered offset. Fails (`EBUSY`)
/// when those bytes are another field's, and (`EEXIST`) when `name` is
/// registered elsewhere or with another size or alignment; a secondary
/// process finds the primary's field this way and cannot register one.
pub fn dynfield_register_at(
    name: &str,
    size: usize,
    align: usize,
    offset: usize,
) -> crate::Result<usize> {
    dynfield_register_impl(name, size, align, Some(offset))
}

fn dynfield_register_impl(
    name: &str,
    size: usize,
    align: usize,
    at: Option<usize>,
) -> crate::Result<usize> {
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
    let off = unsafe {
        match at {
            None => ffi::rte_mbuf_dynfield_register(&params),
            Some(req) => ffi::rte_mbuf_dynfield_register_offset(&params, req),
        }
    };
    if off < 0 {
        return Err(crate::DpdkError::from_errno(match at {
            None => format!("rte_mbuf_dynfield_register({name})"),
            Some(req) => format!("rte_mbuf_dynfield_register_offset({name}, {req})"),
        }));
    }
    let off = off as usize;
    if off + size > MBUF_SIZE {
        return Err(crate::DpdkError::Usage(format!(
            "dynfield {name} at offset {off} ({size} bytes) is not inside struct rte_mbuf"
        )));
    }
    Ok(off)
}

/// Register a dynamic mbuf flag (`rte_mbuf_dynflag_register`), or find the
/// one already registered under `name`: its mask in `ol_flags` (one bit).
/// Every pktmbuf allocation clears it (`rte_pktmbuf_reset` keeps only
/// `RTE_MBUF_F_EXTERNAL`), so a flag set on a received mbuf marks that use
/// of it alone. Needs an initialised EAL.
pub fn dynflag_register(name: &str) -> crate::Result<u64> {
    let mut params = ffi::rte_mbuf_dynflag::default();
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= params.name.len() || bytes.contains(&0) {
        return Err(crate::DpdkError::Usage(format!(
            "bad dynflag name {name:?}"
        )));
    }
    for (d, &s) in params.name.iter_mut().zip(bytes) {
        *d = s as std::os::raw::c_char;
    }
    // SAFETY: params is a valid, NUL-terminated (zeroed tail) descriptor; DPDK copies it.
    let bit = unsafe { ffi::rte_mbuf_dynflag_register(&params) };
    if !(0..64).contains(&bit) {
        return Err(crate::DpdkError::from_errno(format!(
            "rte_mbuf_dynflag_register({name})"
        )));
    }
    Ok(1u64 << bit)
}

/// A dynamic field of `m` at `offset` (`RTE_MBUF_DYNFIELD`): pointer
/// arithmetic only; dereference it only with an offset from
/// [`dynfield_register`] for a field of type `T`.
#[inline(always)]
pub fn dynfield<T>(m: *mut RawMbuf, offset: usize) -> *mut T {
    (m as *mut u8).wrapping_add(offset) as *mut T
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_list_counts_what_was_pushed_since_it_was_asked() {
        // Detached mbufs, never freed: below 64 nothing flushes, and without
        // an EAL the drop frees nothing.
        let mut ms: Vec<RawMbuf> = (0..5).map(|_| RawMbuf::detached(2176, 64)).collect();
        let mut free = FreeList::default();
        assert_eq!(free.take_pushed(), 0);
        for m in &mut ms[..3] {
            // SAFETY: the list never frees them (see above).
            unsafe { free.push(m) };
        }
        assert_eq!(free.take_pushed(), 3);
        assert_eq!(free.take_pushed(), 0, "read once");
        for m in &mut ms[3..] {
            // SAFETY: as above.
            unsafe { free.push(m) };
        }
        assert_eq!(free.take_pushed(), 2);
        std::mem::forget(free);
    }

    #[test]
    fn detached_views_read_their_lengths() {
        let mut d = RawMbuf::detached(2176, 64);
        // SAFETY: only the length fields and the (empty) data are read.
        let v = unsafe { MbufRef::from_ptr(&mut d) };
        assert_eq!((v.buf_len(), v.priv_size(), v.data_len()), (2176, 64, 0));
        assert_eq!(v.truesize(), 128 + 64 + 2176);
        assert!(v.data().is_empty());
        assert_eq!(v.priv_area() as usize - v.as_ptr() as usize, MBUF_SIZE);
        assert_eq!(MBUF_SIZE, 128);
    }
}
