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
//! reuseport, handler, ring size) replaces it: the new socket is bound in
//! the same switch that unbinds the old one, and the old one is drained and
//! retired as a removed socket. A replaced `pcap` socket that keeps its file
//! shares its writer with its successor, so the file is neither truncated
//! nor interleaved.
//!
//! `[eal]`, `[engine]`, `[mempool]`, `[small_cache]`, `[[port]]` and
//! `[[lcore]]` cannot change while running: edits there are logged as not
//! applied.
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, Handler, SocketConf};
use crate::engine::{self, Engine, Prepared, Shared, SocketEntry};
use crate::handlers;

/// What a successful reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub removed: Vec<String>,
    pub added: Vec<String>,
    pub replaced: Vec<String>,
    pub changed: Vec<String>,
}

pub fn on_sighup(engine: &Engine) {
    let Some(path) = engine.config_path() else {
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
    let fixed = static_edits(engine.config(), &new);
    if !fixed.is_empty() {
        log::warn!(
            "SIGHUP: edits to {} cannot be applied while running and are ignored (restart to apply them)",
            fixed.join(", ")
        );
    }
    let keep_filler = engine.config().engine.filler_sockets > 0;
    match apply(engine.shared(), &new.sockets, keep_filler) {
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
        && live.ring_size == new.ring_size;
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
    let mut rejected: Vec<String> = Vec::new();
    let mut created = Created::default();
    let mut incoming: Vec<Incoming> = Vec::new();
    let mut in_place: Vec<(SocketEntry, SocketConf, Option<handlers::State>)> = Vec::new();
    let mut out = Outcome::default();

    // 1. Prepare: rings, handler files; nothing visible yet.
    for conf in new {
        if keep_filler && conf.name == "filler" {
            rejected.push("socket \"filler\": the name is taken by engine.filler_sockets".into());
            continue;
        }
        let old = live.iter().find(|e| e.sock.name() == conf.name);
        let (change, cur) = match old {
            Some(e) => {
                let cur = e.sock.current_conf();
                (classify(&cur, conf), Some(cur))
            }
            None => (Change::Replace, None),
        };
        match (change, old, cur) {
            (Change::Same, _, _) => {}
            (Change::InPlace, Some(e), Some(cur)) => {
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
                in_place.push((e.clone(), conf.clone(), state));
            }
            (_, old, cur) => {
                // A pcap socket replaced for another reason keeps its writer.
                let share = match (old, cur) {
                    (Some(e), Some(cur))
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
                match engine::prepare_socket(shared, conf.clone(), share) {
                    Ok(p) => incoming.push(Incoming {
                        prepared: p,
                        replaces: old.cloned(),
                    }),
                    Err(err) => rejected.push(err),
                }
            }
        }
    }
    let removed: Vec<SocketEntry> = live
        .iter()
        .filter(|e| !new.iter().any(|c| c.name == e.sock.name()))
        .filter(|e| !(keep_filler && e.sock.name() == "filler"))
        .cloned()
        .collect();

    // 2. Bind: one flow-table edit, checked as a whole (also when a socket
    // was already rejected above, so the error names every one) and
    // published only if nothing was rejected.
    let mut names: Vec<(u64, String)> = Vec::new();
    let mut refusals: Vec<String> = Vec::new();
    let res = shared.table.update_or_discard(|ed| {
        for e in removed
            .iter()
            .chain(incoming.iter().filter_map(|i| i.replaces.as_ref()))
        {
            ed.remove(e.handle)?;
        }
        let mut handles = Vec::with_capacity(incoming.len());
        for i in &incoming {
            let s = &i.prepared.sock;
            match ed.insert(s.binding(), Arc::clone(s)) {
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
                        engine::flow_error_text(shared, &err, &extra)
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
            drainer: i.prepared.drainer,
            handle,
        });
    }
    engine::register(shared, entries);
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
    engine::retire(shared, &retiring);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(extra: &str) -> SocketConf {
        toml::from_str(&format!("name = \"a\"\nlocal = \"198.18.0.1:53\"\n{extra}")).unwrap()
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
