//! Fragments on the RX lcore: the parse pass hands every UDP fragment here
//! (cold, off the per-packet path); the lcore's [`reasm::Reassembler`]
//! holds its mbuf until the datagram completes, fails or expires. A
//! completed datagram becomes one mbuf chain (the first fragment's headers,
//! fixed up, then every fragment's data, later fragments' headers stripped
//! by moving their data start) and goes through the ordinary parse; the
//! RX pass then looks it up, accounts and delivers it like any datagram.
//!
//! The parse runs on a copy of the chain in a per-lcore scratch frame
//! (preallocated, 64 KiB): the same `parse_into` every frame goes through,
//! so the UDP checksum is verified over every segment's bytes; the copy
//! costs a few microseconds per reassembled datagram and nothing per
//! ordinary packet.
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Mutex;

use dpdk_sys::mbuf::{FreeList, MbufMut, MbufRef, RawMbuf};

use super::shared::RxLcore;
use crate::config::ReassemblyConf;
use crate::parse::{self, Datagram, Family, Offload};
use crate::reasm::{self, ReasmConf, Reassembler, Verdict};

/// A held fragment's mbuf.
pub struct FragMbuf(NonNull<RawMbuf>);

// SAFETY: a held fragment's mbuf belongs to the table alone; the table is
// used by its RX lcore only (teardown clears it after that lcore stopped).
unsafe impl Send for FragMbuf {}

/// One RX lcore's reassembly state, preallocated at start.
pub struct LcoreReasm {
    table: Reassembler<FragMbuf>,
    scratch: Vec<u8>,
}

/// Bytes a reassembled frame can take: Ethernet, two VLAN tags, 65 535.
const SCRATCH: usize = 14 + 8 + 65_535;

impl LcoreReasm {
    /// The table for `conf`, timing in TSC cycles at `hz`.
    pub fn new(conf: &ReassemblyConf, hz: u64) -> LcoreReasm {
        LcoreReasm {
            table: Reassembler::new(ReasmConf {
                max_datagrams: conf.max_datagrams as usize,
                max_frags: conf.max_frags as usize,
                high_thresh: usize::try_from(conf.high_thresh).unwrap_or(usize::MAX),
                timeout: hz.saturating_mul(u64::from(conf.timeout_secs)),
            }),
            scratch: vec![0; SCRATCH],
        }
    }
}

/// Per RX lcore: `None` when reassembly is off.
pub type Slot = Mutex<Option<LcoreReasm>>;

/// What became of a fragment offered by the parse pass.
pub enum Offered {
    /// Not a UDP fragment this engine reassembles: the caller counts the
    /// parser's error as before.
    NotTaken,
    /// Held, or dropped and counted by the table (freed via `free`).
    Taken,
    /// Completed: the chain's head, parsed into `out`.
    Complete(*mut RawMbuf),
}

/// Offers the fragment `m` (the parser said `FragmentFirst` or
/// `FragmentLater`) to the lcore's table at `tsc`.
///
/// # Safety
/// `m` is a live mbuf of an engine pool that the caller owns exclusively;
/// unless `NotTaken` is returned it is given up (held, freed through
/// `free`, or part of the returned chain, which the caller then owns).
#[cold]
#[inline(never)]
pub unsafe fn offer(
    me: &RxLcore,
    m: *mut RawMbuf,
    tsc: u64,
    free: &mut FreeList,
    out: &mut MaybeUninit<Datagram>,
) -> Offered {
    let mut guard = me.reasm.lock().unwrap_or_else(|p| p.into_inner());
    let Some(st) = guard.as_mut() else {
        return Offered::NotTaken;
    };
    // SAFETY: the caller's contract, passed on.
    let r = unsafe { offer_locked(me, st, m, tsc, free, out) };
    me.reasm_deadline.set(st.table.next_deadline());
    r
}

/// [`offer`] with the table in hand.
///
/// # Safety
/// As [`offer`].
unsafe fn offer_locked(
    me: &RxLcore,
    st: &mut LcoreReasm,
    m: *mut RawMbuf,
    tsc: u64,
    free: &mut FreeList,
    out: &mut MaybeUninit<Datagram>,
) -> Offered {
    // SAFETY: ours alone (the contract), read only during the view.
    let v = unsafe { MbufRef::from_ptr(m) };
    if v.nb_segs() != 1 {
        return Offered::NotTaken;
    }
    let Some(info) = reasm::classify(v.data()) else {
        return Offered::NotTaken;
    };
    let truesize = v.truesize() as usize;
    let stats = &me.reasm_stats;
    // SAFETY: the table hands back mbufs it held, ours to free.
    let mut release = |b: FragMbuf| unsafe { free.push(b.0.as_ptr()) };
    // SAFETY: a live mbuf is not null.
    let buf = FragMbuf(unsafe { NonNull::new_unchecked(m) });
    let verdict = st.table.insert(tsc, &info, buf, truesize, stats, &mut release);
    let a = match verdict {
        Verdict::Complete(a) => a,
        _ => {
            return Offered::Taken;
        }
    };
    let family = a.family;
    let total = a.total;
    // Link the pieces: the head keeps its headers, the others only data.
    let mut head: Option<MbufMut<'_>> = None;
    let mut broken = false;
    for p in a.pieces {
        let seg = p.buf.0.as_ptr();
        if broken {
            // SAFETY: a piece the table gave up, ours.
            unsafe { free.push(seg) };
            continue;
        }
        match head.as_mut() {
            None => {
                // SAFETY: the first piece, ours alone.
                let mut h = unsafe { MbufMut::from_ptr(seg) };
                if fix_head(&mut h, &p, family, total) {
                    head = Some(h);
                } else {
                    broken = true;
                    // SAFETY: ours.
                    unsafe { free.push(seg) };
                }
            }
            Some(h) => {
                // SAFETY: a later piece, ours alone; chained below.
                let mut s = unsafe { MbufMut::from_ptr(seg) };
                let len = u16::try_from(p.len).unwrap_or(u16::MAX);
                // SAFETY: `s` is ours, not in the head's chain.
                if !s.set_window(p.data_off, len) || !unsafe { h.chain(seg) } {
                    broken = true;
                    // SAFETY: ours (not chained: chain refused it).
                    unsafe { free.push(seg) };
                }
            }
        }
    }
    let Some(head) = head else {
        count_error(me, family, parse::Reason::Truncated);
        return Offered::Taken;
    };
    let hp = head.as_ptr();
    if broken {
        // Cannot happen for a datagram the table completed (its pieces fit
        // their frames); counted, never delivered half.
        count_error(me, family, parse::Reason::Truncated);
        // SAFETY: the chain is ours; free_bulk frees every segment.
        unsafe { free.push(hp) };
        return Offered::Taken;
    }
    // The ordinary parse over the whole datagram, from the scratch copy.
    // SAFETY: the chain is ours; read only while the view lives.
    let chain = unsafe { MbufRef::from_ptr(hp) };
    let mut n = 0usize;
    for seg in chain.segments() {
        let Some(dst) = st.scratch.get_mut(n..n + seg.len()) else {
            broken = true;
            break;
        };
        dst.copy_from_slice(seg);
        n += seg.len();
    }
    let parsed = if broken {
        Err(parse::ParseError::Truncated {
            family: Some(family),
        })
    } else {
        parse::parse_into(&st.scratch[..n], Offload::default(), out).map(|_| ())
    };
    match parsed {
        Ok(()) => Offered::Complete(hp),
        Err(e) => {
            let fam = e.family().map(|f| f.index()).unwrap_or(2);
            me.mib.errors[fam][e.reason().index()].add(1);
            // SAFETY: the chain is ours, given up here.
            unsafe { free.push(hp) };
            Offered::Taken
        }
    }
}

fn count_error(me: &RxLcore, family: Family, r: parse::Reason) {
    me.mib.errors[family.index()][r.index()].add(1);
}

/// Makes the first piece's mbuf the reassembled datagram's head: the IP
/// header fixed up (`reasm::fixup_header`), IPv6's fragment header removed
/// by moving the headers before it 8 bytes up, the data cut to the piece.
fn fix_head(h: &mut MbufMut<'_>, p: &reasm::Piece<FragMbuf>, family: Family, total: u32) -> bool {
    let l3 = usize::from(p.l3_off);
    let unfrag = usize::from(p.unfrag_len);
    let hdr = l3 + unfrag;
    let end = usize::from(p.data_off) + p.len as usize;
    let data = h.data_mut();
    if end > data.len() || hdr > usize::from(p.data_off) {
        return false;
    }
    if reasm::fixup_header(data, l3, unfrag, family, total).is_none() {
        return false;
    }
    let (start, len) = match family {
        Family::V4 => (0usize, end),
        Family::V6 => {
            // Slide Ethernet, IPv6 and the unfragmentable headers over the
            // fragment header.
            let fl = parse::ipv6::FRAG_HEADER_LEN;
            data.copy_within(0..hdr, fl);
            (fl, end - fl)
        }
    };
    match (u16::try_from(start), u16::try_from(len)) {
        (Ok(s), Ok(l)) => h.set_window(s, l),
        _ => false,
    }
}

/// On an idle poll: drops the datagrams past their deadline (their
/// fragments freed, `ReasmTimeout` counted). One load when none is due.
#[inline]
pub fn idle(me: &RxLcore, free: &mut FreeList) {
    let due = me.reasm_deadline.get();
    if due != 0 && dpdk_sys::eal::rdtsc() >= due {
        expire(me, free);
    }
}

#[cold]
#[inline(never)]
fn expire(me: &RxLcore, free: &mut FreeList) {
    let mut guard = me.reasm.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(st) = guard.as_mut() {
        // SAFETY: the table hands back mbufs it held, ours to free.
        let mut release = |b: FragMbuf| unsafe { free.push(b.0.as_ptr()) };
        st.table
            .expire(dpdk_sys::eal::rdtsc(), &me.reasm_stats, &mut release);
        me.reasm_deadline.set(st.table.next_deadline());
    }
    free.flush();
}

/// Teardown, after the lcore stopped: frees every fragment still held
/// (counted as dropped fragments, so the books close).
pub fn clear(me: &RxLcore) {
    let mut guard = me.reasm.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(st) = guard.as_mut() {
        let mut free = FreeList::default();
        // SAFETY: the table hands back mbufs it held, ours to free.
        let mut release = |b: FragMbuf| unsafe { free.push(b.0.as_ptr()) };
        st.table.clear(&me.reasm_stats, &mut release);
        free.flush();
    }
    me.reasm_deadline.set(0);
}
