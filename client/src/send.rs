//! `ClientSocket::send_burst`: datagrams from another process (issue 17).
//!
//! The client takes mbufs from the engine's TX pool (`tx_pool`, shared
//! memory), writes into each a request (socket id, destination: the
//! engine's `send::request` layout) and the payload, and enqueues them on
//! its own TX ring `udx_tx<pid>` (made on the first send, one consumer: the
//! engine's main lcore). The main lcore turns each request into a frame in
//! place from the socket's bound address, resolves the next hop like an
//! in-process `send_burst` and transmits on its own TX queue: no TX queue
//! is shared, and a client that dies mid-enqueue wedges only its own ring
//! (the engine frees what is in it once the client's sockets are gone).
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use dpdk_sys::{Mbuf, MbufBurst, MbufRing, Mempool};
use udpdemux::parse::Family;
use udpdemux::send::{self as engine_send, request};

use crate::ClientSocket;

/// The engine's TX pool and this process's TX ring, found or made once.
struct TxHandles {
    pool: Mempool,
    ring: MbufRing,
}

/// Set once both are found: every later send reads it without a lock.
static TX: OnceLock<TxHandles> = OnceLock::new();
/// Serialises finding them (two threads must not both make the ring).
/// Taken only until [`TX`] is set: while the engine's TX pool is not found
/// (an engine without one), every send tries again and sends nothing.
static TX_INIT: Mutex<()> = Mutex::new(());

fn handles() -> Option<&'static TxHandles> {
    if let Some(h) = TX.get() {
        return Some(h);
    }
    let _one = TX_INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = TX.get() {
        return Some(h);
    }
    let pool = Mempool::lookup("tx_pool").ok()?;
    let ring = engine_send::client_ring().ok()?;
    Some(TX.get_or_init(|| TxHandles { pool, ring }))
}

/// Requests enqueued at once, and mbufs allocated at once.
const CHUNK: usize = 64;

/// Waits for the engine's main lcore before a full TX ring's leftovers are
/// refused: first `sched_yield`s (microseconds when the main lcore waits
/// for this CPU), then naps of 20 us (when it is in its own 100 us nap),
/// about 0.5 ms in all at most, as a blocking send waits for buffer space.
const FULL_RING_YIELDS: u32 = 4;
const FULL_RING_WAITS: u32 = FULL_RING_YIELDS + 20;

impl ClientSocket<'_> {
    /// Send datagrams from this socket's bound address (a wildcard one
    /// sends from the outgoing port's address), like the engine's
    /// `udpdemux::api::send_burst`: the engine builds the headers, resolves
    /// the next hop (ARP / neighbour discovery) and transmits. How many
    /// were handed to the engine; the rest found no mbuf, no ring room
    /// (after waiting up to about half a millisecond for the engine's main
    /// lcore, which drains the ring), or were above the MTU. The engine counts what it sends and drops
    /// (`UdpOutDatagrams`, the neighbour counters) in its exit JSON.
    pub fn send_burst(&self, dgrams: &[(SocketAddr, &[u8])]) -> usize {
        if !dpdk_sys::eal::is_up() {
            return 0;
        }
        let Some(h) = handles() else {
            return 0;
        };
        let fits = |(dst, payload): &&(SocketAddr, &[u8])| {
            let fam = if dst.is_ipv4() {
                Family::V4
            } else {
                Family::V6
            };
            payload.len() <= engine_send::max_payload(fam)
        };
        let mut fresh = MbufBurst::<CHUNK>::new();
        let mut burst = MbufBurst::<CHUNK>::new();
        let mut taken = 0;
        let mut left = dgrams.iter().filter(fits).peekable();
        while left.peek().is_some() {
            // The mbufs of up to CHUNK datagrams in one
            // rte_pktmbuf_alloc_bulk; all or nothing, so when the pool has
            // fewer, one at a time takes what there is.
            let want = left.clone().take(CHUNK).count();
            if h.pool.alloc_into(&mut fresh, want).is_err() {
                while fresh.len() < want {
                    match h.pool.alloc() {
                        Some(m) => {
                            let _ = fresh.push(m);
                        }
                        None => break,
                    }
                }
            }
            let got = fresh.len();
            for (m, &(dst, payload)) in fresh.drain().zip(left.by_ref().take(want)) {
                if let Some(m) = request_mbuf(m, self.id(), dst, payload) {
                    let _ = burst.push(m);
                }
            }
            taken += enqueue_waiting(&h.ring, &mut burst);
            // What still did not fit is freed.
            burst.clear();
            if got < want {
                // The pool ran dry: the rest find no mbuf either.
                break;
            }
        }
        taken
    }

    /// GSO-style send, the client's twin of `udpdemux::api::send_gso`:
    /// `buf` cut into datagrams of `segment` bytes (the last may be
    /// shorter, at most `send::MAX_SEGMENTS`; 0: one datagram), all to `dst` with ECN
    /// codepoint `ecn`: one bulk allocation from the engine's TX pool and
    /// one enqueue on this process's TX ring. The engine builds each
    /// frame's headers from the request, as for `send_burst`. How many
    /// datagrams were handed over: 0 or all, or the prefix the ring had
    /// room for; none when a segment is above the MTU or there are too many.
    pub fn send_gso(&self, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize {
        if !dpdk_sys::eal::is_up() || buf.is_empty() {
            return 0;
        }
        let fam = if dst.is_ipv4() {
            udpdemux::parse::Family::V4
        } else {
            udpdemux::parse::Family::V6
        };
        let segment = if segment == 0 {
            buf.len()
        } else {
            segment.min(buf.len())
        };
        let count = buf.len().div_ceil(segment);
        if count > engine_send::MAX_SEGMENTS || segment > engine_send::max_payload(fam) {
            return 0;
        }
        let Some(h) = handles() else {
            return 0;
        };
        let mut fresh = MbufBurst::<{ engine_send::MAX_SEGMENTS }>::new();
        if h.pool.alloc_into(&mut fresh, count).is_err() || fresh.len() != count {
            return 0;
        }
        let mut burst = MbufBurst::<{ engine_send::MAX_SEGMENTS }>::new();
        for (m, chunk) in fresh.drain().zip(buf.chunks(segment)) {
            let Some(m) = fill_request(m, self.id(), dst, chunk, ecn) else {
                return 0;
            };
            let _ = burst.push(m);
        }
        let taken = enqueue_waiting(&h.ring, &mut burst);
        // What did not fit is freed.
        burst.clear();
        taken
    }
}

/// Enqueue `burst` on the TX ring, waiting for the main lcore when the
/// ring is full: it drains the ring once per nap, and has not run, most
/// likely because this process holds the CPU they share (the scheduler
/// does not preempt a busy task for a thread that wakes every 100 us). So
/// hand it the CPU and try again, a few times, as a blocking send waits for
/// buffer space: without this the DNS example lost 6-12% of its answers
/// here at 2-2.5 Mqps, with a ring of 1024 or 4096. How many went in; the
/// rest stay in `burst`.
fn enqueue_waiting<const N: usize>(ring: &MbufRing, burst: &mut MbufBurst<N>) -> usize {
    let mut taken = ring.enqueue_mp(burst);
    let mut tries = 0;
    while !burst.is_empty() && tries < FULL_RING_WAITS {
        if tries < FULL_RING_YIELDS {
            std::thread::yield_now();
        } else {
            // The main lcore naps (not runnable): a yield returns at once.
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        taken += ring.enqueue_mp(burst);
        tries += 1;
    }
    taken
}

/// Write the request for `payload` to `dst` into a fresh mbuf; `None`
/// (the mbuf freed) when it does not fit.
fn request_mbuf(m: Mbuf, socket: u32, dst: SocketAddr, payload: &[u8]) -> Option<Mbuf> {
    fill_request(m, socket, dst, payload, 0)
}

/// Write a request with ECN codepoint `ecn` into the fresh mbuf `m`.
fn fill_request(
    mut m: Mbuf,
    socket: u32,
    dst: SocketAddr,
    payload: &[u8],
    ecn: u8,
) -> Option<Mbuf> {
    let len = u16::try_from(request::LEN + payload.len()).ok()?;
    let out = m.append(len)?;
    engine_send::encode_request(out, socket, dst)?;
    engine_send::set_request_ecn(out, ecn)?;
    out[request::LEN..].copy_from_slice(payload);
    Some(m)
}
