//! IPv6 fixed header and extension headers (RFC 8200).

use std::net::Ipv6Addr;

use super::{field_array, field_be16, Family, ParseError};

/// Byte offsets in the IPv6 fixed header (RFC 8200 §3).
pub mod field {
    use std::ops::Range;

    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// Byte offsets shared by Hop-by-Hop, Routing and Destination Options
/// headers (RFC 8200 §4.3-4.6), and the Routing header's next two.
pub mod ext_field {
    pub const NEXT_HEADER: usize = 0;
    /// In 8-octet units, not counting the first 8 octets.
    pub const LENGTH: usize = 1;
    pub const ROUTING_TYPE: usize = 2;
    pub const SEGMENTS_LEFT: usize = 3;
}

/// Byte offsets in the Fragment header (RFC 8200 §4.5).
pub mod frag_field {
    use std::ops::Range;

    pub const NEXT_HEADER: usize = 0;
    pub const RESERVED: usize = 1;
    /// Fragment offset (13 bits), 2 reserved bits, M flag.
    pub const OFFSET_M: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..8;
}

pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// Length of a fragment header (RFC 8200 §4.5).
pub const FRAG_HEADER_LEN: usize = frag_field::IDENT.end;
const _: () = assert!(HEADER_LEN == 40 && FRAG_HEADER_LEN == 8);

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
        self.b()[field::VER_TC_FLOW.start] >> 4
    }

    #[inline]
    fn ver_tc_flow(&self) -> u32 {
        u32::from_be_bytes(field_array(self.b(), field::VER_TC_FLOW))
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.ver_tc_flow() >> 20) as u8
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.ver_tc_flow() & 0x000f_ffff
    }

    #[inline]
    pub fn payload_len(&self) -> u16 {
        field_be16(self.b(), field::PAYLOAD_LEN)
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.b()[field::NEXT_HEADER]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LIMIT]
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field_array::<16>(self.b(), field::SRC_ADDR))
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field_array::<16>(self.b(), field::DST_ADDR))
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
        self.m()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        self.m()[field::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.m()[field::NEXT_HEADER] = v;
    }

    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.m()[field::HOP_LIMIT] = v;
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.m()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.m()[field::DST_ADDR].copy_from_slice(&a.octets());
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
        let hdr_len = match b.get(ext_field::LENGTH) {
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
        self.buffer.as_ref()[ext_field::NEXT_HEADER]
    }

    /// Total header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[ext_field::LENGTH]) + 1) * 8
    }

    /// Routing header only: routing type (byte 2). The buffer holds at
    /// least 8 bytes (`header_len` is a multiple of 8).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[ext_field::ROUTING_TYPE]
    }

    /// Routing header only: segments left (byte 3).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[ext_field::SEGMENTS_LEFT]
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
        self.buffer.as_ref()[frag_field::NEXT_HEADER]
    }

    #[inline]
    fn field(&self) -> u16 {
        field_be16(self.buffer.as_ref(), frag_field::OFFSET_M)
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
        u32::from_be_bytes(field_array(self.buffer.as_ref(), frag_field::IDENT))
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

    /// A routing header (RFC 8200 §4.4): next header, length, routing
    /// type (byte 2), segments left (byte 3).
    #[test]
    fn routing_header_fields() {
        let r = [17u8, 0, 4, 2, 0, 0, 0, 0];
        let h = ExtHeader::new_checked(&r[..]).unwrap();
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.header_len(), 8);
        assert_eq!(h.routing_type(), 4);
        assert_eq!(h.segments_left(), 2);
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
