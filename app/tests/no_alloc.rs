//! Proves the enqueue/drain/release path allocates nothing, for all three
//! strategies, including every drop path and the condense hook.
//!
//! The binary's counting global allocator (`runtime::alloc_guard`) counts
//! allocations made by the current thread while it is hot (the test
//! harness's own threads allocate freely and are not counted).
//!
//! `rx.rs`'s burst processing (`process_burst`: parse, demux, group, stage,
//! deferred drains, `FreeList`) is not covered here: it cannot run without
//! the EAL. Its sockets' delivery rings are `rte_ring`s (memzones), the
//! packets must be `rte_mbuf`s from an engine pool (the metadata lives in
//! the private area the pool reserves), and what it drops is returned with
//! `rte_pktmbuf_free_bulk` to those pools. It is covered instead by the
//! binary itself: `rx_loop` runs inside an `alloc_guard::HotSection` under
//! the binary's counting allocator, and the EAL-backed tests
//! (`pipeline.rs` for every strategy and small-cache setting,
//! `foundation.rs`, and `netns_exception.rs` for the exception path)
//! require `hot_path_allocations == 0` in the run's JSON.
#![cfg(not(loom))]

use std::ptr::NonNull;

use udpdemux::receive::accounting::DropReason;
use udpdemux::receive::admission::Strategy;
use udpdemux::receive::testkit::{consume_all, HeapPacket, ShrinkTo, VecSink};
use udpdemux::receive::{RxSocket, RxSocketParams};
use udpdemux::runtime::alloc_guard::{thread_hot_allocations, CountingAlloc, HotSection};

// The binary's own counting allocator: what these tests prove is what the
// engine's summary reports as `hot_path_allocations`.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Runs `f` with this thread marked hot; returns what it allocated (this
/// thread only: the harness runs other tests in parallel threads).
fn armed<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = thread_hot_allocations();
    let hot = HotSection::enter();
    let r = f();
    drop(hot);
    (r, thread_hot_allocations() - before)
}

#[test]
fn the_counter_can_fail() {
    let (_, n) = armed(|| std::hint::black_box(Box::new(7u64)));
    assert_eq!(n, 1, "the counting allocator must see a Box");
}

#[test]
fn enqueue_drain_release_allocate_nothing() {
    const N: u32 = 512;
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        // Everything allocated up front: packets, socket, bounded sink.
        let pkts: Vec<NonNull<HeapPacket>> = (0..N).map(|i| HeapPacket::alloc(i, 200)).collect();
        let sock = RxSocket::new(
            RxSocketParams {
                nodes: 2,
                rcvbuf: 200 * 40,
                drop_snapshot: true,
            },
            VecSink::with_capacity(24),
        )
        .unwrap();
        let mut freed = 0u64;
        let mut reasons = [0u64; DropReason::COUNT];
        let mut to_free = |p: NonNull<HeapPacket>, r: DropReason| {
            // SAFETY: packets live until the end of the test.
            unsafe { HeapPacket::get(p) }.mark_done();
            freed += 1;
            if let Some(c) = reasons.get_mut(r.index()) {
                *c += 1;
            }
        };
        let mut shrink = ShrinkTo(150);

        let (consumed, allocs) = armed(|| {
            let mut consumed = 0u64;
            for (i, &p) in pkts.iter().enumerate() {
                // SAFETY: every packet is enqueued exactly once.
                unsafe { sock.enqueue(i % 2, p, st, &mut shrink, &mut to_free) };
                // Consume in bursts now and then so the socket cycles
                // between empty, under pressure and full.
                if i % 64 == 63 {
                    consumed += consume_all(&sock);
                }
            }
            consumed += consume_all(&sock);
            let _ = sock.stats();
            consumed
        });
        assert_eq!(allocs, 0, "{st:?} allocated on the packet path");

        let s = sock.stats();
        assert!(s.books_balance(), "{st:?}: {s:?}");
        assert_eq!(s.delivered, consumed);
        assert_eq!(s.drops_total(), freed);
        assert!(
            s.condensed > 0 && freed > 0,
            "{st:?} did not exercise pressure: {s:?}"
        );
        assert_eq!(sock.rmem(), 0);
        for p in pkts {
            // SAFETY: all packets are out of the socket; nothing refers to them.
            unsafe {
                assert_eq!(HeapPacket::get(p).fates(), 1);
                HeapPacket::dealloc(p);
            }
        }
    }
}

/// The RX lcore's burst path: groups admitted and staged at once
/// (`enqueue_batch_deferred`), drained by the elected producer, released by
/// the consumer: no allocation either, through pressure and full budgets.
#[test]
fn batch_enqueue_drain_release_allocate_nothing() {
    const N: u32 = 512;
    for st in [Strategy::NumaQueues, Strategy::Busylock, Strategy::Direct] {
        let pkts: Vec<NonNull<HeapPacket>> = (0..N).map(|i| HeapPacket::alloc(i, 200)).collect();
        let sock = RxSocket::new(
            RxSocketParams {
                nodes: 2,
                rcvbuf: 200 * 40,
                drop_snapshot: true,
            },
            VecSink::with_capacity(24),
        )
        .unwrap();
        let mut freed = 0u64;
        let mut to_free = |p: NonNull<HeapPacket>, _r: DropReason| {
            // SAFETY: packets live until the end of the test.
            unsafe { HeapPacket::get(p) }.mark_done();
            freed += 1;
        };
        let mut shrink = ShrinkTo(150);
        let (consumed, allocs) = armed(|| {
            let mut consumed = 0u64;
            for (i, group) in pkts.chunks(8).enumerate() {
                let node = i % 2;
                // SAFETY: every packet is in one group, enqueued once.
                if unsafe {
                    sock.enqueue_batch_deferred(node, group, st, &mut shrink, &mut to_free)
                } {
                    sock.drain(node, &mut to_free);
                }
                if i % 8 == 7 {
                    consumed += consume_all(&sock);
                }
            }
            consumed += consume_all(&sock);
            consumed
        });
        assert_eq!(allocs, 0, "{st:?} allocated on the batch path");
        let s = sock.stats();
        assert!(s.books_balance(), "{st:?}: {s:?}");
        assert_eq!(s.delivered, consumed);
        assert_eq!(s.drops_total(), freed);
        assert!(
            s.condensed > 0 && freed > 0,
            "{st:?} did not exercise pressure: {s:?}"
        );
        assert_eq!(sock.rmem(), 0);
        for p in pkts {
            // SAFETY: all packets are out of the socket; nothing refers to them.
            unsafe {
                assert_eq!(HeapPacket::get(p).fates(), 1);
                HeapPacket::dealloc(p);
            }
        }
    }
}

/// The fragment writer behind echo's and `send_burst`'s fragmented sends
/// (headers finished, fragments written into caller buffers, the payload
/// gathered from slices) allocates nothing; the mbuf loop around it
/// (`frag_out::write_fragments`) is covered by `send_netns`, whose
/// `send_burst` calls run hot, and by the echo tests' `hot_path_allocations`.
#[test]
fn fragment_writer_allocates_nothing() {
    use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use udpdemux::parse::fragment::{copy_range, finish_udp_head, sum_parts, Fragmenter};
    use udpdemux::parse::Family;
    let payload: Vec<u8> = (0..65_000u32).map(|i| i as u8).collect();
    let spec = FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlans: &[],
        l3: L3Spec::V4 {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            ttl: 64,
            options: &[],
            ident: 0,
            frag: FragSpec::default(),
        },
        sport: 1,
        dport: 2,
        payload: &[],
        udp_csum: CsumMode::Correct,
    };
    let mut out = vec![0u8; 1514];
    let (frames, allocs) = armed(|| {
        let mut head = [0u8; 42];
        let n = build::write_frame(&spec, &mut head).unwrap();
        let l4 = finish_udp_head(
            &mut head[..n],
            14,
            Family::V4,
            payload.len(),
            sum_parts([&payload[..]]),
        )
        .unwrap();
        let (ip, udp) = head[..n].split_at(l4);
        let fr = Fragmenter::new(ip, 14, Family::V4, udp.len() + payload.len(), 1500, 9).unwrap();
        for i in 0..fr.count() {
            let (at, r) = fr.write_headers(i, &mut out).unwrap();
            copy_range([udp, &payload[..]], r.start, &mut out[at]).unwrap();
        }
        fr.count()
    });
    assert_eq!(frames, 44);
    assert_eq!(allocs, 0, "the fragment writer allocated");
}
