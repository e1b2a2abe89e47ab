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
use netns::{can_run, EngineToml, Net, ENGINE_V4, ENGINE_V6};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use udpdemux::pcap::PcapReader;

const N: usize = 300;

/// The kernel-side sender: N numbered datagrams to each group (out of the
/// veth); then, each after the engine's answer to the one before (seen on
/// raw sockets joined to the report destinations, from the engine's
/// addresses), an IGMPv3 general query, an MLDv2 general query and an
/// IGMPv2 general query (1 s maximum response time each); then prints
/// `reload`, waits for the engine's two IGMPv2 reports of 239.4.5.6 (the
/// test's SIGHUP adds a member), and prints the payloads as JSON. No sleep
/// decides anything: every step waits for what it needs (60 s at most).
const SENDER: &str = r#"
import json, select, socket, struct, sys, time
dev, n = sys.argv[1], int(sys.argv[2])
idx = socket.if_nametoindex(dev)
me4 = socket.inet_aton("198.18.0.2")
def payload(i):
    return (b"%06d|" % i + bytes((i * 13 + k) % 256 for k in range(40 + i % 700)))
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
r4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
r4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, me4)
r4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
for g in ["224.0.0.22", "239.1.2.3", "239.4.5.6"]:
    r4.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(g) + me4)
r6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
r6.bind(("fe80::2", 0, 0, idx))
r6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
r6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
r6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
              socket.inet_pton(socket.AF_INET6, "ff02::16") + struct.pack("@I", idx))
def igmp_msgs():
    data = r4.recv(65535)
    if socket.inet_ntoa(data[12:16]) != "198.18.0.1":
        return []
    m = data[(data[0] & 15) * 4:]
    if m[0] == 0x22:
        k = struct.unpack("!H", m[6:8])[0]
        return [("v3", m[8 + 8 * i], socket.inet_ntoa(m[12 + 8 * i:16 + 8 * i])) for i in range(k)]
    return [("v2", m[0], socket.inet_ntoa(m[4:8]))]
def mld_msgs():
    data, src = r6.recvfrom(65535)
    if not src[0].startswith("fe80::1") or data[0] != 143:
        return []
    k = struct.unpack("!H", data[6:8])[0]
    return [("v2", data[8 + 20 * i], socket.inet_ntop(socket.AF_INET6, data[12 + 20 * i:28 + 20 * i])) for i in range(k)]
def wait(sock, read, want, times=1):
    deadline = time.time() + 60
    seen = 0
    while seen < times:
        left = deadline - time.time()
        if left <= 0:
            sys.exit("timed out waiting for %r" % (want,))
        if select.select([sock], [], [], left)[0]:
            seen += sum(1 for x in read() if x == want)
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, me4)
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
sent = {"v4": [], "v6": []}
for i in range(n):
    p = payload(i)
    s4.sendto(p, ("239.1.2.3", 5000)); sent["v4"].append(p.hex())
    s6.sendto(p, ("ff15::1", 5001, 0, idx)); sent["v6"].append(p.hex())
    if i % 16 == 15:
        time.sleep(0.004)
# IGMPv3 general query: max resp code 10 (1 s), QRV 2, QQIC 125; the
# answer is a current-state record (2) for 239.1.2.3.
q = bytearray(struct.pack("!BBH4sBBH", 0x11, 10, 0, bytes(4), 2, 125, 0))
struct.pack_into("!H", q, 2, csum(bytes(q)))
r4.sendto(bytes(q), ("224.0.0.1", 0))
wait(r4, igmp_msgs, ("v3", 2, "239.1.2.3"))
# MLDv2 general query from the link-local address, hop limit 1 (the
# kernel fills the ICMPv6 checksum of a raw ICMPv6 socket): 1000 ms.
m = struct.pack("!BBHHH16sBBH", 130, 0, 0, 1000, 0, bytes(16), 2, 125, 0)
r6.sendto(m, ("ff02::1", 0, 0, idx))
wait(r6, mld_msgs, ("v2", 2, "ff15::1"))
# IGMPv2 general query (8 bytes): the port goes to IGMPv2 compatibility
# mode and answers with an IGMPv2 report (0x16) to the group.
q2 = bytearray(struct.pack("!BBH4s", 0x11, 10, 0, bytes(4)))
struct.pack_into("!H", q2, 2, csum(bytes(q2)))
r4.sendto(bytes(q2), ("224.0.0.1", 0))
wait(r4, igmp_msgs, ("v2", 0x16, "239.1.2.3"))
print("reload", flush=True)
wait(r4, igmp_msgs, ("v2", 0x16, "239.4.5.6"), 2)
print(json.dumps(sent), flush=True)
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
    let net = Net::new("m");
    // A link-local source for the MLD query, usable at once.
    net.add_addr("fe80::2/64");
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
    let mut text = EngineToml::af_packet(&net, 2)
        .no_periodic_stats()
        .addresses(&[
            &format!("{ENGINE_V4}/24"),
            &format!("{ENGINE_V6}/64"),
            "fe80::1/64",
        ])
        .text(eal, "mcast", "");
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
    let (engine, cfg, json) = EngineProc::start_ready(&dir, &text);

    // The sender, and at its `reload` line a SIGHUP that adds a socket
    // joining 239.4.5.6: the engine reports the join without a restart.
    let mut sender = net
        .command(&["python3", "-c", SENDER, &net.peer, &N.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the sender");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(sender.stdout.take().unwrap()));
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    if first == "reload" {
        let late = socket_toml("late", "239.4.5.6:5002", "multicast = \"239.4.5.6\"\n");
        std::fs::write(&cfg, format!("{text}{late}")).unwrap();
        engine.signal(libc::SIGHUP);
    }
    let sent_json = lines.next().and_then(Result::ok).unwrap_or_default();
    let out = sender.wait_with_output().expect("sender");
    let sender_ok = first == "reload" && out.status.success();
    let (status, log) = engine.stop();
    if !sender_ok {
        // What the engine counted tells a query it never saw (`queries`)
        // from one it lost or did not answer, and a report it could not send.
        let counted = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|j| format!("multicast {}", j["multicast"]))
            .unwrap_or_else(|| "no exit JSON".into());
        panic!(
            "sender: {first:?} {}\nengine: {counted}\nlog:\n{log}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid: tshark writes its file out.
    unsafe { libc::kill(shark.id() as i32, libc::SIGINT) };
    let _ = shark.wait();

    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let sent: serde_json::Value = serde_json::from_str(&sent_json).expect("sender JSON");
    let j = stats_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);

    for (fam, names) in [
        ("v4", ["m1", "m2", "wild"].as_slice()),
        ("v6", ["m6", "wild6"].as_slice()),
    ] {
        let want = unhex_all(&sent[fam]);
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
    assert_eq!(n(&m["queries"]), 3, "{m}");
    assert_eq!(n(&m["queries_answered"]), 3, "{m}");
    assert_eq!(n(&m["report_errors"]), 0, "{m}");
    assert_eq!(j["hot_path_allocations"], 0);

    // What tshark saw from the engine: for IGMPv3 and MLDv2, the fields
    // up to the record type must read `want` on every report, and each
    // reported group must have the record types listed and no other (join:
    // change to exclude; the answer to the query: is exclude; the leave at
    // exit: change to include). After the IGMPv2 query the port speaks
    // IGMPv2: the answer to it, the reload's join of 239.4.5.6 (twice, a
    // second apart) and the leaves at exit are IGMPv2 messages.
    let mac = net.host_mac();
    let checks = [
        (
            "IGMPv3 report to 224.0.0.22, TTL 1, Router Alert, IP and IGMP checksums good",
            "igmp.type == 0x22",
            ["ip.dst", "ip.ttl", "ip.opt.type", "ip.checksum.status", "igmp.checksum.status", "igmp.record_type", "igmp.maddr"],
            ["224.0.0.22", "1", "148", "1", "1"],
            vec![("239.1.2.3", vec!["4", "2"])],
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
            // The join at start is IGMPv3 / MLDv2; its repeat a second
            // later may already be IGMPv2 (counted below) under a slow run.
            assert!(of(group, "4") >= 1, "{what}: no join: {lines:?}");
        }
        for l in &lines {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(&f[..5], &want, "{what}: {l}");
            assert!(
                groups
                    .iter()
                    .any(|(g, types)| f[6] == *g && types.contains(&f[5])),
                "{what}: unexpected report {l}"
            );
        }
    }
    // IGMPv2: reports to the group, leaves to 224.0.0.2, TTL 1, Router
    // Alert, checksums good.
    let v2 = fields(
        &cap,
        &mac,
        "igmp.type == 0x16 || igmp.type == 0x17",
        &[
            "igmp.type",
            "ip.dst",
            "ip.ttl",
            "ip.opt.type",
            "ip.checksum.status",
            "igmp.checksum.status",
            "igmp.maddr",
        ],
    );
    let count = |t: &str, g: &str| {
        v2.iter()
            .filter(|l| {
                let f: Vec<&str> = l.split(',').collect();
                f[0] == t && f[6] == g
            })
            .count()
    };
    for l in &v2 {
        let f: Vec<&str> = l.split(',').collect();
        let dst = if f[0] == "0x17" { "224.0.0.2" } else { f[6] };
        assert_eq!(&f[1..6], &[dst, "1", "148", "1", "1"], "IGMPv2: {l}");
    }
    assert!(count("0x16", "239.1.2.3") >= 1, "IGMPv2 answer: {v2:?}");
    assert_eq!(
        count("0x16", "239.4.5.6"),
        2,
        "IGMPv2 join after the reload, twice: {v2:?}"
    );
    assert_eq!(count("0x17", "239.1.2.3"), 1, "IGMPv2 leave: {v2:?}");
    assert_eq!(count("0x17", "239.4.5.6"), 1, "IGMPv2 leave: {v2:?}");
}
