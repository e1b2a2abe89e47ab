//! IPv4 header view (RFC 791).

use std::net::Ipv4Addr;

use super::checksum::Sum;
use super::{field_array, field_be16, Family, ParseError};

/// Byte offsets in the IPv4 header (RFC 791 §3.1).
pub mod field {
    use std::ops::Range;

    /// Version (high 4 bits) and IHL (low 4 bits).
    pub const VER_IHL: usize = 0;
    /// DSCP (high 6 bits) and ECN (low 2 bits).
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (high 3 bits) and fragment offset (low 13).
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
    /// Options, up to IHL * 4.
    pub const OPTIONS: usize = DST_ADDR.end;
}

/// Fixed header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;
const _: () = assert!(HEADER_LEN == 20);
/// IHL is 4 bits of 32-bit words: at most 60 bytes, so at most 40 of options.
pub const MAX_OPTIONS_LEN: usize = 40;

pub const FLAG_DF: u16 = 0x4000;
pub const FLAG_MF: u16 = 0x2000;
pub const OFFSET_MASK: u16 = 0x1fff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Accessors panic on buffers shorter than [`HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Checks only that the fixed 20 bytes are present; the receive path
    /// validates version, IHL and lengths in the kernel's order itself.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::Truncated {
                family: Some(Family::V4),
            });
        }
        Ok(Ipv4Packet { buffer })
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
        self.b()[field::VER_IHL] >> 4
    }

    /// IHL in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.b()[field::VER_IHL] & 0x0f
    }

    /// Header length in bytes (IHL * 4); not validated.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.b()[field::DSCP_ECN]
    }

    #[inline]
    pub fn total_len(&self) -> u16 {
        field_be16(self.b(), field::TOTAL_LEN)
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        field_be16(self.b(), field::IDENT)
    }

    /// Flags and fragment offset as one 16-bit field.
    #[inline]
    pub fn frag_field(&self) -> u16 {
        field_be16(self.b(), field::FLAGS_FRAG)
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.frag_field() & FLAG_DF != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.frag_field() & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.frag_field() & OFFSET_MASK
    }

    /// Linux `ip_is_fragment`: MF set or a non-zero offset.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.frag_field() & (FLAG_MF | OFFSET_MASK) != 0
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }

    #[inline]
    pub fn header_checksum(&self) -> u16 {
        field_be16(self.b(), field::CHECKSUM)
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field_array::<4>(self.b(), field::SRC_ADDR))
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field_array::<4>(self.b(), field::DST_ADDR))
    }

    /// Options bytes, or `None` when IHL claims more than the buffer holds
    /// or less than the fixed header.
    #[inline]
    pub fn options(&self) -> Option<&[u8]> {
        self.b().get(field::OPTIONS..self.header_len())
    }

    /// Verifies the header checksum over IHL*4 bytes; `None` when IHL is
    /// below 5 or the header does not fit the buffer.
    #[inline]
    pub fn verify_checksum(&self) -> Option<bool> {
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return None;
        }
        let h = self.b().get(..hl)?;
        Some(Sum::new().add_bytes(h).verifies())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets version 4 and the IHL (in 32-bit words).
    #[inline]
    pub fn set_version_ihl(&mut self, version: u8, ihl: u8) {
        self.m()[field::VER_IHL] = (version << 4) | (ihl & 0x0f);
    }

    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.m()[field::DSCP_ECN] = v;
    }

    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.m()[field::TOTAL_LEN].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.m()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_frag_field(&mut self, v: u16) {
        self.m()[field::FLAGS_FRAG].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.m()[field::TTL] = v;
    }

    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.m()[field::PROTOCOL] = v;
    }

    #[inline]
    pub fn set_header_checksum(&mut self, v: u16) {
        self.m()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.m()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.m()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum over IHL*4 bytes.
    /// Panics if IHL claims more than the buffer holds (writer-side only).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_header_checksum(0);
        let hl = self.header_len();
        let c = Sum::new().add_bytes(&self.b()[..hl]).checksum();
        self.set_header_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv4 header checksum worked example from Wikipedia's "Internet
    // checksum" / "IPv4 header checksum" article: checksum 0xb861.
    const WIKI: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn fields_of_known_header() {
        let p = Ipv4Packet::new_checked(&WIKI[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 0x73);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!(p.options(), Some(&[][..]));
        assert_eq!(p.verify_checksum(), Some(true));
    }

    /// The accessors the parser does not use (the echo handler and the
    /// responders build headers with the setters) read what the setters wrote.
    #[test]
    fn accessors_read_what_the_setters_wrote() {
        let p = Ipv4Packet::new_checked(&WIKI[..]).unwrap();
        assert_eq!(
            (p.dscp_ecn(), p.ident(), p.header_checksum()),
            (0, 0, 0xb861)
        );
        let mut h = WIKI;
        let mut w = Ipv4Packet::new_unchecked(&mut h[..]);
        w.set_dscp_ecn(0xb9);
        w.set_ident(0x1234);
        w.set_frag_field(FLAG_MF | 5);
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.dscp_ecn(), p.ident()), (0xb9, 0x1234));
        assert!(!p.dont_frag() && p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 5);
    }

    #[test]
    fn fill_checksum_reproduces_known_value() {
        let mut h = WIKI;
        h[10] = 0;
        h[11] = 0;
        Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
        assert_eq!(h, WIKI);
    }

    #[test]
    fn corrupted_header_fails_checksum() {
        let mut h = WIKI;
        h[8] = 63;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).unwrap().verify_checksum(),
            Some(false)
        );
    }

    #[test]
    fn bad_ihl_and_short_buffer() {
        let mut h = WIKI;
        h[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).unwrap().verify_checksum(),
            None
        );
        h[0] = 0x46; // 24 bytes claimed, 20 held
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.options(), None);
        assert_eq!(p.verify_checksum(), None);
        for n in 0..HEADER_LEN {
            assert!(Ipv4Packet::new_checked(&WIKI[..n]).is_err());
        }
    }

    #[test]
    fn fragment_bits() {
        let mut h = WIKI;
        h[6] = 0x20; // MF, offset 0
        h[7] = 0;
        let p = Ipv4Packet::new_unchecked(&h[..]);
        assert!(p.is_fragment() && p.more_frags() && p.frag_offset() == 0);
        h[6] = 0x00;
        h[7] = 0xb9; // offset 185, last fragment
        let p = Ipv4Packet::new_unchecked(&h[..]);
        assert!(p.is_fragment() && !p.more_frags() && p.frag_offset() == 185);
    }
}
