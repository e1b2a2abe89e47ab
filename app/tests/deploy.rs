//! Deployment: the systemd unit passes `systemd-analyze verify` and has
//! the keys an operator relies on, and under systemd (`JOURNAL_STREAM` set)
//! the log lines carry no timestamp of their own but a syslog priority.
mod common;
use common::*;

use std::process::Command;

fn unit() -> String {
    std::fs::read_to_string(repo().join("deploy/udpdemux.service")).unwrap()
}

/// `key=value` lines of the unit (comments and sections left out).
fn keys(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('[') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {l}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn the_unit_passes_systemd_analyze_verify_and_has_the_operator_keys() {
    let text = unit();
    // verify checks that each command exists: point the unit's binary at
    // the one this test built, nothing else changed.
    assert!(text.contains("/usr/local/bin/udpdemux "), "{text}");
    let d = scratch("unit");
    let p = write(
        &d,
        "udpdemux.service",
        &text.replace("/usr/local/bin/udpdemux", bin()),
    );
    let o = Command::new("systemd-analyze")
        .args(["verify", p.to_str().unwrap()])
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/setup.sh installs it)");
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "systemd-analyze verify: {said}");
    assert!(
        !said.contains("udpdemux.service"),
        "verify has something to say about the unit: {said}"
    );
    // The same verify fails on a unit that names a missing binary, so the
    // pass above means something.
    let bad = write(&d, "bad.service", &text);
    let o = Command::new("systemd-analyze")
        .args(["verify", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !o.status.success() || !std::path::Path::new("/usr/local/bin/udpdemux").exists(),
        "verify passed a unit whose binary is missing"
    );

    let k = keys(&text);
    let get = |name: &str| -> Vec<&str> {
        k.iter()
            .filter(|(a, _)| a == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let config = get("Environment")
        .iter()
        .find_map(|v| v.strip_prefix("CONFIG="))
        .expect("Environment=CONFIG=...")
        .to_string();
    assert!(config.ends_with(".toml"), "{config}");
    assert_eq!(
        get("ExecStartPre"),
        ["/usr/local/bin/udpdemux check --config ${CONFIG}"]
    );
    let start = get("ExecStart");
    assert_eq!(start.len(), 1);
    assert!(
        start[0].starts_with("/usr/local/bin/udpdemux run --config ${CONFIG}"),
        "{start:?}"
    );
    assert_eq!(get("ExecReload"), ["/bin/kill -HUP $MAINPID"]);
    assert_eq!(get("Restart"), ["on-failure"]);
    assert_eq!(get("LimitMEMLOCK"), ["infinity"]);
    assert!(get("Requires")
        .iter()
        .any(|v| v.contains("dev-hugepages.mount")));
    assert!(get("After")
        .iter()
        .any(|v| v.contains("dev-hugepages.mount")));
    assert_eq!(get("StandardError"), ["journal"]);
    assert_eq!(get("WantedBy"), ["multi-user.target"]);
}

fn short_run(tag: &str, journal: bool) -> String {
    let cfg_text = format!(
        "{}\n[mempool]\nmbufs = 8191\ncache = 256\n[engine]\nduration_secs = 0.2\n{}",
        eal(tag, &["net_null0"]),
        rx_port("net_null0")
    );
    let d = scratch(tag);
    let cfg = write(&d, "c.toml", &cfg_text);
    let mut c = run_command(&cfg, &cfg.with_extension("json"), &[]);
    c.env_remove("UDPDEMUX_LOG_TIMESTAMPS");
    if journal {
        c.env("JOURNAL_STREAM", "8:12345");
    } else {
        c.env_remove("JOURNAL_STREAM");
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stderr(&o)
}

#[test]
fn under_the_journal_log_lines_have_a_priority_and_no_timestamp() {
    let plain = short_run("log-plain", false);
    let line = plain
        .lines()
        .find(|l| l.contains("udpdemux::runtime::setup") && l.contains("DPDK"))
        .unwrap_or_else(|| panic!("no setup line: {plain}"));
    // [2026-11-30T22:42:42.668Z INFO  udpdemux::runtime::setup] DPDK 22.11 up ...
    assert!(
        line.starts_with("[2") && line.contains("Z INFO "),
        "a timestamp outside the journal: {line}"
    );
    let journal = short_run("log-journal", true);
    let ours: Vec<&str> = journal
        .lines()
        .filter(|l| l.contains("udpdemux::"))
        .collect();
    assert!(!ours.is_empty(), "{journal}");
    for l in &ours {
        assert!(
            l.starts_with("<6>INFO udpdemux::")
                || l.starts_with("<4>WARN udpdemux::")
                || l.starts_with("<3>ERROR udpdemux::"),
            "a priority prefix and no timestamp: {l}"
        );
        assert!(!l.contains("Z INFO") && !l.starts_with('['), "{l}");
    }
    assert!(ours
        .iter()
        .any(|l| l.starts_with("<6>INFO udpdemux::runtime::setup: DPDK")));
}

/// The value of `ARG NAME=value` in the Dockerfile.
fn docker_arg(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("ARG {name}=")))
        .unwrap_or_else(|| panic!("Dockerfile: no ARG {name}=..."))
        .trim()
        .to_string()
}

/// The Dockerfile builds with what this machine tests with: the Debian DPDK
/// package version installed here and the rustc that built this test. When
/// either moves (a Debian point release, a toolchain update) this fails and
/// names the line to change.
#[test]
fn the_dockerfile_pins_the_dpdk_and_rust_the_tests_run_with() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let dpdk = docker_arg(&text, "DPDK_VERSION");
    let rust = docker_arg(&text, "RUST_VERSION");
    // Both stages install that version, the build stage from that image.
    assert!(
        text.contains("FROM rust:${RUST_VERSION}-bookworm AS build"),
        "{text}"
    );
    assert!(text.contains("\"libdpdk-dev=${DPDK_VERSION}\""), "{text}");
    assert_eq!(
        text.matches("\"dpdk=${DPDK_VERSION}\"").count(),
        2,
        "{text}"
    );
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "libdpdk-dev"])
        .output()
        .expect("dpkg-query (Debian)");
    assert!(
        o.status.success(),
        "libdpdk-dev is not installed: run scripts/setup.sh"
    );
    let here = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(
        dpdk, here,
        "Dockerfile: set ARG DPDK_VERSION={here} (the libdpdk-dev the tests run with)"
    );
    let o = Command::new("rustc")
        .arg("--version")
        .output()
        .expect("rustc");
    let v = String::from_utf8_lossy(&o.stdout);
    let here = v.split_whitespace().nth(1).unwrap_or("").to_string();
    assert_eq!(
        rust, here,
        "Dockerfile: set ARG RUST_VERSION={here} (the rustc the tests run with: {v})"
    );
}
