//! The engine as a user runs it: real DPDK (vdevs, no hugepages), subprocesses.
mod common;
use common::*;

fn null_cfg(tag: &str, extra: &str) -> std::path::PathBuf {
    let d = scratch(tag);
    let text = format!(
        "{}{extra}{}",
        eal(tag, &["net_null0"]),
        rx_port("net_null0")
    );
    write(&d, "c.toml", &text)
}

#[test]
fn net_null_with_duration_counts_packets_and_exits_zero() {
    let cfg = null_cfg("null", "");
    let j = run_ok_json(&cfg, &["--duration", "1"]);
    let rx = j["rx_packets"].as_u64().unwrap();
    assert!(rx > 1000, "net_null delivers packets: {rx}");
    assert_eq!(
        j["ports"][0]["ipackets"].as_u64().unwrap(),
        rx,
        "the port's count equals ours"
    );
    assert_eq!(
        j["hot_path_allocations"].as_u64().unwrap(),
        0,
        "no allocation in the RX loop"
    );
    let q = &j["lcores"][0]["queues"][0];
    assert_eq!(q["packets"].as_u64().unwrap(), rx);
    assert!(q["bytes"].as_u64().unwrap() >= rx * 60);
}

#[test]
fn sigterm_stops_cleanly() {
    let cfg = null_cfg("sigterm", "");
    let child = std::process::Command::new(bin())
        .args(["run", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("summary:"), "{}", stdout(&out));
}

fn expect_error(args: &[&str], needle: &str) {
    let o = run(args);
    assert!(!o.status.success(), "should fail: {args:?}");
    let line = error_line(&o);
    assert!(
        line.contains(needle),
        "error line {line:?} should contain {needle:?}; stderr: {}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "no panic: {}", stderr(&o));
    assert!(!stderr(&o).contains("RUST_BACKTRACE"), "no backtrace");
}

#[test]
fn missing_config() {
    expect_error(
        &["run", "--config", "/nonexistent/udpdemux.toml"],
        "cannot read config /nonexistent/udpdemux.toml",
    );
}

#[test]
fn unreadable_config_is_a_directory() {
    let d = scratch("dir");
    expect_error(
        &["run", "--config", d.to_str().unwrap()],
        "cannot read config",
    );
}

#[test]
fn invalid_toml() {
    let d = scratch("badtoml");
    let p = write(&d, "c.toml", "[eal\nlcores = 1");
    expect_error(
        &["run", "--config", p.to_str().unwrap()],
        "TOML parse error",
    );
}

#[test]
fn unknown_key_is_named() {
    let cfg = null_cfg("unknown", "[engine]\nburts = 32\n");
    expect_error(
        &["run", "--config", cfg.to_str().unwrap()],
        "unknown field `burts`",
    );
}

#[test]
fn lcore_that_does_not_exist() {
    let d = scratch("lcore");
    let text = format!(
        "{}\n[[port]]\nname = \"net_null0\"\n\n[[lcore]]\nid = 5\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n",
        eal("lcore", &["net_null0"])
    );
    let p = write(&d, "c.toml", &text);
    expect_error(
        &["run", "--config", p.to_str().unwrap(), "--duration", "1"],
        "lcore 5 is not enabled by eal.lcores",
    );
}

#[test]
fn no_ports_found() {
    let d = scratch("noports");
    let text = format!(
        "{}\n[[port]]\nname = \"net_null0\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n",
        eal("noports", &[])
    );
    let p = write(&d, "c.toml", &text);
    expect_error(
        &["run", "--config", p.to_str().unwrap(), "--duration", "1"],
        "no ports found",
    );
}

#[test]
fn port_not_probed() {
    let d = scratch("noport");
    let text = format!(
        "{}\n[[port]]\nname = \"net_null1\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null1:0\"]\n",
        eal("noport", &["net_null0"])
    );
    let p = write(&d, "c.toml", &text);
    expect_error(
        &["run", "--config", p.to_str().unwrap(), "--duration", "1"],
        "port \"net_null1\" not found",
    );
}

#[test]
fn vdev_whose_pmd_is_missing() {
    let d = scratch("pmd");
    let text = format!(
        "{}\n[[port]]\nname = \"net_nosuchpmd0\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_nosuchpmd0:0\"]\n",
        eal("pmd", &["net_nosuchpmd0"])
    );
    let p = write(&d, "c.toml", &text);
    expect_error(
        &["run", "--config", p.to_str().unwrap(), "--duration", "1"],
        "PMD is not installed",
    );
}

#[test]
fn eal_init_failure_without_hugepages_names_the_fix() {
    let d = scratch("nohuge");
    let text = format!(
        "[eal]\nlcores = \"0,1\"\nmemory_mb = 128\nno_pci = true\nfile_prefix = \"{}\"\nvdevs = [\"net_null0\"]\nextra_args = [\"--huge-dir=/nonexistent-hugepage-dir\"]\n\n[[port]]\nname = \"net_null0\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n",
        prefix("nohuge")
    );
    let p = write(&d, "c.toml", &text);
    let o = run(&["run", "--config", p.to_str().unwrap(), "--duration", "1"]);
    assert!(!o.status.success());
    let line = error_line(&o);
    assert!(
        line.contains("scripts/setup.sh") && line.contains("no_huge"),
        "names both fixes: {line:?} / {}",
        stderr(&o)
    );
}

#[test]
fn mempool_creation_failure() {
    let cfg = null_cfg("pool", "[mempool]\nmbufs = 4000000\ncache = 256\n");
    expect_error(
        &["run", "--config", cfg.to_str().unwrap(), "--duration", "1"],
        "lower mempool.mbufs or raise eal.memory_mb",
    );
}

#[test]
fn bad_duration() {
    let cfg = null_cfg("dur", "");
    expect_error(
        &["run", "--config", cfg.to_str().unwrap(), "--duration", "0"],
        "--duration must be a positive",
    );
}

#[test]
fn bare_loop_counts_and_classifies_nothing() {
    let cfg = null_cfg("bare", "");
    let j = run_ok_json(&cfg, &["--duration", "1", "--bare"]);
    assert!(j["rx_packets"].as_u64().unwrap() > 1000);
    assert_eq!(j["lookups"], 0, "the bare loop does not parse or demux");
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["hot_path_allocations"], 0);
}
