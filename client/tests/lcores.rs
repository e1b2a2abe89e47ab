//! One lcore id per live client (issue 16): mempool caches are per lcore
//! id, in shared memory, without a lock, so two clients attached at once
//! must run on different ids (`client_proto::CLIENT_LCORES`, one slot lock
//! each), and the engine's own lcores stay out of that range.
//!
//! Every client is a fresh run of `examples/recv.rs`.
mod common;
use common::*;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The pool `name`'s size, free mbufs and those in client lcore caches.
fn pool(j: &Value, name: &str) -> (u64, u64, u64) {
    let p = j["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {}", j["pools"]));
    (
        p["size"].as_u64().unwrap(),
        p["avail"].as_u64().unwrap(),
        p["client_cached"].as_u64().unwrap(),
    )
}

/// A recv client that stays attached until `stop` exists.
fn client(prefix: &str, stop: &std::path::Path, socket: &str) -> Child {
    binaries();
    Command::new(profile_dir().join("examples").join("recv"))
        .arg(prefix)
        .arg("--stop-file")
        .arg(stop)
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the recv example")
}

/// Read `attached lcore L` from a client's stdout: L.
fn attached_lcore(out: &mut BufReader<ChildStdout>, c: &mut Child) -> u32 {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    match l.trim().strip_prefix("attached lcore ") {
        Some(n) => n.parse().unwrap(),
        None => {
            let _ = c.kill();
            let mut err = String::new();
            let _ = c.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the client did not attach: {l} {err}");
        }
    }
}

/// Two clients attached at the same time (each says its lcore id, and
/// neither detaches before both have): different lcore ids, both in
/// 64..=127; each receives exactly its socket's datagrams of a finite
/// replay (dns6 and app6, which the engine leaves in their rings); at exit
/// the books balance, nothing is attached, nothing was reaped, every RX
/// mbuf is back in the pool and none sits in a client lcore's cache.
#[test]
fn two_clients_at_once_take_different_lcores_and_receive_exactly() {
    hugepages_ready(64).unwrap();
    let t0 = Instant::now();
    let m = manifest();
    let pcap = repo().join("conf/default.pcap");
    let vdev = format!("net_pcap0,rx_pcap={}", pcap.display());
    let mut engine = Engine::start("lcores", &vdev, "net_pcap0", Opts::body(finite()));
    let stop = engine.json.parent().unwrap().join("stop");
    let want = [
        ("dns6", m["per_dst"]["[fd00::1]:53"].as_u64().unwrap()),
        ("app6", m["per_dst"]["[fd00::2]:5000"].as_u64().unwrap()),
    ];
    let mut kids: Vec<(Child, BufReader<ChildStdout>)> = want
        .iter()
        .map(|(name, n)| {
            let mut c = client(&engine.prefix, &stop, &format!("{name}={n}"));
            let out = BufReader::new(c.stdout.take().unwrap());
            (c, out)
        })
        .collect();
    let lcores: Vec<u32> = kids
        .iter_mut()
        .map(|(c, out)| attached_lcore(out, c))
        .collect();
    // Both are attached now, and stay so until the stop file exists.
    assert_ne!(lcores[0], lcores[1], "two live clients on one lcore id");
    for l in &lcores {
        assert!((64..=127).contains(l), "lcore {l}");
    }
    std::fs::write(&stop, b"").unwrap();
    for ((name, n), (mut c, mut out)) in want.iter().zip(kids) {
        let status = wait_exit(
            &mut c,
            Duration::from_secs(20),
            "client did not exit",
            || engine.log_text(),
        );
        let mut text = String::new();
        out.read_to_string(&mut text).unwrap();
        assert!(status.success(), "{name}: {status} {text}");
        assert_eq!(received(&text, name).0, *n, "{name}: {text}");
        assert!(
            text.contains(&format!("closed {name}")) && text.contains("detached cleanup=true"),
            "{text}"
        );
    }
    let log = engine.log_text();
    for l in &lcores {
        assert!(log.contains(&format!(" attached on lcore {l}")), "{log}");
    }
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["rx_packets"], m["frames"]);
    assert_eq!(j["clients"]["attached"], 0, "{}", j["clients"]);
    assert_eq!(j["clients"]["reaped"], 0, "{}", j["clients"]);
    for (name, n) in want {
        let s = socket_named(&j, name);
        assert_eq!(s["client_consumed"], n, "{s}");
        assert_eq!(s["rmem"], 0, "{s}");
    }
    let (size, avail, cached) = pool(&j, "rx_pool_s0");
    assert_eq!(avail, size, "every RX mbuf back: {}", j["pools"]);
    assert_eq!(cached, 0, "nothing left in client caches: {}", j["pools"]);
    eprintln!("two clients: {:?}", t0.elapsed());
}

/// A config with an engine lcore among the client lcore ids is refused by
/// `udpdemux check` and by `udpdemux run`, one line naming the fix.
#[test]
fn an_engine_lcore_in_the_client_range_is_refused() {
    let (bin, _) = binaries();
    let dir = std::env::temp_dir().join(unique("lcore-range"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[eal]\nlcores = \"0,1,64\"\nno_huge = true\nmemory_mb = 64\nno_pci = true\nfile_prefix = \"{}\"\nvdevs = [\"net_null0\"]\n\n{}",
            unique("lcore-range"),
            body("", &pcap_sockets(|_| "")).replace("{port}", "net_null0")
        ),
    )
    .unwrap();
    let want = "lcore 64 (eal.lcores = \"0,1,64\") is in 64..=127, the lcore ids out-of-process clients take (one each: DPDK's mempool caches are per lcore id and unlocked): give the engine lcore ids below 64";
    let o = Command::new(bin)
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains(&format!("error: {want}\n")), "{out}");
    let o = Command::new(bin)
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("udpdemux: error: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(want), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With every client lcore slot locked (by this test, as 64 live clients
/// would), a client gets one line saying so and exits 1; once one slot is
/// free, a client attaches on that lcore id.
#[test]
fn a_client_finds_every_lcore_taken_and_says_so() {
    hugepages_ready(64).unwrap();
    let engine = Engine::start("slots", &endless_pcap(), "net_pcap0", Opts::default());
    let dir = std::path::Path::new("/var/run/dpdk").join(&engine.prefix);
    let mut held: Vec<(u32, std::fs::File)> = (64..=127u32)
        .map(|l| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(udpdemux::client_proto::slot_lock_path(&dir, l))
                .unwrap();
            dpdk_sys::os::try_lock_exclusive(&f).unwrap();
            (l, f)
        })
        .collect();
    let o = recv(&engine.prefix, &["--secs", "0.1", "dns4"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: every client lcore id (64..=127) of the engine on file prefix \"{}\" is taken by a live client",
            engine.prefix
        )) && err.contains("detach or stop a client")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
    held.retain(|(l, _)| *l != 100);
    let o = recv(&engine.prefix, &["--secs", "0.1", "dns4"]);
    let out = stdout_of_success(&o, "closed dns4");
    assert!(out.starts_with("attached lcore 100\n"), "{out}");
    drop(held);
}

/// A client killed with SIGKILL while it holds a batch lets go of its
/// lcore slot; the next client takes that same lcore id at once (whether
/// the engine's liveness check or that client's attach settles the dead
/// one's caches first). At exit: one client reaped, its lcore caches given
/// back (none forgotten), nothing left in a client lcore's cache, the RX
/// pool where a client-less run leaves it, and the books balance.
#[test]
fn a_dead_clients_lcore_goes_to_the_next_client_with_its_cache_settled() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::start("reuse", &endless_pcap(), "net_pcap0", Opts::default());
    let mut a = holder(&engine.prefix, "60", &["dns4"]);
    let mut out = BufReader::new(a.stdout.take().unwrap());
    let lcore = attached_lcore(&mut out, &mut a);
    assert!(holding(&mut out, &mut a) > 0);
    let pid = a.id();
    a.kill().unwrap();
    a.wait().unwrap();
    let o = recv(&engine.prefix, &["--secs", "0.3", "dns6"]);
    let text = stdout_of_success(&o, "closed dns6");
    assert!(
        text.starts_with(&format!("attached lcore {lcore}\n")),
        "the dead client's lcore {lcore} is free again: {text}"
    );
    assert!(received(&text, "dns6").0 > 0, "{text}");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !engine
        .log_text()
        .contains(&format!("reaped client pid {pid} "))
    {
        assert!(Instant::now() < deadline, "{}", engine.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Which came first, the reap or the next attach, shows here.
    for l in engine.log_text().lines() {
        if l.contains("attached on lcore") || l.contains("(dead)") {
            eprintln!("{l}");
        }
    }
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let c = &j["clients"];
    assert_eq!(c["reaped"], 1, "{c}");
    assert_eq!(c["attached"], 0, "{c}");
    assert!(c["cache_flushed"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["cache_discarded"], 0, "{c}");
    let (size, avail, cached) = pool(&j, "rx_pool_s0");
    assert_eq!(cached, 0, "{}", j["pools"]);
    assert_eq!(
        avail,
        size - manifest()["frames"].as_u64().unwrap(),
        "the RX pool at exit: {}",
        j["pools"]
    );
    assert!(
        engine
            .log_text()
            .contains(&format!("client pid {pid} (dead): ")),
        "{}",
        engine.log_text()
    );
}
