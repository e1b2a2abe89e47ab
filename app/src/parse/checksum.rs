//! Internet checksum (RFC 1071) and the UDP pseudo-headers (RFC 768, RFC 8200 §8.1).
//!
//! The sum is kept in *native* byte order: RFC 1071 §2(B) shows the ones'
//! complement sum is byte-order independent, so we can add whole native u64
//! words (8 bytes per add, no byte swaps in the loop) and swap once at the
//! end. Partial sums (`Sum`) stay unfolded in a u64 so pseudo-header, header
//! and payload can be summed separately and combined without re-reading.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An unfolded ones'-complement accumulator in native byte order.
///
/// Every slice added must start at an even offset of the checksummed
/// stream, except that the last one may have odd length (it is zero padded,
/// RFC 768). All headers here are even-sized, so only the payload is odd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sum(u64);

impl Sum {
    #[inline]
    pub const fn new() -> Self {
        Sum(0)
    }

    /// Ones'-complement 64-bit add: the carry out of bit 63 wraps into bit 0.
    #[inline(always)]
    fn add64(self, w: u64) -> Self {
        let (s, carry) = self.0.overflowing_add(w);
        // When carry is set s <= 2^64 - 2, so adding 1 cannot overflow.
        Sum(s + u64::from(carry))
    }

    /// Adds a 16-bit field given as its numeric (host) value, as it would be
    /// stored big-endian on the wire.
    #[inline]
    pub fn add_u16(self, v: u16) -> Self {
        // The wire bytes of `v` read back in native order.
        self.add64(u64::from(u16::from_ne_bytes(v.to_be_bytes())))
    }

    /// Adds a 32-bit field given as its numeric value (wire order big-endian).
    #[inline]
    pub fn add_u32(self, v: u32) -> Self {
        self.add64(u64::from(u32::from_ne_bytes(v.to_be_bytes())))
    }

    /// Adds `data` (see the alignment note on the type).
    #[inline]
    pub fn add_bytes(self, data: &[u8]) -> Self {
        // Two accumulators break the carry dependency chain between
        // consecutive words, which roughly doubles throughput on long payloads.
        let mut a = self;
        let mut b = Sum(0);
        let mut chunks = data.chunks_exact(16);
        for c in &mut chunks {
            let (lo, hi) = c.split_at(8);
            a = a.add64(read_u64(lo));
            b = b.add64(read_u64(hi));
        }
        let mut a = a.add64(fold32(b.0));
        let mut rest = chunks.remainder();
        if rest.len() >= 8 {
            let (w, r) = rest.split_at(8);
            a = a.add64(read_u64(w));
            rest = r;
        }
        if rest.len() >= 4 {
            let (w, r) = rest.split_at(4);
            a = a.add64(u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]])));
            rest = r;
        }
        if rest.len() >= 2 {
            let (w, r) = rest.split_at(2);
            a = a.add64(u64::from(u16::from_ne_bytes([w[0], w[1]])));
            rest = r;
        }
        if let Some(&last) = rest.first() {
            // Odd trailing byte is the high-order byte of a zero-padded word.
            a = a.add64(u64::from(u16::from_ne_bytes([last, 0])));
        }
        a
    }

    /// Combines two partial sums (both over even-aligned streams).
    #[inline]
    pub fn combine(self, other: Sum) -> Self {
        self.add64(other.0)
    }

    /// Folds to 16 bits and converts to the numeric (wire big-endian) value.
    #[inline]
    pub fn fold(self) -> u16 {
        let s = fold32(self.0);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        // s <= 0xffff after two folds of a value < 2^33.
        u16::from_be(s as u16)
    }

    /// The checksum field value: ones' complement of the folded sum.
    #[inline]
    pub fn checksum(self) -> u16 {
        !self.fold()
    }

    /// True when the stream *including* its checksum field sums to all ones,
    /// which is how a receiver verifies (RFC 1071 §1 (3)).
    #[inline]
    pub fn verifies(self) -> bool {
        self.fold() == 0xffff
    }
}

#[inline(always)]
fn read_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// 64 -> 33 bits and then -> 32 bits, preserving the ones'-complement sum.
#[inline(always)]
fn fold32(v: u64) -> u64 {
    let v = (v & 0xffff_ffff) + (v >> 32);
    (v & 0xffff_ffff) + (v >> 32)
}

/// Internet checksum of `data` (as written into a header's checksum field
/// when the field was zero during the sum).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    Sum::new().add_bytes(data).checksum()
}

/// IPv4 pseudo-header (RFC 768): src, dst, zero, protocol, UDP length.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> Sum {
    Sum::new()
        .add_u32(u32::from(src))
        .add_u32(u32::from(dst))
        .add_u16(u16::from(proto))
        .add_u16(len)
}

/// IPv6 pseudo-header (RFC 8200 §8.1): src, final dst, 32-bit upper-layer
/// length, 24 zero bits, next header.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, proto: u8, len: u32) -> Sum {
    Sum::new()
        .add_bytes(&src.octets())
        .add_bytes(&dst.octets())
        .add_u32(len)
        .add_u32(u32::from(proto))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward RFC 1071 reference: big-endian 16-bit words, u32 sum.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let hi = u32::from(c[0]) << 8;
            let lo = c.get(1).map_or(0, |&b| u32::from(b));
            s += hi | lo;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::new().add_bytes(&d).fold(), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn matches_reference_for_every_length_and_alignment() {
        let mut data = [0u8; 83];
        let mut x: u32 = 0x1234_5678;
        for b in data.iter_mut() {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        // Many 0xff bytes exercise the end-around carry.
        data[10..40].fill(0xff);
        for len in 0..=data.len() {
            let d = &data[..len];
            assert_eq!(checksum(d), reference(d), "len {len}");
        }
    }

    #[test]
    fn all_ones_carry() {
        let d = [0xffu8; 64];
        assert_eq!(checksum(&d), reference(&d));
        assert_eq!(Sum::new().add_bytes(&d).fold(), 0xffff);
    }

    #[test]
    fn split_sums_combine() {
        let d: Vec<u8> = (0..50u8).map(|i| i.wrapping_mul(37)).collect();
        let whole = Sum::new().add_bytes(&d);
        let parts = Sum::new()
            .add_bytes(&d[..20])
            .combine(Sum::new().add_bytes(&d[20..]));
        assert_eq!(whole.fold(), parts.fold());
        let fields = Sum::new().add_u16(0x0102).add_u32(0x0304_0506);
        assert_eq!(
            fields.fold(),
            Sum::new().add_bytes(&[1, 2, 3, 4, 5, 6]).fold()
        );
    }
}
