//! Micro-benchmark of software checksum verification on the RX parse path.
//!
//!     CARGO_TARGET_DIR=/work/target-csum cargo run --release -j1 --example csum_bench
//!
//! For a 106-byte IPv4 UDP frame (20-byte header, 64-byte payload) and a
//! 126-byte IPv6 UDP frame (no extension headers, 64-byte payload) it times
//! `parse::parse` with checksum hints `Unknown` (software verification) and
//! `Good` (skipped); the difference is what verification costs per packet.
//! It also times the checksum kernels alone (header sum, pseudo-header +
//! UDP sum) through the public `checksum` API. Frames are distinct (random
//! addresses, ports, payloads) and few enough to stay in L1, so this is the
//! compute cost, not memory. Prints ns/op; the minimum of several rounds is
//! reported since this machine is shared. No assertions on timing. The
//! Unknown - Good difference also moves with inlining and code layout (it
//! is not only checksum instructions), so compare the absolute parse times
//! too.
//!
//! On a 2-vCPU AMD EPYC (Zen 4) VM, before and after the checksum rework
//! (lane sums instead of an add-with-carry loop, 20-byte IPv4 header fast
//! path, pseudo-headers from the header bytes, sum inlined into parse_v6):
//!
//! | frame | parse, sw verify | parse, hints Good | difference |
//! |---|---:|---:|---:|
//! | IPv4 106 B, before | 13.5-13.8 ns | 5.7 ns | 7.8-8.1 ns |
//! | IPv4 106 B, after | 10.5-10.7 ns | 5.5 ns | 5.0-5.2 ns |
//! | IPv6 126 B, before | 24.0-24.1 ns | 15.1-15.3 ns | 8.7-9.0 ns |
//! | IPv6 126 B, after | 13.7-14.3 ns | 10.9 ns | 2.8-3.4 ns |
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use udpdemux::parse::checksum::{self, Sum};
use udpdemux::parse::{self, CsumHint, Family, Offload};

// The seeded generator of the command's tools (`udpdemux gen`,
// `bench-demux`): part of the binary, not the library, so included here.
#[path = "../src/tools/rng.rs"]
#[allow(dead_code)]
mod rng;
use rng::SplitMix64;

const FRAMES: usize = 128;
const ITERS: usize = 40_000; // passes over FRAMES per round
const ROUNDS: usize = 9;

fn frames(fam: Family) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(0x2545_F491_4F6C_DD1D);
    (0..FRAMES)
        .map(|_| {
            let mut payload = [0u8; 64];
            for c in payload.chunks_exact_mut(8) {
                c.copy_from_slice(&rng.next_u64().to_ne_bytes());
            }
            let r = rng.next_u64();
            let l3 = match fam {
                Family::V4 => L3Spec::V4 {
                    src: Ipv4Addr::from(0xC612_0000u32 | (r as u32 & 0xffff)),
                    dst: Ipv4Addr::from(0xC612_0000u32 | ((r >> 16) as u32 & 0xffff)),
                    ttl: 64,
                    options: &[],
                    ident: (r >> 32) as u16,
                    frag: FragSpec::default(),
                },
                Family::V6 => L3Spec::V6 {
                    src: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, (r >> 32) as u16, r as u16),
                    dst: Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, (r >> 48) as u16, (r >> 16) as u16),
                    hop_limit: 64,
                    ext: &[],
                },
            };
            let spec = FrameSpec {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                vlans: &[],
                l3,
                sport: 1024 + (r >> 40) as u16 % 60000,
                dport: 5000,
                payload: &payload,
                udp_csum: CsumMode::Correct,
            };
            build::to_vec(&spec).expect("bench frame")
        })
        .collect()
}

/// Minimum over rounds of ns per call of `f` over every frame.
fn time(fr: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> u64) -> f64 {
    let mut best = f64::INFINITY;
    let mut sink = 0u64;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..ITERS {
            for frame in fr {
                sink = sink.wrapping_add(f(black_box(frame.as_slice())));
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (ITERS * fr.len()) as f64;
        best = best.min(ns);
    }
    black_box(sink);
    best
}

fn parse_cost(fr: &[Vec<u8>], hint: CsumHint) -> f64 {
    let hints = Offload { ip: hint, l4: hint };
    time(fr, |f| match parse::parse(f, black_box(hints)) {
        Ok(d) => u64::from(d.dport) + u64::from(d.payload_len),
        Err(_) => 1 << 32,
    })
}

fn main() {
    let v4 = frames(Family::V4);
    let v6 = frames(Family::V6);
    assert_eq!(v4[0].len(), 106);
    assert_eq!(v6[0].len(), 126);
    for (name, fr) in [("IPv4 106 B", &v4), ("IPv6 126 B", &v6)] {
        for f in fr.iter() {
            parse::parse(f, Offload::default()).expect("valid frame");
        }
        let sw = parse_cost(fr, CsumHint::Unknown);
        let hw = parse_cost(fr, CsumHint::Good);
        println!(
            "{name}: parse sw-verify {sw:6.2} ns  hints Good {hw:6.2} ns  => verify {:5.2} ns/pkt",
            sw - hw
        );
    }
    // Kernels alone, through the public API only (same code before and
    // after any internal change): IPv4 header, then pseudo + UDP segment.
    let ip4 = time(&v4, |f| {
        u64::from(Sum::new().add_bytes(&f[14..34]).verifies())
    });
    let udp4 = time(&v4, |f| {
        let a = |o: usize| Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
        let len = u16::from_be_bytes([f[38], f[39]]);
        let s = checksum::pseudo_v4(a(26), a(30), 17, len);
        u64::from(s.combine(Sum::new().add_bytes(&f[34..])).verifies())
    });
    let udp6 = time(&v6, |f| {
        let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&f[o..o + 16]).unwrap());
        let len = u16::from_be_bytes([f[58], f[59]]);
        let s = checksum::pseudo_v6(&a(22), &a(38), 17, u32::from(len));
        u64::from(s.combine(Sum::new().add_bytes(&f[54..])).verifies())
    });
    println!("kernels (public API): v4 header {ip4:5.2} ns, v4 pseudo+udp {udp4:5.2} ns, v6 pseudo+udp {udp6:5.2} ns");
    extra(&v4, &v6);
}

/// The functions the parser now calls: IPv4 header fast path, and the
/// pseudo-headers taken straight from the header bytes.
fn extra(v4: &[Vec<u8>], v6: &[Vec<u8>]) {
    let ip4 = time(v4, |f| {
        u64::from(checksum::ipv4_header_verifies(&f[14..34]))
    });
    let udp4 = time(v4, |f| {
        let addrs = <&[u8; 8]>::try_from(&f[26..34]).unwrap();
        let len = u16::from_be_bytes([f[38], f[39]]);
        let s = checksum::pseudo_v4_wire(addrs, 17, len);
        u64::from(s.add_bytes(&f[34..]).verifies())
    });
    let udp6 = time(v6, |f| {
        let addrs = <&[u8; 32]>::try_from(&f[22..54]).unwrap();
        let len = u16::from_be_bytes([f[58], f[59]]);
        let s = checksum::pseudo_v6_wire(addrs, 17, u32::from(len));
        u64::from(s.add_bytes(&f[54..]).verifies())
    });
    println!("kernels (wire-byte API): v4 header {ip4:5.2} ns, v4 pseudo+udp {udp4:5.2} ns, v6 pseudo+udp {udp6:5.2} ns");
}
