//! Internet checksum (RFC 1071) and the UDP pseudo-headers (RFC 768, RFC 8200 §8.1).
//!
//! The sum is kept in *native* byte order: RFC 1071 §2(B) shows the ones'
//! complement sum is byte-order independent, so we can add whole native
//! words (no byte swaps in the loop) and swap once at the end. Partial sums
//! (`Sum`) stay unfolded in a u64 so pseudo-header, header and payload can
//! be summed separately and combined without re-reading.
//!
//! Any u64 congruent to the ones'-complement sum modulo 2^16 - 1 (and zero
//! only when every word added was zero) folds to the same 16 bits, which
//! leaves two ways to add the bytes, each the faster one somewhere:
//!
//! - Up to [`CHAIN_MAX`] bytes (small datagrams, every header): whole 64-bit
//!   words with the carry flag, four to a chain (`add`, `adc`, `adc`,
//!   `adc`), counting the carry out of each chain instead of folding it
//!   back in (the count times 2^64 is congruent to the count itself modulo
//!   2^64 - 1, so one end-around add at the end settles it). One
//!   instruction per 8 bytes plus two per 32: callgrind counted 54 a call
//!   against the lanes' 78 for a 72-byte UDP segment, and it took 0.80x
//!   their time.
//! - Longer: the two 32-bit halves of each word added into plain u64
//!   lanes, which cannot overflow for slices up to 1 GiB (longer ones are
//!   taken in blocks). No carry chain, so the adds overlap and LLVM
//!   vectorises them: the serial chain, one cycle per word, took 1.08x
//!   their time at 384 bytes and 1.44x at 1480.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An unfolded ones'-complement accumulator in native byte order: any u64
/// that folds to the right 16 bits (see the module notes), so two sums of
/// the same bytes need not be equal before [`Sum::fold`].
///
/// Every slice added must start at an even offset of the checksummed
/// stream, except that the last one may have odd length (it is zero padded,
/// RFC 768). All headers here are even-sized, so only the payload is odd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sum(u64);

/// Most bytes one call of `sum_lanes` may take: 2^27 words of at most
/// 2 * (2^32 - 1) each, plus the carried-in value, stay below 2^61.
const LANE_MAX: usize = 1 << 30;
/// Block size `add_bytes` splits longer slices into: a multiple of 32 (so
/// blocks after the first start at an even offset and end on a whole
/// word). Unit tests use a small one so that the splitting is exercised.
const LANE_BLOCK: usize = if cfg!(test) { 96 } else { LANE_MAX };

/// Longest slice the carry chain takes; the vectorised lanes take longer
/// ones. Timed on this machine's EPYC (the chain against the lanes): 0.80x
/// at 72 and 256 bytes, 1.08x at 384, 1.44x at 1480.
const CHAIN_MAX: usize = 320;

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
        self.add_bytes_inline(data)
    }

    /// [`Sum::add_bytes`], always inlined, for the per-packet receive path.
    /// Left to itself LLVM keeps `add_bytes` out of line in `parse_v6`, and
    /// the call's register saves then cost every IPv6 packet, even those
    /// whose checksum the NIC already checked.
    #[inline(always)]
    pub(crate) fn add_bytes_inline(self, data: &[u8]) -> Self {
        if data.len() <= CHAIN_MAX {
            Sum(sum_words(self.0, data))
        } else {
            Sum(sum_long(self.0, data))
        }
    }

    /// Combines two partial sums (both over even-aligned streams).
    #[inline]
    pub fn combine(self, other: Sum) -> Self {
        self.add64(other.0)
    }

    /// Folds to 16 bits and converts to the numeric (wire big-endian) value.
    #[inline]
    pub fn fold(self) -> u16 {
        u16::from_be(fold_native(self.0))
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
        // All ones reads the same in either byte order.
        fold_native(self.0) == 0xffff
    }
}

#[inline(always)]
fn read_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// The two 32-bit halves of `w` added: congruent to `w` modulo 2^32 - 1
/// (hence modulo 2^16 - 1), at most 2^33 - 2, zero only if `w` is.
#[inline(always)]
fn halves(w: u64) -> u64 {
    (w & 0xffff_ffff) + (w >> 32)
}

/// `a + b + carry` and the carry out. The standard library's
/// `carrying_add` is newer than the workspace's `rust-version` (1.85);
/// this is its body, which LLVM turns into one `adc` in a chain.
#[inline(always)]
fn carrying_add(a: u64, b: u64, carry: bool) -> (u64, bool) {
    let (s, c1) = a.overflowing_add(b);
    let (s, c2) = s.overflowing_add(u64::from(carry));
    (s, c1 | c2)
}

/// Ones'-complement fold of 64 bits to 16, in native byte order: adding a
/// value to itself rotated by half its width leaves the end-around-carry
/// sum of the two halves in the upper half (Linux `csum_fold`). Zero only
/// for zero; otherwise in 1..=0xffff.
#[inline(always)]
fn fold_native(s: u64) -> u16 {
    let t = (s.wrapping_add(s.rotate_left(32)) >> 32) as u32;
    (t.wrapping_add(t.rotate_left(16)) >> 16) as u16
}

/// `init` plus the words of `data` (starting at an even stream offset),
/// as an unfolded sum: zero only if `init` and every byte are.
#[inline(always)]
fn sum_words(init: u64, data: &[u8]) -> u64 {
    // `s + carries * 2^64` is `init` plus the words; `carries` grows by at
    // most one per 32 bytes, so it cannot overflow.
    let mut s = init;
    let mut carries = 0u64;
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        let (x, k) = s.overflowing_add(read_u64(&c[0..8]));
        let (x, k) = carrying_add(x, read_u64(&c[8..16]), k);
        let (x, k) = carrying_add(x, read_u64(&c[16..24]), k);
        let (x, k) = carrying_add(x, read_u64(&c[24..32]), k);
        s = x;
        carries += u64::from(k);
    }
    // At most three whole words and a partial one remain.
    let mut rest = chunks.remainder();
    if let Some((w, r)) = split16(rest) {
        let (x, k) = s.overflowing_add(read_u64(&w[0..8]));
        let (x, k) = carrying_add(x, read_u64(&w[8..16]), k);
        s = x;
        carries += u64::from(k);
        rest = r;
    }
    if rest.len() >= 8 {
        let (w, r) = rest.split_at(8);
        let (x, k) = s.overflowing_add(read_u64(w));
        s = x;
        carries += u64::from(k);
        rest = r;
    }
    if !rest.is_empty() {
        let (x, k) = s.overflowing_add(tail(data, rest));
        s = x;
        carries += u64::from(k);
    }
    // 2^64 = 1 modulo 2^64 - 1: the counted carries come back in at bit 0.
    Sum(s).add64(carries).0
}

/// `init` plus the words of `data`, a slice longer than [`CHAIN_MAX`]: out
/// of line, so that the short path inlined into the parser stays small.
#[inline(never)]
fn sum_long(init: u64, data: &[u8]) -> u64 {
    let mut acc = init;
    let mut rest = data;
    // Only slices over 1 GiB take this loop (outside unit tests).
    while rest.len() > LANE_BLOCK {
        let (block, r) = rest.split_at(LANE_BLOCK);
        acc = sum_lanes(acc, block);
        rest = r;
    }
    sum_lanes(acc, rest)
}

/// `init` plus the words of `data` (at most [`LANE_MAX`] bytes, starting
/// at an even stream offset), as an unfolded sum.
#[inline(always)]
fn sum_lanes(init: u64, data: &[u8]) -> u64 {
    debug_assert!(data.len() <= LANE_MAX);
    // Two accumulators, each taking two words per 32 bytes.
    let mut a = halves(init);
    let mut b = 0u64;
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        a += halves(read_u64(&c[0..8])) + halves(read_u64(&c[16..24]));
        b += halves(read_u64(&c[8..16])) + halves(read_u64(&c[24..32]));
    }
    // At most three whole words and a partial one remain.
    let mut rest = chunks.remainder();
    if let Some((w, r)) = split16(rest) {
        a += halves(read_u64(&w[0..8]));
        b += halves(read_u64(&w[8..16]));
        rest = r;
    }
    if rest.len() >= 8 {
        let (w, r) = rest.split_at(8);
        a += halves(read_u64(w));
        rest = r;
    }
    if !rest.is_empty() {
        b += halves(tail(data, rest));
    }
    a + b
}

#[inline(always)]
fn split16(b: &[u8]) -> Option<(&[u8], &[u8])> {
    if b.len() >= 16 {
        Some(b.split_at(16))
    } else {
        None
    }
}

/// The last 1..=7 bytes of `data` (`rest`) as one word whose 16-bit lanes
/// line up with the stream, the odd last byte zero padded (RFC 768).
#[inline(always)]
fn tail(data: &[u8], rest: &[u8]) -> u64 {
    let n = data.len();
    let r = rest.len() as u32; // 1..=7
    match n.checked_sub(8).and_then(|o| data.get(o..)) {
        Some(last8) => {
            // One load of the last 8 bytes of `data`; drop the 8 - r that
            // were already summed. The word starts at offset n - 8: when
            // that is odd its bytes sit one lane position off, and rotating
            // by a byte (multiplying by 2^8 mod 2^64 - 1) moves each byte
            // back to its lane half (2^16 = 1 mod 2^16 - 1).
            let drop = 8 * (8 - r);
            let keep = if cfg!(target_endian = "little") {
                !0u64 << drop
            } else {
                !0u64 >> drop
            };
            (read_u64(last8) & keep).rotate_left(8 * (n as u32 & 1))
        }
        None => {
            // Under 8 bytes in all: the zero-padded word, built bytewise.
            let mut w = [0u8; 8];
            for (d, s) in w.iter_mut().zip(rest) {
                *d = *s;
            }
            u64::from_ne_bytes(w)
        }
    }
}

/// Internet checksum of `data` (as written into a header's checksum field
/// when the field was zero during the sum).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    Sum::new().add_bytes(data).checksum()
}

/// True when an IPv4 header (`IHL * 4` bytes, checksum field included) sums
/// to all ones. The 20-byte header without options, nearly every packet,
/// is five 32-bit adds with no loop (Linux `ip_fast_csum`); headers with
/// options take the general path.
#[inline]
pub fn ipv4_header_verifies(header: &[u8]) -> bool {
    match <&[u8; 20]>::try_from(header) {
        Ok(h) => {
            let (s, k) = read_u64(&h[0..8]).overflowing_add(read_u64(&h[8..16]));
            let last = u64::from(u32::from_ne_bytes([h[16], h[17], h[18], h[19]]));
            let (s, k) = carrying_add(s, last, k);
            Sum(s).add64(u64::from(k)).verifies()
        }
        Err(_) => Sum::new().add_bytes(header).verifies(),
    }
}

/// IPv4 pseudo-header (RFC 768): src, dst, zero, protocol, UDP length.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> Sum {
    let mut addrs = [0u8; 8];
    addrs[..4].copy_from_slice(&src.octets());
    addrs[4..].copy_from_slice(&dst.octets());
    pseudo_v4_wire(&addrs, proto, len)
}

/// [`pseudo_v4`] from the addresses as they sit in the IPv4 header: source
/// then destination, header bytes 12..20.
#[inline]
pub fn pseudo_v4_wire(addrs: &[u8; 8], proto: u8, len: u16) -> Sum {
    let fields = u64::from(u16::from_ne_bytes([0, proto]))
        + u64::from(u16::from_ne_bytes(len.to_be_bytes()));
    Sum(fields).add64(u64::from_ne_bytes(*addrs))
}

/// IPv6 pseudo-header (RFC 8200 §8.1): src, final dst, 32-bit upper-layer
/// length, 24 zero bits, next header.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, proto: u8, len: u32) -> Sum {
    let mut addrs = [0u8; 32];
    addrs[..16].copy_from_slice(&src.octets());
    addrs[16..].copy_from_slice(&dst.octets());
    pseudo_v6_wire(&addrs, proto, len)
}

/// [`pseudo_v6`] from the addresses as they sit in the IPv6 header: source
/// then destination, header bytes 8..40. The destination must be the final
/// one (no routing header with segments left).
#[inline]
pub fn pseudo_v6_wire(addrs: &[u8; 32], proto: u8, len: u32) -> Sum {
    let fields = u64::from(u32::from_ne_bytes(len.to_be_bytes()))
        + u64::from(u32::from_ne_bytes([0, 0, 0, proto]));
    Sum(sum_words(fields, addrs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward RFC 1071 reference: big-endian 16-bit words, each
    /// added with end-around carry; the folded sum (not complemented), so
    /// 0 (nothing but zeros) and 0xffff stay distinct.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let hi = u32::from(c[0]) << 8;
            let lo = c.get(1).map_or(0, |&b| u32::from(b));
            s += hi | lo;
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    fn reference(data: &[u8]) -> u16 {
        !reference_sum(data)
    }

    /// The arithmetic this module used before the lane sums: end-around
    /// carry on every add into a u64 (here one native 16-bit word at a
    /// time) and two-step folds. A second oracle, one that also takes an
    /// unfolded starting value.
    fn legacy_add_bytes(init: u64, data: &[u8]) -> u64 {
        let add = |a: u64, w: u64| {
            let (s, c) = a.overflowing_add(w);
            s + u64::from(c)
        };
        let mut a = init;
        let mut words = data.chunks_exact(2);
        for w in &mut words {
            a = add(a, u64::from(u16::from_ne_bytes([w[0], w[1]])));
        }
        if let Some(&last) = words.remainder().first() {
            a = add(a, u64::from(u16::from_ne_bytes([last, 0])));
        }
        a
    }

    fn legacy_fold(v: u64) -> u16 {
        let v = (v & 0xffff_ffff) + (v >> 32);
        let v = (v & 0xffff_ffff) + (v >> 32);
        let s = (v & 0xffff) + (v >> 16);
        let s = (s & 0xffff) + (s >> 16);
        u16::from_be(s as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::new().add_bytes(&d).fold(), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
        // The same eight bytes with an odd byte appended (zero padded).
        let d9 = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x01];
        assert_eq!(Sum::new().add_bytes(&d9).fold(), 0xdef2);
    }

    /// The carry out of bit 63 comes back in at bit 0 (2^64 = 1 modulo
    /// 2^64 - 1): what `combine` and the 16/32-bit adds rely on when a
    /// carried-in partial sum is near the top.
    #[test]
    fn add64_wraps_the_carry_around() {
        assert_eq!(Sum(u64::MAX).add64(2), Sum(2));
        assert_eq!(Sum(u64::MAX - 1).add64(u64::MAX - 1), Sum(u64::MAX - 2));
        assert_eq!(Sum(u64::MAX).add64(0), Sum(u64::MAX));
        assert_eq!(Sum(1 << 63).add64(1 << 63), Sum(1));
        // And the folds agree with the same values added without overflow.
        assert_eq!(Sum(u64::MAX).add64(2).fold(), Sum(2).fold());
    }

    #[test]
    fn matches_reference_for_every_length_and_alignment() {
        let mut data = [0u8; 300];
        let mut x: u32 = 0x1234_5678;
        for b in data.iter_mut() {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        // Many 0xff bytes exercise the end-around carry.
        data[10..140].fill(0xff);
        for off in 0..16 {
            for len in 0..=data.len() - off {
                let d = &data[off..off + len];
                assert_eq!(checksum(d), reference(d), "off {off} len {len}");
                assert_eq!(Sum::new().add_bytes(d).fold(), reference_sum(d));
            }
        }
    }

    #[test]
    fn all_ones_and_all_zeros() {
        for len in 0..200 {
            let d = vec![0xffu8; len];
            assert_eq!(checksum(&d), reference(&d), "len {len}");
            assert_eq!(Sum::new().add_bytes(&d).fold(), reference_sum(&d));
            if len >= 2 && len % 2 == 0 {
                assert_eq!(Sum::new().add_bytes(&d).fold(), 0xffff);
            }
            // Zeros sum to 0, not 0xffff: nothing verifies against them.
            let z = vec![0u8; len];
            assert_eq!(Sum::new().add_bytes(&z).fold(), 0);
            assert!(!Sum::new().add_bytes(&z).verifies());
        }
    }

    #[test]
    fn fold_matches_legacy_on_edge_values() {
        for v in [
            0,
            1,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            0x1_0000_0000,
            0xffff_ffff_ffff,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            0x8000_8000_8000_8000,
            0x7fff_ffff_ffff_ffff,
        ] {
            assert_eq!(Sum(v).fold(), legacy_fold(v), "{v:#x}");
            assert_eq!(Sum(v).verifies(), legacy_fold(v) == 0xffff, "{v:#x}");
        }
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

    #[test]
    fn ipv4_header_known_vectors() {
        // 192.168.0.1 -> 192.168.0.199, UDP, checksum b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(ipv4_header_verifies(&h));
        let mut zeroed = h;
        zeroed[10..12].fill(0);
        assert_eq!(checksum(&zeroed), 0xb861);
        h[19] ^= 1;
        assert!(!ipv4_header_verifies(&h));
        // All zeros (checksum field 0 included) never verifies; all ones does.
        assert!(!ipv4_header_verifies(&[0; 20]));
        assert!(ipv4_header_verifies(&[0xff; 20]));
        // The same header with a 4-byte option (router alert) takes the
        // general path.
        let mut o = [0u8; 24];
        o[..20].copy_from_slice(&zeroed);
        o[0] = 0x46;
        o[20..].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        let c = checksum(&o);
        o[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(ipv4_header_verifies(&o));
        o[21] ^= 0x80;
        assert!(!ipv4_header_verifies(&o));
    }

    #[test]
    fn pseudo_headers_known_vectors() {
        // 198.18.0.1 -> 198.18.0.2, UDP, length 22 (the kernel frame in
        // parse::tests): pseudo-header words c612 0001 c612 0002 0011 0016.
        let a = Ipv4Addr::new(198, 18, 0, 1);
        let b = Ipv4Addr::new(198, 18, 0, 2);
        let want = reference_sum(&[
            0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x02, 0x00, 0x11, 0x00, 0x16,
        ]);
        assert_eq!(pseudo_v4(a, b, 17, 22).fold(), want);
        let wire = [0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x02];
        assert_eq!(pseudo_v4_wire(&wire, 17, 22).fold(), want);
        let a6: Ipv6Addr = "fd00::1".parse().unwrap();
        let b6: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&a6.octets());
        bytes.extend_from_slice(&b6.octets());
        bytes.extend_from_slice(&[0, 0, 0, 23, 0, 0, 0, 17]);
        assert_eq!(pseudo_v6(&a6, &b6, 17, 23).fold(), reference_sum(&bytes));
    }

    fn buffer() -> impl Strategy<Value = Vec<u8>> {
        // Mostly random bytes; sometimes long runs of 0xff or 0x00 so that
        // the all-ones / zero corners come up.
        prop_oneof![
            3 => proptest::collection::vec(any::<u8>(), 2016),
            1 => (any::<u8>(), 0usize..2016, 0usize..2016).prop_map(|(fill, a, b)| {
                let mut v = vec![0x5a; 2016];
                v[a.min(b)..a.max(b)].fill(fill);
                v
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any length 0..2000 at any offset 0..16 (so any alignment), with
        /// any unfolded starting value: the same 16 bits as the naive
        /// big-endian word sum and as the previous implementation.
        #[test]
        fn add_bytes_matches_reference(
            buf in buffer(),
            off in 0usize..16,
            len in 0usize..2000,
            init in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
        ) {
            let d = &buf[off..off + len];
            prop_assert_eq!(Sum::new().add_bytes(d).fold(), reference_sum(d));
            prop_assert_eq!(checksum(d), reference(d));
            let s = Sum(init).add_bytes(d);
            prop_assert_eq!(s.fold(), legacy_fold(legacy_add_bytes(init, d)));
            prop_assert_eq!(s.verifies(), legacy_fold(legacy_add_bytes(init, d)) == 0xffff);
            // Both sums agree whatever the length picks.
            prop_assert_eq!(Sum(sum_lanes(init, d)).fold(), s.fold());
            prop_assert_eq!(Sum(sum_words(init, d)).fold(), s.fold());
        }

        /// Splitting the stream at any even point and combining is the same.
        #[test]
        fn split_anywhere_even(buf in buffer(), len in 0usize..2000, cut in 0usize..1000) {
            let d = &buf[..len];
            let cut = (2 * cut).min(len & !1);
            let parts = Sum::new().add_bytes(&d[..cut]);
            prop_assert_eq!(parts.add_bytes(&d[cut..]).fold(), reference_sum(d));
            let joined = parts.combine(Sum::new().add_bytes(&d[cut..]));
            prop_assert_eq!(joined.fold(), reference_sum(d));
        }

        /// Any header length (the fast path is exactly 20 bytes), random
        /// contents and contents with a correct checksum filled in.
        #[test]
        fn ipv4_header_matches_reference(
            buf in buffer(),
            off in 0usize..16,
            len in prop_oneof![Just(20usize), 0usize..64],
        ) {
            let mut h = buf[off..off + len].to_vec();
            prop_assert_eq!(ipv4_header_verifies(&h), reference_sum(&h) == 0xffff);
            if len >= 12 {
                h[10..12].fill(0);
                let c = reference(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                prop_assert_eq!(ipv4_header_verifies(&h), reference_sum(&h) == 0xffff);
                // A filled-in checksum always verifies (over all-zero
                // bytes the field becomes 0xffff).
                prop_assert!(ipv4_header_verifies(&h));
            }
        }

        #[test]
        fn pseudo_headers_match_reference(
            a4 in any::<[u8; 8]>(),
            a6 in any::<[u8; 32]>(),
            proto in any::<u8>(),
            len16 in any::<u16>(),
            len32 in any::<u32>(),
        ) {
            let mut b = a4.to_vec();
            b.extend_from_slice(&[0, proto]);
            b.extend_from_slice(&len16.to_be_bytes());
            let want = reference_sum(&b);
            prop_assert_eq!(pseudo_v4_wire(&a4, proto, len16).fold(), want);
            let src = Ipv4Addr::new(a4[0], a4[1], a4[2], a4[3]);
            let dst = Ipv4Addr::new(a4[4], a4[5], a4[6], a4[7]);
            prop_assert_eq!(pseudo_v4(src, dst, proto, len16).fold(), want);

            let mut b = a6.to_vec();
            b.extend_from_slice(&len32.to_be_bytes());
            b.extend_from_slice(&[0, 0, 0, proto]);
            let want = reference_sum(&b);
            prop_assert_eq!(pseudo_v6_wire(&a6, proto, len32).fold(), want);
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&a6[..16]);
            d.copy_from_slice(&a6[16..]);
            let (s, d) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
            prop_assert_eq!(pseudo_v6(&s, &d, proto, len32).fold(), want);
            // Pseudo-header then a segment: one stream.
            let seg = &a6[..len16 as usize % 33];
            let mut all = b.clone();
            all.extend_from_slice(seg);
            prop_assert_eq!(pseudo_v6_wire(&a6, proto, len32).add_bytes(seg).fold(), reference_sum(&all));
        }
    }
}
