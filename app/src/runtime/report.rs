//! The books gathered from the running engine: every counter of the
//! shared state read into a [`Summary`] (the `--stats-json` file,
//! telemetry replies, the nstat view and the exit printout are all made
//! from it), and the checks that every frame is in exactly one place.
use crate::parse::Family;
use std::collections::BTreeMap;

use dpdk_sys::Port;

use clap::ValueEnum as _;

use super::shared::{Floor, Mode, Shared, SocketEntry};
use crate::counters::UdpMib;
use crate::latency;
use crate::parse::Reason;
use crate::receive::accounting::DropReason;
use crate::summary::{
    ThreadSummary,
    ClientsSummary, ConsumerSummary, LcoreSummary, NodeSummary, PortSummary, QueueSummary, SmallCacheSummary,
    SocketSummary, Summary,
};

pub(crate) fn socket_summary(e: &SocketEntry, removed: bool) -> SocketSummary {
    let s = e.sock.stats();
    let c = &e.sock.consumer;
    let st = e.sock.stage_latency.snapshot();
    let cl = e.sock.consumer_latency.snapshot();
    let (floor_delivered, floor_ring_full) = (e.sock.floor.delivered(), e.sock.floor.ring_full());
    SocketSummary {
        name: e.sock.name().to_string(),
        multicast: e.sock.multicast.load(std::sync::atomic::Ordering::Relaxed),
        id: e.sock.id,
        local: e.sock.conf.local.to_string(),
        handler: format!("{:?}", e.sock.handler()).to_lowercase(),
        removed,
        offered: s.offered + floor_delivered + floor_ring_full,
        delivered: s.delivered + floor_delivered,
        consumed: c.consumed.get() + e.sock.client.consumed.get(),
        consumed_bytes: c.bytes.get() + e.sock.client.bytes.get(),
        client_consumed: e.sock.client.consumed.get(),
        reclaimed_from_client: e.sock.client.reclaimed.get(),
        lost_in_client_free: e.sock.client.lost_in_free.get(),
        freed_at_close: c.freed_at_close.get(),
        floor_delivered,
        floor_ring_full,
        drops: DropReason::ALL
            .iter()
            .map(|r| {
                let floor = if *r == DropReason::RingFull {
                    floor_ring_full
                } else {
                    0
                };
                (r.as_str().to_string(), s.drop(*r) + floor)
            })
            .collect(),
        node_drops: (0..e.sock.rx.nodes())
            .map(|n| {
                DropReason::ALL
                    .iter()
                    .filter_map(|r| {
                        e.sock
                            .rx
                            .node_drops(n, *r)
                            .filter(|v| *v > 0)
                            .map(|v| (r.as_str().to_string(), v))
                    })
                    .collect()
            })
            .collect(),
        rcvbuf: e.sock.rx.rcvbuf() as u64,
        rmem: s.rmem as u64,
        rmem_high_water: s.rmem_high_water,
        condensed: s.condensed,
        batches: s.batches,
        batch_max: s.batch_max,
        direct_batches: s.direct_batches,
        delivery_lock_acquisitions: s.delivery_lock_acquisitions,
        busylock_acquisitions: s.busylock_acquisitions,
        tx: c.tx.get(),
        tx_errors: c.tx_errors.get(),
        written: c.written.get(),
        not_written: c.not_written.get(),
        stage_latency_us: st.to_vec(),
        consumer_latency_us: cl.to_vec(),
        stage_latency_sum_us: e.sock.stage_latency.sum_us(),
        consumer_latency_sum_us: e.sock.consumer_latency.sum_us(),
        stage_p50_us: latency::percentile(&st, 50.0),
        stage_p99_us: latency::percentile(&st, 99.0),
        consumer_p50_us: latency::percentile(&cl, 50.0),
        consumer_p99_us: latency::percentile(&cl, 99.0),
    }
}

/// Snapshot of every counter (callable while running: telemetry, stats lines).
pub fn snapshot(shared: &Shared, seconds: f64) -> Summary {
    summarize_inner(shared, &[], &[], seconds, Vec::new(), false)
}

pub(crate) fn summarize(
    shared: &Shared,
    ports: &[Port],
    names: &[String],
    seconds: f64,
    problems: Vec<String>,
) -> Summary {
    summarize_inner(shared, ports, names, seconds, problems, true)
}

fn summarize_inner(
    shared: &Shared,
    ports: &[Port],
    names: &[String],
    seconds: f64,
    mut problems: Vec<String>,
    at_exit: bool,
) -> Summary {
    let lcores: Vec<LcoreSummary> = shared
        .rx
        .iter()
        .map(|l| LcoreSummary {
            lcore: l.lcore,
            node: l.node,
            polls: l.lstats.polls.get(),
            idle_polls: l.lstats.idle_polls.get(),
            idle_sleeps: l.lstats.idle_sleeps.get(),
            idle_yields: l.lstats.idle_yields.get(),
            busy_cycles: l.lstats.busy_cycles.get(),
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
            thread: ThreadSummary::of(&l.thread),
            alternate: shared.prefetch_ahead.1.then(|| {
                let [off, on] = [l.lstats.alternate[0].get(), l.lstats.alternate[1].get()];
                crate::summary::AlternateSummary {
                    off,
                    on,
                    ratio: on as f64 / off.max(1) as f64,
                }
            }),
            floor_alternate: super::bench::alternate::floor_of(shared.mode).map(|f| {
                let [fr, pr, fd, pd] = std::array::from_fn(|i| l.lstats.floor_alternate[i].get());
                crate::summary::FloorAlternateSummary {
                    floor: f.to_possible_value().map_or_else(|| format!("{f:?}"), |v| v.get_name().to_string()),
                    floor_received: fr,
                    floor_delivered: fd,
                    pipeline_received: pr,
                    pipeline_delivered: pd,
                    delivered_ratio: pd as f64 / fd.max(1) as f64,
                    received_ratio: pr as f64 / fr.max(1) as f64,
                }
            }),
        })
        .collect();
    let rx_packets: u64 = lcores
        .iter()
        .flat_map(|l| &l.queues)
        .map(|q| q.packets)
        .sum();
    let rx_bytes = lcores.iter().flat_map(|l| &l.queues).map(|q| q.bytes).sum();

    // Sum the per-lcore MIBs.
    let sum = |f: &dyn Fn(&UdpMib) -> u64| -> u64 { shared.rx.iter().map(|l| f(&l.mib)).sum() };
    let mut reasons: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (fi, fname) in ["v4", "v6", "other"].iter().enumerate() {
        let m = reasons.entry(fname.to_string()).or_default();
        for r in Reason::ALL {
            let v = sum(&|mib| mib.errors[fi][r.index()].get());
            if v > 0 {
                m.insert(r.name().to_string(), v);
            }
        }
    }
    let mut sockets: Vec<SocketSummary> = shared
        .sockets
        .load()
        .iter()
        .map(|e| socket_summary(e, false))
        .collect();
    sockets.extend(shared.removed.lock().expect("removed lock").iter().cloned());

    let mut udp = BTreeMap::new();
    for (fi, pre) in [(0usize, "Udp"), (1, "Udp6")] {
        let in_dg = sum(&|m| m.in_datagrams[fi].get());
        let no_ports = sum(&|m| m.no_ports[fi].get());
        let csum: u64 = [Reason::UdpChecksum, Reason::Udp6ZeroChecksum]
            .iter()
            .map(|r| sum(&|m| m.errors[fi][r.index()].get()))
            .sum();
        let udp_parse_errors: u64 = Reason::ALL
            .iter()
            .filter(|r| r.is_udp_error())
            .map(|r| sum(&|m| m.errors[fi][r.index()].get()))
            .sum();
        let fam_sockets = sockets
            .iter()
            .filter(|s| s.local.starts_with('[') == (fi == 1));
        let (mut rcvbuf, mut mem) = (0u64, 0u64);
        for s in fam_sockets {
            // The pipeline floor's ring-full drops are not UDP MIB events (it does not demux).
            rcvbuf += s
                .drops
                .get(DropReason::RcvbufFull.as_str())
                .copied()
                .unwrap_or(0)
                + s.drops
                    .get(DropReason::RingFull.as_str())
                    .copied()
                    .unwrap_or(0)
                - s.floor_ring_full;
            mem += s
                .drops
                .get(DropReason::RcvbufFullAtDrain.as_str())
                .copied()
                .unwrap_or(0);
        }
        // A member that got no copy (clone pool empty) is the kernel's
        // failed skb_clone: RcvbufErrors and InErrors.
        let nobufs = sum(&|m| m.mcast_nobufs[fi].get());
        let rcvbuf = rcvbuf + nobufs;
        udp.insert(format!("{pre}InDatagrams"), in_dg);
        udp.insert(format!("{pre}NoPorts"), no_ports);
        udp.insert(format!("{pre}IgnoredMulti"), sum(&|m| m.ignored_multi[fi].get()));
        udp.insert(format!("{pre}InErrors"), udp_parse_errors + rcvbuf + mem);
        udp.insert(format!("{pre}InCsumErrors"), csum);
        udp.insert(format!("{pre}RcvbufErrors"), rcvbuf);
        udp.insert(format!("{pre}MemErrors"), mem);
    }
    let send = shared.send.as_ref().map(|tx| crate::send::SendSummary::of(tx, &shared.rx));
    // UdpOutDatagrams / UdpSndbufErrors: what send_burst handed to the NIC
    // or lost for want of a buffer, plus the echo handlers' replies (sent
    // from consumer lcores or the main lcore), by the socket's family.
    let mut out = [(0u64, 0u64); 2];
    if let Some(s) = &send {
        for (fi, o) in out.iter_mut().enumerate() {
            *o = (s.out_datagrams[fi], s.no_buffer[fi] + s.tx_errors[fi]);
        }
    }
    for s in &sockets {
        let fi = usize::from(s.local.starts_with('['));
        out[fi].0 += s.tx;
        out[fi].1 += s.tx_errors;
    }
    for (pre, (o, e)) in ["Udp", "Udp6"].iter().zip(out) {
        udp.insert(format!("{pre}OutDatagrams"), o);
        udp.insert(format!("{pre}SndbufErrors"), e);
    }
    let lookups = sum(&|m| m.lookups.get());
    let demux_only_freed = sum(&|m| m.demux_only_freed.get());
    let floor_no_socket: u64 = shared
        .rx
        .iter()
        .map(|l| l.lstats.floor_no_socket.get())
        .sum();
    let control = sum(&|m| m.control.get());
    let mut responder = BTreeMap::new();
    for l in &shared.rx {
        l.control.stats.add_to(&mut responder);
    }
    if at_exit {
        let taken: u64 = shared.rx.iter().map(|l| l.control.stats.taken()).sum();
        if taken != control {
            problems.push(format!(
                "control path took {control} frames but accounted for {taken}"
            ));
        }
    }

    let exception = sum(&|m| m.exception.get());
    let mut exception_path = BTreeMap::new();
    if let Some(x) = &shared.exception {
        let lsum = |f: &dyn Fn(&crate::exception::ToKernelStats) -> u64| -> u64 {
            shared.rx.iter().map(|l| f(&l.exception.stats)).sum()
        };
        for (k, v) in [
            ("to_kernel", lsum(&|s| s.to_kernel.get())),
            ("rate_limited", lsum(&|s| s.rate_limited.get())),
            ("tx_errors", lsum(&|s| s.tx_errors.get())),
            ("unbound_udp", lsum(&|s| s.unbound_udp.get())),
            ("from_kernel", x.from.sent.get()),
            ("from_kernel_tx_errors", x.from.tx_errors.get()),
        ] {
            exception_path.insert(k.to_string(), v);
        }
    }
    if at_exit {
        let taken: u64 = shared.rx.iter().map(|l| l.exception.stats.taken()).sum();
        if taken != exception {
            problems.push(format!(
                "exception path took {exception} frames but accounted for {taken}"
            ));
        }
    }
    let exception_udp: u64 = shared
        .rx
        .iter()
        .map(|l| l.exception.stats.unbound_udp.get())
        .sum();

    // Per-node drops: the sum over sockets (removed ones included) of each stage node's counters.
    let mut nodes: Vec<NodeSummary> = Vec::new();
    for l in &shared.rx {
        if !nodes.iter().any(|n| n.index == l.node_index) {
            nodes.push(NodeSummary {
                index: l.node_index,
                node: l.node,
                drops: BTreeMap::new(),
            });
        }
    }
    nodes.sort_by_key(|n| n.index);
    for s in &sockets {
        for (i, d) in s.node_drops.iter().enumerate() {
            if let Some(n) = nodes.iter_mut().find(|n| n.index == i) {
                for (r, v) in d {
                    *n.drops.entry(r.clone()).or_default() += v;
                }
            }
        }
    }
    let consumers: Vec<ConsumerSummary> = shared
        .consumers
        .iter()
        .map(|c| ConsumerSummary {
            lcore: c.lcore,
            polls: c.stats.polls.get(),
            idle_polls: c.stats.idle_polls.get(),
            datagrams: c.stats.datagrams.get(),
            thread: ThreadSummary::of(&c.thread),
        })
        .collect();

    let port_summaries: Vec<PortSummary> = ports
        .iter()
        .zip(names)
        .map(|(p, n)| {
            let s = p.stats();
            PortSummary {
                name: n.clone(),
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

    // Reassembly: the kernel's Ip/Ip6 counters and the fragments' books.
    let rsum = |f: &dyn Fn(&crate::reasm::ReasmStats) -> u64| -> u64 {
        shared.rx.iter().map(|l| f(&l.reasm_stats)).sum()
    };
    let mut ip = BTreeMap::new();
    for (fi, pre) in [(0usize, "Ip"), (1, "Ip6")] {
        ip.insert(format!("{pre}ReasmReqds"), rsum(&|r| r.reqds[fi].get()));
        ip.insert(format!("{pre}ReasmOKs"), rsum(&|r| r.oks[fi].get()));
        ip.insert(format!("{pre}ReasmFails"), rsum(&|r| r.fails[fi].get()));
        ip.insert(format!("{pre}ReasmTimeout"), rsum(&|r| r.timeout[fi].get()));
        ip.insert(format!("{pre}ReasmOverlaps"), rsum(&|r| r.overlaps[fi].get()));
        ip.insert(format!("{pre}InMcastPkts"), sum(&|m| m.in_mcast[fi].get()));
        // Fragmenting what is sent (echo replies, `send_burst`).
        let fam = if fi == 0 { Family::V4 } else { Family::V6 };
        let (oks, creates, fails) = shared.frag_out.read(fam);
        ip.insert(format!("{pre}FragOKs"), oks);
        ip.insert(format!("{pre}FragCreates"), creates);
        ip.insert(format!("{pre}FragFails"), fails);
    }
    let reassembly = crate::summary::ReassemblySummary {
        fragments: rsum(&|r| r.reqds[0].get() + r.reqds[1].get()),
        merged: rsum(&|r| r.frags_merged[0].get() + r.frags_merged[1].get()),
        dropped: rsum(&|r| r.frags_dropped[0].get() + r.frags_dropped[1].get()),
        held: rsum(&|r| r.frags_held.get()),
        freed_at_exit: rsum(&|r| r.cleared.get()),
        bytes_peak: shared
            .rx
            .iter()
            .map(|l| l.reasm_stats.bytes_peak.get())
            .max()
            .unwrap_or(0),
        steered: shared.rx.iter().map(|l| l.steer.steered.get()).sum(),
        steer_full: shared.rx.iter().map(|l| l.steer.full.get()).sum(),
        steer_taken: shared.rx.iter().map(|l| l.steer.taken.get()).sum(),
        steer_freed_at_exit: shared.rx.iter().map(|l| l.steer.freed_at_exit.get()).sum(),
    };
    let reasm_oks = ip["IpReasmOKs"] + ip["Ip6ReasmOKs"];
    let mst = &shared.mcast.stats;
    let multicast: BTreeMap<String, u64> = [
        ("copies", sum(&|m| m.mcast_copies[0].get() + m.mcast_copies[1].get())),
        ("nobufs", sum(&|m| m.mcast_nobufs[0].get() + m.mcast_nobufs[1].get())),
        ("unjoined", sum(&|m| m.mcast_unjoined[0].get() + m.mcast_unjoined[1].get())),
        ("queries", sum(&|m| m.mcast_queries.get())),
        (
            "queries_lost",
            mst.queries_lost.load(std::sync::atomic::Ordering::Relaxed),
        ),
        ("queries_answered", mst.queries_answered.get()),
        ("igmp_reports", mst.igmp_reports.get()),
        ("mld_reports", mst.mld_reports.get()),
        ("report_errors", mst.report_errors.get()),
        ("groups", shared.mcast.joined.load().len() as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    // The books: every frame in exactly one place. A fragment the
    // reassembler took is in its books (merged, dropped or held); each
    // reassembled datagram is classified once by the MIB like any frame.
    // A fragment steered to its owner lcore is classified there; one its
    // ring refused, or left in the ring at exit, was dropped.
    let classified: u64 = shared.rx.iter().map(|l| l.mib.total()).sum::<u64>() - reasm_oks
        + reassembly.fragments
        + reassembly.steer_full
        + reassembly.steer_freed_at_exit;
    if at_exit {
        // The bare loop and the floor free every frame unparsed: their books
        // are rx = freed.
        // What the pipeline floor put in rings (or found full) did not go through demux.
        let floor_offered: u64 = sockets
            .iter()
            .map(|s| s.floor_delivered + s.floor_ring_full)
            .sum();
        // `--alternate-floor`: the pipeline's turns classified their frames,
        // the floor's put theirs in rings or freed them without a socket.
        let floor_took = match shared.mode {
            Mode::Alternate(_) => floor_offered + floor_no_socket,
            _ => 0,
        };
        if classified + floor_took != rx_packets && (shared.mode.classifies() || classified != 0) {
            problems.push(if floor_took != 0 {
                format!("received {rx_packets} but classified {classified} and the floor's turns took {floor_took}")
            } else {
                format!("received {rx_packets} but classified {classified}")
            });
        }
        let in_dg = udp["UdpInDatagrams"] + udp["Udp6InDatagrams"];
        let offered: u64 = sockets.iter().map(|s| s.offered).sum::<u64>() - floor_offered;
        // Fan-out: one datagram, several copies, each offered to its socket.
        let copies = sum(&|m| m.mcast_copies[0].get() + m.mcast_copies[1].get());
        let sock_mcast: u64 = sockets.iter().map(|s| s.multicast).sum();
        if copies != sock_mcast {
            problems.push(format!(
                "fanned out {copies} multicast copies but sockets counted {sock_mcast}"
            ));
        }
        let in_mcast = ip["IpInMcastPkts"] + ip["Ip6InMcastPkts"];
        let ignored = udp["UdpIgnoredMulti"] + udp["Udp6IgnoredMulti"];
        // Every fanned-out datagram has one copy at least (the original).
        if copies < in_mcast - ignored.min(in_mcast) {
            problems.push(format!(
                "{in_mcast} multicast datagrams ({ignored} ignored) but only {copies} copies"
            ));
        }
        if shared.mode.is_pipeline_floor() {
            if rx_packets != floor_offered + floor_no_socket {
                problems.push(format!(
                    "pipeline floor: received {rx_packets} but put {floor_offered} in rings (or found them full) and freed {floor_no_socket} without a socket"
                ));
            }
        } else if shared.mode == Mode::Floor(Floor::RteHash) {
            // Its misses, counted among the frames received.
            if floor_offered != 0 || floor_no_socket > rx_packets {
                problems.push(format!(
                    "--floor rte-hash: {floor_offered} frames put in rings, {floor_no_socket} misses of {rx_packets} received"
                ));
            }
        } else if floor_offered + floor_no_socket != 0 && !matches!(shared.mode, Mode::Alternate(_)) {
            problems.push(format!(
                "{floor_offered} frames went through the pipeline floor outside --floor pipeline"
            ));
        }
        if in_dg + copies != offered + demux_only_freed {
            problems.push(format!(
                "demuxed {in_dg} (+ {copies} multicast copies) but sockets were offered {offered} (+ {demux_only_freed} freed by --demux-only)"
            ));
        }
        let valid = lookups;
        // Valid UDP no socket took is NoPorts, or the kernel's (`unbound_udp`).
        let unjoined = sum(&|m| m.mcast_unjoined[0].get() + m.mcast_unjoined[1].get());
        let expect_lookups =
            in_dg + udp["UdpNoPorts"] + udp["Udp6NoPorts"] + exception_udp + in_mcast + unjoined;
        if valid != expect_lookups {
            problems.push(format!(
                "{valid} lookups for {expect_lookups} valid datagrams (must be one each)"
            ));
        }
        for s in &sockets {
            let drops: u64 = s.drops.values().sum();
            if s.offered != s.delivered + drops {
                problems.push(format!(
                    "socket {}: offered {} != delivered {} + dropped {drops}",
                    s.name, s.offered, s.delivered
                ));
            }
            if s.delivered != s.consumed + s.freed_at_close {
                problems.push(format!(
                    "socket {}: delivered {} != consumed {} + freed at close {}",
                    s.name, s.delivered, s.consumed, s.freed_at_close
                ));
            }
            if s.rmem != 0 {
                problems.push(format!(
                    "socket {}: {} bytes still accounted at exit",
                    s.name, s.rmem
                ));
            }
        }
        let r = &reassembly;
        if r.fragments != r.merged + r.dropped + r.held {
            problems.push(format!(
                "reassembly took {} fragments but merged {}, dropped {} and holds {}",
                r.fragments, r.merged, r.dropped, r.held
            ));
        }
        if r.held != 0 {
            problems.push(format!("reassembly still holds {} fragments", r.held));
        }
        if r.steered != r.steer_taken + r.steer_freed_at_exit {
            problems.push(format!(
                "steered {} fragments to their owner lcores but they took {} and {} were freed at exit",
                r.steered, r.steer_taken, r.steer_freed_at_exit
            ));
        }
        if let Some(s) = send.as_ref().filter(|s| !s.balanced()) {
            problems.push(format!("send_burst books do not balance: {s:?}"));
        }
        if rx_packets > 0 && !shared.sockets.load().is_empty() {
            // Every stage and ring is empty (checked above by drain_closed / free_ring).
        }
    }
    let heap = dpdk_sys::memory::heap_stats().unwrap_or_default();
    Summary {
        seconds,
        strategy: shared.strategy.as_str().to_string(),
        rx_packets,
        rx_bytes,
        hot_path_allocations: super::alloc_guard::hot_allocations(),
        udp,
        reasons,
        lookups,
        demux_only_freed,
        floor_no_socket,
        control,
        responder,
        exception,
        exception_path,
        sockets,
        nodes,
        lcores,
        consumers,
        main_lcore: ThreadSummary::of(&shared.main_thread),
        ports: port_summaries,
        small_cache: SmallCacheSummary {
            enabled: shared
                .rx
                .iter()
                .any(|l| l.small.lock().map(|c| c.is_some()).unwrap_or(false))
                || shared
                    .rx
                    .iter()
                    .any(|l| l.cache_stats.condensed.get() + l.cache_stats.busy.get() > 0),
            condensed: shared
                .rx
                .iter()
                .map(|l| l.cache_stats.condensed.get())
                .sum(),
            busy: shared.rx.iter().map(|l| l.cache_stats.busy.get()).sum(),
            too_big: shared.rx.iter().map(|l| l.cache_stats.too_big.get()).sum(),
            bytes_saved: shared
                .rx
                .iter()
                .map(|l| l.cache_stats.bytes_saved.get())
                .sum(),
        },
        ip,
        reassembly,
        multicast,
        pools: Vec::new(),
        clients: ClientsSummary {
            open: shared.clients.open.load(std::sync::atomic::Ordering::Relaxed) as u64,
            reaped: shared.clients.reaped.load(std::sync::atomic::Ordering::Relaxed),
            reclaimed: shared.clients.reclaimed.load(std::sync::atomic::Ordering::Relaxed),
            lost_in_free: shared
                .clients
                .lost_in_free
                .load(std::sync::atomic::Ordering::Relaxed),
            attached: shared
                .clients
                .attached
                .lock()
                .map(|v| v.iter().filter(|a| a.dead.is_none()).count() as u64)
                .unwrap_or(0),
            cache_flushed: shared
                .clients
                .cache_flushed
                .load(std::sync::atomic::Ordering::Relaxed),
            cache_discarded: shared
                .clients
                .cache_discarded
                .load(std::sync::atomic::Ordering::Relaxed),
        },
        peak_rss_kb: 0,
        pool_avail_samples: Vec::new(),
        rx_pool: shared.pool_watch.summary(),
        memzones: dpdk_sys::memory::memzone_count().unwrap_or(0),
        heap_alloc_bytes: heap.alloc_bytes,
        heap_alloc_count: heap.alloc_count,
        send,
        books_balanced: problems.is_empty(),
        problems,
    }
}
