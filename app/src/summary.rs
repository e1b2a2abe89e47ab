//! The books of a run as plain data: one `Summary` (the `--stats-json`
//! file, telemetry replies, the nstat view and the exit printout are all
//! made from it) and its printouts. Kept apart from the runtime that fills
//! it (`runtime::report`) so the runtime state can hold the books of
//! removed sockets without the books depending on the runtime.
//!
//! An output format, like `nstat` and `runtime::telemetry`: it copies the
//! live counter cells (`crate::counters`, and the receive heart's through
//! `receive::SocketStats`) and holds none of its own.
use std::collections::BTreeMap;

use crate::counters;
use crate::latency;

/// Totals at exit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub seconds: f64,
    pub strategy: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub hot_path_allocations: u64,
    /// Kernel-named UDP counters (nstat style).
    pub udp: BTreeMap<String, u64>,
    /// Parse drops by family ("v4", "v6", "other") and reason.
    pub reasons: BTreeMap<String, BTreeMap<String, u64>>,
    pub lookups: u64,
    /// `run --demux-only`: demuxed datagrams freed after the lookup.
    pub demux_only_freed: u64,
    /// `run --floor pipeline`: frames no socket's port matched (freed by RX).
    pub floor_no_socket: u64,
    pub control: u64,
    /// The control path's breakdown (ARP replies, NAs, echo replies, rate limited, TX errors).
    pub responder: BTreeMap<String, u64>,
    /// Frames the exception path took (handed to the kernel, or dropped by
    /// its rate limit or a refused write): a place in the books, like `control`.
    pub exception: u64,
    /// The exception path both ways (empty when it is off): `to_kernel`,
    /// `rate_limited`, `tx_errors` (the three add up to `exception`),
    /// `unbound_udp` (of those, valid UDP no socket took), `from_kernel`
    /// and `from_kernel_tx_errors` (the kernel's frames sent out of the
    /// data port, or refused by it).
    pub exception_path: BTreeMap<String, u64>,
    pub sockets: Vec<SocketSummary>,
    /// Drops per NUMA (or virtual) node, summed over sockets (the kernel's `numa_drop_counters`).
    pub nodes: Vec<NodeSummary>,
    pub lcores: Vec<LcoreSummary>,
    pub consumers: Vec<ConsumerSummary>,
    /// What the main lcore's loop took of its thread (stats, signals,
    /// the send path, and the consumers of sockets no consumer lcore takes).
    pub main_lcore: ThreadSummary,
    pub ports: Vec<PortSummary>,
    /// The small-buffer cache, summed over RX lcores.
    pub small_cache: SmallCacheSummary,
    /// Kernel-named IP reassembly and fragmentation counters (`IpReasmReqds`
    /// ... `Ip6ReasmOverlaps`, `IpFragOKs` ... `Ip6FragFails`).
    pub ip: BTreeMap<String, u64>,
    /// Fragment reassembly's books, summed over RX lcores.
    pub reassembly: ReassemblySummary,
    /// Multicast (`mcast`): `copies` offered to sockets, `nobufs` (members
    /// without a copy), `unjoined` (dropped: group not joined on the
    /// port), `queries` taken, `queries_lost`, `queries_answered`,
    /// `igmp_reports` / `mld_reports` sent, `report_errors`, `groups` joined.
    pub multicast: BTreeMap<String, u64>,
    /// Every mempool: size and free mbufs (at exit, after teardown's frees).
    pub pools: Vec<PoolSummary>,
    /// Out-of-process clients: sockets open now, dead clients reaped and
    /// what they held.
    pub clients: ClientsSummary,
    /// Peak resident set size of the process (VmHWM, kB) at exit: hugepage
    /// memory is not in it, `--no-huge` memory is.
    pub peak_rss_kb: u64,
    /// Free mbufs in the RX pools (summed), sampled once per stats interval:
    /// the NIC pool's level over time (issue 5).
    pub pool_avail_samples: Vec<u32>,
    /// The RX pools' starvation watch: free count, low-water mark, time,
    /// RX polls and episodes below it, warnings logged (issue 14).
    pub rx_pool: crate::starvation::PoolWatchSummary,
    /// Memzones reserved in the process (every ring and pool is one), when
    /// the summary was taken: a reload must leave this where it was.
    pub memzones: u64,
    /// The DPDK malloc heap: bytes and elements allocated (memzones included).
    pub heap_alloc_bytes: u64,
    pub heap_alloc_count: u64,
    /// `send_burst`: datagrams taken, sent, dropped by reason, and the
    /// neighbour table's counters (`None`: no port has an address).
    pub send: Option<crate::send::SendSummary>,
    pub books_balanced: bool,
    pub problems: Vec<String>,
}

/// Out-of-process clients (`udpdemux-client`, issue 16).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClientsSummary {
    /// Sockets a client has open.
    pub open: u64,
    /// Dead clients the engine noticed and reaped.
    pub reaped: u64,
    /// Datagrams they held unread, freed by the engine (in the sockets'
    /// `freed_at_close`).
    pub reclaimed: u64,
    /// Mbufs they died while freeing (not freed again: at most that many
    /// lost to the pool).
    pub lost_in_free: u64,
    /// Client processes attached now (each on its own lcore id).
    pub attached: u64,
    /// Objects dead clients' lcore caches held, given back to the pools.
    pub cache_flushed: u64,
    /// Objects in the lcore caches of clients that died while changing
    /// them, forgotten (at most that many lost to the pools).
    pub cache_discarded: u64,
}

/// Where the fragments the reassembler took went: merged into a reassembled
/// datagram, dropped (duplicates, failed, evicted or expired datagrams),
/// still held, or freed at exit (also in `dropped`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReassemblySummary {
    pub fragments: u64,
    pub merged: u64,
    pub dropped: u64,
    pub held: u64,
    pub freed_at_exit: u64,
    /// The most bytes (truesize) one lcore's table held at once.
    pub bytes_peak: u64,
    /// Fragments an RX lcore received for a datagram another RX lcore
    /// owns, pushed to the owner's steering ring (`steer`).
    pub steered: u64,
    /// Of those, refused by a full ring: dropped.
    pub steer_full: u64,
    /// Fragments owners took from their rings (then offered as received).
    pub steer_taken: u64,
    /// Left in a steering ring at exit: freed.
    pub steer_freed_at_exit: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SmallCacheSummary {
    pub enabled: bool,
    pub condensed: u64,
    pub busy: u64,
    pub too_big: u64,
    pub bytes_saved: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolSummary {
    pub name: String,
    pub size: u32,
    pub avail: u32,
    /// Of `avail`: in the caches of the client lcore ids
    /// (`client_proto::CLIENT_LCORES`), which the engine's lcores cannot
    /// allocate from.
    pub client_cached: u32,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SocketSummary {
    pub name: String,
    /// Multicast copies offered to it (part of `offered`).
    pub multicast: u64,
    /// The engine's socket id: unchanged by an in-place reload, new on a replacement.
    pub id: u32,
    pub local: String,
    pub handler: String,
    pub removed: bool,
    pub offered: u64,
    pub delivered: u64,
    pub consumed: u64,
    pub consumed_bytes: u64,
    /// Of `consumed`: by out-of-process clients (`udpdemux-client`).
    pub client_consumed: u64,
    /// Of `freed_at_close`: datagrams a client held unread when it died,
    /// freed by the engine (delivered, then freed: never consumed).
    pub reclaimed_from_client: u64,
    /// Of `consumed`: datagrams a client died while freeing (it had
    /// counted them; their mbufs were not freed again).
    pub lost_in_client_free: u64,
    pub freed_at_close: u64,
    /// `run --floor pipeline` (zero otherwise): put straight into the ring /
    /// refused by a full ring. Included in `offered`, `delivered` and
    /// `drops.ring_full`, which mean the same there.
    pub floor_delivered: u64,
    pub floor_ring_full: u64,
    pub drops: BTreeMap<String, u64>,
    /// Drops by reason per stage node (index = dense node index, as in `nodes`).
    pub node_drops: Vec<BTreeMap<String, u64>>,
    pub rcvbuf: u64,
    pub rmem: u64,
    pub rmem_high_water: u64,
    pub condensed: u64,
    pub batches: u64,
    pub batch_max: u64,
    /// Of `batches`, those a producer delivered straight from its group
    /// (nothing staged on its node and the delivery lock free).
    pub direct_batches: u64,
    pub delivery_lock_acquisitions: u64,
    pub busylock_acquisitions: u64,
    pub tx: u64,
    pub tx_errors: u64,
    pub written: u64,
    pub not_written: u64,
    pub stage_latency_us: Vec<u64>,
    pub consumer_latency_us: Vec<u64>,
    /// Sums of the samples in the two histograms, in µs (each sample floored to a µs).
    pub stage_latency_sum_us: u64,
    pub consumer_latency_sum_us: u64,
    pub stage_p50_us: u64,
    pub stage_p99_us: u64,
    pub consumer_p50_us: u64,
    pub consumer_p99_us: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeSummary {
    /// Dense stage index.
    pub index: usize,
    /// NUMA or virtual node id of the RX lcores that use this stage.
    pub node: u32,
    pub drops: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsumerSummary {
    pub lcore: u32,
    pub polls: u64,
    pub idle_polls: u64,
    pub datagrams: u64,
    pub thread: ThreadSummary,
}

/// An lcore loop's share of its CPU (`runtime::thread_time`): its wall
/// time, the CPU time its thread got, the difference, and the kernel's
/// context switches. With no voluntary switches (a loop that never
/// sleeps) `off_cpu_ms` is the time other tasks took from it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ThreadSummary {
    pub wall_ms: f64,
    pub cpu_ms: f64,
    pub off_cpu_ms: f64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// The loop ran under `SCHED_BATCH` (`engine.idle_sched_batch`).
    pub sched_batch: bool,
    /// Spells in which another task held the loop's CPU for whole time
    /// slices, so that it neither yielded nor stayed under `SCHED_BATCH`
    /// (`runtime::idle::Contention`).
    pub contended_spells: u64,
    /// The longest time between two consecutive polls of the sockets the
    /// loop consumes, in µs: a preemption, or a pass that took that long.
    /// A socket's rcvbuf must hold what arrives meanwhile. None where not
    /// measured (RX lcores, whose loop a TSC read per poll would slow).
    pub longest_gap_us: Option<f64>,
}

impl ThreadSummary {
    pub fn of(t: &counters::ThreadStats) -> ThreadSummary {
        let (wall, cpu) = (t.wall_us.get(), t.cpu_us.get());
        ThreadSummary {
            wall_ms: wall as f64 / 1e3,
            cpu_ms: cpu as f64 / 1e3,
            // getrusage counts in µs, the wall clock in ns: a loop on its
            // CPU throughout can read a few µs more CPU than wall time.
            off_cpu_ms: wall.saturating_sub(cpu) as f64 / 1e3,
            voluntary_switches: t.voluntary.get(),
            involuntary_switches: t.involuntary.get(),
            sched_batch: t.sched_batch.get() != 0,
            contended_spells: t.contended.get(),
            longest_gap_us: match t.longest_gap_ns.get() {
                0 => None,
                ns => Some(ns as f64 / 1e3),
            },
        }
    }

    /// Preempted for a share of the loop worth a warning: switched out by
    /// the scheduler and off its CPU for 1% of the loop or more, in a loop
    /// that mostly did not sleep (fewer voluntary switches than imposed
    /// ones), so that the time off CPU is the preemptions'.
    pub fn preempted(&self) -> bool {
        self.involuntary_switches > 0
            && self.voluntary_switches < self.involuntary_switches
            && self.off_cpu_ms >= self.wall_ms / 100.0
    }

    /// One line for the exit summary.
    pub fn line(&self) -> String {
        format!(
            "on CPU {:.1} of {:.1} ms (off {:.1} ms), switched out {} times by the scheduler, {} voluntarily{}{}{}",
            self.cpu_ms,
            self.wall_ms,
            self.off_cpu_ms,
            self.involuntary_switches,
            self.voluntary_switches,
            match self.longest_gap_us {
                Some(g) => format!(", longest gap between polls {g:.1} µs"),
                None => String::new(),
            },
            if self.sched_batch { ", under SCHED_BATCH" } else { "" },
            match self.contended_spells {
                0 => String::new(),
                n => format!(", {n} spell(s) with another task holding its CPU (no yields, no SCHED_BATCH)"),
            }
        )
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LcoreSummary {
    pub lcore: u32,
    pub node: u32,
    pub polls: u64,
    pub idle_polls: u64,
    /// Sleeps through idle gaps (`engine.idle_sleep_us`).
    pub idle_sleeps: u64,
    /// Yields of the CPU between empty polls (`engine.idle_yield_us`).
    pub idle_yields: u64,
    pub busy_cycles: u64,
    pub queues: Vec<QueueSummary>,
    pub thread: ThreadSummary,
    /// `engine.rx_prefetch_alternate`: packets received with the prefetch
    /// ahead off and on, in equal shares of the run's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alternate: Option<AlternateSummary>,
    /// `run --alternate-floor`: each half's received and delivered
    /// datagrams (equal shares of the run's time) and their ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_alternate: Option<FloorAlternateSummary>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FloorAlternateSummary {
    /// The floor taking turns with the pipeline (`--alternate-floor`'s value).
    pub floor: String,
    pub floor_received: u64,
    pub floor_delivered: u64,
    pub pipeline_received: u64,
    pub pipeline_delivered: u64,
    /// pipeline_delivered / floor_delivered: the pipeline's rate against
    /// the floor's, measured in one run.
    pub delivered_ratio: f64,
    /// pipeline_received / floor_received.
    pub received_ratio: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AlternateSummary {
    pub off: u64,
    pub on: u64,
    /// on / off.
    pub ratio: f64,
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
    pub xstats: BTreeMap<String, u64>,
}

/// Per socket, RX-to-delivery-ring and RX-to-consumer latency, bpftrace style.
pub(crate) fn print_histograms(s: &Summary) {
    for k in &s.sockets {
        for (what, v) in [
            ("stage_us", &k.stage_latency_us),
            ("consumer_us", &k.consumer_latency_us),
        ] {
            if let Ok(b) = <[u64; latency::BUCKETS]>::try_from(v.as_slice()) {
                print!("{}", latency::render(&format!("@{}[{}]", what, k.name), &b));
            }
        }
    }
}

/// One warning line per lcore whose loop was preempted for 1% of its
/// time or more ([`ThreadSummary::preempted`]): drops that came while it
/// was off its CPU are the machine's doing, and the fix is the operator's.
pub fn preemption_warnings(s: &Summary) -> Vec<String> {
    let rx = s.lcores.iter().map(|l| (format!("lcore {} (rx)", l.lcore), &l.thread));
    let cons = s
        .consumers
        .iter()
        .map(|c| (format!("lcore {} (consumer)", c.lcore), &c.thread));
    let main = std::iter::once(("the main lcore".to_string(), &s.main_lcore));
    rx.chain(cons)
        .chain(main)
        .filter(|(_, t)| t.preempted())
        .map(|(who, t)| {
            format!(
                "{who} was off its CPU {:.1} ms of {:.1} ({:.1}%), switched out {} times by the scheduler: other tasks share its CPU, and while it is off its sockets fill (rcvbuf_full) or its RX queues overflow; give the lcores CPUs of their own (isolcpus=, or a cpuset other tasks stay out of)",
                t.off_cpu_ms,
                t.wall_ms,
                100.0 * t.off_cpu_ms / t.wall_ms.max(1e-9),
                t.involuntary_switches
            )
        })
        .collect()
}

pub(crate) fn print_summary(s: &Summary) {
    println!(
        "summary: {:.2} s, rx_packets {} rx_bytes {} ({} pps), strategy {}, hot-path allocations {}",
        s.seconds,
        s.rx_packets,
        s.rx_bytes,
        counters::human(s.rx_packets as f64 / s.seconds.max(1e-9)),
        s.strategy,
        s.hot_path_allocations
    );
    for l in &s.lcores {
        for q in &l.queues {
            println!(
                "  lcore {} node {} {}:{}: packets {} bytes {} bursts {}",
                l.lcore, l.node, q.port, q.queue, q.packets, q.bytes, q.bursts
            );
        }
        println!("  lcore {} (rx) thread: {}", l.lcore, l.thread.line());
    }
    for c in &s.consumers {
        println!("  lcore {} (consumer) thread: {}", c.lcore, c.thread.line());
    }
    println!("  main lcore thread: {}", s.main_lcore.line());
    let udp: Vec<String> = s
        .udp
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  udp: {}",
        if udp.is_empty() {
            "-".to_string()
        } else {
            udp.join(", ")
        }
    );
    if !s.exception_path.is_empty() {
        let x: Vec<String> = s
            .exception_path
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!("  exception path: {}", x.join(", "));
    }
    if s.floor_no_socket > 0 {
        println!(
            "  pipeline floor: {} frames matched no socket's port (freed)",
            s.floor_no_socket
        );
    }
    if s.demux_only_freed > 0 {
        println!(
            "  demux-only: {} demuxed datagrams freed after the lookup (not staged)",
            s.demux_only_freed
        );
    }
    for (fam, m) in &s.reasons {
        if !m.is_empty() {
            let r: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("  dropped before demux ({fam}): {}", r.join(", "));
        }
    }
    for k in &s.sockets {
        let d: Vec<String> = k
            .drops
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(r, v)| format!("{r} {v}"))
            .collect();
        println!(
            "  socket {} {} [{}]: offered {} delivered {} consumed {} drops {} | rmem high {} of {} | stage p50 {} us p99 {} us",
            k.name,
            k.local,
            k.handler,
            k.offered,
            k.delivered,
            k.consumed,
            if d.is_empty() { "0".to_string() } else { d.join(" ") },
            k.rmem_high_water,
            k.rcvbuf,
            k.stage_p50_us,
            k.stage_p99_us
        );
    }
    for p in &s.ports {
        println!(
            "  port {} ({}): ipackets {} imissed {} ierrors {} rx_nombuf {}",
            p.name, p.driver, p.ipackets, p.imissed, p.ierrors, p.rx_nombuf
        );
    }
    let r = &s.reassembly;
    if r.steered + r.steer_full > 0 {
        println!(
            "  fragment steering: {} to their owner lcore ({} taken, {} freed at exit), {} dropped (ring full)",
            r.steered, r.steer_taken, r.steer_freed_at_exit, r.steer_full
        );
    }
    if r.fragments > 0 {
        let ip = |k: &str| s.ip.get(k).copied().unwrap_or(0);
        println!(
            "  reassembly: {} fragments ({} merged, {} dropped, {} freed at exit), peak {} B; IPv4 {} ok {} failed ({} timeout, {} overlap); IPv6 {} ok {} failed ({} timeout, {} overlap)",
            r.fragments,
            r.merged,
            r.dropped,
            r.freed_at_exit,
            r.bytes_peak,
            ip("IpReasmOKs"),
            ip("IpReasmFails"),
            ip("IpReasmTimeout"),
            ip("IpReasmOverlaps"),
            ip("Ip6ReasmOKs"),
            ip("Ip6ReasmFails"),
            ip("Ip6ReasmTimeout"),
            ip("Ip6ReasmOverlaps"),
        );
    }
    {
        let ip = |k: &str| s.ip.get(k).copied().unwrap_or(0);
        if ip("IpFragOKs") + ip("IpFragFails") + ip("Ip6FragOKs") + ip("Ip6FragFails") > 0 {
            println!(
                "  fragmented sends: IPv4 {} ok ({} fragments) {} failed; IPv6 {} ok ({} fragments) {} failed",
                ip("IpFragOKs"),
                ip("IpFragCreates"),
                ip("IpFragFails"),
                ip("Ip6FragOKs"),
                ip("Ip6FragCreates"),
                ip("Ip6FragFails"),
            );
        }
    }
    let p = &s.rx_pool;
    println!(
        "  rx pool: free {} of {} (low-water {}, lowest {}): below low-water for {} ms, {} RX polls, {} episode(s); {} warning(s)",
        p.free, p.size, p.low_water, p.min_free, p.low_ms, p.low_polls, p.episodes, p.warnings
    );
    println!(
        "  dpdk memory: {} memzones, heap {} B in {} elements",
        s.memzones, s.heap_alloc_bytes, s.heap_alloc_count
    );
    let c = &s.small_cache;
    if c.enabled {
        println!(
            "  small cache: condensed {} busy {} too big {} bytes saved {}",
            c.condensed, c.busy, c.too_big, c.bytes_saved
        );
    }
    if let Some(t) = s.send.as_ref().filter(|t| t.accepted.iter().sum::<u64>() > 0) {
        let n = &t.neigh;
        println!(
            "  send_burst: accepted {:?} sent {:?} nic refused {:?} no buffer {:?} too big {:?} no route {:?}; neighbours: {} resolved, {} queued, {} released, {} discarded, {} expired, {} table full, {} solicits, {} from traffic ({} reports, {} dropped); {}",
            t.accepted, t.out_datagrams, t.tx_errors, t.no_buffer, t.too_big, t.no_route,
            n.resolved, n.queued, n.released, n.unres_discards, n.expired, n.table_full, n.solicits,
            n.from_traffic, t.heard_reported, t.heard_dropped,
            match t.serviced_by_lcore {
                Some(l) => format!("sent from RX lcore {l} (its task's)"),
                None => format!(
                    "main lcore naps {} ({} ended by a send)",
                    t.main_naps, t.main_naps_ended_by_send
                ),
            }
        );
    }
    println!(
        "  books: {}",
        if s.books_balanced {
            "balanced".to_string()
        } else {
            format!("NOT balanced: {}", s.problems.join("; "))
        }
    );
}

/// Removed sockets whose books are kept one row each; older ones are folded
/// into one aggregate row, so that socket churn (SIGHUP, the API) cannot grow
/// the engine's memory without bound (a row is about 1 KB on the heap: names,
/// drop maps and two histograms) while the books stay exact. Sixteen, not
/// more: a soak under heaptrack showed 64 rows filling ~85 KB over the first
/// half hour of churn, which read as a heap that never stops growing.
pub const REMOVED_ROWS: usize = 16;

/// What the removed rows' vector can hold without growing: the kept rows,
/// the aggregate, and the one `retire` pushes before it folds.
pub const REMOVED_CAPACITY: usize = REMOVED_ROWS + 2;

/// The aggregate row's name and id.
pub const FOLDED_NAME: &str = "(older removed sockets)";
pub const FOLDED_ID: u32 = u32::MAX;

/// Keeps the books of a socket that was just removed (see [`REMOVED_ROWS`]).
pub fn retire(rows: &mut Vec<SocketSummary>, s: SocketSummary) {
    rows.push(s);
    let folded = rows
        .first()
        .is_some_and(|r| r.id == FOLDED_ID && r.name == FOLDED_NAME);
    if rows.len() <= REMOVED_ROWS + usize::from(folded) {
        return;
    }
    // The oldest row that is not the aggregate.
    let oldest = rows.remove(usize::from(folded));
    if !folded {
        rows.insert(
            0,
            SocketSummary {
                name: FOLDED_NAME.to_string(),
                id: FOLDED_ID,
                local: "-".to_string(),
                handler: "-".to_string(),
                removed: true,
                ..SocketSummary::default()
            },
        );
    }
    if let Some(agg) = rows.first_mut() {
        fold(agg, oldest);
    }
}

/// Adds `b`'s books to `a`: counters and histograms summed, peaks kept.
fn fold(a: &mut SocketSummary, b: SocketSummary) {
    for (x, y) in [
        (&mut a.offered, b.offered),
        (&mut a.delivered, b.delivered),
        (&mut a.consumed, b.consumed),
        (&mut a.consumed_bytes, b.consumed_bytes),
        (&mut a.client_consumed, b.client_consumed),
        (&mut a.freed_at_close, b.freed_at_close),
        (&mut a.floor_delivered, b.floor_delivered),
        (&mut a.floor_ring_full, b.floor_ring_full),
        (&mut a.rmem, b.rmem),
        (&mut a.condensed, b.condensed),
        (&mut a.batches, b.batches),
        (&mut a.direct_batches, b.direct_batches),
        (
            &mut a.delivery_lock_acquisitions,
            b.delivery_lock_acquisitions,
        ),
        (&mut a.busylock_acquisitions, b.busylock_acquisitions),
        (&mut a.tx, b.tx),
        (&mut a.tx_errors, b.tx_errors),
        (&mut a.written, b.written),
        (&mut a.not_written, b.not_written),
        (&mut a.stage_latency_sum_us, b.stage_latency_sum_us),
        (&mut a.consumer_latency_sum_us, b.consumer_latency_sum_us),
    ] {
        *x = x.wrapping_add(y);
    }
    a.rmem_high_water = a.rmem_high_water.max(b.rmem_high_water);
    a.batch_max = a.batch_max.max(b.batch_max);
    a.rcvbuf = a.rcvbuf.max(b.rcvbuf);
    for (k, v) in b.drops {
        *a.drops.entry(k).or_default() += v;
    }
    if a.node_drops.len() < b.node_drops.len() {
        a.node_drops.resize(b.node_drops.len(), BTreeMap::new());
    }
    for (an, bn) in a.node_drops.iter_mut().zip(b.node_drops) {
        for (k, v) in bn {
            *an.entry(k).or_default() += v;
        }
    }
    for (ah, bh) in [
        (&mut a.stage_latency_us, b.stage_latency_us),
        (&mut a.consumer_latency_us, b.consumer_latency_us),
    ] {
        if ah.len() < bh.len() {
            ah.resize(bh.len(), 0);
        }
        for (x, y) in ah.iter_mut().zip(bh) {
            *x += y;
        }
    }
    let pct = |h: &[u64], p: f64| {
        let mut b = [0u64; latency::BUCKETS];
        for (x, y) in b.iter_mut().zip(h) {
            *x = *y;
        }
        latency::percentile(&b, p)
    };
    a.stage_p50_us = pct(&a.stage_latency_us, 50.0);
    a.stage_p99_us = pct(&a.stage_latency_us, 99.0);
    a.consumer_p50_us = pct(&a.consumer_latency_us, 50.0);
    a.consumer_p99_us = pct(&a.consumer_latency_us, 99.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u64) -> SocketSummary {
        let mut drops = BTreeMap::new();
        drops.insert("rcvbuf_full".to_string(), i);
        let mut h = vec![0u64; latency::BUCKETS];
        h[3] = i;
        SocketSummary {
            name: format!("s{i}"),
            id: i as u32,
            removed: true,
            offered: 3 * i,
            delivered: 2 * i,
            consumed: 2 * i,
            drops,
            node_drops: vec![BTreeMap::from([("rcvbuf_full".to_string(), i)])],
            rmem_high_water: i,
            stage_latency_us: h.clone(),
            consumer_latency_us: h,
            ..SocketSummary::default()
        }
    }

    #[test]
    fn removed_rows_stay_bounded_and_the_books_exact() {
        // As the engine makes it: sized once, so churn never reallocates it.
        let mut rows = Vec::with_capacity(REMOVED_CAPACITY);
        let cap = rows.capacity();
        let n = 1000u64;
        for i in 1..=n {
            retire(&mut rows, row(i));
            assert!(
                rows.len() <= REMOVED_ROWS + 1,
                "{} rows after {i}",
                rows.len()
            );
            assert_eq!(rows.capacity(), cap, "the rows' vector grew at {i}");
        }
        assert_eq!(rows.len(), REMOVED_ROWS + 1);
        assert_eq!(rows[0].name, FOLDED_NAME);
        assert_eq!(rows[0].id, FOLDED_ID);
        // The newest stay one row each, in order.
        let first_kept = n - REMOVED_ROWS as u64 + 1;
        assert_eq!(rows[1].name, format!("s{first_kept}"));
        assert_eq!(rows[REMOVED_ROWS].name, format!("s{n}"));
        // Every counter sums to what the removed sockets had.
        let total = n * (n + 1) / 2;
        let sum = |f: fn(&SocketSummary) -> u64| rows.iter().map(f).sum::<u64>();
        assert_eq!(sum(|r| r.offered), 3 * total);
        assert_eq!(sum(|r| r.delivered), 2 * total);
        assert_eq!(sum(|r| r.drops["rcvbuf_full"]), total);
        assert_eq!(sum(|r| r.node_drops[0]["rcvbuf_full"]), total);
        assert_eq!(sum(|r| r.stage_latency_us[3]), total);
        assert!(rows
            .iter()
            .all(|r| r.offered == r.delivered + r.drops["rcvbuf_full"]));
        assert_eq!(
            rows[0].rmem_high_water,
            first_kept - 1,
            "the peak of the folded rows"
        );
        assert_eq!(
            rows[0].stage_p50_us, 4,
            "percentiles of the merged histogram"
        );
    }

    #[test]
    fn few_removals_keep_one_row_each() {
        let mut rows = Vec::new();
        for i in 1..=REMOVED_ROWS as u64 {
            retire(&mut rows, row(i));
        }
        assert_eq!(rows.len(), REMOVED_ROWS);
        assert!(rows.iter().all(|r| r.name != FOLDED_NAME));
    }

    /// The longest gap is in the JSON in µs and in the thread's line; a loop
    /// that did not measure it (0 ns) has none.
    #[test]
    fn thread_line_names_the_longest_gap_when_measured() {
        let t = counters::ThreadStats::default();
        t.wall_us.set(3_000_000);
        t.cpu_us.set(2_990_000);
        assert_eq!(ThreadSummary::of(&t).longest_gap_us, None);
        assert!(!ThreadSummary::of(&t).line().contains("gap"));
        t.longest_gap_ns.set(412_500);
        let s = ThreadSummary::of(&t);
        assert_eq!(s.longest_gap_us, Some(412.5));
        assert!(s.line().contains("longest gap between polls 412.5 µs"), "{}", s.line());
    }
}
