//! Minimal ICMP (RFC 792) / ICMPv6 (RFC 4443, RFC 4861) views for the
//! responder that answers echo and neighbor solicitation. The parser hands
//! it `ParseError::NotUdp { proto, l4_off, .. }`; this module reads from
//! `l4_off`.

use super::checksum::{self, Sum};
use std::net::Ipv6Addr;

pub const HEADER_LEN: usize = 8;

pub mod types {
    pub const V4_ECHO_REPLY: u8 = 0;
    pub const V4_ECHO_REQUEST: u8 = 8;
    pub const V6_ECHO_REQUEST: u8 = 128;
    pub const V6_ECHO_REPLY: u8 = 129;
    pub const V6_NEIGHBOR_SOLICIT: u8 = 135;
    pub const V6_NEIGHBOR_ADVERT: u8 = 136;
}

/// Type, code, checksum, and the 4-byte rest-of-header (echo: identifier
/// and sequence; NS/NA: flags/reserved), then the body (NS/NA: target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// `None` when shorter than the 8-byte common header.
    #[inline]
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= HEADER_LEN).then_some(IcmpPacket { buffer })
    }

    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// NS/NA target address (bytes 8..24), if present.
    #[inline]
    pub fn nd_target(&self) -> Option<Ipv6Addr> {
        let t: [u8; 16] = self.buffer.as_ref().get(8..24)?.try_into().ok()?;
        Some(Ipv6Addr::from(t))
    }

    /// ICMPv4: checksum over the whole message, no pseudo-header.
    #[inline]
    pub fn verify_v4(&self) -> bool {
        Sum::new().add_bytes(self.buffer.as_ref()).verifies()
    }

    /// ICMPv6: checksum includes the IPv6 pseudo-header (RFC 4443 §2.3).
    #[inline]
    pub fn verify_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        checksum::pseudo_v6(src, dst, super::PROTO_ICMPV6, len)
            .combine(Sum::new().add_bytes(b))
            .verifies()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    #[inline]
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Recomputes the ICMPv4 checksum over the whole buffer.
    pub fn fill_checksum_v4(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Recomputes the ICMPv6 checksum with the pseudo-header.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
        let c = checksum::pseudo_v6(src, dst, super::PROTO_ICMPV6, len)
            .combine(Sum::new().add_bytes(b))
            .checksum();
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_echo_request_checksum() {
        // Echo request id 1 seq 1, payload "abcd".
        let mut m = [8u8, 0, 0, 0, 0, 1, 0, 1, b'a', b'b', b'c', b'd'];
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.fill_checksum_v4();
        assert!(p.verify_v4());
        assert_eq!((p.msg_type(), p.echo_ident(), p.echo_seq()), (8, 1, 1));
        m[9] ^= 1;
        assert!(!IcmpPacket::new_checked(&m[..]).unwrap().verify_v4());
        assert!(IcmpPacket::new_checked(&m[..7]).is_none());
    }

    #[test]
    fn v6_checksum_depends_on_pseudo_header() {
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        let b: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut m = [0u8; 24];
        m[0] = types::V6_NEIGHBOR_SOLICIT;
        m[8..24].copy_from_slice(&b.octets());
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.fill_checksum_v6(&a, &b);
        assert!(p.verify_v6(&a, &b));
        // Swapping src and dst would sum the same; a different address must not.
        let c: Ipv6Addr = "fd00::3".parse().unwrap();
        assert!(!p.verify_v6(&a, &c));
        assert_eq!(p.nd_target(), Some(b));
    }
}
