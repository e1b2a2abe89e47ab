//! The per-lcore cache of small buffers (seed 003, Paolo Abeni's per-cpu rx
//! skbs cache, and the `skb_condense()` call of seed 000).
//!
//! Each RX lcore owns a fixed ring of small mbufs, allocated once at start
//! and never returned to their pool while the engine runs: the cache keeps
//! one reference on every entry, so a consumer's `rte_pktmbuf_free` only
//! drops the delivery's reference. Under pressure (the socket's accounted
//! bytes above rcvbuf/2, decided by `receive::admission`), a datagram whose frame fits
//! is copied into the next entry — if that entry's reference count shows it
//! is back (1: only the cache holds it) — and the NIC's 2 KB mbuf goes
//! straight back to its pool while still hot. The socket is then charged
//! the small truesize, so more datagrams fit in rcvbuf. If the next entry is
//! still held by a consumer, the packet keeps its big mbuf (counted as busy).
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use dpdk_sys::mbuf::{self, MbufMut, MbufRef, RawMbuf};
use dpdk_sys::Mempool;

use crate::counters::Counter;
use crate::meta::{MbufMeta, FLAG_CONDENSED};
use crate::receive::admission::Condense;

/// Counters of one lcore's cache.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Datagrams copied into a small buffer.
    pub condensed: Counter,
    /// Next entry still held by a consumer: kept the big mbuf.
    pub busy: Counter,
    /// Frame larger than the small data room (or chained): kept the big mbuf.
    pub too_big: Counter,
    /// Truesize bytes no longer charged to sockets thanks to the copy.
    pub bytes_saved: Counter,
}

/// One lcore's ring of small mbufs.
pub struct SmallCache {
    entries: Box<[*mut RawMbuf]>,
    next: usize,
    truesize: u32,
    room: usize,
}

// SAFETY: the entries are mbufs the cache holds a reference to; the cache
// moves to its RX lcore once, before use, and back to the main lcore after.
unsafe impl Send for SmallCache {}

impl SmallCache {
    /// Take `n` mbufs from `pool` (which must have the engine's PRIV_SIZE).
    pub fn new(pool: &Mempool, n: u32) -> Result<SmallCache, dpdk_sys::DpdkError> {
        let mut entries = vec![std::ptr::null_mut(); n as usize].into_boxed_slice();
        pool.alloc_bulk(&mut entries)?;
        Ok(SmallCache {
            entries,
            next: 0,
            truesize: pool.truesize(),
            room: pool.data_room() as usize - mbuf::HEADROOM as usize,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries a consumer still holds.
    pub fn in_use(&self) -> usize {
        self.entries
            .iter()
            // SAFETY: every entry is a live mbuf we hold a reference to; a
            // consumer holding the other one only reads it or drops its
            // reference (an atomic update), and we read the count alone.
            .filter(|&&e| unsafe { MbufRef::from_ptr(e) }.refcnt() != 1)
            .count()
    }

    /// Condense one packet: the copy in a small entry, or `p` unchanged.
    ///
    /// # Safety
    /// `p` is a live packet of an engine pool, its metadata set at RX, that
    /// the caller owns exclusively and that is on no stage. The caller owns
    /// the returned packet instead: `p` itself, or a small entry (then `p`
    /// was freed here).
    #[inline]
    pub unsafe fn condense_with(
        &mut self,
        p: NonNull<MbufMeta>,
        st: &CacheStats,
    ) -> NonNull<MbufMeta> {
        let m = MbufMeta::mbuf(p);
        // SAFETY: the caller owns p exclusively (the contract); the view
        // ends before m is freed below.
        let src = unsafe { MbufRef::from_ptr(m) };
        let (len, segs) = (usize::from(src.data_len()), src.nb_segs());
        if segs != 1 || len > self.room {
            st.too_big.add(1);
            return p;
        }
        let e = self.entries[self.next];
        // SAFETY: a live entry we hold a reference to; a consumer holding
        // the other one only reads it or drops its reference (atomically).
        if unsafe { MbufRef::from_ptr(e) }.refcnt() != 1 {
            st.busy.add(1);
            return p;
        }
        // The consumer's last reads of this entry happened before its
        // reference drop (an acq-rel RMW in DPDK); pair with it before we write.
        fence(Ordering::Acquire);
        // SAFETY: refcnt 1 = we are the only user of e.
        let mut dst = unsafe { MbufMut::from_ptr(e) };
        dst.reset();
        // After the reset the data starts at the headroom: len fits e's room
        // (checked above), so this holds.
        if !dst.set_len(len as u16) {
            st.too_big.add(1);
            return p;
        }
        dst.set_port(src.port());
        // Both single-segment, the same length.
        dst.data_mut().copy_from_slice(src.data());
        // SAFETY: m is ours (metadata set at RX) and e is ours alone:
        // distinct engine mbufs.
        unsafe {
            // The early-demux result and offsets travel with the copy.
            crate::meta::copy_dgram(m, e);
            crate::meta::dgram_mut(dst).flags |= FLAG_CONDENSED;
            let saved = crate::meta::truesize_of(src).saturating_sub(self.truesize);
            st.bytes_saved.add(saved as u64);
            // The delivery's reference; the cache keeps its own.
            mbuf::refcnt_update(e, 1);
            // Back to the RX pool while the cache lines are hot.
            mbuf::free(m);
        }
        self.next = (self.next + 1) % self.entries.len();
        st.condensed.add(1);
        // SAFETY: e points at a live entry.
        unsafe { MbufMeta::of(e) }
    }

    /// Give every entry back to its pool. Entries still held by a consumer
    /// keep that reference and return when it is freed; the count is returned.
    pub fn release(self) -> usize {
        let held = self.in_use();
        let mut e = self.entries;
        // SAFETY: we give up the cache's reference on every entry.
        unsafe { mbuf::free_bulk(&mut e) };
        held
    }
}

/// The hook `receive::admission` calls: a cache plus the lcore's counters.
pub struct CacheHook<'a> {
    pub cache: &'a mut SmallCache,
    pub stats: &'a CacheStats,
}

// SAFETY: returns `p` untouched, or a live small entry exclusively handed to
// the caller (its delivery reference) after freeing `p` itself.
unsafe impl Condense<MbufMeta> for CacheHook<'_> {
    #[inline]
    unsafe fn condense(&mut self, p: NonNull<MbufMeta>) -> NonNull<MbufMeta> {
        // SAFETY: `condense`'s contract is condense_with's: the caller hands
        // over a live packet of an engine pool, its metadata set at RX,
        // that it owns exclusively and that is on no stage, and takes back
        // what we return instead.
        unsafe { self.cache.condense_with(p, self.stats) }
    }
}
