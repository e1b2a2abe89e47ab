//! ARP (RFC 826): answer Ethernet/IPv4 requests for the port's addresses,
//! in place, as Linux's `arp_process` does.

use super::{Iface, Plan, Skip};
use crate::parse::arp::{self, operation, ArpPacket};

/// A request for one of `iface`'s addresses, from a unicast sender.
pub(super) fn classify(f: &[u8], l3: usize, iface: &Iface) -> Result<Plan, Skip> {
    // Ethernet/IPv4 (the view checks hrd 1, pro 0x0800, hln 6, pln 4), request.
    let a = f
        .get(l3..)
        .and_then(|b| ArpPacket::new_checked(b).ok())
        .ok_or(Skip::NotOurs)?;
    if a.operation() != operation::REQUEST {
        return Err(Skip::NotOurs);
    }
    // Linux arp_process: a multicast/broadcast sender hardware address is
    // never an answerable neighbour.
    if is_group_mac(&a.sender_hardware_addr()) || !iface.has_v4(a.target_protocol_addr()) {
        return Err(Skip::NotOurs);
    }
    Ok(Plan::Arp { l3 })
}

/// The I/G bit: a group (multicast or broadcast) address.
#[inline]
fn is_group_mac(mac: &[u8; 6]) -> bool {
    mac.first().is_some_and(|b| b & 1 != 0)
}

/// Turn the request at `l3` into the reply: "target is at our MAC", sent
/// back to the sender. Returns the sender's hardware address (the reply's
/// Ethernet destination).
pub(super) fn write_reply(room: &mut [u8], l3: usize, iface: &Iface) -> Option<[u8; 6]> {
    // The plan came from `classify`: the header is Ethernet/IPv4.
    let mut a = ArpPacket::new_unchecked(room.get_mut(l3..l3 + arp::PACKET_LEN)?);
    let (sha, spa, tpa) = (
        a.sender_hardware_addr(),
        a.sender_protocol_addr(),
        a.target_protocol_addr(),
    );
    a.set_operation(operation::REPLY);
    a.set_sender_hardware_addr(iface.mac);
    a.set_sender_protocol_addr(tpa);
    a.set_target_hardware_addr(sha);
    a.set_target_protocol_addr(spa);
    Some(sha)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::tests::{eth_frame, iface, reject, reply, L3, OUR_MAC, PEER4, PEER_MAC, US4};
    use super::*;
    use crate::control::classify;
    use crate::parse::arp::{hardware, ArpPacket};
    use crate::parse::ether::{self, EthernetFrame};
    use crate::parse::ParseError;

    /// "who-has `tpa` tell PEER4", broadcast, padded to 60 bytes.
    fn arp_request(tpa: Ipv4Addr) -> Vec<u8> {
        let mut f = eth_frame([u8::MAX; 6], ether::ethertype::ARP, 46);
        let mut a = ArpPacket::new_unchecked(&mut f[L3..]);
        a.set_hardware_type(hardware::ETHERNET);
        a.set_protocol_type(ether::ethertype::IPV4);
        a.set_hardware_len(6);
        a.set_protocol_len(4);
        a.set_operation(operation::REQUEST);
        a.set_sender_hardware_addr(PEER_MAC);
        a.set_sender_protocol_addr(PEER4);
        a.set_target_protocol_addr(tpa);
        f
    }

    #[test]
    fn arp_request_for_us_gets_a_reply_with_our_mac() {
        let (_, r) = reply(&arp_request(US4));
        let e = EthernetFrame::new_checked(&r[..]).unwrap();
        assert_eq!(
            (e.dst_mac(), e.src_mac(), e.ethertype()),
            (PEER_MAC, OUR_MAC, ether::ethertype::ARP)
        );
        let a = ArpPacket::new_checked(&r[L3..]).unwrap();
        assert_eq!(a.operation(), operation::REPLY);
        assert_eq!(a.sender_hardware_addr(), OUR_MAC, "sha");
        assert_eq!(a.sender_protocol_addr(), US4, "spa");
        assert_eq!(a.target_hardware_addr(), PEER_MAC, "tha");
        assert_eq!(a.target_protocol_addr(), PEER4, "tpa");
    }

    /// Our reply to a request Linux sent is the reply Linux sends.
    #[test]
    fn arp_reply_to_linux_equals_linuxs_own() {
        use crate::parse::arp::captured::{LINUX_REPLY, LINUX_REQUEST};
        assert_eq!(reply(&LINUX_REQUEST).1, LINUX_REPLY);
    }

    #[test]
    fn arp_for_someone_else_a_reply_or_a_group_sender_is_not_ours() {
        let f = arp_request(Ipv4Addr::new(198, 18, 0, 9));
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = arp_request(US4);
        ArpPacket::new_unchecked(&mut f[L3..]).set_operation(operation::REPLY);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = arp_request(US4);
        ArpPacket::new_unchecked(&mut f[L3..]).set_sender_hardware_addr([u8::MAX; 6]);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let mut f = arp_request(US4);
        ArpPacket::new_unchecked(&mut f[L3..]).set_hardware_type(6);
        assert_eq!(classify(&f, &reject(&f), &iface()), Err(Skip::NotOurs));
        let f = arp_request(US4);
        assert_eq!(
            classify(
                &f[..L3 + 16],
                &ParseError::NotIp {
                    ethertype: ether::ethertype::ARP,
                    l3_off: L3 as u16,
                },
                &iface()
            ),
            Err(Skip::NotOurs)
        );
    }
}
