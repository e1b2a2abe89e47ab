//! What travels with a packet in its mbuf's private area.
//!
//! The RX lcore fills this once, right after parsing and the early-demux
//! lookup; accounting, the stage link, delivery and the consumer read it and
//! never parse or look up again (the kernel keeps `skb->sk` for the same
//! reason). It lives in the pool's private area rather than a dynfield: the
//! engine creates every pool its ports receive into, and 64 bytes there hold
//! more than the 36 spare bytes of dynfield space.
use std::ptr::NonNull;
use std::sync::atomic::AtomicPtr;

use dpdk_sys::{ffi, mbuf};

use crate::delivery::PacketMeta;
use crate::parse::{Datagram, Family};
use crate::stage::StagePacket;

/// Bytes reserved after `struct rte_mbuf` in every pool the engine creates
/// (a multiple of RTE_MBUF_PRIV_ALIGN = 8).
pub const PRIV_SIZE: u16 = 64;

/// The per-packet metadata. `#[repr(C)]` so its size is checked against
/// [`PRIV_SIZE`] at compile time.
#[repr(C)]
#[derive(Debug)]
pub struct MbufMeta {
    /// The stage's intrusive link (the kernel's `skb->ll_node`).
    link: AtomicPtr<MbufMeta>,
    /// TSC when the RX lcore received the burst.
    pub rx_tsc: u64,
    /// Bytes charged to the socket (mbuf struct + private area + data room).
    pub truesize: u32,
    /// The socket's drop count when the packet's batch was drained (SO_RXQ_OVFL).
    pub drop_snapshot: u32,
    /// Early-demux result: the socket's id.
    pub socket: u32,
    pub l3_off: u16,
    pub l4_off: u16,
    pub payload_off: u16,
    pub payload_len: u16,
    /// 4 or 6.
    pub family: u8,
    /// Bit 0: copied into a small buffer under pressure.
    pub flags: u8,
    /// Port the packet arrived on (echo replies leave through it).
    pub port: u16,
}

pub const FLAG_CONDENSED: u8 = 1;

const _: () = assert!(std::mem::size_of::<MbufMeta>() <= PRIV_SIZE as usize);

impl MbufMeta {
    /// The metadata of an mbuf from one of the engine's pools.
    #[inline(always)]
    pub fn of(m: *mut ffi::rte_mbuf) -> NonNull<MbufMeta> {
        // The private area is 8-aligned and at least PRIV_SIZE long in every engine pool.
        // SAFETY: `m` is non-null (an mbuf), so the offset pointer is too.
        unsafe { NonNull::new_unchecked(mbuf::priv_area(m) as *mut MbufMeta) }
    }

    /// The mbuf a metadata block belongs to.
    #[inline(always)]
    pub fn mbuf(p: NonNull<MbufMeta>) -> *mut ffi::rte_mbuf {
        (p.as_ptr() as *mut u8).wrapping_sub(std::mem::size_of::<ffi::rte_mbuf>()) as *mut ffi::rte_mbuf
    }

    /// Fill the metadata of a freshly received, demuxed datagram.
    ///
    /// # Safety
    /// `m` must be a live mbuf from a pool with `priv_size >= PRIV_SIZE`, owned by the caller.
    #[inline(always)]
    pub unsafe fn init(m: *mut ffi::rte_mbuf, d: &Datagram, socket: u32, truesize: u32, rx_tsc: u64, port: u16) {
        let meta = MbufMeta {
            link: AtomicPtr::new(std::ptr::null_mut()),
            rx_tsc,
            truesize,
            drop_snapshot: 0,
            socket,
            l3_off: d.l3_off,
            l4_off: d.l4_off,
            payload_off: d.payload_off,
            payload_len: d.payload_len,
            family: match d.family {
                Family::V4 => 4,
                Family::V6 => 6,
            },
            flags: 0,
            port,
        };
        // SAFETY: per the contract the private area is ours and large enough;
        // a whole-struct write never reads the uninitialised bytes.
        unsafe { std::ptr::write(Self::of(m).as_ptr(), meta) }
    }

    /// The metadata as a reference.
    ///
    /// # Safety
    /// The mbuf must be live, initialised by [`MbufMeta::init`], and not being written by anyone else.
    #[inline(always)]
    pub unsafe fn get<'a>(m: *mut ffi::rte_mbuf) -> &'a MbufMeta {
        // SAFETY: per the contract.
        unsafe { &*Self::of(m).as_ptr() }
    }

    /// Mutable access, for the owner of the packet.
    ///
    /// # Safety
    /// As [`MbufMeta::get`], and the caller owns the packet exclusively.
    #[inline(always)]
    pub unsafe fn get_mut<'a>(m: *mut ffi::rte_mbuf) -> &'a mut MbufMeta {
        // SAFETY: per the contract.
        unsafe { &mut *Self::of(m).as_ptr() }
    }
}

// SAFETY: the link slot is a field of the packet's own private area, alive as
// long as the mbuf, and only the stage touches it while the packet is staged.
unsafe impl StagePacket for MbufMeta {
    #[inline(always)]
    fn link(p: NonNull<Self>) -> *const crate::sync::AtomicPtr<Self> {
        // SAFETY: p points at an initialised MbufMeta (init ran at RX).
        unsafe { &(*p.as_ptr()).link as *const AtomicPtr<MbufMeta> }
    }
}

impl PacketMeta for MbufMeta {
    #[inline(always)]
    unsafe fn truesize(p: NonNull<Self>) -> u32 {
        // SAFETY: the caller owns a live packet.
        unsafe { (*p.as_ptr()).truesize }
    }
    #[inline(always)]
    unsafe fn set_drop_snapshot(p: NonNull<Self>, drops: u32) {
        // SAFETY: the caller owns a live packet.
        unsafe { (*p.as_ptr()).drop_snapshot = drops }
    }
}
