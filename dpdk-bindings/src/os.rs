//! The few POSIX calls the engine makes around the EAL: its privileges, an
//! instance lock beside the EAL's runtime files, and signal flags. Kept
//! here, with the rest of the project's FFI, so that the application crate
//! needs no `unsafe` for them.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// The process's effective user id (`geteuid`).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    euid() == 0
}

/// Take an exclusive lock on `file` without waiting (`flock(LOCK_EX |
/// LOCK_NB)`); held until every descriptor of it is closed. The OS error
/// (`EWOULDBLOCK`: another process holds it) when not taken.
pub fn try_lock_exclusive(file: &File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor `file` keeps open for the call; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether another process holds an exclusive `flock` on `file` (the
/// engine's instance lock): probes with a shared lock without waiting and
/// drops it at once, so it never blocks the holder.
pub fn held_exclusively_by_other(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(true)
        } else {
            Err(e)
        };
    }
    // SAFETY: as above; releases the shared lock just taken.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    Ok(false)
}

/// The CPUs this thread may run on (`sched_getaffinity`), ascending; empty
/// if the call fails.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is the set's own.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE, inside the set.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// Give the C allocator's free memory back to the kernel (glibc's
/// `malloc_trim(0)`: the top of every arena, and free pages inside them,
/// with `madvise(MADV_DONTNEED)`). The engine's threads free what they
/// allocate outside the hot path, but glibc keeps those pages resident in
/// a thread's arena, so a long run's RSS creeps up to each arena's size.
/// Whether memory was released; `false` where the C library has no trim.
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the allocator's own locks and touches
        // only its free lists; no Rust memory is involved.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Have every thread allocate from glibc's main arena (`mallopt(M_ARENA_MAX,
/// 1)`). By default a thread that meets a busy arena gets its own: a 64 MiB
/// reservation whose top chunk `malloc_trim` never shrinks, so the pages a
/// rarely-allocating thread (telemetry, the interrupt thread) touches there
/// stay resident for the life of the process. The engine's lcores allocate
/// nothing while they poll, so one arena costs no contention worth having.
/// Call it before the EAL starts its threads. Whether the C library took it.
pub fn single_malloc_arena() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets an allocator parameter; no memory is involved.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Signal numbers a flag can be attached to (1 ..= 64 on Linux).
const MAX_SIGNAL: usize = 64;

/// The flag each signal sets (null: none).
static FLAGS: [AtomicPtr<AtomicBool>; MAX_SIGNAL + 1] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_SIGNAL + 1];

/// The handler: stores `true` into the signal's flag (a load and a store
/// on atomics: async-signal-safe).
extern "C" fn on_signal(sig: c_int) {
    if let Some(slot) = usize::try_from(sig).ok().and_then(|s| FLAGS.get(s)) {
        let f = slot.load(Ordering::SeqCst);
        if !f.is_null() {
            // SAFETY: only `set_flag_on` stores here, and only `&'static` flags.
            unsafe { &*f }.store(true, Ordering::SeqCst);
        }
    }
}

/// Have each of `signals` set `flag` (SeqCst) instead of its default
/// action, with `SA_RESTART` (a signal arriving inside the EAL's own system
/// calls must not make them fail with `EINTR`). Installing again replaces
/// the flag.
pub fn set_flag_on(signals: &[c_int], flag: &'static AtomicBool) -> std::io::Result<()> {
    for &sig in signals {
        let Some(slot) = usize::try_from(sig).ok().and_then(|s| FLAGS.get(s)) else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        slot.store(
            flag as *const AtomicBool as *mut AtomicBool,
            Ordering::SeqCst,
        );
        // SAFETY: a zeroed sigaction is a valid start; we fill the handler,
        // the flags and an empty mask; the handler only touches atomics.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_its_flag() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        set_flag_on(&[libc::SIGUSR2], &FLAG).unwrap();
        // SAFETY: raise has no preconditions; the handler only sets FLAG.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert!(FLAG.load(Ordering::SeqCst));
        assert!(set_flag_on(&[0, 1000], &FLAG).is_err());
    }

    #[test]
    fn a_second_lock_is_refused() {
        let path = std::env::temp_dir().join(format!("dpdk-sys-lock-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        try_lock_exclusive(&a).unwrap();
        let e = try_lock_exclusive(&b).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EWOULDBLOCK));
        drop(a);
        try_lock_exclusive(&b).unwrap();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_held_lock_is_seen_without_being_disturbed() {
        let path = std::env::temp_dir().join(format!("dpdk-sys-held-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(!held_exclusively_by_other(&b).unwrap());
        // The probe left no lock behind.
        try_lock_exclusive(&a).unwrap();
        assert!(held_exclusively_by_other(&b).unwrap());
        drop(a);
        // A test thread that spawns a process at this moment (process_alive's
        // tests do) holds a copy of `a`'s descriptor, and so the lock, from
        // its fork until its exec closes it: wait that out (CI saw it once).
        let freed = (0..200).any(|_| {
            let held = held_exclusively_by_other(&b).unwrap();
            if held {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            !held
        });
        assert!(freed, "the lock outlived its only descriptor by a second");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn this_thread_may_run_somewhere() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }
}

/// Whether process `pid` is alive: it exists (`kill(pid, 0)` does not
/// say ESRCH) and is not a zombie (`/proc/<pid>/stat` state `Z` or `X`:
/// it has exited, its memory is gone, and only its parent has not waited
/// for it yet). No heap allocation: a liveness poll may run in a loop.
pub fn process_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(p, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // "/proc/<pid>/stat" in a stack buffer, NUL-terminated.
    let mut path = [0u8; 32];
    let mut n = 0;
    for b in b"/proc/" {
        path[n] = *b;
        n += 1;
    }
    let mut digits = [0u8; 10];
    let (mut v, mut d) = (pid, 0);
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        path[n] = digits[d];
        n += 1;
    }
    for b in b"/stat" {
        path[n] = *b;
        n += 1;
    }
    // SAFETY: a NUL-terminated path in a live stack buffer.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        // Gone between the two looks (or no /proc: trust kill).
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT);
    }
    let mut buf = [0u8; 512];
    // SAFETY: reads at most buf.len() bytes into a live buffer; fd is ours.
    let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our fd, closed once.
    unsafe { libc::close(fd) };
    if got <= 0 {
        return true;
    }
    let buf = &buf[..got as usize];
    // "pid (comm) S ...": the state follows the last ')' (comm may hold any byte).
    match buf.iter().rposition(|&c| c == b')') {
        Some(i) => !matches!(buf.get(i + 2), Some(b'Z' | b'X')),
        None => true,
    }
}

/// A sealed memfd (`memfd_create`) holding `bytes`: an anonymous file to
/// hand another process (over DPDK's IPC) that neither side can change
/// afterwards (`F_SEAL_WRITE`, `F_SEAL_GROW`, `F_SEAL_SHRINK`,
/// `F_SEAL_SEAL`). Close-on-exec. `name` shows in `/proc/PID/fd`.
pub fn sealed_memfd(name: &str, bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let cname = std::ffi::CString::new(name)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in memfd name"))?;
    // SAFETY: a NUL-terminated name the call copies; no other memory.
    let fd =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor memfd_create just opened for this function alone.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut f = File::from(owned);
    f.write_all(bytes)?;
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor `f` keeps open for the call.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f.into())
}

#[cfg(test)]
mod liveness_tests {
    use super::process_alive;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(0));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        // Exited but not waited for: a zombie counts as dead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while process_alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!process_alive(pid), "zombie {pid} counted alive");
        c.wait().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn a_sealed_memfd_reads_back_and_cannot_change() {
        use std::io::{Read, Seek, Write};
        let fd = super::sealed_memfd("udx-test", b"a=1\nb=2\n").unwrap();
        let mut f = std::fs::File::from(fd);
        let mut s = String::new();
        f.rewind().unwrap();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "a=1\nb=2\n");
        assert!(f.write_all(b"more").is_err(), "sealed against writes");
        assert!(f.set_len(1).is_err(), "sealed against shrinking");
    }
}
