//! A client of a running udpdemux engine, in its own process.
//!
//! [`Client::attach`] starts the EAL as a DPDK secondary process of the
//! engine (the primary) on the engine's `eal.file_prefix`; [`Client::detach`]
//! leaves again. Attaching probes, configures and resets none of the
//! engine's devices: the secondary's vdev scan is intercepted so the
//! engine's vdevs (e.g. `net_pcap0`) never become ports here, PCI is not
//! scanned (`--no-pci`), and so `rte_eal_cleanup`'s bus cleanup, which
//! would close them (DPDK >= 22.11), has nothing to close
//! (`dpdk_sys::secondary`, and docs/design.md on the `dpdk-proc-info` crash).
//!
//! What works today: attach, detach, and clear errors when no engine runs
//! on the prefix, the prefix is wrong, or the EAL refuses. Next (issue 16):
//! `bind`/`open` over the engine's IPC and a zero-copy `recv_burst` from the
//! socket's delivery ring (`udx_s<id>`), with release through the shared
//! accounting. A `Client` is the process's EAL main lcore: it is not `Send`,
//! and its lcore id ([`CLIENT_LCORE`]) is one the engine does not use, so
//! mempool caches (indexed by lcore id, in shared memory) stay apart.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use dpdk_sys::eal::LogRedirect;
use dpdk_sys::secondary::{self, SecondaryEal};

/// The lcore id this process's EAL main thread takes: the last one
/// (RTE_MAX_LCORE 128 - 1), far from the engine's configured lcores.
pub const CLIENT_LCORE: u32 = 127;

/// Why [`Client::attach`] failed: one line, naming the fix.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("file prefix {prefix:?} is not valid: give a non-empty name without '/' (the engine's eal.file_prefix)")]
    InvalidPrefix { prefix: String },
    #[error("no DPDK process has run with file prefix {prefix:?} ({dir} does not exist): start the engine (`udpdemux run --config FILE`) or give the eal.file_prefix of its config{running}")]
    NoSuchPrefix {
        prefix: String,
        dir: String,
        running: String,
    },
    #[error("no engine is running on file prefix {prefix:?} ({config} is not held by a primary process): start the engine, or wait until it is up, and attach again{running}")]
    NotRunning {
        prefix: String,
        config: String,
        running: String,
    },
    #[error("the engine on file prefix {prefix:?} shares no memory (no {config}, nor 2 s later: eal.no_huge = true runs the EAL with --no-shconf): set eal.no_huge = false in its config and restart it to let clients attach")]
    NoSharedConfig { prefix: String, config: String },
    #[error("the DPDK primary on file prefix {prefix:?} is not a udpdemux engine (no udpdemux.lock held in {dir}): give the eal.file_prefix of a running engine")]
    NotAnEngine { prefix: String, dir: String },
    #[error("the EAL is already initialised in this process: attach once per process (DPDK allows one rte_eal_init per process, even after a detach)")]
    AlreadyInitialised,
    #[error("the EAL refused to attach as a secondary to file prefix {prefix:?}: {reason}{hint}")]
    Eal {
        prefix: String,
        reason: String,
        hint: String,
    },
}

/// An attached client: the EAL up as a secondary process of the engine.
#[derive(Debug)]
pub struct Client {
    eal: SecondaryEal,
    prefix: String,
    runtime_dir: PathBuf,
}

impl Client {
    /// Attach to the engine running with `eal.file_prefix = file_prefix`.
    pub fn attach(file_prefix: &str) -> Result<Client, AttachError> {
        check_prefix(file_prefix)?;
        if dpdk_sys::eal::initialised() {
            return Err(AttachError::AlreadyInitialised);
        }
        let runtime_dir = runtime_base().join(file_prefix);
        preflight(file_prefix, &runtime_dir)?;
        let args = eal_args(file_prefix);
        let capture = LogCapture::start();
        let res = SecondaryEal::init(&args);
        let lines = capture.map(LogCapture::finish).unwrap_or_default();
        let eal = match res {
            Ok(eal) => eal,
            Err(err) => {
                if dpdk_sys::eal::is_up() {
                    log::error!("attached, but not cleanly: {err}");
                }
                return Err(eal_error(
                    file_prefix,
                    &runtime_dir,
                    &err.to_string(),
                    &lines,
                ));
            }
        };
        log::info!(
            "attached to {file_prefix:?} as a secondary (lcore {CLIENT_LCORE}); the engine's vdevs, not probed here: {:?}",
            eal.primary_vdevs()
        );
        Ok(Client {
            eal,
            prefix: file_prefix.to_string(),
            runtime_dir,
        })
    }

    /// The engine's file prefix.
    pub fn file_prefix(&self) -> &str {
        &self.prefix
    }

    /// The EAL runtime directory shared with the engine.
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    /// The engine's vdevs (announced by the primary, deliberately not
    /// probed in this process).
    pub fn engine_vdevs(&self) -> &[String] {
        self.eal.primary_vdevs()
    }

    /// Whether the engine (the primary) is still running.
    pub fn engine_alive(&self) -> bool {
        self.eal.primary_alive()
    }

    /// Leave the engine: `rte_eal_cleanup` in this process, which here
    /// closes no device (none was probed), so the engine's ports run on.
    /// Whether the EAL cleaned up (`false` only if a port had appeared in
    /// this process after all: the cleanup is then skipped, not to close it).
    pub fn detach(self) -> bool {
        self.eal.detach()
    }
}

fn check_prefix(p: &str) -> Result<(), AttachError> {
    if p.is_empty() || p.contains('/') || p.contains('\0') || p == "." || p == ".." {
        return Err(AttachError::InvalidPrefix {
            prefix: p.to_string(),
        });
    }
    Ok(())
}

/// Where the EAL keeps runtime files: `/var/run/dpdk` for root, else
/// `$XDG_RUNTIME_DIR/dpdk` or `/tmp/dpdk` (as `eal_get_runtime_dir` decides).
pub fn runtime_base() -> PathBuf {
    if dpdk_sys::os::is_root() {
        return PathBuf::from("/var/run/dpdk");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Path::new(&d).join("dpdk"),
        _ => PathBuf::from("/tmp/dpdk"),
    }
}

/// Whether an engine holds the instance lock in `dir`.
fn engine_lock_held(dir: &Path) -> bool {
    std::fs::File::open(dir.join("udpdemux.lock"))
        .ok()
        .and_then(|f| dpdk_sys::os::held_exclusively_by_other(&f).ok())
        .unwrap_or(false)
}

/// File prefixes with a running engine or DPDK primary, for error hints.
pub fn running_prefixes() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(runtime_base()) else {
        return out;
    };
    for e in rd.flatten() {
        let dir = e.path();
        if secondary::primary_alive(&dir.join("config")) || engine_lock_held(&dir) {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

fn running_hint() -> String {
    let r = running_prefixes();
    if r.is_empty() {
        "; no engine runs on any prefix now".into()
    } else {
        let q: Vec<String> = r.iter().map(|p| format!("{p:?}")).collect();
        format!("; running now: {}", q.join(", "))
    }
}

/// How long an engine that holds its instance lock may take to bring its
/// EAL's shared config up before the client gives up on it.
const STARTUP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What can be told before the EAL starts (its own errors are vaguer, and a
/// secondary started with no primary waits or fails obscurely).
fn preflight(prefix: &str, dir: &Path) -> Result<(), AttachError> {
    let config = dir.join("config");
    if !dir.is_dir() {
        return Err(AttachError::NoSuchPrefix {
            prefix: prefix.into(),
            dir: dir.display().to_string(),
            running: running_hint(),
        });
    }
    let mut engine = engine_lock_held(dir);
    // An engine takes its instance lock before its EAL creates and locks
    // the config: one that is starting gets a moment to get there.
    let deadline = std::time::Instant::now() + STARTUP_GRACE;
    while engine && !secondary::primary_alive(&config) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        engine = engine_lock_held(dir);
    }
    if !config.exists() && engine {
        return Err(AttachError::NoSharedConfig {
            prefix: prefix.into(),
            config: config.display().to_string(),
        });
    }
    if !secondary::primary_alive(&config) {
        return Err(AttachError::NotRunning {
            prefix: prefix.into(),
            config: config.display().to_string(),
            running: running_hint(),
        });
    }
    if !engine {
        return Err(AttachError::NotAnEngine {
            prefix: prefix.into(),
            dir: dir.display().to_string(),
        });
    }
    Ok(())
}

/// The EAL arguments of a client: a secondary on the engine's prefix that
/// scans no PCI bus, opens no telemetry socket of its own, and runs its one
/// lcore on [`CLIENT_LCORE`], allowed on every CPU this thread may use (no
/// pinning of the application's thread).
pub fn eal_args(prefix: &str) -> Vec<String> {
    let cpus = dpdk_sys::os::allowed_cpus();
    let set = if cpus.is_empty() {
        "0".to_string()
    } else {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        "--proc-type=secondary".into(),
        format!("--file-prefix={prefix}"),
        "--no-pci".into(),
        "--no-telemetry".into(),
        format!("--lcores={CLIENT_LCORE}@({set})"),
    ]
}

fn eal_error(prefix: &str, dir: &Path, err: &str, lines: &[String]) -> AttachError {
    let reason = eal_reason(lines).unwrap_or_else(|| err.to_string());
    let hint = if !dpdk_sys::os::is_root() {
        " (run as root: the engine's runtime files and hugepages are root's)".to_string()
    } else if !secondary::primary_alive(&dir.join("config")) {
        " (the engine exited meanwhile: start it and attach again)".to_string()
    } else {
        String::new()
    };
    AttachError::Eal {
        prefix: prefix.into(),
        reason,
        hint,
    }
}

/// The EAL's last few lines that explain a failure (routine lines dropped).
fn eal_reason(lines: &[String]) -> Option<String> {
    const ROUTINE: &[&str] = &[
        "Detected ",
        "Multi-process socket",
        "Selected IOVA",
        "Physical addresses are unavailable",
        "VFIO support",
        "No legacy callbacks",
        "Ask a virtual area",
        "Virtual area found",
        "Setting up physically contiguous",
        "Detected shared linkage",
    ];
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        let t = l.trim();
        let t = t.strip_prefix("EAL:").map(str::trim).unwrap_or(t);
        let t = t.trim_end_matches('.');
        if t.is_empty() || ROUTINE.iter().any(|r| t.contains(r)) {
            continue;
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    if out.is_empty() {
        return None;
    }
    let n = out.len().saturating_sub(3);
    Some(out[n..].join("; "))
}

/// The EAL's log read from a pipe while it initialises (it explains a
/// failure only there); lines go to `log::debug!`.
struct LogCapture {
    redirect: LogRedirect,
    reader: std::thread::JoinHandle<Vec<String>>,
}

impl LogCapture {
    fn start() -> Option<LogCapture> {
        let (redirect, read) = LogRedirect::to_pipe()?;
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for l in BufReader::new(read).split(b'\n') {
                let Ok(l) = l else { break };
                let l = String::from_utf8_lossy(&l).into_owned();
                log::debug!("EAL: {l}");
                lines.push(l);
            }
            lines
        });
        Some(LogCapture { redirect, reader })
    }

    fn finish(self) -> Vec<String> {
        self.redirect.restore();
        self.reader.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_prefixes_are_refused_before_the_eal() {
        for p in ["", "a/b", ".", ".."] {
            let e = Client::attach(p).unwrap_err();
            assert!(matches!(e, AttachError::InvalidPrefix { .. }), "{p:?}: {e}");
        }
    }

    #[test]
    fn an_unknown_prefix_says_so_and_names_the_fix() {
        let p = format!("no-such-engine-{}", std::process::id());
        let e = Client::attach(&p).unwrap_err();
        assert!(matches!(e, AttachError::NoSuchPrefix { .. }), "{e}");
        let s = e.to_string();
        assert!(s.contains(&p) && s.contains("start the engine"), "{s}");
        assert!(!s.contains('\n'), "one line: {s}");
    }

    #[test]
    fn the_client_lcore_runs_unpinned() {
        let a = eal_args("x");
        assert!(a.contains(&"--proc-type=secondary".to_string()));
        assert!(a.contains(&"--no-pci".to_string()));
        assert!(a.iter().any(|s| s.starts_with("--lcores=127@(")));
    }
}
