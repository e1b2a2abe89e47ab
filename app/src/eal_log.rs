//! The EAL's own words when `rte_eal_init` fails.
//!
//! `rte_eal_init` reports failure as an errno (often `EINVAL` or even 0)
//! and explains itself only in its log ("core 7 unavailable", "no mounted
//! hugetlbfs found", "failed to parse device"). While it runs, its log
//! stream is pointed at a pipe: a thread copies every line to stderr as
//! before and keeps it, so a failure can quote the EAL's message first and
//! match a hint to the argument that failed.
use std::io::{BufRead, BufReader};
use std::thread::JoinHandle;

use dpdk_sys::eal::LogRedirect;
use dpdk_sys::DpdkError;

use crate::config::Config;

/// The EAL log redirected into our pipe until [`Capture::finish`].
pub struct Capture {
    redirect: LogRedirect,
    reader: JoinHandle<Vec<String>>,
}

impl Capture {
    /// Redirects the EAL log (call before `rte_eal_init`). `None` when a
    /// pipe cannot be had: the EAL then logs to stderr as usual.
    pub fn start() -> Option<Capture> {
        Capture::start_with(|l| eprintln!("{l}"))
    }

    /// As [`Capture::start`], with every line passed to `each` as it comes
    /// (a client logs them at debug level instead of to stderr).
    pub fn start_with(each: fn(&str)) -> Option<Capture> {
        let (redirect, read) = LogRedirect::to_pipe()?;
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for l in BufReader::new(read).split(b'\n') {
                let Ok(l) = l else { break };
                let l = String::from_utf8_lossy(&l).into_owned();
                each(&l);
                lines.push(l);
            }
            lines
        });
        Some(Capture { redirect, reader })
    }

    /// Gives the EAL its default stream back and returns the lines logged.
    pub fn finish(self) -> Vec<String> {
        // Closing the pipe's write end ends the reader's stream.
        self.redirect.restore();
        self.reader.join().unwrap_or_default()
    }
}

/// Lines the EAL logs on every start (not the reason for a failure).
const ROUTINE: &[&str] = &[
    "Detected ",
    "Multi-process socket",
    "Selected IOVA",
    "Physical addresses are unavailable",
    "VFIO support",
    "Probe PCI",
    "No legacy callbacks",
    "Using IOMMU",
    "Ask a virtual area",
    "Virtual area found",
    "Setting up physically contiguous",
    "Detected shared linkage",
];

/// The EAL's explanation of a failed init: its last few distinct
/// non-routine lines, `FATAL:` and `EAL:` prefixes dropped, in order.
pub fn reason(lines: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        let t = l.trim();
        let t = t.strip_prefix("EAL:").map(str::trim).unwrap_or(t);
        let t = t.strip_prefix("FATAL:").map(str::trim).unwrap_or(t);
        let t = t.trim_end_matches('.');
        if t.is_empty() || ROUTINE.iter().any(|r| t.contains(r)) || t.starts_with("TELEMETRY") {
            continue;
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    let start = out.len().saturating_sub(3);
    out[start..].join("; ")
}

/// "EAL init failed: " and then this: the EAL's own reason (from its log),
/// the errno, and the hint.
pub fn eal_failure(cfg: &Config, err: &DpdkError, logged: &[String]) -> String {
    let why = reason(logged);
    let hint = eal_hint(cfg, err, &why);
    if why.is_empty() {
        format!("{err}; {hint}")
    } else {
        format!("{why} ({err}); {hint}")
    }
}

/// A hint matched to what the EAL said failed (`why`, its own words) and
/// to the errno, naming the config key to change.
pub fn eal_hint(cfg: &Config, err: &DpdkError, why: &str) -> String {
    let w = why.to_ascii_lowercase();
    if err.errno() == Some(libc::EALREADY) {
        return "the EAL was already initialised in this process".into();
    }
    if err.errno() == Some(libc::ENODEV) || w.contains("parse device") || w.contains("vdev") {
        return format!(
            "a device in eal.vdevs {:?} / eal.allow {:?} was not recognised: its PMD is not installed (apt-get install dpdk) or the name is misspelt",
            cfg.eal.vdevs, cfg.eal.allow
        );
    }
    if w.contains("lcore") || (w.contains("core ") && w.contains("unavailable")) {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        return format!(
            "eal.lcores = {:?} must name CPUs that exist (this machine has {cpus}: 0..{})",
            cfg.eal.lcores,
            cpus.saturating_sub(1)
        );
    }
    if w.contains("hugepage") || w.contains("hugetlbfs") || w.contains("huge-dir") {
        return "run `bash scripts/setup.sh` as root (hugepages mounted at /dev/hugepages), or set eal.no_huge = true".into();
    }
    if w.contains("cannot init memory") || w.contains("memory") || w.contains("-m ") {
        return format!(
            "lower eal.memory_mb = {} (or free hugepages: scripts/setup.sh), or set eal.no_huge = true",
            cfg.eal.memory_mb
        );
    }
    if w.contains("prefix") || w.contains("primary process") || w.contains("lock") {
        return format!(
            "another DPDK process may use eal.file_prefix = {:?}: stop it or choose another prefix",
            cfg.eal.file_prefix
        );
    }
    if w.contains("command line") || w.contains("option") || w.contains("argument") {
        return if cfg.eal.extra_args.is_empty() {
            format!(
                "check eal.lcores {:?}, eal.vdevs and eal.allow (the EAL's usage text above lists its options)",
                cfg.eal.lcores
            )
        } else {
            format!(
                "check eal.extra_args {:?}: an option the EAL does not know or a bad value (the EAL's usage text above lists its options)",
                cfg.eal.extra_args
            )
        };
    }
    if !dpdk_sys::os::is_root() {
        return "run as root (the EAL needs CAP_SYS_ADMIN, CAP_IPC_LOCK and CAP_NET_RAW)".into();
    }
    if cfg.eal.no_huge {
        "check eal.lcores, eal.vdevs and eal.extra_args".into()
    } else {
        "run `bash scripts/setup.sh` as root (hugepages), or set eal.no_huge = true; check eal.lcores"
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reason_keeps_the_cause_not_the_routine() {
        let l = v(&[
            "EAL: Detected CPU lcores: 2",
            "EAL: Detected NUMA nodes: 1",
            "EAL: core 7 unavailable",
            "EAL: invalid parameter for --lcores",
            "EAL: FATAL: Invalid 'command line' arguments.",
            "EAL: Invalid 'command line' arguments.",
        ]);
        assert_eq!(
            reason(&l),
            "core 7 unavailable; invalid parameter for --lcores; Invalid 'command line' arguments"
        );
        assert_eq!(reason(&v(&["EAL: Detected CPU lcores: 2"])), "");
    }
}
