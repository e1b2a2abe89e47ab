//! `run --floor pipeline`: the minimal cross-core pipeline, the denominator
//! of the real pipeline's ratio (as `--bare` is for the RX core). The RX
//! side is [`PipelineFloor`] (driven by [`super::floor::RxFloor`]), the
//! consumer side [`consume_burst`].
//!
//! The RX lcore reads each frame's ethertype at offset 12 and the UDP
//! destination port where an untagged IPv4 (offset 36) or IPv6 (offset 56)
//! frame without options or extension headers has it, maps the port to a
//! socket with one read in a port-indexed table per family, groups the burst
//! per socket and enqueues each group into that socket's delivery ring with
//! one `enqueue_burst`. No parsing, no validation, no stage, no accounting.
//! Ring full, or no socket: freed and counted. The socket's usual consumer
//! dequeues in bursts, reads `pkt_len`, frees in bulk ([`consume_burst`],
//! which `consumer` calls instead of its handlers in this mode).
//!
//! `run --floor pipeline-checksums` chooses the ring as `pipeline` does but
//! first verifies the checksums in software (IPv4 header and UDP, IPv4 and
//! IPv6; a frame that fails is freed and counted as no socket), as any
//! validating engine must when the port sets no checksum flags (`net_pcap`
//! sets none): the cost of validation alone, without a parser or a hash.
//!
//! `run --floor pipeline-demux` is the same pipeline with the engine's own
//! parser and flow-table lookup choosing the ring (frames the parser
//! refuses, or that no socket takes, are freed and counted as no socket;
//! nothing else is counted): the mandatory work of a validating early demux,
//! so the pipeline's ratio splits into what any such engine pays here and
//! what staging and accounting add.
//!
//! `run --floor pipeline-rte-hash` verifies the checksums as
//! `pipeline-checksums` does, then chooses the ring with DPDK's `rte_hash`
//! (`hash_floor`: the destination address and port, bulk lookups per
//! burst): what a DPDK-native exact-match demux pays here, next to the
//! engine's parser and table in `pipeline-demux`.
//!
//! The tables are built once, when the RX lcore starts, from the sockets
//! configured then: sockets added or removed later (SIGHUP, the API) are
//! not seen, and the floor cannot tell apart two sockets of one family on
//! one port (the first configured gets the port). It is a benchmark mode.
use std::sync::Arc;

use std::mem::MaybeUninit;

use dpdk_sys::{MbufBurst, MbufRef};

use super::hash_floor::{HashFloor, HashFloorError};
use crate::counters::Counter;
use crate::flow_table::Snapshot;
use crate::handlers::CONSUME_BURST;
use crate::parse;
use crate::runtime::burst::{offload_hints, FreeList, MAX_BURST};
use crate::runtime::shared::{Shared, SocketEntry};
use crate::socket::Socket;

/// Where the ethertype is, and the UDP destination port of an untagged
/// IPv4 frame without options / IPv6 frame without extension headers.
const ETHERTYPE: usize = 12;
const DPORT_V4: usize = 14 + 20 + 2;
const DPORT_V6: usize = 14 + 40 + 2;

/// How the floor chooses a frame's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choose {
    /// `pipeline`: the destination port at its fixed offset.
    Port,
    /// `pipeline-checksums`: the same, once the checksums verify.
    PortChecked,
    /// `pipeline-demux`: the engine's parser and flow table.
    Demux,
    /// `pipeline-rte-hash`: the checksums, then DPDK's `rte_hash` over the
    /// bindings (`hash_floor`).
    RteHash,
}

/// One socket's share of the current burst.
struct Group {
    pkts: MbufBurst<MAX_BURST>,
}

/// An RX lcore's floor state, all allocated before its loop.
pub struct PipelineFloor {
    socks: Vec<Arc<Socket>>,
    /// Destination port -> socket index + 1 (0: none), per family.
    v4: Box<[u32]>,
    v6: Box<[u32]>,
    groups: Box<[Group]>,
    /// Socket indices with a non-empty group in this burst.
    touched: Box<[u32]>,
    ntouched: usize,
    /// Several RX lcores enqueue into the same rings: multi-producer
    /// enqueue and atomic counters; one: single-producer, plain adds.
    shared_rings: bool,
    choose: Choose,
    /// `pipeline-rte-hash`'s tables.
    hash: Option<HashFloor>,
    /// Socket id -> index + 1 (0: not a socket the floor knows), for the
    /// lookup's result.
    by_id: Box<[u32]>,
    /// `--alternate-floor`: the dynamic flag set on every mbuf this floor
    /// puts in a ring, which the pipeline's halves share (0: `--floor`).
    mark: u64,
}

impl PipelineFloor {
    /// Build the tables from the sockets registered now (allocates: call it
    /// before the loop).
    pub fn new(
        shared: &Shared,
        choose: Choose,
        lcore: u32,
        mark: u64,
    ) -> Result<PipelineFloor, HashFloorError> {
        let hash = match choose {
            Choose::RteHash => Some(HashFloor::new(shared, lcore)?),
            _ => None,
        };
        let socks: Vec<Arc<Socket>> = shared
            .sockets
            .load()
            .iter()
            .map(|e| Arc::clone(&e.sock))
            .collect();
        let mut v4 = vec![0u32; 1 << 16].into_boxed_slice();
        let mut v6 = vec![0u32; 1 << 16].into_boxed_slice();
        for (i, s) in socks.iter().enumerate() {
            let t = if s.conf.local.is_ipv4() {
                &mut v4
            } else {
                &mut v6
            };
            let slot = &mut t[usize::from(s.conf.local.port())];
            if *slot == 0 {
                *slot = i as u32 + 1;
            } else {
                log::warn!(
                    "--floor pipeline: port {} already maps to another socket; {} gets nothing",
                    s.conf.local.port(),
                    s.name()
                );
            }
            // Before the first enqueue: teardown must not release what the
            // floor never charged. Alternating with the pipeline, the ring
            // holds both, and the mark tells them apart instead.
            if mark == 0 {
                s.floor.activate();
            } else {
                s.floor.set_mark(mark);
            }
        }
        let max_id = socks.iter().map(|s| s.id as usize).max().unwrap_or(0);
        let mut by_id = vec![0u32; max_id + 1].into_boxed_slice();
        for (i, s) in socks.iter().enumerate() {
            by_id[s.id as usize] = i as u32 + 1;
        }
        let groups = (0..socks.len())
            .map(|_| Group {
                pkts: MbufBurst::new(),
            })
            .collect();
        let touched = vec![0u32; socks.len()].into_boxed_slice();
        Ok(PipelineFloor {
            socks,
            v4,
            v6,
            groups,
            touched,
            ntouched: 0,
            shared_rings: shared.rx.len() > 1,
            choose,
            hash,
            by_id,
            mark,
        })
    }

    /// The socket index a frame goes to: by the parser and the flow table
    /// (`demux`), or by the port tables.
    #[inline(always)]
    fn socket_of(&self, m: MbufRef<'_>, snap: Option<&Snapshot<Arc<Socket>>>) -> Option<usize> {
        // The first segment.
        let data = m.data();
        if let Some(snap) = snap {
            let mut d = MaybeUninit::uninit();
            let d = parse::parse_into(data, offload_hints(m.ol_flags()), &mut d).ok()?;
            let sock = snap.lookup(d.src, d.sport, d.dst, d.dport)?;
            let idx = *self.by_id.get(sock.id as usize)?;
            return idx.checked_sub(1).map(|i| i as usize);
        }
        let (port, v4) = fixed_dport(data)?;
        if self.choose == Choose::PortChecked && !checksums_verify(data, v4) {
            return None;
        }
        let table = if v4 { &self.v4 } else { &self.v6 };
        table[usize::from(port)]
            .checked_sub(1)
            .map(|i| i as usize)
    }

    /// One burst: demux, enqueue per socket, free and count the rest.
    #[inline]
    pub fn burst(
        &mut self,
        shared: &Shared,
        bufs: &mut MbufBurst<MAX_BURST>,
        free: &mut FreeList,
        no_socket: &Counter,
    ) {
        // One snapshot per burst, as the pipeline takes.
        let snap = (self.choose == Choose::Demux).then(|| shared.table.snapshot());
        // `pipeline-rte-hash`: the whole burst's ids first, in bulk lookups.
        let mut ids = [0u32; MAX_BURST];
        if let Some(h) = &self.hash {
            h.ids(bufs, &mut ids);
        }
        let mut missed = 0u64;
        for (k, mut m) in bufs.drain().enumerate() {
            let found = match &self.hash {
                // Bit 31: a checksum failed (no socket, as pipeline-checksums).
                Some(_) => self
                    .by_id
                    .get(ids[k] as usize)
                    .and_then(|i| i.checked_sub(1))
                    .map(|i| i as usize),
                None => self.socket_of(m.view(), snap.as_ref()),
            };
            let Some(i) = found else {
                missed += 1;
                free.push_mbuf(m);
                continue;
            };
            if self.mark != 0 {
                m.view_mut().add_ol_flags(self.mark);
            }
            let g = &mut self.groups[i];
            if g.pkts.is_empty() {
                self.touched[self.ntouched] = i as u32;
                self.ntouched += 1;
            }
            // A group holds at most one burst (MAX_BURST): each mbuf lands in one group once.
            if let Err(m) = g.pkts.push(m) {
                free.push_mbuf(m);
            }
        }
        for &i in &self.touched[..self.ntouched] {
            let (g, sock) = (&mut self.groups[i as usize], &self.socks[i as usize]);
            let n = g.pkts.len();
            let done = if self.shared_rings {
                sock.ring.enqueue_mp(&mut g.pkts)
            } else {
                sock.ring.enqueue(&mut g.pkts)
            };
            // Not enqueued (ring full): freed.
            g.pkts.clear();
            sock.floor
                .add(done as u64, (n - done) as u64, self.shared_rings);
        }
        self.ntouched = 0;
        if missed != 0 {
            no_socket.add(missed);
        }
    }
}

impl PipelineFloor {
    /// What every socket the floor knows has had put in its delivery ring,
    /// by the pipeline (`delivered`) and by the floor: read at each turn of
    /// `--alternate-floor` (every 2^27 cycles, not per burst).
    pub fn delivered_total(&self) -> u64 {
        self.socks
            .iter()
            .map(|s| s.stats().delivered + s.floor.delivered())
            .sum()
    }
}

/// The UDP destination port where an untagged IPv4 frame without options
/// or IPv6 frame without extension headers has it, and whether the frame
/// is IPv4 (by its ethertype); `None` for other ethertypes and short frames.
#[inline(always)]
pub(super) fn fixed_dport(data: &[u8]) -> Option<(u16, bool)> {
    let (at, v4) = match data.get(ETHERTYPE..ETHERTYPE + 2)? {
        [0x08, 0x00] => (DPORT_V4, true),
        [0x86, 0xdd] => (DPORT_V6, false),
        _ => return None,
    };
    match data.get(at..at + 2)? {
        &[hi, lo] => Some((u16::from_be_bytes([hi, lo]), v4)),
        _ => None,
    }
}

/// Where an untagged frame has its IP header, and its UDP header without
/// IPv4 options or IPv6 extension headers.
const IP: usize = 14;
const UDP_V4: usize = IP + 20;
const UDP_V6: usize = IP + 40;

/// `pipeline-checksums`: the IPv4 header checksum and the UDP checksum
/// (over the pseudo-header and the datagram the IP length gives) verify.
/// An IPv4 UDP checksum of 0 means none was sent (RFC 768); IPv6 requires
/// one (RFC 8200), so 0 there fails the sum.
#[inline(always)]
pub(super) fn checksums_verify(data: &[u8], v4: bool) -> bool {
    use crate::parse::{checksum, PROTO_UDP};
    if v4 {
        let Some(h) = data.get(IP..UDP_V4) else {
            return false;
        };
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let (Some(u), Ok(a)) = (
            data.get(UDP_V4..IP + total),
            <&[u8; 8]>::try_from(&h[12..20]),
        ) else {
            return false;
        };
        checksum::ipv4_header_verifies(h)
            && (u.get(6..8) == Some(&[0, 0])
                || checksum::pseudo_v4_wire(a, PROTO_UDP, u.len() as u16)
                    .add_bytes(u)
                    .verifies())
    } else {
        let Some(h) = data.get(IP..UDP_V6) else {
            return false;
        };
        let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
        let (Some(u), Ok(a)) = (
            data.get(UDP_V6..UDP_V6 + len),
            <&[u8; 32]>::try_from(&h[8..40]),
        ) else {
            return false;
        };
        checksum::pseudo_v6_wire(a, PROTO_UDP, len as u32)
            .add_bytes(u)
            .verifies()
    }
}

/// `run --floor pipeline`'s consumer: dequeue a burst, read `pkt_len`,
/// free in bulk. No handler, no rate, no latency, no release.
#[inline]
pub fn consume_burst(e: &SocketEntry, bufs: &mut MbufBurst<CONSUME_BURST>) -> usize {
    let n = e.sock.dequeue(bufs, CONSUME_BURST);
    if n > 0 {
        e.sock.consume_floor(bufs);
    }
    n
}
