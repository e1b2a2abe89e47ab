//! SIGHUP: re-read the config's `[[socket]]` section and apply the
//! difference without stopping RX, as one transaction.
//!
//! The whole new socket set is prepared first, with nothing live touched:
//! the config is loaded and validated, every new or replaced socket gets its
//! ring and handler file, every changed pcap file is created, and the flow
//! table edit (removals, then insertions, so a freed address can be taken by
//! another socket in the same reload) is built and checked against the
//! sockets that stay and among the new ones. Only if every socket passes is
//! the edit published, in one flow-table switch; otherwise the old set stays
//! exactly as it was (nothing unbound, nothing queued dropped, books
//! untouched) and one error line names each rejected socket.
//!
//! A socket whose only changes are its `rcvbuf`, `consume_rate_pps`,
//! `pcap_file` or `pcap_limit_bytes` is changed in place: same id, same
//! binding, same ring, nothing dropped. Any other change (address, remote,
//! reuseport, handler, ring size, multicast group or port) replaces it: the new socket is bound in
//! the same switch that unbinds the old one, and the old one is drained and
//! retired as a removed socket. A replaced `pcap` socket that keeps its file
//! shares its writer with its successor, so the file is neither truncated
//! nor interleaved.
//!
//! `[eal]`, `[engine]`, `[mempool]`, `[small_cache]`, `[[port]]` and
//! `[[lcore]]` cannot change while running: edits there are logged as not
//! applied.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::registry::{self, Prepared};
use super::shared::{ConsumedBy, Shared, SocketEntry};
use crate::config::{Config, Handler, SocketConf};
use crate::flow_table::{Binding, Editor, FlowError, SocketHandle};
use crate::handlers;

/// What a successful reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub removed: Vec<String>,
    pub added: Vec<String>,
    pub replaced: Vec<String>,
    pub changed: Vec<String>,
}

/// SIGHUP: re-read `config_path` and apply its sockets; `running` is the
/// config the engine started with (only its sockets can change).
pub fn on_sighup(config_path: Option<&Path>, running: &Config, shared: &Shared) {
    let Some(path) = config_path else {
        log::warn!("SIGHUP: no config file to re-read");
        return;
    };
    let new = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            log::error!("SIGHUP: {e}; sockets unchanged");
            return;
        }
    };
    let fixed = static_edits(running, &new);
    if !fixed.is_empty() {
        log::warn!(
            "SIGHUP: edits to {} cannot be applied while running and are ignored (restart to apply them)",
            fixed.join(", ")
        );
    }
    let keep_filler = running.engine.filler_sockets > 0;
    match apply(shared, &new.sockets, keep_filler) {
        Ok(o) => log::info!(
            "SIGHUP: {} socket(s) removed, {} added, {} replaced, {} changed in place",
            o.removed.len(),
            o.added.len(),
            o.replaced.len(),
            o.changed.len()
        ),
        Err(rejected) => log::error!(
            "SIGHUP: reload rejected, sockets unchanged: {}",
            rejected.join("; ")
        ),
    }
}

/// The sections of `new` that differ from the running config and that a
/// reload cannot apply.
pub fn static_edits(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    let differs =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    if differs(&old.eal, &new.eal) {
        out.push("[eal]");
    }
    if differs(&old.engine, &new.engine) {
        out.push("[engine]");
    }
    if differs(&old.mempool, &new.mempool) {
        out.push("[mempool]");
    }
    if differs(&old.small_cache, &new.small_cache) {
        out.push("[small_cache]");
    }
    if differs(&old.ports, &new.ports) {
        out.push("[[port]]");
    }
    if differs(&old.lcores, &new.lcores) {
        out.push("[[lcore]]");
    }
    // The tap is probed with the EAL and its buckets sized at start.
    if differs(&old.exception, &new.exception) {
        out.push("[exception]");
    }
    if differs(&old.neighbour, &new.neighbour) {
        out.push("[neighbour]");
    }
    out
}

/// How one socket of the new set relates to the live one of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Same,
    /// Only settings that can change without unbinding.
    InPlace,
    /// Everything else: a new socket takes over.
    Replace,
}

pub fn classify(live: &SocketConf, new: &SocketConf) -> Change {
    let fixed_same = live.local == new.local
        && live.remote == new.remote
        && live.reuseport == new.reuseport
        && live.handler == new.handler
        && live.ring_size == new.ring_size
        // A group joined or left: the new socket's membership is published
        // with the registry, and the reports follow (`mcast::membership`).
        && live.multicast == new.multicast
        && live.multicast_port == new.multicast_port;
    if !fixed_same {
        return Change::Replace;
    }
    if live.rcvbuf == new.rcvbuf
        && live.consume_rate_pps == new.consume_rate_pps
        && live.pcap_file == new.pcap_file
        && live.pcap_limit_bytes == new.pcap_limit_bytes
    {
        Change::Same
    } else {
        Change::InPlace
    }
}

/// What a reload does to one socket of the new set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The live socket `live[i]`, unchanged.
    Keep(usize),
    /// The live socket `live[i]`, changed in place: same id, binding and ring.
    InPlace(usize),
    /// A new socket takes over from `live[i]`: it is bound in the same
    /// flow-table switch that unbinds `live[i]`.
    Replace(usize),
    /// A new socket.
    Add,
}

/// The pure part of a reload's decision (no EAL, no files, no rings): how
/// each socket of the new set relates to the live set, which live sockets
/// go, and which sockets are refused by name before anything is prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// `(index in new, step)` for every socket of the new set not refused
    /// in `rejected`, in the new set's order.
    pub steps: Vec<(usize, Step)>,
    /// Indexes into the live set of the sockets that are not in the new set
    /// (the engine's `filler` stays when `keep_filler`).
    pub removed: Vec<usize>,
    /// One message per socket refused by name; any refusal rejects the reload.
    pub rejected: Vec<String>,
}

impl Plan {
    /// Live sockets whose binding goes in the switch: the removed ones, then
    /// the replaced ones (indexes into the live set).
    pub fn unbinds(&self) -> impl Iterator<Item = usize> + '_ {
        self.removed
            .iter()
            .copied()
            .chain(self.steps.iter().filter_map(|&(_, s)| match s {
                Step::Replace(l) => Some(l),
                _ => None,
            }))
    }

    /// Sockets of the new set that get a new binding (and a new id): the
    /// added and the replacing ones, in the new set's order.
    pub fn binds(&self) -> impl Iterator<Item = usize> + '_ {
        self.steps.iter().filter_map(|&(n, s)| match s {
            Step::Replace(_) | Step::Add => Some(n),
            _ => None,
        })
    }
}

/// Classify every socket of `new` against `live` (the live sockets' current
/// settings, by name). `keep_filler`: the engine's own `filler` socket is
/// not in the config, stays, and its name cannot be taken. A name listed
/// twice in `new` (the config check refuses that) is refused here too.
pub fn plan(live: &[SocketConf], new: &[SocketConf], keep_filler: bool) -> Plan {
    let mut out = Plan::default();
    for (n, conf) in new.iter().enumerate() {
        if keep_filler && conf.name == "filler" {
            out.rejected
                .push("socket \"filler\": the name is taken by engine.filler_sockets".into());
            continue;
        }
        if new[..n].iter().any(|c| c.name == conf.name) {
            out.rejected
                .push(format!("socket {:?} is listed twice", conf.name));
            continue;
        }
        let step = match live.iter().position(|l| l.name == conf.name) {
            Some(l) => match classify(&live[l], conf) {
                Change::Same => Step::Keep(l),
                Change::InPlace => Step::InPlace(l),
                Change::Replace => Step::Replace(l),
            },
            None => Step::Add,
        };
        out.steps.push((n, step));
    }
    out.removed = live
        .iter()
        .enumerate()
        .filter(|(_, l)| !new.iter().any(|c| c.name == l.name))
        .filter(|(_, l)| !(keep_filler && l.name == "filler"))
        .map(|(i, _)| i)
        .collect();
    out
}

/// The flow-table half of a reload, checked as a whole inside one edit:
/// unbind `unbind`, then bind each of `bind` in order (removals first, so a
/// freed address can be taken by another socket in the same reload).
/// Returns, per binding, its handle or why it was refused; `Err` only if an
/// unbind fails (a handle that is not in the table). The caller publishes
/// the edit only if every binding got a handle.
pub fn rebind<V: Clone>(
    ed: &mut Editor<'_, V>,
    unbind: impl IntoIterator<Item = SocketHandle>,
    bind: impl IntoIterator<Item = (Binding, V)>,
) -> Result<Vec<Result<SocketHandle, FlowError>>, FlowError> {
    for h in unbind {
        ed.remove(h)?;
    }
    Ok(bind.into_iter().map(|(b, v)| ed.insert(b, v)).collect())
}

/// A new socket waiting for the switch, and the live one it replaces.
struct Incoming {
    prepared: Prepared,
    replaces: Option<SocketEntry>,
}

/// Files this reload created, deleted again if it is rejected.
#[derive(Default)]
struct Created(Vec<PathBuf>);

impl Created {
    /// Note `path` if it does not exist yet (it is about to be created).
    fn note(&mut self, conf: &SocketConf) {
        if let (Handler::Pcap, Some(p)) = (conf.handler, &conf.pcap_file) {
            if !p.exists() {
                self.0.push(p.clone());
            }
        }
    }

    fn remove(self) {
        for p in self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Make the live socket set equal to `new`, all or nothing. `keep_filler`:
/// the engine's own `filler` socket is not in the config and stays.
/// On refusal, returns one message per rejected socket.
pub fn apply(
    shared: &Shared,
    new: &[SocketConf],
    keep_filler: bool,
) -> Result<Outcome, Vec<String>> {
    let live = shared.sockets.load_full();
    let live_confs: Vec<SocketConf> = live.iter().map(|e| e.sock.current_conf()).collect();
    let plan = plan(&live_confs, new, keep_filler);
    let mut rejected: Vec<String> = plan.rejected.clone();
    // A socket a client process has open keeps its ring and counters until
    // the client closes it: the client reads that memory directly.
    let replaced = plan.steps.iter().filter_map(|&(_, st)| match st {
        Step::Replace(l) => Some(l),
        _ => None,
    });
    for l in plan.removed.iter().copied().chain(replaced) {
        if let ConsumedBy::Client(pid) = live[l].consumed_by {
            rejected.push(format!(
                "socket {:?} is open by client pid {pid}: it cannot be removed or replaced until the client closes it",
                live[l].sock.name()
            ));
            continue;
        }
        // A client that closed it but holds batches of it still writes its
        // shared counters and in-flight rows when it frees them.
        let mut owners = [0u32; crate::client_proto::ROWS];
        live[l].sock.row_owners(&mut owners);
        if let Some(&pid) = owners
            .iter()
            .find(|&&p| p != 0 && dpdk_sys::os::process_alive(p))
        {
            rejected.push(format!(
                "socket {:?}: client pid {pid} still holds batches of it: it cannot be removed or replaced until the client frees them",
                live[l].sock.name()
            ));
        }
    }
    let mut created = Created::default();
    let mut incoming: Vec<Incoming> = Vec::new();
    let mut in_place: Vec<(SocketEntry, SocketConf, Option<handlers::State>)> = Vec::new();
    let mut out = Outcome::default();

    // 1. Prepare: rings, handler files; nothing visible yet.
    for &(n, step) in &plan.steps {
        let conf = &new[n];
        match step {
            Step::Keep(_) => {}
            Step::InPlace(l) => {
                let cur = &live_confs[l];
                let state = if conf.pcap_file != cur.pcap_file {
                    created.note(conf);
                    match handlers::State::for_conf(conf) {
                        Ok(s) => Some(s),
                        Err(err) => {
                            rejected.push(format!("socket {:?}: {err}", conf.name));
                            continue;
                        }
                    }
                } else {
                    None
                };
                in_place.push((live[l].clone(), conf.clone(), state));
            }
            Step::Replace(_) | Step::Add => {
                let old = match step {
                    Step::Replace(l) => Some((&live[l], &live_confs[l])),
                    _ => None,
                };
                // A pcap socket replaced for another reason keeps its writer.
                let share = match old {
                    Some((e, cur))
                        if cur.handler == Handler::Pcap
                            && conf.handler == Handler::Pcap
                            && cur.pcap_file == conf.pcap_file =>
                    {
                        Some(Arc::clone(&e.sock.handler_state))
                    }
                    _ => None,
                };
                if share.is_none() {
                    created.note(conf);
                }
                match registry::prepare_socket(shared, conf.clone(), share) {
                    Ok(p) => incoming.push(Incoming {
                        prepared: p,
                        replaces: old.map(|(e, _)| e.clone()),
                    }),
                    Err(err) => rejected.push(err.to_string()),
                }
            }
        }
    }
    let removed: Vec<SocketEntry> = plan.removed.iter().map(|&l| live[l].clone()).collect();

    // 2. Bind: one flow-table edit, checked as a whole (also when a socket
    // was already rejected above, so the error names every one) and
    // published only if nothing was rejected.
    let mut refusals: Vec<String> = Vec::new();
    let res = shared.table.update_or_discard(|ed| {
        let unbind = removed
            .iter()
            .chain(incoming.iter().filter_map(|i| i.replaces.as_ref()))
            .map(|e| e.handle);
        let bind = incoming
            .iter()
            .map(|i| (i.prepared.sock.binding(), Arc::clone(&i.prepared.sock)));
        let results = rebind(ed, unbind, bind)?;
        let mut names: Vec<(u64, String)> = Vec::new();
        let mut handles = Vec::with_capacity(incoming.len());
        for (i, r) in incoming.iter().zip(results) {
            let s = &i.prepared.sock;
            match r {
                Ok(h) => {
                    names.push((h.id(), s.name().to_string()));
                    handles.push(h);
                }
                Err(err) => {
                    let extra: Vec<(u64, &str)> =
                        names.iter().map(|(i, n)| (*i, n.as_str())).collect();
                    refusals.push(format!(
                        "socket {:?}: {}",
                        s.name(),
                        registry::flow_error_text(shared, &err, &extra)
                    ));
                }
            }
        }
        Ok((rejected.is_empty() && refusals.is_empty()).then_some(handles))
    });
    rejected.extend(refusals);
    let handles = match res {
        Ok(Some(h)) => h,
        Ok(None) => Vec::new(),
        Err(err) => {
            rejected.push(format!("flow table: {err}"));
            Vec::new()
        }
    };
    if !rejected.is_empty() {
        // Prepared sockets drop here (their rings go); files they created go too.
        drop(incoming);
        drop(in_place);
        created.remove();
        return Err(rejected);
    }

    // 3. Published: consumers see the new sockets, in-place changes apply,
    // the replaced and removed ones are drained and retired.
    let mut entries = Vec::with_capacity(incoming.len());
    let mut retiring = removed;
    for (i, handle) in incoming.into_iter().zip(handles) {
        let name = i.prepared.sock.name().to_string();
        match i.replaces {
            Some(old) => {
                out.replaced.push(name);
                retiring.push(old);
            }
            None => out.added.push(name),
        }
        entries.push(SocketEntry {
            sock: i.prepared.sock,
            consumed_by: i.prepared.consumed_by,
            handle,
        });
    }
    registry::register(shared, entries);
    for (e, conf, state) in in_place {
        let before = e.sock.current_conf();
        e.sock.change_in_place(&conf, state);
        log::info!(
            "socket {} ({}) changed in place: rcvbuf {} -> {}, consume_rate_pps {} -> {}, pcap_file {:?} -> {:?}",
            e.sock.name(),
            e.sock.id,
            before.rcvbuf,
            conf.rcvbuf,
            before.consume_rate_pps,
            conf.consume_rate_pps,
            before.pcap_file,
            conf.pcap_file
        );
        out.changed.push(conf.name.clone());
    }
    out.removed = retiring
        .iter()
        .filter(|e| !out.replaced.iter().any(|n| n == e.sock.name()))
        .map(|e| e.sock.name().to_string())
        .collect();
    registry::retire(shared, &retiring);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(extra: &str) -> SocketConf {
        toml::from_str(&format!("name = \"a\"\nlocal = \"198.18.0.1:53\"\n{extra}")).unwrap()
    }

    fn named(name: &str, extra: &str) -> SocketConf {
        let local = if extra.contains("local") {
            ""
        } else {
            "local = \"198.18.0.1:53\"\n"
        };
        toml::from_str(&format!("name = \"{name}\"\n{local}{extra}")).unwrap()
    }

    #[test]
    fn plan_classifies_each_socket_and_lists_the_removed() {
        let live = vec![
            named("keep", "local = \"198.18.0.1:1\""),
            named("tune", "local = \"198.18.0.1:2\""),
            named("move", "local = \"198.18.0.1:3\""),
            named("gone", "local = \"198.18.0.1:4\""),
            named("filler", "local = \"198.18.0.1:5\""),
        ];
        let new = vec![
            named("new", "local = \"198.18.0.1:6\""),
            named("move", "local = \"198.18.0.1:7\""),
            named("tune", "local = \"198.18.0.1:2\"\nrcvbuf = 65536"),
            named("keep", "local = \"198.18.0.1:1\""),
        ];
        let p = plan(&live, &new, true);
        assert_eq!(
            classify(
                &named("g", "local = \"0.0.0.0:9\""),
                &named("g", "local = \"0.0.0.0:9\"\nmulticast = \"239.1.2.3\"")
            ),
            Change::Replace,
            "joining a group replaces the socket"
        );
        assert_eq!(
            p.steps,
            vec![
                (0, Step::Add),
                (1, Step::Replace(2)),
                (2, Step::InPlace(1)),
                (3, Step::Keep(0))
            ]
        );
        assert_eq!(p.removed, vec![3], "filler stays with keep_filler");
        assert!(p.rejected.is_empty());
        assert_eq!(p.unbinds().collect::<Vec<_>>(), vec![3, 2]);
        assert_eq!(p.binds().collect::<Vec<_>>(), vec![0, 1]);
        // Without filler sockets, "filler" is an ordinary name.
        assert_eq!(plan(&live, &new, false).removed, vec![3, 4]);
    }

    #[test]
    fn plan_refuses_the_filler_name_and_a_name_listed_twice() {
        let live = vec![named("a", "")];
        let new = vec![
            named("filler", "local = \"198.18.0.1:9\""),
            named("a", ""),
            named("a", "local = \"198.18.0.1:8\""),
        ];
        let p = plan(&live, &new, true);
        assert_eq!(p.steps, vec![(1, Step::Keep(0))]);
        assert_eq!(p.rejected.len(), 2, "{:?}", p.rejected);
        assert!(p.rejected[0].contains("filler_sockets"));
        assert!(p.rejected[1].contains("listed twice"));
        let p = plan(&live, &new[..1], false);
        assert_eq!(p.steps, vec![(0, Step::Add)]);
        assert_eq!(p.removed, vec![0]);
    }

    #[test]
    fn rebind_frees_addresses_before_binding_and_reports_each_refusal() {
        use crate::flow_table::FlowTable;
        let a = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let t: FlowTable<u32> = FlowTable::new();
        let h1 = t.insert(Binding::bound(a("198.18.0.1:53")), 1).unwrap();
        t.insert(Binding::bound(a("198.18.0.1:54")), 2).unwrap();
        // Socket 3 takes 1's address in the same edit that unbinds 1; 4 collides with 2.
        let res = t
            .update_or_discard(|ed| {
                let r = rebind(
                    ed,
                    [h1],
                    [
                        (Binding::bound(a("198.18.0.1:53")), 3),
                        (Binding::bound(a("198.18.0.1:54")), 4),
                    ],
                )?;
                assert!(r[0].is_ok());
                assert!(matches!(r[1], Err(FlowError::AddrInUse { .. })));
                Ok(None::<()>)
            })
            .unwrap();
        assert_eq!(res, None);
        // Discarded: the table is as it was.
        let snap = t.snapshot();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(
            snap.lookup(ip("198.18.0.9"), 1, ip("198.18.0.1"), 53),
            Some(&1)
        );
        // A stale handle fails the whole edit.
        t.remove(h1).unwrap();
        assert!(t
            .update_or_discard(|ed| rebind(ed, [h1], []).map(Some))
            .is_err());
    }

    #[test]
    fn edits_outside_the_sockets_are_named() {
        let base = "[eal]\nlcores = \"0,1\"\n[[port]]\nname = \"net_null0\"\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n";
        let p = std::path::Path::new("t.toml");
        let old = Config::parse_at(base, p).unwrap();
        assert!(static_edits(
            &old,
            &Config::parse_at(
                &format!("{base}[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:1\"\n"),
                p
            )
            .unwrap()
        )
        .is_empty());
        let new = Config::parse_at(
            &format!(
                "{}[engine]\nburst = 16\n[mempool]\nmbufs = 1023\n",
                base.replace("0,1", "0-1")
            ),
            p,
        )
        .unwrap();
        assert_eq!(
            static_edits(&old, &new),
            vec!["[eal]", "[engine]", "[mempool]"]
        );
        let new = Config::parse_at(&base.replace("id = 1", "id = 2"), p).unwrap();
        assert_eq!(static_edits(&old, &new), vec!["[[lcore]]"]);
    }

    #[test]
    fn tunables_change_in_place_everything_else_replaces() {
        let a = conf("");
        assert_eq!(classify(&a, &conf("")), Change::Same);
        assert_eq!(classify(&a, &conf("rcvbuf = 65536")), Change::InPlace);
        assert_eq!(
            classify(&a, &conf("consume_rate_pps = 10")),
            Change::InPlace
        );
        let mut moved = a.clone();
        moved.local = "198.18.0.1:54".parse().unwrap();
        assert_eq!(classify(&a, &moved), Change::Replace);
        assert_eq!(classify(&a, &conf("reuseport = true")), Change::Replace);
        assert_eq!(classify(&a, &conf("ring_size = 64")), Change::Replace);
        assert_eq!(classify(&a, &conf("handler = \"echo\"")), Change::Replace);
        let p = conf("handler = \"pcap\"\npcap_file = \"/tmp/a.pcap\"");
        assert_eq!(
            classify(&p, &conf("handler = \"pcap\"\npcap_file = \"/tmp/b.pcap\"")),
            Change::InPlace
        );
        assert_eq!(
            classify(
                &p,
                &conf("handler = \"pcap\"\npcap_file = \"/tmp/a.pcap\"\npcap_limit_bytes = 1000")
            ),
            Change::InPlace
        );
    }
}
