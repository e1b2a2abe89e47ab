//! SIGINT/SIGTERM stop the engine; SIGHUP asks it to re-read its sockets.
//! Handlers only store to atomics (async-signal-safe); the main lcore polls them.
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

/// Install the handlers (idempotent). Called before the EAL starts, so a
/// SIGINT during EAL, pool or port setup ends the run cleanly, with a
/// summary, once setup is done. `SA_RESTART`: a signal arriving inside the
/// EAL's own system calls must not make them fail with `EINTR`.
pub fn install() {
    // SAFETY: installing handlers that only touch atomics; sigaction structs are zeroed then filled.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        let mut hup: libc::sigaction = std::mem::zeroed();
        hup.sa_sigaction = on_hup as extern "C" fn(libc::c_int) as usize;
        hup.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut hup.sa_mask);
        libc::sigaction(libc::SIGHUP, &hup, std::ptr::null_mut());
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// True once per SIGHUP.
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}
