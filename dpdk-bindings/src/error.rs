use std::ffi::CStr;

use crate::ffi;

extern "C" {
    fn udpdemux_rte_errno() -> i32;
}

/// The current lcore's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int through our C shim; no preconditions.
    unsafe { udpdemux_rte_errno() }
}

/// `rte_strerror` text for an errno value (DPDK's own codes or libc's).
pub fn strerror(errnum: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string that stays valid until the next call on this thread;
    // we copy it out immediately.
    unsafe {
        let p = ffi::rte_strerror(errnum.abs());
        if p.is_null() {
            return format!("errno {errnum}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// An error from a DPDK call: what we were doing, the errno and DPDK's text for it.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    #[error("{op}: {msg} (errno {errno})")]
    Call { op: String, errno: i32, msg: String },
    #[error("{0}")]
    Usage(String),
}

impl DpdkError {
    /// Build from a negative return code (DPDK's ethdev style: `-errno`).
    pub fn from_ret(op: impl Into<String>, ret: i32) -> Self {
        let errno = ret.abs();
        DpdkError::Call {
            op: op.into(),
            errno,
            msg: strerror(errno),
        }
    }
    /// Build from the current `rte_errno` (mempool/ring/EAL style: NULL or -1 return).
    pub fn from_errno(op: impl Into<String>) -> Self {
        let errno = rte_errno();
        DpdkError::Call {
            op: op.into(),
            errno,
            msg: strerror(errno),
        }
    }
    pub fn errno(&self) -> Option<i32> {
        match self {
            DpdkError::Call { errno, .. } => Some(*errno),
            DpdkError::Usage(_) => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, DpdkError>;
