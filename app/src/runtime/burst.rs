//! Burst helpers of the RX paths (the pipeline and its floors) and of the
//! teardown that drains stages: the burst bound, bulk freeing, and the
//! PMD's checksum verdicts.
use dpdk_sys::mbuf::rx_cksum;

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
