//! The elected producer's drain: its node's stage moves into the delivery
//! ring in arrival order under one delivery-lock hold, [`DRAIN_BURST`]
//! packets per `Sink::enqueue_burst`, with the drain-time budget check
//! (`RcvbufFullAtDrain`) and a refund of what the ring refuses; and
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
        let mut over: Chain<P> = Chain::new();
        let mut refused: Chain<P> = Chain::new();
        let mut out = BatchOutcome::default();
        let mut total = 0usize;

        self.delivery.with(|sink| {
            stat::add_exclusive(&self.dstats.lock_acquisitions, 1);
            // Taken under the lock, not before: while we waited for it,
            // other producers of this node kept pushing behind us (they
            // were not elected), and this is what picks their packets up.
            let batch = q.stage.take_all().reverse();
            let mut buf = [NonNull::<P>::dangling(); DRAIN_BURST];
            let mut n = 0usize;
            let mut chunk = 0usize;
            let mut base = self.mem.rmem();
            for p in batch {
                // SAFETY: take_all made us the owner of every packet on it.
                let size = unsafe { P::truesize(p) } as usize;
                total = total.wrapping_add(size);
                out.taken = out.taken.wrapping_add(1);
                // `udp_rmem_schedule` analogue: other nodes' drains may have
                // filled the socket since this packet was admitted.
                if !has_space(base.saturating_add(chunk), rcvbuf, size) {
                    // SAFETY: owned, and detached from `batch` by the iterator.
                    unsafe { over.push_front(p) };
                    continue;
                }
                // SAFETY: owned (see above).
                unsafe { P::set_drop_snapshot(p, snap) };
                if n == DRAIN_BURST {
                    let burst = buf.get(..n).unwrap_or(&[]);
                    // SAFETY: every packet in `buf[..n]` came off the batch
                    // take_all handed us, once each, and is on no chain.
                    out.delivered += unsafe { self.flush(sink, burst, chunk, &mut refused) };
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
                out.delivered += unsafe { self.flush(sink, burst, chunk, &mut refused) };
            }
            let d = &self.dstats;
            stat::add_exclusive(&d.batches, 1);
            stat::add_exclusive(&d.batch_pkts, u64::from(out.taken));
            if u64::from(out.taken) > stat::read(&d.batch_max) {
                d.batch_max
                    .store(u64::from(out.taken), stat::Ordering::Relaxed);
            }
        });

        // The staged bytes leave the node's meter only now, so producers on
        // this node kept seeing them until they were charged to the socket
        // (or dropped) and the budget was never under-counted.
        q.rmem_alloc.fetch_sub(total, Ordering::Relaxed);

        // Free outside the critical section (v3 of the seed).
        out.dropped = free_chain(ctr, over, DropReason::RcvbufFullAtDrain, to_free)
            + free_chain(ctr, refused, DropReason::RingFull, to_free);
        out
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
