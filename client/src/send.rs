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
//!
//! A datagram over the MTU is one request whose payload continues in
//! further mbufs chained to the first (`Mbuf::chain`): the ring takes it
//! whole or not at all, and the main lcore fragments it with the code an
//! in-process `send_burst` uses (`FragOKs`, `FragCreates`, `FragFails`).
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use dpdk_sys::{Mbuf, MbufBurst, MbufRing, Mempool};
use udpdemux::send::{self as engine_send, family, request};

use crate::{ClientSocket, SocketHandle};

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
    /// the next hop (ARP / neighbour discovery) and transmits; a datagram
    /// over the MTU leaves as fragments, up to the largest one IP datagram
    /// holds (65 507 bytes of payload over IPv4, 65 527 over IPv6). How
    /// many were handed to the engine; the rest found no mbuf, no ring
    /// room (after waiting up to about half a millisecond for the engine's
    /// main lcore, which drains the ring), or were above that size. The
    /// engine counts what it sends and drops (`UdpOutDatagrams`, `FragOKs`,
    /// the neighbour counters) in its exit JSON.
    pub fn send_burst(&self, dgrams: &[(SocketAddr, &[u8])]) -> usize {
        send_burst(self.id(), dgrams)
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
        send_gso(self.id(), dst, buf, segment, ecn)
    }
}

impl SocketHandle {
    /// As [`ClientSocket::send_burst`], from any thread.
    pub fn send_burst(&self, dgrams: &[(SocketAddr, &[u8])]) -> usize {
        send_burst(self.id(), dgrams)
    }

    /// As [`ClientSocket::send_gso`], from any thread: the TX pool's
    /// allocation and the TX ring's enqueue are multi-thread safe (a
    /// thread that is not this process's EAL lcore uses no mempool cache).
    pub fn send_gso(&self, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize {
        send_gso(self.id(), dst, buf, segment, ecn)
    }
}

fn send_burst(socket: u32, dgrams: &[(SocketAddr, &[u8])]) -> usize {
    if !dpdk_sys::eal::is_up() {
        return 0;
    }
    let Some(h) = handles() else {
        return 0;
    };
    let mut taken = 0;
    let mut rest = dgrams;
    while let Some(&(dst, payload)) = rest.first() {
        let fam = family(dst.ip());
        if payload.len() > engine_send::max_fragmented_payload(fam) {
            rest = &rest[1..];
            continue;
        }
        if payload.len() > engine_send::max_payload(fam) {
            // One chain for one datagram.
            rest = &rest[1..];
            let Some(m) = chained_request(h, socket, dst, payload) else {
                // The pool ran dry: the rest find no mbuf either.
                break;
            };
            let mut one = MbufBurst::<1>::new();
            let _ = one.push(m);
            // Refused by a full ring: freed, chain and all.
            taken += enqueue_waiting(&h.ring, &mut one);
            continue;
        }
        // The next run of datagrams that fit one mbuf each.
        let run = rest
            .iter()
            .take(CHUNK)
            .take_while(|(d, p)| p.len() <= engine_send::max_payload(family(d.ip())))
            .count();
        let (small, later) = rest.split_at(run);
        rest = later;
        let (n, dry) = send_small(h, socket, small);
        taken += n;
        if dry {
            break;
        }
    }
    taken
}

fn send_gso(socket: u32, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize {
    if !dpdk_sys::eal::is_up() || buf.is_empty() {
        return 0;
    }
    let fam = family(dst.ip());
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
        let Some(m) = fill_request(m, socket, dst, chunk, ecn) else {
            return 0;
        };
        let _ = burst.push(m);
    }
    enqueue_waiting(&h.ring, &mut burst)
}

/// Enqueue `burst` on the TX ring, waiting for the main lcore when the
/// ring is full: it drains the ring once per nap, and has not run, most
/// likely because this process holds the CPU they share (the scheduler
/// does not preempt a busy task for a thread that wakes every 100 us). So
/// hand it the CPU and try again, a few times, as a blocking send waits for
/// buffer space: without this the DNS example lost 6-12% of its answers
/// here at 2-2.5 Mqps, with a ring of 1024 or 4096. How many went in; the
/// rest are freed (`burst` is left empty).
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
    // What did not fit is freed.
    burst.clear();
    taken
}

/// Up to [`CHUNK`] datagrams that fit one mbuf each: their mbufs in one
/// `rte_pktmbuf_alloc_bulk` (all or nothing, so when the pool has fewer,
/// one at a time takes what there is), one enqueue. How many the ring
/// took, and whether the pool ran dry.
fn send_small(h: &TxHandles, socket: u32, dgrams: &[(SocketAddr, &[u8])]) -> (usize, bool) {
    let mut fresh = MbufBurst::<CHUNK>::new();
    let mut burst = MbufBurst::<CHUNK>::new();
    let want = dgrams.len().min(CHUNK);
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
    for (m, &(dst, payload)) in fresh.drain().zip(dgrams) {
        if let Some(m) = request_mbuf(m, socket, dst, payload) {
            let _ = burst.push(m);
        }
    }
    (enqueue_waiting(&h.ring, &mut burst), got < want)
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

/// Bytes of a request in one segment: the TX pool's data room less the
/// headroom DPDK leaves at the front of a fresh mbuf.
const SEG_BYTES: usize = (engine_send::DATA_ROOM - dpdk_sys::mbuf::HEADROOM) as usize;

/// The request for a datagram over the MTU: the header and the payload's
/// start in a first mbuf, the rest in mbufs chained to it, all taken from
/// the pool at once (so a client that dies here holds no more than one
/// datagram's segments). `None` (every mbuf freed): the pool had too few.
fn chained_request(h: &TxHandles, socket: u32, dst: SocketAddr, payload: &[u8]) -> Option<Mbuf> {
    let total = request::LEN + payload.len();
    let segs = total.div_ceil(SEG_BYTES);
    if segs > engine_send::MAX_REQUEST_SEGS {
        return None;
    }
    let mut fresh = MbufBurst::<{ engine_send::MAX_REQUEST_SEGS }>::new();
    h.pool.alloc_into(&mut fresh, segs).ok()?;
    let mut it = fresh.drain();
    let head_room = SEG_BYTES - request::LEN;
    let (start, mut rest) = payload.split_at(head_room.min(payload.len()));
    let mut head = request_mbuf(it.next()?, socket, dst, start)?;
    for mut m in it {
        let (part, later) = rest.split_at(SEG_BYTES.min(rest.len()));
        rest = later;
        m.append(u16::try_from(part.len()).ok()?)?
            .copy_from_slice(part);
        // Cannot pass RTE_MBUF_MAX_NB_SEGS: at most MAX_REQUEST_SEGS.
        head.chain(m).ok()?;
    }
    rest.is_empty().then_some(head)
}
