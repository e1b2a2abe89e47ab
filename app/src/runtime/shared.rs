//! The runtime's shared state: what the worker lcores share with the main
//! lcore (like `shared/common.h` of DPDK's client_server_mp). Every other
//! runtime file imports it; it imports none of them, so setup, the loops,
//! the registry and teardown can each depend on it without depending on
//! each other.
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::counters::{self, ConsumerLoopStats, UdpMib};
use crate::flow_table::FlowTable;
use crate::receive::admission::Strategy;
use crate::receive::sync::CachePadded;
use crate::socket::Socket;
use crate::summary::SocketSummary;

/// Where one RX queue is polled.
#[derive(Debug, Clone)]
pub struct QueueRef {
    pub port_name: String,
    pub port: u16,
    pub queue: u16,
}

/// Who consumes a socket's delivery ring (producers drain stages into
/// it; its consumer reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumedBy {
    /// A consumer lcore (index into `Shared::consumers`).
    Lcore(usize),
    /// The main lcore, between stats lines (no consumer lcore configured).
    Main,
    /// Nobody inside the engine: the library API or another process.
    External,
    /// An out-of-process client (`udpdemux-client`, its pid) opened it: the
    /// engine's consumers skip it until the client closes it.
    Client(u32),
}

/// Out-of-process clients' requests (`client_proto`), queued by the EAL's
/// IPC thread for the main lcore, which alone changes the registry.
#[derive(Debug, Default)]
pub struct Clients {
    /// Set when `requests` is not empty: the main lcore looks at this flag,
    /// and takes the lock only when it is set.
    pub pending: AtomicBool,
    pub requests: Mutex<Vec<dpdk_sys::mp::MpRequest>>,
    /// Sockets a client has open now.
    pub open: std::sync::atomic::AtomicUsize,
    /// Dead clients reaped (`runtime::clients::reap`).
    pub reaped: std::sync::atomic::AtomicU64,
    /// Datagrams dead clients held unread, freed by the engine.
    pub reclaimed: std::sync::atomic::AtomicU64,
    /// Mbufs dead clients were freeing when they died (not freed again).
    pub lost_in_free: std::sync::atomic::AtomicU64,
    /// Attached client processes (`attach` requests) and their lcore ids.
    pub attached: Mutex<Vec<AttachedClient>>,
    /// The engine's runtime directory (client slot files), once known.
    pub runtime_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Objects dead clients' lcore caches held, given back to the pools.
    pub cache_flushed: std::sync::atomic::AtomicU64,
    /// Objects in the caches of clients that died changing them, forgotten.
    pub cache_discarded: std::sync::atomic::AtomicU64,
}

/// A client process that said `attach` (`client_proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachedClient {
    pub pid: u32,
    /// Its EAL lcore id (one of `client_proto::CLIENT_LCORES`).
    pub lcore: u32,
    /// Reaped, its lcore cache still to settle (its slot lock was still
    /// held when the engine tried): `Some(discard)`.
    pub dead: Option<bool>,
}

/// A socket and who consumes it.
#[derive(Debug, Clone)]
pub struct SocketEntry {
    pub sock: Arc<Socket>,
    pub consumed_by: ConsumedBy,
    pub handle: crate::flow_table::SocketHandle,
}

/// Everything the worker lcores share with the main lcore.
pub struct Shared {
    /// Joined groups, the clone pool, posted queries (`mcast`).
    pub mcast: crate::mcast::McastState,
    /// RX lcores stop polling.
    pub stop: AtomicBool,
    /// Consumers stop once their rings are empty (set after RX has stopped).
    pub consumers_stop: AtomicBool,
    pub rx: Vec<RxLcore>,
    pub consumers: Vec<ConsumerLcore>,
    pub burst: u16,
    /// `engine.idle_sleep_us`: RX lcores' longest sleep when idle (0: none).
    pub idle_sleep_us: u32,
    /// `engine.idle_yield_us`: how long an idle RX lcore yields its CPU
    /// between polls before its first sleep (0: it does not).
    pub idle_yield_us: u32,
    /// `engine.idle_sched_batch`, where `idle_sleep_us` is set.
    pub idle_sched_batch: bool,
    /// `engine.rx_prefetch_ahead` and `engine.rx_prefetch_alternate`.
    pub prefetch_ahead: (bool, bool),
    pub tsc_hz: u64,
    /// What the main lcore's loop took of its thread: CPU time, preemptions.
    pub main_thread: counters::ThreadStats,
    pub strategy: Strategy,
    /// Early demux: the RX lcores' view of the sockets.
    pub table: FlowTable<Arc<Socket>>,
    /// Every live socket, for consumers and stats (read-mostly, RCU-published).
    pub sockets: ArcSwap<Vec<SocketEntry>>,
    /// Bumped after every store to `sockets`: pollers keep their registry
    /// and re-read it only when this changes (one load per poll, of a line
    /// written only when a socket comes or goes).
    pub sockets_gen: std::sync::atomic::AtomicU64,
    /// Stages per socket: distinct (virtual) nodes of the RX lcores.
    pub nodes: usize,
    /// NUMA socket for rings (the first RX lcore's).
    pub numa: i32,
    pub(crate) next_socket_id: Mutex<u32>,
    /// Extra flow-table bindings of the `filler` socket (engine.filler_sockets,
    /// `bench::filler`).
    pub(crate) filler_handles: Mutex<Vec<crate::flow_table::SocketHandle>>,
    /// Books of sockets removed while running.
    pub removed: Mutex<Vec<SocketSummary>>,
    /// Every port's addresses, MAC and TX queue count (control path, echo).
    pub ifaces: crate::control::Ifaces,
    /// The main lcore's TX queue on every port (echo replies of sockets it consumes).
    pub main_tx_queue: Option<u16>,
    /// What the RX lcores do (`RunOptions::mode`).
    pub mode: Mode,
    /// `Mode::Alternate`: the dynamic mbuf flag the floor's half sets on
    /// what it puts in a ring, so consumers and teardown tell its uncharged
    /// mbufs from the pipeline's (`bench::alternate`); 0 in other modes.
    pub floor_mark: u64,
    /// The RX pools' free count and time below the low-water mark, as the
    /// main lcore samples them (issue 14: starvation made visible).
    pub pool_watch: crate::starvation::PoolWatch,
    /// Requests from out-of-process clients and the sockets they hold.
    pub clients: Clients,
    /// `send_burst`'s TX ring, pool and neighbour table, drained by the
    /// main lcore on `main_tx_queue`; `None` when no port has an address
    /// (nothing to send from).
    pub send: Option<crate::send::TxPath>,
    /// The exception path to the kernel (`[exception]`); `None`: off.
    pub exception: Option<crate::exception::ExceptionPath>,
    /// Fragmenting what is sent (echo replies, `send_burst`): the
    /// identification source and `FragOKs` / `FragCreates` / `FragFails`.
    pub frag_out: crate::frag_out::FragOut,
    /// Fragments steered to their owner RX lcore (`steer`): a ring per RX
    /// lcore; `None` with one RX lcore or reassembly off.
    pub steer: Option<super::steer::Steer>,
}

/// One RX lcore's assignment and counters.
pub struct RxLcore {
    pub lcore: u32,
    /// This lcore's place in `Shared::rx` (the steering owner index).
    pub index: usize,
    /// NUMA or virtual node id, as configured or reported.
    pub node: u32,
    /// Dense index of `node` among the engine's nodes (the stage index).
    pub node_index: usize,
    pub queues: Vec<QueueRef>,
    pub qstats: Vec<CachePadded<counters::QueueStats>>,
    pub lstats: CachePadded<counters::LoopStats>,
    pub mib: CachePadded<UdpMib>,
    /// TSC of the last burst that returned packets (for stop_when_idle).
    pub last_rx_tsc: counters::Counter,
    /// Advanced at every quiescent point of the loop (QSBR for socket removal).
    pub quiescent: counters::Counter,
    /// ARP / ND / ICMP echo responder state: TX queue, rate limits, counters.
    pub control: crate::control::LcoreControl,
    /// The exception path's token bucket and counters (its TX queue on
    /// the tap is `control.tx_queue`).
    pub exception: crate::exception::LcoreException,
    /// The small-buffer cache: taken by the lcore when its loop starts (no
    /// lock per packet), given back when it ends so teardown can check it.
    pub small: Mutex<Option<crate::small_cache::SmallCache>>,
    pub cache_stats: CachePadded<crate::small_cache::CacheStats>,
    /// The fragment reassembly table (`None`: reassembly off), used by this
    /// lcore only (an uncontended lock, taken per fragment: they are rare),
    /// and its counters.
    pub reasm: super::frag::Slot,
    pub reasm_stats: CachePadded<crate::reasm::ReasmStats>,
    /// The table's next deadline in TSC cycles (0: nothing held), read by
    /// the idle poll without the lock.
    pub reasm_deadline: counters::Counter,
    /// Fragments sent to their owner lcore, refused, and taken from this
    /// lcore's steering ring.
    pub steer: CachePadded<super::steer::SteerStats>,
    /// What the loop took of its thread: CPU time, preemptions.
    pub thread: counters::ThreadStats,
    /// The pool its queues receive into (a handle that does not free it:
    /// setup's does, after the lcores have stopped), whose next mbufs the
    /// loop asks for ahead of the PMD (`rx`'s `ALLOC_AHEAD`).
    pub rx_pool: Option<dpdk_sys::Mempool>,
    /// Application work the loop runs between bursts (`lcore_task`). On a
    /// line of its own: the loop reads its flags once per pass, and among
    /// this struct's other fields that cost the pipeline 4-5% of its rate
    /// (alternating `--alternate-floor pipeline` pairs, 0.65-0.69 against
    /// 0.69-0.74; padded 0.71-0.74), with no instruction more a datagram.
    pub task: CachePadded<super::lcore_task::TaskSlot>,
}

/// A consumer lcore and the sockets it was given by name (empty: any).
pub struct ConsumerLcore {
    pub lcore: u32,
    pub sockets: Vec<String>,
    pub stats: CachePadded<ConsumerLoopStats>,
    /// This lcore's TX queue on every port (echo replies); None: it has none.
    pub tx_queue: Option<u16>,
    /// The registry generation (`Shared::sockets_gen`) this lcore's consumer
    /// polls with: once it reaches a generation, the lcore no longer reads
    /// rings an older registry gave it (a client's open waits for this).
    pub seen_gen: counters::Counter,
    /// What the loop took of its thread: CPU time, preemptions.
    pub thread: counters::ThreadStats,
}

impl ConsumerLcore {
    pub fn new(lcore: u32, sockets: Vec<String>) -> Self {
        ConsumerLcore {
            lcore,
            sockets,
            stats: CachePadded::default(),
            tx_queue: None,
            seen_gen: Default::default(),
            thread: Default::default(),
        }
    }
}

/// What an RX lcore does with a burst: the pipeline, or one of `run`'s
/// benchmark modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Parse, demux, stage.
    #[default]
    Pipeline,
    /// `run --demux-only`: parse, demux, count, then free every demuxed
    /// datagram (counted in `UdpMib::demux_only_freed`); nothing is staged.
    DemuxOnly,
    /// `run --bare`: receive and free only, the baseline the RX core is
    /// measured against.
    Bare,
    /// `run --floor`: the least any RX core can do per packet (see `bench::floor`).
    Floor(Floor),
    /// `run --alternate-floor`: the pipeline and a pipeline floor in turns
    /// on the same lcores (`bench::alternate`), so the two are compared in
    /// one run, whatever the host does to its CPUs meanwhile.
    Alternate(Floor),
}

impl Mode {
    /// Whether frames are parsed and counted by reason. `Bare` and `Floor`
    /// free every frame unclassified, so their books are rx = freed; the
    /// pipeline floor's are rx = put in a ring + ring full + no socket
    /// (`summary` checks them separately, with every ring consumed or freed).
    pub fn classifies(self) -> bool {
        matches!(self, Mode::Pipeline | Mode::DemuxOnly | Mode::Alternate(_))
    }
}

/// `run --floor`: how much of the mandatory work the floor does (the code:
/// `bench::floor`).
// The variants' doc lines are `udpdemux run --help`'s text, word for word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Floor {
    /// Destination port, one table read, result into the mbuf.
    Minimal,
    /// The same plus the IPv4 header and UDP checksums in software.
    Checksums,
    /// The same with DPDK's `rte_hash` (destination address and port, one
    /// table per family, `rte_hash_lookup_bulk_data` per burst) over every
    /// binding in place of the port table: a DPDK-native lookup at the
    /// table's size.
    RteHash,
    /// The minimal cross-core pipeline (see `pipeline_floor`): destination
    /// port, port-indexed table per family, per-socket `enqueue_burst` into
    /// the delivery rings; the consumers dequeue, read `pkt_len`, free.
    Pipeline,
    /// The same pipeline, with the IPv4 header and UDP checksums (IPv4 and
    /// IPv6) verified in software before the ring: what validation alone
    /// costs when the port gives no checksum verdict.
    PipelineChecksums,
    /// The same pipeline with the engine's own parse (headers validated,
    /// checksums in software where the port gives no verdict) and flow-table
    /// lookup choosing the ring: what any validating early demux pays before
    /// staging and accounting, so the pipeline's ratio can be split into
    /// the mandatory part and its own.
    PipelineDemux,
    /// The same pipeline with the IPv4 header and UDP checksums verified in
    /// software, then DPDK's `rte_hash` (as `rte-hash`) choosing the ring:
    /// what a DPDK-native exact-match demux pays before the ring.
    PipelineRteHash,
}

impl Mode {
    /// `run --floor pipeline`, `pipeline-checksums` or `pipeline-demux`: RX lcores put
    /// mbufs straight into the delivery rings, consumers only read and free.
    pub fn is_pipeline_floor(self) -> bool {
        matches!(self, Mode::Floor(f) if f.is_pipeline())
    }
}

impl Floor {
    /// One of the cross-core floors (`pipeline*`): mbufs into the delivery
    /// rings, consumed on the sockets' consumers.
    pub fn is_pipeline(self) -> bool {
        matches!(
            self,
            Floor::Pipeline | Floor::PipelineChecksums | Floor::PipelineDemux | Floor::PipelineRteHash
        )
    }
}
