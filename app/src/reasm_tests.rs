//! Byte-vector tests, one per rule.
use super::*;
use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use crate::parse::{parse, CsumHint, Offload};

const NONE: Offload = Offload {
    ip: CsumHint::Unknown,
    l4: CsumHint::Unknown,
};
const SEC: u64 = 1_000_000_000;

fn conf() -> ReasmConf {
    ReasmConf {
        max_datagrams: 8,
        max_frags: 16,
        high_thresh: 1 << 20,
        timeout: 30 * SEC,
    }
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// An unfragmented frame (IPv4 ident `id`); `parse::fragment`'s tests
/// cut it too.
pub(crate) fn whole(v6: bool, id: u16, src_last: u8, data: &[u8]) -> Vec<u8> {
    let l3 = if v6 {
        L3Spec::V6 {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(src_last)),
            dst: "fd00::2".parse().unwrap(),
            hop_limit: 64,
            ext: &[],
        }
    } else {
        L3Spec::V4 {
            src: Ipv4Addr::new(198, 18, 0, src_last),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            ttl: 64,
            options: &[],
            ident: id,
            frag: FragSpec::default(),
        }
    };
    build::to_vec(&FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlans: &[],
        l3,
        sport: 40000,
        dport: 5000,
        payload: data,
        udp_csum: CsumMode::Correct,
    })
    .unwrap()
}

fn frags(frame: &[u8], cuts: &[u32], id: u32) -> Vec<Vec<u8>> {
    fragment_frame(frame, cuts, id).unwrap()
}

struct T {
    r: Reassembler<Vec<u8>>,
    stats: ReasmStats,
    released: Vec<Vec<u8>>,
}

enum Got {
    Held,
    Dup,
    Failed(Fail),
    Done(Vec<u8>),
}

impl T {
    fn new(c: ReasmConf) -> T {
        T {
            r: Reassembler::new(c),
            stats: ReasmStats::default(),
            released: Vec::new(),
        }
    }
    fn offer_at(&mut self, now: u64, f: &[u8]) -> Got {
        let info = classify(f).expect("a UDP fragment");
        let released = &mut self.released;
        let truesize = f.len();
        match self
            .r
            .insert(now, &info, f.to_vec(), truesize, &self.stats, &mut |b| {
                released.push(b)
            }) {
            Verdict::Held => Got::Held,
            Verdict::Duplicate => Got::Dup,
            Verdict::Failed(e) => Got::Failed(e),
            Verdict::Complete(a) => Got::Done(assemble_frame(a, |b| &b[..]).unwrap()),
        }
    }
    fn offer(&mut self, f: &[u8]) -> Got {
        self.offer_at(0, f)
    }
    fn fam(&self, c: &[Counter; 2], fam: usize) -> u64 {
        c[fam].get()
    }
    fn check_books(&self) {
        assert!(self.stats.balanced(), "fragment books");
        assert_eq!(self.stats.bytes_held.get() as usize, self.r.mem());
    }
}

fn done(g: Got) -> Vec<u8> {
    match g {
        Got::Done(v) => v,
        Got::Held => panic!("held, not done"),
        Got::Dup => panic!("duplicate, not done"),
        Got::Failed(e) => panic!("failed: {e:?}"),
    }
}

fn held(g: Got) {
    assert!(matches!(g, Got::Held), "expected held");
}

#[test]
fn in_order_v4_and_v6_give_back_the_original_frame() {
    for v6 in [false, true] {
        let fam = usize::from(v6);
        let orig = whole(v6, 7, 1, &payload(3000, 1));
        let fs = frags(&orig, &[1480, 2960], 7);
        assert_eq!(fs.len(), 3);
        let mut t = T::new(conf());
        held(t.offer(&fs[0]));
        held(t.offer(&fs[1]));
        let got = done(t.offer(&fs[2]));
        assert_eq!(got, orig, "v6={v6}");
        // The reassembled frame is an ordinary datagram to the parser.
        let d = parse(&got, NONE).unwrap();
        assert_eq!(usize::from(d.payload_len), 3000);
        assert_eq!(t.fam(&t.stats.reqds, fam), 3);
        assert_eq!(t.fam(&t.stats.oks, fam), 1);
        assert_eq!(t.fam(&t.stats.frags_merged, fam), 3);
        assert_eq!(t.fam(&t.stats.fails, fam), 0);
        assert_eq!(t.r.in_progress(), 0);
        assert_eq!(t.r.mem(), 0);
        assert!(t.released.is_empty());
        t.check_books();
    }
}

#[test]
fn reversed_order() {
    for v6 in [false, true] {
        let orig = whole(v6, 9, 1, &payload(4000, 2));
        let fs = frags(&orig, &[1000, 2000, 3000], 9);
        let mut t = T::new(conf());
        for f in fs[1..].iter().rev() {
            held(t.offer(f));
        }
        assert_eq!(done(t.offer(&fs[0])), orig);
        t.check_books();
    }
}

#[test]
fn interleaved_with_other_datagrams() {
    for v6 in [false, true] {
        let a = whole(v6, 1, 1, &payload(2500, 3));
        let b = whole(v6, 2, 1, &payload(2100, 4));
        // Same ID as `a`, another source: another key.
        let c = whole(v6, 1, 3, &payload(2300, 5));
        let fa = frags(&a, &[1200], 1);
        let fb = frags(&b, &[800, 1600], 2);
        let fc = frags(&c, &[1200], 1);
        let mut t = T::new(conf());
        held(t.offer(&fa[0]));
        held(t.offer(&fb[2]));
        held(t.offer(&fc[1]));
        held(t.offer(&fb[0]));
        assert_eq!(t.r.in_progress(), 3);
        assert_eq!(done(t.offer(&fc[0])), c);
        assert_eq!(done(t.offer(&fa[1])), a);
        assert_eq!(done(t.offer(&fb[1])), b);
        assert_eq!(t.r.in_progress(), 0);
        t.check_books();
    }
}

#[test]
fn exact_and_contained_duplicates_drop_alone() {
    for v6 in [false, true] {
        let fam = usize::from(v6);
        let orig = whole(v6, 3, 1, &payload(3000, 6));
        let fs = frags(&orig, &[1000, 2000], 3);
        let mut t = T::new(conf());
        held(t.offer(&fs[0]));
        held(t.offer(&fs[1]));
        // The same fragment again, and a smaller one inside the run held.
        assert!(matches!(t.offer(&fs[1]), Got::Dup));
        let inner = frags(&orig, &[200, 800], 3);
        assert!(matches!(t.offer(&inner[1]), Got::Dup));
        assert_eq!(t.released.len(), 2);
        assert_eq!(done(t.offer(&fs[2])), orig);
        assert_eq!(t.fam(&t.stats.fails, fam), 0);
        assert_eq!(t.fam(&t.stats.frags_dropped, fam), 2);
        t.check_books();
    }
}

#[test]
fn overlap_drops_the_whole_datagram() {
    for v6 in [false, true] {
        let fam = usize::from(v6);
        let orig = whole(v6, 4, 1, &payload(3000, 7));
        let a = frags(&orig, &[1000, 2000], 4);
        let b = frags(&orig, &[1504, 2504], 4);
        let mut t = T::new(conf());
        held(t.offer(&a[0]));
        held(t.offer(&a[1]));
        // 1504..2504 overlaps 1000..2000 partly (and reaches past it).
        assert!(matches!(t.offer(&b[1]), Got::Failed(Fail::Overlap)));
        assert_eq!(t.released.len(), 3);
        assert_eq!(t.r.in_progress(), 0);
        assert_eq!(t.fam(&t.stats.overlaps, fam), 1);
        assert_eq!(t.fam(&t.stats.fails, fam), 1);
        // What comes after starts a new datagram that cannot complete
        // from the rest: the kernel's behaviour too.
        held(t.offer(&a[2]));
        t.check_books();

        // An overlap below the highest run (the binary-search branch).
        let mut t = T::new(conf());
        held(t.offer(&a[2]));
        held(t.offer(&a[0]));
        let c = frags(&orig, &[504, 1504], 4);
        assert!(matches!(t.offer(&c[1]), Got::Failed(Fail::Overlap)));
        assert_eq!(t.released.len(), 3);
        t.check_books();
    }
}

#[test]
fn timeout_drops_and_counts() {
    for v6 in [false, true] {
        let fam = usize::from(v6);
        let orig = whole(v6, 5, 1, &payload(2000, 8));
        let fs = frags(&orig, &[1000], 5);
        let mut t = T::new(conf());
        held(t.offer_at(10 * SEC, &fs[0]));
        assert!(!t.r.due(39 * SEC));
        assert!(t.r.due(40 * SEC));
        let (r, stats, released) = (&mut t.r, &t.stats, &mut t.released);
        r.expire(39 * SEC, stats, &mut |b| released.push(b));
        assert_eq!(t.r.in_progress(), 1);
        let (r, stats, released) = (&mut t.r, &t.stats, &mut t.released);
        r.expire(40 * SEC, stats, &mut |b| released.push(b));
        assert_eq!(t.r.in_progress(), 0);
        assert_eq!(t.released.len(), 1);
        assert_eq!(t.fam(&t.stats.timeout, fam), 1);
        assert_eq!(t.fam(&t.stats.fails, fam), 1);
        // The late second half starts over (and is held).
        held(t.offer_at(41 * SEC, &fs[1]));
        // Expiry also runs on the next insert.
        held(t.offer_at(80 * SEC, &whole_frag_other(v6)));
        assert_eq!(t.fam(&t.stats.timeout, fam), 2);
        t.check_books();
    }
}

fn whole_frag_other(v6: bool) -> Vec<u8> {
    let o = whole(v6, 99, 9, &payload(1600, 9));
    frags(&o, &[800], 99).remove(0)
}

#[test]
fn oversize_is_refused() {
    for v6 in [false, true] {
        let fam = usize::from(v6);
        // A last fragment at offset 65 528 with 100 bytes: past 65 535.
        let orig = whole(v6, 6, 1, &payload(3000, 10));
        let mut last = frags(&orig, &[1000], 6).remove(1);
        set_offset(&mut last, v6, 65_528 / 8);
        let mut t = T::new(conf());
        assert!(matches!(t.offer(&last), Got::Failed(Fail::Oversize)));
        // Held first, then an oversize fragment: the whole datagram goes.
        let first = frags(&orig, &[1000], 6).remove(0);
        held(t.offer(&first));
        assert!(matches!(t.offer(&last), Got::Failed(Fail::Oversize)));
        assert_eq!(t.r.in_progress(), 0);
        assert_eq!(t.fam(&t.stats.fails, fam), 2);
        assert_eq!(t.released.len(), 3);
        t.check_books();
    }
}

/// Rewrites a fragment's offset (8-byte units) in place.
fn set_offset(f: &mut [u8], v6: bool, units: u16) {
    if v6 {
        let at = 14 + 40 + 2;
        let m = f[at + 1] & 1;
        f[at..at + 2].copy_from_slice(&((units << 3) | u16::from(m)).to_be_bytes());
    } else {
        let mut ip = ipv4::Ipv4Packet::new_checked(&mut f[14..]).unwrap();
        let mf = ip.frag_field() & ipv4::FLAG_MF;
        ip.set_frag_field(units | mf);
        ip.fill_checksum();
    }
}

#[test]
fn too_many_in_progress_evicts_the_oldest() {
    let mut t = T::new(ReasmConf {
        max_datagrams: 2,
        ..conf()
    });
    let mut firsts = Vec::new();
    for id in 0..3u16 {
        let o = whole(false, id, 1, &payload(2000, id as u8));
        firsts.push((o.clone(), frags(&o, &[1000], u32::from(id))));
    }
    held(t.offer_at(1, &firsts[0].1[0]));
    held(t.offer_at(2, &firsts[1].1[0]));
    held(t.offer_at(3, &firsts[2].1[0]));
    assert_eq!(t.r.in_progress(), 2);
    assert_eq!(t.stats.fails[0].get(), 1);
    assert_eq!(t.released, vec![firsts[0].1[0].clone()]);
    // The two newest still complete.
    assert_eq!(done(t.offer_at(4, &firsts[2].1[1])), firsts[2].0);
    assert_eq!(done(t.offer_at(5, &firsts[1].1[1])), firsts[1].0);
    t.check_books();
}

#[test]
fn too_many_fragments_each() {
    let mut t = T::new(ReasmConf {
        max_frags: 3,
        ..conf()
    });
    let o = whole(true, 0, 1, &payload(2000, 1));
    let fs = frags(&o, &[400, 800, 1200, 1600], 11);
    held(t.offer(&fs[0]));
    held(t.offer(&fs[1]));
    held(t.offer(&fs[2]));
    assert!(matches!(t.offer(&fs[3]), Got::Failed(Fail::TooManyFrags)));
    assert_eq!(t.released.len(), 4);
    assert_eq!(t.stats.fails[1].get(), 1);
    t.check_books();
}

#[test]
fn first_fragment_too_small_for_the_udp_header() {
    for v6 in [false, true] {
        let o = whole(v6, 12, 1, &payload(2000, 1));
        let mut first = frags(&o, &[1000], 12).remove(0);
        // Cut it to 4 bytes of data (the lengths say so).
        let l3 = 14;
        let hdr = if v6 { 40 + 8 } else { 20 };
        first.truncate(l3 + hdr + 4);
        if v6 {
            let mut ip = ipv6::Ipv6Packet::new_checked(&mut first[l3..]).unwrap();
            ip.set_payload_len(8 + 4);
        } else {
            let mut ip = ipv4::Ipv4Packet::new_checked(&mut first[l3..]).unwrap();
            ip.set_total_len(20 + 4);
            ip.fill_checksum();
        }
        let mut t = T::new(conf());
        held(t.offer(&frags(&o, &[1000], 12)[1]));
        assert!(matches!(t.offer(&first), Got::Failed(Fail::FirstTooSmall)));
        assert_eq!(t.r.in_progress(), 0);
        assert_eq!(t.released.len(), 2);
        t.check_books();
    }
}

#[test]
fn last_fragment_disagreeing_with_the_length_fails() {
    let o = whole(false, 13, 1, &payload(3000, 1));
    let fs = frags(&o, &[1000, 2000], 13);
    let mut t = T::new(conf());
    held(t.offer(&fs[1]));
    // A last fragment that ends before data already held.
    let mut short_last = fs[0].clone();
    let mut ip = ipv4::Ipv4Packet::new_checked(&mut short_last[14..]).unwrap();
    ip.set_frag_field(8 / 8);
    ip.fill_checksum();
    assert!(matches!(t.offer(&short_last), Got::Failed(Fail::BadLength)));
    assert_eq!(t.r.in_progress(), 0);
    t.check_books();
}

#[test]
fn atomic_fragment_is_a_whole_packet_and_leaves_others_alone() {
    use build::ExtSpec;
    let data = payload(100, 3);
    let ext = [ExtSpec::Fragment {
        offset: 0,
        more: false,
        ident: 77,
    }];
    let atomic = build::to_vec(&FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlans: &[],
        l3: L3Spec::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            hop_limit: 64,
            ext: &ext,
        },
        sport: 40000,
        dport: 5000,
        payload: &data,
        udp_csum: CsumMode::Correct,
    })
    .unwrap();
    assert!(classify(&atomic).is_none());
    let d = parse(&atomic, NONE).unwrap();
    assert_eq!(d.payload(&atomic).unwrap(), &data[..]);
    // A datagram in progress with the same ID is untouched by it.
    let o = whole(true, 0, 1, &payload(2000, 4));
    let fs = frags(&o, &[1000], 77);
    let mut t = T::new(conf());
    held(t.offer(&fs[0]));
    assert_eq!(done(t.offer(&fs[1])), o);
}

#[test]
fn non_udp_fragments_are_not_taken() {
    let o = whole(false, 14, 1, &payload(2000, 1));
    let mut f = frags(&o, &[1000], 14).remove(0);
    let mut ip = ipv4::Ipv4Packet::new_checked(&mut f[14..]).unwrap();
    ip.set_protocol(1);
    ip.fill_checksum();
    assert!(classify(&f).is_none());
    // Not a fragment at all.
    assert!(classify(&o).is_none());
}

#[test]
fn fragment_flood_stays_under_the_memory_bound() {
    let bound = 64 * 1024;
    let mut t = T::new(ReasmConf {
        max_datagrams: 1024,
        max_frags: 64,
        high_thresh: bound,
        timeout: 30 * SEC,
    });
    let mut peak = 0;
    // 5000 datagrams of which only the first fragment ever comes.
    for id in 0..5000u32 {
        let o = whole(
            id % 2 == 1,
            id as u16,
            (id % 200) as u8 + 1,
            &payload(3000, id as u8),
        );
        let f = frags(&o, &[1480], id).remove(0);
        held(t.offer_at(u64::from(id), &f));
        peak = peak.max(t.r.mem());
        assert!(t.r.mem() <= bound);
    }
    assert!(peak > bound / 2, "the flood filled the table ({peak})");
    let fails = t.stats.fails[0].get() + t.stats.fails[1].get();
    let held_now = t.stats.frags_held.get();
    assert_eq!(fails + held_now, 5000);
    assert!(fails > 4900, "{fails}");
    assert!(t.stats.bytes_peak.get() as usize <= bound);
    t.check_books();
    // Clearing frees the rest, counted as dropped.
    let (r, stats, released) = (&mut t.r, &t.stats, &mut t.released);
    r.clear(stats, &mut |b| released.push(b));
    assert_eq!(t.released.len(), 5000);
    assert_eq!(t.r.mem(), 0);
    t.check_books();
}

#[test]
fn a_fragment_bigger_than_the_bound_is_refused() {
    let mut t = T::new(ReasmConf {
        high_thresh: 1000,
        ..conf()
    });
    let o = whole(false, 15, 1, &payload(3000, 1));
    let f = frags(&o, &[1480], 15).remove(0);
    assert!(matches!(t.offer(&f), Got::Failed(Fail::NoMemory)));
    assert_eq!(t.r.in_progress(), 0);
    t.check_books();
}

/// Inserts an 8-byte hop-by-hop header (PadN) after the IPv6 fixed header:
/// the fixed header's Next Header moves into it.
fn with_hop_by_hop(f: &[u8]) -> Vec<u8> {
    let l3 = 14;
    let mut out = f[..l3 + 40].to_vec();
    let next = out[l3 + 6];
    out[l3 + 6] = 0;
    let pl = u16::from_be_bytes([out[l3 + 4], out[l3 + 5]]) + 8;
    out[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
    out.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    out.extend_from_slice(&f[l3 + 40..]);
    out
}

#[test]
fn v6_unfragmentable_headers_stay_in_front() {
    let orig = whole(true, 0, 1, &payload(2500, 5));
    let fs: Vec<Vec<u8>> = frags(&orig, &[1200], 21)
        .iter()
        .map(|f| with_hop_by_hop(f))
        .collect();
    let info = classify(&fs[0]).unwrap();
    assert_eq!(info.unfrag_len, 48);
    assert_eq!(info.data_off, 14 + 48 + 8);
    let mut t = T::new(conf());
    held(t.offer(&fs[1]));
    let got = done(t.offer(&fs[0]));
    // The original with the same hop-by-hop header, and no fragment header.
    assert_eq!(got, with_hop_by_hop(&orig));
    let d = parse(&got, NONE).unwrap();
    assert_eq!(usize::from(d.payload_len), 2500);
    t.check_books();
}

#[test]
fn vlan_tagged_fragments() {
    let data = payload(2000, 6);
    let orig = build::to_vec(&FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlans: &[(0x8100, 7)],
        l3: L3Spec::V4 {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            ttl: 64,
            options: &[],
            ident: 5,
            frag: FragSpec::default(),
        },
        sport: 1,
        dport: 2,
        payload: &data,
        udp_csum: CsumMode::Correct,
    })
    .unwrap();
    // Split by hand: fragment_frame knows untagged frames only.
    let l3 = 18;
    let body = &orig[l3 + 20..];
    let mut fs = Vec::new();
    for (a, b, more) in [(0usize, 1000usize, true), (1000, body.len(), false)] {
        let mut f = orig[..l3 + 20].to_vec();
        let mut ip = ipv4::Ipv4Packet::new_checked(&mut f[l3..]).unwrap();
        ip.set_total_len((20 + b - a) as u16);
        ip.set_frag_field((a / 8) as u16 | if more { ipv4::FLAG_MF } else { 0 });
        ip.fill_checksum();
        f.extend_from_slice(&body[a..b]);
        fs.push(f);
    }
    assert_eq!(classify(&fs[1]).unwrap().l3_off, 18);
    let mut t = T::new(conf());
    held(t.offer(&fs[1]));
    assert_eq!(done(t.offer(&fs[0])), orig);
}

/// The exception path asks which protocol a fragment carries: UDP's stay
/// with the reassembler, the others (here the same fragments relabelled
/// ICMP / ICMPv6) are not [`classify`]'s, and whole frames are no fragment.
#[test]
fn fragment_protocol_names_what_the_reassembler_leaves() {
    for v6 in [false, true] {
        let f = whole(v6, 7, 1, &payload(3000, 1));
        assert_eq!(crate::reasm::fragment_protocol(&f), None, "not a fragment");
        for mut p in frags(&f, &[1480, 2960], 9) {
            assert_eq!(crate::reasm::fragment_protocol(&p), Some(17));
            // IPv4's protocol field; IPv6's fragment header (first after
            // the fixed header here) names the next header.
            let (at, other) = if v6 { (14 + 40, 58) } else { (14 + 9, 1) };
            p[at] = other;
            assert_eq!(crate::reasm::fragment_protocol(&p), Some(other));
            assert!(classify(&p).is_none(), "not a UDP fragment");
        }
    }
}
