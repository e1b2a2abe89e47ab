use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr::NonNull;

use crate::error::{DpdkError, Result};
use crate::ffi;
use crate::mbuf::{self, MbufBurst, RawMbuf};

/// An `rte_ring` of pointers. Created rings are freed on drop; looked-up ones are not.
#[derive(Debug)]
pub struct Ring {
    raw: NonNull<ffi::rte_ring>,
    owned: bool,
}

// SAFETY: rte_ring is a lock-free MP/MC queue (or SP/SC by flag, which the
// owner then honours by serialising producers/consumers itself).
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

pub const SP_ENQ: u32 = ffi::RING_F_SP_ENQ;
pub const SC_DEQ: u32 = ffi::RING_F_SC_DEQ;
/// Exact capacity of `count` (not the next power of two minus one).
pub const EXACT_SZ: u32 = ffi::RING_F_EXACT_SZ;

impl Ring {
    pub fn create(name: &str, count: u32, socket: i32, flags: u32) -> Result<Ring> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Usage(format!("bad ring name {name:?}")))?;
        // SAFETY: valid C string; DPDK copies the name.
        let p = unsafe { ffi::rte_ring_create(cname.as_ptr(), count, socket, flags) };
        NonNull::new(p)
            .map(|raw| Ring { raw, owned: true })
            .ok_or_else(|| DpdkError::from_errno(format!("rte_ring_create({name}, {count})")))
    }

    /// Find a ring another part of the process (or another process) created.
    pub fn lookup(name: &str) -> Result<Ring> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Usage(format!("bad ring name {name:?}")))?;
        // SAFETY: valid C string.
        let p = unsafe { ffi::rte_ring_lookup(cname.as_ptr()) };
        NonNull::new(p)
            .map(|raw| Ring { raw, owned: false })
            .ok_or_else(|| DpdkError::from_errno(format!("rte_ring_lookup({name})")))
    }

    /// Enqueue as many as fit; how many went in.
    #[inline]
    pub fn enqueue_burst(&self, objs: &[*mut c_void]) -> usize {
        // SAFETY: objs is a valid array of pointers; the ring only stores them.
        unsafe {
            ffi::rte_ring_enqueue_burst(
                self.raw.as_ptr(),
                objs.as_ptr(),
                objs.len() as u32,
                std::ptr::null_mut(),
            ) as usize
        }
    }

    /// Enqueue as many as fit with the multi-producer protocol, whatever the
    /// ring's flags (`rte_ring_mp_enqueue_burst`): for producers that do not
    /// serialise among themselves on a ring created single-producer.
    #[inline]
    pub fn enqueue_burst_mp(&self, objs: &[*mut c_void]) -> usize {
        // SAFETY: objs is a valid array of pointers; the ring only stores them.
        unsafe {
            ffi::rte_ring_mp_enqueue_burst(
                self.raw.as_ptr(),
                objs.as_ptr(),
                objs.len() as u32,
                std::ptr::null_mut(),
            ) as usize
        }
    }

    /// Whether the ring looks empty: producer tail equals consumer tail, two
    /// loads inline (`rte_ring_empty`), no call into DPDK, no write. A hint
    /// for pollers: an enqueue may land right after it; a `false` may still
    /// dequeue nothing if another consumer was faster. Valid for the
    /// default MP/SP and MC/SC sync modes (the only ones `create` is used with).
    #[inline(always)]
    pub fn looks_empty(&self) -> bool {
        let r = self.raw.as_ptr();
        // SAFETY: a live ring; the tails are 32-bit fields DPDK updates
        // atomically, read here as volatile loads like rte_ring_empty does.
        unsafe {
            let prod = std::ptr::addr_of!((*r).__bindgen_anon_1.prod.tail).read_volatile();
            let cons = std::ptr::addr_of!((*r).__bindgen_anon_2.cons.tail).read_volatile();
            prod == cons
        }
    }

    /// Dequeue up to `out.len()`; how many came out.
    #[inline]
    pub fn dequeue_burst(&self, out: &mut [*mut c_void]) -> usize {
        // SAFETY: out has room for out.len() pointers.
        unsafe {
            ffi::rte_ring_dequeue_burst(
                self.raw.as_ptr(),
                out.as_mut_ptr(),
                out.len() as u32,
                std::ptr::null_mut(),
            ) as usize
        }
    }

    /// The producer's head: where the next enqueue writes. A volatile
    /// read of the line the producers write (cheap right after an enqueue,
    /// a miss once the consumer has read the tail beside it).
    #[inline(always)]
    fn prod_head(&self) -> u32 {
        // SAFETY: a live ring; a 32-bit field DPDK updates atomically, read
        // as a volatile load as `looks_empty` does.
        unsafe {
            std::ptr::addr_of!((*self.raw.as_ptr()).__bindgen_anon_1.prod.head).read_volatile()
        }
    }

    /// Ask for the lines an enqueue at producer head `head` writes and
    /// reads, ahead of it: the two slot lines from `head` on, for writing
    /// (the consumer read them last, so a store would wait for the other
    /// core to give them up, and the stores behind it would back up); the
    /// producer's head and tail and the consumer's tail, which the enqueue
    /// reads, for reading only (the consumer polls the producer's tail: a
    /// write prefetch there took the line from it on every poll and was
    /// slower, 0.96x). A hint: any `head` is harmless, and the ring is not
    /// touched.
    #[inline(always)]
    fn prefetch_slots(&self, head: u32, mask: u32) {
        let r = self.raw.as_ptr();
        let at = self.slot(head, mask);
        crate::prefetch::prefetch_w(at);
        crate::prefetch::prefetch_w(at.wrapping_add(8));
        // SAFETY: only addresses of fields of the live ring are taken.
        unsafe {
            crate::prefetch::prefetch0(std::ptr::addr_of!((*r).__bindgen_anon_1.prod.head));
            crate::prefetch::prefetch0(std::ptr::addr_of!((*r).__bindgen_anon_2.cons.tail));
        }
    }

    /// Where the object at position `head` sits: the slots follow the
    /// struct (`&r[1]`, rte_ring_elem_pvt.h), one pointer each, `mask + 1`
    /// of them. Only the address is formed.
    #[inline(always)]
    fn slot(&self, head: u32, mask: u32) -> *const *mut c_void {
        let slots = self.raw.as_ptr().wrapping_add(1).cast::<*mut c_void>();
        slots.wrapping_add((head & mask) as usize)
    }

    fn mask(&self) -> u32 {
        // SAFETY: a live ring; `mask` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).mask }
    }

    /// The consumer side's (head, tail) positions (default MC/SC sync
    /// modes). Head runs ahead of tail only while a dequeue is under way
    /// (or was, in a process that died in it).
    pub fn consumer_positions(&self) -> (u32, u32) {
        let r = self.raw.as_ptr();
        // SAFETY: a live ring; head and tail are 32-bit fields DPDK updates
        // atomically, read here as volatile loads as `looks_empty` does.
        unsafe {
            let head = std::ptr::addr_of!((*r).__bindgen_anon_2.cons.head).read_volatile();
            let tail = std::ptr::addr_of!((*r).__bindgen_anon_2.cons.tail).read_volatile();
            (head, tail)
        }
    }

    /// Undo a dequeue a dead consumer left half done (head moved, tail
    /// not): the objects between tail and head were never taken (the
    /// producers cannot overwrite them before tail moves), so head goes
    /// back to tail and the next dequeue gets them. Without this, the
    /// next multi-consumer dequeue would wait for that tail forever.
    ///
    /// # Safety
    /// No other consumer may be dequeuing from the ring, now or until this
    /// returns (the dead one was the only one).
    pub unsafe fn reset_consumer_head(&self) {
        let r = self.raw.as_ptr();
        // SAFETY: a live ring; no consumer runs (the caller's promise), so
        // nothing else writes cons.head; producers only read cons.tail.
        unsafe {
            let tail = std::ptr::addr_of!((*r).__bindgen_anon_2.cons.tail).read_volatile();
            std::ptr::addr_of_mut!((*r).__bindgen_anon_2.cons.head).write_volatile(tail);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    pub fn count(&self) -> u32 {
        // SAFETY: live ring.
        unsafe { ffi::rte_ring_count(self.raw.as_ptr()) }
    }

    pub fn capacity(&self) -> u32 {
        // SAFETY: live ring.
        unsafe { ffi::rte_ring_get_capacity(self.raw.as_ptr()) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // After rte_eal_cleanup the ring's memzone is unmapped and freed.
        if self.owned && crate::eal::is_up() {
            // SAFETY: we created it; the owner empties it before dropping.
            unsafe { ffi::rte_ring_free(self.raw.as_ptr()) }
        }
    }
}

/// An `rte_ring` that holds owned mbufs: every object in it is a live mbuf
/// whose reference the ring holds, so what comes out is owned again. Safe
/// enqueues move mbufs in from an [`MbufBurst`]; dequeues move them out
/// into one. Whatever is left is freed on drop, before the ring.
#[derive(Debug)]
pub struct MbufRing {
    ring: Ring,
    /// Where [`MbufRing::enqueue_raw`] last left the producer head, and
    /// the ring's mask: what [`MbufRing::prefetch_enqueue`] needs, on a
    /// line of their own that only producers touch (the ring's own head
    /// shares its line with the tail the consumer polls, so reading it
    /// there costs a miss per call).
    next: NextSlot,
}

/// See [`MbufRing::next`]: a cache line of its own.
#[derive(Debug)]
#[repr(C, align(64))]
struct NextSlot {
    head: std::sync::atomic::AtomicU32,
    mask: u32,
}

impl MbufRing {
    /// Where the last [`MbufRing::enqueue_raw`] left the producer head,
    /// and the address of that slot: what [`MbufRing::prefetch_enqueue`]
    /// asks for (exposed so that a test can hold it to the ring's layout).
    pub fn next_slot(&self) -> (u32, *const *mut RawMbuf) {
        let head = self.next.head.load(std::sync::atomic::Ordering::Relaxed);
        (head, self.ring.slot(head, self.next.mask).cast())
    }

    /// Ask for the ring slots (for writing) and the ring's head and tail
    /// lines (for reading) that the next [`MbufRing::enqueue_raw`] will
    /// touch, from where the last one left the head: for a producer that
    /// knows it will enqueue here a few hundred nanoseconds from now. A
    /// hint only: another producer may have moved the head since, and then
    /// other lines are fetched.
    #[inline(always)]
    pub fn prefetch_enqueue(&self) {
        let head = self.next.head.load(std::sync::atomic::Ordering::Relaxed);
        self.ring.prefetch_slots(head, self.next.mask);
    }

    /// Find a ring of mbufs another process (the primary) created with
    /// [`MbufRing::create`]. Dropping it leaves the ring and its contents
    /// alone.
    ///
    /// # Safety
    /// Every object in the ring named `name` must be an mbuf whose
    /// reference the ring holds (it was created and filled as an
    /// [`MbufRing`]), and the ring must outlive the returned handle.
    pub unsafe fn lookup(name: &str) -> Result<MbufRing> {
        Ring::lookup(name).map(MbufRing::over)
    }

    /// As [`Ring::create`].
    pub fn create(name: &str, count: u32, socket: i32, flags: u32) -> Result<MbufRing> {
        Ring::create(name, count, socket, flags).map(MbufRing::over)
    }

    fn over(ring: Ring) -> MbufRing {
        let next = NextSlot {
            head: std::sync::atomic::AtomicU32::new(ring.prod_head()),
            mask: ring.mask(),
        };
        MbufRing { ring, next }
    }

    #[inline(always)]
    fn objs(pkts: &[*mut RawMbuf]) -> &[*mut c_void] {
        // SAFETY: a *mut RawMbuf slice viewed as *mut c_void of the same
        // length: both are thin pointers of the same size and alignment.
        unsafe { std::slice::from_raw_parts(pkts.as_ptr().cast(), pkts.len()) }
    }

    /// Move as many of `pkts`' mbufs in as fit, from the front, with the
    /// ring's own producer protocol; how many went in. The rest stay in
    /// `pkts`, in order.
    #[inline]
    pub fn enqueue<const N: usize>(&self, pkts: &mut MbufBurst<N>) -> usize {
        let done = self.ring.enqueue_burst(Self::objs(pkts.as_raw()));
        // SAFETY: the ring took exactly the first `done` (a burst enqueue
        // stores a prefix), and holds their references now.
        unsafe { pkts.consumed(done) };
        done
    }

    /// As [`MbufRing::enqueue`] with the multi-producer protocol whatever
    /// the ring's flags (`rte_ring_mp_enqueue_burst`).
    #[inline]
    pub fn enqueue_mp<const N: usize>(&self, pkts: &mut MbufBurst<N>) -> usize {
        let done = self.ring.enqueue_burst_mp(Self::objs(pkts.as_raw()));
        // SAFETY: as in enqueue.
        unsafe { pkts.consumed(done) };
        done
    }

    /// Enqueue raw mbufs as many as fit, from the front; how many went in.
    ///
    /// # Safety
    /// Every pointer is a live mbuf the caller owns exclusively; the ring
    /// takes over the references of the first `returned` ones (the caller
    /// must not touch those again), the rest stay the caller's.
    #[inline]
    pub unsafe fn enqueue_raw(&self, pkts: &[*mut RawMbuf]) -> usize {
        let done = self.ring.enqueue_burst(Self::objs(pkts));
        // The head's line is ours right after the enqueue wrote it: where
        // the next one starts, for `prefetch_enqueue`.
        self.next
            .head
            .store(self.ring.prod_head(), std::sync::atomic::Ordering::Relaxed);
        done
    }

    /// Move up to `max` mbufs out, appended to `out` (as many as it has room
    /// for); how many came out.
    #[inline]
    pub fn dequeue<const N: usize>(&self, out: &mut MbufBurst<N>, max: usize) -> usize {
        let room = out.spare_mut();
        let k = max.min(room.len());
        // SAFETY: the slots are *mut RawMbuf, the same size and layout as *mut c_void.
        let objs = unsafe { std::slice::from_raw_parts_mut(room.as_mut_ptr().cast(), k) };
        let n = self.ring.dequeue_burst(objs);
        // SAFETY: every object of this ring is an owned mbuf (enqueued by
        // the functions above); the n dequeued are ours now.
        unsafe { out.filled(n) };
        n
    }

    /// Dequeue up to `max` mbufs into raw pointer slots (shared memory a
    /// record of held mbufs lives in); how many came out. DPDK writes
    /// every pointer there before it moves the ring's consumer tail.
    ///
    /// # Safety
    /// `dst` is valid for writes of `max` pointers; the caller owns the
    /// mbufs written there from now on.
    #[inline]
    pub(crate) unsafe fn dequeue_to(&self, dst: *mut *mut RawMbuf, max: usize) -> usize {
        // SAFETY: `dst` has room for `max` pointers (the caller's promise);
        // *mut RawMbuf has the layout of *mut c_void.
        let objs = unsafe { std::slice::from_raw_parts_mut(dst.cast(), max) };
        self.ring.dequeue_burst(objs)
    }

    /// The consumer side's (head, tail) ([`Ring::consumer_positions`]).
    pub fn consumer_positions(&self) -> (u32, u32) {
        self.ring.consumer_positions()
    }

    /// As [`Ring::reset_consumer_head`].
    ///
    /// # Safety
    /// As there.
    pub unsafe fn reset_consumer_head(&self) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.ring.reset_consumer_head() }
    }

    /// Whether the ring looks empty ([`Ring::looks_empty`]).
    #[inline(always)]
    pub fn looks_empty(&self) -> bool {
        self.ring.looks_empty()
    }

    pub fn count(&self) -> u32 {
        self.ring.count()
    }

    pub fn capacity(&self) -> u32 {
        self.ring.capacity()
    }
}

impl Drop for MbufRing {
    fn drop(&mut self) {
        // After rte_eal_cleanup the ring and its mbufs are unmapped: nothing
        // to free; a looked-up ring's contents are its creator's.
        if !crate::eal::is_up() || !self.ring.owned {
            return;
        }
        let mut bufs = [std::ptr::null_mut::<c_void>(); 64];
        loop {
            let n = self.ring.dequeue_burst(&mut bufs);
            if n == 0 {
                break;
            }
            // SAFETY: every object of the ring is an mbuf it owns; dequeued, they are ours to free.
            unsafe { mbuf::free_bulk(std::slice::from_raw_parts_mut(bufs.as_mut_ptr().cast(), n)) };
        }
    }
}
