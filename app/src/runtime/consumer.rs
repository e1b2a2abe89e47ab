//! Consumers: read a socket's delivery ring, run its handler, free the
//! datagrams and release their memory. A consumer lcore runs
//! [`consumer_loop`]; without one, the main lcore polls a [`Consumer`] between
//! its stats duties (`Engine::main_loop`).
//!
//! Shaped like DPDK's examples: the per-poll path reads no system clock
//! (one TSC read per dequeued burst, for the latency histogram and the rate
//! bucket), zeroes no array, loads no shared pointer (the socket registry
//! is re-read when its generation changes), skips an empty ring with two
//! loads, and frees each burst with one `rte_pktmbuf_free_bulk`.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dpdk_sys::{eal, MbufBurst};

use super::alloc_guard::HotSection;
use super::bench::{alternate, pipeline_floor};
use super::shared::{ConsumedBy, Shared, SocketEntry};
use crate::config::Handler;
use crate::handlers::{self, CONSUME_BURST};

/// Whether this build can run a handler.
pub fn handler_available(h: Handler) -> bool {
    matches!(
        h,
        Handler::Count | Handler::None | Handler::Echo | Handler::Pcap
    )
}

/// Polls between flushes of a consumer lcore's loop counters.
const STATS_EVERY: u64 = 256;

/// A consumer lcore's loop: until told to stop and every ring it reads is empty.
pub fn consumer_loop(shared: &Shared, idx: Option<usize>) -> i32 {
    // First arc-swap load on this thread allocates its debt slot: not per packet.
    drop(shared.sockets.load());
    let mut d = Consumer::new(shared, idx);
    let st = idx.map(|i| &shared.consumers[i].stats);
    let clock = super::thread_time::LoopClock::start();
    let _hot = HotSection::enter();
    let (mut polls, mut idle, mut dgrams) = (0u64, 0u64, 0u64);
    let mut gap = super::thread_time::GapMeter::default();
    let flush = |polls: &mut u64, idle: &mut u64, dgrams: &mut u64| {
        if let Some(st) = st {
            st.polls.add(*polls);
            st.idle_polls.add(*idle);
            st.datagrams.add(*dgrams);
        }
        (*polls, *idle, *dgrams) = (0, 0, 0);
    };
    loop {
        // Read the flag before consuming: a stop seen here means RX has
        // stopped, so an empty pass afterwards really is the end.
        let stopping = shared.consumers_stop.load(Ordering::SeqCst);
        let n = d.poll(shared);
        gap.mark(eal::rdtsc());
        polls += 1;
        idle += u64::from(n == 0);
        dgrams += n as u64;
        if polls == STATS_EVERY {
            flush(&mut polls, &mut idle, &mut dgrams);
        }
        if stopping && n == 0 {
            flush(&mut polls, &mut idle, &mut dgrams);
            if let Some(i) = idx {
                clock.stop(&shared.consumers[i].thread);
                gap.store(&shared.consumers[i].thread, shared.tsc_hz);
            }
            return 0;
        }
    }
}

/// One consumer's poll state, kept across polls as DPDK's examples keep
/// theirs on the lcore's stack: the burst array (never zeroed again), and
/// the registry of sockets, re-read only when its generation changes (no
/// arc-swap load per poll).
pub struct Consumer {
    me: ConsumedBy,
    socks: Arc<Vec<SocketEntry>>,
    /// `Shared::sockets_gen` when `socks` was read (`NEVER`: not yet).
    gen: u64,
    /// Sockets of the registry this consumer reads.
    mine: usize,
    /// `run --floor pipeline`: dequeue, read `pkt_len`, free; nothing else.
    floor: bool,
    bufs: MbufBurst<CONSUME_BURST>,
}

const NEVER: u64 = u64::MAX;

impl Consumer {
    /// The poll state of consumer `idx` (None: the main lcore), with the
    /// registry read now (allocation-free afterwards).
    pub fn new(shared: &Shared, idx: Option<usize>) -> Consumer {
        let me = match idx {
            Some(i) => ConsumedBy::Lcore(i),
            None => ConsumedBy::Main,
        };
        let mut d = Consumer {
            me,
            socks: Arc::new(Vec::new()),
            gen: NEVER,
            mine: 0,
            floor: shared.mode.is_pipeline_floor(),
            bufs: MbufBurst::new(),
        };
        d.refresh(shared);
        d
    }

    /// Let go of the registry (and so of the sockets it holds); the next
    /// poll reads it again. For teardown: sockets hold rings.
    pub fn release(&mut self) {
        self.socks = Arc::new(Vec::new());
        self.gen = NEVER;
        self.mine = 0;
    }

    /// How many sockets this consumer reads (as of its last registry read,
    /// which every [`Consumer::poll`] refreshes).
    pub fn sockets(&self) -> usize {
        self.mine
    }

    /// Re-read the registry if it changed: one load of a line written only
    /// when a socket is added or removed. Takes a reference (an `Arc`
    /// clone), never allocates; the old registry is dropped here.
    #[inline(always)]
    fn refresh(&mut self, shared: &Shared) {
        let g = shared.sockets_gen.load(Ordering::Acquire);
        if g != self.gen {
            self.reload(shared, g);
        }
    }

    #[cold]
    fn reload(&mut self, shared: &Shared, g: u64) {
        self.gen = g;
        self.socks = shared.sockets.load_full();
        self.mine = self
            .socks
            .iter()
            .filter(|e| e.consumed_by == self.me)
            .count();
        // Published after the new registry is in hand: from here on this
        // consumer reads no ring an older registry gave it.
        if let ConsumedBy::Lcore(i) = self.me {
            if let Some(c) = shared.consumers.get(i) {
                // Release: this lcore's last dequeue from a ring it gave
                // up happens before whoever sees the new generation (a
                // client's open, with its Acquire fence) dequeues from it.
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                c.seen_gen.set(g);
            }
        }
    }

    /// One pass over the sockets this consumer reads: one burst from each
    /// whose ring is not empty. Datagrams taken.
    #[inline]
    pub fn poll(&mut self, shared: &Shared) -> usize {
        self.refresh(shared);
        let mut total = 0;
        for e in self.socks.iter() {
            if e.consumed_by != self.me {
                continue;
            }
            total += if self.floor {
                pipeline_floor::consume_burst(e, &mut self.bufs)
            } else {
                consume_socket_into(shared, e, &mut self.bufs)
            };
        }
        total
    }
}

/// One pass over the sockets read by consumer `idx` (None: the main
/// lcore), with a fresh [`Consumer`]: for teardown and callers that poll
/// rarely; loops keep a [`Consumer`] instead.
pub fn consume_once(shared: &Shared, idx: Option<usize>) -> usize {
    Consumer::new(shared, idx).poll(shared)
}

/// The TX queue of whoever consumes `e` (each consuming lcore has its own).
fn tx_queue_of(shared: &Shared, e: &SocketEntry) -> Option<u16> {
    match e.consumed_by {
        ConsumedBy::Lcore(i) => shared.consumers.get(i).and_then(|c| c.tx_queue),
        ConsumedBy::Main => shared.main_tx_queue,
        ConsumedBy::External | ConsumedBy::Client(_) => None,
    }
}

/// A slow application, emulated: how many datagrams the consumer may take
/// at `now` so that it never exceeds `pps` (token bucket on the TSC, at
/// most one burst of credit). Only the socket's consumer calls it.
fn allowance(e: &SocketEntry, pps: u64, hz: u64, now: u64) -> usize {
    let c = &e.sock.consumer;
    let last = match c.rate_tsc.get() {
        0 => now,
        t => t,
    };
    let earned = (now.saturating_sub(last) as u128 * pps as u128 / hz.max(1) as u128) as u64;
    if earned > 0 {
        // Advance by the time the earned credit covers, keeping the remainder.
        c.rate_tsc
            .set(last + (earned as u128 * hz as u128 / pps as u128) as u64);
        c.rate_credit
            .set((c.rate_credit.get() + earned).min(CONSUME_BURST as u64));
    } else if c.rate_tsc.get() == 0 {
        c.rate_tsc.set(now);
    }
    c.rate_credit.get().min(CONSUME_BURST as u64) as usize
}

/// Take one burst from a socket's ring, handle it, free it (a one-off
/// caller: the burst array is made here).
pub fn consume_socket(shared: &Shared, e: &SocketEntry) -> usize {
    let mut bufs: MbufBurst<CONSUME_BURST> = MbufBurst::new();
    if shared.mode.is_pipeline_floor() {
        pipeline_floor::consume_burst(e, &mut bufs)
    } else {
        consume_socket_into(shared, e, &mut bufs)
    }
}

/// Take one burst from a socket's ring into `bufs`, handle it, free it.
/// An empty ring costs two loads; one TSC read per burst taken.
#[inline]
fn consume_socket_into(
    shared: &Shared,
    e: &SocketEntry,
    bufs: &mut MbufBurst<CONSUME_BURST>,
) -> usize {
    if e.sock.poll_empty() {
        return 0;
    }
    let now = eal::rdtsc();
    // The rate applies while traffic flows; at shutdown consumers finish
    // what was delivered, as an application reads its socket empty before close.
    let pps = e.sock.consume_rate_pps();
    let limited = pps > 0 && !shared.consumers_stop.load(Ordering::Relaxed);
    let max = if limited {
        allowance(e, pps, shared.tsc_hz, now)
    } else {
        CONSUME_BURST
    };
    let n = e.sock.dequeue(bufs, max);
    if n == 0 {
        return 0;
    }
    if limited {
        let c = &e.sock.consumer.rate_credit;
        c.set(c.get().saturating_sub(n as u64));
    }
    // `--alternate-floor`: the floor's mbufs go to its own consumer.
    if shared.floor_mark != 0
        && alternate::consume_floor_share(&e.sock, bufs, shared.floor_mark) == n
    {
        return n;
    }
    match e.sock.handler() {
        Handler::Count | Handler::None => {}
        Handler::Echo => {
            let tx = handlers::TxCtx {
                ifaces: &shared.ifaces,
                queue: tx_queue_of(shared, e),
                frag: &shared.frag_out,
            };
            handlers::echo::echo_burst(&e.sock.consumer, bufs, tx);
        }
        Handler::Pcap => {
            // Only this socket's consumer locks it, once per burst: uncontended.
            let mut st = e
                .sock
                .handler_state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let handlers::State::Pcap(sink) = &mut *st {
                sink.write_burst(e.sock.name(), &e.sock.consumer, bufs);
            }
        }
    }
    e.sock.consume_at(bufs, now);
    n
}
