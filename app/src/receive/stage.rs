//! The intrusive lock-free multi-producer stage (the kernel's `llist`).
//!
//! Producers push with one CAS and learn whether the stage was empty; the
//! one that found it empty is elected to drain it (see `admission` and
//! `drain`). The drainer detaches the whole list with one exchange, which
//! is what makes "was empty" a sound election: after the exchange the next
//! pusher sees an empty stage again and becomes the next drainer, so no
//! packet can be left behind without someone responsible for it.
//!
//! The list is intrusive: the link lives inside the packet (for DPDK, in
//! the mbuf's private area), so pushing allocates nothing.

use core::ptr::{self, NonNull};

use super::sync::{AtomicPtr, Ordering};

/// A packet as the stage sees it.
///
/// # Safety
/// `link(p)` must return the same `AtomicPtr` slot for the packet's whole
/// life, valid whenever `p` is, and used by nobody else while the packet is
/// on a stage or a [`Chain`]. Computing the address must not read the
/// packet (it may be called on a packet another thread is about to take).
pub unsafe trait StagePacket: Sized {
    fn link(p: NonNull<Self>) -> *const AtomicPtr<Self>;
}

/// Reads a packet's link.
///
/// # Safety
/// `p` must be a live packet owned by the caller (on a detached chain).
#[inline]
unsafe fn next_of<P: StagePacket>(p: NonNull<P>) -> *mut P {
    // SAFETY: by `StagePacket`, the slot is valid while `p` is; the caller
    // owns `p`, and the acquire that gave it ownership ordered the store.
    unsafe { (*P::link(p)).load(Ordering::Relaxed) }
}

/// # Safety
/// As [`next_of`].
#[inline]
unsafe fn set_next<P: StagePacket>(p: NonNull<P>, next: *mut P) {
    // SAFETY: as in `next_of`; nobody else reads the link of an owned packet.
    unsafe { (*P::link(p)).store(next, Ordering::Relaxed) }
}

/// One stage: the head of an intrusive LIFO list.
#[derive(Debug)]
pub struct Stage<P> {
    head: AtomicPtr<P>,
}

impl<P: StagePacket> Default for Stage<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: StagePacket> Stage<P> {
    pub fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// `llist_add`: pushes `p` and returns `true` if the stage was empty,
    /// i.e. the caller is elected to drain it.
    ///
    /// # Safety
    /// `p` must be a live packet exclusively owned by the caller and on no
    /// stage or chain; ownership passes to the stage (and from it to whoever
    /// calls [`Stage::take_all`]).
    #[inline]
    pub unsafe fn push(&self, p: NonNull<P>) -> bool {
        let mut first = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: we still own `p`; it becomes visible only on success.
            unsafe { set_next(p, first) };
            // Release: the drainer's acquire exchange must see the link and
            // everything the producer wrote into the packet (its truesize).
            // Later pushes are RMWs, so they extend this release sequence.
            match self.head.compare_exchange_weak(
                first,
                p.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return first.is_null(),
                Err(cur) => first = cur,
            }
        }
    }

    /// `llist_add_batch`: pushes a chain the caller linked itself, `first`
    /// (the newest) through `last` (the oldest), with one compare-and-swap,
    /// and returns `true` if the stage was empty (the caller is elected).
    /// The chain must run newest to oldest, as single pushes would have
    /// left it, so that [`Chain::reverse`] after [`Stage::take_all`] still
    /// gives arrival order.
    ///
    /// # Safety
    /// `first ..= last` must be an owned chain (see [`Batch`]) of live
    /// packets on no stage; ownership of all of them passes to the stage.
    #[inline]
    pub unsafe fn push_batch(&self, first: NonNull<P>, last: NonNull<P>) -> bool {
        let mut old = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: we still own `last`; it becomes visible only on success.
            unsafe { set_next(last, old) };
            // Release publishes every link of the chain (written before,
            // by this thread) together with the packets' contents.
            match self.head.compare_exchange_weak(
                old,
                first.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return old.is_null(),
                Err(cur) => old = cur,
            }
        }
    }

    /// `llist_del_all`: detaches everything, newest first.
    #[inline]
    #[must_use = "the chain owns the packets; dropping it leaks them"]
    pub fn take_all(&self) -> Chain<P> {
        // Acquire pairs with the pushers' release CAS (see `push`).
        let head = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        Chain {
            head: NonNull::new(head),
        }
    }

    /// Whether the stage looks empty. Racy by nature: use it for
    /// diagnostics and for checks after all producers have stopped.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire).is_null()
    }
}

/// A chain a producer builds privately before pushing it with
/// [`Stage::push_batch`]: packets are added in arrival order, linked newest
/// first, so the stage sees exactly what one push per packet would leave.
/// It does not free on drop: a batch must end in [`Batch::push_onto`].
#[derive(Debug)]
#[must_use = "the batch owns its packets; push it onto a stage"]
pub struct Batch<P> {
    first: Option<NonNull<P>>,
    last: Option<NonNull<P>>,
}

impl<P: StagePacket> Default for Batch<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: StagePacket> Batch<P> {
    pub const fn new() -> Self {
        Self {
            first: None,
            last: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Appends `p` (the newest so far).
    ///
    /// # Safety
    /// `p` must be a live packet owned by the caller and on no stage or
    /// chain; ownership passes to the batch.
    #[inline]
    pub unsafe fn push(&mut self, p: NonNull<P>) {
        let prev = self.first.map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: the caller owns `p`.
        unsafe { set_next(p, prev) };
        self.first = Some(p);
        if self.last.is_none() {
            self.last = Some(p);
        }
    }

    /// Pushes the whole batch onto `stage` with one compare-and-swap.
    /// Returns `None` for an empty batch, else whether the stage was empty
    /// (the caller is elected to drain it).
    #[inline]
    pub fn push_onto(self, stage: &Stage<P>) -> Option<bool> {
        let (first, last) = (self.first?, self.last?);
        // SAFETY: the batch owns its chain (built by `push` from owned
        // packets) and gives all of it up here.
        Some(unsafe { stage.push_batch(first, last) })
    }
}

/// An owned singly linked list of packets threaded through their links.
///
/// Produced by [`Stage::take_all`] and reused by the drainer for its
/// to-drop lists, as the kernel reuses `skb->next`. It does not free on
/// drop: packets are freed by the engine's callback, so a chain must be
/// consumed by iteration.
#[derive(Debug)]
pub struct Chain<P> {
    head: Option<NonNull<P>>,
}

impl<P: StagePacket> Default for Chain<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: StagePacket> Chain<P> {
    pub const fn new() -> Self {
        Self { head: None }
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Pushes an owned packet at the front.
    ///
    /// # Safety
    /// `p` must be a live packet owned by the caller and on no stage or
    /// chain; ownership passes to the chain.
    #[inline]
    pub unsafe fn push_front(&mut self, p: NonNull<P>) {
        let old = self.head.map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: the caller owns `p`.
        unsafe { set_next(p, old) };
        self.head = Some(p);
    }

    /// `llist_reverse_order`: the stage is LIFO, delivery must be FIFO.
    #[inline]
    #[must_use = "the chain owns the packets; dropping it leaks them"]
    pub fn reverse(mut self) -> Self {
        let mut out = Chain::new();
        while let Some(p) = self.pop_front() {
            // SAFETY: `p` was just detached from a chain we own.
            unsafe { out.push_front(p) };
        }
        out
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<NonNull<P>> {
        let p = self.head?;
        // SAFETY: every packet on an owned chain is live and owned by it.
        self.head = NonNull::new(unsafe { next_of(p) });
        Some(p)
    }
}

impl<P: StagePacket> Iterator for Chain<P> {
    type Item = NonNull<P>;
    #[inline]
    fn next(&mut self) -> Option<NonNull<P>> {
        self.pop_front()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[repr(C)]
    struct Node {
        link: AtomicPtr<Node>,
        id: u32,
    }

    // SAFETY: `link` is the first field of a repr(C) struct, so the cast
    // is the field's address and reads nothing.
    unsafe impl StagePacket for Node {
        fn link(p: NonNull<Self>) -> *const AtomicPtr<Self> {
            p.as_ptr().cast()
        }
    }

    fn nodes(n: u32) -> Vec<NonNull<Node>> {
        (0..n)
            .map(|id| {
                let b = Box::new(Node {
                    link: AtomicPtr::new(ptr::null_mut()),
                    id,
                });
                NonNull::from(Box::leak(b))
            })
            .collect()
    }

    fn ids(c: Chain<Node>) -> Vec<u32> {
        // SAFETY: test nodes are live until `free` below.
        c.map(|p| unsafe { p.as_ref().id }).collect()
    }

    fn free(v: Vec<NonNull<Node>>) {
        for p in v {
            // SAFETY: allocated by `nodes`, owned again after the chains ended.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }

    #[test]
    fn election_and_fifo_after_reverse() {
        let s = Stage::<Node>::new();
        let v = nodes(4);
        // SAFETY: each node is pushed once and owned by the stage after.
        let elected: Vec<bool> = v.iter().map(|&p| unsafe { s.push(p) }).collect();
        assert_eq!(elected, [true, false, false, false]);
        assert_eq!(ids(s.take_all()), [3, 2, 1, 0], "raw stage is LIFO");
        assert!(s.is_empty());
        assert!(
            s.take_all().is_empty(),
            "an empty stage gives an empty chain"
        );

        for &p in &v {
            // SAFETY: the previous chain was fully consumed.
            unsafe { s.push(p) };
        }
        let c = s.take_all();
        assert!(!c.is_empty());
        assert_eq!(ids(c.reverse()), [0, 1, 2, 3]);
        free(v);
    }

    #[test]
    fn next_push_after_take_is_elected_again() {
        let s = Stage::<Node>::new();
        let v = nodes(2);
        // SAFETY: pushed once each, chain consumed before reuse.
        unsafe {
            assert!(s.push(v[0]));
            assert_eq!(ids(s.take_all()), [0]);
            assert!(s.push(v[1]), "empty again after take_all: new election");
        }
        assert_eq!(ids(s.take_all()), [1]);
        free(v);
    }

    #[test]
    fn batch_push_is_one_election_and_keeps_arrival_order() {
        let s = Stage::<Node>::new();
        let v = nodes(5);
        let mut b = Batch::new();
        assert!(b.is_empty());
        // SAFETY: each node is given to one batch or push once.
        unsafe {
            b.push(v[0]);
            b.push(v[1]);
        }
        assert!(!b.is_empty());
        assert_eq!(
            b.push_onto(&s),
            Some(true),
            "empty stage: the batch's producer is elected"
        );
        // A single push behind it, then a second batch: neither is elected.
        // SAFETY: as above.
        assert!(!unsafe { s.push(v[2]) });
        let mut b = Batch::new();
        // SAFETY: as above.
        unsafe {
            b.push(v[3]);
            b.push(v[4]);
        }
        assert_eq!(b.push_onto(&s), Some(false));
        assert_eq!(
            Batch::<Node>::new().push_onto(&s),
            None,
            "an empty batch elects nobody"
        );
        assert_eq!(
            ids(s.take_all().reverse()),
            [0, 1, 2, 3, 4],
            "FIFO across batches and pushes"
        );
        free(v);
    }

    #[test]
    fn empty_take_and_reverse() {
        let s = Stage::<Node>::new();
        let c = s.take_all();
        assert!(c.is_empty());
        assert!(c.reverse().is_empty());
    }
}
