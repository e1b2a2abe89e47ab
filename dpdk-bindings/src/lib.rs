//! Bindings to the system DPDK and the safe wrappers the engine uses.
//!
//! The bindgen output (`ffi`) is private to this crate: outside it, DPDK
//! is reached only through the wrappers below, as capsule does. Mbufs are
//! passed around as opaque raw pointers and read through a small view
//! ([`mbuf::MbufRef`]: data, lengths, offload flags, sizes, reference
//! count, private area), or owned ([`Mbuf`], [`mbuf::MbufBurst`]); rings
//! of mbufs ([`ring::MbufRing`]), port bursts, telemetry commands as Rust
//! closures, memzone walks and the EAL's log stream are safe calls. All of
//! the project's FFI lives in this crate: DPDK's, and the few POSIX calls
//! around the EAL ([`os`]).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
mod ffi {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code,
        improper_ctypes,
        unreachable_pub
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
pub mod hash;
pub mod hugepage_alloc;
pub mod inflight;
pub mod lcore;
pub mod mbuf;
pub mod memory;
pub mod mempool;
pub mod mp;
pub mod os;
pub mod pdump;
pub mod port;
pub mod prefetch;
pub mod ring;
pub mod secondary;
pub mod telemetry;

pub use eal::Eal;
pub use error::{DpdkError, Result};
pub use mbuf::{Mbuf, MbufBurst, MbufRef, RawMbuf};
pub use mempool::Mempool;
pub use port::{Port, PortConf, PortInfo, PortStats};
pub use ring::{MbufRing, Ring};
