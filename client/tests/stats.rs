//! `Client::stats` (issue 16, item 1's `stats` request): a client reads
//! the counters of any of the engine's sockets, the one it opened and
//! one the engine consumes, while datagrams flow and after; they only
//! grow, and once the replay is over they are the engine's exit JSON for
//! that socket, field for field. An unknown name is one clear line.
//! Clients are runs of `examples/recv.rs` (`--stats NAME`).
mod common;
use common::*;

use std::collections::BTreeMap;
use std::process::{Command, Output};

/// One stats report as the example prints it (`key=value ...`).
type Report = BTreeMap<String, String>;

fn report(kvs: &str) -> Report {
    kvs.split(' ')
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{kv:?} in {kvs:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn num(r: &Report, k: &str) -> u64 {
    r.get(k)
        .unwrap_or_else(|| panic!("no {k} in {r:?}"))
        .parse()
        .unwrap()
}

/// The `stats NAME ...` reports of `out` in order, then its
/// `stats-final NAME ...` one if printed.
fn reports(out: &str, name: &str) -> (Vec<Report>, Option<Report>) {
    let during = out
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("stats {name} ")))
        .map(report)
        .collect();
    let last = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("stats-final {name} ")))
        .map(report);
    (during, last)
}

/// Counters that may go down: what is charged or waiting now, and who has
/// the socket open.
const LEVELS: [&str; 3] = ["rmem", "ring_count", "client_pid"];

/// Every counter of each report is at least the previous report's (bar
/// the levels), the ring never holds more than its size, and offered is
/// delivered plus the drops.
fn assert_monotonic(name: &str, rs: &[Report]) {
    assert!(rs.len() >= 3, "{name}: only {} reports", rs.len());
    for r in rs {
        assert!(num(r, "ring_count") <= num(r, "ring_size"), "{name}: {r:?}");
        assert!(num(r, "rmem") <= num(r, "rmem_high_water"), "{name}: {r:?}");
    }
    for w in rs.windows(2) {
        for (k, v) in &w[1] {
            if LEVELS.contains(&k.as_str()) {
                continue;
            }
            match (w[0][k].parse::<u64>(), v.parse::<u64>()) {
                (Ok(a), Ok(b)) => assert!(a <= b, "{name} {k} went from {a} to {b}"),
                _ => assert_eq!(&w[0][k], v, "{name} {k}"),
            }
        }
    }
}

/// The report's fields against the exit JSON's `sockets[]` entry: equal
/// (`exact`), or at most the exit's (a report taken while it ran).
fn assert_against_exit(name: &str, r: &Report, j: &serde_json::Value, exact: bool) {
    let s = socket_named(j, name);
    assert_eq!(r["local"], s["local"].as_str().unwrap(), "{name}");
    assert_eq!(r["handler"], s["handler"].as_str().unwrap(), "{name}");
    let mut compared = 0;
    for (k, v) in r {
        let exit = match k.as_str() {
            "local" | "handler" | "client_pid" | "ring_count" | "ring_size" => continue,
            "drops" => s["drops"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum(),
            _ => match k.strip_prefix("drop_") {
                Some(reason) => s["drops"][reason].as_u64(),
                None => s[k.as_str()].as_u64(),
            }
            .unwrap_or_else(|| panic!("{name}: no {k} in the exit JSON: {s}")),
        };
        let v: u64 = v.parse().unwrap();
        if exact || k == "rcvbuf" || k == "id" {
            assert_eq!(v, exit, "{name} {k}: stats {v}, exit JSON {exit}");
        } else if k != "rmem" {
            assert!(v <= exit, "{name} {k}: stats {v} > exit JSON {exit}");
        }
        compared += 1;
    }
    assert_eq!(compared, 18, "{name}: every counter of the report: {r:?}");
}

/// The recv example with `args`, and its pid.
fn run_recv(prefix: &str, args: &[&str]) -> (Output, u64) {
    binaries();
    let c = Command::new(profile_dir().join("examples").join("recv"))
        .arg(prefix)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the recv example");
    let pid = u64::from(c.id());
    (c.wait_with_output().unwrap(), pid)
}

/// A finite replay: the client opens dns6 (its datagrams wait in the
/// ring) and reads dns6's and dns4's stats (dns4 is the engine's) while it
/// receives and once it has freed everything; the first dns6 report has
/// them waiting and none consumed, the last has them all consumed by
/// this pid; every report grows on the one before; the final ones are
/// the exit JSON's books of the two sockets, field for field; `nosuch`
/// is refused with the engine's sockets listed.
#[test]
fn stats_read_during_and_after_a_finite_replay_are_the_exit_books() {
    hugepages_ready(64).unwrap();
    let m = manifest();
    let pcap = repo().join("conf/default.pcap");
    let vdev = format!("net_pcap0,rx_pcap={}", pcap.display());
    let mut engine = Engine::start("stats", &vdev, "net_pcap0", Opts::body(finite()));
    let n6 = m["per_dst"]["[fd00::1]:53"].as_u64().unwrap();
    let n4 = m["per_dst"]["198.18.1.1:53"].as_u64().unwrap();
    let want = format!("dns6={n6}");
    let (o, pid) = run_recv(
        &engine.prefix,
        &[
            "--stats",
            "dns6",
            "--stats",
            "dns4",
            "--stats",
            "nosuch",
            "--stats-final",
            &want,
        ],
    );
    let out = stdout_of_success(&o, "closed dns6");
    assert_eq!(received(&out, "dns6").0, n6, "{out}");
    assert!(
        out.lines().any(|l| l == "stats-error nosuch: no stats for socket \"nosuch\": no socket named \"nosuch\" in this engine (its sockets: dns4, echo4, app4, dns6, app6)"),
        "{out}"
    );
    assert_eq!(out.matches("stats-error").count(), 1, "once: {out}");

    let (during6, final6) = reports(&out, "dns6");
    let (during4, final4) = reports(&out, "dns4");
    let (final6, final4) = (final6.expect(&out), final4.expect(&out));
    let mut all6 = during6.clone();
    all6.push(final6.clone());
    let mut all4 = during4.clone();
    all4.push(final4.clone());
    assert_monotonic("dns6", &all6);
    assert_monotonic("dns4", &all4);
    // dns6 changed under the client's reads: waiting at first, consumed at the end.
    let first = &during6[0];
    assert_eq!(num(first, "client_pid"), pid, "{first:?}");
    assert_eq!(num(first, "consumed"), 0, "{first:?}");
    assert_eq!(num(first, "ring_count"), n6, "{first:?}");
    assert!(num(first, "rmem") > 0, "{first:?}");
    assert_eq!(num(&final6, "client_pid"), pid, "{final6:?}");
    for (r, n) in [(&final6, n6), (&final4, n4)] {
        assert_eq!(num(r, "delivered"), n, "{r:?}");
        assert_eq!(num(r, "consumed"), n, "{r:?}");
        assert_eq!(num(r, "ring_count"), 0, "{r:?}");
        assert_eq!(num(r, "rmem"), 0, "{r:?}");
    }
    assert_eq!(num(&final6, "client_consumed"), n6);
    assert_eq!(num(&final6, "consumed_bytes"), received(&out, "dns6").1);
    assert_eq!(num(&final4, "client_pid"), 0, "the engine consumes dns4");
    assert_eq!(num(&final4, "client_consumed"), 0);

    // DPDK telemetry's view of the same sockets (what `dpdk-telemetry.py`
    // shows an operator) has the same numbers under the same keys.
    let t = telemetry(
        &engine.prefix,
        &["/udpdemux/sockets,dns6", "/udpdemux/sockets,dns4"],
    );
    for (r, t) in [
        (&final6, &t[0]["/udpdemux/sockets"]),
        (&final4, &t[1]["/udpdemux/sockets"]),
    ] {
        let mut same = 0;
        for (k, v) in r {
            if let Some(tv) = t.get(k.as_str()) {
                let tv = tv.as_str().map_or_else(|| tv.to_string(), String::from);
                assert_eq!(tv, *v, "telemetry {k}: {t}");
                same += 1;
            }
        }
        assert!(same >= 14, "{same} keys shared with telemetry: {t}");
    }

    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_against_exit("dns6", &final6, &j, true);
    assert_against_exit("dns4", &final4, &j, true);
}

/// During an endless replay a client opens dns6 and reads dns6's and
/// dns4's stats for a second: each report grows on the one before, both
/// sockets' deliveries grew while it read, and every counter read is at
/// most what the engine's exit JSON has.
#[test]
fn stats_grow_during_an_endless_replay() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::start("stats-live", &endless_pcap(), "net_pcap0", Opts::default());
    let (o, pid) = run_recv(
        &engine.prefix,
        &["--secs", "1", "--stats", "dns6", "--stats", "dns4", "dns6"],
    );
    let out = stdout_of_success(&o, "closed dns6");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    for name in ["dns6", "dns4"] {
        let (rs, last) = reports(&out, name);
        assert!(last.is_none(), "{out}");
        assert_monotonic(name, &rs);
        let (a, b) = (&rs[0], &rs[rs.len() - 1]);
        assert!(
            num(b, "delivered") > num(a, "delivered") && num(b, "consumed") > num(a, "consumed"),
            "{name} did not grow while the client read it: {a:?} then {b:?}"
        );
        let owner = if name == "dns6" { pid } else { 0 };
        assert!(
            rs.iter().all(|r| num(r, "client_pid") == owner),
            "{name}: {rs:?}"
        );
        for r in &rs {
            assert_against_exit(name, r, &j, false);
        }
    }
}
