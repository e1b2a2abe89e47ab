//! The poll-mode runtime, shaped like DPDK's examples (skeleton, l3fwd,
//! client_server_mp): setup (EAL, pools, ports, sockets), one loop per worker
//! lcore (RX or consumer), stats on the main lcore, and a clean teardown that
//! checks the books.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use dpdk_sys::{eal, lcore, port, DpdkError, Eal, Mempool, Port};

use crate::config::{self, Config, Handler, Role, SocketConf};
use crate::consumer::{self, ConsumerLcore};
use crate::delivery;
use crate::flow_table::FlowTable;
use crate::socket::Socket;
use crate::stats::{self, Padded, UdpMib};
use crate::{rx, signals};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Setup(String),
    /// `msg`: the EAL's own words first, then `err`, then a hint matched to
    /// the argument that failed (see `eal_hint`).
    #[error("EAL init failed: {msg}")]
    Eal { err: DpdkError, msg: String },
    #[error("{0}")]
    Dpdk(#[from] DpdkError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the books do not balance: {0}")]
    Books(String),
}

/// Polls of the main lcore's consumer between two looks at its timers and
/// signals (a poll over a few empty rings takes tens of ns; a loaded one a
/// few µs, so timers fire within a millisecond or so).
pub const MAIN_CHECK_POLLS: u32 = 64;

/// Command-line overrides of `run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub duration: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// What the RX lcores do: the pipeline, or one of the benchmark modes.
    pub mode: crate::rx::Mode,
    /// The config file, re-read on SIGHUP.
    pub config_path: Option<PathBuf>,
    /// Interval lines and final counters as text or `nstat` lines.
    pub stats_format: crate::nstat::StatsFormat,
    /// Print every socket's latency histograms (bpftrace style) at exit.
    pub histograms: bool,
}

/// Where one RX queue is polled.
#[derive(Debug, Clone)]
pub struct QueueRef {
    pub port_name: String,
    pub port: u16,
    pub queue: u16,
}

/// Who drains a socket's delivery ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drainer {
    /// A consumer lcore (index into `Shared::consumers`).
    Lcore(usize),
    /// The main lcore, between stats lines (no consumer lcore configured).
    Main,
    /// Nobody inside the engine: the library API or another process.
    External,
}

/// A socket and who consumes it.
#[derive(Debug, Clone)]
pub struct SocketEntry {
    pub sock: Arc<Socket>,
    pub drainer: Drainer,
    pub handle: crate::flow_table::SocketHandle,
}

/// Everything the worker lcores share with the main lcore.
pub struct Shared {
    /// RX lcores stop polling.
    pub stop: AtomicBool,
    /// Consumers stop once their rings are empty (set after RX has stopped).
    pub consumers_stop: AtomicBool,
    pub rx: Vec<RxLcore>,
    pub consumers: Vec<ConsumerLcore>,
    pub burst: u16,
    pub tsc_hz: u64,
    pub strategy: delivery::Strategy,
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
    next_socket_id: Mutex<u32>,
    /// Extra flow-table bindings of the `filler` socket (engine.filler_sockets).
    filler_handles: Mutex<Vec<crate::flow_table::SocketHandle>>,
    /// Books of sockets removed while running.
    pub removed: Mutex<Vec<SocketSummary>>,
    /// Every port's addresses, MAC and TX queue count (control path, echo).
    pub ifaces: crate::control::Ifaces,
    /// The main lcore's TX queue on every port (echo replies of sockets it drains).
    pub main_tx_queue: Option<u16>,
    /// What the RX lcores do (`RunOptions::mode`).
    pub mode: crate::rx::Mode,
    /// The RX pools' free count and time below the low-water mark, as the
    /// main lcore samples them (issue 14: starvation made visible).
    pub pool_watch: crate::starvation::PoolWatch,
}

/// One RX lcore's assignment and counters.
pub struct RxLcore {
    pub lcore: u32,
    /// NUMA or virtual node id, as configured or reported.
    pub node: u32,
    /// Dense index of `node` among the engine's nodes (the stage index).
    pub node_index: usize,
    pub queues: Vec<QueueRef>,
    pub qstats: Vec<Padded<stats::QueueStats>>,
    pub lstats: Padded<stats::LoopStats>,
    pub mib: Padded<UdpMib>,
    /// TSC of the last burst that returned packets (for stop_when_idle).
    pub last_rx_tsc: stats::Counter,
    /// Advanced at every quiescent point of the loop (QSBR for socket removal).
    pub quiescent: stats::Counter,
    /// ARP / ND / ICMP echo responder state: TX queue, rate limits, counters.
    pub control: crate::control::LcoreControl,
    /// The small-buffer cache: taken by the lcore when its loop starts (no
    /// lock per packet), given back when it ends so teardown can check it.
    pub small: Mutex<Option<crate::small_cache::SmallCache>>,
    pub cache_stats: Padded<crate::small_cache::CacheStats>,
}

use crate::summary::{print_histograms, print_summary, socket_summary, summarize};
pub use crate::summary::{
    snapshot, ConsumerSummary, LcoreSummary, NodeSummary, PoolSummary, PortSummary, QueueSummary,
    SmallCacheSummary, SocketSummary, Summary,
};

/// A running engine. Field order is teardown order: sockets (rings) and
/// ports before pools, pools before the EAL.
pub struct Engine {
    shared: Arc<Shared>,
    launched: Vec<lcore::Launched>,
    ports: Vec<Port>,
    port_names: Vec<String>,
    pools: Vec<(u32, Mempool)>,
    small_pools: Vec<(u32, Mempool)>,
    started: Instant,
    cfg: Config,
    config_path: Option<PathBuf>,
    stats_format: crate::nstat::StatsFormat,
    histograms: bool,
    /// RX pools' free mbufs per stats interval (main lcore only, not per packet).
    pool_samples: Vec<u32>,
    /// Each RX pool's low-water mark and the RX lcores that allocate from
    /// it (same order as `pools`).
    pool_marks: Vec<(u32, Vec<u32>)>,
    /// The main lcore's consumer state ([`Engine::poll_main`], `main_loop`):
    /// its burst array and registry survive between polls.
    main_drain: std::cell::RefCell<consumer::Drain>,
    eal: Option<Eal>,
    /// This engine's claim on its file prefix, released after the EAL.
    instance: Option<crate::instance::InstanceLock>,
}

/// Run the engine until a signal, the duration, or idleness stops it.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<Summary, EngineError> {
    // A SIGINT from here on ends the run with a summary, even during setup.
    signals::install();
    // Fail now, not after the whole run, if the JSON cannot be written.
    if let Some(path) = &opts.stats_json {
        probe_writable(path)?;
    }
    let mut engine = Engine::start(cfg, opts)?;
    let duration = opts
        .duration
        .or((cfg.engine.duration_secs > 0.0).then_some(cfg.engine.duration_secs));
    engine.main_loop(duration);
    let summary = engine.stop()?;
    if let Some(path) = &opts.stats_json {
        let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
        std::fs::write(path, text).map_err(|source| EngineError::Write {
            path: path.clone(),
            source,
        })?;
    }
    if !summary.books_balanced {
        return Err(EngineError::Books(summary.problems.join("; ")));
    }
    Ok(summary)
}

/// Whether `path` can be written, leaving no file behind that was not there.
fn probe_writable(path: &std::path::Path) -> Result<(), EngineError> {
    let existed = path.exists();
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(EngineError::Setup(format!(
            "--stats-json {}: cannot write it ({e}): give a path in a writable directory",
            path.display()
        ))),
    }
}

/// Checks that give a better message than the EAL would.
fn preflight(cfg: &Config) -> Result<(), EngineError> {
    if !cfg.eal.no_huge {
        let mounted = std::fs::read_to_string("/proc/mounts")
            .map(|m| m.contains("hugetlbfs"))
            .unwrap_or(false);
        if !mounted {
            return Err(EngineError::Setup(
                "no hugetlbfs mount found: run `sudo bash scripts/setup.sh`, or set eal.no_huge = true in the config".into(),
            ));
        }
        if hugepages_free() == 0 {
            return Err(EngineError::Setup(
                "no free hugepages (HugePages_Free is 0): run `sudo bash scripts/setup.sh`, or set eal.no_huge = true in the config"
                    .into(),
            ));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        log::warn!("not running as root: the EAL usually needs root (or CAP_SYS_ADMIN, CAP_IPC_LOCK, CAP_NET_RAW)");
    }
    for s in &cfg.sockets {
        if matches!(s.handler, Handler::Echo | Handler::Pcap)
            && !consumer::handler_available(s.handler)
        {
            return Err(EngineError::Setup(format!(
                "socket {:?}: handler {:?} is not available in this build",
                s.name, s.handler
            )));
        }
    }
    Ok(())
}

/// VmHWM from /proc/self/status in kB (0 if unreadable).
fn peak_rss_kb() -> u64 {
    proc_number("/proc/self/status", "VmHWM:")
}

fn hugepages_free() -> u64 {
    proc_number("/proc/meminfo", "HugePages_Free:")
}

/// The first number after `key` on its line of a /proc file (0 if absent).
fn proc_number(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// "EAL init failed: " and then this: the EAL's own reason (from its log),
/// the errno, and the hint.
pub fn eal_failure(cfg: &Config, err: &DpdkError, logged: &[String]) -> String {
    let why = crate::eal_log::reason(logged);
    let hint = eal_hint(cfg, err, &why);
    if why.is_empty() {
        format!("{err}; {hint}")
    } else {
        format!("{why} ({err}); {hint}")
    }
}

/// A hint matched to what the EAL said failed (`why`, its own words) and
/// to the errno, naming the config key to change.
pub fn eal_hint(cfg: &Config, err: &DpdkError, why: &str) -> String {
    let w = why.to_ascii_lowercase();
    if err.errno() == Some(libc::EALREADY) {
        return "the EAL was already initialised in this process".into();
    }
    if err.errno() == Some(libc::ENODEV) || w.contains("parse device") || w.contains("vdev") {
        return format!(
            "a device in eal.vdevs {:?} / eal.allow {:?} was not recognised: its PMD is not installed (apt-get install dpdk) or the name is misspelt",
            cfg.eal.vdevs, cfg.eal.allow
        );
    }
    if w.contains("lcore") || (w.contains("core ") && w.contains("unavailable")) {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        return format!(
            "eal.lcores = {:?} must name CPUs that exist (this machine has {cpus}: 0..{})",
            cfg.eal.lcores,
            cpus.saturating_sub(1)
        );
    }
    if w.contains("hugepage") || w.contains("hugetlbfs") || w.contains("huge-dir") {
        return "run `sudo bash scripts/setup.sh` (hugepages mounted at /dev/hugepages), or set eal.no_huge = true".into();
    }
    if w.contains("cannot init memory") || w.contains("memory") || w.contains("-m ") {
        return format!(
            "lower eal.memory_mb = {} (or free hugepages: scripts/setup.sh), or set eal.no_huge = true",
            cfg.eal.memory_mb
        );
    }
    if w.contains("prefix") || w.contains("primary process") || w.contains("lock") {
        return format!(
            "another DPDK process may use eal.file_prefix = {:?}: stop it or choose another prefix",
            cfg.eal.file_prefix
        );
    }
    if w.contains("command line") || w.contains("option") || w.contains("argument") {
        return if cfg.eal.extra_args.is_empty() {
            format!(
                "check eal.lcores {:?}, eal.vdevs and eal.allow (the EAL's usage text above lists its options)",
                cfg.eal.lcores
            )
        } else {
            format!(
                "check eal.extra_args {:?}: an option the EAL does not know or a bad value (the EAL's usage text above lists its options)",
                cfg.eal.extra_args
            )
        };
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return "run as root (the EAL needs CAP_SYS_ADMIN, CAP_IPC_LOCK and CAP_NET_RAW)".into();
    }
    if cfg.eal.no_huge {
        "check eal.lcores, eal.vdevs and eal.extra_args".into()
    } else {
        "run `sudo bash scripts/setup.sh` (hugepages), or set eal.no_huge = true; check eal.lcores"
            .into()
    }
}

impl Engine {
    /// Initialise the EAL, pools, ports and sockets, and launch the worker lcores.
    pub fn start(cfg: &Config, opts: &RunOptions) -> Result<Engine, EngineError> {
        signals::install();
        preflight(cfg)?;
        let prefix = crate::instance::effective_prefix(&cfg.eal.args())
            .unwrap_or_else(|| cfg.eal.file_prefix.clone());
        let instance = crate::instance::lock(&prefix).map_err(EngineError::Setup)?;
        let capture = crate::eal_log::Capture::start();
        let res = Eal::init(&cfg.eal.args());
        let logged = capture
            .map(crate::eal_log::Capture::finish)
            .unwrap_or_default();
        let eal = res.map_err(|err| EngineError::Eal {
            msg: eal_failure(cfg, &err, &logged),
            err,
        })?;
        log::info!(
            "{} up, TSC {} MHz",
            eal::version(),
            eal::tsc_hz() / 1_000_000
        );
        let mut e = Engine::setup(cfg, opts)?;
        e.eal = Some(eal);
        e.instance = Some(instance);
        // Telemetry reads the same snapshot the exit JSON is made from.
        crate::telemetry::start(&e.shared);
        Ok(e)
    }

    fn setup(cfg: &Config, opts: &RunOptions) -> Result<Engine, EngineError> {
        // Before any pool, RX lcore or consumer exists: the offset is read per packet.
        let off = crate::meta::register_hot().map_err(|e| {
            EngineError::Setup(format!("mbuf dynfield {}: {e}", crate::meta::HOT_DYNFIELD))
        })?;
        log::debug!(
            "mbuf dynfield {} at offset {off}",
            crate::meta::HOT_DYNFIELD
        );
        let main = lcore::main_lcore();
        for l in &cfg.lcores {
            if !lcore::is_enabled(l.id) {
                return Err(EngineError::Setup(format!(
                    "lcore {} is not enabled by eal.lcores = {:?}: add it there or change [[lcore]] id",
                    l.id, cfg.eal.lcores
                )));
            }
            if l.id == main {
                return Err(EngineError::Setup(format!(
                    "lcore {} is the main lcore (it prints stats and handles signals): give [[lcore]] a worker lcore id",
                    l.id
                )));
            }
        }

        if port::count() == 0 {
            return Err(EngineError::Setup(format!(
                "no ports found: the EAL probed no device (vdevs {:?}, allow {:?}); check eal.vdevs / eal.allow and that the PMD is installed (apt-get install dpdk)",
                cfg.eal.vdevs, cfg.eal.allow
            )));
        }
        let mut port_ids = Vec::new();
        for p in &cfg.ports {
            let id = port::by_name(&p.name).ok_or_else(|| {
                EngineError::Setup(format!(
                    "port {:?} not found: no such device was probed; its PMD may be missing or its eal.vdevs/eal.allow entry is wrong",
                    p.name
                ))
            })?;
            port_ids.push(id);
        }

        // RX lcores, with the node each belongs to, mapped to dense stage indices.
        let mut node_ids: Vec<u32> = Vec::new();
        let mut rx_lcores = Vec::new();
        for l in cfg.lcores.iter().filter(|l| l.role == Role::Rx) {
            let node = l.node.unwrap_or_else(|| lcore::socket_id(l.id));
            let node_index = match node_ids.iter().position(|&n| n == node) {
                Some(i) => i,
                None => {
                    node_ids.push(node);
                    node_ids.len() - 1
                }
            };
            let mut queues = Vec::new();
            for q in &l.queues {
                let (pname, qi) = config::parse_queue_ref(q).expect("validated");
                let idx = cfg
                    .ports
                    .iter()
                    .position(|p| p.name == pname)
                    .expect("validated");
                queues.push(QueueRef {
                    port_name: pname.to_string(),
                    port: port_ids[idx],
                    queue: qi,
                });
            }
            let qstats = queues.iter().map(|_| Padded::default()).collect();
            rx_lcores.push(RxLcore {
                lcore: l.id,
                node,
                node_index,
                queues,
                qstats,
                lstats: Padded::default(),
                mib: Padded::default(),
                last_rx_tsc: Default::default(),
                quiescent: Default::default(),
                // TX slot k = the k-th RX lcore; consumers and the main lcore follow.
                control: crate::control::LcoreControl::new(
                    rx_lcores.len() as u16,
                    eal::tsc_hz(),
                    cfg.engine.control_pps,
                    cfg.engine.control_burst,
                ),
                small: Mutex::new(None),
                cache_stats: Padded::default(),
            });
        }
        let consumers: Vec<ConsumerLcore> = cfg
            .lcores
            .iter()
            .filter(|l| l.role == Role::Consumer)
            .map(|l| ConsumerLcore::new(l.id, l.sockets.clone()))
            .collect();
        // Every lcore that transmits has its own TX queue on every port (no
        // TX lock): RX lcores for control replies, consumers and the main
        // lcore for echo.
        let tx_slots = rx_lcores.len() + consumers.len() + 1;
        let mut consumers = consumers;
        for (j, c) in consumers.iter_mut().enumerate() {
            c.tx_queue = Some((rx_lcores.len() + j) as u16);
        }
        let main_tx_queue = Some((tx_slots - 1) as u16);
        let wants_echo = cfg.sockets.iter().any(|s| s.handler == Handler::Echo);
        let mut ifaces = Vec::new();

        // One pktmbuf pool per NUMA socket that polls a queue (allocate where you receive).
        let mut pools: Vec<(u32, Mempool)> = Vec::new();
        for l in &rx_lcores {
            let sock = lcore::socket_id(l.lcore);
            if !pools.iter().any(|(s, _)| *s == sock) {
                let mp = Mempool::new(
                    &format!("rx_pool_s{sock}"),
                    cfg.mempool.mbufs,
                    cfg.mempool.cache,
                    crate::meta::PRIV_SIZE,
                    cfg.mempool.data_room,
                    sock as i32,
                )
                .map_err(|e| {
                    EngineError::Setup(format!(
                        "{e}: lower mempool.mbufs or raise eal.memory_mb (and hugepages: scripts/setup.sh)"
                    ))
                })?;
                log::info!(
                    "pool rx_pool_s{sock}: {} mbufs x {} B data room (truesize {} B)",
                    mp.size(),
                    mp.data_room(),
                    mp.truesize()
                );
                crate::meta::check_pool_truesize(&mp)
                    .map_err(|e| EngineError::Setup(format!("rx_pool_s{sock}: {e}")))?;
                pools.push((sock, mp));
            }
        }
        // The small-buffer cache: one small pool per NUMA socket, a fixed ring per RX lcore.
        let mut small_pools: Vec<(u32, Mempool)> = Vec::new();
        if cfg.small_cache.enabled {
            for l in &rx_lcores {
                let sock = lcore::socket_id(l.lcore);
                if !small_pools.iter().any(|(s, _)| *s == sock) {
                    let n = rx_lcores
                        .iter()
                        .filter(|x| lcore::socket_id(x.lcore) == sock)
                        .count() as u32
                        * cfg.small_cache.entries;
                    let mp = Mempool::new(
                        &format!("small_pool_s{sock}"),
                        n,
                        0,
                        crate::meta::PRIV_SIZE,
                        cfg.small_cache.data_room,
                        sock as i32,
                    )
                    .map_err(|e| {
                        EngineError::Setup(format!(
                            "{e}: lower small_cache.entries or raise eal.memory_mb"
                        ))
                    })?;
                    log::info!(
                        "pool small_pool_s{sock}: {} mbufs x {} B data room (truesize {} B)",
                        mp.size(),
                        mp.data_room(),
                        mp.truesize()
                    );
                    crate::meta::check_pool_truesize(&mp)
                        .map_err(|e| EngineError::Setup(format!("small_pool_s{sock}: {e}")))?;
                    small_pools.push((sock, mp));
                }
            }
            for l in &rx_lcores {
                let sock = lcore::socket_id(l.lcore);
                let pool = &small_pools
                    .iter()
                    .find(|(s, _)| *s == sock)
                    .expect("small pool per socket")
                    .1;
                let cache = crate::small_cache::SmallCache::new(pool, cfg.small_cache.entries)
                    .map_err(|e| {
                        EngineError::Setup(format!("small cache for lcore {}: {e}", l.lcore))
                    })?;
                *l.small.lock().expect("small cache lock") = Some(cache);
            }
        }

        let mut ports = Vec::new();
        for (i, pc) in cfg.ports.iter().enumerate() {
            let id = port_ids[i];
            let info = port::info(id)?;
            let mut qpools = Vec::new();
            for q in 0..pc.rx_queues {
                let poller = rx_lcores
                    .iter()
                    .find(|l| l.queues.iter().any(|r| r.port == id && r.queue == q))
                    .expect("validated: every queue has a poller");
                let sock = lcore::socket_id(poller.lcore);
                if info.socket >= 0 && info.socket as u32 != sock {
                    log::warn!(
                        "port {} is on NUMA socket {} but queue {q} is polled by lcore {} on socket {sock}: cross-node traffic",
                        pc.name,
                        info.socket,
                        poller.lcore
                    );
                }
                qpools.push(
                    &pools
                        .iter()
                        .find(|(s, _)| *s == sock)
                        .expect("pool per socket")
                        .1,
                );
            }
            let wants_tx = wants_echo || !pc.addresses.is_empty();
            let tx_queues = if wants_tx {
                pc.tx_queues.max(tx_slots as u16)
            } else {
                pc.tx_queues
            };
            if wants_tx && tx_queues > info.max_tx_queues {
                return Err(EngineError::Setup(format!(
                    "port {}: {tx_slots} TX queues needed (one each for {} RX lcore(s), {} consumer lcore(s) and the main lcore, which send ARP/ND/ICMP and echo replies) but the device has at most {}; for net_af_packet set qpairs={tx_slots} and poll every RX queue",
                    pc.name,
                    rx_lcores.len(),
                    consumers.len(),
                    info.max_tx_queues
                )));
            }
            let conf = dpdk_sys::PortConf {
                rx_queues: pc.rx_queues,
                tx_queues,
                rx_desc: pc.rx_desc,
                tx_desc: pc.tx_desc,
                rss: pc.rss,
                promiscuous: pc.promiscuous,
                rx_checksum_offload: pc.rx_checksum_offload,
            };
            let mut p = Port::configure(id, &conf, &qpools)?;
            p.start()?;
            let (up, speed) = p.link();
            let mac = p.mac();
            ifaces.push(crate::control::Iface::new(id, mac, pc, tx_queues));
            if !pc.addresses.is_empty() {
                let a: Vec<String> = pc.addresses.iter().map(|a| a.to_string()).collect();
                log::info!(
                    "port {}: answering ARP/ND/echo for {}",
                    pc.name,
                    a.join(", ")
                );
            }
            log::info!(
                "port {} ({}): {} rxq {} txq, link {} {} Mbit/s, mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                pc.name,
                p.info().driver,
                pc.rx_queues,
                pc.tx_queues,
                if up { "up" } else { "down" },
                speed,
                mac[0],
                mac[1],
                mac[2],
                mac[3],
                mac[4],
                mac[5]
            );
            ports.push(p);
        }

        let numa = rx_lcores
            .first()
            .map(|l| lcore::socket_id(l.lcore) as i32)
            .unwrap_or(0);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            consumers_stop: AtomicBool::new(false),
            rx: rx_lcores,
            consumers,
            burst: cfg.engine.burst,
            tsc_hz: eal::tsc_hz(),
            strategy: cfg.engine.strategy,
            table: FlowTable::new(),
            sockets: ArcSwap::from_pointee(Vec::new()),
            sockets_gen: std::sync::atomic::AtomicU64::new(0),
            nodes: node_ids.len().max(1),
            numa,
            next_socket_id: Mutex::new(0),
            filler_handles: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            ifaces: crate::control::Ifaces(ifaces),
            main_tx_queue,
            mode: opts.mode,
            pool_watch: Default::default(),
        });
        // Each RX pool's low-water mark, from the RX lcores that take from it.
        let pool_marks: Vec<(u32, Vec<u32>)> = pools
            .iter()
            .map(|(sock, mp)| {
                let pollers: Vec<u32> = shared
                    .rx
                    .iter()
                    .filter(|l| lcore::socket_id(l.lcore) == *sock)
                    .map(|l| l.lcore)
                    .collect();
                (
                    crate::starvation::low_water(mp.size(), cfg.engine.burst, pollers.len()),
                    pollers,
                )
            })
            .collect();
        shared.pool_watch.set_pools(
            pools.iter().map(|(_, mp)| mp.size() as u64).sum(),
            pool_marks.iter().map(|(m, _)| *m as u64).sum(),
            eal::tsc_hz() / 1000,
        );
        for (i, s) in cfg.sockets.iter().enumerate() {
            // A SIGINT during setup: stop creating sockets, run on to the summary.
            if signals::stop_requested() {
                log::info!(
                    "signal received during setup: {i} of {} socket(s) created",
                    cfg.sockets.len()
                );
                break;
            }
            add_socket(&shared, s.clone()).map_err(EngineError::Setup)?;
        }
        if cfg.engine.filler_sockets > 0 && !signals::stop_requested() {
            add_filler(&shared, cfg.engine.filler_sockets).map_err(EngineError::Setup)?;
        }
        log::info!(
            "{} socket(s), strategy {}, {} node(s): {:?}",
            cfg.sockets.len(),
            cfg.engine.strategy.as_str(),
            node_ids.len(),
            node_ids
        );

        let mut engine = Engine {
            shared: Arc::clone(&shared),
            launched: Vec::new(),
            ports,
            port_names: cfg.ports.iter().map(|p| p.name.clone()).collect(),
            pools,
            small_pools,
            started: Instant::now(),
            cfg: cfg.clone(),
            config_path: opts.config_path.clone(),
            stats_format: opts.stats_format,
            histograms: opts.histograms,
            pool_samples: Vec::new(),
            pool_marks,
            main_drain: std::cell::RefCell::new(consumer::Drain::new(&shared, None)),
            eal: None,
            instance: None,
        };
        for (i, c) in shared.consumers.iter().enumerate() {
            let sh = Arc::clone(&shared);
            let h = lcore::launch(c.lcore, move || consumer::consumer_loop(&sh, Some(i)))?;
            engine.launched.push(h);
        }
        for (i, l) in shared.rx.iter().enumerate() {
            let sh = Arc::clone(&shared);
            let h = lcore::launch(l.lcore, move || rx::rx_loop(&sh, i))?;
            engine.launched.push(h);
        }
        engine.started = Instant::now();
        Ok(engine)
    }

    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config_path.as_deref()
    }

    /// The config the engine was started with (a reload changes only sockets).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A live socket by name.
    pub fn socket(&self, name: &str) -> Option<Arc<Socket>> {
        self.shared
            .sockets
            .load()
            .iter()
            .find(|e| e.sock.name() == name)
            .map(|e| Arc::clone(&e.sock))
    }

    /// Add a socket while running (no RX pause).
    pub fn add_socket(&self, conf: SocketConf) -> Result<Arc<Socket>, EngineError> {
        add_socket(&self.shared, conf).map_err(EngineError::Setup)
    }

    /// Remove a socket while running: datagrams already queued for it are
    /// delivered or counted, never leaked.
    pub fn remove_socket(&self, name: &str) -> Result<(), EngineError> {
        remove_socket(&self.shared, name).map_err(EngineError::Setup)
    }

    /// The main lcore's duties once: consume the sockets it drains (one
    /// pass of its [`consumer::Drain`], as `main_loop` does).
    pub fn poll_main(&self) -> usize {
        self.main_drain.borrow_mut().poll(&self.shared)
    }

    /// Print a stats line per interval; return on a signal, the duration, or idleness.
    ///
    /// When the main lcore consumes, this is a poll loop like DPDK's
    /// examples: the per-poll path is one pass of the [`consumer::Drain`];
    /// every [`MAIN_CHECK_POLLS`] polls one TSC read decides which timer is
    /// due (duration, stats interval, flow-table GC, idle check) and the
    /// signal flags are read. No system clock per poll.
    pub fn main_loop(&mut self, duration: Option<f64>) {
        let shared = Arc::clone(&self.shared);
        let hz = shared.tsc_hz.max(1);
        let ms_ticks = (hz / 1000).max(1);
        let interval_ticks = self
            .cfg
            .engine
            .stats_interval_ms
            .max(1)
            .saturating_mul(ms_ticks);
        let idle_ticks = self.cfg.engine.stop_when_idle_ms.saturating_mul(hz) / 1000;
        // Out of its cell for the loop (SIGHUP handling borrows self). The
        // placeholder left in the cell holds no registry: one that did would
        // keep the sockets of that moment, and their rings (memzones), alive
        // until the loop ends, however many reloads retired them.
        let mut placeholder = consumer::Drain::new(&shared, None);
        placeholder.release();
        let mut drain = std::mem::replace(self.main_drain.get_mut(), placeholder);
        // Duration counts from `started` (set when the lcores were launched).
        let start_tsc = eal::rdtsc();
        let left = duration.map(|d| (d - self.started.elapsed().as_secs_f64()).max(0.0));
        let end_tsc = left.map(|l| start_tsc.saturating_add((l * hz as f64) as u64));
        let mut last_print = start_tsc;
        let mut next_print = start_tsc + interval_ticks;
        let mut next_gc = start_tsc + hz;
        // The idle check sums every RX queue's counters (lines the RX lcores
        // write): once per millisecond is plenty for a timeout in ms.
        let mut next_idle = start_tsc + ms_ticks;
        let mut last_pkts = 0u64;
        let mut last_bytes = 0u64;
        let mut last_delivered = 0u64;
        let mut last_drops = 0u64;
        let mut last_nstat: Option<crate::nstat::Counters> = None;
        let mut polls = 0u32;
        // The RX pools' free counts, once per millisecond at most (TSC).
        let mut sampler = crate::starvation::Sampler::new(start_tsc);
        let mut next_sample = start_tsc;
        loop {
            // The poll re-reads the registry when it changed: sockets added
            // on SIGHUP are drained too.
            drain.poll(&shared);
            if drain.sockets() > 0 {
                polls += 1;
                if polls < MAIN_CHECK_POLLS {
                    continue;
                }
                polls = 0;
            } else {
                // Nothing to consume here: the main lcore only keeps time.
                std::thread::sleep(Duration::from_millis(5));
            }
            if signals::stop_requested() {
                log::info!("signal received, stopping");
                break;
            }
            if signals::take_reload() {
                crate::reload::on_sighup(self);
            }
            let now = eal::rdtsc();
            if end_tsc.is_some_and(|e| now >= e) {
                break;
            }
            if idle_ticks > 0 && now >= next_idle {
                next_idle = now + ms_ticks;
                let total: u64 = shared
                    .rx
                    .iter()
                    .flat_map(|l| l.qstats.iter())
                    .map(|q| q.packets.get())
                    .sum();
                // An lcore that never received (stamp 0) counts as idle only once others have.
                let all_idle = shared
                    .rx
                    .iter()
                    .all(|l| now.saturating_sub(l.last_rx_tsc.get()) > idle_ticks);
                let any_seen = shared.rx.iter().any(|l| l.last_rx_tsc.get() != 0);
                if total > 0 && any_seen && all_idle {
                    log::info!(
                        "all RX queues idle for {} ms, stopping",
                        self.cfg.engine.stop_when_idle_ms
                    );
                    break;
                }
            }
            if now >= next_gc {
                shared.table.collect_garbage();
                next_gc = now + hz;
            }
            if now >= next_sample {
                next_sample = now + ms_ticks;
                self.sample_pools(&mut sampler, now);
            }
            if now >= next_print {
                let secs = now.saturating_sub(last_print) as f64 / hz as f64;
                last_print = now;
                next_print = now + interval_ticks;
                let pkts: u64 = shared
                    .rx
                    .iter()
                    .flat_map(|l| l.qstats.iter())
                    .map(|q| q.packets.get())
                    .sum();
                let bytes: u64 = shared
                    .rx
                    .iter()
                    .flat_map(|l| l.qstats.iter())
                    .map(|q| q.bytes.get())
                    .sum();
                let socks = shared.sockets.load();
                // Removed sockets keep their books in `removed`: count them too,
                // so a SIGHUP does not make the totals (and rates) go backwards.
                // The floor pipeline's own counters are zero in other modes.
                let removed = shared.removed.lock().expect("removed lock");
                let delivered: u64 = socks
                    .iter()
                    .map(|e| e.sock.stats().delivered + e.sock.floor.delivered())
                    .sum::<u64>()
                    + removed.iter().map(|s| s.delivered).sum::<u64>();
                let drops: u64 = socks
                    .iter()
                    .map(|e| e.sock.stats().drops_total() + e.sock.floor.ring_full())
                    .sum::<u64>()
                    + removed
                        .iter()
                        .map(|s| s.drops.values().sum::<u64>())
                        .sum::<u64>();
                drop(removed);
                // A fresh sample for the line, then the warning if the pool
                // was below its mark at any sample of the interval.
                self.sample_pools(&mut sampler, now);
                if let Some(w) = sampler.check(&shared.pool_watch, &shared) {
                    log::warn!("{w}");
                }
                let pw = &shared.pool_watch;
                if self.stats_format == crate::nstat::StatsFormat::Nstat {
                    let now = crate::nstat::counters(&snapshot(
                        &shared,
                        self.started.elapsed().as_secs_f64(),
                    ));
                    print!("{}", crate::nstat::render(&now, last_nstat.as_ref(), secs));
                    last_nstat = Some(now);
                } else {
                    log::info!(
                        "rx {} pps {} bit/s | delivered {}/s drops {}/s | total rx {} delivered {} drops {} | pool free {}/{} low-water {}",
                        stats::human(stats::rate(pkts, last_pkts, secs)),
                        stats::human(stats::rate(bytes, last_bytes, secs) * 8.0),
                        stats::human(stats::rate(delivered, last_delivered, secs)),
                        stats::human(stats::rate(drops, last_drops, secs)),
                        pkts,
                        delivered,
                        drops,
                        pw.free.get(),
                        pw.size.get(),
                        pw.low_water.get()
                    );
                }
                last_pkts = pkts;
                last_bytes = bytes;
                last_delivered = delivered;
                last_drops = drops;
                self.pool_samples
                    .push(self.pools.iter().map(|(_, mp)| mp.avail()).sum());
            }
        }
        *self.main_drain.get_mut() = drain;
    }

    /// One starvation sample (main lcore): the RX pools' free counts
    /// against their marks, and the RX lcores' poll counters.
    fn sample_pools(&self, sampler: &mut crate::starvation::Sampler, now: u64) {
        let mut free = 0u64;
        let mut low = false;
        for ((_, mp), (mark, pollers)) in self.pools.iter().zip(&self.pool_marks) {
            // What RX can still allocate: not what sits in consumers' caches.
            let a = mp.avail_to(pollers);
            free += a as u64;
            low |= a < *mark;
        }
        let polls: u64 = self.shared.rx.iter().map(|l| l.lstats.polls.get()).sum();
        sampler.sample(&self.shared.pool_watch, now, free, low, polls);
    }

    /// Stop RX, drain every stage, let consumers finish, check the books.
    pub fn stop(mut self) -> Result<Summary, EngineError> {
        let shared = Arc::clone(&self.shared);
        shared.stop.store(true, Ordering::SeqCst);
        let mut failed = Vec::new();
        // RX lcores first (they were launched last).
        let (rx_handles, cons_handles): (Vec<_>, Vec<_>) = self
            .launched
            .drain(..)
            .partition(|h| shared.rx.iter().any(|l| l.lcore == h.lcore()));
        for h in rx_handles {
            let lc = h.lcore();
            if h.join() != 0 {
                failed.push(lc);
            }
        }
        let seconds = self.started.elapsed().as_secs_f64();
        let mut problems = Vec::new();
        // The election protocol leaves no packet on a stage once producers stop.
        for e in shared.sockets.load().iter() {
            let mut free = rx::FreeList::default();
            let stranded = e
                .sock
                .rx
                .drain_closed(&mut |p, _r| free.push(crate::meta::MbufMeta::mbuf(p)));
            if stranded > 0 {
                problems.push(format!(
                    "socket {}: {stranded} packet(s) stranded in a stage",
                    e.sock.name()
                ));
            }
        }
        shared.consumers_stop.store(true, Ordering::SeqCst);
        for h in cons_handles {
            let lc = h.lcore();
            if h.join() != 0 {
                failed.push(lc);
            }
        }
        // Main-lcore sockets: drain what is left.
        while self.main_drain.get_mut().poll(&shared) > 0 {}
        self.main_drain.get_mut().release();
        // External consumers: whatever they did not take is freed and counted.
        for e in shared.sockets.load().iter() {
            e.sock.free_ring();
        }
        // Every small-cache entry is back (only the cache holds it).
        for l in &shared.rx {
            if let Some(c) = l.small.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let held = c.in_use();
                if held > 0 {
                    problems.push(format!(
                        "lcore {}: {held} small-cache entries still held at exit",
                        l.lcore
                    ));
                }
            }
        }
        let mut summary = summarize(&shared, &self.ports, &self.port_names, seconds, problems);
        // The cache gives its entries back: the small pools must be full again.
        for l in &shared.rx {
            if let Some(c) = l.small.lock().unwrap_or_else(|p| p.into_inner()).take() {
                c.release();
            }
        }
        for (name, pools) in [("rx_pool", &self.pools), ("small_pool", &self.small_pools)] {
            for (sock, mp) in pools {
                summary.pools.push(PoolSummary {
                    name: format!("{name}_s{sock}"),
                    size: mp.size(),
                    avail: mp.avail(),
                });
            }
        }
        summary.peak_rss_kb = peak_rss_kb();
        summary.pool_avail_samples = std::mem::take(&mut self.pool_samples);
        for (sock, mp) in &self.small_pools {
            if mp.avail() != mp.size() {
                summary.problems.push(format!(
                    "small_pool_s{sock}: {} of {} mbufs back at exit",
                    mp.avail(),
                    mp.size()
                ));
                summary.books_balanced = false;
            }
        }
        for p in &mut self.ports {
            p.stop()?;
        }
        match self.stats_format {
            crate::nstat::StatsFormat::Text => print_summary(&summary),
            crate::nstat::StatsFormat::Nstat => {
                print!(
                    "{}",
                    crate::nstat::render(&crate::nstat::counters(&summary), None, summary.seconds)
                );
                println!(
                    "#books {}",
                    if summary.books_balanced {
                        "balanced".to_string()
                    } else {
                        summary.problems.join("; ")
                    }
                );
            }
        }
        if self.histograms {
            print_histograms(&summary);
        }
        if !failed.is_empty() {
            return Err(EngineError::Setup(format!(
                "worker lcores {failed:?} failed (see log)"
            )));
        }
        Ok(summary)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Telemetry stops answering for this engine before its sockets go.
        crate::telemetry::stop();
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.consumers_stop.store(true, Ordering::SeqCst);
        for h in self.launched.drain(..) {
            h.join();
        }
        // Sockets hold rte_rings: release them before the EAL goes.
        self.main_drain.get_mut().release();
        let entries = self.shared.sockets.swap(Arc::new(Vec::new()));
        self.shared.sockets_gen.fetch_add(1, Ordering::Release);
        let fillers = std::mem::take(
            &mut *self
                .shared
                .filler_handles
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let _ = self.shared.table.update(|ed| {
            for e in entries.iter() {
                ed.remove(e.handle)?;
            }
            for h in fillers {
                ed.remove(h)?;
            }
            Ok(())
        });
        drop(entries);
        self.shared.table.collect_garbage();
        self.ports.clear();
        for l in &self.shared.rx {
            if let Some(c) = l.small.lock().unwrap_or_else(|p| p.into_inner()).take() {
                c.release();
            }
        }
        self.small_pools.clear();
        self.pools.clear();
        self.eal.take();
    }
}

/// Which lcore drains a socket: a consumer lcore that names it, else one
/// with an empty list (round-robin), else the main lcore; `none` handlers
/// are left to the library API or another process.
fn drainer_for(shared: &Shared, conf: &SocketConf, id: u32) -> Drainer {
    if conf.handler == Handler::None {
        return Drainer::External;
    }
    if let Some(i) = shared
        .consumers
        .iter()
        .position(|c| c.sockets.iter().any(|n| n == &conf.name))
    {
        return Drainer::Lcore(i);
    }
    let open: Vec<usize> = shared
        .consumers
        .iter()
        .enumerate()
        .filter(|(_, c)| c.sockets.is_empty())
        .map(|(i, _)| i)
        .collect();
    if open.is_empty() {
        Drainer::Main
    } else {
        Drainer::Lcore(open[id as usize % open.len()])
    }
}

/// `engine.filler_sockets`: a socket `filler` bound to 198.19.0.1:1024 plus
/// n-1 more bindings (198.19.0.0/16, ports 1024..60999) that all deliver to
/// it, published in one table update.
fn add_filler(shared: &Shared, n: u32) -> Result<(), String> {
    const PORTS: u32 = 59_976;
    let addr = |i: u32| {
        let ip =
            std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 1)) + i / PORTS);
        std::net::SocketAddr::new(ip.into(), 1024 + (i % PORTS) as u16)
    };
    let conf: SocketConf = toml::from_str(&format!(
        "name = \"filler\"\nlocal = \"{}\"\nhandler = \"count\"\n",
        addr(0)
    ))
    .map_err(|e| e.to_string())?;
    let sock = add_socket(shared, conf)?;
    let handles = shared
        .table
        .update(|ed| {
            let mut hs = Vec::with_capacity(n as usize);
            for i in 1..n {
                hs.push(ed.insert(
                    crate::flow_table::Binding::bound(addr(i)),
                    Arc::clone(&sock),
                )?);
            }
            Ok(hs)
        })
        .map_err(|e| format!("filler sockets: {e}"))?;
    log::info!("filler: {n} bindings in 198.19.0.0/16 deliver to socket filler");
    *shared.filler_handles.lock().expect("filler lock") = handles;
    Ok(())
}

/// A socket created but not published: its ring and handler state exist,
/// RX lcores and consumers do not see it yet. Dropping it frees the ring.
pub struct Prepared {
    pub sock: Arc<Socket>,
    pub drainer: Drainer,
}

/// First half of adding a socket: a fresh id, the ring, the handler state
/// (the pcap file is created here; with `handler`, that state is shared
/// instead). Nothing live changes.
pub fn prepare_socket(
    shared: &Shared,
    conf: SocketConf,
    handler: Option<Arc<Mutex<crate::handlers::State>>>,
) -> Result<Prepared, String> {
    let id = {
        let mut n = shared
            .next_socket_id
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *n += 1;
        *n
    };
    let drainer = drainer_for(shared, &conf, id);
    let sock = Socket::with_handler(id, conf, shared.nodes, shared.numa, handler)
        .map_err(|e| e.to_string())?;
    Ok(Prepared {
        sock: Arc::new(sock),
        drainer,
    })
}

/// A flow-table refusal in words, naming the other socket by name (looked
/// up in `extra`, then among the live sockets).
pub fn flow_error_text(
    shared: &Shared,
    e: &crate::flow_table::FlowError,
    extra: &[(u64, &str)],
) -> String {
    use crate::flow_table::FlowError;
    match e {
        FlowError::AddrInUse { new, existing } => {
            let id = existing.id();
            let name = extra
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, n)| n.to_string())
                .or_else(|| {
                    shared
                        .sockets
                        .load()
                        .iter()
                        .find(|e| e.handle.id() == id)
                        .map(|e| e.sock.name().to_string())
                });
            let who = match name {
                Some(n) => format!("socket {n:?} ({})", existing.binding()),
                None => existing.to_string(),
            };
            let hint = if new.remote.is_none() && existing.binding().remote.is_none() {
                ": choose another local address or port, or set reuseport = true on both"
            } else {
                ": choose another local address or port"
            };
            format!("address in use: {new} collides with {who}{hint}")
        }
        other => other.to_string(),
    }
}

/// Second half: make prepared sockets visible to consumers and stats (the
/// caller published them in the flow table first).
pub(crate) fn register(shared: &Shared, entries: Vec<SocketEntry>) {
    if entries.is_empty() {
        return;
    }
    let mut v: Vec<SocketEntry> = shared.sockets.load().as_ref().clone();
    for e in entries {
        log::info!(
            "socket {} ({}) bound {} handler {:?} drained by {:?}",
            e.sock.name(),
            e.sock.id,
            e.sock.binding(),
            e.sock.handler(),
            e.drainer
        );
        v.push(e);
    }
    set_registry(shared, v);
}

/// Every store to the socket registry while running goes through here;
/// the generation bump after it tells pollers (`consumer::Drain`) to re-read.
fn set_registry(shared: &Shared, v: Vec<SocketEntry>) {
    shared.sockets.store(Arc::new(v));
    shared.sockets_gen.fetch_add(1, Ordering::Release);
}

/// Create a socket, publish it in the flow table and the registry.
pub fn add_socket(shared: &Shared, conf: SocketConf) -> Result<Arc<Socket>, String> {
    if shared
        .sockets
        .load()
        .iter()
        .any(|e| e.sock.name() == conf.name)
    {
        return Err(format!("socket {:?} already exists", conf.name));
    }
    let p = prepare_socket(shared, conf, None)?;
    let handle = shared
        .table
        .insert(p.sock.binding(), Arc::clone(&p.sock))
        .map_err(|e| {
            format!(
                "socket {:?}: {}",
                p.sock.name(),
                flow_error_text(shared, &e, &[])
            )
        })?;
    let sock = Arc::clone(&p.sock);
    register(
        shared,
        vec![SocketEntry {
            sock: p.sock,
            drainer: p.drainer,
            handle,
        }],
    );
    Ok(sock)
}

/// Remove a socket while RX runs. Order: unpublish, close (late producers
/// drop with reason `closed`), wait until every RX lcore passed a quiescent
/// point (no one still holds the old table or is inside enqueue), drain the
/// stages, let the consumer empty the ring, then forget it.
pub fn remove_socket(shared: &Shared, name: &str) -> Result<(), String> {
    let entry = shared
        .sockets
        .load()
        .iter()
        .find(|e| e.sock.name() == name)
        .cloned()
        .ok_or_else(|| format!("no socket named {name:?}"))?;
    shared
        .table
        .remove(entry.handle)
        .map_err(|e| e.to_string())?;
    retire(shared, &[entry]);
    Ok(())
}

/// Retire sockets the flow table no longer holds (the caller published
/// that): close them, wait once for every RX lcore to pass a quiescent
/// point, drain their stages, give consumers a moment to empty the rings,
/// then unregister them (by identity: a replacement may carry the same
/// name), free what is left and keep their books.
pub(crate) fn retire(shared: &Shared, entries: &[SocketEntry]) {
    if entries.is_empty() {
        return;
    }
    for e in entries {
        e.sock.rx.close();
    }
    wait_quiescent(shared);
    for e in entries {
        let mut free = rx::FreeList::default();
        e.sock
            .rx
            .drain_closed(&mut |p, _r| free.push(crate::meta::MbufMeta::mbuf(p)));
        drop(free);
    }
    // Give the consumers a moment to take what is in the rings; the rest is freed and counted.
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        let waiting: Vec<&SocketEntry> = entries
            .iter()
            .filter(|e| e.drainer != Drainer::External && e.sock.ring.count() > 0)
            .collect();
        if waiting.is_empty() || Instant::now() >= deadline {
            break;
        }
        let mut main_drained = false;
        for e in waiting.iter().filter(|e| e.drainer == Drainer::Main) {
            consumer::drain_socket(shared, e);
            main_drained = true;
        }
        if !main_drained {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let v: Vec<SocketEntry> = shared
        .sockets
        .load()
        .iter()
        .filter(|e| !entries.iter().any(|r| Arc::ptr_eq(&r.sock, &e.sock)))
        .cloned()
        .collect();
    set_registry(shared, v);
    // A consumer still holding the old registry may dequeue concurrently:
    // the ring is multi-consumer, so both sides are safe and each datagram
    // is counted once (consumed, or freed at close).
    for e in entries {
        e.sock.free_ring();
        crate::summary::retire(
            &mut shared.removed.lock().unwrap_or_else(|p| p.into_inner()),
            socket_summary(e, true),
        );
        log::info!("socket {} ({}) removed", e.sock.name(), e.sock.id);
    }
}

/// Wait until every RX lcore has passed a quiescent point (or stopped).
fn wait_quiescent(shared: &Shared) {
    let marks: Vec<u64> = shared.rx.iter().map(|l| l.quiescent.get()).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while shared
        .rx
        .iter()
        .zip(&marks)
        .any(|(l, &m)| l.quiescent.get() == m)
        && !shared.stop.load(Ordering::SeqCst)
        && Instant::now() < deadline
    {
        std::hint::spin_loop();
    }
}
