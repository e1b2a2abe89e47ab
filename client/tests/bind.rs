//! `Client::bind` (issue 16, items 1 and 2): a client binds a new socket
//! with the options of a `[[socket]]` table during an endless replay,
//! receives the replay's datagrams for it, and unbinds it; binds that
//! `udpdemux check` or the flow table would refuse get one clear line; a
//! bound socket dies with its client. Clients are runs of `examples/recv.rs`.
mod common;
use common::*;

use std::io::BufReader;
use std::time::{Duration, Instant};

/// Bind app6 ([fd00::2]:5000, which the replay sends to and the config
/// has no socket for), receive 1 s, unbind: it received only datagrams
/// for its address, the engine logged the unbind and the removal, and at
/// exit its books (among the removed sockets) hold exactly what the client
/// took, with `delivered = consumed + freed_at_close`. In the same client,
/// a bind on dns4's address is refused as an address in use naming dns4,
/// and one with rcvbuf 100 by check's rule, each in one line. A second
/// client binds app4 and is killed holding a batch: the reap unbinds it
/// (its books show the held batch reclaimed) and the books balance.
#[test]
fn a_client_binds_receives_and_unbinds_and_bad_binds_are_refused() {
    hugepages_ready(64).unwrap();
    let mut engine = Engine::start("bind", &endless_pcap(), "net_pcap0", Opts::default());
    let o = recv(
        &engine.prefix,
        &[
            "--secs",
            "1",
            "--bind",
            "app6@[fd00::2]:5000",
            "--bind",
            "clash@198.18.1.1:53",
            "--bind",
            "small@198.18.1.3:5000@100",
        ],
    );
    let out = stdout_of_success(&o, "unbound app6");
    assert!(out.contains("bound app6 id="), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("bind-error clash: the engine refused to bind socket \"clash\": socket \"clash\": address in use: 198.18.1.1:53 collides with socket \"dns4\"")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l == "bind-error small: the engine refused to bind socket \"small\": socket \"small\": rcvbuf = 100 is below 4096 bytes"),
        "{out}"
    );
    let (n, _) = received(&out, "app6");
    assert!(n > 0, "{out}");
    assert!(out.contains("dsts {\"[fd00::2]:5000\"}"), "{out}");
    let log = engine.log_text();
    assert!(
        log.contains("socket app6 unbound by client pid") && log.contains("socket app6 ("),
        "{log}"
    );

    // A bound socket dies with its client.
    let mut c = holder(&engine.prefix, "60", &["--bind", "app4@198.18.1.3:5000"]);
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let held = holding(&mut out, &mut c);
    let pid = c.id();
    c.kill().unwrap();
    c.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let want = format!(
        "reaped client pid {pid} (dead): closed socket(s) [app4], reclaimed {held} mbuf(s)"
    );
    while !engine.log_text().contains(&want) {
        assert!(
            Instant::now() < deadline,
            "no {want:?}: {}",
            engine.log_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(engine
        .log_text()
        .contains(&format!("socket app4 unbound by client pid {pid}")));

    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let s = socket_named(&j, "app6");
    assert_eq!(s["removed"], true, "{s}");
    assert_eq!(s["client_consumed"], n, "{s}");
    assert_eq!(s["consumed"], n, "{s}");
    assert_eq!(
        s["delivered"].as_u64().unwrap(),
        n + s["freed_at_close"].as_u64().unwrap(),
        "{s}"
    );
    let s = socket_named(&j, "app4");
    assert_eq!(s["removed"], true, "{s}");
    assert_eq!(s["reclaimed_from_client"], held, "{s}");
    assert_eq!(s["rmem"], 0, "{s}");
    assert_eq!(j["clients"]["reaped"], 1, "{}", j["clients"]);
    assert_eq!(j["clients"]["open"], 0, "{}", j["clients"]);
}
