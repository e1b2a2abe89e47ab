//! The `nstat` view of the counters: one `name value rate` line each, in
//! iproute2's `nstat -a` layout (`%-32s%-16llu%6.1f`), so operators can read
//! and diff them the way they read the kernel's.
//!
//! The kernel's names are used verbatim where one exists (`UdpInDatagrams`,
//! `Udp6RcvbufErrors` ...); the engine's own counters carry a `UdpDemux`
//! prefix, and per-object counters name their object (`UdpDemuxSock:dns4:Delivered`).
//!
//! An output format of [`Summary`]: the live counter cells are in
//! `crate::counters`.
use std::fmt::Write as _;

use crate::summary::Summary;

/// How `run` prints its interval lines and its final counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    /// One human-readable line per interval, a summary block at exit.
    #[default]
    Text,
    /// `nstat`-style `name value rate` lines (non-zero counters only, like `nstat`).
    Nstat,
}

/// A flat, ordered list of named counters.
pub type Counters = Vec<(String, u64)>;

fn camel(s: &str) -> String {
    // "rcvbuf_full" -> "RcvbufFull": the kernel MIB spelling.
    s.split(['_', '-', '.'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// Every counter of a summary under its nstat name: kernel MIB first, then
/// the engine's totals, parse drops, sockets, nodes, lcores, consumers, ports.
pub fn counters(s: &Summary) -> Counters {
    let mut out: Counters = Vec::new();
    // Kernel order: the Udp set, then Udp6 (BTreeMap order puts Udp6 first).
    for pre in ["Udp", "Udp6"] {
        for name in [
            "InDatagrams",
            "NoPorts",
            "InErrors",
            "RcvbufErrors",
            "InCsumErrors",
            "MemErrors",
            "OutDatagrams",
            "SndbufErrors",
            "IgnoredMulti",
        ] {
            let k = format!("{pre}{name}");
            if let Some(v) = s.udp.get(&k) {
                out.push((k, *v));
            }
        }
    }
    // The IP MIB's multicast, reassembly and fragmentation counters
    // (kernel names, Ip then Ip6).
    for pre in ["Ip", "Ip6"] {
        for name in [
            "InMcastPkts",
            "ReasmReqds",
            "ReasmOKs",
            "ReasmFails",
            "ReasmTimeout",
            "ReasmOverlaps",
            "FragOKs",
            "FragCreates",
            "FragFails",
        ] {
            let k = format!("{pre}{name}");
            if let Some(v) = s.ip.get(&k) {
                out.push((k, *v));
            }
        }
    }
    // Fragments steered between RX lcores (`steer`).
    for (name, v) in [
        ("UdpDemuxFragSteered", s.reassembly.steered),
        ("UdpDemuxFragSteerFull", s.reassembly.steer_full),
    ] {
        out.push((name.to_string(), v));
    }
    if let Some(t) = &s.send {
        let n = &t.neigh;
        for (name, v) in [
            ("UdpDemuxSendAccepted", t.accepted.iter().sum::<u64>()),
            ("UdpDemuxSendTooBig", t.too_big.iter().sum()),
            ("UdpDemuxSendNoRoutes", t.no_route.iter().sum()),
            ("UdpDemuxSendFreedAtStop", t.freed_at_stop),
            ("UdpDemuxSendClientRequests", t.client_requests),
            ("UdpDemuxSendBadRequests", t.bad_requests),
            ("UdpDemuxSendClientFreed", t.client_freed),
            ("UdpDemuxNeighSolicits", t.solicits_sent),
            ("UdpDemuxNeighSolicitErrors", t.solicits_failed),
            ("UdpDemuxNeighResolved", n.resolved),
            ("UdpDemuxNeighQueued", n.queued),
            ("UdpDemuxNeighReleased", n.released),
            ("UdpDemuxNeighUnresolvedDiscards", n.unres_discards),
            ("UdpDemuxNeighExpired", n.expired),
            ("UdpDemuxNeighTableFull", n.table_full),
            ("UdpDemuxNeighFailed", n.failed),
            ("UdpDemuxNeighEntries", n.entries),
            ("UdpDemuxNeighFromTraffic", n.from_traffic),
            ("UdpDemuxNeighPermanent", n.permanent),
            ("UdpDemuxNeighHeardReports", t.heard_reported),
            ("UdpDemuxNeighHeardDropped", t.heard_dropped),
            ("UdpDemuxNeighHeardIgnored", t.heard_ignored),
            ("UdpDemuxNeighHeardSuppressed", t.heard_suppressed),
            ("UdpDemuxMainNaps", t.main_naps),
            ("UdpDemuxMainNapsEndedBySend", t.main_naps_ended_by_send),
        ] {
            out.push((name.into(), v));
        }
    }
    out.push(("UdpDemuxRxPackets".into(), s.rx_packets));
    out.push(("UdpDemuxRxBytes".into(), s.rx_bytes));
    out.push(("UdpDemuxLookups".into(), s.lookups));
    out.push(("UdpDemuxControl".into(), s.control));
    out.push(("UdpDemuxException".into(), s.exception));
    for (k, v) in &s.exception_path {
        // to_kernel -> UdpDemuxExceptionToKernel, as nstat names go.
        let camel: String = k
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect();
        out.push((format!("UdpDemuxException{camel}"), *v));
    }
    out.push(("UdpDemuxHotPathAllocations".into(), s.hot_path_allocations));
    let p = &s.rx_pool;
    for (name, v) in [
        ("UdpDemuxPoolSize", p.size),
        ("UdpDemuxPoolFree", p.free),
        ("UdpDemuxPoolLowWater", p.low_water),
        ("UdpDemuxPoolMinFree", p.min_free),
        ("UdpDemuxPoolLowPolls", p.low_polls),
        ("UdpDemuxPoolLowMs", p.low_ms),
        ("UdpDemuxPoolLowEpisodes", p.episodes),
        ("UdpDemuxPoolWarnings", p.warnings),
        ("UdpDemuxMemzones", s.memzones),
        ("UdpDemuxHeapAllocBytes", s.heap_alloc_bytes),
    ] {
        out.push((name.into(), v));
    }
    for (fam, m) in &s.reasons {
        for (r, v) in m {
            out.push((format!("UdpDemuxParse{}{}", camel(fam), camel(r)), *v));
        }
    }
    for (k, v) in &s.multicast {
        out.push((format!("UdpDemuxMcast{}", camel(k)), *v));
    }
    for k in &s.sockets {
        let p = format!("UdpDemuxSock:{}:", k.name);
        for (name, v) in [
            ("Offered", k.offered),
            ("Delivered", k.delivered),
            ("Consumed", k.consumed),
            ("ConsumedBytes", k.consumed_bytes),
            ("FreedAtClose", k.freed_at_close),
            ("Rmem", k.rmem),
            ("RmemHighWater", k.rmem_high_water),
            ("Condensed", k.condensed),
            ("Batches", k.batches),
            ("Multicast", k.multicast),
        ] {
            out.push((format!("{p}{name}"), v));
        }
        for (r, v) in &k.drops {
            out.push((format!("{p}Drop{}", camel(r)), *v));
        }
    }
    for n in &s.nodes {
        for (r, v) in &n.drops {
            out.push((format!("UdpDemuxNode:{}:Drop{}", n.node, camel(r)), *v));
        }
    }
    for l in &s.lcores {
        let p = format!("UdpDemuxLcore:{}:", l.lcore);
        out.push((format!("{p}Polls"), l.polls));
        out.push((format!("{p}IdlePolls"), l.idle_polls));
        out.push((format!("{p}IdleSleeps"), l.idle_sleeps));
        out.push((format!("{p}IdleYields"), l.idle_yields));
        out.push((
            format!("{p}Packets"),
            l.queues.iter().map(|q| q.packets).sum(),
        ));
        out.push((
            format!("{p}Bursts"),
            l.queues.iter().map(|q| q.bursts).sum(),
        ));
    }
    for c in &s.consumers {
        let p = format!("UdpDemuxConsumer:{}:", c.lcore);
        out.push((format!("{p}Polls"), c.polls));
        out.push((format!("{p}IdlePolls"), c.idle_polls));
        out.push((format!("{p}Datagrams"), c.datagrams));
    }
    for port in &s.ports {
        let p = format!("UdpDemuxPort:{}:", port.name);
        for (name, v) in [
            ("Ipackets", port.ipackets),
            ("Ibytes", port.ibytes),
            ("Imissed", port.imissed),
            ("Ierrors", port.ierrors),
            ("RxNombuf", port.rx_nombuf),
        ] {
            out.push((format!("{p}{name}"), v));
        }
        for (x, v) in &port.xstats {
            out.push((format!("{p}{x}"), *v));
        }
    }
    out
}

/// The nstat text: a `#udpdemux` header, then one line per non-zero counter
/// (like `nstat`, which hides zeros unless `-z`). `rate` is the increase
/// since `before` (same name) per second of `secs`; without `before`, the
/// average over `secs`.
pub fn render(now: &Counters, before: Option<&Counters>, secs: f64) -> String {
    let mut out = String::from("#udpdemux\n");
    for (name, v) in now {
        if *v == 0 {
            continue;
        }
        let base = before
            .and_then(|b| b.iter().find(|(n, _)| n == name))
            .map(|(_, v)| *v)
            .unwrap_or(0);
        let rate = crate::counters::rate(*v, base, secs);
        // nstat's columns; a name of 32+ chars keeps one space so the value stays separable.
        let sep = if name.len() >= 32 { " " } else { "" };
        let _ = writeln!(out, "{name:<32}{sep}{v:<16}{rate:6.1}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_iproute2_nstat() {
        // `nstat -a` prints "IpInReceives                    6451               0.0".
        let now = vec![
            ("IpInReceives".to_string(), 6451u64),
            ("Zero".to_string(), 0),
        ];
        let r = render(&now, Some(&now), 1.0);
        assert_eq!(
            r,
            "#udpdemux\nIpInReceives                    6451               0.0\n"
        );
    }

    #[test]
    fn long_names_stay_separated_from_their_value() {
        let now = vec![("UdpDemuxSock:echo4:ConsumedBytes".to_string(), 19744u64)];
        let line = render(&now, None, 1.0).lines().nth(1).unwrap().to_string();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            f,
            ["UdpDemuxSock:echo4:ConsumedBytes", "19744", "19744.0"],
            "{line}"
        );
    }

    #[test]
    fn rate_is_delta_per_second_or_average() {
        let before = vec![("UdpInDatagrams".to_string(), 100u64)];
        let now = vec![("UdpInDatagrams".to_string(), 400u64)];
        let r = render(&now, Some(&before), 2.0);
        assert!(r.lines().nth(1).unwrap().ends_with(" 150.0"), "{r}");
        let r = render(&now, None, 4.0);
        assert!(r.lines().nth(1).unwrap().ends_with(" 100.0"), "{r}");
    }

    #[test]
    fn camel_case_of_reasons() {
        assert_eq!(camel("rcvbuf_full"), "RcvbufFull");
        assert_eq!(camel("v4"), "V4");
        assert_eq!(camel("udp6_zero_checksum"), "Udp6ZeroChecksum");
        assert_eq!(camel(""), "");
    }
}
