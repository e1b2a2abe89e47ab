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
pub mod hugepage_alloc;
pub mod lcore;
pub mod mbuf;
pub mod memory;
pub mod mempool;
pub mod os;
pub mod port;
pub mod ring;
pub mod telemetry;

/// Start loading the cache line holding `p` into every cache level
/// (DPDK's `rte_prefetch0`). A hint: it never faults and never changes a
/// result, whatever the address, so it is safe for any pointer, dangling or
/// not.
#[inline(always)]
pub fn prefetch0<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint: it does not fault on any address and
    // has no architectural effect.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

pub use eal::Eal;
pub use error::{DpdkError, Result};
pub use mbuf::{Mbuf, MbufBurst, MbufRef, RawMbuf};
pub use mempool::Mempool;
pub use port::{Port, PortConf, PortInfo, PortStats};
pub use ring::{MbufRing, Ring};
