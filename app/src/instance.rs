//! One engine per EAL file prefix, and the EAL's runtime directory.
//!
//! Without hugepages (`--no-huge --no-shconf`) the EAL lets two processes
//! with the same `--file-prefix` start side by side: they poll the same
//! CPUs and the second one's telemetry socket gets another name, so
//! `dpdk-telemetry.py -f PREFIX` reaches only the first. With hugepages the
//! EAL refuses the second, but its error does not say who holds the prefix.
//! So before the EAL starts, the engine takes an exclusive `flock` on
//! `udpdemux.lock` in the prefix's runtime directory and writes its pid
//! there; a second instance is refused with that pid. The kernel drops the
//! lock when the process exits, however it exits, so a stale file never
//! blocks a restart.
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Where the EAL keeps its runtime files (as `eal_get_runtime_dir` decides):
/// `/var/run/dpdk` for root, else `$XDG_RUNTIME_DIR/dpdk` or `/tmp/dpdk`.
pub fn runtime_base() -> PathBuf {
    if dpdk_sys::os::is_root() {
        return PathBuf::from("/var/run/dpdk");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Path::new(&d).join("dpdk"),
        _ => PathBuf::from("/tmp/dpdk"),
    }
}

/// The runtime directory of one file prefix.
pub fn runtime_dir(prefix: &str) -> PathBuf {
    runtime_base().join(prefix)
}

/// The prefix the EAL will use for `args`: the last `--file-prefix`
/// (`eal.extra_args` may repeat it after the config's own).
pub fn effective_prefix(args: &[String]) -> Option<String> {
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(p) = a.strip_prefix("--file-prefix=") {
            out = Some(p.to_string());
        } else if a == "--file-prefix" {
            out = it.next().cloned();
        }
    }
    out
}

/// The pid of a live udpdemux process that holds `prefix` (read from its
/// lock file, without taking the lock: a probe must not make an engine that
/// is starting fail to lock), if any and if it is not this process.
pub fn holder(prefix: &str) -> Option<u32> {
    let text = std::fs::read_to_string(runtime_dir(prefix).join("udpdemux.lock")).ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    if pid == std::process::id() {
        return None;
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "udpdemux").then_some(pid)
}

/// Held for the engine's lifetime; the lock goes with the file descriptor.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

impl InstanceLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Take the prefix's lock, or say which process holds it.
pub fn lock(prefix: &str) -> Result<InstanceLock, String> {
    if prefix.is_empty() || prefix.contains('/') || prefix == "." || prefix == ".." {
        return Err(format!(
            "eal.file_prefix = {prefix:?}: must be a non-empty name without '/' (it names the EAL's runtime directory)"
        ));
    }
    let dir = runtime_dir(prefix);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            format!(
                "cannot create the EAL runtime directory {}: {e}",
                dir.display()
            )
        })?;
    let path = dir.join("udpdemux.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open the instance lock {}: {e}", path.display()))?;
    if let Err(err) = dpdk_sys::os::try_lock_exclusive(&file) {
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(format!("cannot lock {}: {err}", path.display()));
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = match text.trim().parse::<u32>() {
            Ok(pid) => format!("pid {pid}"),
            Err(_) => "a process that has not written its pid yet".to_string(),
        };
        return Err(format!(
            "another udpdemux ({holder}) is running with eal.file_prefix = {prefix:?} (lock {}): stop it, or give this instance another file_prefix",
            path.display()
        ));
    }
    let write = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())?;
        f.flush()
    };
    write(&mut file)
        .map_err(|e| format!("cannot write the instance lock {}: {e}", path.display()))?;
    // Where clients lock their lcore slots (`client_proto`): made now, so
    // that attaching adds nothing at the runtime directory's top.
    let slots = crate::client_proto::slot_dir(&dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&slots)
        .map_err(|e| format!("cannot create the client slot directory {}: {e}", slots.display()))?;
    Ok(InstanceLock { _file: file, path })
}

/// Removes a runtime directory the EAL left behind (`check`'s private
/// prefix), when dropped.
#[derive(Debug)]
pub struct RemoveDirOnDrop(pub PathBuf);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_pid_and_bad_prefixes_are_refused() {
        let prefix = format!("udpdemux-locktest-{}", std::process::id());
        let _dir = RemoveDirOnDrop(runtime_dir(&prefix));
        let first = match lock(&prefix) {
            Ok(l) => l,
            // Not root and no writable runtime base: nothing to test here.
            Err(e) if e.contains("cannot create") => return,
            Err(e) => panic!("{e}"),
        };
        let e = lock(&prefix).unwrap_err();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        let again = lock(&prefix).expect("free again once the holder is gone");
        assert!(again.path().ends_with("udpdemux.lock"));
        let args: Vec<String> = ["--file-prefix=a", "-m", "1", "--file-prefix", "b"]
            .map(String::from)
            .to_vec();
        assert_eq!(effective_prefix(&args).as_deref(), Some("b"));
        assert_eq!(effective_prefix(&[]), None);
        for bad in ["", "a/b", ".."] {
            assert!(lock(bad).unwrap_err().contains("file_prefix"), "{bad:?}");
        }
    }
}
