//! A client of a running udpdemux engine, in its own process.
//!
//! [`Client::attach`] starts the EAL as a DPDK secondary process of the
//! engine (the primary) on the engine's `eal.file_prefix`; [`Client::detach`]
//! leaves again. Attaching probes, configures and resets none of the
//! engine's devices: the secondary's vdev scan is intercepted so the
//! engine's vdevs (e.g. `net_pcap0`) never become ports here, PCI is not
//! scanned (`--no-pci`), and so `rte_eal_cleanup`'s bus cleanup, which
//! would close them (DPDK >= 22.11), has nothing to close
//! (`dpdk_sys::secondary`, and docs/design.md on the `dpdk-proc-info` crash).
//!
//! Then [`Client::open`] asks the engine (DPDK multi-process IPC, the
//! engine's `udx_ctl` action, `udpdemux::client_proto`) for one of its
//! configured sockets: from the reply on, this process is the only reader
//! of the socket's delivery ring (`udx_s<id>`), and
//! [`ClientSocket::recv_burst`] takes datagrams from it without a copy,
//! read through the engine's own view ([`Received`]: payload, source and
//! destination, RX TSC, the socket's drop count). Freed mbufs go back to
//! their pools from here (`rte_pktmbuf_free_bulk`: mempools are in shared
//! memory) and their truesize into the socket's shared release counter
//! (memzone `udx_c<id>`), which the engine folds into its rcvbuf
//! accounting. Closing the socket (or dropping it) gives it back to the
//! engine's consumer. [`Client::bind`] makes a new socket instead, with
//! the options of a `[[socket]]` table; closing that one unbinds it.
//!
//! What a batch holds is recorded in the socket's in-flight table (in the
//! same memzone) before the application sees it: if this process dies,
//! the engine frees it, and closes (or unbinds) its sockets, within a
//! fraction of a second (`udpdemux::client_proto`, docs/design.md).
//!
//! A `Client` is the process's EAL main lcore: it is not `Send`, and its
//! lcore id ([`Client::lcore`]) is one of [`CLIENT_LCORES`], which the
//! engine does not use, and no other live client has: mempool caches are
//! indexed by lcore id, in shared memory, without a lock. The id is the
//! first whose slot file in the engine's runtime directory
//! (`client_proto::slot_lock_path`) this process can lock (`flock`,
//! exclusive); the lock is held until the process exits, and the kernel
//! drops it however it exits. A [`ClientSocket`] borrows its `Client`
//! and stays on its thread; [`Client::open_owned`] / [`Client::bind_owned`]
//! give an [`OwnedSocket`] that borrows nothing and may move to another
//! thread (an async runtime's: the quinn adapter), see `owned.rs`.
//! The engine is told (`attach`) before any
//! mempool is touched, and settles a dead client's lcore caches
//! (`udpdemux::client_proto`). This crate has no `unsafe` of its own: the
//! shared-memory access is in `dpdk-sys` and the engine's `meta`.
#![forbid(unsafe_code)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dpdk_sys::mp::{self, AtomicZone};
use dpdk_sys::{MbufBurst, MbufRing};
use udpdemux::api::Release;
use udpdemux::client_proto::{self, Refusal, Request, Slot};
use udpdemux::meta;

/// What [`Client::bind`] takes: the in-process API's own options.
pub use udpdemux::api::SocketOptions;

/// What [`Client::stats`] gives: the in-process API's own counters type
/// (`udpdemux::api::stats`), every field documented there.
pub use udpdemux::api::SocketStats;

/// A received datagram: the engine's own zero-copy view
/// (`udpdemux::api::Received`), the same type in-process applications get.
pub use udpdemux::api::Received;

use dpdk_sys::secondary::{self, SecondaryEal};

/// An owned socket handle, `Send`, for a runtime's threads (quinn's adapter).
mod owned;
/// `ClientSocket::send_burst` (issue 17).
mod send;
pub use owned::{OwnedSocket, SocketHandle};
use udpdemux::eal_log::Capture;

/// The lcore ids client processes take, one each (the engine refuses a
/// config that uses one).
pub use udpdemux::client_proto::CLIENT_LCORES;

/// Why [`Client::attach`] failed: one line, naming the fix.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("file prefix {prefix:?} is not valid: give a non-empty name without '/' (the engine's eal.file_prefix)")]
    InvalidPrefix { prefix: String },
    #[error("no DPDK process has run with file prefix {prefix:?} ({dir} does not exist): start the engine (`udpdemux run --config FILE`) or give the eal.file_prefix of its config{running}")]
    NoSuchPrefix {
        prefix: String,
        dir: String,
        running: String,
    },
    #[error("no engine is running on file prefix {prefix:?} ({config} is not held by a primary process): start the engine, or wait until it is up, and attach again{running}")]
    NotRunning {
        prefix: String,
        config: String,
        running: String,
    },
    #[error("the engine on file prefix {prefix:?} shares no memory (no {config}, nor 2 s later: eal.no_huge = true runs the EAL with --no-shconf): set eal.no_huge = false in its config and restart it to let clients attach")]
    NoSharedConfig { prefix: String, config: String },
    #[error("the DPDK primary on file prefix {prefix:?} is not a udpdemux engine (no udpdemux.lock held in {dir}): give the eal.file_prefix of a running engine")]
    NotAnEngine { prefix: String, dir: String },
    #[error("the EAL is already initialised in this process: attach once per process (DPDK allows one rte_eal_init per process, even after a detach)")]
    AlreadyInitialised,
    #[error("every client lcore id ({first}..={last}) of the engine on file prefix {prefix:?} is taken by a live client (slot locks in {dir}{holders}): detach or stop a client, then attach again")]
    NoLcoreSlot {
        prefix: String,
        first: u32,
        last: u32,
        dir: String,
        holders: String,
    },
    #[error("cannot take a client lcore slot of the engine on file prefix {prefix:?} ({path}: {reason}): run as the engine's user (root)")]
    Slot {
        prefix: String,
        path: String,
        reason: String,
    },
    #[error("the engine on file prefix {prefix:?} keeps its datagram metadata where this client cannot read it ({reason}): run a client built from the engine's version")]
    Incompatible { prefix: String, reason: String },
    #[error("the engine on file prefix {prefix:?} did not accept this client on lcore {lcore} ({reason}): is it still running, and a udpdemux engine of this version?")]
    NotAccepted {
        prefix: String,
        lcore: u32,
        reason: String,
    },
    #[error("the EAL refused to attach as a secondary to file prefix {prefix:?}: {reason}{hint}")]
    Eal {
        prefix: String,
        reason: String,
        hint: String,
    },
}

/// Datagrams per [`ClientSocket::recv_burst`] at most (as `api::BATCH`).
pub const BATCH: usize = udpdemux::api::BATCH;

/// How long [`Client::open`] and the close wait for the engine's reply.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`Client::open`] failed: one line.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "socket name {name:?} is not valid: give the name of a [[socket]] of the engine's config"
    )]
    InvalidName { name: String },
    #[error("cannot open socket {name:?}: {reason}")]
    NoSuchSocket { name: String, reason: String },
    #[error("cannot open socket {name:?}: {reason}")]
    AlreadyOpen { name: String, reason: String },
    #[error("the engine refused to open socket {name:?}: {reason}")]
    Refused { name: String, reason: String },
    #[error("the engine refused to bind socket {name:?}: {reason}")]
    BindRefused { name: String, reason: String },
    #[error("no answer from the engine on {prefix:?} to opening {name:?} ({reason}): is it still running, and a udpdemux engine with hugepages?")]
    NoReply {
        prefix: String,
        name: String,
        reason: String,
    },
    #[error("socket {name:?}: the engine named {what}, which this process cannot find in shared memory: {reason}")]
    Lookup {
        name: String,
        what: String,
        reason: String,
    },
}

/// Why [`Client::stats`] gave no counters: one line.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("socket name {name:?} is not valid: give the name of one of the engine's sockets")]
    InvalidName { name: String },
    #[error("no stats for socket {name:?}: {reason}")]
    NoSuchSocket { name: String, reason: String },
    #[error("the engine refused the stats of socket {name:?}: {reason}")]
    Refused { name: String, reason: String },
    #[error("no answer from the engine on {prefix:?} to the stats of {name:?} ({reason}): is it still running?")]
    NoReply {
        prefix: String,
        name: String,
        reason: String,
    },
    #[error("the engine's stats of socket {name:?} could not be read: {reason} (is it a udpdemux engine of this version?)")]
    Malformed { name: String, reason: String },
}

/// Why closing a socket failed (it is no longer this client's either way,
/// unless the engine did not answer).
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error("closing socket {name:?}: no answer from the engine ({reason})")]
    NoReply { name: String, reason: String },
    #[error("closing socket {name:?}: the engine says {reason}")]
    Refused { name: String, reason: String },
}

/// An attached client: the EAL up as a secondary process of the engine.
#[derive(Debug)]
pub struct Client {
    /// Taken at detach or drop (the EAL cleaned up) before the slot lock goes.
    eal: Option<SecondaryEal>,
    prefix: String,
    runtime_dir: PathBuf,
    lcore: u32,
    /// The locked slot file of `lcore`, shared with the [`OwnedSocket`]s
    /// (see [`Lease`]).
    lease: Arc<Lease>,
}

/// What an attachment's [`OwnedSocket`]s keep alive when they outlive
/// their [`Client`]: the lcore slot's lock (no other client may take the
/// lcore id while this process still frees mbufs on it), and the duty to
/// tell the engine this client leaves once the last of them is gone. The
/// EAL itself is then never cleaned up (the client leaves it up: the
/// sockets' rings and mbufs stay mapped until the process exits).
#[derive(Debug)]
struct Lease {
    /// The locked slot file: held until the last owner drops it.
    _slot: std::fs::File,
    /// Set when the client went while owned sockets lived on.
    orphaned: AtomicBool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.orphaned.load(Ordering::SeqCst) && dpdk_sys::eal::is_up() {
            leave();
        }
    }
}

/// Where a client sends the EAL's log lines while it captures them: the
/// debug log, not stderr (its errors are one line of its own).
fn eal_line_to_debug(l: &str) {
    log::debug!("EAL: {l}");
}

impl Client {
    /// Attach to the engine running with `eal.file_prefix = file_prefix`.
    pub fn attach(file_prefix: &str) -> Result<Client, AttachError> {
        check_prefix(file_prefix)?;
        if dpdk_sys::eal::initialised() {
            return Err(AttachError::AlreadyInitialised);
        }
        let runtime_dir = runtime_base().join(file_prefix);
        preflight(file_prefix, &runtime_dir)?;
        let (slot, lcore) = take_slot(file_prefix, &runtime_dir)?;
        let args = eal_args(file_prefix, lcore);
        // The EAL's log explains a failure only while it initialises.
        let capture = Capture::start_with(eal_line_to_debug);
        let res = SecondaryEal::init(&args);
        let lines = capture.map(Capture::finish).unwrap_or_default();
        let eal = match res {
            Ok(eal) => eal,
            Err(err) => {
                if dpdk_sys::eal::is_up() {
                    log::error!("attached, but not cleanly: {err}");
                }
                return Err(eal_error(
                    file_prefix,
                    &runtime_dir,
                    &err.to_string(),
                    &lines,
                ));
            }
        };
        // Where the engine keeps each datagram's metadata (an mbuf dynfield
        // it registered at start): found by name, with its size and
        // alignment checked against this build's.
        if let Err(e) = meta::register_dgram_meta() {
            return Err(AttachError::Incompatible {
                prefix: file_prefix.into(),
                reason: format!("mbuf dynfield {}: {e}", meta::DGRAM_DYNFIELD),
            });
        }
        // Before any mempool is touched: the engine settles what a dead
        // client left in this lcore's caches before it answers.
        let req = Request::Attach {
            lcore,
            pid: std::process::id(),
        }
        .encode();
        // An engine still starting has no handler yet: the EAL then logs its
        // own line about the missing reply, and the error below says it all
        // in one line, so the EAL's goes to the debug log.
        let capture = Capture::start_with(eal_line_to_debug);
        let reply = mp::request_sync(client_proto::ACTION, req.as_bytes(), REQUEST_TIMEOUT);
        drop(capture.map(Capture::finish));
        let accepted = reply.map_err(|e| e.to_string()).and_then(|rep| {
            client_proto::parse_reply(&rep)
                .map(|_| ())
                .map_err(|(_, r)| r)
        });
        if let Err(reason) = accepted {
            return Err(AttachError::NotAccepted {
                prefix: file_prefix.into(),
                lcore,
                reason,
            });
        }
        log::info!(
            "attached to {file_prefix:?} as a secondary (lcore {lcore}); the engine's vdevs, not probed here: {:?}",
            eal.primary_vdevs()
        );
        Ok(Client {
            eal: Some(eal),
            prefix: file_prefix.to_string(),
            runtime_dir,
            lcore,
            lease: Arc::new(Lease {
                _slot: slot,
                orphaned: AtomicBool::new(false),
            }),
        })
    }

    /// This process's EAL lcore id (one of [`CLIENT_LCORES`], no other
    /// live client's).
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// The engine's file prefix.
    pub fn file_prefix(&self) -> &str {
        &self.prefix
    }

    /// The EAL runtime directory shared with the engine.
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    /// The engine's vdevs (announced by the primary, deliberately not
    /// probed in this process).
    pub fn engine_vdevs(&self) -> &[String] {
        self.eal.as_ref().map_or(&[], |e| e.primary_vdevs())
    }

    /// Whether the engine (the primary) is still running.
    pub fn engine_alive(&self) -> bool {
        self.eal.as_ref().is_some_and(|e| e.primary_alive())
    }

    /// Open the engine's socket `name` (a `[[socket]]` of its config): from
    /// now until the socket is closed or dropped, this process alone reads
    /// its datagrams (the engine's own consumer skips it). Refused when no
    /// socket has that name, or when another client has it open.
    pub fn open(&self, name: &str) -> Result<ClientSocket<'_>, OpenError> {
        let (s, zone) = self.open_opened(name)?;
        Ok(ClientSocket {
            _client: self,
            s,
            zone: Rc::new(zone),
        })
    }

    /// [`Client::open`] as an [`OwnedSocket`]: it borrows nothing, so it
    /// can move to (and be used from) any thread, e.g. an async runtime's.
    pub fn open_owned(&self, name: &str) -> Result<OwnedSocket, OpenError> {
        let (s, zone) = self.open_opened(name)?;
        Ok(OwnedSocket::new(s, zone, Arc::clone(&self.lease)))
    }

    fn open_opened(&self, name: &str) -> Result<(Opened, AtomicZone), OpenError> {
        if name.is_empty() || name.len() > 200 || name.contains([' ', '\0']) {
            return Err(OpenError::InvalidName { name: name.into() });
        }
        let req = Request::Open {
            socket: name.into(),
            pid: std::process::id(),
        };
        self.request_socket(name, req, false)
    }

    /// Bind a new socket in the engine with the options of a `[[socket]]`
    /// table (as `udpdemux::api::open` in-process), consumed by this client
    /// alone. The engine checks them by the rules `udpdemux check` applies
    /// (name, addresses, rcvbuf, ring_size) and refuses an address in use;
    /// the refusal is one line. [`ClientSocket::close`] (or drop) unbinds
    /// it; so does this process's death.
    pub fn bind(&self, o: SocketOptions) -> Result<ClientSocket<'_>, OpenError> {
        let (s, zone) = self.bind_opened(o)?;
        Ok(ClientSocket {
            _client: self,
            s,
            zone: Rc::new(zone),
        })
    }

    /// [`Client::bind`] as an [`OwnedSocket`] (see [`Client::open_owned`]).
    pub fn bind_owned(&self, o: SocketOptions) -> Result<OwnedSocket, OpenError> {
        let (s, zone) = self.bind_opened(o)?;
        Ok(OwnedSocket::new(s, zone, Arc::clone(&self.lease)))
    }

    fn bind_opened(&self, o: SocketOptions) -> Result<(Opened, AtomicZone), OpenError> {
        if let Some(why) = udpdemux::config::socket_name_problem(&o.name) {
            return Err(OpenError::BindRefused {
                name: o.name.clone(),
                reason: why,
            });
        }
        let name = o.name.clone();
        let req = Request::Bind {
            opts: o,
            pid: std::process::id(),
        };
        self.request_socket(&name, req, true)
    }

    /// Send an open or bind request for `name` and look up what the reply names.
    fn request_socket(
        &self,
        name: &str,
        req: Request,
        bound: bool,
    ) -> Result<(Opened, AtomicZone), OpenError> {
        let req = req.encode();
        let rep = mp::request_sync(client_proto::ACTION, req.as_bytes(), REQUEST_TIMEOUT).map_err(
            |e| OpenError::NoReply {
                prefix: self.prefix.clone(),
                name: name.into(),
                reason: e.to_string(),
            },
        )?;
        let opened = match client_proto::parse_reply(&rep) {
            Ok(Some(o)) => o,
            Ok(None) => {
                return Err(OpenError::Refused {
                    name: name.into(),
                    reason: "the engine answered without naming the socket's ring".into(),
                })
            }
            Err((kind, reason)) => {
                let name = name.to_string();
                return Err(match kind {
                    _ if bound => OpenError::BindRefused { name, reason },
                    Refusal::NoSuchSocket => OpenError::NoSuchSocket { name, reason },
                    Refusal::Busy => OpenError::AlreadyOpen { name, reason },
                    Refusal::Other => OpenError::Refused { name, reason },
                });
            }
        };
        let found = meta::lookup_delivery_ring(&opened.ring)
            .map_err(|e| (format!("ring {}", opened.ring), e.to_string()))
            .and_then(|ring| {
                AtomicZone::lookup(&opened.zone, client_proto::ZONE_WORDS)
                    .map_err(|e| (format!("memzone {}", opened.zone), e.to_string()))
                    .and_then(|zone| {
                        let id = zone.slots()[Slot::SocketId as usize].load(Ordering::Relaxed);
                        if id == u64::from(opened.id) {
                            Ok((ring, zone))
                        } else {
                            Err((
                                format!("memzone {}", opened.zone),
                                format!("it belongs to socket id {id}, not {}", opened.id),
                            ))
                        }
                    })
            });
        match found {
            Ok((ring, zone)) => Ok((
                Opened {
                    name: name.into(),
                    id: opened.id,
                    ring,
                    open: true,
                    bound,
                },
                zone,
            )),
            Err((what, reason)) => {
                // Give the socket back: nothing here can read it.
                let _ = send_close(name, bound);
                Err(OpenError::Lookup {
                    name: name.into(),
                    what,
                    reason,
                })
            }
        }
    }

    /// The counters of the engine's socket `name` (any live socket, not
    /// only one this client has open), as the engine's exit JSON and
    /// telemetry report it: [`SocketStats`], the type
    /// `udpdemux::api::stats` gives an in-process application. One IPC
    /// request; the engine answers between two polls of its main lcore
    /// with a sealed memfd holding the report (`client_proto` says why
    /// not in the reply itself). The engine folds what clients freed
    /// into a socket's counters before it answers, so after this
    /// client's batches are cleared their datagrams are in `consumed`.
    pub fn stats(&self, name: &str) -> Result<SocketStats, StatsError> {
        if name.is_empty() || name.len() > 200 || name.contains([' ', '\0']) {
            return Err(StatsError::InvalidName { name: name.into() });
        }
        let req = Request::Stats {
            socket: name.into(),
            pid: std::process::id(),
        }
        .encode();
        let no_reply = |reason: String| StatsError::NoReply {
            prefix: self.prefix.clone(),
            name: name.into(),
            reason,
        };
        let (rep, fds) =
            mp::request_sync_with_fds(client_proto::ACTION, req.as_bytes(), REQUEST_TIMEOUT)
                .map_err(|e| no_reply(e.to_string()))?;
        let len = client_proto::parse_stats_reply(&rep).map_err(|(kind, reason)| match kind {
            Refusal::NoSuchSocket => StatsError::NoSuchSocket {
                name: name.into(),
                reason,
            },
            _ => StatsError::Refused {
                name: name.into(),
                reason,
            },
        })?;
        let malformed = |reason: String| StatsError::Malformed {
            name: name.into(),
            reason,
        };
        if len > client_proto::MAX_STATS_REPORT {
            return Err(malformed(format!(
                "a {len}-byte report, more than the {} this client reads",
                client_proto::MAX_STATS_REPORT
            )));
        }
        let [fd] = <[_; 1]>::try_from(fds).map_err(|v: Vec<_>| {
            malformed(format!("{} descriptors with the reply, not 1", v.len()))
        })?;
        let mut text = vec![0u8; len];
        std::fs::File::from(fd)
            .read_exact_at(&mut text, 0)
            .map_err(|e| malformed(format!("reading its {len}-byte report: {e}")))?;
        SocketStats::decode(&text).map_err(malformed)
    }

    /// Leave the engine: `rte_eal_cleanup` in this process, which here
    /// closes no device (none was probed), so the engine's ports run on.
    /// Whether the EAL cleaned up (`false` only if a port had appeared in
    /// this process after all: the cleanup is then skipped, not to close it).
    /// `false` too when [`OwnedSocket`]s (or their handles) are still
    /// alive: the EAL is then left up for them, and the engine told that
    /// this client leaves when the last of them is gone.
    pub fn detach(mut self) -> bool {
        self.leave_unless_owned().is_some_and(SecondaryEal::detach)
    }

    /// Flush the caches and tell the engine this client leaves, and give
    /// the EAL back for cleanup; unless owned sockets still use it: then
    /// leave the EAL up and hand the leaving over to the [`Lease`].
    fn leave_unless_owned(&mut self) -> Option<SecondaryEal> {
        let eal = self.eal.take()?;
        // No new owner can appear: they are made only through `&self`, on
        // this thread (a `Client` is not `Send`); one may go meanwhile,
        // and then finds `orphaned` set, or the client's own drop does.
        let owners = Arc::strong_count(&self.lease) - 1;
        if owners > 0 {
            log::warn!(
                "the client goes while {owners} owned socket(s) live on: the EAL stays up for them (until the process exits) and the engine is told this client leaves when the last is dropped"
            );
            // This thread's lcore cache now: the last owner may go on
            // another thread, whose flush would not reach it.
            flush_caches();
            self.lease.orphaned.store(true, Ordering::SeqCst);
            // Not cleaned up: the owned sockets' rings and mbufs stay mapped.
            std::mem::forget(eal);
            return None;
        }
        leave();
        Some(eal)
    }
}

impl Drop for Client {
    /// A client dropped without [`Client::detach`] leaves as cleanly: its
    /// caches flushed, the engine told, the EAL cleaned up; then the slot
    /// lock goes (the fields after `eal`), or stays with the owned sockets.
    fn drop(&mut self) {
        drop(self.leave_unless_owned());
    }
}

/// Flush this lcore's caches and tell the engine this client leaves.
fn leave() {
    flush_caches();
    let req = Request::Detach {
        pid: std::process::id(),
    }
    .encode();
    if let Err(e) = mp::request_sync(client_proto::ACTION, req.as_bytes(), REQUEST_TIMEOUT) {
        log::warn!("detach: the engine did not answer ({e}); it notices this process's exit");
    }
}

/// Close `name` (or unbind it: `bound`).
fn send_close(name: &str, bound: bool) -> Result<(), CloseError> {
    let (socket, pid) = (name.to_string(), std::process::id());
    let req = if bound {
        Request::Unbind { socket, pid }
    } else {
        Request::Close { socket, pid }
    }
    .encode();
    let rep =
        mp::request_sync(client_proto::ACTION, req.as_bytes(), REQUEST_TIMEOUT).map_err(|e| {
            CloseError::NoReply {
                name: name.into(),
                reason: e.to_string(),
            }
        })?;
    match client_proto::parse_reply(&rep) {
        Ok(_) => Ok(()),
        Err((_, reason)) => Err(CloseError::Refused {
            name: name.into(),
            reason,
        }),
    }
}

/// What every kind of socket handle holds of an opened socket (its
/// name, id and ring); closing it, or dropping it, gives the socket back
/// to the engine (or unbinds it).
#[derive(Debug)]
pub(crate) struct Opened {
    name: String,
    id: u32,
    ring: MbufRing,
    open: bool,
    /// Bound by this client ([`Client::bind`]): closing unbinds it.
    bound: bool,
}

impl Opened {
    /// Take up to [`BATCH`] datagrams into `batch` (released through
    /// `zone`, the socket's memzone), freeing what it held before.
    fn recv_burst<Z: ZoneRef>(&self, zone: &Z, batch: &mut Batch<Z>) -> usize {
        let ring = &self.ring;
        batch.refill(
            |r| r.zone.same(zone),
            || {
                Some(SharedRelease {
                    zone: zone.clone(),
                    row: None,
                })
            },
            |r, bufs| r.take(ring, bufs),
        )
    }

    fn close(&mut self) -> Result<(), CloseError> {
        self.open = false;
        flush_caches();
        send_close(&self.name, self.bound)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.open && dpdk_sys::eal::is_up() {
            if let Err(e) = self.close() {
                log::warn!("{e}");
            }
        }
    }
}

/// One of the engine's sockets, opened by this client: it alone reads the
/// socket's delivery ring until [`ClientSocket::close`] (or drop).
#[derive(Debug)]
pub struct ClientSocket<'c> {
    _client: &'c Client,
    s: Opened,
    /// `Rc`: the batches stay on this thread (see [`SharedRelease`]).
    zone: Rc<AtomicZone>,
}

impl ClientSocket<'_> {
    /// The socket's name in the engine's config.
    pub fn name(&self) -> &str {
        &self.s.name
    }

    /// The engine's id of the socket (its ring is `udx_s<id>`).
    pub fn id(&self) -> u32 {
        self.s.id
    }

    /// Datagrams waiting in the socket's ring now.
    pub fn pending(&self) -> u32 {
        self.s.ring.count()
    }

    /// Take up to [`BATCH`] datagrams into `batch`, freeing what the batch
    /// held before (and releasing their memory from the socket's budget).
    /// How many arrived (0: none waiting). As `udpdemux::api::recv_burst`.
    pub fn recv_burst(&mut self, batch: &mut RecvBatch) -> usize {
        self.s.recv_burst(&self.zone, batch)
    }

    /// Give the socket back to the engine's consumer, or, for a socket
    /// this client bound, unbind it (the engine removes it; what waits in
    /// its ring is freed and counted `freed_at_close`). Clear (or drop) the
    /// batches that hold its datagrams first: otherwise their memory stays
    /// charged to the socket until they are, and an unbind is refused.
    pub fn close(mut self) -> Result<(), CloseError> {
        self.s.close()
    }

    /// Whether this client bound the socket (closing it unbinds it).
    pub fn is_bound(&self) -> bool {
        self.s.bound
    }
}

/// Put the mbufs this client freed into its lcore's mempool caches back
/// into the engine's pools, where its RX lcores can allocate them again
/// (nothing but a later client on the same lcore id would otherwise).
fn flush_caches() {
    let n = dpdk_sys::mempool::flush_lcore_caches();
    log::debug!("flushed {n} object(s) from this lcore's mempool caches");
}

/// [`ClientSocket::recv_burst`] as a function, spelled as
/// `udpdemux::api::recv_burst(&sock, &mut batch)`: an application's receive
/// loop reads the same in either process.
pub fn recv_burst(sock: &mut ClientSocket<'_>, batch: &mut RecvBatch) -> usize {
    sock.recv_burst(batch)
}

/// A batch of datagrams received by a [`ClientSocket`], owned until
/// cleared: `udpdemux::api::RecvBatch` itself, released through the
/// socket's shared counters.
pub type RecvBatch = udpdemux::api::RecvBatch<SharedRelease>;

/// A batch released through the zone handle `Z`.
type Batch<Z> = udpdemux::api::RecvBatch<SharedRelease<Z>>;

/// The batch an [`OwnedSocket`] receives into (and keeps to itself).
pub type OwnedBatch = Batch<Arc<AtomicZone>>;

/// How a socket handle shares the socket's memzone with its batches:
/// `Rc` for a [`ClientSocket`], whose batches stay on the client's thread
/// (so that no two of them take or release at once: the in-flight table
/// and the totals have one writer), `Arc` for an [`OwnedSocket`], which
/// keeps its one batch to itself and moves with it.
pub trait ZoneRef: Clone + std::ops::Deref<Target = AtomicZone> {
    /// Whether both are the same socket's.
    fn same(&self, other: &Self) -> bool;
}

impl ZoneRef for Rc<AtomicZone> {
    fn same(&self, other: &Self) -> bool {
        Rc::ptr_eq(self, other)
    }
}

impl ZoneRef for Arc<AtomicZone> {
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

/// How a client's batch takes and releases datagrams. Taking claims a
/// row of the socket's in-flight table (`client_proto::row`) and records
/// the dequeued mbufs there before the application sees them; releasing
/// frees them here (back to the engine's pools), adds what they held to
/// the socket's shared totals, which the engine releases from the
/// socket's budget, and gives the row up. If this process dies holding a
/// batch, the engine frees what the row records (issue 16 liveness).
#[derive(Debug)]
pub struct SharedRelease<Z: ZoneRef = Rc<AtomicZone>> {
    zone: Z,
    /// The row the batch's mbufs are recorded in, while it holds some.
    row: Option<usize>,
}

impl<Z: ZoneRef> SharedRelease<Z> {
    /// Claim a free row and take up to [`BATCH`] datagrams through it:
    /// how many (0 also when all `client_proto::ROWS` rows are held by
    /// this process's other batches of the socket).
    fn take(&mut self, ring: &MbufRing, bufs: &mut MbufBurst<BATCH>) -> usize {
        if ring.looks_empty() {
            return 0;
        }
        let pid = std::process::id();
        let slots = self.zone.slots();
        let Some(i) = (0..client_proto::ROWS).find(|&i| client_proto::row(slots, i).claim(pid))
        else {
            return 0;
        };
        let row = client_proto::row(slots, i);
        let n = row.take(ring, bufs, BATCH);
        if n == 0 {
            row.unclaim();
        } else {
            self.row = Some(i);
        }
        n
    }
}

impl<Z: ZoneRef> Release for SharedRelease<Z> {
    fn release(&mut self, bufs: &mut MbufBurst<BATCH>) {
        let (mut truesize, mut bytes) = (0u64, 0u64);
        for m in bufs.iter() {
            truesize += u64::from(meta::truesize_of(m));
            bytes += u64::from(meta::dgram(m).payload_len);
        }
        let n = bufs.len() as u64;
        let s = self.zone.slots();
        // The totals only this process writes while it holds rows of the
        // socket (the engine opens it to no other client meanwhile).
        let (released, consumed, cbytes) = (
            &s[Slot::Released as usize],
            &s[Slot::Consumed as usize],
            &s[Slot::ConsumedBytes as usize],
        );
        let to = [
            released.load(Ordering::Relaxed) + truesize,
            consumed.load(Ordering::Relaxed) + n,
            cbytes.load(Ordering::Relaxed) + bytes,
        ];
        let row = self.row.take().map(|i| client_proto::row(s, i));
        // Counted, then freed, then the row is free: a death in between
        // leaves the engine a row that says how far this got.
        if let Some(r) = &row {
            r.begin_free(to);
        }
        consumed.store(to[1], Ordering::Relaxed);
        cbytes.store(to[2], Ordering::Relaxed);
        // Last, and Release: the engine reads it first.
        released.store(to[0], Ordering::Release);
        bufs.clear();
        if let Some(r) = row {
            r.end_free();
            r.unclaim();
        }
    }
}

fn check_prefix(p: &str) -> Result<(), AttachError> {
    if p.is_empty() || p.contains('/') || p.contains('\0') || p == "." || p == ".." {
        return Err(AttachError::InvalidPrefix {
            prefix: p.to_string(),
        });
    }
    Ok(())
}

/// Where the EAL keeps runtime files (the engine's own answer).
pub use udpdemux::instance::runtime_base;

/// Whether an engine holds the instance lock in `dir`.
fn engine_lock_held(dir: &Path) -> bool {
    std::fs::File::open(dir.join("udpdemux.lock"))
        .ok()
        .and_then(|f| dpdk_sys::os::held_exclusively_by_other(&f).ok())
        .unwrap_or(false)
}

/// File prefixes with a running engine or DPDK primary, for error hints.
pub fn running_prefixes() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(runtime_base()) else {
        return out;
    };
    for e in rd.flatten() {
        let dir = e.path();
        if secondary::primary_alive(&dir.join("config")) || engine_lock_held(&dir) {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

fn running_hint() -> String {
    let r = running_prefixes();
    if r.is_empty() {
        "; no engine runs on any prefix now".into()
    } else {
        let q: Vec<String> = r.iter().map(|p| format!("{p:?}")).collect();
        format!("; running now: {}", q.join(", "))
    }
}

/// How long an engine that holds its instance lock may take to bring its
/// EAL's shared config up before the client gives up on it.
const STARTUP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What can be told before the EAL starts (its own errors are vaguer, and a
/// secondary started with no primary waits or fails obscurely).
fn preflight(prefix: &str, dir: &Path) -> Result<(), AttachError> {
    let config = dir.join("config");
    if !dir.is_dir() {
        return Err(AttachError::NoSuchPrefix {
            prefix: prefix.into(),
            dir: dir.display().to_string(),
            running: running_hint(),
        });
    }
    let mut engine = engine_lock_held(dir);
    // An engine takes its instance lock before its EAL creates and locks
    // the config: one that is starting gets a moment to get there.
    let deadline = std::time::Instant::now() + STARTUP_GRACE;
    while engine && !secondary::primary_alive(&config) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        engine = engine_lock_held(dir);
    }
    if !config.exists() && engine {
        return Err(AttachError::NoSharedConfig {
            prefix: prefix.into(),
            config: config.display().to_string(),
        });
    }
    if !secondary::primary_alive(&config) {
        return Err(AttachError::NotRunning {
            prefix: prefix.into(),
            config: config.display().to_string(),
            running: running_hint(),
        });
    }
    if !engine {
        return Err(AttachError::NotAnEngine {
            prefix: prefix.into(),
            dir: dir.display().to_string(),
        });
    }
    Ok(())
}

/// Lock the first free lcore slot of the engine in `dir` (its runtime
/// directory): the locked file (its pid written in it) and the lcore id.
fn take_slot(prefix: &str, dir: &Path) -> Result<(std::fs::File, u32), AttachError> {
    use std::io::Write;
    let slots = client_proto::slot_dir(dir);
    let err = |path: &Path, e: std::io::Error| AttachError::Slot {
        prefix: prefix.into(),
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    if !slots.is_dir() {
        std::fs::create_dir_all(&slots).map_err(|e| err(&slots, e))?;
    }
    let mut holders = Vec::new();
    for lcore in CLIENT_LCORES {
        let path = client_proto::slot_lock_path(dir, lcore);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| err(&path, e))?;
        match dpdk_sys::os::try_lock_exclusive(&f) {
            Ok(()) => {
                let write = |f: &mut std::fs::File| -> std::io::Result<()> {
                    f.set_len(0)?;
                    writeln!(f, "{}", std::process::id())
                };
                // The pid is for people reading the file; the lock is the claim.
                let _ = write(&mut f);
                return Ok((f, lcore));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if holders.len() < 4 {
                    let pid = std::fs::read_to_string(&path).unwrap_or_default();
                    holders.push(pid.trim().to_string());
                }
            }
            Err(e) => return Err(err(&path, e)),
        }
    }
    Err(AttachError::NoLcoreSlot {
        prefix: prefix.into(),
        first: *CLIENT_LCORES.start(),
        last: *CLIENT_LCORES.end(),
        dir: slots.display().to_string(),
        holders: format!("; pids {} ...", holders.join(", ")),
    })
}

/// The EAL arguments of a client: a secondary on the engine's prefix that
/// scans no PCI bus, opens no telemetry socket of its own, and runs its one
/// lcore on `lcore` (one of [`CLIENT_LCORES`]), allowed on every CPU this
/// thread may use (no pinning of the application's thread).
pub fn eal_args(prefix: &str, lcore: u32) -> Vec<String> {
    let cpus = dpdk_sys::os::allowed_cpus();
    let set = if cpus.is_empty() {
        "0".to_string()
    } else {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        "--proc-type=secondary".into(),
        format!("--file-prefix={prefix}"),
        "--no-pci".into(),
        "--no-telemetry".into(),
        format!("--lcores={lcore}@({set})"),
    ]
}

fn eal_error(prefix: &str, dir: &Path, err: &str, lines: &[String]) -> AttachError {
    let reason = eal_reason(lines).unwrap_or_else(|| err.to_string());
    let hint = if !dpdk_sys::os::is_root() {
        " (run as root: the engine's runtime files and hugepages are root's)".to_string()
    } else if !secondary::primary_alive(&dir.join("config")) {
        " (the engine exited meanwhile: start it and attach again)".to_string()
    } else {
        String::new()
    };
    AttachError::Eal {
        prefix: prefix.into(),
        reason,
        hint,
    }
}

/// The EAL's last few lines that explain a failure (routine lines
/// dropped, as the engine's own `eal_log::reason` drops them).
fn eal_reason(lines: &[String]) -> Option<String> {
    let r = udpdemux::eal_log::reason(lines);
    (!r.is_empty()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_prefixes_are_refused_before_the_eal() {
        for p in ["", "a/b", ".", ".."] {
            let e = Client::attach(p).unwrap_err();
            assert!(matches!(e, AttachError::InvalidPrefix { .. }), "{p:?}: {e}");
        }
    }

    #[test]
    fn an_unknown_prefix_says_so_and_names_the_fix() {
        let p = format!("no-such-engine-{}", std::process::id());
        let e = Client::attach(&p).unwrap_err();
        assert!(matches!(e, AttachError::NoSuchPrefix { .. }), "{e}");
        let s = e.to_string();
        assert!(s.contains(&p) && s.contains("start the engine"), "{s}");
        assert!(!s.contains('\n'), "one line: {s}");
    }

    #[test]
    fn the_client_lcore_runs_unpinned() {
        let a = eal_args("x", 64);
        assert!(a.contains(&"--proc-type=secondary".to_string()));
        assert!(a.contains(&"--no-pci".to_string()));
        assert!(a.iter().any(|s| s.starts_with("--lcores=64@(")));
    }
}
