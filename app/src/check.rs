//! `udpdemux check --config FILE`: validate a config without starting
//! traffic. Two passes, one line per problem:
//!
//! * without the EAL: [`Config::problems`] (keys, queue ownership, sockets)
//!   and [`Config::start_problems`] (memory, file prefixes, socket and filler
//!   counts, pcap paths, socket collisions by the flow table's own
//!   `EADDRINUSE` rule): the lists `run` refuses to start with, so `check`
//!   and `run` print the same line; then sizes (rcvbuf against one mbuf's
//!   truesize, the pool against DPDK's usual sizing rule, the delivery ring
//!   against what the rcvbuf admits);
//! * with the EAL (initialised with the config's devices, but no hugepages,
//!   no shared config, no telemetry and a private file prefix, so it can run
//!   beside a live instance): lcores exist, ports were probed and have the
//!   queues asked for, and NUMA placement of port, pool and lcore, warned
//!   about as DPDK's examples do. Ports are never configured or started.
use std::path::Path;

use dpdk_sys::{lcore, port, Eal};

use crate::config::{self, Config, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    pub msg: String,
}

impl Problem {
    fn error(msg: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Error,
            msg: msg.into(),
        }
    }
    fn warning(msg: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Warning,
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{s}: {}", self.msg)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("config {path}: {errors} error(s), {warnings} warning(s)")]
    Failed {
        path: String,
        errors: usize,
        warnings: usize,
    },
}

/// One mbuf's truesize in an engine pool: what each datagram is charged.
pub fn truesize(cfg: &Config) -> u64 {
    dpdk_sys::mbuf::MBUF_SIZE as u64 + crate::meta::PRIV_SIZE as u64 + cfg.mempool.data_room as u64
}

/// Bursts per RX lcore a socket's rcvbuf should hold (see [`check_static`]).
pub const BURSTS_PER_RCVBUF: u64 = 4;

/// Every problem that needs no EAL.
pub fn check_static(cfg: &Config) -> Vec<Problem> {
    // The same two lists `run` refuses to start with (Config::load_for_start),
    // so both print the same line: structure first, then what start needs
    // (memory, prefixes, counts, pcap paths, collisions).
    let mut out: Vec<Problem> = cfg
        .problems()
        .into_iter()
        .chain(cfg.start_problems())
        .map(Problem::error)
        .collect();

    let ts = truesize(cfg);
    let rx_lcores = cfg.lcores.iter().filter(|l| l.role == Role::Rx).count() as u64;
    // The burst budget: how many datagrams of the pool's truesize a socket
    // must be able to hold to take full bursts from every RX lcore without
    // dropping while its consumer keeps up. Per RX lcore, up to three bursts
    // are charged at once: one being staged (charged at stage time), one the
    // elected drainer has moved into the delivery ring as a whole, and one
    // the consumer has dequeued and freed but not yet released (it releases
    // in batches of rcvbuf/4, see `Socket::release_batched`). That deficit
    // can hide a quarter of the budget, so three bursts must fit in 3/4 of
    // it: rcvbuf >= 4 bursts x RX lcores x truesize.
    let burst_budget = BURSTS_PER_RCVBUF * cfg.engine.burst as u64 * rx_lcores.max(1);
    for s in &cfg.sockets {
        let rcvbuf = s.rcvbuf as u64;
        if rcvbuf < ts {
            // The kernel's rule (and ours): an empty socket always takes one
            // datagram; after that, rmem > rcvbuf drops everything until the consumer frees some.
            out.push(Problem::error(format!(
                "socket {:?}: rcvbuf = {rcvbuf} is below one mbuf truesize ({ts} B): only one datagram can be queued at a time, the rest drop",
                s.name
            )));
            continue;
        }
        // Admission refuses rmem + truesize > rcvbuf: a full socket holds rcvbuf / truesize.
        let holds = rcvbuf / ts;
        if holds < burst_budget {
            out.push(Problem::warning(format!(
                "socket {:?}: rcvbuf = {rcvbuf} holds {holds} datagrams of truesize {ts} B, fewer than {BURSTS_PER_RCVBUF} bursts of {} x {} RX lcore(s) = {burst_budget}: expect rcvbuf_full drops at full rate even when the consumer keeps up; rcvbuf >= {} is the least that holds them, and a consumer that falls behind at times needs more",
                s.name,
                cfg.engine.burst,
                rx_lcores.max(1),
                burst_budget * ts
            )));
        }
        // rte_ring holds size - 1 entries.
        let ring = (s.ring_size.max(2) as u64).next_power_of_two() - 1;
        let admitted = rcvbuf / ts + 1;
        if ring < admitted {
            out.push(Problem::warning(format!(
                "socket {:?}: ring_size {} holds {ring} datagrams but rcvbuf {rcvbuf} admits {admitted} of truesize {ts}: the ring fills first (drops counted as ring_full, not rcvbuf_full)",
                s.name, s.ring_size
            )));
        }
    }

    // Membership reports go out through the send path, which exists only
    // when a port has an address.
    if cfg.ports.iter().all(|p| p.addresses.is_empty()) {
        if let Some(s) = cfg.sockets.iter().find(|s| s.multicast.is_some()) {
            out.push(Problem::warning(format!(
                "socket {:?} joins {} but no [[port]] has addresses: the engine receives the group but sends no IGMP/MLD report, so a snooping switch will not forward it; give the port an address (addresses = [\"ADDR/LEN\"])",
                s.name,
                s.multicast.map(|g| g.to_string()).unwrap_or_default()
            )));
        }
    }

    // Fragments held for reassembly are mbufs out of the RX pool: a table
    // filled to its byte bound must leave the NIC rings theirs.
    let r = &cfg.reassembly;
    if r.enabled {
        let held = r.high_thresh / ts.max(1) * rx_lcores.max(1);
        if held * 2 > cfg.mempool.mbufs as u64 {
            out.push(Problem::warning(format!(
                "reassembly.high_thresh = {} holds up to {held} mbufs of truesize {ts} across {} RX lcore(s), more than half of mempool.mbufs = {}: a fragment flood can starve RX (rx_nombuf) before the table evicts",
                r.high_thresh,
                rx_lcores.max(1),
                cfg.mempool.mbufs
            )));
        }
    }

    // DPDK's usual sizing rule (l3fwd, skeleton): every RX descriptor holds an
    // mbuf, and every lcore cache may hold `cache` more, before one datagram
    // is queued for a socket.
    let descs: u64 = cfg
        .ports
        .iter()
        .map(|p| p.rx_desc as u64 * p.rx_queues as u64)
        .sum();
    let need = descs + cfg.mempool.cache as u64 * rx_lcores.max(1);
    if (cfg.mempool.mbufs as u64) < need {
        out.push(Problem::error(format!(
            "mempool.mbufs = {} is below rx_desc x queues ({descs}) + cache x rx lcores ({} x {}) = {need}: the NIC rings alone can take every mbuf (rx_nombuf)",
            cfg.mempool.mbufs,
            cfg.mempool.cache,
            rx_lcores.max(1)
        )));
    } else {
        let queued: u64 = cfg.sockets.iter().map(|s| s.rcvbuf as u64 / ts + 1).sum();
        if (cfg.mempool.mbufs as u64) < need + queued {
            out.push(Problem::warning(format!(
                "mempool.mbufs = {}: sockets may hold {queued} mbufs at their rcvbuf on top of {need} for rings and caches; full sockets will starve RX (rx_nombuf) before they drop",
                cfg.mempool.mbufs
            )));
        }
    }
    out
}

/// `check`'s private EAL file prefix.
/// Where the kernel lists PCI devices and their drivers.
pub const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// Drivers through which a DPDK PMD drives a PCI device from user space.
const USERSPACE_DRIVERS: [&str; 4] = ["vfio-pci", "uio_pci_generic", "igb_uio", "uio_hv_generic"];

/// Kernel drivers of bifurcated NICs: their PMD (mlx4/mlx5) works beside them.
const BIFURCATED_DRIVERS: [&str; 2] = ["mlx5_core", "mlx4_core"];

/// A PCI address as sysfs names it (`0000:01:00.0`), from a config's
/// `eal.allow` entry or port name (`01:00.0`, `0000:01:00.0,arg=1`).
pub fn pci_address(s: &str) -> Option<String> {
    let a = s.split(',').next()?.trim();
    let full = if a.matches(':').count() == 1 {
        format!("0000:{a}")
    } else {
        a.to_string()
    };
    let (dom, rest) = full.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |x: &str, n: usize| x.len() == n && x.chars().all(|c| c.is_ascii_hexdigit());
    (hex(dom, 4) && hex(bus, 2) && hex(dev, 2) && hex(func, 1)).then(|| full.to_ascii_lowercase())
}

/// The PCI devices a config names (`eal.allow`, `[[port]] name`), each once.
pub fn pci_devices(cfg: &Config) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for a in cfg
        .eal
        .allow
        .iter()
        .chain(cfg.ports.iter().map(|p| &p.name))
        .filter_map(|s| pci_address(s))
    {
        if !v.contains(&a) {
            v.push(a);
        }
    }
    v
}

/// Every PCI device of the config that DPDK cannot drive as it is bound
/// now (read from `devices`, normally [`SYSFS_PCI_DEVICES`]), with the
/// command that binds it to vfio-pci.
pub fn pci_binding_problems(cfg: &Config, devices: &Path) -> Vec<Problem> {
    let mut out = Vec::new();
    for addr in pci_devices(cfg) {
        let dev = devices.join(&addr);
        let bind = format!(
            "bind it with `driverctl set-override {addr} vfio-pci` (kept across reboots) or `dpdk-devbind.py --bind=vfio-pci {addr}` (modprobe vfio-pci first)"
        );
        if !dev.exists() {
            out.push(Problem::error(format!(
                "PCI device {addr}: not present in {} (`lspci -D` lists the machine's devices): fix eal.allow / [[port]] name",
                devices.display()
            )));
            continue;
        }
        let driver = std::fs::read_link(dev.join("driver"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
        match driver.as_deref() {
            None => out.push(Problem::error(format!(
                "PCI device {addr} is bound to no driver: {bind}"
            ))),
            Some(d) if USERSPACE_DRIVERS.contains(&d) => {}
            Some(d) if BIFURCATED_DRIVERS.contains(&d) => {}
            Some(d) => {
                let ifaces: Vec<String> = std::fs::read_dir(dev.join("net"))
                    .map(|r| {
                        r.filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                let iface = if ifaces.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (interface {}: take it down first with `ip link set {} down`, and make sure it does not carry this host's own traffic)",
                        ifaces.join(", "),
                        ifaces[0]
                    )
                };
                out.push(Problem::error(format!(
                    "PCI device {addr} is still bound to the kernel driver {d}{iface}: DPDK cannot drive it; {bind}"
                )));
            }
        }
    }
    out
}

pub fn check_prefix() -> String {
    format!("udpdemux-check-{}", std::process::id())
}

/// The EAL arguments `check` uses: the config's devices and lcores, but no
/// hugepages, no shared files, no telemetry socket, a private file prefix.
pub fn check_eal_args(cfg: &Config) -> Vec<String> {
    let mut e = cfg.eal.clone();
    e.no_huge = true;
    e.memory_mb = e.memory_mb.clamp(64, 256);
    e.file_prefix = check_prefix();
    let mut a = e.args();
    // The exception device under a private interface name: probing it
    // checks the driver and its arguments, and never attaches to the
    // interface a running engine owns (a tap with two owners would hand
    // the kernel's frames to both).
    if let Some(d) = cfg.exception.device_with_iface(&check_iface()) {
        a.push(format!("--vdev={d}"));
    }
    if !a.iter().any(|x| x == "--no-shconf") {
        a.push("--no-shconf".into());
    }
    a.push("--no-telemetry".into());
    a
}

/// The interface name `check` probes the exception device under.
fn check_iface() -> String {
    format!("udxchk{}", std::process::id() % 1_000_000)
}

/// The exception device, probed by the EAL: found, with a queue pair for
/// every RX lcore (each writes to the kernel on its own TX queue).
fn exception_problems(cfg: &Config, out: &mut Vec<Problem>) {
    let Some(name) = cfg.exception.name() else {
        return;
    };
    let Some(id) = port::by_name(name) else {
        out.push(Problem::error(format!(
            "exception.device {name:?} was not probed: its PMD is missing (apt-get install dpdk) or /dev/net/tun (net_tap) or /dev/vhost-net (virtio_user) is absent"
        )));
        return;
    };
    let rx = cfg.lcores.iter().filter(|l| l.role == Role::Rx).count() as u16;
    match port::info(id) {
        Ok(i) if i.max_rx_queues < rx || i.max_tx_queues < rx => out.push(Problem::error(format!(
            "exception.device {name:?} ({}): {rx} queue pairs needed (one per RX lcore) but it has at most {} RX / {} TX: for virtio_user set queues={rx}",
            i.driver, i.max_rx_queues, i.max_tx_queues
        ))),
        Ok(_) => {}
        Err(e) => out.push(Problem::error(format!("exception.device {name:?}: {e}"))),
    }
}

/// Problems only the EAL can see. Initialises the EAL (once per process).
pub fn check_eal(cfg: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    // The EAL leaves its (empty) runtime directory behind: remove it on return.
    let _rundir = crate::instance::RemoveDirOnDrop(crate::instance::runtime_dir(&check_prefix()));
    let capture = crate::eal_log::Capture::start();
    let res = Eal::init(&check_eal_args(cfg));
    let logged = capture
        .map(crate::eal_log::Capture::finish)
        .unwrap_or_default();
    let eal = match res {
        Ok(e) => e,
        Err(e) => {
            // The same words `run` uses: the EAL's own reason, then a hint.
            out.push(Problem::error(format!(
                "EAL init failed: {}",
                crate::eal_log::eal_failure(cfg, &e, &logged)
            )));
            return out;
        }
    };
    let main = lcore::main_lcore();
    for l in &cfg.lcores {
        if !lcore::is_enabled(l.id) {
            // The words `run` uses (Engine::setup).
            out.push(Problem::error(format!(
                "lcore {} is not enabled by eal.lcores = {:?}: add it there or change [[lcore]] id",
                l.id, cfg.eal.lcores
            )));
        } else if l.id == main {
            out.push(Problem::error(format!(
                "lcore {} is the main lcore (it prints stats and handles signals): give [[lcore]] a worker lcore id",
                l.id
            )));
        } else if let Some(n) = l.node {
            let real = lcore::socket_id(l.id);
            if n != real {
                out.push(Problem::warning(format!(
                    "lcore {}: node = {n} but DPDK puts it on NUMA socket {real} (a virtual node: fine for tests, not for production)",
                    l.id
                )));
            }
        }
    }
    if port::count() == 0 {
        out.push(Problem::error(format!(
            "no ports found: the EAL probed no device (vdevs {:?}, allow {:?}); check eal.vdevs / eal.allow and that the PMD is installed (apt-get install dpdk)",
            cfg.eal.vdevs, cfg.eal.allow
        )));
    }
    for p in &cfg.ports {
        let Some(id) = port::by_name(&p.name) else {
            out.push(Problem::error(format!(
                "port {:?} not found: no such device was probed; its PMD may be missing or its eal.vdevs/eal.allow entry is wrong",
                p.name
            )));
            continue;
        };
        let info = match port::info(id) {
            Ok(i) => i,
            Err(e) => {
                out.push(Problem::error(format!("port {:?}: {e}", p.name)));
                continue;
            }
        };
        if p.rx_queues > info.max_rx_queues {
            out.push(Problem::error(format!(
                "port {:?} ({}): rx_queues = {} but the device has at most {}",
                p.name, info.driver, p.rx_queues, info.max_rx_queues
            )));
        }
        if p.tx_queues > info.max_tx_queues {
            out.push(Problem::error(format!(
                "port {:?} ({}): tx_queues = {} but the device has at most {}",
                p.name, info.driver, p.tx_queues, info.max_tx_queues
            )));
        }
        // The pool of a queue is on its poller's socket (allocate where you
        // receive), so port vs lcore is also port vs pool.
        for l in cfg
            .lcores
            .iter()
            .filter(|l| l.role == Role::Rx && lcore::is_enabled(l.id))
        {
            let polls = l
                .queues
                .iter()
                .filter_map(|q| config::parse_queue_ref(q))
                .any(|(n, _)| n == p.name);
            let sock = lcore::socket_id(l.id);
            if polls && info.socket >= 0 && info.socket as u32 != sock {
                out.push(Problem::warning(format!(
                    "port {:?} is on remote NUMA node {} to polling lcore {} (node {sock}), and so is its pool: performance will not be optimal",
                    p.name, info.socket, l.id
                )));
            }
        }
    }
    exception_problems(cfg, &mut out);
    drop(eal);
    out
}

/// `check`: print one line per problem (stdout), errors make it fail.
pub fn run(path: &Path) -> Result<Vec<Problem>, CheckError> {
    // Config::load stops at the first EAL-free problem: `check` lists them all.
    let cfg = Config::load_unvalidated(path)?;
    let mut problems = check_static(&cfg);
    problems.extend(pci_binding_problems(&cfg, Path::new(SYSFS_PCI_DEVICES)));
    // The EAL pass relies on a structurally valid config (queue refs, ports).
    if !problems.iter().any(|p| p.severity == Severity::Error) {
        problems.extend(check_eal(&cfg));
    }
    for p in &problems {
        println!("{p}");
    }
    let errors = problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count();
    let warnings = problems.len() - errors;
    if errors > 0 {
        return Err(CheckError::Failed {
            path: path.display().to_string(),
            errors,
            warnings,
        });
    }
    println!("config {}: ok ({warnings} warning(s))", path.display());
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    // no_huge: the memory check against free hugepages depends on the machine.
    const BASE: &str = r#"
[eal]
lcores = "0,1"
no_huge = true
vdevs = ["net_null0"]
[mempool]
mbufs = 8191
cache = 256
[[port]]
name = "net_null0"
[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]
"#;

    fn cfg(extra: &str) -> Config {
        toml::from_str(&format!("{BASE}{extra}")).unwrap()
    }

    fn errors(c: &Config) -> Vec<String> {
        check_static(c)
            .into_iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.msg)
            .collect()
    }

    #[test]
    fn pci_devices_bound_to_kernel_drivers_are_named_with_the_bind_command() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("udpdemux-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let devices = root.join("bus/pci/devices");
        let drivers = root.join("bus/pci/drivers");
        for d in ["ixgbe", "vfio-pci", "mlx5_core"] {
            std::fs::create_dir_all(drivers.join(d)).unwrap();
        }
        let dev = |addr: &str, driver: Option<&str>| {
            let p = devices.join(addr);
            std::fs::create_dir_all(&p).unwrap();
            if let Some(d) = driver {
                symlink(drivers.join(d), p.join("driver")).unwrap();
            }
            p
        };
        let kernel = dev("0000:01:00.0", Some("ixgbe"));
        std::fs::create_dir_all(kernel.join("net/enp1s0f0")).unwrap();
        dev("0000:02:00.0", Some("vfio-pci"));
        dev("0000:03:00.0", None);
        dev("0000:04:00.0", Some("mlx5_core"));
        let c = cfg(
            "[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\n",
        )
        .tap(|c| {
            c.eal.allow = vec![
                "0000:01:00.0".into(),
                "02:00.0,rxq_pkt_pad_en=1".into(),
                "0000:03:00.0".into(),
                "0000:04:00.0".into(),
                "0000:05:00.0".into(),
            ];
            c.ports.push(c.ports[0].clone());
            c.ports[1].name = "0000:01:00.0".into();
        });
        assert_eq!(
            pci_devices(&c),
            ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"]
        );
        let p: Vec<String> = pci_binding_problems(&c, &devices)
            .into_iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(p.len(), 3, "{p:#?}");
        assert!(p[0].starts_with("error: PCI device 0000:01:00.0 is still bound to the kernel driver ixgbe (interface enp1s0f0: take it down first with `ip link set enp1s0f0 down`"), "{}", p[0]);
        assert!(p[0].contains("`driverctl set-override 0000:01:00.0 vfio-pci`"), "{}", p[0]);
        assert!(p[0].contains("`dpdk-devbind.py --bind=vfio-pci 0000:01:00.0`"), "{}", p[0]);
        assert!(p[1].starts_with("error: PCI device 0000:03:00.0 is bound to no driver: bind it with `driverctl set-override 0000:03:00.0 vfio-pci`"), "{}", p[1]);
        assert!(p[2].starts_with("error: PCI device 0000:05:00.0: not present in "), "{}", p[2]);
        assert_eq!(pci_address("net_null0"), None);
        assert_eq!(pci_address("0000:01:00.0:1"), None);
        assert_eq!(pci_address("3B:00.1"), Some("0000:3b:00.1".into()));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn clean_config_has_no_problem() {
        assert!(
            check_static(&cfg("")).is_empty(),
            "{:?}",
            check_static(&cfg(""))
        );
    }

    #[test]
    fn colliding_sockets_but_not_reuseport_groups() {
        let two = "[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\n[[socket]]\nname = \"b\"\nlocal = \"198.18.0.1:53\"\n";
        let e = errors(&cfg(two));
        assert!(
            e.iter()
                .any(|m| m.contains("socket \"b\"") && m.contains("address in use")),
            "{e:?}"
        );
        let group = two.replace(
            "local = \"198.18.0.1:53\"\n",
            "local = \"198.18.0.1:53\"\nreuseport = true\n",
        );
        assert!(errors(&cfg(&group)).is_empty());
        // Different ports do not collide.
        let apart = two.replacen(
            "198.18.0.1:53\"\n[[socket]]",
            "198.18.0.1:54\"\n[[socket]]",
            1,
        );
        assert!(
            errors(&cfg(&apart)).is_empty(),
            "{:?}",
            errors(&cfg(&apart))
        );
    }

    #[test]
    fn rcvbuf_below_truesize_and_ring_smaller_than_rcvbuf() {
        let c = cfg("[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\nrcvbuf = 4096\n")
            .tap(|c| c.mempool.data_room = 9216);
        assert!(
            errors(&c)
                .iter()
                .any(|m| m.contains("below one mbuf truesize")),
            "{:?}",
            errors(&c)
        );
        let c = cfg("[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\nrcvbuf = 4194304\nring_size = 256\n");
        let p = check_static(&c);
        assert!(
            p.iter()
                .any(|p| p.severity == Severity::Warning && p.msg.contains("the ring fills first")),
            "{p:?}"
        );
    }

    #[test]
    fn rcvbuf_smaller_than_the_burst_budget_is_named_with_the_size_needed() {
        let burst_warnings = |c: &Config| -> Vec<String> {
            check_static(c)
                .into_iter()
                .filter(|p| p.severity == Severity::Warning && p.msg.contains("bursts of"))
                .map(|p| p.msg)
                .collect()
        };
        let sock = |rcvbuf: &str| {
            format!("[[socket]]\nname = \"dns\"\nlocal = \"198.18.0.1:53\"\n{rcvbuf}")
        };
        // The default 212 992 B holds 89 datagrams of 128 + 64 + 2176 = 2368 B:
        // fewer than 4 bursts of 32 from one RX lcore (128), which need 303 104 B.
        let c = cfg(&sock(""));
        assert_eq!(truesize(&c), 2368);
        let w = burst_warnings(&c);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("socket \"dns\": rcvbuf = 212992 holds 89 datagrams"),
            "{w:?}"
        );
        assert!(
            w[0].contains("4 bursts of 32 x 1 RX lcore(s) = 128"),
            "{w:?}"
        );
        assert!(w[0].contains("rcvbuf >= 303104 is the least"), "{w:?}");
        // Exactly the size named: no warning; one byte less: warned.
        assert!(burst_warnings(&cfg(&sock("rcvbuf = 303104\n"))).is_empty());
        assert_eq!(burst_warnings(&cfg(&sock("rcvbuf = 303103\n"))).len(), 1);
        // Smaller bursts need less; a second RX lcore needs twice as much.
        let small = cfg(&sock("")).tap(|c| c.engine.burst = 8);
        assert!(
            burst_warnings(&small).is_empty(),
            "{:?}",
            burst_warnings(&small)
        );
        let two = cfg(&format!(
            "[[lcore]]\nid = 2\nrole = \"rx\"\nqueues = [\"net_null0:1\"]\n{}",
            sock("rcvbuf = 303104\n")
        ))
        .tap(|c| c.ports[0].rx_queues = 2);
        assert!(errors(&two).is_empty(), "{:?}", errors(&two));
        let w = burst_warnings(&two);
        assert!(
            w.len() == 1
                && w[0].contains("x 2 RX lcore(s) = 256")
                && w[0].contains("rcvbuf >= 606208 is the least"),
            "{w:?}"
        );
        // A larger data room raises the truesize and so the size needed.
        let big = cfg(&sock("rcvbuf = 303104\n")).tap(|c| c.mempool.data_room = 9216);
        let w = burst_warnings(&big);
        assert!(
            w.len() == 1
                && w[0].contains(&format!("rcvbuf >= {} is the least", 128 * (128 + 64 + 9216))),
            "{w:?}"
        );
    }

    #[test]
    fn pool_smaller_than_rings_and_caches() {
        let c = cfg("").tap(|c| c.mempool.mbufs = 1023);
        assert!(
            errors(&c)
                .iter()
                .any(|m| m.contains("rx_desc x queues (1024)")),
            "{:?}",
            errors(&c)
        );
    }

    #[test]
    fn reassembly_bound_against_the_pool() {
        let warned = |c: &Config| {
            check_static(c)
                .into_iter()
                .any(|p| p.severity == Severity::Warning && p.msg.starts_with("reassembly.high_thresh"))
        };
        // 4 MiB of 2368-byte mbufs is 1771 of them: fine in a pool of 8191.
        let c = cfg("").tap(|c| c.mempool.mbufs = 8191);
        assert!(!warned(&c));
        // More than half of a 2047-mbuf pool.
        let small = cfg("").tap(|c| {
            c.mempool.mbufs = 2047;
            c.mempool.cache = 32;
        });
        assert!(warned(&small));
        // Off: nothing held, nothing to warn about.
        assert!(!warned(&small.clone().tap(|c| c.reassembly.enabled = false)));
    }

    #[test]
    fn check_eal_args_are_private_and_hugepage_free() {
        let a = check_eal_args(&cfg(""));
        assert!(a.contains(&"--no-huge".to_string()));
        assert!(a.contains(&"--no-shconf".to_string()));
        assert!(a.contains(&"--no-telemetry".to_string()));
        assert!(a
            .iter()
            .any(|x| x.starts_with("--file-prefix=udpdemux-check-")));
    }

    trait Tap: Sized {
        fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
    }
    impl Tap for Config {
        fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
            f(&mut self);
            self
        }
    }
}
