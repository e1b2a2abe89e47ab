//! Fragmenting what the engine sends: the identification source and the
//! kernel's counters (`IpFragOKs`, `IpFragCreates`, `IpFragFails` and the
//! Ip6 ones), shared by every thread that sends (consumer lcores echoing,
//! the main lcore, `send_burst` callers), and the loop that writes one
//! datagram's fragments into fresh mbufs ([`crate::parse::fragment`]
//! writes each one).
//!
//! Identification: one counter per engine, each fragmented datagram takes
//! the next value (one atomic add per datagram, never per packet), mapped
//! through a bijection keyed at start (multiply by an odd constant, XOR a
//! random key), so values do not repeat within 2^16 (IPv4) or 2^32 (IPv6)
//! datagrams and are not the plain sequence an off-path host could guess
//! (RFC 7739's concern; the kernel hashes per destination instead).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use dpdk_sys::{Mbuf, MbufBurst};

use crate::parse::fragment::{copy_range, Fragmenter};
use crate::parse::Family;

/// The kernel's fragmentation counters, per family (index: `Family::index`).
#[derive(Debug, Default)]
pub struct FragStats {
    /// Datagrams fragmented and every fragment written (`FragOKs`).
    pub oks: [AtomicU64; 2],
    /// Fragments written (`FragCreates`).
    pub creates: [AtomicU64; 2],
    /// Datagrams that needed fragmenting and could not be (`FragFails`):
    /// no buffer for a fragment, or more fragments than a burst holds.
    pub fails: [AtomicU64; 2],
}

/// The engine's fragmentation state.
#[derive(Debug)]
pub struct FragOut {
    next: AtomicU32,
    key: u32,
    pub stats: FragStats,
}

/// Odd multipliers: multiplication by an odd number is a bijection modulo
/// 2^16 and 2^32.
const MUL32: u32 = 0x9e37_79b1;
const MUL16: u16 = 0x9e37;

impl FragOut {
    /// `seed` keys the identification mapping (the TSC at start will do).
    pub fn new(seed: u64) -> FragOut {
        let key = (seed ^ (seed >> 32)) as u32;
        FragOut {
            next: AtomicU32::new(key.rotate_left(13)),
            key,
            stats: FragStats::default(),
        }
    }

    /// A fresh identification for one datagram: the low 16 bits are the
    /// IPv4 one, all 32 the IPv6 one; neither repeats before its space is
    /// used up.
    pub fn next_ident(&self, family: Family) -> u32 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        match family {
            Family::V4 => u32::from((n as u16).wrapping_mul(MUL16) ^ self.key as u16),
            Family::V6 => n.wrapping_mul(MUL32) ^ self.key,
        }
    }

    /// Counts one fragmented datagram of `family`: `Some(frags)` written,
    /// or `None`, failed.
    pub fn count(&self, family: Family, r: Option<usize>) {
        let f = family.index();
        match r {
            Some(n) => {
                self.stats.oks[f].fetch_add(1, Ordering::Relaxed);
                self.stats.creates[f].fetch_add(n as u64, Ordering::Relaxed);
            }
            None => {
                self.stats.fails[f].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A snapshot for the exit report: (`FragOKs`, `FragCreates`,
    /// `FragFails`) of `family`.
    pub fn read(&self, family: Family) -> (u64, u64, u64) {
        let f = family.index();
        let s = &self.stats;
        (
            s.oks[f].load(Ordering::Relaxed),
            s.creates[f].load(Ordering::Relaxed),
            s.fails[f].load(Ordering::Relaxed),
        )
    }
}

/// Writes every fragment of `fr` into an mbuf from `alloc`, appended to
/// `out`; the IP payload is the concatenation of what `parts` yields (it
/// is walked once per fragment). `None`: a buffer or room in `out` was
/// missing; the fragments already in `out` stay there (the caller drops
/// them).
pub fn write_fragments<'a, I, const N: usize>(
    fr: &Fragmenter<'_>,
    parts: impl Fn() -> I,
    mut alloc: impl FnMut() -> Option<Mbuf>,
    out: &mut MbufBurst<N>,
) -> Option<usize>
where
    I: Iterator<Item = &'a [u8]>,
{
    let count = fr.count();
    if count > out.spare() {
        return None;
    }
    for i in 0..count {
        let len = fr.frame_len(i).and_then(|n| u16::try_from(n).ok())?;
        let mut m = alloc()?;
        let buf = m.append(len)?;
        let (at, r) = fr.write_headers(i, buf)?;
        copy_range(parts(), r.start, buf.get_mut(at)?)?;
        out.push(m).ok()?;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idents_do_not_repeat_within_their_space() {
        let f = FragOut::new(0x1234_5678_9abc_def0);
        let mut seen = vec![false; 1 << 16];
        for _ in 0..(1 << 16) {
            let v = f.next_ident(Family::V4);
            assert!(v <= 0xffff);
            assert!(!seen[v as usize], "repeated {v}");
            seen[v as usize] = true;
        }
        let g = FragOut::new(7);
        let a: Vec<u32> = (0..1000).map(|_| g.next_ident(Family::V6)).collect();
        let mut b = a.clone();
        b.sort_unstable();
        b.dedup();
        assert_eq!(b.len(), a.len());
        assert!(a.windows(2).any(|w| w[1] != w[0].wrapping_add(1)), "not the plain sequence");
    }

    #[test]
    fn counts_by_family() {
        let f = FragOut::new(1);
        f.count(Family::V4, Some(3));
        f.count(Family::V4, None);
        f.count(Family::V6, Some(45));
        assert_eq!(f.read(Family::V4), (1, 3, 1));
        assert_eq!(f.read(Family::V6), (1, 45, 0));
    }
}
