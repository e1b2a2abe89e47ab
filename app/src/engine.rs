//! The poll-mode runtime, shaped like DPDK's examples (skeleton, l3fwd):
//! setup (EAL, pools, ports), one loop per worker lcore, stats on the main
//! lcore, and a clean teardown (stop flag, join, stop ports, EAL cleanup).
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dpdk_sys::{eal, lcore, port, DpdkError, Eal, Mempool, Port};

use crate::config::{self, Config, Role};
use crate::stats::{self, Padded};
use crate::{rx, signals};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Setup(String),
    #[error("EAL init failed: {err}; {hint}")]
    Eal { err: DpdkError, hint: String },
    #[error("{0}")]
    Dpdk(#[from] DpdkError),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Command-line overrides of `run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub duration: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// Bare rx-and-free loop: no parsing (the baseline the pipeline is measured against).
    pub bare: bool,
}

/// Where one RX queue is polled.
#[derive(Debug, Clone)]
pub struct QueueRef {
    pub port_name: String,
    pub port: u16,
    pub queue: u16,
}

/// Everything a worker lcore shares with the main lcore.
pub struct Shared {
    pub stop: AtomicBool,
    pub rx: Vec<RxLcore>,
    pub burst: u16,
    pub tsc_hz: u64,
}

/// One RX lcore's assignment and counters.
pub struct RxLcore {
    pub lcore: u32,
    pub node: u32,
    pub queues: Vec<QueueRef>,
    pub qstats: Vec<Padded<stats::QueueStats>>,
    pub lstats: Padded<stats::LoopStats>,
    /// TSC of the last burst that returned packets (for stop_when_idle).
    pub last_rx_tsc: stats::Counter,
}

/// Totals at exit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub seconds: f64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub hot_path_allocations: u64,
    pub lcores: Vec<LcoreSummary>,
    pub ports: Vec<PortSummary>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LcoreSummary {
    pub lcore: u32,
    pub node: u32,
    pub polls: u64,
    pub idle_polls: u64,
    pub queues: Vec<QueueSummary>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueueSummary {
    pub port: String,
    pub queue: u16,
    pub packets: u64,
    pub bytes: u64,
    pub bursts: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PortSummary {
    pub name: String,
    pub driver: String,
    pub ipackets: u64,
    pub ibytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub rx_nombuf: u64,
    pub xstats: std::collections::BTreeMap<String, u64>,
}

/// Run the engine until a signal, the duration, or idleness stops it.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<Summary, EngineError> {
    preflight(cfg)?;
    let eal = Eal::init(&cfg.eal.args()).map_err(|err| EngineError::Eal { hint: eal_hint(cfg, &err), err })?;
    log::info!("DPDK {} up, TSC {} MHz", eal::version(), eal::tsc_hz() / 1_000_000);
    let res = run_with_eal(cfg, opts);
    drop(eal);
    res
}

/// Checks that give a better message than the EAL would.
fn preflight(cfg: &Config) -> Result<(), EngineError> {
    if !cfg.eal.no_huge {
        let mounted = std::fs::read_to_string("/proc/mounts").map(|m| m.contains("hugetlbfs")).unwrap_or(false);
        if !mounted {
            return Err(EngineError::Setup(
                "no hugetlbfs mount found: run `sudo bash scripts/setup.sh`, or set eal.no_huge = true in the config".into(),
            ));
        }
        let free = hugepages_free();
        if free == 0 {
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
    Ok(())
}

fn hugepages_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("HugePages_Free:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn eal_hint(cfg: &Config, err: &DpdkError) -> String {
    if err.errno() == Some(libc::ENODEV) {
        return format!(
            "a device in eal.vdevs {:?} / eal.allow {:?} was not recognised: its PMD is not installed (apt-get install dpdk) or the name is misspelt",
            cfg.eal.vdevs, cfg.eal.allow
        );
    }
    if err.errno() == Some(libc::EALREADY) {
        return "the EAL was already initialised in this process".into();
    }
    if cfg.eal.no_huge {
        "check eal.lcores names CPUs that exist and that you run as root".into()
    } else {
        "run `sudo bash scripts/setup.sh` (hugepages), or set eal.no_huge = true; check eal.lcores and that you run as root"
            .into()
    }
}

fn run_with_eal(cfg: &Config, opts: &RunOptions) -> Result<Summary, EngineError> {
    // Lcores: every configured one must be an enabled worker.
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

    // Ports by name.
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

    // RX lcore assignments, with the node each one belongs to.
    let mut rx_lcores = Vec::new();
    for l in cfg.lcores.iter().filter(|l| l.role == Role::Rx) {
        let node = l.node.unwrap_or_else(|| lcore::socket_id(l.id));
        let mut queues = Vec::new();
        for q in &l.queues {
            let (pname, qi) = config::parse_queue_ref(q).expect("validated");
            let idx = cfg.ports.iter().position(|p| p.name == pname).expect("validated");
            queues.push(QueueRef { port_name: pname.to_string(), port: port_ids[idx], queue: qi });
        }
        let qstats = queues.iter().map(|_| Padded::default()).collect();
        rx_lcores.push(RxLcore {
            lcore: l.id,
            node,
            queues,
            qstats,
            lstats: Padded::default(),
            last_rx_tsc: Default::default(),
        });
    }

    // One pktmbuf pool per NUMA socket that polls a queue (DPDK's rule: allocate where you receive).
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
            log::info!("pool rx_pool_s{sock}: {} mbufs x {} B (truesize {} B)", mp.size(), mp.data_room(), mp.truesize());
            pools.push((sock, mp));
        }
    }

    // Configure and start every port; RX queue q takes the pool of the node that polls it.
    let mut ports = Vec::new();
    for (i, pc) in cfg.ports.iter().enumerate() {
        let id = port_ids[i];
        let mut qpools = Vec::new();
        for q in 0..pc.rx_queues {
            let poller = rx_lcores
                .iter()
                .find(|l| l.queues.iter().any(|r| r.port == id && r.queue == q))
                .expect("validated: every queue has a poller");
            let sock = lcore::socket_id(poller.lcore);
            let info = port::info(id)?;
            if info.socket >= 0 && info.socket as u32 != sock {
                log::warn!(
                    "port {} is on NUMA socket {} but queue {q} is polled by lcore {} on socket {sock}: cross-node traffic",
                    pc.name,
                    info.socket,
                    poller.lcore
                );
            }
            qpools.push(&pools.iter().find(|(s, _)| *s == sock).expect("pool per socket").1);
        }
        let conf = dpdk_sys::PortConf {
            rx_queues: pc.rx_queues,
            tx_queues: pc.tx_queues,
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

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        rx: rx_lcores,
        burst: cfg.engine.burst,
        tsc_hz: eal::tsc_hz(),
    });
    signals::install();

    let started = Instant::now();
    let mut launched = Vec::new();
    for (i, l) in shared.rx.iter().enumerate() {
        let sh = Arc::clone(&shared);
        let bare = opts.bare;
        match lcore::launch(l.lcore, move || rx::rx_loop(&sh, i, bare)) {
            Ok(h) => launched.push(h),
            Err(e) => {
                shared.stop.store(true, Ordering::SeqCst);
                for h in launched {
                    h.join();
                }
                return Err(e.into());
            }
        }
    }

    let duration = opts.duration.or((cfg.engine.duration_secs > 0.0).then_some(cfg.engine.duration_secs));
    main_loop(cfg, &shared, duration, started);

    shared.stop.store(true, Ordering::SeqCst);
    let mut failed = Vec::new();
    for h in launched {
        let lc = h.lcore();
        if h.join() != 0 {
            failed.push(lc);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let summary = summarize(&shared, &ports, &cfg.ports, seconds);
    for p in &mut ports {
        p.stop()?;
    }
    drop(ports);
    drop(pools);
    print_summary(&summary);
    if let Some(path) = &opts.stats_json {
        let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
        std::fs::write(path, text).map_err(|source| EngineError::Write { path: path.clone(), source })?;
    }
    if !failed.is_empty() {
        return Err(EngineError::Setup(format!("worker lcores {failed:?} failed (see log)")));
    }
    Ok(summary)
}

/// The main lcore: print a stats line per interval, watch for stop conditions.
fn main_loop(cfg: &Config, shared: &Shared, duration: Option<f64>, started: Instant) {
    let interval = Duration::from_millis(cfg.engine.stats_interval_ms);
    let idle_ticks = cfg.engine.stop_when_idle_ms.saturating_mul(shared.tsc_hz) / 1000;
    let mut last_print = Instant::now();
    let mut last_pkts = 0u64;
    let mut last_bytes = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(5));
        if signals::stop_requested() {
            log::info!("signal received, stopping");
            break;
        }
        if let Some(d) = duration {
            if started.elapsed().as_secs_f64() >= d {
                break;
            }
        }
        if idle_ticks > 0 {
            let now = eal::rdtsc();
            let total: u64 = shared.rx.iter().flat_map(|l| l.qstats.iter()).map(|q| q.packets.get()).sum();
            let all_idle = shared.rx.iter().all(|l| now.saturating_sub(l.last_rx_tsc.get()) > idle_ticks);
            if total > 0 && all_idle {
                log::info!("all RX queues idle for {} ms, stopping", cfg.engine.stop_when_idle_ms);
                break;
            }
        }
        if last_print.elapsed() >= interval {
            let secs = last_print.elapsed().as_secs_f64();
            last_print = Instant::now();
            let pkts: u64 = shared.rx.iter().flat_map(|l| l.qstats.iter()).map(|q| q.packets.get()).sum();
            let bytes: u64 = shared.rx.iter().flat_map(|l| l.qstats.iter()).map(|q| q.bytes.get()).sum();
            log::info!(
                "rx {} pps {} bit/s total {} pkts",
                stats::human(stats::rate(pkts, last_pkts, secs)),
                stats::human(stats::rate(bytes, last_bytes, secs) * 8.0),
                pkts
            );
            last_pkts = pkts;
            last_bytes = bytes;
        }
    }
}

fn summarize(shared: &Shared, ports: &[Port], pconf: &[config::PortConf], seconds: f64) -> Summary {
    let lcores: Vec<LcoreSummary> = shared
        .rx
        .iter()
        .map(|l| LcoreSummary {
            lcore: l.lcore,
            node: l.node,
            polls: l.lstats.polls.get(),
            idle_polls: l.lstats.idle_polls.get(),
            queues: l
                .queues
                .iter()
                .zip(&l.qstats)
                .map(|(q, s)| QueueSummary {
                    port: q.port_name.clone(),
                    queue: q.queue,
                    packets: s.packets.get(),
                    bytes: s.bytes.get(),
                    bursts: s.bursts.get(),
                })
                .collect(),
        })
        .collect();
    let rx_packets = lcores.iter().flat_map(|l| &l.queues).map(|q| q.packets).sum();
    let rx_bytes = lcores.iter().flat_map(|l| &l.queues).map(|q| q.bytes).sum();
    let ports = ports
        .iter()
        .zip(pconf)
        .map(|(p, c)| {
            let s = p.stats();
            PortSummary {
                name: c.name.clone(),
                driver: p.info().driver.clone(),
                ipackets: s.ipackets,
                ibytes: s.ibytes,
                imissed: s.imissed,
                ierrors: s.ierrors,
                rx_nombuf: s.rx_nombuf,
                xstats: p.xstats().into_iter().collect(),
            }
        })
        .collect();
    Summary {
        seconds,
        rx_packets,
        rx_bytes,
        hot_path_allocations: crate::alloc_guard::hot_allocations(),
        lcores,
        ports,
    }
}

fn print_summary(s: &Summary) {
    println!("summary: {:.2} s, rx_packets {} rx_bytes {} ({} pps), hot-path allocations {}",
        s.seconds, s.rx_packets, s.rx_bytes, stats::human(s.rx_packets as f64 / s.seconds.max(1e-9)), s.hot_path_allocations);
    for l in &s.lcores {
        for q in &l.queues {
            println!("  lcore {} node {} {}:{}: packets {} bytes {} bursts {}", l.lcore, l.node, q.port, q.queue, q.packets, q.bytes, q.bursts);
        }
    }
    for p in &s.ports {
        println!("  port {} ({}): ipackets {} imissed {} ierrors {} rx_nombuf {}", p.name, p.driver, p.ipackets, p.imissed, p.ierrors, p.rx_nombuf);
    }
}
