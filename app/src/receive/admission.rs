//! The producer side of a socket: [`RxSocket::enqueue`] and its burst
//! forms, rcvbuf admission and charging, the condense hook above half the
//! budget, the three enqueue [`Strategy`]s, the uncontended group's way
//! straight to the ring, and the election (with
//! `NumaQueues`, the push that finds its node's stage empty makes its
//! producer the one that drains it: see [`super::drain`]).

use core::ptr::NonNull;
use core::str::FromStr;

use super::accounting::{has_space, DropReason, NodeCounters};
use super::drain::{BatchOutcome, DRAIN_BURST};
use super::stage::Batch;
use super::sync::Ordering;
use super::{DeliveryError, PacketMeta, ProdQueue, RxSocket, Sink};
use crate::counters::stat;

/// The `skb_condense` hook, called for packets admitted while the socket is
/// above half its budget. The small-buffer cache that copies a datagram
/// into a smaller buffer implements it elsewhere.
///
/// # Safety
/// Implementations must return a live packet exclusively owned by the
/// caller and on no stage: either `p` itself, or a replacement after
/// having taken care of `p` (freed or recycled) themselves.
pub unsafe trait Condense<P> {
    /// Returns the packet to go on with: `p`, or a smaller copy of it
    /// (then `p` is no longer the caller's).
    ///
    /// # Safety
    /// `p` must be a live packet exclusively owned by the caller and on no
    /// stage or chain, of the kind the implementation handles (for the
    /// engine's: an mbuf of an engine pool, its metadata set at RX). The
    /// caller owns the returned packet instead of `p` and must not touch
    /// `p` again unless it is the one returned.
    unsafe fn condense(&mut self, p: NonNull<P>) -> NonNull<P>;
}

/// Keeps every packet as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCondense;

// SAFETY: returns the packet it was given, untouched.
unsafe impl<P> Condense<P> for NoCondense {
    #[inline]
    unsafe fn condense(&mut self, p: NonNull<P>) -> NonNull<P> {
        p
    }
}

/// How producers get packets into the delivery ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Per-node lock-free stages, elected drainer (the kernel since 6.18).
    #[default]
    NumaQueues,
    /// Above half the budget, producers serialise on an extra spinlock
    /// before the delivery lock (the kernel before the seed patch).
    Busylock,
    /// Every producer takes the delivery lock for every packet.
    Direct,
}

impl Strategy {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NumaQueues => "numa-queues",
            Self::Busylock => "busylock",
            Self::Direct => "direct",
        }
    }
}

impl FromStr for Strategy {
    type Err = DeliveryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "numa-queues" => Ok(Self::NumaQueues),
            "busylock" => Ok(Self::Busylock),
            "direct" => Ok(Self::Direct),
            other => Err(DeliveryError::UnknownStrategy(other.to_owned())),
        }
    }
}

/// What happened to the packet given to [`RxSocket::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On the stage behind an elected drainer; no longer the caller's.
    Staged,
    /// The caller was elected and drained its node's stage.
    Drained(BatchOutcome),
    /// [`RxSocket::enqueue_deferred`] only: the caller was elected and owes
    /// the stage a [`RxSocket::drain`] (other producers rely on it).
    Elected,
    /// Busylock/direct: in the delivery ring.
    Delivered,
    /// Handed to `to_free` with this reason.
    Dropped(DropReason),
}

impl<P: PacketMeta, S: Sink<P>> RxSocket<P, S> {
    /// `__udp_enqueue_schedule_skb`. Takes ownership of `pkt`: it ends in
    /// the delivery ring, on a stage behind an elected drainer, or in
    /// `to_free` (with its reason, already counted). With `NumaQueues` an
    /// elected caller may also hand other producers' packets to `to_free`,
    /// always after the delivery lock is released.
    ///
    /// # Safety
    /// `pkt` must be a live packet exclusively owned by the caller and on
    /// no stage; all packets given to one socket must be freeable by
    /// `to_free` and safe to hand to the consumer thread.
    #[inline]
    pub unsafe fn enqueue<C, F>(
        &self,
        node: usize,
        pkt: NonNull<P>,
        strategy: Strategy,
        condense: &mut C,
        to_free: &mut F,
    ) -> Verdict
    where
        C: Condense<P>,
        F: FnMut(NonNull<P>, DropReason),
    {
        // SAFETY: the caller's contract is ours.
        unsafe { self.enqueue_inner(node, pkt, strategy, condense, to_free, false) }
    }

    /// [`RxSocket::enqueue`] for a producer that handles a burst: with
    /// `NumaQueues`, an elected caller gets [`Verdict::Elected`] instead of
    /// draining at once, and must call [`RxSocket::drain`] for `node` once
    /// its burst is staged (one delivery-lock hold per socket per burst, not
    /// per packet). Until it does, the stage stays non-empty, so no other
    /// producer is elected and nothing can be stranded: the drain takes
    /// whatever was pushed up to that moment, and a push after it finds the
    /// stage empty and elects its own producer.
    ///
    /// # Safety
    /// As [`RxSocket::enqueue`], plus the drain obligation above.
    #[inline]
    pub unsafe fn enqueue_deferred<C, F>(
        &self,
        node: usize,
        pkt: NonNull<P>,
        strategy: Strategy,
        condense: &mut C,
        to_free: &mut F,
    ) -> Verdict
    where
        C: Condense<P>,
        F: FnMut(NonNull<P>, DropReason),
    {
        // SAFETY: the caller's contract is ours.
        unsafe { self.enqueue_inner(node, pkt, strategy, condense, to_free, true) }
    }

    /// A producer's whole group of packets for this socket from one burst,
    /// in arrival order: the seed's semantics at DPDK's unit of work. With
    /// `NumaQueues` the group is admitted in one pass over the meters read
    /// once (each packet against `rmem` + what this node has staged + what
    /// the group admitted before it, the kernel's per-packet test done in
    /// registers: the prefix that fits is admitted and the rest counted
    /// `RcvbufFull` per datagram, condensed above half the budget), charged
    /// to the node's meter once, counted once, and pushed onto the node's
    /// stage with one compare-and-swap (`llist_add_batch`), in windows of
    /// [`DRAIN_BURST`]. Uncontended (the node's stage empty and the
    /// delivery lock free right now) an admitted window goes straight to
    /// the ring under one lock hold instead, as if pushed, elected and
    /// drained at once but without staging it (`try_deliver_now`): the
    /// stage is for contention. Returns `true` when a push found the stage
    /// empty: the caller is elected and owes
    /// the stage a [`RxSocket::drain`] once its burst is staged, exactly as
    /// with [`RxSocket::enqueue_deferred`]. Busylock and direct, the
    /// kernel's older per-packet schemes, take the packets one by one.
    ///
    /// # Safety
    /// As [`RxSocket::enqueue_deferred`], for every packet of `pkts` (each
    /// exclusively owned by the caller, on no stage, and listed once).
    #[inline]
    pub unsafe fn enqueue_batch_deferred<C, F>(
        &self,
        node: usize,
        pkts: &[NonNull<P>],
        strategy: Strategy,
        condense: &mut C,
        to_free: &mut F,
    ) -> bool
    where
        C: Condense<P>,
        F: FnMut(NonNull<P>, DropReason),
    {
        if strategy != Strategy::NumaQueues {
            let mut elected = false;
            for &p in pkts {
                // SAFETY: the caller's contract, per packet.
                let v = unsafe { self.enqueue_inner(node, p, strategy, condense, to_free, true) };
                elected |= v == Verdict::Elected;
            }
            return elected;
        }
        if pkts.is_empty() {
            return false;
        }
        let (q, ctr) = self.parts(node);
        let n = pkts.len() as u64;
        stat::add_shared(&ctr.offered, n);
        if self.closed.load(Ordering::Relaxed) {
            for &p in pkts {
                to_free(p, DropReason::Closed);
            }
            ctr.add_drop(DropReason::Closed, n);
            return false;
        }
        let mut elected = false;
        for window in pkts.chunks(DRAIN_BURST) {
            // SAFETY: the caller's contract, for this part of the group.
            elected |= unsafe { self.stage_window(q, ctr, window, condense, to_free) };
        }
        elected
    }

    /// Admits, charges and stages (or delivers at once) up to
    /// [`DRAIN_BURST`] packets of a group; `true` if the push elected us.
    ///
    /// # Safety
    /// As [`RxSocket::enqueue_batch_deferred`], for `pkts`.
    #[inline(always)]
    unsafe fn stage_window<C, F>(
        &self,
        q: &ProdQueue<P>,
        ctr: &NodeCounters,
        pkts: &[NonNull<P>],
        condense: &mut C,
        to_free: &mut F,
    ) -> bool
    where
        C: Condense<P>,
        F: FnMut(NonNull<P>, DropReason),
    {
        let rcvbuf = self.mem.rcvbuf();
        // As in `enqueue_inner`: this node's staged bytes count against the
        // budget too, or a flood could stage unbounded memory between drains.
        let mut rmem = self
            .mem
            .rmem()
            .saturating_add(q.rmem_alloc.load(Ordering::Relaxed));
        // The usual group: all of it fits below the pressure mark, so the
        // per-datagram test below would admit every datagram and condense
        // none. Say so once, and hand the group on as it is: no copy into
        // `admitted`, no test per datagram.
        let mut total = 0usize;
        for &p in pkts {
            // SAFETY: each packet is live and ours (the contract).
            total = total.wrapping_add(unsafe { P::truesize(p) } as usize);
        }
        if rmem.checked_add(total).is_some_and(|t| t <= rcvbuf >> 1) {
            stat::add_shared(&ctr.staged, pkts.len() as u64);
            // SAFETY: the caller's contract, for every packet of the group:
            // ours, on no stage or chain, listed once, charged nowhere yet.
            return unsafe { self.deliver_or_stage(q, ctr, pkts, total, to_free) };
        }
        let mut admitted = [NonNull::<P>::dangling(); DRAIN_BURST];
        let (mut bytes, mut staged, mut condensed, mut full) = (0usize, 0usize, 0u64, 0u64);
        for &p in pkts {
            // SAFETY: the caller owns `p`.
            let mut size = unsafe { P::truesize(p) } as usize;
            if !has_space(rmem, rcvbuf, size) {
                to_free(p, DropReason::RcvbufFull);
                full += 1;
                continue;
            }
            let mut p = p;
            if rmem > rcvbuf >> 1 {
                // SAFETY: the caller owns `p` exclusively and it is on no
                // stage (our contract); it is in no chain or batch yet, and
                // from here on we use only what `condense` returns.
                p = unsafe { condense.condense(p) };
                // SAFETY: `Condense` returns a packet we own.
                let new = unsafe { P::truesize(p) } as usize;
                condensed += u64::from(new < size);
                size = new;
            }
            rmem = rmem.saturating_add(size);
            bytes = bytes.wrapping_add(size);
            // `pkts` holds at most DRAIN_BURST packets (the caller's window).
            if let Some(slot) = admitted.get_mut(staged) {
                *slot = p;
                staged += 1;
            }
        }
        if full != 0 {
            ctr.add_drop(DropReason::RcvbufFull, full);
        }
        if staged == 0 {
            // Nothing to push: an empty batch elects nobody.
            return false;
        }
        if condensed != 0 {
            stat::add_shared(&ctr.condensed, condensed);
        }
        stat::add_shared(&ctr.staged, staged as u64);
        let admitted = admitted.get(..staged).unwrap_or(&[]);
        // SAFETY: each admitted packet is ours, on no stage or chain, listed
        // once and charged nowhere yet.
        unsafe { self.deliver_or_stage(q, ctr, admitted, bytes, to_free) }
    }

    /// An admitted group (truesize total `bytes`) straight into the ring
    /// when the stage is empty and the lock free, else pushed onto the
    /// node's stage with one CAS. True when that push elected the caller.
    ///
    /// # Safety
    /// Each packet of `admitted` is live, ours alone, on no stage or chain,
    /// listed once and charged nowhere yet.
    #[inline(always)]
    unsafe fn deliver_or_stage<F>(
        &self,
        q: &ProdQueue<P>,
        ctr: &NodeCounters,
        admitted: &[NonNull<P>],
        bytes: usize,
        to_free: &mut F,
    ) -> bool
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        // SAFETY: the caller's contract.
        if unsafe { self.try_deliver_now(q, ctr, admitted, bytes, to_free) } {
            return false;
        }
        let mut batch = Batch::new();
        for &p in admitted {
            // SAFETY: we own `p` and it is on no stage or chain.
            unsafe { batch.push(p) };
        }
        // Charged before the push, as in `enqueue_inner`: the drainer's
        // subtraction must never precede it.
        q.rmem_alloc.fetch_add(bytes, Ordering::Relaxed);
        batch.push_onto(&q.stage) == Some(true)
    }

    #[inline(always)]
    unsafe fn enqueue_inner<C, F>(
        &self,
        node: usize,
        pkt: NonNull<P>,
        strategy: Strategy,
        condense: &mut C,
        to_free: &mut F,
        defer: bool,
    ) -> Verdict
    where
        C: Condense<P>,
        F: FnMut(NonNull<P>, DropReason),
    {
        let (q, ctr) = self.parts(node);
        stat::add_shared(&ctr.offered, 1);

        if self.closed.load(Ordering::Relaxed) {
            return drop_now(ctr, pkt, DropReason::Closed, to_free);
        }

        let rcvbuf = self.mem.rcvbuf();
        // SAFETY: the caller owns `pkt`.
        let mut size = unsafe { P::truesize(pkt) } as usize;
        let mut rmem = self.mem.rmem();
        if strategy == Strategy::NumaQueues {
            // Bytes already staged on this node count against the budget
            // too, or a flood could stage unbounded memory between drains.
            rmem = rmem.saturating_add(q.rmem_alloc.load(Ordering::Relaxed));
        }
        if !has_space(rmem, rcvbuf, size) {
            return drop_now(ctr, pkt, DropReason::RcvbufFull, to_free);
        }

        let pressure = rmem > rcvbuf >> 1;
        let mut pkt = pkt;
        if pressure {
            // SAFETY: the caller owns `pkt` exclusively and it is on no
            // stage (our contract); from here on we use only what
            // `condense` returns.
            pkt = unsafe { condense.condense(pkt) };
            // SAFETY: `Condense` returns a packet we own.
            let new = unsafe { P::truesize(pkt) } as usize;
            if new < size {
                stat::add_shared(&ctr.condensed, 1);
            }
            size = new;
        }

        match strategy {
            Strategy::NumaQueues => {
                q.rmem_alloc.fetch_add(size, Ordering::Relaxed);
                stat::add_shared(&ctr.staged, 1);
                // SAFETY: we own `pkt`; the stage (and its drainer) takes it.
                if !unsafe { q.stage.push(pkt) } {
                    // Someone else found the stage empty and is in, or
                    // before, its take_all: it will take this packet too.
                    return Verdict::Staged;
                }
                if defer {
                    return Verdict::Elected;
                }
                Verdict::Drained(self.drain_node(q, ctr, to_free))
            }
            Strategy::Busylock if pressure => self.busylock.with(|()| {
                stat::add_exclusive(&self.busylock_acquisitions, 1);
                // SAFETY: we own `pkt` exclusively (the caller's contract,
                // or `Condense`'s for a condensed copy) and it is on no stage.
                unsafe { self.enqueue_one(ctr, pkt, size, rcvbuf, to_free) }
            }),
            Strategy::Busylock | Strategy::Direct => {
                // SAFETY: as above.
                unsafe { self.enqueue_one(ctr, pkt, size, rcvbuf, to_free) }
            }
        }
    }

    /// The pre-seed kernel path: charge the socket directly, then take the
    /// delivery lock for this one packet.
    ///
    /// # Safety
    /// `pkt` must be a live packet exclusively owned by the caller and on
    /// no stage or chain, freeable by `to_free` and safe to hand to the
    /// consumer thread (the sink's contract); `size` is what it charges.
    #[inline]
    unsafe fn enqueue_one<F>(
        &self,
        ctr: &NodeCounters,
        pkt: NonNull<P>,
        size: usize,
        rcvbuf: usize,
        to_free: &mut F,
    ) -> Verdict
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        let prev = self.mem.charge(size);
        // Re-check after the add (the pre-6.15 kernel's `rmem > size +
        // rcvbuf`): producers racing past the first check may overshoot by
        // one packet each, but not once the meter already exceeded rcvbuf.
        if prev > rcvbuf {
            self.mem.uncharge(size);
            return drop_now(ctr, pkt, DropReason::RcvbufFull, to_free);
        }
        stat::add_shared(&ctr.staged, 1);
        let snap = self.snapshot();
        // SAFETY: we still own `pkt`.
        unsafe { P::set_drop_snapshot(pkt, snap) };
        let accepted = self.delivery.with(|sink| {
            stat::add_exclusive(&self.dstats.lock_acquisitions, 1);
            // SAFETY: we own `pkt` exclusively and it is on no stage (our
            // contract); if the sink refuses it, it stays ours to drop below.
            let ok = unsafe { sink.enqueue_burst(core::slice::from_ref(&pkt)) } >= 1;
            if ok {
                stat::add_exclusive(&self.dstats.delivered, 1);
            }
            ok
        });
        if accepted {
            self.mem.note_high_water(prev.wrapping_add(size));
            Verdict::Delivered
        } else {
            self.mem.uncharge(size);
            drop_now(ctr, pkt, DropReason::RingFull, to_free)
        }
    }
}

#[inline]
fn drop_now<P, F>(
    ctr: &NodeCounters,
    pkt: NonNull<P>,
    reason: DropReason,
    to_free: &mut F,
) -> Verdict
where
    F: FnMut(NonNull<P>, DropReason),
{
    ctr.add_drop(reason, 1);
    to_free(pkt, reason);
    Verdict::Dropped(reason)
}
