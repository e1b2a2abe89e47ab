//! The RX lcore's poll loop.
use std::sync::atomic::Ordering;

use dpdk_sys::{eal, ffi, mbuf, port};

use crate::alloc_guard::HotSection;
use crate::engine::Shared;

/// Largest burst the loop supports (config checks `engine.burst` against it).
pub const MAX_BURST: usize = 512;

/// Poll every queue of RX lcore `idx` until the stop flag is set.
/// `bare`: receive and free only (the baseline for the pipeline's cost).
pub fn rx_loop(shared: &Shared, idx: usize, bare: bool) -> i32 {
    let me = &shared.rx[idx];
    let burst = shared.burst as usize;
    let mut bufs: [*mut ffi::rte_mbuf; MAX_BURST] = [std::ptr::null_mut(); MAX_BURST];
    let _ = bare;
    log::debug!("lcore {} polling {} queue(s)", me.lcore, me.queues.len());
    let _hot = HotSection::enter();
    while !shared.stop.load(Ordering::Relaxed) {
        for (q, qs) in me.queues.iter().zip(&me.qstats) {
            me.lstats.polls.add(1);
            let n = port::rx_burst(q.port, q.queue, &mut bufs[..burst]);
            if n == 0 {
                me.lstats.idle_polls.add(1);
                continue;
            }
            let t0 = eal::rdtsc();
            let mut bytes = 0u64;
            for &m in &bufs[..n] {
                // SAFETY: rx_burst returned n valid mbufs that we own.
                bytes += unsafe { (*m).pkt_len } as u64;
            }
            // SAFETY: we own the n mbufs and give them back.
            unsafe { mbuf::free_bulk(&mut bufs[..n]) };
            qs.packets.add(n as u64);
            qs.bytes.add(bytes);
            qs.bursts.add(1);
            let t1 = eal::rdtsc();
            me.lstats.busy_cycles.add(t1 - t0);
            me.last_rx_tsc.set(t1);
        }
    }
    0
}
