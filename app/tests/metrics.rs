//! The Prometheus endpoint (`[metrics] listen`): scraped with a plain TCP
//! client during a finite replay, checked by `promtool check metrics`
//! (Debian's `prometheus` package, installed by scripts/setup.sh), and its
//! counters equal to the exit JSON once the replay is consumed; and a
//! metrics port already in use is a one-line error at start.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SOCKETS: &[(&str, &str)] = &[
    ("dns4", "198.18.1.1:53"),
    ("echo4", "198.18.1.2:7"),
    ("app4", "198.18.1.3:5000"),
    ("dns6", "[fd00::1]:53"),
    ("app6", "[fd00::2]:5000"),
];

/// A finite replay of conf/default.pcap with the metrics endpoint on `listen`.
fn replay_cfg(tag: &str, engine: &str, listen: &str) -> (PathBuf, String) {
    let d = scratch(tag);
    let p = repo().join("conf/default.pcap");
    let eal_text = eal(tag, &[&format!("net_pcap0,rx_pcap={}", p.display())]);
    let prefix = prefix_of(&eal_text);
    // 4 MiB rcvbuf: the one-burst replay fits whole, nothing drops.
    let socks: String = SOCKETS
        .iter()
        .map(|(n, a)| format!("\n[[socket]]\nname = \"{n}\"\nlocal = \"{a}\"\nrcvbuf = 4194304\n"))
        .collect();
    let text = format!(
        "{eal_text}\n[engine]\n{engine}\n[metrics]\nlisten = \"{listen}\"\n{}{socks}",
        rx_port("net_pcap0")
    );
    (write(&d, "c.toml", &text), prefix)
}

/// A loopback port free now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics` over a plain TCP connection: (status line, body).
fn scrape(port: u16) -> std::io::Result<(String, String)> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n")?;
    let mut r = Vec::new();
    c.read_to_end(&mut r)?;
    let r = String::from_utf8(r).expect("utf-8 answer");
    let (head, body) = r.split_once("\r\n\r\n").expect("HTTP head and body");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(len, body.len(), "Content-Length matches the body");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// `promtool check metrics` on `text`: (success, its output).
fn promtool(text: &str) -> (bool, String) {
    let mut c = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/setup.sh installs it)");
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// A strict enough reader of the text format for the comparisons.
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, v) = l.rsplit_once(' ').expect("series value");
        let v: f64 = match v {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {l}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((n, rest)) => {
                let rest = rest.strip_suffix('}').expect("closing brace");
                let mut m = BTreeMap::new();
                // Label values here hold no comma or escaped quote.
                for kv in rest.split(',') {
                    let (k, v) = kv.split_once('=').expect("k=v");
                    m.insert(k.to_string(), v.trim_matches('"').to_string());
                }
                (n.to_string(), m)
            }
        };
        out.push((name, labels, v));
    }
    out
}

/// The value of the one sample of `name` whose labels include `want`.
fn value(s: &[Sample], name: &str, want: &[(&str, &str)]) -> u64 {
    let hits: Vec<&Sample> = s
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(hits.len(), 1, "{name} {want:?}: {hits:?}");
    hits[0].2 as u64
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn wait_exit(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_scraped_during_a_replay_pass_promtool_and_equal_the_exit_json() {
    let port = free_port();
    let (cfg, _) = replay_cfg(
        "prom",
        "stop_when_idle_ms = 0\nduration_secs = 60",
        &format!("127.0.0.1:{port}"),
    );
    let json = cfg.with_extension("json");
    let mut child = run_command(&cfg, &json, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn udpdemux");
    let m = manifest();
    let frames = u(&m["frames"]);
    // The first scrape as soon as the endpoint answers (the replay may
    // still be running), then until the whole replay is consumed.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut scrapes = 0;
    let last = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the engine exited early"
        );
        if let Ok((status, body)) = scrape(port) {
            assert_eq!(status, "HTTP/1.1 200 OK");
            let (ok, out) = promtool(&body);
            assert!(ok, "promtool check metrics: {out}\n{body}");
            scrapes += 1;
            let s = parse(&body);
            let done = value(&s, "udpdemux_rx_packets_total", &[]) == frames
                && SOCKETS.iter().all(|(n, _)| {
                    let d = value(&s, "udpdemux_socket_delivered_total", &[("socket", n)]);
                    d > 0 && d == value(&s, "udpdemux_socket_consumed_total", &[("socket", n)])
                });
            if done {
                break body;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the metrics never showed the whole replay consumed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Other paths answer too, and not with the metrics.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /nope HTTP/1.1\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");

    // `check` beside the live instance (before a reload) does not count
    // the instance's own metrics port as in use.
    let o = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(
        o.status.success() && !stdout(&o).contains("metrics.listen"),
        "{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    wait_exit(&mut child);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(scrapes >= 1);
    let s = parse(&last);

    // The UDP MIB, by kernel name and family.
    for (k, v) in j["udp"].as_object().unwrap() {
        let (fam, rest) = match k.strip_prefix("Udp6") {
            Some(r) => ("ipv6", r),
            None => ("ipv4", k.strip_prefix("Udp").unwrap()),
        };
        let snake: String = rest
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                sep.into_iter()
                    .chain(std::iter::once(c.to_ascii_lowercase()))
            })
            .collect();
        let name = format!("udpdemux_udp_{snake}_total");
        assert_eq!(value(&s, &name, &[("family", fam)]), u(v), "{k} as {name}");
    }
    for (k, v) in j["ip"].as_object().unwrap() {
        let (fam, rest) = match k.strip_prefix("Ip6") {
            Some(r) => ("ipv6", r),
            None => ("ipv4", k.strip_prefix("Ip").unwrap()),
        };
        let name = format!(
            "udpdemux_ip_{}_total",
            rest.replace("Reasm", "reasm_")
                .replace("Frag", "frag_")
                .to_lowercase()
        );
        assert_eq!(value(&s, &name, &[("family", fam)]), u(v), "{k} as {name}");
    }
    for k in ["rx_packets", "rx_bytes", "lookups"] {
        assert_eq!(
            value(&s, &format!("udpdemux_{k}_total"), &[]),
            u(&j[k]),
            "{k}"
        );
    }
    assert_eq!(u(&j["rx_packets"]), frames);
    for (fam, m) in j["reasons"].as_object().unwrap() {
        let f = match fam.as_str() {
            "v4" => "ipv4",
            "v6" => "ipv6",
            x => x,
        };
        for (r, v) in m.as_object().unwrap() {
            assert_eq!(
                value(
                    &s,
                    "udpdemux_parse_drops_total",
                    &[("family", f), ("reason", r)]
                ),
                u(v),
                "parse {fam} {r}"
            );
        }
    }
    for k in j["sockets"].as_array().unwrap() {
        let name = k["name"].as_str().unwrap();
        let fam = if k["local"].as_str().unwrap().starts_with('[') {
            "ipv6"
        } else {
            "ipv4"
        };
        let l = [("socket", name), ("family", fam), ("removed", "false")];
        for f in [
            "offered",
            "delivered",
            "consumed",
            "consumed_bytes",
            "batches",
        ] {
            assert_eq!(
                value(&s, &format!("udpdemux_socket_{f}_total"), &l),
                u(&k[f]),
                "socket {name} {f}"
            );
        }
        for (r, v) in k["drops"].as_object().unwrap() {
            let mut lr = l.to_vec();
            lr.push(("reason", r));
            assert_eq!(
                value(&s, "udpdemux_socket_drops_total", &lr),
                u(v),
                "{name} drop {r}"
            );
        }
        // The consumer histogram: one sample per consumed datagram, its
        // buckets the JSON's log2 µs buckets made cumulative, in seconds.
        let h: Vec<u64> = k["consumer_latency_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(u)
            .collect();
        let hn = "udpdemux_socket_consumer_latency_seconds";
        assert_eq!(value(&s, &format!("{hn}_count"), &l), u(&k["consumed"]));
        let mut acc = 0;
        for (i, c) in h.iter().enumerate().take(h.len() - 1) {
            acc += c;
            let le = format!("{:e}", (1u64 << i) as f64 / 1e6);
            let mut lb = l.to_vec();
            lb.push(("le", &le));
            assert_eq!(
                value(&s, &format!("{hn}_bucket"), &lb),
                acc,
                "{name} le {le}"
            );
        }
        let sum = s
            .iter()
            .find(|(n, lb, _)| {
                n == &format!("{hn}_sum") && lb.get("socket").map(String::as_str) == Some(name)
            })
            .expect("_sum")
            .2;
        assert!(
            (sum * 1e6 - u(&k["consumer_latency_sum_us"]) as f64).abs() < 1.0,
            "{name} sum {sum} s vs {} us",
            k["consumer_latency_sum_us"]
        );
    }
    for n in j["nodes"].as_array().unwrap() {
        let node = n["node"].to_string();
        for (r, v) in n["drops"].as_object().unwrap() {
            assert_eq!(
                value(
                    &s,
                    "udpdemux_node_drops_total",
                    &[("node", &node), ("reason", r)]
                ),
                u(v)
            );
        }
    }
    // The port's xstats and the pools are there (their values move with
    // time: the pcap PMD's counters are checked against rx_packets).
    assert_eq!(
        value(
            &s,
            "udpdemux_port_rx_good_packets_total",
            &[("port", "net_pcap0")]
        ),
        frames
    );
    assert!(value(&s, "udpdemux_mempool_size_mbufs", &[("pool", "rx_pool_s0")]) > 0);
    assert!(s.iter().any(|(n, _, _)| n == "udpdemux_mempool_free_mbufs"));
}

#[test]
fn a_metrics_port_in_use_is_a_one_line_error_at_start_and_in_check() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (cfg, _) = replay_cfg(
        "prom-busy",
        "stop_when_idle_ms = 300",
        &format!("127.0.0.1:{port}"),
    );
    let want = format!("metrics.listen = \"127.0.0.1:{port}\": cannot listen");
    let o = run(&["run", "--config", cfg.to_str().unwrap()]);
    assert!(!o.status.success(), "run must refuse: {}", stderr(&o));
    let line = error_line(&o);
    assert!(
        line.contains(&want) && line.contains("another process listens there"),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("EAL: "),
        "refused before the EAL: {}",
        stderr(&o)
    );
    let o = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(!o.status.success());
    let errors: Vec<String> = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("error: "))
        .map(String::from)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains(&want), "{errors:?}");
    // A bad address is named too.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&format!("127.0.0.1:{port}"), "localhost:9464");
    std::fs::write(&cfg, text).unwrap();
    let o = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(
        stdout(&o)
            .contains("error: metrics.listen = \"localhost:9464\" is not an address: give IP:PORT"),
        "{}",
        stdout(&o)
    );
    drop(taken);
}
