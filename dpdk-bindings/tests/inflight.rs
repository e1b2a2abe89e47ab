//! The in-flight record (`dpdk_sys::inflight`) against a real EAL, ring
//! and pool (no hugepages needed, root needed; one test: one EAL per
//! process). A "dead owner" is the owner's state forgotten at a step: the
//! burst it held is dropped without freeing (`take_raw`), as a SIGKILL
//! would leave it, and the reaper's `reclaim` must give back exactly the
//! mbufs the row recorded.
mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys::inflight::{Orphan, Row, MBUFS, PENDING, ROW_MBUFS, ROW_WORDS, STATE};
use dpdk_sys::{ring, MbufBurst, MbufRing, Mempool};

fn fill(ring: &MbufRing, mp: &Mempool, n: usize) -> Vec<usize> {
    let mut b: MbufBurst<64> = MbufBurst::new();
    for _ in 0..n {
        b.push(mp.alloc().expect("mbuf")).unwrap();
    }
    let ptrs: Vec<usize> = b.iter().map(|m| m.as_ptr() as usize).collect();
    assert_eq!(ring.enqueue(&mut b), n);
    ptrs
}

#[test]
fn a_dead_owners_row_gives_back_exactly_what_it_held() {
    let _eal = common::one_lcore_eal("inflight");
    let mp = Mempool::new("inflight_pool", 511, 0, 64, 2176, 0).expect("pool");
    let ring = MbufRing::create("inflight_ring", 1024, 0, ring::SP_ENQ).expect("ring");
    let words: Vec<AtomicU64> = (0..ROW_WORDS).map(|_| AtomicU64::new(0)).collect();
    let row = Row::new(&words).unwrap();
    let full = mp.avail();

    // A free row: nothing, and the ring is left alone.
    let mut got: MbufBurst<ROW_MBUFS> = MbufBurst::new();
    fill(&ring, &mp, 5);
    // SAFETY: no owner ever wrote the row; the ring has no other consumer.
    assert_eq!(unsafe { row.reclaim(&ring, &mut got) }, Orphan::Nothing);
    assert!(got.is_empty());
    assert_eq!(ring.count(), 5);

    // Held: the owner took 5 and died holding them.
    assert!(row.claim(42));
    assert!(!row.claim(43), "one owner at a time");
    assert_eq!(row.owner(), 42);
    let mut held: MbufBurst<64> = MbufBurst::new();
    assert_eq!(row.take(&ring, &mut held, 64), 5);
    let ptrs: Vec<usize> = held.iter().map(|m| m.as_ptr() as usize).collect();
    held.take_raw();
    assert_eq!(mp.avail(), full - 5, "the dead owner's mbufs are out");
    // SAFETY: owner 42 "died" above; the ring has no other consumer.
    assert_eq!(unsafe { row.reclaim(&ring, &mut got) }, Orphan::Held);
    let back: Vec<usize> = got.iter().map(|m| m.as_ptr() as usize).collect();
    assert_eq!(back, ptrs, "exactly the mbufs it took, in order");
    assert_eq!(row.owner(), 0, "the row is free again");
    got.clear();
    assert_eq!(mp.avail(), full);

    // Freeing: the owner began to free 3 with its totals-to-be, and died.
    fill(&ring, &mp, 3);
    assert!(row.claim(7));
    assert_eq!(row.take(&ring, &mut held, 64), 3);
    row.begin_free([10, 20, 30]);
    held.take_raw();
    // SAFETY: as above.
    let o = unsafe { row.reclaim(&ring, &mut got) };
    assert_eq!(o, Orphan::Freeing { user: [10, 20, 30] });
    assert_eq!(got.len(), 3, "the caller decides whether to free them");
    got.clear();
    assert_eq!(mp.avail(), full);

    // Pending: the owner recorded its intent, the dequeue wrote 4 pointers
    // into the row and moved the ring's tail, and the owner died before
    // it stored HELD (done here by hand, as `take` does it).
    let ptrs = fill(&ring, &mp, 6);
    assert!(row.claim(11));
    let (head, tail) = ring.consumer_positions();
    assert_eq!(head, tail);
    words[STATE].store(PENDING | u64::from(head), Ordering::SeqCst);
    let mut taken: MbufBurst<4> = MbufBurst::new();
    assert_eq!(ring.dequeue(&mut taken, 4), 4);
    for (i, m) in taken.iter().enumerate() {
        words[MBUFS + i].store(m.as_ptr() as u64, Ordering::SeqCst);
    }
    taken.take_raw();
    // SAFETY: as above.
    assert_eq!(unsafe { row.reclaim(&ring, &mut got) }, Orphan::Held);
    let back: Vec<usize> = got.iter().map(|m| m.as_ptr() as usize).collect();
    assert_eq!(back, ptrs[..4], "what the tail moved past since the intent");
    got.clear();
    assert_eq!(ring.count(), 2, "the rest stay in the ring");
    // Pending, but dead before the dequeue moved the ring: nothing taken.
    assert!(row.claim(12));
    let (head, _) = ring.consumer_positions();
    words[STATE].store(PENDING | u64::from(head), Ordering::SeqCst);
    words[MBUFS].store(ptrs[4] as u64, Ordering::SeqCst);
    // SAFETY: as above.
    assert_eq!(unsafe { row.reclaim(&ring, &mut got) }, Orphan::Nothing);
    assert!(
        got.is_empty(),
        "a pointer the tail did not pass is the ring's"
    );
    assert_eq!(ring.count(), 2);
    let mut rest: MbufBurst<4> = MbufBurst::new();
    assert_eq!(ring.dequeue(&mut rest, 4), 2);
    rest.clear();
    assert_eq!(mp.avail(), full);

    // A clean cycle leaves the row free and nothing to reclaim.
    fill(&ring, &mp, 2);
    assert!(row.claim(9));
    assert_eq!(row.take(&ring, &mut held, 64), 2);
    row.begin_free([0; 3]);
    held.clear();
    row.end_free();
    row.unclaim();
    // SAFETY: as above.
    assert_eq!(unsafe { row.reclaim(&ring, &mut got) }, Orphan::Nothing);
    assert_eq!(mp.avail(), full);
    assert_eq!(ring.count(), 0);
}
