//! loom model of the real stage/election/drain/release code (not a copy).
//!
//! Run: `bash scripts/loom.sh` (from the workspace root).
//! `LOOM_MAX_PREEMPTIONS` overrides the default preemption bound of 2.
//!
//! Three producers on two nodes (two share node 0, so one can be elected
//! while the other pushes behind it) and a consumer that takes from the
//! sink and releases concurrently. Checked in every interleaving: each
//! packet ends exactly once (consumed, or freed with a counted reason),
//! nothing is left on a stage after all threads joined, the socket and
//! node meters return to zero, and the counters balance.
#![cfg(loom)]

use std::ptr::NonNull;

use loom::sync::Arc;
use loom::thread;

use udpdemux::receive::admission::{NoCondense, Strategy, Verdict};
use udpdemux::receive::testkit::{
    self, consume_one, free_once as free, HeapPacket, SendPtr, VecSink,
};
use udpdemux::receive::{RxSocket, RxSocketParams, SocketStats};

type Sock = RxSocket<HeapPacket, VecSink<HeapPacket>>;

/// A socket on two nodes with budget `rcvbuf` and a ring of `ring`.
fn new_sock(rcvbuf: usize, ring: usize) -> Arc<Sock> {
    Arc::new(
        RxSocket::new(
            RxSocketParams {
                nodes: 2,
                rcvbuf,
                drop_snapshot: true,
            },
            VecSink::with_capacity(ring),
        )
        .unwrap(),
    )
}

/// Every packet ended exactly once; frees them.
fn sweep(pkts: Vec<NonNull<HeapPacket>>, st: &SocketStats) {
    // SAFETY: called after every model thread joined.
    unsafe { testkit::sweep(pkts, st) };
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    // Spin-waits on the delivery lock are branch points each time round.
    b.max_branches = std::env::var("LOOM_MAX_BRANCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    b
}

/// `rcvbuf` and `ring` choose which drop paths the model can reach.
fn model(strategy: Strategy, rcvbuf: usize, ring: usize) {
    builder().check(move || {
        let s = new_sock(rcvbuf, ring);
        let pkts: Vec<NonNull<HeapPacket>> = (0..3).map(|i| HeapPacket::alloc(i, 100)).collect();
        let producers: Vec<_> = pkts
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let s = Arc::clone(&s);
                let p = SendPtr(p);
                // Producers 0 and 1 on node 0, producer 2 on node 1.
                let node = usize::from(i == 2);
                thread::spawn(move || {
                    let p = p;
                    // SAFETY: each packet is enqueued once.
                    unsafe { s.enqueue(node, p.0, strategy, &mut NoCondense, &mut free) }
                })
            })
            .collect();
        let consumer = {
            let s = Arc::clone(&s);
            thread::spawn(move || consume_one(&s))
        };
        let verdicts: Vec<Verdict> = producers.into_iter().map(|h| h.join().unwrap()).collect();
        consumer.join().unwrap();
        while consume_one(&s) {}

        for n in 0..2 {
            assert_eq!(
                s.stage_is_empty(n),
                Some(true),
                "stranded on node {n}: {verdicts:?}"
            );
            assert_eq!(s.node_rmem(n), Some(0));
        }
        assert_eq!(s.rmem(), 0, "socket meter not back to zero");
        let st = s.stats();
        assert_eq!(st.offered, 3);
        assert!(st.books_balance(), "{st:?}");
        assert_eq!(st.closed_in_stage, 0);
        if strategy == Strategy::NumaQueues {
            // Every lock hold by a producer drained exactly one batch.
            assert_eq!(st.batches, st.delivery_lock_acquisitions);
            assert_eq!(st.batch_pkts, st.staged);
        }
        for p in pkts {
            // SAFETY: all threads joined; nothing refers to the packet.
            unsafe {
                assert_eq!(
                    HeapPacket::get(p).fates(),
                    1,
                    "lost or doubled: {verdicts:?} {st:?}"
                );
                HeapPacket::dealloc(p);
            }
        }
    });
}

#[test]
fn numa_queues_roomy() {
    model(Strategy::NumaQueues, 1 << 20, 8);
}

/// Budget of two packets and a ring of two: admission drops, drain-time
/// drops (two nodes overshoot together) and ring-full drops are reachable.
#[test]
fn numa_queues_tight() {
    model(Strategy::NumaQueues, 200, 2);
}

#[test]
fn busylock_tight() {
    model(Strategy::Busylock, 200, 2);
}

#[test]
fn direct_tight() {
    model(Strategy::Direct, 200, 1);
}

/// The RX lcore's burst mode: `enqueue_deferred` elects without draining and
/// the producer drains after its whole burst. Producer 0 stages a burst of
/// two on node 0 while producer 1 pushes one more onto the same node and a
/// consumer runs: nothing is stranded, nothing lost or doubled, and the
/// elected producer's single drain picks up the other producer's packet.
#[test]
fn numa_queues_deferred_burst() {
    builder().check(|| {
        let s = new_sock(1 << 20, 8);
        let pkts: Vec<NonNull<HeapPacket>> = (0..3).map(|i| HeapPacket::alloc(i, 100)).collect();
        let burst = |s: Arc<Sock>, ps: Vec<SendPtr<HeapPacket>>| {
            thread::spawn(move || {
                let mut elected = false;
                for p in ps {
                    // SAFETY: each packet is enqueued once.
                    let v = unsafe {
                        s.enqueue_deferred(0, p.0, Strategy::NumaQueues, &mut NoCondense, &mut free)
                    };
                    elected |= v == Verdict::Elected;
                }
                if elected {
                    s.drain(0, &mut free);
                }
                elected
            })
        };
        let a = burst(Arc::clone(&s), vec![SendPtr(pkts[0]), SendPtr(pkts[1])]);
        let b = burst(Arc::clone(&s), vec![SendPtr(pkts[2])]);
        let consumer = {
            let s = Arc::clone(&s);
            thread::spawn(move || consume_one(&s))
        };
        let (ea, eb) = (a.join().unwrap(), b.join().unwrap());
        consumer.join().unwrap();
        while consume_one(&s) {}
        assert!(ea || eb, "someone must have been elected");
        assert_eq!(
            s.stage_is_empty(0),
            Some(true),
            "stranded (elected a={ea} b={eb})"
        );
        assert_eq!(s.node_rmem(0), Some(0));
        assert_eq!(s.rmem(), 0);
        let st = s.stats();
        assert_eq!(st.offered, 3);
        assert!(st.books_balance(), "{st:?}");
        assert_eq!(st.batches, st.delivery_lock_acquisitions);
        sweep(pkts, &st);
    });
}

/// Burst-wise admission and staging (`enqueue_batch_deferred`, the kernel's
/// `llist_add_batch`): producer 0 pushes a group of two and producer 1 a
/// group of one onto the same node while a consumer runs; each drains if
/// its push found the stage empty. A group that finds its node's stage
/// empty and the delivery lock free goes straight to the ring instead, so
/// the model also interleaves that path with pushes, elections and drains. Checked: nothing stranded, lost or
/// doubled; exactly one drain per election and every drain takes at least
/// one packet (an election is never spent on an empty stage); memory back
/// to zero. Roomy: both groups on one node, so one may be pushed behind the
/// other's election. Tight (`rcvbuf` 200, ring 2, the second group on the
/// other node): admission, drain-time and ring-full drops are reachable.
fn batch_model(rcvbuf: usize, ring: usize, node_b: usize) {
    builder().check(move || {
        let s = new_sock(rcvbuf, ring);
        let pkts: Vec<NonNull<HeapPacket>> = (0..3).map(|i| HeapPacket::alloc(i, 100)).collect();
        let group = |s: Arc<Sock>, node: usize, ps: Vec<SendPtr<HeapPacket>>| {
            thread::spawn(move || {
                let ps: Vec<NonNull<HeapPacket>> = ps.into_iter().map(|p| p.0).collect();
                // SAFETY: each packet is in one group, enqueued once.
                let elected = unsafe {
                    s.enqueue_batch_deferred(
                        node,
                        &ps,
                        Strategy::NumaQueues,
                        &mut NoCondense,
                        &mut free,
                    )
                };
                if elected {
                    let out = s.drain(node, &mut free);
                    assert!(out.taken >= 1, "an elected drain found the stage empty");
                }
                elected
            })
        };
        let a = group(Arc::clone(&s), 0, vec![SendPtr(pkts[0]), SendPtr(pkts[1])]);
        let b = group(Arc::clone(&s), node_b, vec![SendPtr(pkts[2])]);
        let consumer = {
            let s = Arc::clone(&s);
            thread::spawn(move || consume_one(&s))
        };
        let (ea, eb) = (a.join().unwrap(), b.join().unwrap());
        consumer.join().unwrap();
        while consume_one(&s) {}
        let st = s.stats();
        for n in 0..2 {
            assert_eq!(
                s.stage_is_empty(n),
                Some(true),
                "stranded on {n} (elected a={ea} b={eb}) {st:?}"
            );
            assert_eq!(s.node_rmem(n), Some(0));
        }
        assert_eq!(s.rmem(), 0);
        assert_eq!(st.offered, 3);
        assert!(st.books_balance(), "{st:?}");
        // One drain per election: an election nobody honours would strand
        // packets, two drainers per election would mean "was empty" lied.
        // The other batches went straight to the ring (uncontended groups).
        assert_eq!(
            st.batches - st.direct_batches,
            u64::from(ea) + u64::from(eb),
            "{st:?}"
        );
        assert_eq!(st.batches, st.delivery_lock_acquisitions);
        assert_eq!(st.batch_pkts, st.staged);
        sweep(pkts, &st);
    });
}

#[test]
fn numa_queues_batch_roomy() {
    batch_model(1 << 20, 8, 0);
}

#[test]
fn numa_queues_batch_tight() {
    batch_model(200, 2, 1);
}

/// Takes one packet from the sink as the consumer does; its id.
fn pop_id(s: &Sock) -> Option<u32> {
    let p = s.with_sink(|k| k.pop())?;
    // SAFETY: live until the model's final sweep.
    let h = unsafe { HeapPacket::get(p) };
    assert_eq!(h.mark_done(), 0, "consumed a freed packet");
    s.release(h.truesize());
    Some(h.id)
}

/// One producer's order across bursts, with the direct path: producer 0
/// hands node 0 two groups in successive bursts (draining after a burst
/// whose push elected it, as the RX lcore does), producer 1 one group on
/// the same node, a consumer pops concurrently. Whichever way each group
/// goes (straight to the ring, staged behind an election, or elected),
/// packet 0 reaches the ring before packet 1, and nothing is stranded.
#[test]
fn numa_queues_batch_order() {
    builder().check(|| {
        let s = new_sock(1 << 20, 8);
        let pkts: Vec<NonNull<HeapPacket>> = (0..3).map(|i| HeapPacket::alloc(i, 100)).collect();
        let bursts = |s: Arc<Sock>, groups: Vec<SendPtr<HeapPacket>>| {
            thread::spawn(move || {
                for g in groups {
                    // SAFETY: each packet is in one group, enqueued once.
                    let elected = unsafe {
                        s.enqueue_batch_deferred(
                            0,
                            &[g.0],
                            Strategy::NumaQueues,
                            &mut NoCondense,
                            &mut free,
                        )
                    };
                    if elected {
                        s.drain(0, &mut free);
                    }
                }
            })
        };
        let a = bursts(Arc::clone(&s), vec![SendPtr(pkts[0]), SendPtr(pkts[1])]);
        let b = bursts(Arc::clone(&s), vec![SendPtr(pkts[2])]);
        let consumer = {
            let s = Arc::clone(&s);
            thread::spawn(move || pop_id(&s))
        };
        a.join().unwrap();
        b.join().unwrap();
        let mut order: Vec<u32> = consumer.join().unwrap().into_iter().collect();
        while let Some(id) = pop_id(&s) {
            order.push(id);
        }
        let at = |id: u32| order.iter().position(|&x| x == id);
        assert!(
            at(0) < at(1),
            "producer 0's packets out of order: {order:?}"
        );
        assert_eq!(order.len(), 3, "roomy: all delivered: {order:?}");
        assert_eq!(s.stage_is_empty(0), Some(true), "stranded");
        assert_eq!(s.node_rmem(0), Some(0));
        assert_eq!(s.rmem(), 0);
        let st = s.stats();
        assert!(st.books_balance(), "{st:?}");
        for p in pkts {
            // SAFETY: all threads joined; consumed exactly once above.
            unsafe {
                assert_eq!(HeapPacket::get(p).fates(), 1);
                HeapPacket::dealloc(p);
            }
        }
    });
}
