//! Liveness (issue 16, item 4): a client killed with SIGKILL while it
//! holds a batch is noticed by the engine within a second; its socket is
//! closed as its own close would have (given back to the engine's
//! consumer), the mbufs it held are freed and counted, the other sockets
//! go on, the books balance and the RX pool ends where a run without any
//! client ends. A client that is alive keeps its socket.
//!
//! Every client is a fresh run of `examples/recv.rs` with `--hold`.
mod common;
use common::*;

use std::io::{BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Mbufs of the RX pool in client lcores' caches at exit.
fn client_cached(j: &Value) -> u64 {
    j["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rx_pool_s0")
        .unwrap()["client_cached"]
        .as_u64()
        .unwrap()
}

/// The RX pool's size and free mbufs at exit.
fn rx_pool(j: &Value) -> (u64, u64) {
    let p = j["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rx_pool_s0")
        .unwrap_or_else(|| panic!("no rx_pool_s0 in {}", j["pools"]));
    (p["size"].as_u64().unwrap(), p["avail"].as_u64().unwrap())
}

/// What a run of this engine without any client leaves free in its RX
/// pool at exit: every mbuf but those the `net_pcap` PMD keeps for its
/// `infinite_rx` replay (one per frame of the file, until the port
/// closes after the books are taken).
fn baseline(j: &Value) -> u64 {
    rx_pool(j).0 - manifest()["frames"].as_u64().unwrap()
}

/// Killed while holding a batch during an endless replay: the engine logs
/// the reap within 1 s of the kill (its liveness check runs every 200 ms)
/// naming the pid, the socket and the mbufs; the engine keeps running;
/// dns4 is given back (a new client opens it and receives) and dns6 kept
/// receiving; at exit the books balance, `clients.reaped` is 1, dns4's
/// `reclaimed_from_client` is exactly the batch the client held (counted
/// in `freed_at_close`: delivered, never consumed), nothing was lost in a
/// free, the mbufs it had freed into its lcore's mempool cache were given
/// back to the pool when it was reaped (none left in a client lcore's
/// cache), and the RX pool has every mbuf back that a client-less run has.
#[test]
fn a_client_killed_holding_a_batch_is_reaped_within_a_second() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::start("reap", &endless_pcap(), "net_pcap0", Opts::default());
    let mut c = holder(&engine.prefix, "60", &["dns4"]);
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let held = holding(&mut out, &mut c);
    assert!(held > 0);
    let pid = c.id();
    c.kill().expect("SIGKILL the client");
    let killed = Instant::now();
    let line = format!("reaped client pid {pid} (dead): closed socket(s) [dns4], reclaimed {held} mbuf(s) it held ({held} datagram(s) unread");
    // The client stays a zombie (not waited for) until the reap: the
    // engine must not take a zombie for a live process.
    while !engine.log_text().contains(&line) {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "no {line:?} within 1 s of the kill: {}",
            engine.log_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = killed.elapsed();
    c.wait().unwrap();
    eprintln!("reaped {took:?} after the kill");
    assert!(
        engine.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the engine keeps running"
    );
    // dns4 is open to a client again, and both sockets receive.
    let o = recv(&engine.prefix, &["--secs", "0.5", "dns4", "dns6"]);
    let text = stdout_of_success(&o, "closed dns6");
    for name in ["dns4", "dns6"] {
        let (n, _) = received(&text, name);
        assert!(n > 0, "{name} receives after the reap: {text}");
    }
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["clients"]["reaped"], 1, "{}", j["clients"]);
    assert_eq!(j["clients"]["reclaimed"], held, "{}", j["clients"]);
    assert_eq!(j["clients"]["lost_in_free"], 0, "{}", j["clients"]);
    let s = socket_named(&j, "dns4");
    assert_eq!(s["reclaimed_from_client"], held, "{s}");
    assert_eq!(
        s["freed_at_close"], held,
        "only the reclaimed batch was freed unconsumed: {s}"
    );
    assert_eq!(s["rmem"], 0, "{s}");
    assert_eq!(socket_named(&j, "dns6")["reclaimed_from_client"], 0);
    // It received for 0.3 s before holding: it freed batches into its
    // lcore's cache, which the reap gave back.
    assert!(
        j["clients"]["cache_flushed"].as_u64().unwrap() > 0,
        "{}",
        j["clients"]
    );
    assert_eq!(j["clients"]["cache_discarded"], 0, "{}", j["clients"]);
    assert_eq!(client_cached(&j), 0, "{}", j["pools"]);
    assert!(
        engine
            .log_text()
            .contains(&format!("client pid {pid} (dead): ")),
        "{}",
        engine.log_text()
    );
    let (_, avail) = rx_pool(&j);
    assert_eq!(avail, baseline(&j), "the RX pool at exit: {}", j["pools"]);
}

/// A client that holds a batch and lives keeps its socket: 1 s (five
/// liveness checks) into the hold there is no reap and another client is
/// refused the socket as open by that pid; the holder then frees, closes
/// and exits cleanly; at exit nothing was reaped or reclaimed, the books
/// balance, dns4's client consumption is exactly what it received, and
/// the RX pool is where a client-less run leaves it.
#[test]
fn a_live_client_holding_a_batch_keeps_its_socket() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::start("alive", &endless_pcap(), "net_pcap0", Opts::default());
    let mut c = holder(&engine.prefix, "2", &["dns4"]);
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let held = holding(&mut out, &mut c);
    assert!(held > 0);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !engine.log_text().contains("reaped client"),
        "a live client was reaped: {}",
        engine.log_text()
    );
    let o = recv(&engine.prefix, &["dns4"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!(
            "open-error dns4: cannot open socket \"dns4\": socket \"dns4\" is already open by client pid {}",
            c.id()
        )),
        "{text}"
    );
    let status = wait_exit(
        &mut c,
        Duration::from_secs(20),
        "the holder did not exit",
        || engine.log_text(),
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(
        status.success() && rest.contains("closed dns4"),
        "{status} {rest}"
    );
    let (n, _) = received(&rest, "dns4");
    assert!(n >= held, "{rest}");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["clients"]["reaped"], 0, "{}", j["clients"]);
    assert_eq!(j["clients"]["reclaimed"], 0, "{}", j["clients"]);
    let s = socket_named(&j, "dns4");
    assert_eq!(s["client_consumed"], n, "{s}");
    assert_eq!(s["reclaimed_from_client"], 0, "{s}");
    assert_eq!(s["rmem"], 0, "{s}");
    let (_, avail) = rx_pool(&j);
    assert_eq!(avail, baseline(&j), "the RX pool at exit: {}", j["pools"]);
}
