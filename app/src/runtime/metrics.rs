//! The Prometheus endpoint (`[metrics] listen = "127.0.0.1:9464"`): `GET
//! /metrics` answers the text exposition format (version 0.0.4).
//!
//! Served from a thread of its own that never touches a packet: each scrape
//! takes [`snapshot`], the same read of the counter cells that telemetry,
//! the stats lines and the exit JSON are made from (plain loads of counters
//! the lcores own; no lock on the per-packet path), then reads the ports'
//! xstats and the pools' free counts as DPDK's own telemetry does, from a
//! non-EAL thread.
//!
//! The HTTP side is a minimal HTTP/1.1 responder on `std::net::TcpListener`
//! (one request per connection, `Connection: close`): a scrape is one GET,
//! and a crate (tiny_http, hyper) would add threads and dependencies for
//! nothing the scraper uses. The text format is written by hand
//! ([`render`]); `tests/metrics.rs` runs `promtool check metrics` on it.
//!
//! Names (see docs/operations.md for the full mapping): the kernel's UDP MIB
//! `UdpInDatagrams` / `Udp6InDatagrams` is `udpdemux_udp_in_datagrams_total`
//! with `family="ipv4"` / `"ipv6"`, and so on for every MIB counter; the IP
//! reassembly MIB (`IpReasmOKs` ...) is `udpdemux_ip_reasm_oks_total{family}`.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dpdk_sys::Mempool;

use super::report::snapshot;
use super::shared::Shared;
use crate::latency;
use crate::summary::{SocketSummary, Summary};

/// The kernel's UDP MIB names (after the `Udp` / `Udp6` prefix) and ours.
pub const UDP_MIB: [(&str, &str); 9] = [
    ("InDatagrams", "udpdemux_udp_in_datagrams_total"),
    ("NoPorts", "udpdemux_udp_no_ports_total"),
    ("InErrors", "udpdemux_udp_in_errors_total"),
    ("RcvbufErrors", "udpdemux_udp_rcvbuf_errors_total"),
    ("InCsumErrors", "udpdemux_udp_in_csum_errors_total"),
    ("MemErrors", "udpdemux_udp_mem_errors_total"),
    ("OutDatagrams", "udpdemux_udp_out_datagrams_total"),
    ("SndbufErrors", "udpdemux_udp_sndbuf_errors_total"),
    ("IgnoredMulti", "udpdemux_udp_ignored_multi_total"),
];

/// The kernel's IP MIB names we keep (after `Ip` / `Ip6`: multicast,
/// reassembly and fragmentation) and ours.
pub const IP_MIB: [(&str, &str); 9] = [
    ("InMcastPkts", "udpdemux_ip_in_mcast_pkts_total"),
    ("ReasmReqds", "udpdemux_ip_reasm_reqds_total"),
    ("ReasmOKs", "udpdemux_ip_reasm_oks_total"),
    ("ReasmFails", "udpdemux_ip_reasm_fails_total"),
    ("ReasmTimeout", "udpdemux_ip_reasm_timeout_total"),
    ("ReasmOverlaps", "udpdemux_ip_reasm_overlaps_total"),
    ("FragOKs", "udpdemux_ip_frag_oks_total"),
    ("FragCreates", "udpdemux_ip_frag_creates_total"),
    ("FragFails", "udpdemux_ip_frag_fails_total"),
];

/// What a scrape reads besides the snapshot: ports by id and the pools.
pub struct Sources {
    pub ports: Vec<(u16, String)>,
    /// Pool name and a handle that does not free it (`Mempool::lookup`).
    pub pools: Vec<(String, Mempool)>,
}

/// Figures read at scrape time from DPDK (not in the snapshot while running).
#[derive(Debug, Default, Clone)]
pub struct Extra {
    /// Port name and its xstats.
    pub ports: Vec<(String, Vec<(String, u64)>)>,
    /// Pool name, size, free mbufs.
    pub pools: Vec<(String, u32, u32)>,
}

impl Sources {
    fn read(&self) -> Extra {
        Extra {
            ports: self
                .ports
                .iter()
                .map(|(id, n)| (n.clone(), dpdk_sys::port::xstats(*id)))
                .collect(),
            pools: self
                .pools
                .iter()
                .map(|(n, mp)| (n.clone(), mp.size(), mp.avail()))
                .collect(),
        }
    }
}

/// A running endpoint; [`Server::stop`] (or drop) joins its thread.
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Server {
    /// Bind `addr` and serve from a new thread. The error is the one line
    /// `check` prints for the same address.
    pub fn start(addr: SocketAddr, shared: &Arc<Shared>, src: Sources) -> Result<Server, String> {
        let l = TcpListener::bind(addr).map_err(|e| crate::config::bind_error(addr, &e))?;
        let bound = l.local_addr().unwrap_or(addr);
        l.set_nonblocking(true)
            .map_err(|e| format!("metrics: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sh) = (Arc::clone(&stop), Arc::clone(shared));
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("udpdemux-metrics".into())
            .spawn(move || serve(l, &st, &sh, &src, started))
            .map_err(|e| format!("metrics: cannot start its thread: {e}"))?;
        log::info!("metrics: Prometheus endpoint on http://{bound}/metrics");
        Ok(Server {
            stop,
            thread: Some(thread),
            addr: bound,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting and join the thread (a scrape in progress finishes).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(l: TcpListener, stop: &AtomicBool, shared: &Shared, src: &Sources, started: Instant) {
    while !stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((c, _)) => {
                if let Err(e) = answer(c, shared, src, started) {
                    log::debug!("metrics: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                log::debug!("metrics accept: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// One request, one answer, then close.
fn answer(mut c: TcpStream, shared: &Shared, src: &Sources, started: Instant) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    c.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&req);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let s = snapshot(shared, started.elapsed().as_secs_f64());
            let text = render(&s, &src.read());
            (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "udpdemux: metrics at /metrics\n".to_string(),
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".into(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes())?;
    if method != "HEAD" {
        c.write_all(body.as_bytes())?;
    }
    c.flush()
}

/// A label value escaped per the exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric name made of what DPDK calls an xstat (`rx_q0_packets`, `mac_local_errors`).
fn sanitize(n: &str) -> String {
    let mut s: String = n
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// Families in order, each written whole (HELP, TYPE, samples).
#[derive(Default)]
struct Out {
    order: Vec<String>,
    fams: BTreeMap<String, (String, &'static str, String)>,
}

impl Out {
    fn fam(&mut self, name: &str, kind: &'static str, help: &str) -> &mut String {
        if !self.fams.contains_key(name) {
            self.order.push(name.to_string());
            self.fams
                .insert(name.to_string(), (help.to_string(), kind, String::new()));
        }
        &mut self.fams.get_mut(name).expect("family").2
    }

    /// One sample: `labels` as `k="v"` pairs.
    fn sample(&mut self, name: &str, kind: &'static str, help: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        let l = labelset(labels);
        let body = self.fam(name, kind, help);
        let _ = writeln!(body, "{name}{l} {v}");
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        self.sample(name, "counter", help, labels, v);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        self.sample(name, "gauge", help, labels, v);
    }

    /// A log2-µs histogram as a Prometheus histogram in seconds.
    fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], b: &[u64], sum_us: u64) {
        let body = self.fam(name, "histogram", help);
        let mut acc = 0u64;
        for (i, c) in b.iter().enumerate() {
            acc += c;
            // Bucket i holds samples of floor(µs) < 2^i (bucket 0: 0 µs,
            // bucket 1: 1 µs, bucket i: [2^(i-1), 2^i) µs); the last is open.
            if i + 1 < b.len() {
                let le = format!("{:e}", (1u64 << i) as f64 / 1e6);
                let mut l: Vec<(&str, &str)> = labels.to_vec();
                l.push(("le", &le));
                let _ = writeln!(body, "{name}_bucket{} {acc}", labelset(&l));
            }
        }
        let mut l: Vec<(&str, &str)> = labels.to_vec();
        l.push(("le", "+Inf"));
        let _ = writeln!(body, "{name}_bucket{} {acc}", labelset(&l));
        let ls = labelset(labels);
        let _ = writeln!(body, "{name}_sum{ls} {}", sum_us as f64 / 1e6);
        let _ = writeln!(body, "{name}_count{ls} {acc}");
    }

    fn finish(self) -> String {
        let mut s = String::with_capacity(64 * 1024);
        for n in &self.order {
            let (help, kind, body) = &self.fams[n];
            let _ = writeln!(s, "# HELP {n} {help}");
            let _ = writeln!(s, "# TYPE {n} {kind}");
            s.push_str(body);
        }
        s
    }
}

fn labelset(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// The address family of a socket's `local` (`[...]` is IPv6).
pub fn family_of(local: &str) -> &'static str {
    if local.starts_with('[') {
        "ipv6"
    } else if local.starts_with(|c: char| c.is_ascii_digit()) {
        "ipv4"
    } else {
        "any"
    }
}

fn parse_family(f: &str) -> &str {
    match f {
        "v4" => "ipv4",
        "v6" => "ipv6",
        x => x,
    }
}

/// The exposition text of a snapshot and the scrape-time DPDK figures.
pub fn render(s: &Summary, x: &Extra) -> String {
    let mut o = Out::default();
    for (pre, fam) in [("Udp", "ipv4"), ("Udp6", "ipv6")] {
        for (k, name) in UDP_MIB {
            if let Some(v) = s.udp.get(&format!("{pre}{k}")) {
                o.counter(
                    name,
                    &format!("The kernel's Udp{k} (family ipv4) and Udp6{k} (family ipv6), UDP MIB"),
                    &[("family", fam)],
                    *v,
                );
            }
        }
    }
    for (pre, fam) in [("Ip", "ipv4"), ("Ip6", "ipv6")] {
        for (k, name) in IP_MIB {
            if let Some(v) = s.ip.get(&format!("{pre}{k}")) {
                o.counter(
                    name,
                    &format!("The kernel's Ip{k} / Ip6{k} (IP MIB)"),
                    &[("family", fam)],
                    *v,
                );
            }
        }
    }
    o.gauge("udpdemux_uptime_seconds", "Seconds since the worker lcores started", &[], s.seconds);
    o.counter("udpdemux_rx_packets_total", "Frames received from every RX queue", &[], s.rx_packets);
    o.counter("udpdemux_rx_bytes_total", "Bytes of the frames received", &[], s.rx_bytes);
    o.counter("udpdemux_lookups_total", "Early-demux flow-table lookups (one per valid datagram)", &[], s.lookups);
    o.counter("udpdemux_control_frames_total", "Frames the control path took (ARP, ND, ICMP echo)", &[], s.control);
    o.counter(
        "udpdemux_hot_path_allocations_total",
        "Heap allocations seen on the per-packet path (must stay 0)",
        &[],
        s.hot_path_allocations,
    );
    o.counter(
        "udpdemux_exception_frames_total",
        "Frames the exception path took (to the kernel, or dropped on the way)",
        &[],
        s.exception,
    );
    for (k, v) in &s.exception_path {
        let (direction, outcome) = match k.as_str() {
            "to_kernel" => ("to_kernel", "sent"),
            "rate_limited" => ("to_kernel", "rate_limited"),
            "tx_errors" => ("to_kernel", "tx_error"),
            "from_kernel" => ("from_kernel", "sent"),
            "from_kernel_tx_errors" => ("from_kernel", "tx_error"),
            // Of the to_kernel ones: valid UDP no socket took.
            _ => continue,
        };
        o.counter(
            "udpdemux_exception_total",
            "The exception path's frames by direction and outcome",
            &[("direction", direction), ("outcome", outcome)],
            *v,
        );
    }
    if let Some(v) = s.exception_path.get("unbound_udp") {
        o.counter(
            "udpdemux_exception_unbound_udp_total",
            "Valid UDP datagrams no socket took that the exception path took",
            &[],
            *v,
        );
    }
    for (k, v) in &s.responder {
        o.counter(
            "udpdemux_responder_total",
            "The control path's breakdown by outcome",
            &[("outcome", k)],
            *v,
        );
    }
    for (fam, m) in &s.reasons {
        for (r, v) in m {
            o.counter(
                "udpdemux_parse_drops_total",
                "Frames dropped before demux, by family and reason",
                &[("family", parse_family(fam)), ("reason", r)],
                *v,
            );
        }
    }
    for k in &s.sockets {
        socket(&mut o, k);
    }
    for n in &s.nodes {
        let node = n.node.to_string();
        for (r, v) in &n.drops {
            o.counter(
                "udpdemux_node_drops_total",
                "Socket drops per NUMA (or virtual) stage node and reason, summed over sockets",
                &[("node", &node), ("reason", r)],
                *v,
            );
        }
    }
    for l in &s.lcores {
        let lc = l.lcore.to_string();
        o.counter("udpdemux_lcore_polls_total", "RX lcore loop polls", &[("lcore", &lc)], l.polls);
        o.counter(
            "udpdemux_lcore_idle_polls_total",
            "RX lcore polls that returned no frame",
            &[("lcore", &lc)],
            l.idle_polls,
        );
        o.counter(
            "udpdemux_lcore_idle_sleeps_total",
            "RX lcore sleeps through idle gaps (engine.idle_sleep_us)",
            &[("lcore", &lc)],
            l.idle_sleeps,
        );
        o.counter(
            "udpdemux_lcore_idle_yields_total",
            "RX lcore yields of its CPU between empty polls (engine.idle_yield_us)",
            &[("lcore", &lc)],
            l.idle_yields,
        );
        for q in &l.queues {
            let qn = q.queue.to_string();
            let lab = [("lcore", lc.as_str()), ("port", q.port.as_str()), ("queue", qn.as_str())];
            o.counter("udpdemux_queue_rx_packets_total", "Frames received per RX queue", &lab, q.packets);
            o.counter("udpdemux_queue_rx_bytes_total", "Bytes received per RX queue", &lab, q.bytes);
            o.counter("udpdemux_queue_rx_bursts_total", "Non-empty RX bursts per RX queue", &lab, q.bursts);
        }
    }
    for c in &s.consumers {
        let lc = c.lcore.to_string();
        o.counter("udpdemux_consumer_polls_total", "Consumer lcore polls", &[("lcore", &lc)], c.polls);
        o.counter(
            "udpdemux_consumer_datagrams_total",
            "Datagrams consumed per consumer lcore",
            &[("lcore", &lc)],
            c.datagrams,
        );
    }
    let p = &s.rx_pool;
    o.gauge("udpdemux_rx_pool_size_mbufs", "Mbufs in the RX pools", &[], p.size);
    o.gauge("udpdemux_rx_pool_free_mbufs", "Free mbufs RX can allocate, as last sampled", &[], p.free);
    o.gauge("udpdemux_rx_pool_low_water_mbufs", "The RX pools' low-water mark", &[], p.low_water);
    o.gauge("udpdemux_rx_pool_min_free_mbufs", "Fewest free mbufs sampled", &[], p.min_free);
    o.sample(
        "udpdemux_rx_pool_low_seconds_total",
        "counter",
        "Time the RX pools spent below their low-water mark",
        &[],
        p.low_ms as f64 / 1000.0,
    );
    o.counter("udpdemux_rx_pool_low_episodes_total", "Episodes below the low-water mark", &[], p.episodes);
    o.counter("udpdemux_rx_pool_warnings_total", "Starvation warnings logged", &[], p.warnings);
    for (name, size, free) in &x.pools {
        o.gauge("udpdemux_mempool_size_mbufs", "Mbufs in each mempool", &[("pool", name)], size);
        o.gauge(
            "udpdemux_mempool_free_mbufs",
            "Free mbufs in each mempool (ring and lcore caches)",
            &[("pool", name)],
            free,
        );
    }
    o.gauge("udpdemux_memzones", "DPDK memzones reserved by the process", &[], s.memzones);
    o.gauge("udpdemux_heap_alloc_bytes", "DPDK malloc heap bytes allocated", &[], s.heap_alloc_bytes);
    let c = &s.small_cache;
    o.counter("udpdemux_small_cache_condensed_total", "Datagrams copied into a small buffer under pressure", &[], c.condensed);
    o.counter("udpdemux_small_cache_busy_total", "Condense attempts that found the small cache empty", &[], c.busy);
    o.counter("udpdemux_small_cache_saved_bytes_total", "Truesize bytes saved by condensing", &[], c.bytes_saved);
    // Multicast (`multicast` in the JSON): `groups` is a level, the rest counts.
    for (k, v) in &s.multicast {
        if k == "groups" {
            o.gauge("udpdemux_multicast_groups", "Port/group pairs joined now", &[], *v as f64);
        } else {
            o.counter(
                "udpdemux_multicast_total",
                "Multicast fan-out and membership: copies, nobufs, unjoined, queries, queries_lost, queries_answered, igmp_reports, mld_reports, report_errors",
                &[("what", k.as_str())],
                *v,
            );
        }
    }
    let r = &s.reassembly;
    o.counter("udpdemux_reasm_fragments_total", "Fragments the reassembler took", &[], r.fragments);
    o.counter("udpdemux_reasm_fragments_merged_total", "Fragments merged into a reassembled datagram", &[], r.merged);
    o.counter("udpdemux_reasm_fragments_dropped_total", "Fragments dropped by the reassembler", &[], r.dropped);
    o.gauge("udpdemux_reasm_fragments_held", "Fragments held now", &[], r.held);
    o.gauge("udpdemux_reasm_peak_bytes", "Most truesize bytes one lcore's table held", &[], r.bytes_peak);
    o.counter("udpdemux_reasm_steered_total", "Fragments pushed to their owner RX lcore's ring", &[], r.steered);
    o.counter("udpdemux_reasm_steer_full_total", "Fragments dropped: the owner's steering ring was full", &[], r.steer_full);
    let cl = &s.clients;
    o.gauge("udpdemux_clients_attached", "Client processes attached", &[], cl.attached);
    o.gauge("udpdemux_client_sockets_open", "Sockets a client process has open", &[], cl.open);
    o.counter("udpdemux_clients_reaped_total", "Dead client processes reaped", &[], cl.reaped);
    if let Some(t) = &s.send {
        for (i, fam) in ["ipv4", "ipv6"].iter().enumerate() {
            let l = [("family", *fam)];
            o.counter("udpdemux_send_accepted_total", "Datagrams send_burst accepted", &l, t.accepted[i]);
            o.counter("udpdemux_send_tx_errors_total", "Datagrams the NIC refused", &l, t.tx_errors[i]);
            o.counter("udpdemux_send_no_buffer_total", "Datagrams refused for want of an mbuf", &l, t.no_buffer[i]);
            o.counter("udpdemux_send_too_big_total", "Datagrams refused as too big", &l, t.too_big[i]);
            o.counter("udpdemux_send_no_route_total", "Datagrams with no route", &l, t.no_route[i]);
        }
        let n = &t.neigh;
        for (name, help, v) in [
            ("udpdemux_neigh_resolved_total", "Neighbour entries resolved", n.resolved),
            ("udpdemux_neigh_queued_total", "Datagrams queued for an unresolved neighbour", n.queued),
            ("udpdemux_neigh_released_total", "Queued datagrams released on resolution", n.released),
            ("udpdemux_neigh_unresolved_discards_total", "Datagrams discarded (unresolved queue full)", n.unres_discards),
            ("udpdemux_neigh_expired_total", "Queued datagrams dropped when resolution expired", n.expired),
            ("udpdemux_neigh_table_full_total", "Datagrams dropped: neighbour table full", n.table_full),
            ("udpdemux_neigh_failed_total", "Resolutions that failed", n.failed),
            ("udpdemux_neigh_solicits_sent_total", "ARP requests / neighbour solicitations sent", t.solicits_sent),
            ("udpdemux_neigh_solicit_errors_total", "Solicitations that could not be sent", t.solicits_failed),
            ("udpdemux_neigh_from_traffic_total", "Neighbour entries created or resolved from received datagrams", n.from_traffic),
            ("udpdemux_neigh_heard_reports_total", "Sources RX lcores reported from received datagrams", t.heard_reported),
            ("udpdemux_neigh_heard_dropped_total", "Source reports dropped: the queue to the main lcore was full", t.heard_dropped),
            ("udpdemux_neigh_heard_ignored_total", "Source reports that taught nothing (off-link, bad MAC, table full)", t.heard_ignored),
            ("udpdemux_neigh_heard_suppressed_total", "Source reports an RX lcore did not make (over its per-millisecond budget)", t.heard_suppressed),
        ] {
            o.counter(name, help, &[], v);
        }
        o.gauge("udpdemux_neigh_entries", "Neighbour table entries", &[], n.entries);
        o.counter("udpdemux_main_naps_total", "Main lcore naps while it drains the send path (each arms a timer)", &[], t.main_naps);
        o.counter("udpdemux_main_naps_ended_by_send_total", "Main lcore naps an in-process sender's frames ended", &[], t.main_naps_ended_by_send);
    }
    for (port, xs) in &x.ports {
        for (k, v) in xs {
            let name = format!("udpdemux_port_{}_total", sanitize(k));
            o.counter(&name, &format!("The port's xstat {k} (rte_eth_xstats_get)"), &[("port", port)], *v);
        }
    }
    o.finish()
}

fn socket(o: &mut Out, k: &SocketSummary) {
    let id = k.id.to_string();
    let fam = family_of(&k.local);
    let removed = if k.removed { "true" } else { "false" };
    let lab = [("socket", k.name.as_str()), ("id", id.as_str()), ("family", fam), ("removed", removed)];
    for (name, help, v) in [
        ("udpdemux_socket_offered_total", "Datagrams demuxed to the socket", k.offered),
        ("udpdemux_socket_delivered_total", "Datagrams put on the socket's delivery ring", k.delivered),
        ("udpdemux_socket_consumed_total", "Datagrams its consumer took", k.consumed),
        ("udpdemux_socket_consumed_bytes_total", "Payload bytes its consumer took", k.consumed_bytes),
        ("udpdemux_socket_freed_at_close_total", "Delivered datagrams freed unread when it closed", k.freed_at_close),
        ("udpdemux_socket_condensed_total", "Datagrams copied into a small buffer", k.condensed),
        ("udpdemux_socket_batches_total", "Stage batches moved to the delivery ring", k.batches),
        ("udpdemux_socket_multicast_total", "Multicast copies offered to the socket (part of offered)", k.multicast),
    ] {
        o.counter(name, help, &lab, v);
    }
    for (r, v) in &k.drops {
        let mut l = lab.to_vec();
        l.push(("reason", r));
        o.counter("udpdemux_socket_drops_total", "Datagrams the socket dropped, by reason", &l, *v);
    }
    o.gauge("udpdemux_socket_rcvbuf_bytes", "The socket's receive budget", &lab, k.rcvbuf);
    o.gauge("udpdemux_socket_rmem_bytes", "Truesize bytes charged to the socket now", &lab, k.rmem);
    o.gauge("udpdemux_socket_rmem_high_water_bytes", "Most truesize bytes charged at once", &lab, k.rmem_high_water);
    if k.stage_latency_us.len() == latency::BUCKETS {
        o.histogram(
            "udpdemux_socket_stage_latency_seconds",
            "RX to delivery ring latency (log2 microsecond buckets)",
            &lab,
            &k.stage_latency_us,
            k.stage_latency_sum_us,
        );
    }
    if k.consumer_latency_us.len() == latency::BUCKETS {
        o.histogram(
            "udpdemux_socket_consumer_latency_seconds",
            "RX to consumer latency (log2 microsecond buckets)",
            &lab,
            &k.consumer_latency_us,
            k.consumer_latency_sum_us,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_seconds() {
        let mut o = Out::default();
        let mut b = vec![0u64; latency::BUCKETS];
        b[0] = 2; // 0 µs
        b[3] = 5; // [4, 8) µs
        b[latency::BUCKETS - 1] = 1; // >= 2^30 µs
        o.histogram("h_seconds", "help", &[("socket", "a")], &b, 40);
        let t = o.finish();
        assert!(t.contains("h_seconds_bucket{socket=\"a\",le=\"1e-6\"} 2\n"), "{t}");
        assert!(t.contains("h_seconds_bucket{socket=\"a\",le=\"4e-6\"} 2\n"), "{t}");
        assert!(t.contains("h_seconds_bucket{socket=\"a\",le=\"8e-6\"} 7\n"), "{t}");
        assert!(t.contains("h_seconds_bucket{socket=\"a\",le=\"+Inf\"} 8\n"), "{t}");
        assert!(t.contains("h_seconds_sum{socket=\"a\"} 0.00004"), "{t}");
        assert!(t.contains("h_seconds_count{socket=\"a\"} 8\n"), "{t}");
        // 31 finite bounds and +Inf.
        assert_eq!(t.matches("h_seconds_bucket").count(), latency::BUCKETS);
    }

    #[test]
    fn families_are_written_whole_with_help_and_type() {
        let mut o = Out::default();
        o.counter("a_total", "A", &[("x", "1")], 1);
        o.gauge("b", "B", &[], 2);
        o.counter("a_total", "A", &[("x", "2\"q")], 3);
        assert_eq!(
            o.finish(),
            "# HELP a_total A\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"2\\\"q\"} 3\n# HELP b B\n# TYPE b gauge\nb 2\n"
        );
    }

    #[test]
    fn xstat_names_become_metric_names() {
        assert_eq!(sanitize("rx_q0_packets"), "rx_q0_packets");
        assert_eq!(sanitize("mac-local.Errors"), "mac_local_errors");
        assert_eq!(sanitize("1x"), "_1x");
    }
}
