//! The control path: what a host needs to be reachable at all. RX lcores hand
//! it the frames the parser rejected as `NotIp` (ARP) or `NotUdp` (ICMP,
//! ICMPv6); it answers ARP requests (RFC 826) and IPv6 neighbour
//! solicitations (RFC 4861 §7.2.4) for the port's configured addresses, and
//! ICMP / ICMPv6 echo requests to them (RFC 792, RFC 4443 §4.2), on the RX
//! lcore's own TX queue of the port the request came in on.
//!
//! Replies are written in place into the request's mbuf (only the neighbour
//! advertisement may grow it, by a few bytes, inside the same data room):
//! no allocation, no copy of echo payloads, and the buffer goes straight to
//! the NIC. Each RX lcore has two token buckets on the TSC, one for echo and
//! one for ARP/ND, so a ping flood cannot starve neighbour resolution (Linux
//! rate-limits ICMP with `icmp_msgs_per_sec`/`icmp_msgs_burst`, not ARP).
//!
//! Anything else, including requests for addresses that are not ours, is
//! left to the caller: with `[exception]` it goes to the kernel
//! (`crate::exception`), otherwise it is counted under its parse reason.
//!
//! This file holds the shared state ([`Iface`], the token buckets, the
//! counters), the dispatch ([`classify`], [`write_reply`], [`handle`]) and
//! the mbuf handling; each protocol has its own file: `arp` (RFC 826),
//! `nd` (IPv6 neighbour discovery) and `icmp` (echo, v4 and v6). They read
//! and write headers only through the views in [`crate::parse`].
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dpdk_sys::{port, Mbuf};

use crate::config::{IfAddr, PortConf};
use crate::counters::Counter;
use crate::parse::ether::{self, EthernetFrame};
use crate::parse::icmp::{types, IcmpPacket};
use crate::parse::ipv6::{self, Ipv6Packet};
use crate::parse::{Family, ParseError, PROTO_ICMP, PROTO_ICMPV6};
use crate::receive::sync::CachePadded;

mod arp;
mod icmp;
mod nd;

pub use nd::solicited_node;

/// A port's addresses and what the control path needs to answer for it.
#[derive(Debug, Clone)]
pub struct Iface {
    pub port: u16,
    pub mac: [u8; 6],
    pub v4: Vec<(Ipv4Addr, u8)>,
    pub v6: Vec<(Ipv6Addr, u8)>,
    /// TX queues configured on the port: an lcore whose TX slot is below
    /// this may transmit on it.
    pub tx_queues: u16,
    /// The neighbour table's queue of lessons (`send`): what the ARP and
    /// ND frames this port receives teach it; `None`: nothing is sent from
    /// this engine.
    pub lessons: Option<std::sync::Arc<crate::send::Lessons>>,
    /// The port fills IPv4 header and UDP checksums on TX (`send` asks it to).
    pub tx_csum: bool,
}

impl Iface {
    pub fn new(port: u16, mac: [u8; 6], conf: &PortConf, tx_queues: u16) -> Iface {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for IfAddr { addr, prefix } in &conf.addresses {
            match addr {
                IpAddr::V4(a) => v4.push((*a, *prefix)),
                IpAddr::V6(a) => v6.push((*a, *prefix)),
            }
        }
        Iface {
            port,
            mac,
            v4,
            v6,
            tx_queues,
            lessons: None,
            tx_csum: false,
        }
    }

    #[inline]
    pub fn has_v4(&self, a: Ipv4Addr) -> bool {
        self.v4.iter().any(|(x, _)| *x == a)
    }

    #[inline]
    pub fn has_v6(&self, a: &Ipv6Addr) -> bool {
        self.v6.iter().any(|(x, _)| x == a)
    }

    /// Limited broadcast, or the directed broadcast of one of our subnets.
    pub fn is_v4_broadcast(&self, a: Ipv4Addr) -> bool {
        a.is_broadcast()
            || self.v4.iter().any(|(x, p)| {
                // /31 and /32 have no broadcast address (RFC 3021).
                *p < 31 && {
                    let host = u32::MAX >> p;
                    u32::from(a) & !host == u32::from(*x) & !host && u32::from(a) & host == host
                }
            })
    }

    /// A unicast source for replies to datagrams sent to a group or broadcast address.
    pub fn source_for(&self, family: Family) -> Option<IpAddr> {
        match family {
            Family::V4 => self.v4.first().map(|(a, _)| IpAddr::V4(*a)),
            Family::V6 => self.v6.first().map(|(a, _)| IpAddr::V6(*a)),
        }
    }
}

/// Every port's [`Iface`], found by DPDK port id.
#[derive(Debug, Clone, Default)]
pub struct Ifaces(pub Vec<Iface>);

impl Ifaces {
    #[inline]
    pub fn get(&self, port: u16) -> Option<&Iface> {
        self.0.iter().find(|i| i.port == port)
    }
}

/// A token bucket measured in TSC cycles: each reply costs `cost` cycles of
/// credit, credit accrues with time up to `cap`. Only the owning lcore
/// updates it, so plain single-writer counters are enough.
#[derive(Debug, Default)]
pub struct TokenBucket {
    credit: Counter,
    last: Counter,
    cost: u64,
    cap: u64,
}

impl TokenBucket {
    pub fn new(tsc_hz: u64, per_sec: u32, burst: u32) -> TokenBucket {
        let cost = (tsc_hz / u64::from(per_sec.max(1))).max(1);
        let cap = cost.saturating_mul(u64::from(burst.max(1)));
        let b = TokenBucket {
            cost,
            cap,
            ..Default::default()
        };
        // Start full, as Linux does: the first burst of requests is answered.
        b.credit.set(cap);
        b
    }

    /// Take one token at TSC `now`; false when the bucket is empty.
    #[inline]
    pub fn take(&self, now: u64) -> bool {
        let last = self.last.get();
        let credit = self
            .credit
            .get()
            .saturating_add(now.saturating_sub(last))
            .min(self.cap);
        self.last.set(now.max(last));
        if credit >= self.cost {
            self.credit.set(credit - self.cost);
            true
        } else {
            self.credit.set(credit);
            false
        }
    }
}

/// What the control path did, per RX lcore. Every frame it takes is in
/// exactly one of the first six; `in_csum_errors` counts requests it did not
/// take because their checksum was wrong (they stay under `not_udp`).
#[derive(Debug, Default)]
pub struct ControlStats {
    pub arp_replies: Counter,
    pub nd_advertisements: Counter,
    pub icmp_echo_replies: Counter,
    pub icmp6_echo_replies: Counter,
    /// Requests for us that the token bucket refused (freed).
    pub rate_limited: Counter,
    /// Replies the NIC refused, or that had no TX queue on this lcore (freed).
    pub tx_errors: Counter,
    pub in_csum_errors: Counter,
    /// ARP / ND frames the neighbour table did not learn from because its
    /// queue of lessons was full: the main lcore had not run a pass while
    /// `send::LESSONS_LEN` of them arrived (the frame was handled as usual
    /// otherwise).
    pub neigh_busy: Counter,
}

impl ControlStats {
    pub fn taken(&self) -> u64 {
        self.arp_replies.get()
            + self.nd_advertisements.get()
            + self.icmp_echo_replies.get()
            + self.icmp6_echo_replies.get()
            + self.rate_limited.get()
            + self.tx_errors.get()
    }

    /// Add this lcore's counts to a summary map.
    pub fn add_to(&self, m: &mut BTreeMap<String, u64>) {
        for (k, c) in [
            ("arp_replies", &self.arp_replies),
            ("nd_advertisements", &self.nd_advertisements),
            ("icmp_echo_replies", &self.icmp_echo_replies),
            ("icmp6_echo_replies", &self.icmp6_echo_replies),
            ("rate_limited", &self.rate_limited),
            ("tx_errors", &self.tx_errors),
            ("in_csum_errors", &self.in_csum_errors),
            ("neigh_busy", &self.neigh_busy),
        ] {
            *m.entry(k.to_string()).or_default() += c.get();
        }
    }
}

/// One RX lcore's control-path state.
#[derive(Debug)]
pub struct LcoreControl {
    /// The TX queue this lcore uses on every port.
    pub tx_queue: u16,
    pub echo: TokenBucket,
    pub neigh: TokenBucket,
    pub stats: CachePadded<ControlStats>,
}

impl LcoreControl {
    pub fn new(tx_queue: u16, tsc_hz: u64, per_sec: u32, burst: u32) -> LcoreControl {
        LcoreControl {
            tx_queue,
            echo: TokenBucket::new(tsc_hz, per_sec, burst),
            neigh: TokenBucket::new(tsc_hz, per_sec, burst),
            stats: CachePadded::default(),
        }
    }
}

/// A request the control path will answer, with what the reply needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Arp {
        l3: usize,
    },
    Echo4 {
        l3: usize,
        end: usize,
    },
    Echo6 {
        l3: usize,
        end: usize,
    },
    /// Answer a neighbour solicitation for `target`.
    Na {
        l3: usize,
        target: Ipv6Addr,
        dst: Ipv6Addr,
        dst_mac: [u8; 6],
        solicited: bool,
    },
}

impl Plan {
    fn is_neighbour(&self) -> bool {
        matches!(self, Plan::Arp { .. } | Plan::Na { .. })
    }
}

/// Why a control frame was not taken (for tests and the checksum counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    NotOurs,
    BadChecksum,
}

/// Decide whether `frame` (rejected by the parser with `err`) is a request
/// for one of `iface`'s addresses that we answer. Reads only.
pub fn classify(frame: &[u8], err: &ParseError, iface: &Iface) -> Result<Plan, Skip> {
    match *err {
        ParseError::NotIp {
            ethertype: ether::ethertype::ARP,
            l3_off,
        } => arp::classify(frame, usize::from(l3_off), iface),
        ParseError::NotUdp {
            family: Family::V4,
            proto: PROTO_ICMP,
            l3_off,
            l4_off,
        } => icmp::classify_v4(frame, usize::from(l3_off), usize::from(l4_off), iface),
        ParseError::NotUdp {
            family: Family::V6,
            proto: PROTO_ICMPV6,
            l3_off,
            l4_off,
        } => icmp6(frame, usize::from(l3_off), usize::from(l4_off), iface),
        _ => Err(Skip::NotOurs),
    }
}

/// An ICMPv6 message as the control path reads it: the fixed IPv6 header
/// it came in, and the message, bounded by the payload length.
struct Icmp6In<'f> {
    l3: usize,
    /// Where the message (and the IPv6 payload) ends in the frame.
    end: usize,
    ip: Ipv6Packet<&'f [u8]>,
    msg: IcmpPacket<&'f [u8]>,
}

/// ICMPv6: the checks echo and neighbour discovery share, then the message
/// type decides.
fn icmp6(f: &[u8], l3: usize, l4: usize, iface: &Iface) -> Result<Plan, Skip> {
    // Echo and ND come without extension headers from every stack we
    // answer; with them the reply would have to drop or mirror them.
    if l4 != l3 + ipv6::HEADER_LEN {
        return Err(Skip::NotOurs);
    }
    let ip = f
        .get(l3..)
        .and_then(|b| Ipv6Packet::new_checked(b).ok())
        .ok_or(Skip::NotOurs)?;
    let end = l4 + usize::from(ip.payload_len());
    let msg = f
        .get(l4..end)
        .and_then(IcmpPacket::new_checked)
        .ok_or(Skip::NotOurs)?;
    let m = Icmp6In { l3, end, ip, msg };
    match (msg.msg_type(), msg.code()) {
        (types::V6_ECHO_REQUEST, 0) => icmp::classify_v6(&m, iface),
        (types::V6_NEIGHBOR_SOLICIT, 0) => nd::classify(f, &m, iface),
        _ => Err(Skip::NotOurs),
    }
}

/// Address the reply's Ethernet header: to `to`, from our MAC.
#[inline]
fn eth_reply(room: &mut [u8], to: [u8; 6], mac: [u8; 6]) -> Option<()> {
    let mut eth = EthernetFrame::new_checked(room).ok()?;
    eth.set_dst_mac(to);
    eth.set_src_mac(mac);
    Some(())
}

/// Write the reply to `plan` over the request in `room` (the mbuf's data
/// room from the frame's start; the request occupies its first `len`
/// bytes). Returns the reply's frame length, or `None` if it does not fit.
pub fn write_reply(room: &mut [u8], len: usize, plan: &Plan, iface: &Iface) -> Option<usize> {
    if len > room.len() || len < ether::HEADER_LEN {
        return None;
    }
    let req_src = EthernetFrame::new_checked(&*room).ok()?.src_mac();
    let (out_len, to) = match *plan {
        Plan::Arp { l3 } => (len, arp::write_reply(room, l3, iface)?),
        Plan::Echo4 { l3, end } => {
            icmp::write_echo_v4(room, len, l3, end)?;
            (len, req_src)
        }
        Plan::Echo6 { l3, end } => {
            icmp::write_echo_v6(room, len, l3, end)?;
            (len, req_src)
        }
        Plan::Na {
            l3,
            target,
            dst,
            dst_mac,
            solicited,
        } => (
            nd::write_advertisement(room, l3, &target, &dst, solicited, iface)?,
            dst_mac,
        ),
    };
    eth_reply(room, to, iface.mac)?;
    Some(out_len)
}

/// Offer a frame the parser rejected with `err` to the control path, as
/// an owned mbuf received on `port`. `Ok`: it took the mbuf (replied on
/// `ctl.tx_queue`, or freed it after counting); `Err` gives the mbuf back,
/// its counting left to the caller.
#[inline]
pub fn handle(
    ifaces: &Ifaces,
    ctl: &LcoreControl,
    port: u16,
    mut m: Mbuf,
    err: &ParseError,
    now: u64,
) -> Result<(), Mbuf> {
    let Some(iface) = ifaces.get(port) else {
        return Err(m);
    };
    if iface.v4.is_empty() && iface.v6.is_empty() {
        return Err(m);
    }
    if m.view().nb_segs() != 1 {
        return Err(m);
    }
    // The neighbour table learns from ARP and ND frames, whether or not
    // they are answered below.
    if let Some(n) = &iface.lessons {
        if !crate::send::learn(n, iface, m.data(), err) {
            ctl.stats.neigh_busy.add(1);
        }
    }
    let st = &ctl.stats;
    let plan = match classify(m.data(), err, iface) {
        Ok(p) => p,
        Err(Skip::BadChecksum) => {
            st.in_csum_errors.add(1);
            return Err(m);
        }
        Err(Skip::NotOurs) => return Err(m),
    };
    let bucket = if plan.is_neighbour() {
        &ctl.neigh
    } else {
        &ctl.echo
    };
    if !bucket.take(now) {
        st.rate_limited.add(1);
        // Freed here.
        drop(m);
        return Ok(());
    }
    let len = usize::from(m.view().data_len());
    // Written in place: the single segment, from its data to the end of its room.
    let mut v = m.view_mut();
    let out = write_reply(v.room_mut(), len, &plan, iface);
    // The reply fits the room (write_reply checks), so set_len holds.
    let sized = out
        .and_then(|l| u16::try_from(l).ok())
        .filter(|_| ctl.tx_queue < iface.tx_queues)
        .is_some_and(|l| v.set_len(l));
    if !sized {
        st.tx_errors.add(1);
        drop(m);
        return Ok(());
    }
    // The RX verdict bits mean nothing on TX and no TX offload is wanted:
    // every checksum was written in software.
    v.clear_ol_flags();
    match port::tx_one(port, ctl.tx_queue, m) {
        Ok(()) => match plan {
            Plan::Arp { .. } => st.arp_replies.add(1),
            Plan::Na { .. } => st.nd_advertisements.add(1),
            Plan::Echo4 { .. } => st.icmp_echo_replies.add(1),
            Plan::Echo6 { .. } => st.icmp6_echo_replies.add(1),
        },
        Err(m) => {
            // The NIC did not take it: freed here.
            st.tx_errors.add(1);
            drop(m);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! What the protocol files' tests share, and the tests of the dispatch.
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use crate::parse::ipv4::{self, Ipv4Packet};
    use crate::parse::{self, Offload};

    pub(super) const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    pub(super) const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    pub(super) const US4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    pub(super) const PEER4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
    /// Where the network header starts in the test frames (no VLAN tag).
    pub(super) const L3: usize = ether::HEADER_LEN;

    pub(super) fn us6() -> Ipv6Addr {
        "fd00::1".parse().unwrap()
    }
    pub(super) fn peer6() -> Ipv6Addr {
        "fd00::2".parse().unwrap()
    }

    pub(super) fn iface() -> Iface {
        Iface {
            port: 0,
            mac: OUR_MAC,
            v4: vec![(US4, 24)],
            v6: vec![(us6(), 64)],
            tx_queues: 1,
            lessons: None,
            tx_csum: false,
        }
    }

    pub(super) fn reject(f: &[u8]) -> ParseError {
        parse::parse(f, Offload::default()).expect_err("not UDP")
    }

    /// What the responder makes of `f`: its plan and the reply frame.
    pub(super) fn reply(f: &[u8]) -> (Plan, Vec<u8>) {
        let plan = classify(f, &reject(f), &iface()).expect("answered");
        let mut room = f.to_vec();
        room.resize(256, 0xee);
        let n = write_reply(&mut room, f.len(), &plan, &iface()).expect("fits");
        room.truncate(n);
        (plan, room)
    }

    pub(super) fn zeros(n: usize) -> Vec<u8> {
        vec![0; n]
    }

    /// A zeroed frame of `body_len` bytes after an Ethernet header to `dst`
    /// from the peer.
    pub(super) fn eth_frame(dst: [u8; 6], ethertype: u16, body_len: usize) -> Vec<u8> {
        let mut f = zeros(ether::HEADER_LEN + body_len);
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        e.set_dst_mac(dst);
        e.set_src_mac(PEER_MAC);
        e.set_ethertype(ethertype);
        f
    }

    /// An option-less IPv4 packet (DF, TTL 7) carrying `l4`, to our MAC.
    pub(super) fn ip4_frame(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
        let total = ipv4::HEADER_LEN + l4.len();
        let mut f = eth_frame(OUR_MAC, ether::ethertype::IPV4, total);
        let mut ip = Ipv4Packet::new_checked(&mut f[L3..]).unwrap();
        ip.set_version_ihl(4, 5);
        ip.set_total_len(total as u16);
        ip.set_frag_field(ipv4::FLAG_DF);
        ip.set_ttl(7);
        ip.set_protocol(proto);
        ip.set_src_addr(src);
        ip.set_dst_addr(dst);
        ip.fill_checksum();
        f[L3 + ipv4::HEADER_LEN..].copy_from_slice(l4);
        f
    }

    /// An IPv6 packet carrying the ICMPv6 message `icmp` (its checksum
    /// filled in here) to `eth_dst`.
    pub(super) fn ip6_frame(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        icmp: &mut [u8],
        eth_dst: [u8; 6],
    ) -> Vec<u8> {
        IcmpPacket::new_checked(&mut icmp[..])
            .unwrap()
            .fill_checksum_v6(&src, &dst);
        let mut f = eth_frame(
            eth_dst,
            ether::ethertype::IPV6,
            ipv6::HEADER_LEN + icmp.len(),
        );
        let mut ip = Ipv6Packet::new_checked(&mut f[L3..]).unwrap();
        ip.set_version_tc_flow(0, 0);
        ip.set_payload_len(icmp.len() as u16);
        ip.set_next_header(PROTO_ICMPV6);
        ip.set_hop_limit(hop);
        ip.set_src_addr(&src);
        ip.set_dst_addr(&dst);
        f[L3 + ipv6::HEADER_LEN..].copy_from_slice(icmp);
        f
    }

    pub(super) fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Replies written by the responder as it stood before `control/` was
    /// split into one file per protocol (`nd` pins two more): the split
    /// did not change a byte.
    #[test]
    fn replies_to_the_fuzz_seeds_are_pinned_byte_for_byte() {
        let seeds: [(&[u8], &str); 4] = [
            (
                include_bytes!("../../../fuzz/seeds/control/arp_request"),
                "02000000000202000000000108060001080006040002020000000001c6120001\
                 020000000002c6120002000000000000000000000000000000000000",
            ),
            (
                include_bytes!("../../../fuzz/seeds/control/icmp_echo"),
                "02000000000202000000000108004500003c000140004001ae98c6120001c612\
                 00020000f7431234000170696e6770696e6770696e6770696e6770696e677069\
                 6e6770696e6770696e67",
            ),
            (
                include_bytes!("../../../fuzz/seeds/control/icmp6_echo"),
                "02000000000202000000000186dd6000000000103a40fd000000000000000000\
                 000000000001fd00000000000000000000000000000281001f7f000700016865\
                 6c6c6f362121",
            ),
            (
                include_bytes!("../../../fuzz/seeds/control/nd_solicit"),
                "02000000000202000000000186dd6000000000203afffd000000000000000000\
                 000000000001fd00000000000000000000000000000288001c9c60000000fd00\
                 00000000000000000000000000010201020000000001",
            ),
        ];
        for (req, want) in seeds {
            assert_eq!(reply(req).1, unhex(want));
        }
    }

    #[test]
    fn udp_and_truncated_frames_are_never_taken() {
        let spec = FrameSpec {
            src_mac: PEER_MAC,
            dst_mac: OUR_MAC,
            vlans: &[],
            l3: L3Spec::V4 {
                src: PEER4,
                dst: US4,
                ttl: 64,
                options: &[],
                ident: 1,
                frag: FragSpec::default(),
            },
            sport: 1,
            dport: 2,
            payload: b"x",
            udp_csum: CsumMode::Correct,
        };
        let f = build::to_vec(&spec).unwrap();
        assert!(parse::parse(&f, Offload::default()).is_ok());
        // A lying parse error with offsets past the frame must not panic.
        let l3_off = L3 as u16;
        for cut in 0..f.len() {
            let e = ParseError::NotUdp {
                family: Family::V4,
                proto: PROTO_ICMP,
                l3_off,
                l4_off: l3_off + ipv4::HEADER_LEN as u16,
            };
            let _ = classify(&f[..cut], &e, &iface());
            let e = ParseError::NotUdp {
                family: Family::V6,
                proto: PROTO_ICMPV6,
                l3_off,
                l4_off: l3_off + ipv6::HEADER_LEN as u16,
            };
            let _ = classify(&f[..cut], &e, &iface());
            let _ = classify(
                &f[..cut],
                &ParseError::NotIp {
                    ethertype: ether::ethertype::ARP,
                    l3_off,
                },
                &iface(),
            );
        }
    }

    #[test]
    fn token_bucket_limits_and_refills() {
        let b = TokenBucket::new(1_000_000, 1000, 3);
        let t = 10_000_000;
        assert!(b.take(t) && b.take(t) && b.take(t));
        assert!(!b.take(t), "burst of 3 spent");
        assert!(!b.take(t + 999), "a token costs 1000 cycles");
        assert!(b.take(t + 1000));
        assert!(b.take(t + 100_000) && b.take(t + 100_000) && b.take(t + 100_000));
        assert!(!b.take(t + 100_000), "refill is capped at the burst");
    }
}
