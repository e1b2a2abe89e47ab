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
//! left to the caller and counted under its parse reason: the exception path
//! to the kernel (a `net_tap` port) is not implemented.
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dpdk_sys::{ffi, mbuf, port};

use crate::config::{IfAddr, PortConf};
use crate::parse::checksum;
use crate::parse::icmp::{types, IcmpPacket};
use crate::parse::{ether, Family, ParseError, PROTO_ICMP, PROTO_ICMPV6};
use crate::stats::{Counter, Padded};

const ARP_LEN: usize = 28;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
/// NA with one target link-layer address option (RFC 4861 §4.4).
const NA_LEN: usize = 24 + 8;
/// RFC 4861 §7.1.1/§7.1.2: ND messages travel one hop only.
const ND_HOP_LIMIT: u8 = 255;
/// Linux's default TTL / hop limit for locally generated replies.
const REPLY_TTL: u8 = 64;

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
    pub stats: Padded<ControlStats>,
}

impl LcoreControl {
    pub fn new(tx_queue: u16, tsc_hz: u64, per_sec: u32, burst: u32) -> LcoreControl {
        LcoreControl {
            tx_queue,
            echo: TokenBucket::new(tsc_hz, per_sec, burst),
            neigh: TokenBucket::new(tsc_hz, per_sec, burst),
            stats: Padded::default(),
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

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[inline]
fn v4_at(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(a))
}

#[inline]
fn v6_at(b: &[u8], at: usize) -> Option<Ipv6Addr> {
    let a: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(a))
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// Decide whether `frame` (rejected by the parser with `err`) is a request
/// for one of `iface`'s addresses that we answer. Reads only.
pub fn classify(frame: &[u8], err: &ParseError, iface: &Iface) -> Result<Plan, Skip> {
    match *err {
        ParseError::NotIp {
            ethertype: ether::ethertype::ARP,
            l3_off,
        } => arp(frame, usize::from(l3_off), iface),
        ParseError::NotUdp {
            family: Family::V4,
            proto: PROTO_ICMP,
            l3_off,
            l4_off,
        } => icmp4(frame, usize::from(l3_off), usize::from(l4_off), iface),
        ParseError::NotUdp {
            family: Family::V6,
            proto: PROTO_ICMPV6,
            l3_off,
            l4_off,
        } => icmp6(frame, usize::from(l3_off), usize::from(l4_off), iface),
        _ => Err(Skip::NotOurs),
    }
}

fn arp(f: &[u8], l3: usize, iface: &Iface) -> Result<Plan, Skip> {
    let a = f.get(l3..l3 + ARP_LEN).ok_or(Skip::NotOurs)?;
    // Ethernet/IPv4 request (RFC 826: hrd 1, pro 0x0800, hln 6, pln 4, op 1).
    if a[..8] != [0, 1, 0x08, 0x00, 6, 4, 0, 1] {
        return Err(Skip::NotOurs);
    }
    let sha = &a[8..14];
    let tpa = v4_at(a, 24).ok_or(Skip::NotOurs)?;
    // Linux arp_process: a multicast/broadcast sender hardware address is
    // never an answerable neighbour.
    if sha[0] & 1 != 0 || !iface.has_v4(tpa) {
        return Err(Skip::NotOurs);
    }
    Ok(Plan::Arp { l3 })
}

fn icmp4(f: &[u8], l3: usize, l4: usize, iface: &Iface) -> Result<Plan, Skip> {
    // IP options (record route, timestamp) would need processing to be
    // echoed correctly (Linux ip_options_echo); requests with options are
    // left alone.
    if l4 != l3 + IPV4_HEADER_LEN {
        return Err(Skip::NotOurs);
    }
    let total = usize::from(be16(f, l3 + 2).ok_or(Skip::NotOurs)?);
    let end = l3 + total;
    let src = v4_at(f, l3 + 12).ok_or(Skip::NotOurs)?;
    let dst = v4_at(f, l3 + 16).ok_or(Skip::NotOurs)?;
    // Only echo to our unicast addresses (Linux ignores broadcast echo by
    // default), and never to a source that is not a single host.
    if !iface.has_v4(dst)
        || src.is_unspecified()
        || src.is_multicast()
        || iface.is_v4_broadcast(src)
    {
        return Err(Skip::NotOurs);
    }
    let msg = f.get(l4..end).ok_or(Skip::NotOurs)?;
    let p = IcmpPacket::new_checked(msg).ok_or(Skip::NotOurs)?;
    if p.msg_type() != types::V4_ECHO_REQUEST || p.code() != 0 {
        return Err(Skip::NotOurs);
    }
    if !p.verify_v4() {
        return Err(Skip::BadChecksum);
    }
    Ok(Plan::Echo4 { l3, end })
}

fn icmp6(f: &[u8], l3: usize, l4: usize, iface: &Iface) -> Result<Plan, Skip> {
    // Echo and ND come without extension headers from every stack we
    // answer; with them the reply would have to drop or mirror them.
    if l4 != l3 + IPV6_HEADER_LEN {
        return Err(Skip::NotOurs);
    }
    let plen = usize::from(be16(f, l3 + 4).ok_or(Skip::NotOurs)?);
    let end = l4 + plen;
    let hop = *f.get(l3 + 7).ok_or(Skip::NotOurs)?;
    let src = v6_at(f, l3 + 8).ok_or(Skip::NotOurs)?;
    let dst = v6_at(f, l3 + 24).ok_or(Skip::NotOurs)?;
    let msg = f.get(l4..end).ok_or(Skip::NotOurs)?;
    let p = IcmpPacket::new_checked(msg).ok_or(Skip::NotOurs)?;
    match (p.msg_type(), p.code()) {
        (types::V6_ECHO_REQUEST, 0) => {
            // RFC 4443 §4.2: replies to multicast echo are optional; we
            // answer unicast to our own addresses only.
            if !iface.has_v6(&dst) || src.is_unspecified() {
                return Err(Skip::NotOurs);
            }
            if !p.verify_v6(&src, &dst) {
                return Err(Skip::BadChecksum);
            }
            Ok(Plan::Echo6 { l3, end })
        }
        (types::V6_NEIGHBOR_SOLICIT, 0) => {
            // RFC 4861 §7.1.1 validity checks, in its order.
            if hop != ND_HOP_LIMIT || msg.len() < 24 {
                return Err(Skip::NotOurs);
            }
            let target = p.nd_target().ok_or(Skip::NotOurs)?;
            if target.is_multicast() || !iface.has_v6(&target) {
                return Err(Skip::NotOurs);
            }
            if dst != target && dst != solicited_node(&target) {
                return Err(Skip::NotOurs);
            }
            if !p.verify_v6(&src, &dst) {
                return Err(Skip::BadChecksum);
            }
            let mut slla = None;
            let mut opts = msg.get(24..).ok_or(Skip::NotOurs)?;
            while !opts.is_empty() {
                let (&kind, &len8) = (
                    opts.first().ok_or(Skip::NotOurs)?,
                    opts.get(1).ok_or(Skip::NotOurs)?,
                );
                let len = usize::from(len8) * 8;
                // A zero-length option is invalid and ends processing (§4.6).
                let o = opts.get(..len).filter(|_| len > 0).ok_or(Skip::NotOurs)?;
                if kind == 1 {
                    let mac: [u8; 6] = o
                        .get(2..8)
                        .ok_or(Skip::NotOurs)?
                        .try_into()
                        .map_err(|_| Skip::NotOurs)?;
                    slla = Some(mac);
                }
                opts = &opts[len..];
            }
            if src.is_unspecified() {
                // Duplicate address detection: no SLLA allowed, answer to
                // all-nodes with S clear (§7.2.4).
                if slla.is_some() || dst != solicited_node(&target) {
                    return Err(Skip::NotOurs);
                }
                return Ok(Plan::Na {
                    l3,
                    target,
                    dst: Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
                    dst_mac: [0x33, 0x33, 0, 0, 0, 1],
                    solicited: false,
                });
            }
            // Without an SLLA (unicast NUD probes) the frame's own source
            // is the solicitor's link-layer address.
            let eth_src: [u8; 6] = f
                .get(6..12)
                .ok_or(Skip::NotOurs)?
                .try_into()
                .map_err(|_| Skip::NotOurs)?;
            Ok(Plan::Na {
                l3,
                target,
                dst: src,
                dst_mac: slla.unwrap_or(eth_src),
                solicited: true,
            })
        }
        _ => Err(Skip::NotOurs),
    }
}

/// Swap the Ethernet addresses: to the requester, from our MAC.
#[inline]
fn eth_reply(f: &mut [u8], to: [u8; 6], mac: [u8; 6]) {
    f[0..6].copy_from_slice(&to);
    f[6..12].copy_from_slice(&mac);
}

/// Write the reply to `plan` over the request in `room` (the mbuf's data
/// room from the frame's start; the request occupies its first `len`
/// bytes). Returns the reply's frame length, or `None` if it does not fit.
pub fn write_reply(room: &mut [u8], len: usize, plan: &Plan, iface: &Iface) -> Option<usize> {
    if len > room.len() || len < ether::HEADER_LEN {
        return None;
    }
    let req_src: [u8; 6] = room.get(6..12)?.try_into().ok()?;
    match *plan {
        Plan::Arp { l3 } => {
            let a = room.get_mut(l3..l3 + ARP_LEN)?;
            let mut sha = [0u8; 6];
            sha.copy_from_slice(&a[8..14]);
            let mut spa = [0u8; 4];
            spa.copy_from_slice(&a[14..18]);
            let mut tpa = [0u8; 4];
            tpa.copy_from_slice(&a[24..28]);
            a[6..8].copy_from_slice(&2u16.to_be_bytes());
            a[8..14].copy_from_slice(&iface.mac);
            a[14..18].copy_from_slice(&tpa);
            a[18..24].copy_from_slice(&sha);
            a[24..28].copy_from_slice(&spa);
            eth_reply(room, sha, iface.mac);
            Some(len)
        }
        Plan::Echo4 { l3, end } => {
            if end > len {
                return None;
            }
            let ip = room.get_mut(l3..l3 + IPV4_HEADER_LEN)?;
            let mut src = [0u8; 4];
            src.copy_from_slice(&ip[12..16]);
            ip.copy_within(16..20, 12);
            ip[16..20].copy_from_slice(&src);
            ip[8] = REPLY_TTL;
            ip[10..12].fill(0);
            let c = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let mut p = IcmpPacket::new_checked(room.get_mut(l3 + IPV4_HEADER_LEN..end)?)?;
            p.set_msg_type(types::V4_ECHO_REPLY);
            p.fill_checksum_v4();
            eth_reply(room, req_src, iface.mac);
            Some(len)
        }
        Plan::Echo6 { l3, end } => {
            if end > len {
                return None;
            }
            let ip = room.get_mut(l3..l3 + IPV6_HEADER_LEN)?;
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            ip.copy_within(24..40, 8);
            ip[24..40].copy_from_slice(&src);
            ip[7] = REPLY_TTL;
            let new_src = v6_at(ip, 8)?;
            let new_dst = Ipv6Addr::from(src);
            let mut p = IcmpPacket::new_checked(room.get_mut(l3 + IPV6_HEADER_LEN..end)?)?;
            p.set_msg_type(types::V6_ECHO_REPLY);
            p.fill_checksum_v6(&new_src, &new_dst);
            eth_reply(room, req_src, iface.mac);
            Some(len)
        }
        Plan::Na {
            l3,
            target,
            dst,
            dst_mac,
            solicited,
        } => {
            let out_len = l3 + IPV6_HEADER_LEN + NA_LEN;
            let ip = room.get_mut(l3..l3 + IPV6_HEADER_LEN)?;
            ip[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
            ip[4..6].copy_from_slice(&(NA_LEN as u16).to_be_bytes());
            ip[6] = PROTO_ICMPV6;
            ip[7] = ND_HOP_LIMIT;
            ip[8..24].copy_from_slice(&target.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            let na = room.get_mut(l3 + IPV6_HEADER_LEN..out_len)?;
            na.fill(0);
            na[0] = types::V6_NEIGHBOR_ADVERT;
            // R=0 (not a router), S as solicited, O=1: our own address (§7.2.4).
            na[4] = if solicited { 0x60 } else { 0x20 };
            na[8..24].copy_from_slice(&target.octets());
            // Target link-layer address option (type 2, 1 x 8 bytes).
            na[24] = 2;
            na[25] = 1;
            na[26..32].copy_from_slice(&iface.mac);
            IcmpPacket::new_checked(na)?.fill_checksum_v6(&target, &dst);
            eth_reply(room, dst_mac, iface.mac);
            Some(out_len)
        }
    }
}

/// The mbuf's single segment as a writable window from `data_off` to the
/// end of its data room.
///
/// # Safety
/// `m` is a live, single-segment mbuf the caller owns exclusively.
unsafe fn room_mut<'a>(m: *mut ffi::rte_mbuf) -> &'a mut [u8] {
    // SAFETY: per the contract; buf_addr + data_off .. buf_addr + buf_len is the mbuf's data room.
    unsafe {
        let r = &*m;
        let off = usize::from(r.data_off);
        let len = usize::from(r.buf_len).saturating_sub(off);
        std::slice::from_raw_parts_mut((r.buf_addr as *mut u8).add(off), len)
    }
}

/// Offer a frame the parser rejected with `err` to the control path.
/// Returns true when it took the mbuf (replied on `ctl.tx_queue`, or freed
/// it after counting); false leaves the mbuf and its counting to the caller.
///
/// # Safety
/// `m` is a live mbuf received on `port` that the caller owns exclusively.
#[inline]
pub unsafe fn handle(
    ifaces: &Ifaces,
    ctl: &LcoreControl,
    port: u16,
    m: *mut ffi::rte_mbuf,
    err: &ParseError,
    now: u64,
) -> bool {
    let Some(iface) = ifaces.get(port) else {
        return false;
    };
    if iface.v4.is_empty() && iface.v6.is_empty() {
        return false;
    }
    // SAFETY: per the contract.
    let r = unsafe { &mut *m };
    if r.nb_segs != 1 {
        return false;
    }
    let st = &ctl.stats;
    // SAFETY: per the contract; read-only view of the received frame.
    let plan = match classify(unsafe { mbuf::data(m) }, err, iface) {
        Ok(p) => p,
        Err(Skip::BadChecksum) => {
            st.in_csum_errors.add(1);
            return false;
        }
        Err(Skip::NotOurs) => return false,
    };
    let bucket = if plan.is_neighbour() {
        &ctl.neigh
    } else {
        &ctl.echo
    };
    if !bucket.take(now) {
        st.rate_limited.add(1);
        // SAFETY: ours, and given up here.
        unsafe { ffi::rte_pktmbuf_free(m) };
        return true;
    }
    let len = usize::from(r.data_len);
    // SAFETY: single segment, exclusively ours (checked and per the contract).
    let out = write_reply(unsafe { room_mut(m) }, len, &plan, iface);
    let Some(out_len) = out
        .and_then(|l| u16::try_from(l).ok())
        .filter(|_| ctl.tx_queue < iface.tx_queues)
    else {
        st.tx_errors.add(1);
        // SAFETY: ours, and given up here.
        unsafe { ffi::rte_pktmbuf_free(m) };
        return true;
    };
    r.data_len = out_len;
    r.pkt_len = u32::from(out_len);
    // The RX verdict bits mean nothing on TX and no TX offload is wanted:
    // every checksum was written in software.
    r.ol_flags = 0;
    let mut one = [m];
    if port::tx_burst(port, ctl.tx_queue, &mut one) == 1 {
        match plan {
            Plan::Arp { .. } => st.arp_replies.add(1),
            Plan::Na { .. } => st.nd_advertisements.add(1),
            Plan::Echo4 { .. } => st.icmp_echo_replies.add(1),
            Plan::Echo6 { .. } => st.icmp6_echo_replies.add(1),
        }
    } else {
        st.tx_errors.add(1);
        // SAFETY: the NIC did not take it: still ours, given up here.
        unsafe { ffi::rte_pktmbuf_free(m) };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use crate::parse::{self, Offload};

    const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const US4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const PEER4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    fn us6() -> Ipv6Addr {
        "fd00::1".parse().unwrap()
    }
    fn peer6() -> Ipv6Addr {
        "fd00::2".parse().unwrap()
    }

    fn iface() -> Iface {
        Iface {
            port: 0,
            mac: OUR_MAC,
            v4: vec![(US4, 24)],
            v6: vec![(us6(), 64)],
            tx_queues: 1,
        }
    }

    fn reject(f: &[u8]) -> ParseError {
        parse::parse(f, Offload::default()).expect_err("not UDP")
    }

    fn arp_request(tpa: Ipv4Addr) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&PEER4.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tpa.octets());
        f.resize(60, 0);
        f
    }

    fn reply(f: &[u8]) -> (Plan, Vec<u8>) {
        let plan = classify(f, &reject(f), &iface()).expect("answered");
        let mut room = f.to_vec();
        room.resize(256, 0xee);
        let n = write_reply(&mut room, f.len(), &plan, &iface()).expect("fits");
        room.truncate(n);
        (plan, room)
    }

    #[test]
    fn arp_request_for_us_gets_a_reply_with_our_mac() {
        let (_, r) = reply(&arp_request(US4));
        assert_eq!(&r[0..6], &PEER_MAC);
        assert_eq!(&r[6..12], &OUR_MAC);
        assert_eq!(&r[12..14], &[0x08, 0x06]);
        assert_eq!(&r[20..22], &[0, 2], "op reply");
        assert_eq!(&r[22..28], &OUR_MAC, "sha");
        assert_eq!(&r[28..32], &US4.octets(), "spa");
        assert_eq!(&r[32..38], &PEER_MAC, "tha");
        assert_eq!(&r[38..42], &PEER4.octets(), "tpa");
    }

    #[test]
    fn arp_for_someone_else_or_a_reply_is_not_ours() {
        let f = arp_request(Ipv4Addr::new(198, 18, 0, 9));
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = arp_request(US4);
        f[21] = 2;
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let f = arp_request(US4);
        assert_eq!(
            classify(
                &f[..30],
                &ParseError::NotIp {
                    ethertype: 0x0806,
                    l3_off: 14
                },
                &iface()
            ),
            Err(Skip::NotOurs)
        );
    }

    fn ip4_frame(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&OUR_MAC);
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + l4.len()) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 7;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(l4);
        f
    }

    fn echo4(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let mut m = vec![8, 0, 0, 0, 0x12, 0x34, 0, 7];
        m.extend_from_slice(payload);
        IcmpPacket::new_checked(&mut m[..])
            .unwrap()
            .fill_checksum_v4();
        ip4_frame(PEER4, dst, PROTO_ICMP, &m)
    }

    #[test]
    fn icmp_echo_reply_swaps_and_checksums() {
        let (_, r) = reply(&echo4(US4, b"ping payload"));
        assert_eq!(&r[0..6], &PEER_MAC);
        assert_eq!(&r[6..12], &OUR_MAC);
        assert_eq!(checksum::checksum(&r[14..34]), 0, "IP header checksum");
        assert_eq!(&r[26..30], &US4.octets());
        assert_eq!(&r[30..34], &PEER4.octets());
        assert_eq!(r[22], REPLY_TTL);
        let p = IcmpPacket::new_checked(&r[34..]).unwrap();
        assert_eq!(p.msg_type(), types::V4_ECHO_REPLY);
        assert!(p.verify_v4());
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 7));
        assert_eq!(&r[42..], b"ping payload");
    }

    #[test]
    fn icmp_echo_not_for_us_bad_checksum_broadcast_are_skipped() {
        let f = echo4(Ipv4Addr::new(198, 18, 0, 7), b"x");
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = echo4(US4, b"xy");
        let n = f.len();
        f[n - 1] ^= 0xff;
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::BadChecksum));
        let f = echo4(Ipv4Addr::new(198, 18, 0, 255), b"x");
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        assert!(iface().is_v4_broadcast(Ipv4Addr::new(198, 18, 0, 255)));
        assert!(!iface().is_v4_broadcast(Ipv4Addr::new(198, 18, 0, 254)));
    }

    fn ip6_frame(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        icmp: &mut [u8],
        eth_dst: [u8; 6],
    ) -> Vec<u8> {
        IcmpPacket::new_checked(&mut icmp[..])
            .unwrap()
            .fill_checksum_v6(&src, &dst);
        let mut f = Vec::new();
        f.extend_from_slice(&eth_dst);
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
        f.extend_from_slice(&[PROTO_ICMPV6, hop]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(icmp);
        f
    }

    fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, slla: bool) -> Vec<u8> {
        let mut m = vec![135, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&target.octets());
        if slla {
            m.extend_from_slice(&[1, 1]);
            m.extend_from_slice(&PEER_MAC);
        }
        ip6_frame(src, dst, 255, &mut m, [0x33, 0x33, 0xff, 0, 0, 1])
    }

    #[test]
    fn neighbour_solicitation_gets_an_advertisement() {
        let f = ns(peer6(), solicited_node(&us6()), us6(), true);
        let (plan, r) = reply(&f);
        assert!(matches!(
            plan,
            Plan::Na {
                solicited: true,
                ..
            }
        ));
        assert_eq!(r.len(), 14 + 40 + 32);
        assert_eq!(&r[0..6], &PEER_MAC);
        assert_eq!(&r[6..12], &OUR_MAC);
        assert_eq!(r[14 + 7], 255, "hop limit 255");
        assert_eq!(v6_at(&r, 22), Some(us6()));
        assert_eq!(v6_at(&r, 38), Some(peer6()));
        let p = IcmpPacket::new_checked(&r[54..]).unwrap();
        assert_eq!(p.msg_type(), types::V6_NEIGHBOR_ADVERT);
        assert!(
            p.verify_v6(&us6(), &peer6()),
            "ICMPv6 checksum with pseudo-header"
        );
        assert_eq!(r[58], 0x60, "S and O set, R clear");
        assert_eq!(p.nd_target(), Some(us6()));
        assert_eq!(&r[78..80], &[2, 1]);
        assert_eq!(&r[80..86], &OUR_MAC);
    }

    #[test]
    fn ns_without_slla_grows_the_frame_and_answers_the_frame_source() {
        let f = ns(peer6(), us6(), us6(), false);
        assert_eq!(f.len(), 14 + 40 + 24);
        let (_, r) = reply(&f);
        assert_eq!(r.len(), 14 + 40 + 32);
        assert_eq!(&r[0..6], &PEER_MAC);
        assert!(IcmpPacket::new_checked(&r[54..])
            .unwrap()
            .verify_v6(&us6(), &peer6()));
    }

    #[test]
    fn dad_probe_is_answered_to_all_nodes() {
        let f = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&us6()), us6(), false);
        let (plan, r) = reply(&f);
        assert!(matches!(
            plan,
            Plan::Na {
                solicited: false,
                ..
            }
        ));
        assert_eq!(&r[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(v6_at(&r, 38), Some("ff02::1".parse().unwrap()));
        assert_eq!(r[58], 0x20);
    }

    #[test]
    fn invalid_solicitations_are_not_answered() {
        // Not our target.
        let other: Ipv6Addr = "fd00::9".parse().unwrap();
        let f = ns(peer6(), solicited_node(&other), other, true);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Hop limit not 255 (forwarded: RFC 4861 §7.1.1).
        let mut f = ns(peer6(), solicited_node(&us6()), us6(), true);
        f[21] = 64;
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // DAD with an SLLA option.
        let f = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&us6()), us6(), true);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Zero-length option.
        let mut m = vec![135, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&us6().octets());
        m.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        let f = ip6_frame(peer6(), us6(), 255, &mut m, OUR_MAC);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Wrong checksum.
        let mut f = ns(peer6(), solicited_node(&us6()), us6(), true);
        f[60] ^= 1;
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::BadChecksum));
    }

    #[test]
    fn icmp6_echo_reply() {
        let mut m = vec![128, 0, 0, 0, 0, 9, 0, 1, b'h', b'i'];
        let f = ip6_frame(peer6(), us6(), 64, &mut m, OUR_MAC);
        let (_, r) = reply(&f);
        assert_eq!(v6_at(&r, 22), Some(us6()));
        assert_eq!(v6_at(&r, 38), Some(peer6()));
        let p = IcmpPacket::new_checked(&r[54..]).unwrap();
        assert_eq!(p.msg_type(), types::V6_ECHO_REPLY);
        assert!(p.verify_v6(&us6(), &peer6()));
        assert_eq!(&r[62..], b"hi");
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
        for cut in 0..f.len() {
            let e = ParseError::NotUdp {
                family: Family::V4,
                proto: PROTO_ICMP,
                l3_off: 14,
                l4_off: 34,
            };
            let _ = classify(&f[..cut], &e, &iface());
            let e = ParseError::NotUdp {
                family: Family::V6,
                proto: PROTO_ICMPV6,
                l3_off: 14,
                l4_off: 54,
            };
            let _ = classify(&f[..cut], &e, &iface());
            let _ = classify(
                &f[..cut],
                &ParseError::NotIp {
                    ethertype: 0x0806,
                    l3_off: 14,
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

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Replies written by the responder as it stood before `control/` was
    /// split into one file per protocol: the split must not change a byte.
    #[test]
    fn replies_are_pinned_byte_for_byte() {
        let seeds: [(&[u8], &str); 4] = [
            (
                include_bytes!("../../fuzz/seeds/control/arp_request"),
                "02000000000202000000000108060001080006040002020000000001c6120001\
                 020000000002c6120002000000000000000000000000000000000000",
            ),
            (
                include_bytes!("../../fuzz/seeds/control/icmp_echo"),
                "02000000000202000000000108004500003c000140004001ae98c6120001c612\
                 00020000f7431234000170696e6770696e6770696e6770696e6770696e677069\
                 6e6770696e6770696e67",
            ),
            (
                include_bytes!("../../fuzz/seeds/control/icmp6_echo"),
                "02000000000202000000000186dd6000000000103a40fd000000000000000000\
                 000000000001fd00000000000000000000000000000281001f7f000700016865\
                 6c6c6f362121",
            ),
            (
                include_bytes!("../../fuzz/seeds/control/nd_solicit"),
                "02000000000202000000000186dd6000000000203afffd000000000000000000\
                 000000000001fd00000000000000000000000000000288001c9c60000000fd00\
                 00000000000000000000000000010201020000000001",
            ),
        ];
        for (req, want) in seeds {
            assert_eq!(reply(req).1, unhex(want));
        }
        // A solicitation without SLLA (the frame grows by the TLLA option),
        // and a DAD probe (answered to all-nodes).
        let (_, r) = reply(&ns(peer6(), us6(), us6(), false));
        assert_eq!(
            r,
            unhex(
                "02000000000202000000000186dd6000000000203afffd000000000000000000\
                 000000000001fd00000000000000000000000000000288001c9c60000000fd00\
                 00000000000000000000000000010201020000000001"
            )
        );
        let (_, r) = reply(&ns(
            Ipv6Addr::UNSPECIFIED,
            solicited_node(&us6()),
            us6(),
            false,
        ));
        assert_eq!(
            r,
            unhex(
                "33330000000102000000000186dd6000000000203afffd000000000000000000\
                 000000000001ff02000000000000000000000000000188005a9b20000000fd00\
                 00000000000000000000000000010201020000000001"
            )
        );
    }

    /// Our reply to a request Linux sent is the reply Linux sends.
    #[test]
    fn arp_reply_to_linux_equals_linuxs_own() {
        use crate::parse::arp::captured::{LINUX_REPLY, LINUX_REQUEST};
        assert_eq!(reply(&LINUX_REQUEST).1, LINUX_REPLY);
    }
}
