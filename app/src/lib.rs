//! udpdemux: a kernel-bypass UDP receive engine on DPDK.
//!
//! The modules follow the packet: `parse` (wire views) -> `flow_table`
//! (early demux) -> `receive` (the heart: per-socket accounting, per-node
//! lock-free stages, admission, and the elected producer's drain into the
//! socket's ring) -> the consumer (`runtime::consumer`, or an application
//! through `api`). `runtime` is the poll-mode runtime around them.
// The receive heart: pure Rust, model-checked with loom (`--cfg loom`).
pub mod receive;

// The live counter cells (the receive heart's among them); `summary`,
// `nstat` and `runtime::telemetry` are output formats that read them.
pub mod counters;

pub mod client_proto;
pub mod config;
pub mod flow_table;
/// Receive coalescing with the kernel's UDP GRO semantics.
pub mod gro;
/// Neighbours heard in received datagrams, reported by RX lcores to the
/// main lcore's neighbour table without a lock.
pub mod heard;
pub mod latency;
/// The neighbour table (ARP / ND) that `send_burst` resolves next hops with.
pub mod neigh;
pub mod parse;
pub mod pcap;
/// IPv4/IPv6 fragment reassembly (one bounded table per RX lcore).
pub mod reasm;
/// Waking the sleeping main lcore when a sender queues frames (model-checked
/// with loom like the receive heart).
pub mod wake;

/// Declares the DPDK side's modules behind one gate: the loom build leaves
/// them out, because loom replaces the atomics the mbuf metadata is made of.
macro_rules! dpdk_side {
    ($($(#[$attr:meta])* pub mod $name:ident;)*) => {
        $($(#[$attr])* #[cfg(not(loom))] pub mod $name;)*
    };
}

dpdk_side! {
    /// The poll-mode runtime: setup, the lcore loops, reload, teardown.
    pub mod runtime;
    /// Embedding the engine in an application's own process.
    pub mod api;
    /// `udpdemux check`: everything `run` can refuse, found before start.
    pub mod check;
    /// The ARP/ND/ICMP responder.
    pub mod control;
    /// The exception path: frames no socket takes, to and from the kernel.
    pub mod exception;
    /// The EAL's own message when its init fails.
    pub mod eal_log;
    /// Built-in consumers: count, echo, pcap.
    pub mod handlers;
    /// One instance per file prefix.
    pub mod instance;
    /// What travels with a packet in its mbuf's private area.
    pub mod meta;
    /// Multicast: joined groups, fan-out to member sockets, IGMP/MLD reports.
    pub mod mcast;
    /// The kernel's `nstat` view of the counters.
    pub mod nstat;
    /// The small-buffer cache (copies small datagrams out of NIC buffers).
    pub mod small_cache;
    /// An engine socket: binding, stages, delivery ring.
    pub mod socket;
    /// Pool starvation: low-water counters and warnings.
    pub mod starvation;
    /// The books as data, and their printouts.
    pub mod summary;
    /// Sending: frames built for `send_burst`, the TX ring the main lcore drains.
    pub mod send;
    /// Fragmenting what is sent: identification, `FragOKs` / `FragCreates` / `FragFails`.
    pub mod frag_out;
}
