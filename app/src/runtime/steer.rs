//! Steering fragments to one owner RX lcore. With several RX queues, RSS
//! (or af_packet's fanout) spreads one datagram's fragments over several
//! lcores: a NIC hashes a later fragment without ports (it has none), and
//! a first fragment often with them, so the pieces land on different
//! queues and would never meet in one lcore's table. Every UDP fragment is
//! therefore given to the lcore a hash of its reassembly key names (IPv4:
//! addresses, protocol, ID; IPv6: addresses, ID, as the kernel keys them),
//! whichever lcore received it: its own table, or the owner's ring.
//!
//! One `rte_ring` per RX lcore, multi-producer (every other RX lcore may
//! push), single-consumer (its lcore pops between polls and runs what it
//! pops through the ordinary burst path, where each fragment is now its
//! own to reassemble). Pushing costs one lock-free MP enqueue per steered
//! fragment; a full ring drops it, counted (`steer_full`): the datagram then
//! fails or expires in the owner's table like any datagram that lost a
//! fragment. The rings are made at start; nothing allocates or locks here.
use dpdk_sys::mbuf::{FreeList, MbufRef, RawMbuf};
use dpdk_sys::MbufRing;

use super::shared::{RxLcore, Shared};
use crate::counters::Counter;
use crate::reasm::{self, Key};

/// The rings and the hash key, in `Shared` when there are two RX lcores
/// or more and reassembly is on.
pub struct Steer {
    rings: Vec<MbufRing>,
    seed: u64,
}

/// One RX lcore's steering counters (it alone writes them).
#[derive(Debug, Default)]
pub struct SteerStats {
    /// Fragments this lcore received and pushed to their owner's ring.
    pub steered: Counter,
    /// Fragments the owner's ring refused (full): freed, counted here.
    pub full: Counter,
    /// Fragments this lcore popped from its own ring.
    pub taken: Counter,
    /// Fragments left in its ring at exit (freed).
    pub freed_at_exit: Counter,
}

impl Steer {
    /// The rings for `n` RX lcores of `size` fragments each; `None` when
    /// there is only one RX lcore (nothing to steer).
    pub fn new(n: usize, size: u32, numa: i32, seed: u64) -> dpdk_sys::Result<Option<Steer>> {
        if n < 2 {
            return Ok(None);
        }
        // Ring names are the process's (memzones): an engine started while
        // an earlier one's `Shared` is still held must not collide.
        static ENGINES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let e = ENGINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let flags = dpdk_sys::ring::SC_DEQ | dpdk_sys::ring::EXACT_SZ;
        let rings = (0..n)
            .map(|i| MbufRing::create(&format!("steer{e}_{i}"), size, numa, flags))
            .collect::<dpdk_sys::Result<Vec<_>>>()?;
        Ok(Some(Steer { rings, seed }))
    }

    /// The RX lcore (index) that reassembles datagrams with key `k`.
    #[inline]
    pub fn owner(&self, k: &Key) -> usize {
        owner_of(self.seed, self.rings.len(), k)
    }

    /// The ring of RX lcore `i`.
    pub fn ring(&self, i: usize) -> Option<&MbufRing> {
        self.rings.get(i)
    }
}

/// Which of `n` lcores owns key `k`, under hash key `seed`.
#[inline]
pub fn owner_of(seed: u64, n: usize, k: &Key) -> usize {
    let h = match *k {
        Key::V4 { src, dst, proto, id } => mix(
            seed,
            (u64::from(u32::from(src)) << 32) | u64::from(u32::from(dst)),
            (u64::from(proto) << 16) | u64::from(id),
        ),
        Key::V6 { src, dst, id } => {
            let (s, d) = (u128::from(src), u128::from(dst));
            let a = mix(seed, s as u64, (s >> 64) as u64);
            let b = mix(a, d as u64, (d >> 64) as u64);
            mix(b, u64::from(id), 6)
        }
    };
    // Multiply-shift onto 0..n (no division).
    ((u128::from(h) * n as u128) >> 64) as usize
}

/// Two words into one (a multiply-xorshift finaliser, splitmix64's).
#[inline]
fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z = seed ^ a.rotate_left(17) ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Sends the fragment `m` to its owner when that is another RX lcore:
/// true when it left this lcore (pushed, or refused and handed to `free`);
/// false when `me` owns it (or it is no UDP fragment this engine
/// reassembles), and the caller offers it to its own table.
///
/// # Safety
/// `m` is a live mbuf the caller owns exclusively; when true is returned
/// it is given up.
#[cold]
#[inline(never)]
pub unsafe fn to_owner(shared: &Shared, me: &RxLcore, m: *mut RawMbuf, free: &mut FreeList) -> bool {
    let Some(st) = shared.steer.as_ref() else {
        return false;
    };
    // SAFETY: ours alone (the contract), read only during the view.
    let v = unsafe { MbufRef::from_ptr(m) };
    if v.nb_segs() != 1 {
        return false;
    }
    let Some(info) = reasm::classify(v.data()) else {
        return false;
    };
    let owner = st.owner(&info.key);
    if owner == me.index {
        return false;
    }
    let Some(ring) = st.ring(owner) else {
        return false;
    };
    // SAFETY: a live mbuf we own; when taken the ring holds it (MP enqueue:
    // the ring has no SP flag), else it stays ours and is freed.
    if unsafe { ring.enqueue_raw(&[m]) } == 1 {
        me.steer.steered.add(1);
    } else {
        me.steer.full.add(1);
        // SAFETY: still ours (refused), given up here.
        unsafe { free.push(m) };
    }
    true
}

/// Teardown, after the RX lcores stopped: frees what is left in every
/// ring, counted per ring (`freed_at_exit`).
pub fn clear(shared: &Shared) {
    let Some(st) = shared.steer.as_ref() else {
        return;
    };
    for (ring, l) in st.rings.iter().zip(&shared.rx) {
        let mut b: dpdk_sys::MbufBurst<64> = dpdk_sys::MbufBurst::new();
        loop {
            let n = ring.dequeue(&mut b, 64);
            if n == 0 {
                break;
            }
            l.steer.freed_at_exit.add(n as u64);
            b.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IDs of one address pair spread over the lcores about evenly.
    #[test]
    fn ids_spread_over_the_lcores() {
        for n in [2usize, 3, 4] {
            let mut hits = vec![0u32; n];
            for id in 0..4000u16 {
                let k4 = Key::V4 {
                    src: "198.18.0.2".parse().unwrap(),
                    dst: "198.18.0.1".parse().unwrap(),
                    proto: 17,
                    id,
                };
                let k6 = Key::V6 {
                    src: "fd00::2".parse().unwrap(),
                    dst: "fd00::1".parse().unwrap(),
                    id: u32::from(id) * 7919,
                };
                for k in [k4, k6] {
                    let o = owner_of(12345, n, &k);
                    assert!(o < n);
                    assert_eq!(o, owner_of(12345, n, &k), "the same key, the same owner");
                    hits[o] += 1;
                }
            }
            let fair = 8000 / n as u32;
            for h in hits {
                assert!(h > fair * 8 / 10 && h < fair * 12 / 10, "{n}: {h} of {fair}");
            }
        }
    }
}
