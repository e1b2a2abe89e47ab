//! The parser's fast path: the frame nearly every datagram arrives in, an
//! untagged Ethernet II frame with IPv4 without options or IPv6 with UDP
//! right after the fixed header.
//!
//! [`super::parse_into`] tries it first. It reads the headers at fixed
//! offsets out of arrays whose length the one bounds check per header
//! proved, with no VLAN loop, no extension-header walk and no per-field
//! range checks. It answers only when every check of the general path
//! passes: any frame it does not recognise, or that fails any check,
//! gets `None`, and the general path parses it from the start, so every
//! error (and its counter) still comes from one place. Each accepted frame
//! yields exactly the [`Datagram`] the general path would
//! (`fast_path_agrees_with_the_general_path` in `app/tests/parse_props.rs`
//! holds the two to that on generated and mutated frames).
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{
    checksum, ether, field_array, field_be16, ipv4, ipv6, udp, CsumHint, Datagram, Family, Offload,
    PROTO_UDP,
};

/// Where the IP header starts in an untagged frame.
const L3: usize = ether::HEADER_LEN;
/// Where UDP starts after an IPv4 header without options.
const L4_V4: usize = L3 + ipv4::HEADER_LEN;
/// Where UDP starts after the IPv6 fixed header.
const L4_V6: usize = L3 + ipv6::HEADER_LEN;

/// The `N` bytes at `off` as an array, or `None` past the end.
#[inline(always)]
fn array_at<const N: usize>(b: &[u8], off: usize) -> Option<&[u8; N]> {
    b.get(off..off + N)?.try_into().ok()
}

/// The UDP checksum over `seg` (the datagram, header included) and the
/// family's pseudo-header, unless the NIC said good. False when it fails
/// or the NIC said bad: the general path then reports it.
#[inline(always)]
fn udp_checksum_ok(hint: CsumHint, seg: &[u8], pseudo: impl FnOnce() -> checksum::Sum) -> bool {
    match hint {
        CsumHint::Good => true,
        CsumHint::Bad => false,
        CsumHint::Unknown => pseudo().add_bytes_inline(seg).verifies(),
    }
}

/// The datagram in `frame` if it is the common frame and passes every
/// check; `None` sends it to the general path.
#[inline]
pub fn parse_common(frame: &[u8], hints: Offload) -> Option<Datagram> {
    let mut out = std::mem::MaybeUninit::uninit();
    parse_common_into(frame, hints, &mut out).ok().copied()
}

/// [`parse_common`] writing the datagram into `out`, which comes back
/// (untouched) when the frame is the general path's. Built in place, the
/// summary is not assembled on the stack and copied: 20 instructions a
/// datagram on the RX lcore.
#[inline(always)]
pub fn parse_common_into<'o>(
    frame: &[u8],
    hints: Offload,
    out: &'o mut MaybeUninit<Datagram>,
) -> Result<&'o mut Datagram, &'o mut MaybeUninit<Datagram>> {
    let Some(eth) = array_at::<{ ether::HEADER_LEN }>(frame, 0) else {
        return Err(out);
    };
    match field_be16(eth, ether::field::ETHERTYPE) {
        ether::ethertype::IPV4 => {
            write_accepted(out, eth, Family::V4, L4_V4, v4(frame, hints), |ip| {
                let addr = |f| IpAddr::V4(Ipv4Addr::from(field_array::<4>(ip, f)));
                (addr(ipv4::field::SRC_ADDR), addr(ipv4::field::DST_ADDR))
            })
        }
        ether::ethertype::IPV6 => {
            write_accepted(out, eth, Family::V6, L4_V6, v6(frame, hints), |ip| {
                let addr = |f| IpAddr::V6(Ipv6Addr::from(field_array::<16>(ip, f)));
                (addr(ipv6::field::SRC_ADDR), addr(ipv6::field::DST_ADDR))
            })
        }
        _ => Err(out),
    }
}

/// One family's accepted frame written into `out`, or `out` back. Generic
/// over the family so each arm keeps its own code: folding both into one
/// `IpAddr` first and matching after cost 17 instructions a datagram.
#[inline(always)]
fn write_accepted<'o, const IP: usize>(
    out: &'o mut MaybeUninit<Datagram>,
    eth: &[u8; ether::HEADER_LEN],
    family: Family,
    l4: usize,
    accepted: Option<Accepted<'_, IP>>,
    addrs: impl FnOnce(&[u8; IP]) -> (IpAddr, IpAddr),
) -> Result<&'o mut Datagram, &'o mut MaybeUninit<Datagram>> {
    match accepted {
        Some((ip, uh, ulen)) => {
            let (src, dst) = addrs(ip);
            Ok(out.write(datagram(eth, family, l4, ulen, src, dst, uh)))
        }
        None => Err(out),
    }
}

/// An accepted frame's IP header, UDP header and UDP length.
type Accepted<'f, const IP: usize> = (&'f [u8; IP], &'f [u8; udp::HEADER_LEN], usize);

#[inline(always)]
fn v4(frame: &[u8], hints: Offload) -> Option<Accepted<'_, { ipv4::HEADER_LEN }>> {
    use ipv4::field;
    let ip: &[u8; ipv4::HEADER_LEN] = array_at(frame, L3)?;
    // Version 4, IHL 5: no options.
    if ip[field::VER_IHL] != 0x45 {
        return None;
    }
    let header_ok = match hints.ip {
        CsumHint::Good => true,
        CsumHint::Bad => false,
        CsumHint::Unknown => checksum::ipv4_header_verifies(ip),
    };
    // Not a fragment (Linux `ip_is_fragment`: MF or an offset), and UDP.
    if !header_ok
        || field_be16(ip, field::FLAGS_FRAG) & (ipv4::FLAG_MF | ipv4::OFFSET_MASK) != 0
        || ip[field::PROTOCOL] != PROTO_UDP
    {
        return None;
    }
    // The IP total length ends the datagram (Ethernet padding is cut); it
    // must hold the UDP header, and the UDP length must fit inside it.
    let total = usize::from(field_be16(ip, field::TOTAL_LEN));
    let l4 = frame.get(L4_V4..L3.checked_add(total)?)?;
    let uh: &[u8; udp::HEADER_LEN] = array_at(l4, 0)?;
    let ulen = field_be16(uh, udp::field::LENGTH);
    let seg = l4.get(..usize::from(ulen))?;
    if seg.len() < udp::HEADER_LEN {
        return None;
    }
    // Source and destination as they sit in the header.
    let addrs: &[u8; 8] = array_at(ip, field::SRC_ADDR.start)?;
    // RFC 768: zero means the sender computed no checksum.
    if field_be16(uh, udp::field::CHECKSUM) != 0
        && !udp_checksum_ok(hints.l4, seg, || {
            checksum::pseudo_v4_wire(addrs, PROTO_UDP, ulen)
        })
    {
        return None;
    }
    Some((ip, uh, seg.len()))
}

#[inline(always)]
fn v6(frame: &[u8], hints: Offload) -> Option<Accepted<'_, { ipv6::HEADER_LEN }>> {
    use ipv6::field;
    let ip: &[u8; ipv6::HEADER_LEN] = array_at(frame, L3)?;
    if ip[field::VER_TC_FLOW.start] >> 4 != 6 || ip[field::NEXT_HEADER] != PROTO_UDP {
        return None;
    }
    let src = Ipv6Addr::from(field_array::<16>(ip, field::SRC_ADDR));
    let dst = Ipv6Addr::from(field_array::<16>(ip, field::DST_ADDR));
    if super::v6_martian(&src, &dst) {
        return None;
    }
    // The payload length ends the datagram (Ethernet padding is cut).
    let plen = usize::from(field_be16(ip, field::PAYLOAD_LEN));
    let l4 = frame.get(L4_V6..L4_V6.checked_add(plen)?)?;
    let uh: &[u8; udp::HEADER_LEN] = array_at(l4, 0)?;
    // UDP length 0 (jumbo UDP, RFC 2675) and a zero checksum (refused,
    // RFC 8200 §8.1) are the general path's to handle.
    let ulen = field_be16(uh, udp::field::LENGTH);
    let seg = l4.get(..usize::from(ulen))?;
    let addrs: &[u8; 32] = array_at(ip, field::SRC_ADDR.start)?;
    if seg.len() < udp::HEADER_LEN
        || field_be16(uh, udp::field::CHECKSUM) == 0
        || !udp_checksum_ok(hints.l4, seg, || {
            checksum::pseudo_v6_wire(addrs, PROTO_UDP, u32::from(ulen))
        })
    {
        return None;
    }
    Some((ip, uh, seg.len()))
}

#[inline(always)]
fn datagram(
    eth: &[u8; ether::HEADER_LEN],
    family: Family,
    l4: usize,
    ulen: usize,
    src: IpAddr,
    dst: IpAddr,
    uh: &[u8; udp::HEADER_LEN],
) -> Datagram {
    // Offsets: l4 + 8 <= 62 and ulen <= 65535 (a u16 above).
    Datagram {
        family,
        vlan_count: 0,
        l3_off: L3 as u16,
        l4_off: l4 as u16,
        payload_off: (l4 + udp::HEADER_LEN) as u16,
        payload_len: (ulen - udp::HEADER_LEN) as u16,
        src,
        dst,
        sport: field_be16(uh, udp::field::SRC_PORT),
        dport: field_be16(uh, udp::field::DST_PORT),
        src_mac: field_array(eth, ether::field::SRC_MAC),
        dst_mac: field_array(eth, ether::field::DST_MAC),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};

    fn frame(v6: bool, payload: &[u8]) -> Vec<u8> {
        let l3 = if v6 {
            L3Spec::V6 {
                src: "fd00::9".parse().unwrap(),
                dst: "fd00::1".parse().unwrap(),
                hop_limit: 64,
                ext: &[],
            }
        } else {
            L3Spec::V4 {
                src: Ipv4Addr::new(198, 18, 0, 9),
                dst: Ipv4Addr::new(198, 18, 0, 1),
                ttl: 64,
                options: &[],
                ident: 1,
                frag: FragSpec::default(),
            }
        };
        build::to_vec(&FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 9],
            dst_mac: [2, 0, 0, 0, 0, 1],
            vlans: &[],
            l3,
            sport: 4000,
            dport: 53,
            payload,
            udp_csum: CsumMode::Correct,
        })
        .unwrap()
    }

    /// An empty datagram (UDP length 8, the header alone) is a common frame
    /// too: the fast path takes it, both families, with the general path's
    /// answer.
    #[test]
    fn empty_datagrams_take_the_fast_path() {
        for v6 in [false, true] {
            let f = frame(v6, b"");
            let d = parse_common(&f, Offload::default()).expect("fast path");
            assert_eq!(d.payload_len, 0);
            assert_eq!(d.payload(&f), Some(&[][..]));
            let mut out = std::mem::MaybeUninit::uninit();
            assert_eq!(
                super::super::parse_general(&f, Offload::default(), &mut out).copied(),
                Ok(d)
            );
        }
    }

    /// One byte of payload, and a UDP length one short of the header: the
    /// first is taken, the second left to the general path (which refuses it).
    #[test]
    fn udp_length_bounds() {
        for v6 in [false, true] {
            let f = frame(v6, b"x");
            assert_eq!(
                parse_common(&f, Offload::default()).map(|d| d.payload_len),
                Some(1)
            );
            let mut short = frame(v6, b"");
            let at = if v6 { L4_V6 } else { L4_V4 } + udp::field::LENGTH.start;
            short[at..at + 2].copy_from_slice(&7u16.to_be_bytes());
            let good = Offload {
                ip: CsumHint::Good,
                l4: CsumHint::Good,
            };
            assert_eq!(parse_common(&short, good), None);
            assert!(crate::parse::parse(&short, good).is_err());
        }
    }
}
