//! The elected producer's drain: its node's stage moves into the delivery
//! ring in arrival order under one delivery-lock hold, [`DRAIN_BURST`]
//! packets per `Sink::enqueue_burst`, with the drain-time budget check
//! (`RcvbufFullAtDrain`) and a refund of what the ring refuses; the same
//! critical section for an uncontended group that skips the stage
//! (`try_deliver_now`); and
//! [`RxSocket::drain_closed`], which frees what a closed socket still has
//! staged. Reading the ring is the consumer's act, not a drain: see
//! `runtime::consumer`.

use core::ptr::NonNull;

use super::accounting::{has_space, DropReason, NodeCounters};
use super::stage::{Chain, StagePacket};
use super::sync::Ordering;
use super::{PacketMeta, ProdQueue, RxSocket, Sink};
use crate::counters::stat;

/// Packets gathered per `enqueue_burst` call while draining a batch.
pub const DRAIN_BURST: usize = 64;

/// One drained batch, as seen by the elected producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchOutcome {
    pub taken: u32,
    pub delivered: u32,
    pub dropped: u32,
}

/// What one delivery-lock hold did, and the packets it refused, which are
/// freed only once the lock is released.
struct Held<P> {
    out: BatchOutcome,
    /// Truesize of every packet taken (delivered or not).
    total: usize,
    /// Over the budget at delivery time (`RcvbufFullAtDrain`).
    over: Chain<P>,
    /// Refused by the ring (`RingFull`).
    refused: Chain<P>,
}

impl<P: StagePacket> Held<P> {
    /// Nothing taken yet; `total` bytes of truesize already counted.
    fn new(total: usize) -> Held<P> {
        Held {
            out: BatchOutcome::default(),
            total,
            over: Chain::new(),
            refused: Chain::new(),
        }
    }

    /// Frees and counts what the hold refused (outside the critical
    /// section, v3 of the seed).
    fn finish<F>(self, ctr: &NodeCounters, to_free: &mut F) -> BatchOutcome
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        let mut out = self.out;
        out.dropped = free_chain(ctr, self.over, DropReason::RcvbufFullAtDrain, to_free)
            + free_chain(ctr, self.refused, DropReason::RingFull, to_free);
        out
    }
}

impl<P: PacketMeta, S: Sink<P>> RxSocket<P, S> {
    /// The elected producer's deferred drain of `node`'s stage (see
    /// [`RxSocket::enqueue_deferred`]).
    pub fn drain<F>(&self, node: usize, to_free: &mut F) -> BatchOutcome
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        let (q, ctr) = self.parts(node);
        self.drain_node(q, ctr, to_free)
    }

    /// The elected producer's drain: everything on the node's stage goes to
    /// the ring in FIFO order under one delivery-lock hold.
    pub(super) fn drain_node<F>(
        &self,
        q: &ProdQueue<P>,
        ctr: &NodeCounters,
        to_free: &mut F,
    ) -> BatchOutcome
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        // Read before the lock, once per batch (v4 of the seed): the drop
        // count is approximate anyway and the sum touches every node's line.
        let snap = self.snapshot();
        let rcvbuf = self.mem.rcvbuf();
        let held = self.delivery.with(|sink| {
            stat::add_exclusive(&self.dstats.lock_acquisitions, 1);
            // Taken under the lock, not before: while we waited for it,
            // other producers of this node kept pushing behind us (they
            // were not elected), and this is what picks their packets up.
            let batch = q.stage.take_all().reverse();
            // SAFETY: take_all made us the owner of every packet on it,
            // each on no other chain once the iterator detaches it.
            unsafe { self.deliver_locked(sink, batch, snap, rcvbuf) }
        });
        // The staged bytes leave the node's meter only now, so producers on
        // this node kept seeing them until they were charged to the socket
        // (or dropped) and the budget was never under-counted.
        q.rmem_alloc.fetch_sub(held.total, Ordering::Relaxed);
        held.finish(ctr, to_free)
    }

    /// The uncontended case of staging a group (see
    /// [`RxSocket::enqueue_batch_deferred`]): if this node's stage is empty
    /// and the delivery lock is free right now, the group goes straight to
    /// the ring under that one hold, exactly as if it had been pushed onto
    /// the empty stage, elected its producer and been drained at once, but
    /// without the link writes, the compare-and-swap, the exchange, the two
    /// walks of the chain and the node meter's two read-modify-writes.
    /// Returns `false`, having touched nothing, when the stage is not empty
    /// (a drainer is elected: the group queues behind what is staged, so
    /// the node's datagrams reach the ring in the order they were staged)
    /// or the lock is held (another node is draining: the caller stages, as
    /// the seed does, rather than wait). Either way one producer's own
    /// datagrams stay in arrival order: its earlier ones are in the ring,
    /// on the stage (then it stages too), or taken by a drainer that holds
    /// the lock (then `try_with` fails); loom's `numa_queues_batch_order`. The stage protocol itself is unchanged:
    /// a push that finds the stage empty still elects its producer.
    ///
    /// # Safety
    /// Each packet of `pkts` must be live, exclusively owned by the caller,
    /// on no stage or chain, listed once, admitted (charged nowhere yet), and
    /// safe to hand to the consumer thread. On `true` the caller has given
    /// them all up (in the ring, or handed to `to_free` with their reason).
    pub(super) unsafe fn try_deliver_now<F>(
        &self,
        q: &ProdQueue<P>,
        ctr: &NodeCounters,
        pkts: &[NonNull<P>],
        bytes: usize,
        to_free: &mut F,
    ) -> bool
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        if !q.stage.is_empty() {
            return false;
        }
        let snap = self.snapshot();
        let rcvbuf = self.mem.rcvbuf();
        let held = self.delivery.try_with(|sink| {
            // Re-checked under the lock: packets staged on this node since
            // the check above (an elected drainer waits for this lock) go
            // first. Our own earlier packets need no such check: the one
            // above saw them staged, or a drainer took them under this lock,
            // which we now hold, so they are in the ring.
            if !q.stage.is_empty() {
                return None;
            }
            stat::add_exclusive(&self.dstats.lock_acquisitions, 1);
            stat::add_exclusive(&self.dstats.direct, 1);
            // SAFETY: the caller's contract: owned, listed once, on no chain.
            Some(unsafe { self.deliver_slice(sink, pkts, bytes, snap, rcvbuf) })
        });
        match held.flatten() {
            Some(held) => {
                held.finish(ctr, to_free);
                true
            }
            None => false,
        }
    }

    /// The delivery lock's critical section: `pkts`, in order, into the
    /// ring in [`DRAIN_BURST`]-packet bursts, each checked against the
    /// budget first (`udp_rmem_schedule` analogue: other nodes' drains may
    /// have filled the socket since the packet was admitted) and charged
    /// before it is published. What does not fit is kept aside, to be freed
    /// after the lock ([`Held::finish`], v3 of the seed).
    ///
    /// # Safety
    /// Called with the delivery lock held (`sink` is its data). Each packet
    /// `pkts` yields must be live, exclusively owned by the caller, on no
    /// stage or chain once yielded, and yielded once; all pass to the sink
    /// or to the returned chains.
    #[inline]
    unsafe fn deliver_locked<I>(&self, sink: &mut S, pkts: I, snap: u32, rcvbuf: usize) -> Held<P>
    where
        I: IntoIterator<Item = NonNull<P>>,
    {
        let mut held = Held::new(0);
        let mut buf = [NonNull::<P>::dangling(); DRAIN_BURST];
        let mut n = 0usize;
        let mut chunk = 0usize;
        let mut base = self.mem.rmem();
        for p in pkts {
            // SAFETY: owned (the contract).
            let size = unsafe { P::truesize(p) } as usize;
            held.total = held.total.wrapping_add(size);
            held.out.taken = held.out.taken.wrapping_add(1);
            if !has_space(base.saturating_add(chunk), rcvbuf, size) {
                // SAFETY: owned and on no chain (the contract).
                unsafe { held.over.push_front(p) };
                continue;
            }
            // SAFETY: owned (see above).
            unsafe { P::set_drop_snapshot(p, snap) };
            if n == DRAIN_BURST {
                let burst = buf.get(..n).unwrap_or(&[]);
                // SAFETY: every packet in `buf[..n]` was yielded once, is
                // ours and on no chain.
                held.out.delivered += unsafe { self.flush(sink, burst, chunk, &mut held.refused) };
                n = 0;
                chunk = 0;
                base = self.mem.rmem();
            }
            if let Some(slot) = buf.get_mut(n) {
                *slot = p;
                n += 1;
                chunk = chunk.saturating_add(size);
            }
        }
        if n > 0 {
            let burst = buf.get(..n).unwrap_or(&[]);
            // SAFETY: as above.
            held.out.delivered += unsafe { self.flush(sink, burst, chunk, &mut held.refused) };
        }
        self.count_batch(held.out.taken);
        held
    }

    /// [`RxSocket::deliver_locked`] for a slice whose truesize total is
    /// `bytes`: when the whole slice fits the budget and one sink burst, the
    /// per-packet test (each would pass: every prefix of a slice that fits
    /// fits) and the copy into the burst array are skipped; otherwise the
    /// general path decides packet by packet.
    ///
    /// # Safety
    /// As [`RxSocket::deliver_locked`], for the packets of `pkts`, whose
    /// truesizes add up to `bytes`.
    #[inline(always)]
    unsafe fn deliver_slice(
        &self,
        sink: &mut S,
        pkts: &[NonNull<P>],
        bytes: usize,
        snap: u32,
        rcvbuf: usize,
    ) -> Held<P> {
        let fits = self
            .mem
            .rmem()
            .checked_add(bytes)
            .is_some_and(|t| t <= rcvbuf);
        if !fits || pkts.len() > DRAIN_BURST {
            // SAFETY: the caller's contract.
            return unsafe { self.deliver_locked(sink, pkts.iter().copied(), snap, rcvbuf) };
        }
        let mut held = Held::new(bytes);
        for &p in pkts {
            // SAFETY: owned (the contract).
            unsafe { P::set_drop_snapshot(p, snap) };
        }
        // `pkts.len() <= DRAIN_BURST`.
        held.out.taken = pkts.len() as u32;
        // SAFETY: every packet of `pkts` is ours, listed once, on no chain.
        held.out.delivered = unsafe { self.flush(sink, pkts, bytes, &mut held.refused) };
        self.count_batch(held.out.taken);
        held
    }

    /// One delivery-lock batch of `taken` packets in the socket's stats.
    #[inline]
    fn count_batch(&self, taken: u32) {
        let d = &self.dstats;
        stat::add_exclusive(&d.batches, 1);
        stat::add_exclusive(&d.batch_pkts, u64::from(taken));
        if u64::from(taken) > stat::read(&d.batch_max) {
            d.batch_max.store(u64::from(taken), stat::Ordering::Relaxed);
        }
    }

    /// Charges and hands one burst to the sink; returns how many it took.
    ///
    /// # Safety
    /// Each packet of `pkts` must be live, exclusively owned by the caller,
    /// on no stage or chain, and listed once; `bytes` is their truesize.
    /// The sink takes a prefix; the rest go onto `refused`.
    #[inline]
    unsafe fn flush(
        &self,
        sink: &mut S,
        pkts: &[NonNull<P>],
        bytes: usize,
        refused: &mut Chain<P>,
    ) -> u32 {
        // Charge before publishing: the consumer may take and release a
        // packet the instant `enqueue_burst` puts it in the ring, and its
        // release must not precede our charge.
        let prev = self.mem.charge(bytes);
        // SAFETY: we own every packet of `pkts` exclusively and none is on
        // a stage or chain (our contract); the sink takes the prefix it
        // holds and leaves us the rest.
        let accepted = unsafe { sink.enqueue_burst(pkts) }.min(pkts.len());
        let mut refund = 0usize;
        for &p in pkts.get(accepted..).unwrap_or(&[]) {
            // SAFETY: the sink declined these, so we still own them.
            refund = refund.wrapping_add(unsafe { P::truesize(p) } as usize);
            // SAFETY: owned and on no other list.
            unsafe { refused.push_front(p) };
        }
        if refund > 0 {
            self.mem.uncharge(refund);
        }
        self.mem
            .note_high_water(prev.wrapping_add(bytes).wrapping_sub(refund));
        stat::add_exclusive(&self.dstats.delivered, accepted as u64);
        // `accepted <= DRAIN_BURST`.
        accepted as u32
    }

    /// Frees whatever is still staged, counting it as `Closed`, and returns
    /// how many packets that was.
    ///
    /// Safe at any time (taking a stage is always a transfer of ownership),
    /// but meant for after [`RxSocket::close`] and after every producer that
    /// may have seen the socket open has left `enqueue` (the engine's
    /// grace period, the kernel's RCU). At that point the election protocol
    /// guarantees the stages are already empty, so a non-zero return means
    /// a protocol bug; it is also recorded in `closed_in_stage`.
    pub fn drain_closed<F>(&self, to_free: &mut F) -> u64
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        let mut found = 0u64;
        for (i, q) in self.queues.iter().enumerate() {
            let (_, ctr) = self.parts(i);
            let mut total = 0usize;
            let mut n = 0u64;
            for p in q.stage.take_all() {
                // SAFETY: take_all transferred ownership to us.
                total = total.wrapping_add(unsafe { P::truesize(p) } as usize);
                n += 1;
                to_free(p, DropReason::Closed);
            }
            if n > 0 {
                q.rmem_alloc.fetch_sub(total, Ordering::Relaxed);
                ctr.add_drop(DropReason::Closed, n);
                found += n;
            }
        }
        stat::add_shared(&self.closed_in_stage, found);
        found
    }
}

fn free_chain<P, F>(ctr: &NodeCounters, chain: Chain<P>, reason: DropReason, to_free: &mut F) -> u32
where
    P: StagePacket,
    F: FnMut(NonNull<P>, DropReason),
{
    let mut n = 0u32;
    for p in chain {
        to_free(p, reason);
        n = n.wrapping_add(1);
    }
    if n > 0 {
        // Counted after freeing, like the seed's `numa_drop_add` at the end.
        ctr.add_drop(reason, u64::from(n));
    }
    n
}
