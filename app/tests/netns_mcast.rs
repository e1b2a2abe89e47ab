//! Multicast with the kernel as the sender (issue 18, part 4): the engine
//! runs on one end of a veth pair through `net_af_packet` (two queue
//! pairs); in the namespace this test creates, a kernel UDP socket sends
//! to group 239.1.2.3 and to ff15::1, and raw sockets send an IGMPv3 and
//! an MLDv2 general query. `tshark` on the namespace's end captures what
//! the engine sends.
//!
//! Checked: three member sockets (two bound to the group, one to the
//! wildcard that never joined, as the kernel's `IP_MULTICAST_ALL`) each
//! hold every datagram in their pcap, byte for byte; a socket bound to a
//! unicast address on the same port counts nothing; a member with a tiny
//! rcvbuf and a slow consumer drops only its own copies; the books balance
//! with the copies; the engine's IGMPv3 and MLDv2 reports (joins at start,
//! answers to the queries, leaves at exit) have TTL / hop limit 1, the
//! Router Alert option, the RFC's destinations and checksums tshark
//! verifies. Addresses: 198.18.0.0/24 and fd00::/64 inside the namespace.
//!
//! Needs root, `ip`, `ethtool`, `python3` and `tshark`; without them it
//! says why and passes (CI fails instead).
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::{can_run, Net};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use udpdemux::pcap::PcapReader;

const ENGINE_V4: &str = "198.18.0.1";
const CLIENT_V4: &str = "198.18.0.2/24";
const CLIENT_V6: &str = "fd00::2/64";
const N: usize = 300;

/// The kernel-side sender: N numbered datagrams to each group (out of the
/// veth), then an IGMPv3 and an MLDv2 general query with a 1 s maximum
/// response time, then waits 2.5 s for the answers. Prints the payloads.
const SENDER: &str = r#"
import json, socket, struct, sys, time
dev, n = sys.argv[1], int(sys.argv[2])
idx = socket.if_nametoindex(dev)
def payload(i):
    return (b"%06d|" % i + bytes((i * 13 + k) % 256 for k in range(40 + i % 700)))
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("198.18.0.2"))
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
sent = {"v4": [], "v6": []}
for i in range(n):
    p = payload(i)
    s4.sendto(p, ("239.1.2.3", 5000)); sent["v4"].append(p.hex())
    s6.sendto(p, ("ff15::1", 5001, 0, idx)); sent["v6"].append(p.hex())
    if i % 16 == 15:
        time.sleep(0.004)
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
# IGMPv3 general query: max resp code 10 (1 s), QRV 2, QQIC 125.
q = bytearray(struct.pack("!BBH4sBBH", 0x11, 10, 0, bytes(4), 2, 125, 0))
struct.pack_into("!H", q, 2, csum(bytes(q)))
r4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
r4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("198.18.0.2"))
r4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
r4.sendto(bytes(q), ("224.0.0.1", 0))
# MLDv2 general query from the link-local address, hop limit 1 (the
# kernel fills the ICMPv6 checksum of a raw ICMPv6 socket): 1000 ms.
m = struct.pack("!BBHHH16sBBH", 130, 0, 0, 1000, 0, bytes(16), 2, 125, 0)
r6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
r6.bind(("fe80::2", 0, 0, idx))
r6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
r6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
r6.sendto(m, ("ff02::1", 0, 0, idx))
time.sleep(2.5)
print(json.dumps(sent))
"#;

/// The UDP payloads of a pcap the engine wrote.
fn payloads(p: &std::path::Path) -> Vec<Vec<u8>> {
    PcapReader::open(p)
        .expect("open pcap")
        .map(|r| {
            let (_, f) = r.expect("pcap record");
            let d = udpdemux::parse::parse(&f, udpdemux::parse::Offload::default()).expect("UDP");
            d.payload(&f).unwrap().to_vec()
        })
        .collect()
}

/// tshark's fields of the engine's frames (source MAC `mac`) in `cap`
/// matching `filter`, one line per frame.
fn fields(cap: &std::path::Path, mac: &str, filter: &str, f: &[&str]) -> Vec<String> {
    let mut args = vec![
        "-r".to_string(),
        cap.display().to_string(),
        "-o".into(),
        "ip.check_checksum:TRUE".into(),
        "-Y".into(),
        format!("eth.src == {mac} && {filter}"),
        "-T".into(),
        "fields".into(),
        "-E".into(),
        "separator=,".into(),
    ];
    for x in f {
        args.push("-e".into());
        args.push(x.to_string());
    }
    let o = Command::new("tshark").args(&args).output().expect("tshark");
    assert!(
        o.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_kernel_sender_reaches_every_member_and_the_engine_reports_its_groups() {
    if !can_run(&["ip", "ethtool", "python3", "sysctl", "tshark"]) {
        return;
    }
    let net = Net::create("m", CLIENT_V4, CLIENT_V6);
    // A link-local source for the MLD query, usable at once.
    netns::must(
        "ip",
        &[
            "-n",
            &net.ns,
            "addr",
            "add",
            "fe80::2/64",
            "dev",
            &net.peer,
            "nodad",
        ],
    );
    let dir = scratch("netns-mcast");
    let cap = dir.join("wire.pcap");
    // tshark on the namespace's end, from before the engine starts. BPF's
    // `icmp6` does not look past a hop-by-hop header, where MLD sits.
    let mut shark = net
        .command(&[
            "tshark",
            "-i",
            &net.peer,
            "-f",
            "igmp or (ip6 and ip6[6] == 0)",
            "-F",
            "pcap",
            "-w",
            cap.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tshark");
    // tshark says "Capturing on" once the capture is open.
    {
        use std::io::Read;
        let mut err = shark.stderr.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while Instant::now() < deadline && !String::from_utf8_lossy(&seen).contains("Capturing on")
        {
            match err.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(k) => seen.extend_from_slice(&b[..k]),
            }
        }
        assert!(
            String::from_utf8_lossy(&seen).contains("Capturing on"),
            "tshark did not start: {}",
            String::from_utf8_lossy(&seen)
        );
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut err, &mut std::io::sink());
        });
    }

    let pcap = |name: &str| {
        format!(
            "handler = \"pcap\"\npcap_file = {}\npcap_limit_bytes = 10000000\nrcvbuf = 8388608\n",
            toml_str(dir.join(format!("{name}.pcap")).to_str().unwrap())
        )
    };
    let mut text = eal(
        "mcast",
        &[&format!("net_af_packet0,iface={},qpairs=2", net.host)],
    );
    text += &format!(
        r#"
[mempool]
mbufs = 4095
cache = 64

[[port]]
name = "net_af_packet0"
rx_queues = 2
tx_queues = 2
rx_checksum_offload = false
addresses = ["{ENGINE_V4}/24", "fd00::1/64", "fe80::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_af_packet0:0", "net_af_packet0:1"]
"#
    );
    let g4 = "multicast = \"239.1.2.3\"\n";
    text += &socket_toml("m1", "239.1.2.3:5000", &format!("{g4}{}", pcap("m1")));
    text += &socket_toml("m2", "239.1.2.3:5000", &format!("{g4}{}", pcap("m2")));
    text += &socket_toml("wild", "0.0.0.0:5000", &pcap("wild"));
    text += &socket_toml(
        "tiny",
        "239.1.2.3:5000",
        &format!("{g4}rcvbuf = 4096\nconsume_rate_pps = 20\n"),
    );
    text += &socket_toml("uni", &format!("{ENGINE_V4}:5000"), "");
    let g6 = "multicast = \"ff15::1\"\n";
    text += &socket_toml("m6", "[ff15::1]:5001", &format!("{g6}{}", pcap("m6")));
    text += &socket_toml("wild6", "[::]:5001", &pcap("wild6"));
    let cfg = write(&dir, "c.toml", &text);
    let json = dir.join("c.json");
    let mut engine = EngineProc::start(&cfg, &json);
    engine.wait_ready();

    let out = net.exec(&["python3", "-c", SENDER, &net.peer, &N.to_string()]);
    // A reload that adds a socket joining 239.4.5.6: the engine reports the
    // join (twice, a second apart) without a restart.
    let late = socket_toml("late", "239.4.5.6:5002", "multicast = \"239.4.5.6\"\n");
    std::fs::write(&cfg, format!("{text}{late}")).unwrap();
    engine.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !engine
        .log()
        .contains("SIGHUP: 0 socket(s) removed, 1 added")
    {
        assert!(Instant::now() < deadline, "no reload:\n{}", engine.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both joins out, the last datagrams to their consumers; the leaves go
    // at exit.
    std::thread::sleep(Duration::from_millis(1500));
    let (status, log) = engine.stop();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid: tshark writes its file out.
    unsafe { libc::kill(shark.id() as i32, libc::SIGINT) };
    let _ = shark.wait();

    assert!(
        out.status.success(),
        "sender: {}\nlog:\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).expect("sender JSON");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("stats json")).unwrap();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);

    for (fam, names) in [
        ("v4", ["m1", "m2", "wild"].as_slice()),
        ("v6", ["m6", "wild6"].as_slice()),
    ] {
        let want: Vec<Vec<u8>> = sent[fam]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| unhex(h.as_str().unwrap()))
            .collect();
        assert_eq!(want.len(), N);
        for name in names {
            let s = socket_named(&j, name);
            assert_eq!(n(&s["offered"]), N as u64, "{name}: {s}");
            assert_eq!(n(&s["multicast"]), N as u64, "{name}: {s}");
            assert_eq!(n(&s["consumed"]), N as u64, "{name}: {s}");
            let got = payloads(&dir.join(format!("{name}.pcap")));
            assert!(
                got == want,
                "{name}: its pcap does not hold every datagram in order"
            );
        }
    }
    let t = socket_named(&j, "tiny");
    let drops = n(&t["drops"]["rcvbuf_full"]);
    assert_eq!(n(&t["offered"]), N as u64, "{t}");
    assert!(drops > 0 && n(&t["delivered"]) + drops == N as u64, "{t}");
    assert_eq!(
        n(&socket_named(&j, "uni")["offered"]),
        0,
        "the non-member counts nothing"
    );
    assert_eq!(
        n(&j["udp"]["UdpRcvbufErrors"]),
        drops,
        "only tiny's copies dropped"
    );
    assert!(n(&j["ip"]["IpInMcastPkts"]) >= N as u64);
    assert!(n(&j["ip"]["Ip6InMcastPkts"]) >= N as u64);
    let m = &j["multicast"];
    assert_eq!(n(&m["queries"]), 2, "{m}");
    assert_eq!(n(&m["queries_answered"]), 2, "{m}");
    assert_eq!(n(&m["report_errors"]), 0, "{m}");
    assert_eq!(j["hot_path_allocations"], 0);

    // What tshark saw from the engine: for each protocol, the fields up
    // to the record type must read `want` on every report; for each group,
    // the record types `types` (join: change to exclude, sent twice; the
    // answer to the query: is exclude; the leave at exit: change to
    // include) must be there, and no other group may be reported.
    let mac = net.host_mac();
    let checks = [
        (
            "IGMPv3 report to 224.0.0.22, TTL 1, Router Alert, IP and IGMP checksums good",
            "igmp.type == 0x22",
            ["ip.dst", "ip.ttl", "ip.opt.type", "ip.checksum.status", "igmp.checksum.status", "igmp.record_type", "igmp.maddr"],
            ["224.0.0.22", "1", "148", "1", "1"],
            // The group joined by the reload was not there for the query.
            vec![("239.1.2.3", vec!["4", "2", "3"]), ("239.4.5.6", vec!["4", "3"])],
        ),
        (
            "MLDv2 report from the link-local address to ff02::16, hop limit 1, Router Alert (MLD), checksum good",
            "icmpv6.type == 143",
            ["ipv6.src", "ipv6.dst", "ipv6.hlim", "ipv6.opt.router_alert", "icmpv6.checksum.status", "icmpv6.mldr.mar.record_type", "icmpv6.mldr.mar.multicast_address"],
            ["fe80::1", "ff02::16", "1", "0", "1"],
            vec![("ff15::1", vec!["4", "2", "3"])],
        ),
    ];
    for (what, filter, names, want, groups) in checks {
        let lines = fields(&cap, &mac, filter, &names);
        let of = |group: &str, rec: &str| -> usize {
            lines
                .iter()
                .filter(|l| {
                    let f: Vec<&str> = l.split(',').collect();
                    f.get(5) == Some(&rec) && f.get(6) == Some(&group)
                })
                .count()
        };
        for (group, types) in &groups {
            for rec in types {
                assert!(
                    of(group, rec) > 0,
                    "{what}: no record type {rec} for {group}: {lines:?}"
                );
            }
            assert_eq!(
                of(group, "4"),
                2,
                "{what}: a join is sent twice (robustness 2): {lines:?}"
            );
        }
        for l in &lines {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(&f[..5], &want, "{what}: {l}");
            assert!(groups.iter().any(|(g, _)| f[6] == *g), "{what}: {l}");
        }
    }
}
