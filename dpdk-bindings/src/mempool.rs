use std::ffi::CString;
use std::ptr::NonNull;

use crate::error::{DpdkError, Result};
use crate::ffi;
use crate::mbuf::{Mbuf, MbufBurst, RawMbuf};

/// A pktmbuf pool (`rte_pktmbuf_pool_create`), freed on drop.
pub struct Mempool {
    raw: NonNull<ffi::rte_mempool>,
    owned: bool,
}

// SAFETY: rte_mempool is designed for concurrent use from many lcores; the
// per-lcore cache is selected by the calling thread's lcore id.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// `n` mbufs of `data_room` bytes (headroom included) with `priv_size`
    /// bytes of application area, on NUMA `socket` (-1 for any).
    pub fn new(
        name: &str,
        n: u32,
        cache: u32,
        priv_size: u16,
        data_room: u16,
        socket: i32,
    ) -> Result<Mempool> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Usage(format!("bad pool name {name:?}")))?;
        // SAFETY: cname is a valid C string for the call; DPDK copies the name.
        let p = unsafe {
            ffi::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, priv_size, data_room, socket)
        };
        match NonNull::new(p) {
            Some(raw) => Ok(Mempool { raw, owned: true }),
            None => Err(DpdkError::from_errno(format!(
                "rte_pktmbuf_pool_create({name}, n={n}, data_room={data_room}, socket={socket})"
            ))),
        }
    }

    /// Find a pool another process (the primary) created, by name; dropping
    /// the handle leaves the pool alone.
    pub fn lookup(name: &str) -> Result<Mempool> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Usage(format!("bad pool name {name:?}")))?;
        // SAFETY: a valid C string for the call; DPDK only reads it.
        let p = unsafe { ffi::rte_mempool_lookup(cname.as_ptr()) };
        NonNull::new(p)
            .map(|raw| Mempool { raw, owned: false })
            .ok_or_else(|| DpdkError::from_errno(format!("rte_mempool_lookup({name})")))
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.raw.as_ptr()
    }

    /// Free mbufs (in the ring and the lcore caches).
    pub fn avail(&self) -> u32 {
        // SAFETY: raw is a live pool.
        unsafe { ffi::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs sitting in `lcore`'s per-lcore cache of this pool.
    pub fn cached(&self, lcore: u32) -> u32 {
        if lcore >= ffi::RTE_MAX_LCORE {
            return 0;
        }
        let mp = self.raw.as_ptr();
        // SAFETY: raw is a live pool; `local_cache` is NULL without a cache,
        // else an array of RTE_MAX_LCORE caches that lives as long as the
        // pool, and lcore < RTE_MAX_LCORE. The owning lcore may be changing
        // `len` meanwhile: a volatile read of an aligned u32 gives an old or
        // new value, as `rte_mempool_avail_count`'s own racy sum does.
        unsafe {
            if (*mp).cache_size == 0 || (*mp).local_cache.is_null() {
                return 0;
            }
            std::ptr::read_volatile(std::ptr::addr_of!(
                (*(*mp).local_cache.add(lcore as usize)).len
            ))
        }
    }

    /// The next objects the calling lcore's cache of this pool will hand
    /// out, in the order it hands them out (the top of the cache's stack
    /// first, as `rte_mempool_get_bulk`, a PMD's refill, takes them), into
    /// `out`: how many it wrote. What the cache lacks comes from the pool's
    /// ring at the allocation and is not listed. Addresses only, for
    /// prefetching (`crate::prefetch`): nothing is taken, and a thread that
    /// is not an EAL lcore, or a pool without a per-lcore cache, gets none.
    #[inline]
    pub fn next_allocs(&self, out: &mut [*const u8]) -> usize {
        let Some(lcore) = crate::lcore::current() else {
            return 0;
        };
        if lcore >= ffi::RTE_MAX_LCORE {
            return 0;
        }
        let mp = self.raw.as_ptr();
        // SAFETY: raw is a live pool; `local_cache` is NULL without a cache,
        // else an array of RTE_MAX_LCORE caches that lives as long as the
        // pool, and lcore < RTE_MAX_LCORE. The cache is this thread's own
        // lcore's: only this thread changes its `len` and `objs` (DPDK's
        // per-lcore caches have one user), so the reads race with nothing;
        // `len` is clamped to the array. Only the pointers' values leave.
        unsafe {
            if (*mp).cache_size == 0 || (*mp).local_cache.is_null() {
                return 0;
            }
            let c = (*mp).local_cache.add(lcore as usize);
            let objs = std::ptr::addr_of!((*c).objs);
            let len = ((*c).len as usize).min((*objs).len());
            let top = &(&*objs)[len - out.len().min(len)..len];
            for (o, &t) in out.iter_mut().zip(top.iter().rev()) {
                *o = t as *const u8;
            }
            top.len()
        }
    }

    /// Free mbufs that the lcores in `lcores` can take: the pool's common
    /// store plus their own caches. `avail` also counts other lcores'
    /// caches, which those lcores alone can allocate from: a pool whose
    /// free mbufs all sit in a consumer's cache is empty for RX.
    pub fn avail_to(&self, lcores: &[u32]) -> u32 {
        let others: u32 = (0..ffi::RTE_MAX_LCORE)
            .filter(|l| !lcores.contains(l))
            .map(|l| self.cached(l))
            .sum();
        self.avail().saturating_sub(others)
    }

    pub fn in_use(&self) -> u32 {
        // SAFETY: raw is a live pool.
        unsafe { ffi::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    pub fn size(&self) -> u32 {
        // SAFETY: raw is a live pool; `size` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).size }
    }

    /// Bytes of data room per mbuf (headroom included).
    pub fn data_room(&self) -> u16 {
        // SAFETY: raw is a live pktmbuf pool.
        unsafe { ffi::rte_pktmbuf_data_room_size(self.raw.as_ptr()) }
    }

    pub fn priv_size(&self) -> u16 {
        // SAFETY: raw is a live pktmbuf pool.
        unsafe { ffi::rte_pktmbuf_priv_size(self.raw.as_ptr()) }
    }

    /// Memory one mbuf of this pool really takes (struct, private area, data room):
    /// the "truesize" charged to a socket.
    pub fn truesize(&self) -> u32 {
        crate::mbuf::MBUF_SIZE as u32 + self.priv_size() as u32 + self.data_room() as u32
    }

    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: raw is a live pktmbuf pool.
        let m = unsafe { ffi::rte_pktmbuf_alloc(self.raw.as_ptr()) };
        // SAFETY: a non-null mbuf from the pool is exclusively ours.
        NonNull::new(m.cast()).map(|p| unsafe { Mbuf::from_raw(p) })
    }

    /// Fill `out` with fresh mbufs; all or nothing, as DPDK does. The
    /// caller owns them afterwards (as raw pointers: it frees them).
    pub fn alloc_bulk(&self, out: &mut [*mut RawMbuf]) -> Result<()> {
        // SAFETY: out has room for out.len() pointers (RawMbuf is rte_mbuf).
        let ret = unsafe {
            ffi::rte_pktmbuf_alloc_bulk(
                self.raw.as_ptr(),
                out.as_mut_ptr().cast(),
                out.len() as u32,
            )
        };
        if ret != 0 {
            return Err(DpdkError::from_ret("rte_pktmbuf_alloc_bulk", ret));
        }
        Ok(())
    }

    /// Append `count` fresh mbufs to `out` (at most its room); all or nothing.
    pub fn alloc_into<const N: usize>(&self, out: &mut MbufBurst<N>, count: usize) -> Result<()> {
        let room = out.spare_mut();
        let k = count.min(room.len());
        self.alloc_bulk(&mut room[..k])?;
        // SAFETY: DPDK wrote k fresh mbufs, ours, into the spare slots.
        unsafe { out.filled(k) };
        Ok(())
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: we created the pool; callers free every mbuf and stop ports
            // that reference it before dropping it (the engine's teardown order).
            unsafe { ffi::rte_mempool_free(self.raw.as_ptr()) }
        }
    }
}

/// What [`cache_walk`] does to one lcore's cache in every pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOp {
    /// Give the objects back to their pool's store, a chunk at a time, each
    /// chunk taken off the cache (its `len` lowered) before it is put into
    /// the store: a process that dies in between loses that chunk (at most
    /// [`FLUSH_CHUNK`] objects) to the pool, and never puts an object in
    /// twice.
    Flush,
    /// Forget the objects (`len = 0`): for the cache of a process that died
    /// while it was changing it (its contents cannot be trusted; flushing
    /// them could put an object into the store twice).
    Discard,
}

/// Objects a [`CacheOp::Flush`] takes off a cache per step.
pub const FLUSH_CHUNK: usize = 32;

/// Apply `op` to lcore `lcore`'s default cache of every mempool of the EAL
/// (the primary's too, from a secondary): how many objects it held, in
/// total. Nothing for an lcore id out of range.
///
/// # Safety
/// No thread may use lcore `lcore`'s caches meanwhile: the calling thread
/// is that lcore, or the process that was (an out-of-process client) is
/// gone or blocked, and no other can take its lcore id (udpdemux: the
/// client's slot lock, held by the caller).
pub unsafe fn cache_walk(lcore: u32, op: CacheOp) -> u64 {
    struct Walk {
        lcore: u32,
        op: CacheOp,
        objs: u64,
    }
    unsafe extern "C" fn one(mp: *mut ffi::rte_mempool, arg: *mut std::ffi::c_void) {
        // SAFETY: `arg` is the `&mut Walk` passed below, alive for the walk
        // and touched by nothing else.
        let w = unsafe { &mut *(arg as *mut Walk) };
        // SAFETY: the walk passes a live pool; the cache of `w.lcore` (NULL
        // without caches) is used by no one else meanwhile (the caller's
        // promise). Volatile accesses: another process reads what is left.
        unsafe {
            let c = ffi::rte_mempool_default_cache(mp, w.lcore);
            if c.is_null() {
                return;
            }
            let len = std::ptr::addr_of_mut!((*c).len);
            let n = std::ptr::read_volatile(len).min((*c).objs.len() as u32);
            w.objs += u64::from(n);
            match w.op {
                CacheOp::Discard => std::ptr::write_volatile(len, 0),
                CacheOp::Flush => {
                    let mut left = n as usize;
                    let mut chunk = [std::ptr::null_mut::<std::ffi::c_void>(); FLUSH_CHUNK];
                    while left > 0 {
                        let k = left.min(FLUSH_CHUNK);
                        let from = std::ptr::addr_of!((*c).objs[left - k]);
                        std::ptr::copy_nonoverlapping(from, chunk.as_mut_ptr(), k);
                        left -= k;
                        std::ptr::write_volatile(len, left as u32);
                        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
                        ffi::rte_mempool_ops_enqueue_bulk(mp, chunk.as_ptr(), k as u32);
                    }
                }
            }
        }
    }
    if lcore >= ffi::RTE_MAX_LCORE || !crate::eal::is_up() {
        return 0;
    }
    let mut w = Walk { lcore, op, objs: 0 };
    // SAFETY: the EAL is up; the callback only touches `w` and lcore
    // `lcore`'s caches (the caller's promise); the walk holds the mempool
    // list's read lock.
    unsafe { ffi::rte_mempool_walk(Some(one), &mut w as *mut Walk as *mut std::ffi::c_void) };
    w.objs
}

/// Give back to their pools the objects the calling lcore's caches hold,
/// in every mempool of the EAL (the primary's too, from a secondary): for
/// a process that frees into another process's pools and then leaves (an
/// out-of-process client). What stays in its cache slot could otherwise
/// only be allocated by a later process on the same lcore id. Only the
/// cache's own lcore may touch it: a no-op on a thread that is no lcore.
/// A death part-way loses at most one chunk, never puts an object back
/// twice ([`CacheOp::Flush`]). How many objects went back.
pub fn flush_lcore_caches() -> u64 {
    let Some(lcore) = crate::lcore::current() else {
        return 0;
    };
    // SAFETY: this thread is lcore `lcore`: the only user of its caches.
    unsafe { cache_walk(lcore, CacheOp::Flush) }
}
