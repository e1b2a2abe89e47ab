//! The socket registry while the engine runs: adding and removing
//! sockets (flow table first, then the RCU-published list consumers and
//! stats read), and retiring them without losing a datagram.
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::consumer;
use super::report::socket_summary;
use super::shared::{ConsumedBy, Shared, SocketEntry};
use crate::config::{Handler, SocketConf};
use crate::flow_table::FlowError;
use crate::socket::{Socket, SocketError};

/// Why a socket could not be added or removed. The texts are the ones the
/// log and the API have always shown.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("socket {0:?} already exists")]
    Exists(String),
    #[error("no socket named {0:?}")]
    NoSuchSocket(String),
    /// The ring or the handler state could not be made.
    #[error(transparent)]
    Create(#[from] SocketError),
    /// The flow table refused the binding; `why` names the socket it collides with.
    #[error("socket {name:?}: {why}")]
    Bind { name: String, why: String },
    #[error(transparent)]
    Unbind(FlowError),
    /// `engine.filler_sockets` (`bench::filler`): its socket's config.
    #[error("{0}")]
    FillerConf(String),
    /// `engine.filler_sockets`: the flow table refused the extra bindings.
    #[error("filler sockets: {0}")]
    Filler(FlowError),
}

/// Which lcore consumes a socket: a consumer lcore that names it, else one
/// with an empty list (round-robin), else the main lcore; `none` handlers
/// are left to the library API or another process.
pub(crate) fn consumer_for(shared: &Shared, conf: &SocketConf, id: u32) -> ConsumedBy {
    if conf.handler == Handler::None {
        return ConsumedBy::External;
    }
    if let Some(i) = shared
        .consumers
        .iter()
        .position(|c| c.sockets.iter().any(|n| n == &conf.name))
    {
        return ConsumedBy::Lcore(i);
    }
    let open: Vec<usize> = shared
        .consumers
        .iter()
        .enumerate()
        .filter(|(_, c)| c.sockets.is_empty())
        .map(|(i, _)| i)
        .collect();
    if open.is_empty() {
        ConsumedBy::Main
    } else {
        ConsumedBy::Lcore(open[id as usize % open.len()])
    }
}

/// A socket created but not published: its ring and handler state exist,
/// RX lcores and consumers do not see it yet. Dropping it frees the ring.
pub struct Prepared {
    pub sock: Arc<Socket>,
    pub consumed_by: ConsumedBy,
}

/// First half of adding a socket: a fresh id, the ring, the handler state
/// (the pcap file is created here; with `handler`, that state is shared
/// instead). Nothing live changes.
pub fn prepare_socket(
    shared: &Shared,
    conf: SocketConf,
    handler: Option<Arc<Mutex<crate::handlers::State>>>,
) -> Result<Prepared, RegistryError> {
    let id = {
        let mut n = shared
            .next_socket_id
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *n += 1;
        *n
    };
    let consumed_by = consumer_for(shared, &conf, id);
    let sock = Socket::with_handler(id, conf, shared.nodes, shared.numa, handler)?;
    Ok(Prepared {
        sock: Arc::new(sock),
        consumed_by,
    })
}

/// A flow-table refusal in words, naming the other socket by name (looked
/// up in `extra`, then among the live sockets).
pub fn flow_error_text(shared: &Shared, e: &FlowError, extra: &[(u64, &str)]) -> String {
    match e {
        FlowError::AddrInUse { new, existing } => {
            let id = existing.id();
            let name = extra
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, n)| n.to_string())
                .or_else(|| {
                    shared
                        .sockets
                        .load()
                        .iter()
                        .find(|e| e.handle.id() == id)
                        .map(|e| e.sock.name().to_string())
                });
            let who = match name {
                Some(n) => format!("socket {n:?} ({})", existing.binding()),
                None => existing.to_string(),
            };
            let hint = if new.remote.is_none() && existing.binding().remote.is_none() {
                ": choose another local address or port, or set reuseport = true on both"
            } else {
                ": choose another local address or port"
            };
            format!("address in use: {new} collides with {who}{hint}")
        }
        other => other.to_string(),
    }
}

/// Second half: make prepared sockets visible to consumers and stats (the
/// caller published them in the flow table first).
pub(crate) fn register(shared: &Shared, entries: Vec<SocketEntry>) {
    if entries.is_empty() {
        return;
    }
    let mut v: Vec<SocketEntry> = shared.sockets.load().as_ref().clone();
    for e in entries {
        log::info!(
            "socket {} ({}) bound {} handler {:?} drained by {:?}",
            e.sock.name(),
            e.sock.id,
            e.sock.binding(),
            e.sock.handler(),
            e.consumed_by
        );
        v.push(e);
    }
    set_registry(shared, v);
}

/// Every store to the socket registry while running goes through here;
/// the generation bump after it tells pollers (`consumer::Consumer`) to re-read.
pub(crate) fn set_registry(shared: &Shared, v: Vec<SocketEntry>) {
    shared.mcast.update(&v);
    shared.sockets.store(Arc::new(v));
    shared.sockets_gen.fetch_add(1, Ordering::Release);
}

/// Create a socket, publish it in the flow table and the registry.
pub fn add_socket(shared: &Shared, conf: SocketConf) -> Result<Arc<Socket>, RegistryError> {
    add_socket_with(shared, conf, |_| {})
}

/// As [`add_socket`], with `before_publish` run on the new socket before
/// any RX lcore can see it (what must happen-before their first delivery:
/// `Socket::expect_reader_tasks`).
pub fn add_socket_with(
    shared: &Shared,
    conf: SocketConf,
    before_publish: impl FnOnce(&Socket),
) -> Result<Arc<Socket>, RegistryError> {
    if shared
        .sockets
        .load()
        .iter()
        .any(|e| e.sock.name() == conf.name)
    {
        return Err(RegistryError::Exists(conf.name));
    }
    let p = prepare_socket(shared, conf, None)?;
    before_publish(&p.sock);
    let handle = shared
        .table
        .insert(p.sock.binding(), Arc::clone(&p.sock))
        .map_err(|e| RegistryError::Bind {
            name: p.sock.name().to_string(),
            why: flow_error_text(shared, &e, &[]),
        })?;
    let sock = Arc::clone(&p.sock);
    register(
        shared,
        vec![SocketEntry {
            sock: p.sock,
            consumed_by: p.consumed_by,
            handle,
        }],
    );
    Ok(sock)
}

/// Remove a socket while RX runs. Order: unpublish, close (late producers
/// drop with reason `closed`), wait until every RX lcore passed a quiescent
/// point (no one still holds the old table or is inside enqueue), drain the
/// stages, let the consumer empty the ring, then forget it.
pub fn remove_socket(shared: &Shared, name: &str) -> Result<(), RegistryError> {
    let entry = shared
        .sockets
        .load()
        .iter()
        .find(|e| e.sock.name() == name)
        .cloned()
        .ok_or_else(|| RegistryError::NoSuchSocket(name.to_string()))?;
    shared
        .table
        .remove(entry.handle)
        .map_err(RegistryError::Unbind)?;
    retire(shared, &[entry]);
    Ok(())
}

/// Retire sockets the flow table no longer holds (the caller published
/// that): close them, wait once for every RX lcore to pass a quiescent
/// point, drain their stages, give consumers a moment to empty the rings,
/// then unregister them (by identity: a replacement may carry the same
/// name), free what is left and keep their books.
pub(crate) fn retire(shared: &Shared, entries: &[SocketEntry]) {
    if entries.is_empty() {
        return;
    }
    for e in entries {
        e.sock.rx.close();
    }
    wait_quiescent(shared);
    for e in entries {
        e.sock.free_stages();
    }
    // Give the consumers a moment to take what is in the rings; the rest is freed and counted.
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        let waiting: Vec<&SocketEntry> = entries
            .iter()
            .filter(|e| {
                !matches!(e.consumed_by, ConsumedBy::External | ConsumedBy::Client(_))
                    && e.sock.ring.count() > 0
            })
            .collect();
        if waiting.is_empty() || Instant::now() >= deadline {
            break;
        }
        let mut main_consumed = false;
        for e in waiting.iter().filter(|e| e.consumed_by == ConsumedBy::Main) {
            consumer::consume_socket(shared, e);
            main_consumed = true;
        }
        if !main_consumed {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let v: Vec<SocketEntry> = shared
        .sockets
        .load()
        .iter()
        .filter(|e| !entries.iter().any(|r| Arc::ptr_eq(&r.sock, &e.sock)))
        .cloned()
        .collect();
    set_registry(shared, v);
    // A consumer still holding the old registry may dequeue concurrently:
    // the ring is multi-consumer, so both sides are safe and each datagram
    // is counted once (consumed, or freed at close).
    for e in entries {
        e.sock.free_ring();
        crate::summary::retire(
            &mut shared.removed.lock().unwrap_or_else(|p| p.into_inner()),
            socket_summary(e, true),
        );
        log::info!("socket {} ({}) removed", e.sock.name(), e.sock.id);
    }
}

/// Wait until every RX lcore has passed a quiescent point (or stopped).
/// Called from an RX lcore's task (`lcore_task`), that lcore is at one.
fn wait_quiescent(shared: &Shared) {
    let marks: Vec<u64> = shared.rx.iter().map(|l| l.quiescent.get()).collect();
    let me = super::lcore_task::on_rx_lcore();
    let deadline = Instant::now() + Duration::from_secs(5);
    while shared
        .rx
        .iter()
        .zip(&marks)
        .enumerate()
        .any(|(i, (l, &m))| Some(i) != me && l.quiescent.get() == m)
        && !shared.stop.load(Ordering::SeqCst)
        && Instant::now() < deadline
    {
        std::hint::spin_loop();
    }
}
