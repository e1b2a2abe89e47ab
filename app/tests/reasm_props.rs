//! Property: any split of a valid datagram into fragments, offered in any
//! order, reassembles to the original frame byte for byte (IPv4 and IPv6),
//! and the table ends empty with its books balanced.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use udpdemux::parse::{parse, Offload};
use udpdemux::reasm::{
    assemble_frame, classify, fragment_frame, ReasmConf, ReasmStats, Reassembler, Verdict,
};

fn frame(v6: bool, id: u16, payload: &[u8]) -> Vec<u8> {
    let l3 = if v6 {
        L3Spec::V6 {
            src: "fd00::1".parse::<Ipv6Addr>().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            hop_limit: 64,
            ext: &[],
        }
    } else {
        L3Spec::V4 {
            src: Ipv4Addr::new(198, 18, 0, 1),
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
        sport: 4000,
        dport: 5000,
        payload,
        udp_csum: CsumMode::Correct,
    })
    .unwrap()
}

/// A payload length, fragment sizes (in 8-byte units) and an order.
fn arb_split() -> impl Strategy<Value = (bool, u16, Vec<u8>, Vec<u16>, Vec<usize>)> {
    (
        any::<bool>(),
        any::<u16>(),
        prop_oneof![1usize..200, 200usize..4000, 4000usize..65_000],
        proptest::collection::vec(1u16..400, 1..40),
        proptest::collection::vec(any::<usize>(), 40),
    )
        .prop_map(|(v6, id, len, sizes, order)| {
            let payload = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            (v6, id, payload, sizes, order)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_split_in_any_order_reassembles(
        (v6, id, payload, sizes, order) in arb_split()
    ) {
        // IPv6's payload length caps the datagram at 65 535 with the UDP header.
        let payload = &payload[..payload.len().min(65_000)];
        let orig = frame(v6, id, payload);
        let total = payload.len() as u32 + 8;
        let mut cuts = Vec::new();
        let mut at = 0u32;
        for s in sizes {
            at += u32::from(s) * 8;
            if at >= total {
                break;
            }
            cuts.push(at);
        }
        // At least two pieces (total >= 9: the payload is not empty).
        if cuts.is_empty() {
            cuts.push(8);
        }
        let mut fs = fragment_frame(&orig, &cuts, u32::from(id)).unwrap();
        prop_assert_eq!(fs.len(), cuts.len() + 1);
        // A permutation from `order` (Fisher-Yates).
        for i in 0..fs.len() {
            let j = i + order[i % order.len()] % (fs.len() - i);
            fs.swap(i, j);
        }
        let mut r = Reassembler::new(ReasmConf {
            max_datagrams: 4,
            max_frags: 64,
            high_thresh: 4 << 20,
            timeout: 1,
        });
        let stats = ReasmStats::default();
        let n = fs.len();
        let mut got = None;
        let mut released = 0usize;
        for (k, f) in fs.into_iter().enumerate() {
            let info = classify(&f).unwrap();
            let ts = f.len();
            match r.insert(0, &info, f, ts, &stats, &mut |_b| released += 1) {
                Verdict::Held => prop_assert!(k + 1 < n),
                Verdict::Complete(a) => {
                    prop_assert_eq!(k + 1, n);
                    got = assemble_frame(a, |b| &b[..]);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        prop_assert_eq!(released, 0);
        let got = got.unwrap();
        prop_assert_eq!(&got, &orig);
        let d = parse(&got, Offload::default()).unwrap();
        prop_assert_eq!(d.payload(&got).unwrap(), payload);
        prop_assert_eq!(r.in_progress(), 0);
        prop_assert_eq!(r.mem(), 0);
        prop_assert!(stats.balanced());
    }
}
