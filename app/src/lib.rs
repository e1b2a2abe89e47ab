//! udpdemux: a kernel-bypass UDP receive engine on DPDK.
//!
//! The modules follow the packet: `parse` (wire views) -> `flow_table`
//! (early demux) -> `accounting` + `stage` (per-socket, per-node lock-free
//! queues) -> `delivery` (the socket's ring and its consumer). `engine` and
//! `rx` are the poll-mode runtime around them.
pub mod alloc_guard;
pub mod config;
pub mod engine;
pub mod meta;
pub mod rx;
pub mod signals;
pub mod stats;
