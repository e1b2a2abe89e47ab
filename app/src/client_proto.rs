//! What the engine and an out-of-process client (`udpdemux-client`) agree
//! on: the IPC action and its messages, and the per-socket shared counters
//! (issue 16).
//!
//! One action, [`ACTION`], carries text requests and replies (at most 256
//! bytes each, `rte_mp_msg`'s parameter):
//!
//! | request | reply |
//! |---|---|
//! | `open <socket> <pid>` | `ok <id> <ring> <zone>` or `err <reason>` |
//! | `close <socket> <pid>` | `ok` or `err <reason>` |
//! | `bind <socket> <pid> <local> <remote or -> <reuseport 0/1> <rcvbuf> <ring_size>` | as `open` |
//! | `unbind <socket> <pid>` | `ok` or `err <reason>` |
//! | `attach <lcore> <pid>` | `ok` or `err <reason>` |
//! | `detach - <pid>` | `ok` |
//! | `stats <socket> <pid>` | `ok stats <len>` and one descriptor, or `err <reason>` |
//!
//! `stats` asks for any live socket's counters (not only the client's
//! own), as the engine's exit JSON and telemetry report that socket
//! ([`SocketStats`]); an unknown name is `err nosuch no socket named ...`
//! (the word `nosuch`, as for `open`). The counters do not travel in the
//! 256-byte parameter: the reply carries one file descriptor (the EAL's IPC
//! passes up to `RTE_MP_MAX_FD_NUM` with `SCM_RIGHTS`), a sealed memfd
//! holding `<len>` bytes of `key=value` lines ([`SocketStats::encode`]).
//! Why not a compact `ok k=v ...` reply: the report has 21 numbers, 19 of
//! them u64 counters of up to 20 digits; the text is some 350 bytes even
//! when every counter is 0 (the keys alone take 263), about 750 at their
//! largest, and even with the keys dropped the values alone take 421.
//! A reply that fits only while the counters are small would one day be
//! cut, or need a second encoding; the memfd has no limit and leaves room
//! for what a later version adds (a decoder ignores keys it does not know,
//! and a missing key is an error, not a zero).
//!
//! Lcore ids: every client process takes one of [`CLIENT_LCORES`] for its
//! EAL main lcore, a different one per live client, because DPDK's
//! mempool caches (in shared memory, one per lcore id and pool) have no
//! lock: two processes on one lcore id would corrupt them. A client picks
//! the first id whose slot file ([`slot_lock_path`], in the engine's
//! runtime directory) it can lock exclusively (`flock`), holds the lock
//! until it exits (the kernel drops it however it exits), initialises its
//! EAL on that id, and then tells the engine (`attach`) before it touches
//! any mempool; `detach` after it has flushed its caches. The engine
//! watches every attached pid, and when one dies it gives what the dead
//! client's lcore cache holds back to the pools (or, if the client died
//! while changing it, forgets it), holding the slot's lock meanwhile, or,
//! when a new client already holds the slot, before it answers that
//! client's `attach`. The engine refuses a config whose lcores overlap the
//! range (`config::Config::problems`).
//!
//! `bind` makes a new socket (the options of a `[[socket]]` table, checked
//! by the rules `udpdemux check` applies) consumed by that client alone;
//! `unbind`, or the client's death, removes it.
//!
//! A socket opened by a client is consumed by that client only: the
//! engine's consumer skips its delivery ring until the client closes it.
//! The client frees the mbufs it took and adds what they held to the
//! socket's shared counters ([`Slot`], in the memzone `udx_c<id>`): running
//! totals only the client writes; the engine's main lcore releases what
//! they grew by since it last looked from the socket's rcvbuf accounting,
//! the same release its own consumers do.
//!
//! Liveness: after the counters the zone holds [`ROWS`] rows of an
//! in-flight table (`dpdk_sys::inflight`): each batch a client fills
//! claims a row, and the client records there what it dequeued before the
//! application sees it, until it has counted and freed it. The engine
//! checks every client pid it knows of every [`LIVENESS_MS`]; a dead one's
//! rows are reclaimed (freed, their memory released, counted
//! `freed_at_close` and `reclaimed_from_client`) and its open sockets
//! closed as its own close would have (`runtime::clients`).

/// The engine's IPC action name (`rte_mp_action_register`).
pub const ACTION: &str = "udx_ctl";

/// The memzone of socket `id`'s shared counters.
pub fn zone_name(id: u32) -> String {
    format!("udx_c{id}")
}

/// The slots of a socket's shared counter zone (`AtomicU64` each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Slot {
    /// The socket's id (written once by the engine).
    SocketId = 0,
    /// Truesize bytes of mbufs clients have freed, in total (clients add
    /// to it, one at a time; the engine only reads it).
    Released = 1,
    /// Datagrams clients have freed, in total.
    Consumed = 2,
    /// Their UDP payload bytes, in total.
    ConsumedBytes = 3,
    /// The pid of the client that has the socket open (0: none; engine-written).
    Owner = 4,
}

/// Slots before the rows (a cache line).
pub const SLOTS: usize = 8;

/// In-flight rows per socket: batches of one socket a client can hold at
/// once (a further receive into another batch gets nothing until one is
/// cleared or dropped).
pub const ROWS: usize = 16;

/// Words of a socket's zone: the slots, then the rows.
pub const ZONE_WORDS: usize = SLOTS + ROWS * dpdk_sys::inflight::ROW_WORDS;

/// Row `i` of a zone's words.
pub fn row(words: &[std::sync::atomic::AtomicU64], i: usize) -> dpdk_sys::inflight::Row<'_> {
    let w = dpdk_sys::inflight::ROW_WORDS;
    let at = SLOTS + i * w;
    dpdk_sys::inflight::Row::new(&words[at..at + w]).expect("a zone holds ZONE_WORDS words")
}

/// How often, at most, the engine checks that its clients are alive (a
/// dead one is reaped within this plus a main-loop pass).
pub const LIVENESS_MS: u64 = 200;

/// The lcore ids out-of-process clients take, one per live client (see
/// the module): the upper half of DPDK's `RTE_MAX_LCORE` (128 in Debian's
/// 22.11), which the engine's own lcores must stay below.
pub const CLIENT_LCORES: std::ops::RangeInclusive<u32> = 64..=127;

/// The directory of the client slot files, in an engine's runtime
/// directory (the engine makes it at start, so that clients add no file
/// at the directory's top).
pub fn slot_dir(runtime_dir: &std::path::Path) -> std::path::PathBuf {
    runtime_dir.join("clients")
}

/// The file whose exclusive `flock` gives a client lcore id `lcore`.
pub fn slot_lock_path(runtime_dir: &std::path::Path, lcore: u32) -> std::path::PathBuf {
    slot_dir(runtime_dir).join(format!("lcore-{lcore}.lock"))
}

/// A request to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Open {
        socket: String,
        pid: u32,
    },
    Close {
        socket: String,
        pid: u32,
    },
    Bind {
        opts: SocketOptions,
        pid: u32,
    },
    Unbind {
        socket: String,
        pid: u32,
    },
    /// A client process took lcore id `lcore` (one of [`CLIENT_LCORES`],
    /// its slot locked) and has not touched a mempool yet.
    Attach {
        lcore: u32,
        pid: u32,
    },
    /// The client flushed its caches and leaves.
    Detach {
        pid: u32,
    },
    /// The counters of socket `socket` (any live socket of the engine).
    Stats {
        socket: String,
        pid: u32,
    },
}

/// What to open or bind: a bound (or connected) socket consumed by the
/// caller (`api::open` in-process, a client's `bind` over IPC): the
/// options of a `[[socket]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    pub name: String,
    pub local: std::net::SocketAddr,
    pub remote: Option<std::net::SocketAddr>,
    pub reuseport: bool,
    pub rcvbuf: u32,
    pub ring_size: u32,
}

impl SocketOptions {
    /// Kernel-like defaults: `rmem_default` receive buffer, 4096-entry ring.
    pub fn new(name: &str, local: std::net::SocketAddr) -> SocketOptions {
        SocketOptions {
            name: name.into(),
            local,
            remote: None,
            reuseport: false,
            rcvbuf: 212_992,
            ring_size: 4096,
        }
    }
}

impl Request {
    pub fn encode(&self) -> String {
        match self {
            Request::Open { socket, pid } => format!("open {socket} {pid}"),
            Request::Close { socket, pid } => format!("close {socket} {pid}"),
            Request::Unbind { socket, pid } => format!("unbind {socket} {pid}"),
            Request::Attach { lcore, pid } => format!("attach {lcore} {pid}"),
            Request::Detach { pid } => format!("detach - {pid}"),
            Request::Stats { socket, pid } => format!("stats {socket} {pid}"),
            Request::Bind { opts: o, pid } => format!(
                "bind {} {pid} {} {} {} {} {}",
                o.name,
                o.local,
                o.remote.map_or("-".to_string(), |r| r.to_string()),
                u8::from(o.reuseport),
                o.rcvbuf,
                o.ring_size
            ),
        }
    }

    pub fn decode(b: &[u8]) -> Result<Request, String> {
        let s = std::str::from_utf8(b).map_err(|_| "request is not UTF-8".to_string())?;
        let w: Vec<&str> = s.split(' ').collect();
        let bad = || format!("malformed request {s:?}");
        let (verb, socket, pid) = match w.as_slice() {
            [verb, socket, pid, ..] => (*verb, socket.to_string(), *pid),
            _ => return Err(bad()),
        };
        let pid: u32 = pid.parse().map_err(|_| format!("malformed pid in {s:?}"))?;
        match (verb, &w[3..]) {
            ("open", []) => Ok(Request::Open { socket, pid }),
            ("close", []) => Ok(Request::Close { socket, pid }),
            ("unbind", []) => Ok(Request::Unbind { socket, pid }),
            ("stats", []) => Ok(Request::Stats { socket, pid }),
            ("attach", []) => match socket.parse::<u32>() {
                Ok(lcore) if CLIENT_LCORES.contains(&lcore) => Ok(Request::Attach { lcore, pid }),
                _ => Err(format!(
                    "attach: lcore {socket:?} is not one of the client lcores {}..={}",
                    CLIENT_LCORES.start(),
                    CLIENT_LCORES.end()
                )),
            },
            ("detach", []) if socket == "-" => Ok(Request::Detach { pid }),
            ("bind", [local, remote, reuse, rcvbuf, ring]) => {
                let addr = |a: &str| {
                    a.parse()
                        .map_err(|_| format!("bind {socket}: {a:?} is not an address:port"))
                };
                let num = |v: &str, what: &str| {
                    v.parse::<u32>()
                        .map_err(|_| format!("bind {socket}: {what} {v:?} is not a number"))
                };
                Ok(Request::Bind {
                    opts: SocketOptions {
                        local: addr(local)?,
                        remote: match *remote {
                            "-" => None,
                            r => Some(addr(r)?),
                        },
                        reuseport: match *reuse {
                            "0" => false,
                            "1" => true,
                            _ => return Err(bad()),
                        },
                        rcvbuf: num(rcvbuf, "rcvbuf")?,
                        ring_size: num(ring, "ring_size")?,
                        name: socket,
                    },
                    pid,
                })
            }
            ("open" | "close" | "unbind" | "bind" | "attach" | "detach" | "stats", _) => Err(bad()),
            (v, _) => Err(format!("unknown request {v:?}")),
        }
    }
}

/// What `open` gives the client: where the socket's datagrams and counters are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub id: u32,
    pub ring: String,
    pub zone: String,
}

/// Why the engine refused a request (the word after `err`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No socket of that name.
    NoSuchSocket,
    /// Another client has it open.
    Busy,
    /// Anything else (the reason says what).
    Other,
}

impl Refusal {
    fn word(self) -> &'static str {
        match self {
            Refusal::NoSuchSocket => "nosuch",
            Refusal::Busy => "busy",
            Refusal::Other => "refused",
        }
    }
}

/// Reply text: `ok ...` or `err <kind> <reason>` (cut to fit a message).
pub fn reply_ok(o: Option<&Opened>) -> String {
    match o {
        Some(o) => format!("ok {} {} {}", o.id, o.ring, o.zone),
        None => "ok".into(),
    }
}

pub fn reply_err(kind: Refusal, reason: &str) -> String {
    let mut s = format!("err {} {reason}", kind.word());
    if s.len() > 256 {
        let mut cut = 253;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// An `err <kind> <reason>` reply's kind and reason.
fn refusal(s: &str) -> Option<(Refusal, String)> {
    let r = s.strip_prefix("err ")?;
    let (w, reason) = r.split_once(' ').unwrap_or((r, ""));
    let kind = [Refusal::NoSuchSocket, Refusal::Busy]
        .into_iter()
        .find(|k| k.word() == w)
        .unwrap_or(Refusal::Other);
    Some((kind, reason.to_string()))
}

/// Parse a reply: `Ok(None)` for a bare `ok`, `Ok(Some)` for an open's.
pub fn parse_reply(b: &[u8]) -> Result<Option<Opened>, (Refusal, String)> {
    let s = String::from_utf8_lossy(b);
    if let Some(e) = refusal(&s) {
        return Err(e);
    }
    if s == "ok" {
        return Ok(None);
    }
    let w: Vec<&str> = s.split(' ').collect();
    match w.as_slice() {
        ["ok", id, ring, zone] => Ok(Some(Opened {
            id: id
                .parse()
                .map_err(|_| (Refusal::Other, format!("malformed reply {s:?}")))?,
            ring: ring.to_string(),
            zone: zone.to_string(),
        })),
        _ => Err((Refusal::Other, format!("malformed reply {s:?}"))),
    }
}

/// A `stats` reply's text: the length of the report in its descriptor.
pub fn reply_stats(len: usize) -> String {
    format!("ok stats {len}")
}

/// Parse a `stats` reply: the report's length (in the descriptor that
/// came with it), or the refusal.
pub fn parse_stats_reply(b: &[u8]) -> Result<usize, (Refusal, String)> {
    let s = String::from_utf8_lossy(b);
    if let Some(e) = refusal(&s) {
        return Err(e);
    }
    s.strip_prefix("ok stats ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| (Refusal::Other, format!("malformed stats reply {s:?}")))
}

/// The most bytes a stats report may have (a client refuses a longer one
/// rather than read an unbounded file the engine handed it).
pub const MAX_STATS_REPORT: usize = 64 * 1024;

/// One socket's counters, as the engine's exit JSON (`sockets[]`) and
/// telemetry (`/udpdemux/sockets,NAME`) report them, read while it runs:
/// what `stats` answers a client (`udpdemux_client::Client::stats`) and
/// `udpdemux::api::stats` gives an in-process application. Counters only
/// grow, except `rmem`, `rcvbuf` (a reload may change it), `ring_count`,
/// `client_pid`, and `consumed`-side figures of a socket a client reads,
/// which the engine folds in once per main-loop pass (a read can lag the
/// client's own frees by that much). Taken without stopping the RX
/// lcores: fields may be mutually off by datagrams in flight.
///
/// The drop reasons keep the engine's names (the exit JSON's `drops`
/// keys); where the kernel has a counter for the same event it is named
/// on the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketStats {
    /// The engine's socket id (its ring is `udx_s<id>`).
    pub id: u32,
    /// The bound address and port.
    pub local: std::net::SocketAddr,
    /// Who consumes it when no client has it open: `count`, `echo`,
    /// `pcap`, or `none` (a socket bound by a client or the library API).
    pub handler: String,
    /// The pid of the client that has it open (0: the engine's own
    /// consumer, or an in-process application, reads it).
    pub client_pid: u32,
    /// Datagrams demuxed to this socket (delivered plus dropped below).
    pub offered: u64,
    /// Datagrams put into its delivery ring (the kernel's
    /// `UdpInDatagrams`, counted per socket and after admission).
    pub delivered: u64,
    /// Datagrams taken out of the ring and freed by their consumer (the
    /// engine's handler, an application, or a client).
    pub consumed: u64,
    /// Their UDP payload bytes (the engine counts bytes when a datagram
    /// is consumed, not when it is delivered).
    pub consumed_bytes: u64,
    /// Of `consumed`: by out-of-process clients.
    pub client_consumed: u64,
    /// Datagrams left in the ring when it was emptied at a close, unbind
    /// or a dead client's reaping (delivered, then freed unread).
    pub freed_at_close: u64,
    /// Of `freed_at_close`: datagrams a dead client held unread.
    pub reclaimed_from_client: u64,
    /// Of `consumed`: datagrams a client died while freeing.
    pub lost_in_client_free: u64,
    /// Dropped on arrival, over `rcvbuf`: the kernel's
    /// `SKB_DROP_REASON_SOCKET_RCVBUFF`, counted in `UdpRcvbufErrors`.
    pub drop_rcvbuf_full: u64,
    /// Admitted to a stage, over `rcvbuf` when its batch was drained: the
    /// kernel's `SKB_DROP_REASON_PROTO_MEM`, counted in `UdpMemErrors`.
    pub drop_rcvbuf_full_at_drain: u64,
    /// Refused by a full delivery ring (no kernel counterpart: a kernel
    /// socket's queue is bounded by rcvbuf alone; the engine's UDP MIB
    /// counts these in `UdpRcvbufErrors` too).
    pub drop_ring_full: u64,
    /// The socket was closed or removed while the datagram was on its way
    /// (no kernel counter).
    pub drop_closed: u64,
    /// Receive budget in bytes of truesize (`SO_RCVBUF`).
    pub rcvbuf: u64,
    /// Bytes of truesize charged now (`sk_rmem_alloc`; the `rx_queue` of
    /// `/proc/net/udp`): datagrams in the ring and held unfreed.
    pub rmem: u64,
    /// The most `rmem` has been.
    pub rmem_high_water: u64,
    /// Datagrams copied into small buffers under memory pressure.
    pub condensed: u64,
    /// Datagrams waiting in the delivery ring now.
    pub ring_count: u64,
    /// Datagrams the delivery ring holds at most.
    pub ring_size: u64,
}

impl SocketStats {
    /// Every dropped datagram, all reasons.
    pub fn drops(&self) -> u64 {
        // Wrapping, as the engine sums its own drop counters.
        [
            self.drop_rcvbuf_full,
            self.drop_rcvbuf_full_at_drain,
            self.drop_ring_full,
            self.drop_closed,
        ]
        .into_iter()
        .fold(0, u64::wrapping_add)
    }

    /// The counters as `(key, value)`, keys as in the exit JSON's
    /// `sockets[]` (drops as telemetry's `drop_<reason>`).
    pub fn counters(&self) -> [(&'static str, u64); 21] {
        [
            ("id", u64::from(self.id)),
            ("client_pid", u64::from(self.client_pid)),
            ("offered", self.offered),
            ("delivered", self.delivered),
            ("consumed", self.consumed),
            ("consumed_bytes", self.consumed_bytes),
            ("client_consumed", self.client_consumed),
            ("freed_at_close", self.freed_at_close),
            ("reclaimed_from_client", self.reclaimed_from_client),
            ("lost_in_client_free", self.lost_in_client_free),
            ("drop_rcvbuf_full", self.drop_rcvbuf_full),
            ("drop_rcvbuf_full_at_drain", self.drop_rcvbuf_full_at_drain),
            ("drop_ring_full", self.drop_ring_full),
            ("drop_closed", self.drop_closed),
            ("rcvbuf", self.rcvbuf),
            ("rmem", self.rmem),
            ("rmem_high_water", self.rmem_high_water),
            ("condensed", self.condensed),
            ("ring_count", self.ring_count),
            ("ring_size", self.ring_size),
            ("drops", self.drops()),
        ]
    }

    /// The report: `key=value` lines (`local` and `handler` first, then
    /// [`SocketStats::counters`]).
    pub fn encode(&self) -> String {
        let mut s = format!("local={}\nhandler={}\n", self.local, self.handler);
        for (k, v) in self.counters() {
            s.push_str(&format!("{k}={v}\n"));
        }
        s
    }

    /// Read a report. Keys it does not know are skipped (a newer engine
    /// may add some); a missing one, or a value that does not parse, is
    /// an error.
    pub fn decode(b: &[u8]) -> Result<SocketStats, String> {
        let s = std::str::from_utf8(b).map_err(|_| "stats report is not UTF-8".to_string())?;
        let mut kv = std::collections::HashMap::new();
        for line in s.lines().filter(|l| !l.is_empty()) {
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("stats report line {line:?} is not key=value"))?;
            kv.insert(k, v);
        }
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("stats report has no {k}"))
        };
        let num = |k: &str| -> Result<u64, String> {
            let v = get(k)?;
            v.parse()
                .map_err(|_| format!("stats report: {k} = {v:?} is not a number"))
        };
        let small = |k: &str| -> Result<u32, String> {
            u32::try_from(num(k)?).map_err(|_| format!("stats report: {k} is out of range"))
        };
        let local = get("local")?;
        let st = SocketStats {
            id: small("id")?,
            local: local
                .parse()
                .map_err(|_| format!("stats report: local = {local:?} is not an address:port"))?,
            handler: get("handler")?.to_string(),
            client_pid: small("client_pid")?,
            offered: num("offered")?,
            delivered: num("delivered")?,
            consumed: num("consumed")?,
            consumed_bytes: num("consumed_bytes")?,
            client_consumed: num("client_consumed")?,
            freed_at_close: num("freed_at_close")?,
            reclaimed_from_client: num("reclaimed_from_client")?,
            lost_in_client_free: num("lost_in_client_free")?,
            drop_rcvbuf_full: num("drop_rcvbuf_full")?,
            drop_rcvbuf_full_at_drain: num("drop_rcvbuf_full_at_drain")?,
            drop_ring_full: num("drop_ring_full")?,
            drop_closed: num("drop_closed")?,
            rcvbuf: num("rcvbuf")?,
            rmem: num("rmem")?,
            rmem_high_water: num("rmem_high_water")?,
            condensed: num("condensed")?,
            ring_count: num("ring_count")?,
            ring_size: num("ring_size")?,
        };
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        for r in [
            Request::Open {
                socket: "dns4".into(),
                pid: 42,
            },
            Request::Close {
                socket: "x".into(),
                pid: 1,
            },
        ] {
            assert_eq!(Request::decode(r.encode().as_bytes()), Ok(r));
        }
        assert!(Request::decode(b"open a").is_err());
        assert!(Request::decode(b"bind a 1").is_err());
        assert!(Request::decode(b"open a 1 2").is_err());
        for r in [
            Request::Bind {
                opts: SocketOptions {
                    name: "app".into(),
                    local: "[fd00::9]:5000".parse().unwrap(),
                    remote: Some("[fd00::7]:4000".parse().unwrap()),
                    reuseport: true,
                    rcvbuf: 4096,
                    ring_size: 512,
                },
                pid: 7,
            },
            Request::Bind {
                opts: SocketOptions {
                    name: "b".into(),
                    local: "198.18.1.9:53".parse().unwrap(),
                    remote: None,
                    reuseport: false,
                    rcvbuf: 212_992,
                    ring_size: 4096,
                },
                pid: 1,
            },
            Request::Unbind {
                socket: "app".into(),
                pid: 7,
            },
            Request::Attach { lcore: 64, pid: 9 },
            Request::Attach { lcore: 127, pid: 9 },
            Request::Detach { pid: 9 },
        ] {
            assert!(r.encode().len() <= 256, "{}", r.encode());
            assert_eq!(Request::decode(r.encode().as_bytes()), Ok(r));
        }
        assert!(Request::decode(b"attach 63 9").is_err());
        assert!(Request::decode(b"attach 128 9").is_err());
        assert!(Request::decode(b"detach x 9").is_err());
        assert!(Request::decode(b"bind a 1 198.18.1.1:53 - 2 4096 64").is_err());
        assert!(Request::decode(b"bind a 1 nowhere - 0 4096 64")
            .unwrap_err()
            .contains("not an address"));
        let o = Opened {
            id: 3,
            ring: "udx_s3".into(),
            zone: zone_name(3),
        };
        assert_eq!(parse_reply(reply_ok(Some(&o)).as_bytes()), Ok(Some(o)));
        assert_eq!(parse_reply(b"ok"), Ok(None));
        let e = reply_err(Refusal::Busy, "open by 7");
        assert_eq!(
            parse_reply(e.as_bytes()),
            Err((Refusal::Busy, "open by 7".into()))
        );
        assert!(reply_err(Refusal::Other, &"é".repeat(300)).len() <= 256);
    }

    fn sample(v: u64) -> SocketStats {
        SocketStats {
            id: 7,
            local: "[fd00::1]:53".parse().unwrap(),
            handler: "none".into(),
            client_pid: 4242,
            offered: v,
            delivered: v,
            consumed: v,
            consumed_bytes: v,
            client_consumed: v,
            freed_at_close: v,
            reclaimed_from_client: v,
            lost_in_client_free: v,
            drop_rcvbuf_full: v / 4,
            drop_rcvbuf_full_at_drain: v / 4,
            drop_ring_full: v / 4,
            drop_closed: v / 4,
            rcvbuf: v,
            rmem: v,
            rmem_high_water: v,
            condensed: v,
            ring_count: v,
            ring_size: v,
        }
    }

    #[test]
    fn stats_requests_and_reports_round_trip() {
        let r = Request::Stats {
            socket: "dns4".into(),
            pid: 42,
        };
        assert_eq!(r.encode(), "stats dns4 42");
        assert_eq!(Request::decode(r.encode().as_bytes()), Ok(r));
        assert!(Request::decode(b"stats dns4").is_err());
        assert!(Request::decode(b"stats dns4 42 x").is_err());
        assert!(Request::decode(b"stats dns4 pid").is_err());

        for v in [0, 1234, u64::MAX] {
            let st = sample(v);
            let text = st.encode();
            assert_eq!(
                SocketStats::decode(text.as_bytes()),
                Ok(st.clone()),
                "{text}"
            );
            // Keys the decoder does not know (a newer engine's) are skipped.
            let newer = format!("{text}future_counter=9\n");
            assert_eq!(SocketStats::decode(newer.as_bytes()), Ok(st));
        }
        // Why the report travels in a descriptor: at their largest the
        // counters do not fit the 256-byte parameter.
        assert!(sample(0).encode().len() > dpdk_sys::mp::MAX_PARAM);
        let big = sample(u64::MAX).encode();
        assert!(big.len() > dpdk_sys::mp::MAX_PARAM, "{}", big.len());
        assert!(big.len() < MAX_STATS_REPORT);

        // A missing key or a bad value is an error, not a zero.
        let text = sample(5).encode();
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with("drop_ring_full="))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            SocketStats::decode(without.as_bytes()),
            Err("stats report has no drop_ring_full".into())
        );
        let bad = text.replace("rmem=5", "rmem=five");
        assert!(SocketStats::decode(bad.as_bytes())
            .unwrap_err()
            .contains("rmem = \"five\" is not a number"));
        assert!(SocketStats::decode(b"garbage")
            .unwrap_err()
            .contains("not key=value"));
        assert!(SocketStats::decode(&[0xff, 0xfe]).is_err());
        let pid = text.replace("client_pid=4242", "client_pid=99999999999");
        assert!(SocketStats::decode(pid.as_bytes())
            .unwrap_err()
            .contains("out of range"));

        // The reply: a length, or the refusal `open` would give.
        assert_eq!(parse_stats_reply(reply_stats(412).as_bytes()), Ok(412));
        let e = reply_err(Refusal::NoSuchSocket, "no socket named \"x\"");
        assert_eq!(e, "err nosuch no socket named \"x\"");
        assert_eq!(
            parse_stats_reply(e.as_bytes()),
            Err((Refusal::NoSuchSocket, "no socket named \"x\"".into()))
        );
        assert!(parse_stats_reply(b"ok").is_err());
        assert!(parse_stats_reply(b"ok stats many").is_err());
        assert_eq!(sample(8).drops(), 8);
    }
}
