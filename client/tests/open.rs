//! Opening an engine's socket from a client process and receiving from it
//! (issue 16, second slice): the client gets exactly a finite replay's
//! datagrams for the sockets it opened while the engine's consumer keeps
//! the others, unknown and busy sockets are refused with a clear reason,
//! a socket taken over during an endless replay goes back to the engine's
//! consumer at close, and the engine's books balance with every socket's
//! memory released.
//!
//! Every client is a fresh run of `examples/recv.rs` (the EAL initialises
//! once per process) against an engine spawned with hugepages.
mod common;
use common::*;

/// A client opens two sockets of a finite replay and receives exactly the
/// manifest's datagrams for each, with their destination, a source and an
/// RX TSC from the mbuf's metadata; opening a socket that does not exist,
/// or one it already has open, is refused with the reason; the engine's
/// own sockets get theirs; at exit the books balance, the client's
/// consumption is in the socket's books and every socket's memory is back.
#[test]
fn a_client_receives_a_finite_replay_exactly_and_the_books_balance() {
    hugepages_ready(64).unwrap();
    let m = manifest();
    let pcap = repo().join("conf/default.pcap");
    let vdev = format!("net_pcap0,rx_pcap={}", pcap.display());
    let mut engine = Engine::start("open", &vdev, "net_pcap0", Opts::body(finite()));
    let (n6, a6) = (
        m["per_dst"]["[fd00::1]:53"].as_u64().unwrap(),
        m["per_dst"]["[fd00::2]:5000"].as_u64().unwrap(),
    );
    let o = recv(
        &engine.prefix,
        &[
            &format!("dns6={n6}"),
            &format!("app6={a6}"),
            "nosuch",
            "dns6",
        ],
    );
    let out = stdout_of_success(&o, "");
    assert!(
        out.contains("open dns6 id=") && out.contains("open app6 id="),
        "{out}"
    );
    assert!(
        out.contains("open-error nosuch: cannot open socket \"nosuch\": no socket named \"nosuch\" in this engine (its sockets: dns4, echo4, app4, dns6, app6)"),
        "{out}"
    );
    assert!(
        out.contains("open-error dns6: cannot open socket \"dns6\": socket \"dns6\" is already open by client pid"),
        "{out}"
    );
    for (name, n, dst) in [("dns6", n6, "[fd00::1]:53"), ("app6", a6, "[fd00::2]:5000")] {
        let (got, _) = received(&out, name);
        assert_eq!(got, n, "{name}: {out}");
        assert!(
            out.contains(&format!("dsts {{\"{dst}\"}}")),
            "{name}: every datagram's destination is the socket's: {out}"
        );
        assert!(out.contains(&format!("closed {name}")), "{out}");
    }
    assert!(!out.contains("tsc_ok false"), "RX TSC: {out}");
    assert!(out.contains("detached cleanup=true"), "{out}");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["rx_packets"], m["frames"]);
    for (name, addr, client) in [
        ("dns4", "198.18.1.1:53", false),
        ("echo4", "198.18.1.2:7", false),
        ("app4", "198.18.1.3:5000", false),
        ("dns6", "[fd00::1]:53", true),
        ("app6", "[fd00::2]:5000", true),
    ] {
        let s = socket_named(&j, name);
        let n = &m["per_dst"][addr];
        assert_eq!(&s["delivered"], n, "{name} delivered");
        assert_eq!(&s["consumed"], n, "{name} consumed");
        assert_eq!(s["freed_at_close"], 0, "{name}");
        assert_eq!(s["rmem"], 0, "{name}: memory released");
        let want = if client { n.as_u64().unwrap() } else { 0 };
        assert_eq!(s["client_consumed"], want, "{name} consumed by the client");
        if client {
            assert_eq!(
                s["consumed_bytes"].as_u64().unwrap(),
                received(&out, name).1,
                "{name}: payload bytes the client read"
            );
        }
    }
}

/// During an endless replay a client takes a socket the engine counts,
/// receives from it, closes it; a second client then opens it again (the
/// close gave it back), and after that the engine's consumer reads it
/// again: at exit nothing was left in its ring to free, the books balance
/// and the clients' datagrams are exactly theirs in the socket's books.
/// With the main lcore consuming, and with a consumer lcore (whose
/// hand-over the engine waits for before it replies).
#[test]
fn a_socket_taken_over_during_a_replay_goes_back_to_the_engine_at_close() {
    takeover("0,1", &default_body());
}

#[test]
fn a_socket_a_consumer_lcore_reads_is_handed_over_and_back() {
    let body = format!(
        "{}\n[[lcore]]\nid = 2\nrole = \"consumer\"\n",
        default_body()
    );
    takeover("0@0,1@1,2@0", &body);
}

fn takeover(lcores: &str, body: &str) {
    hugepages_ready(64).unwrap();
    let vdev = endless_pcap();
    let mut engine = Engine::start(
        "takeover",
        &vdev,
        "net_pcap0",
        Opts {
            lcores: lcores.into(),
            body: body.into(),
            ..Opts::default()
        },
    );
    let mut total = 0;
    for secs in ["1.5", "0.5"] {
        let o = recv(&engine.prefix, &["--secs", secs, "dns4"]);
        let out = stdout_of_success(&o, "closed dns4");
        assert!(out.contains("dsts {\"198.18.1.1:53\"}"), "{out}");
        let (n, _) = received(&out, "dns4");
        assert!(n > 0, "{out}");
        total += n;
    }
    // The engine's consumer has had the socket back for a while.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let s = socket_named(&j, "dns4");
    assert_eq!(s["client_consumed"], total, "{s}");
    assert!(s["consumed"].as_u64().unwrap() > total, "{s}");
    assert_eq!(s["freed_at_close"], 0, "the engine consumed it again: {s}");
    assert_eq!(s["rmem"], 0, "{s}");
    let other = socket_named(&j, "dns6");
    assert!(other["consumed"].as_u64().unwrap() > 0);
    assert_eq!(other["client_consumed"], 0);
    if lcores.contains("2@") {
        // The consumer lcore read the sockets, not the main lcore.
        assert!(
            j["consumers"][0]["datagrams"].as_u64().unwrap() > 0,
            "{}",
            j["consumers"]
        );
    }
}

/// Wait until the engine's log contains `what`.
fn wait_log(engine: &Engine, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !engine.log_text().contains(what) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {what:?} in the engine's log: {}",
            engine.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A SIGHUP reload that would remove a socket a client has open is
/// refused as a whole (the client reads that socket's ring and counters
/// directly); once the client has closed it, the same reload removes it,
/// and the removed socket's books keep the client's datagrams.
#[test]
fn a_reload_does_not_remove_a_socket_a_client_has_open() {
    hugepages_ready(64).unwrap();
    let vdev = endless_pcap();
    let mut engine = Engine::start("reload", &vdev, "net_pcap0", Opts::default());
    let client = std::process::Command::new(profile_dir().join("examples").join("recv"))
        .args([engine.prefix.as_str(), "--secs", "2", "dns4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the recv example");
    wait_log(&engine, "client request \"open dns4 ");
    let cfg = engine.json.parent().unwrap().join("c.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let without = text.replace(
        "[[socket]]\nname = \"dns4\"\nlocal = \"198.18.1.1:53\"\nrcvbuf = 4194304\n",
        "",
    );
    assert_ne!(text, without, "{text}");
    std::fs::write(&cfg, without).unwrap();
    let pid = engine.child.as_ref().unwrap().id().to_string();
    let hup = || {
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
    };
    hup();
    wait_log(
        &engine,
        "SIGHUP: reload rejected, sockets unchanged: socket \"dns4\" is open by client pid",
    );
    let o = client.wait_with_output().unwrap();
    let out = stdout_of_success(&o, "closed dns4");
    let (n, _) = received(&out, "dns4");
    hup();
    wait_log(&engine, "SIGHUP: 1 socket(s) removed");
    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let s = socket_named(&j, "dns4");
    assert_eq!(s["removed"], true, "{s}");
    assert_eq!(s["client_consumed"], n, "{s}");
    assert_eq!(s["rmem"], 0, "{s}");
}
