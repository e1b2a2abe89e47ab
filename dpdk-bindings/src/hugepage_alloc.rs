//! Memory for the flow table's big arrays, on transparent huge pages. Here,
//! with the project's other calls into C (`mmap`, `madvise`), so that the
//! engine crate needs no `unsafe` for it.
//!
//! A million bindings are about 84 MB of hash table. On 4 KiB pages a lookup
//! that lands anywhere in it misses the TLB and walks the page table first;
//! DPDK's own tables (`rte_hash`) live in hugepage memory for that reason.
//! The flow table cannot use the EAL's hugepages (`check`, the tests and the
//! fuzz targets build it without an EAL, and the table's size is not part of
//! `memory_mb`), so it asks the kernel for transparent huge pages instead:
//! an allocation of at least [`MIN_SIZE`] gets its own anonymous mapping,
//! 2 MiB-aligned and rounded up to 2 MiB, advised `MADV_HUGEPAGE`, so that
//! the kernel backs it with huge pages at first touch when THP is `madvise`
//! or `always` (Debian's default is `madvise`). Smaller allocations go to the
//! global allocator. The cost is the rounding: at most 2 MiB per big array
//! (a million-binding table's 64 shards, 1.3 MB of slots each, use 128 MB).
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global, Layout};

/// The x86-64 (and aarch64 4K-granule) PMD huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Arrays at least this big get huge pages; below it the rounding would
/// waste more than half of what is mapped.
pub const MIN_SIZE: usize = 1 << 20;

/// An [`Allocator`] for the flow table's shards; see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageAlloc;

/// Whether a block of this layout is (or was) a mapping of its own. Decided
/// by the layout alone, so `deallocate` agrees with `allocate`: any size
/// between the requested one and the returned length is on the same side.
#[inline]
fn mapped(layout: Layout) -> bool {
    layout.size() >= MIN_SIZE && layout.align() <= HUGE_PAGE
}

#[inline]
fn mapped_len(size: usize) -> usize {
    size.div_ceil(HUGE_PAGE) * HUGE_PAGE
}

/// A fresh, zeroed, 2 MiB-aligned private mapping of `len` bytes (a
/// multiple of 2 MiB), advised for huge pages.
fn map_aligned(len: usize) -> Option<NonNull<u8>> {
    let over = len.checked_add(HUGE_PAGE)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing; it aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    let head = aligned - start;
    let tail = HUGE_PAGE - head;
    // SAFETY: both ranges lie inside the mapping made above and outside the
    // [aligned, aligned + len) part we keep; nothing refers to them. Trimming
    // cannot fail for page-aligned ranges of our own mapping; were it to, the
    // pages would only stay mapped.
    unsafe {
        if head != 0 {
            libc::munmap(p, head);
        }
        if tail != 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: without THP the mapping works on small pages.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    NonNull::new(aligned as *mut u8)
}

// SAFETY: a block from `allocate` stays valid until `deallocate`, which
// releases exactly what `allocate` made for the same layout: a mapping of
// `mapped_len(size)` bytes for a big layout, the global allocator's block
// otherwise. Copies of the (stateless) allocator are interchangeable.
unsafe impl Allocator for HugePageAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !mapped(layout) {
            return Global.allocate(layout);
        }
        let len = mapped_len(layout.size());
        let p = map_aligned(len).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, len))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !mapped(layout) {
            // SAFETY: the caller's contract: this block came from
            // `allocate` with this layout, i.e. from the global allocator.
            unsafe { Global.deallocate(ptr, layout) };
            return;
        }
        // SAFETY: the caller's contract: `ptr` is the start of the mapping
        // `allocate` made for this layout, `mapped_len(size)` bytes long, and
        // nothing refers to it any more.
        unsafe { libc::munmap(ptr.as_ptr().cast(), mapped_len(layout.size())) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_blocks_are_aligned_whole_huge_pages_and_small_ones_are_not_mapped() {
        let a = HugePageAlloc;
        let big = Layout::from_size_align(MIN_SIZE + 3, 16).unwrap();
        let p = a.allocate(big).unwrap();
        assert_eq!(p.cast::<u8>().as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(p.len(), HUGE_PAGE);
        // Writable end to end, and zeroed as a fresh mapping is.
        // SAFETY: p is ours, p.len() bytes long.
        let s = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>().as_ptr(), p.len()) };
        assert!(s.iter().all(|&b| b == 0));
        s.fill(0xa5);
        // SAFETY: allocated above with this layout, no reference left.
        unsafe { a.deallocate(p.cast(), big) };

        let small = Layout::from_size_align(4096, 8).unwrap();
        let q = a.allocate(small).unwrap();
        assert_eq!(q.len(), 4096);
        // SAFETY: allocated above with this layout.
        unsafe { a.deallocate(q.cast(), small) };
    }

    #[test]
    fn an_array_grows_past_the_threshold_and_back() {
        let mut v: allocator_api2::vec::Vec<(u64, u64), HugePageAlloc> =
            allocator_api2::vec::Vec::new_in(HugePageAlloc);
        for k in 0..200_000u64 {
            v.push((k, !k));
        }
        assert!(v.capacity() * 16 >= MIN_SIZE);
        for k in (0..200_000u64).step_by(7) {
            assert_eq!(v[k as usize], (k, !k));
        }
        let c = v.clone();
        v.clear();
        v.shrink_to_fit();
        assert_eq!(c.len(), 200_000);
        assert_eq!(c[199_999], (199_999, !199_999));
    }
}
