//! A socket's receive side: admission, the three enqueue strategies, the
//! elected drain into the delivery ring, release, and counters.
//!
//! This is the kernel's `__udp_enqueue_schedule_skb` after Eric Dumazet's
//! "udp: remove busylock and add per NUMA queues" (seeds/000), rebuilt
//! generically: the engine plugs in DPDK mbufs ([`PacketMeta`], link in the
//! mbuf private area), an `rte_ring` created single-producer as the
//! [`Sink`] (the delivery lock serialises its producers) and
//! `rte_pktmbuf_free_bulk` behind the `to_free` callback; tests and the
//! loom model plug in [`testkit`].
//!
//! Latency hook: the engine stamps the TSC into the mbuf at RX; the natural
//! place to read it is the `Sink::enqueue_burst` implementation (the packet
//! enters the ring there, under the delivery lock) or the consumer at
//! dequeue. Nothing here reads clocks, so the model and unit tests stay
//! deterministic.

use core::ptr::NonNull;
use core::str::FromStr;

use thiserror::Error;

use super::accounting::{has_space, DropCounters, DropReason, NodeCounters, SocketMem};
use super::stage::{Batch, Chain, Stage, StagePacket};
use super::sync::stat::{self, AtomicU64};
use super::sync::{AtomicBool, AtomicUsize, CachePadded, Ordering, SpinLock};

/// Packets gathered per `enqueue_burst` call while draining a batch.
pub const DRAIN_BURST: usize = 64;
/// Upper bound on nodes per socket (DPDK's `RTE_MAX_NUMA_NODES` is 32 or less).
pub const MAX_NODES: usize = 64;

/// What the receive side needs to know about a packet beyond its link.
pub trait PacketMeta: StagePacket {
    /// Bytes the packet charges: buffer structure plus data room, the
    /// kernel's `skb->truesize`, not the datagram length.
    ///
    /// # Safety
    /// `p` must be a live packet owned by the caller.
    unsafe fn truesize(p: NonNull<Self>) -> u32;

    /// Stores the socket's drop count as seen when the packet's batch was
    /// drained (`SOCK_SKB_CB(skb)->dropcount`, reported by SO_RXQ_OVFL).
    ///
    /// # Safety
    /// `p` must be a live packet owned by the caller.
    unsafe fn set_drop_snapshot(p: NonNull<Self>, drops: u32);
}

/// The socket's delivery ring. Called only under the delivery lock.
pub trait Sink<P> {
    /// Takes ownership of the longest prefix of `pkts` it can hold and
    /// returns its length; the rest stay owned by the caller.
    fn enqueue_burst(&mut self, pkts: &[NonNull<P>]) -> usize;
}

/// The `skb_condense` hook, called for packets admitted while the socket is
/// above half its budget. The small-buffer cache that copies a datagram
/// into a smaller buffer implements it elsewhere.
///
/// # Safety
/// Implementations must return a live packet exclusively owned by the
/// caller and on no stage: either `p` itself, or a replacement after
/// having taken care of `p` (freed or recycled) themselves.
pub unsafe trait Condense<P> {
    fn condense(&mut self, p: NonNull<P>) -> NonNull<P>;
}

/// Keeps every packet as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCondense;

// SAFETY: returns the packet it was given, untouched.
unsafe impl<P> Condense<P> for NoCondense {
    #[inline]
    fn condense(&mut self, p: NonNull<P>) -> NonNull<P> {
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

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeliveryError {
    #[error("a socket needs 1..={MAX_NODES} nodes, got {0}")]
    BadNodeCount(usize),
    #[error("unknown enqueue strategy {0:?} (expected numa-queues, busylock or direct)")]
    UnknownStrategy(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// Stages per socket: one per NUMA node the RX lcores run on.
    pub nodes: usize,
    /// Budget in bytes of truesize (SO_RCVBUF).
    pub rcvbuf: usize,
    /// Stamp each delivered packet with the drop count (SO_RXQ_OVFL). The
    /// snapshot sums every node's counters once per batch, so it costs
    /// reads of `nodes` remote lines; the kernel only does it when asked.
    pub drop_snapshot: bool,
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

/// One drained batch, as seen by the elected producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchOutcome {
    pub taken: u32,
    pub delivered: u32,
    pub dropped: u32,
}

/// The seed's `udp_prod_queue`: a node's stage and the bytes staged on it.
#[derive(Debug)]
struct ProdQueue<P> {
    stage: Stage<P>,
    rmem_alloc: AtomicUsize,
}

/// Counters written under the delivery lock only.
#[derive(Debug, Default)]
struct DeliveryStats {
    lock_acquisitions: AtomicU64,
    delivered: AtomicU64,
    batches: AtomicU64,
    batch_pkts: AtomicU64,
    batch_max: AtomicU64,
}

/// A point-in-time copy of a socket's counters, taken without stopping
/// producers (so fields may be mutually off by in-flight packets).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketStats {
    pub offered: u64,
    pub staged: u64,
    pub delivered: u64,
    pub condensed: u64,
    pub drops: [u64; DropReason::COUNT],
    pub batches: u64,
    pub batch_pkts: u64,
    pub batch_max: u64,
    pub delivery_lock_acquisitions: u64,
    pub busylock_acquisitions: u64,
    pub closed_in_stage: u64,
    pub rmem: usize,
    pub rmem_high_water: u64,
}

impl SocketStats {
    pub fn drop(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.index()).copied().unwrap_or(0)
    }

    pub fn drops_total(&self) -> u64 {
        self.drops.iter().fold(0, |a, &b| a.wrapping_add(b))
    }

    /// Both buffer-budget reasons, i.e. what `UdpRcvbufErrors` plus
    /// `UdpMemErrors` would show for this socket.
    pub fn rcvbuf_errors(&self) -> u64 {
        self.drop(DropReason::RcvbufFull)
            .wrapping_add(self.drop(DropReason::RcvbufFullAtDrain))
    }

    /// `offered == delivered + drops`: true once producers have stopped
    /// (packets still in the ring count as delivered).
    pub fn books_balance(&self) -> bool {
        self.offered == self.delivered.wrapping_add(self.drops_total())
    }
}

/// One socket's receive side, shared by all RX lcores and its consumer.
#[derive(Debug)]
pub struct RxSocket<P, S> {
    mem: SocketMem,
    closed: AtomicBool,
    drop_snapshot: bool,
    queues: Box<[CachePadded<ProdQueue<P>>]>,
    counters: DropCounters,
    delivery: CachePadded<SpinLock<S>>,
    dstats: CachePadded<DeliveryStats>,
    busylock: CachePadded<SpinLock<()>>,
    busylock_acquisitions: CachePadded<AtomicU64>,
    closed_in_stage: AtomicU64,
}

impl<P: PacketMeta, S: Sink<P>> RxSocket<P, S> {
    pub fn new(cfg: SocketConfig, sink: S) -> Result<Self, DeliveryError> {
        if cfg.nodes == 0 || cfg.nodes > MAX_NODES {
            return Err(DeliveryError::BadNodeCount(cfg.nodes));
        }
        Ok(Self {
            mem: SocketMem::new(cfg.rcvbuf),
            closed: AtomicBool::new(false),
            drop_snapshot: cfg.drop_snapshot,
            queues: (0..cfg.nodes)
                .map(|_| {
                    CachePadded(ProdQueue {
                        stage: Stage::new(),
                        rmem_alloc: AtomicUsize::new(0),
                    })
                })
                .collect(),
            counters: DropCounters::new(cfg.nodes),
            delivery: CachePadded(SpinLock::new(sink)),
            dstats: CachePadded(DeliveryStats::default()),
            busylock: CachePadded(SpinLock::new(())),
            busylock_acquisitions: CachePadded(AtomicU64::new(0)),
            closed_in_stage: AtomicU64::new(0),
        })
    }

    pub fn nodes(&self) -> usize {
        self.queues.len()
    }

    /// Maps any node id onto a stage. Locality is the only thing the node
    /// choice affects (any stage is correct), so an id beyond the
    /// configured count is folded rather than refused.
    #[inline]
    fn node_index(&self, node: usize) -> usize {
        let n = self.queues.len();
        if node < n {
            node
        } else {
            // `n >= 1` is checked in `new`.
            node % n
        }
    }

    #[inline]
    fn parts(&self, node: usize) -> (&ProdQueue<P>, &NodeCounters) {
        let i = self.node_index(node);
        // In bounds: both have `nodes` entries and `node_index` is below it.
        (&self.queues[i], self.counters.node_at(i))
    }

    #[inline]
    fn snapshot(&self) -> u32 {
        if self.drop_snapshot {
            // SO_RXQ_OVFL reports a 32-bit counter that wraps.
            self.counters.drop_count() as u32
        } else {
            0
        }
    }

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
    /// stage with one compare-and-swap (`llist_add_batch`). Returns `true`
    /// when the push found the stage empty: the caller is elected and owes
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
        let rcvbuf = self.mem.rcvbuf();
        // As in `enqueue_inner`: this node's staged bytes count against the
        // budget too, or a flood could stage unbounded memory between drains.
        let mut rmem = self
            .mem
            .rmem()
            .saturating_add(q.rmem_alloc.load(Ordering::Relaxed));
        let mut batch = Batch::new();
        let (mut bytes, mut staged, mut condensed, mut full) = (0usize, 0u64, 0u64, 0u64);
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
                p = condense.condense(p);
                // SAFETY: `Condense` returns a packet we own.
                let new = unsafe { P::truesize(p) } as usize;
                condensed += u64::from(new < size);
                size = new;
            }
            rmem = rmem.saturating_add(size);
            bytes = bytes.wrapping_add(size);
            staged += 1;
            // SAFETY: we own `p` and it is on no stage or chain.
            unsafe { batch.push(p) };
        }
        if full != 0 {
            ctr.add_drop(DropReason::RcvbufFull, full);
        }
        if staged == 0 {
            // An empty batch pushes nothing and elects nobody.
            let _ = batch.push_onto(&q.stage);
            return false;
        }
        if condensed != 0 {
            stat::add_shared(&ctr.condensed, condensed);
        }
        // Charged before the push, as in `enqueue_inner`: the drainer's
        // subtraction must never precede it.
        q.rmem_alloc.fetch_add(bytes, Ordering::Relaxed);
        stat::add_shared(&ctr.staged, staged);
        batch.push_onto(&q.stage) == Some(true)
    }

    /// The elected producer's deferred drain of `node`'s stage (see
    /// [`RxSocket::enqueue_deferred`]).
    pub fn drain<F>(&self, node: usize, to_free: &mut F) -> BatchOutcome
    where
        F: FnMut(NonNull<P>, DropReason),
    {
        let (q, ctr) = self.parts(node);
        self.drain_node(q, ctr, to_free)
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
            pkt = condense.condense(pkt);
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
                self.enqueue_one(ctr, pkt, size, rcvbuf, to_free)
            }),
            Strategy::Busylock | Strategy::Direct => {
                self.enqueue_one(ctr, pkt, size, rcvbuf, to_free)
            }
        }
    }

    /// The pre-seed kernel path: charge the socket directly, then take the
    /// delivery lock for this one packet.
    #[inline]
    fn enqueue_one<F>(
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
            let ok = sink.enqueue_burst(core::slice::from_ref(&pkt)) >= 1;
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

    /// The elected producer's drain: everything on the node's stage goes to
    /// the ring in FIFO order under one delivery-lock hold.
    fn drain_node<F>(&self, q: &ProdQueue<P>, ctr: &NodeCounters, to_free: &mut F) -> BatchOutcome
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
                    out.delivered += self.flush(sink, burst, chunk, &mut refused);
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
                out.delivered += self.flush(sink, burst, chunk, &mut refused);
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
    #[inline]
    fn flush(
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
        let accepted = sink.enqueue_burst(pkts).min(pkts.len());
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

    /// The consumer freed a delivered packet of this truesize.
    #[inline]
    pub fn release(&self, truesize: u32) {
        self.mem.uncharge(truesize as usize);
    }

    /// Consumer-side access to the sink (for sinks without a lock-free
    /// consumer side, such as [`testkit::VecSink`]). Not counted in
    /// `delivery_lock_acquisitions`, which measures producers.
    pub fn with_sink<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        self.delivery.with(f)
    }

    /// Marks the socket closed: from now on `enqueue` drops with `Closed`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
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

    pub fn rcvbuf(&self) -> usize {
        self.mem.rcvbuf()
    }

    pub fn set_rcvbuf(&self, bytes: usize) {
        self.mem.set_rcvbuf(bytes);
    }

    /// Bytes charged to the socket (in the ring or being consumed).
    pub fn rmem(&self) -> usize {
        self.mem.rmem()
    }

    /// Bytes staged on a node and not yet drained.
    pub fn node_rmem(&self, node: usize) -> Option<usize> {
        self.queues
            .get(node)
            .map(|q| q.rmem_alloc.load(Ordering::Relaxed))
    }

    pub fn stage_is_empty(&self, node: usize) -> Option<bool> {
        self.queues.get(node).map(|q| q.stage.is_empty())
    }

    /// `sk_drops_read`: all drops of this socket, all nodes.
    pub fn drop_count(&self) -> u64 {
        self.counters.drop_count()
    }

    pub fn node_drops(&self, node: usize, reason: DropReason) -> Option<u64> {
        self.counters.node(node).map(|c| c.drops(reason))
    }

    pub fn stats(&self) -> SocketStats {
        let c = &self.counters;
        let d = &self.dstats;
        let mut drops = [0u64; DropReason::COUNT];
        for (slot, r) in drops.iter_mut().zip(DropReason::ALL) {
            *slot = c.drops(r);
        }
        SocketStats {
            offered: c.sum(|n| &n.offered),
            staged: c.sum(|n| &n.staged),
            delivered: stat::read(&d.delivered),
            condensed: c.sum(|n| &n.condensed),
            drops,
            batches: stat::read(&d.batches),
            batch_pkts: stat::read(&d.batch_pkts),
            batch_max: stat::read(&d.batch_max),
            delivery_lock_acquisitions: stat::read(&d.lock_acquisitions),
            busylock_acquisitions: stat::read(&self.busylock_acquisitions),
            closed_in_stage: stat::read(&self.closed_in_stage),
            rmem: self.mem.rmem(),
            rmem_high_water: self.mem.high_water(),
        }
    }

    /// Tears the socket down and returns its sink (whatever is still in it
    /// belongs to the caller now). Call [`RxSocket::drain_closed`] first:
    /// packets left on a stage are not freed here, there is no callback.
    pub fn into_sink(self) -> S {
        self.delivery.0.into_inner()
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

/// Plain heap packets and a bounded `VecDeque` sink, for unit tests, the
/// loom model, the no-allocation test and DPDK-free benchmarks.
pub mod testkit {
    use core::ptr::{self, NonNull};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU32, Ordering as StdOrdering};

    use super::{Condense, PacketMeta, Sink};
    use crate::receive::stage::StagePacket;
    use crate::receive::sync::AtomicPtr;

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
        fn condense(&mut self, p: NonNull<HeapPacket>) -> NonNull<HeapPacket> {
            // SAFETY: `Condense` is only called on live packets we own.
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
        fn enqueue_burst(&mut self, pkts: &[NonNull<P>]) -> usize {
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
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::testkit::{HeapPacket, SendPtr, ShrinkTo, VecSink};
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    type Sock = RxSocket<HeapPacket, VecSink<HeapPacket>>;

    const TS: u32 = 100;

    fn sock(nodes: usize, rcvbuf: usize, ring: usize) -> Sock {
        RxSocket::new(
            SocketConfig {
                nodes,
                rcvbuf,
                drop_snapshot: true,
            },
            VecSink::with_capacity(ring),
        )
        .unwrap()
    }

    /// The `to_free` every test uses: a second terminal event is a double free.
    fn free(p: NonNull<HeapPacket>, _r: DropReason) {
        // SAFETY: test packets stay allocated until the test's final sweep.
        let prev = unsafe { HeapPacket::get(p) }.mark_done();
        assert_eq!(prev, 0, "packet freed twice");
    }

    fn enq(s: &Sock, node: usize, p: NonNull<HeapPacket>, st: Strategy) -> Verdict {
        // SAFETY: each test packet is enqueued exactly once.
        unsafe { s.enqueue(node, p, st, &mut NoCondense, &mut free) }
    }

    /// Consumer: takes everything out of the sink, marks it, releases it.
    fn consume(s: &Sock) -> u64 {
        let mut n = 0;
        while let Some(p) = s.with_sink(|k| k.pop()) {
            // SAFETY: live until the final sweep.
            let h = unsafe { HeapPacket::get(p) };
            assert_eq!(h.mark_done(), 0, "consumed a freed packet");
            s.release(h.truesize());
            n += 1;
        }
        n
    }

    /// Every packet has exactly one fate; frees them.
    fn sweep(pkts: Vec<NonNull<HeapPacket>>) {
        for p in pkts {
            // SAFETY: all threads joined, nothing references `p` any more.
            unsafe {
                assert_eq!(
                    HeapPacket::get(p).fates(),
                    1,
                    "packet {} lost or doubled",
                    HeapPacket::get(p).id
                );
                HeapPacket::dealloc(p);
            }
        }
    }

    fn assert_quiescent(s: &Sock) {
        for n in 0..s.nodes() {
            assert_eq!(s.stage_is_empty(n), Some(true), "stranded on node {n}");
            assert_eq!(s.node_rmem(n), Some(0));
        }
        assert_eq!(s.rmem(), 0);
        let st = s.stats();
        assert!(st.books_balance(), "{st:?}");
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "timed out waiting for {what}"
            );
            std::thread::yield_now();
        }
    }

    /// The accessors report what was set, and node ids beyond the stage
    /// count fold onto a stage (id % nodes) instead of being refused.
    #[test]
    fn accessors_and_node_ids_folding_onto_stages() {
        let s = sock(3, 10 * TS as usize, 64);
        assert_eq!(s.nodes(), 3);
        assert_eq!(s.rcvbuf(), 10 * TS as usize);
        s.set_rcvbuf(7 * TS as usize);
        assert_eq!(s.rcvbuf(), 7 * TS as usize);
        assert!(!s.is_closed());
        let pkts: Vec<_> = (0..8).map(|i| HeapPacket::alloc(i, TS)).collect();
        // (node id, the stage it must land on): in range, == nodes, beyond.
        for (i, (node, stage)) in [(1, 1), (3, 0), (4, 1), (5, 2)].into_iter().enumerate() {
            // SAFETY: each packet is enqueued exactly once.
            let v = unsafe {
                s.enqueue_deferred(
                    node,
                    pkts[i],
                    Strategy::NumaQueues,
                    &mut NoCondense,
                    &mut free,
                )
            };
            assert_eq!(v, Verdict::Elected, "node {node}");
            for n in 0..3 {
                assert_eq!(
                    s.stage_is_empty(n),
                    Some(n != stage),
                    "node {node}: stage {n}"
                );
            }
            assert_eq!(s.drain(node, &mut free).delivered, 1, "node {node}");
            assert_eq!(s.stage_is_empty(stage), Some(true));
        }
        assert_eq!(consume(&s), 4);
        assert_eq!(s.drop_count(), 0);
        // Over budget: every drop shows in drop_count.
        s.set_rcvbuf(TS as usize);
        let mut dropped = 0;
        for &p in &pkts[4..7] {
            if let Verdict::Dropped(_) = enq(&s, 0, p, Strategy::NumaQueues) {
                dropped += 1;
            }
        }
        assert!(dropped >= 1);
        assert_eq!(s.drop_count(), dropped);
        consume(&s);
        s.close();
        assert!(s.is_closed());
        assert_eq!(
            enq(&s, 2, pkts[7], Strategy::NumaQueues),
            Verdict::Dropped(DropReason::Closed)
        );
        assert_eq!(s.drop_count(), dropped + 1);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn books_balance_needs_every_offered_packet_accounted() {
        let mut st = SocketStats {
            offered: 3,
            delivered: 1,
            ..SocketStats::default()
        };
        assert!(!st.books_balance(), "one packet unaccounted");
        st.drops[DropReason::RcvbufFull.index()] = 1;
        assert!(!st.books_balance());
        st.drops[DropReason::RingFull.index()] = 1;
        assert!(st.books_balance());
        assert_eq!(st.drops_total(), 2);
        assert_eq!(st.rcvbuf_errors(), 1);
    }

    /// A drain hands the ring full bursts of DRAIN_BURST, never one packet
    /// at a time, and never an empty burst.
    #[test]
    fn drain_hands_the_ring_bursts_of_drain_burst() {
        let n = DRAIN_BURST + DRAIN_BURST / 2;
        let s = sock(1, n * TS as usize, 2 * n);
        let pkts: Vec<_> = (0..n as u32).map(|i| HeapPacket::alloc(i, TS)).collect();
        for &p in &pkts {
            // SAFETY: each packet is enqueued exactly once.
            unsafe { s.enqueue_deferred(0, p, Strategy::NumaQueues, &mut NoCondense, &mut free) };
        }
        let out = s.drain(0, &mut free);
        assert_eq!(out.delivered as usize, n);
        let (max, calls) = s.with_sink(|k| (k.max_burst, k.calls));
        assert_eq!(max, DRAIN_BURST, "the first burst is a full one");
        assert_eq!(calls, 2, "one full burst and the rest");
        assert_eq!(consume(&s), n as u64);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn strategy_names_round_trip() {
        for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
            assert_eq!(st.as_str().parse::<Strategy>(), Ok(st));
        }
        assert!(matches!(
            "busy".parse::<Strategy>(),
            Err(DeliveryError::UnknownStrategy(_))
        ));
        assert_eq!(
            RxSocket::<HeapPacket, VecSink<HeapPacket>>::new(
                SocketConfig {
                    nodes: 0,
                    rcvbuf: 1,
                    drop_snapshot: false
                },
                VecSink::with_capacity(1)
            )
            .err(),
            Some(DeliveryError::BadNodeCount(0))
        );
    }

    fn enq_batch<C: Condense<HeapPacket>>(
        s: &Sock,
        node: usize,
        pkts: &[NonNull<HeapPacket>],
        st: Strategy,
        c: &mut C,
    ) -> bool {
        // SAFETY: each test packet is enqueued exactly once.
        unsafe { s.enqueue_batch_deferred(node, pkts, st, c, &mut free) }
    }

    fn sink_ids(s: &Sock) -> Vec<u32> {
        s.with_sink(|k| {
            // SAFETY: live until the final sweep.
            std::iter::from_fn(|| k.pop())
                .map(|p| unsafe { HeapPacket::get(p).id })
                .collect::<Vec<_>>()
        })
    }

    /// A burst's group: one admission pass (the prefix that fits), one
    /// election, one charge of the node's meter; a second group behind it
    /// is not elected, and one drain delivers both in arrival order.
    #[test]
    fn batch_admits_what_fits_elects_once_and_keeps_order() {
        let s = sock(2, 350, 16);
        let pkts: Vec<_> = (0..7).map(|i| HeapPacket::alloc(i, TS)).collect();
        assert!(
            enq_batch(&s, 0, &pkts[..5], Strategy::NumaQueues, &mut NoCondense),
            "empty stage: elected"
        );
        let st = s.stats();
        assert_eq!(
            (st.offered, st.staged, st.drop(DropReason::RcvbufFull)),
            (5, 3, 2),
            "{st:?}"
        );
        assert_eq!(
            s.node_rmem(0),
            Some(300),
            "one charge of the admitted bytes"
        );
        assert_eq!(s.stage_is_empty(0), Some(false));
        s.set_rcvbuf(10_000);
        assert!(
            !enq_batch(&s, 0, &pkts[5..], Strategy::NumaQueues, &mut NoCondense),
            "stage not empty: not elected"
        );
        assert_eq!(s.node_rmem(0), Some(500));
        let out = s.drain(0, &mut free);
        assert_eq!((out.taken, out.delivered, out.dropped), (5, 5, 0));
        assert_eq!(s.stats().batches, 1, "one drain took both groups");
        assert_eq!(
            sink_ids(&s),
            [0, 1, 2, 5, 6],
            "FIFO across groups, drops skipped"
        );
        assert_eq!(s.rmem(), 500);
        s.release(500);
        assert_quiescent(&s);
        // 3 and 4 were freed at admission.
        sweep_after_consume(pkts, &[0, 1, 2, 5, 6]);
    }

    /// Marks the delivered packets consumed (the sink was emptied by id) and sweeps.
    fn sweep_after_consume(pkts: Vec<NonNull<HeapPacket>>, delivered: &[u32]) {
        for &p in &pkts {
            // SAFETY: live until the sweep.
            let h = unsafe { HeapPacket::get(p) };
            if delivered.contains(&h.id) {
                assert_eq!(h.mark_done(), 0);
            }
        }
        sweep(pkts);
    }

    /// Above half the budget (counting what the group admitted before),
    /// packets are condensed and charged their smaller size.
    #[test]
    fn batch_condenses_above_half_the_budget() {
        let s = sock(1, 1000, 16);
        let pkts: Vec<_> = (0..10).map(|i| HeapPacket::alloc(i, TS)).collect();
        assert!(enq_batch(
            &s,
            0,
            &pkts,
            Strategy::NumaQueues,
            &mut ShrinkTo(10)
        ));
        let st = s.stats();
        // 0..=5 admitted at 0..=500 (not above half), 6..=9 at 600.. condensed.
        assert_eq!((st.staged, st.condensed), (10, 4), "{st:?}");
        assert_eq!(s.node_rmem(0), Some(640));
        s.drain(0, &mut free);
        assert_eq!(consume(&s), 10);
        s.release(0);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn batch_on_a_closed_socket_drops_every_packet() {
        let s = sock(1, 1000, 16);
        s.close();
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
        assert!(!enq_batch(
            &s,
            0,
            &pkts,
            Strategy::NumaQueues,
            &mut NoCondense
        ));
        let st = s.stats();
        assert_eq!((st.offered, st.drop(DropReason::Closed)), (3, 3));
        assert_quiescent(&s);
        sweep(pkts);
    }

    /// Busylock and direct keep the kernel's per-packet path: delivered at
    /// once, one lock hold each, never an election.
    #[test]
    fn batch_with_older_strategies_goes_packet_by_packet() {
        for st in [Strategy::Busylock, Strategy::Direct] {
            let s = sock(1, 1000, 16);
            let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
            assert!(!enq_batch(&s, 0, &pkts, st, &mut NoCondense));
            let x = s.stats();
            assert_eq!(
                (x.offered, x.delivered, x.delivery_lock_acquisitions),
                (3, 3, 3),
                "{st:?}"
            );
            assert_eq!(consume(&s), 3);
            assert_quiescent(&s);
            sweep(pkts);
        }
    }

    #[test]
    fn uncontended_numa_producer_is_elected_and_delivers() {
        let s = sock(2, 10_000, 16);
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
        for &p in &pkts {
            let v = enq(&s, 1, p, Strategy::NumaQueues);
            assert_eq!(
                v,
                Verdict::Drained(BatchOutcome {
                    taken: 1,
                    delivered: 1,
                    dropped: 0
                })
            );
        }
        assert_eq!(s.rmem(), 300, "charged at drain");
        assert_eq!(s.node_rmem(1), Some(0), "node meter emptied after drain");
        let st = s.stats();
        assert_eq!(
            (st.offered, st.staged, st.delivered, st.batches),
            (3, 3, 3, 3)
        );
        // FIFO out of the sink.
        let ids: Vec<u32> = s.with_sink(|k| {
            // SAFETY: live until sweep.
            std::iter::from_fn(|| k.pop())
                .map(|p| unsafe { HeapPacket::get(p).id })
                .collect()
        });
        assert_eq!(ids, [0, 1, 2]);
        for &p in &pkts {
            // SAFETY: live until sweep.
            let h = unsafe { HeapPacket::get(p) };
            h.mark_done();
            s.release(h.truesize());
        }
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn admission_rcvbuf_full_and_empty_queue_exception() {
        for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
            let s = sock(1, 250, 16);
            let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
            assert!(matches!(
                enq(&s, 0, pkts[0], st),
                Verdict::Drained(_) | Verdict::Delivered
            ));
            assert!(matches!(
                enq(&s, 0, pkts[1], st),
                Verdict::Drained(_) | Verdict::Delivered
            ));
            // 200 + 100 > 250.
            assert_eq!(
                enq(&s, 0, pkts[2], st),
                Verdict::Dropped(DropReason::RcvbufFull),
                "{st:?}"
            );
            assert_eq!(s.node_drops(0, DropReason::RcvbufFull), Some(1));
            consume(&s);
            // An empty socket accepts a datagram bigger than its budget.
            let big = HeapPacket::alloc(9, 1000);
            assert!(
                matches!(
                    enq(&s, 0, big, st),
                    Verdict::Drained(_) | Verdict::Delivered
                ),
                "{st:?}"
            );
            assert_eq!(s.rmem(), 1000);
            consume(&s);
            assert_quiescent(&s);
            let st_ = s.stats();
            assert_eq!((st_.offered, st_.delivered, st_.drops_total()), (4, 3, 1));
            let mut all = pkts;
            all.push(big);
            sweep(all);
        }
    }

    #[test]
    fn condense_above_half_charges_the_smaller_size() {
        for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
            let s = sock(1, 1000, 16);
            let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, 300)).collect();
            let mut shrink = ShrinkTo(50);
            for &p in &pkts {
                // SAFETY: each packet enqueued once.
                unsafe { s.enqueue(0, p, st, &mut shrink, &mut free) };
            }
            // 0 -> 300 (no pressure), 300 -> 600 (300 is not > 500), then
            // 600 > 500: admitted on its full size (900 <= 1000), condensed
            // to 50 and charged 50 -> 650.
            assert_eq!(s.rmem(), 650, "{st:?}");
            assert_eq!(s.stats().condensed, 1);
            if st == Strategy::Busylock {
                assert_eq!(
                    s.stats().busylock_acquisitions,
                    1,
                    "busylock only under pressure"
                );
            } else {
                assert_eq!(s.stats().busylock_acquisitions, 0);
            }
            consume(&s);
            assert_quiescent(&s);
            sweep(pkts);
        }
    }

    /// Enqueues `pkts` on `node` (numa-queues) from another thread and
    /// returns their verdicts, within 10 s. For callers that hold the
    /// delivery lock: a producer wrongly elected behind the elected one
    /// would block on that lock, and this must fail, not hang.
    fn enq_elsewhere(s: &Arc<Sock>, node: usize, pkts: &[NonNull<HeapPacket>]) -> Vec<Verdict> {
        let (tx, rx) = mpsc::channel();
        let s2 = Arc::clone(s);
        let pkts: Vec<SendPtr<HeapPacket>> = pkts.iter().map(|&p| SendPtr(p)).collect();
        std::thread::spawn(move || {
            let v: Vec<Verdict> = pkts
                .into_iter()
                .map(|p| enq(&s2, node, p.0, Strategy::NumaQueues))
                .collect();
            let _ = tx.send(v);
        });
        rx.recv_timeout(Duration::from_secs(10)).expect(
            "a producer behind the elected one was elected too (it blocks on the held delivery lock)",
        )
    }

    /// Holds the delivery lock so that one producer is elected and stuck
    /// waiting for it, then lets `extra` more producers push behind it.
    /// Returns the elected producer's verdict.
    fn elected_waits_while_others_push(s: &Arc<Sock>, pkts: &[NonNull<HeapPacket>]) -> Verdict {
        let (first, rest) = pkts.split_first().unwrap();
        let first = SendPtr(*first);
        let elected = s.with_sink(|_| {
            let s2 = Arc::clone(s);
            let h = std::thread::spawn(move || {
                let first = first;
                enq(&s2, 0, first.0, Strategy::NumaQueues)
            });
            // The elected producer has pushed and now spins on our lock.
            wait_until("the elected push", || s.stage_is_empty(0) == Some(false));
            // Others push from another thread: if any of them were elected
            // it would block on our lock and the timeout would fire instead
            // of the test hanging.
            let vs = enq_elsewhere(s, 0, rest);
            assert!(vs.iter().all(|v| *v == Verdict::Staged), "{vs:?}");
            assert_eq!(
                s.stats().delivered,
                0,
                "nothing delivered while the lock is held"
            );
            h
        });
        elected.join().unwrap()
    }

    #[test]
    fn elected_producer_drains_what_was_pushed_while_it_waited() {
        let s = Arc::new(sock(1, 1 << 20, 64));
        let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
        let v = elected_waits_while_others_push(&s, &pkts);
        assert_eq!(
            v,
            Verdict::Drained(BatchOutcome {
                taken: 5,
                delivered: 5,
                dropped: 0
            })
        );
        let st = s.stats();
        assert_eq!(st.delivery_lock_acquisitions, 1, "one lock hold per batch");
        assert_eq!((st.batches, st.batch_max, st.batch_pkts), (1, 5, 5));
        // FIFO across the batch.
        let ids: Vec<u32> = s.with_sink(|k| {
            // SAFETY: live until sweep.
            std::iter::from_fn(|| k.pop())
                .map(|p| unsafe { HeapPacket::get(p).id })
                .collect()
        });
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        for &p in &pkts {
            // SAFETY: live until sweep.
            let h = unsafe { HeapPacket::get(p) };
            h.mark_done();
            s.release(h.truesize());
        }
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn direct_takes_the_lock_per_packet() {
        let s = sock(1, 1 << 20, 64);
        let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
        for &p in &pkts {
            assert_eq!(enq(&s, 0, p, Strategy::Direct), Verdict::Delivered);
        }
        assert_eq!(s.stats().delivery_lock_acquisitions, 5);
        consume(&s);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn ring_full_refunds_and_drops_after_unlock() {
        let s = Arc::new(sock(1, 1 << 20, 2));
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
        let v = elected_waits_while_others_push(&s, &pkts);
        assert_eq!(
            v,
            Verdict::Drained(BatchOutcome {
                taken: 3,
                delivered: 2,
                dropped: 1
            })
        );
        assert_eq!(s.rmem(), 200, "the refused packet's charge was refunded");
        assert_eq!(s.node_drops(0, DropReason::RingFull), Some(1));
        assert_eq!(s.stats().rmem_high_water, 200);
        consume(&s);
        assert_quiescent(&s);
        sweep(pkts);

        let s = sock(1, 1 << 20, 0);
        let p = HeapPacket::alloc(0, TS);
        assert_eq!(
            enq(&s, 0, p, Strategy::Direct),
            Verdict::Dropped(DropReason::RingFull)
        );
        assert_quiescent(&s);
        sweep(vec![p]);
    }

    #[test]
    fn drain_time_budget_check_across_nodes() {
        // Each node admits 3 packets against its own meter (0 + 300 <= 300),
        // so together they stage twice the budget; the second drainer must
        // refuse its whole batch.
        let s = Arc::new(sock(2, 300, 64));
        let pkts: Vec<_> = (0..6).map(|i| HeapPacket::alloc(i, TS)).collect();
        let handles = s.with_sink(|_| {
            let mut hs = Vec::new();
            for node in 0..2 {
                // The elected producer blocks on our lock; the two others
                // are not elected and return at once (from another thread,
                // so that a wrong election fails instead of deadlocking).
                let first = SendPtr(pkts[node * 3]);
                let s2 = Arc::clone(&s);
                hs.push(std::thread::spawn(move || {
                    let first = first;
                    enq(&s2, node, first.0, Strategy::NumaQueues)
                }));
                wait_until("elected push", || s.stage_is_empty(node) == Some(false));
                let vs = enq_elsewhere(&s, node, &pkts[node * 3 + 1..node * 3 + 3]);
                assert_eq!(vs, [Verdict::Staged; 2]);
                assert_eq!(s.node_rmem(node), Some(300));
            }
            hs
        });
        let mut outcomes: Vec<Verdict> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        outcomes.sort_by_key(|v| match v {
            Verdict::Drained(b) => b.delivered,
            _ => u32::MAX,
        });
        assert_eq!(
            outcomes,
            [
                Verdict::Drained(BatchOutcome {
                    taken: 3,
                    delivered: 0,
                    dropped: 3
                }),
                Verdict::Drained(BatchOutcome {
                    taken: 3,
                    delivered: 3,
                    dropped: 0
                }),
            ]
        );
        let st = s.stats();
        assert_eq!(st.delivered, 3);
        assert_eq!(st.drop(DropReason::RcvbufFullAtDrain), 3);
        assert_eq!(st.rcvbuf_errors(), 3);
        assert_eq!(s.rmem(), 300);
        assert_eq!(consume(&s), 3);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn drop_snapshot_is_taken_per_batch() {
        let s = sock(1, 150, 16);
        let pkts: Vec<_> = (0..4).map(|i| HeapPacket::alloc(i, TS)).collect();
        enq(&s, 0, pkts[0], Strategy::NumaQueues);
        assert_eq!(
            enq(&s, 0, pkts[1], Strategy::NumaQueues),
            Verdict::Dropped(DropReason::RcvbufFull)
        );
        assert_eq!(
            enq(&s, 0, pkts[2], Strategy::NumaQueues),
            Verdict::Dropped(DropReason::RcvbufFull)
        );
        consume(&s);
        enq(&s, 0, pkts[3], Strategy::NumaQueues);
        // SAFETY: live until sweep.
        unsafe {
            assert_eq!(HeapPacket::get(pkts[0]).drop_snapshot(), 0);
            assert_eq!(HeapPacket::get(pkts[3]).drop_snapshot(), 2);
        }
        consume(&s);
        assert_quiescent(&s);
        sweep(pkts);
    }

    #[test]
    fn close_drops_new_packets_and_drain_closed_takes_the_stage() {
        let s = Arc::new(sock(1, 1 << 20, 64));
        let pkts: Vec<_> = (0..4).map(|i| HeapPacket::alloc(i, TS)).collect();
        // Stage 3 packets behind an elected producer stuck on the lock, then
        // close and drain the stage from under it: the drainer finds
        // nothing, and nothing is lost or freed twice.
        let (tx, rx) = mpsc::channel();
        let h = s.with_sink(|_| {
            let s2 = Arc::clone(&s);
            let first = SendPtr(pkts[0]);
            let h = std::thread::spawn(move || {
                let first = first;
                enq(&s2, 0, first.0, Strategy::NumaQueues)
            });
            wait_until("the elected push", || s.stage_is_empty(0) == Some(false));
            let vs = enq_elsewhere(&s, 0, &pkts[1..3]);
            assert_eq!(vs, [Verdict::Staged; 2]);
            s.close();
            tx.send(s.drain_closed(&mut free)).unwrap();
            h
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 3);
        assert_eq!(h.join().unwrap(), Verdict::Drained(BatchOutcome::default()));
        assert_eq!(
            enq(&s, 0, pkts[3], Strategy::NumaQueues),
            Verdict::Dropped(DropReason::Closed)
        );
        let st = s.stats();
        assert_eq!((st.drop(DropReason::Closed), st.closed_in_stage), (4, 3));
        assert_eq!(s.drain_closed(&mut free), 0);
        assert_quiescent(&s);
        sweep(pkts);
    }

    /// A condense hook that plays racing producers: each call enqueues the
    /// next packet of `racers` (with itself as the hook), so each of them
    /// passes the admission test before any of them charges the socket, as
    /// producers on several lcores can.
    struct Racers<'a> {
        s: &'a Sock,
        st: Strategy,
        racers: Vec<NonNull<HeapPacket>>,
        verdicts: Vec<Verdict>,
    }

    // SAFETY: returns the packet it was given, untouched.
    unsafe impl Condense<HeapPacket> for Racers<'_> {
        fn condense(&mut self, p: NonNull<HeapPacket>) -> NonNull<HeapPacket> {
            if let Some(q) = self.racers.pop() {
                let (s, st) = (self.s, self.st);
                // SAFETY: each racer is enqueued exactly once.
                let v = unsafe { s.enqueue(0, q, st, self, &mut free) };
                self.verdicts.push(v);
            }
            p
        }
    }

    /// Busylock/direct: three producers pass the admission test at the same
    /// `rmem` (200 of 300); the first to charge lands at 300, the second
    /// overshoots to 400 (the one packet each the kernel allows), and the
    /// third finds the meter already over rcvbuf: it is dropped and its
    /// charge taken back, so the meter holds exactly what the ring holds.
    #[test]
    fn overshoot_recheck_drops_and_refunds_the_charge() {
        for st in [Strategy::Busylock, Strategy::Direct] {
            let s = sock(1, 300, 16);
            let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
            for &p in &pkts[..2] {
                assert_eq!(enq(&s, 0, p, st), Verdict::Delivered, "{st:?}");
            }
            // 200 > 150: under pressure, so the hook runs between each
            // producer's admission and its charge.
            let mut race = Racers {
                s: &s,
                st,
                racers: vec![pkts[4], pkts[3]],
                verdicts: Vec::new(),
            };
            // SAFETY: enqueued once.
            let v = unsafe { s.enqueue(0, pkts[2], st, &mut race, &mut free) };
            assert_eq!(
                race.verdicts,
                [Verdict::Delivered, Verdict::Delivered],
                "{st:?}"
            );
            assert_eq!(v, Verdict::Dropped(DropReason::RcvbufFull), "{st:?}");
            assert_eq!(
                s.rmem(),
                400,
                "{st:?}: the dropped packet's charge was taken back"
            );
            assert_eq!(s.stats().rmem_high_water, 400, "{st:?}");
            let x = s.stats();
            assert_eq!(
                (x.offered, x.delivered, x.drop(DropReason::RcvbufFull)),
                (5, 4, 1),
                "{st:?}"
            );
            assert_eq!(consume(&s), 4);
            assert_quiescent(&s);
            sweep(pkts);
        }
    }

    /// The RX lcore's burst mode (`enqueue_deferred`): the elected producer
    /// does not drain at once; followers stage behind it; nothing reaches
    /// the ring and no lock is taken until the elected producer calls
    /// `drain`, which takes its node's whole stage in arrival order in one
    /// lock hold; the next push after it is a new election. Busylock and
    /// direct deliver at once.
    #[test]
    fn deferred_election_drains_only_when_asked() {
        let s = sock(2, 10_000, 16);
        let pkts: Vec<_> = (0..7).map(|i| HeapPacket::alloc(i, TS)).collect();
        let def = |node: usize, p: NonNull<HeapPacket>, st: Strategy| {
            // SAFETY: each packet is enqueued exactly once.
            unsafe { s.enqueue_deferred(node, p, st, &mut NoCondense, &mut free) }
        };
        let nq = Strategy::NumaQueues;
        assert_eq!(def(1, pkts[0], nq), Verdict::Elected);
        assert_eq!(def(1, pkts[1], nq), Verdict::Staged);
        assert_eq!(def(1, pkts[2], nq), Verdict::Staged);
        assert_eq!(
            def(0, pkts[3], nq),
            Verdict::Elected,
            "another node: its own election"
        );
        let x = s.stats();
        assert_eq!(
            (x.delivered, x.delivery_lock_acquisitions, x.batches),
            (0, 0, 0),
            "nothing drained before the drain"
        );
        assert_eq!((s.node_rmem(0), s.node_rmem(1)), (Some(100), Some(300)));
        assert_eq!(s.rmem(), 0, "charged to the socket at the drain");
        assert_eq!(
            s.drain(1, &mut free),
            BatchOutcome {
                taken: 3,
                delivered: 3,
                dropped: 0
            }
        );
        assert_eq!(s.stage_is_empty(1), Some(true));
        assert_eq!(s.stage_is_empty(0), Some(false), "node 0 untouched");
        assert_eq!((s.node_rmem(1), s.rmem()), (Some(0), 300));
        assert_eq!(s.stats().delivery_lock_acquisitions, 1);
        assert_eq!(
            def(1, pkts[4], nq),
            Verdict::Elected,
            "drained: the next push is elected again"
        );
        assert_eq!(s.drain(0, &mut free).taken, 1);
        assert_eq!(s.drain(1, &mut free).taken, 1);
        assert_eq!(def(0, pkts[5], Strategy::Busylock), Verdict::Delivered);
        assert_eq!(def(1, pkts[6], Strategy::Direct), Verdict::Delivered);
        let ids = sink_ids(&s);
        assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(s.stats().batches, 3);
        s.release(700);
        assert_quiescent(&s);
        sweep_after_consume(pkts, &ids);
    }

    /// The ring refuses the tail of a drained batch, in the drain's second
    /// burst (past `DRAIN_BURST`), with mixed truesizes: exactly the refused
    /// packets' bytes are refunded, they are counted `RingFull` and freed,
    /// and the meter (and its high-water mark) equals what the ring holds.
    #[test]
    fn ring_full_refund_in_a_later_drain_burst_is_exact() {
        let n = DRAIN_BURST + 20;
        let cap = DRAIN_BURST + 5;
        let s = sock(1, 1 << 20, cap);
        let pkts: Vec<_> = (0..n as u32)
            .map(|i| HeapPacket::alloc(i, TS + (i % 7) * 10))
            .collect();
        assert!(enq_batch(
            &s,
            0,
            &pkts,
            Strategy::NumaQueues,
            &mut NoCondense
        ));
        let out = s.drain(0, &mut free);
        assert_eq!(
            out,
            BatchOutcome {
                taken: n as u32,
                delivered: cap as u32,
                dropped: (n - cap) as u32
            }
        );
        // SAFETY: live until the sweep.
        let size = |p: &NonNull<HeapPacket>| unsafe { HeapPacket::get(*p) }.truesize() as usize;
        let held: usize = pkts[..cap].iter().map(size).sum();
        assert_eq!(s.rmem(), held, "the refused packets' bytes were refunded");
        assert_eq!(s.stats().rmem_high_water, held as u64);
        assert_eq!(
            s.node_drops(0, DropReason::RingFull),
            Some((n - cap) as u64)
        );
        for p in &pkts[cap..] {
            // SAFETY: live until the sweep.
            assert_eq!(unsafe { HeapPacket::get(*p) }.fates(), 1, "freed once");
        }
        let ids = sink_ids(&s);
        assert_eq!(ids, (0..cap as u32).collect::<Vec<_>>());
        s.release(held as u32);
        assert_quiescent(&s);
        sweep_after_consume(pkts, &ids);
    }

    /// 4 producers on 2 nodes and a consumer, 100k packets per strategy,
    /// with a budget small enough that every drop reason but Closed occurs.
    #[test]
    fn stress_books_balance_all_strategies() {
        const PRODUCERS: usize = 4;
        const PER: u32 = 25_000;
        for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
            // Budget ~64 packets, ring 56: rcvbuf is the usual limiter and
            // the ring fills now and then.
            let s = Arc::new(sock(2, 64 * TS as usize, 56));
            let pkts: Vec<NonNull<HeapPacket>> = (0..PRODUCERS as u32 * PER)
                .map(|i| HeapPacket::alloc(i, TS + (i % 3) * 50))
                .collect();
            let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let consumer = {
                let s = Arc::clone(&s);
                let done = Arc::clone(&done);
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    loop {
                        let finished = done.load(std::sync::atomic::Ordering::Acquire) == PRODUCERS;
                        let got = consume(&s);
                        n += got;
                        if finished && got == 0 {
                            return n;
                        }
                        if got == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            };
            let producers: Vec<_> = (0..PRODUCERS)
                .map(|t| {
                    let s = Arc::clone(&s);
                    let done = Arc::clone(&done);
                    let mine: Vec<SendPtr<HeapPacket>> = pkts
                        .iter()
                        .skip(t)
                        .step_by(PRODUCERS)
                        .map(|&p| SendPtr(p))
                        .collect();
                    std::thread::spawn(move || {
                        let mut shrink = ShrinkTo(TS);
                        for p in mine {
                            // SAFETY: each packet is enqueued exactly once.
                            unsafe { s.enqueue(t % 2, p.0, st, &mut shrink, &mut free) };
                        }
                        done.fetch_add(1, std::sync::atomic::Ordering::Release);
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
            let consumed = consumer.join().unwrap();
            let stats = s.stats();
            assert_eq!(stats.offered, u64::from(PER) * PRODUCERS as u64);
            assert_eq!(consumed, stats.delivered, "{st:?}");
            assert_eq!(
                stats.staged,
                stats.delivered
                    + stats.drop(DropReason::RingFull)
                    + stats.drop(DropReason::RcvbufFullAtDrain)
            );
            assert_eq!(stats.closed_in_stage, 0);
            assert!(
                stats.delivered > 0 && stats.drops_total() > 0,
                "{st:?}: {stats:?}"
            );
            assert!(
                stats.rmem_high_water <= 64 * u64::from(TS) + 4 * 200,
                "{stats:?}"
            );
            if st == Strategy::NumaQueues {
                assert_eq!(stats.busylock_acquisitions, 0);
                assert_eq!(stats.batches, stats.delivery_lock_acquisitions);
            } else {
                assert_eq!(stats.delivery_lock_acquisitions, stats.staged);
            }
            assert_quiescent(&s);
            eprintln!("{st:?}: {stats:?}");
            sweep(pkts);
        }
    }
}
