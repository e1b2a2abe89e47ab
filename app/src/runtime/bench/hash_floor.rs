//! `run --floor rte-hash`: the checksums floor with DPDK's own exact-match
//! table choosing the socket, the reference the RX core's lookup is read
//! against when the table is big.
//!
//! `--floor checksums` demuxes with one read in a port-indexed table, which
//! stays in cache whatever the traffic: it says nothing about what a lookup
//! among a million bindings costs here. This floor keeps its fixed-offset
//! reads and software checksums and replaces that read with what a DPDK
//! application would use: `rte_hash` (cuckoo, CRC32 hash) keyed by the
//! destination address and port, one table per family as l3fwd's
//! exact-match mode keeps them (16-byte IPv4 keys, 32-byte IPv6 keys, the
//! sizes DPDK compares with vector code), looked up with
//! `rte_hash_lookup_bulk_data` over each burst. It holds every binding the
//! flow table had when the RX lcore started: the configured sockets and the
//! `filler`'s ([`super::filler`]). Nothing is validated beyond the
//! checksums and nothing is counted but the frames that found no binding
//! (`floor_no_socket`); the socket id (bit 31: a checksum
//! failed) goes into the mbuf's metadata so the work cannot be skipped.
use std::net::IpAddr;

use dpdk_sys::hash::{ExactTable, LOOKUP_BULK_MAX};
use dpdk_sys::MbufBurst;

use super::pipeline_floor::{checksums_verify, fixed_dport};
use crate::runtime::burst::MAX_BURST;
use crate::runtime::shared::Shared;

/// Where an untagged frame has its destination address.
const DST_V4: usize = 14 + 16;
const DST_V6: usize = 14 + 24;

type KeyV4 = [u8; 16];
type KeyV6 = [u8; 32];

#[inline(always)]
fn key_v4(addr: [u8; 4], port: [u8; 2]) -> KeyV4 {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&addr);
    k[4..6].copy_from_slice(&port);
    k
}

#[inline(always)]
fn key_v6(addr: [u8; 16], port: [u8; 2]) -> KeyV6 {
    let mut k = [0u8; 32];
    k[..16].copy_from_slice(&addr);
    k[16..18].copy_from_slice(&port);
    k
}

/// An RX lcore's two tables, built before its loop.
pub struct HashFloor {
    v4: ExactTable<16>,
    v6: ExactTable<32>,
}

/// Why the floor's tables could not be built (the DPDK error, with the fix).
#[derive(Debug, thiserror::Error)]
#[error("--floor rte-hash: {0} (raise eal.memory_mb: the tables take about 64 bytes per binding)")]
pub struct HashFloorError(dpdk_sys::DpdkError);

impl HashFloor {
    /// Tables of the bindings registered now (allocates: call it before the loop).
    pub fn new(shared: &Shared, lcore: u32) -> Result<HashFloor, HashFloorError> {
        let entries = shared.sockets.load();
        let socks: Vec<(IpAddr, u16, u32)> = entries
            .iter()
            .map(|e| (e.sock.conf.local.ip(), e.sock.conf.local.port(), e.sock.id))
            .collect();
        let filler = entries
            .iter()
            .find(|e| e.sock.name() == "filler")
            .map(|e| e.sock.id);
        // The filler's own binding is among the sockets; these are the rest.
        let extra = filler.map_or(0, |_| {
            shared
                .filler_handles
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len() as u32
        });
        let n4 = socks.iter().filter(|s| s.0.is_ipv4()).count() as u32 + extra;
        let n6 = socks.iter().filter(|s| s.0.is_ipv6()).count() as u32;
        let node = dpdk_sys::lcore::socket_id(lcore) as i32;
        let mut v4 = ExactTable::<16>::create(&format!("floor_h4_{lcore}"), n4, node)
            .map_err(HashFloorError)?;
        let mut v6 = ExactTable::<32>::create(&format!("floor_h6_{lcore}"), n6, node)
            .map_err(HashFloorError)?;
        for &(ip, port, id) in &socks {
            let p = port.to_be_bytes();
            match ip {
                IpAddr::V4(a) => v4.insert(&key_v4(a.octets(), p), u64::from(id)),
                IpAddr::V6(a) => v6.insert(&key_v6(a.octets(), p), u64::from(id)),
            }
            .map_err(HashFloorError)?;
        }
        if let Some(id) = filler {
            for i in 1..=extra {
                let a = super::filler::binding_addr(i);
                if let IpAddr::V4(ip) = a.ip() {
                    v4.insert(&key_v4(ip.octets(), a.port().to_be_bytes()), u64::from(id))
                        .map_err(HashFloorError)?;
                }
            }
        }
        log::info!("--floor rte-hash: {n4} IPv4 and {n6} IPv6 bindings in rte_hash");
        Ok(HashFloor { v4, v6 })
    }

    /// One burst: each frame's socket id (bit 31: a checksum failed) into
    /// its metadata. How many frames found no binding (or had no key at
    /// the fixed offsets).
    #[inline]
    pub fn burst(&self, bufs: &mut MbufBurst<MAX_BURST>) -> u64 {
        let mut ids = [0u32; MAX_BURST];
        let misses = self.ids(bufs, &mut ids);
        for (i, &id) in ids.iter().enumerate().take(bufs.len()) {
            let Some(m) = bufs.get_mut(i) else {
                break;
            };
            // Our mbuf, from an engine pool (private area of PRIV_SIZE).
            crate::meta::dgram_mut(m).socket = id;
        }
        misses
    }

    /// Each frame's socket id into `ids` (0: none; bit 31: a checksum
    /// failed): keys gathered per family, each family's looked up in
    /// `rte_hash_lookup_bulk_data` calls of at most 64. How many frames
    /// found no binding.
    #[inline]
    pub fn ids(&self, bufs: &mut MbufBurst<MAX_BURST>, ids: &mut [u32; MAX_BURST]) -> u64 {
        let (mut at, mut misses) = (0, 0);
        while at < bufs.len() {
            let end = (at + LOOKUP_BULK_MAX).min(bufs.len());
            misses += self.chunk(bufs, at, end, &mut ids[at..end]);
            at = end;
        }
        misses
    }

    #[inline(always)]
    fn chunk(&self, bufs: &mut MbufBurst<MAX_BURST>, begin: usize, end: usize, ids: &mut [u32]) -> u64 {
        let mut k4: [KeyV4; LOOKUP_BULK_MAX] = [[0; 16]; LOOKUP_BULK_MAX];
        let mut k6: [KeyV6; LOOKUP_BULK_MAX] = [[0; 32]; LOOKUP_BULK_MAX];
        // Burst index of each key, and the checksum verdict of each frame.
        let (mut i4, mut i6) = ([0u8; LOOKUP_BULK_MAX], [0u8; LOOKUP_BULK_MAX]);
        let (mut n4, mut n6) = (0usize, 0usize);
        let mut bad = [0u32; LOOKUP_BULK_MAX];
        for i in begin..end {
            let Some(m) = bufs.get_mut(i) else {
                break;
            };
            let data = m.view().data();
            let Some((port, v4)) = fixed_dport(data) else {
                continue;
            };
            let p = port.to_be_bytes();
            bad[i - begin] = u32::from(!checksums_verify(data, v4)) << 31;
            // i - begin < LOOKUP_BULK_MAX: fits a u8.
            if v4 {
                if let Some(&a) = data.get(DST_V4..).and_then(|d| d.first_chunk::<4>()) {
                    (k4[n4], i4[n4]) = (key_v4(a, p), (i - begin) as u8);
                    n4 += 1;
                }
            } else if let Some(&a) = data.get(DST_V6..).and_then(|d| d.first_chunk::<16>()) {
                (k6[n6], i6[n6]) = (key_v6(a, p), (i - begin) as u8);
                n6 += 1;
            }
        }
        ids.fill(0);
        let mut values = [0u64; LOOKUP_BULK_MAX];
        let hits = self.v4.lookup_bulk(&k4[..n4], &mut values);
        let mut found = u64::from(hits.count_ones());
        for (k, &i) in i4[..n4].iter().enumerate() {
            if hits >> k & 1 != 0 {
                ids[usize::from(i)] = values[k] as u32;
            }
        }
        let hits = self.v6.lookup_bulk(&k6[..n6], &mut values);
        found += u64::from(hits.count_ones());
        for (k, &i) in i6[..n6].iter().enumerate() {
            if hits >> k & 1 != 0 {
                ids[usize::from(i)] = values[k] as u32;
            }
        }
        for (id, &b) in ids.iter_mut().zip(&bad) {
            *id |= b;
        }
        (end - begin) as u64 - found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hold_address_then_port_then_zeros() {
        let k = key_v4([198, 18, 1, 1], 53u16.to_be_bytes());
        assert_eq!(&k[..6], &[198, 18, 1, 1, 0, 53]);
        assert!(k[6..].iter().all(|&b| b == 0));
        let a: [u8; 16] = "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let k = key_v6(a, 443u16.to_be_bytes());
        assert_eq!(&k[..16], &a);
        assert_eq!(&k[16..18], &[1, 187]);
        assert!(k[18..].iter().all(|&b| b == 0));
    }
}
