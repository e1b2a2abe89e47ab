//! The command's tools, kept out of the engine library: they use the
//! library's public API like any other program would.
//!
//! - [`traffic`]: `udpdemux gen`, the traffic generator (a spec turned into
//!   frames, written to a pcap with an exact manifest, or transmitted on a
//!   DPDK port);
//! - [`bench_demux`]: `udpdemux bench-demux`, the parse + early-demux
//!   micro-benchmark;
//! - [`rng`]: the seeded generator both use (also included by
//!   `examples/csum_bench.rs`).
//!
//! The benchmark references that run inside the engine (`run --floor`,
//! `engine.filler_sockets`) are in the library, `udpdemux::runtime::bench`.
pub mod bench_demux;
pub mod rng;
pub mod traffic;
