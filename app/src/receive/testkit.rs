//! Plain heap packets and a bounded `VecDeque` sink, for unit tests, the
//! loom model, the no-allocation test and DPDK-free benchmarks.
//!
//! Compiled for the crate's unit tests and with the `testkit` feature,
//! which the integration tests get from the crate's dev-dependency on
//! itself (app/Cargo.toml); production builds leave it out.

use core::ptr::{self, NonNull};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering as StdOrdering};

use super::admission::Condense;
use super::stage::StagePacket;
use super::sync::AtomicPtr;
use super::{PacketMeta, Sink};

/// A heap packet. `fate` counts terminal events (delivered and
/// consumed, or freed by a drop) so tests catch double frees and
/// stranded packets without touching freed memory.
#[derive(Debug)]
#[repr(C)]
pub struct HeapPacket {
    // First field of a repr(C) struct: `link()` is a pointer cast.
    link: AtomicPtr<HeapPacket>,
    pub id: u32,
    truesize: AtomicU32,
    drop_snapshot: AtomicU32,
    fate: AtomicU32,
}

impl HeapPacket {
    /// Allocates a packet; release it with [`HeapPacket::dealloc`].
    pub fn alloc(id: u32, truesize: u32) -> NonNull<Self> {
        let b = Box::new(Self {
            link: AtomicPtr::new(ptr::null_mut()),
            id,
            truesize: AtomicU32::new(truesize),
            drop_snapshot: AtomicU32::new(0),
            fate: AtomicU32::new(0),
        });
        NonNull::from(Box::leak(b))
    }

    /// # Safety
    /// `p` came from [`HeapPacket::alloc`], is not used afterwards, and
    /// is on no stage, chain or sink.
    pub unsafe fn dealloc(p: NonNull<Self>) {
        // SAFETY: per the contract, `p` is a leaked Box we own again.
        drop(unsafe { Box::from_raw(p.as_ptr()) });
    }

    /// # Safety
    /// `p` must be live for `'a`.
    pub unsafe fn get<'a>(p: NonNull<Self>) -> &'a Self {
        // SAFETY: per the contract; all mutable state is atomic.
        unsafe { p.as_ref() }
    }

    pub fn truesize(&self) -> u32 {
        self.truesize.load(StdOrdering::Relaxed)
    }

    pub fn set_truesize(&self, v: u32) {
        self.truesize.store(v, StdOrdering::Relaxed);
    }

    pub fn drop_snapshot(&self) -> u32 {
        self.drop_snapshot.load(StdOrdering::Relaxed)
    }

    /// Records a terminal event; returns how many there were before.
    pub fn mark_done(&self) -> u32 {
        self.fate.fetch_add(1, StdOrdering::Relaxed)
    }

    pub fn fates(&self) -> u32 {
        self.fate.load(StdOrdering::Relaxed)
    }
}

// SAFETY: `link` is the first field of this repr(C) struct, so the cast
// yields its address without reading; it is used only by the stage.
unsafe impl StagePacket for HeapPacket {
    #[inline]
    fn link(p: NonNull<Self>) -> *const AtomicPtr<Self> {
        p.as_ptr().cast()
    }
}

impl PacketMeta for HeapPacket {
    #[inline]
    unsafe fn truesize(p: NonNull<Self>) -> u32 {
        // SAFETY: the caller guarantees `p` is live.
        unsafe { p.as_ref() }.truesize()
    }
    #[inline]
    unsafe fn set_drop_snapshot(p: NonNull<Self>, drops: u32) {
        // SAFETY: the caller guarantees `p` is live.
        unsafe { p.as_ref() }
            .drop_snapshot
            .store(drops, StdOrdering::Relaxed);
    }
}

/// Condenses in place by lowering the truesize to `to` (what copying
/// into a small buffer achieves), for tests of the pressure path.
#[derive(Debug, Clone, Copy)]
pub struct ShrinkTo(pub u32);

// SAFETY: returns the packet it was given.
unsafe impl Condense<HeapPacket> for ShrinkTo {
    unsafe fn condense(&mut self, p: NonNull<HeapPacket>) -> NonNull<HeapPacket> {
        // SAFETY: the caller hands over a live packet it owns exclusively
        // (`condense`'s contract).
        let h = unsafe { p.as_ref() };
        if h.truesize() > self.0 {
            h.set_truesize(self.0);
        }
        p
    }
}

/// A bounded FIFO sink: refuses beyond `cap`, never reallocates.
#[derive(Debug)]
pub struct VecSink<P> {
    q: VecDeque<NonNull<P>>,
    cap: usize,
    /// The largest burst one `enqueue_burst` call was handed.
    pub max_burst: usize,
    /// `enqueue_burst` calls, empty ones included.
    pub calls: usize,
}

// SAFETY: the sink exclusively owns the packets it holds; handing them
// to another thread is its purpose, which needs `P: Send`.
unsafe impl<P: Send> Send for VecSink<P> {}

impl<P> VecSink<P> {
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            q: VecDeque::with_capacity(cap),
            cap,
            max_burst: 0,
            calls: 0,
        }
    }
    pub fn pop(&mut self) -> Option<NonNull<P>> {
        self.q.pop_front()
    }
    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

impl<P> Sink<P> for VecSink<P> {
    /// Only stores the pointers: it never dereferences them, so it relies
    /// on the contract only to hand exclusive ownership on to its reader.
    unsafe fn enqueue_burst(&mut self, pkts: &[NonNull<P>]) -> usize {
        self.calls += 1;
        self.max_burst = self.max_burst.max(pkts.len());
        let room = self.cap.saturating_sub(self.q.len());
        let n = room.min(pkts.len());
        for &p in pkts.iter().take(n) {
            self.q.push_back(p);
        }
        n
    }
}

/// Moves a packet pointer into another thread (tests only).
#[derive(Debug, Clone, Copy)]
pub struct SendPtr<P>(pub NonNull<P>);
// SAFETY: used to transfer exclusive ownership of a `Send` packet.
unsafe impl<P: Send> Send for SendPtr<P> {}

/// A socket over heap packets and a bounded sink: what every test drives.
pub type TestSocket = super::RxSocket<HeapPacket, VecSink<HeapPacket>>;

/// The `to_free` the tests and the model use: a second terminal event of the
/// same packet is a double free and fails the test.
pub fn free_once(p: NonNull<HeapPacket>, _r: super::accounting::DropReason) {
    // SAFETY: test packets stay allocated until their test's final `sweep`.
    let prev = unsafe { HeapPacket::get(p) }.mark_done();
    assert_eq!(prev, 0, "packet freed twice");
}

/// The consumer's act, once: takes one packet out of the sink, marks it,
/// releases its memory. False when the sink was empty.
pub fn consume_one(s: &TestSocket) -> bool {
    match s.with_sink(|k| k.pop()) {
        Some(p) => {
            // SAFETY: live until the test's final `sweep`.
            let h = unsafe { HeapPacket::get(p) };
            assert_eq!(h.mark_done(), 0, "consumed a freed packet");
            s.release(h.truesize());
            true
        }
        None => false,
    }
}

/// [`consume_one`] until the sink is empty; how many it took.
pub fn consume_all(s: &TestSocket) -> u64 {
    let mut n = 0;
    while consume_one(s) {
        n += 1;
    }
    n
}

/// Checks that every packet had exactly one fate (consumed, or freed with a
/// reason), naming `context` when one did not, and frees them.
///
/// # Safety
/// Every thread that used the packets has joined: nothing refers to them.
pub unsafe fn sweep(pkts: Vec<NonNull<HeapPacket>>, context: &dyn core::fmt::Debug) {
    for p in pkts {
        // SAFETY: the caller's contract: nothing else refers to `p`.
        unsafe {
            let h = HeapPacket::get(p);
            assert_eq!(h.fates(), 1, "packet {} lost or doubled: {context:?}", h.id);
            HeapPacket::dealloc(p);
        }
    }
}
