//! Minimal ICMP (RFC 792) / ICMPv6 (RFC 4443, RFC 4861) views for the
//! responder that answers echo and neighbor solicitation. The parser hands
//! it `ParseError::NotUdp { proto, l4_off, .. }`; this module reads from
//! `l4_off`.

use super::checksum::{self, Sum};
use super::{field_array, field_be16};
use std::net::Ipv6Addr;

/// Byte offsets in an ICMP / ICMPv6 message.
pub mod field {
    use std::ops::Range;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Echo request / reply (RFC 792, RFC 4443 §4.1-4.2).
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    /// Neighbour advertisement flags R, S, O (RFC 4861 §4.4): the high bits
    /// of the 32-bit word whose rest is reserved (all of it in a solicitation).
    pub const ND_FLAGS: usize = 4;
    pub const ND_RESERVED: Range<usize> = 4..8;
    /// Solicitation / advertisement target address (RFC 4861 §4.3-4.4).
    pub const ND_TARGET: Range<usize> = 8..24;
    /// Options (RFC 4861 §4.6), to the end of the message.
    pub const ND_OPTIONS: usize = ND_TARGET.end;
}

/// Byte offsets in a neighbour-discovery option (RFC 4861 §4.6).
pub mod nd_option_field {
    use std::ops::Range;

    pub const TYPE: usize = 0;
    /// In units of 8 octets, type and length included; 0 is invalid.
    pub const LENGTH: usize = 1;
    /// Source / target link-layer address options, on Ethernet (§4.6.1).
    pub const LINK_LAYER_ADDR: Range<usize> = 2..8;
}

/// Type, code, checksum and the 4-byte rest of the header.
pub const HEADER_LEN: usize = field::ECHO_SEQ.end;
/// A neighbour solicitation or advertisement without options.
pub const ND_LEN: usize = field::ND_OPTIONS;
const _: () = assert!(HEADER_LEN == 8 && ND_LEN == 24);

pub mod types {
    pub const V4_ECHO_REPLY: u8 = 0;
    pub const V4_ECHO_REQUEST: u8 = 8;
    pub const V6_ECHO_REQUEST: u8 = 128;
    pub const V6_ECHO_REPLY: u8 = 129;
    pub const V6_NEIGHBOR_SOLICIT: u8 = 135;
    pub const V6_NEIGHBOR_ADVERT: u8 = 136;
}

/// Neighbour advertisement flags, in the byte at [`field::ND_FLAGS`].
pub mod nd_flags {
    pub const ROUTER: u8 = 0x80;
    pub const SOLICITED: u8 = 0x40;
    pub const OVERRIDE: u8 = 0x20;
}

/// Neighbour-discovery option types (RFC 4861 §4.6).
pub mod nd_option {
    pub const SOURCE_LL_ADDR: u8 = 1;
    pub const TARGET_LL_ADDR: u8 = 2;
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
        self.buffer.as_ref()[field::TYPE]
    }

    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        field_be16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// NA flags byte ([`nd_flags`]).
    #[inline]
    pub fn nd_flags(&self) -> u8 {
        self.buffer.as_ref()[field::ND_FLAGS]
    }

    /// NS/NA target address (bytes 8..24), if present.
    #[inline]
    pub fn nd_target(&self) -> Option<Ipv6Addr> {
        let t: [u8; 16] = self
            .buffer
            .as_ref()
            .get(field::ND_TARGET)?
            .try_into()
            .ok()?;
        Some(Ipv6Addr::from(t))
    }

    /// NS/NA options, in order: empty when the message ends at (or before)
    /// the target; an invalid option is the last item, as an `Err`.
    #[inline]
    pub fn nd_options(&self) -> NdOptions<'_> {
        NdOptions {
            rest: self
                .buffer
                .as_ref()
                .get(field::ND_OPTIONS..)
                .unwrap_or_default(),
        }
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
        self.buffer.as_mut()[field::TYPE] = v;
    }

    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes the NA flags byte ([`nd_flags`]); the other 3 reserved bytes
    /// are left as they are.
    #[inline]
    pub fn set_nd_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::ND_FLAGS] = v;
    }

    /// Panics if the buffer ends before the target (writer-side only).
    #[inline]
    pub fn set_nd_target(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::ND_TARGET].copy_from_slice(&a.octets());
    }

    /// The bytes after the NS/NA target, where options go; `None` when the
    /// buffer ends before them.
    #[inline]
    pub fn nd_options_mut(&mut self) -> Option<&mut [u8]> {
        self.buffer.as_mut().get_mut(field::ND_OPTIONS..)
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

/// One neighbour-discovery option (RFC 4861 §4.6): type, length in units
/// of 8 octets, value. The view may be longer than the option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdOption<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdOption<T> {
    /// Accessors panic on buffers shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        NdOption { buffer }
    }

    /// The option at the start of `buffer`; `None` when its two-byte
    /// prefix is cut, its length is zero (invalid, §4.6) or it runs past
    /// the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Option<Self> {
        let b = buffer.as_ref();
        let units = *b.get(nd_option_field::LENGTH)?;
        let len = usize::from(units) * 8;
        (units != 0 && b.len() >= len).then_some(NdOption { buffer })
    }

    #[inline]
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[nd_option_field::TYPE]
    }

    /// The length field, in units of 8 octets.
    #[inline]
    pub fn len_units(&self) -> u8 {
        self.buffer.as_ref()[nd_option_field::LENGTH]
    }

    /// The option's length in bytes, type and length included.
    #[inline]
    pub fn total_len(&self) -> usize {
        usize::from(self.len_units()) * 8
    }

    /// The Ethernet address of a source / target link-layer address option.
    #[inline]
    pub fn link_layer_addr(&self) -> [u8; 6] {
        field_array(self.buffer.as_ref(), nd_option_field::LINK_LAYER_ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdOption<T> {
    #[inline]
    pub fn set_kind(&mut self, v: u8) {
        self.buffer.as_mut()[nd_option_field::TYPE] = v;
    }

    #[inline]
    pub fn set_len_units(&mut self, v: u8) {
        self.buffer.as_mut()[nd_option_field::LENGTH] = v;
    }

    #[inline]
    pub fn set_link_layer_addr(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[nd_option_field::LINK_LAYER_ADDR].copy_from_slice(&mac);
    }
}

/// An option the walk could not read (cut short or of length zero); it
/// ends the walk, as in RFC 4861 §4.6 ("must silently discard").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadNdOption;

/// The options of an ND message ([`IcmpPacket::nd_options`]).
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<NdOption<&'a [u8]>, BadNdOption>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(o) = NdOption::new_checked(self.rest) else {
            self.rest = &[];
            return Some(Err(BadNdOption));
        };
        let (this, rest) = self.rest.split_at(o.total_len());
        self.rest = rest;
        Some(Ok(NdOption::new_unchecked(this)))
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

    #[test]
    fn nd_options_walk_and_stop_at_a_bad_one() {
        let t: Ipv6Addr = "fd00::1".parse().unwrap();
        // NS for fd00::1, SLLA 02:00:00:00:00:02, then an unknown 16-byte
        // option, then one of length zero.
        let mut m = vec![types::V6_NEIGHBOR_SOLICIT, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&t.octets());
        m.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 2]);
        m.extend_from_slice(&[9, 2]);
        m.extend_from_slice(&[0xaa; 14]);
        m.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        let p = IcmpPacket::new_checked(&m[..]).unwrap();
        assert_eq!(p.nd_target(), Some(t));
        let opts: Vec<_> = p.nd_options().collect();
        assert_eq!(opts.len(), 3);
        let o = opts[0].unwrap();
        assert_eq!((o.kind(), o.total_len()), (nd_option::SOURCE_LL_ADDR, 8));
        assert_eq!(o.link_layer_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(opts[1].map(|o| (o.kind(), o.total_len())), Ok((9, 16)));
        assert_eq!(opts[2], Err(BadNdOption));
        // Cut inside an option: an error, then the end.
        let p = IcmpPacket::new_checked(&m[..24 + 8 + 15]).unwrap();
        let opts: Vec<_> = p.nd_options().collect();
        assert_eq!(opts.len(), 2);
        assert!(opts[0].is_ok() && opts[1] == Err(BadNdOption));
        // No options, or not even a whole target.
        assert_eq!(
            IcmpPacket::new_checked(&m[..24])
                .unwrap()
                .nd_options()
                .count(),
            0
        );
        assert_eq!(
            IcmpPacket::new_checked(&m[..12])
                .unwrap()
                .nd_options()
                .count(),
            0
        );
    }

    /// The fixed header's accessors read what the setters wrote, at the
    /// RFC 792 / RFC 4443 offsets (type 0, code 1, checksum 2..4).
    #[test]
    fn header_accessors_read_what_the_setters_wrote() {
        let mut b = [0u8; 8];
        let mut p = IcmpPacket::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(3);
        p.set_code(4);
        p.set_checksum(0xbeef);
        assert_eq!((p.msg_type(), p.code(), p.checksum()), (3, 4, 0xbeef));
        assert_eq!(&b[..4], &[3, 4, 0xbe, 0xef]);
    }

    #[test]
    fn na_setters_write_rfc4861_layout() {
        let t: Ipv6Addr = "fd00::1".parse().unwrap();
        let mut m = [0u8; 32];
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(types::V6_NEIGHBOR_ADVERT);
        p.set_nd_flags(nd_flags::SOLICITED | nd_flags::OVERRIDE);
        p.set_nd_target(&t);
        let mut o = NdOption::new_unchecked(p.nd_options_mut().unwrap());
        o.set_kind(nd_option::TARGET_LL_ADDR);
        o.set_len_units(1);
        o.set_link_layer_addr([2, 0, 0, 0, 0, 1]);
        let mut want = vec![136, 0, 0, 0, 0x60, 0, 0, 0];
        want.extend_from_slice(&t.octets());
        want.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0, 1]);
        assert_eq!(&m[..], &want[..]);
        let p = IcmpPacket::new_checked(&m[..]).unwrap();
        assert_eq!(p.nd_flags(), 0x60);
        let mut e = [0u8; 8];
        let mut w = IcmpPacket::new_checked(&mut e[..]).unwrap();
        w.set_echo_ident(0x1234);
        w.set_echo_seq(7);
        assert_eq!(e, [0, 0, 0, 0, 0x12, 0x34, 0, 7]);
    }
}
