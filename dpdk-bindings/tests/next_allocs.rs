//! `Mempool::next_allocs` against a real EAL and pool (no hugepages needed,
//! root needed; one test: one EAL per process): it lists the very mbufs,
//! in the very order, that the lcore's next allocations hand out, and
//! nothing for a thread that is not an lcore.
mod common;

use dpdk_sys::{Mbuf, Mempool};

#[test]
fn next_allocs_lists_what_the_next_allocations_take_in_order() {
    let _eal = common::one_lcore_eal("next-allocs");
    let mp = Mempool::new("ahead_pool", 511, 64, 0, 2176, 0).expect("pool");
    // Allocated and freed on this lcore: the frees fill its cache.
    let some: Vec<Mbuf> = (0..40).map(|_| mp.alloc().expect("mbuf")).collect();
    drop(some);
    let cached = mp.cached(0) as usize;
    assert!(
        cached >= 16,
        "frees left objects in lcore 0's cache ({cached})"
    );

    let mut listed = [std::ptr::null::<u8>(); 16];
    assert_eq!(mp.next_allocs(&mut listed), 16);
    let taken: Vec<Mbuf> = (0..16).map(|_| mp.alloc().expect("mbuf")).collect();
    for (i, (l, m)) in listed.iter().zip(&taken).enumerate() {
        assert_eq!(
            *l,
            m.as_ptr() as *const u8,
            "allocation {i} is not the one listed"
        );
    }
    drop(taken);

    // More asked for than the cache holds: the cache's objects only.
    let mut many = [std::ptr::null::<u8>(); 512];
    let n = mp.next_allocs(&mut many);
    assert_eq!(n, mp.cached(0) as usize);
    assert!(
        many[n..].iter().all(|p| p.is_null()),
        "nothing written past the count"
    );

    // A thread that is not an EAL lcore has no cache to look at.
    let other = std::thread::scope(|s| {
        s.spawn(|| {
            let mut out = [std::ptr::null::<u8>(); 8];
            mp.next_allocs(&mut out)
        })
        .join()
        .unwrap()
    });
    assert_eq!(other, 0);
}
