//! What travels with a packet: one dynfield in its mbuf's second cache
//! line, and the stage link in its private area.
//!
//! The RX lcore fills the dynfield once, right after parsing and the
//! early-demux lookup; accounting, delivery and the consumer read it and
//! never parse or look up again (the kernel keeps `skb->sk` for the same
//! reason).
//!
//! * [`DgramMeta`], in a registered dynfield (`rte_mbuf_dynfield_register_offset`,
//!   the last 24 bytes of the mbuf's second cache line, [`DGRAM_OFFSET`]): the RX TSC, the socket, the
//!   offsets, the payload length, the family, the drop count at delivery
//!   (`SO_RXQ_OVFL`). 24 bytes of the 36 the second line has free. What it
//!   does not hold is in the mbuf already: the port (`m->port`, which
//!   [`MbufMeta::init`] sets), the truesize (`buf_len` plus the constant
//!   [`MBUF_OVERHEAD`], exactly what RX charges) and the payload offset
//!   (the UDP header's end).
//! * [`MbufMeta`], in the pool's private area (the mbuf's third cache line):
//!   the stage's intrusive link, touched only when a socket group is staged
//!   (another RX lcore holds the socket's delivery lock, or its stage is
//!   not empty).
//!
//! And the mbuf's side of the receive heart's traits: [`MbufMeta`] as its
//! `StagePacket` and `PacketMeta`, [`RingSink`] (the socket's `rte_ring`)
//! as its `Sink`, and [`free_closed_stages`], the mbufs' `to_free` for a
//! closed socket's stages.
//!
//! # Why the second line
//!
//! The PMD has just written both of the mbuf's lines (the PMDs this project
//! runs on, `net_pcap`, `net_af_packet`, `net_memif`, `net_ring`,
//! `net_null`, take their mbufs with `rte_pktmbuf_alloc`, whose
//! `rte_pktmbuf_reset` writes `next` and `tx_offload` in the second line
//! for every packet), and the consumer's `rte_pktmbuf_free_bulk` reads both
//! (`m->next` is in the second). The metadata there adds no line on either
//! side. Until 2026-12-03 everything but the RX TSC and the payload length
//! lived in the private area, a third line per datagram that the RX lcore
//! wrote (and prefetched at the start of each burst, since it arrived cold
//! from the pool) and the drainer wrote again (the drop count): with the
//! private area out of the per-datagram path the pipeline delivered 1.08x
//! (12 pairs of 2 s runs on the benchmark's pipeline config, 9 above 1; a
//! scratch build that skipped those writes: 1.12x, 10 of 12). The first line has 8
//! bytes that are free once RX has read them (the `hash` union), but they
//! are the PMD's (RSS hash, FDIR id) and the eventdev's field, so reusing
//! them would be a convention nobody else knows. (A vector PMD that rearms
//! only the first line would leave the second clean; there the dynfield
//! costs a write to it, still one line fewer than the private area.)
//!
//! # Cache lines one datagram moves between the RX CPU and the consumer's CPU
//!
//! Count handler, `numa-queues`, one RX lcore, a consumer on the other CPU.
//! "Moves" means: written on one side, then read or written on the other.
//!
//! | line | who touches it |
//! |---|---|
//! | mbuf line 0 (`buf_addr` .. `pool`) | RX (PMD) writes; consumer reads `refcnt`, `pool`, `ol_flags` in free and `buf_len` for the truesize: 1 line |
//! | mbuf line 1 (`next` .. dynfields) | RX (`rte_pktmbuf_reset`, then [`DgramMeta`]) writes; consumer reads `next` in free and the dynfield: 1 line |
//! | private area ([`MbufMeta`]) | nobody, unless the group is staged (then RX writes the link and reads it back): 0 lines |
//! | frame data | RX reads (parse, on its own CPU, after the PMD wrote it there); the count consumer never touches it: 0 lines |
//! | ring slot | RX drainer writes 8 B, consumer reads: 1/8 line per datagram |
//! | mempool ring slot (the buffer's way back) | consumer's cache flush writes 8 B, RX's refill reads: 1/8 line |
//! | socket counters | drainer writes `delivered`; consumer writes `consumed`, release deficit (rcvbuf/4 batching): per burst, not per datagram |
//!
//! Then the buffers come back: the consumer's `rte_pktmbuf_free_bulk` puts
//! them into its own lcore's mempool cache, and when that cache overflows
//! into the pool's ring the RX lcore's next `rx_burst` allocates them again:
//! mbuf lines 0 and 1 move back (the PMD writes them). Per datagram: 2
//! lines + 1/4 (before 2026-12-01 the consumer also read the private area:
//! 3 + 1/4).
use std::ptr::NonNull;
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;

use dpdk_sys::mbuf::{self, FreeList, MbufMut, MbufRef, RawMbuf};
use dpdk_sys::{eal, MbufRing};

use crate::latency::Histogram;
use crate::parse::{udp, Datagram, Family};
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

/// What the RX lcore learned of a datagram, kept in a registered dynfield
/// in the mbuf's second cache line (see the module docs). Every field is
/// valid for any bits but `family`, which only this module's writers
/// ([`MbufMeta::init`], [`copy_dgram`]) and DPDK's zeroing of a new pool
/// (`V4` is 0) ever store.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DgramMeta {
    /// TSC when the RX lcore received the burst.
    pub rx_tsc: u64,
    /// The socket's drop count when the packet's batch was drained (SO_RXQ_OVFL).
    pub drop_snapshot: u32,
    /// Early-demux result: the socket's id.
    pub socket: u32,
    pub l3_off: u16,
    pub l4_off: u16,
    /// UDP payload bytes (every segment of a reassembled datagram).
    pub payload_len: u16,
    /// The datagram's IP family (one byte).
    pub family: Family,
    /// Bit 0 ([`FLAG_CONDENSED`]): copied into a small buffer under pressure.
    pub flags: u8,
}

/// All zero: what a fresh pool's mbufs hold (DPDK zeroes them).
impl Default for DgramMeta {
    fn default() -> DgramMeta {
        DgramMeta {
            rx_tsc: 0,
            drop_snapshot: 0,
            socket: 0,
            l3_off: 0,
            l4_off: 0,
            payload_len: 0,
            family: Family::V4,
            flags: 0,
        }
    }
}

impl DgramMeta {
    /// Where the UDP payload starts: right after the UDP header.
    #[inline(always)]
    pub fn payload_off(&self) -> u16 {
        self.l4_off.saturating_add(udp::HEADER_LEN as u16)
    }
}

pub const FLAG_CONDENSED: u8 = 1;

/// Name of the [`DgramMeta`] dynfield.
pub const DGRAM_DYNFIELD: &str = "udpdemux_dgram_meta";

/// Where [`DgramMeta`] is in every mbuf: the last 24 bytes of the second
/// cache line, inside DPDK's dynamic-field space, registered there by
/// [`register_dgram_meta`] so that no other library or PMD uses them. A
/// fixed offset, so that the per-packet code takes the field's address
/// without loading a registered one (DPDK's `rte_mbuf_dynfield_register`
/// would choose it at run time); the 12 bytes before it stay free for
/// others (a timestamp dynfield, 8 bytes 8-aligned, still fits).
pub const DGRAM_OFFSET: usize = mbuf::MBUF_SIZE - std::mem::size_of::<DgramMeta>();
const _: () = assert!(DGRAM_OFFSET >= mbuf::DYNFIELD1_OFFSET && DGRAM_OFFSET >= 64);
const _: () = assert!(DGRAM_OFFSET & (std::mem::align_of::<DgramMeta>() - 1) == 0);

/// Register the [`DgramMeta`] dynfield at [`DGRAM_OFFSET`] (idempotent; in a
/// secondary process, such as an out-of-process client, it finds the field
/// the engine registered, and fails if the engine's differs). Must run after
/// the EAL and before any pool, RX lcore or consumer exists, so that nothing
/// else takes those bytes. A process that never registers it (a unit test
/// without the EAL) still reads and writes the same bytes of its mbufs.
pub fn register_dgram_meta() -> Result<usize, dpdk_sys::DpdkError> {
    mbuf::dynfield_register_at(
        DGRAM_DYNFIELD,
        std::mem::size_of::<DgramMeta>(),
        std::mem::align_of::<DgramMeta>(),
        DGRAM_OFFSET,
    )
}

/// Where [`DgramMeta`] lives in `m`.
#[inline(always)]
fn dgram_ptr(m: *mut RawMbuf) -> *mut DgramMeta {
    mbuf::dynfield(m, DGRAM_OFFSET)
}

/// The metadata of a datagram: what [`MbufMeta::init`] (or [`copy_dgram`])
/// wrote. Of an mbuf RX did not stamp it reads zeroes or a stale value,
/// never undefined bytes.
#[inline(always)]
pub fn dgram(m: MbufRef<'_>) -> DgramMeta {
    // SAFETY: a live mbuf nobody writes meanwhile (the view's contract).
    // The field lies inside `struct rte_mbuf` (8-aligned: the struct is
    // cache-aligned), in bytes registered to it. Those bytes are a valid
    // DgramMeta: DPDK zeroes the struct when the pool is made, and only
    // this module's writers store there afterwards (see the type).
    unsafe { dgram_ptr(m.as_ptr()).read() }
}

/// As [`dgram`], to change the metadata, for the mbuf's exclusive user.
#[inline(always)]
pub fn dgram_mut(m: MbufMut<'_>) -> &mut DgramMeta {
    // SAFETY: as in `dgram`, and the use is exclusive (MbufMut's contract)
    // for the view's whole life, which the reference takes over.
    unsafe { &mut *dgram_ptr(m.as_ptr()) }
}

/// Copy the [`DgramMeta`] of `from` into `to` (a condensed copy of a datagram).
///
/// # Safety
/// Both must be live mbufs; the caller owns `to` exclusively.
#[inline(always)]
pub unsafe fn copy_dgram(from: *mut RawMbuf, to: *mut RawMbuf) {
    // SAFETY: per the contract.
    unsafe { dgram_ptr(to).write(dgram_ptr(from).read()) }
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

/// A packet's private area: the stage's intrusive link.
/// `NonNull<MbufMeta>` (the private area's address) is the packet as the
/// receive heart passes it around; `repr(C)` so its size is checked
/// against [`PRIV_SIZE`] at compile time.
#[repr(C)]
#[derive(Debug, Default)]
pub struct MbufMeta {
    /// The stage's intrusive link (the kernel's `skb->ll_node`).
    link: AtomicPtr<MbufMeta>,
}

const _: () = assert!(std::mem::size_of::<MbufMeta>() <= PRIV_SIZE as usize);
const _: () = assert!(std::mem::size_of::<DgramMeta>() == 24);

impl MbufMeta {
    /// Where the private area of `m` is. Pointer arithmetic; dereference it
    /// only for a live mbuf of an engine pool.
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

    /// The mbuf a private area belongs to.
    #[inline(always)]
    pub fn mbuf(p: NonNull<MbufMeta>) -> *mut RawMbuf {
        (p.as_ptr() as *mut u8).wrapping_sub(mbuf::MBUF_SIZE) as *mut RawMbuf
    }

    /// Fill the metadata of a freshly received, demuxed datagram: its
    /// [`DgramMeta`], and the port it came in on (`m->port`: most PMDs set
    /// it already; a store to the line the PMD just wrote).
    ///
    /// # Safety
    /// `m` must be a live mbuf from a pool with `priv_size >= PRIV_SIZE`, owned by the caller.
    #[inline(always)]
    pub unsafe fn init(m: *mut RawMbuf, d: &Datagram, socket: u32, rx_tsc: u64, port: u16) {
        let meta = DgramMeta {
            rx_tsc,
            drop_snapshot: 0,
            socket,
            l3_off: d.l3_off,
            l4_off: d.l4_off,
            payload_len: d.payload_len,
            family: d.family,
            flags: 0,
        };
        // SAFETY: per the contract the mbuf is ours, its DgramMeta too.
        unsafe {
            dgram_ptr(m).write(meta);
            MbufMut::from_ptr(m).set_port(port);
        }
    }
}

// SAFETY: the link slot is a field of the packet's own private area, alive as
// long as the mbuf, and only the stage touches it while the packet is staged.
unsafe impl StagePacket for MbufMeta {
    #[inline(always)]
    fn link(p: NonNull<Self>) -> *const crate::receive::sync::AtomicPtr<Self> {
        // SAFETY: p points at a packet's private area (an MbufMeta, which
        // DPDK zeroed with the pool: a null link is valid).
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
        // SAFETY: the caller owns a live packet of an engine pool: its
        // DgramMeta (set at RX) is ours to write.
        unsafe { (*dgram_ptr(Self::mbuf(p))).drop_snapshot = drops }
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
            t.write(unsafe { (*dgram_ptr(MbufMeta::mbuf(*p))).rx_tsc });
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
    fn dgram_meta_is_in_the_second_line_and_is_copied() {
        // No EAL here: the field is not registered, its bytes are the same.
        let (mut a, mut b) = (fake(2176), fake(576));
        let (ma, mb) = (ptr(&mut a), ptr(&mut b));
        let h = DgramMeta {
            rx_tsc: 0x1234_5678_9abc,
            drop_snapshot: 3,
            socket: 9,
            l3_off: 18,
            l4_off: 58,
            payload_len: 1472,
            family: Family::V6,
            flags: FLAG_CONDENSED,
        };
        assert_eq!(h.payload_off(), 66);
        // SAFETY: live fake mbufs we own; the views end before the next write.
        unsafe {
            dgram_ptr(ma).write(h);
            assert_eq!(dgram(MbufRef::from_ptr(ma)), h);
            copy_dgram(ma, mb);
            assert_eq!(dgram(MbufRef::from_ptr(mb)), h);
        }
        let at = dgram_ptr(ma) as usize - ma as usize;
        assert_eq!((at, at + 24), (104, mbuf::MBUF_SIZE), "the second line's last 24 bytes");
        assert!(at >= mbuf::DYNFIELD1_OFFSET, "in DPDK's dynamic-field space");
        // The private area holds the stage link alone.
        assert_eq!(std::mem::size_of::<MbufMeta>(), 8);
    }

    #[test]
    fn init_writes_the_dgram_meta_and_the_port_and_leaves_the_link() {
        let mut f = fake(2176);
        let m = ptr(&mut f);
        let frame = crate::parse::build::to_vec(&crate::parse::build::FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 9],
            dst_mac: [2, 0, 0, 0, 0, 1],
            vlans: &[],
            l3: crate::parse::build::L3Spec::V4 {
                src: "198.18.0.9".parse().unwrap(),
                dst: "198.18.0.1".parse().unwrap(),
                ttl: 64,
                options: &[],
                ident: 1,
                frag: Default::default(),
            },
            sport: 4000,
            dport: 53,
            payload: b"hello",
            udp_csum: crate::parse::build::CsumMode::Correct,
        })
        .unwrap();
        let d = crate::parse::parse(&frame, Default::default()).unwrap();
        // SAFETY: a fake mbuf with the engine's private area, ours alone.
        unsafe { MbufMeta::init(m, &d, 7, 0xabc, 3) };
        // SAFETY: as above.
        let v = unsafe { MbufRef::from_ptr(m) };
        let got = dgram(v);
        assert_eq!(
            (got.socket, got.rx_tsc, got.l3_off, got.l4_off, got.payload_off(), got.payload_len),
            (7, 0xabc, d.l3_off, d.l4_off, d.payload_off, 5)
        );
        assert_eq!((got.family, got.flags, got.drop_snapshot, v.port()), (Family::V4, 0, 0, 3));
        // SAFETY: m is a live fake engine mbuf; the link is in its private area.
        let p = unsafe { MbufMeta::of(m) };
        // SAFETY: as above: the drainer's write goes to the same place.
        unsafe { <MbufMeta as PacketMeta>::set_drop_snapshot(p, 41) };
        assert_eq!(dgram(v).drop_snapshot, 41);
        // SAFETY: the private area holds an MbufMeta (zeroed above).
        let link = unsafe { &*<MbufMeta as StagePacket>::link(p) };
        assert!(link.load(std::sync::atomic::Ordering::Relaxed).is_null(), "init leaves the stage link alone");
        // SAFETY: as above, used exclusively for this one write.
        dgram_mut(unsafe { MbufMut::from_ptr(m) }).socket = 8;
        assert_eq!(dgram(v).socket, 8);
    }
}
