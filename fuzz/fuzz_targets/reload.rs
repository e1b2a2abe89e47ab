//! Reload as a transaction, on an engine model (no EAL): arbitrary
//! sequences of socket sets (names, IPv4/IPv6 addresses, ports, reuseport,
//! connected remotes, rcvbuf, handlers, pcap files) are applied to a live
//! set through the same pure steps `reload::apply` takes: `reload::plan`
//! (keep / in place / replace / add, the removed set, name refusals), a
//! prepare step that fails for an uncreatable pcap file, and
//! `reload::rebind` inside one `FlowTable::update_or_discard`, published
//! only if nothing was refused. After every reload:
//!
//! - accepted: the live set equals the requested one (every field, in
//!   order, plus the engine's `filler` when it has one); rejected: the live
//!   set and the published table are exactly the previous ones;
//! - accepted if and only if an independent linear check says so: no name
//!   refusal or prepare failure, every binding valid, and no two sockets of
//!   the new set (plus `filler`) colliding under the kernel's bind rule;
//! - no two live sockets collide (the same linear check) and the table
//!   holds exactly the live sockets;
//! - kept and in-place sockets keep their id and flow-table handle;
//!   replaced and added ones get fresh ids;
//! - every live socket that is the only best match for its own 4-tuple is
//!   what the published table's lookup returns, and any lookup answer is a
//!   live socket that matches with the best score;
//! - nothing panics.
#![no_main]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;

#[path = "shared/score.rs"]
mod shared_score;
use shared_score::score;
use udpdemux::config::binding_of;
use udpdemux::config::{Handler, SocketConf};
use udpdemux::flow_table::{Binding, FlowTable, SocketHandle};
use udpdemux::runtime::reload::{plan, rebind, Change, Step};

const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "filler"];
const LOCALS: [&str; 12] = [
    "0.0.0.0",
    "198.18.0.1",
    "198.18.0.2",
    "198.18.0.1",
    "224.0.0.1",
    "255.255.255.255",
    "::",
    "fd00::1",
    "fd00::2",
    "fd00::1",
    "::ffff:198.18.0.1",
    "ff02::1",
];
const REMOTES: [&str; 6] = [
    "198.18.0.9",
    "198.18.0.10",
    "0.0.0.0",
    "fd00::9",
    "fd00::10",
    "::",
];
const PORTS: [u16; 4] = [53, 54, 53, 0];
const BAD_PCAP: &str = "/proc/nope/x.pcap";

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// One socket from 4 bytes.
fn socket(inp: &mut Input) -> Option<SocketConf> {
    let (b0, b1, b2, b3) = (inp.byte()?, inp.byte()?, inp.byte()?, inp.byte()?);
    let name = NAMES[usize::from(b0 & 7) % NAMES.len()].to_string();
    let local = SocketAddr::new(
        ip(LOCALS[usize::from(b0 >> 3) % LOCALS.len()]),
        PORTS[usize::from(b1 & 3)],
    );
    let remote = match (b1 >> 2) & 7 {
        r @ 0..=5 if b1 & 0x20 != 0 => Some(SocketAddr::new(
            ip(REMOTES[usize::from(r)]),
            if b1 & 0x40 != 0 { 4000 } else { 0 },
        )),
        _ => None,
    };
    let handler = match b2 & 3 {
        0 => Handler::Count,
        1 => Handler::Echo,
        2 => Handler::Pcap,
        _ => Handler::None,
    };
    let pcap_file = (handler == Handler::Pcap).then(|| {
        PathBuf::from(match (b2 >> 2) & 3 {
            0 | 1 => "/tmp/udpdemux-fuzz-a.pcap",
            2 => "/tmp/udpdemux-fuzz-b.pcap",
            _ => BAD_PCAP,
        })
    });
    Some(SocketConf {
        name,
        local,
        remote,
        reuseport: b2 & 0x10 != 0,
        rcvbuf: [4096, 65536, 212_992, 212_992][usize::from((b2 >> 5) & 3)],
        handler,
        ring_size: if b3 & 1 != 0 { 64 } else { 4096 },
        pcap_file,
        pcap_limit_bytes: if b3 & 2 != 0 { 1000 } else { 64 << 20 },
        consume_rate_pps: u64::from((b3 >> 2) & 1) * 10,
        // Joining a group replaces a socket like any binding change; this
        // target's model does not join (app's reload tests cover it).
        multicast: None,
        multicast_port: None,
    })
}

fn same_conf(a: &SocketConf, b: &SocketConf) -> bool {
    a.name == b.name
        && a.local == b.local
        && a.remote == b.remote
        && a.reuseport == b.reuseport
        && a.rcvbuf == b.rcvbuf
        && a.handler == b.handler
        && a.ring_size == b.ring_size
        && a.pcap_file == b.pcap_file
        && a.pcap_limit_bytes == b.pcap_limit_bytes
        && a.consume_rate_pps == b.consume_rate_pps
}

/// The table's address rules, restated.
fn naive_valid(b: &Binding) -> bool {
    // A group is a valid local address (multicast receivers bind it), never a remote.
    let bad_addr = |a: IpAddr, remote: bool| match a {
        IpAddr::V4(v) => {
            (remote && v.is_multicast()) || v.is_broadcast() || (remote && v.is_unspecified())
        }
        IpAddr::V6(v) => {
            (remote && v.is_multicast())
                || matches!(v.segments(), [0, 0, 0, 0, 0, 0xffff, _, _])
                || (remote && v.is_unspecified())
        }
    };
    if b.local.port() == 0 || bad_addr(b.local.ip(), false) {
        return false;
    }
    match b.remote {
        None => true,
        Some(r) => {
            r.port() != 0
                && !b.reuseport
                && r.is_ipv4() == b.local.is_ipv4()
                && !bad_addr(r.ip(), true)
        }
    }
}

/// The kernel's bind rule as the flow table documents it: the same exact
/// (local, remote) pair collides unless both are reuseport members of an
/// unconnected binding, or the unconnected binding is to a group (always
/// shared, as with SO_REUSEADDR).
fn naive_collide(a: &Binding, b: &Binding) -> bool {
    let same = a.local.ip() == b.local.ip()
        && a.local.port() == b.local.port()
        && a.remote.map(|r| (r.ip(), r.port())) == b.remote.map(|r| (r.ip(), r.port()));
    same && !(a.remote.is_none() && ((a.reuseport && b.reuseport) || a.local.ip().is_multicast()))
}

fn no_collisions(bs: &[Binding]) -> bool {
    bs.iter()
        .enumerate()
        .all(|(i, a)| bs[i + 1..].iter().all(|b| !naive_collide(a, b)))
}

#[derive(Clone)]
struct Live {
    conf: SocketConf,
    id: u32,
    handle: SocketHandle,
}

struct Model {
    table: FlowTable<u32>,
    live: Vec<Live>,
    next_id: u32,
    keep_filler: bool,
}

impl Model {
    fn new(keep_filler: bool) -> Model {
        let mut m = Model {
            table: FlowTable::new(),
            live: Vec::new(),
            next_id: 1,
            keep_filler,
        };
        if keep_filler {
            let conf: SocketConf =
                toml_conf("filler", SocketAddr::new(ip("198.18.0.1"), 53), None, false);
            let handle = m.table.insert(binding_of(&conf), 0).unwrap();
            m.live.push(Live {
                conf,
                id: 0,
                handle,
            });
        }
        m
    }

    fn check(&self) {
        let bs: Vec<Binding> = self.live.iter().map(|l| binding_of(&l.conf)).collect();
        assert!(no_collisions(&bs), "two live sockets collide: {bs:?}");
        assert!(
            bs.iter().all(naive_valid),
            "an invalid binding is live: {bs:?}"
        );
        assert_eq!(
            self.table.len(),
            self.live.len(),
            "table and live set differ"
        );
        for (i, l) in self.live.iter().enumerate() {
            assert_eq!(l.handle.binding(), bs[i]);
        }
        // Lookups through the published table.
        let snap = self.table.snapshot();
        for b in &bs {
            let dst = if b.local.ip().is_unspecified() {
                if b.local.is_ipv4() {
                    ip("198.18.0.1")
                } else {
                    ip("fd00::1")
                }
            } else {
                b.local.ip()
            };
            let (src, sport) = match b.remote {
                Some(r) => (r.ip(), r.port()),
                None if b.local.is_ipv4() => (ip("198.18.0.77"), 7),
                None => (ip("fd00::77"), 7),
            };
            let dport = b.local.port();
            let scores: Vec<u8> = bs
                .iter()
                .map(|x| score(x, src, sport, dst, dport))
                .collect();
            let best = *scores.iter().max().unwrap();
            assert!(best > 0);
            let got = *snap
                .lookup(src, sport, dst, dport)
                .expect("a live socket matches but the table has none");
            let k = self
                .live
                .iter()
                .position(|l| l.id == got)
                .expect("lookup returned a socket that is not live");
            assert_eq!(scores[k], best, "lookup ignored a more specific socket");
            let winners: Vec<usize> = (0..bs.len()).filter(|&j| scores[j] == best).collect();
            if winners.len() == 1 {
                assert_eq!(k, winners[0]);
            }
        }
    }

    /// One reload, as `reload::apply` does it.
    fn reload(&mut self, new: &[SocketConf]) {
        let before: Vec<Live> = self.live.clone();
        let table_len = self.table.len();
        let live_confs: Vec<SocketConf> = self.live.iter().map(|l| l.conf.clone()).collect();
        let p = plan(&live_confs, new, self.keep_filler);

        // The plan's classification against `classify` and the names.
        for &(n, step) in &p.steps {
            let l = self.live.iter().position(|l| l.conf.name == new[n].name);
            match step {
                Step::Add => assert!(l.is_none()),
                Step::Keep(i) | Step::InPlace(i) | Step::Replace(i) => {
                    assert_eq!(Some(i), l);
                    let c = udpdemux::runtime::reload::classify(&live_confs[i], &new[n]);
                    let want = match c {
                        Change::Same => Step::Keep(i),
                        Change::InPlace => Step::InPlace(i),
                        Change::Replace => Step::Replace(i),
                    };
                    assert_eq!(step, want);
                    if step == Step::Keep(i) {
                        assert!(same_conf(&live_confs[i], &new[n]));
                    }
                    if step != Step::Replace(i) {
                        assert_eq!(binding_of(&live_confs[i]), binding_of(&new[n]));
                    }
                }
            }
        }
        let mut names: Vec<&str> = new.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let dup = names.windows(2).any(|w| w[0] == w[1]);
        let filler_taken = self.keep_filler && names.contains(&"filler");
        assert_eq!(
            p.rejected.is_empty(),
            !dup && !filler_taken,
            "{:?}",
            p.rejected
        );
        for &r in &p.removed {
            assert!(!new.iter().any(|c| c.name == self.live[r].conf.name));
        }

        // 1. Prepare: a new socket or a changed pcap file creates the file.
        let mut failures = 0;
        let mut incoming: Vec<(usize, Option<usize>, u32)> = Vec::new();
        for &(n, step) in &p.steps {
            let c = &new[n];
            let bad =
                c.handler == Handler::Pcap && c.pcap_file.as_deref() == Some(BAD_PCAP.as_ref());
            match step {
                Step::Keep(_) => {}
                Step::InPlace(l) => {
                    if bad && live_confs[l].pcap_file != c.pcap_file {
                        failures += 1;
                    }
                }
                Step::Replace(_) | Step::Add => {
                    let old = match step {
                        Step::Replace(l) => Some(l),
                        _ => None,
                    };
                    let shares = old.is_some_and(|l| {
                        live_confs[l].handler == Handler::Pcap
                            && c.handler == Handler::Pcap
                            && live_confs[l].pcap_file == c.pcap_file
                    });
                    let id = self.next_id;
                    self.next_id += 1;
                    if bad && !shares {
                        failures += 1;
                    } else {
                        incoming.push((n, old, id));
                    }
                }
            }
        }

        // 2. Bind, checked as a whole.
        let unbind: Vec<SocketHandle> = p
            .removed
            .iter()
            .copied()
            .chain(incoming.iter().filter_map(|&(_, old, _)| old))
            .map(|l| self.live[l].handle)
            .collect();
        let refused_names = p.rejected.len() + failures;
        let mut refusals = 0;
        let res = self.table.update_or_discard(|ed| {
            let results = rebind(
                ed,
                unbind.iter().copied(),
                incoming.iter().map(|&(n, _, id)| (binding_of(&new[n]), id)),
            )?;
            let mut handles = Vec::new();
            for r in results {
                match r {
                    Ok(h) => handles.push(h),
                    Err(_) => refusals += 1,
                }
            }
            Ok((refused_names == 0 && refusals == 0).then_some(handles))
        });
        let handles = res.expect("unbinding a live socket failed");

        // The independent answer.
        let mut want: Vec<Binding> = new.iter().map(binding_of).collect();
        if self.keep_filler {
            want.extend(
                self.live
                    .iter()
                    .filter(|l| l.id == 0)
                    .map(|l| binding_of(&l.conf)),
            );
        }
        let naive_ok = refused_names == 0 && want.iter().all(naive_valid) && no_collisions(&want);
        assert_eq!(
            handles.is_some(),
            naive_ok,
            "table said {} ({refusals} refusals) where the linear check says {naive_ok}: {want:?}",
            handles.is_some()
        );

        match handles {
            None => {
                // Rejected: nothing moved.
                assert_eq!(self.table.len(), table_len);
                assert_eq!(self.live.len(), before.len());
            }
            Some(handles) => {
                let mut next: Vec<Live> = self.live.iter().filter(|l| l.id == 0).cloned().collect();
                let mut fresh = incoming.iter().zip(handles);
                for &(n, step) in &p.steps {
                    let c = new[n].clone();
                    match step {
                        Step::Keep(l) | Step::InPlace(l) => next.push(Live {
                            conf: c,
                            id: self.live[l].id,
                            handle: self.live[l].handle,
                        }),
                        Step::Replace(_) | Step::Add => {
                            let (&(m, _, id), h) = fresh.next().expect("a bound socket per step");
                            assert_eq!(m, n);
                            assert!(before.iter().all(|b| b.id != id), "a reused id");
                            next.push(Live {
                                conf: c,
                                id,
                                handle: h,
                            });
                        }
                    }
                }
                assert!(fresh.next().is_none());
                self.live = next;
                // The applied set is the requested one (filler first).
                let applied: Vec<&SocketConf> = self
                    .live
                    .iter()
                    .filter(|l| l.id != 0)
                    .map(|l| &l.conf)
                    .collect();
                assert_eq!(applied.len(), new.len());
                for (a, b) in applied.iter().zip(new) {
                    assert!(same_conf(a, b), "applied {a:?}, requested {b:?}");
                }
            }
        }
        self.check();
    }
}

fn toml_conf(
    name: &str,
    local: SocketAddr,
    remote: Option<SocketAddr>,
    reuseport: bool,
) -> SocketConf {
    SocketConf {
        name: name.into(),
        local,
        remote,
        reuseport,
        rcvbuf: 212_992,
        handler: Handler::Count,
        ring_size: 4096,
        pcap_file: None,
        pcap_limit_bytes: 64 << 20,
        consume_rate_pps: 0,
        multicast: None,
        multicast_port: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let Some(flags) = inp.byte() else {
        return;
    };
    let mut m = Model::new(flags & 1 != 0);
    m.check();
    // Each reload: a count byte, then that many 4-byte sockets.
    for _ in 0..16 {
        let Some(n) = inp.byte() else {
            return;
        };
        let mut new = Vec::new();
        for _ in 0..(n % 7) {
            match socket(&mut inp) {
                Some(s) => new.push(s),
                None => break,
            }
        }
        m.reload(&new);
    }
});
