//! IGMP (RFC 2236, RFC 3376) and MLDv2 (RFC 3810) on the wire: the
//! membership reports the engine sends for the groups its sockets joined,
//! and the queries it answers. Whole Ethernet frames are written into a
//! caller's buffer (no allocation); queries are read with checked bounds
//! from the frame the parser rejected as "not UDP".
//!
//! What the kernel sends, and so this: IPv4 TTL 1, TOS 0xc0 (internetwork
//! control), DF, a Router Alert option (RFC 2113) on every IGMP message;
//! IPv6 hop limit 1 and a hop-by-hop header holding Router Alert value 0
//! (RFC 2711, MLD) and a PadN; group records of type `MODE_IS_EXCLUDE`
//! (answers to queries) or `CHANGE_TO_EXCLUDE_MODE` / `CHANGE_TO_INCLUDE_MODE`
//! (joins and leaves), never with sources (no source filters here).
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::parse::checksum::{self, Sum};
use crate::parse::ether;

/// IP protocol number of IGMP.
pub const PROTO_IGMP: u8 = 2;

/// IGMP message types.
pub mod igmp_type {
    pub const QUERY: u8 = 0x11;
    pub const V2_REPORT: u8 = 0x16;
    pub const V2_LEAVE: u8 = 0x17;
    pub const V3_REPORT: u8 = 0x22;
}

/// MLD message types (ICMPv6).
pub mod mld_type {
    pub const QUERY: u8 = 130;
    pub const V2_REPORT: u8 = 143;
}

/// Group record types (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
pub mod record {
    /// Current state: the group, from every source (an answer to a query).
    pub const MODE_IS_EXCLUDE: u8 = 2;
    /// State change: leave (include nothing).
    pub const CHANGE_TO_INCLUDE: u8 = 3;
    /// State change: join (exclude nothing).
    pub const CHANGE_TO_EXCLUDE: u8 = 4;
}

/// 224.0.0.22: where IGMPv3 reports go (RFC 3376 §4.2.14).
pub const IGMPV3_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 22);
/// 224.0.0.2: where IGMPv2 leaves go (RFC 2236 §3).
pub const ALL_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 2);
/// ff02::16: where MLDv2 reports go (RFC 3810 §5.2.14).
pub const MLDV2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);

/// IPv4 header with the 4-byte Router Alert option.
const IP4_LEN: usize = 24;
/// IPv6 header and an 8-byte hop-by-hop header.
const IP6_LEN: usize = 40 + 8;
const IGMPV3_HEADER: usize = 8;
const IGMPV3_RECORD: usize = 8;
const MLDV2_HEADER: usize = 8;
const MLDV2_RECORD: usize = 20;

/// Most group records in one report: every report fits a 1500-byte MTU
/// (RFC 3376 §4.2.16: more records go in further reports).
pub const MAX_RECORDS_V4: usize = (1500 - IP4_LEN - IGMPV3_HEADER) / IGMPV3_RECORD;
pub const MAX_RECORDS_V6: usize = (1500 - IP6_LEN - MLDV2_HEADER) / MLDV2_RECORD;
/// The largest frame a report here takes.
pub const MAX_FRAME: usize = ether::HEADER_LEN + 1500;

/// The Ethernet address of IPv4 group `g` (RFC 1112 §6.4: 01:00:5e and the
/// low 23 bits).
pub fn ipv4_multicast_mac(g: Ipv4Addr) -> [u8; 6] {
    let o = g.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

fn eth(out: &mut [u8], dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    out[0..6].copy_from_slice(&dst);
    out[6..12].copy_from_slice(&src);
    out[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// IPv4 header with Router Alert, TTL 1, protocol IGMP, `payload` bytes after it.
fn ip4(out: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr, payload: usize) {
    let total = (IP4_LEN + payload) as u16;
    let h = &mut out[..IP4_LEN];
    h[0] = 0x46; // version 4, IHL 6 (24 bytes)
    h[1] = 0xc0; // precedence 6, as the kernel's igmp_send_report
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&[0, 0]);
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
    h[8] = 1; // TTL 1 (RFC 3376 §4)
    h[9] = PROTO_IGMP;
    h[10..12].copy_from_slice(&[0, 0]);
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    h[20..24].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]); // Router Alert (RFC 2113)
    let c = checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// IPv6 header and hop-by-hop Router Alert (MLD), hop limit 1, `payload`
/// bytes of ICMPv6 after them.
fn ip6(out: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr, payload: usize) {
    let h = &mut out[..IP6_LEN];
    h[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
    h[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    h[6] = 0; // hop-by-hop options next
    h[7] = 1; // hop limit 1 (RFC 3810 §5)
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    // Next header ICMPv6, length 0 (8 bytes), Router Alert 0 (MLD), PadN of 0.
    h[40..48].copy_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
}

/// An IGMPv3 membership report (RFC 3376 §4.2) from `src` (our address on
/// the port, or 0.0.0.0) with one record of `kind` per group. The frame's
/// length; `None` when `out` is too small or there are more groups than
/// [`MAX_RECORDS_V4`].
pub fn write_igmpv3_report(
    out: &mut [u8],
    mac: [u8; 6],
    src: Ipv4Addr,
    kind: u8,
    groups: &[Ipv4Addr],
) -> Option<usize> {
    if groups.len() > MAX_RECORDS_V4 {
        return None;
    }
    let igmp_len = IGMPV3_HEADER + IGMPV3_RECORD * groups.len();
    let (m, len) = igmp_frame(out, mac, src, IGMPV3_ROUTERS, igmp_len)?;
    m[0] = igmp_type::V3_REPORT;
    m[1..6].copy_from_slice(&[0; 5]); // reserved, checksum, reserved
    m[6..8].copy_from_slice(&(groups.len() as u16).to_be_bytes());
    let records = m[IGMPV3_HEADER..].chunks_exact_mut(IGMPV3_RECORD);
    for (r, g) in records.zip(groups) {
        record_head(r, kind);
        r[4..8].copy_from_slice(&g.octets());
    }
    let c = checksum::checksum(m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// The Ethernet and IPv4 headers of an IGMP message of `igmp_len` bytes to
/// `dst`, written into `out`: the message's bytes (to fill) and the
/// frame's length.
fn igmp_frame(
    out: &mut [u8],
    mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    igmp_len: usize,
) -> Option<(&mut [u8], usize)> {
    let len = ether::HEADER_LEN + IP4_LEN + igmp_len;
    let out = out.get_mut(..len)?;
    eth(out, ipv4_multicast_mac(dst), mac, ether::ethertype::IPV4);
    ip4(&mut out[ether::HEADER_LEN..], src, dst, igmp_len);
    Some((&mut out[ether::HEADER_LEN + IP4_LEN..], len))
}

/// A group record's first four bytes: its type, no auxiliary data, no sources.
fn record_head(r: &mut [u8], kind: u8) {
    r[0] = kind;
    r[1] = 0;
    r[2..4].copy_from_slice(&[0, 0]);
}

/// An IGMPv2 membership report for `group` (RFC 2236 §2: to the group
/// itself), or a leave (type 0x17, to 224.0.0.2). The frame's length.
pub fn write_igmpv2(
    out: &mut [u8],
    mac: [u8; 6],
    src: Ipv4Addr,
    msg_type: u8,
    group: Ipv4Addr,
) -> Option<usize> {
    let dst = if msg_type == igmp_type::V2_LEAVE {
        ALL_ROUTERS
    } else {
        group
    };
    let (m, len) = igmp_frame(out, mac, src, dst, 8)?;
    m[0] = msg_type;
    m[1] = 0;
    m[2..4].copy_from_slice(&[0, 0]);
    m[4..8].copy_from_slice(&group.octets());
    let c = checksum::checksum(m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// An MLDv2 report (RFC 3810 §5.2) from `src` (our link-local address, or
/// `::` when the port has none: §5.2.13) with one record of `kind` per
/// group. The frame's length; `None` when `out` is too small or there are
/// more groups than [`MAX_RECORDS_V6`].
pub fn write_mldv2_report(
    out: &mut [u8],
    mac: [u8; 6],
    src: &Ipv6Addr,
    kind: u8,
    groups: &[Ipv6Addr],
) -> Option<usize> {
    if groups.len() > MAX_RECORDS_V6 {
        return None;
    }
    let icmp_len = MLDV2_HEADER + MLDV2_RECORD * groups.len();
    let len = ether::HEADER_LEN + IP6_LEN + icmp_len;
    let out = out.get_mut(..len)?;
    eth(
        out,
        ether::ipv6_multicast_mac(&MLDV2_ROUTERS),
        mac,
        ether::ethertype::IPV6,
    );
    ip6(&mut out[ether::HEADER_LEN..], src, &MLDV2_ROUTERS, icmp_len);
    let m = &mut out[ether::HEADER_LEN + IP6_LEN..];
    m[0] = mld_type::V2_REPORT;
    m[1] = 0;
    m[2..6].copy_from_slice(&[0, 0, 0, 0]);
    m[6..8].copy_from_slice(&(groups.len() as u16).to_be_bytes());
    for (r, g) in m[MLDV2_HEADER..].chunks_exact_mut(MLDV2_RECORD).zip(groups) {
        record_head(r, kind);
        r[4..20].copy_from_slice(&g.octets());
    }
    let sum = checksum::pseudo_v6(src, &MLDV2_ROUTERS, crate::parse::PROTO_ICMPV6, icmp_len as u32)
        .add_bytes(m);
    let c = sum.checksum();
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// A membership query as the host side needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query<A> {
    /// `None`: a general query (every group); else the group asked about.
    pub group: Option<A>,
    /// The longest a host may wait before it answers, in milliseconds.
    pub max_resp_ms: u32,
    /// The protocol version the querier speaks: 1 or 2 (IGMP: also 3; MLD: 1 or 2).
    pub version: u8,
}

/// RFC 3376 §4.1.1 / RFC 3810 §5.1.3: a code below `2^(bits-1)` is the
/// value; above, a floating point value `(mant | 1 << mant_bits) << (exp + 3)`.
fn resp_code(code: u32, exp_bits: u32, mant_bits: u32) -> u32 {
    let top = 1 << (exp_bits + mant_bits);
    if code < top {
        code
    } else {
        let mant = code & ((1 << mant_bits) - 1);
        let exp = (code >> mant_bits) & ((1 << exp_bits) - 1);
        (mant | (1 << mant_bits)) << (exp + 3)
    }
}

/// An IGMP query in `frame` (IPv4 header at `l3`, IGMP at `l4`, the IP
/// total length bounding the message), or `None` if it is not a valid one
/// (another IGMP type, too short, bad checksum, a group-specific query
/// whose group is no group). Versions as RFC 3376 §7.1 tells them apart:
/// 8 bytes with a zero max response time is IGMPv1, 8 bytes IGMPv2, 12 or
/// more IGMPv3.
pub fn parse_igmp_query(frame: &[u8], l3: usize, l4: usize) -> Option<Query<Ipv4Addr>> {
    let ip = frame.get(l3..l3 + 20)?;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let end = l3.checked_add(total)?;
    let m = frame.get(l4..end)?;
    if m.len() < 8 || m[0] != igmp_type::QUERY {
        return None;
    }
    if !Sum::new().add_bytes(m).verifies() {
        return None;
    }
    let g = Ipv4Addr::new(m[4], m[5], m[6], m[7]);
    let group = if g.is_unspecified() {
        None
    } else if g.is_multicast() {
        Some(g)
    } else {
        return None;
    };
    let (version, max_resp_ms) = match m.len() {
        8 if m[1] == 0 => (1, 10_000),
        8 => (2, u32::from(m[1]) * 100),
        9..=11 => return None,
        _ => (3, resp_code(u32::from(m[1]), 3, 4) * 100),
    };
    Some(Query {
        group,
        max_resp_ms,
        version,
    })
}

/// An MLD query in `frame` (IPv6 header at `l3`, ICMPv6 at `l4` after the
/// extension headers, the payload length bounding it), or `None` if it is
/// not a valid one: RFC 3810 §5.1.14 and the kernel's `igmp6_event_query`
/// take only queries from a link-local source with hop limit 1, and the
/// ICMPv6 checksum must verify. 24 bytes is MLDv1, 28 or more MLDv2.
pub fn parse_mld_query(frame: &[u8], l3: usize, l4: usize) -> Option<Query<Ipv6Addr>> {
    let ip = frame.get(l3..l3 + 40)?;
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let end = (l3 + 40).checked_add(plen)?;
    let m = frame.get(l4..end)?;
    if m.len() < 24 || m[0] != mld_type::QUERY || m[1] != 0 {
        return None;
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&ip[8..24]);
    let src = Ipv6Addr::from(a);
    a.copy_from_slice(&ip[24..40]);
    let dst = Ipv6Addr::from(a);
    if ip[7] != 1 || src.segments()[0] & 0xffc0 != 0xfe80 {
        return None;
    }
    let sum = checksum::pseudo_v6(&src, &dst, crate::parse::PROTO_ICMPV6, m.len() as u32)
        .add_bytes(m);
    if !sum.verifies() {
        return None;
    }
    a.copy_from_slice(&m[8..24]);
    let g = Ipv6Addr::from(a);
    let group = if g.is_unspecified() {
        None
    } else if g.is_multicast() {
        Some(g)
    } else {
        return None;
    };
    let code = u32::from(u16::from_be_bytes([m[4], m[5]]));
    let (version, max_resp_ms) = match m.len() {
        24 => (1, code),
        25..=27 => return None,
        _ => (2, resp_code(code, 3, 12)),
    };
    Some(Query {
        group,
        max_resp_ms,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(h: &str) -> Vec<u8> {
        let h: String = h.split_whitespace().collect();
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    /// A join of 239.1.2.3 from 198.18.0.1, written out by hand from RFC
    /// 3376 §4.2 and RFC 2113 (the layout Linux's `igmpv3_newpack` sends:
    /// TOS 0xc0, DF, TTL 1, Router Alert); both checksums are checked by
    /// verification and the IGMP one against a sum done by hand.
    #[test]
    fn igmpv3_join_report_bytes() {
        let mut f = [0u8; 128];
        let n = write_igmpv3_report(
            &mut f,
            MAC,
            Ipv4Addr::new(198, 18, 0, 1),
            record::CHANGE_TO_EXCLUDE,
            &[Ipv4Addr::new(239, 1, 2, 3)],
        )
        .unwrap();
        let want = unhex(
            "01005e000016 020000000001 0800
             46c0 0028 0000 4000 0102 0000 c6120001 e0000016 94040000
             2200 0000 0000 0001  04 00 0000 ef010203",
        );
        assert_eq!(n, want.len());
        let got = &f[..n];
        // Header checksum and IGMP checksum: verify, then compare the rest.
        assert!(checksum::ipv4_header_verifies(&got[14..38]));
        assert!(Sum::new().add_bytes(&got[38..]).verifies());
        let mut masked = got.to_vec();
        masked[24..26].copy_from_slice(&[0, 0]);
        masked[40..42].copy_from_slice(&[0, 0]);
        assert_eq!(masked, want);
        // 0x2200 + 0x0001 + 0x0400 + 0xef01 + 0x0203 = 0x11705, folded
        // 0x1706, complemented:
        assert_eq!(u16::from_be_bytes([got[40], got[41]]), 0xe8f9);
    }

    #[test]
    fn igmpv2_report_goes_to_the_group_and_leave_to_all_routers() {
        let mut f = [0u8; 64];
        let g = Ipv4Addr::new(239, 1, 2, 3);
        let n = write_igmpv2(&mut f, MAC, Ipv4Addr::new(198, 18, 0, 1), igmp_type::V2_REPORT, g)
            .unwrap();
        assert_eq!(n, 14 + 24 + 8);
        assert_eq!(&f[0..6], &[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
        assert_eq!(&f[30..34], &g.octets());
        assert_eq!(&f[38..46], &unhex("1600 f8fa ef010203")[..]);
        assert!(Sum::new().add_bytes(&f[38..46]).verifies());
        let n = write_igmpv2(&mut f, MAC, Ipv4Addr::new(198, 18, 0, 1), igmp_type::V2_LEAVE, g)
            .unwrap();
        assert_eq!(&f[0..6], &[0x01, 0x00, 0x5e, 0, 0, 2]);
        assert_eq!(&f[30..34], &[224, 0, 0, 2]);
        assert_eq!(f[38], 0x17);
        assert!(Sum::new().add_bytes(&f[38..n]).verifies());
    }

    #[test]
    fn mldv2_report_bytes() {
        let mut f = [0u8; 128];
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let g: Ipv6Addr = "ff15::1".parse().unwrap();
        let n = write_mldv2_report(&mut f, MAC, &src, record::CHANGE_TO_EXCLUDE, &[g]).unwrap();
        let want = unhex(
            "333300000016 020000000001 86dd
             60000000 0024 00 01 fe800000000000000000000000000001 ff020000000000000000000000000016
             3a00 0502 0000 0100
             8f00 0000 0000 0001 04 00 0000 ff150000000000000000000000000001",
        );
        assert_eq!(n, want.len());
        let mut masked = f[..n].to_vec();
        masked[64..66].copy_from_slice(&[0, 0]);
        assert_eq!(masked, want);
        let sum = checksum::pseudo_v6(&src, &MLDV2_ROUTERS, 58, 28).add_bytes(&f[62..n]);
        assert!(sum.verifies());
    }

    #[test]
    fn too_many_records_or_a_short_buffer_is_refused() {
        let mut f = [0u8; MAX_FRAME];
        let g4 = [Ipv4Addr::new(239, 0, 0, 1); MAX_RECORDS_V4 + 1];
        assert!(write_igmpv3_report(&mut f, MAC, Ipv4Addr::UNSPECIFIED, 2, &g4).is_none());
        let n = write_igmpv3_report(&mut f, MAC, Ipv4Addr::UNSPECIFIED, 2, &g4[1..]).unwrap();
        assert!(n <= MAX_FRAME);
        let g6 = [Ipv6Addr::UNSPECIFIED; MAX_RECORDS_V6 + 1];
        assert!(write_mldv2_report(&mut f, MAC, &Ipv6Addr::UNSPECIFIED, 2, &g6).is_none());
        let n = write_mldv2_report(&mut f, MAC, &Ipv6Addr::UNSPECIFIED, 2, &g6[1..]).unwrap();
        assert!(n <= MAX_FRAME);
        let mut small = [0u8; 40];
        assert!(write_igmpv2(&mut small, MAC, Ipv4Addr::UNSPECIFIED, 0x16, g4[0]).is_none());
    }

    /// An IGMP query frame: IPv4 with Router Alert, to `dst`, the message `igmp`.
    fn igmp_frame(dst: [u8; 4], igmp: &[u8]) -> Vec<u8> {
        let mut f = unhex("01005e000001 020000000002 0800");
        let total = (24 + igmp.len()) as u16;
        let mut ip = vec![0x46, 0xc0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0, 0, 1, 2, 0, 0, 198, 18, 0, 2]);
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(&[0x94, 4, 0, 0]);
        let c = checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut m = igmp.to_vec();
        let c = checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&m);
        f
    }

    #[test]
    fn igmp_queries_of_each_version() {
        // v3 general query, max resp code 100 (10 s), QRV 2, QQIC 125.
        let f = igmp_frame([224, 0, 0, 1], &unhex("1164 0000 00000000 02 7d 0000"));
        assert_eq!(
            parse_igmp_query(&f, 14, 38),
            Some(Query { group: None, max_resp_ms: 10_000, version: 3 })
        );
        // v3 group-specific, exponential code 0x8f: (0xf | 0x10) << 3 = 248 (24.8 s).
        let f = igmp_frame([239, 1, 2, 3], &unhex("118f 0000 ef010203 02 7d 0000"));
        assert_eq!(
            parse_igmp_query(&f, 14, 38),
            Some(Query { group: Some(Ipv4Addr::new(239, 1, 2, 3)), max_resp_ms: 24_800, version: 3 })
        );
        // v2 (8 bytes), 2.5 s.
        let f = igmp_frame([224, 0, 0, 1], &unhex("1119 0000 00000000"));
        assert_eq!(
            parse_igmp_query(&f, 14, 38),
            Some(Query { group: None, max_resp_ms: 2_500, version: 2 })
        );
        // v1 (max resp 0): 10 s.
        let f = igmp_frame([224, 0, 0, 1], &unhex("1100 0000 00000000"));
        assert_eq!(parse_igmp_query(&f, 14, 38).map(|q| q.version), Some(1));
        // A report is no query; a bad checksum, a truncated message, a
        // 10-byte one, a unicast group and a short frame are refused.
        let f = igmp_frame([224, 0, 0, 22], &unhex("2200 0000 0000 0000"));
        assert_eq!(parse_igmp_query(&f, 14, 38), None);
        let mut f = igmp_frame([224, 0, 0, 1], &unhex("1164 0000 00000000 02 7d 0000"));
        f[40] ^= 1;
        assert_eq!(parse_igmp_query(&f, 14, 38), None);
        let f = igmp_frame([224, 0, 0, 1], &unhex("1164 0000 00000000 02 7d 0000"));
        assert_eq!(parse_igmp_query(&f[..45], 14, 38), None);
        let f = igmp_frame([224, 0, 0, 1], &unhex("1164 0000 00000000 0203"));
        assert_eq!(parse_igmp_query(&f, 14, 38), None);
        let f = igmp_frame([224, 0, 0, 1], &unhex("1164 0000 c6120001 02 7d 0000"));
        assert_eq!(parse_igmp_query(&f, 14, 38), None);
        assert_eq!(parse_igmp_query(&f, 14, 400), None);
        assert_eq!(parse_igmp_query(&[], 14, 38), None);
    }

    fn mld_frame(src: &str, hop: u8, mld: &[u8]) -> Vec<u8> {
        let src: Ipv6Addr = src.parse().unwrap();
        let dst: Ipv6Addr = "ff02::1".parse().unwrap();
        let mut f = unhex("333300000001 020000000002 86dd");
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&((8 + mld.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, hop]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
        let mut m = mld.to_vec();
        let c = checksum::pseudo_v6(&src, &dst, 58, m.len() as u32)
            .add_bytes(&m)
            .checksum();
        m[2..4].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&m);
        f
    }

    #[test]
    fn mld_queries_of_each_version() {
        let l4 = 14 + 48;
        // MLDv2 general query, 10 s.
        let v2 = unhex("8200 0000 2710 0000 00000000000000000000000000000000 02 7d 0000");
        let f = mld_frame("fe80::2", 1, &v2);
        assert_eq!(
            parse_mld_query(&f, 14, l4),
            Some(Query { group: None, max_resp_ms: 10_000, version: 2 })
        );
        // Group-specific, exponential code 0x8001: (1 | 0x1000) << 3.
        let gs = unhex("8200 0000 8001 0000 ff150000000000000000000000000001 02 7d 0000");
        let f = mld_frame("fe80::2", 1, &gs);
        assert_eq!(
            parse_mld_query(&f, 14, l4),
            Some(Query { group: Some("ff15::1".parse().unwrap()), max_resp_ms: 0x1001 << 3, version: 2 })
        );
        // MLDv1 (24 bytes).
        let v1 = unhex("8200 0000 03e8 0000 00000000000000000000000000000000");
        let f = mld_frame("fe80::2", 1, &v1);
        assert_eq!(parse_mld_query(&f, 14, l4).map(|q| (q.version, q.max_resp_ms)), Some((1, 1000)));
        // Not link-local, hop limit 2, bad checksum: refused.
        assert_eq!(parse_mld_query(&mld_frame("fd00::2", 1, &v2), 14, l4), None);
        assert_eq!(parse_mld_query(&mld_frame("fe80::2", 2, &v2), 14, l4), None);
        let mut f = mld_frame("fe80::2", 1, &v2);
        f[l4 + 5] ^= 1;
        assert_eq!(parse_mld_query(&f, 14, l4), None);
        // A report is no query; truncated frames are refused.
        let f = mld_frame("fe80::2", 1, &unhex("8f00 0000 0000 0000"));
        assert_eq!(parse_mld_query(&f, 14, l4), None);
        let f = mld_frame("fe80::2", 1, &v2);
        assert_eq!(parse_mld_query(&f[..f.len() - 1], 14, l4), None);
        assert_eq!(parse_mld_query(&f[..30], 14, l4), None);
    }
}
