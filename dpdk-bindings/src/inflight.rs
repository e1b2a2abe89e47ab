//! A reader's record, in shared memory, of the mbufs it took from a ring
//! and has not freed yet, so that another process (the ring's creator)
//! can free them if the reader dies: the per-client in-flight table of
//! udpdemux's issue 16.
//!
//! A [`Row`] is [`ROW_WORDS`] `AtomicU64` of a memzone (an
//! [`crate::mp::AtomicZone`]'s slots): a state word, the owner's pid, three
//! words for the owner's own use, then up to [`ROW_MBUFS`] mbuf pointers.
//! One process (the owner, which claimed the row) writes it from one
//! thread; the creator reads it only once the owner is dead
//! ([`Row::reclaim`]).
//!
//! The owner's cycle, each step one store that is the commit point:
//!
//! 1. `PENDING | cons.head` ([`Row::take`]), then `rte_ring_dequeue_burst`
//!    straight into the row's pointer words: DPDK copies every pointer
//!    there before it moves the ring's consumer tail, so at every instant
//!    each mbuf is either still in the ring (tail not moved) or in the row;
//! 2. `HELD | n`: the row holds n mbufs (the caller gets a copy of the
//!    pointers to read and free);
//! 3. `FREEING | n` ([`Row::begin_free`]), with the owner's three words
//!    written first (udpdemux: the totals its counters will have once
//!    this batch is counted); the owner then counts, then frees;
//! 4. `FREE` ([`Row::end_free`]) after the free.
//!
//! A dead owner's row tells the creator exactly what to do: PENDING:
//! the dequeue took `cons.tail - head` mbufs (0 if it died before the tail
//! moved; a head left ahead of the tail is put back); HELD: free them;
//! FREEING: the owner's words say whether its counting finished (then the
//! free may have begun, and the mbufs must not be freed again: at most
//! one batch leaks, never a double free) or not (then free them).
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::mbuf::{MbufBurst, RawMbuf};
use crate::ring::MbufRing;

/// Mbufs a row records at most (one receive burst).
pub const ROW_MBUFS: usize = 64;
/// Words of the owner's own (see [`Row::begin_free`]).
pub const USER_WORDS: usize = 3;
/// Words per row: state, owner, user words, mbufs, padded to 64 bytes.
pub const ROW_WORDS: usize = (2 + USER_WORDS + ROW_MBUFS).div_ceil(8) * 8;

/// Word of the state: the kind (high 32 bits) and its value (low 32).
pub const STATE: usize = 0;
/// Word of the owner's pid.
pub const OWNER: usize = 1;
const USER: usize = 2;
/// First word of the mbuf pointers.
pub const MBUFS: usize = 2 + USER_WORDS;

const KIND: u64 = 0xffff_ffff << 32;
const FREE: u64 = 0;
/// State kind: a dequeue is under way; the low bits are the ring's
/// consumer head it started from.
pub const PENDING: u64 = 1 << 32;
const HELD: u64 = 2 << 32;
const FREEING: u64 = 3 << 32;

/// What a dead owner's row held ([`Row::reclaim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orphan {
    /// Nothing (the row was free).
    Nothing,
    /// Mbufs it had taken (held, or in a dequeue it died in), now in the
    /// caller's burst: the owner never counted them.
    Held,
    /// Mbufs it had begun to free: `user` are the owner's words of
    /// [`Row::begin_free`]; the caller decides from them whether to free
    /// the burst or forget it.
    Freeing { user: [u64; USER_WORDS] },
}

/// One row of an in-flight table (see the module).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    w: &'a [AtomicU64],
}

impl<'a> Row<'a> {
    /// The row in `words` (at least [`ROW_WORDS`] long).
    pub fn new(words: &'a [AtomicU64]) -> Option<Row<'a>> {
        (words.len() >= ROW_WORDS).then(|| Row {
            w: &words[..ROW_WORDS],
        })
    }

    /// The pid of the process that claimed the row (0: none).
    pub fn owner(&self) -> u32 {
        self.w[OWNER].load(Ordering::Acquire) as u32
    }

    /// Claim the row for process `pid`; false if another has it.
    pub fn claim(&self, pid: u32) -> bool {
        self.w[OWNER]
            .compare_exchange(0, u64::from(pid), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Give the row up (owner only, with nothing held: after
    /// [`Row::end_free`], or before any take).
    pub fn unclaim(&self) {
        debug_assert_eq!(self.w[STATE].load(Ordering::Relaxed), FREE);
        self.w[OWNER].store(0, Ordering::Release);
    }

    /// Owner: take up to `max` mbufs from `ring` (its only consumer now)
    /// into `out`, recorded in the row first; how many. The row must be
    /// free (the previous take's mbufs freed through `begin_free` /
    /// `end_free`).
    pub fn take<const N: usize>(
        &self,
        ring: &MbufRing,
        out: &mut MbufBurst<N>,
        max: usize,
    ) -> usize {
        debug_assert_eq!(self.w[STATE].load(Ordering::Relaxed), FREE);
        let k = max.min(out.spare()).min(ROW_MBUFS);
        if k == 0 {
            return 0;
        }
        let (head, _) = ring.consumer_positions();
        self.w[STATE].store(PENDING | u64::from(head), Ordering::Relaxed);
        // The intent is visible (to a reaper, after our death) before the
        // dequeue moves the ring: SeqCst orders the store before the
        // dequeue's head CAS and tail store.
        fence(Ordering::SeqCst);
        let dst = self.w[MBUFS..MBUFS + k].as_ptr() as *mut AtomicU64 as *mut *mut RawMbuf;
        // SAFETY: `dst` is k words of this row, 8-byte aligned, which only
        // this thread writes (the row's owner; a reaper reads it only after
        // this process died); AtomicU64 has the size and alignment of a
        // pointer here (64-bit targets), so DPDK may store pointers there.
        // The mbufs it writes are ours from now on (this is the ring's
        // only consumer).
        let n = unsafe { ring.dequeue_to(dst, k) };
        self.w[STATE].store(HELD | n as u64, Ordering::Release);
        let room = out.spare_mut();
        for (i, slot) in room.iter_mut().take(n).enumerate() {
            *slot = self.w[MBUFS + i].load(Ordering::Relaxed) as *mut RawMbuf;
        }
        // SAFETY: n <= k <= spare, and the n pointers just copied are the
        // live mbufs the dequeue gave us; `out` owns them now, the row only
        // records them.
        unsafe { out.filled(n) };
        n
    }

    /// Owner: the held mbufs are about to be counted and freed; `user`
    /// are the words a reaper will judge that by (stored first).
    pub fn begin_free(&self, user: [u64; USER_WORDS]) {
        for (w, v) in self.w[USER..USER + USER_WORDS].iter().zip(user) {
            w.store(v, Ordering::Relaxed);
        }
        let s = self.w[STATE].load(Ordering::Relaxed);
        debug_assert_eq!(s & KIND, HELD);
        self.w[STATE].store(FREEING | (s & !KIND), Ordering::Release);
    }

    /// Owner: the mbufs of [`Row::begin_free`] are freed.
    pub fn end_free(&self) {
        self.w[STATE].store(FREE, Ordering::Release);
    }

    /// Reaper: what the row of a dead owner held, its mbufs moved into
    /// `out` (which must have room for [`ROW_MBUFS`] more); the row is
    /// free and unclaimed afterwards. `ring` is the ring the row's mbufs
    /// came from: a dequeue the owner died in is finished or undone there.
    ///
    /// # Safety
    /// The owner is dead (no process writes the row any more), the row
    /// records mbufs of `ring`, and no one else dequeues from `ring` until
    /// this returns.
    pub unsafe fn reclaim<const N: usize>(
        &self,
        ring: &MbufRing,
        out: &mut MbufBurst<N>,
    ) -> Orphan {
        fence(Ordering::Acquire);
        let s = self.w[STATE].load(Ordering::Acquire);
        let low = s & !KIND;
        let (n, orphan) = match s & KIND {
            PENDING => {
                let (head, tail) = ring.consumer_positions();
                if head != tail {
                    // SAFETY: the dead owner was the ring's only consumer
                    // (the caller's promise): it died between moving head
                    // and tail, before the objects were taken.
                    unsafe { ring.reset_consumer_head() };
                }
                // What the tail moved past since the intent: the dequeue
                // wrote those pointers into the row before moving it.
                (tail.wrapping_sub(low as u32) as usize, Orphan::Held)
            }
            HELD => (low as usize, Orphan::Held),
            FREEING => {
                let mut user = [0u64; USER_WORDS];
                for (u, w) in user.iter_mut().zip(&self.w[USER..USER + USER_WORDS]) {
                    *u = w.load(Ordering::Relaxed);
                }
                (low as usize, Orphan::Freeing { user })
            }
            _ => (0, Orphan::Nothing),
        };
        // More than a row holds would be a corrupt row: free nothing then.
        let n = if n <= ROW_MBUFS && n <= out.spare() {
            n
        } else {
            0
        };
        let room = out.spare_mut();
        for (i, slot) in room.iter_mut().take(n).enumerate() {
            *slot = self.w[MBUFS + i].load(Ordering::Relaxed) as *mut RawMbuf;
        }
        // SAFETY: the dead owner's n recorded mbufs: taken from the ring,
        // never freed by it (HELD, PENDING), or freed only if the caller
        // judges so from `user` (FREEING: it then forgets them instead).
        unsafe { out.filled(n) };
        self.w[STATE].store(FREE, Ordering::Relaxed);
        self.w[OWNER].store(0, Ordering::Release);
        if n == 0 && orphan == Orphan::Held {
            return Orphan::Nothing;
        }
        orphan
    }
}
