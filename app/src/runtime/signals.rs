//! SIGINT/SIGTERM stop the engine; SIGHUP asks it to re-read its sockets.
//! Handlers only store to atomics (async-signal-safe); the main lcore polls them.
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
/// Set with STOP by a worker lcore that cannot go on, so the main lcore
/// does not report its stop as a signal.
static WORKER_STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

/// Install the handlers (idempotent). Called before the EAL starts, so a
/// SIGINT during EAL, pool or port setup ends the run cleanly, with a
/// summary, once setup is done. `SA_RESTART`: a signal arriving inside the
/// EAL's own system calls must not make them fail with `EINTR`.
pub fn install() {
    // Failures (none expected for these signals) leave the default action.
    let _ = dpdk_sys::os::set_flag_on(&[libc::SIGINT, libc::SIGTERM], &STOP);
    let _ = dpdk_sys::os::set_flag_on(&[libc::SIGHUP], &RELOAD);
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Stop the engine as a signal would: for a worker lcore that cannot go on
/// (its error is logged; its non-zero return fails the run at teardown).
pub fn request_stop() {
    WORKER_STOP.store(true, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Whether the stop came from a worker lcore ([`request_stop`]) rather
/// than a signal.
pub fn stop_by_worker() -> bool {
    WORKER_STOP.load(Ordering::SeqCst)
}

/// True once per SIGHUP.
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}
