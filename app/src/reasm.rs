//! IPv4 and IPv6 fragment reassembly, one table per RX lcore.
//!
//! The engine's own table, not DPDK's `rte_ip_frag` (docs/design.md says
//! why): the rules follow Linux (`net/ipv4/ip_fragment.c`,
//! `net/ipv6/reassembly.c`, `net/ipv4/inet_fragment.c`), the storage is
//! preallocated and bounded, and the logic is generic over the buffer `B`
//! that holds a fragment (an mbuf pointer on the RX lcore, a byte vector in
//! the tests and the fuzz target) with the time injected, so it runs
//! without an EAL.
//!
//! * Key: IPv4 (source, destination, protocol, ID), IPv6 (source,
//!   destination, ID), as the kernel's `ipq`/`frag_queue` (without its
//!   interface and defrag-user parts: one table serves one RX lcore).
//! * Bounds ([`ReasmConf`]): at most `max_datagrams` in progress (a new one
//!   evicts the oldest), at most `max_frags` fragments each, at most
//!   `high_thresh` bytes of buffer truesize held (over it, the oldest
//!   datagrams are evicted), and `timeout` (the kernel's `ipfrag_time`).
//!   Every eviction counts `ReasmFails`, every expiry `ReasmTimeout` and
//!   `ReasmFails` (`ip_expire`).
//! * Overlaps: `inet_frag_queue_insert`'s rule for both families (Linux
//!   applies RFC 5722 to IPv4 too since 4.19): a fragment that lies inside
//!   an already received run of fragments is a duplicate and dropped alone;
//!   any other overlap drops the whole datagram (`ReasmOverlaps`,
//!   `ReasmFails`).
//! * The whole datagram is also dropped (`ReasmFails`) when its last
//!   fragment disagrees with the length seen so far, a fragment is empty,
//!   the datagram would exceed 65 535 bytes (IPv4 total length, IPv6
//!   payload length), its first fragment cannot hold the UDP header, or it
//!   would take more than `max_frags` fragments.
//! * Only UDP is reassembled: [`classify`] returns `None` for other
//!   protocols, which stay counted as before (`fragment_first` /
//!   `fragment_later`). IPv6 atomic fragments (RFC 6946: offset 0, M clear)
//!   are not fragments: `parse` takes them as whole packets and they never
//!   touch a datagram in progress with the same ID.
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::counters::Counter;
use crate::parse::{ether, ipv4, ipv6, Family, PROTO_UDP};

/// Largest IPv4 total length / IPv6 payload length.
pub const MAX_DATAGRAM: u32 = 65_535;

/// Bounds of one lcore's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasmConf {
    /// Datagrams in progress at once (N).
    pub max_datagrams: usize,
    /// Fragments held per datagram (M).
    pub max_frags: usize,
    /// Bytes of buffer truesize held at most (`ipfrag_high_thresh`).
    pub high_thresh: usize,
    /// How long a datagram may wait for its fragments, in the unit of the
    /// `now` passed to the table (TSC cycles on the RX lcore).
    pub timeout: u64,
}

/// What one fragment is, read from its frame by [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragInfo {
    pub key: Key,
    /// Where the IP header starts in the frame.
    pub l3_off: u16,
    /// IPv4: the header length; IPv6: the fixed header and the extension
    /// headers before the fragment header (which starts right after).
    pub unfrag_len: u16,
    /// Where this fragment's data starts in the frame.
    pub data_off: u16,
    /// Bytes of fragment data (bounded by the IP length, not the frame).
    pub data_len: u16,
    /// Byte offset of the data in the reassembled payload.
    pub offset: u32,
    /// More fragments follow.
    pub more: bool,
}

impl FragInfo {
    pub fn family(&self) -> Family {
        match self.key {
            Key::V4 { .. } => Family::V4,
            Key::V6 { .. } => Family::V6,
        }
    }
}

/// The kernel's reassembly key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        id: u16,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        id: u32,
    },
}

impl Key {
    fn family(&self) -> usize {
        match self {
            Key::V4 { .. } => 0,
            Key::V6 { .. } => 1,
        }
    }
}

/// Reads a UDP fragment's place from a frame the parser has already
/// checked and found to be a fragment (`FragmentFirst` / `FragmentLater`).
/// `None` when it is no UDP fragment (another protocol, an atomic IPv6
/// fragment, or a frame the parser would not have passed): such frames
/// keep the parser's verdict. Every read is bounds-checked.
pub fn classify(frame: &[u8]) -> Option<FragInfo> {
    classify_any(frame).and_then(|(proto, info)| (proto == PROTO_UDP).then_some(info))
}

/// The protocol a fragment carries (IPv4's protocol field, the IPv6
/// fragment header's next header), for a frame [`classify`] would read
/// as a fragment of any protocol: the exception path sends the kernel the
/// fragments that are not UDP.
pub fn fragment_protocol(frame: &[u8]) -> Option<u8> {
    classify_any(frame).map(|(proto, _)| proto)
}

/// [`classify`] for every protocol: the fragment's protocol and place.
fn classify_any(frame: &[u8]) -> Option<(u8, FragInfo)> {
    let eth = ether::EthernetFrame::new_checked(frame).ok()?;
    let mut ethertype = eth.ethertype();
    let mut l3 = ether::HEADER_LEN;
    let mut tags = 0;
    while ether::is_vlan_tpid(ethertype) {
        if tags == 2 {
            return None;
        }
        let b = frame.get(l3 + 2..l3 + 4)?;
        ethertype = u16::from_be_bytes([b[0], b[1]]);
        l3 += ether::VLAN_TAG_LEN;
        tags += 1;
    }
    let ip = frame.get(l3..)?;
    match ethertype {
        ether::ethertype::IPV4 => classify_v4(ip, l3),
        ether::ethertype::IPV6 => classify_v6(ip, l3),
        _ => None,
    }
}

fn u16_of(v: usize) -> Option<u16> {
    u16::try_from(v).ok()
}

fn classify_v4(ipbuf: &[u8], l3: usize) -> Option<(u8, FragInfo)> {
    let ip = ipv4::Ipv4Packet::new_checked(ipbuf).ok()?;
    let hl = ip.header_len();
    let total = usize::from(ip.total_len());
    if ip.version() != 4 || hl < ipv4::HEADER_LEN || total < hl || total > ipbuf.len() {
        return None;
    }
    if !ip.is_fragment() {
        return None;
    }
    Some((
        ip.protocol(),
        FragInfo {
            key: Key::V4 {
                src: ip.src_addr(),
                dst: ip.dst_addr(),
                proto: ip.protocol(),
                id: ip.ident(),
            },
            l3_off: u16_of(l3)?,
            unfrag_len: u16_of(hl)?,
            data_off: u16_of(l3 + hl)?,
            data_len: u16_of(total - hl)?,
            offset: u32::from(ip.frag_offset()) * 8,
            more: ip.more_frags(),
        },
    ))
}

fn classify_v6(ipbuf: &[u8], l3: usize) -> Option<(u8, FragInfo)> {
    use ipv6::next_header as nh;
    let ip = ipv6::Ipv6Packet::new_checked(ipbuf).ok()?;
    if ip.version() != 6 {
        return None;
    }
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let packet = ipbuf.get(..end)?;
    let mut next = ip.next_header();
    let mut off = ipv6::HEADER_LEN;
    // The headers before the fragment header (RFC 8200 §4.5's
    // unfragmentable part), as bounded as the parser's walk.
    for _ in 0..crate::parse::MAX_EXT_HEADERS {
        match next {
            nh::FRAGMENT => {
                let f = ipv6::FragmentHeader::new_checked(packet.get(off..)?).ok()?;
                if f.frag_offset() == 0 && !f.more_frags() {
                    return None;
                }
                let data = off + ipv6::FRAG_HEADER_LEN;
                return Some((
                    f.next_header(),
                    FragInfo {
                        key: Key::V6 {
                            src: ip.src_addr(),
                            dst: ip.dst_addr(),
                            id: f.ident(),
                        },
                        l3_off: u16_of(l3)?,
                        unfrag_len: u16_of(off)?,
                        data_off: u16_of(l3 + data)?,
                        data_len: u16_of(end.checked_sub(data)?)?,
                        offset: u32::from(f.frag_offset()) * 8,
                        more: f.more_frags(),
                    },
                ));
            }
            nh::HOP_BY_HOP | nh::ROUTING | nh::DEST_OPTS => {
                let h = ipv6::ExtHeader::new_checked(packet.get(off..)?).ok()?;
                next = h.next_header();
                off += h.header_len();
                if off - ipv6::HEADER_LEN > crate::parse::MAX_EXT_BYTES {
                    return None;
                }
            }
            _ => return None,
        }
    }
    None
}

/// The reassembly counters of one lcore, per family (index 0 IPv4, 1
/// IPv6), with the kernel's names; one writer (the lcore).
#[derive(Debug, Default)]
pub struct ReasmStats {
    /// Fragments offered (`ReasmReqds`).
    pub reqds: [Counter; 2],
    /// Datagrams reassembled (`ReasmOKs`).
    pub oks: [Counter; 2],
    /// Datagrams given up, and fragments refused without a datagram
    /// (`ReasmFails`).
    pub fails: [Counter; 2],
    /// Datagrams that timed out (`ReasmTimeout`, also in `fails`).
    pub timeout: [Counter; 2],
    /// Datagrams dropped for an overlap (`ReasmOverlaps`, also in `fails`).
    pub overlaps: [Counter; 2],
    /// The books, in fragments (not kernel counters): merged into a
    /// reassembled datagram, or dropped (duplicates, failed, evicted and
    /// expired datagrams, and those freed when the table is cleared).
    pub frags_merged: [Counter; 2],
    pub frags_dropped: [Counter; 2],
    /// Fragments held right now, and the bytes (truesize) they take.
    pub frags_held: Counter,
    pub bytes_held: Counter,
    /// The most bytes ever held at once.
    pub bytes_peak: Counter,
    /// Fragments freed by [`Reassembler::clear`] (also in `frags_dropped`).
    pub cleared: Counter,
}

impl ReasmStats {
    /// Fragments offered = merged + dropped + held (the books).
    pub fn balanced(&self) -> bool {
        let sum = |c: &[Counter; 2]| c[0].get() + c[1].get();
        sum(&self.reqds)
            == sum(&self.frags_merged) + sum(&self.frags_dropped) + self.frags_held.get()
    }
}

/// One held fragment.
#[derive(Debug)]
pub struct Piece<B> {
    pub buf: B,
    /// Where its data starts in `buf`'s frame, and how many bytes of it
    /// belong to the datagram (IPv4 non-last fragments are cut to a
    /// multiple of 8, as Linux does).
    pub data_off: u16,
    pub len: u32,
    /// Its byte offset in the reassembled payload.
    pub offset: u32,
    /// The first fragment's header layout (kept from [`FragInfo`]).
    pub l3_off: u16,
    pub unfrag_len: u16,
}

struct Slot<B> {
    used: bool,
    key: Key,
    born: u64,
    /// Length of the fragmentable part, once the last fragment came.
    total: Option<u32>,
    /// The highest end seen.
    max_end: u32,
    /// Bytes of data held (no overlap: complete when it equals `total`).
    meat: u32,
    mem: usize,
    frags: Vec<Piece<B>>,
    /// Runs of adjacent fragments, as `inet_frag_queue_insert` keeps them:
    /// (start, end), the last pushed holds the highest end.
    runs: Vec<(u32, u32)>,
}

/// Why a datagram was given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    Overlap,
    /// The last fragment contradicts the length known so far, or data
    /// past the end; an empty fragment.
    BadLength,
    /// Over 65 535 bytes.
    Oversize,
    /// The first fragment does not hold the UDP header.
    FirstTooSmall,
    /// More than `max_frags` fragments.
    TooManyFrags,
    /// This fragment alone needs more than `high_thresh` bytes.
    NoMemory,
}

/// What became of an offered fragment.
#[derive(Debug)]
pub enum Verdict<'a, B> {
    /// Held until its datagram completes or expires.
    Held,
    /// Inside data already held: dropped alone (handed to `release`).
    Duplicate,
    /// The datagram failed: every fragment, this one too, went to `release`.
    Failed(Fail),
    /// The datagram is complete: its pieces in offset order, contiguous.
    Complete(Assembled<'a, B>),
}

/// A reassembled datagram's pieces, borrowed from the table until dropped
/// (the storage is reused; nothing is allocated).
#[derive(Debug)]
pub struct Assembled<'a, B> {
    pub family: Family,
    /// Bytes of the fragmentable part (the UDP datagram): the sum of the
    /// pieces' lengths.
    pub total: u32,
    pub pieces: std::vec::Drain<'a, Piece<B>>,
}

/// One lcore's reassembly table.
pub struct Reassembler<B> {
    conf: ReasmConf,
    slots: Vec<Slot<B>>,
    live: usize,
    mem: usize,
    /// The earliest deadline of a datagram in progress (u64::MAX: none).
    next_deadline: u64,
}

impl<B> Reassembler<B> {
    /// Allocates every slot and fragment list now: [`insert`](Self::insert)
    /// and [`expire`](Self::expire) never allocate.
    pub fn new(conf: ReasmConf) -> Self {
        let conf = ReasmConf {
            max_datagrams: conf.max_datagrams.max(1),
            max_frags: conf.max_frags.max(1),
            ..conf
        };
        let slots = (0..conf.max_datagrams)
            .map(|_| Slot {
                used: false,
                key: Key::V4 {
                    src: Ipv4Addr::UNSPECIFIED,
                    dst: Ipv4Addr::UNSPECIFIED,
                    proto: 0,
                    id: 0,
                },
                born: 0,
                total: None,
                max_end: 0,
                meat: 0,
                mem: 0,
                frags: Vec::with_capacity(conf.max_frags),
                runs: Vec::with_capacity(conf.max_frags),
            })
            .collect();
        Reassembler {
            conf,
            slots,
            live: 0,
            mem: 0,
            next_deadline: u64::MAX,
        }
    }

    pub fn conf(&self) -> &ReasmConf {
        &self.conf
    }
    /// Datagrams in progress.
    pub fn in_progress(&self) -> usize {
        self.live
    }
    /// Bytes (truesize) held.
    pub fn mem(&self) -> usize {
        self.mem
    }
    /// The earliest deadline of a datagram in progress; 0 when none.
    pub fn next_deadline(&self) -> u64 {
        if self.live == 0 || self.next_deadline == u64::MAX {
            0
        } else {
            self.next_deadline.max(1)
        }
    }

    /// True when a datagram in progress has passed its deadline at `now`:
    /// one compare, for the poll loop.
    #[inline]
    pub fn due(&self, now: u64) -> bool {
        now >= self.next_deadline
    }

    /// Offers one fragment (`info` from [`classify`] on `buf`'s frame; it
    /// takes `truesize` bytes of memory). Fragments it drops, this one or
    /// held ones, are passed to `release`; a completed datagram's pieces
    /// are returned. Expired datagrams are dropped first.
    pub fn insert<F: FnMut(B)>(
        &mut self,
        now: u64,
        info: &FragInfo,
        buf: B,
        truesize: usize,
        stats: &ReasmStats,
        release: &mut F,
    ) -> Verdict<'_, B> {
        let fam = info.key.family();
        stats.reqds[fam].add(1);
        if self.due(now) {
            self.expire(now, stats, release);
        }
        let refuse = |fail: Fail, buf: B, release: &mut F| {
            stats.fails[fam].add(1);
            stats.frags_dropped[fam].add(1);
            release(buf);
            Verdict::Failed(fail)
        };
        if truesize > self.conf.high_thresh {
            return refuse(Fail::NoMemory, buf, release);
        }
        let offset = info.offset;
        let mut end = offset + u32::from(info.data_len);
        // The reassembled length: IPv4's total length holds its header,
        // IPv6's payload length the extension headers before the fragment
        // header.
        let head = match info.key {
            Key::V4 { .. } => u32::from(info.unfrag_len),
            Key::V6 { .. } => u32::from(info.unfrag_len).saturating_sub(ipv6::HEADER_LEN as u32),
        };
        let idx = match self.find(&info.key) {
            Some(i) => i,
            None => {
                // A datagram that cannot be valid needs no slot.
                if head + end > MAX_DATAGRAM {
                    return refuse(Fail::Oversize, buf, release);
                }
                self.make_room(truesize, None, stats, release);
                let i = self.claim(now, info.key, stats, release);
                self.next_deadline = self
                    .next_deadline
                    .min(now.saturating_add(self.conf.timeout));
                i
            }
        };
        // ip_frag_queue / ip6_frag_queue, in their order.
        let s = &self.slots[idx];
        let mut fail = None;
        if offset == 0 && usize::from(info.data_len) < crate::parse::udp::HEADER_LEN {
            fail = Some(Fail::FirstTooSmall);
        } else if !info.more {
            if end < s.max_end || s.total.is_some_and(|t| t != end) {
                fail = Some(Fail::BadLength);
            }
        } else {
            // Linux cuts IPv4 to a multiple of 8 (and IPv6 refuses such a
            // fragment with a parameter problem; cutting drops no valid
            // datagram either way).
            end &= !7;
            if end > s.max_end && s.total.is_some() {
                fail = Some(Fail::BadLength);
            }
        }
        if fail.is_none() && end <= offset {
            fail = Some(Fail::BadLength);
        }
        if fail.is_none() && head + end > MAX_DATAGRAM {
            fail = Some(Fail::Oversize);
        }
        if let Some(f) = fail {
            return self.fail(idx, f, buf, stats, release);
        }
        // inet_frag_queue_insert: overlap or duplicate.
        let s = &self.slots[idx];
        match s.runs.last() {
            // The common case: past everything held (it may only touch it).
            Some(&(_, last_end)) if last_end < end && offset < last_end => {
                return self.fail(idx, Fail::Overlap, buf, stats, release);
            }
            Some(&(_, last_end)) if last_end < end => {}
            None => {}
            Some(_) => {
                for &(a, b) in &s.runs {
                    if end <= a || offset >= b {
                        continue;
                    }
                    if offset >= a && end <= b {
                        stats.frags_dropped[fam].add(1);
                        release(buf);
                        return Verdict::Duplicate;
                    }
                    return self.fail(idx, Fail::Overlap, buf, stats, release);
                }
            }
        }
        if s.frags.len() >= self.conf.max_frags {
            return self.fail(idx, Fail::TooManyFrags, buf, stats, release);
        }
        // Memory: evict the oldest others until this one fits.
        self.make_room(truesize, Some(idx), stats, release);
        if self.mem + truesize > self.conf.high_thresh {
            return self.fail(idx, Fail::NoMemory, buf, stats, release);
        }
        let s = &mut self.slots[idx];
        match s.runs.last_mut() {
            Some((_, last_end)) if *last_end == offset => *last_end = end,
            Some(&mut (_, last_end)) if last_end < end => s.runs.push((offset, end)),
            _ => {
                let at = s.runs.partition_point(|&(a, _)| a < offset);
                s.runs.insert(at, (offset, end));
            }
        }
        let at = s.frags.partition_point(|p| p.offset < offset);
        s.frags.insert(
            at,
            Piece {
                buf,
                data_off: info.data_off,
                len: end - offset,
                offset,
                l3_off: info.l3_off,
                unfrag_len: info.unfrag_len,
            },
        );
        s.max_end = s.max_end.max(end);
        if !info.more {
            s.total = Some(end);
        }
        s.meat += end - offset;
        s.mem += truesize;
        self.mem += truesize;
        stats.frags_held.add(1);
        stats.bytes_held.set(self.mem as u64);
        if self.mem as u64 > stats.bytes_peak.get() {
            stats.bytes_peak.set(self.mem as u64);
        }
        let s = &self.slots[idx];
        let first_in = s.frags.first().is_some_and(|p| p.offset == 0);
        if first_in && s.total == Some(s.meat) {
            let total = s.meat;
            let n = s.frags.len() as u64;
            stats.oks[fam].add(1);
            stats.frags_merged[fam].add(n);
            stats.frags_held.set(stats.frags_held.get() - n);
            let mem = s.mem;
            self.mem -= mem;
            stats.bytes_held.set(self.mem as u64);
            self.live -= 1;
            let s = &mut self.slots[idx];
            s.used = false;
            s.runs.clear();
            return Verdict::Complete(Assembled {
                family: info.family(),
                total,
                pieces: s.frags.drain(..),
            });
        }
        Verdict::Held
    }

    /// Drops every datagram past its deadline at `now` (`ReasmTimeout`).
    pub fn expire<F: FnMut(B)>(&mut self, now: u64, stats: &ReasmStats, release: &mut F) {
        let mut next = u64::MAX;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if !s.used {
                continue;
            }
            let deadline = s.born.saturating_add(self.conf.timeout);
            if now >= deadline {
                let fam = s.key.family();
                stats.timeout[fam].add(1);
                stats.fails[fam].add(1);
                self.kill(i, stats, release);
            } else {
                next = next.min(deadline);
            }
        }
        self.next_deadline = next;
    }

    /// Frees everything held (teardown), counted as dropped fragments.
    pub fn clear<F: FnMut(B)>(&mut self, stats: &ReasmStats, release: &mut F) {
        stats.cleared.add(stats.frags_held.get());
        for i in 0..self.slots.len() {
            if self.slots[i].used {
                self.kill(i, stats, release);
            }
        }
        self.next_deadline = u64::MAX;
    }

    fn find(&self, key: &Key) -> Option<usize> {
        // Linear: fragments are rare, the table is small (max_datagrams)
        // and preallocated; no hashing state to keep.
        self.slots.iter().position(|s| s.used && s.key == *key)
    }

    /// A free slot, evicting the oldest datagram when all are in use.
    fn claim<F: FnMut(B)>(
        &mut self,
        now: u64,
        key: Key,
        stats: &ReasmStats,
        release: &mut F,
    ) -> usize {
        let i = match self.slots.iter().position(|s| !s.used) {
            Some(i) => i,
            None => {
                let old = self.oldest(None).unwrap_or(0);
                stats.fails[self.slots[old].key.family()].add(1);
                self.kill(old, stats, release);
                old
            }
        };
        let s = &mut self.slots[i];
        s.used = true;
        s.key = key;
        s.born = now;
        s.total = None;
        s.max_end = 0;
        s.meat = 0;
        s.mem = 0;
        s.frags.clear();
        s.runs.clear();
        self.live += 1;
        i
    }

    fn oldest(&self, except: Option<usize>) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, s)| s.used && Some(i) != except)
            .min_by_key(|(_, s)| s.born)
            .map(|(i, _)| i)
    }

    /// Evicts the oldest datagrams (not `keep`) until `need` more bytes fit.
    fn make_room<F: FnMut(B)>(
        &mut self,
        need: usize,
        keep: Option<usize>,
        stats: &ReasmStats,
        release: &mut F,
    ) {
        while self.mem + need > self.conf.high_thresh {
            let Some(old) = self.oldest(keep) else { return };
            stats.fails[self.slots[old].key.family()].add(1);
            self.kill(old, stats, release);
        }
    }

    fn fail<'s, F: FnMut(B)>(
        &'s mut self,
        idx: usize,
        fail: Fail,
        buf: B,
        stats: &ReasmStats,
        release: &mut F,
    ) -> Verdict<'s, B> {
        let fam = self.slots[idx].key.family();
        if fail == Fail::Overlap {
            stats.overlaps[fam].add(1);
        }
        stats.fails[fam].add(1);
        stats.frags_dropped[fam].add(1);
        release(buf);
        self.kill(idx, stats, release);
        Verdict::Failed(fail)
    }

    /// Drops slot `i`'s fragments (counters of the cause are the caller's).
    fn kill<F: FnMut(B)>(&mut self, i: usize, stats: &ReasmStats, release: &mut F) {
        let s = &mut self.slots[i];
        if !s.used {
            return;
        }
        let fam = s.key.family();
        let n = s.frags.len() as u64;
        stats.frags_dropped[fam].add(n);
        stats.frags_held.set(stats.frags_held.get() - n);
        for p in s.frags.drain(..) {
            release(p.buf);
        }
        s.runs.clear();
        s.used = false;
        self.mem -= s.mem;
        s.mem = 0;
        self.live -= 1;
        stats.bytes_held.set(self.mem as u64);
    }
}

/// The reassembled frame as one byte vector (tests, the fuzz target): the
/// first fragment's Ethernet and IP headers with the lengths fixed up and
/// the fragment fields gone, then every piece's data. `frame_of` gives a
/// piece's frame.
pub fn assemble_frame<B>(
    a: Assembled<'_, B>,
    mut frame_of: impl FnMut(&B) -> &[u8],
) -> Option<Vec<u8>> {
    let family = a.family;
    let total = a.total;
    let mut out = Vec::new();
    for (k, p) in a.pieces.enumerate() {
        let f = frame_of(&p.buf);
        if k == 0 {
            let hdr = usize::from(p.l3_off) + usize::from(p.unfrag_len);
            let fh = match family {
                Family::V4 => 0,
                Family::V6 => ipv6::FRAG_HEADER_LEN,
            };
            out.extend_from_slice(f.get(..hdr + fh)?);
            fixup_header(
                &mut out,
                usize::from(p.l3_off),
                usize::from(p.unfrag_len),
                family,
                total,
            )?;
            out.truncate(hdr);
        }
        let d = usize::from(p.data_off);
        out.extend_from_slice(f.get(d..d + p.len as usize)?);
    }
    Some(out)
}

/// Rewrites the first fragment's IP header, in `frame`, into the
/// reassembled datagram's: IPv4 total length, flags and offset cleared
/// (DF kept), header checksum; IPv6 payload length, and the Next Header
/// that named the fragment header (at `l3 + unfrag`, which `frame` must
/// hold) now names what it carried. The caller then removes IPv6's 8-byte
/// fragment header. `None`, `frame` possibly half written, when the
/// headers are not what `classify` found.
pub fn fixup_header(
    frame: &mut [u8],
    l3: usize,
    unfrag: usize,
    family: Family,
    total: u32,
) -> Option<()> {
    match family {
        Family::V4 => {
            let ip = frame.get_mut(l3..l3 + unfrag)?;
            let tl = u16::try_from(unfrag as u32 + total).ok()?;
            let mut p = ipv4::Ipv4Packet::new_checked(ip).ok()?;
            p.set_total_len(tl);
            let keep_df = p.frag_field() & ipv4::FLAG_DF;
            p.set_frag_field(keep_df);
            p.fill_checksum();
        }
        Family::V6 => {
            use ipv6::next_header as nh;
            let ip = frame.get_mut(l3..l3 + unfrag + ipv6::FRAG_HEADER_LEN)?;
            let carried = ipv6::FragmentHeader::new_checked(ip.get(unfrag..)?)
                .ok()?
                .next_header();
            let pl = u16::try_from((unfrag.checked_sub(ipv6::HEADER_LEN)?) as u32 + total).ok()?;
            // Find the Next Header field that names the fragment header.
            let mut at = ipv6::field::NEXT_HEADER;
            let mut off = ipv6::HEADER_LEN;
            loop {
                let next = *ip.get(at)?;
                if off == unfrag {
                    if next != nh::FRAGMENT {
                        return None;
                    }
                    *ip.get_mut(at)? = carried;
                    break;
                }
                let h = ipv6::ExtHeader::new_checked(ip.get(off..)?).ok()?;
                at = off + ipv6::ext_field::NEXT_HEADER;
                off += h.header_len();
                if off > unfrag {
                    return None;
                }
            }
            let mut p = ipv6::Ipv6Packet::new_checked(ip).ok()?;
            p.set_payload_len(pl);
        }
    }
    Some(())
}

/// Splits an unfragmented IPv4/IPv6 frame (Ethernet, IP, UDP) into
/// fragment frames whose data ends at the byte offsets `cuts` (ascending,
/// inside the IP payload, multiples of 8), with identification `id`. For
/// tests, the fuzz target's seeds and test clients.
pub fn fragment_frame(frame: &[u8], cuts: &[u32], id: u32) -> Option<Vec<Vec<u8>>> {
    let eth = ether::EthernetFrame::new_checked(frame).ok()?;
    let l3 = ether::HEADER_LEN;
    let ipbuf = frame.get(l3..)?;
    let (hl, payload, is_v4) = match eth.ethertype() {
        ether::ethertype::IPV4 => {
            let ip = ipv4::Ipv4Packet::new_checked(ipbuf).ok()?;
            let hl = ip.header_len();
            (hl, ipbuf.get(hl..usize::from(ip.total_len()))?, true)
        }
        ether::ethertype::IPV6 => {
            let ip = ipv6::Ipv6Packet::new_checked(ipbuf).ok()?;
            let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
            (ipv6::HEADER_LEN, ipbuf.get(ipv6::HEADER_LEN..end)?, false)
        }
        _ => return None,
    };
    let mut bounds: Vec<usize> = vec![0];
    for &c in cuts {
        let c = c as usize;
        if c & 7 != 0 || c <= *bounds.last()? || c >= payload.len() {
            return None;
        }
        bounds.push(c);
    }
    bounds.push(payload.len());
    let mut out = Vec::new();
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        let more = b != payload.len();
        let data = &payload[a..b];
        let mut f = frame.get(..l3 + hl)?.to_vec();
        if is_v4 {
            let mut ip = ipv4::Ipv4Packet::new_checked(&mut f[l3..]).ok()?;
            ip.set_total_len(u16::try_from(hl + data.len()).ok()?);
            ip.set_ident(id as u16);
            let frag = ((a / 8) as u16) | if more { ipv4::FLAG_MF } else { 0 };
            ip.set_frag_field(frag);
            ip.fill_checksum();
        } else {
            let mut ip = ipv6::Ipv6Packet::new_checked(&mut f[l3..]).ok()?;
            let carried = ip.next_header();
            ip.set_next_header(ipv6::next_header::FRAGMENT);
            ip.set_payload_len(u16::try_from(ipv6::FRAG_HEADER_LEN + data.len()).ok()?);
            let om = (((a / 8) as u16) << 3) | u16::from(more);
            f.push(carried);
            f.push(0);
            f.extend_from_slice(&om.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
        }
        f.extend_from_slice(data);
        out.push(f);
    }
    Some(out)
}

#[cfg(test)]
#[path = "reasm_tests.rs"]
pub(crate) mod tests;
