//! IPv6 neighbour discovery (RFC 4861): answer neighbour solicitations for
//! the port's addresses with an advertisement (§7.2.4), including duplicate
//! address detection probes.

use std::net::Ipv6Addr;

use super::{Icmp6In, Iface, Plan, Skip};
use crate::parse::ether::{self, EthernetFrame};
use crate::parse::icmp::{self, nd_flags, nd_option, types, IcmpPacket, NdOption};
use crate::parse::ipv6::{self, Ipv6Packet};
use crate::parse::PROTO_ICMPV6;

/// RFC 4861 §7.1.1/§7.1.2: ND messages travel one hop only.
const ND_HOP_LIMIT: u8 = 255;
/// The length of one link-layer address option on Ethernet (§4.6.1).
const LL_ADDR_OPTION_LEN: usize = 8;
/// NA with one target link-layer address option (RFC 4861 §4.4).
const NA_LEN: usize = icmp::ND_LEN + LL_ADDR_OPTION_LEN;
/// All-nodes multicast (RFC 4291 §2.7.1): where DAD probes are answered.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1):
/// ff02::1:ff00:0/104 and the low 24 bits of `a`.
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    const PREFIX: u128 = 0xff02_0000_0000_0000_0000_0001_ff00_0000;
    Ipv6Addr::from(PREFIX | (u128::from(*a) & 0x00ff_ffff))
}

/// A valid neighbour solicitation (type and code already matched) for one
/// of `iface`'s addresses; `f` is the whole frame.
pub(super) fn classify(f: &[u8], m: &Icmp6In<'_>, iface: &Iface) -> Result<Plan, Skip> {
    let (src, dst, p) = (m.ip.src_addr(), m.ip.dst_addr(), &m.msg);
    // RFC 4861 §7.1.1 validity checks, in its order: hop limit 255, ICMP
    // length 24 or more (a shorter message has no target).
    if m.ip.hop_limit() != ND_HOP_LIMIT {
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
    // The last source link-layer address option, if any; an invalid option
    // (cut short, or of length zero) invalidates the message (§4.6).
    let mut slla = None;
    for o in p.nd_options() {
        let o = o.map_err(|_| Skip::NotOurs)?;
        if o.kind() == nd_option::SOURCE_LL_ADDR {
            slla = Some(o.link_layer_addr());
        }
    }
    if src.is_unspecified() {
        // Duplicate address detection: no SLLA allowed, answer to
        // all-nodes with S clear (§7.2.4).
        if slla.is_some() || dst != solicited_node(&target) {
            return Err(Skip::NotOurs);
        }
        return Ok(Plan::Na {
            l3: m.l3,
            target,
            dst: ALL_NODES,
            dst_mac: ether::ipv6_multicast_mac(&ALL_NODES),
            solicited: false,
        });
    }
    // Without an SLLA (unicast NUD probes) the frame's own source
    // is the solicitor's link-layer address.
    let eth_src = EthernetFrame::new_checked(f)
        .map_err(|_| Skip::NotOurs)?
        .src_mac();
    Ok(Plan::Na {
        l3: m.l3,
        target,
        dst: src,
        dst_mac: slla.unwrap_or(eth_src),
        solicited: true,
    })
}

/// Write an advertisement for `target` to `dst` over the solicitation at
/// `l3`: a fresh IPv6 header and NA with one target link-layer address
/// option (our MAC). Returns the reply's frame length (it may be longer
/// than the solicitation: one without options grows by 8 bytes).
pub(super) fn write_advertisement(
    room: &mut [u8],
    l3: usize,
    target: &Ipv6Addr,
    dst: &Ipv6Addr,
    solicited: bool,
    iface: &Iface,
) -> Option<usize> {
    let l4 = l3 + ipv6::HEADER_LEN;
    let out_len = l4 + NA_LEN;
    let mut ip = Ipv6Packet::new_checked(room.get_mut(l3..l4)?).ok()?;
    ip.set_version_tc_flow(0, 0);
    ip.set_payload_len(NA_LEN as u16);
    ip.set_next_header(PROTO_ICMPV6);
    ip.set_hop_limit(ND_HOP_LIMIT);
    ip.set_src_addr(target);
    ip.set_dst_addr(dst);
    let na = room.get_mut(l4..out_len)?;
    na.fill(0);
    let mut p = IcmpPacket::new_checked(na)?;
    p.set_msg_type(types::V6_NEIGHBOR_ADVERT);
    // R=0 (not a router), S as solicited, O=1: our own address (§7.2.4).
    p.set_nd_flags(if solicited {
        nd_flags::SOLICITED | nd_flags::OVERRIDE
    } else {
        nd_flags::OVERRIDE
    });
    p.set_nd_target(target);
    let mut tlla = NdOption::new_unchecked(p.nd_options_mut()?);
    tlla.set_kind(nd_option::TARGET_LL_ADDR);
    tlla.set_len_units((LL_ADDR_OPTION_LEN / 8) as u8);
    tlla.set_link_layer_addr(iface.mac);
    p.fill_checksum_v6(target, dst);
    Some(out_len)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        iface, ip6_frame, peer6, reject, reply, unhex, us6, zeros, L3, OUR_MAC, PEER_MAC,
    };
    use super::*;
    use crate::control::classify;

    const L4: usize = L3 + ipv6::HEADER_LEN;

    /// A solicitation for `target`, with the peer's MAC as the SLLA option
    /// when `slla`, sent to the target's solicited-node group.
    fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, slla: bool) -> Vec<u8> {
        let mut m = zeros(icmp::ND_LEN + if slla { LL_ADDR_OPTION_LEN } else { 0 });
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(types::V6_NEIGHBOR_SOLICIT);
        p.set_nd_target(&target);
        if slla {
            let mut o = NdOption::new_unchecked(p.nd_options_mut().unwrap());
            o.set_kind(nd_option::SOURCE_LL_ADDR);
            o.set_len_units(1);
            o.set_link_layer_addr(PEER_MAC);
        }
        let group = ether::ipv6_multicast_mac(&solicited_node(&us6()));
        ip6_frame(src, dst, ND_HOP_LIMIT, &mut m, group)
    }

    #[test]
    fn solicited_node_addresses() {
        assert_eq!(
            solicited_node(&"fd00::1".parse().unwrap()),
            "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            solicited_node(&"2001:db8::abcd:4567:89ab".parse().unwrap()),
            "ff02::1:ff67:89ab".parse::<Ipv6Addr>().unwrap()
        );
    }

    /// The advertisement in `r`, checked for what every NA of ours has in
    /// common; returns its ICMPv6 view.
    fn advertisement(r: &[u8], dst: Ipv6Addr) -> IcmpPacket<&[u8]> {
        assert_eq!(r.len(), L4 + NA_LEN);
        assert_eq!(EthernetFrame::new_checked(r).unwrap().src_mac(), OUR_MAC);
        let ip = Ipv6Packet::new_checked(&r[L3..]).unwrap();
        assert_eq!(ip.hop_limit(), ND_HOP_LIMIT);
        assert_eq!(ip.payload_len() as usize, NA_LEN);
        assert_eq!((ip.src_addr(), ip.dst_addr()), (us6(), dst));
        let p = IcmpPacket::new_checked(&r[L4..]).unwrap();
        assert_eq!(p.msg_type(), types::V6_NEIGHBOR_ADVERT);
        assert!(
            p.verify_v6(&us6(), &dst),
            "ICMPv6 checksum with pseudo-header"
        );
        assert_eq!(p.nd_target(), Some(us6()));
        let opts: Vec<_> = p.nd_options().collect();
        assert_eq!(opts.len(), 1);
        let o = opts.first().unwrap().unwrap();
        assert_eq!(o.kind(), nd_option::TARGET_LL_ADDR);
        assert_eq!(o.total_len(), LL_ADDR_OPTION_LEN);
        assert_eq!(o.link_layer_addr(), OUR_MAC);
        p
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
        assert_eq!(
            EthernetFrame::new_checked(&r[..]).unwrap().dst_mac(),
            PEER_MAC
        );
        let p = advertisement(&r, peer6());
        assert_eq!(
            p.nd_flags(),
            nd_flags::SOLICITED | nd_flags::OVERRIDE,
            "S and O set, R clear"
        );
    }

    #[test]
    fn ns_without_slla_grows_the_frame_and_answers_the_frame_source() {
        let f = ns(peer6(), us6(), us6(), false);
        assert_eq!(f.len(), L4 + icmp::ND_LEN);
        let (_, r) = reply(&f);
        assert_eq!(
            EthernetFrame::new_checked(&r[..]).unwrap().dst_mac(),
            PEER_MAC
        );
        advertisement(&r, peer6());
        // Byte for byte what the responder wrote before the split.
        assert_eq!(
            r,
            unhex(
                "02000000000202000000000186dd6000000000203afffd000000000000000000\
                 000000000001fd00000000000000000000000000000288001c9c60000000fd00\
                 00000000000000000000000000010201020000000001"
            )
        );
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
        let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
        assert_eq!(
            EthernetFrame::new_checked(&r[..]).unwrap().dst_mac(),
            ether::ipv6_multicast_mac(&all_nodes)
        );
        let p = advertisement(&r, all_nodes);
        assert_eq!(p.nd_flags(), nd_flags::OVERRIDE);
        // Byte for byte what the responder wrote before the split.
        assert_eq!(
            r,
            unhex(
                "33330000000102000000000186dd6000000000203afffd000000000000000000\
                 000000000001ff02000000000000000000000000000188005a9b20000000fd00\
                 00000000000000000000000000010201020000000001"
            )
        );
    }

    #[test]
    fn invalid_solicitations_are_not_answered() {
        // Not our target.
        let other: Ipv6Addr = "fd00::9".parse().unwrap();
        let f = ns(peer6(), solicited_node(&other), other, true);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Hop limit not 255 (forwarded: RFC 4861 §7.1.1).
        let mut f = ns(peer6(), solicited_node(&us6()), us6(), true);
        Ipv6Packet::new_unchecked(&mut f[L3..]).set_hop_limit(64);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // DAD with an SLLA option.
        let f = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&us6()), us6(), true);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Zero-length option.
        let mut m = zeros(icmp::ND_LEN + LL_ADDR_OPTION_LEN);
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(types::V6_NEIGHBOR_SOLICIT);
        p.set_nd_target(&us6());
        NdOption::new_unchecked(p.nd_options_mut().unwrap()).set_kind(nd_option::SOURCE_LL_ADDR);
        let f = ip6_frame(peer6(), us6(), ND_HOP_LIMIT, &mut m, OUR_MAC);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Shorter than a solicitation.
        let mut m = zeros(icmp::ND_LEN - 1);
        IcmpPacket::new_checked(&mut m[..])
            .unwrap()
            .set_msg_type(types::V6_NEIGHBOR_SOLICIT);
        let f = ip6_frame(peer6(), us6(), ND_HOP_LIMIT, &mut m, OUR_MAC);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        // Wrong checksum.
        let mut f = ns(peer6(), solicited_node(&us6()), us6(), true);
        let mut p = IcmpPacket::new_checked(&mut f[L4..]).unwrap();
        let c = p.checksum();
        p.set_checksum(c ^ 1);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::BadChecksum));
    }
}
