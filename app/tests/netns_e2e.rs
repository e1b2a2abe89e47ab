//! End to end with the kernel as the client: the engine runs on one end of a
//! veth pair through `net_af_packet`; the other end lives in a network
//! namespace this test creates, where the kernel's own UDP sockets, `ping`
//! and `ping -6` talk to it. No static neighbour entries: the client learns
//! the engine's MAC by ARP and neighbour discovery, which the engine answers.
//! Addresses: 198.18.0.0/24 and fd00::/64 inside the namespace only.
//!
//! Needs root, `ip`, `ethtool`, `ping` and `python3`; without them it says
//! why and passes (it cannot run on a machine where no namespace can be made).
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::{can_run, cmd, have, EngineToml, Net, ENGINE_V4, ENGINE_V6};

use std::time::Duration;

use udpdemux::parse::{parse, Offload};
use udpdemux::pcap::PcapReader;

/// The kernel-side client: numbered datagrams of several sizes to the echo
/// sockets (each must come back byte for byte), a counted stream to the
/// count sockets, and a known list to the pcap socket. Prints JSON.
const CLIENT: &str = r#"
import json, socket, sys, time
v4, v6 = sys.argv[1], sys.argv[2]
out = {}
def payload(i, size):
    head = b"%06d|" % i
    return (head + bytes((i * 7 + k) % 256 for k in range(size)))[:size]
def echo(fam, addr, sizes, rounds):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(2.0)
    ok, bad = 0, []
    for i in range(rounds * len(sizes)):
        p = payload(i, sizes[i % len(sizes)])
        got = None
        for attempt in range(3):
            s.sendto(p, (addr, 7))
            try:
                got, frm = s.recvfrom(65535)
                break
            except socket.timeout:
                continue
        if got == p and frm[1] == 7:
            ok += 1
        else:
            bad.append([i, len(p), None if got is None else len(got)])
    return {"sent": rounds * len(sizes), "ok": ok, "bad": bad[:10]}
out["echo4"] = echo(socket.AF_INET, v4, [7, 64, 512, 1400, 1472], 4)
out["echo6"] = echo(socket.AF_INET6, v6, [7, 64, 512, 1400, 1452], 4)
def stream(fam, addr, port, n, sizes):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    sent = []
    for i in range(n):
        p = payload(i, sizes[i % len(sizes)])
        if s.sendto(p, (addr, port)) == len(p):
            sent.append(p.hex())
        if i % 32 == 31:
            time.sleep(0.005)
    return sent
out["count4"] = len(stream(socket.AF_INET, v4, 9, 500, [8, 100, 1000]))
out["count6"] = len(stream(socket.AF_INET6, v6, 9, 500, [8, 100, 1000]))
out["pcap"] = stream(socket.AF_INET, v4, 5555, 40, [10, 300, 1472])
print(json.dumps(out))
"#;

#[test]
fn kernel_clients_reach_the_engine_over_a_veth_pair() {
    // CI runs as root after scripts/setup.sh: there, a missing piece is a failure, not a skip.
    if !can_run(&["ip", "ethtool", "ping", "python3", "sysctl"]) {
        return;
    }
    let net = Net::new("e");
    let dir = scratch("netns");
    let cap = dir.join("cap.pcap");
    // Two queue pairs: af_packet spreads RX over both (fanout), and the RX
    // lcore (control replies) and the main lcore (echo) each need a TX
    // queue of their own.
    let sockets = format!(
        r#"
[[socket]]
name = "echo4"
local = "0.0.0.0:7"
handler = "echo"

[[socket]]
name = "echo6"
local = "[::]:7"
handler = "echo"

# Count and pcap sockets get a budget the whole stream fits in: the test is
# about exact counts, and a main lcore slowed by a busy machine must not turn
# into rcvbuf drops (those are counted, but then the count is not "what was sent").
[[socket]]
name = "count4"
local = "{ENGINE_V4}:9"
handler = "count"
rcvbuf = 4194304

[[socket]]
name = "count6"
local = "[{ENGINE_V6}]:9"
handler = "count"
rcvbuf = 4194304

[[socket]]
name = "cap"
local = "{ENGINE_V4}:5555"
handler = "pcap"
pcap_file = "{cap}"
pcap_limit_bytes = 1000000
rcvbuf = 4194304
"#,
        cap = cap.display()
    );
    let text = EngineToml::af_packet(&net, 2).text(eal, "netns", &sockets);
    let (engine, _, json) = EngineProc::start_ready(&dir, &text);

    let client = net.exec(&["python3", "-c", CLIENT, ENGINE_V4, ENGINE_V6]);
    let ping4 = net.exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2", ENGINE_V4]);
    let ping6 = net.exec(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", ENGINE_V6]);
    let neigh4 =
        String::from_utf8_lossy(&net.exec(&["ip", "neigh", "show", ENGINE_V4]).stdout).into_owned();
    let neigh6 =
        String::from_utf8_lossy(&net.exec(&["ip", "-6", "neigh", "show", ENGINE_V6]).stdout)
            .into_owned();
    // Let the last datagrams reach their consumers before stopping.
    std::thread::sleep(Duration::from_millis(500));
    let (status, log) = engine.stop();

    assert_ran(&client, "client", &log);
    let c: serde_json::Value = serde_json::from_slice(&client.stdout).expect("client JSON");
    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let j = stats_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);

    // Neighbour resolution happened through the engine's replies (nothing static).
    let mac = net.host_mac();
    assert!(
        neigh4.contains(&mac) && !neigh4.contains("PERMANENT"),
        "ARP entry for {ENGINE_V4}: {neigh4:?} (mac {mac})"
    );
    assert!(
        neigh6.contains(&mac) && !neigh6.contains("PERMANENT"),
        "ND entry for {ENGINE_V6}: {neigh6:?} (mac {mac})"
    );
    let r = &j["responder"];
    assert!(n(&r["arp_replies"]) >= 1, "{r}");
    assert!(n(&r["nd_advertisements"]) >= 1, "{r}");

    // Echo: every datagram back unchanged, every reply handed to the NIC.
    for (fam, name) in [("echo4", "echo4"), ("echo6", "echo6")] {
        let e = &c[fam];
        assert_eq!(e["ok"], e["sent"], "{fam}: {e}\nlog:\n{log}");
        let s = socket_named(&j, name);
        assert!(n(&s["tx"]) >= n(&e["sent"]), "{name}: {s}");
        assert_eq!(n(&s["tx_errors"]), 0, "{name}: {s}");
    }

    // ping / ping -6.
    let p4 = String::from_utf8_lossy(&ping4.stdout).into_owned();
    let p6 = String::from_utf8_lossy(&ping6.stdout).into_owned();
    assert!(
        ping4.status.success() && p4.contains("3 received"),
        "ping: {p4}"
    );
    assert!(
        ping6.status.success() && p6.contains("3 received"),
        "ping -6: {p6}"
    );
    assert!(
        n(&r["icmp_echo_replies"]) >= 3 && n(&r["icmp6_echo_replies"]) >= 3,
        "{r}"
    );

    // Count sockets: exactly what the kernel sent.
    for name in ["count4", "count6"] {
        let s = socket_named(&j, name);
        assert_eq!(n(&s["offered"]), n(&c[name]), "{name}: {s}");
        assert_eq!(n(&s["consumed"]), n(&c[name]), "{name}: {s}");
    }

    // pcap: the file holds exactly the datagrams sent, in order.
    let sent = unhex_all(&c["pcap"]);
    assert_eq!(sent.len(), 40);
    let mut got = Vec::new();
    for rec in PcapReader::open(&cap).expect("open pcap") {
        let (_, frame) = rec.expect("pcap record");
        let d = parse(&frame, Offload::default()).expect("a UDP frame");
        assert_eq!(d.dport, 5555);
        got.push(d.payload(&frame).unwrap().to_vec());
    }
    assert_eq!(got, sent, "pcap payloads");
    let s = socket_named(&j, "cap");
    assert_eq!((n(&s["written"]), n(&s["not_written"])), (40, 0), "{s}");
    assert!(
        have("tshark") || std::env::var_os("CI").is_none(),
        "CI: scripts/setup.sh must install tshark"
    );
    if have("tshark") {
        let o = cmd(
            "tshark",
            &[
                "-r",
                cap.to_str().unwrap(),
                "-Y",
                "udp.dstport == 5555",
                "-T",
                "fields",
                "-e",
                "udp.length",
            ],
        );
        assert!(
            o.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lens: Vec<usize> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(
            lens,
            sent.iter().map(|p| p.len() + 8).collect::<Vec<_>>(),
            "tshark reads the same datagrams"
        );
    }
}
