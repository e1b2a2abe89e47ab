//! What travels with a packet: its mbuf's private area and one dynfield.
//!
//! The RX lcore fills both once, right after parsing and the early-demux
//! lookup; accounting, the stage link, delivery and the consumer read them
//! and never parse or look up again (the kernel keeps `skb->sk` for the same
//! reason).
//!
//! * [`MbufMeta`], in the pool's private area (the mbuf's third cache line):
//!   the stage link, the socket, the offsets, the port. The engine creates
//!   every pool its ports receive into, and 64 bytes there hold more than
//!   the 36 spare bytes of dynfield space. RX-side code (staging, the
//!   drainer) and the handlers that need offsets (echo, pcap, the API) read it.
//! * [`HotMeta`], in a registered dynfield (`rte_mbuf_dynfield_register`,
//!   inside the mbuf's second cache line): only what the consumer's count
//!   path needs besides the first line, the payload length and the RX TSC.
//!   The truesize is not stored for it at all: it is `buf_len` (first line)
//!   plus the constant [`MBUF_OVERHEAD`], exactly what RX charges.
//!
//! And the mbuf's side of the receive heart's traits: [`MbufMeta`] as its
//! `StagePacket` and `PacketMeta`, [`RingSink`] (the socket's `rte_ring`)
//! as its `Sink`, and [`free_closed_stages`], the mbufs' `to_free` for a
//! closed socket's stages.
//!
//! # Why the second line, and not a free field of the first
//!
//! The first line has 8 bytes that are free once RX has read them (the
//! `hash` union). They would hold the payload length and only 32 bits of
//! TSC, which wrap in about a second at this machine's clock: a consumer
//! throttled by `consume_rate_pps` behind a 4096-entry ring waits longer
//! than that, and its latency histogram would alias. The `hash` union is also
//! the PMD's (RSS hash, FDIR id) and the eventdev's (`txadapter`) field, so
//! reusing it would be a convention nobody else knows. The second line is
//! read by the consumer anyway: `rte_pktmbuf_free_bulk` loads `m->next`
//! (and `rte_pktmbuf_prefree_seg` may clear it), so reading 10 more bytes of
//! it costs nothing. On the RX side the PMDs this project runs on
//! (`net_pcap`, `net_af_packet`, `net_memif`, `net_ring`, `net_null`) take
//! their mbufs with `rte_pktmbuf_alloc`, whose `rte_pktmbuf_reset` writes
//! `next` and `tx_offload` in that line for every packet, so writing the
//! dynfield there adds no line either. (A vector PMD that rearms only the
//! first line would leave line 1 clean; there the dynfield costs a write
//! to line 1 but still saves the private area's line on the consumer.)
//!
//! # Cache lines one datagram moves between the RX CPU and the consumer's CPU
//!
//! Count handler, `numa-queues`, one RX lcore, a consumer on the other CPU.
//! "Moves" means: written on one side, then read or written on the other.
//!
//! | line | before | after |
//! |---|---|---|
//! | mbuf line 0 (`buf_addr` .. `pool`) | RX (PMD) writes, consumer reads (`refcnt`, `pool`, `ol_flags` in free) | same: 1 line, now also `buf_len` for the truesize |
//! | mbuf line 1 (`next` .. dynfields) | RX (`rte_pktmbuf_reset`) writes `next`; consumer reads it in free | same line, now also the [`HotMeta`] dynfield: still 1 line |
//! | private area ([`MbufMeta`]) | RX writes; consumer read truesize, payload_len, rx_tsc: 1 line | RX writes, the count consumer never reads it: 0 lines (echo, pcap and the API still read it) |
//! | frame data (first data line) | RX reads (parse, on its own CPU, after the PMD wrote it there): the consumer never touches it with `count`: 0 lines | same: 0 |
//! | ring slot | RX drainer writes 8 B, consumer reads: 1/8 line per datagram | same |
//! | mempool ring slot (the buffer's way back) | consumer's cache flush writes 8 B, RX's refill reads: 1/8 line | same |
//! | socket counters | drainer writes `delivered`; consumer writes `consumed`, release deficit (rcvbuf/4 batching): per burst, not per datagram | same |
//!
//! Then the buffers come back: the consumer's `rte_pktmbuf_free_bulk` puts
//! them into its own lcore's mempool cache, and when that cache overflows
//! into the pool's ring the RX lcore's next `rx_burst` allocates them again:
//! mbuf lines 0 and 1 move back (the PMD writes them); the private area
//! never left the RX CPU's cache with the count handler, so it does not.
//! Per datagram: 3 lines + 1/4 before (lines 0, 1, private area, the two
//! ring slots), 2 lines + 1/4 after.
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use dpdk_sys::mbuf::{self, FreeList, MbufMut, MbufRef, RawMbuf};
use dpdk_sys::{eal, MbufRing};

use crate::latency::Histogram;
use crate::parse::{Datagram, Family};
use crate::receive::drain::DRAIN_BURST;
use crate::receive::stage::StagePacket;
use crate::receive::{PacketMeta, RxSocket, Sink};

/// Bytes reserved after `struct rte_mbuf` in every pool the engine creates
/// (a multiple of RTE_MBUF_PRIV_ALIGN = 8).
pub const PRIV_SIZE: u16 = 64;

/// What an engine mbuf costs besides its data room: `struct rte_mbuf` and
/// the private area. A datagram's truesize is `MBUF_OVERHEAD + buf_len`, the
/// same for RX-pool and small-pool mbufs (`Mempool::truesize`).
pub const MBUF_OVERHEAD: u32 = mbuf::MBUF_SIZE as u32 + PRIV_SIZE as u32;

/// The truesize of an engine mbuf, from its first cache line only
/// (`buf_len`): equal to what RX charges (`sizeof(rte_mbuf) + priv_size +
/// buf_len`) because every engine pool has `priv_size == PRIV_SIZE`.
#[inline(always)]
pub fn truesize_of(m: MbufRef<'_>) -> u32 {
    MBUF_OVERHEAD + u32::from(m.buf_len())
}

/// Check on a live pool that [`truesize_of`] of its mbufs equals
/// `Mempool::truesize` (what RX and the small cache charge). The engine runs
/// it on every RX and small pool at start, so every EAL-backed run tests it.
pub fn check_pool_truesize(mp: &dpdk_sys::Mempool) -> Result<u32, String> {
    let m = mp
        .alloc()
        .ok_or_else(|| "cannot allocate one mbuf to check its truesize".to_string())?;
    let ours = truesize_of(m.view());
    let (priv_size, theirs) = (mp.priv_size(), mp.truesize());
    if priv_size != PRIV_SIZE || ours != theirs {
        return Err(format!(
            "mbuf truesize {ours} B (sizeof(rte_mbuf) + {PRIV_SIZE} + buf_len) != pool truesize {theirs} B (priv_size {priv_size})"
        ));
    }
    Ok(ours)
}

/// What the consumer's count path reads besides the mbuf's first line, kept
/// in a registered dynfield in the mbuf's second line (see the module docs).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotMeta {
    /// TSC when the RX lcore received the burst.
    pub rx_tsc: u64,
    /// UDP payload bytes.
    pub payload_len: u16,
}

/// Name of the [`HotMeta`] dynfield.
pub const HOT_DYNFIELD: &str = "udpdemux_hot_meta";

/// Byte offset of [`HotMeta`] in an mbuf. Until [`register_hot`] runs it is
/// the `hot_fallback` slot of the private area, so an unregistered process
/// (a test without the engine) stays correct, only slower.
static HOT_OFFSET: AtomicUsize = AtomicUsize::new(HOT_FALLBACK);
/// `hot_fallback` is `MbufMeta`'s second field, right after the 8-byte link (repr(C)).
const HOT_FALLBACK: usize = mbuf::MBUF_SIZE + std::mem::size_of::<AtomicPtr<MbufMeta>>();

/// Register the [`HotMeta`] dynfield (idempotent). Must run after the EAL and
/// before any RX lcore or consumer starts: the offset is read per packet and
/// must not change while packets are in flight. The offset is inside
/// `struct rte_mbuf` (`dynfield_register` checks it).
pub fn register_hot() -> Result<usize, dpdk_sys::DpdkError> {
    let off = mbuf::dynfield_register(
        HOT_DYNFIELD,
        std::mem::size_of::<HotMeta>(),
        std::mem::align_of::<HotMeta>(),
    )?;
    HOT_OFFSET.store(off, Ordering::Relaxed);
    if !(64..128).contains(&off) {
        log::warn!("dynfield {HOT_DYNFIELD} at offset {off}, outside the mbuf's second cache line");
    }
    Ok(off)
}

/// Where [`HotMeta`] lives in `m`.
#[inline(always)]
fn hot_ptr(m: *mut RawMbuf) -> *mut HotMeta {
    mbuf::dynfield(m, HOT_OFFSET.load(Ordering::Relaxed))
}

/// The consumer's view of a datagram: what [`MbufMeta::init`] (or
/// [`copy_hot`]) wrote. Of an mbuf RX did not stamp it reads zeroes or a
/// stale value, never undefined bytes; in the fallback slot of a pool
/// without the engine's private area, zeroes.
#[inline(always)]
pub fn hot(m: MbufRef<'_>) -> HotMeta {
    let off = HOT_OFFSET.load(Ordering::Relaxed);
    if off >= mbuf::MBUF_SIZE
        && mbuf::MBUF_SIZE + usize::from(m.priv_size()) < off + std::mem::size_of::<HotMeta>()
    {
        return HotMeta::default();
    }
    // SAFETY: a live mbuf nobody writes meanwhile (the view's contract).
    // The offset is a registered field inside the struct (8-aligned, of
    // HotMeta's size), or the fallback slot, inside this mbuf's private area
    // (checked above). Those bytes are initialised: DPDK zeroes the struct
    // and the private area when the pool is made, and HotMeta (integers) is
    // valid for any bits.
    unsafe { mbuf::dynfield::<HotMeta>(m.as_ptr(), off).read() }
}

/// Copy the [`HotMeta`] of `from` into `to` (a condensed copy of a datagram).
///
/// # Safety
/// Both must be live engine mbufs; the caller owns `to` exclusively.
#[inline(always)]
pub unsafe fn copy_hot(from: *mut RawMbuf, to: *mut RawMbuf) {
    // SAFETY: per the contract.
    unsafe { hot_ptr(to).write(hot_ptr(from).read()) }
}

/// The delivery ring of socket `id` (`rte_ring` names are global per
/// EAL and at most 31 characters).
pub fn delivery_ring_name(id: u32) -> String {
    format!("udx_s{id}")
}

/// A socket's delivery ring, looked up by another process of the EAL (an
/// out-of-process client, `udpdemux-client`) by the name the engine gave
/// it. Dropping the handle leaves the ring and its contents alone.
pub fn lookup_delivery_ring(name: &str) -> Result<MbufRing, dpdk_sys::DpdkError> {
    if !name.starts_with("udx_s") {
        return Err(dpdk_sys::DpdkError::Usage(format!(
            "{name:?} is not a udpdemux delivery ring"
        )));
    }
    // SAFETY: rings named udx_s<id> are made only by `Socket::with_handler`
    // as `MbufRing`s that the RX side fills with owned engine mbufs; the
    // engine frees the ring only when the socket goes, which the client
    // protocol (`client_proto`) orders after the client's close (a SIGHUP
    // reload refuses to remove or replace a socket a client has open).
    // Engine teardown while a client still reads is not ordered: the
    // client must close first (liveness is issue 16's next slice).
    unsafe { MbufRing::lookup(name) }
}

/// The per-packet metadata. `#[repr(C)]` so its size is checked against
/// [`PRIV_SIZE`] at compile time.
#[repr(C)]
#[derive(Debug)]
pub struct MbufMeta {
    /// The stage's intrusive link (the kernel's `skb->ll_node`).
    link: AtomicPtr<MbufMeta>,
    /// [`HotMeta`]'s home until [`register_hot`] has run (then unused). Second
    /// field: `HOT_FALLBACK` depends on it.
    hot_fallback: HotMeta,
    /// TSC when the RX lcore received the burst (also in [`HotMeta`]; this
    /// copy is for RX-side readers and the handlers that read this area anyway).
    pub rx_tsc: u64,
    /// Bytes charged to the socket (mbuf struct + private area + data room);
    /// informational: accounting and the consumer use [`truesize_of`].
    pub truesize: u32,
    /// The socket's drop count when the packet's batch was drained (SO_RXQ_OVFL).
    pub drop_snapshot: u32,
    /// Early-demux result: the socket's id.
    pub socket: u32,
    pub l3_off: u16,
    pub l4_off: u16,
    pub payload_off: u16,
    pub payload_len: u16,
    /// The datagram's IP family (one byte).
    pub family: Family,
    /// Bit 0: copied into a small buffer under pressure.
    pub flags: u8,
    /// Port the packet arrived on (echo replies leave through it).
    pub port: u16,
}

/// All zero: what a fresh pool's private area holds (DPDK zeroes it).
impl Default for MbufMeta {
    fn default() -> MbufMeta {
        MbufMeta {
            link: AtomicPtr::new(std::ptr::null_mut()),
            hot_fallback: HotMeta::default(),
            rx_tsc: 0,
            truesize: 0,
            drop_snapshot: 0,
            socket: 0,
            l3_off: 0,
            l4_off: 0,
            payload_off: 0,
            payload_len: 0,
            family: Family::V4,
            flags: 0,
            port: 0,
        }
    }
}

pub const FLAG_CONDENSED: u8 = 1;

const _: () = assert!(std::mem::size_of::<MbufMeta>() <= PRIV_SIZE as usize);
const _: () = assert!(std::mem::size_of::<HotMeta>() == 16);

impl MbufMeta {
    /// Where the metadata of `m` is: its private area. Pointer arithmetic;
    /// dereference it only for a live mbuf of an engine pool.
    ///
    /// # Safety
    /// `m` must point at an mbuf (any pointer will not do: the result must
    /// not be null).
    #[inline(always)]
    pub unsafe fn of(m: *mut RawMbuf) -> NonNull<MbufMeta> {
        // The private area is 8-aligned and at least PRIV_SIZE long in every engine pool.
        // SAFETY: `m` points at an mbuf (the contract): the address right
        // after its struct is not null.
        unsafe { NonNull::new_unchecked(mbuf::priv_area(m) as *mut MbufMeta) }
    }

    /// The metadata of a viewed mbuf, or `None` if its pool has no room for
    /// it (every engine pool has: `priv_size == PRIV_SIZE`).
    ///
    /// Reading it is always defined: DPDK zeroes a pool's private areas when
    /// it makes the pool (all zero is a valid `MbufMeta`), and only this
    /// module's writers ([`MbufMeta::init`], the small cache's copy, the
    /// stage link) write them afterwards, always a valid value. An mbuf the
    /// RX lcore did not fill (a floor's) reads zeroes or a stale value.
    #[inline(always)]
    pub fn view(m: MbufRef<'_>) -> Option<&MbufMeta> {
        if m.priv_size() < PRIV_SIZE {
            return None;
        }
        // SAFETY: the private area holds PRIV_SIZE >= size_of::<MbufMeta>()
        // bytes right after the (cache-aligned) struct, so it is aligned;
        // its bytes are a valid MbufMeta (see above), and nobody writes the
        // mbuf while the view lives (its contract).
        Some(unsafe { &*(m.priv_area() as *const MbufMeta) })
    }

    /// As [`MbufMeta::view`], for the mbuf's exclusive user.
    #[inline(always)]
    pub fn view_mut(m: MbufMut<'_>) -> Option<&mut MbufMeta> {
        let v = m.view();
        if v.priv_size() < PRIV_SIZE {
            return None;
        }
        // SAFETY: as in view, and the use is exclusive (MbufMut's contract)
        // for the view's whole life, which the reference takes over.
        Some(unsafe { &mut *(v.priv_area() as *mut MbufMeta) })
    }

    /// Starts loading the metadata's cache line (no effect on correctness).
    #[inline(always)]
    pub fn prefetch(m: *mut RawMbuf) {
        dpdk_sys::prefetch::prefetch0(mbuf::priv_area(m));
    }

    /// The mbuf a metadata block belongs to.
    #[inline(always)]
    pub fn mbuf(p: NonNull<MbufMeta>) -> *mut RawMbuf {
        (p.as_ptr() as *mut u8).wrapping_sub(mbuf::MBUF_SIZE) as *mut RawMbuf
    }

    /// Fill the metadata of a freshly received, demuxed datagram.
    ///
    /// # Safety
    /// `m` must be a live mbuf from a pool with `priv_size >= PRIV_SIZE`, owned by the caller.
    #[inline(always)]
    pub unsafe fn init(
        m: *mut RawMbuf,
        d: &Datagram,
        socket: u32,
        truesize: u32,
        rx_tsc: u64,
        port: u16,
    ) {
        let meta = MbufMeta {
            link: AtomicPtr::new(std::ptr::null_mut()),
            hot_fallback: HotMeta::default(),
            rx_tsc,
            truesize,
            drop_snapshot: 0,
            socket,
            l3_off: d.l3_off,
            l4_off: d.l4_off,
            payload_off: d.payload_off,
            payload_len: d.payload_len,
            family: d.family,
            flags: 0,
            port,
        };
        // SAFETY: per the contract the private area is ours and large enough;
        // a whole-struct write never reads the uninitialised bytes. The
        // dynfield is ours too (registered, or the fallback slot just written).
        unsafe {
            std::ptr::write(Self::of(m).as_ptr(), meta);
            hot_ptr(m).write(HotMeta {
                rx_tsc,
                payload_len: d.payload_len,
            });
        }
    }

    /// The metadata as a reference.
    ///
    /// # Safety
    /// The mbuf must be live, initialised by [`MbufMeta::init`], and not being written by anyone else.
    #[inline(always)]
    pub unsafe fn get<'a>(m: *mut RawMbuf) -> &'a MbufMeta {
        // SAFETY: per the contract.
        unsafe { &*Self::of(m).as_ptr() }
    }

    /// Mutable access, for the owner of the packet.
    ///
    /// # Safety
    /// As [`MbufMeta::get`], and the caller owns the packet exclusively.
    #[inline(always)]
    pub unsafe fn get_mut<'a>(m: *mut RawMbuf) -> &'a mut MbufMeta {
        // SAFETY: per the contract.
        unsafe { &mut *Self::of(m).as_ptr() }
    }
}

// SAFETY: the link slot is a field of the packet's own private area, alive as
// long as the mbuf, and only the stage touches it while the packet is staged.
unsafe impl StagePacket for MbufMeta {
    #[inline(always)]
    fn link(p: NonNull<Self>) -> *const crate::receive::sync::AtomicPtr<Self> {
        // SAFETY: p points at an initialised MbufMeta (init ran at RX).
        unsafe { &(*p.as_ptr()).link as *const AtomicPtr<MbufMeta> }
    }
}

impl PacketMeta for MbufMeta {
    #[inline(always)]
    unsafe fn truesize(p: NonNull<Self>) -> u32 {
        // The same function the consumer releases with: charge == release
        // by construction, whichever pool (RX or small) the mbuf is from.
        // SAFETY: the caller owns a live packet of an engine pool: nobody
        // else writes it while we read buf_len.
        truesize_of(unsafe { MbufRef::from_ptr(Self::mbuf(p)) })
    }
    #[inline(always)]
    unsafe fn set_drop_snapshot(p: NonNull<Self>, drops: u32) {
        // SAFETY: the caller owns a live packet.
        unsafe { (*p.as_ptr()).drop_snapshot = drops }
    }
}

/// A socket's delivery ring (an `rte_ring` of mbufs, single producer: the
/// delivery lock serialises its producers) as the receive heart's [`Sink`].
/// It records the stage-to-delivery latency (to the start of the burst
/// that delivers: `latency::burst_clock`), under the delivery lock.
#[derive(Debug)]
pub struct RingSink {
    ring: Arc<MbufRing>,
    hist: Arc<Histogram>,
    /// `latency::inverse` of TSC cycles per µs.
    us_inv: u64,
    /// The socket's sleeping reader, if one registered (an application's
    /// poller thread): woken after an enqueue, as `sk_data_ready` wakes a
    /// kernel socket's reader. Unregistered, a kick is one load.
    wake: Arc<crate::wake::Wake>,
}

impl RingSink {
    /// A sink into `ring` recording into `hist` (`us_inv`: `latency::inverse`
    /// of TSC cycles per µs), kicking `wake` after each enqueue.
    pub fn new(
        ring: Arc<MbufRing>,
        hist: Arc<Histogram>,
        us_inv: u64,
        wake: Arc<crate::wake::Wake>,
    ) -> Self {
        Self {
            ring,
            hist,
            us_inv,
            wake,
        }
    }
}

impl Sink<MbufMeta> for RingSink {
    #[inline]
    unsafe fn enqueue_burst(&mut self, pkts: &[NonNull<MbufMeta>]) -> usize {
        // Not zeroed: this runs once per socket group of every burst, and
        // zeroing two DRAIN_BURST arrays cost more than filling the few
        // slots a group uses (a memset of 1 KiB per call).
        let mut objs = [const { std::mem::MaybeUninit::<*mut RawMbuf>::uninit() }; DRAIN_BURST];
        let mut stamps = [const { std::mem::MaybeUninit::<u64>::uninit() }; DRAIN_BURST];
        let n = pkts.len().min(DRAIN_BURST);
        // Read the RX stamps before the enqueue: once in the ring, the consumer
        // (which takes no lock) may free a packet at any moment.
        for ((o, t), p) in objs.iter_mut().zip(stamps.iter_mut()).zip(&pkts[..n]) {
            o.write(MbufMeta::mbuf(*p));
            // SAFETY: the caller still owns the live packet here (the
            // contract), its metadata set at RX; nobody else writes it.
            t.write(unsafe { p.as_ref() }.rx_tsc);
        }
        // SAFETY: the loop above initialised the first n slots of both.
        let (objs, stamps) = unsafe {
            (
                std::slice::from_raw_parts(objs.as_ptr().cast::<*mut RawMbuf>(), n),
                std::slice::from_raw_parts(stamps.as_ptr().cast::<u64>(), n),
            )
        };
        // SAFETY: the caller owns each packet exclusively, once each, and
        // none is on a stage (the contract); the ring takes the prefix it
        // holds, the rest stay the caller's.
        let done = unsafe { self.ring.enqueue_raw(objs) }.min(n);
        if done > 0 {
            self.wake.kick();
        }
        // Packets of one RX burst share its stamp: one histogram update per
        // run of equal stamps (usually one per burst), not per datagram.
        // Measured to the start of this RX lcore's burst (`burst_clock`);
        // another thread (a teardown's drain) reads the TSC.
        let now = crate::latency::burst_clock::get().unwrap_or_else(eal::rdtsc);
        let mut i = 0;
        while i < done {
            let t = stamps[i];
            let run = stamps[i..done].iter().take_while(|&&x| x == t).count();
            self.hist
                .record_scaled_n(now.saturating_sub(t), self.us_inv, run as u64);
            i += run;
        }
        done
    }
}

/// Free what a closed socket's stages still hold
/// ([`RxSocket::drain_closed`], only after every RX lcore has stopped
/// enqueueing), in bulk; how many packets that was.
pub fn free_closed_stages<S: Sink<MbufMeta>>(rx: &RxSocket<MbufMeta, S>) -> u64 {
    let mut free = FreeList::default();
    rx.drain_closed(&mut |p, _r| {
        // SAFETY: drain_closed hands each stranded packet, an mbuf the stage
        // owned, to us, once: we give its reference up to the free list.
        unsafe { free.push(MbufMeta::mbuf(p)) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An mbuf struct followed by its private area, as in an engine pool.
    #[repr(C, align(64))]
    struct FakeMbuf {
        m: RawMbuf,
        area: [u8; PRIV_SIZE as usize],
    }

    fn fake(buf_len: u16) -> Box<FakeMbuf> {
        Box::new(FakeMbuf {
            m: RawMbuf::detached(buf_len, PRIV_SIZE),
            area: [0; PRIV_SIZE as usize],
        })
    }

    /// The fake's mbuf pointer, valid for its private area too.
    fn ptr(f: &mut FakeMbuf) -> *mut RawMbuf {
        (f as *mut FakeMbuf).cast()
    }

    #[test]
    fn consumer_truesize_equals_what_rx_charges() {
        // 2176: the default RX pool's data room; 576 and 704: small-pool rooms.
        for room in [2176u16, 576, 704, 128 + 64, u16::MAX] {
            let mut f = fake(room);
            let m = ptr(&mut f);
            // SAFETY: only the length fields of the fake are read.
            let v = unsafe { MbufRef::from_ptr(m) };
            // rx.rs charges sizeof(rte_mbuf) + priv_size + buf_len per datagram
            // (MbufRef::truesize); Mempool::truesize and the small cache use
            // sizeof + priv_size + data_room.
            let rx = mbuf::MBUF_SIZE as u32 + u32::from(v.priv_size()) + u32::from(v.buf_len());
            assert_eq!(v.truesize(), rx);
            assert_eq!(truesize_of(v), rx, "room {room}");
            // SAFETY: m points at the fake mbuf.
            let p = unsafe { MbufMeta::of(m) };
            // SAFETY: as above.
            assert_eq!(unsafe { <MbufMeta as PacketMeta>::truesize(p) }, rx);
        }
        assert_eq!(mbuf::MBUF_SIZE, 128, "two cache lines");
    }

    #[test]
    fn hot_meta_falls_back_to_the_private_area_and_is_copied() {
        // No EAL here: the dynfield is not registered, the fallback slot is used.
        let (mut a, mut b) = (fake(2176), fake(576));
        let (ma, mb) = (ptr(&mut a), ptr(&mut b));
        let h = HotMeta {
            rx_tsc: 0x1234_5678_9abc,
            payload_len: 1472,
        };
        // SAFETY: live fake mbufs we own; the views end before the next write.
        unsafe {
            hot_ptr(ma).write(h);
            assert_eq!(hot(MbufRef::from_ptr(ma)), h);
            copy_hot(ma, mb);
            assert_eq!(hot(MbufRef::from_ptr(mb)), h);
        }
        let base = ma as usize;
        let at = hot_ptr(ma) as usize - base;
        assert!(
            at >= mbuf::MBUF_SIZE && at + 16 <= std::mem::size_of::<FakeMbuf>(),
            "inside the private area"
        );
        assert_eq!(at % 8, 0);
        // Without a private area the fallback reads zeroes, not past the struct.
        let mut bare = RawMbuf::detached(2176, 0);
        // SAFETY: only priv_size is read.
        let v = unsafe { MbufRef::from_ptr(&mut bare) };
        assert_eq!(hot(v), HotMeta::default());
    }

    #[test]
    fn views_need_the_engine_private_area() {
        let mut f = fake(2176);
        let m = ptr(&mut f);
        // SAFETY: a fake mbuf with the engine's private area, all zero.
        let meta = MbufMeta::view(unsafe { MbufRef::from_ptr(m) }).expect("engine pool");
        assert_eq!((meta.socket, meta.family), (0, Family::V4));
        // SAFETY: as above, used exclusively here.
        MbufMeta::view_mut(unsafe { MbufMut::from_ptr(m) })
            .unwrap()
            .socket = 7;
        // SAFETY: as above.
        assert_eq!(unsafe { MbufMeta::get(m) }.socket, 7);
        let mut bare = RawMbuf::detached(2176, 0);
        // SAFETY: only priv_size is read.
        assert!(MbufMeta::view(unsafe { MbufRef::from_ptr(&mut bare) }).is_none());
    }
}
