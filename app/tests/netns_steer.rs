//! Fragments and several RX lcores (issue 18 part 2), twice.
//!
//! 1. Kernel clients over `net_af_packet` with three queue pairs polled by
//!    two RX lcores: af_packet's fanout spreads the frames over the three
//!    sockets by a hash of their headers, so each datagram's fragments land
//!    on some lcore; the engine gives them all to the lcore a hash of the
//!    reassembly key names, over that lcore's steering ring. Clients in a
//!    network namespace send 1500-, 3000-, 9000- and 65 000-byte datagrams
//!    from eight source ports each, IPv6 (fragmented at the veth's 1500
//!    MTU) and IPv4 1500 bytes (the af_packet PMD of DPDK 22.11 has the
//!    kernel reassemble IPv4 before it sees it, within a 2048-byte frame
//!    slot: see `netns_reasm`), to echo sockets; every one must come back
//!    byte for byte (the engine fragments its replies), and the steering
//!    counter must show fragments crossed lcores (the owner is one of two
//!    by a keyed hash of each datagram's ID: with 32 fragmented datagrams,
//!    none crossing has odds of 2^-32).
//! 2. A deterministic split: `net_pcap` with two RX queues (two capture
//!    files), one per RX lcore, the first fragment of every datagram in
//!    one file and the rest in the other, IPv4 and IPv6: every datagram is
//!    reassembled and delivered once, and half the fragments at least
//!    crossed lcores.
//!
//! Both check the books (steered = taken + freed at exit, received =
//! classified) and that the RX lcores allocated nothing.
//!
//! Needs root, `ip`, `ethtool` and `python3` for the first; without them
//! it says why and passes (in CI a missing one is a failure).
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::{can_run, EngineToml, Net, ENGINE_V4, ENGINE_V6};

use std::time::Duration;

use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
use udpdemux::pcap::PcapWriter;
use udpdemux::reasm::fragment_frame;

const SIZES: [usize; 4] = [1500, 3000, 9000, 65_000];
const PORTS: usize = 8;

/// Each of PORTS sockets sends each size to the echo port and waits for
/// the reply (sent again at most twice if lost); IPv4 only `sizes4`.
const CLIENT: &str = r#"
import json, socket, sys
v4, v6 = sys.argv[1], sys.argv[2]
sizes4 = [int(x) for x in sys.argv[3].split(",") if x]
sizes6 = [int(x) for x in sys.argv[4].split(",") if x]
nports = int(sys.argv[5])
ok, sends, bad = 0, [], 0
for fam, addr, sizes, six in [(socket.AF_INET, v4, sizes4, False), (socket.AF_INET6, v6, sizes6, True)]:
    socks = []
    for k in range(nports):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.settimeout(3.0)
        socks.append(s)
    # Resolve the engine's MAC first (a datagram no socket takes).
    socks[0].sendto(b"hello", (addr, 9))
    for k, s in enumerate(socks):
        for size in sizes:
            p = (b"%02d|%06d|" % (k, size) + bytes((size * 7 + k * 3 + i) % 251 for i in range(size)))[:size]
            for attempt in range(3):
                assert s.sendto(p, (addr, 7)) == len(p)
                sends.append([six, size])
                try:
                    got, frm = s.recvfrom(70000)
                except socket.timeout:
                    continue
                if got == p:
                    ok += 1
                else:
                    bad += 1
                break
print(json.dumps({"ok": ok, "sends": sends, "bad": bad}))
"#;

fn check_books(j: &serde_json::Value) {
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["hot_path_allocations"], 0);
    let r = &j["reassembly"];
    assert_eq!(
        n(&r["steered"]),
        n(&r["steer_taken"]) + n(&r["steer_freed_at_exit"]),
        "{r}"
    );
    assert_eq!(n(&r["held"]), 0, "{r}");
}

#[test]
fn kernel_fragments_over_two_rx_lcores_are_echoed_whole() {
    if !can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    let net = Net::new("s");
    let dir = scratch("netns-steer");
    // lcore 0: main (consumes the echo sockets, TX queue 2); 1 and 2: RX.
    let sockets = r#"
[[socket]]
name = "echo4"
local = "0.0.0.0:7"
handler = "echo"
rcvbuf = 16777216

[[socket]]
name = "echo6"
local = "[::]:7"
handler = "echo"
rcvbuf = 16777216
"#;
    let text = EngineToml::af_packet(&net, 3)
        .lcores("0@0,1@1,2@0")
        .table("[reassembly]\ntimeout_secs = 5")
        .mbufs(8191)
        .rx_lcores(&[&[0], &[1, 2]])
        .text(eal, "netns-steer", sockets);
    let (engine, _, json) = EngineProc::start_ready(&dir, &text);
    let client = net.exec(&[
        "python3",
        "-c",
        CLIENT,
        ENGINE_V4,
        ENGINE_V6,
        &csv(&SIZES[..1]),
        &csv(&SIZES),
        &PORTS.to_string(),
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, log) = engine.stop();
    assert_ran(&client, "client", &log);
    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let c: serde_json::Value = serde_json::from_slice(&client.stdout).expect("client JSON");
    let j = stats_json(&json);
    check_books(&j);
    let asked = (PORTS * (1 + SIZES.len())) as u64;
    let ip = &j["ip"];
    let r = &j["reassembly"];
    assert_eq!(n(&c["bad"]), 0, "{c}");
    assert_eq!(
        n(&c["ok"]),
        asked,
        "every datagram echoed whole\n{c}\n{ip}\n{r}"
    );
    let sends = echo_sends(&c["sends"]);
    check_fragmented_echo(&j, &sends);
    // IPv6: every request reassembled by the engine, on its owner lcore.
    let six: Vec<usize> = sends.iter().filter(|s| s.0).map(|s| s.1).collect();
    assert_eq!(n(&ip["Ip6ReasmOKs"]), six.len() as u64, "{ip}");
    let reqds: u64 = six.iter().map(|&p| fragments(true, p, 1500)).sum();
    assert_eq!(n(&ip["Ip6ReasmReqds"]), reqds, "{ip}");
    assert_eq!(n(&ip["Ip6ReasmFails"]), 0, "{ip}");
    assert!(n(&r["steered"]) > 0, "fragments crossed RX lcores: {r}");
    assert_eq!(n(&r["steer_full"]), 0, "{r}");
    // Both RX lcores received frames.
    for l in j["lcores"].as_array().unwrap() {
        let got: u64 = l["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| n(&q["packets"]))
            .sum();
        assert!(got > 0, "lcore {l}");
    }
}

fn datagram(v6: bool, k: usize, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i * 3 + k) as u8).collect();
    let l3 = if v6 {
        L3Spec::V6 {
            src: "fd00::2".parse().unwrap(),
            dst: ENGINE_V6.parse().unwrap(),
            hop_limit: 64,
            ext: &[],
        }
    } else {
        L3Spec::V4 {
            src: "198.18.0.2".parse().unwrap(),
            dst: ENGINE_V4.parse().unwrap(),
            ttl: 64,
            options: &[],
            ident: 0,
            frag: FragSpec::default(),
        }
    };
    build::to_vec(&FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 2],
        dst_mac: [2, 0, 0, 0, 0, 1],
        vlans: &[],
        l3,
        sport: 1000 + k as u16,
        dport: 5555,
        payload: &payload,
        udp_csum: CsumMode::Correct,
    })
    .unwrap()
}

#[test]
fn fragments_split_over_two_queues_meet_on_their_owner() {
    const N: usize = 200;
    let dir = scratch("steer-split");
    let (a, b) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let mut wa = PcapWriter::create(&a, 65_535).unwrap();
    let mut wb = PcapWriter::create(&b, 65_535).unwrap();
    let mut frag_count = 0u64;
    for k in 0..N {
        let v6 = k % 2 == 1;
        let f = datagram(v6, k, 3000);
        // Three fragments: the first to queue 0, the others to queue 1.
        let fs = fragment_frame(&f, &[1232, 2464], 0x100 + k as u32).unwrap();
        wa.write_packet(k as u64, &fs[0]).unwrap();
        for x in &fs[1..] {
            wb.write_packet(k as u64, x).unwrap();
        }
        frag_count += fs.len() as u64;
    }
    drop((wa, wb));
    let cap = dir.join("cap.pcap");
    let text = format!(
        r#"{eal}
[engine]
stop_when_idle_ms = 500

[reassembly]
timeout_secs = 30

[[port]]
name = "net_pcap0"
rx_queues = 2

[[lcore]]
id = 1
role = "rx"
queues = ["net_pcap0:0"]

[[lcore]]
id = 2
role = "rx"
queues = ["net_pcap0:1"]

[[socket]]
name = "cap4"
local = "{ENGINE_V4}:5555"
handler = "pcap"
pcap_file = "{cap}"
rcvbuf = 16777216

[[socket]]
name = "cap6"
local = "[{ENGINE_V6}]:5555"
handler = "count"
rcvbuf = 16777216
"#,
        eal = eal(
            "steer-split",
            &[&format!(
                "net_pcap0,rx_pcap={},rx_pcap={}",
                a.display(),
                b.display()
            )]
        )
        .replace("lcores = \"0,1\"", "lcores = \"0@0,1@1,2@0\""),
        cap = cap.display(),
    );
    let cfg = write(&dir, "c.toml", &text);
    let json = dir.join("c.json");
    let o = run(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = stats_json(&json);
    check_books(&j);
    let ip = &j["ip"];
    let r = &j["reassembly"];
    assert_eq!(n(&ip["IpReasmOKs"]), (N / 2) as u64, "{ip}");
    assert_eq!(n(&ip["Ip6ReasmOKs"]), (N / 2) as u64, "{ip}");
    assert_eq!(n(&ip["IpReasmFails"]) + n(&ip["Ip6ReasmFails"]), 0, "{ip}");
    assert_eq!(n(&r["fragments"]), frag_count, "{r}");
    assert_eq!(n(&r["merged"]), frag_count, "{r}");
    // Each datagram's fragments came in on both lcores: whichever owns it,
    // the fragments of the other lcore crossed (1 or 2 of 3).
    assert!(n(&r["steered"]) >= N as u64, "{r}");
    assert_eq!(n(&r["steer_full"]), 0, "{r}");
    assert_eq!(n(&socket_named(&j, "cap4")["delivered"]), (N / 2) as u64);
    assert_eq!(n(&socket_named(&j, "cap6")["delivered"]), (N / 2) as u64);
    // The pcap holds each IPv4 datagram whole, its payload byte for byte.
    let mut got = 0;
    for rec in udpdemux::pcap::PcapReader::open(&cap).unwrap() {
        let (_, frame) = rec.unwrap();
        let off = udpdemux::parse::Offload::default();
        let d = udpdemux::parse::parse(&frame, off).unwrap();
        let k = usize::from(d.sport - 1000);
        let want = datagram(false, k, 3000);
        let w = udpdemux::parse::parse(&want, off).unwrap();
        assert_eq!(d.payload(&frame), w.payload(&want), "datagram {k}");
        got += 1;
    }
    assert_eq!(got, N / 2);
}
