//! One shard of the flow table: an open-addressed hash table (linear
//! probing, at most half full) with each entry's key and value inline.
//!
//! Why not hashbrown, which it replaced: a SwissTable keeps its control
//! bytes and its entries in two arrays, so a lookup is two dependent cache
//! misses, and where the second one lands is known only once the first has
//! arrived. Here the slot a key starts from is known from its hash alone, so
//! the RX lcore hashes a whole chunk of datagrams and prefetches their slots
//! before it compares any key (`rte_hash_lookup_bulk`'s idea): the chunk's
//! misses overlap, and each lookup touches one entry, usually in one line.
//! At most half full, a linear probe rarely goes past the home slot.
//!
//! Entries carry their full hash: a probe compares it before the key, and
//! growing never rehashes. Removal shifts the following entries back
//! (backward-shift deletion), so there are no tombstones and a probe always
//! stops at the first empty slot. The slots live on transparent huge pages
//! ([`HugePageAlloc`]) once they are big enough.
use allocator_api2::vec::Vec;
use dpdk_sys::hugepage_alloc::HugePageAlloc;

/// Slots of a table's first allocation (a power of two).
const MIN_CAPACITY: usize = 16;

#[derive(Clone)]
struct Entry<K, T> {
    hash: u64,
    key: K,
    value: T,
}

/// See the module documentation.
#[derive(Clone)]
pub(super) struct OpenTable<K, T> {
    /// Empty, or a power of two of them, at most half occupied.
    slots: Vec<Option<Entry<K, T>>, HugePageAlloc>,
    len: usize,
}

impl<K: Eq, T> OpenTable<K, T> {
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

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Starts loading the slot a lookup of `hash` begins at (and the next
    /// line, for an entry that straddles two). A hint only.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        if self.len != 0 {
            let p = self
                .slots
                .as_ptr()
                .wrapping_add(hash as usize & self.mask());
            dpdk_sys::prefetch0(p);
            dpdk_sys::prefetch0(p.wrapping_add(1).cast::<u8>().wrapping_sub(1));
        }
    }

    #[inline]
    fn index_of(&self, hash: u64, key: &K) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = hash as usize & mask;
        // Ends: at most half the slots are occupied, so an empty one comes.
        loop {
            match self.slots.get(i)? {
                None => return None,
                Some(e) if e.hash == hash && e.key == *key => return Some(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub(super) fn find(&self, hash: u64, key: &K) -> Option<&T> {
        let i = self.index_of(hash, key)?;
        self.slots.get(i)?.as_ref().map(|e| &e.value)
    }

    pub(super) fn find_mut(&mut self, hash: u64, key: &K) -> Option<&mut T> {
        let i = self.index_of(hash, key)?;
        self.slots.get_mut(i)?.as_mut().map(|e| &mut e.value)
    }

    /// Inserts a key the caller has checked is absent.
    pub(super) fn insert_new(&mut self, hash: u64, key: K, value: T) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.place(Entry { hash, key, value });
        self.len += 1;
    }

    /// Puts `e` into the first empty slot from its home (there is one).
    fn place(&mut self, e: Entry<K, T>) {
        let mask = self.mask();
        let mut i = e.hash as usize & mask;
        while let Some(Some(_)) = self.slots.get(i) {
            i = (i + 1) & mask;
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = Some(e);
        }
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(MIN_CAPACITY);
        let mut slots = Vec::with_capacity_in(cap, HugePageAlloc);
        slots.resize_with(cap, || None);
        let old = std::mem::replace(&mut self.slots, slots);
        for e in old.into_iter().flatten() {
            self.place(e);
        }
    }

    pub(super) fn remove(&mut self, hash: u64, key: &K) -> Option<T> {
        let mut hole = self.index_of(hash, key)?;
        let gone = self.slots.get_mut(hole)?.take()?;
        self.len -= 1;
        // Backward shift: an entry further along the run moves into the
        // hole when its home is not between the hole and itself, so every
        // entry stays reachable from its home without crossing an empty slot.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some(Some(e)) = self.slots.get(j) else {
                break;
            };
            let home = e.hash as usize & mask;
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                let moved = self.slots.get_mut(j).and_then(Option::take);
                if let Some(s) = self.slots.get_mut(hole) {
                    *s = moved;
                }
                hole = j;
            }
        }
        Some(gone.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys whose hashes share their low bits collide on purpose, so the
    /// probes, the wrap-around and the backward shift are all exercised.
    fn h(k: u32) -> u64 {
        u64::from(k % 7) | u64::from(k) << 40
    }

    #[test]
    fn matches_a_hashmap_under_random_changes() {
        let mut t = OpenTable::new();
        let mut m = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % 300) as u32;
            if x >> 60 < 9 {
                if let std::collections::hash_map::Entry::Vacant(v) = m.entry(k) {
                    v.insert(step);
                    t.insert_new(h(k), k, step);
                }
            } else {
                assert_eq!(t.remove(h(k), &k), m.remove(&k), "remove {k} at {step}");
            }
            assert_eq!(t.len(), m.len());
            let probe = (x >> 20) as u32 % 300;
            assert_eq!(t.find(h(probe), &probe), m.get(&probe), "find {probe}");
        }
        for k in 0..300 {
            assert_eq!(t.find(h(k), &k), m.get(&k));
        }
    }

    #[test]
    fn wraps_around_the_end() {
        let mut t = OpenTable::new();
        // All at the last home slot of 16: the run wraps to slot 0.
        for k in 0..6u32 {
            t.insert_new(15 | u64::from(k) << 32, k, k);
        }
        for k in 0..6u32 {
            assert_eq!(t.find(15 | u64::from(k) << 32, &k), Some(&k));
        }
        assert_eq!(t.remove(15, &0), Some(0));
        for k in 1..6u32 {
            assert_eq!(t.find(15 | u64::from(k) << 32, &k), Some(&k));
        }
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn stays_at_most_half_full_and_finds_nothing_when_empty() {
        let mut t = OpenTable::<u32, u32>::new();
        assert_eq!(t.find(0, &0), None);
        t.prefetch(12345);
        for k in 0..1000u32 {
            t.insert_new(h(k), k, k);
            assert!(t.len() * 2 <= t.slots.len());
        }
        for k in 0..1000u32 {
            assert_eq!(t.remove(h(k), &k), Some(k));
        }
        assert_eq!(t.find(h(5), &5), None);
        if let Some(v) = t.find_mut(h(5), &5) {
            *v = 0;
        }
        assert_eq!(t.len(), 0);
    }
}
