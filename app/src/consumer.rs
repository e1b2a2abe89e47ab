//! Consumers: drain a socket's delivery ring, run its handler, free the
//! datagrams and release their memory. A consumer lcore runs
//! [`consumer_loop`]; without one, the main lcore calls [`drain_once`]
//! between its stats duties.
use std::sync::atomic::Ordering;

use dpdk_sys::ffi;

use crate::alloc_guard::HotSection;
use crate::config::Handler;
use crate::engine::{Drainer, Shared, SocketEntry};
use crate::stats::{Counter, Padded};

/// Datagrams taken from a ring per dequeue.
pub const CONSUME_BURST: usize = 64;

/// A consumer lcore and the sockets it was given by name (empty: any).
pub struct ConsumerLcore {
    pub lcore: u32,
    pub sockets: Vec<String>,
    pub stats: Padded<ConsumerLoopStats>,
}

#[derive(Debug, Default)]
pub struct ConsumerLoopStats {
    pub polls: Counter,
    pub idle_polls: Counter,
    pub datagrams: Counter,
}

impl ConsumerLcore {
    pub fn new(lcore: u32, sockets: Vec<String>) -> Self {
        ConsumerLcore { lcore, sockets, stats: Padded::default() }
    }
}

/// Whether this build can run a handler.
pub fn handler_available(h: Handler) -> bool {
    matches!(h, Handler::Count | Handler::None)
}

/// A consumer lcore's loop: until told to stop and every ring it drains is empty.
pub fn consumer_loop(shared: &Shared, idx: Option<usize>) -> i32 {
    // First arc-swap load on this thread allocates its debt slot: not per packet.
    drop(shared.sockets.load());
    let _hot = HotSection::enter();
    loop {
        // Read the flag before draining: a stop seen here means RX has
        // stopped, so an empty pass afterwards really is the end.
        let stopping = shared.consumers_stop.load(Ordering::SeqCst);
        let n = drain_once(shared, idx);
        if let Some(i) = idx {
            let st = &shared.consumers[i].stats;
            st.polls.add(1);
            if n == 0 {
                st.idle_polls.add(1);
            }
            st.datagrams.add(n as u64);
        }
        if stopping && n == 0 {
            return 0;
        }
    }
}

/// One pass over the sockets drained by consumer `idx` (None: the main lcore).
pub fn drain_once(shared: &Shared, idx: Option<usize>) -> usize {
    let me = match idx {
        Some(i) => Drainer::Lcore(i),
        None => Drainer::Main,
    };
    let socks = shared.sockets.load();
    let mut total = 0;
    for e in socks.iter().filter(|e| e.drainer == me) {
        total += drain_socket(e);
    }
    total
}

/// Take one burst from a socket's ring, handle it, free it.
pub fn drain_socket(e: &SocketEntry) -> usize {
    let mut bufs: [*mut ffi::rte_mbuf; CONSUME_BURST] = [std::ptr::null_mut(); CONSUME_BURST];
    let n = e.sock.dequeue(&mut bufs);
    if n == 0 {
        return 0;
    }
    match e.sock.handler() {
        Handler::Count | Handler::None => {}
        Handler::Echo | Handler::Pcap => {}
    }
    // SAFETY: dequeued from this socket's ring just now; ours to free.
    unsafe { e.sock.consume(&mut bufs[..n]) };
    n
}
