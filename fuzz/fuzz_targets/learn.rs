//! What the host side learns from frames `parse` rejects as not-IP or
//! not-UDP, on arbitrary frames: the neighbour table's lessons from ARP and
//! neighbour discovery (`send::learn`, the RX lcore's hook) and the
//! membership queries the multicast state answers (`mcast::query_of`,
//! IGMP and MLD). Nothing may panic, and whatever is taken from a frame
//! must be what the frame says, checked here against the bytes at their
//! RFC offsets with a checksum of our own: a lesson's address and MAC are
//! the ARP sender's (on one of the port's subnets, unicast) or the ND
//! message's (hop limit 255, checksum good, the right option); a query is
//! IGMP with a good checksum, or MLD from a link-local source with hop
//! limit 1, asks about a multicast group or all of them, and its
//! response time is within what the code can encode.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use udpdemux::control::Iface;
use udpdemux::neigh::Learn;
use udpdemux::parse::{parse, Family, Offload, ParseError};
use udpdemux::send::{learn, Lessons};

const OURS4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

fn iface() -> Iface {
    Iface {
        port: 3,
        mac: [0x02, 0, 0, 0, 0, 0x01],
        v4: vec![(OURS4, 24)],
        v6: vec![("fd00::1".parse::<Ipv6Addr>().unwrap(), 64)],
        tx_queues: 1,
        lessons: None,
        tx_csum: false,
    }
}

/// RFC 1071's one's-complement sum of `b` (odd tail padded), folded.
fn sum16(mut acc: u32, b: &[u8]) -> u32 {
    for c in b.chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

fn verifies_v6(src: &[u8], dst: &[u8], proto: u8, msg: &[u8]) -> bool {
    let len = msg.len() as u32;
    let mut acc = sum16(0, src);
    acc = sum16(acc, dst);
    acc = sum16(acc, &len.to_be_bytes());
    acc = sum16(acc, &[0, 0, 0, proto]);
    sum16(acc, msg) == 0xffff
}

fn v6(b: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap())
}

fn unicast_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 == 0 && *m != [0; 6]
}

fn check_lesson(frame: &[u8], e: &ParseError, ifc: &Iface) {
    let lessons = Lessons::new(4);
    assert!(
        learn(&lessons, ifc, frame, e),
        "a fresh queue refused a lesson"
    );
    let Some(l) = lessons.pop() else { return };
    assert!(lessons.pop().is_none(), "one frame taught twice");
    assert_eq!(l.port, ifc.port);
    assert!(unicast_mac(&l.mac), "learned a non-unicast MAC {:?}", l.mac);
    match *e {
        ParseError::NotIp { l3_off, .. } => {
            let a = &frame[usize::from(l3_off)..];
            let (op, sha, spa, tpa) = (
                u16::from_be_bytes([a[6], a[7]]),
                &a[8..14],
                Ipv4Addr::new(a[14], a[15], a[16], a[17]),
                Ipv4Addr::new(a[24], a[25], a[26], a[27]),
            );
            assert_eq!(l.ip, IpAddr::V4(spa));
            assert_eq!(&l.mac[..], sha);
            assert_eq!(
                u32::from(spa) >> 8,
                u32::from(OURS4) >> 8,
                "off-link sender {spa}"
            );
            assert!(op == 1 || op == 2, "ARP operation {op}");
            assert_eq!(l.how == Learn::Confirmed, op == 2 && tpa == OURS4);
        }
        ParseError::NotUdp {
            family: Family::V6,
            l3_off,
            l4_off,
            ..
        } => {
            let (l3, l4) = (usize::from(l3_off), usize::from(l4_off));
            let ip = &frame[l3..l3 + 40];
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let m = &frame[l4..l3 + 40 + plen];
            assert_eq!(ip[7], 255, "ND with hop limit {}", ip[7]);
            assert!(verifies_v6(&ip[8..24], &ip[24..40], 58, m), "ND checksum");
            assert_eq!(m[1], 0, "ND code");
            let (ty, src, target) = (m[0], v6(&ip[8..24]), v6(&m[8..24]));
            let want = match ty {
                136 => {
                    assert_eq!(l.ip, IpAddr::V6(target));
                    assert!(!target.is_multicast());
                    let solicited = m[4] & 0x40 != 0;
                    assert_eq!(l.how == Learn::Confirmed, solicited);
                    2
                }
                135 => {
                    assert_eq!(l.ip, IpAddr::V6(src));
                    assert!(!src.is_multicast() && !src.is_unspecified());
                    1
                }
                t => panic!("learned from ICMPv6 type {t}"),
            };
            // The last option of the kind wanted carries the MAC.
            let mut opts = &m[24..];
            let mut mac = None;
            while opts.len() >= 2 {
                let len = usize::from(opts[1]) * 8;
                assert!(
                    len != 0 && len <= opts.len(),
                    "a malformed option was accepted"
                );
                if opts[0] == want && len >= 8 {
                    mac = Some(&opts[2..8]);
                }
                opts = &opts[len..];
            }
            assert_eq!(Some(&l.mac[..]), mac);
        }
        other => panic!("a lesson from {other:?}"),
    }
}

fn check_query(frame: &[u8], e: &ParseError) {
    let Some(q) = udpdemux::mcast::query_of(frame, e, 3, 7) else {
        return;
    };
    let ParseError::NotUdp {
        family,
        l3_off,
        l4_off,
        ..
    } = *e
    else {
        panic!("a query from {e:?}");
    };
    let (l3, l4) = (usize::from(l3_off), usize::from(l4_off));
    assert_eq!((q.port, q.tsc, q.family), (3, 7, family));
    match family {
        Family::V4 => {
            let total = usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            let m = &frame[l4..l3 + total];
            assert_eq!(m[0], 0x11, "IGMP type");
            assert_eq!(sum16(0, m), 0xffff, "IGMP checksum");
            assert!(match q.group {
                None => true,
                Some(IpAddr::V4(g)) => g.is_multicast(),
                Some(IpAddr::V6(_)) => false,
            });
            assert!((1..=3).contains(&q.version));
            assert!(q.max_resp_ms <= 31_744 * 100);
        }
        Family::V6 => {
            let ip = &frame[l3..l3 + 40];
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let m = &frame[l4..l3 + 40 + plen];
            assert_eq!((m[0], ip[7]), (130, 1), "MLD type, hop limit");
            assert_eq!(
                v6(&ip[8..24]).segments()[0] & 0xffc0,
                0xfe80,
                "not link-local"
            );
            assert!(verifies_v6(&ip[8..24], &ip[24..40], 58, m), "MLD checksum");
            assert!(match q.group {
                None => true,
                Some(IpAddr::V6(g)) => g.is_multicast(),
                Some(IpAddr::V4(_)) => false,
            });
            assert!((1..=2).contains(&q.version));
            assert!(q.max_resp_ms <= 0x1fff << 10);
        }
    }
}

fuzz_target!(|frame: &[u8]| {
    let Err(e) = parse(frame, Offload::default()) else {
        return;
    };
    if !matches!(e, ParseError::NotIp { .. } | ParseError::NotUdp { .. }) {
        return;
    }
    check_lesson(frame, &e, &iface());
    check_query(frame, &e);
});
