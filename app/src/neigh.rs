//! The neighbour table: IPv4 (ARP) and IPv6 (neighbour discovery) next-hop
//! MACs per port, for `send_burst`, with the kernel's states kept simple
//! but real (`net/core/neighbour.c`):
//!
//! * **incomplete**: created by a send to an unknown address; a solicit
//!   (ARP request / neighbour solicitation) goes out at once and again
//!   every `retrans` until `mcast_solicit` have gone unanswered, then the
//!   entry fails: its queued datagrams expire (freed by the caller and
//!   counted) and the slot is free again;
//! * **reachable**: confirmed by an ARP reply or a solicited neighbour
//!   advertisement; used for `reachable` ticks, then
//! * **stale**: still used (as the kernel does until its probe fails);
//!   heard-of neighbours (an ARP request or a solicitation to us) start
//!   here; a stale entry older than `gc_stale` is collected, and the oldest
//!   stale entry makes room when the table is full;
//! * **permanent**: a static entry of the config (`[[neighbour.static]]`,
//!   the kernel's `ip neigh add ... nud permanent`): always used, never
//!   collected, evicted or changed by what is heard.
//!
//! Received traffic teaches too ([`Learn::Traffic`], see `heard`): a
//! datagram from an on-link source gives its MAC, creating a stale entry
//! or resolving an incomplete one, and keeps a reachable one reachable.
//!
//! Bounded: `capacity` slots, each with a queue of at most `unres_qlen`
//! datagrams (the kernel's `unres_qlen`; when it overflows the oldest is
//! dropped, `unresolved_discards` in the kernel). Every slot and queue is
//! allocated when the table is made: nothing here allocates afterwards.
//!
//! Time is injected (`now` in the caller's ticks, the TSC in the engine),
//! so the state machine is tested without sleeping. The table itself has
//! no lock: the engine keeps it in a `Mutex` (see `send`), taken only on
//! the control path (the main lcore's TX drain and timers, and an RX lcore
//! that got an ARP or ND frame), never per received datagram.
use std::collections::VecDeque;
use std::net::IpAddr;

/// The table's limits and timers, in the caller's ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Entries (neighbours) at most, over every port.
    pub capacity: usize,
    /// Datagrams held per unresolved neighbour (`unres_qlen`).
    pub unres_qlen: usize,
    /// Solicits sent before an incomplete entry fails (`mcast_solicit`).
    pub mcast_solicit: u8,
    /// Between two solicits (`retrans_time`, 1 s).
    pub retrans: u64,
    /// A confirmed entry stays reachable this long (`base_reachable_time`, 30 s).
    pub reachable: u64,
    /// A stale entry unused this long is collected (`gc_stale_time`, 60 s).
    pub gc_stale: u64,
}

impl Params {
    /// The kernel's defaults (queue of 3 as the classic `unres_qlen`) for a
    /// clock of `hz` ticks per second.
    pub fn defaults(hz: u64) -> Params {
        Params {
            capacity: 256,
            unres_qlen: 3,
            mcast_solicit: 3,
            retrans: hz,
            reachable: 30 * hz,
            gc_stale: 60 * hz,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Incomplete,
    Reachable,
    Stale,
    Permanent,
}

/// How a neighbour's MAC was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learn {
    /// An answer to our solicit: ARP reply, solicited advertisement.
    Confirmed,
    /// Heard of: an ARP request or a solicitation from it, an unsolicited
    /// advertisement. Creates a stale entry when `create`.
    Heard { create: bool },
    /// A datagram received from it (its source MAC): creates a stale
    /// entry, resolves an incomplete one, and refreshes the timer of one
    /// already known with that MAC (a reachable one stays reachable: the
    /// peer is talking to us, the kernel's `neigh_confirm`).
    Traffic,
}

/// What became of a datagram given to [`Table::resolve`].
#[derive(Debug, PartialEq, Eq)]
pub enum Resolve<T> {
    /// The MAC is known: send it now.
    Send([u8; 6], T),
    /// Held until the neighbour answers; `solicit`: the entry is new, the
    /// caller sends the first solicit now. `dropped`: the queue was full and
    /// its oldest datagram gave way (the caller frees it; counted).
    Queued { solicit: bool, dropped: Option<T> },
    /// No slot free (counted in `table_full`): the caller frees it.
    Full(T),
}

/// The table's counters (read under its lock).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NeighStats {
    /// Entries that got a MAC while incomplete.
    pub resolved: u64,
    /// Datagrams held behind a resolution.
    pub queued: u64,
    /// Held datagrams released for sending once resolved.
    pub released: u64,
    /// Held datagrams dropped because the queue overflowed.
    pub unres_discards: u64,
    /// Held datagrams freed because the neighbour never answered.
    pub expired: u64,
    /// Datagrams dropped because no entry could be made.
    pub table_full: u64,
    /// Solicits asked for (first and retries).
    pub solicits: u64,
    /// Incomplete entries that failed.
    pub failed: u64,
    /// Stale entries collected or evicted.
    pub gc: u64,
    /// Entries created or resolved from received datagrams (`Learn::Traffic`).
    pub from_traffic: u64,
    /// Static entries (from the config).
    pub permanent: u64,
    /// Entries in use now.
    pub entries: u64,
}

#[derive(Debug)]
struct Slot<T> {
    key: Option<(u16, IpAddr)>,
    state: State,
    mac: [u8; 6],
    /// Last confirmation (reachable), last update or use (stale).
    updated: u64,
    probes: u8,
    next_probe: u64,
    queue: VecDeque<T>,
}

/// The table. `T` is what waits for a resolution (an mbuf in the engine).
#[derive(Debug)]
pub struct Table<T> {
    p: Params,
    slots: Vec<Slot<T>>,
    pub stats: NeighStats,
}

impl<T> Table<T> {
    pub fn new(p: Params) -> Table<T> {
        let slots = (0..p.capacity)
            .map(|_| Slot {
                key: None,
                state: State::Stale,
                mac: [0; 6],
                updated: 0,
                probes: 0,
                next_probe: 0,
                queue: VecDeque::with_capacity(p.unres_qlen),
            })
            .collect();
        Table {
            p,
            slots,
            stats: NeighStats::default(),
        }
    }

    pub fn params(&self) -> &Params {
        &self.p
    }

    fn find(&self, port: u16, ip: IpAddr) -> Option<usize> {
        self.slots.iter().position(|s| s.key == Some((port, ip)))
    }

    /// The state and MAC of a neighbour (tests, diagnostics).
    pub fn get(&self, port: u16, ip: IpAddr) -> Option<(State, [u8; 6])> {
        self.find(port, ip).map(|i| {
            let s = &self.slots[i];
            (s.state, s.mac)
        })
    }

    /// A free slot, or the oldest stale one evicted (its queue is empty:
    /// only incomplete entries hold datagrams).
    fn take_slot(&mut self) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(|s| s.key.is_none()) {
            return Some(i);
        }
        let i = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::Stale && s.queue.is_empty())
            .min_by_key(|(_, s)| s.updated)
            .map(|(i, _)| i)?;
        self.free(i);
        self.stats.gc += 1;
        Some(i)
    }

    fn free(&mut self, i: usize) {
        self.slots[i].key = None;
        self.stats.entries -= 1;
    }

    fn claim(&mut self, i: usize, port: u16, ip: IpAddr, state: State, mac: [u8; 6], now: u64) {
        let s = &mut self.slots[i];
        s.key = Some((port, ip));
        s.state = state;
        s.mac = mac;
        s.updated = now;
        s.probes = 0;
        s.next_probe = 0;
        self.stats.entries += 1;
    }

    /// A datagram for `ip` on `port` at `now`.
    pub fn resolve(&mut self, port: u16, ip: IpAddr, item: T, now: u64) -> Resolve<T> {
        if let Some(i) = self.find(port, ip) {
            let (qlen, reach) = (self.p.unres_qlen, self.p.reachable);
            let s = &mut self.slots[i];
            match s.state {
                State::Reachable => {
                    if now.saturating_sub(s.updated) > reach {
                        s.state = State::Stale;
                        s.updated = now;
                    }
                    return Resolve::Send(s.mac, item);
                }
                State::Stale => {
                    s.updated = now;
                    return Resolve::Send(s.mac, item);
                }
                State::Permanent => return Resolve::Send(s.mac, item),
                State::Incomplete => {
                    let dropped = if s.queue.len() >= qlen {
                        s.queue.pop_front()
                    } else {
                        None
                    };
                    if qlen > 0 {
                        s.queue.push_back(item);
                        self.stats.queued += 1;
                    } else {
                        // No queue at all: the datagram itself gives way.
                        self.stats.unres_discards += 1;
                        return Resolve::Queued {
                            solicit: false,
                            dropped: Some(item),
                        };
                    }
                    if dropped.is_some() {
                        self.stats.unres_discards += 1;
                    }
                    return Resolve::Queued {
                        solicit: false,
                        dropped,
                    };
                }
            }
        }
        let Some(i) = self.take_slot() else {
            self.stats.table_full += 1;
            return Resolve::Full(item);
        };
        self.claim(i, port, ip, State::Incomplete, [0; 6], now);
        let (retrans, qlen) = (self.p.retrans, self.p.unres_qlen);
        let s = &mut self.slots[i];
        s.probes = 1;
        s.next_probe = now.saturating_add(retrans);
        self.stats.solicits += 1;
        if qlen == 0 {
            self.stats.unres_discards += 1;
            return Resolve::Queued {
                solicit: true,
                dropped: Some(item),
            };
        }
        s.queue.push_back(item);
        self.stats.queued += 1;
        Resolve::Queued {
            solicit: true,
            dropped: None,
        }
    }

    /// `ip` on `port` is at `mac`, as of `now`. True if an entry holds it
    /// now (one waiting with datagrams is then ready: [`Table::take_ready`]).
    pub fn learn(&mut self, port: u16, ip: IpAddr, mac: [u8; 6], how: Learn, now: u64) -> bool {
        let Some(i) = self.find(port, ip) else {
            if matches!(how, Learn::Heard { create: true } | Learn::Traffic) {
                if let Some(i) = self.take_slot() {
                    self.claim(i, port, ip, State::Stale, mac, now);
                    if how == Learn::Traffic {
                        self.stats.from_traffic += 1;
                    }
                    return true;
                }
            }
            return false;
        };
        let s = &mut self.slots[i];
        if s.state == State::Permanent {
            // The administrator's word stands over anything heard.
            return true;
        }
        if s.state == State::Incomplete {
            self.stats.resolved += 1;
            if how == Learn::Traffic {
                self.stats.from_traffic += 1;
            }
        }
        match how {
            Learn::Traffic if s.state == State::Reachable && s.mac == mac => {
                s.updated = now;
            }
            Learn::Traffic => {
                s.state = State::Stale;
                s.mac = mac;
                s.updated = now;
            }
            Learn::Confirmed => {
                s.state = State::Reachable;
                s.mac = mac;
                s.updated = now;
            }
            Learn::Heard { .. } => {
                // A reachable entry keeps its state unless the MAC moved.
                if s.state != State::Reachable || s.mac != mac {
                    s.state = State::Stale;
                    s.mac = mac;
                }
                s.updated = now;
            }
        }
        true
    }

    /// A static entry: `ip` on `port` is at `mac` for good. Replaces what
    /// the table held for it (nothing is queued yet when the engine adds
    /// them). False when the table is full of permanent entries.
    pub fn add_static(&mut self, port: u16, ip: IpAddr, mac: [u8; 6]) -> bool {
        let i = match self.find(port, ip) {
            Some(i) if self.slots[i].queue.is_empty() => i,
            Some(_) => return false,
            None => match self.take_slot() {
                Some(i) => {
                    self.claim(i, port, ip, State::Permanent, mac, 0);
                    self.stats.permanent += 1;
                    return true;
                }
                None => return false,
            },
        };
        let s = &mut self.slots[i];
        if s.state != State::Permanent {
            self.stats.permanent += 1;
        }
        s.state = State::Permanent;
        s.mac = mac;
        true
    }

    /// Hand every datagram held for a now-resolved neighbour to `out`
    /// (port, MAC, datagram). Call it before resolving new datagrams, so
    /// that none overtakes those held for the same neighbour.
    pub fn take_ready(&mut self, mut out: impl FnMut(u16, [u8; 6], T)) {
        for s in &mut self.slots {
            if s.state == State::Incomplete || s.queue.is_empty() {
                continue;
            }
            let Some((port, _)) = s.key else { continue };
            while let Some(t) = s.queue.pop_front() {
                self.stats.released += 1;
                out(port, s.mac, t);
            }
        }
    }

    /// The timers at `now`: `solicit(port, ip)` for every retry due;
    /// `expire(datagram)` for each one held by an entry that failed (after
    /// `mcast_solicit` solicits and one more `retrans` of waiting).
    pub fn tick(
        &mut self,
        now: u64,
        mut solicit: impl FnMut(u16, IpAddr),
        mut expire: impl FnMut(T),
    ) {
        let p = self.p;
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            let Some((port, ip)) = s.key else { continue };
            match s.state {
                State::Incomplete if now >= s.next_probe => {
                    if s.probes >= p.mcast_solicit {
                        while let Some(t) = s.queue.pop_front() {
                            self.stats.expired += 1;
                            expire(t);
                        }
                        self.stats.failed += 1;
                        self.free(i);
                    } else {
                        s.probes += 1;
                        s.next_probe = s.next_probe.saturating_add(p.retrans).max(now);
                        self.stats.solicits += 1;
                        solicit(port, ip);
                    }
                }
                State::Reachable if now.saturating_sub(s.updated) > p.reachable => {
                    s.state = State::Stale;
                    s.updated = now;
                }
                State::Stale if now.saturating_sub(s.updated) > p.gc_stale => {
                    self.stats.gc += 1;
                    self.free(i);
                }
                _ => {}
            }
        }
    }

    /// Everything held, handed to `out` (teardown: freed and counted as expired).
    pub fn drain(&mut self, mut out: impl FnMut(T)) {
        for s in &mut self.slots {
            while let Some(t) = s.queue.pop_front() {
                self.stats.expired += 1;
                out(t);
            }
        }
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.slots.iter().map(|s| s.queue.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1000;
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn small(capacity: usize) -> Table<u32> {
        Table::new(Params {
            capacity,
            ..Params::defaults(HZ)
        })
    }

    #[test]
    fn unknown_address_queues_solicits_and_resolves_in_order() {
        let mut t = small(4);
        let a = ip("198.18.0.2");
        assert_eq!(
            t.resolve(0, a, 1, 0),
            Resolve::Queued {
                solicit: true,
                dropped: None
            }
        );
        assert_eq!(
            t.resolve(0, a, 2, 10),
            Resolve::Queued {
                solicit: false,
                dropped: None
            }
        );
        assert_eq!(t.get(0, a), Some((State::Incomplete, [0; 6])));
        // The same address on another port is another neighbour.
        assert!(matches!(
            t.resolve(1, a, 9, 10),
            Resolve::Queued { solicit: true, .. }
        ));
        assert!(t.learn(0, a, MAC, Learn::Confirmed, 20));
        let mut out = Vec::new();
        t.take_ready(|p, m, x| out.push((p, m, x)));
        assert_eq!(out, vec![(0, MAC, 1), (0, MAC, 2)]);
        assert_eq!(t.resolve(0, a, 3, 30), Resolve::Send(MAC, 3));
        assert_eq!(t.get(0, a), Some((State::Reachable, MAC)));
        let s = t.stats;
        assert_eq!(
            (s.resolved, s.queued, s.released, s.solicits, s.entries),
            (1, 3, 2, 2, 2)
        );
    }

    #[test]
    fn the_queue_is_bounded_and_the_oldest_gives_way() {
        let mut t = small(4);
        let a = ip("fd00::2");
        for x in 0..3 {
            assert!(matches!(
                t.resolve(0, a, x, 0),
                Resolve::Queued { dropped: None, .. }
            ));
        }
        assert_eq!(
            t.resolve(0, a, 3, 0),
            Resolve::Queued {
                solicit: false,
                dropped: Some(0)
            }
        );
        assert_eq!(t.held(), 3);
        assert_eq!(t.stats.unres_discards, 1);
    }

    #[test]
    fn a_silent_neighbour_is_solicited_three_times_then_its_queue_expires() {
        let mut t = small(4);
        let a = ip("198.18.0.9");
        for x in 0..5 {
            let _ = t.resolve(0, a, x, 0);
        }
        let mut solicits = Vec::new();
        let mut expired = Vec::new();
        // Nothing is due before a second has passed.
        t.tick(HZ - 1, |p, i| solicits.push((p, i)), |x| expired.push(x));
        assert!(solicits.is_empty());
        t.tick(HZ, |p, i| solicits.push((p, i)), |x| expired.push(x));
        t.tick(2 * HZ, |p, i| solicits.push((p, i)), |x| expired.push(x));
        assert_eq!(solicits, vec![(0, a), (0, a)], "retries 2 and 3");
        assert!(expired.is_empty());
        t.tick(
            3 * HZ - 1,
            |p, i| solicits.push((p, i)),
            |x| expired.push(x),
        );
        assert!(expired.is_empty(), "the third solicit has its second");
        t.tick(3 * HZ, |p, i| solicits.push((p, i)), |x| expired.push(x));
        assert_eq!(expired, vec![2, 3, 4], "held (the two oldest gave way)");
        assert_eq!(t.get(0, a), None);
        let s = t.stats;
        assert_eq!(
            (
                s.solicits,
                s.expired,
                s.unres_discards,
                s.failed,
                s.entries,
                s.queued
            ),
            (3, 3, 2, 1, 0, 5)
        );
        // The books: every datagram queued is released, discarded or expired.
        assert_eq!(s.queued, s.released + s.unres_discards + s.expired);
    }

    #[test]
    fn reachable_turns_stale_is_still_used_then_collected() {
        let mut t = small(2);
        let a = ip("198.18.0.2");
        // An ARP request from it that targets us creates a stale entry.
        assert!(t.learn(0, a, MAC, Learn::Heard { create: true }, 0));
        assert_eq!(t.get(0, a), Some((State::Stale, MAC)));
        // A reply that was not asked for, for an unknown one: nothing.
        assert!(!t.learn(0, ip("198.18.0.3"), MAC, Learn::Confirmed, 0));
        assert!(t.learn(0, a, MAC, Learn::Confirmed, 10));
        let p = *t.params();
        t.tick(10 + p.reachable, |_, _| {}, |_: u32| {});
        assert_eq!(t.get(0, a).unwrap().0, State::Reachable);
        t.tick(11 + p.reachable, |_, _| {}, |_: u32| {});
        assert_eq!(t.get(0, a).unwrap().0, State::Stale);
        assert_eq!(t.resolve(0, a, 1, 20 + p.reachable), Resolve::Send(MAC, 1));
        // A new MAC heard replaces the old one.
        let other = [2, 0, 0, 0, 0, 7];
        t.learn(
            0,
            a,
            other,
            Learn::Heard { create: false },
            30 + p.reachable,
        );
        assert_eq!(t.get(0, a), Some((State::Stale, other)));
        t.tick(31 + p.reachable + p.gc_stale, |_, _| {}, |_: u32| {});
        assert_eq!(t.get(0, a), None);
        assert_eq!((t.stats.gc, t.stats.entries), (1, 0));
    }

    #[test]
    fn a_full_table_evicts_the_oldest_stale_entry_or_refuses() {
        let mut t = small(2);
        let (a, b, c) = (ip("198.18.0.2"), ip("198.18.0.3"), ip("198.18.0.4"));
        assert!(matches!(t.resolve(0, a, 1, 0), Resolve::Queued { .. }));
        assert!(matches!(t.resolve(0, b, 2, 0), Resolve::Queued { .. }));
        // Both incomplete, both holding: nothing may go.
        assert_eq!(t.resolve(0, c, 3, 0), Resolve::Full(3));
        assert_eq!(t.stats.table_full, 1);
        t.learn(0, a, MAC, Learn::Heard { create: false }, 5);
        t.take_ready(|_, _, _| {});
        // `a` is stale and empty now: it makes room for `c`.
        assert!(matches!(
            t.resolve(0, c, 4, 6),
            Resolve::Queued { solicit: true, .. }
        ));
        assert_eq!(t.get(0, a), None);
        assert_eq!((t.stats.gc, t.stats.entries), (1, 2));
    }

    #[test]
    fn traffic_creates_resolves_and_keeps_reachable_entries() {
        let mut t = small(3);
        let (a, b) = (ip("198.18.0.2"), ip("fd00::2"));
        // Unknown: a stale entry, used at once.
        assert!(t.learn(0, a, MAC, Learn::Traffic, 1));
        assert_eq!(t.get(0, a), Some((State::Stale, MAC)));
        assert_eq!(t.resolve(0, a, 1, 2), Resolve::Send(MAC, 1));
        // Incomplete, holding a datagram: resolved by traffic, released.
        assert!(matches!(
            t.resolve(0, b, 2, 3),
            Resolve::Queued { solicit: true, .. }
        ));
        assert!(t.learn(0, b, MAC, Learn::Traffic, 4));
        let mut out = Vec::new();
        t.take_ready(|_, m, x| out.push((m, x)));
        assert_eq!(out, vec![(MAC, 2)]);
        // Reachable (confirmed by a reply): traffic with the same MAC keeps
        // it reachable past its first lifetime.
        assert!(t.learn(0, a, MAC, Learn::Confirmed, 10));
        let p = *t.params();
        assert!(t.learn(0, a, MAC, Learn::Traffic, 10 + p.reachable));
        t.tick(11 + p.reachable, |_, _| {}, |_: u32| {});
        assert_eq!(t.get(0, a).unwrap().0, State::Reachable);
        // From another MAC: stale, with the new MAC.
        let other = [2, 0, 0, 0, 0, 9];
        assert!(t.learn(0, a, other, Learn::Traffic, 12 + p.reachable));
        assert_eq!(t.get(0, a), Some((State::Stale, other)));
        assert_eq!((t.stats.from_traffic, t.stats.resolved), (2, 1));
    }

    #[test]
    fn static_entries_are_permanent() {
        let mut t = small(2);
        let (a, b, c) = (ip("198.18.0.2"), ip("198.18.0.3"), ip("198.18.0.4"));
        assert!(t.add_static(0, a, MAC));
        assert!(t.add_static(0, b, MAC));
        assert!(!t.add_static(0, c, MAC), "full of permanent entries");
        assert_eq!(t.resolve(0, a, 1, 0), Resolve::Send(MAC, 1));
        // Nothing heard changes them; no timer collects them; nothing evicts them.
        let other = [2, 0, 0, 0, 0, 9];
        for how in [
            Learn::Confirmed,
            Learn::Heard { create: true },
            Learn::Traffic,
        ] {
            assert!(t.learn(0, a, other, how, 5));
        }
        t.tick(u64::MAX / 2, |_, _| {}, |_: u32| {});
        assert_eq!(t.get(0, a), Some((State::Permanent, MAC)));
        assert_eq!(t.resolve(0, c, 2, 6), Resolve::Full(2));
        assert!(!t.learn(0, c, other, Learn::Traffic, 7));
        assert_eq!((t.stats.permanent, t.stats.entries, t.stats.gc), (2, 2, 0));
    }
}
