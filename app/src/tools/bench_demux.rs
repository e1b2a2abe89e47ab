//! `udpdemux bench-demux`: an in-process micro-benchmark (no EAL) of the
//! parse + early-demux cost per packet for tables of 16 to 1 000 000
//! sockets. The whole-engine benchmarks run the binary on vdevs
//! (scripts/bench.sh); this one isolates the per-packet work the RX lcore
//! adds to the bare loop, through the library's public `parse` and
//! `flow_table`.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use udpdemux::flow_table::{Binding, FlowTable};
use udpdemux::parse::build::{self, CsumMode, ExtSpec, FragSpec, FrameSpec, L3Spec};
use udpdemux::parse::{self, CsumHint, Family, Offload};

use super::rng::SplitMix64;

/// Which traffic the frames carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Every frame to one of 16 sockets of the table (hot entries in cache).
    Hot,
    /// Frames spread uniformly over every socket (cache misses grow with the table).
    Spread,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DemuxResult {
    pub sockets: usize,
    pub family: String,
    pub traffic: String,
    pub ns_per_packet: f64,
    pub parse_only_ns: f64,
    /// Parse + lookup when the port validated the checksums (mbuf flags
    /// GOOD, as a NIC with RX checksum offload sets them): no software sums.
    pub offload_ns: f64,
}

const PORTS: usize = 50_000;

fn v4_addr(i: usize) -> (Ipv4Addr, u16) {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 1));
    (
        Ipv4Addr::from(base.wrapping_add((i / PORTS) as u32)),
        1024 + (i % PORTS) as u16,
    )
}

fn v6_addr(i: usize) -> (Ipv6Addr, u16) {
    let a = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1 + (i / PORTS) as u16);
    (a, 1024 + (i % PORTS) as u16)
}

/// Build `n` frames for the benchmark: IPv4 UDP with a 64-byte payload, or
/// IPv6 UDP behind a hop-by-hop and a destination-options header.
fn frames(n_sockets: usize, fam: Family, traffic: Traffic, count: usize) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(0x2545_F491_4F6C_DD1D);
    let payload = [0x5au8; 64];
    let hbh = [0u8; 6];
    let dst_opts = [0u8; 14];
    let ext = [
        ExtSpec::HopByHop { options: &hbh },
        ExtSpec::DestOpts { options: &dst_opts },
    ];
    (0..count)
        .map(|_| {
            let r = rng.next_u64();
            let idx = match traffic {
                Traffic::Hot => (r as usize % 16) * (n_sockets / 16).max(1) % n_sockets,
                Traffic::Spread => r as usize % n_sockets,
            };
            let l3 = match fam {
                Family::V4 => {
                    let (dst, _) = v4_addr(idx);
                    L3Spec::V4 {
                        src: Ipv4Addr::from(0xC612_0000u32 | (r >> 40) as u32 & 0xffff),
                        dst,
                        ttl: 64,
                        options: &[],
                        ident: 1,
                        frag: FragSpec::default(),
                    }
                }
                Family::V6 => {
                    let (dst, _) = v6_addr(idx);
                    L3Spec::V6 {
                        src: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, (r >> 48) as u16),
                        dst,
                        hop_limit: 64,
                        ext: &ext,
                    }
                }
            };
            let dport = match fam {
                Family::V4 => v4_addr(idx).1,
                Family::V6 => v6_addr(idx).1,
            };
            let spec = FrameSpec {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                vlans: &[],
                l3,
                sport: 1024 + (r as u16 % 60000),
                dport,
                payload: &payload,
                udp_csum: CsumMode::Correct,
            };
            build::to_vec(&spec).expect("bench frame")
        })
        .collect()
}

/// Parse + lookup ns per packet (software checksums, as on a vdev without offloads).
pub fn demux(n_sockets: usize, fam: Family, traffic: Traffic, packets: usize) -> DemuxResult {
    let table: FlowTable<u32> = FlowTable::new();
    table
        .update(|ed| {
            for i in 0..n_sockets {
                let local = match fam {
                    Family::V4 => {
                        let (a, p) = v4_addr(i);
                        SocketAddr::new(IpAddr::V4(a), p)
                    }
                    Family::V6 => {
                        let (a, p) = v6_addr(i);
                        SocketAddr::new(IpAddr::V6(a), p)
                    }
                };
                ed.insert(Binding::bound(local), i as u32)?;
            }
            Ok(())
        })
        .expect("bench table");
    let fr = frames(n_sockets, fam, traffic, 8192.min(packets));
    let soft = Offload::default();
    let good = Offload {
        ip: CsumHint::Good,
        l4: CsumHint::Good,
    };
    // As the RX lcore does (rx::process_burst): per burst of 32, parse every
    // frame into an array, then look every datagram up back to back.
    let mut sink = 0u64;
    let time = |with_lookup: bool, hints: Offload, sink: &mut u64| {
        let start = Instant::now();
        let mut done = 0usize;
        while done < packets {
            let mut dgrams = [const { std::mem::MaybeUninit::<parse::Datagram>::uninit() }; 32];
            for burst in fr.chunks(32) {
                if done >= packets {
                    break;
                }
                let snap = table.snapshot();
                let mut parsed: [Option<&parse::Datagram>; 32] = [None; 32];
                for ((f, slot), p) in burst.iter().zip(dgrams.iter_mut()).zip(parsed.iter_mut()) {
                    *p = parse::parse_into(f, hints, slot).ok().map(|d| &*d);
                }
                for d in parsed.iter().flatten() {
                    if with_lookup {
                        if let Some(v) = snap.lookup(d.src, d.sport, d.dst, d.dport) {
                            *sink = sink.wrapping_add(u64::from(*v));
                        }
                    } else {
                        *sink = sink.wrapping_add(u64::from(d.dport));
                    }
                }
                done += burst.len();
            }
        }
        start.elapsed().as_nanos() as f64 / done.max(1) as f64
    };
    time(true, soft, &mut sink);
    let parse_only = time(false, soft, &mut sink);
    let full = time(true, soft, &mut sink);
    let offload = time(true, good, &mut sink);
    std::hint::black_box(sink);
    DemuxResult {
        sockets: n_sockets,
        family: match fam {
            Family::V4 => "IPv4".into(),
            Family::V6 => "IPv6+2 ext hdrs".into(),
        },
        traffic: match traffic {
            Traffic::Hot => "16 hot sockets".into(),
            Traffic::Spread => "spread over all".into(),
        },
        ns_per_packet: full,
        parse_only_ns: parse_only,
        offload_ns: offload,
    }
}

/// The bench-demux table of docs/benchmarks.md (scripts/bench.sh's report):
/// every size, both families, both traffic shapes.
pub fn demux_table(sizes: &[usize], packets: usize) -> Vec<DemuxResult> {
    let mut out = Vec::new();
    for &n in sizes {
        for fam in [Family::V4, Family::V6] {
            for t in [Traffic::Hot, Traffic::Spread] {
                out.push(demux(n, fam, t, packets));
            }
        }
    }
    out
}

/// `udpdemux bench-demux`: every row of [`demux_table`], printed as a
/// Markdown table or as JSON.
pub fn run(sockets: &[usize], packets: usize, json: bool) {
    let rows = demux_table(sockets, packets);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialise")
        );
    } else {
        println!("| sockets | family | traffic | parse ns/pkt | parse + lookup ns/pkt | parse + lookup, checksums offloaded ns/pkt |");
        println!("|---:|---|---|---:|---:|---:|");
        for r in rows {
            println!(
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
                r.sockets, r.family, r.traffic, r.parse_only_ns, r.ns_per_packet, r.offload_ns
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_frames_parse_and_hit_their_sockets() {
        for fam in [Family::V4, Family::V6] {
            let r = demux(100, fam, Traffic::Spread, 1000);
            assert!(r.ns_per_packet > 0.0 && r.ns_per_packet.is_finite());
            for f in frames(100, fam, Traffic::Spread, 50) {
                let d = parse::parse(&f, Offload::default()).expect("valid frame");
                assert_eq!(d.family, fam);
            }
        }
    }
}
