//! The embedding API: open a socket on a running [`Engine`] and take its
//! datagrams in batches, like `recvmmsg(2)` on a kernel UDP socket.
//!
//! ```no_run
//! # use udpdemux::{api, config::Config, runtime::engine::{Engine, RunOptions}};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = Config::load(std::path::Path::new("conf/af_packet.toml"))?;
//! let engine = Engine::start(&cfg, &RunOptions::default())?;
//! let sock = api::open(&engine, api::SocketOptions::new("app", "198.18.0.1:5000".parse()?))?;
//! let mut batch = api::RecvBatch::new();
//! for _ in 0..1000 {
//!     api::recv_burst(&sock, &mut batch);
//!     for dg in batch.iter() {
//!         println!("{} -> {}: {} bytes", dg.src(), dg.dst(), dg.payload().len());
//!     }
//!     // The next recv_burst (or clear, or drop) frees the datagrams and
//!     // gives their memory back to the socket's budget.
//! }
//! drop(batch);
//! api::close(&engine, &sock)?;
//! engine.stop()?;
//! # Ok(()) }
//! ```
//!
//! Datagrams stay in their mbufs (zero copy) until the batch is cleared;
//! they count against the socket's `rcvbuf` meanwhile, as unread data does
//! in the kernel. Freeing goes through [`Socket::consume`], the same path
//! the built-in handlers use.
use std::net::SocketAddr;
use std::sync::Arc;

use dpdk_sys::MbufBurst;

use crate::config::SocketConf;
pub use crate::gro::Coalesced;
use crate::handlers::addrs;
use crate::meta::DgramMeta;
use crate::parse::{Datagram, Family};
use crate::runtime::engine::Engine;
use crate::runtime::error::EngineError;
pub use crate::runtime::lcore_task::LcoreTask;
use crate::runtime::registry;
use crate::socket::Socket;

/// Datagrams per batch (the ring dequeue burst).
pub const BATCH: usize = 64;

/// What to open: a bound (or connected) socket consumed by the caller
/// (the same options a client binds with, so it lives with the protocol).
pub use crate::client_proto::SocketOptions;

/// Open a socket whose datagrams only [`recv_burst`] takes (no built-in handler consumes it).
pub fn open(engine: &Engine, o: SocketOptions) -> Result<Arc<Socket>, EngineError> {
    let conf = socket_conf(o).map_err(EngineError::Setup)?;
    // An in-process reader may wait as a task (`Socket::arm_reader`).
    Ok(registry::add_socket_with(engine.shared(), conf, Socket::expect_reader_tasks)?)
}

/// The `[[socket]]` table of `o` (`handler = "none"`), through the
/// config's own deserializer, so every other setting keeps its
/// config-file default. A client's bind is made the same way.
pub fn socket_conf(o: SocketOptions) -> Result<SocketConf, String> {
    let mut t = toml::Table::new();
    t.insert("name".into(), o.name.into());
    t.insert("local".into(), o.local.to_string().into());
    if let Some(r) = o.remote {
        t.insert("remote".into(), r.to_string().into());
    }
    t.insert("reuseport".into(), o.reuseport.into());
    t.insert("rcvbuf".into(), i64::from(o.rcvbuf).into());
    t.insert("ring_size".into(), i64::from(o.ring_size).into());
    t.insert("handler".into(), "none".into());
    t.try_into().map_err(|e: toml::de::Error| e.to_string())
}

/// One socket's counters (`client_proto::SocketStats`): the same type
/// `udpdemux_client::Client::stats` gives a client in another process.
pub use crate::client_proto::SocketStats;

/// Why [`stats`] gave no counters.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The engine has no live socket of that name (the reason lists its sockets).
    #[error("no stats for socket {name:?}: {reason}")]
    NoSuchSocket { name: String, reason: String },
}

/// The counters of the engine's socket `name` (any live socket: one this
/// application opened, a configured one, one a client bound), read as
/// the exit JSON and telemetry read them. Callable from any thread; no
/// lock on the packet path (plain loads of the counters).
pub fn stats(engine: &Engine, name: &str) -> Result<SocketStats, StatsError> {
    crate::runtime::clients::socket_stats(engine.shared(), name).map_err(|(_, reason)| {
        StatsError::NoSuchSocket {
            name: name.into(),
            reason,
        }
    })
}

/// Close a socket: unbind it; what is still queued is freed and counted.
pub fn close(engine: &Engine, sock: &Socket) -> Result<(), EngineError> {
    Ok(registry::remove_socket(engine.shared(), sock.name())?)
}

/// Run `task` on RX lcore `index` (its place among the config's RX
/// lcores, 0 the first) once per loop, between its bursts: the
/// application runs to completion on the lcore that receives its
/// datagrams (`runtime::lcore_task`; the QUIC adapter drives a tokio
/// runtime this way). The task returns whether it did work (the lcore then
/// does not back off towards a nap).
///
/// The first RX lcore given a task also takes the send path over from the
/// main lcore: what any sender queues ([`send_burst`], [`send_gso`],
/// clients' requests) leaves from that lcore's TX queue after each call of
/// its task, with no hand-off to the main lcore, and the neighbour table's
/// timers run there. Frames other threads queue wait for the lcore's next
/// loop (at most `engine.idle_sleep_us` while it naps).
///
/// Call it on the thread that owns the engine (the main lcore), between
/// its [`Engine::main_loop`] slices. The task is dropped on the lcore when
/// the engine stops. Errors: no such RX lcore, or it has a task already.
pub fn run_on_rx_lcore(engine: &Engine, index: usize, task: LcoreTask) -> Result<(), EngineError> {
    let shared = engine.shared();
    let Some(lcore) = shared.rx.get(index) else {
        return Err(EngineError::Setup(format!(
            "no RX lcore {index} to run a task on: the config has {}",
            shared.rx.len()
        )));
    };
    let busy = || EngineError::Setup(format!("RX lcore {index} (lcore {}) runs a task already", lcore.lcore));
    if lcore.task.active() {
        return Err(busy());
    }
    // Before the lcore can take the task: from its first call on, the
    // main lcore (this thread, outside its loop now) no longer services
    // the path, so the two never do at once.
    if let Some(tx) = shared.send.as_ref() {
        if tx.hand_to_rx_lcore(index) {
            log::info!("the send path is RX lcore {}'s now (its task's sends leave from it)", lcore.lcore);
        }
    }
    lcore.task.offer(task).map_err(|_| busy())
}

/// Who frees a batch's datagrams and releases their memory: the socket
/// they came from. In-process that is the engine's [`Socket`] itself;
/// `udpdemux-client` has its own for sockets it reads from another process
/// (its shared counters), so both kinds of socket fill the same
/// [`RecvBatch`].
pub trait Release {
    /// Free every mbuf of `bufs` (empty afterwards) and release what they
    /// held from the socket's budget.
    fn release(&mut self, bufs: &mut MbufBurst<BATCH>);
}

impl Release for Arc<Socket> {
    fn release(&mut self, bufs: &mut MbufBurst<BATCH>) {
        self.consume(bufs)
    }
}

/// A batch of received datagrams, owned until cleared; `R` releases them
/// (see [`Release`]).
pub struct RecvBatch<R: Release = Arc<Socket>> {
    from: Option<R>,
    bufs: MbufBurst<BATCH>,
}

impl<R: Release> Default for RecvBatch<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Release> std::fmt::Debug for RecvBatch<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("len", &self.len())
            .finish()
    }
}

impl<R: Release> RecvBatch<R> {
    pub fn new() -> RecvBatch<R> {
        RecvBatch {
            from: None,
            bufs: MbufBurst::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Datagram `i` of the batch.
    pub fn get(&self, i: usize) -> Option<Received<'_>> {
        // The batch owns the mbuf until clear(); its metadata was set at RX.
        Received::of(self.bufs.get(i)?)
    }

    pub fn iter(&self) -> impl Iterator<Item = Received<'_>> {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// Opt-in receive coalescing (the kernel's UDP GRO, see [`crate::gro`]):
    /// copy the datagrams from `from` on into `out` while they are of one
    /// flow, one ECN codepoint and one size (the last may be shorter), at
    /// most `max_segments`. The run's `count` says how many datagrams it
    /// took: the next run starts at `from + count`. `None` past the end, or
    /// when datagram `from` is longer than `out`.
    pub fn coalesce(&self, from: usize, out: &mut [u8], max_segments: usize) -> Option<Coalesced> {
        crate::gro::coalesce((from..self.len()).map_while(|i| self.get(i)), out, max_segments)
    }

    /// Free every datagram and release its memory from the socket's budget.
    pub fn clear(&mut self) {
        if self.bufs.is_empty() {
            return;
        }
        match &mut self.from {
            Some(r) => r.release(&mut self.bufs),
            None => self.bufs.clear(),
        }
    }

    /// A receive: clear the batch, keep its releaser if `is_for` accepts
    /// it, else put the one `make` gives in its place (`None`: none can be
    /// had, nothing is taken), then let `take` fill the batch. How many
    /// datagrams `take` put in. Socket kinds' `recv_burst` are made of this.
    pub fn refill(
        &mut self,
        is_for: impl FnOnce(&R) -> bool,
        make: impl FnOnce() -> Option<R>,
        take: impl FnOnce(&mut R, &mut MbufBurst<BATCH>) -> usize,
    ) -> usize {
        self.clear();
        if !self.from.as_ref().is_some_and(is_for) {
            // The old releaser goes first (a client's gives its record back).
            self.from = None;
            self.from = make();
        }
        match &mut self.from {
            Some(r) => take(r, &mut self.bufs),
            None => 0,
        }
    }

    /// Forget the datagrams without freeing them: the engine's memory is
    /// gone with its EAL.
    pub fn forget(&mut self) {
        self.bufs.take_raw();
    }
}

impl<R: Release> Drop for RecvBatch<R> {
    fn drop(&mut self) {
        if dpdk_sys::eal::is_up() {
            self.clear();
        } else {
            // The engine stopped (or the client detached): the mbufs'
            // memory is unmapped, so they are forgotten, not freed.
            self.forget();
        }
    }
}

/// One received datagram, borrowed from its batch.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    m: dpdk_sys::MbufRef<'a>,
    frame: &'a [u8],
    meta: DgramMeta,
    d: Datagram,
}

impl<'a> Received<'a> {
    /// The datagram in an engine mbuf delivered to a socket (its metadata
    /// was set at RX), borrowed for as long as the view. Also how
    /// `udpdemux-client` reads the mbufs it takes from a delivery ring.
    pub fn of(m: dpdk_sys::MbufRef<'a>) -> Option<Received<'a>> {
        let (frame, meta) = (m.data(), crate::meta::dgram(m));
        let d = crate::handlers::datagram_of_mbuf(m, &meta)?;
        Some(Received { m, frame, meta, d })
    }
    /// The UDP payload, when it lies in one buffer: always, except for a
    /// datagram reassembled from fragments, whose payload spans several
    /// segments; then this is empty and [`payload_segments`](Self::payload_segments)
    /// or [`copy_payload`](Self::copy_payload) read it whole.
    pub fn payload(&self) -> &'a [u8] {
        self.d.payload(self.frame).unwrap_or_default()
    }
    /// True when the payload is in one segment ([`payload`](Self::payload) holds it).
    pub fn is_contiguous(&self) -> bool {
        self.m.nb_segs() == 1
    }
    /// The UDP payload's length (every segment).
    pub fn payload_len(&self) -> usize {
        usize::from(self.d.payload_len)
    }
    /// The UDP payload, segment by segment (one slice unless reassembled).
    pub fn payload_segments(&self) -> impl Iterator<Item = &'a [u8]> {
        crate::handlers::payload_segments(self.m, &self.d)
    }
    /// Copies the payload (every segment) into `out`; returns the bytes
    /// copied (`payload_len()`, or less if `out` is shorter).
    pub fn copy_payload(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for seg in self.payload_segments() {
            let k = seg.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&seg[..k]);
            n += k;
            if n == out.len() {
                break;
            }
        }
        n
    }
    /// The first segment of the frame as received (Ethernet header first):
    /// the whole frame unless reassembled.
    pub fn frame(&self) -> &'a [u8] {
        self.frame
    }
    /// The frame's length over every segment.
    pub fn frame_len(&self) -> usize {
        self.m.pkt_len() as usize
    }
    pub fn src(&self) -> SocketAddr {
        addrs(&self.d).0
    }
    pub fn dst(&self) -> SocketAddr {
        addrs(&self.d).1
    }
    pub fn family(&self) -> Family {
        self.d.family
    }
    /// The ECN codepoint it arrived with: the low 2 bits of the IPv4 TOS
    /// byte or the IPv6 traffic class (RFC 3168: 0 not-ECT, 1 ECT(1),
    /// 2 ECT(0), 3 CE), as `IP_RECVTOS` / `IPV6_RECVTCLASS` report it.
    pub fn ecn(&self) -> u8 {
        let l3 = self.frame.get(usize::from(self.meta.l3_off)..).unwrap_or_default();
        let tos = match self.d.family {
            Family::V4 => crate::parse::ipv4::Ipv4Packet::new_checked(l3).map(|ip| ip.dscp_ecn()),
            Family::V6 => crate::parse::ipv6::Ipv6Packet::new_checked(l3).map(|ip| ip.traffic_class()),
        };
        tos.map_or(0, |t| t & 0b11)
    }
    /// TSC of the burst it arrived in (`dpdk_sys::eal::rdtsc` clock; the
    /// RX timestamp, taken once per `rx_burst`).
    pub fn rx_tsc(&self) -> u64 {
        self.meta.rx_tsc
    }
    /// The socket's drop count when this datagram's batch reached the ring
    /// (`SO_RXQ_OVFL`): a change between datagrams means drops in between.
    pub fn drops(&self) -> u32 {
        self.meta.drop_snapshot
    }
    /// The DPDK port it arrived on.
    pub fn port(&self) -> u16 {
        self.m.port()
    }
}

impl crate::gro::Segment for Received<'_> {
    fn flow(&self) -> (SocketAddr, SocketAddr) {
        addrs(&self.d)
    }
    fn ecn(&self) -> u8 {
        Received::ecn(self)
    }
    fn payload_len(&self) -> usize {
        Received::payload_len(self)
    }
    fn copy_to(&self, out: &mut [u8]) {
        self.copy_payload(out);
    }
}

/// Take up to [`BATCH`] datagrams from `sock` into `batch`, freeing what the
/// batch held before. Returns how many arrived (0: none waiting).
pub fn recv_burst(sock: &Arc<Socket>, batch: &mut RecvBatch) -> usize {
    // A socket held past `Engine::stop` receives nothing (its ring's memory
    // went with the EAL).
    if !dpdk_sys::eal::is_up() {
        batch.forget();
        return 0;
    }
    batch.refill(
        |s| Arc::ptr_eq(s, sock),
        || Some(Arc::clone(sock)),
        |s, bufs| s.dequeue(bufs, BATCH),
    )
}

/// What `send_burst` sends with: the engine's TX ring, pool, neighbour
/// table and ports. Cheap to clone, `Send + Sync`: every application
/// thread may hold one (no TX queue is involved on the caller's side).
#[derive(Clone)]
pub struct Sender {
    shared: Arc<crate::runtime::shared::Shared>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// A [`Sender`] for `engine`; `None` when no port has an address (there is
/// nothing to send from).
pub fn sender(engine: &Engine) -> Option<Sender> {
    engine.shared().send.as_ref()?;
    Some(Sender {
        shared: Arc::clone(engine.shared()),
    })
}

/// Send datagrams from `sock` (its bound address and port; a wildcard
/// address sends from the outgoing port's address on the destination's
/// subnet), like `sendmmsg(2)`: each `(destination, payload)` becomes one
/// Ethernet/IP/UDP frame in an engine mbuf, put on the engine's TX ring;
/// the main lcore gives it the next hop's MAC (resolving it by ARP or
/// neighbour discovery first, holding up to `unres_qlen` datagrams per
/// neighbour meanwhile) and transmits it on its own TX queue. Returns how
/// many were taken; the others were refused and counted (payload above
/// 65 507 bytes (IPv4) or 65 527 (IPv6), no on-link port, no mbuf or ring
/// room). A datagram over the 1500-byte MTU leaves as fragments. No lock, no heap
/// allocation; callable from any thread.
pub fn send_burst(tx: &Sender, sock: &Socket, dgrams: &[(SocketAddr, &[u8])]) -> usize {
    send_from(tx, sock.conf.local, dgrams)
}

/// GSO-style send (`UDP_SEGMENT`): `buf` cut into datagrams of `segment`
/// bytes (the last may be shorter; 0: one datagram), at most [`crate::send::MAX_SEGMENTS`],
/// all to `dst` from `sock`, with ECN codepoint `ecn` (0 not-ECT, 1
/// ECT(1), 2 ECT(0), 3 CE). Headers are built once and copied; checksums
/// go to the NIC when the port offers it; one ring enqueue (the main lcore
/// sends them in one `tx_burst`). How many datagrams were taken (see
/// `send::send_segments`). No lock, no heap allocation.
pub fn send_gso(
    tx: &Sender,
    sock: &Socket,
    dst: SocketAddr,
    buf: &[u8],
    segment: usize,
    ecn: u8,
) -> usize {
    if !dpdk_sys::eal::is_up() {
        return 0;
    }
    let Some(path) = tx.shared.send.as_ref() else {
        return 0;
    };
    crate::send::send_segments(path, &tx.shared.ifaces, sock.conf.local, dst, buf, segment, ecn)
}

/// As [`send_burst`], from an address and port given by the caller.
pub fn send_from(tx: &Sender, local: SocketAddr, dgrams: &[(SocketAddr, &[u8])]) -> usize {
    if !dpdk_sys::eal::is_up() {
        return 0;
    }
    let Some(path) = tx.shared.send.as_ref() else {
        return 0;
    };
    crate::send::send_burst(path, &tx.shared.ifaces, &tx.shared.frag_out, local, dgrams)
}
