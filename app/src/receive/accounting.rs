//! Per-socket receive memory accounting and per-node counters (offered,
//! staged, condensed, drops by reason).
//!
//! Mirrors the kernel's `sk_rmem_alloc` / `sk_rcvbuf` pair and
//! `numa_drop_counters`: memory is counted in bytes of buffer truesize,
//! charged before a packet becomes visible to the consumer and released
//! by the consumer once it has freed the packet.

use super::sync::{AtomicUsize, CachePadded, Ordering};
use crate::counters::stat::{self, AtomicU64};

/// Why a datagram was dropped by the receive side of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Refused on arrival: `rmem + truesize > rcvbuf` (the kernel's
    /// `SKB_DROP_REASON_SOCKET_RCVBUFF`, counted in `UdpRcvbufErrors`).
    RcvbufFull = 0,
    /// Admitted to a stage but over budget when the batch was drained,
    /// because other nodes' stages filled the socket meanwhile. The kernel
    /// drops these with `SKB_DROP_REASON_PROTO_MEM` and counts them in
    /// `UdpMemErrors`, not `UdpRcvbufErrors`, so they are kept apart.
    RcvbufFullAtDrain = 1,
    /// The delivery ring refused it (no kernel equivalent: the socket queue
    /// is an unbounded list there, bounded only by rcvbuf).
    RingFull = 2,
    /// The socket was closed or removed while the packet was on its way.
    Closed = 3,
}

impl DropReason {
    pub const COUNT: usize = 4;
    pub const ALL: [DropReason; Self::COUNT] = [
        Self::RcvbufFull,
        Self::RcvbufFullAtDrain,
        Self::RingFull,
        Self::Closed,
    ];

    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RcvbufFull => "rcvbuf_full",
            Self::RcvbufFullAtDrain => "rcvbuf_full_at_drain",
            Self::RingFull => "ring_full",
            Self::Closed => "closed",
        }
    }
}

/// The kernel's admission test (`__udp_enqueue_schedule_skb`, and
/// `__sock_rcvbuf_has_space`): refuse when `rmem + size > rcvbuf`, except
/// that an empty queue accepts one packet whatever its size, so a datagram
/// larger than the whole budget is not refused forever.
///
/// The kernel additionally refuses everything when `rcvbuf > INT_MAX / 2`
/// because its counters are `int` and wrap; ours are `usize`, so the sum is
/// checked instead and an overflowing sum counts as "no space".
#[inline]
pub fn has_space(rmem: usize, rcvbuf: usize, size: usize) -> bool {
    match rmem.checked_add(size) {
        Some(total) if total <= rcvbuf => true,
        _ => rmem == 0,
    }
}

/// A socket's memory meter: `rcvbuf` (budget), `rmem` (charged bytes, the
/// kernel's `sk_rmem_alloc`) and its high-water mark.
///
/// `rmem` sits on its own line: every producer reads it and drainers and
/// the consumer write it, so it must not share a line with the read-mostly
/// budget.
#[derive(Debug)]
pub struct SocketMem {
    rcvbuf: CachePadded<AtomicUsize>,
    rmem: CachePadded<AtomicUsize>,
    // Statistics only (see `counters::stat`).
    high_water: AtomicU64,
}

impl SocketMem {
    pub fn new(rcvbuf: usize) -> Self {
        Self {
            rcvbuf: CachePadded(AtomicUsize::new(rcvbuf)),
            rmem: CachePadded(AtomicUsize::new(0)),
            high_water: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf.load(Ordering::Relaxed)
    }

    /// SO_RCVBUF analogue; takes effect for the next admission decisions.
    pub fn set_rcvbuf(&self, bytes: usize) {
        self.rcvbuf.store(bytes, Ordering::Relaxed);
    }

    #[inline]
    pub fn rmem(&self) -> usize {
        self.rmem.load(Ordering::Relaxed)
    }

    /// Charges `size` bytes and returns the value before the charge.
    ///
    /// Relaxed is enough: a charge always happens before the packet is
    /// published to the consumer (ring/lock release), and the consumer
    /// releases only after it took the packet (acquire), so the matching
    /// subtraction is ordered after it in the counter's modification order.
    #[inline]
    pub fn charge(&self, size: usize) -> usize {
        self.rmem.fetch_add(size, Ordering::Relaxed)
    }

    /// Returns bytes charged by [`SocketMem::charge`].
    #[inline]
    pub fn uncharge(&self, size: usize) {
        let prev = self.rmem.fetch_sub(size, Ordering::Relaxed);
        debug_assert!(prev >= size, "rmem underflow: {prev} - {size}");
    }

    /// Records a candidate peak. Separate from `charge` so callers can
    /// report what was kept after refunds, not a transient overshoot.
    #[inline]
    pub fn note_high_water(&self, v: usize) {
        let v = v as u64;
        // Read first: the common case (no new peak) stays a shared read.
        if v > stat::read(&self.high_water) {
            self.high_water.fetch_max(v, stat::Ordering::Relaxed);
        }
    }

    pub fn high_water(&self) -> u64 {
        stat::read(&self.high_water)
    }
}

/// One node's counters, written by that node's lcores only (the kernel's
/// `numa_drop_counters`, extended with the other per-packet counters so a
/// producer never writes a line shared with another node).
#[derive(Debug, Default)]
pub struct NodeCounters {
    /// Every datagram handed to `enqueue` on this node.
    pub offered: AtomicU64,
    /// Passed admission: pushed onto the stage, or charged for the ring.
    pub staged: AtomicU64,
    /// Replaced by a smaller copy by the condense hook.
    pub condensed: AtomicU64,
    drops: [AtomicU64; DropReason::COUNT],
}

impl NodeCounters {
    #[inline]
    pub fn add_drop(&self, reason: DropReason, n: u64) {
        if let Some(c) = self.drops.get(reason.index()) {
            stat::add_shared(c, n);
        }
    }

    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.index()).map_or(0, stat::read)
    }

    pub fn drops_total(&self) -> u64 {
        self.drops.iter().map(stat::read).fold(0, u64::wrapping_add)
    }
}

/// All nodes' [`NodeCounters`] of one socket (offered, staged, condensed
/// and drops by reason), each node on its own lines.
#[derive(Debug)]
pub struct SocketCounters {
    nodes: Box<[CachePadded<NodeCounters>]>,
}

impl SocketCounters {
    /// `nodes` must be non-zero; the socket constructor checks it.
    pub fn new(nodes: usize) -> Self {
        Self {
            nodes: (0..nodes)
                .map(|_| CachePadded(NodeCounters::default()))
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// # Panics
    /// If `node >= len()`; callers index with a node already folded into
    /// range (see `RxSocket::node_index`).
    #[inline]
    pub fn node_at(&self, node: usize) -> &NodeCounters {
        &self.nodes[node]
    }

    pub fn node(&self, node: usize) -> Option<&NodeCounters> {
        self.nodes.get(node).map(|c| &c.0)
    }

    /// `sk_drops_read`: the sum over nodes. Approximate while producers run,
    /// which is all the per-batch drop snapshot needs.
    pub fn drop_count(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.drops_total())
            .fold(0, u64::wrapping_add)
    }

    pub fn drops(&self, reason: DropReason) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.drops(reason))
            .fold(0, u64::wrapping_add)
    }

    pub fn sum(&self, f: impl Fn(&NodeCounters) -> &AtomicU64) -> u64 {
        self.nodes
            .iter()
            .map(|n| stat::read(f(n)))
            .fold(0, u64::wrapping_add)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The names are part of the output formats (JSON, nstat, telemetry):
    /// each reason has its own, fixed, and they line up with `index`.
    #[test]
    fn drop_reason_names_are_fixed_and_distinct() {
        let names: Vec<&str> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            ["rcvbuf_full", "rcvbuf_full_at_drain", "ring_full", "closed"]
        );
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn socket_counters_have_one_line_per_node() {
        let d = SocketCounters::new(3);
        assert_eq!(d.len(), 3);
        assert!(!d.is_empty());
        assert!(d.node(2).is_some());
        assert!(d.node(3).is_none());
        assert!(SocketCounters::new(0).is_empty());
    }

    #[test]
    fn admission_matches_kernel() {
        // Fits exactly.
        assert!(has_space(100, 200, 100));
        // One byte over with a non-empty queue.
        assert!(!has_space(101, 200, 100));
        // Empty queue accepts a datagram bigger than the whole budget.
        assert!(has_space(0, 200, 4096));
        assert!(has_space(0, 0, 1));
        // Already over budget (other nodes overshot): refuse.
        assert!(!has_space(300, 200, 1));
        // Overflowing sum is "no space", not a wrap to a small number.
        assert!(!has_space(usize::MAX - 10, usize::MAX, 100));
    }

    #[test]
    fn charge_uncharge_and_high_water() {
        let m = SocketMem::new(1000);
        assert_eq!(m.charge(300), 0);
        assert_eq!(m.charge(200), 300);
        m.note_high_water(500);
        m.uncharge(300);
        assert_eq!(m.rmem(), 200);
        assert_eq!(m.high_water(), 500);
        m.note_high_water(m.charge(100) + 100);
        assert_eq!(m.high_water(), 500, "300 is below the old peak");
    }

    #[test]
    fn socket_counters_per_node_and_sum() {
        let d = SocketCounters::new(2);
        d.node(0).unwrap().add_drop(DropReason::RcvbufFull, 3);
        d.node(1).unwrap().add_drop(DropReason::RingFull, 2);
        d.node(1).unwrap().add_drop(DropReason::RcvbufFull, 1);
        assert_eq!(d.drop_count(), 6);
        assert_eq!(d.drops(DropReason::RcvbufFull), 4);
        assert_eq!(d.node(1).unwrap().drops(DropReason::RingFull), 2);
        assert!(d.node(2).is_none());
        let addr0 = d.node(0).unwrap() as *const NodeCounters as usize;
        let addr1 = d.node(1).unwrap() as *const NodeCounters as usize;
        assert!(addr1.abs_diff(addr0) >= 128, "nodes must not share lines");
    }
}
