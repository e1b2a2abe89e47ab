//! UDP header view (RFC 768).

use super::{field_be16, ParseError};

/// Byte offsets in the UDP header.
pub mod field {
    use std::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

pub const HEADER_LEN: usize = field::CHECKSUM.end;
const _: () = assert!(HEADER_LEN == 8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Accessors panic on buffers shorter than [`HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// `family` only labels the error; a missing UDP header is a UDP length
    /// error in Linux (`pskb_may_pull` in `__udp4_lib_rcv` -> UdpInErrors).
    #[inline]
    pub fn new_checked(buffer: T, family: super::Family) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::BadUdpLength { family });
        }
        Ok(UdpPacket { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::DST_PORT)
    }

    #[inline]
    pub fn len(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// True when the length field says zero (only meaningful for IPv6,
    /// where Linux reads it as "use the IP payload length").
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Family;

    #[test]
    fn fields_and_setters() {
        let h = [0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0xab, 0xcd];
        let u = UdpPacket::new_checked(&h[..], Family::V4).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.len(), u.checksum()),
            (12345, 53, 12, 0xabcd)
        );
        let mut b = [0u8; 8];
        let mut w = UdpPacket::new_unchecked(&mut b[..]);
        w.set_src_port(12345);
        w.set_dst_port(53);
        w.set_len(12);
        w.set_checksum(0xabcd);
        assert_eq!(b, h);
        assert!(!u.is_empty(), "length 12");
        let jumbo = [0x30, 0x39, 0x00, 0x35, 0x00, 0x00, 0xab, 0xcd];
        assert!(UdpPacket::new_checked(&jumbo[..], Family::V6)
            .unwrap()
            .is_empty());
        for n in 0..HEADER_LEN {
            assert_eq!(
                UdpPacket::new_checked(&h[..n], Family::V6).err(),
                Some(ParseError::BadUdpLength { family: Family::V6 })
            );
        }
    }
}
