//! The poll-mode runtime around the receive heart. Imports run downward
//! only: [`engine`] (the entry) calls [`setup`], [`main_loop`] and
//! [`teardown`]; they and the lcore loops ([`rx`], [`consumer`]), the
//! socket [`registry`], [`reload`], [`report`] and [`telemetry`] all stand
//! on [`shared`], the state the lcores share, which imports none of them.
//! The benchmark references (`run --floor`, `engine.filler_sockets`) are
//! in [`bench`](mod@bench), which `rx`, `consumer`, `setup` and `teardown` dispatch to.
pub mod alloc_guard;
pub mod bench;
pub mod burst;
pub mod clients;
pub mod consumer;
pub mod engine;
pub mod error;
/// Fragments on the RX lcore: the reassembly table and the chain it builds.
pub mod frag;
pub mod idle;
pub mod lcore_task;
pub mod main_loop;
pub mod metrics;
pub mod registry;
pub mod reload;
pub mod report;
pub mod rx;
pub mod setup;
pub mod shared;
pub mod signals;
pub mod steer;
pub mod teardown;
pub mod telemetry;
/// Each lcore loop's CPU time and context switches (preemption on shared CPUs).
pub mod thread_time;
