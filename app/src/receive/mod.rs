//! The receive heart: pure Rust, model-checked with loom (`--cfg loom`).
pub mod accounting;
pub mod delivery;
pub mod stage;
pub mod sync;
