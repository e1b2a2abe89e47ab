//! A quinn 0.11 socket over a udpdemux socket: [`UdxSocket`] implements
//! quinn's `AsyncUdpSocket`, so a QUIC endpoint
//! (`quinn::Endpoint::new_with_abstract_socket`) receives and sends through
//! an engine: one running in the same process ([`UdxSocket::open`], over
//! `udpdemux::api`), or one this process attached to as a client
//! ([`UdxSocket::attach`], over `udpdemux_client`'s [`OwnedSocket`]). Both
//! are one adapter over a [`Backend`]: only taking a batch, sending and
//! looking at the ring differ.
//!
//! * Receive: `poll_recv` takes a batch of up to 64 datagrams from the
//!   socket's delivery ring (`recv_burst`, zero copy) and copies them
//!   into quinn's buffers coalesced the kernel's UDP GRO way
//!   (`RecvBatch::coalesce`: one flow, one ECN codepoint, one size; the
//!   last may be shorter), filling `RecvMeta`'s `addr`, `len`, `stride`,
//!   `ecn` and `dst_ip`. `max_receive_segments` is 64.
//! * Send: `try_send` hands a `Transmit` (with its `segment_size`) to
//!   `send_gso`: headers built once, ECN set, one ring enqueue (the
//!   engine's TX ring in process, the client's own TX ring otherwise).
//!   `max_transmit_segments` is 64 (the kernel's `UDP_MAX_SEGMENTS`).
//! * Wakers: when the ring is empty, `poll_recv` leaves its waker and
//!   returns `Pending`. In process (a socket made by `api::open`) it leaves
//!   it with the socket itself (`Socket::arm_reader`), and the RX lcore
//!   whose delivery finds it waiting wakes the task from its own thread,
//!   as the kernel's `sk_data_ready` wakes an epoll waiter: no thread in
//!   between (bulk echo 94-95 MB/s against 86-90 through a poller thread,
//!   context switches -14%, docs/benchmarks.md). Attached to an engine in
//!   another process, it leaves it with the socket's poller thread (one
//!   plain thread per socket, not a runtime thread), which parks while
//!   nobody waits; while a task waits it looks at the ring (two loads),
//!   sleeping between looks from 20 µs doubling to 1 ms while it stays
//!   empty (to 50 µs while datagrams flow: one in the last 10 ms), and
//!   wakes the task as soon as a datagram is there. So the runtime's
//!   threads never spin; an idle attached socket costs one thread waking
//!   at most 1000 times a second while a receive is pending (see
//!   docs/design.md for why not an eventfd from the engine).
//! * Where quinn runs: on the application's runtime threads, or, in
//!   process, on the engine's RX lcore ([`run_on_rx_lcore`]: a
//!   current-thread tokio runtime driven between the lcore's bursts, its
//!   sends leaving from the same lcore), with no thread hand-off between
//!   a datagram's arrival, quinn and the reply's transmission.
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
use udpdemux::api::{self, Release, Sender, SocketOptions};
use udpdemux::runtime::engine::Engine;
use udpdemux::runtime::error::EngineError;
use udpdemux::socket::Socket;
use udpdemux_client::{Client, OwnedSocket, SocketHandle};

pub mod echo;

/// Datagrams one `RecvMeta` may describe (GRO) and one `Transmit` may
/// carry (GSO).
pub const SEGMENTS: usize = udpdemux::send::MAX_SEGMENTS;

/// The poller's sleep between looks at an empty ring: from the first to
/// the last, doubling; while datagrams flow (one seen in the last
/// `FLOWING`) at most `BACKOFF_FLOWING`. A QUIC flow's next flight comes a
/// round trip later, and a millisecond's sleep then held up every flight:
/// bulk echo 40 to 47 MB/s with the cap at 50 µs (and the timer slack at
/// 1 µs), docs/benchmarks.md. An idle socket still backs off to 1 ms.
const BACKOFF_MIN: Duration = Duration::from_micros(20);
const BACKOFF_FLOWING: Duration = Duration::from_micros(50);
const BACKOFF_MAX: Duration = Duration::from_millis(1);
const FLOWING: Duration = Duration::from_millis(10);
/// A poller the engine wakes on delivery (in process) sleeps this long at
/// most: the timeout is only a safety net (the EAL going away), arrivals
/// end the sleep. Concurrent handshakes 1.08-1.15x in 5 of 6 alternating
/// pairs against the 20-50 µs looks, bulk echo within noise
/// (docs/benchmarks.md).
const WAKEABLE_NAP: Duration = Duration::from_millis(10);

/// Drive `rt`, a current-thread tokio runtime, on the engine's RX lcore
/// `index` (`udpdemux::api::run_on_rx_lcore`): once per loop of the lcore,
/// between its bursts, the runtime runs every task that is ready (the
/// endpoint and connection tasks the lcore's delivery just woke, the
/// application's futures) and its expired timers; the lcore then sends
/// what they queued from its own TX queue. Spawn the endpoints and the
/// application's futures on `rt` first (or later through its handle, from
/// any thread). The runtime is dropped on the lcore when the engine stops.
///
/// A task that blocks blocks the lcore's receive: the futures must not
/// block (as on any async runtime), and CPU-heavy work belongs on other
/// threads (`tokio::task::spawn_blocking` has none here: the runtime's
/// blocking pool still works).
pub fn run_on_rx_lcore(
    engine: &Engine,
    index: usize,
    rt: tokio::runtime::Runtime,
) -> Result<(), EngineError> {
    if rt.handle().runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
        return Err(EngineError::Setup(
            "run_on_rx_lcore drives a current-thread tokio runtime \
             (tokio::runtime::Builder::new_current_thread)"
                .to_string(),
        ));
    }
    // Kept: each call of `Runtime::metrics` clones the handle.
    let metrics = rt.metrics();
    api::run_on_rx_lcore(
        engine,
        index,
        Box::new(move || {
            // One turn: the tasks that are ready run, then the timer
            // driver (no system call: a zero timeout parks no thread),
            // then `yield_now`'s own wake ends the call.
            rt.block_on(tokio::task::yield_now());
            // Woken from outside meanwhile (another thread, a timer): come
            // back at once rather than back off.
            metrics.global_queue_depth() > 0
        }),
    )
}

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
    /// Times a waiting task was woken: by the poller thread (attached), or
    /// in process by the RX lcores themselves on delivery.
    pub wakeups: AtomicU64,
    /// Times an RX lcore woke the waiting task, or the sleeping poller of a
    /// socket not made by `api::open` (in process only: an attached
    /// socket's poller looks with backoff).
    pub rx_wakes: AtomicU64,
}

impl Stats {
    /// The counters as one JSON object (the example's exit line).
    pub fn json(&self) -> String {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            r#"{{"rx_ecn":[{},{},{},{}],"rx_metas":{},"rx_too_long":{},"tx_datagrams":{},"tx_refused":{},"wakeups":{},"rx_wakes":{}}}"#,
            n(&self.rx_ecn[0]),
            n(&self.rx_ecn[1]),
            n(&self.rx_ecn[2]),
            n(&self.rx_ecn[3]),
            n(&self.rx_metas),
            n(&self.rx_too_long),
            n(&self.tx_datagrams),
            n(&self.tx_refused),
            n(&self.wakeups),
            n(&self.rx_wakes)
        )
    }
}

/// A udpdemux socket as the adapter sees it: the engine's own in this
/// process ([`Local`]) or a client's of an engine in another ([`Attached`]).
pub trait Backend: Send + Sync + 'static {
    /// What releases a batch's datagrams.
    type Release: Release + Send + 'static;
    /// What a receive needs to itself (the adapter keeps it behind its
    /// receive lock): the batch, and for a client the socket that owns it.
    type Rx: Send + 'static;
    /// The socket's name (the poller thread's).
    fn name(&self) -> &str;
    /// Take a new batch into `rx`, freeing what it held; how many came.
    fn recv(&self, rx: &mut Self::Rx) -> usize;
    /// The batch taken last.
    fn batch(rx: &Self::Rx) -> &api::RecvBatch<Self::Release>;
    /// Free the batch's datagrams now.
    fn clear(rx: &mut Self::Rx);
    /// Whether a waiting task has something to do: datagrams wait in the
    /// ring, or the EAL is gone (then receives give nothing, for good).
    fn ready(&self) -> bool;
    /// GSO-style send (see `udpdemux::api::send_gso`): how many datagrams
    /// were handed over.
    fn send_gso(&self, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize;
    /// The poller's sleep between looks at an empty ring, `backoff` long,
    /// unless the backend can be woken when datagrams arrive (then up to
    /// `WAKEABLE_NAP`, ended by the arrival). True: the sleep was wakeable
    /// (the backoff need not grow).
    fn wait(&self, backoff: Duration) -> bool {
        std::thread::sleep(backoff);
        false
    }
    /// Leave `waker` with the engine, which wakes the task itself when
    /// datagrams arrive: `Some(true)` when some came meanwhile (look
    /// again), `Some(false)` to wait; `None` when the backend cannot (its
    /// poller thread watches the ring for the task instead).
    fn arm(&self, _waker: &Waker) -> Option<bool> {
        None
    }
    /// Whether [`arm`](Self::arm) works (no poller thread is started).
    fn arms(&self) -> bool {
        false
    }
    /// How often the engine woke the poller on delivery (0: it cannot).
    fn rx_wakes(&self) -> u64 {
        0
    }
}

/// A socket of the engine running in this process.
pub struct Local {
    sock: Arc<Socket>,
    tx: Sender,
}

impl Backend for Local {
    type Release = Arc<Socket>;
    type Rx = api::RecvBatch;

    fn name(&self) -> &str {
        self.sock.name()
    }

    fn recv(&self, rx: &mut api::RecvBatch) -> usize {
        api::recv_burst(&self.sock, rx)
    }

    fn batch(rx: &api::RecvBatch) -> &api::RecvBatch {
        rx
    }

    fn clear(rx: &mut api::RecvBatch) {
        rx.clear();
    }

    fn ready(&self) -> bool {
        !dpdk_sys::eal::is_up() || !self.sock.poll_empty()
    }

    fn send_gso(&self, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize {
        api::send_gso(&self.tx, &self.sock, dst, buf, segment, ecn)
    }

    /// The RX lcores wake the task when they deliver (`Socket::
    /// arm_reader`), as the kernel's `sk_data_ready` wakes an epoll waiter:
    /// no thread in between.
    fn arm(&self, waker: &Waker) -> Option<bool> {
        // The ring's memory goes with the EAL: once it is down nothing
        // arrives, and the task waits for good.
        if !dpdk_sys::eal::is_up() {
            return Some(false);
        }
        self.sock.arm_reader(waker)
    }

    fn arms(&self) -> bool {
        self.sock.expects_reader_tasks()
    }

    /// The RX lcores wake the poller when they deliver (`Socket::
    /// wait_for_datagrams`): no looks every 20-50 µs, and no wait for one.
    fn wait(&self, backoff: Duration) -> bool {
        // The ring's memory goes with the EAL: look only while it is up.
        if dpdk_sys::eal::is_up() && self.sock.wait_for_datagrams(WAKEABLE_NAP) {
            return true;
        }
        std::thread::sleep(backoff);
        false
    }

    fn rx_wakes(&self) -> u64 {
        self.sock.reader_wakeups()
    }
}

/// A socket of an engine in another process, which this process attached
/// to ([`udpdemux_client::Client`]): the owned socket (its batch) is the
/// receive side, its handle sends and watches the ring from any thread.
pub struct Attached {
    handle: SocketHandle,
    name: String,
}

impl Backend for Attached {
    type Release = udpdemux_client::SharedRelease<Arc<dpdk_sys::mp::AtomicZone>>;
    type Rx = OwnedSocket;

    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&self, rx: &mut OwnedSocket) -> usize {
        rx.recv_burst()
    }

    fn batch(rx: &OwnedSocket) -> &udpdemux_client::OwnedBatch {
        rx.batch()
    }

    fn clear(rx: &mut OwnedSocket) {
        rx.clear();
    }

    fn ready(&self) -> bool {
        !dpdk_sys::eal::is_up() || !self.handle.looks_empty()
    }

    fn send_gso(&self, dst: SocketAddr, buf: &[u8], segment: usize, ecn: u8) -> usize {
        self.handle.send_gso(dst, buf, segment, ecn)
    }
}

/// What `poll_recv` keeps between calls: the batch being handed out.
struct Rx<B: Backend> {
    rx: B::Rx,
    next: usize,
}

/// What the poller thread shares with `poll_recv`.
struct Wake<B> {
    port: B,
    waiter: Mutex<Option<Waker>>,
    stop: AtomicBool,
    stats: Arc<Stats>,
}

/// A udpdemux socket as a quinn `AsyncUdpSocket`: over the engine of this
/// process (`UdxSocket<Local>`, [`UdxSocket::open`]) or over a client's
/// socket of an engine in another process (`UdxSocket<Attached>`,
/// [`UdxSocket::attach`]).
pub struct UdxSocket<B: Backend = Local> {
    local: SocketAddr,
    rx: Mutex<Rx<B>>,
    wake: Arc<Wake<B>>,
    poller: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
}

impl<B: Backend> fmt::Debug for UdxSocket<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdxSocket")
            .field("local", &self.local)
            .field("socket", &self.wake.port.name())
            .finish_non_exhaustive()
    }
}

/// Why a socket could not be made.
#[derive(Debug)]
pub enum OpenError {
    Engine(EngineError),
    /// The engine in another process refused (or did not answer).
    Client(udpdemux_client::OpenError),
    /// No port has an address: nothing to send from.
    NoSender,
    Io(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Engine(e) => write!(f, "cannot open the udpdemux socket: {e}"),
            OpenError::Client(e) => write!(f, "{e}"),
            OpenError::NoSender => f.write_str(
                "the engine cannot send: give a [[port]] addresses = [...] on the destination's subnet",
            ),
            OpenError::Io(e) => write!(f, "cannot start the socket's poller thread: {e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl UdxSocket<Local> {
    /// Open an engine socket with `opts` and make it quinn's.
    pub fn open(engine: &Engine, opts: SocketOptions) -> Result<UdxSocket, OpenError> {
        let tx = api::sender(engine).ok_or(OpenError::NoSender)?;
        let sock = api::open(engine, opts).map_err(OpenError::Engine)?;
        UdxSocket::new(sock, tx).map_err(OpenError::Io)
    }

    /// Make an open engine socket quinn's (nothing else may receive from it).
    pub fn new(sock: Arc<Socket>, tx: Sender) -> io::Result<UdxSocket> {
        let local = sock.conf.local;
        UdxSocket::with(Local { sock, tx }, api::RecvBatch::new(), local)
    }

    /// The engine socket underneath.
    pub fn socket(&self) -> &Arc<Socket> {
        &self.wake.port.sock
    }
}

impl UdxSocket<Attached> {
    /// Bind a socket with `opts` in the engine `client` is attached to
    /// ([`Client::bind_owned`]) and make it quinn's. The socket borrows
    /// nothing of `client`: it may live on the runtime's threads while
    /// the client stays on its own (drop the endpoint, and so this, before
    /// the client detaches, or the EAL is left up until the process exits).
    pub fn attach(client: &Client, opts: SocketOptions) -> Result<UdxSocket<Attached>, OpenError> {
        let local = opts.local;
        let sock = client.bind_owned(opts).map_err(OpenError::Client)?;
        UdxSocket::over(sock, local).map_err(OpenError::Io)
    }

    /// Make a client's owned socket quinn's, `local` its bound address.
    pub fn over(sock: OwnedSocket, local: SocketAddr) -> io::Result<UdxSocket<Attached>> {
        let port = Attached {
            handle: sock.handle(),
            name: sock.name().to_string(),
        };
        UdxSocket::with(port, sock, local)
    }
}

impl<B: Backend> UdxSocket<B> {
    fn with(port: B, rx: B::Rx, local: SocketAddr) -> io::Result<UdxSocket<B>> {
        let stats = Arc::new(Stats::default());
        let name = format!("udx-quic-{}", port.name());
        let wake = Arc::new(Wake {
            port,
            waiter: Mutex::new(None),
            stop: AtomicBool::new(false),
            stats: Arc::clone(&stats),
        });
        let w = Arc::clone(&wake);
        let poller = if wake.port.arms() {
            None
        } else {
            Some(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || poll_ring(&w))?,
            )
        };
        Ok(UdxSocket {
            local,
            rx: Mutex::new(Rx { rx, next: 0 }),
            wake,
            poller,
            stats,
        })
    }

    /// The adapter's counters.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Hand out datagrams of the held batch into quinn's buffers; how many
    /// `RecvMeta`s were filled.
    fn fill(&self, rx: &mut Rx<B>, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> usize {
        let mut n = 0;
        let len = B::batch(&rx.rx).len();
        for (buf, m) in bufs.iter_mut().zip(meta.iter_mut()) {
            loop {
                if rx.next >= len {
                    break;
                }
                match B::batch(&rx.rx).coalesce(rx.next, buf, SEGMENTS) {
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
            if rx.next >= len {
                break;
            }
        }
        if rx.next >= len {
            // All copied out: give the mbufs and their memory back now,
            // not at the next receive.
            B::clear(&mut rx.rx);
            rx.next = 0;
        }
        self.stats.rx_metas.fetch_add(n as u64, Ordering::Relaxed);
        if self.poller.is_none() {
            // The engine wakes the task itself: its count, as of now.
            let woken = self.wake.port.rx_wakes();
            self.stats.rx_wakes.store(woken, Ordering::Relaxed);
            self.stats.wakeups.store(woken, Ordering::Relaxed);
        }
        n
    }
}

impl<B: Backend> Drop for UdxSocket<B> {
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
fn poll_ring<B: Backend>(w: &Wake<B>) {
    // Sleeps of 20-50 µs would otherwise be rounded up by the default
    // 50 µs timer slack.
    udpdemux::runtime::idle::reduce_timer_slack();
    let mut backoff = BACKOFF_MIN;
    let mut last_seen = std::time::Instant::now();
    while !w.stop.load(Ordering::SeqCst) {
        let mut waiter = w.waiter.lock().unwrap_or_else(|p| p.into_inner());
        if waiter.is_none() {
            drop(waiter);
            // Unparked by poll_recv when it leaves a waker (or by drop).
            std::thread::park();
            backoff = BACKOFF_MIN;
            continue;
        }
        if w.port.ready() {
            let task = waiter.take();
            drop(waiter);
            if let Some(t) = task {
                w.stats.wakeups.fetch_add(1, Ordering::Relaxed);
                t.wake();
            }
            backoff = BACKOFF_MIN;
            last_seen = std::time::Instant::now();
            continue;
        }
        drop(waiter);
        if w.port.wait(backoff) {
            w.stats.rx_wakes.store(w.port.rx_wakes(), Ordering::Relaxed);
            continue;
        }
        let cap = if last_seen.elapsed() < FLOWING {
            BACKOFF_FLOWING
        } else {
            BACKOFF_MAX
        };
        backoff = (backoff * 2).min(cap);
    }
}

impl<B: Backend> AsyncUdpSocket for UdxSocket<B> {
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
        let sent = self
            .wake
            .port
            .send_gso(t.destination, t.contents, segment, ecn) as u64;
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
        let port = &self.wake.port;
        loop {
            if rx.next >= B::batch(&rx.rx).len() {
                rx.next = 0;
                if port.recv(&mut rx.rx) == 0 {
                    match port.arm(cx.waker()) {
                        // The engine wakes the task on delivery.
                        Some(false) => return Poll::Pending,
                        // Datagrams came meanwhile. A ring that looked
                        // non-empty and gave nothing (never seen) costs a
                        // poll, not a spin.
                        Some(true) => {
                            if port.recv(&mut rx.rx) == 0 {
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                        }
                        None => {
                            // Leave the waker with the poller, then look once
                            // more: a datagram that came in between is not
                            // missed.
                            *self.wake.waiter.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(cx.waker().clone());
                            if let Some(p) = &self.poller {
                                p.thread().unpark();
                            }
                            if port.recv(&mut rx.rx) == 0 {
                                return Poll::Pending;
                            }
                        }
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
