//! The reassembler (`udpdemux::reasm`) driven by a sequence of operations:
//! raw frames (anything `classify` takes), fragments of valid datagrams
//! split where the input says and offered in the order it says (some
//! repeated, some left out, offsets rewritten), and time passing. Besides
//! "no panic": memory never above the bound, the fragment books balance
//! (offered = merged + dropped + held, and every buffer comes back exactly
//! once), and a clean round (every fragment of one datagram, in any order,
//! into an empty table) gives back the original frame.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use udpdemux::reasm::{
    assemble_frame, classify, fragment_frame, ReasmConf, ReasmStats, Reassembler, Verdict,
};

const BOUND: usize = 24 * 1024;

fn datagram(v6: bool, id: u16, len: usize, fill: u8) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ fill).collect();
    let l3 = if v6 {
        L3Spec::V6 {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1 + (id & 3)),
            dst: "fd00::2".parse().unwrap(),
            hop_limit: 64,
            ext: &[],
        }
    } else {
        L3Spec::V4 {
            src: Ipv4Addr::new(198, 18, 0, 1 + (id & 3) as u8),
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
        sport: 1,
        dport: 2,
        payload: &payload,
        udp_csum: CsumMode::Correct,
    })
    .unwrap()
}

/// Cuts (multiples of 8, ascending) inside `total` bytes from `b`.
fn cuts(b: &[u8], total: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for &x in b {
        at += (usize::from(x) % 64 + 1) * 8;
        if at >= total {
            break;
        }
        out.push(at as u32);
    }
    out
}

struct Run {
    r: Reassembler<Vec<u8>>,
    stats: ReasmStats,
    offered: u64,
    back: u64,
}

impl Run {
    fn offer(&mut self, now: u64, f: Vec<u8>) -> Option<Vec<u8>> {
        let info = classify(&f)?;
        self.offered += 1;
        let ts = f.len() + 64;
        let back = &mut self.back;
        let out = match self
            .r
            .insert(now, &info, f, ts, &self.stats, &mut |_b| *back += 1)
        {
            Verdict::Complete(a) => {
                let n = a.pieces.len() as u64;
                let frame = assemble_frame(a, |b| &b[..]).expect("complete pieces assemble");
                self.back += n;
                Some(frame)
            }
            _ => None,
        };
        assert!(self.r.mem() <= BOUND);
        assert!(self.stats.balanced());
        assert_eq!(self.offered, self.back + self.stats.frags_held.get());
        out
    }
}

fuzz_target!(|data: &[u8]| {
    let conf = ReasmConf {
        max_datagrams: 4,
        max_frags: 12,
        high_thresh: BOUND,
        timeout: 1000,
    };
    let mut run = Run {
        r: Reassembler::new(conf),
        stats: ReasmStats::default(),
        offered: 0,
        back: 0,
    };
    let mut now = 0u64;
    let mut it = data;
    while let Some((&op, rest)) = it.split_first() {
        it = rest;
        match op % 4 {
            // A raw frame.
            0 => {
                let Some((&n, rest)) = it.split_first() else {
                    break;
                };
                let n = (usize::from(n) * 8).min(rest.len());
                let (frame, rest) = rest.split_at(n);
                it = rest;
                if let Some(f) = run.offer(now, frame.to_vec()) {
                    assert!(classify(&f).is_none());
                }
            }
            // Fragments of a valid datagram, picked and edited by the input.
            1 => {
                if it.len() < 6 {
                    break;
                }
                let (h, rest) = it.split_at(6);
                let v6 = h[0] & 1 == 1;
                let len = usize::from(u16::from_le_bytes([h[1], h[2]])) % 9000 + 1;
                let id = u16::from(h[3] & 7);
                let frame = datagram(v6, id, len, h[4]);
                let ncut = usize::from(h[5] % 8);
                let (c, rest) = rest.split_at(ncut.min(rest.len()));
                it = rest;
                let Some(fs) = fragment_frame(&frame, &cuts(c, len + 8), u32::from(id)) else {
                    continue;
                };
                let picks = fs.len() + 2;
                let (p, rest) = it.split_at(picks.min(it.len()));
                it = rest;
                for &b in p {
                    let mut f = fs[usize::from(b) % fs.len()].clone();
                    if b & 0x80 != 0 {
                        // Rewrite the offset field's low byte.
                        let at = if v6 { 14 + 40 + 3 } else { 14 + 7 };
                        f[at] ^= b & 0x78;
                        if !v6 {
                            let mut ip =
                                udpdemux::parse::ipv4::Ipv4Packet::new_checked(&mut f[14..])
                                    .unwrap();
                            ip.fill_checksum();
                        }
                    }
                    if let Some(out) = run.offer(now, f) {
                        // No longer a fragment (leftovers of earlier
                        // datagrams with the same key may be in it, as in
                        // the kernel: the clean round checks the bytes).
                        assert!(classify(&out).is_none());
                        let _ = udpdemux::parse::parse(&out, Default::default());
                    }
                }
            }
            // Time passes.
            2 => {
                let Some((&t, rest)) = it.split_first() else {
                    break;
                };
                it = rest;
                now += u64::from(t) * 8;
                if run.r.due(now) {
                    let back = &mut run.back;
                    run.r.expire(now, &run.stats, &mut |_b| *back += 1);
                }
            }
            // A clean round: every fragment, in an order from the input.
            _ => {
                if it.len() < 5 {
                    break;
                }
                let (h, rest) = it.split_at(5);
                let v6 = h[0] & 1 == 1;
                let len = usize::from(u16::from_le_bytes([h[1], h[2]])) % 9000 + 1;
                let frame = datagram(v6, 9, len, h[3]);
                let (c, rest) = rest.split_at(usize::from(h[4] % 8).min(rest.len()));
                it = rest;
                let Some(mut fs) = fragment_frame(&frame, &cuts(c, len + 8), 9) else {
                    continue;
                };
                if fs.len() < 2 {
                    continue;
                }
                let (o, rest) = it.split_at(fs.len().min(it.len()));
                it = rest;
                for (i, &b) in o.iter().enumerate() {
                    let j = i + usize::from(b) % (fs.len() - i);
                    fs.swap(i, j);
                }
                let mut clean = Run {
                    r: Reassembler::new(conf),
                    stats: ReasmStats::default(),
                    offered: 0,
                    back: 0,
                };
                let n = fs.len();
                let mut got = None;
                for (k, f) in fs.into_iter().enumerate() {
                    let out = clean.offer(0, f);
                    assert_eq!(out.is_some(), k + 1 == n);
                    got = got.or(out);
                }
                assert_eq!(got.as_deref(), Some(&frame[..]));
            }
        }
    }
    let back = &mut run.back;
    run.r.clear(&run.stats, &mut |_b| *back += 1);
    assert_eq!(run.offered, run.back);
    assert!(run.stats.balanced());
});
