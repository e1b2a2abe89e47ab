//! `run --floor`: what an RX lcore does with a burst in a floor mode.
//!
//! - `minimal` and `checksums` (`floor_burst`): a lower bound for the RX
//!   core, against which `--demux-only` is read;
//! - `rte-hash` ([`HashFloor`]): `checksums` with DPDK's own exact-match
//!   table in place of the port-indexed one, what the lookup of a big
//!   table costs a DPDK application here;
//! - `pipeline`, `pipeline-checksums`, `pipeline-demux` and
//!   `pipeline-rte-hash` ([`PipelineFloor`]): the minimal
//!   cross-core pipeline, against which the whole pipeline is read.
//!
//! The RX loop builds one [`RxFloor`] before it polls and hands it every
//! burst; the engine's own modes have none.
use dpdk_sys::MbufBurst;

use super::hash_floor::{HashFloor, HashFloorError};
use super::pipeline_floor::{checksums_verify, fixed_dport, Choose, PipelineFloor};
use crate::counters::Counter;
use crate::runtime::burst::{FreeList, MAX_BURST};
use crate::runtime::shared::{Floor, Mode, Shared};

/// An RX lcore's floor state, all allocated before its loop.
pub enum RxFloor {
    /// `--floor minimal|checksums`: the port-indexed demux table.
    Port { ports: Vec<u32>, checksums: bool },
    /// `--floor rte-hash`: the bindings in `rte_hash`.
    Hash(HashFloor),
    /// `--floor pipeline|pipeline-checksums|pipeline-demux|pipeline-rte-hash`.
    Pipeline(PipelineFloor),
}

impl RxFloor {
    /// The state `mode` needs, if it is a floor, for RX lcore `lcore`
    /// (allocates: call it before the loop, which must not).
    pub fn new(shared: &Shared, mode: Mode, lcore: u32) -> Result<Option<RxFloor>, HashFloorError> {
        // `--alternate-floor`: the floor's half marks what it enqueues.
        let (f, mark) = match mode {
            Mode::Floor(f) => (f, 0),
            Mode::Alternate(f) => (f, shared.floor_mark),
            _ => return Ok(None),
        };
        Ok(Some(match f {
            Floor::RteHash => RxFloor::Hash(HashFloor::new(shared, lcore)?),
            Floor::Minimal | Floor::Checksums => RxFloor::Port {
                // The floor's demux table, indexed by destination port.
                ports: (0..=u32::from(u16::MAX)).collect(),
                checksums: f == Floor::Checksums,
            },
            Floor::Pipeline => RxFloor::Pipeline(PipelineFloor::new(shared, Choose::Port, lcore, mark)?),
            Floor::PipelineChecksums => {
                RxFloor::Pipeline(PipelineFloor::new(shared, Choose::PortChecked, lcore, mark)?)
            }
            Floor::PipelineDemux => {
                RxFloor::Pipeline(PipelineFloor::new(shared, Choose::Demux, lcore, mark)?)
            }
            Floor::PipelineRteHash => {
                RxFloor::Pipeline(PipelineFloor::new(shared, Choose::RteHash, lcore, mark)?)
            }
        }))
    }

    /// What the pipeline floors' sockets have had put in their rings, by
    /// the floor and the pipeline (0 for the other floors).
    pub fn delivered_total(&self) -> u64 {
        match self {
            RxFloor::Pipeline(pf) => pf.delivered_total(),
            _ => 0,
        }
    }

    /// One received burst, all of whose mbufs are ours: each ends freed
    /// (or, in the pipeline floors, in a socket's delivery ring). Frames
    /// no socket takes in the pipeline floors and in `rte-hash` are counted
    /// in `no_socket`.
    #[inline]
    pub fn burst(
        &mut self,
        shared: &Shared,
        bufs: &mut MbufBurst<MAX_BURST>,
        free: &mut FreeList,
        no_socket: &Counter,
    ) {
        match self {
            RxFloor::Port { ports, checksums } => {
                floor_burst(bufs, ports, *checksums);
                bufs.clear();
            }
            RxFloor::Hash(h) => {
                no_socket.add(h.burst(bufs));
                bufs.clear();
            }
            RxFloor::Pipeline(pf) => {
                pf.burst(shared, bufs, free, no_socket);
                free.flush();
            }
        }
    }
}

/// `run --floor minimal|checksums`: a lower bound for the RX core, so that
/// its cost over the bare loop can be told apart from what any early demux
/// must pay here. Per frame it reads the ethertype and the UDP destination
/// port where an untagged IPv4 frame without options (or IPv6 frame
/// without extension headers) has it, reads a socket id from a table
/// indexed by that port (the cheapest demux there is: no addresses, no
/// hash, one read that stays in cache) and writes the id into the mbuf's
/// metadata. No header is validated and nothing is counted. With
/// `checksums` it also verifies the IPv4 header checksum and the UDP
/// checksum in software, both families (`pipeline_floor`'s
/// `checksums_verify`), as the parser must when the port sets no offload
/// flags (`net_pcap` sets none); the verdict goes into the written id so
/// that the work cannot be optimised away.
fn floor_burst(bufs: &mut MbufBurst<MAX_BURST>, ports: &[u32], checksums: bool) {
    for i in 0..bufs.len() {
        let Some(m) = bufs.get_mut(i) else {
            break;
        };
        // The first segment.
        let data = m.view().data();
        let Some((port, v4)) = fixed_dport(data) else {
            continue;
        };
        let mut id = ports.get(usize::from(port)).copied().unwrap_or(0);
        if checksums {
            id |= u32::from(!checksums_verify(data, v4)) << 31;
        }
        // Our mbuf (the dynfield, or the private area of an engine pool).
        crate::meta::dgram_mut(m).socket = id;
    }
}
