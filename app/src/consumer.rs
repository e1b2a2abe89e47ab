//! Consumers: drain a socket's delivery ring, run its handler, free the
//! datagrams and release their memory. A consumer lcore runs
//! [`consumer_loop`]; without one, the main lcore calls [`drain_once`]
//! between its stats duties.
use std::sync::atomic::Ordering;

use dpdk_sys::ffi;

use crate::alloc_guard::HotSection;
use crate::config::Handler;
use crate::engine::{Drainer, Shared, SocketEntry};
use crate::handlers;
use crate::stats::{Counter, Padded};

/// Datagrams taken from a ring per dequeue.
pub const CONSUME_BURST: usize = 64;

/// A consumer lcore and the sockets it was given by name (empty: any).
pub struct ConsumerLcore {
    pub lcore: u32,
    pub sockets: Vec<String>,
    pub stats: Padded<ConsumerLoopStats>,
    /// This lcore's TX queue on every port (echo replies); None: it has none.
    pub tx_queue: Option<u16>,
}

#[derive(Debug, Default)]
pub struct ConsumerLoopStats {
    pub polls: Counter,
    pub idle_polls: Counter,
    pub datagrams: Counter,
}

impl ConsumerLcore {
    pub fn new(lcore: u32, sockets: Vec<String>) -> Self {
        ConsumerLcore { lcore, sockets, stats: Padded::default(), tx_queue: None }
    }
}

/// Whether this build can run a handler.
pub fn handler_available(h: Handler) -> bool {
    matches!(h, Handler::Count | Handler::None | Handler::Echo | Handler::Pcap)
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
        total += drain_socket(shared, e);
    }
    total
}

/// The TX queue of whoever drains `e` (each draining lcore has its own).
fn tx_queue_of(shared: &Shared, e: &SocketEntry) -> Option<u16> {
    match e.drainer {
        Drainer::Lcore(i) => shared.consumers.get(i).and_then(|c| c.tx_queue),
        Drainer::Main => shared.main_tx_queue,
        Drainer::External => None,
    }
}

/// A slow application, emulated: how many datagrams the consumer may take
/// now so that it never exceeds `pps` (token bucket on the TSC, at most one
/// burst of credit). Only the socket's drainer calls it.
fn allowance(e: &SocketEntry, pps: u64, hz: u64) -> usize {
    let c = &e.sock.consumer;
    let now = dpdk_sys::eal::rdtsc();
    let last = match c.rate_tsc.get() {
        0 => now,
        t => t,
    };
    let earned = (now.saturating_sub(last) as u128 * pps as u128 / hz.max(1) as u128) as u64;
    if earned > 0 {
        // Advance by the time the earned credit covers, keeping the remainder.
        c.rate_tsc.set(last + (earned as u128 * hz as u128 / pps as u128) as u64);
        c.rate_credit.set((c.rate_credit.get() + earned).min(CONSUME_BURST as u64));
    } else if c.rate_tsc.get() == 0 {
        c.rate_tsc.set(now);
    }
    c.rate_credit.get().min(CONSUME_BURST as u64) as usize
}

/// Take one burst from a socket's ring, handle it, free it.
pub fn drain_socket(shared: &Shared, e: &SocketEntry) -> usize {
    let mut bufs: [*mut ffi::rte_mbuf; CONSUME_BURST] = [std::ptr::null_mut(); CONSUME_BURST];
    // The rate applies while traffic flows; at shutdown consumers finish
    // what was delivered, as an application drains its socket before close.
    let pps = e.sock.consume_rate_pps();
    let limited = pps > 0 && !shared.consumers_stop.load(Ordering::Relaxed);
    let max = if limited { allowance(e, pps, shared.tsc_hz) } else { CONSUME_BURST };
    let n = e.sock.dequeue(&mut bufs[..max]);
    if n == 0 {
        return 0;
    }
    if limited {
        let c = &e.sock.consumer.rate_credit;
        c.set(c.get().saturating_sub(n as u64));
    }
    match e.sock.handler() {
        Handler::Count | Handler::None => {}
        Handler::Echo => {
            let tx = handlers::TxCtx { ifaces: &shared.ifaces, queue: tx_queue_of(shared, e) };
            // SAFETY: dequeued from this socket's ring just now; ours until consume below.
            unsafe { handlers::echo::echo_burst(&e.sock, &bufs[..n], tx) };
        }
        Handler::Pcap => {
            // Only this socket's drainer locks it, once per burst: uncontended.
            let mut st = e.sock.handler_state.lock().unwrap_or_else(|p| p.into_inner());
            if let handlers::State::Pcap(sink) = &mut *st {
                // SAFETY: as above.
                unsafe { sink.write_burst(&e.sock, &bufs[..n]) };
            }
        }
    }
    // SAFETY: dequeued from this socket's ring just now; ours to free.
    unsafe { e.sock.consume(&mut bufs[..n]) };
    n
}
