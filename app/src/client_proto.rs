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
            ("open" | "close" | "unbind" | "bind" | "attach" | "detach", _) => Err(bad()),
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

/// Parse a reply: `Ok(None)` for a bare `ok`, `Ok(Some)` for an open's.
pub fn parse_reply(b: &[u8]) -> Result<Option<Opened>, (Refusal, String)> {
    let s = String::from_utf8_lossy(b);
    if let Some(r) = s.strip_prefix("err ") {
        let (w, reason) = r.split_once(' ').unwrap_or((r, ""));
        let kind = [Refusal::NoSuchSocket, Refusal::Busy]
            .into_iter()
            .find(|k| k.word() == w)
            .unwrap_or(Refusal::Other);
        return Err((kind, reason.to_string()));
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
}
