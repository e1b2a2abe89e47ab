//! Out-of-process clients (`udpdemux-client`, issue 16): the engine's side
//! of `client_proto`. The EAL's IPC thread only queues a request; the main
//! lcore, which alone changes the socket registry (as for reloads), serves
//! it between polls, replies, and folds what clients freed into the books.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dpdk_sys::mp::{self, MpAction};

use super::registry;
use crate::client_proto::ROWS;
use super::shared::{ConsumedBy, Shared, SocketEntry};
use crate::client_proto::{self, Opened, Refusal, Request, SocketOptions, SocketStats};
use std::os::fd::AsFd;
use crate::meta;

/// How long an open waits for the consumer lcores to let go of the ring.
const HANDOVER_WAIT: Duration = Duration::from_secs(1);

/// Register the engine's IPC action. `None` (logged) when the EAL shares no
/// memory (`eal.no_huge`: `--no-shconf` disables DPDK's IPC) or refuses.
///
/// `runtime_dir` is the engine's EAL runtime directory, where clients lock
/// their lcore slots (`client_proto::slot_lock_path`).
pub fn register(shared: &Arc<Shared>, runtime_dir: Option<&std::path::Path>) -> Option<MpAction> {
    if let Some(d) = runtime_dir {
        let _ = shared.clients.runtime_dir.set(d.to_path_buf());
    }
    let s = Arc::clone(shared);
    match mp::register(client_proto::ACTION, move |req| {
        let c = &s.clients;
        let mut q = c.requests.lock().unwrap_or_else(|p| p.into_inner());
        q.push(req);
        c.pending.store(true, Ordering::Release);
    }) {
        Ok(a) => Some(a),
        Err(e) => {
            log::info!("no client IPC ({e}): out-of-process clients cannot open sockets");
            None
        }
    }
}

/// The main lcore's share, once per pass of its loop: fold every socket's
/// client counters (two loads each when nothing changed), then answer the
/// queued requests (one flag load when there are none).
pub fn serve(shared: &Shared) {
    for e in shared.sockets.load().iter() {
        e.sock.fold_client();
    }
    if !shared.clients.pending.load(Ordering::Acquire) {
        return;
    }
    let reqs = {
        let mut q = shared
            .clients
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        shared.clients.pending.store(false, Ordering::Release);
        std::mem::take(&mut *q)
    };
    for r in reqs {
        let (text, fd) = answer(shared, Request::decode(r.param()));
        let line = format!(
            "client request {:?} from {}: {text}",
            String::from_utf8_lossy(r.param()),
            r.peer()
        );
        // A monitoring client may ask for stats many times a second.
        if fd.is_some() {
            log::debug!("{line}");
        } else {
            log::info!("{line}");
        }
        let fds: Vec<std::os::fd::BorrowedFd<'_>> = fd.iter().map(|f| f.as_fd()).collect();
        if let Err(e) = r.reply_with_fds(text.as_bytes(), &fds) {
            log::warn!("client reply: {e}");
        }
        // The memfd (if any) closes here: the client has its own descriptor.
    }
}

/// The answer to `stats`: the reply text and the sealed memfd that holds
/// the report (`client_proto`: the counters do not fit the reply).
fn stats_answer(shared: &Shared, name: &str) -> (String, Option<std::os::fd::OwnedFd>) {
    let st = match socket_stats(shared, name) {
        Ok(st) => st,
        Err((k, e)) => return (client_proto::reply_err(k, &e), None),
    };
    let text = st.encode();
    match dpdk_sys::os::sealed_memfd("udpdemux-stats", text.as_bytes()) {
        Ok(fd) => (client_proto::reply_stats(text.len()), Some(fd)),
        Err(e) => (
            client_proto::reply_err(
                Refusal::Other,
                &format!("cannot make the stats report's memfd: {e}"),
            ),
            None,
        ),
    }
}

/// Socket `name`'s counters, read as the exit JSON and telemetry read
/// them (`report::socket_summary`), plus its ring's fill. For a client's
/// `stats` and the in-process `api::stats`; callable from any thread.
pub fn socket_stats(shared: &Shared, name: &str) -> Result<SocketStats, Refused> {
    let e = find(shared, name)?;
    let k = super::report::socket_summary(&e, false);
    let drop = |r: crate::receive::accounting::DropReason| k.drops.get(r.as_str()).copied().unwrap_or(0);
    use crate::receive::accounting::DropReason as R;
    Ok(SocketStats {
        id: k.id,
        local: e.sock.conf.local,
        handler: k.handler,
        client_pid: match e.consumed_by {
            ConsumedBy::Client(p) => p,
            _ => 0,
        },
        offered: k.offered,
        delivered: k.delivered,
        consumed: k.consumed,
        consumed_bytes: k.consumed_bytes,
        client_consumed: k.client_consumed,
        freed_at_close: k.freed_at_close,
        reclaimed_from_client: k.reclaimed_from_client,
        lost_in_client_free: k.lost_in_client_free,
        drop_rcvbuf_full: drop(R::RcvbufFull),
        drop_rcvbuf_full_at_drain: drop(R::RcvbufFullAtDrain),
        drop_ring_full: drop(R::RingFull),
        drop_closed: drop(R::Closed),
        rcvbuf: k.rcvbuf,
        rmem: k.rmem,
        rmem_high_water: k.rmem_high_water,
        condensed: k.condensed,
        ring_count: u64::from(e.sock.ring.count()),
        ring_size: u64::from(e.sock.ring.capacity()),
    })
}

/// The reply to a request: its text, and the descriptor it carries (a
/// `stats` report).
fn answer(
    shared: &Shared,
    req: Result<Request, String>,
) -> (String, Option<std::os::fd::OwnedFd>) {
    let text = match req {
        Err(e) => client_proto::reply_err(Refusal::Other, &e),
        Ok(Request::Stats { socket, .. }) => return stats_answer(shared, &socket),
        Ok(Request::Open { socket, pid }) => match open(shared, &socket, pid) {
            Ok(o) => client_proto::reply_ok(Some(&o)),
            Err((k, e)) => client_proto::reply_err(k, &e),
        },
        Ok(Request::Close { socket, pid }) => match close(shared, &socket, pid) {
            Ok(()) => client_proto::reply_ok(None),
            Err((k, e)) => client_proto::reply_err(k, &e),
        },
        Ok(Request::Bind { opts, pid }) => match bind(shared, opts, pid) {
            Ok(o) => client_proto::reply_ok(Some(&o)),
            Err((k, e)) => client_proto::reply_err(k, &e),
        },
        Ok(Request::Unbind { socket, pid }) => match unbind(shared, &socket, pid) {
            Ok(()) => client_proto::reply_ok(None),
            Err((k, e)) => client_proto::reply_err(k, &e),
        },
        Ok(Request::Attach { lcore, pid }) => {
            attach(shared, lcore, pid);
            client_proto::reply_ok(None)
        }
        Ok(Request::Detach { pid }) => {
            detach(shared, pid);
            client_proto::reply_ok(None)
        }
    };
    (text, None)
}

fn attached(shared: &Shared) -> std::sync::MutexGuard<'_, Vec<super::shared::AttachedClient>> {
    shared
        .clients
        .attached
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Client `pid` took lcore id `lcore` (its slot locked, no mempool touched
/// yet: it waits for this reply). A client recorded on that lcore before
/// must be gone (it let go of the slot): it is reaped now if it was not,
/// and its cache settled before the new client may use it.
fn attach(shared: &Shared, lcore: u32, pid: u32) {
    let old = attached(shared)
        .iter()
        .find(|a| a.lcore == lcore && a.pid != pid)
        .copied();
    if let Some(old) = old {
        if old.dead.is_none() {
            if dpdk_sys::os::process_alive(old.pid) {
                log::warn!("client pid {pid} took lcore {lcore} from client pid {} (alive, but it let go of the slot)", old.pid);
            } else {
                reap(shared, old.pid);
            }
        }
        // Listed still: its cache is to settle, and the new client, which
        // holds the slot, waits for this reply: settle it here.
        let left = attached(shared)
            .iter()
            .find(|a| a.lcore == lcore && a.pid == old.pid)
            .copied();
        if let Some(a) = left {
            settle_cache(shared, a.pid, lcore, a.dead.unwrap_or(false), false);
            attached(shared).retain(|x| !(x.lcore == lcore && x.pid == a.pid));
        }
    }
    attached(shared).push(super::shared::AttachedClient {
        pid,
        lcore,
        dead: None,
    });
    log::info!("client pid {pid} attached on lcore {lcore}");
}

/// Client `pid` flushed its caches and leaves.
fn detach(shared: &Shared, pid: u32) {
    attached(shared).retain(|a| a.pid != pid || a.dead.is_some());
    log::info!("client pid {pid} detached");
}

/// Settle lcore `lcore`'s mempool caches after its client `pid` died:
/// give what they hold back to the pools, or forget it (`discard`: the
/// client died while changing them). With `lock`, under the slot's lock
/// (no new client can take the lcore meanwhile): `false` when another
/// process holds it (the dead one's descriptors not closed yet, or a new
/// client, whose `attach` then settles it). Without, the caller knows no
/// process uses the lcore (a new client waits for its attach reply).
fn settle_cache(shared: &Shared, pid: u32, lcore: u32, discard: bool, lock: bool) -> bool {
    let _slot = if lock {
        let Some(dir) = shared.clients.runtime_dir.get() else {
            return true;
        };
        let path = client_proto::slot_lock_path(dir, lcore);
        let f = match std::fs::OpenOptions::new().read(true).open(&path) {
            Ok(f) => f,
            Err(e) => {
                log::warn!("client pid {pid}: cannot open its lcore slot {}: {e}; its lcore {lcore} cache is left as it is", path.display());
                return true;
            }
        };
        match dpdk_sys::os::try_lock_exclusive(&f) {
            Ok(()) => Some(f),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => return false,
            Err(e) => {
                log::warn!("client pid {pid}: cannot lock its lcore slot {}: {e}; its lcore {lcore} cache is left as it is", path.display());
                return true;
            }
        }
    } else {
        None
    };
    let op = if discard {
        dpdk_sys::mempool::CacheOp::Discard
    } else {
        dpdk_sys::mempool::CacheOp::Flush
    };
    // SAFETY: no process uses lcore `lcore`'s caches: its client is dead,
    // and either this thread holds the slot's lock (no new client can take
    // the lcore id) or the new client that holds it waits for this
    // thread's reply before it touches a mempool (`client_proto`).
    let n = unsafe { dpdk_sys::mempool::cache_walk(lcore, op) };
    let c = &shared.clients;
    if discard {
        c.cache_discarded.fetch_add(n, Ordering::Relaxed);
        if n > 0 {
            log::warn!("client pid {pid} died changing its lcore {lcore} caches: {n} object(s) in them forgotten (at most that many lost to the pools)");
        }
    } else {
        c.cache_flushed.fetch_add(n, Ordering::Relaxed);
        log::info!("client pid {pid} (dead): {n} object(s) of its lcore {lcore} caches given back to the pools");
    }
    true
}

/// Why a request was refused: the reply's kind and reason.
pub type Refused = (Refusal, String);

fn find(shared: &Shared, name: &str) -> Result<SocketEntry, Refused> {
    let socks = shared.sockets.load();
    socks
        .iter()
        .find(|e| e.sock.name() == name)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<&str> = socks.iter().map(|e| e.sock.name()).collect();
            (
                Refusal::NoSuchSocket,
                format!(
                    "no socket named {name:?} in this engine (its sockets: {})",
                    names.join(", ")
                ),
            )
        })
}

/// The registry with `name`'s entry consumed by `by`; its generation.
fn reassign(shared: &Shared, e: &SocketEntry, by: ConsumedBy) -> u64 {
    let v: Vec<SocketEntry> = shared
        .sockets
        .load()
        .iter()
        .map(|x| {
            let mut x = x.clone();
            if Arc::ptr_eq(&x.sock, &e.sock) {
                x.consumed_by = by;
            }
            x
        })
        .collect();
    registry::set_registry(shared, v);
    shared.sockets_gen.load(Ordering::Acquire)
}

/// Give socket `name` to client `pid`: from the reply on, only that client
/// reads its delivery ring.
fn open(shared: &Shared, name: &str, pid: u32) -> Result<Opened, Refused> {
    let e = find(shared, name)?;
    if let ConsumedBy::Client(p) = e.consumed_by {
        return Err((
            Refusal::Busy,
            format!("socket {name:?} is already open by client pid {p}: one consumer per socket, close it there first"),
        ));
    }
    // A client that closed the socket but still holds batches of it writes
    // its counters and rows until it frees them: one writer at a time.
    let mut owners = [0u32; ROWS];
    e.sock.row_owners(&mut owners);
    if let Some(&p) = owners.iter().find(|&&p| p != 0 && p != pid) {
        if dpdk_sys::os::process_alive(p) {
            return Err((
                Refusal::Busy,
                format!("socket {name:?}: client pid {p} still holds batches of it (closed, not freed): free them there first"),
            ));
        }
        reap(shared, p);
    }
    if shared.mode.is_pipeline_floor() || shared.floor_mark != 0 {
        return Err((
            Refusal::Other,
            "the engine runs --floor pipeline or --alternate-floor: its rings hold uncharged mbufs without metadata".into(),
        ));
    }
    let zone = e.sock.client_zone().map_err(|err| {
        (
            Refusal::Other,
            format!("cannot reserve the socket's shared counters: {err}"),
        )
    })?;
    let zone = zone.name();
    e.sock.set_client_owner(pid);
    let g = reassign(shared, &e, ConsumedBy::Client(pid));
    shared.clients.open.fetch_add(1, Ordering::Relaxed);
    // The main lcore's own consumer re-reads the registry at its next poll
    // (this thread); consumer lcores say when they have.
    let deadline = Instant::now() + HANDOVER_WAIT;
    while shared.consumers.iter().any(|c| c.seen_gen.get() < g)
        && !shared.consumers_stop.load(Ordering::SeqCst)
    {
        if Instant::now() >= deadline {
            let _ = close(shared, name, pid);
            return Err((
                Refusal::Other,
                "the engine's consumer lcores did not let go of the socket within 1 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    // Pairs with the consumer lcores' Release fence before `seen_gen`: their
    // last dequeues from this ring happen before the client's first.
    std::sync::atomic::fence(Ordering::Acquire);
    Ok(Opened {
        id: e.sock.id,
        ring: meta::delivery_ring_name(e.sock.id),
        zone,
    })
}

/// Give socket `name` back from client `pid` to the consumer the engine
/// gave it at creation.
fn close(shared: &Shared, name: &str, pid: u32) -> Result<(), Refused> {
    let e = find(shared, name)?;
    match e.consumed_by {
        ConsumedBy::Client(p) if p == pid => {}
        ConsumedBy::Client(p) => {
            return Err((
                Refusal::Busy,
                format!("socket {name:?} is open by client pid {p}, not {pid}"),
            ))
        }
        _ => {
            return Err((
                Refusal::Other,
                format!("socket {name:?} is not open by a client"),
            ))
        }
    }
    if e.sock.bound_by_client.load(Ordering::Relaxed) == pid {
        return Err((
            Refusal::Other,
            format!("socket {name:?} was bound by client pid {pid}: unbind it"),
        ));
    }
    e.sock.fold_client();
    let back = registry::consumer_for(shared, &e.sock.conf, e.sock.id);
    reassign(shared, &e, back);
    e.sock.set_client_owner(0);
    shared.clients.open.fetch_sub(1, Ordering::Relaxed);
    Ok(())
}

/// Bind a new socket for client `pid`: the options of a `[[socket]]`
/// table, refused by the rules `udpdemux check` applies to one
/// (`config::socket_problems`) and by the flow table (an address in use);
/// then opened by that client as a configured socket is.
fn bind(shared: &Shared, o: SocketOptions, pid: u32) -> Result<Opened, Refused> {
    let name = o.name.clone();
    let conf = crate::api::socket_conf(o)
    .map_err(|e| (Refusal::Other, e))?;
    let mut problems = Vec::new();
    crate::config::socket_problems(&conf, &mut problems);
    if !problems.is_empty() {
        return Err((Refusal::Other, problems.join("; ")));
    }
    if shared.sockets.load().len() >= crate::config::MAX_SOCKETS {
        return Err((
            Refusal::Other,
            format!(
                "the engine has {} sockets already, the most it takes",
                crate::config::MAX_SOCKETS
            ),
        ));
    }
    let sock = registry::add_socket(shared, conf).map_err(|e| {
        let kind = match e {
            registry::RegistryError::Exists(_) => Refusal::Busy,
            _ => Refusal::Other,
        };
        (kind, e.to_string())
    })?;
    sock.bound_by_client.store(pid, Ordering::Relaxed);
    let opened = open(shared, &name, pid);
    if opened.is_err() {
        // An open that timed out waiting for the hand-over left it the
        // client's (its close refuses a bound socket): remove counts that.
        let removed = match find(shared, &name) {
            Ok(e) if e.consumed_by == ConsumedBy::Client(pid) => remove(shared, &e, pid),
            _ => registry::remove_socket(shared, &name)
                .map_err(|err| (Refusal::Other, err.to_string())),
        };
        if let Err((_, e)) = removed {
            log::warn!("removing socket {name:?} after a failed bind: {e}");
        }
    }
    opened
}

/// Remove socket `name`, which client `pid` bound, as `api::close` does:
/// late producers count `closed`, what is left in its ring is freed and
/// counted `freed_at_close`, and its books are kept among the removed.
/// Refused while the client still holds batches of it (their memory, and
/// the socket's shared counters they are released into, go with it).
fn unbind(shared: &Shared, name: &str, pid: u32) -> Result<(), Refused> {
    let e = find(shared, name)?;
    if e.sock.bound_by_client.load(Ordering::Relaxed) != pid {
        return Err((
            Refusal::Other,
            format!("socket {name:?} was not bound by client pid {pid}: close it instead"),
        ));
    }
    if e.consumed_by != ConsumedBy::Client(pid) {
        return Err((
            Refusal::Other,
            format!("socket {name:?} is not open by client pid {pid}"),
        ));
    }
    let mut owners = [0u32; ROWS];
    e.sock.row_owners(&mut owners);
    if owners.contains(&pid) && dpdk_sys::os::process_alive(pid) {
        return Err((
            Refusal::Busy,
            format!("client pid {pid} still holds batches of socket {name:?}: clear or drop them, then unbind"),
        ));
    }
    remove(shared, &e, pid)
}

/// The removal half of [`unbind`] (also a dead binder's).
fn remove(shared: &Shared, e: &SocketEntry, pid: u32) -> Result<(), Refused> {
    e.sock.fold_client();
    registry::remove_socket(shared, e.sock.name()).map_err(|err| (Refusal::Other, err.to_string()))?;
    e.sock.set_client_owner(0);
    shared.clients.open.fetch_sub(1, Ordering::Relaxed);
    log::info!("socket {} unbound by client pid {pid}", e.sock.name());
    Ok(())
}

/// Client pids the liveness check looks at, at most (more are looked at
/// on the next check).
const MAX_PIDS: usize = 128;

/// The main lcore's liveness check (every `client_proto::LIVENESS_MS`):
/// every pid that has a socket open or holds rows of a socket's in-flight
/// table is looked up (`kill(pid, 0)` and its `/proc` state, no heap
/// allocation); a dead one is reaped. Sockets without a client zone cost
/// one load each.
pub fn check_liveness(shared: &Shared) {
    let mut pids = [0u32; MAX_PIDS];
    let mut n = 0;
    let mut owners = [0u32; ROWS];
    let note = |p: u32, pids: &mut [u32; MAX_PIDS], n: &mut usize| {
        if p != 0 && *n < MAX_PIDS && !pids[..*n].contains(&p) {
            pids[*n] = p;
            *n += 1;
        }
    };
    for e in shared.sockets.load().iter() {
        if let ConsumedBy::Client(p) = e.consumed_by {
            note(p, &mut pids, &mut n);
        }
        e.sock.row_owners(&mut owners);
        for &p in &owners {
            note(p, &mut pids, &mut n);
        }
    }
    // Attached clients (their lcore caches), and dead ones whose cache is
    // still to settle. `try_lock`: the IPC thread never holds it long.
    let mut unsettled = [(0u32, 0u32, false); MAX_PIDS];
    let mut u = 0;
    if let Ok(v) = shared.clients.attached.try_lock() {
        for a in v.iter() {
            match a.dead {
                None => note(a.pid, &mut pids, &mut n),
                Some(discard) if u < MAX_PIDS => {
                    unsettled[u] = (a.pid, a.lcore, discard);
                    u += 1;
                }
                Some(_) => {}
            }
        }
    }
    for &p in &pids[..n] {
        if !dpdk_sys::os::process_alive(p) {
            reap(shared, p);
        }
    }
    for &(pid, lcore, discard) in &unsettled[..u] {
        if settle_cache(shared, pid, lcore, discard, true) {
            attached(shared).retain(|a| !(a.pid == pid && a.lcore == lcore && a.dead.is_some()));
        }
    }
}

/// Reap dead client `pid`: reclaim what it held of every socket, then
/// unbind the sockets it bound, and close the sockets it opened exactly as
/// its own close would have:
/// each goes back to the consumer the engine gave it at creation (a
/// configured socket is the engine's, not the client's: it is given back,
/// not unbound; what waits in its ring is then that consumer's, or, for a
/// `handler = "none"` socket, freed and counted `freed_at_close` at exit).
/// Logs one line, counts `clients.reaped`.
pub fn reap(shared: &Shared, pid: u32) {
    let mut socks = Vec::new();
    let (mut freed, mut uncounted, mut lost) = (0u64, 0u64, 0u64);
    // Rows first, while the sockets the client had open are still skipped
    // by the engine's consumers (a dequeue it died in is undone there).
    for e in shared.sockets.load().iter() {
        let r = e.sock.reclaim_client(pid);
        freed += r.freed;
        uncounted += r.uncounted;
        lost += r.lost;
    }
    let mine: Vec<SocketEntry> = shared
        .sockets
        .load()
        .iter()
        .filter(|e| e.consumed_by == ConsumedBy::Client(pid))
        .cloned()
        .collect();
    for e in &mine {
        let name = e.sock.name();
        socks.push(name.to_string());
        // A socket it bound dies with it (unbound); one it opened goes back.
        let done = if e.sock.bound_by_client.load(Ordering::Relaxed) == pid {
            remove(shared, e, pid)
        } else {
            close(shared, name, pid)
        };
        if let Err((_, why)) = done {
            log::warn!("reaping client pid {pid}: closing {name:?}: {why}");
        }
    }
    // Its lcore's mempool caches: what it freed last sits there.
    let mine = attached(shared)
        .iter()
        .find(|a| a.pid == pid && a.dead.is_none())
        .copied();
    if let Some(a) = mine {
        let discard = lost > 0;
        if settle_cache(shared, pid, a.lcore, discard, true) {
            attached(shared).retain(|x| x.pid != pid);
        } else if let Some(x) = attached(shared).iter_mut().find(|x| x.pid == pid) {
            x.dead = Some(discard);
        }
    }
    let c = &shared.clients;
    c.reaped.fetch_add(1, Ordering::Relaxed);
    c.reclaimed.fetch_add(uncounted, Ordering::Relaxed);
    c.lost_in_free.fetch_add(lost, Ordering::Relaxed);
    let lost = if lost > 0 {
        format!("; {lost} mbuf(s) it died while freeing not freed again (at most that many lost to the pool)")
    } else {
        String::new()
    };
    log::warn!(
        "reaped client pid {pid} (dead): closed socket(s) [{}], reclaimed {freed} mbuf(s) it held ({uncounted} datagram(s) unread, counted freed_at_close){lost}",
        socks.join(", ")
    );
}
