//! Bindings to the system DPDK (bindgen, `ffi`) and thin safe wrappers.
//! All `unsafe` of the project that touches DPDK lives in this crate.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
pub mod ffi {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code,
        improper_ctypes
    )]
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        unsafe_op_in_unsafe_fn
    )]
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub mod eal;
pub mod error;
pub mod lcore;
pub mod mbuf;
pub mod memory;
pub mod mempool;
pub mod port;
pub mod ring;
pub mod telemetry;

pub use eal::Eal;
pub use error::{DpdkError, Result};
pub use mbuf::Mbuf;
pub use mempool::Mempool;
pub use port::{Port, PortConf, PortInfo};
pub use ring::Ring;
