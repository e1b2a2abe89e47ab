//! One copy-on-write shard of the flow table's maps: open addressing with
//! linear probing, where the slot a key's probe starts at is a function of
//! its hash alone. So the RX lcore can ask for a burst's slots before it
//! looks them up ([`Shard::prefetch`], a few lookups ahead of each), and
//! the misses of its lookups overlap instead of following each other, as
//! DPDK's `rte_hash_lookup_bulk` does in stages.
//!
//! hashbrown, used before, keeps where a key's bucket is to itself: each
//! lookup in a million-binding table paid two dependent misses (the control
//! bytes, then the entry), about half the RX core's time with traffic spread
//! over 4096 bindings (`perf annotate` of `rx::process_burst`). Here a hit
//! is usually one line: the entry stores its hash beside the key, and at
//! most 5/8 of the slots are full, so a hit probes 1.8 slots on average
//! ((1 + 1/(1 - a)) / 2 at load a).
//!
//! An entry of an IPv4 binding is 32 bytes (the stored hash never zero, so
//! `Option` needs no tag word; a reuseport group boxed), and a big table's
//! slots start on a 2 MiB boundary, so no entry straddles two cache lines:
//! at 40 bytes half of them did, and a hit read a second, unprefetched
//! line. `--demux-only` with 1 000 000 bindings: 0.95-1.00x the ns a
//! datagram (docs/benchmarks.md).
//!
//! Removal shifts the following entries of the run back instead of leaving
//! tombstones (Knuth's algorithm R), so lookups never walk past dead slots
//! and a table that churns does not need rebuilding.
use std::num::NonZeroU64;

use allocator_api2::vec::Vec;
use dpdk_sys::hugepage_alloc::HugePageAlloc;

/// At most this many eighths of the slots are full.
const MAX_LOAD_EIGHTHS: usize = 5;
/// The first allocation's slots.
const MIN_SLOTS: usize = 8;

#[derive(Clone)]
struct Entry<K, T> {
    /// The key's hash with its top bit set ([`tag`]): never zero, so an
    /// empty slot (`None`) costs no extra tag word.
    hash: NonZeroU64,
    key: K,
    value: T,
}

/// What an entry stores of `hash`: the same low bits (the probe's start),
/// bit 63 set. Two keys whose hashes differ only in bit 63 compare equal
/// here and are told apart by the key, as any collision is.
#[inline(always)]
fn tag(hash: u64) -> NonZeroU64 {
    NonZeroU64::new(hash | 1 << 63).unwrap_or(NonZeroU64::MAX)
}

/// A map from `K` to `T` whose caller supplies every key's hash (the flow
/// table's keyed hash, also used to pick the shard).
#[derive(Clone)]
pub(super) struct Shard<K, T> {
    /// A power of two long, or empty before the first insert.
    slots: Vec<Option<Entry<K, T>>, HugePageAlloc>,
    len: usize,
}

/// Bytes a slot takes for these key and value types.
#[cfg(test)]
pub(super) const fn slot_size<K, T>() -> usize {
    std::mem::size_of::<Option<Entry<K, T>>>()
}

impl<K: Eq, T> Shard<K, T> {
    pub(super) fn new() -> Self {
        Self {
            slots: Vec::new_in(HugePageAlloc),
            len: 0,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Where `hash`'s probe starts; any value when there are no slots
    /// (then every index is out of range).
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.slots.len().wrapping_sub(1)
    }

    /// Starts loading the slot where a lookup of `hash` begins.
    #[inline(always)]
    pub(super) fn prefetch(&self, hash: u64) {
        if let Some(slot) = self.slots.get(self.home(hash)) {
            dpdk_sys::prefetch::prefetch0(slot);
        }
    }

    /// The slot holding `key`.
    #[inline(always)]
    fn position(&self, hash: u64, key: &K) -> Option<usize> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut i = hash as usize & mask;
        let tag = tag(hash);
        // Ends: the load limit keeps at least 3/8 of the slots empty.
        loop {
            match &self.slots[i] {
                None => return None,
                Some(e) if e.hash == tag && e.key == *key => return Some(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, hash: u64, key: &K) -> Option<&T> {
        let i = self.position(hash, key)?;
        self.slots[i].as_ref().map(|e| &e.value)
    }

    pub(super) fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut T> {
        let i = self.position(hash, key)?;
        self.slots[i].as_mut().map(|e| &mut e.value)
    }

    /// Inserts a key the caller has checked is absent.
    pub(super) fn insert_unique(&mut self, hash: u64, key: K, value: T) {
        if (self.len + 1) * 8 > self.slots.len() * MAX_LOAD_EIGHTHS {
            self.grow();
        }
        Self::place(
            &mut self.slots,
            Entry {
                hash: tag(hash),
                key,
                value,
            },
        );
        self.len += 1;
    }

    /// Puts `e` in the first empty slot of its probe (there is one: the
    /// load limit).
    fn place(slots: &mut [Option<Entry<K, T>>], e: Entry<K, T>) {
        let mask = slots.len() - 1;
        let mut i = e.hash.get() as usize & mask;
        while slots[i].is_some() {
            i = (i + 1) & mask;
        }
        slots[i] = Some(e);
    }

    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(MIN_SLOTS);
        let mut bigger = Vec::with_capacity_in(n, HugePageAlloc);
        bigger.resize_with(n, || None);
        let old = std::mem::replace(&mut self.slots, bigger);
        for e in old.into_iter().flatten() {
            Self::place(&mut self.slots, e);
        }
    }

    pub(super) fn remove(&mut self, hash: u64, key: &K) -> Option<T> {
        let mut hole = self.position(hash, key)?;
        let removed = self.slots[hole].take()?;
        self.len -= 1;
        // Every entry of the run after the hole whose probe starts at or
        // before the hole moves into it, so no probe meets an empty slot
        // before its key.
        let mask = self.slots.len() - 1;
        let mut i = (hole + 1) & mask;
        while let Some(e) = &self.slots[i] {
            let home = e.hash.get() as usize & mask;
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[i].take();
                hole = i;
            }
            i = (i + 1) & mask;
        }
        Some(removed.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A small-state generator, so the test needs no crate and repeats.
    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn agrees_with_a_hash_map_under_churn_and_collisions() {
        // Hashes from a small range, so runs are long and wrap around the
        // end; a key's hash is a function of the key, as the flow table's is.
        for range in [4u64, 64, 1 << 20] {
            let mut s = 0x9e37_79b9_7f4a_7c15 ^ range;
            let hash = |k: u32| (u64::from(k).wrapping_mul(0x9e37_79b9)) % range;
            let mut t = Shard::<u32, u64>::new();
            let mut m = HashMap::new();
            for step in 0..20_000u64 {
                let k = (xorshift(&mut s) % 512) as u32;
                match xorshift(&mut s) % 3 {
                    0 | 1 if !m.contains_key(&k) => {
                        t.insert_unique(hash(k), k, step);
                        m.insert(k, step);
                    }
                    _ => assert_eq!(t.remove(hash(k), &k), m.remove(&k), "remove {k}"),
                }
                if step % 97 == 0 {
                    for k in 0..512u32 {
                        assert_eq!(t.get(hash(k), &k), m.get(&k), "get {k} at {step}");
                    }
                }
                assert_eq!(t.len(), m.len());
            }
            for k in 0..512u32 {
                if let Some(v) = t.get_mut(hash(k), &k) {
                    *v += 1;
                }
                assert_eq!(t.get(hash(k), &k), m.get(&k).map(|v| v + 1).as_ref());
            }
        }
    }

    #[test]
    fn stays_under_the_load_limit_and_a_clone_is_independent() {
        let mut t = Shard::<u32, u32>::new();
        assert!(t.get(7, &7).is_none());
        t.prefetch(7);
        for k in 0..1000u32 {
            t.insert_unique(u64::from(k) * 31, k, k);
            assert!(t.len * 8 <= t.slots.len() * MAX_LOAD_EIGHTHS);
        }
        let mut c = t.clone();
        assert_eq!(c.remove(31, &1), Some(1));
        assert_eq!(t.get(31, &1), Some(&1));
        assert_eq!(c.get(31, &1), None);
        assert_eq!((t.len(), c.len()), (1000, 999));
    }
}
