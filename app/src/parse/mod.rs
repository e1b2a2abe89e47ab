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
//! [`parse_into`] tries `fast_path` first: the untagged IPv4-without-options
//! or IPv6-without-extension-headers frame, read at fixed offsets, taken only
//! when every check passes. Everything else, and every error, goes through
//! [`parse_general`], so a drop is decided in one place.
//!
//! The typed views (`ether`, `arp`, `ipv4`, `ipv6`, `udp`, `icmp`) follow
//! smoltcp's `wire` style: a checked constructor proves the fixed header is
//! in the buffer, getters and setters read and write it, and each module's
//! `field` names the byte offsets, so header bytes are indexed nowhere else.
//! `build` writes frames (traffic generator, echo replies).

pub mod arp;
pub mod build;
pub mod checksum;
pub mod ether;
pub mod fast_path;
pub mod fragment;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

use std::net::{IpAddr, Ipv6Addr};
use std::ops::Range;

use checksum::Sum;

/// The bytes a view's `field` range names, as an array. The view's checked
/// constructor proved the range is inside the buffer; `N` is the range's
/// length (a mismatch is a bug in the view and panics).
#[inline(always)]
pub(crate) fn field_array<const N: usize>(b: &[u8], f: Range<usize>) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[f]);
    a
}

/// The big-endian u16 a view's two-byte `field` range names.
#[inline(always)]
pub(crate) fn field_be16(b: &[u8], f: Range<usize>) -> u16 {
    u16::from_be_bytes(field_array(b, f))
}

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

/// An IP family. One byte (`repr(u8)`, `V4` = 0): it is stored as is in
/// each packet's metadata (`MbufMeta.family`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Family {
    V4 = 0,
    V6 = 1,
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
    NotUdp {
        family: Family,
        proto: u8,
        l3_off: u16,
        l4_off: u16,
    },
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
/// | `FragmentFirst`, `FragmentLater` | fragments the reassembler does not take (reassembly off, not UDP); those it takes count `IpReasmReqds` / `Ip6ReasmReqds` (`reasm`) |
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

    /// A fragment (first or later): the reassembler's, when it takes it.
    #[inline]
    pub const fn is_fragment(self) -> bool {
        matches!(self, Reason::FragmentFirst | Reason::FragmentLater)
    }

    /// True for the reasons Linux counts as UDP errors (`UdpInErrors`).
    pub const fn is_udp_error(self) -> bool {
        matches!(
            self,
            Reason::BadUdpLength | Reason::UdpChecksum | Reason::Udp6ZeroChecksum
        )
    }
}

/// The UDP checksum over `ulen` bytes of `l4buf` and the family's
/// pseudo-header, unless the NIC already said good or bad.
#[inline(always)]
fn verify_udp(
    hint: CsumHint,
    l4buf: &[u8],
    ulen: usize,
    family: Family,
    pseudo: impl FnOnce() -> Sum,
) -> Result<(), ParseError> {
    match hint {
        CsumHint::Good => Ok(()),
        CsumHint::Bad => Err(ParseError::UdpChecksum { family }),
        CsumHint::Unknown => {
            let seg = l4buf
                .get(..ulen)
                .ok_or(ParseError::BadUdpLength { family })?;
            if pseudo().add_bytes_inline(seg).verifies() {
                Ok(())
            } else {
                Err(ParseError::UdpChecksum { family })
            }
        }
    }
}

/// The `N` bytes at `off` as an array reference, or `None` past the end.
#[inline(always)]
fn bytes_at<const N: usize>(b: &[u8], off: usize) -> Option<&[u8; N]> {
    b.get(off..off.checked_add(N)?)?.try_into().ok()
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
#[inline(always)]
pub fn parse(frame: &[u8], hints: Offload) -> Result<Datagram, ParseError> {
    let mut out = std::mem::MaybeUninit::uninit();
    parse_into(frame, hints, &mut out).copied()
}

/// [`parse`] writing the datagram into `out` (returned initialised): the
/// RX loop parses straight into its per-burst array, with no copy of the
/// summary (a copy read back right after its narrow field stores stalls on
/// store forwarding).
#[inline(always)]
pub fn parse_into<'o>(
    frame: &[u8],
    hints: Offload,
    out: &'o mut std::mem::MaybeUninit<Datagram>,
) -> Result<&'o mut Datagram, ParseError> {
    match fast_path::parse_common_into(frame, hints, out) {
        Ok(d) => Ok(d),
        Err(out) => parse_general(frame, hints, out),
    }
}

/// [`parse_into`] for every frame the fast path did not take: VLAN tags,
/// IPv4 options, IPv6 extension headers, and every frame that fails a
/// check (this is where errors are decided).
#[inline(never)]
pub fn parse_general<'o>(
    frame: &[u8],
    hints: Offload,
    out: &'o mut std::mem::MaybeUninit<Datagram>,
) -> Result<&'o mut Datagram, ParseError> {
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
    let head = Head {
        vlan_count,
        l3,
        src_mac: eth.src_mac(),
        dst_mac: eth.dst_mac(),
    };
    match ethertype {
        ether::ethertype::IPV4 => parse_v4(frame, head, hints, out),
        ether::ethertype::IPV6 => parse_v6(frame, head, hints, out),
        other => Err(ParseError::NotIp {
            ethertype: other,
            l3_off: off16(l3),
        }),
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

#[inline(always)]
fn parse_v4<'o>(
    frame: &[u8],
    head: Head,
    hints: Offload,
    out: &'o mut std::mem::MaybeUninit<Datagram>,
) -> Result<&'o mut Datagram, ParseError> {
    const FAM: Family = Family::V4;
    let l3 = head.l3;
    let ipbuf = frame
        .get(l3..)
        .ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let ip = ipv4::Ipv4Packet::new_checked(ipbuf)?;
    // ip_rcv_core order: version/IHL, header present, checksum, lengths.
    if ip.version() != 4 || ip.ihl() < 5 {
        return Err(ParseError::BadIpHeader { family: FAM });
    }
    let hl = ip.header_len();
    let header = ipbuf
        .get(..hl)
        .ok_or(ParseError::Truncated { family: Some(FAM) })?;
    match hints.ip {
        CsumHint::Good => {}
        CsumHint::Bad => return Err(ParseError::BadIpChecksum),
        CsumHint::Unknown => {
            if !checksum::ipv4_header_verifies(header) {
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
    // Source and destination as they sit in the header, for the
    // pseudo-header sum (always present: `header` is at least 20 bytes).
    let addrs = bytes_at::<8>(header, 12).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    // The IP total length ends the datagram; Ethernet padding is cut here.
    let l4buf = ipbuf
        .get(hl..total)
        .ok_or(ParseError::Truncated { family: Some(FAM) })?;
    let u = udp::UdpPacket::new_checked(l4buf, FAM)?;
    let ulen = usize::from(u.len());
    if ulen < udp::HEADER_LEN || ulen > l4buf.len() {
        return Err(ParseError::BadUdpLength { family: FAM });
    }
    let csum = u.checksum();
    // RFC 768: zero means the sender computed no checksum.
    if csum != 0 {
        verify_udp(hints.l4, l4buf, ulen, FAM, || {
            checksum::pseudo_v4_wire(addrs, PROTO_UDP, u.len())
        })?;
    }
    // Written in place: the caller's array slot, not a temporary.
    Ok(out.write(datagram(
        head,
        FAM,
        l4,
        ulen,
        IpAddr::V4(src),
        IpAddr::V4(dst),
        &u,
    )))
}

#[inline(always)]
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
fn parse_v6<'o>(
    frame: &[u8],
    head: Head,
    hints: Offload,
    out: &'o mut std::mem::MaybeUninit<Datagram>,
) -> Result<&'o mut Datagram, ParseError> {
    use ipv6::next_header as nh;
    const FAM: Family = Family::V6;
    let l3 = head.l3;
    let ipbuf = frame
        .get(l3..)
        .ok_or(ParseError::Truncated { family: Some(FAM) })?;
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
    // Source and destination as they sit in the fixed header, for the
    // pseudo-header sum (always present: the fixed header was checked). A
    // routing header with segments left is refused below, so this
    // destination is the final one RFC 8200 §8.1 asks for.
    let addrs = bytes_at::<32>(ipbuf, 8).ok_or(ParseError::Truncated { family: Some(FAM) })?;
    // Everything from here on is bounded by the payload length, not the
    // frame: Ethernet padding is not IPv6 payload.
    let packet = ipbuf
        .get(..ip_end)
        .ok_or(ParseError::Truncated { family: Some(FAM) })?;
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
        let rest = packet
            .get(off..)
            .ok_or(ParseError::BadIpHeader { family: FAM })?;
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
    let l4buf = packet
        .get(off..)
        .ok_or(ParseError::BadUdpLength { family: FAM })?;
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
    // ulen <= 65535 here (bounded by the 16-bit payload length).
    verify_udp(hints.l4, l4buf, ulen, FAM, || {
        checksum::pseudo_v6_wire(addrs, PROTO_UDP, ulen as u32)
    })?;
    // Written in place: the caller's array slot, not a temporary.
    Ok(out.write(datagram(
        head,
        FAM,
        l3 + off,
        ulen,
        IpAddr::V6(src),
        IpAddr::V6(dst),
        &u,
    )))
}

#[inline]
fn not_udp_v6(proto: u8, l3: usize, off: usize) -> ParseError {
    ParseError::NotUdp {
        family: Family::V6,
        proto,
        l3_off: off16(l3),
        l4_off: off16(l3 + off),
    }
}

#[cfg(test)]
mod tests {
    use super::build::{self, CsumMode, ExtSpec, FragSpec, FrameSpec, L3Spec, ReplyOpts};
    use super::*;
    use std::net::Ipv4Addr;

    const NONE: Offload = Offload {
        ip: CsumHint::Unknown,
        l4: CsumHint::Unknown,
    };

    /// The per-family counter arrays (`[_; 2]`, `errors[3]` with "other"
    /// at 2) are indexed by `index()`, and the metadata stores the `repr`:
    /// the two must agree and tell the families apart.
    #[test]
    fn family_index_matches_its_repr() {
        assert_eq!(Family::V4.index(), 0);
        assert_eq!(Family::V6.index(), 1);
        assert_eq!(Family::V4 as u8 as usize, Family::V4.index());
        assert_eq!(Family::V6 as u8 as usize, Family::V6.index());
    }

    // Sent by the Linux kernel (Debian 12 host kernel, UDP sockets in a
    // network namespace, tx checksum offload off on the veth) and captured
    // with dumpcap; tshark reports both checksums "correct".
    // 198.18.0.1:40000 -> 198.18.0.2:5000, "hello udpdemux".
    const KERNEL_V4: [u8; 56] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x2a, 0xc6, 0x62, 0x40, 0x00, 0x40, 0x11, 0xe8, 0x38, 0xc6, 0x12, 0x00, 0x01,
        0xc6, 0x12, 0x00, 0x02, 0x9c, 0x40, 0x13, 0x88, 0x00, 0x16, 0xbf, 0x30, 0x68, 0x65, 0x6c,
        0x6c, 0x6f, 0x20, 0x75, 0x64, 0x70, 0x64, 0x65, 0x6d, 0x75, 0x78,
    ];
    // [fd00::1]:40001 -> [fd00::2]:5001, "odd payload v6!" (odd length).
    const KERNEL_V6: [u8; 77] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd, 0x60,
        0x0d, 0xd4, 0x0a, 0x00, 0x17, 0x11, 0x40, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x9c, 0x41, 0x13, 0x89, 0x00, 0x17,
        0x2d, 0xe6, 0x6f, 0x64, 0x64, 0x20, 0x70, 0x61, 0x79, 0x6c, 0x6f, 0x61, 0x64, 0x20, 0x76,
        0x36, 0x21,
    ];

    const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn a4() -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, 1)
    }
    fn b4() -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, 2)
    }
    fn a6() -> Ipv6Addr {
        "fd00::1".parse().unwrap()
    }
    fn b6() -> Ipv6Addr {
        "fd00::2".parse().unwrap()
    }

    fn v4<'a>(
        payload: &'a [u8],
        options: &'a [u8],
        vlans: &'a [(u16, u16)],
        frag: FragSpec,
    ) -> FrameSpec<'a> {
        FrameSpec {
            src_mac: MAC_A,
            dst_mac: MAC_B,
            vlans,
            l3: L3Spec::V4 {
                src: a4(),
                dst: b4(),
                ttl: 64,
                options,
                ident: 1,
                frag,
            },
            sport: 40000,
            dport: 5000,
            payload,
            udp_csum: CsumMode::Correct,
        }
    }

    fn v6<'a>(payload: &'a [u8], ext: &'a [ExtSpec<'a>]) -> FrameSpec<'a> {
        FrameSpec {
            src_mac: MAC_A,
            dst_mac: MAC_B,
            vlans: &[],
            l3: L3Spec::V6 {
                src: a6(),
                dst: b6(),
                hop_limit: 64,
                ext,
            },
            sport: 40001,
            dport: 5001,
            payload,
            udp_csum: CsumMode::Correct,
        }
    }

    fn p(f: &[u8]) -> Result<Datagram, ParseError> {
        parse(f, NONE)
    }

    fn refill_ip_csum(f: &mut [u8], l3: usize) {
        ipv4::Ipv4Packet::new_unchecked(&mut f[l3..]).fill_checksum();
    }

    #[test]
    fn kernel_v4_frame() {
        let d = p(&KERNEL_V4).unwrap();
        assert_eq!(d.family, Family::V4);
        assert_eq!(
            (
                d.vlan_count,
                d.l3_off,
                d.l4_off,
                d.payload_off,
                d.payload_len
            ),
            (0, 14, 34, 42, 14)
        );
        assert_eq!((d.src, d.dst), (IpAddr::V4(a4()), IpAddr::V4(b4())));
        assert_eq!((d.sport, d.dport), (40000, 5000));
        assert_eq!((d.src_mac, d.dst_mac), (MAC_A, MAC_B));
        assert_eq!(d.payload(&KERNEL_V4), Some(&b"hello udpdemux"[..]));
    }

    #[test]
    fn kernel_v6_frame_odd_payload() {
        let d = p(&KERNEL_V6).unwrap();
        assert_eq!(d.family, Family::V6);
        assert_eq!(
            (d.l3_off, d.l4_off, d.payload_off, d.payload_len),
            (14, 54, 62, 15)
        );
        assert_eq!((d.src, d.dst), (IpAddr::V6(a6()), IpAddr::V6(b6())));
        assert_eq!((d.sport, d.dport), (40001, 5001));
        assert_eq!(d.payload(&KERNEL_V6), Some(&b"odd payload v6!"[..]));
    }

    #[test]
    fn writer_reproduces_kernel_bytes() {
        let mut s = v4(
            b"hello udpdemux",
            &[],
            &[],
            FragSpec {
                dont_frag: true,
                ..FragSpec::default()
            },
        );
        if let L3Spec::V4 { ref mut ident, .. } = s.l3 {
            *ident = 0xc662;
        }
        assert_eq!(build::to_vec(&s).unwrap(), KERNEL_V4.to_vec());
        let mut f = build::to_vec(&v6(b"odd payload v6!", &[])).unwrap();
        // The writer sends flow label 0; the kernel chose one. Not covered
        // by any checksum.
        f[14..18].copy_from_slice(&KERNEL_V6[14..18]);
        assert_eq!(f, KERNEL_V6.to_vec());
    }

    #[test]
    fn kernel_frames_corrupted_payload_fail_checksum() {
        let mut f = KERNEL_V4;
        f[50] ^= 0x20;
        assert_eq!(p(&f), Err(ParseError::UdpChecksum { family: Family::V4 }));
        let mut f = KERNEL_V6;
        f[76] ^= 0x01; // the odd trailing byte
        assert_eq!(p(&f), Err(ParseError::UdpChecksum { family: Family::V6 }));
    }

    /// `ipv6_rcv_core`'s martians: any one of a multicast source, a
    /// loopback source or a loopback destination is enough.
    #[test]
    fn v6_martian_addresses_each_refuse_alone() {
        let loopback = std::net::Ipv6Addr::LOCALHOST.octets();
        let multicast: std::net::Ipv6Addr = "ff02::1".parse().unwrap();
        for (at, addr) in [(22, loopback), (38, loopback), (22, multicast.octets())] {
            let mut f = KERNEL_V6;
            f[at..at + 16].copy_from_slice(&addr);
            assert_eq!(
                p(&f),
                Err(ParseError::BadIpHeader { family: Family::V6 }),
                "address at {at}"
            );
        }
    }

    /// An IPv4 packet that is all header is a valid IP packet (the kernel's
    /// `ip_rcv_core` refuses only a total length below the header's) with
    /// no room for a UDP header: a UDP error (`__udp4_lib_rcv`'s failed
    /// pull counts `UDP_MIB_INERRORS`), not a bad IP header.
    #[test]
    fn v4_total_length_equal_to_the_header_is_a_udp_error() {
        let mut f = KERNEL_V4;
        f[16..18].copy_from_slice(&20u16.to_be_bytes());
        refill_ip_csum(&mut f, 14);
        assert_eq!(p(&f), Err(ParseError::BadUdpLength { family: Family::V4 }));
        f[16..18].copy_from_slice(&19u16.to_be_bytes());
        refill_ip_csum(&mut f, 14);
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V4 }));
    }

    #[test]
    fn v4_with_options() {
        // Two NOPs + End + pad (RFC 791), then a 4-byte router alert (RFC 2113).
        let opts = [1, 1, 0, 0, 0x94, 0x04, 0, 0];
        let f = build::to_vec(&v4(b"x", &opts, &[], FragSpec::default())).unwrap();
        let d = p(&f).unwrap();
        assert_eq!(
            (d.l3_off, d.l4_off, d.payload_off, d.payload_len),
            (14, 42, 50, 1)
        );
    }

    #[test]
    fn one_and_two_vlan_tags_and_a_third() {
        let one = [(0x8100, 100)];
        let f = build::to_vec(&v4(b"abc", &[], &one, FragSpec::default())).unwrap();
        let d = p(&f).unwrap();
        assert_eq!((d.vlan_count, d.l3_off, d.l4_off), (1, 18, 38));
        let two = [(0x88a8, 7), (0x8100, 100)];
        let f = build::to_vec(&v4(b"abc", &[], &two, FragSpec::default())).unwrap();
        let d = p(&f).unwrap();
        assert_eq!((d.vlan_count, d.l3_off, d.l4_off), (2, 22, 42));
        let three = [(0x88a8, 7), (0x8100, 100), (0x8100, 5)];
        let f = build::to_vec(&v4(b"abc", &[], &three, FragSpec::default())).unwrap();
        assert_eq!(p(&f), Err(ParseError::TooManyVlans));
    }

    #[test]
    fn v6_with_two_extension_headers() {
        let ext = [
            ExtSpec::HopByHop {
                options: &[5, 2, 0, 0],
            },
            ExtSpec::DestOpts { options: &[] },
        ];
        let f = build::to_vec(&v6(b"payload", &ext)).unwrap();
        let d = p(&f).unwrap();
        assert_eq!(
            (d.l3_off, d.l4_off, d.payload_off, d.payload_len),
            (14, 70, 78, 7)
        );
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        // A 1-byte datagram is a 43-byte frame; Ethernet pads it to 60 and
        // the padding need not be zero.
        let mut f = build::to_vec(&v4(b"z", &[], &[], FragSpec::default())).unwrap();
        f.resize(60, 0xa5);
        let d = p(&f).unwrap();
        assert_eq!((d.payload_off, d.payload_len), (42, 1));
        let mut f = KERNEL_V6.to_vec();
        f.extend_from_slice(&[0x5a; 7]);
        assert_eq!(p(&f).unwrap().payload_len, 15);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let tags = [(0x88a8, 1), (0x8100, 2)];
        let tagged =
            build::to_vec(&v4(b"abcdef", &[1, 1, 1, 0], &tags, FragSpec::default())).unwrap();
        let ext = [
            ExtSpec::HopByHop { options: &[] },
            ExtSpec::Fragment {
                offset: 0,
                more: false,
                ident: 3,
            },
        ];
        let v6ext = build::to_vec(&v6(b"abcdef", &ext)).unwrap();
        for f in [&KERNEL_V4[..], &KERNEL_V6[..], &tagged[..], &v6ext[..]] {
            assert!(p(f).is_ok());
            for n in 0..f.len() {
                let e = p(&f[..n]).expect_err("truncated frame accepted");
                assert_eq!(e.reason(), Reason::Truncated, "len {n}: {e:?}");
            }
        }
    }

    #[test]
    fn bad_version_and_ihl() {
        let mut f = KERNEL_V4;
        f[14] = 0x44; // IHL 4
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V4 }));
        f[14] = 0x65; // version 6 behind EtherType IPv4
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V4 }));
        // IHL 15 (60 bytes): fits the 56-byte frame? No: 14 + 60 > 56.
        f[14] = 0x4f;
        assert_eq!(
            p(&f),
            Err(ParseError::Truncated {
                family: Some(Family::V4)
            })
        );
        let mut f = KERNEL_V6;
        f[14] = 0x4d;
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V6 }));
    }

    #[test]
    fn ip_total_length_checks() {
        let mut f = KERNEL_V4;
        f[16..18].copy_from_slice(&43u16.to_be_bytes()); // one past the frame
        refill_ip_csum(&mut f, 14);
        assert_eq!(
            p(&f),
            Err(ParseError::Truncated {
                family: Some(Family::V4)
            })
        );
        f[16..18].copy_from_slice(&19u16.to_be_bytes()); // below the header
        refill_ip_csum(&mut f, 14);
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V4 }));
        let mut f = KERNEL_V6;
        f[18..20].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(
            p(&f),
            Err(ParseError::Truncated {
                family: Some(Family::V6)
            })
        );
    }

    #[test]
    fn udp_length_checks() {
        for (frame, l3, fam) in [
            (&KERNEL_V4[..], 14usize, Family::V4),
            (&KERNEL_V6[..], 14, Family::V6),
        ] {
            let l4 = if fam == Family::V4 { l3 + 20 } else { l3 + 40 };
            let mut f = frame.to_vec();
            f[l4 + 4..l4 + 6].copy_from_slice(&7u16.to_be_bytes());
            assert_eq!(p(&f), Err(ParseError::BadUdpLength { family: fam }));
            let ip_payload = (frame.len() - l4) as u16;
            f[l4 + 4..l4 + 6].copy_from_slice(&(ip_payload + 1).to_be_bytes());
            assert_eq!(p(&f), Err(ParseError::BadUdpLength { family: fam }));
        }
        // UDP shorter than the IP payload: the rest is trimmed (Linux
        // pskb_trim_rcsum), and the checksum covers only the UDP length.
        let mut f = build::to_vec(&v4(b"abcd", &[], &[], FragSpec::default())).unwrap();
        f.extend_from_slice(b"junk");
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        refill_ip_csum(&mut f, 14);
        let d = p(&f).unwrap();
        assert_eq!((d.payload_len, d.payload(&f)), (4, Some(&b"abcd"[..])));
        // IP payload too short for a UDP header at all.
        let mut f = KERNEL_V4;
        f[16..18].copy_from_slice(&27u16.to_be_bytes());
        refill_ip_csum(&mut f, 14);
        assert_eq!(p(&f), Err(ParseError::BadUdpLength { family: Family::V4 }));
    }

    /// The UDP length is checked against the IP payload whatever happens to
    /// the checksum afterwards: when the offload hint says "good" (nothing is
    /// summed, so nothing else reads `ulen` bytes), when an IPv4 checksum is 0
    /// ("none"), and with Ethernet padding behind the datagram (the frame has
    /// the bytes, the IP payload does not).
    #[test]
    fn udp_length_past_ip_payload_whatever_the_checksum_says() {
        let good = Offload {
            ip: CsumHint::Good,
            l4: CsumHint::Good,
        };
        let ip_good = Offload {
            ip: CsumHint::Good,
            l4: CsumHint::Unknown,
        };
        let mut s4 = v4(b"abcd", &[], &[], FragSpec::default());
        let v4_sum = build::to_vec(&s4).unwrap();
        s4.udp_csum = CsumMode::Zero;
        let v4_zero = build::to_vec(&s4).unwrap();
        let mut s6 = v6(b"abcd", &[]);
        let v6_sum = build::to_vec(&s6).unwrap();
        s6.udp_csum = CsumMode::Wrong;
        let v6_wrong = build::to_vec(&s6).unwrap();
        for (frame, l4, fam, hints) in [
            (&v4_sum, 34usize, Family::V4, good),
            (&v4_zero, 34, Family::V4, NONE),
            (&v4_zero, 34, Family::V4, good),
            (&v4_zero, 34, Family::V4, ip_good),
            (&v6_sum, 54, Family::V6, good),
            // The hint decides, not the field: a wrong sum the NIC vouched for.
            (&v6_wrong, 54, Family::V6, good),
        ] {
            let what = format!("{fam:?} {hints:?} csum {:02x?}", &frame[l4 + 6..l4 + 8]);
            assert!(
                parse(frame, hints).is_ok(),
                "{what}: the frame itself is fine"
            );
            // What the IP header says follows the UDP header's start.
            let ip_payload = if fam == Family::V4 {
                usize::from(u16::from_be_bytes([frame[16], frame[17]])) - 20
            } else {
                usize::from(u16::from_be_bytes([frame[18], frame[19]]))
            };
            assert_eq!(ip_payload, 12, "{what}");
            for pad in [0usize, 1, 64] {
                for ulen in [ip_payload + 1, ip_payload + pad.max(1), 0xffff] {
                    let mut f = frame.clone();
                    f.resize(f.len() + pad, 0);
                    f[l4 + 4..l4 + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
                    assert_eq!(
                        parse(&f, hints),
                        Err(ParseError::BadUdpLength { family: fam }),
                        "{what}: UDP length {ulen} with {ip_payload} bytes of IP payload, {pad} of padding"
                    );
                }
            }
            // Below the UDP header (0 is "the rest of the payload" on IPv6).
            let short: &[u16] = if fam == Family::V4 {
                &[0, 1, 7]
            } else {
                &[1, 7]
            };
            for &ulen in short {
                let mut f = frame.clone();
                f[l4 + 4..l4 + 6].copy_from_slice(&ulen.to_be_bytes());
                assert_eq!(
                    parse(&f, hints),
                    Err(ParseError::BadUdpLength { family: fam }),
                    "{what}: UDP length {ulen}"
                );
            }
        }
    }

    #[test]
    fn v6_udp_length_zero_means_rest_of_payload() {
        // Linux __udp6_lib_rcv treats UDP length 0 as "IP payload length".
        let mut s = v6(b"zz", &[]);
        s.udp_csum = CsumMode::Zero;
        let mut f = build::to_vec(&s).unwrap();
        f[58..60].copy_from_slice(&0u16.to_be_bytes());
        let c = checksum::pseudo_v6(&a6(), &b6(), PROTO_UDP, 10)
            .combine(Sum::new().add_bytes(&f[54..]))
            .checksum();
        f[60..62].copy_from_slice(&c.to_be_bytes());
        assert_eq!(p(&f).map(|d| d.payload_len), Ok(2));
    }

    #[test]
    fn checksum_errors_and_zero() {
        let mut f = KERNEL_V4;
        f[24] ^= 0xff;
        assert_eq!(p(&f), Err(ParseError::BadIpChecksum));

        let mut s = v4(b"data", &[], &[], FragSpec::default());
        s.udp_csum = CsumMode::Wrong;
        assert_eq!(
            p(&build::to_vec(&s).unwrap()),
            Err(ParseError::UdpChecksum { family: Family::V4 })
        );
        s.udp_csum = CsumMode::Zero;
        assert!(
            p(&build::to_vec(&s).unwrap()).is_ok(),
            "IPv4 UDP checksum 0 = none"
        );

        let mut s = v6(b"data", &[]);
        s.udp_csum = CsumMode::Wrong;
        assert_eq!(
            p(&build::to_vec(&s).unwrap()),
            Err(ParseError::UdpChecksum { family: Family::V6 })
        );
        s.udp_csum = CsumMode::Zero;
        assert_eq!(
            p(&build::to_vec(&s).unwrap()),
            Err(ParseError::Udp6ZeroChecksum)
        );
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Find a payload whose checksum computes to 0 and check the writer
        // sends 0xffff, which the parser must accept (v4 and v6).
        for fam in [Family::V4, Family::V6] {
            let mut found = false;
            for x in 0..=u16::MAX {
                let pl = x.to_be_bytes();
                let mut s = if fam == Family::V4 {
                    v4(&pl, &[], &[], FragSpec::default())
                } else {
                    v6(&pl, &[])
                };
                s.udp_csum = CsumMode::Zero;
                let f = build::to_vec(&s).unwrap();
                let l4 = if fam == Family::V4 { 34 } else { 54 };
                let pseudo = match fam {
                    Family::V4 => checksum::pseudo_v4(a4(), b4(), 17, 10),
                    Family::V6 => checksum::pseudo_v6(&a6(), &b6(), 17, 10),
                };
                if pseudo.combine(Sum::new().add_bytes(&f[l4..])).checksum() != 0 {
                    continue;
                }
                s.udp_csum = CsumMode::Correct;
                let f = build::to_vec(&s).unwrap();
                assert_eq!(&f[l4 + 6..l4 + 8], &[0xff, 0xff]);
                assert!(p(&f).is_ok());
                found = true;
                break;
            }
            assert!(found);
        }
    }

    #[test]
    fn hints_skip_or_force() {
        let good = Offload {
            ip: CsumHint::Good,
            l4: CsumHint::Good,
        };
        let mut f = KERNEL_V4;
        f[24] ^= 0xff; // IP checksum wrong
        f[40] ^= 0xff; // UDP checksum wrong
        assert!(parse(&f, good).is_ok());
        assert_eq!(
            parse(
                &f,
                Offload {
                    ip: CsumHint::Good,
                    l4: CsumHint::Unknown
                }
            ),
            Err(ParseError::UdpChecksum { family: Family::V4 })
        );
        assert_eq!(
            parse(
                &KERNEL_V4,
                Offload {
                    ip: CsumHint::Bad,
                    l4: CsumHint::Good
                }
            ),
            Err(ParseError::BadIpChecksum)
        );
        assert_eq!(
            parse(
                &KERNEL_V4,
                Offload {
                    ip: CsumHint::Good,
                    l4: CsumHint::Bad
                }
            ),
            Err(ParseError::UdpChecksum { family: Family::V4 })
        );
        let mut f6 = KERNEL_V6;
        f6[60] ^= 0xff;
        assert!(parse(&f6, good).is_ok());
        assert_eq!(
            parse(
                &KERNEL_V6,
                Offload {
                    ip: CsumHint::Bad,
                    l4: CsumHint::Bad
                }
            ),
            Err(ParseError::UdpChecksum { family: Family::V6 }),
            "IPv6 has no header checksum, so the ip hint is ignored"
        );
    }

    #[test]
    fn v4_fragments() {
        let first = FragSpec {
            more_frags: true,
            ..FragSpec::default()
        };
        let f = build::to_vec(&v4(b"aaaaaaaa", &[], &[], first)).unwrap();
        assert_eq!(p(&f), Err(ParseError::FragmentFirst { family: Family::V4 }));
        let later = FragSpec {
            more_frags: false,
            offset: 2,
            dont_frag: false,
        };
        let mut f = build::to_vec(&v4(b"aaaaaaaa", &[], &[], later)).unwrap();
        // Garbage where a UDP header would be must not matter.
        f[34..42].fill(0);
        assert_eq!(p(&f), Err(ParseError::FragmentLater { family: Family::V4 }));
        f[23] = 1; // and not even the protocol
        refill_ip_csum(&mut f, 14);
        assert_eq!(p(&f), Err(ParseError::FragmentLater { family: Family::V4 }));
    }

    #[test]
    fn v6_fragments() {
        let ext = [ExtSpec::Fragment {
            offset: 0,
            more: true,
            ident: 9,
        }];
        assert_eq!(
            p(&build::to_vec(&v6(b"aaaaaaaa", &ext)).unwrap()),
            Err(ParseError::FragmentFirst { family: Family::V6 })
        );
        let ext = [
            ExtSpec::DestOpts { options: &[] },
            ExtSpec::Fragment {
                offset: 1,
                more: true,
                ident: 9,
            },
        ];
        let mut f = build::to_vec(&v6(b"aaaaaaaa", &ext)).unwrap();
        f[70..78].fill(0);
        assert_eq!(p(&f), Err(ParseError::FragmentLater { family: Family::V6 }));
        // Atomic fragment (RFC 6946): processed like an unfragmented packet.
        let ext = [ExtSpec::Fragment {
            offset: 0,
            more: false,
            ident: 9,
        }];
        assert_eq!(
            p(&build::to_vec(&v6(b"a", &ext)).unwrap()).map(|d| d.l4_off),
            Ok(62)
        );
    }

    #[test]
    fn ext_header_chain_bound() {
        let d = ExtSpec::DestOpts { options: &[] };
        let mut ext = vec![ExtSpec::HopByHop { options: &[] }];
        ext.extend([d; MAX_EXT_HEADERS - 1]);
        assert!(
            p(&build::to_vec(&v6(b"ok", &ext)).unwrap()).is_ok(),
            "exactly the bound is fine"
        );
        ext.push(d);
        assert_eq!(
            p(&build::to_vec(&v6(b"no", &ext)).unwrap()),
            Err(ParseError::ExtHeaderLimit)
        );
        // Byte bound: exactly MAX_EXT_BYTES of headers is fine, 8 more is not.
        let big = [0u8; 2046];
        let ext = [ExtSpec::DestOpts { options: &big }];
        assert!(
            p(&build::to_vec(&v6(b"ok", &ext)).unwrap()).is_ok(),
            "exactly the byte bound is fine"
        );
        let ext = [
            ExtSpec::DestOpts { options: &big },
            ExtSpec::DestOpts { options: &[] },
        ];
        assert_eq!(
            p(&build::to_vec(&v6(b"no", &ext)).unwrap()),
            Err(ParseError::ExtHeaderLimit)
        );
        // Two 2048-byte destination options headers.
        let ext = [
            ExtSpec::DestOpts { options: &big },
            ExtSpec::DestOpts { options: &big },
        ];
        assert_eq!(
            p(&build::to_vec(&v6(b"", &ext)).unwrap()),
            Err(ParseError::ExtHeaderLimit)
        );
    }

    #[test]
    fn ext_header_past_payload_is_header_error() {
        let ext = [ExtSpec::DestOpts { options: &[] }];
        let mut f = build::to_vec(&v6(b"abcdefgh", &ext)).unwrap();
        f[55] = 3; // claims 32 bytes; the payload holds 24
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V6 }));
    }

    #[test]
    fn v6_misc_header_errors() {
        // Jumbogram encoding (payload length 0, hop-by-hop first).
        let ext = [ExtSpec::HopByHop {
            options: &[0xc2, 4, 0, 1, 0, 0],
        }];
        let mut f = build::to_vec(&v6(b"", &ext)).unwrap();
        f[18..20].fill(0);
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V6 }));
        // Payload length 0 straight to UDP: no room for the UDP header.
        let mut f = KERNEL_V6;
        f[18..20].fill(0);
        assert_eq!(p(&f), Err(ParseError::BadUdpLength { family: Family::V6 }));
        // Routing header with segments left: not for us.
        let seg = [0u8; 20];
        let ext = [ExtSpec::Routing {
            routing_type: 4,
            segments_left: 1,
            data: &seg,
        }];
        assert_eq!(
            p(&build::to_vec(&v6(b"x", &ext)).unwrap()),
            Err(ParseError::BadIpHeader { family: Family::V6 })
        );
        let ext = [ExtSpec::Routing {
            routing_type: 4,
            segments_left: 0,
            data: &seg,
        }];
        assert!(p(&build::to_vec(&v6(b"x", &ext)).unwrap()).is_ok());
        // Multicast source.
        let mut f = KERNEL_V6;
        f[22] = 0xff;
        assert_eq!(p(&f), Err(ParseError::BadIpHeader { family: Family::V6 }));
    }

    #[test]
    fn not_ip_and_not_udp() {
        // ARP request, under one VLAN tag.
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&MAC_A);
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a, 0x08, 0x06]);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.resize(60, 0);
        assert_eq!(
            p(&f),
            Err(ParseError::NotIp {
                ethertype: 0x0806,
                l3_off: 18
            })
        );
        // ICMP over IPv4 with options: l4 after the options.
        let mut f = build::to_vec(&v4(b"", &[1, 1, 1, 0], &[], FragSpec::default())).unwrap();
        f[23] = PROTO_ICMP;
        refill_ip_csum(&mut f, 14);
        assert_eq!(
            p(&f),
            Err(ParseError::NotUdp {
                family: Family::V4,
                proto: 1,
                l3_off: 14,
                l4_off: 38
            })
        );
        // ICMPv6 after a destination options header; ESP; no next header.
        for code in [PROTO_ICMPV6, 50, 51, 59, 6] {
            let raw = [0u8; 8];
            let ext = [
                ExtSpec::DestOpts { options: &[] },
                ExtSpec::Raw { code, bytes: &raw },
            ];
            let f = build::to_vec(&v6(b"", &ext)).unwrap();
            assert_eq!(
                p(&f),
                Err(ParseError::NotUdp {
                    family: Family::V6,
                    proto: code,
                    l3_off: 14,
                    l4_off: 62
                })
            );
        }
        // Hop-by-hop anywhere but first: like an unknown next header.
        let ext = [
            ExtSpec::DestOpts { options: &[] },
            ExtSpec::HopByHop { options: &[] },
        ];
        let f = build::to_vec(&v6(b"", &ext)).unwrap();
        assert_eq!(
            p(&f),
            Err(ParseError::NotUdp {
                family: Family::V6,
                proto: 0,
                l3_off: 14,
                l4_off: 62
            })
        );
    }

    #[test]
    fn udp_reply_roundtrip() {
        let tags = [(0x8100, 42)];
        let rx_frame =
            build::to_vec(&v4(b"ping", &[1, 1, 1, 0], &tags, FragSpec::default())).unwrap();
        let rx = p(&rx_frame).unwrap();
        let mut out = [0u8; 128];
        let opts = ReplyOpts {
            ttl: 33,
            ident: 5,
            src: None,
        };
        let n = build::write_udp_reply(
            &rx_frame,
            &rx,
            rx.payload(&rx_frame).unwrap(),
            opts,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, build::reply_len(&rx, 4));
        let r = p(&out[..n]).unwrap();
        assert_eq!(
            (r.src, r.dst, r.sport, r.dport),
            (rx.dst, rx.src, rx.dport, rx.sport)
        );
        assert_eq!(
            (r.src_mac, r.dst_mac, r.vlan_count),
            (rx.dst_mac, rx.src_mac, 1)
        );
        assert_eq!(&out[14..16], &[0, 42], "same VLAN TCI");
        assert_eq!(out[18 + 8], 33, "TTL reset");
        assert_eq!(r.payload(&out[..n]), Some(&b"ping"[..]));

        let rx = p(&KERNEL_V6).unwrap();
        let n = build::write_udp_reply(&KERNEL_V6, &rx, b"pong", ReplyOpts::default(), &mut out)
            .unwrap();
        let r = p(&out[..n]).unwrap();
        assert_eq!(
            (r.src, r.dst, r.sport, r.dport),
            (rx.dst, rx.src, rx.dport, rx.sport)
        );
        assert_eq!(out[14 + 7], 64);
        assert_eq!(
            build::write_udp_reply(
                &KERNEL_V6,
                &rx,
                b"pong",
                ReplyOpts::default(),
                &mut out[..60]
            ),
            Err(build::BuildError::BufferTooSmall { need: n, have: 60 })
        );
        // A request to a multicast group is answered from our unicast address.
        let mut mc = KERNEL_V6;
        mc[38] = 0xff;
        mc[39] = 0x02;
        mc[60..62].fill(0);
        let c = checksum::pseudo_v6(&a6(), &"ff02::2".parse().unwrap(), 17, 23)
            .combine(Sum::new().add_bytes(&mc[54..]))
            .checksum();
        mc[60..62].copy_from_slice(&c.to_be_bytes());
        let rx = p(&mc).unwrap();
        let me = IpAddr::V6("fd00::9".parse().unwrap());
        let opts = ReplyOpts {
            src: Some(me),
            ..ReplyOpts::default()
        };
        let n = build::write_udp_reply(&mc, &rx, b"pong", opts, &mut out).unwrap();
        assert_eq!(p(&out[..n]).map(|r| (r.src, r.dst)), Ok((me, rx.src)));
        let wrong_family = ReplyOpts {
            src: Some(IpAddr::V4(a4())),
            ..ReplyOpts::default()
        };
        assert_eq!(
            build::write_udp_reply(&mc, &rx, b"x", wrong_family, &mut out),
            Err(build::BuildError::ReplySourceMismatch)
        );
    }

    #[test]
    fn reasons_are_a_dense_table() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Reason::COUNT);
        assert_eq!(ParseError::Udp6ZeroChecksum.family(), Some(Family::V6));
        assert_eq!(ParseError::BadIpChecksum.reason(), Reason::BadIpChecksum);
        assert!(Reason::UdpChecksum.is_udp_error() && !Reason::NotUdp.is_udp_error());
    }
}
