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

pub mod config;
pub mod flow_table;
pub mod latency;
pub mod parse;
pub mod pcap;

// The DPDK runtime and what only it uses, left out of the loom build:
// loom replaces the atomics the mbuf metadata is made of.
#[cfg(not(loom))]
pub mod runtime;

#[cfg(not(loom))]
pub mod api;
#[cfg(not(loom))]
pub mod check;
#[cfg(not(loom))]
pub mod control;
/// The EAL's own message when its init fails.
#[cfg(not(loom))]
pub mod eal_log;
#[cfg(not(loom))]
pub mod handlers;
#[cfg(not(loom))]
pub mod instance;
#[cfg(not(loom))]
pub mod meta;
#[cfg(not(loom))]
pub mod nstat;
#[cfg(not(loom))]
pub mod small_cache;
#[cfg(not(loom))]
pub mod socket;
#[cfg(not(loom))]
pub mod starvation;
#[cfg(not(loom))]
pub mod summary;
