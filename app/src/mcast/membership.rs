//! The main lcore's side of group membership: what the engine reports,
//! and when (RFC 3376 §5 for IGMPv3, RFC 2236 §3 in IGMPv2 compatibility,
//! RFC 3810 §6 for MLDv2).
//!
//! * A group newly joined on a port (at start, after a reload or a
//!   client's bind) is announced with a state-change report
//!   (`CHANGE_TO_EXCLUDE_MODE`, no sources) at once and once more a second
//!   later (robustness variable 2, unsolicited report interval 1 s); a
//!   group left, with `CHANGE_TO_INCLUDE_MODE` the same way, and at exit.
//! * A query an RX lcore posted is answered after a random delay below its
//!   maximum response time, with a current-state report
//!   (`MODE_IS_EXCLUDE`) of every group of the family joined on the port
//!   (general query) or of the one group asked about, if joined.
//! * An IGMPv1 or IGMPv2 query puts the port in IGMPv2 compatibility mode
//!   (an IGMPv1 querier, which RFC 3376 §7.2.1 answers with IGMPv1
//!   reports, gets IGMPv2 ones here)
//!   for the Older Version Querier Present Timeout (260 s with the
//!   defaults, RFC 3376 §8.12): reports are then IGMPv2 reports, one per
//!   group, sent to the group, and leaves go to 224.0.0.2.
//!
//! Not done: source filters (`INCLUDE`/`EXCLUDE` lists, `IP_ADD_SOURCE_MEMBERSHIP`),
//! MLDv1 compatibility (an MLDv1 query is answered with an MLDv2 report,
//! which an MLDv1-only router ignores), report suppression on hearing
//! another host's IGMPv2 report (optional for a host, RFC 2236 §3).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dpdk_sys::{port, Mbuf};

use super::wire::{self, record};
use super::Joined;
use crate::control::Iface;
use crate::parse::Family;
use crate::runtime::shared::Shared;

/// Unsolicited reports are sent this many times (the robustness variable).
const ROBUSTNESS: u8 = 2;
/// RFC 3376 §8.11 / RFC 3810 §9.11: one second between them.
const UNSOLICITED_MS: u64 = 1000;
/// RFC 3376 §8.12: robustness x query interval (125 s) + query response
/// interval (10 s).
const OLDER_QUERIER_MS: u64 = 2 * 125_000 + 10_000;
/// Scheduled reports kept at once; further ones wait for a free entry
/// (a query that finds the list full is answered by the next query).
const MAX_PENDING: usize = 64;

/// A report to send at `due` (TSC).
#[derive(Debug, Clone, Copy)]
struct Pending {
    due: u64,
    port: u16,
    family: Family,
    /// `record::*`.
    kind: u8,
    /// `None`: every group of the family joined on the port (or, for a
    /// state change, the groups of `change`).
    group: Option<IpAddr>,
    /// Unsolicited retransmissions left after this one.
    again: u8,
}

/// The main lcore's membership state.
#[derive(Debug, Default)]
pub struct Reporter {
    /// What the engine announced last.
    announced: Joined,
    pending: Vec<Pending>,
    /// Per port: the TSC until which it is in IGMPv2 compatibility mode.
    igmpv2_until: Vec<(u16, u64)>,
    rng: u64,
}

impl Reporter {
    pub fn new(seed: u64) -> Reporter {
        Reporter {
            rng: seed | 1,
            pending: Vec::with_capacity(MAX_PENDING),
            ..Reporter::default()
        }
    }

    /// xorshift64: report delays need no more than spread.
    fn random_below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if n == 0 {
            0
        } else {
            self.rng % n
        }
    }

    fn schedule(&mut self, p: Pending) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push(p);
        }
    }

    fn igmpv2(&self, port: u16, now: u64) -> bool {
        self.igmpv2_until
            .iter()
            .any(|&(p, until)| p == port && now < until)
    }

    /// Announce joins and leaves, take the RX lcores' queries, send what is
    /// due. Called by the main loop every few milliseconds.
    pub fn service(&mut self, shared: &Shared, now: u64) {
        let ms = (shared.tsc_hz / 1000).max(1);
        let joined = shared.mcast.joined.load_full();
        if *joined != self.announced {
            let old = std::mem::replace(&mut self.announced, (*joined).clone());
            for (port, g) in joined.iter().filter(|&(p, g)| !old.has(p, g)) {
                self.schedule(change(port, g, record::CHANGE_TO_EXCLUDE, now));
            }
            for (port, g) in old.iter().filter(|&(p, g)| !joined.has(p, g)) {
                self.schedule(change(port, g, record::CHANGE_TO_INCLUDE, now));
            }
        }
        while let Some(q) = shared.mcast.queries.pop() {
            if q.family == Family::V4 && q.version < 3 {
                let until = now + OLDER_QUERIER_MS * ms;
                match self.igmpv2_until.iter_mut().find(|(p, _)| *p == q.port) {
                    Some(e) => e.1 = until,
                    None => self.igmpv2_until.push((q.port, until)),
                }
            }
            // Nothing to report: a group-specific query for a group not
            // joined here, or a general one with no group of its family.
            let any = match q.group {
                Some(g) => joined.has(q.port, g),
                None => joined
                    .iter()
                    .any(|(p, g)| p == q.port && g.is_ipv4() == (q.family == Family::V4)),
            };
            if !any {
                continue;
            }
            let delay = self.random_below(u64::from(q.max_resp_ms.max(1)) * ms);
            shared.mcast.stats.queries_answered.add(1);
            self.schedule(Pending {
                due: now + delay,
                port: q.port,
                family: q.family,
                kind: record::MODE_IS_EXCLUDE,
                group: q.group,
                again: 0,
            });
        }
        let mut i = 0;
        while i < self.pending.len() {
            let p = self.pending[i];
            if p.due > now {
                i += 1;
                continue;
            }
            self.pending.swap_remove(i);
            self.send(shared, &joined, p, now);
            if p.again > 0 {
                self.schedule(Pending {
                    due: now + UNSOLICITED_MS * ms,
                    again: p.again - 1,
                    ..p
                });
            }
        }
    }

    /// At exit: every group announced is left (`CHANGE_TO_INCLUDE_MODE`,
    /// or an IGMPv2 leave), once.
    pub fn leave_all(&mut self, shared: &Shared, now: u64) {
        let empty = Joined::default();
        let announced = std::mem::take(&mut self.announced);
        for (port, g) in announced.iter() {
            let p = Pending {
                again: 0,
                ..change(port, g, record::CHANGE_TO_INCLUDE, now)
            };
            self.send(shared, &empty, p, now);
        }
        self.pending.clear();
    }

    /// Build and transmit the report(s) for `p`.
    fn send(&mut self, shared: &Shared, joined: &Joined, p: Pending, now: u64) {
        let Some(iface) = shared.ifaces.get(p.port) else {
            return;
        };
        let st = &shared.mcast.stats;
        let groups: Vec<IpAddr> = match p.group {
            Some(g) => vec![g],
            None => joined
                .iter()
                .filter(|&(port, g)| port == p.port && (g.is_ipv4() == (p.family == Family::V4)))
                .map(|(_, g)| g)
                .collect(),
        };
        if groups.is_empty() {
            return;
        }
        // Typed by family (`groups` holds `p.family`'s only).
        let (mut g4, mut g6) = (Vec::new(), Vec::new());
        for g in groups {
            match g {
                IpAddr::V4(a) => g4.push(a),
                IpAddr::V6(a) => g6.push(a),
            }
        }
        let v2 = p.family == Family::V4 && self.igmpv2(p.port, now);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        match p.family {
            Family::V4 => {
                let src = iface.v4.first().map_or(Ipv4Addr::UNSPECIFIED, |a| a.0);
                if v2 {
                    let t = if p.kind == record::CHANGE_TO_INCLUDE {
                        wire::igmp_type::V2_LEAVE
                    } else {
                        wire::igmp_type::V2_REPORT
                    };
                    for g in g4 {
                        frames.push(frame(|b| wire::write_igmpv2(b, iface.mac, src, t, g)));
                    }
                } else {
                    for chunk in g4.chunks(wire::MAX_RECORDS_V4) {
                        frames.push(frame(|b| {
                            wire::write_igmpv3_report(b, iface.mac, src, p.kind, chunk)
                        }));
                    }
                }
            }
            Family::V6 => {
                let src = link_local(iface);
                for chunk in g6.chunks(wire::MAX_RECORDS_V6) {
                    frames.push(frame(|b| {
                        wire::write_mldv2_report(b, iface.mac, &src, p.kind, chunk)
                    }));
                }
            }
        }
        for f in frames.into_iter().filter(|f| !f.is_empty()) {
            if transmit(shared, iface, &f) {
                match p.family {
                    Family::V4 => st.igmp_reports.add(1),
                    Family::V6 => st.mld_reports.add(1),
                }
            } else {
                st.report_errors.add(1);
            }
        }
    }
}

/// A state change for one group, sent now and `ROBUSTNESS - 1` times more.
fn change(port: u16, g: IpAddr, kind: u8, now: u64) -> Pending {
    Pending {
        due: now,
        port,
        family: if g.is_ipv4() { Family::V4 } else { Family::V6 },
        kind,
        group: Some(g),
        again: ROBUSTNESS - 1,
    }
}

/// A frame written by `w` into a fresh buffer (empty if it did not fit).
fn frame(w: impl FnOnce(&mut [u8]) -> Option<usize>) -> Vec<u8> {
    let mut b = vec![0u8; wire::MAX_FRAME];
    let n = w(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

/// The port's link-local address, or `::` (RFC 3810 §5.2.13: a host
/// without one yet reports from the unspecified address).
fn link_local(iface: &Iface) -> Ipv6Addr {
    iface
        .v6
        .iter()
        .map(|a| a.0)
        .find(|a| a.segments()[0] & 0xffc0 == 0xfe80)
        .unwrap_or(Ipv6Addr::UNSPECIFIED)
}

/// Send `f` out of `iface` on the main lcore's TX queue, in an mbuf of the
/// send path's pool. `false`: no TX path (no port has an address), no
/// mbuf, or the port refused it.
fn transmit(shared: &Shared, iface: &Iface, f: &[u8]) -> bool {
    let (Some(tx), Some(q)) = (shared.send.as_ref(), shared.main_tx_queue) else {
        return false;
    };
    if q >= iface.tx_queues {
        return false;
    }
    let Some(mut m): Option<Mbuf> = tx.pool().alloc() else {
        return false;
    };
    let Ok(len) = u16::try_from(f.len()) else {
        return false;
    };
    let Some(out) = m.append(len) else {
        return false;
    };
    out.copy_from_slice(f);
    m.view_mut().set_port(iface.port);
    port::tx_one(iface.port, q, m).is_ok()
}
