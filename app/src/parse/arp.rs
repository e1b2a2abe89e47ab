//! ARP packet view (RFC 826), for Ethernet hardware and IPv4 protocol
//! addresses: the only kind a responder on an Ethernet port answers.
//!
//! `new_checked` proves the 28 bytes are present and that the header
//! announces Ethernet/IPv4 (htype 1, ptype 0x0800, hlen 6, plen 4), after
//! which the addresses sit at the fixed offsets in [`field`].

use std::net::Ipv4Addr;

use super::{ether, field_array, field_be16};

/// Byte offsets in an Ethernet/IPv4 ARP packet.
pub mod field {
    use std::ops::Range;

    /// Hardware type.
    pub const HTYPE: Range<usize> = 0..2;
    /// Protocol type (an EtherType).
    pub const PTYPE: Range<usize> = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Range<usize> = 6..8;
    /// Sender hardware address.
    pub const SHA: Range<usize> = 8..14;
    /// Sender protocol address.
    pub const SPA: Range<usize> = 14..18;
    /// Target hardware address.
    pub const THA: Range<usize> = 18..24;
    /// Target protocol address.
    pub const TPA: Range<usize> = 24..28;
}

/// An Ethernet/IPv4 ARP packet's length (without Ethernet padding).
pub const PACKET_LEN: usize = field::TPA.end;
const _: () = assert!(PACKET_LEN == 28);

/// Hardware types (IANA "ARP Parameters").
pub mod hardware {
    pub const ETHERNET: u16 = 1;
}

/// Operation codes (RFC 826).
pub mod operation {
    pub const REQUEST: u16 = 1;
    pub const REPLY: u16 = 2;
}

/// Why a buffer is not an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArpError {
    /// Shorter than [`PACKET_LEN`].
    #[error("ARP packet truncated")]
    Truncated,
    /// Another hardware or protocol type, or other address lengths.
    #[error("not Ethernet/IPv4 ARP: htype {htype}, ptype {ptype:#06x}, hlen {hlen}, plen {plen}")]
    NotEthernetIpv4 {
        htype: u16,
        ptype: u16,
        hlen: u8,
        plen: u8,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps without checking; accessors panic on buffers shorter than
    /// [`PACKET_LEN`], and read the fixed Ethernet/IPv4 offsets whatever
    /// the header says.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// The 28 bytes are present and the header announces Ethernet/IPv4.
    /// Bytes past them (Ethernet padding) are allowed and ignored.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ArpError> {
        if buffer.as_ref().len() < PACKET_LEN {
            return Err(ArpError::Truncated);
        }
        let p = ArpPacket { buffer };
        let (htype, ptype, hlen, plen) = (
            p.hardware_type(),
            p.protocol_type(),
            p.hardware_len(),
            p.protocol_len(),
        );
        if htype != hardware::ETHERNET || ptype != ether::ethertype::IPV4 || hlen != 6 || plen != 4
        {
            return Err(ArpError::NotEthernetIpv4 {
                htype,
                ptype,
                hlen,
                plen,
            });
        }
        Ok(p)
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn hardware_type(&self) -> u16 {
        field_be16(self.b(), field::HTYPE)
    }

    #[inline]
    pub fn protocol_type(&self) -> u16 {
        field_be16(self.b(), field::PTYPE)
    }

    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.b()[field::HLEN]
    }

    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.b()[field::PLEN]
    }

    /// [`operation`] code.
    #[inline]
    pub fn operation(&self) -> u16 {
        field_be16(self.b(), field::OPER)
    }

    #[inline]
    pub fn sender_hardware_addr(&self) -> [u8; 6] {
        field_array(self.b(), field::SHA)
    }

    #[inline]
    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field_array::<4>(self.b(), field::SPA))
    }

    #[inline]
    pub fn target_hardware_addr(&self) -> [u8; 6] {
        field_array(self.b(), field::THA)
    }

    #[inline]
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field_array::<4>(self.b(), field::TPA))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    #[inline]
    pub fn set_hardware_type(&mut self, v: u16) {
        self.m()[field::HTYPE].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_protocol_type(&mut self, v: u16) {
        self.m()[field::PTYPE].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_hardware_len(&mut self, v: u8) {
        self.m()[field::HLEN] = v;
    }

    #[inline]
    pub fn set_protocol_len(&mut self, v: u8) {
        self.m()[field::PLEN] = v;
    }

    #[inline]
    pub fn set_operation(&mut self, v: u16) {
        self.m()[field::OPER].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_sender_hardware_addr(&mut self, mac: [u8; 6]) {
        self.m()[field::SHA].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_sender_protocol_addr(&mut self, a: Ipv4Addr) {
        self.m()[field::SPA].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_target_hardware_addr(&mut self, mac: [u8; 6]) {
        self.m()[field::THA].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_target_protocol_addr(&mut self, a: Ipv4Addr) {
        self.m()[field::TPA].copy_from_slice(&a.octets());
    }
}

/// An ARP exchange captured from Linux, for the tests here and in `control`.
#[cfg(test)]
pub(crate) mod captured {
    // Sent by Linux (Debian 12 host kernel, `ping 198.18.0.1` from a network
    // namespace whose veth has 198.18.0.2/24 and MAC 02:00:00:00:00:02) and
    // captured with dumpcap on the veth's peer: "who-has 198.18.0.1 tell
    // 198.18.0.2". 42 bytes: a veth does not pad to 60.
    pub const LINUX_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0xc6, 0x12,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x00, 0x01,
    ];
    // The same capture, when the peer namespace held 198.18.0.1 on MAC
    // 02:00:00:00:00:01: Linux's reply, "198.18.0.1 is-at 02:00:00:00:00:01".
    pub const LINUX_REPLY: [u8; 42] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc6, 0x12,
        0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0xc6, 0x12, 0x00, 0x02,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::captured::{LINUX_REPLY, LINUX_REQUEST};

    const L3: usize = ether::HEADER_LEN;

    #[test]
    fn reads_a_linux_request() {
        let p = ArpPacket::new_checked(&LINUX_REQUEST[L3..]).unwrap();
        assert_eq!(p.hardware_type(), hardware::ETHERNET);
        assert_eq!(p.protocol_type(), ether::ethertype::IPV4);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), operation::REQUEST);
        assert_eq!(p.sender_hardware_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(p.sender_protocol_addr(), Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(p.target_hardware_addr(), [0; 6]);
        assert_eq!(p.target_protocol_addr(), Ipv4Addr::new(198, 18, 0, 1));
        let r = ArpPacket::new_checked(&LINUX_REPLY[L3..]).unwrap();
        assert_eq!(r.operation(), operation::REPLY);
        assert_eq!(r.sender_hardware_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(r.target_protocol_addr(), Ipv4Addr::new(198, 18, 0, 2));
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let mut padded = LINUX_REQUEST.to_vec();
        padded.resize(60, 0);
        let p = ArpPacket::new_checked(&padded[L3..]).unwrap();
        assert_eq!(p.target_protocol_addr(), Ipv4Addr::new(198, 18, 0, 1));
    }

    #[test]
    fn truncated_packets_are_refused() {
        for n in 0..PACKET_LEN {
            assert_eq!(
                ArpPacket::new_checked(&LINUX_REQUEST[L3..L3 + n]),
                Err(ArpError::Truncated),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn other_hardware_protocols_or_lengths_are_refused() {
        // (offset, value): IEEE 802 hardware (htype 6), IPv6 protocol type,
        // an 8-byte hardware address, a 16-byte protocol address.
        for (at, v) in [(1, 6), (2, 0x86), (4, 8), (5, 16)] {
            let mut b = LINUX_REQUEST;
            b[L3 + at] = v;
            assert!(
                matches!(
                    ArpPacket::new_checked(&b[L3..]),
                    Err(ArpError::NotEthernetIpv4 { .. })
                ),
                "byte {at} = {v}"
            );
        }
        let mut b = LINUX_REQUEST;
        b[L3 + 1] = 6;
        assert_eq!(
            ArpPacket::new_checked(&b[L3..]),
            Err(ArpError::NotEthernetIpv4 {
                htype: 6,
                ptype: 0x0800,
                hlen: 6,
                plen: 4
            })
        );
    }

    #[test]
    fn setters_turn_the_request_into_linuxs_reply() {
        let mut b = LINUX_REQUEST;
        let (eth, arp) = b.split_at_mut(L3);
        let mut p = ArpPacket::new_checked(arp).unwrap();
        let (sha, spa, tpa) = (
            p.sender_hardware_addr(),
            p.sender_protocol_addr(),
            p.target_protocol_addr(),
        );
        let ours = [2, 0, 0, 0, 0, 1];
        p.set_operation(operation::REPLY);
        p.set_sender_hardware_addr(ours);
        p.set_sender_protocol_addr(tpa);
        p.set_target_hardware_addr(sha);
        p.set_target_protocol_addr(spa);
        let mut f = ether::EthernetFrame::new_checked(eth).unwrap();
        f.set_dst_mac(sha);
        f.set_src_mac(ours);
        assert_eq!(b, LINUX_REPLY);
    }

    #[test]
    fn header_setters_roundtrip() {
        let mut b = [0u8; PACKET_LEN];
        let mut p = ArpPacket::new_unchecked(&mut b[..]);
        p.set_hardware_type(hardware::ETHERNET);
        p.set_protocol_type(ether::ethertype::IPV4);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(operation::REQUEST);
        p.set_sender_hardware_addr([2, 0, 0, 0, 0, 2]);
        p.set_sender_protocol_addr(Ipv4Addr::new(198, 18, 0, 2));
        p.set_target_protocol_addr(Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(&b[..], &LINUX_REQUEST[L3..]);
    }
}
