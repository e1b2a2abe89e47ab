//! Lcores: which exist, their NUMA sockets, and launching Rust closures on them.
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{DpdkError, Result};
use crate::ffi;

/// The calling thread's lcore id, or `None` on a thread DPDK did not start
/// (such a thread has no mempool cache: keep hot loops off it).
#[inline]
pub fn current() -> Option<u32> {
    // SAFETY: reads a per-thread variable.
    let id = unsafe { ffi::rte_lcore_id() };
    if id == ffi::LCORE_ID_ANY {
        None
    } else {
        Some(id)
    }
}

/// The main lcore's id.
pub fn main_lcore() -> u32 {
    // SAFETY: plain read of EAL configuration.
    unsafe { ffi::rte_get_main_lcore() }
}

/// Whether `id` is an lcore the EAL enabled (`-l`/`--lcores`).
pub fn is_enabled(id: u32) -> bool {
    if id >= ffi::RTE_MAX_LCORE {
        return false;
    }
    // SAFETY: id is in range; plain read of EAL configuration.
    unsafe { ffi::rte_lcore_is_enabled(id) != 0 }
}

/// NUMA socket of an lcore, as DPDK reports it.
pub fn socket_id(id: u32) -> u32 {
    // SAFETY: plain read; DPDK returns 0 for unknown ids.
    unsafe { ffi::rte_lcore_to_socket_id(id) }
}

/// All enabled lcores, main first.
pub fn enabled() -> Vec<u32> {
    (0..ffi::RTE_MAX_LCORE).filter(|&i| is_enabled(i)).collect()
}

/// Enabled lcores other than the main one.
pub fn workers() -> Vec<u32> {
    let main = main_lcore();
    enabled().into_iter().filter(|&i| i != main).collect()
}

type Job = Box<dyn FnOnce() -> i32 + Send + 'static>;

unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Box<Job> leaked by `launch`, handed to exactly one lcore.
    let job: Box<Job> = unsafe { Box::from_raw(arg as *mut Job) };
    // Unwinding across the C frame is undefined: catch it and report failure.
    match catch_unwind(AssertUnwindSafe(job)) {
        Ok(rc) => rc,
        Err(_) => {
            log::error!("lcore {:?}: worker panicked", current());
            -1
        }
    }
}

/// A closure running on a worker lcore; `join` waits for it.
#[must_use = "join the lcore before tearing the EAL down"]
pub struct Launched {
    lcore: u32,
    joined: bool,
}

/// Run `f` on worker lcore `lcore` (which must be enabled and idle).
pub fn launch<F>(lcore: u32, f: F) -> Result<Launched>
where
    F: FnOnce() -> i32 + Send + 'static,
{
    if !is_enabled(lcore) || lcore == main_lcore() {
        return Err(DpdkError::Usage(format!(
            "lcore {lcore} is not an enabled worker lcore"
        )));
    }
    let job: Box<Job> = Box::new(Box::new(f));
    let arg = Box::into_raw(job) as *mut c_void;
    // SAFETY: trampoline takes ownership of `arg` exactly once if launch succeeds.
    let ret = unsafe { ffi::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
    if ret != 0 {
        // SAFETY: the launch failed, so the lcore never saw `arg`: reclaim it.
        drop(unsafe { Box::from_raw(arg as *mut Job) });
        return Err(DpdkError::from_ret(
            format!("rte_eal_remote_launch(lcore {lcore})"),
            ret,
        ));
    }
    Ok(Launched {
        lcore,
        joined: false,
    })
}

impl Launched {
    pub fn lcore(&self) -> u32 {
        self.lcore
    }
    /// Wait for the closure; its return code.
    pub fn join(mut self) -> i32 {
        self.joined = true;
        // SAFETY: waits for a worker we launched.
        unsafe { ffi::rte_eal_wait_lcore(self.lcore) }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if !self.joined {
            // SAFETY: as in join; never leave a worker running past its handle.
            unsafe {
                ffi::rte_eal_wait_lcore(self.lcore);
            }
        }
    }
}
