//! The engine entry, shaped like DPDK's examples (skeleton, l3fwd,
//! client_server_mp): [`setup`](super::setup) (EAL, pools, ports, sockets),
//! one loop per worker lcore (RX or consumer), stats on the main lcore
//! ([`main_loop`](super::main_loop)), and a clean
//! [`teardown`](super::teardown) that checks the books. This file only
//! owns what those steps make and calls them in order.
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dpdk_sys::{lcore, Eal, Mempool, Port};

use super::consumer::Consumer;
use super::error::EngineError;
use super::main_loop::{self, MainLcore};
use super::shared::{Mode, Shared};
use super::teardown::{self, Stopping};
use super::{clients, setup, signals, telemetry};
use crate::config::Config;
use crate::socket::Socket;
use crate::summary::Summary;

/// Command-line overrides of `run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub duration: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// What the RX lcores do: the pipeline, or one of the benchmark modes.
    pub mode: Mode,
    /// The config file, re-read on SIGHUP.
    pub config_path: Option<PathBuf>,
    /// Interval lines and final counters as text or `nstat` lines.
    pub stats_format: crate::nstat::StatsFormat,
    /// Print every socket's latency histograms (bpftrace style) at exit.
    pub histograms: bool,
}

/// A running engine. Field order is teardown order: sockets (rings) and
/// ports before pools, pools before the EAL.
pub struct Engine {
    shared: Arc<Shared>,
    launched: Vec<lcore::Launched>,
    ports: Vec<Port>,
    port_names: Vec<String>,
    pools: Vec<(u32, Mempool)>,
    small_pools: Vec<(u32, Mempool)>,
    /// The exception device's pool (its port is the last of `ports`).
    exc_pool: Option<Mempool>,
    clone_pool: Option<Mempool>,
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
    /// The main lcore's consumer state ([`Engine::poll_main`], [`Engine::main_loop`]):
    /// its burst array and registry survive between polls.
    main_consumer: RefCell<Consumer>,
    eal: Option<Eal>,
    /// The IPC action out-of-process clients send requests to (unregistered
    /// first at stop and drop).
    client_ipc: Option<dpdk_sys::mp::MpAction>,
    /// This engine's claim on its file prefix, released after the EAL.
    instance: Option<crate::instance::InstanceLock>,
    /// The Prometheus endpoint (`[metrics] listen`), stopped before the
    /// sockets, ports and pools it reads go.
    metrics: Option<super::metrics::Server>,
    /// DPDK's capture server (`[capture] pdump`), for `dpdk-dumpcap`. Ends
    /// after the ports: a capture's callbacks write its statistics memzone
    /// from the RX lcores and the main lcore's TX until then.
    pdump: Option<dpdk_sys::pdump::Pdump>,
}

/// Run the engine until a signal, the duration, or idleness stops it.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<Summary, EngineError> {
    // A SIGINT from here on ends the run with a summary, even during setup.
    signals::install();
    // Fail now, not after the whole run, if the JSON cannot be written.
    if let Some(path) = &opts.stats_json {
        setup::probe_writable(path)?;
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

impl Engine {
    /// Initialise the EAL, pools, ports and sockets, and launch the worker lcores.
    pub fn start(cfg: &Config, opts: &RunOptions) -> Result<Engine, EngineError> {
        signals::install();
        setup::preflight(cfg)?;
        let instance = setup::lock_instance(cfg)?;
        let eal = setup::init_eal(cfg)?;
        let pdump = setup::start_pdump(cfg)?;
        let built = setup::build(cfg, opts.mode)?;
        if let Some(p) = &pdump {
            setup::quiesce_on_capture_stop(p, &built.shared);
        }
        let mut e = Engine {
            main_consumer: RefCell::new(Consumer::new(&built.shared, None)),
            shared: built.shared,
            launched: Vec::new(),
            ports: built.ports,
            port_names: built.port_names,
            pools: built.pools,
            small_pools: built.small_pools,
            exc_pool: built.exc_pool,
            clone_pool: built.clone_pool,
            started: Instant::now(),
            cfg: cfg.clone(),
            config_path: opts.config_path.clone(),
            stats_format: opts.stats_format,
            histograms: opts.histograms,
            pool_samples: Vec::new(),
            pool_marks: built.pool_marks,
            eal: None,
            client_ipc: None,
            instance: None,
            metrics: None,
            pdump,
        };
        setup::launch_workers(&e.shared, &mut e.launched)?;
        e.started = Instant::now();
        e.eal = Some(eal);
        e.instance = Some(instance);
        // Telemetry reads the same snapshot the exit JSON is made from.
        telemetry::start(&e.shared);
        let dir = e
            .instance
            .as_ref()
            .and_then(|i| i.path().parent().map(|d| d.to_path_buf()));
        e.client_ipc = clients::register(&e.shared, dir.as_deref());
        if let Some(addr) = cfg.metrics.addr() {
            let addr = addr.map_err(EngineError::Setup)?;
            e.metrics = Some(e.start_metrics(addr)?);
        }
        Ok(e)
    }

    /// The Prometheus endpoint's thread, reading what telemetry reads plus
    /// the ports' xstats and the pools' free counts.
    fn start_metrics(&self, addr: std::net::SocketAddr) -> Result<super::metrics::Server, EngineError> {
        let ports = self
            .ports
            .iter()
            .zip(&self.port_names)
            .map(|(p, n)| (p.id(), n.clone()))
            .collect();
        let mut pools = Vec::new();
        for (name, list) in [("rx_pool", &self.pools), ("small_pool", &self.small_pools)] {
            for (sock, _) in list {
                let n = format!("{name}_s{sock}");
                // A handle that does not free the pool; the server is
                // joined before the engine's own handles go.
                if let Ok(mp) = Mempool::lookup(&n) {
                    pools.push((n, mp));
                }
            }
        }
        super::metrics::Server::start(addr, &self.shared, super::metrics::Sources { ports, pools })
            .map_err(EngineError::Setup)
    }

    /// The Prometheus endpoint's address (the bound port when 0 was asked).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
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

    /// The main lcore's duties once: consume the sockets it reads (one
    /// pass of its [`Consumer`], as `main_loop` does).
    pub fn poll_main(&self) -> usize {
        self.main_consumer.borrow_mut().poll(&self.shared)
    }

    /// Print a stats line per interval; return on a signal, the duration, or idleness.
    ///
    /// When the main lcore consumes, this is a poll loop like DPDK's
    /// examples: the per-poll path is one pass of the [`Consumer`];
    /// every [`main_loop::MAIN_CHECK_POLLS`] polls one TSC read decides which timer is
    /// due (duration, stats interval, flow-table GC, idle check) and the
    /// signal flags are read. No system clock per poll.
    pub fn main_loop(&mut self, duration: Option<f64>) {
        // Out of its cell for the loop (SIGHUP handling borrows self). The
        // placeholder left in the cell holds no registry: one that did would
        // keep the sockets of that moment, and their rings (memzones), alive
        // until the loop ends, however many reloads retired them.
        let mut placeholder = Consumer::new(&self.shared, None);
        placeholder.release();
        let mut consumer = std::mem::replace(self.main_consumer.get_mut(), placeholder);
        main_loop::run(
            MainLcore {
                shared: &self.shared,
                cfg: &self.cfg,
                config_path: self.config_path.as_deref(),
                started: self.started,
                stats_format: self.stats_format,
                pools: &self.pools,
                pool_marks: &self.pool_marks,
                pool_samples: &mut self.pool_samples,
            },
            &mut consumer,
            duration,
        );
        *self.main_consumer.get_mut() = consumer;
    }

    /// Stop RX, drain every stage, let consumers finish, check the books.
    pub fn stop(mut self) -> Result<Summary, EngineError> {
        // No client opens a socket from here on.
        self.client_ipc.take();
        teardown::stop(Stopping {
            shared: &self.shared,
            launched: std::mem::take(&mut self.launched),
            started: self.started,
            ports: &mut self.ports,
            port_names: &self.port_names,
            pools: &self.pools,
            small_pools: &self.small_pools,
            clone_pool: self.clone_pool.as_ref(),
            pool_samples: std::mem::take(&mut self.pool_samples),
            main_consumer: self.main_consumer.get_mut(),
            stats_format: self.stats_format,
            histograms: self.histograms,
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // No scrape reads the sockets, ports or pools from here on.
        if let Some(mut m) = self.metrics.take() {
            m.stop();
        }
        self.client_ipc.take();
        teardown::release(
            &self.shared,
            &mut self.launched,
            self.main_consumer.get_mut(),
        );
        self.ports.clear();
        // No RX lcore, no TX and no port is left to run a capture callback.
        self.pdump.take();
        teardown::release_small_caches(&self.shared);
        self.small_pools.clear();
        // Every clone is freed by now (the ports, rings and stages are
        // gone); the direct mbufs they held went back with them.
        self.clone_pool.take();
        self.pools.clear();
        self.exc_pool.take();
        self.eal.take();
    }
}
