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
    // SAFETY: the pieces' mbufs are the table's, now ours; what is not
    // linked is freed through `free`.
    let linked = unsafe { link(a.pieces, family, a.total, &mut |seg| free.push(seg)) };
    let Some(hp) = linked else {
        // Cannot happen for a datagram the table completed (its pieces fit
        // their frames); counted, never delivered half.
        count_error(me, family, parse::Reason::Truncated);
        return Offered::Taken;
    };
    let mut broken = false;
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

/// Links a completed datagram's pieces into one mbuf chain: the first
/// keeps its headers, fixed up ([`fix_head`]), the others are narrowed to
/// their data. Returns the head; `None` when a piece does not fit its
/// frame (then every piece, linked or not, went to `drop`).
///
/// # Safety
/// Every piece's mbuf is live and the caller's alone; each is either part
/// of the returned chain or handed to `drop` (once).
pub unsafe fn link<I: Iterator<Item = reasm::Piece<FragMbuf>>>(
    pieces: I,
    family: Family,
    total: u32,
    drop: &mut impl FnMut(*mut RawMbuf),
) -> Option<*mut RawMbuf> {
    let mut head: Option<MbufMut<'_>> = None;
    let mut broken = false;
    for p in pieces {
        let seg = p.buf.0.as_ptr();
        if broken {
            drop(seg);
            continue;
        }
        match head.as_mut() {
            None => {
                // SAFETY: the first piece, ours alone (the contract).
                let mut h = unsafe { MbufMut::from_ptr(seg) };
                if fix_head(&mut h, &p, family, total) {
                    head = Some(h);
                } else {
                    broken = true;
                    drop(seg);
                }
            }
            Some(h) => {
                // SAFETY: a later piece, ours alone; chained below.
                let mut s = unsafe { MbufMut::from_ptr(seg) };
                let len = u16::try_from(p.len).unwrap_or(u16::MAX);
                // SAFETY: `s` is ours, not in the head's chain.
                if !s.set_window(p.data_off, len) || !unsafe { h.chain(seg) } {
                    broken = true;
                    drop(seg);
                }
            }
        }
    }
    let hp = head?.as_ptr();
    if broken {
        // The chain so far goes as one (free_bulk frees every segment).
        drop(hp);
        return None;
    }
    Some(hp)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use crate::reasm::{fragment_frame, ReasmStats};
    use dpdk_sys::mbuf::RawMbuf;

    fn frame(v6: bool, len: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| (i * 5 + 1) as u8).collect();
        let l3 = if v6 {
            L3Spec::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                hop_limit: 64,
                ext: &[],
            }
        } else {
            L3Spec::V4 {
                src: "198.18.0.1".parse().unwrap(),
                dst: "198.18.0.2".parse().unwrap(),
                ttl: 64,
                options: &[],
                ident: 3,
                frag: FragSpec::default(),
            }
        };
        build::to_vec(&FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlans: &[],
            l3,
            sport: 1,
            dport: 2,
            payload: &payload,
            udp_csum: CsumMode::Correct,
        })
        .unwrap()
    }

    /// Fragments in mbufs over plain buffers, reassembled by the table
    /// and linked: the chain's segments read back the original frame, and
    /// it parses as one datagram (no EAL: `rte_pktmbuf_chain` only writes
    /// fields).
    #[test]
    fn linked_chain_reads_back_the_original_frame() {
        for v6 in [false, true] {
            let orig = frame(v6, 4000);
            let fs = fragment_frame(&orig, &[1480, 2960], 3).unwrap();
            let mut bufs: Vec<Vec<u8>> = fs
                .iter()
                .map(|f| {
                    let mut b = vec![0u8; 2176];
                    b[128..128 + f.len()].copy_from_slice(f);
                    b
                })
                .collect();
            let mut mbufs: Vec<Box<RawMbuf>> = bufs
                .iter_mut()
                .zip(&fs)
                .map(|(b, f)| Box::new(RawMbuf::over(b, 128, f.len() as u16).unwrap()))
                .collect();
            let mut table = Reassembler::new(ReasmConf {
                max_datagrams: 4,
                max_frags: 8,
                high_thresh: 1 << 20,
                timeout: 100,
            });
            let stats = ReasmStats::default();
            let mut head = None;
            // Out of order: last, first, middle.
            for k in [2usize, 0, 1] {
                let m: *mut RawMbuf = &mut *mbufs[k];
                // SAFETY: a live RawMbuf over a live buffer, ours.
                let info = reasm::classify(unsafe { MbufRef::from_ptr(m) }.data()).unwrap();
                let buf = FragMbuf(NonNull::new(m).unwrap());
                let mut released = |_b: FragMbuf| panic!("nothing is dropped");
                if let Verdict::Complete(a) = table.insert(0, &info, buf, 2176, &stats, &mut released)
                {
                    let (fam, total) = (a.family, a.total);
                    // SAFETY: the pieces' mbufs are ours (the buffers above).
                    head = unsafe { link(a.pieces, fam, total, &mut |_| panic!("all link")) };
                }
            }
            let h = head.expect("complete and linked");
            // SAFETY: the chain over our buffers.
            let v = unsafe { MbufRef::from_ptr(h) };
            assert_eq!(v.nb_segs(), 3);
            assert_eq!(v.pkt_len() as usize, orig.len());
            let bytes: Vec<u8> = v.segments().flatten().copied().collect();
            assert_eq!(bytes, orig, "v6={v6}");
            let d = parse::parse(&bytes, Offload::default()).unwrap();
            assert_eq!(usize::from(d.payload_len), 4000);
            // Every segment's buffer is charged.
            let one = dpdk_sys::mbuf::MBUF_SIZE as u32 + 2176;
            assert_eq!(v.truesize(), 3 * one);
            assert!(stats.balanced());
        }
    }
}
