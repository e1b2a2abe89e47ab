//! IPv6 fixed header and extension headers (RFC 8200).

use std::net::Ipv6Addr;

use super::{Family, ParseError};

pub const HEADER_LEN: usize = 40;
/// Length of a fragment header (RFC 8200 §4.5).
pub const FRAG_HEADER_LEN: usize = 8;

/// Next Header values (IANA "Assigned Internet Protocol Numbers").
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Accessors panic on buffers shorter than [`HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::Truncated {
                family: Some(Family::V6),
            });
        }
        Ok(Ipv6Packet { buffer })
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
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.b()[0] << 4) | (self.b()[1] >> 4)
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }

    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.b()[4], self.b()[5]])
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Writes version 6, traffic class and flow label (low 20 bits).
    #[inline]
    pub fn set_version_tc_flow(&mut self, tc: u8, flow: u32) {
        let w = (6u32 << 28) | (u32::from(tc) << 20) | (flow & 0x000f_ffff);
        self.m()[0..4].copy_from_slice(&w.to_be_bytes());
    }

    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        self.m()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.m()[6] = v;
    }

    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.m()[7] = v;
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.m()[8..24].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.m()[24..40].copy_from_slice(&a.octets());
    }
}

/// Generic view of Hop-by-Hop, Routing and Destination Options headers:
/// they share the (next header, length in 8-octet units not counting the
/// first) prefix (RFC 8200 §4.3-4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Checks that the two-byte prefix and the whole header it announces fit.
    /// A header running past the IPv6 payload is a header error (Linux:
    /// `pskb_may_pull` failure in the exthdr handlers, Ip6InHdrErrors).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        let hdr_len = match b.get(1) {
            Some(&l) => (usize::from(l) + 1) * 8,
            None => return Err(ParseError::BadIpHeader { family: Family::V6 }),
        };
        if b.len() < hdr_len {
            return Err(ParseError::BadIpHeader { family: Family::V6 });
        }
        Ok(ExtHeader { buffer })
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Total header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }

    /// Routing header only: routing type (byte 2).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    /// Routing header only: segments left (byte 3).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
}

/// Fragment header view (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < FRAG_HEADER_LEN {
            return Err(ParseError::BadIpHeader { family: Family::V6 });
        }
        Ok(FragmentHeader { buffer })
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    #[inline]
    fn field(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// Offset in 8-octet units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.field() >> 3
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.field() & 1 != 0
    }

    #[inline]
    pub fn ident(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Version 6, TC 0xa5, flow 0x12345, payload 16, UDP, hop limit 64,
    // fd00::1 -> fd00::2.
    const HDR: [u8; 40] = [
        0x6a, 0x51, 0x23, 0x45, 0x00, 0x10, 0x11, 0x40, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0x01, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
    ];

    #[test]
    fn fixed_header_fields() {
        let p = Ipv6Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xa5);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 16);
        assert_eq!(p.next_header(), next_header::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        for n in 0..HEADER_LEN {
            assert!(Ipv6Packet::new_checked(&HDR[..n]).is_err());
        }
    }

    #[test]
    fn setters_roundtrip() {
        let mut b = [0u8; 40];
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0xa5, 0x12345);
        p.set_payload_len(16);
        p.set_next_header(17);
        p.set_hop_limit(64);
        p.set_src_addr(&"fd00::1".parse().unwrap());
        p.set_dst_addr(&"fd00::2".parse().unwrap());
        assert_eq!(b, HDR);
    }

    #[test]
    fn ext_header_lengths() {
        // Destination options, next UDP, length 1 => 16 bytes.
        let mut d = [0u8; 16];
        d[0] = 17;
        d[1] = 1;
        let h = ExtHeader::new_checked(&d[..]).unwrap();
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.next_header(), 17);
        assert!(ExtHeader::new_checked(&d[..15]).is_err());
        assert!(ExtHeader::new_checked(&d[..1]).is_err());
    }

    #[test]
    fn fragment_header_fields() {
        // next UDP, offset 185 (1480 bytes), M=1, ident 0xdeadbeef.
        let f = [17, 0, 0x05, 0xc9, 0xde, 0xad, 0xbe, 0xef];
        let h = FragmentHeader::new_checked(&f[..]).unwrap();
        assert_eq!(h.frag_offset(), 185);
        assert!(h.more_frags());
        assert_eq!(h.ident(), 0xdead_beef);
        assert!(FragmentHeader::new_checked(&f[..7]).is_err());
    }
}
