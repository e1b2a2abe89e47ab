//! Ethernet II header and 802.1Q / 802.1ad tags (IEEE 802.3, 802.1Q).
//!
//! Zero-copy views in the style of smoltcp's `wire`: `new_checked` proves
//! the fixed header is present, after which the accessors index inside it.

use super::ParseError;

/// Destination MAC, source MAC, EtherType.
pub const HEADER_LEN: usize = 14;
/// One VLAN tag: TPID (already read as the outer EtherType) is before it;
/// the view covers TCI + inner EtherType.
pub const VLAN_TAG_LEN: usize = 4;

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
        let b = self.buffer.as_ref();
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }

    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        let b = self.buffer.as_ref();
        [b[6], b[7], b[8], b[9], b[10], b[11]]
    }

    /// The outer EtherType (a TPID when the frame is tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[12], b[13]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[0..6].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_src_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[6..12].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[12..14].copy_from_slice(&t.to_be_bytes());
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
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
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
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[0..2].copy_from_slice(&tci.to_be_bytes());
    }

    #[inline]
    pub fn set_inner_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&t.to_be_bytes());
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
}
