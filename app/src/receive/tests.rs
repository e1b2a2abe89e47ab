//! Unit tests of [`RxSocket`](super::RxSocket) over the heap-packet test
//! kit: admission, election, drain, release and close, for every strategy.

use core::ptr::NonNull;

use super::accounting::DropReason;
use super::admission::{Condense, NoCondense, Strategy, Verdict};
use super::drain::{BatchOutcome, DRAIN_BURST};
use super::testkit::{
    self, consume_all as consume, free_once as free, HeapPacket, SendPtr, ShrinkTo, VecSink,
};
use super::{DeliveryError, RxSocket, RxSocketParams, SocketStats};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Sock = RxSocket<HeapPacket, VecSink<HeapPacket>>;

const TS: u32 = 100;

fn sock(nodes: usize, rcvbuf: usize, ring: usize) -> Sock {
    RxSocket::new(
        RxSocketParams {
            nodes,
            rcvbuf,
            drop_snapshot: true,
        },
        VecSink::with_capacity(ring),
    )
    .unwrap()
}

fn enq(s: &Sock, node: usize, p: NonNull<HeapPacket>, st: Strategy) -> Verdict {
    // SAFETY: each test packet is enqueued exactly once.
    unsafe { s.enqueue(node, p, st, &mut NoCondense, &mut free) }
}

/// Every packet has exactly one fate; frees them.
fn sweep(pkts: Vec<NonNull<HeapPacket>>) {
    // SAFETY: every test calls this after its threads joined.
    unsafe { testkit::sweep(pkts, &"unit test") };
}

fn assert_quiescent(s: &Sock) {
    for n in 0..s.nodes() {
        assert_eq!(s.stage_is_empty(n), Some(true), "stranded on node {n}");
        assert_eq!(s.node_rmem(n), Some(0));
    }
    assert_eq!(s.rmem(), 0);
    let st = s.stats();
    assert!(st.books_balance(), "{st:?}");
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// The accessors report what was set, and node ids beyond the stage
/// count fold onto a stage (id % nodes) instead of being refused.
#[test]
fn accessors_and_node_ids_folding_onto_stages() {
    let s = sock(3, 10 * TS as usize, 64);
    assert_eq!(s.nodes(), 3);
    assert_eq!(s.rcvbuf(), 10 * TS as usize);
    s.set_rcvbuf(7 * TS as usize);
    assert_eq!(s.rcvbuf(), 7 * TS as usize);
    assert!(!s.is_closed());
    let pkts: Vec<_> = (0..8).map(|i| HeapPacket::alloc(i, TS)).collect();
    // (node id, the stage it must land on): in range, == nodes, beyond.
    for (i, (node, stage)) in [(1, 1), (3, 0), (4, 1), (5, 2)].into_iter().enumerate() {
        // SAFETY: each packet is enqueued exactly once.
        let v = unsafe {
            s.enqueue_deferred(
                node,
                pkts[i],
                Strategy::NumaQueues,
                &mut NoCondense,
                &mut free,
            )
        };
        assert_eq!(v, Verdict::Elected, "node {node}");
        for n in 0..3 {
            assert_eq!(
                s.stage_is_empty(n),
                Some(n != stage),
                "node {node}: stage {n}"
            );
        }
        assert_eq!(s.drain(node, &mut free).delivered, 1, "node {node}");
        assert_eq!(s.stage_is_empty(stage), Some(true));
    }
    assert_eq!(consume(&s), 4);
    assert_eq!(s.drop_count(), 0);
    // Over budget: every drop shows in drop_count.
    s.set_rcvbuf(TS as usize);
    let mut dropped = 0;
    for &p in &pkts[4..7] {
        if let Verdict::Dropped(_) = enq(&s, 0, p, Strategy::NumaQueues) {
            dropped += 1;
        }
    }
    assert!(dropped >= 1);
    assert_eq!(s.drop_count(), dropped);
    consume(&s);
    s.close();
    assert!(s.is_closed());
    assert_eq!(
        enq(&s, 2, pkts[7], Strategy::NumaQueues),
        Verdict::Dropped(DropReason::Closed)
    );
    assert_eq!(s.drop_count(), dropped + 1);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn books_balance_needs_every_offered_packet_accounted() {
    let mut st = SocketStats {
        offered: 3,
        delivered: 1,
        ..SocketStats::default()
    };
    assert!(!st.books_balance(), "one packet unaccounted");
    st.drops[DropReason::RcvbufFull.index()] = 1;
    assert!(!st.books_balance());
    st.drops[DropReason::RingFull.index()] = 1;
    assert!(st.books_balance());
    assert_eq!(st.drops_total(), 2);
    assert_eq!(st.rcvbuf_errors(), 1);
}

/// A drain hands the ring full bursts of DRAIN_BURST, never one packet
/// at a time, and never an empty burst.
#[test]
fn drain_hands_the_ring_bursts_of_drain_burst() {
    let n = DRAIN_BURST + DRAIN_BURST / 2;
    let s = sock(1, n * TS as usize, 2 * n);
    let pkts: Vec<_> = (0..n as u32).map(|i| HeapPacket::alloc(i, TS)).collect();
    for &p in &pkts {
        // SAFETY: each packet is enqueued exactly once.
        unsafe { s.enqueue_deferred(0, p, Strategy::NumaQueues, &mut NoCondense, &mut free) };
    }
    let out = s.drain(0, &mut free);
    assert_eq!(out.delivered as usize, n);
    let (max, calls) = s.with_sink(|k| (k.max_burst, k.calls));
    assert_eq!(max, DRAIN_BURST, "the first burst is a full one");
    assert_eq!(calls, 2, "one full burst and the rest");
    assert_eq!(consume(&s), n as u64);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn strategy_names_round_trip() {
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        assert_eq!(st.as_str().parse::<Strategy>(), Ok(st));
    }
    assert!(matches!(
        "busy".parse::<Strategy>(),
        Err(DeliveryError::UnknownStrategy(_))
    ));
    assert_eq!(
        RxSocket::<HeapPacket, VecSink<HeapPacket>>::new(
            RxSocketParams {
                nodes: 0,
                rcvbuf: 1,
                drop_snapshot: false
            },
            VecSink::with_capacity(1)
        )
        .err(),
        Some(DeliveryError::BadNodeCount(0))
    );
}

fn enq_batch<C: Condense<HeapPacket>>(
    s: &Sock,
    node: usize,
    pkts: &[NonNull<HeapPacket>],
    st: Strategy,
    c: &mut C,
) -> bool {
    // SAFETY: each test packet is enqueued exactly once.
    unsafe { s.enqueue_batch_deferred(node, pkts, st, c, &mut free) }
}

/// [`enq_batch`] while the delivery lock is held (as by another node's
/// drainer): the group cannot go straight to the ring and is staged.
fn enq_batch_staged<C: Condense<HeapPacket>>(
    s: &Sock,
    node: usize,
    pkts: &[NonNull<HeapPacket>],
    st: Strategy,
    c: &mut C,
) -> bool {
    s.with_sink(|_| enq_batch(s, node, pkts, st, c))
}

fn sink_ids(s: &Sock) -> Vec<u32> {
    s.with_sink(|k| {
        // SAFETY: live until the final sweep.
        std::iter::from_fn(|| k.pop())
            .map(|p| unsafe { HeapPacket::get(p).id })
            .collect::<Vec<_>>()
    })
}

/// A burst's group: one admission pass (the prefix that fits), one
/// election, one charge of the node's meter; a second group behind it
/// is not elected, and one drain delivers both in arrival order.
#[test]
fn batch_admits_what_fits_elects_once_and_keeps_order() {
    let s = sock(2, 350, 16);
    let pkts: Vec<_> = (0..7).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(
        enq_batch_staged(&s, 0, &pkts[..5], Strategy::NumaQueues, &mut NoCondense),
        "empty stage: elected"
    );
    let st = s.stats();
    assert_eq!(
        (st.offered, st.staged, st.drop(DropReason::RcvbufFull)),
        (5, 3, 2),
        "{st:?}"
    );
    assert_eq!(
        s.node_rmem(0),
        Some(300),
        "one charge of the admitted bytes"
    );
    assert_eq!(s.stage_is_empty(0), Some(false));
    s.set_rcvbuf(10_000);
    assert!(
        !enq_batch(&s, 0, &pkts[5..], Strategy::NumaQueues, &mut NoCondense),
        "stage not empty: not elected"
    );
    assert_eq!(s.node_rmem(0), Some(500));
    let out = s.drain(0, &mut free);
    assert_eq!((out.taken, out.delivered, out.dropped), (5, 5, 0));
    assert_eq!(s.stats().batches, 1, "one drain took both groups");
    assert_eq!(
        sink_ids(&s),
        [0, 1, 2, 5, 6],
        "FIFO across groups, drops skipped"
    );
    assert_eq!(s.rmem(), 500);
    s.release(500);
    assert_quiescent(&s);
    // 3 and 4 were freed at admission.
    sweep_after_consume(pkts, &[0, 1, 2, 5, 6]);
}

/// Uncontended (nothing staged on the node, the delivery lock free), a
/// group goes straight to the ring under one lock hold: nobody is elected,
/// the node's meter is never charged, the socket's is, and the batch is
/// counted as a direct one.
#[test]
fn batch_uncontended_goes_straight_to_the_ring() {
    let s = sock(2, 350, 16);
    let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(
        !enq_batch(&s, 1, &pkts, Strategy::NumaQueues, &mut NoCondense),
        "delivered at once: nobody is elected"
    );
    let st = s.stats();
    assert_eq!(
        (
            st.offered,
            st.staged,
            st.delivered,
            st.drop(DropReason::RcvbufFull)
        ),
        (5, 3, 3, 2),
        "the prefix that fits, as when staged: {st:?}"
    );
    assert_eq!(
        (st.batches, st.direct_batches, st.delivery_lock_acquisitions),
        (1, 1, 1)
    );
    assert_eq!(st.batch_pkts, st.staged);
    assert_eq!(s.node_rmem(1), Some(0), "the node's meter is not touched");
    assert_eq!(s.stage_is_empty(1), Some(true));
    assert_eq!(s.rmem(), 300, "charged to the socket");
    assert_eq!(sink_ids(&s), [0, 1, 2]);
    s.release(300);
    assert_quiescent(&s);
    sweep_after_consume(pkts, &[0, 1, 2]);
}

/// A group larger than a drain burst goes straight to the ring in
/// `DRAIN_BURST` windows, in order; a ring that fills refuses the tail,
/// which is refunded, counted `RingFull` and freed.
#[test]
fn batch_uncontended_in_windows_and_ring_full() {
    let n = DRAIN_BURST + 10;
    let cap = DRAIN_BURST + 4;
    let s = sock(1, 1 << 20, cap);
    let pkts: Vec<_> = (0..n as u32).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(!enq_batch(
        &s,
        0,
        &pkts,
        Strategy::NumaQueues,
        &mut NoCondense
    ));
    let st = s.stats();
    assert_eq!((st.batches, st.direct_batches), (2, 2), "{st:?}");
    assert_eq!(st.delivered, cap as u64);
    assert_eq!(st.drop(DropReason::RingFull), (n - cap) as u64);
    assert!(st.books_balance(), "{st:?}");
    assert_eq!(s.rmem(), cap * TS as usize, "the refused tail was refunded");
    let ids = sink_ids(&s);
    assert_eq!(ids, (0..cap as u32).collect::<Vec<_>>());
    s.release((cap * TS as usize) as u32);
    assert_quiescent(&s);
    sweep_after_consume(pkts, &ids);
}

/// A group that finds its node's stage not empty (a drainer is elected
/// and has not drained yet) queues behind what is staged, even with the
/// lock free: one producer's datagrams keep their arrival order.
#[test]
fn batch_behind_a_staged_group_queues_behind_it() {
    let s = sock(1, 1 << 20, 16);
    let pkts: Vec<_> = (0..4).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(
        enq_batch_staged(&s, 0, &pkts[..2], Strategy::NumaQueues, &mut NoCondense),
        "lock held: staged, and the push found the stage empty"
    );
    assert!(
        !enq_batch(&s, 0, &pkts[2..], Strategy::NumaQueues, &mut NoCondense),
        "behind the election: not elected, not delivered"
    );
    assert_eq!(s.stats().delivered, 0);
    assert_eq!(s.node_rmem(0), Some(4 * TS as usize));
    let out = s.drain(0, &mut free);
    assert_eq!((out.taken, out.delivered), (4, 4));
    let st = s.stats();
    assert_eq!((st.batches, st.direct_batches), (1, 0), "{st:?}");
    assert_eq!(sink_ids(&s), [0, 1, 2, 3]);
    s.release(4 * TS);
    assert_quiescent(&s);
    sweep_after_consume(pkts, &[0, 1, 2, 3]);
}

/// Marks the delivered packets consumed (the sink was emptied by id) and sweeps.
fn sweep_after_consume(pkts: Vec<NonNull<HeapPacket>>, delivered: &[u32]) {
    for &p in &pkts {
        // SAFETY: live until the sweep.
        let h = unsafe { HeapPacket::get(p) };
        if delivered.contains(&h.id) {
            assert_eq!(h.mark_done(), 0);
        }
    }
    sweep(pkts);
}

/// Above half the budget (counting what the group admitted before),
/// packets are condensed and charged their smaller size.
#[test]
fn batch_condenses_above_half_the_budget() {
    let s = sock(1, 1000, 16);
    let pkts: Vec<_> = (0..10).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(enq_batch_staged(
        &s,
        0,
        &pkts,
        Strategy::NumaQueues,
        &mut ShrinkTo(10)
    ));
    let st = s.stats();
    // 0..=5 admitted at 0..=500 (not above half), 6..=9 at 600.. condensed.
    assert_eq!((st.staged, st.condensed), (10, 4), "{st:?}");
    assert_eq!(s.node_rmem(0), Some(640));
    s.drain(0, &mut free);
    assert_eq!(consume(&s), 10);
    s.release(0);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn batch_on_a_closed_socket_drops_every_packet() {
    let s = sock(1, 1000, 16);
    s.close();
    let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
    assert!(!enq_batch(
        &s,
        0,
        &pkts,
        Strategy::NumaQueues,
        &mut NoCondense
    ));
    let st = s.stats();
    assert_eq!((st.offered, st.drop(DropReason::Closed)), (3, 3));
    assert_quiescent(&s);
    sweep(pkts);
}

/// Busylock and direct keep the kernel's per-packet path: delivered at
/// once, one lock hold each, never an election.
#[test]
fn batch_with_older_strategies_goes_packet_by_packet() {
    for st in [Strategy::Busylock, Strategy::Direct] {
        let s = sock(1, 1000, 16);
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
        assert!(!enq_batch(&s, 0, &pkts, st, &mut NoCondense));
        let x = s.stats();
        assert_eq!(
            (x.offered, x.delivered, x.delivery_lock_acquisitions),
            (3, 3, 3),
            "{st:?}"
        );
        assert_eq!(consume(&s), 3);
        assert_quiescent(&s);
        sweep(pkts);
    }
}

#[test]
fn uncontended_numa_producer_is_elected_and_delivers() {
    let s = sock(2, 10_000, 16);
    let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
    for &p in &pkts {
        let v = enq(&s, 1, p, Strategy::NumaQueues);
        assert_eq!(
            v,
            Verdict::Drained(BatchOutcome {
                taken: 1,
                delivered: 1,
                dropped: 0
            })
        );
    }
    assert_eq!(s.rmem(), 300, "charged at drain");
    assert_eq!(s.node_rmem(1), Some(0), "node meter emptied after drain");
    let st = s.stats();
    assert_eq!(
        (st.offered, st.staged, st.delivered, st.batches),
        (3, 3, 3, 3)
    );
    // FIFO out of the sink.
    let ids: Vec<u32> = s.with_sink(|k| {
        // SAFETY: live until sweep.
        std::iter::from_fn(|| k.pop())
            .map(|p| unsafe { HeapPacket::get(p).id })
            .collect()
    });
    assert_eq!(ids, [0, 1, 2]);
    for &p in &pkts {
        // SAFETY: live until sweep.
        let h = unsafe { HeapPacket::get(p) };
        h.mark_done();
        s.release(h.truesize());
    }
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn admission_rcvbuf_full_and_empty_queue_exception() {
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        let s = sock(1, 250, 16);
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
        assert!(matches!(
            enq(&s, 0, pkts[0], st),
            Verdict::Drained(_) | Verdict::Delivered
        ));
        assert!(matches!(
            enq(&s, 0, pkts[1], st),
            Verdict::Drained(_) | Verdict::Delivered
        ));
        // 200 + 100 > 250.
        assert_eq!(
            enq(&s, 0, pkts[2], st),
            Verdict::Dropped(DropReason::RcvbufFull),
            "{st:?}"
        );
        assert_eq!(s.node_drops(0, DropReason::RcvbufFull), Some(1));
        consume(&s);
        // An empty socket accepts a datagram bigger than its budget.
        let big = HeapPacket::alloc(9, 1000);
        assert!(
            matches!(
                enq(&s, 0, big, st),
                Verdict::Drained(_) | Verdict::Delivered
            ),
            "{st:?}"
        );
        assert_eq!(s.rmem(), 1000);
        consume(&s);
        assert_quiescent(&s);
        let st_ = s.stats();
        assert_eq!((st_.offered, st_.delivered, st_.drops_total()), (4, 3, 1));
        let mut all = pkts;
        all.push(big);
        sweep(all);
    }
}

#[test]
fn condense_above_half_charges_the_smaller_size() {
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        let s = sock(1, 1000, 16);
        let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, 300)).collect();
        let mut shrink = ShrinkTo(50);
        for &p in &pkts {
            // SAFETY: each packet enqueued once.
            unsafe { s.enqueue(0, p, st, &mut shrink, &mut free) };
        }
        // 0 -> 300 (no pressure), 300 -> 600 (300 is not > 500), then
        // 600 > 500: admitted on its full size (900 <= 1000), condensed
        // to 50 and charged 50 -> 650.
        assert_eq!(s.rmem(), 650, "{st:?}");
        assert_eq!(s.stats().condensed, 1);
        if st == Strategy::Busylock {
            assert_eq!(
                s.stats().busylock_acquisitions,
                1,
                "busylock only under pressure"
            );
        } else {
            assert_eq!(s.stats().busylock_acquisitions, 0);
        }
        consume(&s);
        assert_quiescent(&s);
        sweep(pkts);
    }
}

/// Enqueues `pkts` on `node` (numa-queues) from another thread and
/// returns their verdicts, within 10 s. For callers that hold the
/// delivery lock: a producer wrongly elected behind the elected one
/// would block on that lock, and this must fail, not hang.
fn enq_elsewhere(s: &Arc<Sock>, node: usize, pkts: &[NonNull<HeapPacket>]) -> Vec<Verdict> {
    let (tx, rx) = mpsc::channel();
    let s2 = Arc::clone(s);
    let pkts: Vec<SendPtr<HeapPacket>> = pkts.iter().map(|&p| SendPtr(p)).collect();
    std::thread::spawn(move || {
        let v: Vec<Verdict> = pkts
            .into_iter()
            .map(|p| enq(&s2, node, p.0, Strategy::NumaQueues))
            .collect();
        let _ = tx.send(v);
    });
    rx.recv_timeout(Duration::from_secs(10)).expect(
        "a producer behind the elected one was elected too (it blocks on the held delivery lock)",
    )
}

/// Holds the delivery lock so that one producer is elected and stuck
/// waiting for it, then lets `extra` more producers push behind it.
/// Returns the elected producer's verdict.
fn elected_waits_while_others_push(s: &Arc<Sock>, pkts: &[NonNull<HeapPacket>]) -> Verdict {
    let (first, rest) = pkts.split_first().unwrap();
    let first = SendPtr(*first);
    let elected = s.with_sink(|_| {
        let s2 = Arc::clone(s);
        let h = std::thread::spawn(move || {
            let first = first;
            enq(&s2, 0, first.0, Strategy::NumaQueues)
        });
        // The elected producer has pushed and now spins on our lock.
        wait_until("the elected push", || s.stage_is_empty(0) == Some(false));
        // Others push from another thread: if any of them were elected
        // it would block on our lock and the timeout would fire instead
        // of the test hanging.
        let vs = enq_elsewhere(s, 0, rest);
        assert!(vs.iter().all(|v| *v == Verdict::Staged), "{vs:?}");
        assert_eq!(
            s.stats().delivered,
            0,
            "nothing delivered while the lock is held"
        );
        h
    });
    elected.join().unwrap()
}

#[test]
fn elected_producer_drains_what_was_pushed_while_it_waited() {
    let s = Arc::new(sock(1, 1 << 20, 64));
    let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
    let v = elected_waits_while_others_push(&s, &pkts);
    assert_eq!(
        v,
        Verdict::Drained(BatchOutcome {
            taken: 5,
            delivered: 5,
            dropped: 0
        })
    );
    let st = s.stats();
    assert_eq!(st.delivery_lock_acquisitions, 1, "one lock hold per batch");
    assert_eq!((st.batches, st.batch_max, st.batch_pkts), (1, 5, 5));
    // FIFO across the batch.
    let ids: Vec<u32> = s.with_sink(|k| {
        // SAFETY: live until sweep.
        std::iter::from_fn(|| k.pop())
            .map(|p| unsafe { HeapPacket::get(p).id })
            .collect()
    });
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    for &p in &pkts {
        // SAFETY: live until sweep.
        let h = unsafe { HeapPacket::get(p) };
        h.mark_done();
        s.release(h.truesize());
    }
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn direct_takes_the_lock_per_packet() {
    let s = sock(1, 1 << 20, 64);
    let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
    for &p in &pkts {
        assert_eq!(enq(&s, 0, p, Strategy::Direct), Verdict::Delivered);
    }
    assert_eq!(s.stats().delivery_lock_acquisitions, 5);
    consume(&s);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn ring_full_refunds_and_drops_after_unlock() {
    let s = Arc::new(sock(1, 1 << 20, 2));
    let pkts: Vec<_> = (0..3).map(|i| HeapPacket::alloc(i, TS)).collect();
    let v = elected_waits_while_others_push(&s, &pkts);
    assert_eq!(
        v,
        Verdict::Drained(BatchOutcome {
            taken: 3,
            delivered: 2,
            dropped: 1
        })
    );
    assert_eq!(s.rmem(), 200, "the refused packet's charge was refunded");
    assert_eq!(s.node_drops(0, DropReason::RingFull), Some(1));
    assert_eq!(s.stats().rmem_high_water, 200);
    consume(&s);
    assert_quiescent(&s);
    sweep(pkts);

    let s = sock(1, 1 << 20, 0);
    let p = HeapPacket::alloc(0, TS);
    assert_eq!(
        enq(&s, 0, p, Strategy::Direct),
        Verdict::Dropped(DropReason::RingFull)
    );
    assert_quiescent(&s);
    sweep(vec![p]);
}

#[test]
fn drain_time_budget_check_across_nodes() {
    // Each node admits 3 packets against its own meter (0 + 300 <= 300),
    // so together they stage twice the budget; the second drainer must
    // refuse its whole batch.
    let s = Arc::new(sock(2, 300, 64));
    let pkts: Vec<_> = (0..6).map(|i| HeapPacket::alloc(i, TS)).collect();
    let handles = s.with_sink(|_| {
        let mut hs = Vec::new();
        for node in 0..2 {
            // The elected producer blocks on our lock; the two others
            // are not elected and return at once (from another thread,
            // so that a wrong election fails instead of deadlocking).
            let first = SendPtr(pkts[node * 3]);
            let s2 = Arc::clone(&s);
            hs.push(std::thread::spawn(move || {
                let first = first;
                enq(&s2, node, first.0, Strategy::NumaQueues)
            }));
            wait_until("elected push", || s.stage_is_empty(node) == Some(false));
            let vs = enq_elsewhere(&s, node, &pkts[node * 3 + 1..node * 3 + 3]);
            assert_eq!(vs, [Verdict::Staged; 2]);
            assert_eq!(s.node_rmem(node), Some(300));
        }
        hs
    });
    let mut outcomes: Vec<Verdict> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    outcomes.sort_by_key(|v| match v {
        Verdict::Drained(b) => b.delivered,
        _ => u32::MAX,
    });
    assert_eq!(
        outcomes,
        [
            Verdict::Drained(BatchOutcome {
                taken: 3,
                delivered: 0,
                dropped: 3
            }),
            Verdict::Drained(BatchOutcome {
                taken: 3,
                delivered: 3,
                dropped: 0
            }),
        ]
    );
    let st = s.stats();
    assert_eq!(st.delivered, 3);
    assert_eq!(st.drop(DropReason::RcvbufFullAtDrain), 3);
    assert_eq!(st.rcvbuf_errors(), 3);
    assert_eq!(s.rmem(), 300);
    assert_eq!(consume(&s), 3);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn drop_snapshot_is_taken_per_batch() {
    let s = sock(1, 150, 16);
    let pkts: Vec<_> = (0..4).map(|i| HeapPacket::alloc(i, TS)).collect();
    enq(&s, 0, pkts[0], Strategy::NumaQueues);
    assert_eq!(
        enq(&s, 0, pkts[1], Strategy::NumaQueues),
        Verdict::Dropped(DropReason::RcvbufFull)
    );
    assert_eq!(
        enq(&s, 0, pkts[2], Strategy::NumaQueues),
        Verdict::Dropped(DropReason::RcvbufFull)
    );
    consume(&s);
    enq(&s, 0, pkts[3], Strategy::NumaQueues);
    // SAFETY: live until sweep.
    unsafe {
        assert_eq!(HeapPacket::get(pkts[0]).drop_snapshot(), 0);
        assert_eq!(HeapPacket::get(pkts[3]).drop_snapshot(), 2);
    }
    consume(&s);
    assert_quiescent(&s);
    sweep(pkts);
}

#[test]
fn close_drops_new_packets_and_drain_closed_takes_the_stage() {
    let s = Arc::new(sock(1, 1 << 20, 64));
    let pkts: Vec<_> = (0..4).map(|i| HeapPacket::alloc(i, TS)).collect();
    // Stage 3 packets behind an elected producer stuck on the lock, then
    // close and drain the stage from under it: the drainer finds
    // nothing, and nothing is lost or freed twice.
    let (tx, rx) = mpsc::channel();
    let h = s.with_sink(|_| {
        let s2 = Arc::clone(&s);
        let first = SendPtr(pkts[0]);
        let h = std::thread::spawn(move || {
            let first = first;
            enq(&s2, 0, first.0, Strategy::NumaQueues)
        });
        wait_until("the elected push", || s.stage_is_empty(0) == Some(false));
        let vs = enq_elsewhere(&s, 0, &pkts[1..3]);
        assert_eq!(vs, [Verdict::Staged; 2]);
        s.close();
        tx.send(s.drain_closed(&mut free)).unwrap();
        h
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 3);
    assert_eq!(h.join().unwrap(), Verdict::Drained(BatchOutcome::default()));
    assert_eq!(
        enq(&s, 0, pkts[3], Strategy::NumaQueues),
        Verdict::Dropped(DropReason::Closed)
    );
    let st = s.stats();
    assert_eq!((st.drop(DropReason::Closed), st.closed_in_stage), (4, 3));
    assert_eq!(s.drain_closed(&mut free), 0);
    assert_quiescent(&s);
    sweep(pkts);
}

/// A condense hook that plays racing producers: each call enqueues the
/// next packet of `racers` (with itself as the hook), so each of them
/// passes the admission test before any of them charges the socket, as
/// producers on several lcores can.
struct Racers<'a> {
    s: &'a Sock,
    st: Strategy,
    racers: Vec<NonNull<HeapPacket>>,
    verdicts: Vec<Verdict>,
}

// SAFETY: returns the packet it was given, untouched.
unsafe impl Condense<HeapPacket> for Racers<'_> {
    unsafe fn condense(&mut self, p: NonNull<HeapPacket>) -> NonNull<HeapPacket> {
        if let Some(q) = self.racers.pop() {
            let (s, st) = (self.s, self.st);
            // SAFETY: each racer is enqueued exactly once.
            let v = unsafe { s.enqueue(0, q, st, self, &mut free) };
            self.verdicts.push(v);
        }
        p
    }
}

/// Busylock/direct: three producers pass the admission test at the same
/// `rmem` (200 of 300); the first to charge lands at 300, the second
/// overshoots to 400 (the one packet each the kernel allows), and the
/// third finds the meter already over rcvbuf: it is dropped and its
/// charge taken back, so the meter holds exactly what the ring holds.
#[test]
fn overshoot_recheck_drops_and_refunds_the_charge() {
    for st in [Strategy::Busylock, Strategy::Direct] {
        let s = sock(1, 300, 16);
        let pkts: Vec<_> = (0..5).map(|i| HeapPacket::alloc(i, TS)).collect();
        for &p in &pkts[..2] {
            assert_eq!(enq(&s, 0, p, st), Verdict::Delivered, "{st:?}");
        }
        // 200 > 150: under pressure, so the hook runs between each
        // producer's admission and its charge.
        let mut race = Racers {
            s: &s,
            st,
            racers: vec![pkts[4], pkts[3]],
            verdicts: Vec::new(),
        };
        // SAFETY: enqueued once.
        let v = unsafe { s.enqueue(0, pkts[2], st, &mut race, &mut free) };
        assert_eq!(
            race.verdicts,
            [Verdict::Delivered, Verdict::Delivered],
            "{st:?}"
        );
        assert_eq!(v, Verdict::Dropped(DropReason::RcvbufFull), "{st:?}");
        assert_eq!(
            s.rmem(),
            400,
            "{st:?}: the dropped packet's charge was taken back"
        );
        assert_eq!(s.stats().rmem_high_water, 400, "{st:?}");
        let x = s.stats();
        assert_eq!(
            (x.offered, x.delivered, x.drop(DropReason::RcvbufFull)),
            (5, 4, 1),
            "{st:?}"
        );
        assert_eq!(consume(&s), 4);
        assert_quiescent(&s);
        sweep(pkts);
    }
}

/// The RX lcore's burst mode (`enqueue_deferred`): the elected producer
/// does not drain at once; followers stage behind it; nothing reaches
/// the ring and no lock is taken until the elected producer calls
/// `drain`, which takes its node's whole stage in arrival order in one
/// lock hold; the next push after it is a new election. Busylock and
/// direct deliver at once.
#[test]
fn deferred_election_drains_only_when_asked() {
    let s = sock(2, 10_000, 16);
    let pkts: Vec<_> = (0..7).map(|i| HeapPacket::alloc(i, TS)).collect();
    let def = |node: usize, p: NonNull<HeapPacket>, st: Strategy| {
        // SAFETY: each packet is enqueued exactly once.
        unsafe { s.enqueue_deferred(node, p, st, &mut NoCondense, &mut free) }
    };
    let nq = Strategy::NumaQueues;
    assert_eq!(def(1, pkts[0], nq), Verdict::Elected);
    assert_eq!(def(1, pkts[1], nq), Verdict::Staged);
    assert_eq!(def(1, pkts[2], nq), Verdict::Staged);
    assert_eq!(
        def(0, pkts[3], nq),
        Verdict::Elected,
        "another node: its own election"
    );
    let x = s.stats();
    assert_eq!(
        (x.delivered, x.delivery_lock_acquisitions, x.batches),
        (0, 0, 0),
        "nothing drained before the drain"
    );
    assert_eq!((s.node_rmem(0), s.node_rmem(1)), (Some(100), Some(300)));
    assert_eq!(s.rmem(), 0, "charged to the socket at the drain");
    assert_eq!(
        s.drain(1, &mut free),
        BatchOutcome {
            taken: 3,
            delivered: 3,
            dropped: 0
        }
    );
    assert_eq!(s.stage_is_empty(1), Some(true));
    assert_eq!(s.stage_is_empty(0), Some(false), "node 0 untouched");
    assert_eq!((s.node_rmem(1), s.rmem()), (Some(0), 300));
    assert_eq!(s.stats().delivery_lock_acquisitions, 1);
    assert_eq!(
        def(1, pkts[4], nq),
        Verdict::Elected,
        "drained: the next push is elected again"
    );
    assert_eq!(s.drain(0, &mut free).taken, 1);
    assert_eq!(s.drain(1, &mut free).taken, 1);
    assert_eq!(def(0, pkts[5], Strategy::Busylock), Verdict::Delivered);
    assert_eq!(def(1, pkts[6], Strategy::Direct), Verdict::Delivered);
    let ids = sink_ids(&s);
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(s.stats().batches, 3);
    s.release(700);
    assert_quiescent(&s);
    sweep_after_consume(pkts, &ids);
}

/// The ring refuses the tail of a drained batch, in the drain's second
/// burst (past `DRAIN_BURST`), with mixed truesizes: exactly the refused
/// packets' bytes are refunded, they are counted `RingFull` and freed,
/// and the meter (and its high-water mark) equals what the ring holds.
#[test]
fn ring_full_refund_in_a_later_drain_burst_is_exact() {
    let n = DRAIN_BURST + 20;
    let cap = DRAIN_BURST + 5;
    let s = sock(1, 1 << 20, cap);
    let pkts: Vec<_> = (0..n as u32)
        .map(|i| HeapPacket::alloc(i, TS + (i % 7) * 10))
        .collect();
    assert!(enq_batch_staged(
        &s,
        0,
        &pkts,
        Strategy::NumaQueues,
        &mut NoCondense
    ));
    let out = s.drain(0, &mut free);
    assert_eq!(
        out,
        BatchOutcome {
            taken: n as u32,
            delivered: cap as u32,
            dropped: (n - cap) as u32
        }
    );
    // SAFETY: live until the sweep.
    let size = |p: &NonNull<HeapPacket>| unsafe { HeapPacket::get(*p) }.truesize() as usize;
    let held: usize = pkts[..cap].iter().map(size).sum();
    assert_eq!(s.rmem(), held, "the refused packets' bytes were refunded");
    assert_eq!(s.stats().rmem_high_water, held as u64);
    assert_eq!(
        s.node_drops(0, DropReason::RingFull),
        Some((n - cap) as u64)
    );
    for p in &pkts[cap..] {
        // SAFETY: live until the sweep.
        assert_eq!(unsafe { HeapPacket::get(*p) }.fates(), 1, "freed once");
    }
    let ids = sink_ids(&s);
    assert_eq!(ids, (0..cap as u32).collect::<Vec<_>>());
    s.release(held as u32);
    assert_quiescent(&s);
    sweep_after_consume(pkts, &ids);
}

/// 4 producers on 2 nodes and a consumer, 100k packets per strategy,
/// with a budget small enough that every drop reason but Closed occurs.
#[test]
fn stress_books_balance_all_strategies() {
    const PRODUCERS: usize = 4;
    const PER: u32 = 25_000;
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        // Budget ~64 packets, ring 56: rcvbuf is the usual limiter and
        // the ring fills now and then.
        let s = Arc::new(sock(2, 64 * TS as usize, 56));
        let pkts: Vec<NonNull<HeapPacket>> = (0..PRODUCERS as u32 * PER)
            .map(|i| HeapPacket::alloc(i, TS + (i % 3) * 50))
            .collect();
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let consumer = {
            let s = Arc::clone(&s);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut n = 0u64;
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire) == PRODUCERS;
                    let got = consume(&s);
                    n += got;
                    if finished && got == 0 {
                        return n;
                    }
                    if got == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|t| {
                let s = Arc::clone(&s);
                let done = Arc::clone(&done);
                let mine: Vec<SendPtr<HeapPacket>> = pkts
                    .iter()
                    .skip(t)
                    .step_by(PRODUCERS)
                    .map(|&p| SendPtr(p))
                    .collect();
                std::thread::spawn(move || {
                    let mut shrink = ShrinkTo(TS);
                    for p in mine {
                        // SAFETY: each packet is enqueued exactly once.
                        unsafe { s.enqueue(t % 2, p.0, st, &mut shrink, &mut free) };
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::Release);
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let consumed = consumer.join().unwrap();
        let stats = s.stats();
        assert_eq!(stats.offered, u64::from(PER) * PRODUCERS as u64);
        assert_eq!(consumed, stats.delivered, "{st:?}");
        assert_eq!(
            stats.staged,
            stats.delivered
                + stats.drop(DropReason::RingFull)
                + stats.drop(DropReason::RcvbufFullAtDrain)
        );
        assert_eq!(stats.closed_in_stage, 0);
        assert!(
            stats.delivered > 0 && stats.drops_total() > 0,
            "{st:?}: {stats:?}"
        );
        assert!(
            stats.rmem_high_water <= 64 * u64::from(TS) + 4 * 200,
            "{stats:?}"
        );
        if st == Strategy::NumaQueues {
            assert_eq!(stats.busylock_acquisitions, 0);
            assert_eq!(stats.batches, stats.delivery_lock_acquisitions);
        } else {
            assert_eq!(stats.delivery_lock_acquisitions, stats.staged);
        }
        assert_quiescent(&s);
        eprintln!("{st:?}: {stats:?}");
        sweep(pkts);
    }
}
