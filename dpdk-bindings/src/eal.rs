use std::ffi::CString;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{DpdkError, Result};
use crate::ffi;

pub(crate) static INITIALISED: AtomicBool = AtomicBool::new(false);
/// Between a successful `rte_eal_init` and `rte_eal_cleanup`.
pub(crate) static UP: AtomicBool = AtomicBool::new(false);

/// Whether `rte_eal_init` was called in this process (successfully or
/// not: either way it cannot be called again).
pub fn initialised() -> bool {
    INITIALISED.load(Ordering::SeqCst)
}

/// Whether the EAL is initialised and not yet cleaned up.
pub fn is_up() -> bool {
    UP.load(Ordering::SeqCst)
}

/// The DPDK Environment Abstraction Layer. It can be initialised once per
/// process (a DPDK rule, not ours); `Drop` runs `rte_eal_cleanup`.
pub struct Eal {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Eal {
    /// `args` are EAL arguments without the program name (e.g. `["--no-huge", "-m", "256"]`).
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal> {
        if INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::Usage(
                "the EAL is already initialised in this process".into(),
            ));
        }
        let mut owned: Vec<CString> = vec![CString::new("udpdemux").unwrap()];
        for a in args {
            owned.push(CString::new(a.as_ref()).map_err(|_| {
                DpdkError::Usage(format!("EAL argument {:?} contains NUL", a.as_ref()))
            })?);
        }
        // rte_eal_init may permute argv; give it a scratch array of pointers into `owned`.
        let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        // SAFETY: argv points at NUL-terminated strings that outlive the call
        // (`owned`); the EAL copies what it keeps.
        let ret = unsafe { ffi::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(DpdkError::from_errno("rte_eal_init"));
        }
        UP.store(true, Ordering::SeqCst);
        Ok(Eal {
            _not_send: std::marker::PhantomData,
        })
    }

    pub fn tsc_hz(&self) -> u64 {
        tsc_hz()
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        UP.store(false, Ordering::SeqCst);
        // SAFETY: the EAL was initialised by `init` and every lcore was joined by
        // the owner before dropping (launch handles borrow nothing from Eal but
        // the engine joins them first).
        unsafe {
            ffi::rte_eal_cleanup();
        }
    }
}

/// TSC ticks per second as measured by the EAL.
pub fn tsc_hz() -> u64 {
    // SAFETY: plain read of a value the EAL computed at init.
    unsafe { ffi::rte_get_tsc_hz() }
}

/// Read the time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions (x86_64 only, as is DPDK here).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The version string of the linked DPDK.
pub fn version() -> String {
    // SAFETY: rte_version returns a static NUL-terminated string.
    unsafe {
        std::ffi::CStr::from_ptr(ffi::rte_version())
            .to_string_lossy()
            .into_owned()
    }
}

/// The EAL's log stream pointed at a pipe (`rte_openlog_stream`), so its
/// lines can be read back (`rte_eal_init` explains a failure only there).
/// [`LogRedirect::restore`], or drop, gives the EAL its default stream back
/// and closes the pipe's write end, which ends the reader's stream.
#[derive(Debug)]
pub struct LogRedirect {
    file: *mut libc::FILE,
}

impl LogRedirect {
    /// Redirect the EAL log into a new pipe (line-buffered); the pipe's
    /// read end. `None` when no pipe can be had: the EAL then logs to
    /// stderr as usual.
    pub fn to_pipe() -> Option<(LogRedirect, File)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two new descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        let mode = CString::new("w").unwrap_or_default();
        // SAFETY: fds[1] is the write end we just made; "w" matches it.
        let file = unsafe { libc::fdopen(fds[1], mode.as_ptr()) };
        if file.is_null() {
            // SAFETY: both descriptors are ours and used nowhere else.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return None;
        }
        // SAFETY: `file` is a valid stream not yet written to; line
        // buffering lets a reader keep pace with the EAL.
        unsafe { libc::setvbuf(file, std::ptr::null_mut(), libc::_IOLBF, 0) };
        // SAFETY: fds[0] is the read end we own; File takes it over.
        let read = unsafe { File::from_raw_fd(fds[0]) };
        // SAFETY: `file` stays open until `restore`, which switches the EAL
        // back to its default stream before closing it.
        unsafe { ffi::rte_openlog_stream(file.cast()) };
        Some((LogRedirect { file }, read))
    }

    /// Give the EAL its default stream back and close the pipe's write end.
    pub fn restore(self) {
        drop(self);
    }
}

impl Drop for LogRedirect {
    fn drop(&mut self) {
        // SAFETY: NULL selects the EAL's default stream; after that nothing
        // writes to `file`, which we opened and close once here.
        unsafe {
            ffi::rte_openlog_stream(std::ptr::null_mut());
            libc::fclose(self.file);
        }
    }
}
