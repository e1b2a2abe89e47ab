//! A secondary-process client against a real engine (issue 16, first
//! slice): attach/detach cycles leave the engine's port running and leak
//! nothing, bad prefixes get one clear line, and DPDK's own secondary,
//! `dpdk-proc-info`, exits 0 against an engine it does not crash on.
//!
//! The EAL initialises once per process, so every attach is a fresh run of
//! `examples/attach.rs`. The engine and the example are built by a nested
//! `cargo build` in the same target directory and profile (a no-op when
//! they are fresh). Engines here use hugepages: a client can only attach to
//! shared memory (`eal.no_huge = true` runs the EAL with `--no-shconf`).
mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 20 attach/detach cycles, each in a fresh process, during an endless
/// replay: every attach succeeds and sees the engine's vdev without
/// probing it; the port stays up and started with its queue started, and
/// its packet count grows across the cycles; the engine's memzones (by
/// name and length, rings included) and heap (count and bytes) and its
/// runtime files are what they were before the first attach; at exit the
/// books balance.
#[test]
fn attach_detach_cycles_leave_the_engine_running_and_leak_nothing() {
    hugepages_ready(64).unwrap();
    let vdev = endless_pcap();
    let mut engine = Engine::start("cycles", &vdev, "net_pcap0", Opts::default());
    let p = engine.prefix.clone();
    let (st0, rx0, mem0) = port_state(&p);
    assert_eq!(st0, UP, "before any attach");
    let files0 = runtime_files(&p);
    let mut last = rx0;
    let t0 = Instant::now();
    for i in 0..20 {
        let o = attach(&p);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "cycle {i}: {} {out} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains(&format!("attached {p} vdevs=[\"net_pcap0\"]"))
                && out.contains("cleanup=true engine_alive=true"),
            "cycle {i}: {out}"
        );
        if i % 5 == 4 {
            let (st, rx, _) = port_state(&p);
            assert_eq!(st, UP, "cycle {i}: the engine's port changed");
            assert!(rx > last, "cycle {i}: ipackets stalled at {rx}");
            last = rx;
        }
    }
    eprintln!("20 cycles in {:?}", t0.elapsed());
    let (st1, rx1, mem1) = port_state(&p);
    assert_eq!(st1, UP);
    assert!(rx1 > rx0);
    // Memzones by name and length (rings are the RG_ ones), the heap's
    // bytes and allocation count: all as before the first attach.
    assert!(mem0["memzones"].as_u64().unwrap() > 0, "{mem0}");
    assert_eq!(
        mem1, mem0,
        "the engine's memory before and after the cycles"
    );
    assert_eq!(runtime_files(&p), files0, "runtime files left behind");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert!(j["rx_packets"].as_u64().unwrap() >= rx1);
    // The engine is gone: the same prefix now gets a clear error.
    let o = attach(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: no engine is running on file prefix")
            && err.contains("start the engine")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// A prefix no engine ever used: one line naming the fix, exit 1, no crash.
#[test]
fn a_wrong_prefix_is_one_clear_line_and_exit_1() {
    let p = unique("nobody");
    let o = attach(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: no DPDK process has run with file prefix \"{p}\""
        )) && err.contains("eal.file_prefix")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// An engine without hugepages shares no memory: the client says how to
/// make it attachable instead of letting the EAL fail obscurely.
#[test]
fn an_engine_without_shared_memory_is_refused_with_the_fix() {
    let engine = Engine::start(
        "nohuge",
        "net_null0",
        "net_null0",
        Opts {
            no_huge: true,
            ..Opts::default()
        },
    );
    let o = attach(&engine.prefix);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("shares no memory") && err.contains("eal.no_huge = false"),
        "{err}"
    );
    drop(engine);
}

/// DPDK's own secondary against the engine exits 0 and leaves the port as
/// it was. On `net_null`: against `net_pcap`, DPDK 22.11's pcap PMD crashes
/// proc-info at its exit and marks the primary's port down (docs/design.md).
#[test]
fn dpdk_proc_info_stats_exits_0_against_a_running_engine() {
    hugepages_ready(64).unwrap();
    assert!(
        Path::new("/usr/bin/dpdk-proc-info").exists(),
        "dpdk-proc-info missing: apt-get install dpdk (scripts/setup.sh)"
    );
    let mut engine = Engine::start("procinfo", "net_null0", "net_null0", Opts::default());
    let p = engine.prefix.clone();
    let (st0, rx0, _) = port_state(&p);
    assert_eq!(st0, UP);
    let o = Command::new("timeout")
        .args([
            "30",
            "dpdk-proc-info",
            "--file-prefix",
            &p,
            "--no-pci",
            "--",
            "--stats",
        ])
        .output()
        .expect("spawn dpdk-proc-info");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "dpdk-proc-info: {} {out} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("NIC statistics for port 0"), "{out}");
    let (st1, rx1, _) = port_state(&p);
    assert_eq!(st1, UP, "proc-info changed the engine's port");
    assert!(rx1 > rx0);
    // The client attaches beside it as well.
    let o = attach(&p);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
}

/// A client started together with the engine either attaches or gets one
/// clear line (exit 1), never a crash or a hang, and attaches once the
/// engine is up; the engine comes up untouched.
#[test]
fn a_client_racing_the_engine_start_errs_cleanly_or_attaches() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::spawn("race", "net_null0", "net_null0", Opts::default());
    let p = engine.prefix.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = Vec::new();
    loop {
        let o = attach(&p);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        match o.status.code() {
            Some(0) => break,
            Some(1) if err.starts_with("error: ") && err.trim_end().lines().count() == 1 => {
                errors.push(err)
            }
            _ => panic!("attach during the engine's start: {} {err}", o.status),
        }
        assert!(
            Instant::now() < deadline,
            "never attached: {errors:?} {}",
            engine.log_text()
        );
        let exited = engine.child.as_mut().unwrap().try_wait().unwrap();
        assert!(exited.is_none(), "engine exited: {}", engine.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("errors before the engine was up: {errors:?}");
    let (st, _, _) = port_state(&p);
    assert_eq!(st, UP);
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
}

/// A DPDK primary that is not udpdemux (dpdk-testpmd) is named as such.
#[test]
fn a_primary_that_is_not_udpdemux_is_refused() {
    hugepages_ready(64).unwrap();
    let p = unique("testpmd");
    let mut tp = testpmd(&p)
        .args(["--vdev=net_null0", "--", "-i", "--total-num-mbufs=2048"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dpdk-testpmd (package dpdk-dev)");
    let config = Path::new("/var/run/dpdk").join(&p).join("config");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut o = attach(&p);
    while !String::from_utf8_lossy(&o.stderr).contains("not a udpdemux engine")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        o = attach(&p);
    }
    drop(tp.stdin.take());
    let _ = tp.kill();
    let _ = tp.wait();
    let had_config = config.exists();
    remove_runtime_dir(&p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not a udpdemux engine") && had_config,
        "{err}"
    );
}
