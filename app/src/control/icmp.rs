//! ICMP and ICMPv6 echo (RFC 792, RFC 4443 §4.2): answer echo requests to
//! the port's unicast addresses, in place, payload untouched.

use super::{Icmp6In, Iface, Plan, Skip};
use crate::parse::icmp::{types, IcmpPacket};
use crate::parse::ipv4::{self, Ipv4Packet};
use crate::parse::ipv6::{self, Ipv6Packet};

/// Linux's default TTL / hop limit for locally generated replies.
const REPLY_TTL: u8 = 64;

/// An ICMP echo request to one of `iface`'s addresses, from a single host.
pub(super) fn classify_v4(f: &[u8], l3: usize, l4: usize, iface: &Iface) -> Result<Plan, Skip> {
    // IP options (record route, timestamp) would need processing to be
    // echoed correctly (Linux ip_options_echo); requests with options are
    // left alone.
    if l4 != l3 + ipv4::HEADER_LEN {
        return Err(Skip::NotOurs);
    }
    let ip = f
        .get(l3..)
        .and_then(|b| Ipv4Packet::new_checked(b).ok())
        .ok_or(Skip::NotOurs)?;
    let end = l3 + usize::from(ip.total_len());
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // Only echo to our unicast addresses (Linux ignores broadcast echo by
    // default), and never to a source that is not a single host.
    if !iface.has_v4(dst)
        || src.is_unspecified()
        || src.is_multicast()
        || iface.is_v4_broadcast(src)
    {
        return Err(Skip::NotOurs);
    }
    let p = f
        .get(l4..end)
        .and_then(IcmpPacket::new_checked)
        .ok_or(Skip::NotOurs)?;
    if p.msg_type() != types::V4_ECHO_REQUEST || p.code() != 0 {
        return Err(Skip::NotOurs);
    }
    if !p.verify_v4() {
        return Err(Skip::BadChecksum);
    }
    Ok(Plan::Echo4 { l3, end })
}

/// An ICMPv6 echo request (type and code already matched) to one of
/// `iface`'s addresses.
pub(super) fn classify_v6(m: &Icmp6In<'_>, iface: &Iface) -> Result<Plan, Skip> {
    let (src, dst) = (m.ip.src_addr(), m.ip.dst_addr());
    // RFC 4443 §4.2: replies to multicast echo are optional; we answer
    // unicast to our own addresses only.
    if !iface.has_v6(&dst) || src.is_unspecified() {
        return Err(Skip::NotOurs);
    }
    if !m.msg.verify_v6(&src, &dst) {
        return Err(Skip::BadChecksum);
    }
    Ok(Plan::Echo6 {
        l3: m.l3,
        end: m.end,
    })
}

/// The echo request at `l3..end` becomes the reply: addresses swapped, TTL
/// reset, header checksum and ICMP type and checksum rewritten.
pub(super) fn write_echo_v4(room: &mut [u8], len: usize, l3: usize, end: usize) -> Option<()> {
    if end > len {
        return None;
    }
    let mut ip = Ipv4Packet::new_checked(room.get_mut(l3..l3 + ipv4::HEADER_LEN)?).ok()?;
    // `classify_v4` plans only option-less requests; anything else has no
    // 20-byte header to checksum.
    if ip.header_len() != ipv4::HEADER_LEN {
        return None;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    ip.set_src_addr(dst);
    ip.set_dst_addr(src);
    ip.set_ttl(REPLY_TTL);
    ip.fill_checksum();
    let mut p = IcmpPacket::new_checked(room.get_mut(l3 + ipv4::HEADER_LEN..end)?)?;
    p.set_msg_type(types::V4_ECHO_REPLY);
    p.fill_checksum_v4();
    Some(())
}

/// As [`write_echo_v4`] for ICMPv6: the checksum covers the swapped
/// addresses through the pseudo-header.
pub(super) fn write_echo_v6(room: &mut [u8], len: usize, l3: usize, end: usize) -> Option<()> {
    if end > len {
        return None;
    }
    let mut ip = Ipv6Packet::new_checked(room.get_mut(l3..l3 + ipv6::HEADER_LEN)?).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    ip.set_src_addr(&dst);
    ip.set_dst_addr(&src);
    ip.set_hop_limit(REPLY_TTL);
    let mut p = IcmpPacket::new_checked(room.get_mut(l3 + ipv6::HEADER_LEN..end)?)?;
    p.set_msg_type(types::V6_ECHO_REPLY);
    p.fill_checksum_v6(&dst, &src);
    Some(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::tests::{
        iface, ip4_frame, ip6_frame, peer6, reject, reply, us6, zeros, L3, OUR_MAC, PEER4,
        PEER_MAC, US4,
    };
    use super::*;
    use crate::control::classify;
    use crate::parse::ether::EthernetFrame;
    use crate::parse::icmp;
    use crate::parse::PROTO_ICMP;

    /// An echo request (ident 0x1234, seq 7) from PEER4 to `dst`.
    fn echo4(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let mut m = zeros(icmp::HEADER_LEN);
        m.extend_from_slice(payload);
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(types::V4_ECHO_REQUEST);
        p.set_echo_ident(0x1234);
        p.set_echo_seq(7);
        p.fill_checksum_v4();
        ip4_frame(PEER4, dst, PROTO_ICMP, &m)
    }

    #[test]
    fn icmp_echo_reply_swaps_and_checksums() {
        let (_, r) = reply(&echo4(US4, b"ping payload"));
        let e = EthernetFrame::new_checked(&r[..]).unwrap();
        assert_eq!((e.dst_mac(), e.src_mac()), (PEER_MAC, OUR_MAC));
        let ip = Ipv4Packet::new_checked(&r[L3..]).unwrap();
        assert_eq!(ip.verify_checksum(), Some(true), "IP header checksum");
        assert_eq!((ip.src_addr(), ip.dst_addr()), (US4, PEER4));
        assert_eq!(ip.ttl(), REPLY_TTL);
        let l4 = L3 + ipv4::HEADER_LEN;
        let p = IcmpPacket::new_checked(&r[l4..]).unwrap();
        assert_eq!(p.msg_type(), types::V4_ECHO_REPLY);
        assert!(p.verify_v4());
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 7));
        assert_eq!(&r[l4 + icmp::HEADER_LEN..], b"ping payload");
    }

    #[test]
    fn icmp_echo_not_for_us_bad_checksum_broadcast_are_skipped() {
        let f = echo4(Ipv4Addr::new(198, 18, 0, 7), b"x");
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = echo4(US4, b"xy");
        if let Some(last) = f.last_mut() {
            *last ^= 0xff;
        }
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::BadChecksum));
        let f = echo4(Ipv4Addr::new(198, 18, 0, 255), b"x");
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        assert!(iface().is_v4_broadcast(Ipv4Addr::new(198, 18, 0, 255)));
        assert!(!iface().is_v4_broadcast(Ipv4Addr::new(198, 18, 0, 254)));
    }

    #[test]
    fn icmp6_echo_reply() {
        let mut m = zeros(icmp::HEADER_LEN);
        m.extend_from_slice(b"hi");
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(types::V6_ECHO_REQUEST);
        p.set_echo_ident(9);
        p.set_echo_seq(1);
        let f = ip6_frame(peer6(), us6(), 64, &mut m, OUR_MAC);
        let (_, r) = reply(&f);
        let ip = Ipv6Packet::new_checked(&r[L3..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (us6(), peer6()));
        assert_eq!(ip.hop_limit(), REPLY_TTL);
        let l4 = L3 + ipv6::HEADER_LEN;
        let p = IcmpPacket::new_checked(&r[l4..]).unwrap();
        assert_eq!(p.msg_type(), types::V6_ECHO_REPLY);
        assert!(p.verify_v6(&us6(), &peer6()));
        assert_eq!((p.echo_ident(), p.echo_seq()), (9, 1));
        assert_eq!(&r[l4 + icmp::HEADER_LEN..], b"hi");
    }

    #[test]
    fn an_echo4_plan_over_a_header_with_options_writes_nothing() {
        let mut f = echo4(US4, b"x");
        let plan = classify(&f, &reject(&f), &iface()).unwrap();
        Ipv4Packet::new_unchecked(&mut f[L3..]).set_version_ihl(4, 6);
        let n = f.len();
        assert_eq!(
            crate::control::write_reply(&mut f, n, &plan, &iface()),
            None
        );
    }
}
