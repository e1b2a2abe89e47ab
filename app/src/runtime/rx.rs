//! The RX lcore's poll loop: rx_burst -> parse -> early demux -> accounting
//! and stage (the socket's enqueue strategy) -> free what was dropped.
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use dpdk_sys::mbuf::{MbufBurst, MbufRef, RawMbuf};
use dpdk_sys::{eal, port, Mbuf};

use super::alloc_guard::{ColdSection, HotSection};
use super::bench::alternate;
use super::bench::floor::RxFloor;
use super::burst::{offload_hints, AllocAhead, FreeList, MAX_BURST};
use super::idle::{IdleBackoff, Nap, SchedBatch};
use super::lcore_task::{LcoreTask, Running};
use super::shared::{Mode, RxLcore, Shared};
use crate::counters::UdpMib;
use crate::meta::MbufMeta;
use crate::parse;
use crate::receive::accounting::DropReason;
use crate::receive::admission::{Condense, NoCondense};
use crate::small_cache::CacheHook;
use crate::socket::Socket;
use std::sync::Arc;

/// Elected stages remembered per burst before an early drain.
const ELECTED_MAX: usize = 32;

/// `engine.rx_prefetch_alternate`'s half period: 2^27 TSC cycles, about
/// 50 ms at 2.5 GHz (many bursts, and well under a run's length), the same
/// turns as `--alternate-floor`'s.
const ALTERNATE_SHIFT: u32 = alternate::SHIFT;

/// Poll every queue of RX lcore `idx` until the stop flag is set.
pub fn rx_loop(shared: &Shared, idx: usize) -> i32 {
    let me = &shared.rx[idx];
    let mode = shared.mode;
    let burst = shared.burst as usize;
    let mut bufs: MbufBurst<MAX_BURST> = MbufBurst::new();
    let mut free = FreeList::default();
    log::debug!(
        "lcore {} polling {} queue(s) on node {}",
        me.lcore,
        me.queues.len(),
        me.node
    );
    // arc-swap registers a thread-local debt slot on a thread's first load
    // (one allocation): do it before the loop counts allocations.
    drop(shared.table.snapshot());
    drop(shared.mcast.joined.load());
    let mut small = me.small.lock().unwrap_or_else(|p| p.into_inner()).take();
    // `run --floor` (a benchmark reference, `bench::floor`): its tables are
    // built here, since the loop below must not allocate.
    let mut floor = match RxFloor::new(shared, mode, me.lcore) {
        Ok(f) => f,
        Err(e) => {
            log::error!("lcore {}: {e}", me.lcore);
            super::signals::request_stop();
            return 1;
        }
    };
    // Sources heard in datagrams, reported to the neighbour table (`heard`).
    let mut heard = shared.send.as_ref().and_then(|t| {
        t.heard
            .as_ref()
            .map(|q| crate::heard::Listener::new(q, t.heard_interval, t.ms_ticks()))
    });
    // This lcore's steering ring (two RX lcores or more, pipeline modes).
    let steer_ring = shared
        .steer
        .as_ref()
        .filter(|_| mode.classifies())
        .and_then(|s| s.ring(idx));
    // `engine.idle_sleep_us`: sleep through gaps in traffic (`idle`), after
    // yielding the CPU for `engine.idle_yield_us`.
    let mut backoff = IdleBackoff::new(shared.idle_sleep_us, super::idle::SPIN_POLLS)
        .with_yield(shared.idle_yield_us, shared.tsc_hz);
    // `engine.rx_prefetch_ahead`: the pool the PMD refills from, in the
    // pipeline modes (the floors stay the plain reference they are).
    let (ahead_on, alternate) = shared.prefetch_ahead;
    let ahead_pool = me
        .rx_pool
        .as_ref()
        .filter(|_| {
            (ahead_on || alternate) && matches!(mode, Mode::Pipeline | Mode::DemuxOnly | Mode::Alternate(_))
        });
    // What the PMD's next refill takes, asked for while a burst is parsed,
    // less what the last burst freed here (`AllocAhead::fill`).
    let mut next_allocs = AllocAhead::default();
    let mut own_freed = 0usize;
    let mut alternated = [0u64; 2];
    // `--alternate-floor`: each half's received and delivered datagrams.
    let turns = matches!(mode, Mode::Alternate(_));
    let mut halves = alternate::Halves::default();
    let clock = super::thread_time::LoopClock::start();
    // `engine.idle_sched_batch`: our wake-ups do not preempt the
    // application's threads (`idle::SchedBatch`); restored when the loop ends.
    let batch = SchedBatch::enter_if(shared.idle_sched_batch, &me.thread);
    // A CPU hog beside the lcore: no yields, no `SCHED_BATCH` while it lasts.
    backoff = backoff.with_contention(shared.tsc_hz, batch.is_some());
    let _hot = HotSection::enter();
    // Given by the application while the loop runs (`api::run_on_rx_lcore`).
    let mut task: Option<LcoreTask> = None;
    // Busy time as DPDK's poll busyness counts it: from a poll that returned
    // packets to the return of the next poll, whatever that one brings. One
    // TSC read per burst, the stamp the burst needs anyway: a second read at
    // the burst's end waited for the burst's stores to the consumer's lines
    // (4% of the pipeline's rate, alternating pairs). 0: the last poll was
    // empty, and its time was idle.
    let mut busy_since = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let mut worked = false;
        for (q, qs) in me.queues.iter().zip(&me.qstats) {
            me.lstats.polls.add(1);
            let n = port::rx_into(q.port, q.queue, &mut bufs, burst);
            if n == 0 {
                me.lstats.idle_polls.add(1);
                if busy_since != 0 {
                    me.lstats.busy_cycles.add(eal::rdtsc() - busy_since);
                    busy_since = 0;
                }
                super::frag::idle(me, &mut free);
                continue;
            }
            worked = true;
            let t0 = eal::rdtsc();
            // `engine.rx_prefetch_alternate`: on in every other 2^27 cycles.
            let on = !alternate || (t0 >> ALTERNATE_SHIFT) & 1 == 1;
            if alternate {
                alternated[usize::from(on)] += n as u64;
            }
            // `--alternate-floor`: the pipeline's turn, or the floor's.
            let pipeline_turn = !turns || alternate::pipeline_half(t0);
            if turns {
                halves.burst(pipeline_turn, n, || {
                    floor.as_ref().map_or(0, |f| f.delivered_total())
                });
            }
            if let Some(p) = ahead_pool.filter(|_| on && pipeline_turn) {
                next_allocs.fill(p, burst, own_freed);
            }
            if busy_since != 0 {
                me.lstats.busy_cycles.add(t0 - busy_since);
            }
            busy_since = t0;
            crate::latency::burst_clock::set(t0);
            // Stamp before counting, so the main lcore never sees packets without a stamp.
            me.last_rx_tsc.set(t0);
            let mut bytes = 0u64;
            for m in bufs.iter() {
                bytes += u64::from(m.pkt_len());
            }
            match mode {
                // SAFETY: the burst hands over its n mbufs, just received
                // on q.port into an engine pool, live and ours alone.
                Mode::Pipeline | Mode::DemuxOnly => unsafe {
                    pipeline_burst(
                        shared,
                        me,
                        q.port,
                        bufs.take_raw(),
                        t0,
                        &mut free,
                        &mut next_allocs,
                        small.as_mut(),
                        heard.as_mut(),
                    )
                },
                // SAFETY: as above.
                Mode::Alternate(_) if pipeline_turn => unsafe {
                    pipeline_burst(
                        shared,
                        me,
                        q.port,
                        bufs.take_raw(),
                        t0,
                        &mut free,
                        &mut next_allocs,
                        small.as_mut(),
                        heard.as_mut(),
                    )
                },
                Mode::Bare => bufs.clear(),
                Mode::Floor(_) | Mode::Alternate(_) => {
                    if let Some(f) = floor.as_mut() {
                        f.burst(shared, &mut bufs, &mut free, &me.lstats.floor_no_socket);
                    }
                }
            }
            // Whatever a mode left (none does) is freed, not received over.
            bufs.clear();
            own_freed = free.take_pushed();
            qs.packets.add(n as u64);
            qs.bytes.add(bytes);
            qs.bursts.add(1);
        }
        // Fragments other RX lcores steered here (this lcore owns their
        // datagrams): one load when there are none.
        if let Some(ring) = steer_ring.filter(|r| !r.looks_empty()) {
            worked = true;
            let n = ring.dequeue(&mut bufs, burst);
            me.steer.taken.add(n as u64);
            let t0 = eal::rdtsc();
            me.last_rx_tsc.set(t0);
            crate::latency::burst_clock::set(t0);
            let raw = bufs.take_raw();
            // In runs of one port: the burst path takes one port at a time.
            let mut at = 0;
            while at < raw.len() {
                // SAFETY: a live mbuf the ring gave us; a read of one field.
                let port_of = |m: *mut RawMbuf| unsafe { MbufRef::from_ptr(m) }.port();
                let p = port_of(raw[at]);
                let end = raw[at..]
                    .iter()
                    .position(|&m| port_of(m) != p)
                    .map_or(raw.len(), |k| at + k);
                // SAFETY: each mbuf was handed to the ring by the RX lcore
                // that received it into an engine pool, given up there; the
                // ring gave it to us alone.
                unsafe {
                    pipeline_burst(
                        shared,
                        me,
                        p,
                        &raw[at..end],
                        t0,
                        &mut free,
                        &mut next_allocs,
                        small.as_mut(),
                        heard.as_mut(),
                    )
                };
                at = end;
            }
            bufs.clear();
        }
        // Quiescent point: this lcore holds no flow-table snapshot and is in
        // no socket's enqueue. A remover waits for every lcore to pass one
        // (QSBR) before it drains a closed socket's stages.
        me.quiescent.add(1);
        // An application's task (`lcore_task`), at this quiescent point:
        // one load while there is none, the rest out of line (the loop's
        // code is laid out as before: holding the task here, or taking it
        // inline, cost the pipeline 5% of its rate in alternating pairs).
        if me.task.active() {
            worked |= run_task(shared, me, &mut task);
        }
        if worked {
            backoff.busy();
        } else {
            match backoff.idle() {
                None => {}
                Some(nap) => {
                    let start = eal::rdtsc();
                    match nap {
                        Nap::Yield => {
                            me.lstats.idle_yields.add(1);
                            std::thread::yield_now();
                        }
                        Nap::Sleep(d) => {
                            me.lstats.idle_sleeps.add(1);
                            std::thread::sleep(d);
                        }
                    }
                    if backoff.napped(nap, start, eal::rdtsc()) == Some(true) {
                        me.thread.contended.add(1);
                    }
                }
            }
        }
    }
    if busy_since != 0 {
        me.lstats.busy_cycles.add(eal::rdtsc() - busy_since);
    }
    crate::latency::burst_clock::set(0);
    me.quiescent.add(1);
    drop(_hot);
    // The application's, so on its account; dropped here, where it ran.
    if let Some(t) = task.take() {
        let _running = Running::enter(me.index);
        drop(t);
    }
    for (c, n) in me.lstats.alternate.iter().zip(alternated) {
        c.add(n);
    }
    if turns {
        halves.finish(floor.as_ref().map_or(0, |f| f.delivered_total()));
        for (c, n) in me.lstats.floor_alternate.iter().zip(halves.received.iter().chain(&halves.delivered)) {
            c.add(*n);
        }
    }
    clock.stop(&me.thread);
    drop(batch);
    // Hand the cache back for teardown's check.
    *me.small.lock().unwrap_or_else(|p| p.into_inner()) = small;
    0
}

/// The lcore's task (taken from its slot on the first call), then, when
/// the send path is this lcore's (`send::TxPath::servicer`), one pass of it
/// on the lcore's TX queue: what the task sent leaves before the next poll.
/// Whether either did work.
#[cold]
#[inline(never)]
fn run_task(shared: &Shared, me: &RxLcore, task: &mut Option<LcoreTask>) -> bool {
    if task.is_none() {
        *task = me.task.take();
    }
    let Some(t) = task.as_mut() else {
        return false;
    };
    let _cold = ColdSection::enter();
    let _running = Running::enter(me.index);
    let mut worked = t();
    if shared.send.as_ref().is_some_and(|tx| tx.servicer() == me.index) {
        worked |= crate::send::service(shared, Some(me.control.tx_queue), eal::rdtsc()) > 0;
    }
    worked
}

/// [`process_burst`] with the lcore's small-buffer cache when it has one.
///
/// # Safety
/// As [`process_burst`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pipeline_burst(
    shared: &Shared,
    me: &RxLcore,
    port_id: u16,
    bufs: &[*mut RawMbuf],
    tsc: u64,
    free: &mut FreeList,
    ahead: &mut AllocAhead,
    small: Option<&mut crate::small_cache::SmallCache>,
    heard: Option<&mut crate::heard::Listener<'_>>,
) {
    match small {
        Some(cache) => {
            let mut hook = CacheHook {
                cache,
                stats: &me.cache_stats,
            };
            // SAFETY: the caller's contract.
            unsafe { process_burst(shared, me, port_id, bufs, tsc, free, ahead, &mut hook, heard) }
        }
        // SAFETY: the caller's contract.
        None => unsafe {
            process_burst(shared, me, port_id, bufs, tsc, free, ahead, &mut NoCondense, heard)
        },
    }
}

/// Packets handled per pass of [`process_burst`] for bursts of up to 32
/// (DPDK's usual burst, the default): the passes' arrays live on the stack
/// and are initialised per chunk, so they are no longer than such a burst.
const CHUNK: usize = 32;
/// The chunk of a larger burst. Each socket group is admitted, charged and
/// enqueued once per chunk, so a burst of 64 split in two paid every group's
/// fixed costs (the ring's producer tail, which the consumer polls, above
/// all) twice: one chunk of 64 delivered 1.10x (6 alternating pairs at
/// `engine.burst = 64`), where the 64-long arrays would cost a burst of 32
/// eight instructions a datagram (callgrind) to initialise.
const BIG_CHUNK: usize = 64;
// Chunk indices are kept in u8 (group numbers, memo tags, `mc`).
const _: () = assert!(CHUNK <= BIG_CHUNK && BIG_CHUNK <= u8::MAX as usize);

/// Parse, demux and stage one burst. Every mbuf ends in a socket (stage or
/// ring), in the control path or in `free`, counted by reason. The sources
/// of datagrams for a socket are offered to `heard` (neighbour learning),
/// when the port has addresses to send from.
///
/// The burst goes through in passes, as DPDK's l3fwd does its LPM lookups:
/// parse every packet first, then look every datagram up in one tight loop,
/// then stage. The lookups are independent of each other, so the CPU has
/// several flow-table cache misses in flight at once instead of one per
/// packet, and the parse's working set (the frames) is not evicted between
/// lookups. Counters are summed in registers and written once per chunk.
///
/// # Safety
/// Every pointer in `bufs` is a distinct live mbuf, received on `port_id`
/// into one of the engine's pools (private area of `PRIV_SIZE`), that the
/// caller owns exclusively and gives up: afterwards it belongs to a
/// socket, the control path or the free list.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn process_burst<C: Condense<MbufMeta>>(
    shared: &Shared,
    me: &RxLcore,
    port_id: u16,
    bufs: &[*mut RawMbuf],
    tsc: u64,
    free: &mut FreeList,
    ahead: &mut AllocAhead,
    condense: &mut C,
    heard: Option<&mut crate::heard::Listener<'_>>,
) {
    let mut heard = heard.filter(|_| {
        shared
            .ifaces
            .get(port_id)
            .is_some_and(|i| i.lessons.is_some())
    });
    // One snapshot per burst: one atomic load, and sockets removed meanwhile
    // stay alive until we drop it.
    let snap = shared.table.snapshot();
    let mut elected = Elected::default();
    if bufs.len() <= CHUNK {
        // SAFETY: the caller's burst, with its contract.
        unsafe {
            process_chunk::<C, CHUNK>(
                shared,
                me,
                port_id,
                bufs,
                tsc,
                free,
                ahead,
                condense,
                &snap,
                &mut elected,
                heard.as_deref_mut(),
            )
        };
    } else {
        for chunk in bufs.chunks(BIG_CHUNK) {
            // SAFETY: a part of the caller's burst, with its contract.
            unsafe {
                process_chunk::<C, BIG_CHUNK>(
                    shared,
                    me,
                    port_id,
                    chunk,
                    tsc,
                    free,
                    ahead,
                    condense,
                    &snap,
                    &mut elected,
                    heard.as_deref_mut(),
                )
            };
        }
    }
    // The next burst's mbufs the parse passes did not get to (a short burst).
    ahead.finish();
    // This burst's elected stages: one delivery-lock hold per socket for the
    // whole burst (the kernel takes one per packet: it has no bursts).
    elected.drain(
        me.node_index,
        // SAFETY: the stage hands each dropped packet, an mbuf it owned, to us.
        &mut |p: NonNull<MbufMeta>, _r: DropReason| unsafe { free.push(MbufMeta::mbuf(p)) },
    );
    free.flush();
}

/// Sockets whose stage this lcore was elected to drain during the burst.
#[derive(Default)]
struct Elected<'s> {
    socks: [Option<&'s Arc<Socket>>; ELECTED_MAX],
    n: usize,
}

impl<'s> Elected<'s> {
    /// Remembers `sock`; when full, drains what it holds first (early).
    #[inline]
    fn push<F: FnMut(NonNull<MbufMeta>, DropReason)>(
        &mut self,
        sock: &'s Arc<Socket>,
        node: usize,
        to_free: &mut F,
    ) {
        if self.n == self.socks.len() {
            self.drain(node, to_free);
        }
        self.socks[self.n] = Some(sock);
        self.n += 1;
    }

    #[inline]
    fn drain<F: FnMut(NonNull<MbufMeta>, DropReason)>(&mut self, node: usize, to_free: &mut F) {
        for sock in self.socks[..self.n].iter().flatten() {
            sock.rx.drain(node, to_free);
        }
        self.n = 0;
    }
}

/// Destinations of a chunk already looked up, whose answer cannot depend
/// on the source (`Snapshot::lookup_keyed`): a burst's datagrams mostly go
/// to a few sockets, and the first to each pays the hash and the probe for
/// the others. Per chunk, so per snapshot: a reload's new table is never
/// answered from an old one.
///
/// Direct-mapped: a destination has one slot, chosen by a fold of its key,
/// so a hit is one exact compare wherever it was put (a scan of four
/// `IpAddr` compares cost 36 instructions per datagram on the benchmark's
/// mix of four sockets). Two destinations of a chunk that share a slot take
/// it in turns: each miss is a lookup, never a wrong answer.
struct Memo<T> {
    slots: [(MemoKey, T); MEMO],
}

/// A destination as the [`Memo`] compares it: the address's bytes (an IPv4
/// one zero-extended) and the port with the family above it, so equality
/// is two 64-bit and one 32-bit compare instead of an enum's.
#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    addr: u128,
    port_family: u32,
}

impl MemoKey {
    /// No destination has it (port_family <= 0x1_ffff): a slot not yet used.
    const EMPTY: MemoKey = MemoKey {
        addr: 0,
        port_family: u32::MAX,
    };

    #[inline(always)]
    fn of(dst: std::net::IpAddr, dport: u16) -> Self {
        // Native byte order: only equality and the slot's fold use it.
        match dst {
            std::net::IpAddr::V4(a) => MemoKey {
                addr: u128::from(u32::from_ne_bytes(a.octets())),
                port_family: u32::from(dport),
            },
            std::net::IpAddr::V6(a) => MemoKey {
                addr: u128::from_ne_bytes(a.octets()),
                port_family: u32::from(dport) | 1 << 16,
            },
        }
    }

    #[inline(always)]
    fn slot(self) -> usize {
        // Fibonacci hashing: a product's top bits depend on every bit of
        // the address and the port (five instructions).
        let x = self.addr as u64 ^ ((self.addr >> 64) as u64).rotate_left(17) ^ u64::from(self.port_family);
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - MEMO.trailing_zeros())) as usize
    }
}

/// How many datagrams ahead of its lookup pass 2 asks for a datagram's
/// flow-table slot in a big table (4, 8 and 16 measured alike, 3 rounds).
const LOOKUP_AHEAD: usize = 8;

/// The [`Memo`]'s slots (a power of two): several times the destinations
/// a chunk usually holds, so that few of them share one.
const MEMO: usize = 16;
const _: () = assert!(MEMO.is_power_of_two());
/// Misses in one chunk after which its lookups skip the [`Memo`]: traffic
/// spread over that many destinations would only pay its compares.
const MEMO_GIVE_UP: usize = 8;

impl<T: Copy> Memo<T> {
    #[inline(always)]
    fn new(none: T) -> Self {
        Memo {
            slots: [(MemoKey::EMPTY, none); MEMO],
        }
    }

    #[inline(always)]
    fn get(&self, key: MemoKey) -> Option<T> {
        let (k, answer) = self.slots[key.slot()];
        (k == key).then_some(answer)
    }

    #[inline(always)]
    fn put(&mut self, key: MemoKey, answer: T) {
        self.slots[key.slot()] = (key, answer);
    }
}

/// No memo tag (an answer looked up past the memo, or one that depends on
/// the source), and no group yet for a tag.
const NO_TAG: u8 = u8::MAX;

/// The group of `sock` among the first `ng` of `groups`, added when new.
/// Most chunks hold few sockets, often runs of one: the last group first,
/// then the others (at most N compares).
#[inline(always)]
fn group_index<'s, const N: usize>(
    groups: &mut [Option<&'s Arc<Socket>>; N],
    ng: &mut usize,
    sock: &'s Arc<Socket>,
) -> usize {
    let same = |s: &Option<&Arc<Socket>>| s.is_some_and(|s| Arc::ptr_eq(s, sock));
    if let Some(last) = ng.checked_sub(1).filter(|&l| same(&groups[l])) {
        return last;
    }
    if let Some(g) = groups[..*ng].iter().position(same) {
        return g;
    }
    groups[*ng] = Some(sock);
    *ng += 1;
    // The group's enqueue comes at the end of this pass: its ring slots,
    // which the consumer read last, are asked for now (see `prefetch_enqueue`;
    // a memoised socket's were asked for in pass 2 already, and a second
    // ask for lines on their way costs a few instructions).
    sock.ring.prefetch_enqueue();
    *ng - 1
}

/// One chunk of [`process_burst`].
///
/// # Safety
/// As [`process_burst`], for the mbufs of `chunk`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn process_chunk<'s, C: Condense<MbufMeta>, const N: usize>(
    shared: &Shared,
    me: &RxLcore,
    port_id: u16,
    chunk: &[*mut RawMbuf],
    tsc: u64,
    free: &mut FreeList,
    ahead: &mut AllocAhead,
    condense: &mut C,
    snap: &'s crate::flow_table::Snapshot<Arc<Socket>>,
    elected: &mut Elected<'s>,
    mut heard: Option<&mut crate::heard::Listener<'_>>,
) {
    let mib: &UdpMib = &me.mib;
    let strategy = shared.strategy;
    // The exception path, when it serves this port (one load per chunk).
    let exc = shared
        .exception
        .as_ref()
        .filter(|x| x.data_port == port_id);
    let exc_udp = exc.filter(|x| x.unbound_udp);
    // Pass 1: parse. Datagrams are kept (with their mbuf) for the lookup
    // pass; everything else is settled here.
    let mut dgrams = [const { std::mem::MaybeUninit::<parse::Datagram>::uninit() }; N];
    let mut mbufs: [*mut RawMbuf; N] = [std::ptr::null_mut(); N];
    let mut nd = 0usize;
    for &m in chunk {
        // One of the next burst's mbufs asked for per packet (`AllocAhead`).
        ahead.step();
        // SAFETY: ours alone (the contract); the view ends with the parse.
        let v = unsafe { MbufRef::from_ptr(m) };
        // The first segment only: a datagram that spans segments fails the
        // length checks (truncated).
        let (data, ol) = (v.data(), v.ol_flags());
        // nd < chunk.len() <= N.
        match parse::parse_into(data, offload_hints(ol), &mut dgrams[nd]) {
            Ok(_) => {
                mbufs[nd] = m;
                nd += 1;
            }
            Err(e) => {
                // Fragments go to this lcore's reassembly table (cold); a
                // completed datagram comes back parsed, as a chain.
                if e.reason().is_fragment() {
                    // One lcore owns each datagram's fragments: another's
                    // go to its ring (`steer`, with several RX lcores).
                    // SAFETY: ours alone (the contract); given up when true.
                    if unsafe { super::steer::to_owner(shared, me, m, free) } {
                        continue;
                    }
                    // SAFETY: ours alone (the contract); given up unless NotTaken.
                    match unsafe { super::frag::offer(me, m, tsc, free, &mut dgrams[nd]) } {
                        super::frag::Offered::NotTaken => {
                            // A fragment of another protocol (a large ping,
                            // TCP without PMTUD) is the kernel's to reassemble;
                            // UDP fragments never go there.
                            if let Some(x) = exc {
                                // SAFETY: ours alone (the contract); read only.
                                let data = unsafe { MbufRef::from_ptr(m) }.data();
                                if crate::reasm::fragment_protocol(data)
                                    .is_some_and(|p| p != parse::PROTO_UDP)
                                {
                                    // SAFETY: a live mbuf we own exclusively, handed over.
                                    let owned = unsafe { Mbuf::from_raw(NonNull::new_unchecked(m)) };
                                    x.to_kernel(&me.exception, me.control.tx_queue, owned, tsc, free, false);
                                    mib.exception.add(1);
                                    continue;
                                }
                            }
                        }
                        super::frag::Offered::Taken => continue,
                        super::frag::Offered::Complete(head) => {
                            mbufs[nd] = head;
                            nd += 1;
                            continue;
                        }
                    }
                }
                // An IGMP or MLD query: the main lcore answers it with
                // the port's memberships (`mcast::membership`).
                if let Some(q) = crate::mcast::query_of(data, &e, port_id, tsc) {
                    shared.mcast.post(q);
                    mib.mcast_queries.add(1);
                    // SAFETY: ours, given up here.
                    unsafe { free.push(m) };
                    continue;
                }
                // ARP and ICMP may be for the control path (replies on this
                // lcore's TX queue); what it does not take goes to the
                // exception path if the port has one, else is counted here.
                let mut m = m;
                if crate::exception::wants(&e) {
                    // SAFETY: a live mbuf we own exclusively (the contract),
                    // handed over as an owned one; what is not taken comes back.
                    let owned = unsafe { Mbuf::from_raw(NonNull::new_unchecked(m)) };
                    match crate::control::handle(
                        &shared.ifaces,
                        &me.control,
                        port_id,
                        owned,
                        &e,
                        tsc,
                    ) {
                        Ok(()) => {
                            mib.control.add(1);
                            continue;
                        }
                        Err(back) => {
                            // What the responder left goes to the kernel
                            // when this port has an exception path.
                            if let Some(x) = exc {
                                x.to_kernel(&me.exception, me.control.tx_queue, back, tsc, free, false);
                                mib.exception.add(1);
                                continue;
                            }
                            m = back.into_raw().as_ptr();
                        }
                    }
                }
                let fam = e.family().map(|f| f.index()).unwrap_or(2);
                mib.errors[fam][e.reason().index()].add(1);
                // SAFETY: ours, given up here.
                unsafe { free.push(m) };
            }
        }
    }
    // SAFETY: parse_into initialised the first nd entries (each Ok above).
    let dgrams: &[parse::Datagram] =
        unsafe { std::slice::from_raw_parts(dgrams.as_ptr().cast(), nd) };
    // Pass 2: one lookup per datagram, nothing else, so they overlap. A
    // datagram to a group is looked up in pass 4 (every member socket).
    let mut found: [Option<&'s Arc<Socket>>; N] = [None; N];
    let mut group = [false; N];
    // A big table's slots are mostly not in cache: each datagram's first
    // slot is asked for LOOKUP_AHEAD datagrams before its lookup, so the
    // misses overlap instead of queueing, and the lookups of slots already
    // in run meanwhile. All of a chunk's asked for up front instead, the
    // RX lcore sat on the prefetches once the fill buffers ran out (7-9 ns
    // a datagram with 1 000 000 sockets, `scripts/hotspots.sh`):
    // `--demux-only` 0.90-0.97x the ns a datagram in 5 of 6 pairs
    // (docs/benchmarks.md).
    let pays = snap.prefetch_pays();
    if pays {
        for d in dgrams.iter().take(LOOKUP_AHEAD) {
            snap.prefetch(d.dst, d.dport);
        }
    }
    // Each memorised answer carries a tag, the serial of its lookup in the
    // chunk, which pass 3 maps to the answer's socket group once: the
    // datagrams answered from the memo find their group without a scan.
    let mut memo = Memo::new((None, NO_TAG));
    let mut tags = [NO_TAG; N];
    // Traffic spread over many destinations (a big table) would only pay
    // the memo's scans: after MEMO_GIVE_UP misses in a chunk it is left.
    let mut misses = 0usize;
    for (i, (((f, d), g), t)) in found.iter_mut().zip(dgrams).zip(group.iter_mut()).zip(tags.iter_mut()).enumerate() {
        if pays {
            if let Some(next) = dgrams.get(i + LOOKUP_AHEAD) {
                snap.prefetch(next.dst, next.dport);
            }
        }
        if crate::mcast::is_group(d.dst) {
            *g = true;
        } else if misses >= MEMO_GIVE_UP {
            *f = snap.lookup(d.src, d.sport, d.dst, d.dport);
        } else {
            let key = MemoKey::of(d.dst, d.dport);
            (*f, *t) = match memo.get(key) {
                Some(answer) => answer,
                None => {
                    // misses < MEMO_GIVE_UP <= u8::MAX: a serial per lookup.
                    let tag = misses as u8;
                    misses += 1;
                    let (answer, by_source) = snap.lookup_keyed(d.src, d.sport, d.dst, d.dport);
                    // The first datagram of this chunk to the socket: its
                    // ring's lines are asked for here, a pass before the
                    // group's enqueue (see `prefetch_enqueue`).
                    if let Some(sock) = answer {
                        sock.ring.prefetch_enqueue();
                    }
                    if by_source {
                        (answer, NO_TAG)
                    } else {
                        memo.put(key, (answer, tag));
                        (answer, tag)
                    }
                }
            };
        }
    }
    // Pass 3: count, fill the metadata, and group the datagrams by socket
    // (arrival order kept within a group), so that each socket's share of
    // the chunk is admitted, charged, counted and staged at once below.
    // Datagrams in, and of them IPv6: two registers, where an array
    // indexed by family is a load and a store per datagram.
    let (mut in_all, mut in_v6) = (0u64, 0u64);
    const _: () = assert!(parse::Family::V6.index() == 1);
    let mut no_ports = [0u64; 2];
    let (demux_only, mut demux_freed) = (shared.mode == Mode::DemuxOnly, 0u64);
    let mut groups: [Option<&'s Arc<Socket>>; N] = [None; N];
    let mut group_len = [0u8; N];
    let mut group_of = [0u8; N];
    let mut kept: [*mut RawMbuf; N] = [std::ptr::null_mut(); N];
    let (mut ng, mut nk) = (0usize, 0usize);
    let mut mc = [0u8; N];
    let mut nmc = 0usize;
    let mut tag_group = [NO_TAG; MEMO_GIVE_UP];
    // An index loop over slices of the chunk's length: the zipped
    // iterators' pointers did not fit the registers, and LLVM re-derived
    // them from the stack for every datagram (20 instructions each).
    let (found, mbufs, group, tags) = (&found[..nd], &mbufs[..nd], &group[..nd], &tags[..nd]);
    for i in 0..nd {
        let (d, m) = (&dgrams[i], mbufs[i]);
        let fam = d.family.index();
        if group[i] {
            // i < nd <= N <= BIG_CHUNK.
            mc[nmc] = i as u8;
            nmc += 1;
            continue;
        }
        let Some(sock) = found[i] else {
            // SAFETY: ours (the contract), given up there.
            unsafe { no_socket(me, exc_udp, m, tsc, free, &mut no_ports[fam]) };
            continue;
        };
        in_all += 1;
        in_v6 += fam as u64;
        // Untagged only: what we send carries no VLAN tag. The main lcore
        // checks the rest (on-link source, unicast MAC).
        if let Some(h) = heard.as_deref_mut() {
            if d.vlan_count == 0 {
                h.offer(port_id, d.src, d.src_mac, tsc);
            }
        }
        // SAFETY: our mbuf, from an engine pool (private area of PRIV_SIZE).
        unsafe { MbufMeta::init(m, d, sock.id, tsc, port_id) };
        if demux_only {
            demux_freed += 1;
            // SAFETY: ours, given up here.
            unsafe { free.push(m) };
            continue;
        }
        // A memorised answer's group is known after its first datagram;
        // the others search (last group first: runs of one socket).
        let g = match tag_group.get_mut(usize::from(tags[i])) {
            Some(&mut g) if g != NO_TAG => usize::from(g),
            Some(slot) => {
                let g = group_index(&mut groups, &mut ng, sock);
                // g < ng <= N <= BIG_CHUNK.
                *slot = g as u8;
                g
            }
            None => group_index(&mut groups, &mut ng, sock),
        };
        group_len[g] += 1;
        group_of[nk] = g as u8;
        kept[nk] = m;
        nk += 1;
    }
    if nk != 0 {
        // Counting sort of the kept datagrams by group: each socket's share
        // becomes one contiguous slice, still in arrival order.
        let mut at = [0u8; N];
        let mut sum = 0u8;
        for (a, &l) in at.iter_mut().zip(&group_len[..ng]) {
            *a = sum;
            sum += l;
        }
        let mut sorted = [NonNull::<MbufMeta>::dangling(); N];
        for (&g, &m) in group_of[..nk].iter().zip(&kept[..nk]) {
            let slot = &mut at[usize::from(g)];
            // SAFETY: m is one of our mbufs.
            sorted[usize::from(*slot)] = unsafe { MbufMeta::of(m) };
            *slot += 1;
        }
        // Drops (ours now, or other producers' when we are the elected
        // drainer) are freed after the delivery lock is released.
        let mut to_free = |p: NonNull<MbufMeta>, _r: DropReason| {
            // SAFETY: delivery hands each dropped packet, an mbuf it owned, to us.
            unsafe { free.push(MbufMeta::mbuf(p)) }
        };
        let mut begin = 0usize;
        for (sock, &len) in groups[..ng].iter().flatten().zip(&group_len[..ng]) {
            let end = begin + usize::from(len);
            // A client's frees reach the budget here when it runs short,
            // not only when the main lcore next folds them.
            sock.release_client_frees_if_short();
            // SAFETY: each packet is ours, listed once, on no stage; to_free
            // frees mbufs of any pool; the consumer may take them on another
            // lcore. An elected stage is drained before the burst ends.
            let e = unsafe {
                sock.rx.enqueue_batch_deferred(
                    me.node_index,
                    &sorted[begin..end],
                    strategy,
                    condense,
                    &mut to_free,
                )
            };
            if e {
                elected.push(sock, me.node_index, &mut to_free);
            }
            begin = end;
        }
    }
    if nmc != 0 {
        // SAFETY: the datagrams listed in mc are ours (the contract), each once.
        unsafe {
            fan_out_chunk(
                shared,
                me,
                port_id,
                &mc[..nmc],
                dgrams,
                mbufs,
                tsc,
                free,
                condense,
                snap,
                elected,
            )
        };
    }
    mib.lookups.add(nd as u64);
    if demux_freed != 0 {
        mib.demux_only_freed.add(demux_freed);
    }
    for (fam, n) in [in_all - in_v6, in_v6].into_iter().enumerate() {
        if n != 0 {
            mib.in_datagrams[fam].add(n);
        }
        if no_ports[fam] != 0 {
            mib.no_ports[fam].add(no_ports[fam]);
        }
    }
}

/// A datagram of [`process_chunk`] that no socket took: to the kernel
/// when the port's exception path takes unbound UDP, else freed and
/// counted in `no_ports` (its family's). Out of line: rare, and its
/// arguments kept the hot loop's pointers out of registers.
///
/// # Safety
/// `m` is a live mbuf the caller owns exclusively and gives up.
#[cold]
#[inline(never)]
unsafe fn no_socket(
    me: &RxLcore,
    exc_udp: Option<&crate::exception::ExceptionPath>,
    m: *mut RawMbuf,
    tsc: u64,
    free: &mut FreeList,
    no_ports: &mut u64,
) {
    // A reassembled chain stays here: its headers are the first
    // fragment's, not a datagram the kernel could take as it is.
    // SAFETY: ours alone (the contract); a read of one field.
    if let Some(x) = exc_udp.filter(|_| unsafe { MbufRef::from_ptr(m) }.nb_segs() == 1) {
        // SAFETY: a live mbuf we own exclusively, handed over.
        let owned = unsafe { Mbuf::from_raw(NonNull::new_unchecked(m)) };
        x.to_kernel(&me.exception, me.control.tx_queue, owned, tsc, free, true);
        me.mib.exception.add(1);
        return;
    }
    *no_ports += 1;
    // SAFETY: ours, given up here.
    unsafe { free.push(m) };
}

/// Pass 4 of [`process_chunk`]: the chunk's datagrams to groups (indices
/// `mc` into `dgrams` and `mbufs`), each dropped if its group is not joined
/// on `port_id`, else handed to every member socket or counted as
/// `UdpIgnoredMulti` when none matches. Consecutive datagrams to one group
/// and port go as a run (`mcast::fan_out_run`): the members are visited
/// once, and each member's copies are admitted and staged as one batch, as
/// unicast groups are; a group of more than `RUN_MEMBERS` sockets goes one
/// datagram at a time (`mcast::fan_out`).
///
/// # Safety
/// As [`process_burst`], for the mbufs `mc` names.
#[cold]
#[allow(clippy::too_many_arguments)]
unsafe fn fan_out_chunk<'s, C: Condense<MbufMeta>>(
    shared: &Shared,
    me: &RxLcore,
    port_id: u16,
    mc: &[u8],
    dgrams: &[parse::Datagram],
    mbufs: &[*mut RawMbuf],
    tsc: u64,
    free: &mut FreeList,
    condense: &mut C,
    snap: &'s crate::flow_table::Snapshot<Arc<Socket>>,
    elected: &mut Elected<'s>,
) {
    let mib: &UdpMib = &me.mib;
    let joined = shared.mcast.joined.load();
    let pool = shared.mcast.clones.get();
    let (strategy, node) = (shared.strategy, me.node_index);
    // The host's membership first (`ip_check_mc_rcu`).
    let mut ok = [0usize; BIG_CHUNK];
    let mut nok = 0usize;
    for &i in mc {
        let i = usize::from(i);
        let (Some(d), Some(&m)) = (dgrams.get(i), mbufs.get(i)) else {
            continue;
        };
        let fam = d.family.index();
        if !joined.has(port_id, d.dst) {
            mib.mcast_unjoined[fam].add(1);
            // SAFETY: ours, given up here.
            unsafe { free.push(m) };
            continue;
        }
        mib.in_mcast[fam].add(1);
        // nok < mc.len() <= BIG_CHUNK.
        ok[nok] = i;
        nok += 1;
    }
    let mut ignored = [std::ptr::null_mut::<RawMbuf>(); BIG_CHUNK];
    let mut nign = 0usize;
    let (mut copies, mut nobufs, mut ignored_n) = ([0u64; 2], [0u64; 2], [0u64; 2]);
    {
        // Drops (ours, or other producers' when we are the elected
        // drainer) are freed after the delivery lock is released.
        let mut to_free = |p: NonNull<MbufMeta>, _r: DropReason| {
            // SAFETY: delivery hands each dropped packet, an mbuf it owned, to us.
            unsafe { free.push(MbufMeta::mbuf(p)) }
        };
        let mut enqueue = |sock: &'s Arc<Socket>, batch: &[NonNull<MbufMeta>]| {
            // SAFETY: the batch's packets are ours, on no stage, each listed
            // once; to_free frees mbufs of any pool (a clone's free drops
            // its reference on the original); an elected stage is drained
            // before the burst ends.
            let e = unsafe {
                sock.rx
                    .enqueue_batch_deferred(node, batch, strategy, condense, &mut to_free)
            };
            if e {
                elected.push(sock, node, &mut to_free);
            }
        };
        let mut at = 0usize;
        while at < nok {
            let d0 = &dgrams[ok[at]];
            let fam = d0.family.index();
            // A run: the datagrams that follow to the same group and port
            // have the same members, unless a connected socket of the
            // family makes them depend on the source; at most RUN_MAX (a
            // chunk of a large burst holds more).
            let mut end = at + 1;
            if !snap.mcast_depends_on_source(d0.dst) {
                while end < nok
                    && end - at < crate::mcast::RUN_MAX
                    && dgrams[ok[end]].dst == d0.dst
                    && dgrams[ok[end]].dport == d0.dport
                {
                    end += 1;
                }
            }
            let mut members: [Option<&'s Arc<Socket>>; crate::mcast::RUN_MEMBERS] =
                [None; crate::mcast::RUN_MEMBERS];
            let mut nm = 0usize;
            snap.for_each_mcast(d0.src, d0.sport, d0.dst, d0.dport, |s| {
                if let Some(slot) = members.get_mut(nm) {
                    *slot = Some(s);
                }
                nm += 1;
            });
            if nm == 0 {
                for &i in &ok[at..end] {
                    ignored[nign] = mbufs[i];
                    nign += 1;
                }
                ignored_n[fam] += (end - at) as u64;
            } else if nm <= crate::mcast::RUN_MEMBERS {
                let mut run = [(std::ptr::null_mut::<RawMbuf>(), d0); crate::mcast::RUN_MAX];
                for (slot, &i) in run.iter_mut().zip(&ok[at..end]) {
                    *slot = (mbufs[i], &dgrams[i]);
                }
                // SAFETY: the run's mbufs are ours, each listed once, given
                // up; no consumer writes a datagram's data; the clone pool
                // is an engine pool (private area of PRIV_SIZE).
                let f = unsafe {
                    crate::mcast::fan_out_run(
                        &run[..end - at],
                        tsc,
                        port_id,
                        pool,
                        &members[..nm],
                        &mut enqueue,
                    )
                };
                copies[fam] += f.copies;
                nobufs[fam] += f.nobufs;
            } else {
                // A group larger than a run's member list: one datagram at
                // a time, the members visited again for each.
                for &i in &ok[at..end] {
                    let (m, d) = (mbufs[i], &dgrams[i]);
                    // SAFETY: as for a run, for this one mbuf.
                    let res = unsafe {
                        crate::mcast::fan_out(
                            m,
                            d,
                            tsc,
                            port_id,
                            pool,
                            |visit| snap.for_each_mcast(d.src, d.sport, d.dst, d.dport, visit),
                            &mut |sock, p| enqueue(sock, &[p]),
                        )
                    };
                    match res {
                        Ok(f) => {
                            copies[fam] += f.copies;
                            nobufs[fam] += f.nobufs;
                        }
                        Err(m) => {
                            ignored[nign] = m;
                            nign += 1;
                            ignored_n[fam] += 1;
                        }
                    }
                }
            }
            at = end;
        }
    }
    for &m in &ignored[..nign] {
        // SAFETY: ours (no socket took it), given up here.
        unsafe { free.push(m) };
    }
    for fam in 0..2 {
        if copies[fam] != 0 {
            mib.mcast_copies[fam].add(copies[fam]);
        }
        if nobufs[fam] != 0 {
            mib.mcast_nobufs[fam].add(nobufs[fam]);
        }
        if ignored_n[fam] != 0 {
            mib.ignored_multi[fam].add(ignored_n[fam]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Memo, MemoKey};
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn memo_answers_only_what_it_was_told() {
        let mut m = Memo::new(0u32);
        let k = |a: &str, p: u16| MemoKey::of(ip(a), p);
        assert_eq!(m.get(k("198.18.0.1", 53)), None);
        m.put(k("198.18.0.1", 53), 1);
        m.put(k("fd00::1", 53), 2);
        assert_eq!(m.get(k("198.18.0.1", 53)), Some(1));
        assert_eq!(m.get(k("fd00::1", 53)), Some(2));
        // Same port, other address; same address, other port; the other
        // family with the same bytes (an IPv4 address zero-extended is
        // `::c612:1`, a mapped one `::ffff:198.18.0.1`).
        assert_eq!(m.get(k("198.18.0.2", 53)), None);
        assert_eq!(m.get(k("198.18.0.1", 54)), None);
        assert_eq!(m.get(k("::ffff:198.18.0.1", 53)), None);
        let v4 = u32::from_ne_bytes([198, 18, 0, 1]);
        let same_bytes = std::net::Ipv6Addr::from(u128::from(v4).to_ne_bytes());
        assert_eq!(m.get(MemoKey::of(IpAddr::V6(same_bytes), 53)), None);
        // An unused slot answers nothing, not even the all-zero key (0.0.0.0:0).
        assert_eq!(Memo::new(7u32).get(MemoKey { addr: 0, port_family: 0 }), None);
    }

    #[test]
    fn memo_answers_each_destination_its_own_or_nothing() {
        // Many more destinations than slots: whatever a slot holds, every
        // answer is the one put for that very destination, and the last
        // put is always answered.
        let mut m = Memo::new(u32::MAX);
        let mut put = Vec::new();
        for i in 0..200u32 {
            let a = if i % 3 == 0 {
                IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, (i >> 4) as u16, i as u16))
            } else {
                IpAddr::V4(std::net::Ipv4Addr::from(0xc612_0000 | (i % 7)))
            };
            let key = MemoKey::of(a, (i % 5) as u16 * 1000);
            m.put(key, i);
            assert_eq!(m.get(key), Some(i));
            put.push((key, i));
        }
        let mut answered = 0;
        for (key, _) in &put {
            if let Some(v) = m.get(*key) {
                let latest = put.iter().rev().find(|(k, _)| k == key).map(|&(_, v)| v);
                assert_eq!(Some(v), latest);
                answered += 1;
            }
        }
        assert!(answered > 0);
    }
}
