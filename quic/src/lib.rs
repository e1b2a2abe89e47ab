//! A quinn 0.11 socket over a udpdemux socket: [`UdxSocket`] implements
//! quinn's `AsyncUdpSocket`, so a QUIC endpoint
//! (`quinn::Endpoint::new_with_abstract_socket`) receives and sends through
//! an engine running in the same process.
//!
//! * Receive: `poll_recv` takes a batch of up to 64 datagrams from the
//!   socket's delivery ring (`api::recv_burst`, zero copy) and copies them
//!   into quinn's buffers coalesced the kernel's UDP GRO way
//!   (`RecvBatch::coalesce`: one flow, one ECN codepoint, one size; the
//!   last may be shorter), filling `RecvMeta`'s `addr`, `len`, `stride`,
//!   `ecn` and `dst_ip`. `max_receive_segments` is 64.
//! * Send: `try_send` hands a `Transmit` (with its `segment_size`) to
//!   `api::send_gso`: headers built once, ECN set, one ring enqueue.
//!   `max_transmit_segments` is 64 (the kernel's `UDP_MAX_SEGMENTS`).
//! * Wakers: when the ring is empty, `poll_recv` leaves its waker with the
//!   socket's poller thread and returns `Pending`. The poller (one plain
//!   thread per socket, not a runtime thread) parks while nobody waits;
//!   while a task waits it looks at the ring (two loads) and sleeps between
//!   looks, from 20 µs doubling to 1 ms while it stays empty, and wakes the
//!   task as soon as a datagram is there. So the runtime's threads never
//!   spin; an idle socket costs one thread waking at most 1000 times a
//!   second while a receive is pending (see docs/design.md for why not an
//!   eventfd from the engine).
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use udpdemux::api::{self, RecvBatch, Sender, SocketOptions};
use udpdemux::runtime::engine::Engine;
use udpdemux::runtime::error::EngineError;
use udpdemux::socket::Socket;

pub mod echo;

/// Datagrams one `RecvMeta` may describe (GRO) and one `Transmit` may
/// carry (GSO).
pub const SEGMENTS: usize = udpdemux::send::MAX_SEGMENTS;

/// The poller's sleep between looks at an empty ring: from the first to
/// the last, doubling.
const BACKOFF_MIN: Duration = Duration::from_micros(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1);

/// What the adapter saw, for tests and the example's exit line.
#[derive(Debug, Default)]
pub struct Stats {
    /// Datagrams handed to quinn, by ECN codepoint (index: the 2 bits).
    pub rx_ecn: [AtomicU64; 4],
    /// `RecvMeta`s filled (each one or more datagrams).
    pub rx_metas: AtomicU64,
    /// Datagrams longer than quinn's buffer (dropped here; none with
    /// quinn's buffers of 64 KiB).
    pub rx_too_long: AtomicU64,
    /// Datagrams quinn sent / the engine refused (the engine counts why).
    pub tx_datagrams: AtomicU64,
    pub tx_refused: AtomicU64,
    /// Times the poller woke a waiting task.
    pub wakeups: AtomicU64,
}

/// What `poll_recv` keeps between calls: the batch being handed out.
struct Rx {
    batch: RecvBatch,
    next: usize,
}

/// What the poller thread shares with `poll_recv`.
struct Wake {
    sock: Arc<Socket>,
    waiter: Mutex<Option<Waker>>,
    stop: AtomicBool,
    stats: Arc<Stats>,
}

/// A udpdemux socket as a quinn `AsyncUdpSocket`.
pub struct UdxSocket {
    sock: Arc<Socket>,
    tx: Sender,
    local: SocketAddr,
    rx: Mutex<Rx>,
    wake: Arc<Wake>,
    poller: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
}

impl fmt::Debug for UdxSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdxSocket")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// Why a socket could not be made.
#[derive(Debug)]
pub enum OpenError {
    Engine(EngineError),
    /// No port has an address: nothing to send from.
    NoSender,
    Io(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Engine(e) => write!(f, "cannot open the udpdemux socket: {e}"),
            OpenError::NoSender => f.write_str(
                "the engine cannot send: give a [[port]] addresses = [...] on the destination's subnet",
            ),
            OpenError::Io(e) => write!(f, "cannot start the socket's poller thread: {e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl UdxSocket {
    /// Open an engine socket with `opts` and make it quinn's.
    pub fn open(engine: &Engine, opts: SocketOptions) -> Result<UdxSocket, OpenError> {
        let tx = api::sender(engine).ok_or(OpenError::NoSender)?;
        let sock = api::open(engine, opts).map_err(OpenError::Engine)?;
        UdxSocket::new(sock, tx).map_err(OpenError::Io)
    }

    /// Make an open engine socket quinn's (nothing else may receive from it).
    pub fn new(sock: Arc<Socket>, tx: Sender) -> io::Result<UdxSocket> {
        let stats = Arc::new(Stats::default());
        let wake = Arc::new(Wake {
            sock: Arc::clone(&sock),
            waiter: Mutex::new(None),
            stop: AtomicBool::new(false),
            stats: Arc::clone(&stats),
        });
        let w = Arc::clone(&wake);
        let poller = std::thread::Builder::new()
            .name(format!("udx-quic-{}", sock.name()))
            .spawn(move || poll_ring(&w))?;
        Ok(UdxSocket {
            local: sock.conf.local,
            sock,
            tx,
            rx: Mutex::new(Rx {
                batch: RecvBatch::new(),
                next: 0,
            }),
            wake,
            poller: Some(poller),
            stats,
        })
    }

    /// The adapter's counters.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The engine socket underneath.
    pub fn socket(&self) -> &Arc<Socket> {
        &self.sock
    }

    /// Hand out datagrams of the held batch into quinn's buffers; how many
    /// `RecvMeta`s were filled.
    fn fill(&self, rx: &mut Rx, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> usize {
        let mut n = 0;
        for (buf, m) in bufs.iter_mut().zip(meta.iter_mut()) {
            loop {
                if rx.next >= rx.batch.len() {
                    break;
                }
                match rx.batch.coalesce(rx.next, buf, SEGMENTS) {
                    Some(c) => {
                        rx.next += c.count;
                        m.addr = c.src;
                        m.len = c.len;
                        m.stride = c.stride;
                        m.ecn = EcnCodepoint::from_bits(c.ecn);
                        m.dst_ip = Some(c.dst.ip());
                        self.stats.rx_ecn[usize::from(c.ecn & 3)]
                            .fetch_add(c.count as u64, Ordering::Relaxed);
                        n += 1;
                        break;
                    }
                    None => {
                        rx.next += 1;
                        self.stats.rx_too_long.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if rx.next >= rx.batch.len() {
                break;
            }
        }
        if rx.next >= rx.batch.len() {
            // All copied out: give the mbufs and their memory back now,
            // not at the next receive.
            rx.batch.clear();
            rx.next = 0;
        }
        self.stats.rx_metas.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

impl Drop for UdxSocket {
    fn drop(&mut self) {
        self.wake.stop.store(true, Ordering::SeqCst);
        if let Some(p) = self.poller.take() {
            p.thread().unpark();
            let _ = p.join();
        }
    }
}

/// The poller thread: park while no task waits; while one does, look at
/// the ring and wake it when something is there, sleeping with backoff
/// between looks.
fn poll_ring(w: &Wake) {
    let mut backoff = BACKOFF_MIN;
    while !w.stop.load(Ordering::SeqCst) {
        let mut waiter = w.waiter.lock().unwrap_or_else(|p| p.into_inner());
        if waiter.is_none() {
            drop(waiter);
            // Unparked by poll_recv when it leaves a waker (or by drop).
            std::thread::park();
            backoff = BACKOFF_MIN;
            continue;
        }
        if !dpdk_sys::eal::is_up() || !w.sock.poll_empty() {
            let task = waiter.take();
            drop(waiter);
            if let Some(t) = task {
                w.stats.wakeups.fetch_add(1, Ordering::Relaxed);
                t.wake();
            }
            backoff = BACKOFF_MIN;
            continue;
        }
        drop(waiter);
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

impl AsyncUdpSocket for UdxSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable)
    }

    /// A send is never refused for want of room with `WouldBlock`: what
    /// the engine cannot take (no mbuf, ring full) is dropped and counted,
    /// as a kernel UDP socket drops on a full qdisc; QUIC's loss recovery
    /// resends it.
    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let segment = t.segment_size.unwrap_or(0);
        let ecn = t.ecn.map_or(0, |e| e as u8);
        let count = match segment {
            0 => u64::from(!t.contents.is_empty()),
            s => t.contents.len().div_ceil(s) as u64,
        };
        let sent = api::send_gso(
            &self.tx,
            &self.sock,
            t.destination,
            t.contents,
            segment,
            ecn,
        ) as u64;
        self.stats.tx_datagrams.fetch_add(sent, Ordering::Relaxed);
        self.stats
            .tx_refused
            .fetch_add(count.saturating_sub(sent), Ordering::Relaxed);
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if rx.next >= rx.batch.len() {
                rx.next = 0;
                if api::recv_burst(&self.sock, &mut rx.batch) == 0 {
                    // Leave the waker with the poller, then look once more:
                    // a datagram that came in between is not missed.
                    *self.wake.waiter.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(cx.waker().clone());
                    if let Some(p) = &self.poller {
                        p.thread().unpark();
                    }
                    if api::recv_burst(&self.sock, &mut rx.batch) == 0 {
                        return Poll::Pending;
                    }
                }
            }
            let n = self.fill(&mut rx, bufs, meta);
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn max_transmit_segments(&self) -> usize {
        SEGMENTS
    }

    fn max_receive_segments(&self) -> usize {
        SEGMENTS
    }

    /// IPv4 datagrams leave with DF set, IPv6 ones are never fragmented.
    fn may_fragment(&self) -> bool {
        false
    }
}

/// The send side is always ready (see `try_send`).
#[derive(Debug)]
struct Writable;

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
