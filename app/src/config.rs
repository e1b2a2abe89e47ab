//! The TOML configuration: EAL, ports, lcores and their roles, pools, sockets.
//!
//! Every table rejects unknown keys, so a typo is an error naming the key
//! instead of a silently ignored setting.
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {msg}")]
    Parse { path: PathBuf, msg: String },
    #[error("config {path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub eal: EalConf,
    #[serde(default)]
    pub engine: EngineConf,
    #[serde(default)]
    pub mempool: MempoolConf,
    #[serde(default, rename = "port")]
    pub ports: Vec<PortConf>,
    #[serde(default, rename = "lcore")]
    pub lcores: Vec<LcoreConf>,
    #[serde(default, rename = "socket")]
    pub sockets: Vec<SocketConf>,
    #[serde(default)]
    pub small_cache: SmallCacheConf,
    #[serde(default)]
    pub reassembly: ReassemblyConf,
    #[serde(default)]
    pub metrics: MetricsConf,
    #[serde(default)]
    pub exception: ExceptionConf,
    #[serde(default)]
    pub neighbour: NeighbourConf,
    #[serde(default)]
    pub capture: CaptureConf,
}

/// The exception path to the kernel (`runtime::exception`): off unless
/// `device` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExceptionConf {
    /// The vdev that carries frames to and from the kernel, as for
    /// `--vdev`: `net_tap0,iface=udx-host` or
    /// `virtio_user0,path=/dev/vhost-net,iface=udx-host,queues=N`.
    #[serde(default)]
    pub device: Option<String>,
    /// The `[[port]]` whose traffic it carries (default: the first).
    #[serde(default)]
    pub port: Option<String>,
    /// Frames per second handed to the kernel, over all RX lcores (each
    /// gets its share); the rest are dropped and counted, so a flood of
    /// exception traffic costs the RX lcores a token-bucket check per
    /// frame, not a system call.
    #[serde(default = "d_exc_rate")]
    pub rate_pps: u32,
    /// Frames the bucket lets through at once after a quiet spell.
    #[serde(default = "d_exc_burst")]
    pub burst: u32,
    /// Valid UDP to a port no socket is bound to goes to the kernel too
    /// (otherwise it is `UdpNoPorts`, as without the exception path).
    #[serde(default)]
    pub unbound_udp: bool,
}

fn d_exc_rate() -> u32 {
    10_000
}
fn d_exc_burst() -> u32 {
    256
}

impl Default for ExceptionConf {
    fn default() -> Self {
        ExceptionConf {
            device: None,
            port: None,
            rate_pps: d_exc_rate(),
            burst: d_exc_burst(),
            unbound_udp: false,
        }
    }
}

/// A device string's name (its port name once probed): up to the first
/// comma of `net_af_packet0,iface=udx0,...`.
pub fn device_name(device: &str) -> &str {
    device.split(',').next().unwrap_or("").trim()
}

/// The value of one `key=value` argument of a device string.
pub fn devarg<'a>(device: &'a str, key: &str) -> Option<&'a str> {
    device
        .split(',')
        .skip(1)
        .find_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
}

/// The drivers an exception device may use: both hand frames to a kernel
/// interface (KNI, the third, left DPDK in 23.11).
pub const EXCEPTION_DRIVERS: [&str; 2] = ["net_tap", "virtio_user"];

impl ExceptionConf {
    /// The device's name (its port name once probed): `device` up to the
    /// first comma.
    pub fn name(&self) -> Option<&str> {
        self.device.as_deref().map(device_name)
    }

    /// The value of one `key=value` devarg of `device`.
    pub fn devarg(&self, key: &str) -> Option<&str> {
        devarg(self.device.as_deref()?, key)
    }

    /// `device` with its `iface=` replaced by `iface` (added when absent):
    /// `check` probes the device under a private interface name, so it
    /// never attaches to the one a running engine owns.
    pub fn device_with_iface(&self, iface: &str) -> Option<String> {
        let d = self.device.as_deref()?;
        let mut parts: Vec<String> = d
            .split(',')
            .filter(|kv| !kv.trim().starts_with("iface="))
            .map(str::to_string)
            .collect();
        parts.push(format!("iface={iface}"));
        Some(parts.join(","))
    }

    /// The name of the data port it serves, in `ports` (the first by default).
    pub fn data_port<'a>(&'a self, ports: &'a [PortConf]) -> Option<&'a str> {
        match &self.port {
            Some(p) => Some(p.as_str()),
            None => ports.first().map(|p| p.name.as_str()),
        }
    }

    /// Every problem with the section, one line each (none when off).
    pub fn problems(&self, ports: &[PortConf], out: &mut Vec<String>) {
        let Some(name) = self.name() else {
            if let Some(p) = &self.port {
                out.push(format!(
                    "exception.port = {p:?} but exception.device is not set: set device (e.g. \"net_tap0,iface=udx-host\") or remove port"
                ));
            }
            return;
        };
        if !EXCEPTION_DRIVERS.iter().any(|d| {
            name.strip_prefix(d)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        }) {
            out.push(format!(
                "exception.device = {:?}: the device must be a net_tapN or virtio_userN vdev, e.g. \"net_tap0,iface=udx-host\"",
                self.device.as_deref().unwrap_or("")
            ));
        }
        if let Some(i) = self.devarg("iface") {
            // IFNAMSIZ is 16 with the NUL.
            if i.is_empty() || i.len() > 15 || i.contains(['/', ' ', ':']) || i == "." || i == ".."
            {
                out.push(format!(
                    "exception.device: iface={i:?} is not a usable interface name: 1 to 15 characters, no '/', ':' or space"
                ));
            }
        }
        if name.starts_with("virtio_user") && self.devarg("path").is_none() {
            out.push("exception.device: virtio_user needs path=/dev/vhost-net (the kernel's vhost-net backend)".into());
        }
        if ports.iter().any(|p| p.name == name) {
            out.push(format!(
                "exception.device {name:?} is also a [[port]]: the exception device is the engine's own, do not list it as a port"
            ));
        }
        match self.data_port(ports) {
            Some(p) if !ports.iter().any(|c| c.name == p) => out.push(format!(
                "exception.port = {p:?} is not a [[port]]: name one of the configured ports"
            )),
            _ => {}
        }
        if self.rate_pps == 0 {
            out.push(
                "exception.rate_pps = 0: must be >= 1 (frames per second to the kernel)".into(),
            );
        }
        if self.burst == 0 {
            out.push("exception.burst = 0: must be >= 1".into());
        }
    }
}

mod neighbour;
pub use neighbour::{parse_mac, NeighbourConf, StaticNeighbour};

/// DPDK's own capture tools (`dpdk-dumpcap`, `dpdk-pdump`) attached as
/// secondary processes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConf {
    /// Run DPDK's capture server (`rte_pdump_init`) so those tools can
    /// attach. It costs the RX path nothing while no capture runs (no
    /// callback is installed until one asks) and 4 MiB of EAL memory for
    /// its statistics; `false` is for measuring exactly that.
    #[serde(default = "d_true")]
    pub pdump: bool,
}

impl Default for CaptureConf {
    fn default() -> Self {
        CaptureConf { pdump: true }
    }
}

impl CaptureConf {
    /// Whether the engine starts the capture server: asked for, and the EAL
    /// shares its memory (`eal.no_huge` runs with `--no-shconf`, where no
    /// secondary process can attach).
    pub fn pdump_active(&self, eal: &EalConf) -> bool {
        self.pdump && !eal.no_huge
    }
}

/// MiB the capture server's statistics memzone takes (`rte_pdump_init`:
/// rx and tx, `RTE_MAX_ETHPORTS` 32 x `RTE_MAX_QUEUES_PER_PORT` 1024, one
/// 64-byte line each, in Debian's build).
pub const PDUMP_STATS_MB: u64 = 4;

/// The Prometheus endpoint (`runtime::metrics`): off unless `listen` is set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConf {
    /// `addr:port` the HTTP endpoint listens on (`GET /metrics`), e.g.
    /// `"127.0.0.1:9464"`.
    #[serde(default)]
    pub listen: Option<String>,
}

impl MetricsConf {
    /// The listen address, or the one-line problem with it.
    pub fn addr(&self) -> Option<Result<SocketAddr, String>> {
        let l = self.listen.as_deref()?;
        Some(l.parse::<SocketAddr>().map_err(|_| {
            format!(
                "metrics.listen = {l:?} is not an address: give IP:PORT, e.g. \"127.0.0.1:9464\" (IPv6: \"[::1]:9464\")"
            )
        }))
    }

    /// Whether the address can be bound now (it is released at once): the
    /// one-line error `check` and `run` print when it cannot.
    pub fn bind_problem(&self) -> Option<String> {
        let addr = self.addr()?.ok()?;
        std::net::TcpListener::bind(addr)
            .err()
            .map(|e| bind_error(addr, &e))
    }
}

/// Whether log lines go to the journal (systemd sets `JOURNAL_STREAM` for a
/// service whose stderr is the journal) or `UDPDEMUX_LOG_TIMESTAMPS=0` asks
/// for lines without the logger's own timestamp.
pub fn journal_logging() -> bool {
    match std::env::var("UDPDEMUX_LOG_TIMESTAMPS").as_deref() {
        Ok("0") => true,
        Ok(_) => false,
        Err(_) => std::env::var_os("JOURNAL_STREAM").is_some(),
    }
}

/// The words `check` and `run` use when the metrics address cannot be bound.
pub fn bind_error(addr: SocketAddr, e: &std::io::Error) -> String {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => "another process listens there (`ss -ltnp` names it): stop it or choose another port in metrics.listen",
        std::io::ErrorKind::AddrNotAvailable => "no interface of this host has that address: use 127.0.0.1 or one of `ip -br addr`",
        std::io::ErrorKind::PermissionDenied => "ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port >= 1024 (9464 is the usual one)",
        _ => "fix metrics.listen or remove it",
    };
    format!("metrics.listen = \"{addr}\": cannot listen: {e}: {hint}")
}

/// IPv4/IPv6 fragment reassembly, one table per RX lcore (`reasm`), with
/// the kernel's knobs where it has one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReassemblyConf {
    /// Off: fragments are dropped and counted (`fragment_first` /
    /// `fragment_later`), as before reassembly existed.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Datagrams in progress per RX lcore; a new one evicts the oldest.
    #[serde(default = "d_reasm_datagrams")]
    pub max_datagrams: u32,
    /// Fragments per datagram.
    #[serde(default = "d_reasm_frags")]
    pub max_frags: u32,
    /// Bytes of buffer truesize held per RX lcore (`ipfrag_high_thresh`,
    /// 4 MiB); over it, the oldest datagrams are evicted.
    #[serde(default = "d_reasm_high_thresh")]
    pub high_thresh: u64,
    /// Seconds a datagram waits for its fragments (`ipfrag_time`).
    #[serde(default = "d_reasm_timeout")]
    pub timeout_secs: u32,
    /// Fragments waiting to reach their owner RX lcore, per RX lcore (the
    /// steering ring; made only with two RX lcores or more). A full ring
    /// drops the fragment (`reassembly.steer_full`).
    #[serde(default = "d_reasm_steer_ring")]
    pub steer_ring: u32,
}

fn d_reasm_steer_ring() -> u32 {
    1024
}

fn d_reasm_datagrams() -> u32 {
    256
}
fn d_reasm_frags() -> u32 {
    64
}
fn d_reasm_high_thresh() -> u64 {
    4 << 20
}
fn d_reasm_timeout() -> u32 {
    30
}

impl Default for ReassemblyConf {
    fn default() -> Self {
        ReassemblyConf {
            enabled: true,
            max_datagrams: d_reasm_datagrams(),
            max_frags: d_reasm_frags(),
            high_thresh: d_reasm_high_thresh(),
            timeout_secs: d_reasm_timeout(),
            steer_ring: d_reasm_steer_ring(),
        }
    }
}

/// The per-lcore cache of small buffers used under pressure (seed 003).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmallCacheConf {
    /// Off: datagrams always stay in the NIC's mbuf.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Small mbufs per RX lcore, allocated once at start.
    #[serde(default = "d_small_entries")]
    pub entries: u32,
    /// Data room of a small mbuf, headroom included: a frame fits if
    /// headroom + frame length <= this.
    #[serde(default = "d_small_data_room")]
    pub data_room: u16,
}

fn d_small_entries() -> u32 {
    1024
}
fn d_small_data_room() -> u16 {
    // 128 bytes of headroom + 256 for the frame: DNS queries, telemetry, QUIC acks.
    384
}

impl Default for SmallCacheConf {
    fn default() -> Self {
        SmallCacheConf {
            enabled: true,
            entries: d_small_entries(),
            data_room: d_small_data_room(),
        }
    }
}

/// EAL arguments, structured so the common ones are checked; `extra_args` passes anything else.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EalConf {
    /// `--lcores` value, e.g. "0,1" or "0@0,(1-2)@1" (several lcores on one CPU: functional tests only).
    pub lcores: String,
    /// Memory to reserve in MiB (`-m`).
    #[serde(default = "d_memory_mb")]
    pub memory_mb: u32,
    /// Run without hugepages (`--no-huge`): slower, but works anywhere as root.
    #[serde(default)]
    pub no_huge: bool,
    /// `--file-prefix`: keeps concurrent instances apart.
    #[serde(default = "d_file_prefix")]
    pub file_prefix: String,
    /// Do not scan the PCI bus (`--no-pci`): for vdev-only configs.
    #[serde(default)]
    pub no_pci: bool,
    /// PCI devices to use (`-a`).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Virtual devices (`--vdev`), e.g. "net_pcap0,rx_pcap=conf/default.pcap".
    #[serde(default)]
    pub vdevs: Vec<String>,
    /// Anything else, passed as is.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

fn d_memory_mb() -> u32 {
    512
}
fn d_file_prefix() -> String {
    "udpdemux".into()
}

impl EalConf {
    /// The argument list for `rte_eal_init`.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--lcores".to_string(),
            self.lcores.clone(),
            "-m".into(),
            self.memory_mb.to_string(),
        ];
        if self.no_huge {
            a.push("--no-huge".into());
            // Without hugepages nothing is shared between processes anyway.
            a.push("--no-shconf".into());
        }
        a.push(format!("--file-prefix={}", self.file_prefix));
        if self.no_pci {
            a.push("--no-pci".into());
        }
        for d in &self.allow {
            a.push("-a".into());
            a.push(d.clone());
        }
        for v in &self.vdevs {
            a.push(format!("--vdev={v}"));
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

use crate::receive::admission::Strategy;

fn de_strategy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Strategy, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConf {
    /// Packets per rx_burst (DPDK's examples use 32).
    #[serde(default = "d_burst")]
    pub burst: u16,
    /// How often the main lcore prints a stats line.
    #[serde(default = "d_stats_interval_ms")]
    pub stats_interval_ms: u64,
    /// Enqueue strategy for every socket: "numa-queues", "busylock" or "direct".
    #[serde(default, deserialize_with = "de_strategy")]
    pub strategy: Strategy,
    /// Stop by itself after this many seconds (0: run until SIGINT/SIGTERM). `--duration` overrides.
    #[serde(default)]
    pub duration_secs: f64,
    /// Stop when every RX queue has been idle this long after having seen traffic
    /// (finite pcap replays); 0 disables.
    #[serde(default)]
    pub stop_when_idle_ms: u64,
    /// Control-path rate limit per RX lcore (token bucket on the TSC), for
    /// ICMP/ICMPv6 echo replies and, in a bucket of their own, ARP and
    /// neighbour advertisements: replies per second and burst. Linux's
    /// `icmp_msgs_per_sec` / `icmp_msgs_burst` defaults.
    #[serde(default = "d_control_pps")]
    pub control_pps: u32,
    #[serde(default = "d_control_burst")]
    pub control_burst: u32,
    /// Benchmarks: this many extra bindings (198.19.0.0/16, ports 1024..) all
    /// delivered to one socket named `filler`, so demux runs against a table
    /// of that size without one delivery ring per socket (DPDK's memzone
    /// limit allows a few thousand rings). 0: none.
    #[serde(default)]
    pub filler_sockets: u32,
    /// RX lcores sleep through gaps in traffic, up to this many µs at a
    /// time, after a run of empty polls (DPDK's l3fwd-power shape; 0: poll
    /// without pause, the default). For an engine sharing its CPUs with
    /// the application (`runtime::idle`).
    #[serde(default)]
    pub idle_sleep_us: u32,
    /// With `idle_sleep_us`: the RX lcores' and the main lcore's threads
    /// run under `SCHED_BATCH` (sched(7)) while they loop, so that their
    /// wake-ups from idle sleeps do not preempt the application's threads
    /// on the same CPU; a thread the operator put under another policy
    /// (`chrt`) keeps it (`runtime::idle::SchedBatch`).
    #[serde(default = "d_true")]
    pub idle_sched_batch: bool,
    /// With `idle_sleep_us`: for this many µs after an RX lcore finds its
    /// queues empty (and has spun through its empty polls), it yields its
    /// CPU between polls (`sched_yield(2)`) instead of sleeping; then the
    /// sleeps as before. A yield arms no timer (on a VM each armed timer is
    /// a hypervisor exit) and leaves the lcore runnable, so the next frame
    /// waits for no wake-up; the application's runnable threads still get
    /// the CPU. The cost: an idle lcore stays on its CPU this long after
    /// each burst. 0 (the default): sleep right after the spin
    /// (`runtime::idle`).
    #[serde(default)]
    pub idle_yield_us: u32,
    /// Before each burst is processed, RX lcores ask for the cache lines the
    /// PMD will write into the next burst's mbufs (the top of the lcore's
    /// mempool cache: the mbuf's two lines and its first two data lines),
    /// for writing, so that the PMD's stores to buffers the consumer's CPU
    /// freed do not wait for that CPU (`runtime::rx`).
    #[serde(default = "d_true")]
    pub rx_prefetch_ahead: bool,
    /// Benchmarks: RX lcores turn `rx_prefetch_ahead` on and off every
    /// 2^27 TSC cycles (about 50 ms) and count what each half received
    /// (`alternate` in the lcore's exit counters): the two compared in one
    /// run, under the same load. The pipeline modes only.
    #[serde(default)]
    pub rx_prefetch_alternate: bool,
}

fn d_control_pps() -> u32 {
    1000
}
fn d_control_burst() -> u32 {
    50
}

fn d_burst() -> u16 {
    32
}
fn d_stats_interval_ms() -> u64 {
    1000
}

impl Default for EngineConf {
    fn default() -> Self {
        EngineConf {
            burst: d_burst(),
            stats_interval_ms: d_stats_interval_ms(),
            strategy: Strategy::default(),
            duration_secs: 0.0,
            stop_when_idle_ms: 0,
            control_pps: d_control_pps(),
            control_burst: d_control_burst(),
            filler_sockets: 0,
            idle_sleep_us: 0,
            idle_sched_batch: true,
            idle_yield_us: 0,
            rx_prefetch_ahead: true,
            rx_prefetch_alternate: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MempoolConf {
    /// mbufs per NUMA node pool (2^n - 1 is the most memory-efficient size).
    #[serde(default = "d_mbufs")]
    pub mbufs: u32,
    /// Per-lcore cache of the pool.
    #[serde(default = "d_cache")]
    pub cache: u32,
    /// Data room per mbuf, headroom included.
    #[serde(default = "d_data_room")]
    pub data_room: u16,
    /// Indirect mbufs for multicast copies (each member but one of a
    /// group's datagram holds one while the datagram is queued); no data
    /// room, 192 bytes each.
    #[serde(default = "d_clones")]
    pub clones: u32,
}

/// As many as the RX pool's default: 15 extra members per RX mbuf queued.
fn d_clones() -> u32 {
    16383
}

fn d_mbufs() -> u32 {
    16383
}
fn d_cache() -> u32 {
    256
}
fn d_data_room() -> u16 {
    2176
}

impl Default for MempoolConf {
    fn default() -> Self {
        MempoolConf {
            mbufs: d_mbufs(),
            cache: d_cache(),
            data_room: d_data_room(),
            clones: d_clones(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConf {
    /// Device name as the EAL knows it: "net_pcap0", "0000:01:00.0".
    pub name: String,
    #[serde(default = "d_one")]
    pub rx_queues: u16,
    #[serde(default = "d_one")]
    pub tx_queues: u16,
    #[serde(default = "d_desc")]
    pub rx_desc: u16,
    #[serde(default = "d_desc")]
    pub tx_desc: u16,
    #[serde(default = "d_true")]
    pub rss: bool,
    #[serde(default = "d_true")]
    pub promiscuous: bool,
    /// Let the NIC verify checksums when it can.
    #[serde(default = "d_true")]
    pub rx_checksum_offload: bool,
    /// Interface addresses with prefix length ("198.18.0.1/24", "fd00::1/64"):
    /// the engine answers ARP, neighbour solicitations and echo requests for them.
    #[serde(default)]
    pub addresses: Vec<IfAddr>,
}

/// An interface address and its prefix length, written "ADDR/LEN".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl std::str::FromStr for IfAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("address {s:?} is not \"ADDR/PREFIXLEN\""))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("address {s:?}: {a:?} is not an IP address"))?;
        let prefix: u8 = p
            .parse()
            .map_err(|_| format!("address {s:?}: prefix length {p:?} is not a number"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!(
                "address {s:?}: prefix length {prefix} is over {max}"
            ));
        }
        Ok(IfAddr { addr, prefix })
    }
}

impl<'de> Deserialize<'de> for IfAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for IfAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn d_one() -> u16 {
    1
}
fn d_desc() -> u16 {
    1024
}
fn d_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Polls RX queues.
    Rx,
    /// Runs socket handlers (consumers).
    Consumer,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LcoreConf {
    pub id: u32,
    pub role: Role,
    /// RX queues this lcore polls, as "PORT:QUEUE" ("net_pcap0:0").
    #[serde(default)]
    pub queues: Vec<String>,
    /// Virtual NUMA node; default: the node DPDK reports for the lcore.
    #[serde(default)]
    pub node: Option<u32>,
    /// Sockets whose handlers this consumer lcore runs (by name; empty: all not taken by another).
    #[serde(default)]
    pub sockets: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Handler {
    /// Discard and count.
    Count,
    /// Send the payload back to the sender.
    Echo,
    /// Write to a pcap file.
    Pcap,
    /// Nobody consumes inside the engine: the library API or another process does.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketConf {
    pub name: String,
    /// Local address and port; "0.0.0.0:53" or "[::]:53" for the wildcard.
    pub local: SocketAddr,
    /// Connected sockets only.
    #[serde(default)]
    pub remote: Option<SocketAddr>,
    /// Member of the reuseport group of its local address and port.
    #[serde(default)]
    pub reuseport: bool,
    /// Receive buffer budget in bytes of buffer truesize (the kernel's SO_RCVBUF doubled value).
    #[serde(default = "d_rcvbuf")]
    pub rcvbuf: u32,
    #[serde(default = "d_handler")]
    pub handler: Handler,
    /// Delivery ring size (rounded up to a power of two).
    #[serde(default = "d_ring_size")]
    pub ring_size: u32,
    /// `pcap` handler: the file delivered datagrams are written to (whole
    /// frames, classic pcap, Ethernet); relative paths are from the working directory.
    #[serde(default)]
    pub pcap_file: Option<PathBuf>,
    /// `pcap` handler: the file stops growing at this size (records past it
    /// are counted as not written).
    #[serde(default = "d_pcap_limit_bytes")]
    pub pcap_limit_bytes: u64,
    /// Emulate a slow application: the consumer takes at most this many
    /// datagrams per second from the ring (0: as fast as it can). For the
    /// flood benchmark's victim socket.
    #[serde(default)]
    pub consume_rate_pps: u64,
    /// A multicast group this socket joins (`IP_ADD_MEMBERSHIP` /
    /// `IPV6_JOIN_GROUP`): the engine takes the group's datagrams on the
    /// joining ports and reports the membership there (IGMPv3 / MLDv2).
    /// `local` must then be the group or the wildcard address, with the port.
    #[serde(default)]
    pub multicast: Option<IpAddr>,
    /// The `[[port]]` that joins `multicast` (the interface of
    /// `ip_mreqn`); without it, every port joins.
    #[serde(default)]
    pub multicast_port: Option<String>,
}

/// Why `g` cannot be joined, if it cannot: not a group, or a group every
/// host is always in (RFC 3376 §5: 224.0.0.1 is never reported; RFC 3810
/// §6: ff02::1 neither), or an IPv6 scope that never leaves the host.
pub fn group_problem(g: IpAddr) -> Option<&'static str> {
    match g {
        IpAddr::V4(a) if !a.is_multicast() => {
            Some("is not a multicast group (IPv4 groups are 224.0.0.0/4)")
        }
        IpAddr::V6(a) if !a.is_multicast() => {
            Some("is not a multicast group (IPv6 groups are ff00::/8)")
        }
        IpAddr::V4(a) if a == std::net::Ipv4Addr::new(224, 0, 0, 1) => {
            Some("is the all-hosts group, which every host is in without joining")
        }
        IpAddr::V6(a) if a.segments() == [0xff02, 0, 0, 0, 0, 0, 0, 1] => {
            Some("is the all-nodes group, which every node is in without joining")
        }
        IpAddr::V6(a) if a.segments()[0] & 0x000f <= 1 => {
            Some("has scope 0 (reserved) or 1 (interface-local, the host only): use scope 2 (ff02::) or wider")
        }
        _ => None,
    }
}

fn d_pcap_limit_bytes() -> u64 {
    64 << 20
}

fn d_rcvbuf() -> u32 {
    // net.core.rmem_default on Linux.
    212_992
}
fn d_handler() -> Handler {
    Handler::Count
}
fn d_ring_size() -> u32 {
    4096
}

/// A queue reference "PORT:QUEUE".
pub fn parse_queue_ref(s: &str) -> Option<(&str, u16)> {
    let (p, q) = s.rsplit_once(':')?;
    if p.is_empty() {
        return None;
    }
    Some((p, q.parse().ok()?))
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::load_unvalidated(path)?;
        cfg.validate().map_err(|msg| ConfigError::Invalid {
            path: path.into(),
            msg,
        })?;
        Ok(cfg)
    }

    #[cfg(not(loom))]
    /// [`Config::load`] plus [`Config::start_problems`]: what `run` loads
    /// with, so that it refuses, before the EAL, everything `check` does.
    pub fn load_for_start(path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::load(path)?;
        if let Some(msg) = cfg.start_problems().into_iter().next() {
            return Err(ConfigError::Invalid {
                path: path.into(),
                msg,
            });
        }
        Ok(cfg)
    }

    /// Read and parse (vdev paths resolved) without the semantic checks:
    /// `udpdemux check` lists every problem instead of stopping at the first.
    pub fn load_unvalidated(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let mut cfg = Config::parse_at(&text, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for v in &mut cfg.eal.vdevs {
            *v = resolve_vdev_paths(v, dir);
        }
        Ok(cfg)
    }

    pub fn from_str_at(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::parse_at(text, path)?;
        cfg.validate().map_err(|msg| ConfigError::Invalid {
            path: path.into(),
            msg,
        })?;
        Ok(cfg)
    }

    /// TOML to `Config`, unknown keys rejected, no semantic checks.
    pub fn parse_at(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            // toml's message spans several lines with a source excerpt; keep it to one.
            msg: one_line(&e.to_string()),
        })
    }

    /// Checks that need no EAL. Returns the first problem.
    pub fn validate(&self) -> Result<(), String> {
        match self.problems().into_iter().next() {
            Some(p) => Err(p),
            None => Ok(()),
        }
    }

    /// Every problem found without the EAL, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(Err(p)) = self.metrics.addr() {
            out.push(p);
        }
        let e = &self.engine;
        if e.burst == 0 || e.burst > 512 {
            out.push(format!("engine.burst = {}: must be 1..=512", e.burst));
        }
        if e.stats_interval_ms == 0 {
            out.push("engine.stats_interval_ms must be > 0".into());
        }
        if e.idle_yield_us > 0 && e.idle_sleep_us == 0 {
            out.push(format!(
                "engine.idle_yield_us = {} needs engine.idle_sleep_us > 0: a loop that never sleeps polls without pause and never yields either (set idle_sleep_us, e.g. 100, or remove idle_yield_us)",
                e.idle_yield_us
            ));
        }
        if e.idle_yield_us > 1_000_000 {
            out.push(format!(
                "engine.idle_yield_us = {}: at most 1000000 (one second on the CPU after each burst)",
                e.idle_yield_us
            ));
        }
        if !(e.duration_secs >= 0.0 && e.duration_secs.is_finite()) {
            out.push("engine.duration_secs must be >= 0".into());
        }
        if self.mempool.mbufs < 64 {
            out.push(format!(
                "mempool.mbufs = {}: too small (at least 64)",
                self.mempool.mbufs
            ));
        }
        if self.mempool.data_room < 256 + 128 {
            out.push(format!(
                "mempool.data_room = {}: too small (at least 384 with headroom)",
                self.mempool.data_room
            ));
        }
        if self.mempool.cache > 512
            || (self.mempool.cache > 0
                && self.mempool.cache as u64 * 3 / 2 > self.mempool.mbufs as u64)
        {
            out.push(format!(
                "mempool.cache = {}: at most 512 and at most 2/3 of mempool.mbufs",
                self.mempool.cache
            ));
        }
        if self.small_cache.enabled {
            if self.small_cache.entries == 0 || self.small_cache.entries > 1 << 20 {
                out.push(format!(
                    "small_cache.entries = {}: must be 1..=1048576",
                    self.small_cache.entries
                ));
            }
            if self.small_cache.data_room < 128 + 64
                || self.small_cache.data_room >= self.mempool.data_room
            {
                out.push(format!(
                    "small_cache.data_room = {}: must be at least 192 (128 headroom + a 64-byte frame) and below mempool.data_room",
                    self.small_cache.data_room
                ));
            }
        }
        let r = &self.reassembly;
        if r.enabled {
            if r.max_datagrams == 0 || r.max_datagrams > 65_536 {
                out.push(format!(
                    "reassembly.max_datagrams = {}: must be 1..=65536",
                    r.max_datagrams
                ));
            }
            if r.max_frags < 2 || r.max_frags > 8192 {
                out.push(format!(
                    "reassembly.max_frags = {}: must be 2..=8192 (65 535 bytes in 8-byte fragments)",
                    r.max_frags
                ));
            }
            if r.high_thresh < 64 * 1024 || r.high_thresh > 1 << 32 {
                out.push(format!(
                    "reassembly.high_thresh = {}: must be 65536..=4294967296 bytes",
                    r.high_thresh
                ));
            }
            if r.timeout_secs == 0 || r.timeout_secs > 3600 {
                out.push(format!(
                    "reassembly.timeout_secs = {}: must be 1..=3600",
                    r.timeout_secs
                ));
            }
            if r.steer_ring < 32 || r.steer_ring > 1 << 20 {
                out.push(format!(
                    "reassembly.steer_ring = {}: must be 32..=1048576 fragments",
                    r.steer_ring
                ));
            }
        }
        out.extend(self.neighbour.problems(&self.ports));
        if self.ports.is_empty() {
            out.push("no [[port]] configured: add one (e.g. name = \"net_null0\" with eal.vdevs = [\"net_null0\"])".into());
        }
        let mut names = std::collections::HashSet::new();
        for p in &self.ports {
            if !names.insert(p.name.as_str()) {
                out.push(format!("port {:?} is listed twice", p.name));
            }
            if p.rx_queues == 0 {
                out.push(format!("port {:?}: rx_queues must be >= 1", p.name));
            }
        }
        // Every RX queue has exactly one poller.
        let mut polled: std::collections::HashMap<(String, u16), u32> =
            std::collections::HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for l in &self.lcores {
            if !ids.insert(l.id) {
                out.push(format!("lcore {} is listed twice", l.id));
            }
            if l.role == Role::Consumer && !l.queues.is_empty() {
                out.push(format!(
                    "lcore {}: a consumer lcore polls no queues (remove `queues`)",
                    l.id
                ));
            }
            if l.role == Role::Rx && l.queues.is_empty() {
                out.push(format!(
                    "lcore {}: an rx lcore needs `queues = [\"PORT:QUEUE\", ...]`",
                    l.id
                ));
            }
            for q in &l.queues {
                match parse_queue_ref(q) {
                    None => out.push(format!("lcore {}: queue {q:?} is not \"PORT:QUEUE\"", l.id)),
                    Some((port, qi)) => match self.ports.iter().find(|p| p.name == port) {
                        None => out.push(format!(
                            "lcore {}: queue {q:?} names port {port:?}, which is not a [[port]]",
                            l.id
                        )),
                        Some(p) if qi >= p.rx_queues => out.push(format!(
                            "lcore {}: queue {q:?}: port {port:?} has {} RX queues",
                            l.id, p.rx_queues
                        )),
                        Some(_) => {
                            if let Some(other) = polled.insert((port.to_string(), qi), l.id) {
                                out.push(format!("queue {q:?} is polled by lcores {other} and {}: exactly one poller per queue", l.id));
                            }
                        }
                    },
                }
            }
        }
        for p in &self.ports {
            for q in 0..p.rx_queues {
                if !polled.contains_key(&(p.name.clone(), q)) {
                    out.push(format!(
                        "queue \"{}:{q}\" has no rx lcore polling it",
                        p.name
                    ));
                }
            }
        }
        let mut eal_ids = lcore_ids(&self.eal.lcores);
        let mut it = self.eal.extra_args.iter();
        while let Some(a) = it.next() {
            let v = match a.as_str() {
                "--lcores" | "-l" => it.next().cloned(),
                _ => a
                    .strip_prefix("--lcores=")
                    .or_else(|| a.strip_prefix("-l"))
                    .map(str::to_string),
            };
            eal_ids.extend(v.iter().flat_map(|v| lcore_ids(v)));
        }
        let client = crate::client_proto::CLIENT_LCORES;
        if let Some(&l) = eal_ids
            .iter()
            .chain(self.lcores.iter().map(|l| &l.id))
            .find(|l| client.contains(l))
        {
            out.push(client_lcore_problem(l, &self.eal.lcores));
        }
        if !self.ports.is_empty() && !self.lcores.iter().any(|l| l.role == Role::Rx) {
            out.push("no [[lcore]] with role = \"rx\"".into());
        }
        let mut snames = std::collections::HashSet::new();
        for s in &self.sockets {
            if let Some(p) = socket_name_problem(&s.name) {
                out.push(p);
                // The other checks would repeat the unusable name.
                continue;
            }
            if !snames.insert(s.name.as_str()) {
                out.push(format!("socket {:?} is listed twice", s.name));
            }
            socket_problems(s, &mut out);
            if let Some(p) = s
                .multicast_port
                .as_ref()
                .filter(|p| !self.ports.iter().any(|q| &q.name == *p))
            {
                out.push(format!(
                    "socket {:?}: multicast_port {p:?} is not a [[port]] (ports: {})",
                    s.name,
                    self.ports
                        .iter()
                        .map(|q| q.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        self.address_problems(&mut out);
        self.exception.problems(&self.ports, &mut out);
        if let Some(n) = self.exception.name() {
            if self.eal.vdevs.iter().any(|v| device_name(v) == n) {
                out.push(format!(
                    "exception.device {n:?} is also in eal.vdevs: list it only in [exception] (the engine adds it to the EAL's devices)"
                ));
            }
        }
        out
    }

    /// The EAL's arguments: `[eal]`'s, and the exception device.
    pub fn eal_args(&self) -> Vec<String> {
        let mut a = self.eal.args();
        if let Some(d) = &self.exception.device {
            a.push(format!("--vdev={d}"));
        }
        a
    }
}

/// The one line that refuses an engine lcore among the client lcore ids.
pub fn client_lcore_problem(l: u32, eal_lcores: &str) -> String {
    let r = crate::client_proto::CLIENT_LCORES;
    format!(
        "lcore {l} (eal.lcores = {eal_lcores:?}) is in {}..={}, the lcore ids out-of-process clients take (one each: DPDK's mempool caches are per lcore id and unlocked): give the engine lcore ids below {}",
        r.start(),
        r.end(),
        r.start()
    )
}

/// The lcore ids a DPDK `--lcores` (or `-l`) value names: elements split at
/// commas outside parentheses, each `LCORES[@CPUS]`, LCORES a number, a
/// range `A-B` or a parenthesised list of those. What does not parse is
/// left to the EAL (which says so); the engine also checks the lcores the
/// EAL enabled.
pub fn lcore_ids(v: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let mut elems = Vec::new();
    for (i, c) in v.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                elems.push(&v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    elems.push(&v[start..]);
    for e in elems {
        let ids = e.split('@').next().unwrap_or("");
        let ids = ids.trim().trim_start_matches('(').trim_end_matches(')');
        for part in ids.split(',') {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                if a <= b && b - a < 4096 {
                    out.extend(a..=b);
                }
            }
        }
    }
    out
}

/// What `check` (and a client's bind) refuses in one `[[socket]]` table on
/// its own (a name listed twice and address collisions are the whole
/// config's: `Config::problems`, the flow table).
pub fn socket_problems(s: &SocketConf, out: &mut Vec<String>) {
    if let Some(p) = socket_name_problem(&s.name) {
        out.push(p);
        // The other checks would repeat the unusable name.
        return;
    }
    for (what, a) in [("local", Some(s.local)), ("remote", s.remote)] {
        if let Some(SocketAddr::V6(v6)) = a {
            if v6.scope_id() != 0 {
                out.push(format!(
                    "socket {:?}: {what} {v6} has an IPv6 zone (%{}): zones are not supported, remove the %{} (the engine serves every port alike)",
                    s.name,
                    v6.scope_id(),
                    v6.scope_id()
                ));
            }
        }
    }
    if s.local.port() == 0 {
        out.push(format!("socket {:?}: local port 0", s.name));
    }
    if let Some(r) = s.remote {
        if r.is_ipv4() != s.local.is_ipv4() {
            out.push(format!(
                "socket {:?}: local and remote are of different families",
                s.name
            ));
        }
        if r.port() == 0 || r.ip().is_unspecified() {
            out.push(format!(
                "socket {:?}: remote must be a specific address and port",
                s.name
            ));
        }
    }
    if s.rcvbuf < 4096 {
        out.push(format!(
            "socket {:?}: rcvbuf = {} is below 4096 bytes",
            s.name, s.rcvbuf
        ));
    }
    if s.ring_size < 2 || s.ring_size > (1 << 24) {
        out.push(format!(
            "socket {:?}: ring_size = {} must be 2..=16777216",
            s.name, s.ring_size
        ));
    }
    if let Some(g) = s.multicast {
        if let Some(why) = group_problem(g) {
            out.push(format!("socket {:?}: multicast = \"{g}\" {why}", s.name));
        } else if g.is_ipv4() != s.local.is_ipv4() {
            out.push(format!(
                "socket {:?}: multicast group {g} and local {} are of different families: bind local to the group's family",
                s.name, s.local
            ));
        } else if s.local.ip() != g && !s.local.ip().is_unspecified() {
            out.push(format!(
                "socket {:?}: local {} would never receive group {g} (the kernel matches a group's datagrams to sockets bound to the group or the wildcard): set local = \"{}\"",
                s.name,
                s.local,
                SocketAddr::new(g, s.local.port())
            ));
        }
    } else if s.multicast_port.is_some() {
        out.push(format!(
            "socket {:?}: multicast_port without multicast: add multicast = \"GROUP\" or remove multicast_port",
            s.name
        ));
    }
    match (s.handler, &s.pcap_file) {
        (Handler::Pcap, None) => out.push(format!(
            "socket {:?}: handler \"pcap\" needs pcap_file",
            s.name
        )),
        (Handler::Pcap, Some(_)) => {
            if s.pcap_limit_bytes
                < (crate::pcap::FILE_HEADER_LEN + crate::pcap::RECORD_HEADER_LEN) as u64
            {
                out.push(format!(
                    "socket {:?}: pcap_limit_bytes = {} is too small",
                    s.name, s.pcap_limit_bytes
                ));
            }
        }
        (_, Some(_)) => out.push(format!(
            "socket {:?}: pcap_file is only for handler \"pcap\"",
            s.name
        )),
        (_, None) => {}
    }
}

/// Longest socket name: an interface name's limit is 15, a DPDK telemetry
/// key's parameter is a short word; 63 leaves room for descriptive names
/// and keeps log lines and telemetry replies readable.
pub const SOCKET_NAME_MAX: usize = 63;

/// A socket name is 1..=[`SOCKET_NAME_MAX`] characters from `A-Z a-z 0-9 _
/// . -`, like an interface name or a DPDK telemetry key: it goes into log
/// lines, JSON and telemetry parameters, where spaces, quotes, control
/// characters or a name telemetry truncates would lose the socket.
pub fn socket_name_problem(name: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if !name.is_empty() && name.len() <= SOCKET_NAME_MAX && name.chars().all(ok) {
        return None;
    }
    // Show a bounded, escaped prefix: the name itself may be huge or hold a newline.
    let shown: String = name.chars().take(24).collect();
    let more = if name.chars().count() > 24 { "..." } else { "" };
    let why = if name.is_empty() {
        "is empty".to_string()
    } else if name.len() > SOCKET_NAME_MAX {
        format!("is {} bytes long", name.len())
    } else {
        let bad = name.chars().find(|&c| !ok(c)).unwrap_or(' ');
        format!("contains {bad:?}")
    };
    Some(format!(
        "socket name {shown:?}{more} {why}: use 1..={SOCKET_NAME_MAX} characters from A-Z a-z 0-9 _ . -"
    ))
}

/// Most delivery rings (one DPDK memzone each) a config may ask for: DPDK's
/// `RTE_MAX_MEMZONE` is 2560 per process, and the pools (two memzones
/// each), ports, the EAL and telemetry take a few; ring creation failed at
/// socket 2553 of 100 000. 2048 leaves that headroom with room to spare.
pub const MAX_SOCKETS: usize = 2048;

/// Most `engine.filler_sockets`: each binding costs flow-table memory and
/// start-up time (measured, debug build: 10 000 000 take 2 GB of RSS and
/// 22 s to bind; 100 000 000 had not finished starting after a minute).
/// Ten million is a demux table far beyond any real socket count.
pub const MAX_FILLER_SOCKETS: u32 = 10_000_000;

/// What the EAL and DPDK's own structures take of `-m` besides our pools and
/// rings (measured with the no-huge default pool: 64 MB fails, 72 MB works).
pub const EAL_OVERHEAD_MB: u64 = 28;

/// Bytes per mbuf of a pool: the `rte_mbuf` (128), our private area
/// ([`crate::meta::PRIV_SIZE`]), the data room, and the mempool's object
/// header (64).
#[cfg(not(loom))]
fn mbuf_bytes(data_room: u16) -> u64 {
    128 + u64::from(crate::meta::PRIV_SIZE) + u64::from(data_room) + 64
}

/// Free hugepage memory in MiB, over every hugepage size.
#[cfg(not(loom))]
pub fn free_hugepage_mb() -> u64 {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/mm/hugepages") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kb: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let free: u64 = std::fs::read_to_string(e.path().join("free_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(kb * free / 1024)
        })
        .sum()
}

#[cfg(not(loom))]
fn mem_total_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb / 1024)
}

/// An EAL file prefix: it names a directory under the runtime directory and
/// the hugepage files, and keys the one-instance lock.
#[cfg(not(loom))]
pub fn file_prefix_problem(what: &str, prefix: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if prefix.is_empty() {
        return Some(format!(
            "{what} is empty: set a name of 1..=64 characters from A-Z a-z 0-9 _ . - (e.g. \"udpdemux\")"
        ));
    }
    if prefix.len() > 64 || !prefix.chars().all(ok) || prefix == "." || prefix == ".." {
        let shown: String = prefix.chars().take(24).collect();
        return Some(format!(
            "{what} = {shown:?}: use 1..=64 characters from A-Z a-z 0-9 _ . - (it names the EAL's runtime directory and hugepage files)"
        ));
    }
    None
}

#[cfg(not(loom))]
impl Config {
    /// MiB of `-m` the pools, the small-buffer pool and the delivery rings
    /// need, EAL overhead included (one pool: a lower bound when RX lcores
    /// sit on several NUMA nodes).
    pub fn memory_needed_mb(&self) -> u64 {
        let rx = self
            .lcores
            .iter()
            .filter(|l| l.role == Role::Rx)
            .count()
            .max(1) as u64;
        let mut bytes = u64::from(self.mempool.mbufs) * mbuf_bytes(self.mempool.data_room);
        if self.small_cache.enabled {
            bytes +=
                rx * u64::from(self.small_cache.entries) * mbuf_bytes(self.small_cache.data_room);
        }
        bytes += self
            .sockets
            .iter()
            .map(|s| u64::from(s.ring_size.max(2)).next_power_of_two() * 8)
            .sum::<u64>();
        // send_burst's TX pool and ring, made when a port has an address.
        if self.ports.iter().any(|p| !p.addresses.is_empty()) {
            bytes += u64::from(crate::send::POOL_MBUFS) * mbuf_bytes(crate::send::DATA_ROOM)
                + u64::from(crate::send::RING_SIZE) * 8;
        }
        let pdump = if self.capture.pdump_active(&self.eal) {
            PDUMP_STATS_MB
        } else {
            0
        };
        bytes.div_ceil(1 << 20) + EAL_OVERHEAD_MB + pdump
    }

    /// What `run` would refuse at start that is knowable before it: memory
    /// against the pools and free hugepages, file prefixes, socket and
    /// filler counts, pcap paths, and socket collisions (the flow table's
    /// own rule). `run` and `check` both call this (after [`Config::problems`]),
    /// so both print the same line. A reload does not: its transaction
    /// checks pcap files and collisions itself and names every rejected socket.
    pub fn start_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let e = &self.eal;
        if let Some(p) = file_prefix_problem("eal.file_prefix", &e.file_prefix) {
            out.push(p);
        }
        if let Some(p) = crate::instance::effective_prefix(&e.extra_args) {
            if let Some(p) = file_prefix_problem("--file-prefix in eal.extra_args", &p) {
                out.push(p);
            }
        }
        let need = self.memory_needed_mb();
        if u64::from(e.memory_mb) < need {
            out.push(format!(
                "eal.memory_mb = {} is too small: the pools ({} + small-buffer cache) and rings need about {need} MB with the EAL's own: lower mempool.mbufs or raise eal.memory_mb to at least {need}",
                e.memory_mb, self.mempool.mbufs
            ));
        } else if e.no_huge {
            let total = mem_total_mb();
            if u64::from(e.memory_mb) > total {
                out.push(format!(
                    "eal.memory_mb = {} is more than this machine's memory ({total} MB): lower eal.memory_mb (about {need} is enough for this config)",
                    e.memory_mb
                ));
            }
        } else {
            let free = free_hugepage_mb();
            if u64::from(e.memory_mb) > free {
                out.push(format!(
                    "eal.memory_mb = {} is more than the free hugepages ({free} MB): lower eal.memory_mb (about {need} is enough), add hugepages (`bash scripts/setup.sh` as root), or set eal.no_huge = true",
                    e.memory_mb
                ));
            }
        }
        if self.sockets.len() > MAX_SOCKETS {
            out.push(format!(
                "{} sockets: at most {MAX_SOCKETS} (each socket's delivery ring is one DPDK memzone and DPDK allows 2560 per process, some taken by pools and ports); for a large demux table use engine.filler_sockets",
                self.sockets.len()
            ));
        }
        if self.engine.filler_sockets > MAX_FILLER_SOCKETS {
            out.push(format!(
                "engine.filler_sockets = {}: at most {MAX_FILLER_SOCKETS} (each binding costs flow-table memory and start-up time: 10 million take about 2 GB and 20 s to bind)",
                self.engine.filler_sockets
            ));
        }
        for s in &self.sockets {
            if s.handler != Handler::Pcap {
                continue;
            }
            if let Some(p) = s
                .pcap_file
                .as_deref()
                .and_then(|f| pcap_path_problem(&s.name, f))
            {
                out.push(p);
            }
        }
        out.extend(self.collisions());
        if let Some(p) = self.metrics.bind_problem() {
            // Beside the live instance of this config (`check` before a
            // reload), the port in use is that instance's own: not a
            // problem for `check`, and `run` is refused by the instance lock.
            let prefix = crate::instance::effective_prefix(&self.eal.extra_args)
                .unwrap_or_else(|| self.eal.file_prefix.clone());
            if crate::instance::holder(&prefix).is_none() {
                out.push(p);
            }
        }
        out
    }

    /// Socket collisions: every socket inserted into a real flow table (the
    /// `EADDRINUSE` rule `run` applies), naming the other socket by name.
    pub fn collisions(&self) -> Vec<String> {
        use crate::flow_table::{FlowError, FlowTable};
        let mut out = Vec::new();
        let table: FlowTable<usize> = FlowTable::new();
        let mut names: Vec<(u64, &str)> = Vec::new();
        for (i, s) in self.sockets.iter().enumerate() {
            if socket_name_problem(&s.name).is_some() {
                continue;
            }
            match table.insert(binding_of(s), i) {
                Ok(h) => names.push((h.id(), s.name.as_str())),
                Err(FlowError::AddrInUse { new, existing }) => {
                    let other = names
                        .iter()
                        .find(|(id, _)| *id == existing.id())
                        .map_or_else(
                            || existing.to_string(),
                            |(_, n)| format!("socket {n:?} ({})", existing.binding()),
                        );
                    let hint = if new.remote.is_none() && existing.binding().remote.is_none() {
                        "choose another local address or port, or set reuseport = true on both"
                    } else {
                        "choose another local address or port"
                    };
                    out.push(format!(
                        "socket {:?}: address in use: {new} collides with {other}: {hint}",
                        s.name
                    ));
                }
                Err(e) => out.push(format!("socket {:?}: {e}", s.name)),
            }
        }
        out
    }
}

/// A pcap file the engine must create at start: its directory must exist
/// and it must not be a directory.
#[cfg(not(loom))]
pub fn pcap_path_problem(socket: &str, f: &Path) -> Option<String> {
    if f.is_dir() {
        return Some(format!(
            "socket {socket:?}: pcap_file {} is a directory: name a file in it",
            f.display()
        ));
    }
    let dir = match f.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Some(format!(
            "socket {socket:?}: pcap_file {}: directory {} does not exist: create it or choose another path",
            f.display(),
            dir.display()
        ));
    }
    None
}

impl Config {
    /// Interface addresses: unicast, each on one port only.
    fn address_problems(&self, out: &mut Vec<String>) {
        let mut seen: std::collections::HashMap<IpAddr, &str> = std::collections::HashMap::new();
        for p in &self.ports {
            for a in &p.addresses {
                let bad = match a.addr {
                    IpAddr::V4(v) => {
                        v.is_unspecified()
                            || v.is_multicast()
                            || v.is_broadcast()
                            || v.is_loopback()
                    }
                    IpAddr::V6(v) => v.is_unspecified() || v.is_multicast() || v.is_loopback(),
                };
                if bad {
                    out.push(format!(
                        "port {:?}: address {a} is not a unicast address",
                        p.name
                    ));
                }
                if let Some(other) = seen.insert(a.addr, p.name.as_str()) {
                    out.push(format!(
                        "address {} is on ports {other:?} and {:?}: one port per address",
                        a.addr, p.name
                    ));
                }
            }
        }
        if self.engine.control_pps == 0 || self.engine.control_burst == 0 {
            out.push("engine.control_pps and engine.control_burst must be > 0".into());
        }
    }
}

/// Files named in vdev arguments (`rx_pcap=`, `tx_pcap=`, `rx_iface=` is not a
/// file) are relative to the config file, so a config works from any directory.
pub fn resolve_vdev_paths(vdev: &str, dir: &Path) -> String {
    vdev.split(',')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if matches!(k, "rx_pcap" | "tx_pcap") && !v.starts_with('/') => {
                let p = dir.join(v);
                let p = if p.exists() {
                    p.canonicalize().unwrap_or(p)
                } else {
                    p
                };
                format!("{k}={}", p.display())
            }
            _ => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn one_line(s: &str) -> String {
    // toml errors look like "TOML parse error at line 3, column 1\n  |\n3 | foo\n  | ^\nunknown field `foo`, expected ..."
    let mut lines = s
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('|') && !l.contains(" | "));
    let head = lines.next().unwrap_or_default().trim().to_string();
    let rest: Vec<&str> = lines.map(|l| l.trim()).collect();
    if rest.is_empty() {
        head
    } else {
        format!("{head}: {}", rest.join(" "))
    }
}

/// The flow-table binding a socket config asks for.
pub fn binding_of(c: &SocketConf) -> crate::flow_table::Binding {
    let b = match c.remote {
        Some(r) => crate::flow_table::Binding::connected(c.local, r),
        None => crate::flow_table::Binding::bound(c.local),
    };
    if c.reuseport {
        b.with_reuseport()
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
[eal]
lcores = "0,1"
vdevs = ["net_null0"]
[[port]]
name = "net_null0"
[[lcore]]
id = 1
role = "rx"
queues = ["net_null0:0"]
"#;

    fn load(s: &str) -> Result<Config, ConfigError> {
        Config::from_str_at(s, Path::new("t.toml"))
    }

    #[test]
    fn minimal_config_loads_with_defaults() {
        let c = load(MIN).unwrap();
        assert_eq!(c.engine.burst, 32);
        assert_eq!(c.engine.strategy, Strategy::NumaQueues);
        assert!(c.eal.args().contains(&"--vdev=net_null0".to_string()));
    }

    #[test]
    fn exception_path_is_off_by_default_and_its_device_joins_the_eal_args() {
        let c = load(MIN).unwrap();
        assert!(c.exception.device.is_none());
        assert!(!c.eal_args().iter().any(|a| a.contains("net_tap")));
        let c = load(&format!(
            "{MIN}[exception]\ndevice = \"net_tap0,iface=udx-host\"\nrate_pps = 5000\n"
        ))
        .unwrap();
        assert_eq!(c.exception.name(), Some("net_tap0"));
        assert_eq!(c.exception.devarg("iface"), Some("udx-host"));
        assert_eq!(c.exception.data_port(&c.ports), Some("net_null0"));
        assert_eq!((c.exception.rate_pps, c.exception.burst), (5000, 256));
        assert!(!c.exception.unbound_udp);
        assert!(c
            .eal_args()
            .contains(&"--vdev=net_tap0,iface=udx-host".to_string()));
        assert_eq!(
            c.exception.device_with_iface("udxchk1").as_deref(),
            Some("net_tap0,iface=udxchk1")
        );
    }

    #[test]
    fn exception_problems_are_one_line_each_and_name_the_fix() {
        let bad = |extra: &str| -> String {
            match Config::parse_at(&format!("{MIN}[exception]\n{extra}\n"), Path::new("t")) {
                Ok(c) => c.problems().join("\n"),
                Err(e) => e.to_string(),
            }
        };
        assert!(bad("device = \"net_null1\"").contains("net_tapN or virtio_userN"));
        assert!(
            bad("device = \"net_tap0,iface=much-too-long-name\"").contains("1 to 15 characters")
        );
        assert!(bad("device = \"virtio_user0,iface=x\"").contains("path=/dev/vhost-net"));
        assert!(bad("device = \"net_tap0\"\nport = \"nope\"").contains("is not a [[port]]"));
        assert!(bad("device = \"net_tap0\"\nrate_pps = 0").contains("rate_pps = 0"));
        assert!(bad("port = \"net_null0\"").contains("device is not set"));
        assert!(bad("device = \"net_null0\"").contains("also a [[port]]"));
        assert!(bad("device = \"net_tap0\"\nspeed = 1").contains("speed"));
        assert!(bad("device = \"net_null0\"").contains("also in eal.vdevs"));
    }

    #[test]
    fn lcore_lists_parse_as_the_eal_reads_them() {
        assert_eq!(lcore_ids("0,1"), vec![0, 1]);
        assert_eq!(lcore_ids("0@0,1@1,2@0"), vec![0, 1, 2]);
        assert_eq!(lcore_ids("0@0,(1-2)@1"), vec![0, 1, 2]);
        assert_eq!(lcore_ids("(0,3-4)@(0,1),7"), vec![0, 3, 4, 7]);
        assert_eq!(lcore_ids("0-3"), vec![0, 1, 2, 3]);
        assert!(lcore_ids("nonsense").is_empty());
    }

    #[test]
    fn an_engine_lcore_among_the_client_lcores_is_refused() {
        let with = |lcores: &str, extra: &str| {
            load(&MIN.replace(
                "lcores = \"0,1\"",
                &format!("lcores = \"{lcores}\"\n{extra}"),
            ))
        };
        for (lcores, extra, l) in [
            ("0,1,64", "", 64),
            ("0@0,1@1,(100-101)@0", "", 100),
            ("0,1", "extra_args = [\"--lcores\", \"0,1,127\"]", 127),
            ("0,1", "extra_args = [\"-l0,1,90\"]", 90),
        ] {
            let e = with(lcores, extra).unwrap_err().to_string();
            assert!(
                e.contains(&format!("lcore {l} (eal.lcores = "))
                    && e.contains("is in 64..=127, the lcore ids out-of-process clients take")
                    && e.contains("give the engine lcore ids below 64")
                    && !e.contains('\n'),
                "{lcores}: {e}"
            );
        }
        let e = load(&MIN.replace("id = 1", "id = 70"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lcore 70 "), "{e}");
        with("0,1,63", "").unwrap();
    }

    #[test]
    fn unknown_key_is_named() {
        let e = load(&format!("{MIN}\n[engine]\nbrust = 3\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("brust"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn queue_without_poller_and_double_poller() {
        let s = MIN.replace(
            "name = \"net_null0\"",
            "name = \"net_null0\"\nrx_queues = 2",
        );
        assert!(load(&s)
            .unwrap_err()
            .to_string()
            .contains("\"net_null0:1\" has no rx lcore"));
        let s2 = format!("{MIN}\n[[lcore]]\nid = 2\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n");
        assert!(load(&s2)
            .unwrap_err()
            .to_string()
            .contains("exactly one poller"));
    }

    #[test]
    fn bad_queue_refs() {
        assert_eq!(parse_queue_ref("net_pcap0:3"), Some(("net_pcap0", 3)));
        assert_eq!(parse_queue_ref("0000:01:00.0:1"), Some(("0000:01:00.0", 1)));
        assert_eq!(parse_queue_ref("x"), None);
        assert_eq!(parse_queue_ref(":1"), None);
        let s = MIN.replace("net_null0:0\"]", "net_nul0:0\"]");
        assert!(load(&s).unwrap_err().to_string().contains("not a [[port]]"));
    }

    #[test]
    fn vdev_pcap_paths_are_relative_to_the_config() {
        let d = std::env::temp_dir();
        assert_eq!(
            resolve_vdev_paths(
                "net_pcap0,rx_pcap=x.pcap,infinite_rx=1",
                Path::new("/etc/u")
            ),
            "net_pcap0,rx_pcap=/etc/u/x.pcap,infinite_rx=1"
        );
        assert_eq!(
            resolve_vdev_paths("net_pcap0,rx_pcap=/a/b.pcap", &d),
            "net_pcap0,rx_pcap=/a/b.pcap"
        );
        assert_eq!(resolve_vdev_paths("net_null0", &d), "net_null0");
    }

    #[test]
    fn sockets_validate() {
        let s = format!("{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"0.0.0.0:0\"\n");
        assert!(load(&s).unwrap_err().to_string().contains("local port 0"));
        let s = format!(
            "{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"[::]:53\"\nremote = \"198.18.0.1:5\"\n"
        );
        assert!(load(&s)
            .unwrap_err()
            .to_string()
            .contains("different families"));
        let s = format!("{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"[::]:53\"\nhandler = \"echo\"\nstrategy = 1\n");
        assert!(load(&s).unwrap_err().to_string().contains("strategy"));
    }

    #[test]
    fn interface_addresses_parse_and_validate() {
        let with = |a: &str| {
            MIN.replace(
                "name = \"net_null0\"\n",
                &format!("name = \"net_null0\"\naddresses = {a}\n"),
            )
        };
        let c = load(&with(r#"["198.18.0.1/24", "fd00::1/64"]"#)).unwrap();
        assert_eq!(
            c.ports[0].addresses[0],
            IfAddr {
                addr: "198.18.0.1".parse().unwrap(),
                prefix: 24
            }
        );
        assert_eq!(c.ports[0].addresses[1].prefix, 64);
        assert!(load(&with(r#"["198.18.0.1/33"]"#))
            .unwrap_err()
            .to_string()
            .contains("over 32"));
        assert!(load(&with(r#"["198.18.0.1"]"#))
            .unwrap_err()
            .to_string()
            .contains("ADDR/PREFIXLEN"));
        assert!(load(&with(r#"["ff02::1/64"]"#))
            .unwrap_err()
            .to_string()
            .contains("not a unicast"));
        assert!(load(&with(r#"["fd00::1/64", "fd00::1/120"]"#))
            .unwrap_err()
            .to_string()
            .contains("one port per address"));
    }

    #[test]
    fn pcap_socket_needs_a_file() {
        let s = format!(
            "{MIN}\n[[socket]]\nname = \"p\"\nlocal = \"198.18.0.1:9\"\nhandler = \"pcap\"\n"
        );
        assert!(load(&s)
            .unwrap_err()
            .to_string()
            .contains("needs pcap_file"));
        let ok = format!("{s}pcap_file = \"/tmp/x.pcap\"\npcap_limit_bytes = 100000\n");
        let c = load(&ok).unwrap();
        assert_eq!(c.sockets[0].pcap_limit_bytes, 100_000);
        let s = format!("{MIN}\n[[socket]]\nname = \"c\"\nlocal = \"198.18.0.1:9\"\npcap_file = \"/tmp/x.pcap\"\n");
        assert!(load(&s)
            .unwrap_err()
            .to_string()
            .contains("only for handler"));
    }

    fn sock(name: &str, local: &str) -> String {
        let name = toml::Value::String(name.into());
        format!("{MIN}\n[[socket]]\nname = {name}\nlocal = {local:?}\n")
    }

    #[test]
    fn socket_names_are_short_words() {
        for ok in ["a", "dns4", "app_6.x-y", &"n".repeat(SOCKET_NAME_MAX)] {
            assert!(load(&sock(ok, "198.18.0.1:53")).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "is empty"),
            ("a b", "contains ' '"),
            ("a\nb", "contains '\\n'"),
            ("a\0b", "contains '\\0'"),
            ("\"q\"", "contains '\"'"),
            ("dns/4", "contains '/'"),
            ("déjà", "contains 'é'"),
        ] {
            let e = load(&sock(bad, "198.18.0.1:53")).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("1..=63 characters"),
                "{bad:?}: {e}"
            );
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
        let long = "x".repeat(5000);
        let e = load(&sock(&long, "198.18.0.1:53")).unwrap_err().to_string();
        assert!(e.contains("is 5000 bytes long") && e.len() < 300, "{e}");
    }

    #[test]
    fn ipv6_zones_are_refused() {
        let e = load(&sock("z", "[fe80::1%2]:53")).unwrap_err().to_string();
        assert!(e.contains("IPv6 zone (%2)") && e.contains("remove"), "{e}");
        let s = format!("{MIN}\n[[socket]]\nname = \"z\"\nlocal = \"[fd00::1]:53\"\nremote = \"[fe80::9%7]:9\"\n");
        let e = load(&s).unwrap_err().to_string();
        assert!(e.contains("remote [fe80::9%7]:9 has an IPv6 zone"), "{e}");
        assert!(load(&sock("z", "[fe80::1]:53")).is_ok());
    }

    #[cfg(not(loom))]
    fn start(s: &str) -> Vec<String> {
        load(s).unwrap().start_problems()
    }

    #[cfg(not(loom))]
    #[test]
    fn start_problems_memory_prefix_counts_pcap_collisions() {
        let nohuge = MIN.replace("[eal]\n", "[eal]\nno_huge = true\n");
        assert_eq!(start(&nohuge), Vec::<String>::new());
        let m = |mb: u32| nohuge.replace("[eal]\n", &format!("[eal]\nmemory_mb = {mb}\n"));
        let need = load(&nohuge).unwrap().memory_needed_mb();
        assert!((60..80).contains(&need), "{need}");
        assert!(start(&m(1))[0].contains("eal.memory_mb = 1 is too small"));
        assert!(start(&m(need as u32)).is_empty());
        assert!(start(&m(9_999_999))[0].contains("more than this machine's memory"));
        let e = start(&nohuge.replace("[eal]\n", "[eal]\nfile_prefix = \"\"\n"));
        assert!(e[0].contains("eal.file_prefix is empty"), "{e:?}");
        let e = start(&nohuge.replace("[eal]\n", "[eal]\nfile_prefix = \"a/b\"\n"));
        assert!(e[0].contains("eal.file_prefix = \"a/b\""), "{e:?}");
        let e = start(&nohuge.replace("[eal]\n", "[eal]\nextra_args = [\"--file-prefix=\"]\n"));
        assert!(
            e[0].contains("--file-prefix in eal.extra_args is empty"),
            "{e:?}"
        );
        let e = start(&format!("{nohuge}\n[engine]\nfiller_sockets = 100000000\n"));
        assert!(e[0].contains("at most 10000000"), "{e:?}");
        let many: String = (0..=MAX_SOCKETS)
            .map(|i| {
                format!(
                    "[[socket]]\nname = \"s{i}\"\nlocal = \"198.18.{}.{}:53\"\nring_size = 2\n",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect();
        let e = start(&format!("{nohuge}\n{many}"));
        assert!(e[0].contains("2049 sockets: at most 2048"), "{e:?}");
        let pcap = |f: &str| {
            format!("{nohuge}\n[[socket]]\nname = \"p\"\nlocal = \"198.18.0.1:9\"\nhandler = \"pcap\"\npcap_file = {f:?}\n")
        };
        let e = start(&pcap("/proc/nope/x.pcap"));
        assert!(
            e[0].contains("directory /proc/nope does not exist"),
            "{e:?}"
        );
        let e = start(&pcap("/tmp"));
        assert!(e[0].contains("pcap_file /tmp is a directory"), "{e:?}");
        assert!(start(&pcap("/tmp/udpdemux-x.pcap")).is_empty());
        let two = format!("{nohuge}\n[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\n[[socket]]\nname = \"b\"\nlocal = \"198.18.0.1:53\"\n");
        let e = start(&two);
        assert!(
            e[0].starts_with("socket \"b\": address in use")
                && e[0].contains("collides with socket \"a\" (")
                && e[0].contains("reuseport = true on both"),
            "{e:?}"
        );
    }
}
