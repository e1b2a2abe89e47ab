//! Operating the engine: telemetry read by DPDK's own `dpdk-telemetry.py`
//! from a running instance, `check` on every bad config class, live socket
//! changes by SIGHUP during a replay, and the exit JSON against the traffic
//! that was sent. Every case is a subprocess (one EAL per process).
mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The five sockets of conf/default.toml (the manifest's destinations).
const SOCKETS: &[(&str, &str)] = &[
    ("dns4", "198.18.1.1:53"),
    ("echo4", "198.18.1.2:7"),
    ("app4", "198.18.1.3:5000"),
    ("dns6", "[fd00::1]:53"),
    ("app6", "[fd00::2]:5000"),
];

fn sockets_toml(list: &[(&str, &str)]) -> String {
    // 4 MiB: the one-burst replay fits whole, so nothing drops and the
    // counts must equal the manifest exactly.
    list.iter()
        .map(|(n, a)| format!("\n[[socket]]\nname = \"{n}\"\nlocal = \"{a}\"\nrcvbuf = 4194304\n"))
        .collect()
}

fn pcap_vdev(infinite: bool) -> String {
    let p = repo().join("conf/default.pcap");
    format!(
        "net_pcap0,rx_pcap={}{}",
        p.display(),
        if infinite { ",infinite_rx=1" } else { "" }
    )
}

/// A replay config; returns (config path, file prefix).
fn replay_cfg(
    tag: &str,
    infinite: bool,
    engine: &str,
    sockets: &[(&str, &str)],
) -> (PathBuf, String) {
    let d = scratch(tag);
    let eal_text = eal(tag, &[&pcap_vdev(infinite)]);
    let prefix = prefix_of(&eal_text);
    let text = format!(
        "{eal_text}\n[engine]\n{engine}\n{}{}",
        rx_port("net_pcap0"),
        sockets_toml(sockets)
    );
    (write(&d, "c.toml", &text), prefix)
}

fn spawn_run(cfg: &Path, json: &Path, extra: &[&str]) -> Child {
    run_command(cfg, json, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn udpdemux")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({sig})");
}

/// Send commands through DPDK's own client; one JSON reply per command.
fn telemetry(prefix: &str, cmds: &[&str]) -> Vec<Value> {
    telemetry_query(prefix, cmds, Duration::from_secs(60))
        .expect("dpdk-telemetry.py did not finish within 60 s")
}

/// Poll telemetry until `done` holds on the `/udpdemux/stats` + `/udpdemux/sockets` replies.
fn wait_telemetry(
    prefix: &str,
    what: &str,
    done: impl Fn(&Value, &Value) -> bool,
) -> (Value, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = telemetry(prefix, &["/udpdemux/stats", "/udpdemux/sockets"]);
        if r.len() == 2 {
            let (st, so) = (
                r[0]["/udpdemux/stats"].clone(),
                r[1]["/udpdemux/sockets"].clone(),
            );
            if st.is_object() && so.is_object() && done(&st, &so) {
                return (st, so);
            }
        }
        assert!(
            Instant::now() < deadline,
            "telemetry never showed {what}: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

#[test]
fn telemetry_from_a_running_instance_equals_the_exit_json_and_the_traffic() {
    // Finite replay, no idle stop: the instance stays up after the capture
    // is done, so telemetry can read the final numbers while it runs.
    let (cfg, prefix) = replay_cfg(
        "tel",
        false,
        "stop_when_idle_ms = 0\nduration_secs = 60",
        SOCKETS,
    );
    let json = cfg.with_extension("json");
    let mut child = spawn_run(&cfg, &json, &[]);
    let m = manifest();
    let frames = u(&m["frames"]);
    let (st, so) = wait_telemetry(&prefix, "the whole replay consumed", |st, so| {
        st["rx_packets"].as_u64() == Some(frames)
            && so.as_object().is_some_and(|o| {
                o.len() == SOCKETS.len()
                    && o.values().all(|s| {
                        s["consumed"].as_u64().is_some() && s["consumed"] == s["delivered"]
                    })
            })
    });
    let lat = telemetry(
        &prefix,
        &[
            "/udpdemux/latency",
            "/udpdemux/latency,dns6",
            "/udpdemux/sockets,nope",
        ],
    );
    signal(&child, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();

    // Telemetry == exit JSON.
    for (k, v) in j["udp"].as_object().unwrap() {
        assert_eq!(st[k], *v, "{k}: telemetry {} vs json {v}", st[k]);
    }
    for k in [
        "rx_packets",
        "rx_bytes",
        "lookups",
        "control",
        "hot_path_allocations",
    ] {
        assert_eq!(st[k], j[k], "{k}");
    }
    for (fam, m) in j["reasons"].as_object().unwrap() {
        for (r, v) in m.as_object().unwrap() {
            assert_eq!(st[format!("parse_{fam}_{r}")], *v, "parse {fam} {r}");
        }
    }
    let lcore = &j["lcores"][0];
    assert_eq!(st["lcore_1_packets"], lcore["queues"][0]["packets"]);
    assert_eq!(st["lcore_1_bursts"], lcore["queues"][0]["bursts"]);
    for s in j["sockets"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        let t = &so[name];
        for k in [
            "offered",
            "delivered",
            "consumed",
            "consumed_bytes",
            "rmem",
            "rmem_high_water",
            "condensed",
            "batches",
        ] {
            assert_eq!(t[k], s[k], "socket {name} {k}");
        }
        for (r, v) in s["drops"].as_object().unwrap() {
            assert_eq!(t[format!("drop_{r}")], *v, "socket {name} drop {r}");
        }
        assert_eq!(
            lat[0]["/udpdemux/latency"][name], s["consumer_latency_us"],
            "latency {name}"
        );
    }
    let dns6 = j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "dns6")
        .unwrap();
    assert_eq!(
        lat[1]["/udpdemux/latency"]["stage_us"],
        dns6["stage_latency_us"]
    );
    assert_eq!(
        lat[1]["/udpdemux/latency"]["consumer_p99_us"],
        dns6["consumer_p99_us"]
    );
    assert_eq!(
        lat[2]["/udpdemux/sockets"],
        Value::Null,
        "an unknown socket is a null reply"
    );

    // Exit JSON == the traffic the capture holds (its manifest).
    assert_eq!(u(&j["rx_packets"]), frames);
    assert_eq!(u(&j["rx_bytes"]), u(&m["bytes"]));
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    for (name, addr) in SOCKETS {
        let s = j["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == *name)
            .unwrap();
        let sent = u(&m["per_dst"][*addr]);
        assert_eq!(u(&s["delivered"]), sent, "{name} delivered");
        assert_eq!(u(&s["consumed"]), sent, "{name} consumed");
        let hist: u64 = s["consumer_latency_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(u)
            .sum();
        assert_eq!(
            hist, sent,
            "{name}: one latency sample per consumed datagram"
        );
    }
    let udp = &j["udp"];
    assert_eq!(
        u(&udp["UdpNoPorts"]) + u(&udp["Udp6NoPorts"]),
        u(&m["no_socket"])
    );
    let valid: u64 = SOCKETS.iter().map(|(_, a)| u(&m["per_dst"][*a])).sum();
    assert_eq!(
        u(&udp["UdpInDatagrams"]) + u(&udp["Udp6InDatagrams"]),
        valid
    );
    for (r, v) in m["per_reason"].as_object().unwrap() {
        // The generator's fragments (UDP first fragments) go to reassembly.
        let got: u64 = j["reasons"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|f| f[r].as_u64())
            .sum::<u64>()
            + reassembled_reason(&j, r);
        assert_eq!(got, u(v), "reason {r}");
    }
    let csum = u(&m["per_reason"]["udp_checksum"]) + u(&m["per_reason"]["udp6_zero_checksum"]);
    assert_eq!(
        u(&udp["UdpInCsumErrors"]) + u(&udp["Udp6InCsumErrors"]),
        csum
    );
}

#[test]
fn nstat_format_prints_kernel_names_with_rates() {
    let (cfg, _) = replay_cfg("nstat", false, "stop_when_idle_ms = 300", SOCKETS);
    let json = cfg.with_extension("json");
    let out = spawn_run(&cfg, &json, &["--stats-format", "nstat", "--histograms"])
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let final_block = text.rsplit("#udpdemux\n").next().unwrap();
    let line = final_block
        .lines()
        .find(|l| l.starts_with("Udp6InDatagrams "))
        .expect("Udp6InDatagrams line");
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 3, "{line}");
    assert_eq!(
        f[1].parse::<u64>().unwrap(),
        u(&j["udp"]["Udp6InDatagrams"])
    );
    assert!(f[2].parse::<f64>().unwrap() > 0.0, "a rate: {line}");
    // The RX pool watch and the DPDK memory counters, as in the JSON.
    let value = |name: &str| -> u64 {
        final_block
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in {final_block}"))
    };
    assert_eq!(value("UdpDemuxPoolSize"), u(&j["rx_pool"]["size"]));
    assert_eq!(value("UdpDemuxPoolLowWater"), u(&j["rx_pool"]["low_water"]));
    assert_eq!(value("UdpDemuxMemzones"), u(&j["memzones"]));
    // The IP reassembly MIB under the kernel's names, as in the JSON's `ip`
    // (non-zero counters only, like nstat; the generator's first
    // fragments make the Reqds ones non-zero).
    let value0 = |name: &str| -> u64 {
        final_block
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert!(value0("IpReasmReqds") + value0("Ip6ReasmReqds") > 0);
    for k in [
        "IpReasmReqds",
        "IpReasmOKs",
        "IpReasmFails",
        "IpReasmTimeout",
        "IpReasmOverlaps",
        "Ip6ReasmReqds",
        "Ip6ReasmOKs",
        "Ip6ReasmFails",
        "Ip6ReasmTimeout",
        "Ip6ReasmOverlaps",
    ] {
        assert_eq!(value0(k), u(&j["ip"][k]), "{k}");
    }
    assert_eq!(
        value0("IpReasmReqds") + value0("Ip6ReasmReqds"),
        u(&j["reassembly"]["fragments"])
    );
    assert!(u(&j["rx_pool"]["samples"]) > 0, "{}", j["rx_pool"]);
    assert!(
        text.contains("@consumer_us[dns4]:"),
        "histograms printed: {text}"
    );
}

fn check(text: &str) -> std::process::Output {
    let d = scratch("check");
    let p = write(&d, "c.toml", text);
    run(&["check", "--config", p.to_str().unwrap()])
}

fn base(tag: &str, extra: &str) -> String {
    format!(
        "{}\n[mempool]\nmbufs = 8191\ncache = 256\n{extra}\n[[port]]\nname = \"net_null0\"\n\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n",
        eal(tag, &["net_null0"])
    )
}

fn expect_check_error(text: &str, needle: &str) {
    let o = check(text);
    assert!(
        !o.status.success(),
        "check should fail for {needle:?}: {}",
        stdout(&o)
    );
    let lines: Vec<String> = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("error: "))
        .map(String::from)
        .collect();
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "{needle:?} not in {lines:?}\n{}",
        stderr(&o)
    );
    assert!(
        error_line(&o).contains("error(s)"),
        "summary line: {}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn check_accepts_a_good_config_and_warns_without_failing() {
    let o = check(&base("ok", ""));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(": ok (0 warning(s))"), "{}", stdout(&o));
    // A virtual node that is not the lcore's real NUMA node: a warning only.
    let o = check(&base("warn", "").replace("role = \"rx\"", "role = \"rx\"\nnode = 7"));
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("warning: lcore 1: node = 7"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn check_names_the_rcvbuf_a_full_burst_rate_needs() {
    // The default rcvbuf (212 992 B) holds 89 datagrams of the default pool's
    // truesize (2368 B): fewer than 4 bursts of 32 from the one RX lcore.
    let sock = "\n[[socket]]\nname = \"dns4\"\nlocal = \"198.18.1.1:53\"\n";
    let o = check(&format!("{}{sock}", base("rcvbuf", "")));
    assert!(
        o.status.success(),
        "a warning only: {}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l
            .starts_with("warning: socket \"dns4\": rcvbuf = 212992 holds 89 datagrams")
            && l.contains("rcvbuf >= 303104 is the least")),
        "{out}"
    );
    assert!(out.contains(": ok (1 warning(s))"), "{out}");
    // The rcvbuf it names is enough.
    let o = check(&format!("{}{sock}rcvbuf = 303104\n", base("rcvbuf2", "")));
    assert!(stdout(&o).contains(": ok (0 warning(s))"), "{}", stdout(&o));
}

#[test]
fn check_rejects_each_bad_config_class() {
    // EAL-backed classes.
    expect_check_error(
        &base("lc", "").replace("id = 1", "id = 5"),
        "lcore 5 is not enabled by eal.lcores",
    );
    expect_check_error(
        &base("main", "").replace("id = 1", "id = 0"),
        "lcore 0 is the main lcore",
    );
    expect_check_error(
        &base("port", "")
            .replace("name = \"net_null0\"", "name = \"net_null1\"")
            .replace("net_null0:0", "net_null1:0"),
        "port \"net_null1\" not found",
    );
    expect_check_error(
        &base("txq", "").replace(
            "name = \"net_null0\"",
            "name = \"net_null0\"\ntx_queues = 65535",
        ),
        "tx_queues = 65535 but the device has at most",
    );
    // EAL-free classes.
    expect_check_error(
        &base("poll", "").replace(
            "name = \"net_null0\"",
            "name = \"net_null0\"\nrx_queues = 2",
        ),
        "\"net_null0:1\" has no rx lcore polling it",
    );
    expect_check_error(
        &format!(
            "{}\n[[lcore]]\nid = 2\nrole = \"rx\"\nqueues = [\"net_null0:0\"]\n",
            base("dbl", "")
        ),
        "exactly one poller",
    );
    let two = "\n[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\n\n[[socket]]\nname = \"b\"\nlocal = \"0.0.0.0:53\"\n\n[[socket]]\nname = \"c\"\nlocal = \"198.18.0.1:53\"\n";
    expect_check_error(
        &format!("{}{two}", base("coll", "")),
        "socket \"c\": address in use",
    );
    // A jumbo data room makes one mbuf bigger than the whole rcvbuf.
    expect_check_error(
        &format!(
            "{}\n[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\nrcvbuf = 4096\n",
            base("rcv", "data_room = 9216\n")
        ),
        "below one mbuf truesize",
    );
    expect_check_error(
        &base("pool", "").replace("mbufs = 8191", "mbufs = 1023"),
        "mempool.mbufs = 1023 is below",
    );
}

#[test]
fn check_lets_reuseport_groups_share_a_port() {
    let grp = "\n[[socket]]\nname = \"a\"\nlocal = \"198.18.0.1:53\"\nreuseport = true\n\n[[socket]]\nname = \"b\"\nlocal = \"198.18.0.1:53\"\nreuseport = true\n";
    let o = check(&format!("{}{grp}", base("grp", "")));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
}

#[test]
fn sighup_adds_and_removes_sockets_during_a_replay_and_the_books_balance() {
    let (cfg, _) = replay_cfg("hup", true, "stop_when_idle_ms = 0", SOCKETS);
    let json = cfg.with_extension("json");
    let original = std::fs::read_to_string(&cfg).unwrap();
    let child = spawn_run(&cfg, &json, &["--duration", "5"]);
    std::thread::sleep(Duration::from_millis(1500));
    // Remove dns4 and app6; add a socket on dns4's address under another name.
    let step1: Vec<(&str, &str)> = vec![
        ("echo4", "198.18.1.2:7"),
        ("app4", "198.18.1.3:5000"),
        ("dns6", "[fd00::1]:53"),
        ("dns4b", "198.18.1.1:53"),
    ];
    let head = original.split("\n[[socket]]").next().unwrap();
    std::fs::write(&cfg, format!("{head}{}", sockets_toml(&step1))).unwrap();
    signal(&child, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(1200));
    // Bring app6 back.
    let mut step2 = step1.clone();
    step2.push(("app6", "[fd00::2]:5000"));
    std::fs::write(&cfg, format!("{head}{}", sockets_toml(&step2))).unwrap();
    signal(&child, libc::SIGHUP);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "books must balance: {err}");
    assert!(
        err.contains("SIGHUP: 2 socket(s) removed, 1 added"),
        "{err}"
    );
    assert!(
        err.contains("SIGHUP: 0 socket(s) removed, 1 added"),
        "{err}"
    );
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let socks = j["sockets"].as_array().unwrap();
    let by = |n: &str, removed: bool| {
        socks
            .iter()
            .find(|s| s["name"] == n && s["removed"] == removed)
            .cloned()
    };
    let dns4 = by("dns4", true).expect("dns4 kept its books after removal");
    let dns4b = by("dns4b", false).expect("dns4b added");
    let app6_old = by("app6", true).expect("first app6 removed");
    let app6_new = by("app6", false).expect("app6 re-added");
    for s in [&dns4, &dns4b, &app6_old, &app6_new] {
        let drops: u64 = s["drops"].as_object().unwrap().values().map(u).sum();
        assert!(u(&s["offered"]) > 0, "{} saw traffic", s["name"]);
        assert_eq!(
            u(&s["offered"]),
            u(&s["delivered"]) + drops,
            "{}",
            s["name"]
        );
        assert_eq!(
            u(&s["delivered"]),
            u(&s["consumed"]) + u(&s["freed_at_close"]),
            "{}: nothing leaked",
            s["name"]
        );
        assert_eq!(u(&s["rmem"]), 0, "{}", s["name"]);
    }
    // Every datagram for a live or removed socket, or counted as no-port, once.
    let offered: u64 = socks.iter().map(|s| u(&s["offered"])).sum();
    let udp = &j["udp"];
    assert_eq!(
        offered,
        u(&udp["UdpInDatagrams"]) + u(&udp["Udp6InDatagrams"])
    );
    assert!(u(&udp["UdpNoPorts"]) + u(&udp["Udp6NoPorts"]) > 0);
}
