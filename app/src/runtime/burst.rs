//! Burst helpers of the RX paths (the pipeline and its floors) and of the
//! teardown that drains stages: the burst bound, bulk freeing, and the
//! PMD's checksum verdicts.
use dpdk_sys::{ffi, mbuf};

use crate::parse::{CsumHint, Offload};

/// Largest burst the loop supports (config checks `engine.burst` against it).
pub const MAX_BURST: usize = 512;

/// mbufs to free, flushed with one `rte_pktmbuf_free_bulk` per 64.
pub struct FreeList {
    bufs: [*mut ffi::rte_mbuf; 64],
    n: usize,
}

impl Default for FreeList {
    fn default() -> Self {
        FreeList {
            bufs: [std::ptr::null_mut(); 64],
            n: 0,
        }
    }
}

impl FreeList {
    #[inline(always)]
    pub fn push(&mut self, m: *mut ffi::rte_mbuf) {
        if self.n == self.bufs.len() {
            self.flush();
        }
        self.bufs[self.n] = m;
        self.n += 1;
    }
    #[inline]
    pub fn flush(&mut self) {
        // SAFETY: every pointer pushed is an mbuf whose ownership the pusher gave up.
        unsafe { mbuf::free_bulk(&mut self.bufs[..self.n]) };
        self.n = 0;
    }
}

impl Drop for FreeList {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Checksum verdicts the PMD left in `ol_flags` (22.11 semantics: GOOD,
/// BAD, NONE = header valid but checksum field not filled, UNKNOWN).
#[inline(always)]
pub fn offload_hints(ol: u64) -> Offload {
    let ip = match ol & ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK {
        ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD | ffi::RTE_MBUF_F_RX_IP_CKSUM_NONE => CsumHint::Good,
        ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD => CsumHint::Bad,
        _ => CsumHint::Unknown,
    };
    let l4 = match ol & ffi::RTE_MBUF_F_RX_L4_CKSUM_MASK {
        ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD | ffi::RTE_MBUF_F_RX_L4_CKSUM_NONE => CsumHint::Good,
        ffi::RTE_MBUF_F_RX_L4_CKSUM_BAD => CsumHint::Bad,
        _ => CsumHint::Unknown,
    };
    Offload { ip, l4 }
}
