//! Benchmark references that run inside the engine, kept out of its
//! receive path: they exist so `scripts/bench.sh` can measure the engine
//! against them, and nothing in a normal run depends on them.
//!
//! - [`floor`]: `run --floor minimal|checksums|rte-hash|pipeline|pipeline-checksums|pipeline-demux|pipeline-rte-hash`,
//!   the lower bounds an RX core (and a cross-core pipeline) is read
//!   against. The RX loop ([`super::rx`]) and the consumers
//!   ([`super::consumer`]) only dispatch here when [`super::shared::Mode`]
//!   is `Floor`.
//! - [`hash_floor`]: `run --floor rte-hash`, the checksums floor with
//!   DPDK's `rte_hash` as its table: what a DPDK-native lookup costs at the
//!   table's size.
//! - [`pipeline_floor`]: the pipeline floors' RX side and consumer side.
//! - [`alternate`]: `run --alternate-floor`, the pipeline and one of its
//!   cross-core floors in turns on the same lcores, the ratio in one run.
//! - [`filler`]: `engine.filler_sockets`, a million-entry flow table for
//!   the demux benchmarks (bindings that all deliver to one socket).
//!
//! Imports run downward only: this tree stands on `shared`, `burst` and
//! `registry`; none of them imports it.
pub mod alternate;
pub mod filler;
pub mod floor;
pub mod hash_floor;
pub mod pipeline_floor;
