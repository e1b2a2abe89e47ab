//! Early demux: the socket lookup an RX lcore does once per UDP datagram.
//!
//! This is the engine's `__udp4_lib_lookup` / `udp_v6_early_demux`: right
//! after parsing, the RX lcore maps (src addr, src port, dst addr, dst port)
//! to the destination socket, and the result travels with the packet so no
//! later stage repeats the lookup.
//!
//! # Semantics (Linux UDP, unicast)
//!
//! A socket is bound to a local address (a specific one or the family's
//! wildcard `0.0.0.0` / `::`) and a non-zero port, and is optionally
//! connected to a remote address and port. Lookup takes the best match in
//! the order of the kernel's `compute_score`:
//!
//! 1. connected: local addr+port and remote addr+port all equal. A connected
//!    socket bound to the wildcard address matches any local address, after
//!    the connected sockets bound to the exact destination address. (The
//!    kernel never sees this case because `connect()` fills in the local
//!    address; a configured engine can express it, so it is honoured here.)
//! 2. bound to the specific destination address and port;
//! 3. bound to the wildcard address and the port.
//!
//! IPv4 and IPv6 are separate tables. There is no dual stack: an IPv6 socket
//! bound to `::` does not receive IPv4 (as with `IPV6_V6ONLY=1`), and binding
//! an IPv4-mapped IPv6 address is refused because it could never match.
//! Broadcast local addresses and multicast remote addresses are refused. A
//! multicast group may be a socket's local address (binding the group, as
//! multicast receivers do); such a binding is always shared, as every
//! multicast receiver sets `SO_REUSEADDR`. A datagram to a group is not
//! looked up with [`Snapshot::lookup`] but with [`Snapshot::for_each_mcast`],
//! which visits every matching socket (the kernel's
//! `__udp4_lib_mcast_deliver`). The IPv6 scope id and flow label of a
//! binding are ignored (no per-interface binding).
//!
//! # Multicast (`__udp4_lib_mcast_deliver`, `__udp_is_mcast_sock`)
//!
//! A datagram to group `G` port `P` goes to every socket on port `P` bound
//! to `G` or to the wildcard, connected ones only if their remote is the
//! datagram's source; reuseport members all get it (no pick). Membership of
//! the socket itself is not checked: the kernel's `IP_MULTICAST_ALL`
//! defaults to 1, so once the host joined `G` (any socket's
//! `IP_ADD_MEMBERSHIP`), a socket bound to `0.0.0.0:P` receives it too.
//!
//! Collisions follow the exact binding: two sockets with the same
//! (local, remote) pair collide unless both are reuseport members of the same
//! unconnected binding. A specific and a wildcard binding on the same port do
//! not collide (the kernel allows this with `SO_REUSEADDR`; the more specific
//! one wins on lookup).
//!
//! # Reuseport
//!
//! Unconnected sockets on one local address and port that all asked for
//! reuseport form a group, and a flow hash of the 4-tuple picks the member
//! with `reciprocal_scale(hash, n)`, as `reuseport_select_sock_by_hash` does.
//! Members are kept in join order and a leaving member is replaced by the
//! last one (the kernel's `reuseport_detach_sock`), so a flow keeps its member
//! while the group is unchanged and unrelated table changes do not move it.
//! Like `udp_ehashfn`'s secret, the flow hash is keyed with a random secret
//! drawn when the table is created, so a sender can neither aim at a member
//! nor predict which flows share one. A group holds at most `u16::MAX`
//! members, the kernel's limit.
//!
//! # Concurrency
//!
//! Readers (RX lcores) never lock, never allocate and are never blocked by a
//! writer: writers build a new immutable generation of the table and publish
//! it with one atomic swap (RCU style). A reader takes a [`Snapshot`] once per
//! burst, looks many packets up in it and drops it. Writers are serialized by
//! a mutex and may be slow: a publication copies the shards it changes (each
//! map is split into 64 copy-on-write shards, so one change to a table of a
//! million sockets copies about 1/64 of a map). [`FlowTable::update`] batches
//! many changes into one publication; replaced generations are freed on the
//! writer's thread, never on an RX lcore (see [`FlowTable`]).
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ahash::RandomState;
use arc_swap::{ArcSwap, Guard};

mod shard;
use shard::Shard;

/// The kernel's reuseport group limit (`reuse->max_socks` is a `u16`).
pub const MAX_REUSEPORT_GROUP: usize = u16::MAX as usize;

/// How long a writer spins for readers to let go of the generation it
/// replaced before leaving it for a later writer to free. A pinned RX lcore
/// holds a snapshot for one burst (microseconds); a reader that was
/// descheduled will not finish within any short wait, so waiting longer only
/// stalls the writer. Spinning, not yielding: a yield on an oversubscribed
/// core hands the writer's slice to a busy-polling reader for milliseconds.
const RECLAIM_WAIT: Duration = Duration::from_micros(100);

/// Every lookup map is split into this many copy-on-write shards, so a
/// single change to a table of a million sockets copies about 1/64 of one
/// map, not all of it. Small enough that the shard headers stay in cache.
const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;

/// Unconnected bindings from which [`Snapshot::prefetch_pays`]: about 256
/// KiB of slots, half an L2 cache of this machine's class.
const PREFETCH_FROM: usize = 4096;

/// Tells tables apart so a handle from one cannot remove from another.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(0);

/// What a socket is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Binding {
    /// Local address and port; the address may be the family's wildcard.
    pub local: SocketAddr,
    /// Remote address and port for a connected socket.
    pub remote: Option<SocketAddr>,
    /// `SO_REUSEPORT`: join a group with the other reuseport sockets on the
    /// same unconnected local address and port.
    pub reuseport: bool,
}

impl Binding {
    /// An unconnected socket without reuseport.
    pub fn bound(local: SocketAddr) -> Self {
        Self {
            local,
            remote: None,
            reuseport: false,
        }
    }

    /// A connected socket.
    pub fn connected(local: SocketAddr, remote: SocketAddr) -> Self {
        Self {
            local,
            remote: Some(remote),
            reuseport: false,
        }
    }

    /// The same binding asking for reuseport.
    pub fn with_reuseport(self) -> Self {
        Self {
            reuseport: true,
            ..self
        }
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.local)?;
        if let Some(r) = self.remote {
            write!(f, " connected to {r}")?;
        }
        if self.reuseport {
            write!(f, " (reuseport)")?;
        }
        Ok(())
    }
}

/// Names one inserted socket and carries its binding, so removal needs no
/// writer-side index (which would be one more million-entry map to copy
/// per publication). Ids are never reused within a table, so a stale handle
/// cannot remove a later socket on the same binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketHandle {
    table: u64,
    id: u64,
    binding: Binding,
}

impl SocketHandle {
    /// The socket's id, unique within its table, e.g. for logs.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What the socket was inserted with.
    pub fn binding(&self) -> Binding {
        self.binding
    }
}

impl fmt::Display for SocketHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "socket #{} on {}", self.id, self.binding)
    }
}

/// Why a change to the table was refused. A refused change leaves the table
/// as it was (for [`FlowTable::update`], the whole batch).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// `EADDRINUSE`: the binding is taken and the two cannot share it.
    #[error("address in use: {new} collides with {existing}")]
    AddrInUse {
        /// The binding that was refused.
        new: Binding,
        /// The socket holding it (for a reuseport group, its first member);
        /// boxed to keep every `Result` of this module small.
        existing: Box<SocketHandle>,
    },
    /// Port 0 means "pick one" to the kernel; the table needs a real port.
    #[error("port 0 in {0}")]
    PortZero(Binding),
    /// The kernel keeps connected sockets out of reuseport selection.
    #[error("a connected socket cannot join a reuseport group: {0}")]
    ConnectedReuseport(Binding),
    /// Local and remote of one binding must be the same family.
    #[error("local and remote address families differ in {0}")]
    FamilyMismatch(Binding),
    /// An address this table cannot serve (see the module docs).
    #[error("unsupported address {addr} in {binding}: {reason}")]
    UnsupportedAddress {
        /// The offending address.
        addr: IpAddr,
        /// The binding it came in.
        binding: Binding,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The reuseport group already has [`MAX_REUSEPORT_GROUP`] members.
    #[error("reuseport group on {0} is full")]
    GroupFull(SocketAddr),
    /// No socket with this handle is in the table.
    #[error("no such socket: {0}")]
    NotFound(SocketHandle),
}

/// An address family's key type: `u32` for IPv4, `u128` for IPv6.
trait Addr: Copy + Eq + Hash {
    /// The wildcard address.
    const ANY: Self;
    /// A group address (224.0.0.0/4, ff00::/8).
    fn is_group(self) -> bool;
}

impl Addr for u32 {
    const ANY: Self = 0;
    fn is_group(self) -> bool {
        self >> 28 == 0xe
    }
}

impl Addr for u128 {
    const ANY: Self = 0;
    fn is_group(self) -> bool {
        self >> 120 == 0xff
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ConnKey<A> {
    local: A,
    remote: A,
    lport: u16,
    rport: u16,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct BoundKey<A> {
    local: A,
    port: u16,
}

#[derive(Clone)]
struct Member<V> {
    id: u64,
    value: V,
}

/// What one unconnected binding holds.
#[derive(Clone)]
// The group's `Box<Vec>`: see the variant.
#[allow(clippy::box_collection)]
enum Slot<V> {
    Single(Member<V>),
    /// Never empty; join order, with the kernel's swap-remove on leave.
    /// Boxed: a `Slot` is then 16 bytes (the group's pointer fits beside
    /// the `Arc`'s niche), and an IPv4 binding's shard entry 32, so no
    /// entry of a large table straddles two cache lines.
    Group(Box<Vec<Member<V>>>),
}

/// The kernel's `reciprocal_scale`: maps a 32-bit hash onto `0..n` with a
/// multiply instead of a division. `n` is at most `u16::MAX` here, so the
/// result is always below `n`.
#[inline]
fn reciprocal_scale(hash: u32, n: usize) -> usize {
    ((u64::from(hash) * n as u64) >> 32) as usize
}

/// A hash map split into copy-on-write shards. Each entry's keyed hash is
/// computed once and used both to pick the shard (bits 32..38) and inside
/// the shard (its low bits pick the slot, so the shard bits do not skew it).
#[derive(Clone)]
struct Sharded<K, T> {
    shards: [Arc<Shard<K, T>>; SHARDS],
}

impl<K: Eq + Clone, T: Clone> Sharded<K, T> {
    fn new() -> Self {
        Self {
            shards: std::array::from_fn(|_| Arc::new(Shard::new())),
        }
    }

    #[inline]
    fn shard_index(hash: u64) -> usize {
        (hash >> 32) as usize & (SHARDS - 1)
    }

    #[inline(always)]
    fn get(&self, hash: u64, key: &K) -> Option<&T> {
        // The mask keeps the index below SHARDS, the array's length.
        self.shards[Self::shard_index(hash)].get(hash, key)
    }

    /// Starts loading where [`Sharded::get`] of `hash` will read first.
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        self.shards[Self::shard_index(hash)].prefetch(hash)
    }

    /// The shard for `hash`, copied first if a published generation still
    /// shares it: the copy-on-write step of a publication.
    fn shard_mut(&mut self, hash: u64) -> &mut Shard<K, T> {
        Arc::make_mut(&mut self.shards[Self::shard_index(hash)])
    }

    fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut T> {
        self.shard_mut(hash).get_mut(hash, key)
    }

    /// Inserts a key the caller has checked is absent.
    fn insert_new(&mut self, hash: u64, key: K, value: T) {
        self.shard_mut(hash).insert_unique(hash, key, value);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    fn remove(&mut self, hash: u64, key: &K) -> Option<T> {
        self.shard_mut(hash).remove(hash, key)
    }
}

/// One family's three lookup levels, with per-level socket counts so that a
/// lookup skips an empty level without hashing (most deployments have no
/// connected sockets and no specific-address bindings).
#[derive(Clone)]
struct Family<A, V> {
    connected: Sharded<ConnKey<A>, Member<V>>,
    /// Both specific and wildcard unconnected bindings; the wildcard ones
    /// under `A::ANY`.
    bound: Sharded<BoundKey<A>, Slot<V>>,
    n_conn_specific: usize,
    n_conn_wild: usize,
    n_specific: usize,
    n_wild: usize,
}

impl<A: Addr, V: Clone> Family<A, V> {
    fn new() -> Self {
        Self {
            connected: Sharded::new(),
            bound: Sharded::new(),
            n_conn_specific: 0,
            n_conn_wild: 0,
            n_specific: 0,
            n_wild: 0,
        }
    }

    #[inline(always)]
    fn lookup(
        &self,
        keys: &RandomState,
        flow: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
    ) -> Option<&V> {
        self.lookup_keyed(keys, flow, src, sport, dst, dport).0
    }

    /// [`Family::lookup`], and whether its answer can depend on the
    /// datagram's source: only when the family has connected sockets or
    /// the answer is a reuseport group's pick. Otherwise every datagram to
    /// `dst:dport` gets the same answer (found or not) from this generation.
    #[inline(always)]
    fn lookup_keyed(
        &self,
        keys: &RandomState,
        flow: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
    ) -> (Option<&V>, bool) {
        if self.n_conn_specific + self.n_conn_wild != 0 {
            return (
                self.lookup_connected_first(keys, flow, src, sport, dst, dport),
                true,
            );
        }
        self.lookup_bound(keys, flow, src, sport, dst, dport)
    }

    /// The unconnected levels alone (bound address, then wildcard), and
    /// whether the answer is a reuseport pick.
    #[inline(always)]
    fn lookup_bound(
        &self,
        keys: &RandomState,
        flow: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
    ) -> (Option<&V>, bool) {
        let slot = self
            .bound_at(keys, self.n_specific, dst, dport)
            .or_else(|| self.bound_at(keys, self.n_wild, A::ANY, dport));
        match slot {
            Some(slot) => (
                Self::pick(slot, flow, src, sport, dst, dport),
                matches!(slot, Slot::Group(_)),
            ),
            None => (None, false),
        }
    }

    /// Starts loading the slot where [`Family::lookup_bound`] of
    /// `dst:dport` reads first: the first level that has bindings.
    #[inline(always)]
    fn prefetch_bound(&self, keys: &RandomState, dst: A, dport: u16) {
        let local = if self.n_specific != 0 {
            dst
        } else if self.n_wild != 0 {
            A::ANY
        } else {
            return;
        };
        self.bound
            .prefetch(keys.hash_one(BoundKey { local, port: dport }));
    }

    /// The unconnected binding on `local:port`, if its level (`n` bindings)
    /// is not empty: an empty level is skipped without hashing.
    #[inline(always)]
    fn bound_at(&self, keys: &RandomState, n: usize, local: A, port: u16) -> Option<&Slot<V>> {
        if n == 0 {
            return None;
        }
        let k = BoundKey { local, port };
        self.bound.get(keys.hash_one(k), &k)
    }

    /// Every level in the kernel's order, connected ones first.
    #[inline(always)]
    fn lookup_connected_first(
        &self,
        keys: &RandomState,
        flow: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
    ) -> Option<&V> {
        if self.n_conn_specific != 0 {
            let k = ConnKey {
                local: dst,
                remote: src,
                lport: dport,
                rport: sport,
            };
            if let Some(m) = self.connected.get(keys.hash_one(k), &k) {
                return Some(&m.value);
            }
        }
        if self.n_conn_wild != 0 {
            let k = ConnKey {
                local: A::ANY,
                remote: src,
                lport: dport,
                rport: sport,
            };
            if let Some(m) = self.connected.get(keys.hash_one(k), &k) {
                return Some(&m.value);
            }
        }
        self.lookup_bound(keys, flow, src, sport, dst, dport).0
    }

    /// Every socket a datagram to group `dst` goes to (module docs,
    /// "Multicast"), in the kernel's order of no importance: connected to
    /// the exact group, connected on the wildcard, bound to the group, bound
    /// to the wildcard. Reads only; allocates nothing.
    #[inline]
    fn for_each_mcast<'a>(
        &'a self,
        keys: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
        f: &mut impl FnMut(&'a V),
    ) {
        let conn = [(self.n_conn_specific, dst), (self.n_conn_wild, A::ANY)];
        for (n, local) in conn {
            if n == 0 {
                continue;
            }
            let k = ConnKey {
                local,
                remote: src,
                lport: dport,
                rport: sport,
            };
            if let Some(m) = self.connected.get(keys.hash_one(k), &k) {
                f(&m.value);
            }
        }
        for (n, local) in [(self.n_specific, dst), (self.n_wild, A::ANY)] {
            if n == 0 {
                continue;
            }
            let k = BoundKey { local, port: dport };
            match self.bound.get(keys.hash_one(k), &k) {
                Some(Slot::Single(m)) => f(&m.value),
                Some(Slot::Group(ms)) => ms.iter().for_each(|m| f(&m.value)),
                None => {}
            }
        }
    }

    #[inline]
    fn pick<'a>(
        slot: &'a Slot<V>,
        flow: &RandomState,
        src: A,
        sport: u16,
        dst: A,
        dport: u16,
    ) -> Option<&'a V> {
        match slot {
            Slot::Single(m) => Some(&m.value),
            Slot::Group(ms) => {
                // Hash only when there is a choice to make; the upper half
                // is the better-mixed one for a 64-bit multiply-fold hash.
                let h = (flow.hash_one((src, sport, dst, dport)) >> 32) as u32;
                ms.get(reciprocal_scale(h, ms.len())).map(|m| &m.value)
            }
        }
    }

    fn insert(
        &mut self,
        keys: &RandomState,
        h: &SocketHandle,
        local: A,
        remote: Option<(A, u16)>,
        v: V,
    ) -> Result<(), FlowError> {
        let b = h.binding;
        let m = Member { id: h.id, value: v };
        let taken = |id: u64, reuseport: bool| FlowError::AddrInUse {
            new: b,
            existing: Box::new(SocketHandle {
                table: h.table,
                id,
                binding: Binding { reuseport, ..b },
            }),
        };
        let lport = b.local.port();
        if let Some((raddr, rport)) = remote {
            let k = ConnKey {
                local,
                remote: raddr,
                lport,
                rport,
            };
            let hash = keys.hash_one(k);
            if let Some(existing) = self.connected.get(hash, &k) {
                return Err(taken(existing.id, false));
            }
            self.connected.insert_new(hash, k, m);
            if local == A::ANY {
                self.n_conn_wild += 1;
            } else {
                self.n_conn_specific += 1;
            }
            return Ok(());
        }
        let k = BoundKey { local, port: lport };
        let hash = keys.hash_one(k);
        // A group binding is shared without asking (SO_REUSEADDR, which
        // every multicast receiver sets); it never takes unicast.
        let share = b.reuseport || local.is_group();
        // Check on the shared shard first so a refused insert copies nothing.
        match self.bound.get(hash, &k) {
            None => {
                let slot = if share {
                    Slot::Group(Box::new(vec![m]))
                } else {
                    Slot::Single(m)
                };
                self.bound.insert_new(hash, k, slot);
            }
            Some(Slot::Group(ms)) if share => {
                if ms.len() >= MAX_REUSEPORT_GROUP {
                    return Err(FlowError::GroupFull(b.local));
                }
                if let Some(Slot::Group(ms)) = self.bound.get_mut(hash, &k) {
                    ms.push(m);
                }
            }
            Some(Slot::Group(ms)) => return Err(taken(ms.first().map_or(0, |e| e.id), true)),
            Some(Slot::Single(e)) => return Err(taken(e.id, false)),
        }
        if local == A::ANY {
            self.n_wild += 1;
        } else {
            self.n_specific += 1;
        }
        Ok(())
    }

    fn remove(
        &mut self,
        keys: &RandomState,
        h: &SocketHandle,
        local: A,
        remote: Option<(A, u16)>,
    ) -> Option<V> {
        let lport = h.binding.local.port();
        if let Some((raddr, rport)) = remote {
            let k = ConnKey {
                local,
                remote: raddr,
                lport,
                rport,
            };
            let hash = keys.hash_one(k);
            if self.connected.get(hash, &k)?.id != h.id {
                return None;
            }
            let m = self.connected.remove(hash, &k)?;
            if local == A::ANY {
                self.n_conn_wild -= 1;
            } else {
                self.n_conn_specific -= 1;
            }
            return Some(m.value);
        }
        let k = BoundKey { local, port: lport };
        let hash = keys.hash_one(k);
        let value = match self.bound.get(hash, &k)? {
            Slot::Single(m) if m.id == h.id => match self.bound.remove(hash, &k)? {
                Slot::Single(m) => m.value,
                Slot::Group(_) => return None,
            },
            Slot::Single(_) => return None,
            Slot::Group(ms) => {
                let i = ms.iter().position(|m| m.id == h.id)?;
                let Some(Slot::Group(ms)) = self.bound.get_mut(hash, &k) else {
                    return None;
                };
                // The kernel's reuseport_detach_sock: the last member takes
                // the leaver's place.
                let m = ms.swap_remove(i);
                if ms.is_empty() {
                    self.bound.remove(hash, &k);
                }
                m.value
            }
        };
        if local == A::ANY {
            self.n_wild -= 1;
        } else {
            self.n_specific -= 1;
        }
        Some(value)
    }
}

/// One published, immutable generation of the table.
#[derive(Clone)]
struct Tables<V> {
    v4: Family<u32, V>,
    v6: Family<u128, V>,
    /// Keys the lookup maps. Both secrets are fixed at table creation and
    /// shared by every generation, so that a flow keeps its reuseport
    /// member across unrelated changes.
    keys: RandomState,
    /// Keys the reuseport pick, like the kernel's `udp_ehash_secret`.
    flow: RandomState,
    len: usize,
}

/// A binding in the table's key form.
#[derive(Clone, Copy)]
enum Keyed {
    V4(u32, Option<(u32, u16)>),
    V6(u128, Option<(u128, u16)>),
}

fn check_addr(addr: IpAddr, b: &Binding, remote: bool) -> Result<(), FlowError> {
    let reason = match addr {
        _ if remote && addr.is_multicast() => Some("a remote address cannot be a group"),
        IpAddr::V4(a) if a.is_broadcast() => Some("broadcast is not demuxed to one socket"),
        IpAddr::V6(a) if is_v4_mapped(&a) => {
            Some("IPv4-mapped IPv6 addresses never match: no dual stack")
        }
        _ if remote && addr.is_unspecified() => {
            Some("a connected socket needs a specific remote address")
        }
        _ => None,
    };
    match reason {
        Some(reason) => Err(FlowError::UnsupportedAddress {
            addr,
            binding: *b,
            reason,
        }),
        None => Ok(()),
    }
}

fn is_v4_mapped(a: &Ipv6Addr) -> bool {
    matches!(a.segments(), [0, 0, 0, 0, 0, 0xffff, _, _])
}

/// Checks a binding against the rules and turns it into key form.
fn validate(b: &Binding) -> Result<Keyed, FlowError> {
    if b.local.port() == 0 || b.remote.is_some_and(|r| r.port() == 0) {
        return Err(FlowError::PortZero(*b));
    }
    if b.remote.is_some() && b.reuseport {
        return Err(FlowError::ConnectedReuseport(*b));
    }
    check_addr(b.local.ip(), b, false)?;
    if let Some(r) = b.remote {
        check_addr(r.ip(), b, true)?;
    }
    match (b.local.ip(), b.remote) {
        (IpAddr::V4(l), None) => Ok(Keyed::V4(u32::from(l), None)),
        (IpAddr::V4(l), Some(SocketAddr::V4(r))) => Ok(Keyed::V4(
            u32::from(l),
            Some((u32::from(*r.ip()), r.port())),
        )),
        (IpAddr::V6(l), None) => Ok(Keyed::V6(u128::from(l), None)),
        (IpAddr::V6(l), Some(SocketAddr::V6(r))) => Ok(Keyed::V6(
            u128::from(l),
            Some((u128::from(*r.ip()), r.port())),
        )),
        _ => Err(FlowError::FamilyMismatch(*b)),
    }
}

struct WriterState<V> {
    next_id: u64,
    /// Replaced generations some reader still held when their writer gave up
    /// waiting; freed by a later writer so RX lcores never free tables.
    graveyard: Vec<Arc<Tables<V>>>,
}

/// A batch of changes under construction; see [`FlowTable::update`].
pub struct Editor<'a, V> {
    tables: &'a mut Tables<V>,
    next_id: &'a mut u64,
    table_id: u64,
}

impl<V: Clone> Editor<'_, V> {
    /// Adds a socket; it becomes visible when the batch is published.
    pub fn insert(&mut self, b: Binding, v: V) -> Result<SocketHandle, FlowError> {
        let keyed = validate(&b)?;
        let h = SocketHandle {
            table: self.table_id,
            id: *self.next_id,
            binding: b,
        };
        let t = &mut *self.tables;
        match keyed {
            Keyed::V4(l, r) => t.v4.insert(&t.keys, &h, l, r, v)?,
            Keyed::V6(l, r) => t.v6.insert(&t.keys, &h, l, r, v)?,
        }
        *self.next_id += 1;
        t.len += 1;
        Ok(h)
    }

    /// Removes a socket and hands its value back; readers stop seeing it
    /// when the batch is published.
    pub fn remove(&mut self, h: SocketHandle) -> Result<V, FlowError> {
        if h.table != self.table_id {
            return Err(FlowError::NotFound(h));
        }
        // Handles only carry bindings that passed validation.
        let keyed = validate(&h.binding)?;
        let t = &mut *self.tables;
        let v = match keyed {
            Keyed::V4(l, r) => t.v4.remove(&t.keys, &h, l, r),
            Keyed::V6(l, r) => t.v6.remove(&t.keys, &h, l, r),
        }
        .ok_or(FlowError::NotFound(h))?;
        t.len -= 1;
        Ok(v)
    }

    /// Sockets in the table as edited so far.
    pub fn len(&self) -> usize {
        self.tables.len
    }

    /// Whether the table as edited so far is empty.
    pub fn is_empty(&self) -> bool {
        self.tables.len == 0
    }
}

/// The early-demux table: many lock-free readers, rare serialized writers.
///
/// Publication uses [`arc_swap::ArcSwap`]: a reader's [`FlowTable::snapshot`]
/// is one wait-free load that touches no shared reference count (its debt
/// slots are per thread, so RX lcores do not bounce a cache line between
/// them), and a replaced table is freed only after the last reader holding
/// it lets go: the RCU/QSBR grace period we need, with no epoch bookkeeping
/// on the RX lcores. On top of that the writer waits briefly for the old
/// generation to become unshared and frees it itself, so the free (and the
/// drop of removed values) happens on the control thread, not in an RX
/// burst.
///
/// Each lookup map is split into 64 copy-on-write shards: a generation
/// shares every shard it did not change with the one before, so one change
/// to a table of a million sockets copies a few thousand entries, not all.
/// Values are cloned when their shard is copied, so `V` should be cheap to
/// clone (`Arc<Socket>`, an index).
pub struct FlowTable<V: Clone + Send + Sync + 'static> {
    current: ArcSwap<Tables<V>>,
    writer: Mutex<WriterState<V>>,
    id: u64,
}

impl<V: Clone + Send + Sync + 'static> Default for FlowTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone + Send + Sync + 'static> FlowTable<V> {
    /// An empty table with fresh random hash secrets (ahash's `RandomState`
    /// draws its keys from the OS RNG). ahash rather than foldhash because
    /// ahash is designed and documented as DoS resistant with random keys,
    /// where foldhash calls itself only minimally so; the lookup keys are
    /// partly chosen by remote senders.
    pub fn new() -> Self {
        let tables = Tables {
            v4: Family::new(),
            v6: Family::new(),
            keys: RandomState::new(),
            flow: RandomState::new(),
            len: 0,
        };
        Self {
            current: ArcSwap::from_pointee(tables),
            writer: Mutex::new(WriterState {
                next_id: 0,
                graveyard: Vec::new(),
            }),
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn lock_writer(&self) -> MutexGuard<'_, WriterState<V>> {
        // A panic inside an update (e.g. in the caller's closure) happens
        // before anything is published, so the state is still consistent.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds one socket: one publication.
    pub fn insert(&self, b: Binding, v: V) -> Result<SocketHandle, FlowError> {
        self.update(|ed| ed.insert(b, v))
    }

    /// Removes one socket and returns its value so the caller can retire it:
    /// one publication. Readers that took their snapshot earlier may still
    /// hand the value out until they drop it.
    pub fn remove(&self, h: SocketHandle) -> Result<V, FlowError> {
        self.update(|ed| ed.remove(h))
    }

    /// Applies many changes with one publication, all or nothing: if `f`
    /// fails, nothing it did is published and its error is returned.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut Editor<'_, V>) -> Result<R, FlowError>,
    ) -> Result<R, FlowError> {
        let mut w = self.lock_writer();
        // Writers are serialized by the lock, so this is the latest table.
        // The clone shares every shard; the edits copy the ones they touch.
        let mut tables = Tables::clone(&self.current.load());
        let r = f(&mut Editor {
            tables: &mut tables,
            next_id: &mut w.next_id,
            table_id: self.id,
        })?;
        let old = self.current.swap(Arc::new(tables));
        w.graveyard.push(old);
        Self::reclaim(&mut w.graveyard);
        Ok(r)
    }

    /// As [`FlowTable::update`], but `f` decides whether to publish:
    /// `Ok(Some(r))` publishes the batch, `Ok(None)` discards it (a dry
    /// run: every change was checked against the table and each other,
    /// none is visible), `Err` discards it too.
    pub fn update_or_discard<R>(
        &self,
        f: impl FnOnce(&mut Editor<'_, V>) -> Result<Option<R>, FlowError>,
    ) -> Result<Option<R>, FlowError> {
        let mut w = self.lock_writer();
        let mut tables = Tables::clone(&self.current.load());
        let Some(r) = f(&mut Editor {
            tables: &mut tables,
            next_id: &mut w.next_id,
            table_id: self.id,
        })?
        else {
            return Ok(None);
        };
        let old = self.current.swap(Arc::new(tables));
        w.graveyard.push(old);
        Self::reclaim(&mut w.graveyard);
        Ok(Some(r))
    }

    /// Frees replaced generations that no reader holds any more, spinning
    /// up to [`RECLAIM_WAIT`]. After `swap` returns, arc-swap has converted
    /// every reader's claim on the old generation into a real reference
    /// count, so a count of one means only the graveyard holds it.
    fn reclaim(graveyard: &mut Vec<Arc<Tables<V>>>) {
        let deadline = Instant::now() + RECLAIM_WAIT;
        loop {
            graveyard.retain(|t| Arc::strong_count(t) > 1);
            if graveyard.is_empty() || Instant::now() >= deadline {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Frees replaced generations that readers have let go of since the
    /// last write. Call it from the control thread now and then: without
    /// it, a generation a reader held during the last write lives until the
    /// next write.
    pub fn collect_garbage(&self) {
        let mut w = self.lock_writer();
        w.graveyard.retain(|t| Arc::strong_count(t) > 1);
    }

    /// A reader's view, taken once per burst: one atomic load, no lock, no
    /// allocation. Hold it for a burst, not longer: a held snapshot keeps
    /// its generation (and removed values) alive.
    #[inline]
    pub fn snapshot(&self) -> Snapshot<V> {
        Snapshot {
            tables: self.current.load(),
        }
    }

    /// Sockets in the published table.
    pub fn len(&self) -> usize {
        self.current.load().len
    }

    /// Whether the published table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One generation of the table as a reader sees it.
pub struct Snapshot<V> {
    tables: Guard<Arc<Tables<V>>>,
}

impl<V: Clone> Snapshot<V> {
    /// The socket a datagram from `src:sport` to `dst:dport` goes to, or
    /// `None` (no socket; also for mixed families).
    #[inline(always)]
    pub fn lookup(&self, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Option<&V> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.lookup_v4(s, sport, d, dport),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.lookup_v6(s, sport, d, dport),
            _ => None,
        }
    }

    /// Whether the unconnected levels hold so many bindings that their
    /// slots are unlikely to be in cache: then a burst's lookups gain from
    /// [`Snapshot::prefetch`] first (with a few bindings it is only work).
    #[inline(always)]
    pub fn prefetch_pays(&self) -> bool {
        let t = &*self.tables;
        t.v4.n_specific + t.v4.n_wild + t.v6.n_specific + t.v6.n_wild >= PREFETCH_FROM
    }

    /// Starts loading what the lookup of a datagram to `dst:dport` reads
    /// first (no effect on any answer). The lookup hashes the key again:
    /// handing the hash over saved 6 of its ~50 instructions, not worth a
    /// way to pair a hash with the wrong key.
    #[inline(always)]
    pub fn prefetch(&self, dst: IpAddr, dport: u16) {
        let t = &*self.tables;
        match dst {
            IpAddr::V4(d) => t.v4.prefetch_bound(&t.keys, u32::from(d), dport),
            IpAddr::V6(d) => t.v6.prefetch_bound(&t.keys, u128::from(d), dport),
        }
    }

    /// [`Snapshot::lookup`], and whether the answer can depend on the
    /// datagram's source address and port. When it cannot (no connected
    /// socket in the family, and no reuseport group answered), every
    /// datagram to `dst:dport` gets the same answer from this snapshot, so
    /// a caller may reuse it for the others of a burst without looking up
    /// again.
    #[inline(always)]
    pub fn lookup_keyed(
        &self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
    ) -> (Option<&V>, bool) {
        let t = &*self.tables;
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                t.v4.lookup_keyed(&t.keys, &t.flow, u32::from(s), sport, u32::from(d), dport)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                t.v6.lookup_keyed(&t.keys, &t.flow, u128::from(s), sport, u128::from(d), dport)
            }
            _ => (None, true),
        }
    }

    /// [`Snapshot::lookup`] for a parser that already knows the family.
    #[inline(always)]
    pub fn lookup_v4(&self, src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Option<&V> {
        let t = &*self.tables;
        t.v4.lookup(
            &t.keys,
            &t.flow,
            u32::from(src),
            sport,
            u32::from(dst),
            dport,
        )
    }

    /// [`Snapshot::lookup`] for a parser that already knows the family.
    #[inline(always)]
    pub fn lookup_v6(&self, src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Option<&V> {
        let t = &*self.tables;
        t.v6.lookup(
            &t.keys,
            &t.flow,
            u128::from(src),
            sport,
            u128::from(dst),
            dport,
        )
    }

    /// Calls `f` with every socket a datagram from `src:sport` to group
    /// `dst:dport` goes to (module docs, "Multicast"); nothing for mixed
    /// families. A reuseport group is visited whole.
    #[inline]
    pub fn for_each_mcast<'a>(
        &'a self,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        mut f: impl FnMut(&'a V),
    ) {
        let t = &*self.tables;
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                t.v4.for_each_mcast(&t.keys, u32::from(s), sport, u32::from(d), dport, &mut f)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                t.v6.for_each_mcast(&t.keys, u128::from(s), sport, u128::from(d), dport, &mut f)
            }
            _ => {}
        }
    }

    /// Whether [`Snapshot::for_each_mcast`] for a group of `dst`'s family
    /// can depend on the datagram's source: only when the family has
    /// connected sockets. Without them, datagrams to one group and port
    /// have the same members, and the caller may fan a run of them out at once.
    #[inline]
    pub fn mcast_depends_on_source(&self, dst: IpAddr) -> bool {
        let t = &*self.tables;
        match dst {
            IpAddr::V4(_) => t.v4.n_conn_specific + t.v4.n_conn_wild != 0,
            IpAddr::V6(_) => t.v6.n_conn_specific + t.v6.n_conn_wild != 0,
        }
    }

    /// Sockets in this generation.
    pub fn len(&self) -> usize {
        self.tables.len
    }

    /// Whether this generation is empty.
    pub fn is_empty(&self) -> bool {
        self.tables.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_slot_fills_a_line_evenly() {
        // Two IPv4 entries a line, one IPv6 entry: none straddles two
        // lines of a table that starts on one (the shard's module docs).
        type V = Arc<std::sync::atomic::AtomicU64>;
        assert_eq!(shard::slot_size::<BoundKey<u32>, Slot<V>>(), 32);
        assert_eq!(shard::slot_size::<BoundKey<u128>, Slot<V>>(), 64);
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("test address")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    fn look(t: &FlowTable<&'static str>, src: &str, dst: &str) -> Option<&'static str> {
        let (s, d) = (sa(src), sa(dst));
        t.snapshot()
            .lookup(s.ip(), s.port(), d.ip(), d.port())
            .copied()
    }

    /// `lookup_keyed` gives `lookup`'s answer, and says it can depend on the
    /// source exactly when the family has a connected socket or a reuseport
    /// group answered: what lets the RX loop reuse an answer per destination.
    #[test]
    fn lookup_keyed_says_when_the_source_matters() {
        let keyed = |t: &FlowTable<&'static str>, src: &str, dst: &str| {
            let (s, d) = (sa(src), sa(dst));
            let snap = t.snapshot();
            let (found, by_source) = snap.lookup_keyed(s.ip(), s.port(), d.ip(), d.port());
            assert_eq!(found.copied(), look(t, src, dst), "{src} -> {dst}");
            (found.copied(), by_source)
        };
        let t = FlowTable::new();
        assert_eq!(keyed(&t, "198.18.0.9:1000", "198.18.0.1:53"), (None, false));
        t.insert(Binding::bound(sa("0.0.0.0:53")), "wild").unwrap();
        t.insert(Binding::bound(sa("198.18.0.1:53")), "specific")
            .unwrap();
        t.insert(Binding::bound(sa("198.18.0.1:80")).with_reuseport(), "g1")
            .unwrap();
        t.insert(Binding::bound(sa("198.18.0.1:80")).with_reuseport(), "g2")
            .unwrap();
        assert_eq!(
            keyed(&t, "198.18.0.9:1000", "198.18.0.1:53"),
            (Some("specific"), false)
        );
        assert_eq!(
            keyed(&t, "198.18.0.9:1000", "198.18.0.2:53"),
            (Some("wild"), false)
        );
        assert_eq!(keyed(&t, "198.18.0.9:1000", "198.18.0.1:54"), (None, false));
        // A reuseport group's answer is a pick by the flow.
        assert!(keyed(&t, "198.18.0.9:1000", "198.18.0.1:80").1);
        // The other family is untouched by these.
        assert_eq!(keyed(&t, "[fd00::9]:1000", "[fd00::1]:53"), (None, false));
        // One connected socket anywhere in the family: every answer may
        // depend on the source, found or not.
        t.insert(
            Binding::connected(sa("198.18.0.1:5000"), sa("198.18.0.9:1000")),
            "conn",
        )
        .unwrap();
        assert_eq!(
            keyed(&t, "198.18.0.9:1000", "198.18.0.1:53"),
            (Some("specific"), true)
        );
        assert_eq!(keyed(&t, "198.18.0.9:1000", "198.18.0.1:54"), (None, true));
        assert_eq!(
            keyed(&t, "198.18.0.9:1000", "198.18.0.1:5000"),
            (Some("conn"), true)
        );
        assert_eq!(keyed(&t, "[fd00::9]:1000", "[fd00::1]:53"), (None, false));
    }

    #[test]
    fn precedence_v4() {
        let t = FlowTable::new();
        t.insert(Binding::bound(sa("0.0.0.0:53")), "wild").unwrap();
        assert_eq!(look(&t, "198.18.0.9:1000", "198.18.0.1:53"), Some("wild"));
        t.insert(Binding::bound(sa("198.18.0.1:53")), "specific")
            .unwrap();
        assert_eq!(
            look(&t, "198.18.0.9:1000", "198.18.0.1:53"),
            Some("specific")
        );
        // Another local address still falls to the wildcard.
        assert_eq!(look(&t, "198.18.0.9:1000", "198.18.0.2:53"), Some("wild"));
        t.insert(
            Binding::connected(sa("0.0.0.0:53"), sa("198.18.0.9:1000")),
            "conn-wild",
        )
        .unwrap();
        assert_eq!(
            look(&t, "198.18.0.9:1000", "198.18.0.1:53"),
            Some("conn-wild")
        );
        assert_eq!(
            look(&t, "198.18.0.9:1000", "198.18.0.2:53"),
            Some("conn-wild")
        );
        t.insert(
            Binding::connected(sa("198.18.0.1:53"), sa("198.18.0.9:1000")),
            "conn",
        )
        .unwrap();
        assert_eq!(look(&t, "198.18.0.9:1000", "198.18.0.1:53"), Some("conn"));
        assert_eq!(
            look(&t, "198.18.0.9:1000", "198.18.0.2:53"),
            Some("conn-wild")
        );
        // Remote port or address differs: not the connected ones.
        assert_eq!(
            look(&t, "198.18.0.9:1001", "198.18.0.1:53"),
            Some("specific")
        );
        assert_eq!(
            look(&t, "198.18.0.8:1000", "198.18.0.1:53"),
            Some("specific")
        );
        assert_eq!(look(&t, "198.18.0.8:1000", "198.18.0.1:54"), None);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn precedence_v6() {
        let t = FlowTable::new();
        t.insert(Binding::bound(sa("[::]:53")), "wild").unwrap();
        t.insert(Binding::bound(sa("[fd00::1]:53")), "specific")
            .unwrap();
        t.insert(
            Binding::connected(sa("[::]:53"), sa("[fd00::9]:1000")),
            "conn-wild",
        )
        .unwrap();
        t.insert(
            Binding::connected(sa("[fd00::1]:53"), sa("[fd00::9]:1000")),
            "conn",
        )
        .unwrap();
        assert_eq!(look(&t, "[fd00::9]:1000", "[fd00::1]:53"), Some("conn"));
        assert_eq!(
            look(&t, "[fd00::9]:1000", "[fd00::2]:53"),
            Some("conn-wild")
        );
        assert_eq!(look(&t, "[fd00::8]:1000", "[fd00::1]:53"), Some("specific"));
        assert_eq!(look(&t, "[fd00::8]:1000", "[fd00::2]:53"), Some("wild"));
        assert_eq!(look(&t, "[fd00::8]:1000", "[fd00::2]:54"), None);
    }

    #[test]
    fn families_are_separate() {
        let t = FlowTable::new();
        t.insert(Binding::bound(sa("0.0.0.0:53")), "v4").unwrap();
        assert_eq!(look(&t, "[fd00::9]:1000", "[fd00::1]:53"), None);
        // Not even an IPv4-mapped destination reaches the IPv4 socket.
        assert_eq!(
            look(&t, "[::ffff:198.18.0.9]:1000", "[::ffff:198.18.0.1]:53"),
            None
        );
        t.insert(Binding::bound(sa("[::]:53")), "v6").unwrap();
        assert_eq!(look(&t, "[fd00::9]:1000", "[fd00::1]:53"), Some("v6"));
        assert_eq!(look(&t, "198.18.0.9:1000", "198.18.0.1:53"), Some("v4"));
        // Same numeric key in both families: 0.0.0.1 vs ::1.
        t.insert(Binding::bound(sa("0.0.0.1:7")), "v4-one").unwrap();
        assert_eq!(look(&t, "[::2]:1000", "[::1]:7"), None);
        // Mixed families in one packet never match.
        let s = t.snapshot();
        assert_eq!(s.lookup(ip("fd00::9"), 1000, ip("198.18.0.1"), 53), None);
        assert_eq!(s.lookup(ip("198.18.0.9"), 1000, ip("fd00::1"), 53), None);
    }

    #[test]
    fn collisions() {
        let t = FlowTable::new();
        let a = t.insert(Binding::bound(sa("198.18.0.1:53")), 1).unwrap();
        match t.insert(Binding::bound(sa("198.18.0.1:53")), 2) {
            Err(FlowError::AddrInUse { new, existing }) => {
                assert_eq!(*existing, a);
                assert_eq!(new.local, sa("198.18.0.1:53"));
            }
            other => panic!("expected AddrInUse, got {other:?}"),
        }
        // A non-reuseport socket cannot join, and reuseport cannot join a
        // plain socket: the kernel needs every member to set SO_REUSEPORT.
        assert!(matches!(
            t.insert(Binding::bound(sa("198.18.0.1:53")).with_reuseport(), 2),
            Err(FlowError::AddrInUse { .. })
        ));
        let g = t
            .insert(Binding::bound(sa("198.18.0.1:54")).with_reuseport(), 3)
            .unwrap();
        t.insert(Binding::bound(sa("198.18.0.1:54")).with_reuseport(), 4)
            .unwrap();
        let err = t
            .insert(Binding::bound(sa("198.18.0.1:54")), 5)
            .unwrap_err();
        assert!(matches!(&err, FlowError::AddrInUse { existing, .. } if **existing == g));
        assert!(err.to_string().contains("198.18.0.1:54"), "{err}");
        // Connected collisions, and connected reuseport.
        let c = Binding::connected(sa("198.18.0.1:53"), sa("198.18.0.9:1000"));
        t.insert(c, 6).unwrap();
        assert!(matches!(t.insert(c, 7), Err(FlowError::AddrInUse { .. })));
        assert!(matches!(
            t.insert(c.with_reuseport(), 7),
            Err(FlowError::ConnectedReuseport(_))
        ));
        // Specific vs wildcard do not collide.
        t.insert(Binding::bound(sa("0.0.0.0:53")), 8).unwrap();
        // Port zero, either side.
        assert!(matches!(
            t.insert(Binding::bound(sa("198.18.0.1:0")), 9),
            Err(FlowError::PortZero(_))
        ));
        assert!(matches!(
            t.insert(
                Binding::connected(sa("198.18.0.1:55"), sa("198.18.0.9:0")),
                9
            ),
            Err(FlowError::PortZero(_))
        ));
        assert!(matches!(
            t.insert(
                Binding::connected(sa("198.18.0.1:55"), sa("[fd00::9]:1")),
                9
            ),
            Err(FlowError::FamilyMismatch(_))
        ));
        for bad in [
            Binding::connected(sa("198.18.0.1:55"), sa("239.1.2.3:9")),
            Binding::bound(sa("255.255.255.255:55")),
            Binding::connected(sa("[fd00::1]:55"), sa("[ff15::1]:9")),
            Binding::bound(sa("[::ffff:198.18.0.1]:55")),
            Binding::connected(sa("198.18.0.1:55"), sa("0.0.0.0:9")),
        ] {
            assert!(
                matches!(t.insert(bad, 9), Err(FlowError::UnsupportedAddress { .. })),
                "{bad}"
            );
        }
        assert_eq!(t.len(), 5);
    }

    fn mcast(t: &FlowTable<&'static str>, src: &str, dst: &str) -> Vec<&'static str> {
        let (s, d) = (sa(src), sa(dst));
        let mut v = Vec::new();
        t.snapshot()
            .for_each_mcast(s.ip(), s.port(), d.ip(), d.port(), |x| v.push(*x));
        v.sort_unstable();
        v
    }

    /// `__udp4_lib_mcast_deliver`: every socket on the port bound to the
    /// group or the wildcard, connected ones only from their remote, every
    /// reuseport member; not a socket bound to a unicast address or to
    /// another group, nor one on another port.
    #[test]
    fn multicast_visits_every_matching_socket_v4_and_v6() {
        let t = FlowTable::new();
        for (b, v) in [
            (Binding::bound(sa("239.1.2.3:5000")), "group-a"),
            // A group binding is shared without reuseport (SO_REUSEADDR).
            (Binding::bound(sa("239.1.2.3:5000")), "group-b"),
            (
                Binding::bound(sa("0.0.0.0:5000")).with_reuseport(),
                "wild-a",
            ),
            (
                Binding::bound(sa("0.0.0.0:5000")).with_reuseport(),
                "wild-b",
            ),
            (Binding::bound(sa("198.18.0.1:5000")), "unicast"),
            (Binding::bound(sa("239.1.2.4:5000")), "other-group"),
            (Binding::bound(sa("239.1.2.3:5001")), "other-port"),
            (
                Binding::connected(sa("239.1.2.3:5000"), sa("198.18.0.9:7")),
                "conn-group",
            ),
            (
                Binding::connected(sa("0.0.0.0:5000"), sa("198.18.0.8:7")),
                "conn-wild",
            ),
            (Binding::bound(sa("[ff15::1]:5000")), "g6"),
            (Binding::bound(sa("[::]:5000")), "wild6"),
            (Binding::bound(sa("[fd00::1]:5000")), "unicast6"),
        ] {
            t.insert(b, v).unwrap();
        }
        assert_eq!(
            mcast(&t, "198.18.0.9:7", "239.1.2.3:5000"),
            ["conn-group", "group-a", "group-b", "wild-a", "wild-b"]
        );
        assert_eq!(
            mcast(&t, "198.18.0.8:7", "239.1.2.3:5000"),
            ["conn-wild", "group-a", "group-b", "wild-a", "wild-b"]
        );
        assert_eq!(
            mcast(&t, "198.18.0.7:7", "239.1.2.9:5000"),
            ["wild-a", "wild-b"]
        );
        assert_eq!(
            mcast(&t, "198.18.0.7:7", "239.1.2.3:5002"),
            Vec::<&str>::new()
        );
        assert_eq!(mcast(&t, "[fd00::9]:7", "[ff15::1]:5000"), ["g6", "wild6"]);
        assert_eq!(
            mcast(&t, "[fd00::9]:7", "239.1.2.3:5000"),
            Vec::<&str>::new()
        );
        // A group binding takes no unicast and stays out of the unicast
        // lookup of other addresses.
        assert_eq!(look(&t, "198.18.0.9:1", "198.18.0.1:5001"), None);
        // Two unicast bindings on the group's port still collide.
        assert!(t
            .insert(Binding::bound(sa("198.18.0.1:5000")), "x")
            .is_err());
    }

    #[test]
    fn update_is_all_or_nothing() {
        let t = FlowTable::new();
        let a = t.insert(Binding::bound(sa("0.0.0.0:1")), 1).unwrap();
        let r = t.update(|ed| {
            ed.remove(a)?;
            ed.insert(Binding::bound(sa("0.0.0.0:2")), 2)?;
            ed.insert(Binding::bound(sa("0.0.0.0:2")), 3)?;
            Ok(())
        });
        assert!(matches!(r, Err(FlowError::AddrInUse { .. })));
        assert_eq!(t.len(), 1);
        let s = t.snapshot();
        assert_eq!(s.lookup(ip("198.18.0.9"), 9, ip("198.18.0.1"), 1), Some(&1));
        assert_eq!(s.lookup(ip("198.18.0.9"), 9, ip("198.18.0.1"), 2), None);
        // The failed batch's remove did not happen either.
        assert_eq!(t.remove(a), Ok(1));
        assert_eq!(t.remove(a), Err(FlowError::NotFound(a)));
    }

    #[test]
    fn update_or_discard_publishes_only_on_some() {
        let t = FlowTable::new();
        let a = t.insert(Binding::bound(sa("0.0.0.0:1")), 1).unwrap();
        // A dry run: checked (the second insert is refused by the first), not published.
        let r = t.update_or_discard(|ed| {
            ed.remove(a)?;
            ed.insert(Binding::bound(sa("0.0.0.0:1")), 2)?;
            assert!(ed.insert(Binding::bound(sa("0.0.0.0:1")), 3).is_err());
            Ok(None::<()>)
        });
        assert_eq!(r, Ok(None));
        assert_eq!(
            t.snapshot()
                .lookup(ip("198.18.0.9"), 9, ip("198.18.0.1"), 1),
            Some(&1)
        );
        let r = t.update_or_discard(|ed| {
            ed.remove(a)?;
            ed.insert(Binding::bound(sa("0.0.0.0:1")), 2).map(Some)
        });
        assert!(matches!(r, Ok(Some(_))));
        assert_eq!(
            t.snapshot()
                .lookup(ip("198.18.0.9"), 9, ip("198.18.0.1"), 1),
            Some(&2)
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn removal_falls_through() {
        let t = FlowTable::new();
        let w = t.insert(Binding::bound(sa("[::]:53")), "wild").unwrap();
        let s = t
            .insert(Binding::bound(sa("[fd00::1]:53")), "specific")
            .unwrap();
        let c = t
            .insert(
                Binding::connected(sa("[fd00::1]:53"), sa("[fd00::9]:1000")),
                "conn",
            )
            .unwrap();
        let (src, dst) = ("[fd00::9]:1000", "[fd00::1]:53");
        assert_eq!(look(&t, src, dst), Some("conn"));
        let held = t.snapshot();
        assert_eq!(t.remove(c), Ok("conn"));
        assert_eq!(look(&t, src, dst), Some("specific"));
        assert_eq!(t.remove(s), Ok("specific"));
        assert_eq!(look(&t, src, dst), Some("wild"));
        assert_eq!(t.remove(w), Ok("wild"));
        assert_eq!(look(&t, src, dst), None);
        assert!(t.is_empty());
        // An older snapshot still sees its own generation.
        let (s6, d6) = (sa(src), sa(dst));
        assert_eq!(
            held.lookup(s6.ip(), s6.port(), d6.ip(), d6.port()),
            Some(&"conn")
        );
    }

    fn flow(i: u32) -> (IpAddr, u16) {
        let a = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (i % 4096));
        (IpAddr::V4(a), 1024 + (i / 4096) as u16)
    }

    fn picks(t: &FlowTable<u32>, n: u32) -> Vec<Option<u32>> {
        let s = t.snapshot();
        (0..n)
            .map(|i| {
                let (src, sport) = flow(i);
                s.lookup(src, sport, ip("198.18.1.1"), 443).copied()
            })
            .collect()
    }

    #[test]
    fn reuseport_spreads_and_is_stable() {
        let t = FlowTable::new();
        let b = Binding::bound(sa("0.0.0.0:443")).with_reuseport();
        let hs: Vec<_> = (0..4).map(|i| t.insert(b, i).unwrap()).collect();
        let before = picks(&t, 10_000);
        let mut count = [0usize; 4];
        for p in &before {
            let m = p.expect("every flow finds a member");
            count[m as usize] += 1;
        }
        // 10 000 flows over 4 members: each should get about 2 500.
        assert!(count.iter().all(|&c| c > 2_000), "{count:?}");
        // Same flow, same member, every time.
        let s = t.snapshot();
        let (src, sport) = flow(7);
        let first = s.lookup(src, sport, ip("198.18.1.1"), 443).copied();
        for _ in 0..10_000 {
            assert_eq!(s.lookup(src, sport, ip("198.18.1.1"), 443).copied(), first);
        }
        drop(s);
        // Unrelated changes do not move flows.
        let other = t.insert(Binding::bound(sa("198.18.1.1:80")), 99).unwrap();
        t.insert(Binding::bound(sa("0.0.0.0:444")).with_reuseport(), 98)
            .unwrap();
        assert_eq!(picks(&t, 10_000), before);
        t.remove(other).unwrap();
        assert_eq!(picks(&t, 10_000), before);
        // A joining member changes the mapping (reciprocal_scale shifts every
        // boundary, as in the kernel); its leaving restores it exactly,
        // because the newest member is last and swap-remove restores the
        // old order.
        let extra = t.insert(b, 4).unwrap();
        let grown = picks(&t, 10_000);
        assert_ne!(grown, before);
        assert!(grown.contains(&Some(4)));
        t.remove(extra).unwrap();
        assert_eq!(picks(&t, 10_000), before);
        // Removing member 1 moves the last member (3) into its place, as
        // reuseport_detach_sock does: the group order becomes [0, 3, 2] and
        // every flow's pick is reciprocal_scale over that order.
        assert_eq!(t.remove(hs[1]), Ok(1));
        let after = picks(&t, 10_000);
        let s = t.snapshot();
        let order = [0u32, 3, 2];
        let dst = u32::from(Ipv4Addr::new(198, 18, 1, 1));
        for (i, got) in after.iter().enumerate() {
            let (src, sport) = flow(i as u32);
            let IpAddr::V4(src) = src else {
                panic!("v4 flow")
            };
            let h = (s.tables.flow.hash_one((u32::from(src), sport, dst, 443u16)) >> 32) as u32;
            assert_eq!(*got, order.get(reciprocal_scale(h, 3)).copied(), "flow {i}");
        }
        assert!(!after.contains(&Some(1)));
    }

    #[test]
    fn reuseport_secret_differs_per_table() {
        // Two tables with identical groups should not agree on every flow:
        // the pick is keyed with a per-table secret.
        let mk = || {
            let t = FlowTable::new();
            for i in 0..8 {
                t.insert(Binding::bound(sa("0.0.0.0:443")).with_reuseport(), i)
                    .unwrap();
            }
            t
        };
        let (a, b) = (mk(), mk());
        assert_ne!(picks(&a, 1_000), picks(&b, 1_000));
    }

    #[test]
    fn reciprocal_scale_in_range() {
        for n in [1usize, 2, 3, 7, MAX_REUSEPORT_GROUP] {
            for h in [0u32, 1, u32::MAX / 2, u32::MAX - 1, u32::MAX] {
                assert!(reciprocal_scale(h, n) < n);
            }
        }
        assert_eq!(reciprocal_scale(u32::MAX, 4), 3);
        assert_eq!(reciprocal_scale(0, 4), 0);
    }

    #[test]
    fn levels_counted_and_skipped() {
        let t = FlowTable::new();
        let c = t
            .insert(Binding::connected(sa("0.0.0.0:5"), sa("198.18.0.9:9")), 1)
            .unwrap();
        {
            let s = t.snapshot();
            assert_eq!(s.tables.v4.n_conn_wild, 1);
            assert_eq!(
                s.tables.v4.n_conn_specific + s.tables.v4.n_specific + s.tables.v4.n_wild,
                0
            );
        }
        t.remove(c).unwrap();
        let s = t.snapshot();
        assert_eq!(s.tables.v4.n_conn_wild, 0);
        assert_eq!(s.tables.v4.connected.len(), 0);
    }

    #[test]
    fn a_prefetch_changes_no_answer() {
        // Both unconnected levels (v4); v6 with the wildcard level alone,
        // with no bindings, then with the specific level alone.
        let t = FlowTable::new();
        t.insert(Binding::bound(sa("198.18.0.1:53")), 1).unwrap();
        t.insert(Binding::bound(sa("0.0.0.0:53")), 2).unwrap();
        t.insert(Binding::bound(sa("0.0.0.0:54")), 3).unwrap();
        let wild6 = t.insert(Binding::bound(sa("[::]:53")), 4).unwrap();
        let dsts = [
            ("198.18.0.1:53", Some(1)),
            ("198.18.0.2:53", Some(2)),
            ("198.18.0.1:54", Some(3)),
            ("198.18.0.1:55", None),
            ("[fd00::1]:53", Some(4)),
            ("[fd00::2]:54", None),
        ];
        let check = |t: &FlowTable<u16>, v6: [Option<u16>; 2]| {
            let s = t.snapshot();
            for (i, (d, want)) in dsts.into_iter().enumerate() {
                let d = sa(d);
                let want = if d.is_ipv4() { want } else { v6[i - 4] };
                let src = if d.is_ipv4() {
                    sa("198.18.9.9:1000")
                } else {
                    sa("[fd00::9]:1000")
                };
                s.prefetch(d.ip(), d.port());
                assert_eq!(
                    s.lookup(src.ip(), src.port(), d.ip(), d.port()).copied(),
                    want,
                    "{d}"
                );
            }
        };
        check(&t, [Some(4), None]);
        t.remove(wild6).unwrap();
        check(&t, [None, None]);
        t.insert(Binding::bound(sa("[fd00::1]:53")), 5).unwrap();
        check(&t, [Some(5), None]);
    }

    #[test]
    fn one_change_copies_one_shard() {
        let t = FlowTable::new();
        t.update(|ed| {
            for p in 1..=2_000u16 {
                ed.insert(Binding::bound(sa("198.18.0.1:1")).with_reuseport(), 0)?;
                ed.insert(
                    Binding::bound(SocketAddr::new(ip("198.18.0.1"), p)).with_reuseport(),
                    p,
                )?;
            }
            Ok(())
        })
        .unwrap();
        let before = t.snapshot();
        assert_eq!(before.tables.v4.bound.len(), 2_000);
        t.insert(Binding::bound(sa("198.18.0.2:5")), 7).unwrap();
        let after = t.snapshot();
        let fresh = before
            .tables
            .v4
            .bound
            .shards
            .iter()
            .zip(after.tables.v4.bound.shards.iter())
            .filter(|(a, b)| !Arc::ptr_eq(a, b))
            .count();
        assert_eq!(fresh, 1);
        assert!(before
            .tables
            .v4
            .connected
            .shards
            .iter()
            .zip(after.tables.v4.connected.shards.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
        // A refused insert copies nothing either.
        assert!(t.insert(Binding::bound(sa("198.18.0.2:5")), 8).is_err());
        let again = t.snapshot();
        assert!(Arc::ptr_eq(&after.tables, &again.tables));
    }

    #[test]
    fn handles_are_per_table_and_never_reused() {
        let (a, b) = (FlowTable::new(), FlowTable::new());
        let bind = Binding::bound(sa("0.0.0.0:7"));
        let ha = a.insert(bind, 1).unwrap();
        let hb = b.insert(bind, 2).unwrap();
        assert_eq!(ha.id(), hb.id());
        assert_eq!(ha.binding(), bind);
        assert_eq!(b.remove(ha), Err(FlowError::NotFound(ha)));
        assert_eq!(b.len(), 1);
        // Remove and re-add on the same binding: the old handle is stale.
        assert_eq!(a.remove(ha), Ok(1));
        let ha2 = a.insert(bind, 3).unwrap();
        assert_ne!(ha, ha2);
        assert_eq!(a.remove(ha), Err(FlowError::NotFound(ha)));
        assert_eq!(a.len(), 1);
        // Same for a reuseport member and a connected socket.
        let g = Binding::bound(sa("0.0.0.0:8")).with_reuseport();
        let m1 = a.insert(g, 4).unwrap();
        a.remove(m1).unwrap();
        a.insert(g, 5).unwrap();
        assert_eq!(a.remove(m1), Err(FlowError::NotFound(m1)));
        let c = Binding::connected(sa("198.18.0.1:9"), sa("198.18.0.2:9"));
        let c1 = a.insert(c, 6).unwrap();
        a.remove(c1).unwrap();
        a.insert(c, 7).unwrap();
        assert_eq!(a.remove(c1), Err(FlowError::NotFound(c1)));
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn old_generations_are_freed_by_the_writer() {
        let t = FlowTable::new();
        let v = Arc::new(());
        let h = t
            .insert(Binding::bound(sa("0.0.0.0:1")), Arc::clone(&v))
            .unwrap();
        let held = t.snapshot();
        drop(t.remove(h).unwrap());
        // The held generation still owns a clone.
        assert_eq!(Arc::strong_count(&v), 2);
        drop(held);
        // The reader let go; the graveyard (not the reader) frees it.
        t.collect_garbage();
        assert_eq!(Arc::strong_count(&v), 1);
    }
}
