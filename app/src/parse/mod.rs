//! Wire parsing and writing: Ethernet II (+ up to two 802.1Q/802.1ad tags),
//! IPv4, IPv6 with extension headers, UDP.
//!
//! [`parse`] runs once per packet on the RX lcore. It never allocates and
//! never panics: every read is behind a length check, and every rejection is
//! a [`ParseError`] whose [`Reason`] indexes a plain counter array. The checks
//! and their order follow Linux (`ip_rcv_core`, `ipv6_rcv_core`, the exthdr
//! handlers, `__udp4_lib_rcv` / `__udp6_lib_rcv`) so that drop counts can be
//! compared with `nstat` on a kernel fed the same traffic.
//!
//! The typed views (`ether`, `ipv4`, `ipv6`, `udp`, `icmp`) follow smoltcp's
//! `wire` style; `build` writes frames (traffic generator, echo replies).

pub mod build;
pub mod checksum;
pub mod ether;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

use std::net::{IpAddr, Ipv6Addr};

use checksum::Sum;

/// Maximum number of IPv6 extension headers walked before giving up. Linux
/// has no fixed count but RFC 8200 §4.1 lists at most 8 kinds with one of
/// each (destination options twice); a longer chain is a resource attack.
pub const MAX_EXT_HEADERS: usize = 8;
/// Maximum total bytes of IPv6 extension headers. Also keeps every offset
/// this module reports well inside u16.
pub const MAX_EXT_BYTES: usize = 2048;

/// Protocol numbers used here (IANA).
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    #[inline]
    pub const fn index(self) -> usize {
        match self {
            Family::V4 => 0,
            Family::V6 => 1,
        }
    }
}

/// What the NIC said about a checksum (DPDK `RTE_MBUF_F_RX_*_CKSUM_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CsumHint {
    /// Not checked by hardware (or "none"): verify in software.
    #[default]
    Unknown,
    /// Hardware verified it: skip.
    Good,
    /// Hardware found it wrong: reject without looking.
    Bad,
}

/// Checksum offload results for one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// IPv4 header checksum (ignored for IPv6, which has none).
    pub ip: CsumHint,
    /// UDP checksum.
    pub l4: CsumHint,
}

/// Everything later stages need; nothing parses twice.
///
/// Offsets are from the start of the frame. `payload_len` is the UDP length
/// minus 8: bytes after it (IP padding past the UDP length, Ethernet
/// padding past the IP length) are not part of the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub family: Family,
    pub vlan_count: u8,
    pub l3_off: u16,
    pub l4_off: u16,
    pub payload_off: u16,
    pub payload_len: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
}

impl Datagram {
    /// The UDP payload inside `frame` (the frame this was parsed from).
    /// `None` only if a different, shorter frame is passed.
    #[inline]
    pub fn payload<'f>(&self, frame: &'f [u8]) -> Option<&'f [u8]> {
        let start = usize::from(self.payload_off);
        frame.get(start..start + usize::from(self.payload_len))
    }
}

/// Why a frame was not delivered as a UDP datagram. Every variant maps one to
/// one to a [`Reason`] (a drop counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The frame ends inside a header, or the IP length runs past it.
    #[error("truncated frame ({family:?})")]
    Truncated { family: Option<Family> },
    /// A third VLAN tag.
    #[error("more than two VLAN tags")]
    TooManyVlans,
    /// Not IPv4/IPv6; the responder may still want it (ARP).
    #[error("not IP: ethertype {ethertype:#06x}")]
    NotIp { ethertype: u16, l3_off: u16 },
    /// Version, IHL, total/payload length, jumbogram, malformed or
    /// unprocessable extension header, IPv6 martian addresses.
    #[error("bad {family:?} header")]
    BadIpHeader { family: Family },
    /// IPv4 header checksum.
    #[error("bad IPv4 header checksum")]
    BadIpChecksum,
    /// IPv6 extension header chain too long.
    #[error("IPv6 extension header chain over the limit")]
    ExtHeaderLimit,
    /// First fragment (offset 0, more fragments); no reassembly here.
    #[error("first fragment ({family:?})")]
    FragmentFirst { family: Family },
    /// Non-first fragment; never read as carrying a UDP header.
    #[error("non-first fragment ({family:?})")]
    FragmentLater { family: Family },
    /// IP but not UDP. `l4_off` is where the header with protocol/next
    /// header `proto` starts (for ICMP/ICMPv6 responders and for RFC 8200
    /// parameter-problem pointers).
    #[error("not UDP: protocol {proto}")]
    NotUdp { family: Family, proto: u8, l3_off: u16, l4_off: u16 },
    /// UDP header missing, length < 8 or beyond the IP payload.
    #[error("bad UDP length ({family:?})")]
    BadUdpLength { family: Family },
    /// UDP checksum wrong (software check or hardware said bad).
    #[error("bad UDP checksum ({family:?})")]
    UdpChecksum { family: Family },
    /// UDP over IPv6 with checksum 0 (RFC 8200 §8.1: must be discarded).
    #[error("IPv6 UDP with zero checksum")]
    Udp6ZeroChecksum,
}

impl ParseError {
    /// The drop counter this error belongs to.
    #[inline]
    pub const fn reason(&self) -> Reason {
        match self {
            ParseError::Truncated { .. } => Reason::Truncated,
            ParseError::TooManyVlans => Reason::TooManyVlans,
            ParseError::NotIp { .. } => Reason::NotIp,
            ParseError::BadIpHeader { .. } => Reason::BadIpHeader,
            ParseError::BadIpChecksum => Reason::BadIpChecksum,
            ParseError::ExtHeaderLimit => Reason::ExtHeaderLimit,
            ParseError::FragmentFirst { .. } => Reason::FragmentFirst,
            ParseError::FragmentLater { .. } => Reason::FragmentLater,
            ParseError::NotUdp { .. } => Reason::NotUdp,
            ParseError::BadUdpLength { .. } => Reason::BadUdpLength,
            ParseError::UdpChecksum { .. } => Reason::UdpChecksum,
            ParseError::Udp6ZeroChecksum => Reason::Udp6ZeroChecksum,
        }
    }

    /// The IP family, when the frame got far enough to have one.
    #[inline]
    pub const fn family(&self) -> Option<Family> {
        match *self {
            ParseError::Truncated { family } => family,
            ParseError::TooManyVlans | ParseError::NotIp { .. } => None,
            ParseError::BadIpChecksum => Some(Family::V4),
            ParseError::ExtHeaderLimit | ParseError::Udp6ZeroChecksum => Some(Family::V6),
            ParseError::BadIpHeader { family }
            | ParseError::FragmentFirst { family }
            | ParseError::FragmentLater { family }
            | ParseError::NotUdp { family, .. }
            | ParseError::BadUdpLength { family }
            | ParseError::UdpChecksum { family } => Some(family),
        }
    }
}

/// Drop counter index, one per [`ParseError`] variant. Counters can be a
/// `[u64; Reason::COUNT]` per family.
///
/// The Linux counter each one corresponds to (`nstat` names):
///
/// | Reason | Linux |
/// |---|---|
/// | `Truncated` | header cut short: `IpInHdrErrors` / `Ip6InHdrErrors` (`pskb_may_pull` fails); IP total/payload length past the frame: `IpInTruncatedPkts` / `Ip6InTruncatedPkts` |
/// | `TooManyVlans` | none (Linux would need stacked VLAN devices; counted as `rx_dropped` of the device) |
/// | `NotIp` | not an IP error: handed to another protocol (ARP) or `rx_nohandler` |
/// | `BadIpHeader` | `IpInHdrErrors` / `Ip6InHdrErrors` |
/// | `BadIpChecksum` | `IpInCsumErrors` and `IpInHdrErrors` |
/// | `ExtHeaderLimit` | `Ip6InHdrErrors` (Linux bounds options, not headers; closest counter) |
/// | `FragmentFirst`, `FragmentLater` | `IpReasmReqds` / `Ip6ReasmReqds` (Linux reassembles; this engine does not, so they are dropped) |
/// | `NotUdp` | not a UDP error: another protocol's handler, or `IpInUnknownProtos` / `Ip6InUnknownProtos` when none |
/// | `BadUdpLength` | `UdpInErrors` / `Udp6InErrors` |
/// | `UdpChecksum` | `UdpInCsumErrors` and `UdpInErrors` (v6: `Udp6InCsumErrors`, `Udp6InErrors`) |
/// | `Udp6ZeroChecksum` | `Udp6InCsumErrors` and `Udp6InErrors` (`udp6_csum_init` rejects zero) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Reason {
    Truncated,
    TooManyVlans,
    NotIp,
    BadIpHeader,
    BadIpChecksum,
    ExtHeaderLimit,
    FragmentFirst,
    FragmentLater,
    NotUdp,
    BadUdpLength,
    UdpChecksum,
    Udp6ZeroChecksum,
}

impl Reason {
    pub const ALL: [Reason; 12] = [
        Reason::Truncated,
        Reason::TooManyVlans,
        Reason::NotIp,
        Reason::BadIpHeader,
        Reason::BadIpChecksum,
        Reason::ExtHeaderLimit,
        Reason::FragmentFirst,
        Reason::FragmentLater,
        Reason::NotUdp,
        Reason::BadUdpLength,
        Reason::UdpChecksum,
        Reason::Udp6ZeroChecksum,
    ];
    pub const COUNT: usize = Self::ALL.len();

    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Truncated => "truncated",
            Reason::TooManyVlans => "too_many_vlans",
            Reason::NotIp => "not_ip",
            Reason::BadIpHeader => "bad_ip_header",
            Reason::BadIpChecksum => "bad_ip_checksum",
            Reason::ExtHeaderLimit => "ext_header_limit",
            Reason::FragmentFirst => "fragment_first",
            Reason::FragmentLater => "fragment_later",
            Reason::NotUdp => "not_udp",
            Reason::BadUdpLength => "bad_udp_length",
            Reason::UdpChecksum => "udp_checksum",
            Reason::Udp6ZeroChecksum => "udp6_zero_checksum",
        }
    }

    /// True for the reasons Linux counts as UDP errors (`UdpInErrors`).
    pub const fn is_udp_error(self) -> bool {
        matches!(self, Reason::BadUdpLength | Reason::UdpChecksum | Reason::Udp6ZeroChecksum)
    }
}

/// Big-endian u16 at `off`, or `None` past the end.
#[inline(always)]
fn be16(b: &[u8], off: usize) -> Option<u16> {
    match b.get(off..off + 2) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

/// Offsets here are bounded by construction (Ethernet+tags <= 22, IPv4
/// header <= 60, IPv6 extension bytes <= MAX_EXT_BYTES, IP lengths <= 65535
/// + header); this saturating conversion only guards the invariant.
#[inline(always)]
fn off16(v: usize) -> u16 {
    debug_assert!(v <= usize::from(u16::MAX));
    u16::try_from(v).unwrap_or(u16::MAX)
}

/// Parses one Ethernet frame down to a UDP datagram.
///
/// `frame` is the whole frame as received (FCS stripped, as DPDK delivers
/// it). Trailing Ethernet padding is ignored: the IP length decides where
/// the datagram ends.
#[inline]
pub fn parse(frame: &[u8], hints: Offload) -> Result<Datagram, ParseError> {
    let eth = ether::EthernetFrame::new_checked(frame)?;
    let mut ethertype = eth.ethertype();
    let mut l3 = ether::HEADER_LEN;
    let mut vlan_count: u8 = 0;
    while ether::is_vlan_tpid(ethertype) {
        if vlan_count == 2 {
            return Err(ParseError::TooManyVlans);
        }
        // Inner EtherType sits in the last two bytes of the 4-byte tag.
        ethertype = be16(frame, l3 + 2).ok_or(ParseError::Truncated { family: None })?;
        l3 += ether::VLAN_TAG_LEN;
        vlan_count += 1;
    }
    let head = Head { vlan_count, l3, src_mac: eth.src_mac(), dst_mac: eth.dst_mac() };
    match ethertype {
        ether::ethertype::IPV4 => parse_v4(frame, head, hints),
        ether::ethertype::IPV6 => parse_v6(frame, head, hints),
        other => Err(ParseError::NotIp { ethertype: other, l3_off: off16(l3) }),
    }
}

/// What the Ethernet layer found, carried into the IP parsers.
#[derive(Clone, Copy)]
struct Head {
    vlan_count: u8,
    l3: usize,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
}

#[inline]
fn parse_v4(frame: &[u8], head: Head, hints: Offload) -> Result<Datagram, ParseError> {
    const FAM: Family = Family::V4;
    let l3 = head.l3;
    let ipbuf = frame.get(l3..).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let ip = ipv4::Ipv4Packet::new_checked(ipbuf)?;
    // ip_rcv_core order: version/IHL, header present, checksum, lengths.
    if ip.version() != 4 || ip.ihl() < 5 {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    let hl = ip.header_len();
    let header = ipbuf.get(..hl).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    match hints.ip {
        CsumHint::Good => {}
        CsumHint::Bad => return Err(ParseError::BadIpChecksum),
        CsumHint::Unknown => {
            if !Sum::new().add_bytes(header).verifies() {
                return Err(ParseError::BadIpChecksum);
            }
        }
    }
    let total = usize::from(ip.total_len());
    if total > ipbuf.len() {
        return Err(ParseError::Truncated { family: Some(FAM) });
    }
    if total < hl {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    if ip.is_fragment() {
        return Err(if ip.frag_offset() == 0 {
            ParseError::FragmentFirst { family: FAM }
        } else {
            ParseError::FragmentLater { family: FAM }
        });
    }
    let l4 = l3 + hl;
    let proto = ip.protocol();
    if proto != PROTO_UDP {
        return Err(ParseError::NotUdp {
            family: FAM,
            proto,
            l3_off: off16(l3),
            l4_off: off16(l4),
        });
    }
    let src = ip.src_addr();
    let dst = ip.dst_addr();
    // The IP total length ends the datagram; Ethernet padding is cut here.
    let l4buf = ipbuf.get(hl..total).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let u = udp::UdpPacket::new_checked(l4buf, FAM)?;
    let ulen = usize::from(u.len());
    if ulen < udp::HEADER_LEN || ulen > l4buf.len() {
        return Err(ParseError::BadUdpLength { family: FAM });
    }
    let csum = u.checksum();
    // RFC 768: zero means the sender computed no checksum.
    if csum != 0 {
        match hints.l4 {
            CsumHint::Good => {}
            CsumHint::Bad => return Err(ParseError::UdpChecksum { family: FAM }),
            CsumHint::Unknown => {
                let seg = l4buf.get(..ulen).ok_or(ParseError::BadUdpLength { family: FAM })?;
                let s = checksum::pseudo_v4(src, dst, PROTO_UDP, u.len()).combine(Sum::new().add_bytes(seg));
                if !s.verifies() {
                    return Err(ParseError::UdpChecksum { family: FAM });
                }
            }
        }
    }
    Ok(datagram(head, FAM, l4, ulen, IpAddr::V4(src), IpAddr::V4(dst), &u))
}

#[inline]
fn datagram(
    head: Head,
    family: Family,
    l4: usize,
    ulen: usize,
    src: IpAddr,
    dst: IpAddr,
    u: &udp::UdpPacket<&[u8]>,
) -> Datagram {
    Datagram {
        family,
        vlan_count: head.vlan_count,
        l3_off: off16(head.l3),
        l4_off: off16(l4),
        payload_off: off16(l4 + udp::HEADER_LEN),
        payload_len: off16(ulen - udp::HEADER_LEN),
        src,
        dst,
        sport: u.src_port(),
        dport: u.dst_port(),
        src_mac: head.src_mac,
        dst_mac: head.dst_mac,
    }
}

/// Linux `ipv6_rcv_core` drops these before any upper layer sees them:
/// multicast source (RFC 4291 §2.7), and loopback source or destination
/// arriving on a non-loopback device (RFC 4291 §2.5.3).
#[inline]
fn v6_martian(src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
    src.is_multicast() || src.is_loopback() || dst.is_loopback()
}

#[inline]
fn parse_v6(frame: &[u8], head: Head, hints: Offload) -> Result<Datagram, ParseError> {
    use ipv6::next_header as nh;
    const FAM: Family = Family::V6;
    let l3 = head.l3;
    let ipbuf = frame.get(l3..).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let ip = ipv6::Ipv6Packet::new_checked(ipbuf)?;
    if ip.version() != 6 {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    let plen = usize::from(ip.payload_len());
    let mut next = ip.next_header();
    // Payload length 0 with a hop-by-hop header first is the RFC 2675
    // jumbogram encoding, which this engine does not support. Payload length
    // 0 otherwise is an ordinary empty payload, as in Linux.
    if plen == 0 && next == nh::HOP_BY_HOP {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    let ip_end = ipv6::HEADER_LEN + plen;
    if ip_end > ipbuf.len() {
        return Err(ParseError::Truncated { family: Some(FAM) });
    }
    let src = ip.src_addr();
    let dst = ip.dst_addr();
    if v6_martian(&src, &dst) {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    // Everything from here on is bounded by the payload length, not the
    // frame: Ethernet padding is not IPv6 payload.
    let packet = ipbuf.get(..ip_end).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let mut off = ipv6::HEADER_LEN;
    let mut count = 0usize;
    while next != nh::UDP {
        match next {
            nh::HOP_BY_HOP | nh::ROUTING | nh::DEST_OPTS | nh::FRAGMENT => {}
            // Anything else (ESP, AH, ICMPv6, TCP, no-next-header ...) ends
            // the walk; `off` is where that header starts.
            _ => return Err(not_udp_v6(next, l3, off)),
        }
        // RFC 8200 §4: hop-by-hop only directly after the fixed header; a
        // later one is handled like an unrecognized Next Header (Linux:
        // Ip6InUnknownProtos, ICMPv6 parameter problem code 1).
        if next == nh::HOP_BY_HOP && count != 0 {
            return Err(not_udp_v6(next, l3, off));
        }
        if count == MAX_EXT_HEADERS {
            return Err(ParseError::ExtHeaderLimit);
        }
        count += 1;
        let rest = packet.get(off..).ok_or(ParseError::BadIpHeader { family: FAM })?;
        let len = if next == nh::FRAGMENT {
            let f = ipv6::FragmentHeader::new_checked(rest)?;
            if f.frag_offset() != 0 {
                return Err(ParseError::FragmentLater { family: FAM });
            }
            if f.more_frags() {
                return Err(ParseError::FragmentFirst { family: FAM });
            }
            // Atomic fragment (offset 0, M=0; RFC 6946): Linux's
            // ipv6_frag_rcv skips the header and carries on.
            next = f.next_header();
            ipv6::FRAG_HEADER_LEN
        } else {
            let h = ipv6::ExtHeader::new_checked(rest)?;
            // A routing header with segments left means we are not the
            // final destination; Linux drops it (unknown/deprecated types
            // and SRv6 off by default) counting Ip6InHdrErrors. With
            // segments left 0 the fixed header holds the final destination.
            if next == nh::ROUTING && h.segments_left() != 0 {
                return Err(ParseError::BadIpHeader { family: FAM });
            }
            next = h.next_header();
            h.header_len()
        };
        off += len;
        if off - ipv6::HEADER_LEN > MAX_EXT_BYTES {
            return Err(ParseError::ExtHeaderLimit);
        }
    }
    let l4buf = packet.get(off..).ok_or(ParseError::BadUdpLength { family: FAM })?;
    let u = udp::UdpPacket::new_checked(l4buf, FAM)?;
    // Linux __udp6_lib_rcv: length 0 means "the rest of the IP payload"
    // (jumbo UDP, RFC 2675 §4); the jumbogram itself was refused above.
    let ulen = match usize::from(u.len()) {
        0 => l4buf.len(),
        n => n,
    };
    if ulen < udp::HEADER_LEN || ulen > l4buf.len() {
        return Err(ParseError::BadUdpLength { family: FAM });
    }
    if u.checksum() == 0 {
        return Err(ParseError::Udp6ZeroChecksum);
    }
    match hints.l4 {
        CsumHint::Good => {}
        CsumHint::Bad => return Err(ParseError::UdpChecksum { family: FAM }),
        CsumHint::Unknown => {
            let seg = l4buf.get(..ulen).ok_or(ParseError::BadUdpLength { family: FAM })?;
            // ulen <= 65535 here (bounded by the 16-bit payload length).
            let s = checksum::pseudo_v6(&src, &dst, PROTO_UDP, ulen as u32).combine(Sum::new().add_bytes(seg));
            if !s.verifies() {
                return Err(ParseError::UdpChecksum { family: FAM });
            }
        }
    }
    Ok(datagram(head, FAM, l3 + off, ulen, IpAddr::V6(src), IpAddr::V6(dst), &u))
}

#[inline]
fn not_udp_v6(proto: u8, l3: usize, off: usize) -> ParseError {
    ParseError::NotUdp { family: Family::V6, proto, l3_off: off16(l3), l4_off: off16(l3 + off) }
}

