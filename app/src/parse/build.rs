//! Frame writer: builds complete Ethernet/VLAN/IPv4|IPv6/UDP frames into a
//! caller's buffer, for the traffic generator and for echo replies.
//!
//! The writer is deliberately permissive (any number of VLAN tags, any
//! extension-header chain, deliberately wrong checksums) so the generator
//! can produce frames the parser must reject; everything else malformed is
//! made by editing the written bytes afterwards.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::checksum::{self, Sum};
use super::ether::{self, EthernetFrame};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, next_header as nh, Ipv6Packet};
use super::udp::{self, UdpPacket};
use super::{Datagram, Family, PROTO_UDP};

/// How the UDP checksum field is filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CsumMode {
    /// RFC 768 / RFC 8200 §8.1: a computed 0 is sent as 0xffff.
    #[default]
    Correct,
    /// Field left 0 ("no checksum" on IPv4, an error on IPv6).
    Zero,
    /// A non-zero value that fails verification.
    Wrong,
}

/// IPv4 flags and fragment offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragSpec {
    pub dont_frag: bool,
    pub more_frags: bool,
    /// In 8-byte units; only the low 13 bits are written.
    pub offset: u16,
}

/// One IPv6 extension header, in chain order. Next Header fields are
/// filled in by the writer from the following element (UDP after the last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtSpec<'a> {
    /// Options TLVs; padded with Pad1/PadN to a multiple of 8 (RFC 8200 §4.2).
    HopByHop {
        options: &'a [u8],
    },
    DestOpts {
        options: &'a [u8],
    },
    /// `data` follows the 4 fixed bytes (type 0/2: 4 reserved bytes then
    /// addresses; type 4 SRH: last entry, flags, tag, segment list);
    /// zero-padded to a multiple of 8.
    Routing {
        routing_type: u8,
        segments_left: u8,
        data: &'a [u8],
    },
    Fragment {
        offset: u16,
        more: bool,
        ident: u32,
    },
    /// Written verbatim under Next Header value `code`; its first byte (if
    /// any) is overwritten with the following Next Header. The caller owns
    /// the length encoding (e.g. AH counts in 4-octet units).
    Raw {
        code: u8,
        bytes: &'a [u8],
    },
}

impl ExtSpec<'_> {
    /// The Next Header value announcing this header.
    pub fn code(&self) -> u8 {
        match self {
            ExtSpec::HopByHop { .. } => nh::HOP_BY_HOP,
            ExtSpec::DestOpts { .. } => nh::DEST_OPTS,
            ExtSpec::Routing { .. } => nh::ROUTING,
            ExtSpec::Fragment { .. } => nh::FRAGMENT,
            ExtSpec::Raw { code, .. } => *code,
        }
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            ExtSpec::HopByHop { options } | ExtSpec::DestOpts { options } => {
                round8(2 + options.len())
            }
            ExtSpec::Routing { data, .. } => round8(4 + data.len()),
            ExtSpec::Fragment { .. } => ipv6::FRAG_HEADER_LEN,
            ExtSpec::Raw { bytes, .. } => bytes.len(),
        }
    }
}

fn round8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3Spec<'a> {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        ttl: u8,
        /// Raw option bytes: a multiple of 4, at most 40.
        options: &'a [u8],
        ident: u16,
        frag: FragSpec,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        ext: &'a [ExtSpec<'a>],
    },
}

/// A complete UDP frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSpec<'a> {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// (TPID, TCI) outermost first; TPID normally 0x8100 or 0x88a8.
    pub vlans: &'a [(u16, u16)],
    pub l3: L3Spec<'a>,
    pub sport: u16,
    pub dport: u16,
    pub payload: &'a [u8],
    pub udp_csum: CsumMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("output buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    #[error("IPv4 options must be a multiple of 4 and at most 40 bytes, got {0}")]
    BadOptions(usize),
    #[error("IPv6 extension header of {0} bytes cannot be encoded (max 2048, multiple of 8)")]
    BadExtHeader(usize),
    #[error("datagram of {0} bytes does not fit a 16-bit IP/UDP length")]
    TooLong(usize),
    #[error("received frame is shorter than its parsed Datagram says")]
    ReplySourceMismatch,
}

/// Where everything goes; computed once, used by both length and write.
#[derive(Clone, Copy, Debug)]
struct Layout {
    l3: usize,
    /// IPv4 header incl. options, or IPv6 fixed header + extension headers.
    l3_len: usize,
    udp_len: usize,
    total: usize,
}

fn layout(spec: &FrameSpec<'_>) -> Result<Layout, BuildError> {
    let l3 = ether::HEADER_LEN + ether::VLAN_TAG_LEN * spec.vlans.len();
    let udp_len = udp::HEADER_LEN + spec.payload.len();
    let l3_len = match spec.l3 {
        L3Spec::V4 { options, .. } => {
            if options.len() % 4 != 0 || options.len() > ipv4::MAX_OPTIONS_LEN {
                return Err(BuildError::BadOptions(options.len()));
            }
            let hl = ipv4::HEADER_LEN + options.len();
            if hl + udp_len > usize::from(u16::MAX) {
                return Err(BuildError::TooLong(hl + udp_len));
            }
            hl
        }
        L3Spec::V6 { ext, .. } => {
            let mut ext_len = 0usize;
            for e in ext {
                let n = e.wire_len();
                let generic = !matches!(e, ExtSpec::Raw { .. } | ExtSpec::Fragment { .. });
                if generic && n > 2048 {
                    return Err(BuildError::BadExtHeader(n));
                }
                ext_len += n;
            }
            if ext_len + udp_len > usize::from(u16::MAX) {
                return Err(BuildError::TooLong(ext_len + udp_len));
            }
            ipv6::HEADER_LEN + ext_len
        }
    };
    Ok(Layout {
        l3,
        l3_len,
        udp_len,
        total: l3 + l3_len + udp_len,
    })
}

/// Frame length `spec` would produce, without writing.
pub fn frame_len(spec: &FrameSpec<'_>) -> Result<usize, BuildError> {
    layout(spec).map(|l| l.total)
}

/// Writes the frame at the start of `buf`; returns its length.
pub fn write_frame(spec: &FrameSpec<'_>, buf: &mut [u8]) -> Result<usize, BuildError> {
    let lay = layout(spec)?;
    let have = buf.len();
    let out = buf.get_mut(..lay.total).ok_or(BuildError::BufferTooSmall {
        need: lay.total,
        have,
    })?;

    // Ethernet + tags: each TPID goes where the previous EtherType was.
    let mut eth = EthernetFrame::new_unchecked(&mut *out);
    eth.set_dst_mac(spec.dst_mac);
    eth.set_src_mac(spec.src_mac);
    let l3_type = match spec.l3 {
        L3Spec::V4 { .. } => ether::ethertype::IPV4,
        L3Spec::V6 { .. } => ether::ethertype::IPV6,
    };
    let mut type_at = 12;
    for &(tpid, tci) in spec.vlans {
        out[type_at..type_at + 2].copy_from_slice(&tpid.to_be_bytes());
        out[type_at + 2..type_at + 4].copy_from_slice(&tci.to_be_bytes());
        type_at += ether::VLAN_TAG_LEN;
    }
    out[type_at..type_at + 2].copy_from_slice(&l3_type.to_be_bytes());

    let (l3buf, l4buf) = out[lay.l3..].split_at_mut(lay.l3_len);
    // UDP header and payload first, so the checksum can be summed in place.
    let mut u = UdpPacket::new_unchecked(&mut *l4buf);
    u.set_src_port(spec.sport);
    u.set_dst_port(spec.dport);
    // layout() bounded udp_len below 65536.
    u.set_len(lay.udp_len as u16);
    u.set_checksum(0);
    l4buf[udp::HEADER_LEN..].copy_from_slice(spec.payload);

    let pseudo = match spec.l3 {
        L3Spec::V4 {
            src,
            dst,
            ttl,
            options,
            ident,
            frag,
        } => {
            let mut ip = Ipv4Packet::new_unchecked(&mut *l3buf);
            ip.set_version_ihl(4, (lay.l3_len / 4) as u8);
            ip.set_dscp_ecn(0);
            ip.set_total_len((lay.l3_len + lay.udp_len) as u16);
            ip.set_ident(ident);
            let mut ff = frag.offset & ipv4::OFFSET_MASK;
            if frag.dont_frag {
                ff |= ipv4::FLAG_DF;
            }
            if frag.more_frags {
                ff |= ipv4::FLAG_MF;
            }
            ip.set_frag_field(ff);
            ip.set_ttl(ttl);
            ip.set_protocol(PROTO_UDP);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            l3buf[ipv4::HEADER_LEN..].copy_from_slice(options);
            Ipv4Packet::new_unchecked(&mut *l3buf).fill_checksum();
            checksum::pseudo_v4(src, dst, PROTO_UDP, lay.udp_len as u16)
        }
        L3Spec::V6 {
            src,
            dst,
            hop_limit,
            ext,
        } => {
            let mut ip = Ipv6Packet::new_unchecked(&mut *l3buf);
            ip.set_version_tc_flow(0, 0);
            ip.set_payload_len((lay.l3_len - ipv6::HEADER_LEN + lay.udp_len) as u16);
            ip.set_next_header(ext.first().map_or(PROTO_UDP, ExtSpec::code));
            ip.set_hop_limit(hop_limit);
            ip.set_src_addr(&src);
            ip.set_dst_addr(&dst);
            let mut off = ipv6::HEADER_LEN;
            for (i, e) in ext.iter().enumerate() {
                let next = ext.get(i + 1).map_or(PROTO_UDP, ExtSpec::code);
                let n = e.wire_len();
                write_ext(e, next, &mut l3buf[off..off + n]);
                off += n;
            }
            // RFC 8200 §8.1: the pseudo-header carries the final destination.
            let final_dst = ext.iter().find_map(routing_final_dst).unwrap_or(dst);
            checksum::pseudo_v6(&src, &final_dst, PROTO_UDP, lay.udp_len as u32)
        }
    };
    let correct = match pseudo.combine(Sum::new().add_bytes(l4buf)).checksum() {
        0 => 0xffff,
        c => c,
    };
    let field = match spec.udp_csum {
        CsumMode::Correct => correct,
        CsumMode::Zero => 0,
        CsumMode::Wrong => wrong_checksum(correct),
    };
    UdpPacket::new_unchecked(&mut *l4buf).set_checksum(field);
    Ok(lay.total)
}

/// A non-zero value not congruent to `correct` modulo 0xffff (0 and 0xffff
/// are the same ones'-complement number, so neither may be produced when the
/// other is correct).
fn wrong_checksum(correct: u16) -> u16 {
    match correct ^ 0x0101 {
        0 | 0xffff => 0x0202,
        w => w,
    }
}

fn write_ext(e: &ExtSpec<'_>, next: u8, dst: &mut [u8]) {
    dst.fill(0);
    match *e {
        ExtSpec::HopByHop { options } | ExtSpec::DestOpts { options } => {
            dst[0] = next;
            dst[1] = (dst.len() / 8 - 1) as u8;
            let end = 2 + options.len();
            dst[2..end].copy_from_slice(options);
            // RFC 8200 §4.2: Pad1 is a single zero byte; PadN is type 1 with
            // a length byte covering the remaining zeros.
            let pad = dst.len() - end;
            if pad >= 2 {
                dst[end] = 1;
                dst[end + 1] = (pad - 2) as u8;
            }
        }
        ExtSpec::Routing {
            routing_type,
            segments_left,
            data,
        } => {
            dst[0] = next;
            dst[1] = (dst.len() / 8 - 1) as u8;
            dst[2] = routing_type;
            dst[3] = segments_left;
            dst[4..4 + data.len()].copy_from_slice(data);
        }
        ExtSpec::Fragment {
            offset,
            more,
            ident,
        } => {
            dst[0] = next;
            let f = (offset << 3) | u16::from(more);
            dst[2..4].copy_from_slice(&f.to_be_bytes());
            dst[4..8].copy_from_slice(&ident.to_be_bytes());
        }
        ExtSpec::Raw { bytes, .. } => {
            dst.copy_from_slice(bytes);
            if let Some(b) = dst.first_mut() {
                *b = next;
            }
        }
    }
}

/// For a routing header with segments left, the address the packet will
/// finally reach: SRH (type 4) keeps it in Segment List[0] (RFC 8754 §2);
/// types 0 and 2 list it last (RFC 2460 §4.4, RFC 6275 §6.4).
fn routing_final_dst(e: &ExtSpec<'_>) -> Option<Ipv6Addr> {
    let ExtSpec::Routing {
        routing_type,
        segments_left,
        data,
    } = *e
    else {
        return None;
    };
    if segments_left == 0 {
        return None;
    }
    let addrs = data.get(4..)?;
    let n = addrs.len() / 16;
    let at = match routing_type {
        4 => 0,
        _ => n.checked_sub(1)?,
    };
    let b: [u8; 16] = addrs.get(at * 16..at * 16 + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(b))
}

/// Allocating convenience for tests and the generator's setup phase.
pub fn to_vec(spec: &FrameSpec<'_>) -> Result<Vec<u8>, BuildError> {
    let mut v = vec![0u8; frame_len(spec)?];
    write_frame(spec, &mut v)?;
    Ok(v)
}

/// Reply parameters for [`write_udp_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyOpts {
    /// TTL (IPv4) or hop limit (IPv6); Linux's default is 64.
    pub ttl: u8,
    /// IPv4 identification.
    pub ident: u16,
    /// Source address override. Needed when the request went to a
    /// multicast or broadcast address: a reply must come from a unicast
    /// address of ours (RFC 1122 §4.1.3.5, RFC 4291 §2.7), which only the
    /// caller knows. `None` uses the request's destination.
    pub src: Option<IpAddr>,
}

impl Default for ReplyOpts {
    fn default() -> Self {
        ReplyOpts {
            ttl: 64,
            ident: 0,
            src: None,
        }
    }
}

/// Length of the reply [`write_udp_reply`] would write.
pub fn reply_len(rx: &Datagram, payload_len: usize) -> usize {
    let l3 = match rx.family {
        Family::V4 => ipv4::HEADER_LEN,
        Family::V6 => ipv6::HEADER_LEN,
    };
    ether::HEADER_LEN
        + ether::VLAN_TAG_LEN * usize::from(rx.vlan_count.min(2))
        + l3
        + udp::HEADER_LEN
        + payload_len
}

/// Writes the reply to a received datagram into `out`: MACs, addresses and
/// ports swapped, the same VLAN tags (so it leaves on the same VLAN), TTL /
/// hop limit reset, no IP options or extension headers, DF set on IPv4
/// (Linux's default path-MTU discovery for UDP), checksums correct.
///
/// `rx_frame` is the frame `rx` was parsed from (only its VLAN tags are
/// read); `payload` may borrow from it (echo), but must not alias `out`.
pub fn write_udp_reply(
    rx_frame: &[u8],
    rx: &Datagram,
    payload: &[u8],
    opts: ReplyOpts,
    out: &mut [u8],
) -> Result<usize, BuildError> {
    let mut tags = [(0u16, 0u16); 2];
    let n = usize::from(rx.vlan_count);
    if n > tags.len() {
        return Err(BuildError::ReplySourceMismatch);
    }
    for (i, t) in tags.iter_mut().take(n).enumerate() {
        let at = 12 + i * ether::VLAN_TAG_LEN;
        let b = rx_frame
            .get(at..at + 4)
            .ok_or(BuildError::ReplySourceMismatch)?;
        *t = (
            u16::from_be_bytes([b[0], b[1]]),
            u16::from_be_bytes([b[2], b[3]]),
        );
    }
    let reply_src = opts.src.unwrap_or(rx.dst);
    let l3 = match (rx.src, reply_src) {
        (IpAddr::V4(s), IpAddr::V4(d)) => L3Spec::V4 {
            src: d,
            dst: s,
            ttl: opts.ttl,
            options: &[],
            ident: opts.ident,
            frag: FragSpec {
                dont_frag: true,
                more_frags: false,
                offset: 0,
            },
        },
        (IpAddr::V6(s), IpAddr::V6(d)) => L3Spec::V6 {
            src: d,
            dst: s,
            hop_limit: opts.ttl,
            ext: &[],
        },
        _ => return Err(BuildError::ReplySourceMismatch),
    };
    let spec = FrameSpec {
        src_mac: rx.dst_mac,
        dst_mac: rx.src_mac,
        vlans: &tags[..n],
        l3,
        sport: rx.dport,
        dport: rx.sport,
        payload,
        udp_csum: CsumMode::Correct,
    };
    write_frame(&spec, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const DMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    fn v4_spec<'a>(payload: &'a [u8], vlans: &'a [(u16, u16)]) -> FrameSpec<'a> {
        FrameSpec {
            src_mac: SMAC,
            dst_mac: DMAC,
            vlans,
            l3: L3Spec::V4 {
                src: Ipv4Addr::new(198, 18, 0, 1),
                dst: Ipv4Addr::new(198, 18, 0, 2),
                ttl: 64,
                options: &[],
                ident: 0x1234,
                frag: FragSpec {
                    dont_frag: true,
                    ..FragSpec::default()
                },
            },
            sport: 1000,
            dport: 2000,
            payload,
            udp_csum: CsumMode::Correct,
        }
    }

    /// Hand-assembled with the checksums worked out independently (Python
    /// RFC 1071 one-liner): 198.18.0.1:1000 -> 198.18.0.2:2000, "hi".
    const V4_HI: [u8; 44] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // eth
        0x45, 0x00, 0x00, 0x1e, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, // ip..csum
        0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x02, // addrs
        0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0a, 0x00, 0x00, // udp
        b'h', b'i',
    ];

    #[test]
    fn writes_known_v4_frame() {
        let f = to_vec(&v4_spec(b"hi", &[])).unwrap();
        assert_eq!(f.len(), 44);
        // Everything but the two checksums must match byte for byte.
        let mut masked = f.clone();
        masked[24..26].fill(0);
        masked[40..42].fill(0);
        assert_eq!(masked, V4_HI);
        assert_eq!(
            checksum::checksum(&f[14..34]),
            0,
            "IP header sums to all ones"
        );
        let ip = u16::from_be_bytes([f[24], f[25]]);
        let udp = u16::from_be_bytes([f[40], f[41]]);
        assert_eq!((ip, udp), (EXPECT_IP_CSUM, EXPECT_UDP_CSUM));
    }
    // Computed independently with a plain RFC 1071 Python sum over the bytes above.
    const EXPECT_IP_CSUM: u16 = 0x9c73;
    const EXPECT_UDP_CSUM: u16 = 0xff90;

    #[test]
    fn frame_len_matches_write() {
        let tags = [(0x88a8, 10), (0x8100, 20)];
        let ext = [
            ExtSpec::HopByHop { options: &[] },
            ExtSpec::DestOpts {
                options: &[0x1e, 4, 1, 2, 3, 4],
            },
            ExtSpec::Fragment {
                offset: 0,
                more: false,
                ident: 7,
            },
        ];
        let spec = FrameSpec {
            l3: L3Spec::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                hop_limit: 9,
                ext: &ext,
            },
            ..v4_spec(b"abc", &tags)
        };
        let n = frame_len(&spec).unwrap();
        assert_eq!(n, 14 + 8 + 40 + 8 + 8 + 8 + 8 + 3);
        let mut small = vec![0u8; n - 1];
        assert_eq!(
            write_frame(&spec, &mut small),
            Err(BuildError::BufferTooSmall {
                need: n,
                have: n - 1
            })
        );
        let mut big = vec![0xeeu8; n + 10];
        assert_eq!(write_frame(&spec, &mut big), Ok(n));
        assert!(
            big[n..].iter().all(|&b| b == 0xee),
            "writes nothing past the frame"
        );
        // Chain codes: IPv6 -> 0 -> 60 -> 44 -> 17.
        assert_eq!(big[22 + 6], 0);
        assert_eq!(big[62], 60);
        assert_eq!(big[70], 44);
        assert_eq!(big[78], 17);
        // HopByHop with no options: 6 bytes of PadN (type 1, length 4).
        assert_eq!(&big[64..70], &[1, 4, 0, 0, 0, 0]);
        // DestOpts with 6 option bytes: fills exactly 8, no padding.
        assert_eq!(&big[72..78], &[0x1e, 4, 1, 2, 3, 4]);
    }

    #[test]
    fn rejects_bad_specs() {
        let mut s = v4_spec(b"", &[]);
        if let L3Spec::V4 {
            ref mut options, ..
        } = s.l3
        {
            *options = &[1, 1, 1];
        }
        assert_eq!(frame_len(&s), Err(BuildError::BadOptions(3)));
        let big = vec![0u8; 65535 - 28 + 1];
        assert_eq!(
            frame_len(&v4_spec(&big, &[])),
            Err(BuildError::TooLong(65536))
        );
        assert!(frame_len(&v4_spec(&big[1..], &[])).is_ok());
    }

    fn v6_spec<'a>(payload: &'a [u8], ext: &'a [ExtSpec<'a>]) -> FrameSpec<'a> {
        FrameSpec {
            l3: L3Spec::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                hop_limit: 64,
                ext,
            },
            ..v4_spec(payload, &[])
        }
    }

    /// IPv6's limits: an extension header whose length byte the writer
    /// encodes (8-octet units) may be at most 2048 bytes, a raw one is the
    /// caller's and may be longer; extension headers plus UDP must fit the
    /// 16-bit payload length, and the error names the length asked for.
    #[test]
    fn ipv6_limits() {
        let opts = vec![0u8; 2046];
        let fits = [ExtSpec::DestOpts { options: &opts }];
        assert_eq!(frame_len(&v6_spec(b"", &fits)), Ok(14 + 40 + 2048 + 8));
        let opts = vec![0u8; 2047];
        let over = [ExtSpec::DestOpts { options: &opts }];
        assert_eq!(
            frame_len(&v6_spec(b"", &over)),
            Err(BuildError::BadExtHeader(2056))
        );
        let hbh = [ExtSpec::HopByHop { options: &opts }];
        assert_eq!(
            frame_len(&v6_spec(b"", &hbh)),
            Err(BuildError::BadExtHeader(2056))
        );
        let data = vec![0u8; 2060];
        let routing = [ExtSpec::Routing {
            routing_type: 4,
            segments_left: 0,
            data: &data,
        }];
        assert_eq!(
            frame_len(&v6_spec(b"", &routing)),
            Err(BuildError::BadExtHeader(2064))
        );
        let raw_bytes = vec![0u8; 4096];
        let raw = [ExtSpec::Raw {
            code: 51,
            bytes: &raw_bytes,
        }];
        assert_eq!(frame_len(&v6_spec(b"", &raw)), Ok(14 + 40 + 4096 + 8));
        // 16 bytes of extension headers and 5 000 of payload: far under the
        // limit (their product is not).
        let two = [
            ExtSpec::DestOpts { options: &[] },
            ExtSpec::Fragment {
                offset: 0,
                more: false,
                ident: 1,
            },
        ];
        let payload = vec![0u8; 5000];
        assert_eq!(
            frame_len(&v6_spec(&payload, &two)),
            Ok(14 + 40 + 16 + 8 + 5000)
        );
        // The payload length at exactly 65 535, then one byte over.
        let payload = vec![0u8; 65535 - 16 - 8];
        assert_eq!(frame_len(&v6_spec(&payload, &two)), Ok(14 + 40 + 65535));
        let payload = vec![0u8; 65535 - 16 - 8 + 1];
        assert_eq!(
            frame_len(&v6_spec(&payload, &two)),
            Err(BuildError::TooLong(65536))
        );
    }

    #[test]
    fn wrong_checksum_never_verifies() {
        for c in [0x0001u16, 0x0101, 0xfefe, 0xffff, 0x1234] {
            let w = wrong_checksum(c);
            assert_ne!(w, 0);
            assert_ne!(w, c);
            // Not congruent mod 0xffff.
            assert_ne!(u32::from(w) % 0xffff, u32::from(c) % 0xffff);
        }
    }

    #[test]
    fn routing_final_destination() {
        let mut data = [0u8; 4 + 32];
        data[4 + 15] = 0xaa;
        data[4 + 31] = 0xbb;
        let last = routing_final_dst(&ExtSpec::Routing {
            routing_type: 2,
            segments_left: 1,
            data: &data,
        })
        .unwrap();
        assert_eq!(last.octets()[15], 0xbb);
        let srh = routing_final_dst(&ExtSpec::Routing {
            routing_type: 4,
            segments_left: 1,
            data: &data,
        })
        .unwrap();
        assert_eq!(srh.octets()[15], 0xaa);
        assert_eq!(
            routing_final_dst(&ExtSpec::Routing {
                routing_type: 4,
                segments_left: 0,
                data: &data
            }),
            None
        );
    }
}
