//! Property tests for `parse` against the `parse::build` writer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use udpdemux::parse::build::{self, CsumMode, ExtSpec, FragSpec, FrameSpec, L3Spec};
use udpdemux::parse::fast_path::parse_common;
use udpdemux::parse::{parse, parse_general, CsumHint, Datagram, Family, Offload, ParseError};

/// Owned counterpart of `FrameSpec` so proptest can generate and shrink it.
#[derive(Clone, Debug)]
struct Spec {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlans: Vec<(u16, u16)>,
    l3: L3,
    sport: u16,
    dport: u16,
    payload: Vec<u8>,
    zero_csum: bool,
}

#[derive(Clone, Debug)]
enum L3 {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        ttl: u8,
        options: Vec<u8>,
        ident: u16,
        df: bool,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        ext: Vec<Ext>,
    },
}

#[derive(Clone, Debug)]
enum Ext {
    Dest(Vec<u8>),
    Routing(u8, Vec<u8>),
    AtomicFrag(u32),
}

fn arb_v6_unicast() -> impl Strategy<Value = Ipv6Addr> {
    // The parser drops multicast sources and loopback (Linux ipv6_rcv_core).
    any::<[u8; 16]>()
        .prop_map(Ipv6Addr::from)
        .prop_filter("not multicast/loopback", |a| {
            !a.is_multicast() && !a.is_loopback()
        })
}

fn arb_ext() -> impl Strategy<Value = Ext> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(Ext::Dest),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(t, d)| Ext::Routing(t, d)),
        any::<u32>().prop_map(Ext::AtomicFrag),
    ]
}

fn arb_l3() -> impl Strategy<Value = L3> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            0usize..=10,
            any::<u16>(),
            any::<bool>(),
            any::<[u8; 40]>()
        )
            .prop_map(|(s, d, ttl, words, ident, df, opt)| L3::V4 {
                src: s.into(),
                dst: d.into(),
                ttl,
                options: opt[..words * 4].to_vec(),
                ident,
                df,
            }),
        (
            arb_v6_unicast(),
            arb_v6_unicast().prop_filter("dst", |a| !a.is_loopback()),
            any::<u8>(),
            proptest::collection::vec(arb_ext(), 0..4)
        )
            .prop_map(|(src, dst, hop_limit, ext)| L3::V6 {
                src,
                dst,
                hop_limit,
                ext
            }),
    ]
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        proptest::collection::vec(
            (prop_oneof![Just(0x8100u16), Just(0x88a8u16)], any::<u16>()),
            0..=2,
        ),
        arb_l3(),
        any::<u16>(),
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<bool>(),
    )
        .prop_map(
            |(src_mac, dst_mac, vlans, l3, sport, dport, payload, zero)| {
                // A zero checksum is only valid on IPv4.
                let zero_csum = zero && matches!(l3, L3::V4 { .. });
                Spec {
                    src_mac,
                    dst_mac,
                    vlans,
                    l3,
                    sport,
                    dport,
                    payload,
                    zero_csum,
                }
            },
        )
}

/// Writes the frame; the borrowed spec lives only inside this call.
fn write(s: &Spec) -> Vec<u8> {
    let ext: Vec<ExtSpec<'_>> = match &s.l3 {
        L3::V4 { .. } => Vec::new(),
        L3::V6 { ext, .. } => ext
            .iter()
            .map(|e| match e {
                Ext::Dest(o) => ExtSpec::DestOpts { options: o },
                // Segments left 0: the fixed header's destination is final.
                Ext::Routing(t, d) => ExtSpec::Routing {
                    routing_type: *t,
                    segments_left: 0,
                    data: d,
                },
                Ext::AtomicFrag(id) => ExtSpec::Fragment {
                    offset: 0,
                    more: false,
                    ident: *id,
                },
            })
            .collect(),
    };
    let l3 = match &s.l3 {
        L3::V4 {
            src,
            dst,
            ttl,
            options,
            ident,
            df,
        } => L3Spec::V4 {
            src: *src,
            dst: *dst,
            ttl: *ttl,
            options,
            ident: *ident,
            frag: FragSpec {
                dont_frag: *df,
                ..FragSpec::default()
            },
        },
        L3::V6 {
            src,
            dst,
            hop_limit,
            ..
        } => L3Spec::V6 {
            src: *src,
            dst: *dst,
            hop_limit: *hop_limit,
            ext: &ext,
        },
    };
    let spec = FrameSpec {
        src_mac: s.src_mac,
        dst_mac: s.dst_mac,
        vlans: &s.vlans,
        l3,
        sport: s.sport,
        dport: s.dport,
        payload: &s.payload,
        udp_csum: if s.zero_csum {
            CsumMode::Zero
        } else {
            CsumMode::Correct
        },
    };
    let f = build::to_vec(&spec).expect("generated specs are valid");
    assert_eq!(build::frame_len(&spec), Ok(f.len()));
    f
}

/// Where the UDP header starts in `write(s)`.
fn l4_offset(s: &Spec) -> usize {
    let l3 = 14 + 4 * s.vlans.len();
    l3 + match &s.l3 {
        L3::V4 { options, .. } => 20 + options.len(),
        L3::V6 { ext, .. } => {
            40 + ext
                .iter()
                .map(|e| match e {
                    Ext::Dest(o) => (2 + o.len()).div_ceil(8) * 8,
                    Ext::Routing(_, d) => (4 + d.len()).div_ceil(8) * 8,
                    Ext::AtomicFrag(_) => 8,
                })
                .sum::<usize>()
        }
    }
}

fn family(s: &Spec) -> Family {
    match s.l3 {
        L3::V4 { .. } => Family::V4,
        L3::V6 { .. } => Family::V6,
    }
}

fn arb_hint() -> impl Strategy<Value = CsumHint> {
    prop_oneof![
        Just(CsumHint::Unknown),
        Just(CsumHint::Good),
        Just(CsumHint::Bad)
    ]
}

fn arb_offload() -> impl Strategy<Value = Offload> {
    (arb_hint(), arb_hint()).prop_map(|(ip, l4)| Offload { ip, l4 })
}

/// The general path alone (no fast path in front).
fn general(f: &[u8], h: Offload) -> Result<Datagram, ParseError> {
    let mut out = std::mem::MaybeUninit::uninit();
    parse_general(f, h, &mut out).copied()
}

/// Whenever the fast path answers, the general path gives the same
/// datagram; and `parse` (fast path first) always agrees with the general
/// path, errors included.
fn fast_path_agrees(f: &[u8], h: Offload) -> Result<(), TestCaseError> {
    let g = general(f, h);
    if let Some(d) = parse_common(f, h) {
        prop_assert_eq!(Ok(d), g, "fast path accepted what the general path did not");
    }
    prop_assert_eq!(parse(f, h), g);
    Ok(())
}

/// The frame the fast path is for: untagged, IPv4 without options or IPv6
/// without extension headers.
fn is_common(s: &Spec) -> bool {
    s.vlans.is_empty()
        && match &s.l3 {
            L3::V4 { options, .. } => options.is_empty(),
            L3::V6 { ext, .. } => ext.is_empty(),
        }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The fast path takes every well-formed common frame (so the speed it
    /// exists for is not lost to a check that is too strict) and gives the
    /// general path's datagram for it, under every offload hint that lets
    /// it through.
    #[test]
    fn fast_path_agrees_with_the_general_path(s in arb_spec(), pad in 0usize..20, h in arb_offload()) {
        let mut f = write(&s);
        f.resize(f.len() + pad, 0xa5);
        fast_path_agrees(&f, h)?;
        let fine = |c: CsumHint| c != CsumHint::Bad;
        if is_common(&s) && fine(h.ip) && fine(h.l4) {
            prop_assert!(parse_common(&f, h).is_some(), "common frame refused: {:?}", general(&f, h));
        }
    }

    #[test]
    fn written_frames_parse_back(s in arb_spec(), pad in 0usize..20) {
        let mut f = write(&s);
        // Ethernet padding after the datagram must not change anything.
        f.resize(f.len() + pad, 0xa5);
        let d = parse(&f, Offload::default()).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let l3 = 14 + 4 * s.vlans.len();
        let (family, src, dst, l3_len) = match &s.l3 {
            L3::V4 { src, dst, options, .. } => (Family::V4, IpAddr::V4(*src), IpAddr::V4(*dst), 20 + options.len()),
            L3::V6 { src, dst, ext, .. } => {
                let ext_len: usize = ext.iter().map(|e| match e {
                    Ext::Dest(o) => (2 + o.len()).div_ceil(8) * 8,
                    Ext::Routing(_, d) => (4 + d.len()).div_ceil(8) * 8,
                    Ext::AtomicFrag(_) => 8,
                }).sum();
                (Family::V6, IpAddr::V6(*src), IpAddr::V6(*dst), 40 + ext_len)
            }
        };
        prop_assert_eq!(d.family, family);
        prop_assert_eq!(usize::from(d.vlan_count), s.vlans.len());
        prop_assert_eq!(usize::from(d.l3_off), l3);
        prop_assert_eq!(usize::from(d.l4_off), l3 + l3_len);
        prop_assert_eq!(usize::from(d.payload_off), l3 + l3_len + 8);
        prop_assert_eq!(d.payload(&f), Some(&s.payload[..]));
        prop_assert_eq!((d.src, d.dst, d.sport, d.dport), (src, dst, s.sport, s.dport));
        prop_assert_eq!((d.src_mac, d.dst_mac), (s.src_mac, s.dst_mac));
        // And the hardware-says-good path agrees.
        prop_assert_eq!(parse(&f, Offload { ip: CsumHint::Good, l4: CsumHint::Good }), Ok(d));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), h in arb_offload()) {
        let _ = parse(&bytes, h);
        fast_path_agrees(&bytes, h)?;
    }

    /// Random bytes behind a plausible Ethernet/IP start reach deeper code.
    #[test]
    fn random_ip_bodies_never_panic(
        et in prop_oneof![Just([0x08u8, 0x00]), Just([0x86, 0xdd]), Just([0x81, 0x00])],
        first in prop_oneof![Just(0x45u8), Just(0x4f), Just(0x60), any::<u8>()],
        body in proptest::collection::vec(any::<u8>(), 0..200),
        h in arb_offload(),
    ) {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&et);
        f.push(first);
        f.extend_from_slice(&body);
        let _ = parse(&f, h);
        fast_path_agrees(&f, h)?;
    }

    #[test]
    fn single_byte_mutation_never_panics(s in arb_spec(), idx in any::<prop::sample::Index>(), v in any::<u8>(), h in arb_offload()) {
        let mut f = write(&s);
        let i = idx.index(f.len());
        let before = f[i];
        f[i] = v;
        fast_path_agrees(&f, h)?;
        let r = parse(&f, h);
        // Whatever was accepted lies inside the frame (no hint or zero
        // checksum lets a UDP length run past what was received).
        if let Ok(d) = &r {
            prop_assert!(d.payload(&f).is_some(), "payload past the frame: {:?}", d);
        }
        // With software checks, any change to a checksummed byte (addresses,
        // ports, payload) must be caught: mutating only payload bytes may
        // never yield Ok with a different payload than the frame holds.
        if h == Offload::default() && v != before && !s.zero_csum {
            if let Ok(d) = r {
                let pl_start = usize::from(d.payload_off);
                prop_assert!(i < pl_start || i >= pl_start + usize::from(d.payload_len),
                    "payload byte {} changed yet checksum passed", i);
            }
        }
    }

    /// A UDP length past the IP payload is refused under every offload hint
    /// (a "good" checksum hint means nothing sums `ulen` bytes, so the length
    /// check is all that stands between the datagram and memory past it),
    /// with or without an IPv4 zero checksum, and with Ethernet padding that
    /// puts the claimed bytes inside the frame but outside the IP payload.
    #[test]
    fn udp_length_past_the_ip_payload_is_refused_under_every_hint(
        s in arb_spec(),
        pad in 0usize..64,
        over in 1usize..70_000,
        h in arb_offload(),
    ) {
        let mut f = write(&s);
        let l4 = l4_offset(&s);
        let span = f.len() - l4;
        let ulen = (span + over).min(usize::from(u16::MAX));
        prop_assume!(ulen > span);
        f[l4 + 4..l4 + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
        f.resize(f.len() + pad, 0x5a);
        let fam = family(&s);
        let want = if fam == Family::V4 && h.ip == CsumHint::Bad {
            udpdemux::parse::ParseError::BadIpChecksum
        } else {
            udpdemux::parse::ParseError::BadUdpLength { family: fam }
        };
        prop_assert_eq!(parse(&f, h), Err(want), "ulen {} span {} pad {}", ulen, span, pad);
    }

    /// A UDP length shorter than the UDP header is refused under every
    /// offload hint, by both paths (IPv6's 0 means "the rest of the
    /// payload", RFC 2675, and is not short). Under a "good" hint nothing
    /// sums the datagram, so the length check alone must refuse it.
    #[test]
    fn udp_length_under_the_header_is_refused_under_every_hint(
        s in arb_spec(),
        short in 0u16..8,
        h in arb_offload(),
    ) {
        let fam = family(&s);
        prop_assume!(!(fam == Family::V6 && short == 0));
        let mut f = write(&s);
        let l4 = l4_offset(&s);
        f[l4 + 4..l4 + 6].copy_from_slice(&short.to_be_bytes());
        fast_path_agrees(&f, h)?;
        prop_assert!(parse(&f, h).is_err(), "UDP length {} accepted", short);
        prop_assert!(parse_common(&f, h).is_none());
    }

    /// IPv6 has no "no checksum": a zero UDP checksum field is refused
    /// (RFC 8200 §8.1, Linux `udp6_csum_init`) whatever the NIC says, while
    /// the same frame with its checksum is accepted.
    #[test]
    fn ipv6_zero_udp_checksum_is_refused_under_every_hint(s in arb_spec(), h in arb_offload()) {
        if family(&s) != Family::V6 {
            // Not prop_assume: half the specs are IPv4, too many rejects.
            return Ok(());
        }
        let mut f = write(&s);
        if h.l4 != CsumHint::Bad {
            prop_assert!(parse(&f, h).is_ok());
        }
        let l4 = l4_offset(&s);
        f[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
        prop_assert_eq!(parse(&f, h), Err(udpdemux::parse::ParseError::Udp6ZeroChecksum));
    }
}
