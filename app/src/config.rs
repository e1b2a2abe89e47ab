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
    Read { path: PathBuf, source: std::io::Error },
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
        SmallCacheConf { enabled: true, entries: d_small_entries(), data_room: d_small_data_room() }
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
        let mut a = vec!["--lcores".to_string(), self.lcores.clone(), "-m".into(), self.memory_mb.to_string()];
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

pub use crate::delivery::Strategy;

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
        MempoolConf { mbufs: d_mbufs(), cache: d_cache(), data_room: d_data_room() }
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
        let (a, p) = s.split_once('/').ok_or_else(|| format!("address {s:?} is not \"ADDR/PREFIXLEN\""))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("address {s:?}: {a:?} is not an IP address"))?;
        let prefix: u8 = p.parse().map_err(|_| format!("address {s:?}: prefix length {p:?} is not a number"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("address {s:?}: prefix length {prefix} is over {max}"));
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
        cfg.validate().map_err(|msg| ConfigError::Invalid { path: path.into(), msg })?;
        Ok(cfg)
    }

    /// Read and parse (vdev paths resolved) without the semantic checks:
    /// `udpdemux check` lists every problem instead of stopping at the first.
    pub fn load_unvalidated(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let mut cfg = Config::parse_at(&text, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for v in &mut cfg.eal.vdevs {
            *v = resolve_vdev_paths(v, dir);
        }
        Ok(cfg)
    }

    pub fn from_str_at(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::parse_at(text, path)?;
        cfg.validate().map_err(|msg| ConfigError::Invalid { path: path.into(), msg })?;
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
        let e = &self.engine;
        if e.burst == 0 || e.burst > 512 {
            out.push(format!("engine.burst = {}: must be 1..=512", e.burst));
        }
        if e.stats_interval_ms == 0 {
            out.push("engine.stats_interval_ms must be > 0".into());
        }
        if !(e.duration_secs >= 0.0 && e.duration_secs.is_finite()) {
            out.push("engine.duration_secs must be >= 0".into());
        }
        if self.mempool.mbufs < 64 {
            out.push(format!("mempool.mbufs = {}: too small (at least 64)", self.mempool.mbufs));
        }
        if self.mempool.data_room < 256 + 128 {
            out.push(format!("mempool.data_room = {}: too small (at least 384 with headroom)", self.mempool.data_room));
        }
        if self.mempool.cache > 512 || (self.mempool.cache > 0 && self.mempool.cache as u64 * 3 / 2 > self.mempool.mbufs as u64) {
            out.push(format!("mempool.cache = {}: at most 512 and at most 2/3 of mempool.mbufs", self.mempool.cache));
        }
        if self.small_cache.enabled {
            if self.small_cache.entries == 0 || self.small_cache.entries > 1 << 20 {
                out.push(format!("small_cache.entries = {}: must be 1..=1048576", self.small_cache.entries));
            }
            if self.small_cache.data_room < 128 + 64 || self.small_cache.data_room >= self.mempool.data_room {
                out.push(format!(
                    "small_cache.data_room = {}: must be at least 192 (128 headroom + a 64-byte frame) and below mempool.data_room",
                    self.small_cache.data_room
                ));
            }
        }
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
        let mut polled: std::collections::HashMap<(String, u16), u32> = std::collections::HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for l in &self.lcores {
            if !ids.insert(l.id) {
                out.push(format!("lcore {} is listed twice", l.id));
            }
            if l.role == Role::Consumer && !l.queues.is_empty() {
                out.push(format!("lcore {}: a consumer lcore polls no queues (remove `queues`)", l.id));
            }
            if l.role == Role::Rx && l.queues.is_empty() {
                out.push(format!("lcore {}: an rx lcore needs `queues = [\"PORT:QUEUE\", ...]`", l.id));
            }
            for q in &l.queues {
                match parse_queue_ref(q) {
                    None => out.push(format!("lcore {}: queue {q:?} is not \"PORT:QUEUE\"", l.id)),
                    Some((port, qi)) => match self.ports.iter().find(|p| p.name == port) {
                        None => out.push(format!("lcore {}: queue {q:?} names port {port:?}, which is not a [[port]]", l.id)),
                        Some(p) if qi >= p.rx_queues => {
                            out.push(format!("lcore {}: queue {q:?}: port {port:?} has {} RX queues", l.id, p.rx_queues))
                        }
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
                    out.push(format!("queue \"{}:{q}\" has no rx lcore polling it", p.name));
                }
            }
        }
        if !self.ports.is_empty() && !self.lcores.iter().any(|l| l.role == Role::Rx) {
            out.push("no [[lcore]] with role = \"rx\"".into());
        }
        let mut snames = std::collections::HashSet::new();
        for s in &self.sockets {
            if !snames.insert(s.name.as_str()) {
                out.push(format!("socket {:?} is listed twice", s.name));
            }
            if s.local.port() == 0 {
                out.push(format!("socket {:?}: local port 0", s.name));
            }
            if let Some(r) = s.remote {
                if r.is_ipv4() != s.local.is_ipv4() {
                    out.push(format!("socket {:?}: local and remote are of different families", s.name));
                }
                if r.port() == 0 || r.ip().is_unspecified() {
                    out.push(format!("socket {:?}: remote must be a specific address and port", s.name));
                }
            }
            if s.rcvbuf < 4096 {
                out.push(format!("socket {:?}: rcvbuf = {} is below 4096 bytes", s.name, s.rcvbuf));
            }
            if s.ring_size < 2 || s.ring_size > (1 << 24) {
                out.push(format!("socket {:?}: ring_size = {} must be 2..=16777216", s.name, s.ring_size));
            }
            match (s.handler, &s.pcap_file) {
                (Handler::Pcap, None) => out.push(format!("socket {:?}: handler \"pcap\" needs pcap_file", s.name)),
                (Handler::Pcap, Some(_)) => {
                    if s.pcap_limit_bytes < (crate::pcap::FILE_HEADER_LEN + crate::pcap::RECORD_HEADER_LEN) as u64 {
                        out.push(format!("socket {:?}: pcap_limit_bytes = {} is too small", s.name, s.pcap_limit_bytes));
                    }
                }
                (_, Some(_)) => out.push(format!("socket {:?}: pcap_file is only for handler \"pcap\"", s.name)),
                (_, None) => {}
            }
        }
        self.address_problems(&mut out);
        out
    }
}

impl Config {
    /// Interface addresses: unicast, each on one port only.
    fn address_problems(&self, out: &mut Vec<String>) {
        let mut seen: std::collections::HashMap<IpAddr, &str> = std::collections::HashMap::new();
        for p in &self.ports {
            for a in &p.addresses {
                let bad = match a.addr {
                    IpAddr::V4(v) => v.is_unspecified() || v.is_multicast() || v.is_broadcast() || v.is_loopback(),
                    IpAddr::V6(v) => v.is_unspecified() || v.is_multicast() || v.is_loopback(),
                };
                if bad {
                    out.push(format!("port {:?}: address {a} is not a unicast address", p.name));
                }
                if let Some(other) = seen.insert(a.addr, p.name.as_str()) {
                    out.push(format!("address {} is on ports {other:?} and {:?}: one port per address", a.addr, p.name));
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
                let p = if p.exists() { p.canonicalize().unwrap_or(p) } else { p };
                format!("{k}={}", p.display())
            }
            _ => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn one_line(s: &str) -> String {
    // toml errors look like "TOML parse error at line 3, column 1\n  |\n3 | foo\n  | ^\nunknown field `foo`, expected ..."
    let mut lines = s.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('|') && !l.contains(" | "));
    let head = lines.next().unwrap_or_default().trim().to_string();
    let rest: Vec<&str> = lines.map(|l| l.trim()).collect();
    if rest.is_empty() {
        head
    } else {
        format!("{head}: {}", rest.join(" "))
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
    fn unknown_key_is_named() {
        let e = load(&format!("{MIN}\n[engine]\nbrust = 3\n")).unwrap_err().to_string();
        assert!(e.contains("brust"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn queue_without_poller_and_double_poller() {
        let s = MIN.replace("name = \"net_null0\"", "name = \"net_null0\"\nrx_queues = 2");
        assert!(load(&s).unwrap_err().to_string().contains("\"net_null0:1\" has no rx lcore"));
        let s2 = format!("{MIN}\n[[lcore]]\nid = 2\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n");
        assert!(load(&s2).unwrap_err().to_string().contains("exactly one poller"));
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
            resolve_vdev_paths("net_pcap0,rx_pcap=x.pcap,infinite_rx=1", Path::new("/etc/u")),
            "net_pcap0,rx_pcap=/etc/u/x.pcap,infinite_rx=1"
        );
        assert_eq!(resolve_vdev_paths("net_pcap0,rx_pcap=/a/b.pcap", &d), "net_pcap0,rx_pcap=/a/b.pcap");
        assert_eq!(resolve_vdev_paths("net_null0", &d), "net_null0");
    }

    #[test]
    fn sockets_validate() {
        let s = format!("{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"0.0.0.0:0\"\n");
        assert!(load(&s).unwrap_err().to_string().contains("local port 0"));
        let s = format!("{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"[::]:53\"\nremote = \"198.18.0.1:5\"\n");
        assert!(load(&s).unwrap_err().to_string().contains("different families"));
        let s = format!("{MIN}\n[[socket]]\nname = \"a\"\nlocal = \"[::]:53\"\nhandler = \"echo\"\nstrategy = 1\n");
        assert!(load(&s).unwrap_err().to_string().contains("strategy"));
    }

    #[test]
    fn interface_addresses_parse_and_validate() {
        let with = |a: &str| MIN.replace("name = \"net_null0\"\n", &format!("name = \"net_null0\"\naddresses = {a}\n"));
        let c = load(&with(r#"["198.18.0.1/24", "fd00::1/64"]"#)).unwrap();
        assert_eq!(c.ports[0].addresses[0], IfAddr { addr: "198.18.0.1".parse().unwrap(), prefix: 24 });
        assert_eq!(c.ports[0].addresses[1].prefix, 64);
        assert!(load(&with(r#"["198.18.0.1/33"]"#)).unwrap_err().to_string().contains("over 32"));
        assert!(load(&with(r#"["198.18.0.1"]"#)).unwrap_err().to_string().contains("ADDR/PREFIXLEN"));
        assert!(load(&with(r#"["ff02::1/64"]"#)).unwrap_err().to_string().contains("not a unicast"));
        assert!(load(&with(r#"["fd00::1/64", "fd00::1/120"]"#)).unwrap_err().to_string().contains("one port per address"));
    }

    #[test]
    fn pcap_socket_needs_a_file() {
        let s = format!("{MIN}\n[[socket]]\nname = \"p\"\nlocal = \"198.18.0.1:9\"\nhandler = \"pcap\"\n");
        assert!(load(&s).unwrap_err().to_string().contains("needs pcap_file"));
        let ok = format!("{s}pcap_file = \"/tmp/x.pcap\"\npcap_limit_bytes = 100000\n");
        let c = load(&ok).unwrap();
        assert_eq!(c.sockets[0].pcap_limit_bytes, 100_000);
        let s = format!("{MIN}\n[[socket]]\nname = \"c\"\nlocal = \"198.18.0.1:9\"\npcap_file = \"/tmp/x.pcap\"\n");
        assert!(load(&s).unwrap_err().to_string().contains("only for handler"));
    }
}
