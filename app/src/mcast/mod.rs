//! Multicast: the groups the engine's sockets joined, the RX lcores'
//! fan-out of a group's datagram to every member socket, and the
//! membership reports that tell a snooping switch (or a multicast router)
//! to forward the groups to this port.
//!
//! * [`Joined`]: the (port, group) pairs some socket's `multicast` key
//!   asked for, rebuilt whenever the socket registry changes (start,
//!   SIGHUP, a client's bind) and published with one atomic swap. The RX
//!   lcore takes a datagram to a group only if the group is joined on the
//!   port it arrived on, as the kernel's `ip_check_mc_rcu` does; anything
//!   else is dropped and counted (`mcast_unjoined`).
//! * [`fan_out`]: the kernel's `__udp4_lib_mcast_deliver`: every socket
//!   the flow table's `for_each_mcast` visits gets the datagram; every
//!   member but the first gets an indirect mbuf (`rte_pktmbuf_clone`: its
//!   own struct and private area for its own metadata and stage link, the
//!   payload shared by reference count) and the first the original, last,
//!   once every clone holds its reference. Each copy is charged to its own
//!   socket at the full truesize (the kernel charges a clone the
//!   original's truesize) and admitted, staged, drained or dropped by its
//!   own socket's rules; one full member drops only its own copy.
//!   [`fan_out_run`] does the same for a run of datagrams to one group and
//!   port (the RX lcore's common case): the members are visited once and
//!   each member's copies are staged as one batch.
//! * [`wire`]: IGMP and MLD messages; [`membership`]: the main lcore's
//!   reports (on join and leave, and in answer to queries the RX lcores
//!   post here).
pub mod membership;
pub mod wire;

use std::net::IpAddr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;
use dpdk_sys::mbuf::{self, RawMbuf};
use dpdk_sys::Mempool;

use crate::counters::Counter;
use crate::meta::MbufMeta;
use crate::parse::{Datagram, Family, ParseError, PROTO_ICMPV6};
use crate::runtime::shared::SocketEntry;
use crate::socket::Socket;

/// The groups joined, per port, sorted (binary search on the RX path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Joined {
    groups: Vec<(u16, IpAddr)>,
}

impl Joined {
    /// The groups `entries`' sockets joined, on the ports they name
    /// (`multicast_port`) or on every port of `ports` (name, DPDK id).
    pub fn of(entries: &[SocketEntry], ports: &[(String, u16)]) -> Joined {
        let mut groups = Vec::new();
        for e in entries {
            let conf = &e.sock.conf;
            let Some(g) = conf.multicast else { continue };
            for (name, id) in ports {
                if conf.multicast_port.as_ref().is_none_or(|p| p == name) {
                    groups.push((*id, g));
                }
            }
        }
        groups.sort_unstable();
        groups.dedup();
        Joined { groups }
    }

    /// Joined from (port, group) pairs (tests, tools).
    pub fn from_pairs(mut groups: Vec<(u16, IpAddr)>) -> Joined {
        groups.sort_unstable();
        groups.dedup();
        Joined { groups }
    }

    /// Whether `group` is joined on `port`.
    #[inline]
    pub fn has(&self, port: u16, group: IpAddr) -> bool {
        self.groups.binary_search(&(port, group)).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, IpAddr)> + '_ {
        self.groups.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }
}

/// A query an RX lcore received, for the main lcore to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedQuery {
    pub port: u16,
    /// `None`: a general query of `family`.
    pub group: Option<IpAddr>,
    pub family: Family,
    pub version: u8,
    pub max_resp_ms: u32,
    /// TSC when it was received.
    pub tsc: u64,
}

/// Queries waiting for the main lcore, at most. The hand-off is a
/// lock-free queue allocated once: an earlier array behind a lock that
/// both sides only tried lost a query whenever the RX lcore's try met the
/// main lcore's (which takes the queue every few microseconds when it
/// polls sockets), so a querier's query went unanswered now and then.
pub const QUERY_SLOTS: usize = 16;

/// The engine's multicast state, in `Shared`.
pub struct McastState {
    pub joined: ArcSwap<Joined>,
    /// Every port's config name and DPDK id.
    pub ports: Vec<(String, u16)>,
    /// Where clones come from: a handle that does not free the pool (the
    /// engine owns it and frees it after the ports).
    pub clones: OnceLock<Mempool>,
    pub queries: ArrayQueue<PostedQuery>,
    pub stats: McastStats,
}

/// The membership side's counters (main lcore; `queries_lost` by RX lcores).
#[derive(Debug, Default)]
pub struct McastStats {
    /// IGMP / MLD reports sent, and those the port refused or had no mbuf or
    /// TX path for.
    pub igmp_reports: Counter,
    pub mld_reports: Counter,
    pub report_errors: Counter,
    /// Queries answered (one answer per query, however many reports).
    pub queries_answered: Counter,
    /// Queries an RX lcore could not post (`QUERY_SLOTS` waiting already): not answered.
    pub queries_lost: AtomicU64,
}

impl std::fmt::Debug for McastState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McastState")
            .field("joined", &self.joined)
            .field("ports", &self.ports)
            .field("clones", &self.clones.get().map(|p| p.size()))
            .field("stats", &self.stats)
            .finish()
    }
}

impl McastState {
    pub fn new(ports: Vec<(String, u16)>) -> McastState {
        McastState {
            joined: ArcSwap::from_pointee(Joined::default()),
            ports,
            clones: OnceLock::new(),
            queries: ArrayQueue::new(QUERY_SLOTS),
            stats: McastStats::default(),
        }
    }

    /// Re-read the joined groups from the registry (`registry::set_registry`
    /// calls this with every registry it stores).
    pub fn update(&self, entries: &[SocketEntry]) {
        let j = Joined::of(entries, &self.ports);
        if **self.joined.load() != j {
            self.joined.store(Arc::new(j));
        }
    }

    /// An RX lcore hands a query over; `false` when the queue is full
    /// (counted). Out of line: inlined into the RX lcore's burst function,
    /// the queue's push cost every datagram 6 instructions (callgrind,
    /// `scripts/instr.sh`: 590 against 584) through the code around it.
    #[cold]
    #[inline(never)]
    pub fn post(&self, q: PostedQuery) -> bool {
        let posted = self.queries.push(q).is_ok();
        if !posted {
            self.stats.queries_lost.fetch_add(1, Ordering::Relaxed);
        }
        posted
    }
}

/// The membership query in a frame the parser rejected with `e`, if it is
/// one (IGMP to IPv4, MLD in ICMPv6 after any extension headers).
pub fn query_of(frame: &[u8], e: &ParseError, port: u16, tsc: u64) -> Option<PostedQuery> {
    let ParseError::NotUdp {
        family,
        proto,
        l3_off,
        l4_off,
    } = *e
    else {
        return None;
    };
    let (l3, l4) = (usize::from(l3_off), usize::from(l4_off));
    let (group, version, max_resp_ms) = match (family, proto) {
        (Family::V4, wire::PROTO_IGMP) => {
            let q = wire::parse_igmp_query(frame, l3, l4)?;
            (q.group.map(IpAddr::V4), q.version, q.max_resp_ms)
        }
        (Family::V6, PROTO_ICMPV6) => {
            let q = wire::parse_mld_query(frame, l3, l4)?;
            (q.group.map(IpAddr::V6), q.version, q.max_resp_ms)
        }
        _ => return None,
    };
    Some(PostedQuery {
        port,
        group,
        family,
        version,
        max_resp_ms,
        tsc,
    })
}

/// What one multicast datagram's fan-out did, for the caller's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FanOut {
    /// Copies handed to sockets (the original included).
    pub copies: u64,
    /// Members that got no copy: the clone pool was empty (the kernel's
    /// failed `skb_clone`, counted as that socket's `RcvbufErrors`).
    pub nobufs: u64,
}

/// Hand the datagram `m` (parsed as `d`, received on `port` at `tsc`) to
/// every socket `members` visits: clones to all but the
/// first, then the original to the first. `enqueue` stages one packet on
/// one socket (its admission, charge and drop rules). With no member, `m`
/// comes back (`Err`) for the caller to count and free.
///
/// # Safety
/// `m` is a live mbuf of an engine pool that the caller owns exclusively
/// and gives up on `Ok`; nobody writes its data while a copy lives (the
/// consumers only read datagrams). `pool` has the engine's private area.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn fan_out<'s>(
    m: *mut RawMbuf,
    d: &Datagram,
    tsc: u64,
    port: u16,
    pool: Option<&Mempool>,
    members: impl FnOnce(&mut dyn FnMut(&'s Arc<Socket>)),
    enqueue: &mut impl FnMut(&'s Arc<Socket>, NonNull<MbufMeta>),
) -> Result<FanOut, *mut RawMbuf> {
    let mut first: Option<&'s Arc<Socket>> = None;
    let mut out = FanOut::default();
    members(&mut |sock: &'s Arc<Socket>| {
        if first.is_none() {
            first = Some(sock);
            return;
        }
        // SAFETY: m is live and ours (the contract); its data is read-only
        // while the clone lives; the clone is a fresh mbuf of an engine
        // pool (private area of PRIV_SIZE), ours alone.
        let c = pool.and_then(|p| unsafe { mbuf::clone_into(m, p) });
        let Some(c) = c else {
            out.nobufs += 1;
            return;
        };
        let c = c.as_ptr();
        // SAFETY: c is ours alone (above); the metadata is its own.
        unsafe { MbufMeta::init(c, d, sock.id, tsc, port) };
        sock.multicast.fetch_add(1, Ordering::Relaxed);
        out.copies += 1;
        // SAFETY: c is one of our mbufs.
        enqueue(sock, unsafe { MbufMeta::of(c) });
    });
    let Some(sock) = first else {
        return Err(m);
    };
    // SAFETY: m is ours (the contract); every clone already holds its
    // reference, so the first member's consumer may free m at once.
    unsafe { MbufMeta::init(m, d, sock.id, tsc, port) };
    sock.multicast.fetch_add(1, Ordering::Relaxed);
    out.copies += 1;
    // SAFETY: m is one of our mbufs.
    enqueue(sock, unsafe { MbufMeta::of(m) });
    Ok(out)
}

/// Members a run is fanned out to at once (their list is kept on the
/// stack); a larger group takes [`fan_out`], one datagram at a time.
pub const RUN_MEMBERS: usize = 32;
/// Datagrams of one run at most: the RX lcore cuts longer runs (a chunk of
/// a large burst holds up to 64) into runs of this many.
pub const RUN_MAX: usize = 32;

/// [`fan_out`] for a run of datagrams with the same members (one group and
/// port, no connected socket in the family: the members do not depend on
/// the source), `members[..]` already visited: each member but the first
/// gets a clone of every datagram of the run, staged as one batch
/// (`enqueue` takes the batch), then the first member the originals, as one
/// batch. `run` lists (mbuf, datagram); at most [`RUN_MAX`], which the
/// caller keeps to (more would be neither staged nor freed).
///
/// # Safety
/// As [`fan_out`], for every mbuf of `run` (each listed once); `members`
/// is not empty.
#[inline]
pub unsafe fn fan_out_run<'s>(
    run: &[(*mut RawMbuf, &Datagram)],
    tsc: u64,
    port: u16,
    pool: Option<&Mempool>,
    members: &[Option<&'s Arc<Socket>>],
    enqueue: &mut impl FnMut(&'s Arc<Socket>, &[NonNull<MbufMeta>]),
) -> FanOut {
    let mut out = FanOut::default();
    let mut batch = [NonNull::<MbufMeta>::dangling(); RUN_MAX];
    debug_assert!(run.len() <= RUN_MAX);
    let run = &run[..run.len().min(RUN_MAX)];
    for &sock in members.iter().flatten().skip(1) {
        let mut n = 0;
        for &(m, d) in run {
            // SAFETY: m is live and ours (the contract); its data is
            // read-only while the clone lives; the clone is a fresh mbuf of
            // an engine pool, ours alone.
            let Some(c) = pool.and_then(|p| unsafe { mbuf::clone_into(m, p) }) else {
                out.nobufs += 1;
                continue;
            };
            let c = c.as_ptr();
            // SAFETY: c is ours alone (above); the metadata is its own.
            unsafe { MbufMeta::init(c, d, sock.id, tsc, port) };
            // n < run.len() <= RUN_MAX.
            // SAFETY: c is one of our mbufs.
            batch[n] = unsafe { MbufMeta::of(c) };
            n += 1;
        }
        if n != 0 {
            sock.multicast.fetch_add(n as u64, Ordering::Relaxed);
            out.copies += n as u64;
            enqueue(sock, &batch[..n]);
        }
    }
    let Some(&first) = members.iter().flatten().next() else {
        return out;
    };
    for (slot, &(m, d)) in batch.iter_mut().zip(run) {
        // SAFETY: m is ours (the contract); every clone already holds its
        // reference, so the first member's consumer may free m at once.
        unsafe {
            MbufMeta::init(m, d, first.id, tsc, port);
            *slot = MbufMeta::of(m);
        }
    }
    first
        .multicast
        .fetch_add(run.len() as u64, Ordering::Relaxed);
    out.copies += run.len() as u64;
    enqueue(first, &batch[..run.len()]);
    out
}

/// Whether `a` is a group address (the RX lcore's branch).
#[inline(always)]
pub fn is_group(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(i: u64) -> PostedQuery {
        PostedQuery {
            port: 0,
            group: None,
            family: Family::V4,
            version: 3,
            max_resp_ms: 1000,
            tsc: i,
        }
    }

    /// The main lcore taking queries at the same moment as an RX lcore
    /// posts one loses nothing: every post succeeds while the queue has
    /// room, and each query is taken once, in order. (The lock both sides
    /// only tried, which this replaced, lost one post in eight in the same
    /// loop.)
    #[test]
    fn a_query_posted_while_the_main_lcore_takes_is_never_lost() {
        let st = Arc::new(McastState::new(Vec::new()));
        const ROUNDS: u64 = 200_000;
        let taker = {
            let st = Arc::clone(&st);
            std::thread::spawn(move || {
                let mut next = 0;
                while next < ROUNDS {
                    if let Some(q) = st.queries.pop() {
                        assert_eq!(q.tsc, next, "taken once, in order");
                        next += 1;
                    }
                }
            })
        };
        for i in 0..ROUNDS {
            // At most a few waiting: the queue never fills here (unless
            // the taker failed: then its panic is the test's answer).
            while st.queries.len() >= QUERY_SLOTS / 2 {
                if taker.is_finished() {
                    break;
                }
                std::hint::spin_loop();
            }
            if taker.is_finished() {
                break;
            }
            assert!(st.post(query(i)), "post {i} lost");
        }
        taker.join().unwrap();
        assert_eq!(st.stats.queries_lost.load(Ordering::Relaxed), 0);
    }

    /// A full queue refuses the next query and counts it.
    #[test]
    fn a_query_beyond_the_slots_is_counted_lost() {
        let st = McastState::new(Vec::new());
        for i in 0..QUERY_SLOTS as u64 {
            assert!(st.post(query(i)));
        }
        assert!(!st.post(query(99)));
        assert_eq!(st.stats.queries_lost.load(Ordering::Relaxed), 1);
        assert_eq!(st.queries.pop().map(|q| q.tsc), Some(0));
    }
}
