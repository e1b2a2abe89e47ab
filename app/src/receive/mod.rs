//! The receive heart: a datagram from the moment its socket is known to
//! its place in the socket's delivery ring. Pure Rust, generic over the
//! packet and the ring, and model-checked with loom (`--cfg loom`, see
//! `app/tests/loom_stage.rs`).
//!
//! This is the kernel's `__udp_enqueue_schedule_skb` after Eric Dumazet's
//! "udp: remove busylock and add per NUMA queues" (seeds/000), rebuilt
//! generically: the engine plugs in DPDK mbufs ([`PacketMeta`], link in the
//! mbuf private area), an `rte_ring` created single-producer as the
//! [`Sink`] (the delivery lock serialises its producers) and
//! `rte_pktmbuf_free_bulk` behind the `to_free` callback; tests and the
//! loom model plug in `testkit` (heap packets and a `VecDeque` sink, built
//! for the unit tests and with the `testkit` feature).
//!
//! The files, in reading order:
//! * [`sync`]: the atomics, cell and spinlock the protocol is made of,
//!   with their loom shims, and [`sync::CachePadded`].
//! * [`stage`]: the intrusive lock-free multi-producer stage (the kernel's
//!   `llist`); the push that finds it empty elects its producer.
//! * [`accounting`]: the memory meter (`rmem` against `rcvbuf`), the
//!   admission test, the drop reasons and the per-node counters (their
//!   cells' helpers are `crate::counters::stat`).
//! * this file: [`RxSocket`], one socket's receive side (its state, the
//!   consumer's release, close, and the [`SocketStats`] snapshot), and the
//!   two traits the engine implements, [`PacketMeta`] and [`Sink`].
//! * [`admission`]: the producer side: `enqueue` and its burst forms,
//!   rcvbuf admission and charging, the condense hook, the three enqueue
//!   strategies, and the election.
//! * [`drain`]: the elected producer moving its node's stage into the ring
//!   under one delivery-lock hold; an uncontended group going straight to
//!   the ring under the same critical section (nothing staged on its node,
//!   the lock free: the stage is for contention); and the drain of a
//!   closed socket.
//!
//! Outside this folder, the DPDK side: `crate::meta` (an mbuf as a
//! [`PacketMeta`], the `rte_ring` [`Sink`], and the free of a closed
//! socket's stages) and `crate::socket` (the engine socket around an
//! [`RxSocket`]).
//!
//! One verb per act: a producer *drains* a stage into the ring; the
//! consumer (`runtime::consumer`, or an application through `api`)
//! *consumes* the ring and releases what it freed.
//!
//! Latency hook: the engine stamps the TSC into the mbuf at RX; the natural
//! place to read it is the `Sink::enqueue_burst` implementation (the packet
//! enters the ring there, under the delivery lock) or the consumer at
//! dequeue. Nothing here reads clocks, so the model and unit tests stay
//! deterministic.

pub mod accounting;
pub mod admission;
pub mod drain;
pub mod stage;
pub mod sync;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

#[cfg(all(test, not(loom)))]
mod tests;

use core::ptr::NonNull;

use thiserror::Error;

use accounting::{DropReason, NodeCounters, SocketCounters, SocketMem};
use stage::{Stage, StagePacket};
use sync::{AtomicBool, AtomicUsize, CachePadded, Ordering, SpinLock};

use crate::counters::stat::{self, AtomicU64};

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
    /// returns its length (at most `pkts.len()`); the rest stay owned by
    /// the caller.
    ///
    /// # Safety
    /// Each pointer of `pkts` must be a live packet exclusively owned by
    /// the caller, on no stage or chain, listed once, and safe to hand to
    /// the consumer thread (it may be read, or freed, the instant the sink
    /// takes it). The caller gives up the accepted prefix: it must not
    /// touch those packets again.
    unsafe fn enqueue_burst(&mut self, pkts: &[NonNull<P>]) -> usize;
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeliveryError {
    #[error("a socket needs 1..={MAX_NODES} nodes, got {0}")]
    BadNodeCount(usize),
    #[error("unknown enqueue strategy {0:?} (expected numa-queues, busylock or direct)")]
    UnknownStrategy(String),
}

/// What [`RxSocket::new`] takes besides its sink. The engine fills it from
/// a socket's configuration (`config::SocketConf`) and the RX lcores' nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxSocketParams {
    /// Stages per socket: one per NUMA node the RX lcores run on.
    pub nodes: usize,
    /// Budget in bytes of truesize (SO_RCVBUF).
    pub rcvbuf: usize,
    /// Stamp each delivered packet with the drop count (SO_RXQ_OVFL). The
    /// snapshot sums every node's counters once per batch, so it costs
    /// reads of `nodes` remote lines; the kernel only does it when asked.
    pub drop_snapshot: bool,
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
    /// Batches a producer delivered straight from its group (the stage was
    /// empty and the lock free), without staging them.
    direct: AtomicU64,
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
    /// Of `batches`, those delivered straight from a producer's group
    /// (uncontended: nothing staged on its node, the lock free).
    pub direct_batches: u64,
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
    counters: SocketCounters,
    delivery: CachePadded<SpinLock<S>>,
    dstats: CachePadded<DeliveryStats>,
    busylock: CachePadded<SpinLock<()>>,
    busylock_acquisitions: CachePadded<AtomicU64>,
    closed_in_stage: AtomicU64,
}

impl<P: PacketMeta, S: Sink<P>> RxSocket<P, S> {
    pub fn new(params: RxSocketParams, sink: S) -> Result<Self, DeliveryError> {
        if params.nodes == 0 || params.nodes > MAX_NODES {
            return Err(DeliveryError::BadNodeCount(params.nodes));
        }
        Ok(Self {
            mem: SocketMem::new(params.rcvbuf),
            closed: AtomicBool::new(false),
            drop_snapshot: params.drop_snapshot,
            queues: (0..params.nodes)
                .map(|_| {
                    CachePadded(ProdQueue {
                        stage: Stage::new(),
                        rmem_alloc: AtomicUsize::new(0),
                    })
                })
                .collect(),
            counters: SocketCounters::new(params.nodes),
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

    /// The consumer freed a delivered packet of this truesize.
    #[inline]
    pub fn release(&self, truesize: u32) {
        self.mem.uncharge(truesize as usize);
    }

    /// Consumer-side access to the sink (for sinks without a lock-free
    /// consumer side, such as `testkit::VecSink`). Not counted in
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
            direct_batches: stat::read(&d.direct),
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
