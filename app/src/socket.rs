//! An engine socket: its binding, its receive side (stages, accounting,
//! delivery lock) and its delivery ring, which a consumer reads.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dpdk_sys::inflight::Orphan;
use dpdk_sys::{eal, ring, MbufBurst, MbufRing};

use crate::client_proto::{self, Slot};
use crate::config::binding_of;
use crate::config::{Handler, SocketConf};
use crate::counters::{ConsumerStats, Counter};
use crate::flow_table::Binding;
use crate::latency::Histogram;
use crate::meta::{self, MbufMeta, RingSink};
use crate::receive::sync::CachePadded;
use crate::receive::{RxSocket, RxSocketParams, SocketStats};

/// Empty dequeues in a row after which a consumer releases its deficit.
pub const IDLE_POLLS_BEFORE_RELEASE: u64 = 256;

/// `run --floor pipeline`: what the RX lcores put straight into the ring
/// (no stage, no accounting). Written once per burst per socket by the RX
/// lcore(s); atomic adds when several RX lcores share the socket.
#[derive(Debug, Default)]
pub struct FloorStats {
    /// Enqueued into the delivery ring.
    delivered: std::sync::atomic::AtomicU64,
    /// Refused by a full ring (freed by the RX lcore).
    ring_full: std::sync::atomic::AtomicU64,
    /// Set before the first floor enqueue: the ring holds uncharged mbufs
    /// without metadata, so teardown must not release their truesize.
    active: std::sync::atomic::AtomicBool,
    /// `run --alternate-floor`: the ring holds the pipeline's charged mbufs
    /// and the floor's uncharged ones, which carry this dynamic flag.
    mark: std::sync::atomic::AtomicU64,
}

impl FloorStats {
    /// Count one burst's outcome. `shared`: other RX lcores add too.
    #[inline(always)]
    pub fn add(&self, delivered: u64, ring_full: u64, shared: bool) {
        for (c, v) in [(&self.delivered, delivered), (&self.ring_full, ring_full)] {
            if v == 0 {
                continue;
            }
            if shared {
                c.fetch_add(v, Ordering::Relaxed);
            } else {
                c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
            }
        }
    }
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
    pub fn ring_full(&self) -> u64 {
        self.ring_full.load(Ordering::Relaxed)
    }
    pub fn activate(&self) {
        self.active.store(true, Ordering::SeqCst);
    }
    pub fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }
    /// Before the first floor enqueue of `run --alternate-floor`: the
    /// floor's mbufs in the ring carry `mark` in their offload flags.
    pub fn set_mark(&self, mark: u64) {
        self.mark.store(mark, Ordering::SeqCst);
    }
    /// The floor's mark (0: the ring holds no marked mbufs).
    pub fn mark(&self) -> u64 {
        self.mark.load(Ordering::SeqCst)
    }
}

/// One engine socket.
pub struct Socket {
    pub id: u32,
    /// As created. A reload may since have changed rcvbuf, consume_rate_pps
    /// and the pcap file in place: [`Socket::current_conf`] has those.
    pub conf: SocketConf,
    pub rx: RxSocket<MbufMeta, RingSink>,
    pub ring: Arc<MbufRing>,
    /// RX to delivery-ring latency (the seed's `__udp_enqueue_schedule_skb` time).
    pub stage_latency: Arc<Histogram>,
    /// RX to consumer dequeue latency. The consumer-side fields are each on
    /// their own cache lines: RX lcores read this struct for every datagram,
    /// and a consumer write next to what they read costs them a miss.
    pub consumer_latency: CachePadded<Histogram>,
    pub consumer: CachePadded<ConsumerStats>,
    /// Multicast copies offered to this socket (its `multicast` counter):
    /// RX lcores add to it, so it is atomic and on its own line.
    pub multicast: CachePadded<std::sync::atomic::AtomicU64>,
    /// The handler's own state (the pcap writer), touched by the socket's
    /// consumer once per burst: the mutex is contended only while a reload
    /// replaces the socket by one that keeps writing the same file (the two
    /// share the state until the old one is gone).
    pub handler_state: Arc<std::sync::Mutex<crate::handlers::State>>,
    /// The settings a reload may change in place (rcvbuf, consume_rate_pps,
    /// pcap_file, pcap_limit_bytes) as they are now; `conf` keeps those it
    /// was created with. Control path only.
    live_conf: std::sync::Mutex<SocketConf>,
    /// Bytes consumers freed but did not release to `rx` yet (atomic: a
    /// teardown may empty the ring while the consumer still polls it).
    release_deficit: CachePadded<std::sync::atomic::AtomicU64>,
    /// Consecutive empty dequeues (the consumer is really idle: pay the deficit).
    empty_streak: CachePadded<Counter>,
    /// `latency::inverse` of TSC cycles per µs.
    us_inv: u64,
    /// `run --floor pipeline` counters (zero otherwise).
    pub floor: CachePadded<FloorStats>,
    /// The counters an out-of-process client shares with the engine
    /// (`client_proto::Slot`, memzone `udx_c<id>`): reserved when a client
    /// first opens the socket (not at creation: each memzone counts against
    /// DPDK's 2560 per process, and `MAX_SOCKETS` rings take most of
    /// them), freed with the socket.
    zone: std::sync::OnceLock<dpdk_sys::mp::AtomicZone>,
    /// The in-process reader that sleeps until datagrams arrive (see
    /// [`Socket::wait_for_datagrams`]); RX lcores kick it after each enqueue.
    rx_wake: Arc<crate::wake::Wake>,
    /// The NUMA socket of the ring (and of the client zone).
    numa: i32,
    /// What clients consumed, as folded from the zone (main lcore only).
    pub client: CachePadded<ClientStats>,
    /// The pid of the client that bound this socket (0: the config or the
    /// API made it): it is removed at that client's unbind or death.
    pub bound_by_client: std::sync::atomic::AtomicU32,
}

/// An out-of-process client's consumption of a socket, folded from its
/// shared counters by the main lcore (the only writer).
#[derive(Debug, Default)]
pub struct ClientStats {
    pub consumed: Counter,
    pub bytes: Counter,
    /// The zone's running totals `Slot::Consumed` and `ConsumedBytes` as
    /// last folded.
    folded: [Counter; 2],
    /// The zone's `Slot::Released` as last given back to the socket's
    /// budget. Claimed by compare-and-swap, so each freed byte is released
    /// once whoever sees it first: the main lcore's fold, or an RX lcore
    /// that finds the budget half spent (the kernel's reader releases
    /// memory as it frees, `udp_rmem_release`; waiting for the main lcore,
    /// which naps while a client shares its CPU, starved a busy client's
    /// socket of budget: 89 datagrams per nap at the default rcvbuf).
    released: std::sync::atomic::AtomicU64,
    /// Datagrams a dead client held, freed by the engine (also counted in
    /// `freed_at_close`: delivered, then freed without being consumed).
    pub reclaimed: Counter,
    /// Datagrams a client died while freeing: counted consumed (its
    /// counting had finished), not freed again (its free may have begun),
    /// so at most that many mbufs may be lost to the pool.
    pub lost_in_free: Counter,
}

/// Move `claimed` up to `total` (a running total that only grows) and
/// return by how much: of threads racing with totals they read at different
/// times, each amount is returned to exactly one, and a stale total (at or
/// below what was claimed) returns 0.
#[inline]
fn claim_up_to(claimed: &std::sync::atomic::AtomicU64, total: u64) -> u64 {
    let mut f = claimed.load(Ordering::Relaxed);
    while total > f {
        match claimed.compare_exchange_weak(f, total, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return total - f,
            Err(now) => f = now,
        }
    }
    0
}

/// What reaping a dead client's rows of one socket did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// Rows the client had claimed.
    pub rows: u64,
    /// Mbufs freed here (held, or in a free that had not begun).
    pub freed: u64,
    /// Of those, datagrams it had not counted (now `reclaimed_from_client`).
    pub uncounted: u64,
    /// Mbufs it died while freeing (not freed again).
    pub lost: u64,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("id", &self.id)
            .field("name", &self.conf.name)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("socket {name:?}: {source}")]
    Ring {
        name: String,
        source: dpdk_sys::DpdkError,
    },
    #[error("socket {name:?}: {msg}")]
    Delivery { name: String, msg: String },
    #[error("socket {name:?}: {source}")]
    Handler {
        name: String,
        source: crate::handlers::HandlerError,
    },
}

impl Socket {
    /// `nodes`: stages per socket (distinct NUMA/virtual nodes of RX lcores).
    pub fn new(
        id: u32,
        conf: SocketConf,
        nodes: usize,
        socket_id: i32,
    ) -> Result<Socket, SocketError> {
        Socket::with_handler(id, conf, nodes, socket_id, None)
    }

    /// As [`Socket::new`]; with `handler`, the socket shares that handler
    /// state (a reload replacing a pcap socket that keeps its file) instead
    /// of creating its own.
    pub fn with_handler(
        id: u32,
        conf: SocketConf,
        nodes: usize,
        socket_id: i32,
        handler: Option<Arc<std::sync::Mutex<crate::handlers::State>>>,
    ) -> Result<Socket, SocketError> {
        // rte_ring names are global per process and at most 31 chars.
        let rname = meta::delivery_ring_name(id);
        // Single producer: the delivery lock serialises drainers. Multi-consumer:
        // teardown may empty the ring while a consumer lcore still polls it.
        let ring = MbufRing::create(
            &rname,
            conf.ring_size.next_power_of_two(),
            socket_id,
            ring::SP_ENQ,
        )
        .map_err(|source| SocketError::Ring {
            name: conf.name.clone(),
            source,
        })?;
        let ring = Arc::new(ring);
        let handler_state = match handler {
            Some(h) => h,
            None => Arc::new(std::sync::Mutex::new(
                crate::handlers::State::for_conf(&conf).map_err(|source| SocketError::Handler {
                    name: conf.name.clone(),
                    source,
                })?,
            )),
        };
        let cycles_per_us = (eal::tsc_hz() / 1_000_000).max(1);
        let stage_latency = Arc::new(Histogram::default());
        let us_inv = crate::latency::inverse(cycles_per_us);
        let rx_wake = Arc::new(crate::wake::Wake::new());
        let sink = RingSink::new(
            Arc::clone(&ring),
            Arc::clone(&stage_latency),
            us_inv,
            Arc::clone(&rx_wake),
        );
        let rx = RxSocket::new(
            RxSocketParams {
                nodes,
                rcvbuf: conf.rcvbuf as usize,
                drop_snapshot: true,
            },
            sink,
        )
        .map_err(|e| SocketError::Delivery {
            name: conf.name.clone(),
            msg: e.to_string(),
        })?;
        let consumer: CachePadded<ConsumerStats> = CachePadded::default();
        consumer.rate_pps.set(conf.consume_rate_pps);
        Ok(Socket {
            id,
            live_conf: std::sync::Mutex::new(conf.clone()),
            conf,
            rx,
            ring,
            stage_latency,
            consumer_latency: CachePadded::default(),
            consumer,
            multicast: CachePadded::default(),
            handler_state,
            release_deficit: CachePadded(std::sync::atomic::AtomicU64::new(0)),
            empty_streak: CachePadded::default(),
            us_inv,
            floor: CachePadded::default(),
            zone: std::sync::OnceLock::new(),
            numa: socket_id,
            client: CachePadded::default(),
            bound_by_client: std::sync::atomic::AtomicU32::new(0),
            rx_wake,
        })
    }

    pub fn name(&self) -> &str {
        &self.conf.name
    }

    pub fn handler(&self) -> Handler {
        self.conf.handler
    }

    pub fn binding(&self) -> Binding {
        binding_of(&self.conf)
    }

    pub fn stats(&self) -> SocketStats {
        self.rx.stats()
    }

    /// The consumer's rate limit now (datagrams per second, 0: none).
    #[inline]
    pub fn consume_rate_pps(&self) -> u64 {
        self.consumer.rate_pps.get()
    }

    /// The socket's settings as they are now (after in-place reloads).
    pub fn current_conf(&self) -> SocketConf {
        let mut c = self
            .live_conf
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        c.rcvbuf = u32::try_from(self.rx.rcvbuf()).unwrap_or(u32::MAX);
        c.consume_rate_pps = self.consume_rate_pps();
        c
    }

    /// Apply the settings a reload may change without unbinding: rcvbuf,
    /// `consume_rate_pps`, and (with `handler`) a new handler state for a
    /// changed pcap file. Nothing queued is dropped: a lower rcvbuf only
    /// refuses new datagrams until the consumer has freed enough.
    pub fn change_in_place(&self, conf: &SocketConf, handler: Option<crate::handlers::State>) {
        self.rx.set_rcvbuf(conf.rcvbuf as usize);
        self.consumer.rate_pps.set(conf.consume_rate_pps);
        {
            let mut st = self.handler_state.lock().unwrap_or_else(|p| p.into_inner());
            match handler {
                // The old writer is flushed and closed when it drops here.
                Some(h) => *st = h,
                None => {
                    if let crate::handlers::State::Pcap(sink) = &mut *st {
                        sink.set_limit(conf.pcap_limit_bytes);
                    }
                }
            }
        }
        *self.live_conf.lock().unwrap_or_else(|p| p.into_inner()) = conf.clone();
    }

    /// Dequeue up to `max` mbufs from the delivery ring into `out` (which
    /// the caller empties between bursts). Once the ring has stayed empty
    /// for a while, or when `max` is 0 (a rate-limited consumer), the
    /// release deficit is paid.
    #[inline]
    pub fn dequeue<const N: usize>(&self, out: &mut MbufBurst<N>, max: usize) -> usize {
        if self.poll_empty() {
            if max == 0 {
                self.flush_release();
            }
            return 0;
        }
        let n = self.ring.dequeue(out, max);
        if n == 0 {
            self.note_empty();
            if max == 0 {
                self.flush_release();
            }
        } else if self.empty_streak.get() != 0 {
            self.empty_streak.set(0);
        }
        n
    }

    /// Whether the ring looks empty (two loads, no call into DPDK). If so
    /// the poll counts as an empty one, as a dequeue that found nothing.
    #[inline(always)]
    pub fn poll_empty(&self) -> bool {
        if self.ring.looks_empty() {
            self.note_empty();
            true
        } else {
            false
        }
    }

    /// Sleep up to `nap`, or until an RX lcore enqueues datagrams, or at
    /// once when some already wait. For one reader thread of this process,
    /// the first that calls it (an application's poller: the QUIC adapter's
    /// thread). A reader that sleeps
    /// here instead of polling wakes within a scheduler wake-up of the
    /// datagram's delivery; while it is awake the RX lcores pay a fence and
    /// a load per delivered burst, and one `futex` wake per burst that
    /// finds it asleep (light load: the kernel's own cost per datagram).
    /// False (nothing slept) on a thread that is not that reader.
    pub fn wait_for_datagrams(&self, nap: std::time::Duration) -> bool {
        self.rx_wake.register();
        self.rx_wake.try_sleep(nap, || !self.ring.looks_empty())
    }

    /// Let a reader task wait with [`arm_reader`](Self::arm_reader): before
    /// the socket is published to the RX lcores (`registry::
    /// add_socket_with`; `api::open` does). From then on each delivery
    /// pays a fence and a load (`Wake::kick`), as for a sleeping thread.
    pub fn expect_reader_tasks(&self) {
        self.rx_wake.expect_tasks();
    }

    /// Whether [`arm_reader`](Self::arm_reader) works on this socket
    /// ([`expect_reader_tasks`](Self::expect_reader_tasks) was called).
    pub fn expects_reader_tasks(&self) -> bool {
        self.rx_wake.expects_tasks()
    }

    /// For a reader task about to wait (an async `poll_recv`): the RX
    /// lcores' next delivery wakes it with `waker` (once), from their own
    /// thread, as the kernel's `sk_data_ready` wakes an epoll waiter.
    /// `Some(true)`: datagrams already wait, look again instead;
    /// `Some(false)`: wait. Whoever arms last is the one woken (one
    /// receiving task a socket). `None`: the socket was not made for it
    /// ([`expect_reader_tasks`](Self::expect_reader_tasks)).
    pub fn arm_reader(&self, waker: &std::task::Waker) -> Option<bool> {
        if !self.expects_reader_tasks() {
            return None;
        }
        Some(self.rx_wake.arm(waker, || !self.ring.looks_empty()))
    }

    /// How often an RX lcore woke this socket's sleeping reader.
    pub fn reader_wakeups(&self) -> u64 {
        self.rx_wake.unparks()
    }

    /// A consumer that keeps up finds the ring empty between most bursts;
    /// paying the deficit each time would write the shared counter as often
    /// as before. Only a run of empty polls (some microseconds of real
    /// idleness) pays it.
    #[inline(always)]
    fn note_empty(&self) {
        let streak = self.empty_streak.get() + 1;
        if streak >= IDLE_POLLS_BEFORE_RELEASE {
            self.empty_streak.set(0);
            self.flush_release();
        } else {
            self.empty_streak.set(streak);
        }
    }

    /// Give the socket's budget back what consumers freed but have not released yet.
    #[inline]
    pub fn flush_release(&self) {
        let mut d = self.release_deficit.swap(0, Ordering::Relaxed);
        while d > 0 {
            let part = d.min(u32::MAX as u64);
            self.rx.release(part as u32);
            d -= part;
        }
    }

    /// Release `truesize` freed bytes, batched as the kernel's
    /// `udp_rmem_release` does: the socket's memory counter is read by every
    /// RX lcore for every datagram, so the consumer writes it only once its
    /// deficit reaches rcvbuf/4 or its ring runs empty, not after every burst
    /// (each write costs every RX lcore a cache miss).
    #[inline]
    fn release_batched(&self, truesize: u64) {
        if truesize == 0 {
            return;
        }
        let d = self.release_deficit.fetch_add(truesize, Ordering::Relaxed) + truesize;
        if d >= (self.rx.rcvbuf() as u64 >> 2) {
            self.flush_release();
        }
    }

    /// Free consumed mbufs (dequeued from this socket's ring) and release
    /// their memory from the socket's budget; `ms` is empty afterwards.
    #[inline]
    pub fn consume<const N: usize>(&self, ms: &mut MbufBurst<N>) {
        if !ms.is_empty() {
            self.consume_at(ms, eal::rdtsc())
        }
    }

    /// [`Socket::consume`] with the burst's TSC already read (one read per
    /// dequeued burst, for the consumer latency histogram).
    ///
    /// Reads only the mbufs' first two cache lines (`buf_len` for the
    /// truesize, the [`meta::DgramMeta`] dynfield), which the free reads
    /// anyway, never the private area the RX lcore wrote (see `meta`).
    #[inline]
    pub fn consume_at<const N: usize>(&self, ms: &mut MbufBurst<N>, now: u64) {
        if ms.is_empty() {
            return;
        }
        let mut truesize = 0u64;
        let mut bytes = 0u64;
        for m in ms.iter() {
            // Engine mbufs from this ring: their dynfield was written at RX.
            let (ts, h) = (meta::truesize_of(m), meta::dgram(m));
            truesize += u64::from(ts);
            bytes += u64::from(h.payload_len);
            self.consumer_latency
                .record_scaled(now.saturating_sub(h.rx_tsc), self.us_inv);
        }
        let n = ms.len();
        ms.clear();
        self.consumer.consumed.add(n as u64);
        self.consumer.bytes.add(bytes);
        // Release after the free, as the kernel uncharges on skb free: the
        // budget covers buffers really in use.
        self.release_batched(truesize);
    }

    /// The socket's client zone, reserved on first use (main lcore only:
    /// a client's open).
    pub fn client_zone(&self) -> Result<&dpdk_sys::mp::AtomicZone, dpdk_sys::DpdkError> {
        if let Some(z) = self.zone.get() {
            return Ok(z);
        }
        let z = dpdk_sys::mp::AtomicZone::reserve(
            &client_proto::zone_name(self.id),
            client_proto::ZONE_WORDS,
            self.numa,
        )?;
        z.slots()[Slot::SocketId as usize].store(u64::from(self.id), Ordering::Relaxed);
        Ok(self.zone.get_or_init(|| z))
    }

    /// The pid of the client that has this socket open (0: none).
    pub fn client_owner(&self) -> u32 {
        self.zone.get().map_or(0, |z| {
            z.slots()[Slot::Owner as usize].load(Ordering::Acquire) as u32
        })
    }

    /// Mark the socket opened by client `pid` (0: given back), in its zone
    /// if it has one. Main lcore.
    pub fn set_client_owner(&self, pid: u32) {
        if let Some(z) = self.zone.get() {
            z.slots()[Slot::Owner as usize].store(u64::from(pid), Ordering::Release);
        }
    }

    /// Give the socket's budget back what its client freed since the last
    /// claim (any thread: the main lcore's fold, an RX lcore short of
    /// budget); the bytes released. One shared load when nothing changed.
    #[inline]
    pub fn release_client_frees(&self) -> u64 {
        let Some(z) = self.zone.get() else {
            return 0;
        };
        // Acquire: the client stores the truesize total last (Release),
        // after the datagrams and bytes it covers.
        let t = z.slots()[Slot::Released as usize].load(Ordering::Acquire);
        let dt = claim_up_to(&self.client.released, t);
        if dt > 0 {
            // The same release the engine's consumers make, paid at once:
            // no consumer of the engine reads this ring to flush it later.
            self.release_deficit.fetch_add(dt, Ordering::Relaxed);
            self.flush_release();
        }
        dt
    }

    /// [`Socket::release_client_frees`] for an RX lcore about to admit a
    /// group: only for a socket a client consumes, and only once its
    /// budget is half spent (until then it reads nothing the client writes).
    #[inline]
    pub fn release_client_frees_if_short(&self) {
        if self.rx.rmem() > self.rx.rcvbuf() / 2 && self.zone.get().is_some() {
            self.release_client_frees();
        }
    }

    /// Fold what clients freed into the books and release its memory from
    /// the socket's budget (main lcore only; two shared loads when nothing
    /// changed). Datagrams folded.
    pub fn fold_client(&self) -> u64 {
        let Some(z) = self.zone.get() else {
            return 0;
        };
        // The truesize first: the datagrams and bytes it covers are in by
        // the time it is read.
        self.release_client_frees();
        let z = z.slots();
        let f = &self.client.folded;
        let n = z[Slot::Consumed as usize].load(Ordering::Relaxed);
        if n == f[0].get() {
            return 0;
        }
        let b = z[Slot::ConsumedBytes as usize].load(Ordering::Relaxed);
        let (dn, db) = (n.wrapping_sub(f[0].get()), b.wrapping_sub(f[1].get()));
        f[0].set(n);
        f[1].set(b);
        self.client.consumed.add(dn);
        self.client.bytes.add(db);
        dn
    }

    /// Pids that hold rows of this socket's in-flight table (0 for free
    /// rows), into `out`; main lcore.
    pub fn row_owners(&self, out: &mut [u32; client_proto::ROWS]) {
        let Some(z) = self.zone.get() else {
            *out = [0; client_proto::ROWS];
            return;
        };
        for (i, o) in out.iter_mut().enumerate() {
            *o = client_proto::row(z.slots(), i).owner();
        }
    }

    /// Reclaim what dead client `pid` held of this socket (main lcore, with
    /// the socket still consumed by that client, or by the engine when
    /// the client had closed it: it cannot have died in a dequeue then).
    /// Held mbufs are freed and their memory released: they were
    /// delivered, then freed here without being consumed, so they count in
    /// `freed_at_close` (and `reclaimed_from_client`). A batch it was
    /// freeing: if its counting had finished, the datagrams are consumed
    /// and their memory released already (folded), and its mbufs are not
    /// freed again (its free may have begun); if not, the engine finishes
    /// the counting for it (the totals it was going to store) and frees them.
    pub fn reclaim_client(&self, pid: u32) -> Reclaimed {
        let mut r = Reclaimed::default();
        let Some(z) = self.zone.get() else {
            return r;
        };
        let slots = z.slots();
        let mut bufs: MbufBurst<{ dpdk_sys::inflight::ROW_MBUFS }> = MbufBurst::new();
        for i in 0..client_proto::ROWS {
            let row = client_proto::row(slots, i);
            if pid == 0 || row.owner() != pid {
                continue;
            }
            r.rows += 1;
            // SAFETY: `pid` is dead (the caller checked), so nothing writes
            // the row; its mbufs came from this socket's ring, which no one
            // else dequeues now (the engine's consumers skip a ring a client
            // has open, and a client that had closed it dequeues no more).
            let what = unsafe { row.reclaim(&self.ring, &mut bufs) };
            match what {
                Orphan::Nothing => {}
                Orphan::Held => {
                    let mut truesize = 0u64;
                    for m in bufs.iter() {
                        truesize += u64::from(meta::truesize_of(m));
                    }
                    let n = bufs.len() as u64;
                    bufs.clear();
                    self.release_deficit.fetch_add(truesize, Ordering::Relaxed);
                    self.flush_release();
                    self.consumer.freed_at_close.add(n);
                    self.client.reclaimed.add(n);
                    r.freed += n;
                    r.uncounted += n;
                }
                Orphan::Freeing { user } => {
                    // user = the totals (released, consumed, bytes) with
                    // this batch counted; the client stores them in that
                    // order after begin_free, the truesize last.
                    let n = bufs.len() as u64;
                    let done = slots[Slot::Released as usize].load(Ordering::Acquire) >= user[0];
                    if done {
                        bufs.take_raw();
                        self.client.lost_in_free.add(n);
                        r.lost += n;
                    } else {
                        for (slot, v) in [Slot::Consumed, Slot::ConsumedBytes, Slot::Released]
                            .into_iter()
                            .zip([user[1], user[2], user[0]])
                        {
                            slots[slot as usize].fetch_max(v, Ordering::AcqRel);
                        }
                        bufs.clear();
                        r.freed += n;
                    }
                }
            }
        }
        self.fold_client();
        r
    }

    /// `run --floor pipeline`'s consumer: read `pkt_len`, free in bulk,
    /// count. Nothing was charged, so nothing is released.
    #[inline]
    pub fn consume_floor<const N: usize>(&self, ms: &mut MbufBurst<N>) {
        let mut bytes = 0u64;
        for m in ms.iter() {
            bytes += u64::from(m.pkt_len());
        }
        let n = ms.len();
        ms.clear();
        self.consumer.consumed.add(n as u64);
        self.consumer.bytes.add(bytes);
    }

    /// Free what a closed socket's stages still hold (`drain_closed` of its
    /// receive side: only after every RX lcore has stopped enqueueing);
    /// how many packets that was.
    pub fn free_stages(&self) -> u64 {
        meta::free_closed_stages(&self.rx)
    }

    /// Free what is left in the ring (teardown), counted in `freed_at_close`.
    pub fn free_ring(&self) -> u64 {
        let mut bufs: MbufBurst<64> = MbufBurst::new();
        let mut total = 0;
        // The floor's mbufs were never charged: all of them with `--floor`,
        // the marked ones with `--alternate-floor` (mark 0 marks none).
        let (charged, floor_mark) = (!self.floor.active(), self.floor.mark());
        loop {
            let n = self.dequeue(&mut bufs, 64);
            if n == 0 {
                break;
            }
            let mut truesize = 0u64;
            if charged {
                for m in bufs.iter().filter(|m| m.ol_flags() & floor_mark == 0) {
                    truesize += u64::from(meta::truesize_of(m));
                }
            }
            bufs.clear();
            self.release_batched(truesize);
            total += n as u64;
        }
        self.flush_release();
        self.consumer.freed_at_close.add(total);
        total
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // An application may hold its socket past `Engine::stop` (the API
        // hands out an `Arc`): once the EAL is cleaned up the ring's memory
        // is gone, and with it anything left to free.
        if dpdk_sys::eal::is_up() {
            self.free_ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::claim_up_to;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_claim_moves_up_only() {
        let c = AtomicU64::new(0);
        assert_eq!(claim_up_to(&c, 100), 100);
        assert_eq!(claim_up_to(&c, 100), 0);
        // A stale total, read before another thread's claim.
        assert_eq!(claim_up_to(&c, 60), 0);
        assert_eq!(claim_up_to(&c, 250), 150);
        assert_eq!(c.load(Ordering::Relaxed), 250);
    }

    /// The main lcore and RX lcores race to release a client's frees, each
    /// with the total it read: every byte is released exactly once.
    #[test]
    fn racing_claims_release_each_byte_once() {
        let total = AtomicU64::new(0);
        let claimed = AtomicU64::new(0);
        let released = AtomicU64::new(0);
        const STEPS: u64 = 200_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                // The client: its total grows by a truesize per free.
                for _ in 0..STEPS {
                    total.fetch_add(2368, Ordering::Release);
                }
            });
            for _ in 0..3 {
                s.spawn(|| loop {
                    let t = total.load(Ordering::Acquire);
                    released.fetch_add(claim_up_to(&claimed, t), Ordering::Relaxed);
                    if t == STEPS * 2368 {
                        break;
                    }
                });
            }
        });
        assert_eq!(released.load(Ordering::Relaxed), STEPS * 2368);
        assert_eq!(claimed.load(Ordering::Relaxed), STEPS * 2368);
    }
}
