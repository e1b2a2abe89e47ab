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
use std::sync::Mutex;

use dpdk_sys::{Mbuf, MbufBurst, MbufRing, Mempool};
use udpdemux::send::{self as engine_send, request};

use crate::ClientSocket;

/// The engine's TX pool and this process's TX ring, found or made once.
struct TxHandles {
    pool: Mempool,
    ring: MbufRing,
}

static TX: Mutex<Option<TxHandles>> = Mutex::new(None);

fn handles() -> Option<std::sync::MutexGuard<'static, Option<TxHandles>>> {
    let mut g = TX.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        let pool = Mempool::lookup("tx_pool").ok()?;
        let ring = engine_send::client_ring().ok()?;
        *g = Some(TxHandles { pool, ring });
    }
    Some(g)
}

impl ClientSocket<'_> {
    /// Send datagrams from this socket's bound address (a wildcard one
    /// sends from the outgoing port's address), like the engine's
    /// `udpdemux::api::send_burst`: the engine builds the headers, resolves
    /// the next hop (ARP / neighbour discovery) and transmits. How many
    /// were handed to the engine; the rest found no mbuf, no ring room, or
    /// were above the MTU. The engine counts what it sends and drops
    /// (`UdpOutDatagrams`, the neighbour counters) in its exit JSON.
    pub fn send_burst(&self, dgrams: &[(SocketAddr, &[u8])]) -> usize {
        if !dpdk_sys::eal::is_up() {
            return 0;
        }
        let Some(g) = handles() else {
            return 0;
        };
        let Some(h) = g.as_ref() else {
            return 0;
        };
        let mut burst = MbufBurst::<64>::new();
        let mut taken = 0;
        for (dst, payload) in dgrams {
            let fam = if dst.is_ipv4() {
                udpdemux::parse::Family::V4
            } else {
                udpdemux::parse::Family::V6
            };
            if payload.len() > engine_send::max_payload(fam) {
                continue;
            }
            let Some(m) = request_mbuf(&h.pool, self.id(), *dst, payload) else {
                continue;
            };
            if burst.spare() == 0 {
                taken += h.ring.enqueue_mp(&mut burst);
                // What did not fit is freed.
                burst.clear();
            }
            let _ = burst.push(m);
        }
        taken += h.ring.enqueue_mp(&mut burst);
        burst.clear();
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
        let Some(g) = handles() else {
            return 0;
        };
        let Some(h) = g.as_ref() else {
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
        let taken = h.ring.enqueue_mp(&mut burst);
        // What did not fit is freed.
        burst.clear();
        taken
    }
}

fn request_mbuf(pool: &Mempool, socket: u32, dst: SocketAddr, payload: &[u8]) -> Option<Mbuf> {
    fill_request(pool.alloc()?, socket, dst, payload, 0)
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
