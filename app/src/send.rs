//! The send half of a socket: `api::send_burst` builds whole frames
//! (Ethernet, IPv4 or IPv6, UDP, software checksums) into mbufs of the
//! engine's TX pool and puts them on one multi-producer `rte_ring`; the
//! main lcore drains that ring into its own TX queue after giving each
//! frame its next hop's MAC from the neighbour table ([`crate::neigh`]),
//! or holding it there behind an ARP request / neighbour solicitation.
//!
//! Why one ring drained by the main lcore, and not a TX queue per sender:
//! callers run on any thread (DPDK's TX queues are not thread-safe and an
//! application thread is no lcore), the neighbour table then has one user
//! on the send side (the main lcore), and a burst from a sender costs one
//! lock-free MP enqueue. The RX lcores, consumer lcores and the main lcore
//! keep their own TX queue each (control replies, echo, this drain): no TX
//! queue is ever used by two threads.
//!
//! Locks: the neighbour table sits in a `Mutex` that only the main lcore
//! takes, once per drained burst and timer tick. What an RX lcore learns
//! from an ARP or ND frame reaches it through [`Lessons`], a bounded
//! lock-free queue. A sender takes no lock and allocates nothing: one mbuf
//! from the pool per datagram, one ring enqueue per burst.
//!
//! Every datagram a sender hands over ends in exactly one counter: sent
//! (`UdpOutDatagrams`), refused by the NIC or without an mbuf or ring room
//! (`UdpSndbufErrors`), too big for the MTU, without an on-link port, or
//! dropped by the neighbour table (queue overflow, never resolved, table
//! full); the books are checked at exit.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_queue::ArrayQueue;
use dpdk_sys::{port, Mbuf, MbufBurst, MbufRing, Mempool};

use crate::config::NeighbourConf;
use crate::control::{solicited_node, Iface, Ifaces};
use crate::heard::HeardQueue;
use crate::counters::Counter;
use crate::runtime::shared::{ConsumedBy, Shared};
use crate::frag_out::FragOut;
use crate::neigh::{Learn, NeighStats, Params, Resolve, Table};
use crate::parse::arp::{self, operation, ArpPacket};
use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use crate::parse::ether::{self, EthernetFrame};
use crate::parse::icmp::{self, nd_flags, nd_option, types, IcmpPacket, NdOption};
use crate::parse::ipv4::{self, Ipv4Packet};
use crate::parse::ipv6::{self, Ipv6Packet};
use crate::parse::checksum;
use crate::parse::udp::{self, UdpPacket};
use crate::parse::{Family, ParseError, PROTO_ICMPV6, PROTO_UDP};

/// The link MTU (Ethernet's; DPDK's default port MTU): larger datagrams
/// leave as fragments (`parse::fragment`).
pub const MTU: usize = 1500;
/// Frames queued between senders and the main lcore.
pub const RING_SIZE: u32 = 1024;
/// Mbufs of the TX pool (about 5 MB): the ring, the neighbour queues, the
/// clients' rings and the NIC's TX descriptors in flight; when it runs dry
/// a send is refused and counted (`UdpSndbufErrors`, as `ENOBUFS`).
pub const POOL_MBUFS: u32 = 2047;
/// A frame's data room, headroom included (the largest frame, 1514 bytes, fits).
pub const DATA_ROOM: u16 = 2048 + 128;
/// Hop limit / TTL of what we send (Linux's default).
const TTL: u8 = 64;
/// RFC 4861 §7.1: ND messages travel one hop only.
const ND_HOP_LIMIT: u8 = 255;
const LL_OPTION_LEN: usize = 8;
const NS_LEN: usize = icmp::ND_LEN + LL_OPTION_LEN;

/// The neighbour table as the engine holds it.
pub type Neigh = Mutex<Table<Mbuf>>;

/// Counters several senders write (atomic adds), per family.
#[derive(Debug, Default)]
pub struct SenderStats {
    /// Frames taken by `send_burst` (put on the ring): one per datagram,
    /// or one per fragment of a datagram over the MTU.
    pub accepted: [AtomicU64; 2],
    /// Of `accepted`, fragments after a datagram's first (so `accepted -
    /// later` counts datagrams).
    pub later: [AtomicU64; 2],
    /// No mbuf, or no room on the ring (`UdpSndbufErrors`, with `tx_errors`).
    pub no_buffer: [AtomicU64; 2],
    /// Payload above what one IP datagram holds (`EMSGSIZE`), from a
    /// sender in the engine's process or an out-of-process client alike.
    pub too_big: [AtomicU64; 2],
    /// No port has the destination on-link (`IpOutNoRoutes`), or the socket's
    /// address is of the other family.
    pub no_route: [AtomicU64; 2],
}

/// Counters only the main lcore writes.
#[derive(Debug, Default)]
pub struct DrainStats {
    /// Handed to the NIC (`UdpOutDatagrams`): datagrams, or the first
    /// fragment of one.
    pub out: [Counter; 2],
    /// Later fragments handed to the NIC.
    pub out_later: [Counter; 2],
    /// Refused by the NIC, or no TX queue for the main lcore (freed).
    pub tx_errors: [Counter; 2],
    /// ARP requests and neighbour solicitations sent / not sent.
    pub solicits_sent: Counter,
    pub solicits_failed: Counter,
}

/// The send path's state, in `Shared`.
pub struct TxPath {
    ring: MbufRing,
    /// Always `Some` until dropped; freed only while the EAL is up (after
    /// it the memory is gone, and the handle is forgotten).
    pool: Option<Mempool>,
    pub neigh: Arc<Neigh>,
    /// What the RX lcores' ARP and ND frames taught, for the table.
    pub lessons: Arc<Lessons>,
    /// Neighbours the RX lcores heard in received datagrams (`heard`),
    /// taught to the table by the main lcore; `None`: learning from traffic
    /// is off (`neighbour.learn_from_traffic = false`).
    pub heard: Option<HeardQueue>,
    /// How often an RX lcore reports a source it already reported (TSC ticks).
    pub heard_interval: u64,
    /// Reports that taught nothing: off-link source, non-unicast MAC, or
    /// the table full of entries that may not make room.
    pub heard_ignored: Counter,
    pub senders: SenderStats,
    pub drain: DrainStats,
    /// Datagrams in the ring or the neighbour table when the engine stopped
    /// (freed; in the neighbour table's `expired` when held there).
    pub freed_at_stop: AtomicU64,
    /// Out-of-process clients' TX rings (`udx_tx<pid>`), found by the
    /// servicer (the only one that takes this lock).
    clients: Mutex<Vec<(u32, MbufRing)>>,
    /// How many rings `clients` holds, for a look without the lock.
    client_rings: AtomicUsize,
    /// Requests taken from clients' rings (also in `accepted` when valid).
    pub client_requests: AtomicU64,
    /// Client requests that were not a valid request (freed).
    pub bad_requests: AtomicU64,
    /// Left in a client's ring when it closed its last socket or died (freed).
    pub client_freed: AtomicU64,
    /// TSC of the next full pass (timers, client ring discovery, releases):
    /// at most one a millisecond; between them a pass with empty rings
    /// returns at once (the servicer only).
    next_full: Counter,
    ms_ticks: u64,
    /// The main lcore, woken when frames land in `ring` while it naps.
    pub wake: crate::wake::Wake,
    /// Who services this path ([`service`]): [`MAIN_LCORE`], or the index
    /// of the RX lcore that runs an application's task
    /// (`runtime::lcore_task`), whose sends then leave from that lcore
    /// with no hand-off. Changed once, by the application's thread while
    /// it is the main lcore's (outside `main_loop`), before the RX lcore
    /// can take the task: never two servicers at once.
    servicer: AtomicUsize,
}

/// [`TxPath`]'s servicer when no RX lcore took the path over.
pub const MAIN_LCORE: usize = usize::MAX;

impl std::fmt::Debug for TxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPath").finish_non_exhaustive()
    }
}

impl Drop for TxPath {
    fn drop(&mut self) {
        if dpdk_sys::eal::is_up() {
            // Whatever the ring holds goes back first (the ring's own drop
            // would run after the pool's).
            let mut b = MbufBurst::<64>::new();
            while self.ring.dequeue(&mut b, 64) > 0 {
                b.clear();
            }
            self.neigh
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(drop);
            // No mbuf of it is held any more: the ring and the table were
            // emptied above, the engine's teardown stopped the ports.
            drop(self.pool.take());
        } else {
            std::mem::forget(self.pool.take());
        }
    }
}

impl TxPath {
    /// The ring, the pool and the neighbour table, on NUMA node `numa`,
    /// with timers in TSC ticks of `hz`, sized and timed by `conf`.
    pub fn new(numa: i32, hz: u64, conf: &NeighbourConf) -> dpdk_sys::Result<TxPath> {
        let pool = Mempool::new(
            "tx_pool",
            POOL_MBUFS,
            64,
            crate::meta::PRIV_SIZE,
            DATA_ROOM,
            numa,
        )?;
        // Many producers (any thread), one consumer (the servicer).
        let ring = MbufRing::create("tx_ring", RING_SIZE, numa, dpdk_sys::ring::SC_DEQ)?;
        Ok(TxPath {
            ring,
            pool: Some(pool),
            neigh: Arc::new(Mutex::new(Table::new(params(conf, hz)))),
            lessons: Arc::new(Lessons::new(LESSONS_LEN)),
            heard: conf
                .learn_from_traffic
                .then(|| HeardQueue::new(crate::heard::QUEUE_LEN)),
            // A tenth of the reachable time: an entry that traffic keeps
            // confirming never goes stale.
            heard_interval: (conf.reachable_ms.saturating_mul(hz) / 1000 / 10).max(1),
            heard_ignored: Counter::default(),
            senders: SenderStats::default(),
            drain: DrainStats::default(),
            freed_at_stop: AtomicU64::new(0),
            clients: Mutex::new(Vec::new()),
            client_rings: AtomicUsize::new(0),
            client_requests: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            client_freed: AtomicU64::new(0),
            next_full: Counter::default(),
            ms_ticks: (hz / 1000).max(1),
            wake: crate::wake::Wake::new(),
            servicer: AtomicUsize::new(MAIN_LCORE),
        })
    }

    /// Who services the path: [`MAIN_LCORE`] or an RX lcore's index.
    #[inline]
    pub fn servicer(&self) -> usize {
        self.servicer.load(Ordering::Acquire)
    }

    /// Hand the path to RX lcore `index` (its task's sends leave from it);
    /// false when an RX lcore already has it. Called on the main lcore's
    /// thread outside its loop, before the RX lcore is given the task.
    pub(crate) fn hand_to_rx_lcore(&self, index: usize) -> bool {
        self.servicer
            .compare_exchange(MAIN_LCORE, index, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Frames wait in the senders' ring (a racy look, as a sleep's last
    /// check: `wake` covers what lands after it).
    pub fn pending(&self) -> bool {
        !self.ring.looks_empty()
    }

    /// TSC ticks in a millisecond.
    pub fn ms_ticks(&self) -> u64 {
        self.ms_ticks
    }

    pub fn pool(&self) -> &Mempool {
        self.pool.as_ref().expect("the pool lives as long as the path")
    }

    fn table(&self) -> MutexGuard<'_, Table<Mbuf>> {
        self.neigh.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn neigh_stats(&self) -> NeighStats {
        self.table().stats
    }

    /// A static entry (`[[neighbour.static]]`); false when there is no room.
    pub fn add_static(&self, port: u16, ip: IpAddr, mac: [u8; 6]) -> bool {
        self.table().add_static(port, ip, mac)
    }

    /// Teach the table what the RX lcores heard (main lcore, table locked):
    /// on-link sources with a unicast MAC only.
    fn take_heard(&self, ifaces: &Ifaces, table: &mut Table<Mbuf>, now: u64) {
        let Some(q) = &self.heard else { return };
        q.take(|h| {
            let on_link = ifaces.get(h.port).is_some_and(|i| match h.ip {
                IpAddr::V4(a) => on_link_v4(i, a).is_some() && !i.is_v4_broadcast(a) && !i.has_v4(a),
                IpAddr::V6(a) => on_link_v6(i, &a).is_some() && !a.is_multicast() && !i.has_v6(&a),
            });
            if !(on_link && unicast_mac(&h.mac) && table.learn(h.port, h.ip, h.mac, Learn::Traffic, now)) {
                self.heard_ignored.add(1);
            }
        });
    }
}

/// The table's limits and timers from `[neighbour]`, in ticks of `hz`.
pub fn params(conf: &NeighbourConf, hz: u64) -> Params {
    let ticks = |ms: u64| (ms.saturating_mul(hz) / 1000).max(1);
    Params {
        capacity: conf.entries as usize,
        unres_qlen: conf.unres_qlen as usize,
        mcast_solicit: conf.mcast_solicit,
        retrans: ticks(conf.retrans_ms),
        reachable: ticks(conf.reachable_ms),
        gc_stale: ticks(conf.gc_stale_ms),
    }
}

fn add(c: &[AtomicU64; 2], fam: Family, n: u64) {
    c[fam.index()].fetch_add(n, Ordering::Relaxed);
}

/// IPv4 or IPv6 by the address.
pub fn family(a: IpAddr) -> Family {
    match a {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

fn on_link_v4(iface: &Iface, a: Ipv4Addr) -> Option<Ipv4Addr> {
    iface.v4.iter().find_map(|(x, p)| {
        let mask = u32::MAX.checked_shl(32 - u32::from(*p)).unwrap_or(0);
        (u32::from(*x) & mask == u32::from(a) & mask).then_some(*x)
    })
}

fn on_link_v6(iface: &Iface, a: &Ipv6Addr) -> Option<Ipv6Addr> {
    iface.v6.iter().find_map(|(x, p)| {
        let mask = u128::MAX.checked_shl(128 - u32::from(*p)).unwrap_or(0);
        (u128::from(*x) & mask == u128::from(*a) & mask).then_some(*x)
    })
}

/// The port a datagram to `dst` leaves by, and its source address: the
/// first port with `dst` on one of its subnets (every destination is
/// on-link: the config has no gateway); the source is `local` unless that
/// is the wildcard, then the port's address on that subnet (the kernel's
/// choice for an on-link destination).
pub fn route(ifaces: &Ifaces, local: IpAddr, dst: IpAddr) -> Option<(&Iface, IpAddr)> {
    ifaces.0.iter().find_map(|i| {
        let ours = match (dst, local) {
            (IpAddr::V4(d), IpAddr::V4(_)) => on_link_v4(i, d).map(IpAddr::V4),
            (IpAddr::V6(d), IpAddr::V6(_)) => on_link_v6(i, &d).map(IpAddr::V6),
            _ => None,
        }?;
        Some((i, if local.is_unspecified() { ours } else { local }))
    })
}

/// The frame of one datagram from `src` to `dst` with `payload`, from
/// `src_mac`; the destination MAC is left zero (the neighbour table fills
/// it). IPv4 with DF set and identification 0, TTL / hop limit 64, UDP
/// and IPv4 header checksums computed in software.
pub fn frame_spec<'a>(
    src_mac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    payload: &'a [u8],
) -> Option<FrameSpec<'a>> {
    let l3 = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => L3Spec::V4 {
            src: s,
            dst: d,
            ttl: TTL,
            options: &[],
            ident: 0,
            frag: FragSpec {
                dont_frag: true,
                ..FragSpec::default()
            },
        },
        (IpAddr::V6(s), IpAddr::V6(d)) => L3Spec::V6 {
            src: s,
            dst: d,
            hop_limit: TTL,
            ext: &[],
        },
        _ => return None,
    };
    Some(FrameSpec {
        src_mac,
        dst_mac: [0; 6],
        vlans: &[],
        l3,
        sport: src.port(),
        dport: dst.port(),
        payload,
        udp_csum: CsumMode::Correct,
    })
}

/// The port with `dst` on-link from `local` and the frame to build there
/// (from the port's address when `local` is a wildcard); `None`: no route
/// (no port has `dst` on-link, or `local` is of the other family).
fn routed<'a, 'p>(
    ifaces: &'a Ifaces,
    local: SocketAddr,
    dst: SocketAddr,
    payload: &'p [u8],
) -> Option<(&'a Iface, FrameSpec<'p>)> {
    let (iface, src) = route(ifaces, local.ip(), dst.ip())?;
    let spec = frame_spec(iface.mac, SocketAddr::new(src, local.port()), dst, payload)?;
    Some((iface, spec))
}

/// Write the frame of `spec` into the room `append` gives for its length;
/// that length.
fn write_spec<'b>(
    spec: &FrameSpec<'_>,
    append: impl FnOnce(u16) -> Option<&'b mut [u8]>,
) -> Option<usize> {
    let n = u16::try_from(build::frame_len(spec).ok()?).ok()?;
    build::write_frame(spec, append(n)?).ok()?;
    Some(usize::from(n))
}

/// Leave a built frame's checksums to the NIC: IPv4 header checksum 0, UDP
/// checksum the folded pseudo-header sum (what DPDK's
/// `rte_ipv4_phdr_cksum` / `rte_ipv6_phdr_cksum` give, as the TX checksum
/// offload requires). The L3 header length and the `RTE_MBUF_F_TX_*` flags.
pub fn prepare_offload(f: &mut [u8]) -> Option<(u16, u64)> {
    use dpdk_sys::mbuf::tx_cksum;
    let l3 = ether::HEADER_LEN;
    let (l3_len, sum, flags) = match frame_family(f) {
        Family::V4 => {
            let mut ip = Ipv4Packet::new_checked(f.get_mut(l3..)?).ok()?;
            ip.set_header_checksum(0);
            let hl = ip.header_len();
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            let len = u16::try_from(f.len().checked_sub(l3 + hl)?).ok()?;
            (
                hl,
                checksum::pseudo_v4(s, d, PROTO_UDP, len),
                tx_cksum::IPV4 | tx_cksum::IP_CKSUM | tx_cksum::UDP_CKSUM,
            )
        }
        Family::V6 => {
            let ip = Ipv6Packet::new_checked(f.get(l3..)?).ok()?;
            let len = u32::try_from(f.len().checked_sub(l3 + ipv6::HEADER_LEN)?).ok()?;
            (
                ipv6::HEADER_LEN,
                checksum::pseudo_v6(&ip.src_addr(), &ip.dst_addr(), PROTO_UDP, len),
                tx_cksum::IPV6 | tx_cksum::UDP_CKSUM,
            )
        }
    };
    let mut u = UdpPacket::new_checked(f.get_mut(l3 + l3_len..)?, Family::V4).ok()?;
    u.set_checksum(sum.fold());
    Some((u16::try_from(l3_len).ok()?, flags))
}

/// Hand a written frame's checksums to the NIC when `iface` offers it
/// (they were computed in software already otherwise).
fn offload_if_offered(iface: &Iface, m: &mut Mbuf) -> Option<()> {
    if iface.tx_csum {
        let (l3_len, flags) = prepare_offload(m.data_mut())?;
        m.view_mut()
            .set_tx_offload(ether::HEADER_LEN as u8, l3_len, flags);
    }
    Some(())
}

/// The IP header of a frame of `fam` we build (IPv4 without options).
fn l3_header_len(fam: Family) -> usize {
    match fam {
        Family::V4 => ipv4::HEADER_LEN,
        Family::V6 => ipv6::HEADER_LEN,
    }
}

/// The largest UDP payload of one unfragmented datagram of `fam`.
pub fn max_payload(fam: Family) -> usize {
    MTU - udp::HEADER_LEN - l3_header_len(fam)
}

/// The largest UDP payload of one datagram of `fam`, fragmented: the
/// IPv4 total length and the IPv6 payload length are 16-bit.
pub fn max_fragmented_payload(fam: Family) -> usize {
    usize::from(u16::MAX)
        - udp::HEADER_LEN
        - match fam {
            Family::V4 => ipv4::HEADER_LEN,
            Family::V6 => 0,
        }
}

/// Build and queue datagrams from `local` (a socket's bound address); how
/// many were taken. Each refused one is counted by reason.
pub fn send_burst(
    tx: &TxPath,
    ifaces: &Ifaces,
    frag: &FragOut,
    local: SocketAddr,
    dgrams: &[(SocketAddr, &[u8])],
) -> usize {
    let mut burst = MbufBurst::<64>::new();
    let mut stash = MbufBurst::<64>::new();
    let mut taken = 0;
    for chunk in dgrams.chunks(64) {
        // One trip to the pool per chunk: an application thread is no lcore
        // and has no mempool cache, so each single alloc would be a ring
        // operation of its own. All or nothing: when the pool is too low
        // for the chunk, each datagram tries alone below.
        let _ = tx.pool().alloc_into(&mut stash, chunk.len());
        let mut fresh = stash.drain();
        for (dst, payload) in chunk {
            taken += send_one(tx, ifaces, frag, local, *dst, payload, &mut fresh, &mut burst);
        }
        // What was not used goes back (freed in bulk).
        drop(fresh);
    }
    taken + flush(tx, &mut burst)
}

/// Build one datagram into an mbuf of `fresh` (or a new one) and add it to
/// `burst`; what a flush of a full `burst` took. A refused one is counted
/// by reason.
#[allow(clippy::too_many_arguments)]
fn send_one(
    tx: &TxPath,
    ifaces: &Ifaces,
    frag: &FragOut,
    local: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    fresh: &mut impl Iterator<Item = Mbuf>,
    burst: &mut MbufBurst<64>,
) -> usize {
    let fam = family(dst.ip());
    if payload.len() > max_fragmented_payload(fam) {
        add(&tx.senders.too_big, fam, 1);
        return 0;
    }
    if payload.len() > max_payload(fam) {
        return send_fragmented(tx, ifaces, frag, local, dst, payload, fresh, burst);
    }
    let Some((iface, spec)) = routed(ifaces, local, dst, payload) else {
        add(&tx.senders.no_route, fam, 1);
        return 0;
    };
    let Some(mut m) = fresh.next().or_else(|| tx.pool().alloc()) else {
        add(&tx.senders.no_buffer, fam, 1);
        return 0;
    };
    if write_spec(&spec, |n| m.append(n)).is_none() {
        add(&tx.senders.no_buffer, fam, 1);
        return 0;
    }
    m.view_mut().set_port(iface.port);
    if offload_if_offered(iface, &mut m).is_none() {
        add(&tx.senders.no_buffer, fam, 1);
        return 0;
    }
    push_or_flush(tx, burst, m)
}

/// Add `m` to `burst`, flushing a full `burst` first; what that flush took.
fn push_or_flush(tx: &TxPath, burst: &mut MbufBurst<64>, m: Mbuf) -> usize {
    let taken = if burst.spare() == 0 { flush(tx, burst) } else { 0 };
    // Room: flushed above when full.
    let _ = burst.push(m);
    taken
}

/// A datagram over the MTU: its fragments, each a frame of its own, go
/// onto `burst` (and the ring) like datagrams (see [`build_fragments`]).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn send_fragmented(
    tx: &TxPath,
    ifaces: &Ifaces,
    frag: &FragOut,
    local: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    fresh: &mut impl Iterator<Item = Mbuf>,
    burst: &mut MbufBurst<64>,
) -> usize {
    let fam = family(dst.ip());
    let mut frags = MbufBurst::<64>::new();
    let built = build_fragments(
        ifaces,
        frag,
        (local, dst),
        || std::iter::once(payload),
        payload.len(),
        || fresh.next().or_else(|| tx.pool().alloc()),
        &mut frags,
    );
    if let Err(r) = built {
        add(r.counter(tx), fam, 1);
        return 0;
    }
    frags.drain().map(|m| push_or_flush(tx, burst, m)).sum()
}

/// The most segments one GSO send may carry: the kernel's
/// `UDP_MAX_SEGMENTS` (64), also one burst of the ring.
pub const MAX_SEGMENTS: usize = 64;

/// The largest header of a frame we build: Ethernet, IPv6, UDP.
const MAX_HEADER: usize = ether::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN;

/// Set the ECN codepoint (low 2 bits of the IPv4 TOS / IPv6 traffic class)
/// of a frame we built, DSCP 0; the IPv4 header checksum is refilled.
pub fn set_ecn(f: &mut [u8], ecn: u8) -> Option<()> {
    let l3 = f.get_mut(ether::HEADER_LEN..)?;
    match frame_family_of_l3(l3) {
        Family::V4 => {
            let mut ip = Ipv4Packet::new_checked(l3).ok()?;
            ip.set_dscp_ecn(ecn & 0b11);
            ip.fill_checksum();
        }
        Family::V6 => {
            let mut ip = Ipv6Packet::new_checked(l3).ok()?;
            let flow = ip.flow_label();
            ip.set_version_tc_flow(ecn & 0b11, flow);
        }
    }
    Some(())
}

/// IPv4 or IPv6 by the version nibble.
fn frame_family_of_l3(l3: &[u8]) -> Family {
    match l3.first().map(|b| b >> 4) {
        Some(6) => Family::V6,
        _ => Family::V4,
    }
}

/// Give a frame copied from a GSO send's first (full-size) frame its own,
/// shorter payload length: IP and UDP lengths, the IPv4 header checksum.
fn shorten(f: &mut [u8], hl: usize, l3_len: usize) -> Option<()> {
    let l3 = ether::HEADER_LEN;
    let udp_len = u16::try_from(f.len().checked_sub(hl)? + udp::HEADER_LEN).ok()?;
    match frame_family(f) {
        Family::V4 => {
            let mut ip = Ipv4Packet::new_checked(f.get_mut(l3..)?).ok()?;
            ip.set_total_len(udp_len.checked_add(u16::try_from(l3_len).ok()?)?);
            ip.fill_checksum();
        }
        Family::V6 => {
            Ipv6Packet::new_checked(f.get_mut(l3..)?)
                .ok()?
                .set_payload_len(udp_len);
        }
    }
    UdpPacket::new_checked(f.get_mut(l3 + l3_len..)?, Family::V4)
        .ok()?
        .set_len(udp_len);
    Some(())
}

/// The UDP checksum of a frame, in software (its IP header is complete).
fn fill_udp_checksum(f: &mut [u8], l3_len: usize) -> Option<()> {
    let l3 = ether::HEADER_LEN;
    let l4 = l3 + l3_len;
    let len = f.len().checked_sub(l4)?;
    let pseudo = match frame_family(f) {
        Family::V4 => {
            let ip = Ipv4Packet::new_checked(f.get(l3..)?).ok()?;
            checksum::pseudo_v4(ip.src_addr(), ip.dst_addr(), PROTO_UDP, u16::try_from(len).ok()?)
        }
        Family::V6 => {
            let ip = Ipv6Packet::new_checked(f.get(l3..)?).ok()?;
            checksum::pseudo_v6(&ip.src_addr(), &ip.dst_addr(), PROTO_UDP, u32::try_from(len).ok()?)
        }
    };
    let mut u = UdpPacket::new_checked(f.get_mut(l4..)?, Family::V4).ok()?;
    u.set_checksum(0);
    let c = match pseudo
        .combine(checksum::Sum::new().add_bytes(&f[l4..]))
        .checksum()
    {
        0 => 0xffff,
        c => c,
    };
    UdpPacket::new_checked(f.get_mut(l4..)?, Family::V4)
        .ok()?
        .set_checksum(c);
    Some(())
}

/// GSO-style send (the kernel's `UDP_SEGMENT`): `buf` cut into datagrams
/// of `segment` bytes (the last may be shorter; 0: one datagram), all from `local` to `dst`
/// with ECN codepoint `ecn`. The headers are built once, for the first
/// datagram, and copied into the others (only a shorter last one has its
/// lengths and IPv4 header checksum redone); the UDP checksums go to the
/// NIC when the port offers it (then one pseudo-header sum serves every
/// full-size datagram), else each is summed in software. One pool trip,
/// one ring enqueue for all. How many datagrams were taken: 0 or all,
/// except when the ring has room for only a prefix (the rest are freed).
/// Refused ones are counted by reason: more than
/// [`MAX_SEGMENTS`] or a segment above the MTU (`too_big`, as the
/// kernel's `EINVAL` / `EMSGSIZE`), no route, no mbuf or ring room.
pub fn send_segments(
    tx: &TxPath,
    ifaces: &Ifaces,
    local: SocketAddr,
    dst: SocketAddr,
    buf: &[u8],
    segment: usize,
    ecn: u8,
) -> usize {
    let fam = family(dst.ip());
    if buf.is_empty() {
        return 0;
    }
    // 0: no segmentation (the kernel's gso_size 0), one datagram.
    let segment = if segment == 0 { buf.len() } else { segment.min(buf.len()) };
    let count = buf.len().div_ceil(segment);
    let refuse = |c: &[AtomicU64; 2]| {
        add(c, fam, count as u64);
        0
    };
    if count > MAX_SEGMENTS || segment > max_payload(fam) {
        return refuse(&tx.senders.too_big);
    }
    let mut chunks = buf.chunks(segment);
    let first = chunks.next().unwrap_or_default();
    let Some((iface, spec)) = routed(ifaces, local, dst, first) else {
        return refuse(&tx.senders.no_route);
    };
    let mut burst = MbufBurst::<MAX_SEGMENTS>::new();
    if tx.pool().alloc_into(&mut burst, count).is_err() || burst.len() != count {
        burst.clear();
        return refuse(&tx.senders.no_buffer);
    }
    let mut ms = burst.drain();
    let mut out = MbufBurst::<MAX_SEGMENTS>::new();
    // The first frame, whole: its header is the template.
    let (mut header, mut hl, mut l3_len, mut flags) = ([0u8; MAX_HEADER], 0, 0, 0u64);
    let built = ms.next().and_then(|mut m| {
        let n = write_spec(&spec, |n| m.append(n))?;
        if ecn != 0 {
            set_ecn(m.data_mut(), ecn)?;
        }
        l3_len = l3_header_len(fam);
        hl = n - first.len();
        if iface.tx_csum {
            let (l3, f) = prepare_offload(m.data_mut())?;
            m.view_mut().set_tx_offload(ether::HEADER_LEN as u8, l3, f);
            flags = f;
        }
        header.get_mut(..hl)?.copy_from_slice(m.data().get(..hl)?);
        m.view_mut().set_port(iface.port);
        out.push(m).ok()
    });
    for chunk in chunks {
        if built.is_none() {
            break;
        }
        let Some(mut m) = ms.next() else { break };
        let ok = (|| {
            let n = u16::try_from(hl + chunk.len()).ok()?;
            let f = m.append(n)?;
            f[..hl].copy_from_slice(&header[..hl]);
            f[hl..].copy_from_slice(chunk);
            if chunk.len() != segment {
                shorten(f, hl, l3_len)?;
                if iface.tx_csum {
                    prepare_offload(f)?;
                }
            }
            if iface.tx_csum {
                m.view_mut()
                    .set_tx_offload(ether::HEADER_LEN as u8, l3_len as u16, flags);
            } else {
                fill_udp_checksum(m.data_mut(), l3_len)?;
            }
            m.view_mut().set_port(iface.port);
            Some(())
        })();
        if ok.is_none() {
            break;
        }
        let _ = out.push(m);
    }
    drop(ms);
    if out.len() != count {
        out.clear();
        return refuse(&tx.senders.no_buffer);
    }
    flush_gso(tx, fam, &mut out)
}

/// One enqueue of a GSO send's frames (what did not fit is freed and
/// counted).
fn flush_gso(tx: &TxPath, fam: Family, out: &mut MbufBurst<MAX_SEGMENTS>) -> usize {
    let n = tx.ring.enqueue_mp(out);
    tx.wake.kick();
    add(&tx.senders.accepted, fam, n as u64);
    add(&tx.senders.no_buffer, fam, out.len() as u64);
    out.clear();
    n
}

/// Why a datagram was not built: the counter it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// `no_route` (`IpOutNoRoutes`).
    NoRoute,
    /// `no_buffer` (`UdpSndbufErrors`).
    NoBuffer,
}

impl Refused {
    fn counter(self, tx: &TxPath) -> &[AtomicU64; 2] {
        match self {
            Refused::NoRoute => &tx.senders.no_route,
            Refused::NoBuffer => &tx.senders.no_buffer,
        }
    }
}

/// The fragments of one datagram from `local` to `dst` (`ends`) whose UDP
/// payload, `len` bytes, is the concatenation of what `parts` yields (an
/// in-process sender's slice, or an out-of-process client's request
/// segments), each in an mbuf from `alloc` with its port set, appended to
/// `out`; how many. They carry software checksums (the UDP one covers the
/// whole datagram, which no single fragment holds for a NIC to sum). The
/// kernel's `IP_PMTUDISC_WANT`: no DF on the fragments. Counted in
/// `FragOKs` / `FragCreates`, or `FragFails` when the pool ran dry (the
/// fragments already written are freed with `out` by the caller).
fn build_fragments<'p, I>(
    ifaces: &Ifaces,
    frag: &FragOut,
    (local, dst): (SocketAddr, SocketAddr),
    parts: impl Fn() -> I,
    len: usize,
    alloc: impl FnMut() -> Option<Mbuf>,
    out: &mut MbufBurst<64>,
) -> Result<usize, Refused>
where
    I: Iterator<Item = &'p [u8]>,
{
    use crate::parse::fragment::{finish_udp_head, sum_parts, Fragmenter};
    let fam = family(dst.ip());
    let (iface, spec) = routed(ifaces, local, dst, &[]).ok_or(Refused::NoRoute)?;
    // The headers for an empty payload, then the real length and checksum.
    let mut head = [0u8; ether::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN];
    let l3 = ether::HEADER_LEN;
    let (n, l4) = build::write_frame(&spec, &mut head)
        .ok()
        .and_then(|n| {
            let l4 = finish_udp_head(&mut head[..n], l3, fam, len, sum_parts(parts()))?;
            Some((n, l4))
        })
        .ok_or(Refused::NoBuffer)?;
    let (ip, udp) = head[..n].split_at(l4);
    let Some(fr) = Fragmenter::new(ip, l3, fam, udp.len() + len, MTU, frag.next_ident(fam)) else {
        frag.count(fam, None);
        return Err(Refused::NoBuffer);
    };
    let first = out.len();
    // Not the identity: `udp` lives shorter than `parts`' slices, and the
    // map lets those be seen as of its lifetime, so the two chain.
    #[allow(clippy::map_identity)]
    let all = || std::iter::once(udp).chain(parts().map(|p| p));
    let written = crate::frag_out::write_fragments(&fr, all, alloc, out);
    frag.count(fam, written);
    let count = written.ok_or(Refused::NoBuffer)?;
    for i in first..out.len() {
        if let Some(mut m) = out.get_mut(i) {
            m.set_port(iface.port);
        }
    }
    Ok(count)
}

/// Onto the ring; what does not fit is freed and counted. How many
/// datagrams went (a later fragment is not one).
fn flush(tx: &TxPath, burst: &mut MbufBurst<64>) -> usize {
    let kinds = kinds(burst);
    let n = tx.ring.enqueue_mp(burst);
    tx.wake.kick();
    let mut datagrams = 0;
    for &(f, later) in &kinds[..n] {
        add(&tx.senders.accepted, f, 1);
        if later {
            add(&tx.senders.later, f, 1);
        } else {
            datagrams += 1;
        }
    }
    // The frames left are the refused: freed.
    for &(f, _) in &kinds[n..n + burst.len()] {
        add(&tx.senders.no_buffer, f, 1);
    }
    burst.clear();
    datagrams
}

/// The family of each frame of `b`, in order, and whether it is a
/// fragment after a datagram's first.
fn kinds(b: &MbufBurst<64>) -> [(Family, bool); 64] {
    let mut k = [(Family::V4, false); 64];
    for (f, m) in k.iter_mut().zip(b.iter()) {
        *f = (frame_family(m.data()), later_fragment(m.data()));
    }
    k
}

/// Whether a frame we built is a fragment other than the first (offset
/// not 0): IPv4's fragment offset, or IPv6's fragment header right after
/// the fixed header (the only place we put one).
fn later_fragment(f: &[u8]) -> bool {
    let Some(l3) = f.get(ether::HEADER_LEN..) else {
        return false;
    };
    match frame_family(f) {
        Family::V4 => Ipv4Packet::new_checked(l3).is_ok_and(|ip| ip.frag_offset() != 0),
        Family::V6 => {
            let ip = Ipv6Packet::new_checked(l3);
            ip.is_ok_and(|ip| ip.next_header() == ipv6::next_header::FRAGMENT)
                && l3
                    .get(ipv6::HEADER_LEN..)
                    .and_then(|h| ipv6::FragmentHeader::new_checked(h).ok())
                    .is_some_and(|h| h.frag_offset() != 0)
        }
    }
}

/// IPv4 or IPv6, from a frame we built (no VLAN tag).
fn frame_family(f: &[u8]) -> Family {
    match EthernetFrame::new_checked(f).map(|e| e.ethertype()) {
        Ok(ether::ethertype::IPV6) => Family::V6,
        _ => Family::V4,
    }
}

/// The destination address of a frame we built.
fn frame_dst(f: &[u8]) -> Option<IpAddr> {
    let l3 = f.get(ether::HEADER_LEN..)?;
    match frame_family(f) {
        Family::V4 => Some(IpAddr::V4(Ipv4Packet::new_checked(l3).ok()?.dst_addr())),
        Family::V6 => Some(IpAddr::V6(Ipv6Packet::new_checked(l3).ok()?.dst_addr())),
    }
}

/// An out-of-process client's send request, at the start of an mbuf of
/// `tx_pool`'s, the payload after it: the engine builds the frame in place
/// from the socket's bound address (`udpdemux-client`'s
/// `ClientSocket::send_burst` writes it). A payload over the MTU continues
/// in further segments chained to the first (at most
/// [`MAX_REQUEST_SEGS`] in all); the engine writes its fragments into
/// fresh mbufs and frees the chain.
pub mod request {
    use std::ops::Range;
    /// "UDTX".
    pub const MAGIC: u32 = 0x5544_5458;
    pub const MAGIC_AT: Range<usize> = 0..4;
    /// The engine's socket id (`ClientSocket::id`).
    pub const SOCKET: Range<usize> = 4..8;
    pub const PORT: Range<usize> = 8..10;
    /// 4 for IPv4 (the address in the first 4 bytes of ADDR), 6 for IPv6.
    pub const FAMILY: usize = 10;
    /// The ECN codepoint to send with (low 2 bits; 0 in older clients'
    /// requests: not-ECT).
    pub const ECN: usize = 11;
    pub const ADDR: Range<usize> = 12..28;
    pub const LEN: usize = ADDR.end;
}

/// Write a request header for `socket` to `dst` into `out` (at least
/// [`request::LEN`] bytes).
pub fn encode_request(out: &mut [u8], socket: u32, dst: SocketAddr) -> Option<()> {
    let h = out.get_mut(..request::LEN)?;
    h.fill(0);
    h[request::MAGIC_AT].copy_from_slice(&request::MAGIC.to_be_bytes());
    h[request::SOCKET].copy_from_slice(&socket.to_be_bytes());
    h[request::PORT].copy_from_slice(&dst.port().to_be_bytes());
    match dst.ip() {
        IpAddr::V4(a) => {
            h[request::FAMILY] = 4;
            h[request::ADDR.start..request::ADDR.start + 4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            h[request::FAMILY] = 6;
            h[request::ADDR].copy_from_slice(&a.octets());
        }
    }
    Some(())
}

/// Set the ECN codepoint of an encoded request.
pub fn set_request_ecn(out: &mut [u8], ecn: u8) -> Option<()> {
    *out.get_mut(request::ECN)? = ecn & 0b11;
    Some(())
}

/// The socket id and destination of a request, and its payload.
pub fn decode_request(b: &[u8]) -> Option<(u32, SocketAddr, &[u8])> {
    let h = b.get(..request::LEN)?;
    let be32 = |r: std::ops::Range<usize>| u32::from_be_bytes(h[r].try_into().unwrap_or([0; 4]));
    if be32(request::MAGIC_AT) != request::MAGIC {
        return None;
    }
    let port = u16::from_be_bytes([h[request::PORT.start], h[request::PORT.start + 1]]);
    let a: [u8; 16] = h[request::ADDR].try_into().ok()?;
    let ip = match h[request::FAMILY] {
        4 => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        6 => IpAddr::V6(Ipv6Addr::from(a)),
        _ => return None,
    };
    Some((
        be32(request::SOCKET),
        SocketAddr::new(ip, port),
        &b[request::LEN..],
    ))
}

/// The TX ring of the client with `pid` (it creates it, single producer
/// and single consumer; the engine's main lcore drains it).
pub fn client_ring_name(pid: u32) -> String {
    format!("udx_tx{pid}")
}

/// Slots of a client's TX ring.
pub const CLIENT_RING_SIZE: u32 = 1024;

/// The TX ring of this process as a client (`udpdemux-client`): made on
/// first use (one consumer: the engine's main lcore; producers enqueue
/// with the multi-producer protocol), or found when a process with the
/// same pid made it before.
pub fn client_ring() -> dpdk_sys::Result<MbufRing> {
    let name = client_ring_name(std::process::id());
    MbufRing::create(&name, CLIENT_RING_SIZE, -1, dpdk_sys::ring::SC_DEQ).or_else(|_| {
        // SAFETY: a ring of this name is only made here, as an MbufRing of
        // mbufs of the engine's TX pool, and nobody frees it.
        unsafe { MbufRing::lookup(&name) }
    })
}

/// Most segments a client's request may have: the largest payload (65 527
/// bytes) and the request header take 33 data rooms of 2048 bytes.
pub const MAX_REQUEST_SEGS: usize = 64;

/// The payload length of a request (every segment after the header), once
/// its chain is checked: at most [`MAX_REQUEST_SEGS`] segments, as many as
/// `nb_segs` says, their lengths adding up to `pkt_len`, the header whole
/// in the first. `None`: not a request a client builds.
fn request_payload_len(m: &Mbuf) -> Option<usize> {
    let v = m.view();
    let segs = usize::from(v.nb_segs());
    if !(1..=MAX_REQUEST_SEGS).contains(&segs) || usize::from(v.data_len()) < request::LEN {
        return None;
    }
    // Bounded: a broken chain (a loop) is walked at most one step too far.
    let (walked, total) = v
        .segments()
        .take(MAX_REQUEST_SEGS + 1)
        .fold((0usize, 0usize), |(n, t), s| (n + 1, t + s.len()));
    let whole = usize::try_from(v.pkt_len()).ok()?;
    (walked == segs && total == whole).then(|| total - request::LEN)
}

/// Turn a client's request in `m` into frames in `out` (empty): one built
/// in place when it fits the MTU, its fragments in fresh mbufs otherwise
/// (one segment or several; the request is then freed). Each frame is
/// counted in `accepted` (later fragments also in `later`), a refused
/// request by reason.
fn finish_request(tx: &TxPath, shared: &Shared, mut m: Mbuf, out: &mut MbufBurst<64>) {
    tx.client_requests.fetch_add(1, Ordering::Relaxed);
    let Some(len) = request_payload_len(&m) else {
        tx.bad_requests.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some((id, dst, first)) = decode_request(m.data()) else {
        tx.bad_requests.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let ecn = m.data().get(request::ECN).map_or(0, |e| e & 0b11);
    let fam = family(dst.ip());
    let single = m.view().nb_segs() == 1;
    if len > max_fragmented_payload(fam) {
        add(&tx.senders.too_big, fam, 1);
        return;
    }
    if len <= max_payload(fam) && !single {
        // A client chains only datagrams over the MTU.
        tx.bad_requests.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let local = shared
        .sockets
        .load()
        .iter()
        .find(|e| e.sock.id == id)
        .map(|e| e.sock.conf.local);
    let Some(local) = local else {
        tx.bad_requests.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if len > max_payload(fam) {
        let v = m.view();
        let built = build_fragments(
            &shared.ifaces,
            &shared.frag_out,
            (local, dst),
            || std::iter::once(first).chain(v.segments().skip(1).take(MAX_REQUEST_SEGS)),
            len,
            || tx.pool().alloc(),
            out,
        );
        // Every fragment carries the datagram's ECN codepoint (RFC 3168
        // 5.3: the reassembler may drop a datagram whose fragments differ).
        let marked = ecn == 0
            || (0..out.len()).all(|i| out.get_mut(i).is_some_and(|mut f| set_ecn(f.data_mut(), ecn).is_some()));
        let built = built.and_then(|n| if marked { Ok(n) } else { Err(Refused::NoBuffer) });
        match built {
            Ok(n) => {
                add(&tx.senders.accepted, fam, n as u64);
                add(&tx.senders.later, fam, n.saturating_sub(1) as u64);
            }
            Err(r) => {
                // What was written of it goes back.
                out.clear();
                add(r.counter(tx), fam, 1);
            }
        }
        // The request's chain is freed with `m`.
        return;
    }
    let mut buf = [0u8; MTU];
    let body = &mut buf[..len];
    body.copy_from_slice(first);
    let body = &buf[..len];
    let Some((iface, spec)) = routed(&shared.ifaces, local, dst, body) else {
        add(&tx.senders.no_route, fam, 1);
        return;
    };
    let mut v = m.view_mut();
    v.reset();
    if write_spec(&spec, |n| v.append(n)).is_none() {
        add(&tx.senders.no_buffer, fam, 1);
        return;
    }
    v.set_port(iface.port);
    v.clear_ol_flags();
    if ecn != 0 && set_ecn(m.data_mut(), ecn).is_none() {
        add(&tx.senders.no_buffer, fam, 1);
        return;
    }
    if offload_if_offered(iface, &mut m).is_none() {
        add(&tx.senders.no_buffer, fam, 1);
        return;
    }
    add(&tx.senders.accepted, fam, 1);
    // Room: `out` is empty.
    let _ = out.push(m);
}

/// Keep the list of clients' TX rings current (main lcore): a client with
/// a socket open whose ring exists is drained; one that has none open any
/// more (closed, or reaped when it died) has what is left freed and counted.
fn refresh_clients(tx: &TxPath, shared: &Shared, rings: &mut Vec<(u32, MbufRing)>) {
    let socks = shared.sockets.load();
    let live = |pid: u32| {
        socks
            .iter()
            .any(|e| e.consumed_by == ConsumedBy::Client(pid))
    };
    rings.retain(|(pid, r)| {
        if live(*pid) {
            return true;
        }
        let mut b = MbufBurst::<64>::new();
        while r.dequeue(&mut b, 64) > 0 {
            tx.client_freed
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            b.clear();
        }
        false
    });
    for e in socks.iter() {
        let ConsumedBy::Client(pid) = e.consumed_by else {
            continue;
        };
        if rings.iter().any(|(p, _)| *p == pid) {
            continue;
        }
        // SAFETY: a ring of this name is made by `udpdemux-client` as an
        // MbufRing of mbufs from our TX pool, and lives while the client's
        // process does (it is never freed by the client).
        if let Ok(r) = unsafe { MbufRing::lookup(&client_ring_name(pid)) } {
            rings.push((pid, r));
        }
    }
}

/// Frames with their MAC, waiting for one `tx_burst` on one port.
struct Out<'a> {
    tx: &'a TxPath,
    queue: Option<u16>,
    ifaces: &'a Ifaces,
    port: u16,
    bufs: MbufBurst<64>,
}

impl Out<'_> {
    fn push(&mut self, port: u16, mac: [u8; 6], mut m: Mbuf) {
        if let Ok(mut e) = EthernetFrame::new_checked(m.data_mut()) {
            e.set_dst_mac(mac);
        }
        if port != self.port || self.bufs.spare() == 0 {
            self.flush();
            self.port = port;
        }
        let _ = self.bufs.push(m);
    }

    fn flush(&mut self) {
        if self.bufs.is_empty() {
            return;
        }
        let d = &self.tx.drain;
        let queue = self.queue.filter(|q| {
            self.ifaces
                .get(self.port)
                .is_some_and(|i| *q < i.tx_queues)
        });
        let kinds = kinds(&self.bufs);
        let n = self.bufs.len();
        let sent = queue.map_or(0, |q| port::tx_from(self.port, q, &mut self.bufs));
        for &(f, later) in &kinds[..sent] {
            if later {
                d.out_later[f.index()].add(1);
            } else {
                d.out[f.index()].add(1);
            }
        }
        for &(f, _) in &kinds[sent..n] {
            d.tx_errors[f.index()].add(1);
        }
        // What the NIC did not take: freed.
        self.bufs.clear();
    }
}

/// The servicer's part ([`TxPath::servicer`]: the main lcore, or the RX
/// lcore running an application's task), at TSC `now`, on its TX queue
/// `queue`: drain the senders' ring and the clients' rings through the
/// neighbour table, send what is resolved, run the table's timers
/// (solicit retries, expiry). How many frames it took from the rings.
pub fn service(shared: &Shared, queue: Option<u16>, now: u64) -> usize {
    let Some(tx) = shared.send.as_ref() else {
        return 0;
    };
    let ifaces = &shared.ifaces;
    let mut out = Out {
        tx,
        queue,
        ifaces,
        port: u16::MAX,
        bufs: MbufBurst::new(),
    };
    let mut solicits = Solicits::default();
    let mut burst = MbufBurst::<64>::new();
    // The frames of one client request (a datagram's fragments at most).
    let mut frames = MbufBurst::<64>::new();
    let full = now >= tx.next_full.get();
    let quiet = !full && tx.ring.looks_empty() && tx.lessons.is_empty();
    // Nothing to send or learn, no timer due: no lock taken when no client
    // has a ring (an RX lcore with a task calls this once per loop).
    if quiet && tx.client_rings.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut rings = tx.clients.lock().unwrap_or_else(|p| p.into_inner());
    if quiet && rings.iter().all(|(_, r)| r.looks_empty()) {
        return 0;
    }
    if full {
        tx.next_full.set(now + tx.ms_ticks);
        refresh_clients(tx, shared, &mut rings);
        tx.client_rings.store(rings.len(), Ordering::Relaxed);
    }
    let mut table = tx.table();
    // What the RX lcores learned and heard, before anything is resolved:
    // an answer to our solicit releases what waited for it, and a reply to
    // a datagram just received finds its sender's MAC.
    tx.lessons.teach(&mut table, now);
    tx.take_heard(ifaces, &mut table, now);
    // What became reachable goes first: a datagram sent after those were
    // held must not overtake them.
    table.take_ready(|port, mac, m| out.push(port, mac, m));
    let mut resolve = |m: Mbuf, table: &mut Table<Mbuf>, out: &mut Out<'_>| {
        let port = m.view().port();
        let Some(dst) = frame_dst(m.data()) else {
            tx.drain.tx_errors[frame_family(m.data()).index()].add(1);
            return;
        };
        match table.resolve(port, dst, m, now) {
            Resolve::Send(mac, m) => out.push(port, mac, m),
            Resolve::Queued { solicit, dropped } => {
                if solicit {
                    solicits.push(port, dst);
                }
                // The oldest held datagram gave way: freed (counted in the table).
                drop(dropped);
            }
            // No entry could be made: freed (counted in the table).
            Resolve::Full(m) => drop(m),
        }
    };
    let mut taken = 0;
    loop {
        let n = tx.ring.dequeue(&mut burst, 64);
        taken += n;
        for m in burst.drain() {
            resolve(m, &mut table, &mut out);
        }
        if n < 64 {
            break;
        }
    }
    for (_, r) in rings.iter() {
        loop {
            let n = r.dequeue(&mut burst, 64);
            taken += n;
            for m in burst.drain() {
                // Per datagram, so hot: what it allocates (nothing, or
                // the exit JSON's `hot_path_allocations` says so) counts.
                let hot = crate::runtime::alloc_guard::HotSection::enter();
                finish_request(tx, shared, m, &mut frames);
                drop(hot);
                for f in frames.drain() {
                    resolve(f, &mut table, &mut out);
                }
            }
            if n < 64 {
                break;
            }
        }
    }
    drop(rings);
    // Expired datagrams are freed (counted in the table).
    table.tick(now, |port, ip| solicits.push(port, ip), drop);
    drop(table);
    out.flush();
    for (port, ip) in solicits.iter() {
        let sent = queue
            .zip(ifaces.get(port))
            .filter(|(q, i)| *q < i.tx_queues)
            .and_then(|(q, i)| {
                let m = solicit_mbuf(tx.pool(), i, ip)?;
                port::tx_one(port, q, m).ok()
            });
        match sent {
            Some(()) => tx.drain.solicits_sent.add(1),
            None => tx.drain.solicits_failed.add(1),
        }
    }
    taken
}

/// At most this many solicits per service pass; the others go out at
/// their entry's next retry.
const SOLICITS_PER_PASS: usize = 32;

#[derive(Default)]
struct Solicits {
    n: usize,
    items: [Option<(u16, IpAddr)>; SOLICITS_PER_PASS],
}

impl Solicits {
    fn push(&mut self, port: u16, ip: IpAddr) {
        if let Some(slot) = self.items.get_mut(self.n) {
            *slot = Some((port, ip));
            self.n += 1;
        }
    }
    fn iter(&self) -> impl Iterator<Item = (u16, IpAddr)> + '_ {
        self.items.iter().take(self.n).flatten().copied()
    }
}

/// An ARP request or a neighbour solicitation for `ip` from `iface`, in a
/// fresh mbuf of `pool`.
fn solicit_mbuf(pool: &Mempool, iface: &Iface, ip: IpAddr) -> Option<Mbuf> {
    let mut m = pool.alloc()?;
    let n = match ip {
        IpAddr::V4(a) => {
            let src = on_link_v4(iface, a).or_else(|| iface.v4.first().map(|x| x.0))?;
            let out = m.append((ether::HEADER_LEN + arp::PACKET_LEN) as u16)?;
            write_arp_request(out, iface.mac, src, a)?
        }
        IpAddr::V6(a) => {
            let src = on_link_v6(iface, &a).or_else(|| iface.v6.first().map(|x| x.0))?;
            let out = m.append((ether::HEADER_LEN + ipv6::HEADER_LEN + NS_LEN) as u16)?;
            write_solicitation(out, iface.mac, &src, &a)?
        }
    };
    m.view_mut().set_port(iface.port);
    (n == usize::from(m.view().data_len())).then_some(m)
}

/// "Who has `target`? Tell `src`" (RFC 826), broadcast. The frame's length.
pub fn write_arp_request(
    out: &mut [u8],
    mac: [u8; 6],
    src: Ipv4Addr,
    target: Ipv4Addr,
) -> Option<usize> {
    let len = ether::HEADER_LEN + arp::PACKET_LEN;
    let out = out.get_mut(..len)?;
    let mut e = EthernetFrame::new_checked(&mut out[..]).ok()?;
    e.set_dst_mac([0xff; 6]);
    e.set_src_mac(mac);
    e.set_ethertype(ether::ethertype::ARP);
    let mut a = ArpPacket::new_unchecked(&mut out[ether::HEADER_LEN..]);
    a.set_hardware_type(arp::hardware::ETHERNET);
    a.set_protocol_type(ether::ethertype::IPV4);
    a.set_hardware_len(6);
    a.set_protocol_len(4);
    a.set_operation(operation::REQUEST);
    a.set_sender_hardware_addr(mac);
    a.set_sender_protocol_addr(src);
    a.set_target_hardware_addr([0; 6]);
    a.set_target_protocol_addr(target);
    Some(len)
}

/// A neighbour solicitation for `target` from `src` (RFC 4861 §4.3, §7.2.2):
/// to the target's solicited-node group, hop limit 255, with our MAC in a
/// source link-layer address option. The frame's length.
pub fn write_solicitation(
    out: &mut [u8],
    mac: [u8; 6],
    src: &Ipv6Addr,
    target: &Ipv6Addr,
) -> Option<usize> {
    let l3 = ether::HEADER_LEN;
    let l4 = l3 + ipv6::HEADER_LEN;
    let len = l4 + NS_LEN;
    let out = out.get_mut(..len)?;
    let group = solicited_node(target);
    let mut e = EthernetFrame::new_checked(&mut out[..]).ok()?;
    e.set_dst_mac(ether::ipv6_multicast_mac(&group));
    e.set_src_mac(mac);
    e.set_ethertype(ether::ethertype::IPV6);
    let mut ip = Ipv6Packet::new_checked(&mut out[l3..l4]).ok()?;
    ip.set_version_tc_flow(0, 0);
    ip.set_payload_len(NS_LEN as u16);
    ip.set_next_header(PROTO_ICMPV6);
    ip.set_hop_limit(ND_HOP_LIMIT);
    ip.set_src_addr(src);
    ip.set_dst_addr(&group);
    let ns = &mut out[l4..];
    ns.fill(0);
    let mut p = IcmpPacket::new_checked(ns)?;
    p.set_msg_type(types::V6_NEIGHBOR_SOLICIT);
    p.set_code(0);
    p.set_nd_target(target);
    let mut o = NdOption::new_unchecked(p.nd_options_mut()?);
    o.set_kind(nd_option::SOURCE_LL_ADDR);
    o.set_len_units((LL_OPTION_LEN / 8) as u8);
    o.set_link_layer_addr(mac);
    p.fill_checksum_v6(src, &group);
    Some(len)
}

/// What an ARP or ND frame taught: `ip` on `port` is at `mac`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lesson {
    pub port: u16,
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub how: Learn,
}

/// Lessons waiting for the main lcore.
pub const LESSONS_LEN: usize = 64;

/// The RX lcores' lessons for the neighbour table, which only the main lcore
/// locks. A queue and not a `try_lock` of the table: an RX lcore must not
/// wait for the main lcore's pass, and a lesson dropped whenever that pass
/// held the lock (every drained burst) cost a solicit retry, a second of
/// datagrams held behind an answer that had arrived.
#[derive(Debug)]
pub struct Lessons {
    q: ArrayQueue<Lesson>,
}

impl Lessons {
    pub fn new(len: usize) -> Lessons {
        Lessons {
            q: ArrayQueue::new(len.max(1)),
        }
    }

    /// Lock-free, no allocation; false when `LESSONS_LEN` lessons wait
    /// already (the main lcore is not running its passes).
    pub fn push(&self, l: Lesson) -> bool {
        self.q.push(l).is_ok()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The oldest lesson waiting.
    pub fn pop(&self) -> Option<Lesson> {
        self.q.pop()
    }

    /// Teach `table` every lesson queued now, as of `now` (main lcore, the
    /// table locked); those pushed meanwhile wait for the next pass.
    pub fn teach<T>(&self, table: &mut Table<T>, now: u64) {
        for _ in 0..self.q.capacity() {
            let Some(l) = self.pop() else { break };
            table.learn(l.port, l.ip, l.mac, l.how, now);
        }
    }
}

/// The control path's hook: what an ARP or ND frame an RX lcore received
/// on `iface` teaches the neighbour table (the parser rejected it with
/// `err`), queued for the main lcore: an ARP packet or an ND message that
/// carries a link-layer address of a neighbour on one of the port's
/// subnets. False when the queue was full and the frame taught nothing
/// (the neighbour's next answer or the next solicit retry will).
pub fn learn(lessons: &Lessons, iface: &Iface, frame: &[u8], err: &ParseError) -> bool {
    let found = match *err {
        ParseError::NotIp {
            ethertype: ether::ethertype::ARP,
            l3_off,
        } => learn_arp(iface, frame, usize::from(l3_off)),
        ParseError::NotUdp {
            family: Family::V6,
            proto: PROTO_ICMPV6,
            l3_off,
            l4_off,
        } => learn_nd(iface, frame, usize::from(l3_off), usize::from(l4_off)),
        _ => None,
    };
    let Some((ip, mac, how)) = found else {
        return true;
    };
    lessons.push(Lesson {
        port: iface.port,
        ip,
        mac,
        how,
    })
}

fn unicast_mac(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 0 && *mac != [0; 6]
}

fn learn_arp(iface: &Iface, f: &[u8], l3: usize) -> Option<(IpAddr, [u8; 6], Learn)> {
    let a = ArpPacket::new_checked(f.get(l3..)?).ok()?;
    let (sha, spa, tpa) = (
        a.sender_hardware_addr(),
        a.sender_protocol_addr(),
        a.target_protocol_addr(),
    );
    if !unicast_mac(&sha) || spa.is_unspecified() || on_link_v4(iface, spa).is_none() {
        return None;
    }
    let how = match a.operation() {
        operation::REPLY if iface.has_v4(tpa) => Learn::Confirmed,
        operation::REQUEST if iface.has_v4(tpa) => Learn::Heard { create: true },
        operation::REQUEST | operation::REPLY => Learn::Heard { create: false },
        _ => return None,
    };
    Some((IpAddr::V4(spa), sha, how))
}

fn learn_nd(iface: &Iface, f: &[u8], l3: usize, l4: usize) -> Option<(IpAddr, [u8; 6], Learn)> {
    if l4 != l3 + ipv6::HEADER_LEN {
        return None;
    }
    let ip = Ipv6Packet::new_checked(f.get(l3..)?).ok()?;
    let end = l4 + usize::from(ip.payload_len());
    let p = IcmpPacket::new_checked(f.get(l4..end)?)?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if ip.hop_limit() != ND_HOP_LIMIT || p.code() != 0 || !p.verify_v6(&src, &dst) {
        return None;
    }
    let target = p.nd_target()?;
    let want = match p.msg_type() {
        types::V6_NEIGHBOR_ADVERT => nd_option::TARGET_LL_ADDR,
        types::V6_NEIGHBOR_SOLICIT => nd_option::SOURCE_LL_ADDR,
        _ => return None,
    };
    let mut mac = None;
    for o in p.nd_options() {
        let o = o.ok()?;
        if o.kind() == want {
            mac = Some(o.link_layer_addr());
        }
    }
    let mac = mac.filter(unicast_mac)?;
    if p.msg_type() == types::V6_NEIGHBOR_ADVERT {
        if target.is_multicast() {
            return None;
        }
        let how = if p.nd_flags() & nd_flags::SOLICITED != 0 {
            Learn::Confirmed
        } else {
            Learn::Heard { create: false }
        };
        Some((IpAddr::V6(target), mac, how))
    } else {
        // A solicitation: its sender is at `mac` (§7.2.3).
        if src.is_unspecified() || src.is_multicast() {
            return None;
        }
        Some((
            IpAddr::V6(src),
            mac,
            Learn::Heard {
                create: iface.has_v6(&target),
            },
        ))
    }
}

/// At stop, after the ports' last use by the main lcore: send what can be
/// sent, then free what is left (held datagrams count as expired, ring
/// leftovers in `freed_at_stop`).
pub fn finish(shared: &Shared, now: u64) {
    let Some(tx) = shared.send.as_ref() else {
        return;
    };
    // A full pass: what was resolved goes out before the rest is freed.
    tx.next_full.set(0);
    // The lcores have stopped: the main lcore's queue, whoever serviced
    // the path while they ran.
    service(shared, shared.main_tx_queue, now);
    let mut b = MbufBurst::<64>::new();
    while tx.ring.dequeue(&mut b, 64) > 0 {
        tx.freed_at_stop
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        b.clear();
    }
    for (_, r) in tx.clients.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        while r.dequeue(&mut b, 64) > 0 {
            tx.client_freed.fetch_add(b.len() as u64, Ordering::Relaxed);
            b.clear();
        }
    }
    tx.table().drain(drop);
}

/// The send path's books, for the exit JSON.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SendSummary {
    /// Frames put on the ring: datagrams, and every fragment of those over
    /// the MTU (`accepted_later` of them after a datagram's first).
    pub accepted: [u64; 2],
    pub accepted_later: [u64; 2],
    /// Datagrams (or their first fragment) handed to the NIC, and their
    /// later fragments (the other counters below count frames).
    pub out_datagrams: [u64; 2],
    pub out_later: [u64; 2],
    pub tx_errors: [u64; 2],
    pub no_buffer: [u64; 2],
    pub too_big: [u64; 2],
    pub no_route: [u64; 2],
    pub solicits_sent: u64,
    pub solicits_failed: u64,
    pub freed_at_stop: u64,
    /// Requests out-of-process clients put on their TX rings, those that
    /// were not valid, and those left when a client went.
    pub client_requests: u64,
    pub bad_requests: u64,
    pub client_freed: u64,
    pub neigh: NeighStats,
    /// Neighbours heard in received datagrams: reports the RX lcores made,
    /// those dropped on a full queue, those the main lcore took, and those
    /// of them that taught nothing.
    pub heard_reported: u64,
    pub heard_dropped: u64,
    pub heard_taken: u64,
    pub heard_ignored: u64,
    /// Reports the RX lcores did not make (over their per-millisecond budget).
    pub heard_suppressed: u64,
    /// Held in the neighbour table or the ring when the summary was taken.
    pub in_flight: u64,
    /// The main lcore's naps while it drains this path, and those of them
    /// an in-process sender's frames ended (`crate::wake`).
    pub main_naps: u64,
    pub main_naps_ended_by_send: u64,
    /// The RX lcore (its lcore id) that serviced the path since an
    /// application's task ran there (`runtime::lcore_task`); `None`: the
    /// main lcore did.
    pub serviced_by_lcore: Option<u32>,
}

impl SendSummary {
    /// `rx`: the RX lcores (one may service the path).
    pub fn of(tx: &TxPath, rx: &[crate::runtime::shared::RxLcore]) -> SendSummary {
        let r = |c: &[AtomicU64; 2]| [0, 1].map(|i| c[i].load(Ordering::Relaxed));
        let g = |c: &[Counter; 2]| [0, 1].map(|i| c[i].get());
        let t = tx.table();
        let h = |f: fn(&HeardQueue) -> &AtomicU64| {
            tx.heard.as_ref().map_or(0, |q| f(q).load(Ordering::Relaxed))
        };
        SendSummary {
            heard_reported: h(|q| &q.reported),
            heard_dropped: h(|q| &q.dropped),
            heard_taken: h(|q| &q.taken),
            heard_ignored: tx.heard_ignored.get(),
            heard_suppressed: h(|q| &q.suppressed),
            accepted: r(&tx.senders.accepted),
            accepted_later: r(&tx.senders.later),
            out_datagrams: g(&tx.drain.out),
            out_later: g(&tx.drain.out_later),
            tx_errors: g(&tx.drain.tx_errors),
            no_buffer: r(&tx.senders.no_buffer),
            too_big: r(&tx.senders.too_big),
            no_route: r(&tx.senders.no_route),
            solicits_sent: tx.drain.solicits_sent.get(),
            solicits_failed: tx.drain.solicits_failed.get(),
            freed_at_stop: tx.freed_at_stop.load(Ordering::Relaxed),
            client_requests: tx.client_requests.load(Ordering::Relaxed),
            bad_requests: tx.bad_requests.load(Ordering::Relaxed),
            client_freed: tx.client_freed.load(Ordering::Relaxed),
            neigh: t.stats,
            in_flight: t.held() as u64 + u64::from(tx.ring.count()),
            main_naps: tx.wake.parks(),
            main_naps_ended_by_send: tx.wake.unparks(),
            serviced_by_lcore: rx.get(tx.servicer()).map(|l| l.lcore),
        }
    }

    /// Every accepted frame is sent, refused by the NIC, dropped by the
    /// neighbour table, freed at stop, or still in flight.
    pub fn balanced(&self) -> bool {
        let n = &self.neigh;
        let accepted: u64 = self.accepted.iter().sum();
        let ended: u64 = self.out_datagrams.iter().sum::<u64>()
            + self.out_later.iter().sum::<u64>()
            + self.tx_errors.iter().sum::<u64>()
            + n.unres_discards
            + n.expired
            + n.table_full
            + self.freed_at_stop
            + self.in_flight;
        accepted == ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(h: &str) -> Vec<u8> {
        let h: String = h.split_whitespace().collect();
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    const OUR: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    fn frame(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
        build::to_vec(&frame_spec(OUR, src.parse().unwrap(), dst.parse().unwrap(), payload).unwrap())
            .unwrap()
    }

    // The expected frames were assembled and summed independently (Python:
    // struct.pack and an RFC 1071 one's-complement sum over the pseudo-header).

    #[test]
    fn ipv4_datagram_matches_an_independent_build() {
        let f = frame("198.18.0.1:1000", "198.18.0.2:2000", b"hello");
        assert_eq!(
            f,
            unhex(
                "000000000000 020000000001 0800
                 4500 0021 0000 4000 4011 aea4 c6120001 c6120002
                 03e8 07d0 000d 2422 68656c6c6f"
            )
        );
        let d = crate::parse::parse(&f, crate::parse::Offload::default()).expect("parses");
        assert_eq!(d.payload(&f), Some(&b"hello"[..]));
    }

    #[test]
    fn ipv6_datagram_matches_an_independent_build() {
        let f = frame("[fd00::1]:1000", "[fd00::2]:2000", b"hello");
        assert_eq!(
            f,
            unhex(
                "000000000000 020000000001 86dd
                 60000000 000d 11 40
                 fd000000000000000000000000000001 fd000000000000000000000000000002
                 03e8 07d0 000d b645 68656c6c6f"
            )
        );
        assert!(crate::parse::parse(&f, crate::parse::Offload::default()).is_ok());
        // Families must agree.
        assert!(frame_spec(OUR, "[fd00::1]:1".parse().unwrap(), "198.18.0.2:1".parse().unwrap(), b"")
            .is_none());
    }

    #[test]
    fn arp_request_is_the_one_linux_sends() {
        use crate::parse::arp::captured::LINUX_REQUEST;
        // Linux's "who-has 198.18.0.1 tell 198.18.0.2" from 02:..:02.
        let mut out = [0u8; 64];
        let n = write_arp_request(
            &mut out,
            [2, 0, 0, 0, 0, 2],
            Ipv4Addr::new(198, 18, 0, 2),
            Ipv4Addr::new(198, 18, 0, 1),
        )
        .unwrap();
        assert_eq!(&out[..n], &LINUX_REQUEST[..]);
    }

    #[test]
    fn neighbour_solicitation_matches_an_independent_build() {
        let mut out = [0u8; 128];
        let n = write_solicitation(
            &mut out,
            OUR,
            &"fd00::1".parse().unwrap(),
            &"fd00::2".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(
            &out[..n],
            &unhex(
                "3333ff000002 020000000001 86dd
                 60000000 0020 3a ff
                 fd000000000000000000000000000001 ff0200000000000000000001ff000002
                 87 00 7d97 00000000 fd000000000000000000000000000002
                 01 01 020000000001"
            )[..]
        );
    }

    fn iface() -> Iface {
        Iface {
            port: 3,
            mac: OUR,
            v4: vec![(Ipv4Addr::new(198, 18, 0, 1), 24)],
            v6: vec![("fd00::1".parse().unwrap(), 64)],
            tx_queues: 1,
            lessons: None,
            tx_csum: false,
        }
    }

    #[test]
    fn routes_on_link_and_picks_the_source_of_a_wildcard_socket() {
        let ifs = Ifaces(vec![iface()]);
        let any4: IpAddr = Ipv4Addr::UNSPECIFIED.into();
        let (i, src) = route(&ifs, any4, "198.18.0.77".parse().unwrap()).unwrap();
        assert_eq!((i.port, src), (3, "198.18.0.1".parse().unwrap()));
        let bound: IpAddr = "198.18.0.5".parse().unwrap();
        assert_eq!(route(&ifs, bound, "198.18.0.77".parse().unwrap()).unwrap().1, bound);
        let any6: IpAddr = Ipv6Addr::UNSPECIFIED.into();
        assert_eq!(
            route(&ifs, any6, "fd00::9".parse().unwrap()).unwrap().1,
            "fd00::1".parse::<IpAddr>().unwrap()
        );
        // Off-link (no gateway is configured) and across families: no route.
        assert!(route(&ifs, any4, "198.19.0.1".parse().unwrap()).is_none());
        assert!(route(&ifs, any6, "fd01::1".parse().unwrap()).is_none());
        assert!(route(&ifs, any4, "fd00::9".parse().unwrap()).is_none());
        assert_eq!(max_payload(Family::V4), 1472);
        assert_eq!(max_payload(Family::V6), 1452);
    }

    #[test]
    fn learns_from_arp_and_neighbour_discovery() {
        let mut t: Table<u32> = Table::new(Params::defaults(1000));
        let lessons = Lessons::new(LESSONS_LEN);
        let i = iface();
        // What the RX lcore's hook queues, taught by the main lcore's pass.
        let learn = |t: &mut Table<u32>, f: &[u8], err: &ParseError, now: u64| {
            assert!(learn(&lessons, &i, f, err));
            lessons.teach(t, now);
            assert!(lessons.is_empty());
        };
        let peer = [2, 0, 0, 0, 0, 2];
        let arp = |op: u16, spa: Ipv4Addr, tpa: Ipv4Addr| {
            let mut f = vec![0u8; 42];
            write_arp_request(&mut f, peer, spa, tpa).unwrap();
            ArpPacket::new_unchecked(&mut f[ether::HEADER_LEN..]).set_operation(op);
            f
        };
        let err = ParseError::NotIp {
            ethertype: ether::ethertype::ARP,
            l3_off: 14,
        };
        let p4: IpAddr = "198.18.0.2".parse().unwrap();
        // A request for someone else from an unknown neighbour: not created.
        learn(&mut t, &arp(operation::REQUEST, Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 9)), &err, 1);
        assert_eq!(t.get(3, p4), None);
        // Off-subnet senders are ignored.
        learn(&mut t, &arp(operation::REQUEST, Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(198, 18, 0, 1)), &err, 1);
        assert_eq!(t.stats.entries, 0);
        // Waiting for it, then its reply to us: reachable.
        let _ = t.resolve(3, p4, 7u32, 1);
        learn(&mut t, &arp(operation::REPLY, Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1)), &err, 2);
        assert_eq!(t.get(3, p4), Some((crate::neigh::State::Reachable, peer)));
        // A solicited advertisement for fd00::2 (what Linux answers our NS with).
        let p6: Ipv6Addr = "fd00::2".parse().unwrap();
        let _ = t.resolve(3, IpAddr::V6(p6), 8u32, 3);
        let mut f = vec![0u8; 14 + 40 + 32];
        write_solicitation(&mut f, peer, &p6, &p6).unwrap();
        let us6: Ipv6Addr = "fd00::1".parse().unwrap();
        {
            let mut ip = Ipv6Packet::new_checked(&mut f[14..54]).unwrap();
            ip.set_dst_addr(&us6);
        }
        let mut p = IcmpPacket::new_checked(&mut f[54..]).unwrap();
        p.set_msg_type(types::V6_NEIGHBOR_ADVERT);
        p.set_nd_flags(nd_flags::SOLICITED | nd_flags::OVERRIDE);
        NdOption::new_unchecked(p.nd_options_mut().unwrap()).set_kind(nd_option::TARGET_LL_ADDR);
        p.fill_checksum_v6(&p6, &us6);
        let err6 = ParseError::NotUdp {
            family: Family::V6,
            proto: PROTO_ICMPV6,
            l3_off: 14,
            l4_off: 54,
        };
        learn(&mut t, &f, &err6, 4);
        assert_eq!(
            t.get(3, IpAddr::V6(p6)),
            Some((crate::neigh::State::Reachable, peer))
        );
        // A corrupted checksum teaches nothing.
        let mut t2: Table<u32> = Table::new(Params::defaults(1000));
        let _ = t2.resolve(3, IpAddr::V6(p6), 9u32, 3);
        f[60] ^= 1;
        learn(&mut t2, &f, &err6, 4);
        assert_eq!(t2.get(3, IpAddr::V6(p6)).unwrap().0, crate::neigh::State::Incomplete);
    }

    /// The RX lcore's lessons reach the table however often the main lcore
    /// holds it: 20 000 ARP replies pushed while another thread locks the
    /// table and teaches in a tight loop are all learned (each entry ends
    /// at the MAC of its last reply), and a full queue says so.
    #[test]
    fn lessons_arrive_while_the_main_lcore_holds_the_table() {
        let t: Mutex<Table<u32>> = Mutex::new(Table::new(Params::defaults(1000)));
        let lessons = Lessons::new(LESSONS_LEN);
        let done = std::sync::atomic::AtomicBool::new(false);
        const N: u32 = 20_000;
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !done.load(Ordering::Acquire) || !lessons.is_empty() {
                    let mut g = t.lock().unwrap();
                    lessons.teach(&mut g, 2);
                }
            });
            for n in 0..N {
                let ip = Ipv4Addr::new(198, 18, 0, 2 + (n % 8) as u8);
                let l = Lesson {
                    port: 3,
                    ip: ip.into(),
                    mac: [2, 0, 0, 0, (n >> 8) as u8, n as u8],
                    how: Learn::Heard { create: true },
                };
                let mut spins = 0u64;
                while !lessons.push(l) {
                    spins += 1;
                    assert!(spins < 1 << 32, "the taker stopped");
                    std::hint::spin_loop();
                }
            }
            done.store(true, Ordering::Release);
        });
        let t = t.into_inner().unwrap();
        for k in 0..8u32 {
            let last = N - 8 + k;
            let ip: IpAddr = Ipv4Addr::new(198, 18, 0, 2 + k as u8).into();
            assert_eq!(t.get(3, ip).map(|e| e.1), Some([2, 0, 0, 0, (last >> 8) as u8, last as u8]));
        }
        let q = Lessons::new(2);
        let l = Lesson {
            port: 3,
            ip: Ipv4Addr::new(198, 18, 0, 2).into(),
            mac: [2, 0, 0, 0, 0, 2],
            how: Learn::Confirmed,
        };
        assert!(q.push(l) && q.push(l) && !q.push(l));
    }

    /// What `send_segments` does to each segment after the first, on
    /// plain buffers: the first full-size frame's header (ECN set) copied
    /// before another payload, a shorter one shortened, the UDP checksum
    /// summed. Each must be byte for byte the frame the writer builds for
    /// that payload directly (with the same ECN), for both families.
    #[test]
    fn gso_segments_from_a_copied_header_equal_frames_built_whole() {
        for (src, dst) in [
            ("198.18.0.1:5000", "198.18.0.2:7000"),
            ("[fd00::1]:5000", "[fd00::2]:7000"),
        ] {
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let mac = [2, 0, 0, 0, 0, 1];
            let whole = |payload: &[u8], ecn: u8| {
                let mut f = build::to_vec(&frame_spec(mac, src, dst, payload).unwrap()).unwrap();
                if ecn != 0 {
                    set_ecn(&mut f, ecn).unwrap();
                }
                f
            };
            let first: Vec<u8> = (0..100u8).collect();
            let template = whole(&first, 2);
            let hl = template.len() - first.len();
            let l3_len = if src.is_ipv4() { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN };
            for other in [(100..200u8).collect::<Vec<u8>>(), (7..50u8).collect(), vec![9]] {
                let mut f = template[..hl].to_vec();
                f.extend_from_slice(&other);
                if other.len() != first.len() {
                    shorten(&mut f, hl, l3_len).unwrap();
                }
                fill_udp_checksum(&mut f, l3_len).unwrap();
                assert_eq!(f, whole(&other, 2), "{dst} {} bytes", other.len());
            }
            // The ECN codepoint lands in the IPv4 TOS / IPv6 traffic class,
            // and the IPv4 header checksum still verifies.
            let l3 = &template[ether::HEADER_LEN..];
            if src.is_ipv4() {
                assert_eq!(Ipv4Packet::new_checked(l3).unwrap().dscp_ecn(), 2);
                assert!(checksum::ipv4_header_verifies(&l3[..ipv4::HEADER_LEN]));
            } else {
                assert_eq!(Ipv6Packet::new_checked(l3).unwrap().traffic_class(), 2);
            }
            assert_ne!(whole(&first, 0), template);
        }
    }

    #[test]
    fn client_requests_round_trip_and_garbage_is_refused() {
        let mut b = [0u8; request::LEN + 3];
        for dst in ["198.18.0.2:7000", "[fd00::2]:53"] {
            let dst: SocketAddr = dst.parse().unwrap();
            encode_request(&mut b, 42, dst).unwrap();
            b[request::LEN..].copy_from_slice(b"abc");
            assert_eq!(decode_request(&b), Some((42, dst, &b"abc"[..])));
            set_request_ecn(&mut b, 0b110).unwrap();
            assert_eq!(b[request::ECN], 0b10);
            assert_eq!(decode_request(&b), Some((42, dst, &b"abc"[..])));
        }
        assert!(encode_request(&mut [0u8; request::LEN - 1], 1, "198.18.0.2:1".parse().unwrap()).is_none());
        assert_eq!(decode_request(&b[..request::LEN - 1]), None);
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(decode_request(&bad), None);
        let mut bad = b;
        bad[request::FAMILY] = 5;
        assert_eq!(decode_request(&bad), None);
    }

    /// What a NIC does with an offloaded frame: the IPv4 header checksum
    /// over the header, the UDP checksum over the segment whose checksum
    /// field holds the pseudo-header sum. The result must be the frame
    /// computed in software.
    #[test]
    fn offload_preparation_completes_to_the_software_frame() {
        use dpdk_sys::mbuf::tx_cksum;
        for (src, dst, want_l3, want_flags) in [
            (
                "198.18.0.1:1000",
                "198.18.0.2:2000",
                20,
                tx_cksum::IPV4 | tx_cksum::IP_CKSUM | tx_cksum::UDP_CKSUM,
            ),
            (
                "[fd00::1]:1000",
                "[fd00::2]:2000",
                40,
                tx_cksum::IPV6 | tx_cksum::UDP_CKSUM,
            ),
        ] {
            let soft = frame(src, dst, b"hello");
            let mut f = soft.clone();
            let (l3_len, flags) = prepare_offload(&mut f).unwrap();
            assert_eq!((l3_len, flags), (want_l3, want_flags));
            let l4 = 14 + usize::from(l3_len);
            assert_ne!(f, soft, "the checksums were handed over");
            if l3_len == 20 {
                assert_eq!(&f[24..26], &[0, 0]);
                let c = checksum::checksum(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            let c = checksum::checksum(&f[l4..]);
            f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
            assert_eq!(f, soft);
        }
    }
}
