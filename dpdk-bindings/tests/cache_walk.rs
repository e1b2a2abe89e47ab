//! `mempool::cache_walk` against a real EAL and pool (no hugepages needed,
//! root needed; one test: one EAL per process): a flush gives back exactly
//! what the lcore's cache held, each object once; a discard forgets it.
mod common;

use std::collections::HashSet;

use dpdk_sys::mempool::{cache_walk, CacheOp};
use dpdk_sys::{Mbuf, Mempool};

/// Allocate every free mbuf: their addresses (all distinct, or it panics).
fn drain(mp: &Mempool) -> Vec<Mbuf> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    while let Some(m) = mp.alloc() {
        assert!(seen.insert(m.as_ptr() as usize), "an mbuf came out twice");
        all.push(m);
    }
    all
}

#[test]
fn a_flush_gives_the_cache_back_once_and_a_discard_forgets_it() {
    let _eal = common::one_lcore_eal("cache-walk");
    let mp = Mempool::new("walk_pool", 511, 64, 0, 2176, 0).expect("pool");
    let full = mp.avail();
    assert_eq!(full, 511);
    // Every mbuf allocated and freed on this lcore: some stay in its cache.
    let all = drain(&mp);
    assert_eq!(all.len() as u32, full);
    drop(all);
    let cached = mp.cached(0);
    assert!(cached > 0, "frees left objects in lcore 0's cache");
    // SAFETY: this thread is lcore 0, the only user of its caches.
    let n = unsafe { cache_walk(0, CacheOp::Flush) };
    assert_eq!(n, u64::from(cached));
    assert_eq!(mp.cached(0), 0);
    assert_eq!(mp.avail(), full, "flushed objects are still free");
    let all = drain(&mp);
    assert_eq!(all.len() as u32, full, "every object once");
    drop(all);
    let cached = mp.cached(0);
    assert!(cached > 0);
    // SAFETY: as above.
    let n = unsafe { cache_walk(0, CacheOp::Discard) };
    assert_eq!(n, u64::from(cached));
    assert_eq!(mp.cached(0), 0);
    assert_eq!(mp.avail(), full - cached, "a discard forgets the cache");
    let all = drain(&mp);
    assert_eq!(all.len() as u32, full - cached);
    drop(all);
    // SAFETY: no lcore has that id.
    assert_eq!(unsafe { cache_walk(500, CacheOp::Flush) }, 0);
}
