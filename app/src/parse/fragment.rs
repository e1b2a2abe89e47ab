//! Fragment writer: cuts one UDP datagram that does not fit the link MTU
//! into IPv4 fragments (RFC 791) or IPv6 fragments (RFC 8200 §4.5), one
//! frame per fragment, for the echo handler and `send_burst`.
//!
//! The engine's own writer, not `rte_ipv4_fragment_packet` /
//! `rte_ipv6_fragment_packet`: those take an mbuf that starts at the IP
//! header (no Ethernet header), need a direct and an indirect pool and
//! return chains of a header mbuf plus an indirect data mbuf, and DPDK
//! 22.11's IPv6 one writes identification 0 in every fragment header
//! unless the caller patches it. The datagrams cut here are built by the
//! engine from a payload it already copies (echo) or is handed (send), so
//! writing each fragment whole into a fresh mbuf costs the same one copy,
//! needs no second pool and leaves single-segment frames any PMD sends.
//!
//! The writer is generic over where the bytes come from: [`Fragmenter`]
//! writes a fragment's headers and names the range of the datagram's IP
//! payload (UDP header and data) that follows them; [`copy_range`] fills it
//! from any list of slices. Every bound is checked: a fragment that does
//! not fit its buffer is `None`, never a panic.
use std::ops::Range;

use super::checksum::{self, Sum};
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, next_header as nh, Ipv6Packet};
use super::udp::UdpPacket;
use super::Family;

/// One datagram's fragments: its headers (Ethernet, tags, an IP header
/// without options or extension headers, as written for the whole
/// datagram) and the length of what follows the IP header.
#[derive(Clone, Copy, Debug)]
pub struct Fragmenter<'h> {
    head: &'h [u8],
    l3: usize,
    family: Family,
    len: usize,
    step: usize,
    ident: u32,
}

impl<'h> Fragmenter<'h> {
    /// The fragments of a datagram whose headers are `head` (the IP header
    /// at `l3`, ending where `head` ends) and whose IP payload is `len`
    /// bytes, for a link of `mtu` bytes (IP header included), with
    /// identification `ident` (IPv4 uses its low 16 bits). `None`: the
    /// headers are not what the writer expects, the MTU leaves no room for
    /// 8 bytes of data, or the datagram is over 65 535 bytes.
    pub fn new(
        head: &'h [u8],
        l3: usize,
        family: Family,
        len: usize,
        mtu: usize,
        ident: u32,
    ) -> Option<Fragmenter<'h>> {
        let ip = head.get(l3..)?;
        let room = match family {
            Family::V4 => {
                let p = Ipv4Packet::new_checked(ip).ok()?;
                if p.header_len() != ipv4::HEADER_LEN || ip.len() != ipv4::HEADER_LEN {
                    return None;
                }
                // Total length is a u16.
                if ipv4::HEADER_LEN + len > usize::from(u16::MAX) {
                    return None;
                }
                mtu.checked_sub(ipv4::HEADER_LEN)?
            }
            Family::V6 => {
                let p = Ipv6Packet::new_checked(ip).ok()?;
                if p.next_header() != nh::UDP || ip.len() != ipv6::HEADER_LEN {
                    return None;
                }
                // The reassembled payload length is a u16 (no jumbograms).
                if len > usize::from(u16::MAX) {
                    return None;
                }
                mtu.checked_sub(ipv6::HEADER_LEN + ipv6::FRAG_HEADER_LEN)?
            }
        };
        // Every fragment but the last carries a multiple of 8 bytes.
        let step = room & !7;
        if step == 0 || len == 0 {
            return None;
        }
        Some(Fragmenter {
            head,
            l3,
            family,
            len,
            step,
            ident,
        })
    }

    /// How many fragments.
    pub fn count(&self) -> usize {
        self.len.div_ceil(self.step)
    }

    /// Bytes of headers in every fragment's frame.
    pub fn header_len(&self) -> usize {
        match self.family {
            Family::V4 => self.head.len(),
            Family::V6 => self.head.len() + ipv6::FRAG_HEADER_LEN,
        }
    }

    /// The part of the IP payload fragment `i` carries.
    pub fn range(&self, i: usize) -> Option<Range<usize>> {
        let a = i.checked_mul(self.step).filter(|&a| a < self.len)?;
        Some(a..(a + self.step).min(self.len))
    }

    /// Frame length of fragment `i`.
    pub fn frame_len(&self, i: usize) -> Option<usize> {
        Some(self.header_len() + self.range(i)?.len())
    }

    /// Writes fragment `i`'s headers at the start of `out`; returns where
    /// its data goes in `out` and which bytes of the IP payload it is.
    pub fn write_headers(&self, i: usize, out: &mut [u8]) -> Option<(Range<usize>, Range<usize>)> {
        let r = self.range(i)?;
        let more = r.end < self.len;
        let hdr = self.header_len();
        let at = hdr..hdr + r.len();
        out.get(..at.end)?;
        out[..self.head.len()].copy_from_slice(self.head);
        // Offsets in 8-byte units: r.start < 65 535, a multiple of 8.
        let units = u16::try_from(r.start / 8).ok()?;
        match self.family {
            Family::V4 => {
                let mut ip = Ipv4Packet::new_checked(out.get_mut(self.l3..hdr)?).ok()?;
                ip.set_total_len(u16::try_from(ipv4::HEADER_LEN + r.len()).ok()?);
                ip.set_ident(self.ident as u16);
                // No DF on fragments (the kernel's IP_PMTUDISC_WANT).
                let more = if more { ipv4::FLAG_MF } else { 0 };
                ip.set_frag_field((units & ipv4::OFFSET_MASK) | more);
                ip.fill_checksum();
            }
            Family::V6 => {
                let fl = ipv6::FRAG_HEADER_LEN;
                let mut ip = Ipv6Packet::new_checked(out.get_mut(self.l3..hdr - fl)?).ok()?;
                ip.set_next_header(nh::FRAGMENT);
                ip.set_payload_len(u16::try_from(fl + r.len()).ok()?);
                let f = out.get_mut(hdr - fl..hdr)?;
                f[ipv6::frag_field::NEXT_HEADER] = nh::UDP;
                f[ipv6::frag_field::RESERVED] = 0;
                let om = (units << 3) | u16::from(more);
                f[ipv6::frag_field::OFFSET_M].copy_from_slice(&om.to_be_bytes());
                f[ipv6::frag_field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
            }
        }
        Some((at, r))
    }
}

/// Gives headers written for an empty payload (Ethernet, tags, IP without
/// options or extension headers, UDP: what `build` writes, the IP header
/// at `l3`) the UDP length and checksum of a payload of `len` bytes whose
/// ones'-complement sum is `payload_sum` ([`sum_parts`]). Returns where the
/// UDP header starts; `None` when `head` is not such headers or the
/// datagram would be over 65 535 bytes.
pub fn finish_udp_head(
    head: &mut [u8],
    l3: usize,
    family: Family,
    len: usize,
    payload_sum: Sum,
) -> Option<usize> {
    let l4 = head.len().checked_sub(super::udp::HEADER_LEN)?;
    let udp_len = u16::try_from(super::udp::HEADER_LEN + len).ok()?;
    let (ip, udp) = head.get_mut(l3..)?.split_at_mut(l4.checked_sub(l3)?);
    let pseudo = match family {
        Family::V4 => {
            let p = Ipv4Packet::new_checked(&*ip).ok()?;
            // The total length is 16-bit too.
            if p.header_len() != ip.len() || ip.len() + usize::from(udp_len) > usize::from(u16::MAX)
            {
                return None;
            }
            checksum::pseudo_v4(p.src_addr(), p.dst_addr(), super::PROTO_UDP, udp_len)
        }
        Family::V6 => {
            let p = Ipv6Packet::new_checked(&*ip).ok()?;
            if ip.len() != ipv6::HEADER_LEN || p.next_header() != nh::UDP {
                return None;
            }
            let (s, d) = (p.src_addr(), p.dst_addr());
            checksum::pseudo_v6(&s, &d, super::PROTO_UDP, u32::from(udp_len))
        }
    };
    let mut u = UdpPacket::new_checked(&mut *udp, family).ok()?;
    u.set_len(udp_len);
    u.set_checksum(0);
    let sum = pseudo
        .combine(Sum::new().add_bytes(udp))
        .combine(payload_sum);
    // RFC 768 / RFC 8200 §8.1: a computed 0 is sent as all ones.
    let c = match sum.checksum() {
        0 => 0xffff,
        c => c,
    };
    UdpPacket::new_unchecked(&mut *udp).set_checksum(c);
    Some(l4)
}

/// Copies bytes `at..at + out.len()` of the concatenation of `parts` into
/// `out`; `None` when the parts are shorter.
pub fn copy_range<'a>(
    parts: impl IntoIterator<Item = &'a [u8]>,
    at: usize,
    out: &mut [u8],
) -> Option<()> {
    let (mut pos, mut done) = (0usize, 0usize);
    for p in parts {
        if done == out.len() {
            break;
        }
        let end = pos + p.len();
        if end > at + done {
            let from = at + done - pos;
            let n = (p.len() - from).min(out.len() - done);
            out[done..done + n].copy_from_slice(&p[from..from + n]);
            done += n;
        }
        pos = end;
    }
    (done == out.len()).then_some(())
}

/// The ones'-complement sum of the concatenation of `parts`, whatever
/// their lengths (a part that ends on an odd byte pairs it with the next
/// part's first).
pub fn sum_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Sum {
    let mut s = Sum::new();
    let mut odd: Option<u8> = None;
    for p in parts {
        let mut p = p;
        if let Some(b) = odd.take() {
            let Some((&first, rest)) = p.split_first() else {
                odd = Some(b);
                continue;
            };
            s = s.add_u16(u16::from_be_bytes([b, first]));
            p = rest;
        }
        let even = p.len() & !1;
        s = s.add_bytes(&p[..even]);
        if even != p.len() {
            odd = Some(p[even]);
        }
    }
    if let Some(b) = odd {
        s = s.add_u16(u16::from_be_bytes([b, 0]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasm::{self, ReasmConf, ReasmStats, Reassembler, Verdict};

    fn whole(v6: bool, n: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        crate::reasm::tests::whole(v6, 0, 1, &payload)
    }

    /// Cuts a frame with the writer; every fragment fits the MTU, offsets
    /// are 8-byte aligned, and the engine's reassembler gives back the
    /// original bytes (IPv4 and IPv6, 1 to 45 fragments).
    #[test]
    fn fragments_reassemble_to_the_datagram() {
        for v6 in [false, true] {
            for n in [1473usize, 1500, 2953, 3000, 8999, 9000, 65_000, 65_507] {
                if v6 && n > 65_527 {
                    continue;
                }
                let f = whole(v6, n);
                let (l3, hl) = (14, if v6 { 40 } else { 20 });
                let head = &f[..l3 + hl];
                let ip_payload = &f[l3 + hl..];
                let fr = Fragmenter::new(head, l3, fam(v6), ip_payload.len(), 1500, 0xabcd_1234)
                    .unwrap();
                let mut table: Reassembler<Vec<u8>> = Reassembler::new(ReasmConf {
                    max_datagrams: 4,
                    max_frags: 64,
                    high_thresh: 1 << 24,
                    timeout: 100,
                });
                let stats = ReasmStats::default();
                let mut got = None;
                let count = fr.count();
                // Last first, then the rest in order.
                let order: Vec<usize> = std::iter::once(count - 1).chain(0..count - 1).collect();
                for i in order {
                    let mut out = vec![0u8; fr.frame_len(i).unwrap()];
                    let (at, r) = fr.write_headers(i, &mut out).unwrap();
                    copy_range([&ip_payload[..1], &ip_payload[1..]], r.start, &mut out[at])
                        .unwrap();
                    assert!(out.len() - 14 <= 1500, "fits the MTU");
                    let p = crate::parse::parse(&out, crate::parse::Offload::default());
                    assert!(p.is_err(), "a fragment is no whole datagram");
                    let info = reasm::classify(&out).expect("a UDP fragment");
                    let len = out.len();
                    if let Verdict::Complete(a) =
                        table.insert(0, &info, out, len, &stats, &mut |_| panic!("no drop"))
                    {
                        got = Some(reasm::assemble_frame(a, |b: &Vec<u8>| b.as_slice()).unwrap());
                    }
                }
                let got = got.expect("complete");
                let d = crate::parse::parse(&got, crate::parse::Offload::default()).unwrap();
                assert_eq!(usize::from(d.payload_len), n);
                assert_eq!(d.payload(&got).unwrap(), &f[f.len() - n..], "v6={v6} n={n}");
                let mtu_room = if v6 { 1500 - 48 } else { 1480 };
                assert_eq!(count, ip_payload.len().div_ceil(mtu_room & !7));
            }
        }
    }

    fn fam(v6: bool) -> Family {
        if v6 {
            Family::V6
        } else {
            Family::V4
        }
    }

    #[test]
    fn refuses_what_it_cannot_cut() {
        let f = whole(false, 100);
        let head = &f[..34];
        assert!(Fragmenter::new(head, 14, Family::V4, 65_516, 1500, 1).is_none());
        assert!(Fragmenter::new(head, 14, Family::V4, 65_515, 1500, 1).is_some());
        assert!(
            Fragmenter::new(head, 14, Family::V4, 100, 27, 1).is_none(),
            "MTU too small"
        );
        assert!(Fragmenter::new(head, 14, Family::V4, 100, 28, 1).is_some());
        assert!(Fragmenter::new(&f[..33], 14, Family::V4, 100, 1500, 1).is_none());
        assert!(Fragmenter::new(head, 14, Family::V6, 100, 1500, 1).is_none());
        let fr = Fragmenter::new(head, 14, Family::V4, 100, 28, 1).unwrap();
        assert_eq!(fr.count(), 13);
        assert!(fr.range(13).is_none());
        let mut short = [0u8; 20];
        assert!(fr.write_headers(0, &mut short).is_none());
        let g = whole(true, 100);
        assert!(Fragmenter::new(&g[..54], 14, Family::V6, 65_536, 1500, 1).is_none());
        assert!(Fragmenter::new(&g[..54], 14, Family::V6, 65_535, 1500, 1).is_some());
    }

    #[test]
    fn fragment_headers_as_rfc() {
        let f = whole(true, 3000);
        let fr = Fragmenter::new(&f[..54], 14, Family::V6, 3008, 1500, 0x0102_0304).unwrap();
        let mut out = vec![0u8; 1514];
        let (at, r) = fr.write_headers(1, &mut out).unwrap();
        assert_eq!(r, 1448..2896);
        assert_eq!(at, 62..1510);
        assert_eq!(out[14 + 6], 44, "next header: fragment");
        assert_eq!(&out[18..20], &(8u16 + 1448).to_be_bytes());
        assert_eq!(out[54], 17);
        assert_eq!(&out[56..58], &(((1448u16 / 8) << 3) | 1).to_be_bytes());
        assert_eq!(&out[58..62], &[1, 2, 3, 4]);
        let g = whole(false, 3000);
        let fr = Fragmenter::new(&g[..34], 14, Family::V4, 3008, 1500, 0x0102_0304).unwrap();
        let (_, r) = fr.write_headers(2, &mut out).unwrap();
        assert_eq!(r, 2960..3008);
        let ip = Ipv4Packet::new_checked(&out[14..]).unwrap();
        assert_eq!(ip.ident(), 0x0304);
        assert!(!ip.more_frags() && !ip.dont_frag());
        assert_eq!(ip.frag_offset(), 370);
        assert_eq!(ip.total_len(), 68);
        assert_eq!(ip.verify_checksum(), Some(true));
    }

    /// Headers written for no payload, finished for a payload, match the
    /// writer's own frame of that payload (lengths and checksum).
    #[test]
    fn finished_headers_match_the_whole_frame() {
        for v6 in [false, true] {
            for n in [0usize, 1, 1473, 3001] {
                let f = whole(v6, n);
                let mut head = whole(v6, 0);
                let l4 = finish_udp_head(&mut head, 14, fam(v6), n, sum_parts([&f[f.len() - n..]]))
                    .unwrap();
                assert_eq!(l4, if v6 { 54 } else { 34 });
                assert_eq!(&head[l4..], &f[l4..l4 + 8], "v6={v6} n={n}: UDP header");
            }
        }
        let mut bad = whole(false, 0);
        assert!(finish_udp_head(&mut bad, 14, Family::V4, 65_508, Sum::new()).is_none());
        assert!(finish_udp_head(&mut bad[..40], 14, Family::V4, 1, Sum::new()).is_none());
    }

    #[test]
    fn sums_and_copies_across_odd_parts() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 31 + 5) as u8).collect();
        let whole = Sum::new().add_bytes(&data).fold();
        for cut in [0usize, 1, 2, 3, 500, 999, 1000, 1001] {
            let parts = [&data[..cut], &data[cut..cut], &data[cut..]];
            assert_eq!(sum_parts(parts).fold(), whole, "cut {cut}");
            let mut out = vec![0u8; 300];
            copy_range(parts, 400, &mut out).unwrap();
            assert_eq!(out, &data[400..700]);
            let mut long = vec![0u8; 602];
            assert!(copy_range(parts, 400, &mut long).is_none());
        }
    }
}
