//! Burst helpers of the RX paths (the pipeline and its floors) and of the
//! teardown that drains stages: the burst bound, bulk freeing, the PMD's
//! checksum verdicts, and the next burst's mbufs asked for ahead.
use dpdk_sys::mbuf::rx_cksum;
use dpdk_sys::Mempool;

use crate::parse::{CsumHint, Offload};

/// mbufs to free, flushed with one `rte_pktmbuf_free_bulk` per 64.
pub use dpdk_sys::mbuf::FreeList;

/// Largest burst the loop supports (config checks `engine.burst` against it).
pub const MAX_BURST: usize = 512;

/// Checksum verdicts the PMD left in `ol_flags` (22.11 semantics: GOOD,
/// BAD, NONE = header valid but checksum field not filled, UNKNOWN).
#[inline(always)]
pub fn offload_hints(ol: u64) -> Offload {
    let ip = match ol & rx_cksum::IP_MASK {
        rx_cksum::IP_GOOD | rx_cksum::IP_NONE => CsumHint::Good,
        rx_cksum::IP_BAD => CsumHint::Bad,
        _ => CsumHint::Unknown,
    };
    let l4 = match ol & rx_cksum::L4_MASK {
        rx_cksum::L4_GOOD | rx_cksum::L4_NONE => CsumHint::Good,
        rx_cksum::L4_BAD => CsumHint::Bad,
        _ => CsumHint::Unknown,
    };
    Offload { ip, l4 }
}

/// Where the PMD writes in each mbuf it takes from the pool, as byte
/// offsets from the mbuf: its two lines (`rte_pktmbuf_reset`, the lengths,
/// the port) and the first line of its data (the frame's headers), which
/// starts after the struct, the private area and the headroom. The
/// consumer's free read the struct lines on its CPU, so each store of the
/// PMD to them waits for that CPU to give them up; asked for a burst ahead
/// (`engine.rx_prefetch_ahead`), they arrive while the current burst is
/// parsed and delivered: 1.07-1.16x received on the pipeline's benchmark
/// config, each figure measured in one run (the prefetch on and off every
/// 2^27 cycles, `engine.rx_prefetch_alternate`; 14 runs on an AMD EPYC VM).
/// The frame's second line is left to the PMD's copy: asked for as well, it
/// took fill buffers the struct lines wait for (three lines against four,
/// 1.06x in one run against the floor, 6 alternating pairs, 6 higher, on
/// the Intel Xeon host; without either struct line 0.87x, without the data
/// line 0.98x).
pub const ALLOC_AHEAD: [usize; 3] = {
    let data = dpdk_sys::mbuf::MBUF_SIZE
        + crate::meta::PRIV_SIZE as usize
        + dpdk_sys::mbuf::HEADROOM as usize;
    [0, 64, data]
};

/// The mbufs the PMD's next refill will take (the top of this lcore's
/// cache of the RX pool), whose [`ALLOC_AHEAD`] lines the RX lcore asks
/// for, for writing, one mbuf's for each packet its parse pass takes
/// ([`AllocAhead::step`]), the rest when the burst ends
/// ([`AllocAhead::finish`]).
///
/// Why a little at a time: the lines are on the consumer's CPU, and a
/// write prefetch that finds every fill buffer taken waits for one. Asked
/// for all at once (then four lines an mbuf, 128 for a burst of 32), the
/// RX lcore sat on the prefetches (19 of its 91 ns a datagram on the
/// prefetch loop, `scripts/hotspots.sh` on the pipeline config); one mbuf
/// a parsed packet lets the parse run while they arrive: 1.07-1.10x
/// delivered in one run against the floor (`--alternate-floor pipeline`,
/// 8 and 6 alternating pairs, each higher; docs/benchmarks.md).
pub struct AllocAhead {
    objs: [*const u8; MAX_BURST],
    /// Listed in `objs`.
    len: usize,
    /// The next of them to ask for.
    next: usize,
}

impl Default for AllocAhead {
    fn default() -> Self {
        AllocAhead {
            objs: [std::ptr::null(); MAX_BURST],
            len: 0,
            next: 0,
        }
    }
}

impl AllocAhead {
    /// Lists the next `n` mbufs `pool`'s cache of this lcore hands out
    /// (what the last burst's were not asked for is dropped: the PMD has
    /// taken them), less the `own` this lcore is expected to free before
    /// the PMD's next refill: those go on top of the cache, and the refill
    /// takes them first, lines this CPU has just touched. `own` is what the
    /// last burst freed here (its drops, or all of it under `--demux-only`):
    /// asking for mbufs the refill does not take only takes fill buffers
    /// from the lookups (1 000 000 bindings, `--demux-only`, which frees all
    /// it receives: 0.98-0.99x the ns a datagram without those prefetches,
    /// about what two builds' layouts differ by).
    #[inline]
    pub fn fill(&mut self, pool: &Mempool, n: usize, own: usize) {
        let n = n.saturating_sub(own).min(MAX_BURST);
        self.len = if n == 0 { 0 } else { pool.next_allocs(&mut self.objs[..n]) };
        self.next = 0;
    }

    /// Asks for the next listed mbuf's lines.
    #[inline(always)]
    pub fn step(&mut self) {
        if let Some(&o) = self.objs[..self.len].get(self.next) {
            dpdk_sys::prefetch::prefetch_w_each(std::iter::once(o), &ALLOC_AHEAD);
            self.next += 1;
        }
    }

    /// Asks for every listed mbuf's lines not asked for yet.
    #[inline]
    pub fn finish(&mut self) {
        if self.next < self.len {
            let rest = &self.objs[self.next..self.len];
            dpdk_sys::prefetch::prefetch_w_each(rest.iter().copied(), &ALLOC_AHEAD);
            self.next = self.len;
        }
    }
}
