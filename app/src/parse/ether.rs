//! Ethernet II header and 802.1Q / 802.1ad tags (IEEE 802.3, 802.1Q).
//!
//! Zero-copy views in the style of smoltcp's `wire`: `new_checked` proves
//! the fixed header is present, after which the accessors index inside it.

use std::net::Ipv6Addr;

use super::{field_array, field_be16, ParseError};

/// Byte offsets in the Ethernet II header.
pub mod field {
    use std::ops::Range;

    pub const DST_MAC: Range<usize> = 0..6;
    pub const SRC_MAC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
}

/// Byte offsets in a VLAN tag as [`VlanTag`] sees it (after the TPID).
pub mod vlan_field {
    use std::ops::Range;

    /// PCP (3 bits), DEI (1), VID (12).
    pub const TCI: Range<usize> = 0..2;
    pub const INNER_ETHERTYPE: Range<usize> = 2..4;
}

/// Destination MAC, source MAC, EtherType.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// One VLAN tag: TPID (already read as the outer EtherType) is before it;
/// the view covers TCI + inner EtherType.
pub const VLAN_TAG_LEN: usize = vlan_field::INNER_ETHERTYPE.end;

const _: () = assert!(HEADER_LEN == 14 && VLAN_TAG_LEN == 4);

/// EtherType values this crate cares about (IEEE registry).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    pub const QINQ: u16 = 0x88a8;
}

/// True for the two TPIDs Linux treats as VLAN tags (`eth_type_vlan`).
#[inline]
pub const fn is_vlan_tpid(t: u16) -> bool {
    t == ethertype::VLAN || t == ethertype::QINQ
}

/// The Ethernet destination of an IPv6 multicast address: 33:33 and the
/// address's low 32 bits (RFC 2464 §7).
#[inline]
pub fn ipv6_multicast_mac(a: &Ipv6Addr) -> [u8; 6] {
    let [w, x, y, z] = (u128::from(*a) as u32).to_be_bytes();
    [0x33, 0x33, w, x, y, z]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps without checking; accessors panic if the buffer is shorter
    /// than [`HEADER_LEN`]. Only for buffers the caller sized itself.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::Truncated { family: None });
        }
        Ok(EthernetFrame { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn dst_mac(&self) -> [u8; 6] {
        field_array(self.buffer.as_ref(), field::DST_MAC)
    }

    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        field_array(self.buffer.as_ref(), field::SRC_MAC)
    }

    /// The outer EtherType (a TPID when the frame is tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::ETHERTYPE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DST_MAC].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_src_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SRC_MAC].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
}

/// The 4 bytes after a TPID: TCI (PCP, DEI, VID) and the next EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < VLAN_TAG_LEN {
            return Err(ParseError::Truncated { family: None });
        }
        Ok(VlanTag { buffer })
    }

    #[inline]
    pub fn tci(&self) -> u16 {
        field_be16(self.buffer.as_ref(), vlan_field::TCI)
    }

    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    #[inline]
    pub fn inner_ethertype(&self) -> u16 {
        field_be16(self.buffer.as_ref(), vlan_field::INNER_ETHERTYPE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[vlan_field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    #[inline]
    pub fn set_inner_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[vlan_field::INNER_ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // dst 02:00:00:00:00:01, src 02:00:00:00:00:02, 802.1Q, TCI 0xa064
    // (PCP 5, VID 100), inner IPv4.
    const TAGGED: [u8; 18] = [
        0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x81, 0x00, 0xa0, 0x64, 0x08, 0x00,
    ];

    #[test]
    fn reads_header_and_tag() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.dst_mac(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.src_mac(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.ethertype(), ethertype::VLAN);
        assert!(is_vlan_tpid(f.ethertype()));
        let t = VlanTag::new_checked(&TAGGED[HEADER_LEN..]).unwrap();
        assert_eq!(t.vid(), 100);
        assert_eq!(t.pcp(), 5);
        assert_eq!(t.inner_ethertype(), ethertype::IPV4);
    }

    #[test]
    fn short_buffers_rejected() {
        for n in 0..HEADER_LEN {
            assert!(EthernetFrame::new_checked(&TAGGED[..n]).is_err());
        }
        for n in 0..VLAN_TAG_LEN {
            assert!(VlanTag::new_checked(&TAGGED[HEADER_LEN..HEADER_LEN + n]).is_err());
        }
    }

    #[test]
    fn setters_roundtrip() {
        let mut b = [0u8; 18];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_dst_mac([2, 0, 0, 0, 0, 1]);
        f.set_src_mac([2, 0, 0, 0, 0, 2]);
        f.set_ethertype(ethertype::VLAN);
        let mut t = VlanTag::new_unchecked(&mut b[HEADER_LEN..]);
        t.set_tci(0xa064);
        t.set_inner_ethertype(ethertype::IPV4);
        assert_eq!(b, TAGGED);
    }

    #[test]
    fn ipv6_multicast_macs() {
        let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
        assert_eq!(ipv6_multicast_mac(&all_nodes), [0x33, 0x33, 0, 0, 0, 1]);
        let snm: Ipv6Addr = "ff02::1:ff12:3456".parse().unwrap();
        assert_eq!(
            ipv6_multicast_mac(&snm),
            [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]
        );
    }
}
