//! Setup, in the order DPDK's examples do it: the EAL, then pools, ports,
//! the shared state and the sockets; the engine entry launches the worker
//! lcores last. Each step is a function so the order stays visible in
//! [`build`] and a step can be read on its own.
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use dpdk_sys::{eal, lcore, port, Eal, Mempool, Port};

use super::bench;
use super::consumer;
use super::error::EngineError;
use super::registry;
use super::shared::{ConsumerLcore, Mode, QueueRef, RxLcore, Shared};
use super::{rx, signals};
use crate::config::{self, Config, Handler, Role};
use crate::control::Iface;
use crate::eal_log::eal_failure;
use crate::flow_table::FlowTable;
use crate::instance::InstanceLock;
use crate::receive::sync::CachePadded;

/// What setup made: the shared state (with the configured sockets) and the
/// DPDK objects the engine owns until teardown.
pub struct Built {
    pub shared: Arc<Shared>,
    pub ports: Vec<Port>,
    pub port_names: Vec<String>,
    pub pools: Vec<(u32, Mempool)>,
    pub small_pools: Vec<(u32, Mempool)>,
    /// Each RX pool's low-water mark and the RX lcores that allocate from
    /// it (same order as `pools`).
    pub pool_marks: Vec<(u32, Vec<u32>)>,
    /// The exception device's pool (its port is the last of `ports`).
    pub exc_pool: Option<Mempool>,
    /// Multicast copies' indirect mbufs (`mcast`); `None` with `mempool.clones = 0`.
    pub clone_pool: Option<Mempool>,
}

/// Whether `path` can be written, leaving no file behind that was not there.
pub fn probe_writable(path: &std::path::Path) -> Result<(), EngineError> {
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
pub fn preflight(cfg: &Config) -> Result<(), EngineError> {
    if !cfg.eal.no_huge {
        let mounted = std::fs::read_to_string("/proc/mounts")
            .map(|m| m.contains("hugetlbfs"))
            .unwrap_or(false);
        if !mounted {
            return Err(EngineError::Setup(
                "no hugetlbfs mount found: run `bash scripts/setup.sh` as root, or set eal.no_huge = true in the config".into(),
            ));
        }
        if hugepages_free() == 0 {
            return Err(EngineError::Setup(
                "no free hugepages (HugePages_Free is 0): run `bash scripts/setup.sh` as root, or set eal.no_huge = true in the config"
                    .into(),
            ));
        }
    }
    if !dpdk_sys::os::is_root() {
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

fn hugepages_free() -> u64 {
    crate::counters::proc_number("/proc/meminfo", "HugePages_Free:")
}

/// This engine's claim on its file prefix.
pub fn lock_instance(cfg: &Config) -> Result<InstanceLock, EngineError> {
    let prefix = crate::instance::effective_prefix(&cfg.eal_args())
        .unwrap_or_else(|| cfg.eal.file_prefix.clone());
    crate::instance::lock(&prefix).map_err(EngineError::Setup)
}

/// Initialise the EAL, with its own words in the error if it refuses.
pub fn init_eal(cfg: &Config) -> Result<Eal, EngineError> {
    let capture = crate::eal_log::Capture::start();
    let res = Eal::init(&cfg.eal_args());
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
    Ok(eal)
}

/// DPDK's capture server, so `dpdk-dumpcap -i PORT` can attach as a
/// secondary process (`[capture] pdump`; nothing can attach under
/// `eal.no_huge`, whose `--no-shconf` turns DPDK's IPC off).
pub fn start_pdump(cfg: &Config) -> Result<Option<dpdk_sys::pdump::Pdump>, EngineError> {
    if !cfg.capture.pdump_active(&cfg.eal) {
        if cfg.capture.pdump {
            log::debug!("pdump: not started (eal.no_huge: no secondary process can attach)");
        }
        return Ok(None);
    }
    let p = dpdk_sys::pdump::Pdump::init().map_err(|e| {
        EngineError::Setup(format!(
            "capture server: {e}: raise eal.memory_mb by {} or set [capture] pdump = false",
            crate::config::PDUMP_STATS_MB
        ))
    })?;
    log::info!(
        "pdump ready: dpdk-dumpcap --file-prefix {} -p -i PORT -w FILE.pcapng captures a port",
        cfg.eal.file_prefix
    );
    Ok(Some(p))
}

/// How long a stopping capture waits for the RX lcores (on DPDK's IPC
/// thread; an RX lcore passes a poll every few microseconds, so only a
/// stopped or preempted one gets near it).
const CAPTURE_QUIESCE: std::time::Duration = std::time::Duration::from_millis(500);

/// When a capture stops, DPDK unlinks its callbacks and the capturing
/// process frees the pool they copy into as soon as it hears back; before
/// it does (`dpdk_sys::pdump`'s interposed remove-callback functions), wait
/// until every RX lcore has begun two polls since the unlink, so none is
/// still inside the old callback. TX callbacks (on the lcores that
/// transmit: the main lcore, consumer lcores) are not waited for.
pub fn quiesce_on_capture_stop(p: &dpdk_sys::pdump::Pdump, shared: &Arc<Shared>) {
    let sh = Arc::clone(shared);
    p.set_quiesce(move || {
        let start: Vec<u64> = sh.rx.iter().map(|l| l.lstats.polls.get()).collect();
        let t0 = std::time::Instant::now();
        loop {
            let moved = sh
                .rx
                .iter()
                .zip(&start)
                .all(|(l, s)| l.lstats.polls.get() >= s + 2);
            if moved {
                log::info!(
                    "pdump: a capture callback was removed; the RX lcores left it within {:?}",
                    t0.elapsed()
                );
                return;
            }
            if t0.elapsed() > CAPTURE_QUIESCE {
                // Stopping (the lcores have left their loops) or stalled.
                log::info!(
                    "pdump: a capture callback was removed; the RX lcores did not poll within {CAPTURE_QUIESCE:?}"
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    });
}

/// Pools, ports, the shared state and the sockets (no worker lcore yet);
/// the RX lcores will run in `mode`.
pub fn build(cfg: &Config, mode: Mode) -> Result<Built, EngineError> {
    register_dynfield()?;
    check_lcores(cfg)?;
    let port_ids = find_ports(cfg)?;
    let (node_ids, mut rx_lcores) = plan_rx_lcores(cfg, &port_ids);
    let floor_mark = super::bench::alternate::setup(
        mode,
        rx_lcores.len(),
        cfg.engine.rx_prefetch_alternate,
        cfg.sockets
            .iter()
            .find(|s| s.handler == crate::config::Handler::None)
            .map(|s| s.name.as_str()),
    )
    .map_err(EngineError::Setup)?;
    let consumers = plan_consumers(cfg, rx_lcores.len());
    let main_tx_queue = Some((rx_lcores.len() + consumers.len()) as u16);
    let pools = rx_pools(cfg, &rx_lcores)?;
    for l in &mut rx_lcores {
        // A handle that does not free the pool: the engine's does, at teardown.
        l.rx_pool = Mempool::lookup(&format!("rx_pool_s{}", lcore::socket_id(l.lcore))).ok();
    }
    let small_pools = small_pools(cfg, &rx_lcores)?;
    let clone_pool = clone_pool(cfg, &rx_lcores)?;
    // Declared before the ports: if setup fails below, the ports close
    // before their pool goes.
    let mut exc_pool: Option<Mempool> = None;
    let (mut ports, mut ifaces) =
        start_ports(cfg, &port_ids, &rx_lcores, &pools, consumers.len())?;

    let numa = rx_lcores
        .first()
        .map(|l| lcore::socket_id(l.lcore) as i32)
        .unwrap_or(0);
    let mut port_names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let exception = match crate::exception::start(cfg, rx_lcores.len(), numa)
        .map_err(EngineError::Setup)?
    {
        Some(s) => {
            let crate::exception::Started { path, port, pool } = s;
            exc_pool = Some(pool);
            ports.push(port);
            port_names.push(path.tap_name.clone());
            Some(path)
        }
        None => None,
    };
    let send = send_path(cfg, &mut ifaces, numa)?;
    let mcast = crate::mcast::McastState::new(
        cfg.ports
            .iter()
            .map(|p| p.name.clone())
            .zip(port_ids.iter().copied())
            .collect(),
    );
    if clone_pool.is_some() {
        // A handle that does not free the pool: the engine's does, after the ports.
        if let Ok(mp) = Mempool::lookup(CLONE_POOL) {
            let _ = mcast.clones.set(mp);
        }
    }
    // Fragments of one datagram meet on one RX lcore (`steer`).
    let steer = if cfg.reassembly.enabled && mode.classifies() {
        super::steer::Steer::new(rx_lcores.len(), cfg.reassembly.steer_ring, numa, eal::rdtsc())
            .map_err(|e| {
                EngineError::Setup(format!(
                    "fragment steering rings: {e}: lower reassembly.steer_ring or raise eal.memory_mb"
                ))
            })?
    } else {
        None
    };
    let shared = Arc::new(Shared {
        mcast,
        stop: AtomicBool::new(false),
        consumers_stop: AtomicBool::new(false),
        rx: rx_lcores,
        consumers,
        burst: cfg.engine.burst,
        idle_sleep_us: cfg.engine.idle_sleep_us,
        idle_yield_us: cfg.engine.idle_yield_us,
        idle_sched_batch: cfg.engine.idle_sched_batch && cfg.engine.idle_sleep_us > 0,
        prefetch_ahead: (cfg.engine.rx_prefetch_ahead, cfg.engine.rx_prefetch_alternate),
        tsc_hz: eal::tsc_hz(),
        main_thread: Default::default(),
        strategy: cfg.engine.strategy,
        table: FlowTable::new(),
        sockets: ArcSwap::from_pointee(Vec::new()),
        sockets_gen: std::sync::atomic::AtomicU64::new(0),
        nodes: node_ids.len().max(1),
        numa,
        next_socket_id: Mutex::new(0),
        filler_handles: Mutex::new(Vec::new()),
        removed: Mutex::new(Vec::with_capacity(crate::summary::REMOVED_CAPACITY)),
        ifaces: crate::control::Ifaces(ifaces),
        main_tx_queue,
        mode,
        floor_mark,
        pool_watch: Default::default(),
        clients: Default::default(),
        send,
        exception,
        frag_out: crate::frag_out::FragOut::new(eal::rdtsc()),
        steer,
    });
    let pool_marks = pool_marks(cfg, &shared, &pools);
    create_sockets(cfg, &shared)?;
    log::info!(
        "{} socket(s), strategy {}, {} node(s): {:?}",
        cfg.sockets.len(),
        cfg.engine.strategy.as_str(),
        node_ids.len(),
        node_ids
    );
    Ok(Built {
        shared,
        ports,
        port_names,
        pools,
        small_pools,
        pool_marks,
        exc_pool,
        clone_pool,
    })
}

/// The clone pool's name.
pub const CLONE_POOL: &str = "clone_pool";

/// The multicast copies' pool: indirect mbufs (no data room) with the
/// engine's private area for each copy's own metadata, on the first RX
/// lcore's node.
fn clone_pool(cfg: &Config, rx_lcores: &[RxLcore]) -> Result<Option<Mempool>, EngineError> {
    let n = cfg.mempool.clones;
    if n == 0 {
        return Ok(None);
    }
    let sock = rx_lcores
        .first()
        .map(|l| lcore::socket_id(l.lcore) as i32)
        .unwrap_or(0);
    // DPDK refuses a cache above n / 1.5.
    let cache = cfg.mempool.cache.min(n * 2 / 3);
    let mp = Mempool::new(CLONE_POOL, n, cache, crate::meta::PRIV_SIZE, 0, sock).map_err(|e| {
        EngineError::Setup(format!(
            "{e}: lower mempool.clones or raise eal.memory_mb"
        ))
    })?;
    log::info!("pool {CLONE_POOL}: {} indirect mbufs for multicast copies", mp.size());
    Ok(Some(mp))
}

/// `send_burst`'s ring, pool and neighbour table, when a port has an
/// address to send from; every such port learns neighbours into the table.
fn send_path(
    cfg: &Config,
    ifaces: &mut [Iface],
    numa: i32,
) -> Result<Option<crate::send::TxPath>, EngineError> {
    if ifaces.iter().all(|i| i.v4.is_empty() && i.v6.is_empty()) {
        return Ok(None);
    }
    let tx = crate::send::TxPath::new(numa, eal::tsc_hz(), &cfg.neighbour)
        .map_err(|e| EngineError::Setup(format!("send path: {e}: raise eal.memory_mb")))?;
    // Static entries (validated: each on a port's subnet, a unicast MAC).
    for s in &cfg.neighbour.statics {
        let port = crate::config::NeighbourConf::static_port(s, &cfg.ports)
            .map_err(EngineError::Setup)?;
        let mac = crate::config::parse_mac(&s.mac).map_err(EngineError::Setup)?;
        let id = ifaces[port].port;
        if !tx.add_static(id, s.ip, mac) {
            return Err(EngineError::Setup(format!(
                "neighbour.static ip = \"{}\": no room: raise neighbour.entries",
                s.ip
            )));
        }
    }
    for i in ifaces.iter_mut() {
        if !(i.v4.is_empty() && i.v6.is_empty()) {
            i.lessons = Some(Arc::clone(&tx.lessons));
        }
    }
    Ok(Some(tx))
}

/// The mbuf dynfield, before any pool, RX lcore or consumer exists: its
/// offset is read per packet.
fn register_dynfield() -> Result<(), EngineError> {
    let off = crate::meta::register_dgram_meta().map_err(|e| {
        EngineError::Setup(format!("mbuf dynfield {}: {e}", crate::meta::DGRAM_DYNFIELD))
    })?;
    log::debug!(
        "mbuf dynfield {} at offset {off}",
        crate::meta::DGRAM_DYNFIELD
    );
    Ok(())
}

/// Every configured lcore is enabled and none is the main lcore.
fn check_lcores(cfg: &Config) -> Result<(), EngineError> {
    let main = lcore::main_lcore();
    // eal.extra_args can enable lcores the config check does not parse.
    let mut client = crate::client_proto::CLIENT_LCORES;
    if let Some(l) = client.find(|&l| lcore::is_enabled(l)) {
        return Err(EngineError::Setup(config::client_lcore_problem(l, &cfg.eal.lcores)));
    }
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
    Ok(())
}

/// The port id of every configured port, in config order.
fn find_ports(cfg: &Config) -> Result<Vec<u16>, EngineError> {
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
    Ok(port_ids)
}

/// RX lcores, with the node each belongs to, mapped to dense stage indices.
fn plan_rx_lcores(cfg: &Config, port_ids: &[u16]) -> (Vec<u32>, Vec<RxLcore>) {
    let n_rx = cfg.lcores.iter().filter(|l| l.role == Role::Rx).count();
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
        let qstats = queues.iter().map(|_| CachePadded::default()).collect();
        rx_lcores.push(RxLcore {
            lcore: l.id,
            index: rx_lcores.len(),
            node,
            node_index,
            queues,
            qstats,
            lstats: CachePadded::default(),
            mib: CachePadded::default(),
            last_rx_tsc: Default::default(),
            quiescent: Default::default(),
            // TX slot k = the k-th RX lcore; consumers and the main lcore follow.
            control: crate::control::LcoreControl::new(
                rx_lcores.len() as u16,
                eal::tsc_hz(),
                cfg.engine.control_pps,
                cfg.engine.control_burst,
            ),
            exception: crate::exception::LcoreException::new(cfg, n_rx, eal::tsc_hz()),
            small: Mutex::new(None),
            cache_stats: CachePadded::default(),
            // Preallocated now: the loop must not allocate.
            reasm: Mutex::new(
                cfg.reassembly
                    .enabled
                    .then(|| super::frag::LcoreReasm::new(&cfg.reassembly, eal::tsc_hz())),
            ),
            reasm_stats: CachePadded::default(),
            rx_pool: None,
            reasm_deadline: Default::default(),
            steer: CachePadded::default(),
            thread: Default::default(),
            task: Default::default(),
        });
    }
    (node_ids, rx_lcores)
}

/// Consumer lcores. Every lcore that transmits has its own TX queue on
/// every port (no TX lock): the RX lcores' come first, then the
/// consumers', then the main lcore's.
fn plan_consumers(cfg: &Config, rx_lcores: usize) -> Vec<ConsumerLcore> {
    let consumers: Vec<ConsumerLcore> = cfg
        .lcores
        .iter()
        .filter(|l| l.role == Role::Consumer)
        .map(|l| ConsumerLcore::new(l.id, l.sockets.clone()))
        .collect();
    let mut consumers = consumers;
    for (j, c) in consumers.iter_mut().enumerate() {
        c.tx_queue = Some((rx_lcores + j) as u16);
    }
    consumers
}

/// One pktmbuf pool per NUMA socket that polls a queue (allocate where you receive).
fn rx_pools(cfg: &Config, rx_lcores: &[RxLcore]) -> Result<Vec<(u32, Mempool)>, EngineError> {
    let mut pools: Vec<(u32, Mempool)> = Vec::new();
    for l in rx_lcores {
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
    Ok(pools)
}

/// The small-buffer cache: one small pool per NUMA socket, a fixed ring per RX lcore.
fn small_pools(cfg: &Config, rx_lcores: &[RxLcore]) -> Result<Vec<(u32, Mempool)>, EngineError> {
    let mut small_pools: Vec<(u32, Mempool)> = Vec::new();
    if cfg.small_cache.enabled {
        for l in rx_lcores {
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
        for l in rx_lcores {
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
    Ok(small_pools)
}

/// Configure and start every port, each RX queue on the pool of its
/// poller's node, with a TX queue for every lcore that transmits.
fn start_ports(
    cfg: &Config,
    port_ids: &[u16],
    rx_lcores: &[RxLcore],
    pools: &[(u32, Mempool)],
    consumers: usize,
) -> Result<(Vec<Port>, Vec<Iface>), EngineError> {
    let tx_slots = rx_lcores.len() + consumers + 1;
    let wants_echo = cfg.sockets.iter().any(|s| s.handler == Handler::Echo);
    let mut ifaces = Vec::new();
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
        // The exception path sends the kernel's frames from the main lcore.
        let exception_port = cfg.exception.device.is_some()
            && cfg.exception.data_port(&cfg.ports) == Some(pc.name.as_str());
        let wants_tx = wants_echo || !pc.addresses.is_empty() || exception_port;
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
                consumers,
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
            // The groups the config joins reach RX without a per-group MAC
            // filter (the kernel's dev_mc_add); what no socket joined is
            // dropped and counted there (`unjoined`).
            allmulticast: cfg.sockets.iter().any(|s| s.multicast.is_some()),
            rx_checksum_offload: pc.rx_checksum_offload,
            // send_burst's frames ask for it where the port has it.
            tx_checksum_offload: true,
        };
        if let Some(w) = af_packet_reorder_risk(&info.driver, &pc.name, pc.rx_queues, &cfg.eal.vdevs) {
            log::warn!("{w}");
        }
        let mut p = Port::configure(id, &conf, &qpools)?;
        p.start()?;
        let (up, speed) = p.link();
        let mac = p.mac();
        let mut iface = crate::control::Iface::new(id, mac, pc, tx_queues);
        let both = dpdk_sys::mbuf::tx_cksum::PORT_OFFLOADS;
        iface.tx_csum = p.tx_offloads & both == both;
        ifaces.push(iface);
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
    Ok((ports, ifaces))
}

/// Each RX pool's low-water mark, from the RX lcores that take from it.
fn pool_marks(cfg: &Config, shared: &Shared, pools: &[(u32, Mempool)]) -> Vec<(u32, Vec<u32>)> {
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
    pool_marks
}

/// The configured sockets, and `engine.filler_sockets`.
fn create_sockets(cfg: &Config, shared: &Shared) -> Result<(), EngineError> {
    for (i, s) in cfg.sockets.iter().enumerate() {
        // A SIGINT during setup: stop creating sockets, run on to the summary.
        if signals::stop_requested() {
            log::info!(
                "signal received during setup: {i} of {} socket(s) created",
                cfg.sockets.len()
            );
            break;
        }
        registry::add_socket(shared, s.clone())?;
    }
    if cfg.engine.filler_sockets > 0 && !signals::stop_requested() {
        bench::filler::add(shared, cfg.engine.filler_sockets)?;
    }
    Ok(())
}

/// Launch the consumer lcores, then the RX lcores, into `launched` (so if
/// one fails, the engine's teardown stops and joins those already running).
pub fn launch_workers(
    shared: &Arc<Shared>,
    launched: &mut Vec<lcore::Launched>,
) -> Result<(), EngineError> {
    for (i, c) in shared.consumers.iter().enumerate() {
        let sh = Arc::clone(shared);
        let lc = c.lcore;
        let h = lcore::launch(lc, move || {
            let _early = StopIfEarly { lcore: lc, done: &sh.consumers_stop, requested: signals::stop_requested, stop: signals::request_stop };
            consumer::consumer_loop(&sh, Some(i))
        })?;
        launched.push(h);
    }
    for (i, l) in shared.rx.iter().enumerate() {
        let sh = Arc::clone(shared);
        let lc = l.lcore;
        let h = lcore::launch(lc, move || {
            let _early = StopIfEarly { lcore: lc, done: &sh.stop, requested: signals::stop_requested, stop: signals::request_stop };
            rx::rx_loop(&sh, i)
        })?;
        launched.push(h);
    }
    Ok(())
}

/// Stops the engine when a worker lcore's loop ends before the engine told
/// it to (`done` still false): a loop that gave up, or a panic in a build
/// that unwinds (tests; release builds abort). The lcore's trampoline turns
/// the panic into a non-zero return, but that is read only at the join, at
/// teardown: until then the main lcore would run on, the datagrams of that
/// lcore's queues or sockets piling up unseen.
/// A loop that already asked for the stop (and logged why) is not logged
/// twice.
struct StopIfEarly<'a> {
    lcore: u32,
    done: &'a AtomicBool,
    requested: fn() -> bool,
    stop: fn(),
}

impl Drop for StopIfEarly<'_> {
    fn drop(&mut self) {
        if self.done.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let panicked = std::thread::panicking();
        if panicked || !(self.requested)() {
            let how = if panicked { "panicked" } else { "ended" };
            log::error!(
                "lcore {}: its loop {how} before the engine stopped: stopping the engine",
                self.lcore
            );
        }
        (self.stop)();
    }
}

/// `net_af_packet`'s ring size below which a port with several queues
/// reorders flows under bursts.
const AF_PACKET_MIN_FRAMES: u32 = 2048;
/// The PMD's ring without `framecnt=`, in frames a queue.
const AF_PACKET_DEFAULT_FRAMES: u32 = 512;

/// A warning when a `net_af_packet` port polls several queues on rings
/// the size of the PMD's default: a burst that fills one queue's ring
/// (its RX lcore asleep or preempted) makes the kernel's fanout roll the
/// flow over to another queue, and the RX lcore, draining the queues in
/// turn, delivers the flow out of order (QUIC's loss detection reads that
/// as loss: 3% of a bulk client's packets, none of them dropped).
fn af_packet_reorder_risk(driver: &str, port: &str, rx_queues: u16, vdevs: &[String]) -> Option<String> {
    if driver != "net_af_packet" || rx_queues < 2 {
        return None;
    }
    let frames = vdevs
        .iter()
        .find(|v| crate::config::device_name(v) == port)
        .and_then(|v| crate::config::devarg(v, "framecnt"))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(AF_PACKET_DEFAULT_FRAMES);
    (frames < AF_PACKET_MIN_FRAMES).then(|| {
        format!(
            "port {port}: net_af_packet with {rx_queues} queues of {frames} frames: a burst that fills one is rolled over to another queue and its flow arrives reordered; add framecnt=4096 to the vdev's arguments"
        )
    })
}

#[cfg(test)]
mod af_packet_tests {
    use super::af_packet_reorder_risk;

    fn v(s: &str) -> Vec<String> {
        vec!["net_null0".into(), s.into()]
    }

    #[test]
    fn warns_for_the_default_ring_on_several_queues_only() {
        let d = "net_af_packet";
        let w = af_packet_reorder_risk(d, "net_af_packet0", 2, &v("net_af_packet0,iface=udx0,qpairs=2"));
        assert!(w.is_some_and(|w| w.contains("2 queues of 512 frames") && w.contains("framecnt=4096")));
        assert!(af_packet_reorder_risk(d, "net_af_packet0", 2, &v("net_af_packet0,iface=udx0,qpairs=2,framecnt=1024")).is_some());
        assert!(af_packet_reorder_risk(d, "net_af_packet0", 2, &v("net_af_packet0,iface=udx0,framecnt=4096,qpairs=2")).is_none());
        // One queue cannot roll over; another driver has no such ring.
        assert!(af_packet_reorder_risk(d, "net_af_packet0", 1, &v("net_af_packet0,iface=udx0")).is_none());
        assert!(af_packet_reorder_risk("net_pcap", "net_af_packet0", 2, &v("net_af_packet0,iface=udx0")).is_none());
        // The port's own vdev, not one whose name only starts the same.
        let two = vec![
            "net_af_packet10,iface=a,qpairs=2,framecnt=4096".to_string(),
            "net_af_packet1,iface=b,qpairs=2".to_string(),
        ];
        assert!(af_packet_reorder_risk(d, "net_af_packet1", 2, &two).is_some());
        assert!(af_packet_reorder_risk(d, "net_af_packet10", 2, &two).is_none());
    }
}

#[cfg(test)]
mod early_stop_tests {
    use super::StopIfEarly;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    static STOPS: AtomicUsize = AtomicUsize::new(0);
    fn count_stop() {
        STOPS.fetch_add(1, Ordering::SeqCst);
    }
    fn not_requested() -> bool {
        false
    }

    #[test]
    fn a_loop_that_ends_or_panics_before_stop_stops_the_engine_and_one_told_to_stop_does_not() {
        let done = AtomicBool::new(false);
        let before = STOPS.load(Ordering::SeqCst);
        drop(StopIfEarly { lcore: 1, done: &done, requested: not_requested, stop: count_stop });
        assert_eq!(STOPS.load(Ordering::SeqCst), before + 1, "ended early");
        let r = std::panic::catch_unwind(|| {
            let _g = StopIfEarly { lcore: 1, done: &done, requested: not_requested, stop: count_stop };
            panic!("an RX loop's bug");
        });
        assert!(r.is_err());
        assert_eq!(STOPS.load(Ordering::SeqCst), before + 2, "panicked");
        done.store(true, Ordering::SeqCst);
        drop(StopIfEarly { lcore: 1, done: &done, requested: not_requested, stop: count_stop });
        assert_eq!(STOPS.load(Ordering::SeqCst), before + 2, "told to stop");
    }
}
