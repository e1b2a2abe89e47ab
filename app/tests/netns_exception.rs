//! The exception path end to end: the engine runs on one end of a veth pair
//! through `net_af_packet` (as in `netns_e2e`), with `[exception]` making a
//! `net_tap` interface on the host. The host's kernel answers on that tap:
//! `socat TCP-LISTEN` and `ping` reach it from a kernel client in the
//! namespace, through the engine both ways, while UDP to the engine's
//! sockets still lands in the sockets; a 3000-byte ping -6 (fragments, not
//! UDP) reaches the kernel whole. Addresses: 198.18.0.0/24 and
//! fd00:e::/64 only (the engine's .1/::1, the tap's .10/::10, the
//! client's .2/::2). The tap is in the host's namespace, whose own network
//! may use fd00::/64 (this machine's does): the kernel would drop echo
//! requests that come from one of its own addresses.
//!
//! On a real server the NIC belongs to DPDK and the kernel never sees its
//! frames; a veth end under `net_af_packet` is still the kernel's, so an
//! nftables `netdev` ingress chain drops everything the kernel would receive
//! on it (the packet socket the PMD reads is served before that hook). Every
//! frame the kernel gets from the client then came through the engine and
//! the tap.
//!
//! Needs root, `ip`, `ethtool`, `ping`, `python3`, `socat`, `nft`, `sysctl`.
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::{can_run, cmd, must, EngineToml, Net, CLIENT_V4, ENGINE_V4};

use std::time::{Duration, Instant};

const ENGINE_V6: &str = "fd00:e::1";
const TAP_V4: &str = "198.18.0.10";
const TAP_V6: &str = "fd00:e::10";
const CLIENT_V6: &str = "fd00:e::2/64";
const TCP_PORT: &str = "7777";
/// UDP to the tap's address: no engine socket has it, so with
/// `unbound_udp` it goes to the kernel, where a socat receives it.
const KERNEL_UDP_PORT: &str = "5300";
const COUNT_N: usize = 300;
const KERNEL_UDP_N: usize = 40;
const TCP_BYTES: usize = 256 * 1024;

/// The client in the namespace: one TCP connection to the tap's address
/// sending a file and reading the echo into another; then datagrams to the
/// engine's count sockets and to the kernel's UDP port. Prints JSON.
const CLIENT: &str = r#"
import json, socket, sys, threading, time
tap, port, send_path, echo_path, v4, v6, kport, n, kn = sys.argv[1:10]
n, kn = int(n), int(kn)
data = open(send_path, "rb").read()
s = socket.create_connection((tap, int(port)), timeout=10)
got = bytearray()
def rd():
    while len(got) < len(data):
        b = s.recv(65536)
        if not b:
            break
        got.extend(b)
t = threading.Thread(target=rd)
t.start()
s.sendall(data)
t.join(15)
s.close()
open(echo_path, "wb").write(bytes(got))
def burst(fam, addr, port, count, tag):
    u = socket.socket(fam, socket.SOCK_DGRAM)
    sent = 0
    for i in range(count):
        if u.sendto(b"%s%05d\n" % (tag, i), (addr, port)) > 0:
            sent += 1
        if i % 16 == 15:
            time.sleep(0.003)
    return sent
out = {"tcp_echoed": len(got)}
out["count4"] = burst(socket.AF_INET, v4, 9, n, b"c4")
out["count6"] = burst(socket.AF_INET6, v6, 9, n, b"c6")
out["kernel_udp"] = burst(socket.AF_INET, tap, int(kport), kn, b"ku")
print(json.dumps(out))
"#;

/// The nftables table that keeps the host kernel off the engine's veth end.
struct KernelOff(String);

impl KernelOff {
    fn on(dev: &str) -> KernelOff {
        let t = KernelOff(format!("udxexc{}", std::process::id()));
        must("nft", &["add", "table", "netdev", &t.0]);
        must(
            "nft",
            &[
                "add",
                "chain",
                "netdev",
                &t.0,
                "in",
                &format!(
                    "{{ type filter hook ingress device \"{dev}\" priority 0; policy drop; }}"
                ),
            ],
        );
        t
    }
}

impl Drop for KernelOff {
    fn drop(&mut self) {
        let _ = cmd("nft", &["delete", "table", "netdev", &self.0]);
    }
}

/// A child process killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// 256 KiB that no two offsets share by accident (a 64-bit LCG's high bytes).
fn payload() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..TCP_BYTES)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

#[test]
fn the_kernel_behind_the_tap_serves_tcp_and_ping_while_udp_stays_in_the_engine() {
    if !can_run(&["ip", "ethtool", "ping", "python3", "sysctl", "socat", "nft"]) {
        return;
    }
    let net = Net::create("x", CLIENT_V4, CLIENT_V6);
    let tap = format!("udx-h{}", std::process::id() % 100_000);
    let dir = scratch("exception");
    // Two queue pairs: the RX lcore (responder, writes to the tap) and the
    // main lcore (the kernel's frames out of the port) each need a TX
    // queue of their own.
    let rest = format!(
        r#"
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

# Well above what this test sends in a burst (256 KiB of TCP at once):
# every frame must reach the kernel for the byte-for-byte check.
[exception]
device = "net_tap0,iface={tap}"
unbound_udp = true
rate_pps = 100000
burst = 2000
"#
    );
    let text = EngineToml::af_packet(&net, 2)
        .addresses(&[&format!("{ENGINE_V4}/24"), &format!("{ENGINE_V6}/64")])
        .text(eal, "exception", &rest);
    let cfg = write(&dir, "c.toml", &text);
    let check = run(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(check.status.success(), "check: {}", stdout(&check));
    let _off = KernelOff::on(&net.host);
    let json = dir.join("c.json");
    let mut engine = EngineProc::start(&cfg, &json);
    engine.wait_ready();

    // The tap is the kernel's face of the engine's port: same MAC.
    let tap_mac = std::fs::read_to_string(format!("/sys/class/net/{tap}/address"))
        .unwrap_or_else(|e| panic!("tap {tap}: {e}"));
    assert_eq!(
        tap_mac.trim(),
        net.host_mac(),
        "the tap takes the port's MAC"
    );
    must("ip", &["addr", "add", &format!("{TAP_V4}/24"), "dev", &tap]);
    must(
        "ip",
        &["addr", "add", &format!("{TAP_V6}/64"), "dev", &tap, "nodad"],
    );
    must("ip", &["link", "set", &tap, "up"]);

    let sent = payload();
    let send_path = write(&dir, "send.bin", "");
    std::fs::write(&send_path, &sent).unwrap();
    let recv_path = dir.join("recv.bin");
    let echo_path = dir.join("echo.bin");
    let kudp_path = dir.join("kernel-udp.txt");
    // The host's services on the tap's address: a TCP echo that also keeps
    // what it received, and a UDP receiver.
    let _tcp = Child(
        std::process::Command::new("socat")
            .args([
                &format!("TCP-LISTEN:{TCP_PORT},bind={TAP_V4},reuseaddr"),
                &format!("SYSTEM:tee {}", recv_path.display()),
            ])
            .spawn()
            .expect("socat TCP"),
    );
    let _udp = Child(
        std::process::Command::new("socat")
            .args([
                "-u",
                &format!("UDP-RECV:{KERNEL_UDP_PORT},bind={TAP_V4}"),
                &format!("CREATE:{}", kudp_path.display()),
            ])
            .spawn()
            .expect("socat UDP"),
    );
    // socat listening (checked from the host's side, not through the engine).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&cmd("ss", &["-ltn"]).stdout)
        .contains(&format!("{TAP_V4}:{TCP_PORT}"))
    {
        assert!(Instant::now() < deadline, "socat is not listening");
        std::thread::sleep(Duration::from_millis(20));
    }

    let client = net.exec(&[
        "python3",
        "-c",
        CLIENT,
        TAP_V4,
        TCP_PORT,
        send_path.to_str().unwrap(),
        echo_path.to_str().unwrap(),
        ENGINE_V4,
        ENGINE_V6,
        KERNEL_UDP_PORT,
        &COUNT_N.to_string(),
        &KERNEL_UDP_N.to_string(),
    ]);
    // -w: ping sends until it has its replies or 10 s pass, so a reply lost
    // while this shared machine stalls the engine (it pauses processes
    // for measurements) is sent again rather than failing the test.
    let ping4 = net.exec(&["ping", "-c", "3", "-i", "0.2", "-w", "10", TAP_V4]);
    let ping6 = net.exec(&["ping", "-6", "-c", "3", "-i", "0.2", "-w", "10", TAP_V6]);
    // A 3000-byte echo over IPv6: fragments both ways (not UDP, so the
    // kernel's). Not over IPv4: af_packet's fanout reassembles IPv4
    // fragments before the PMD sees them (docs/design.md, net_af_packet
    // and IPv4 fragments).
    let big6 = net.exec(&[
        "ping", "-6", "-c", "2", "-i", "0.2", "-w", "10", "-s", "3000", TAP_V6,
    ]);
    let neigh4 =
        String::from_utf8_lossy(&net.exec(&["ip", "neigh", "show", TAP_V4]).stdout).into_owned();
    std::thread::sleep(Duration::from_millis(300));
    let (status, log) = engine.stop();

    assert_ran(&client, "client", &log);
    let c: serde_json::Value = serde_json::from_slice(&client.stdout).expect("client JSON");
    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let j = stats_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(n(&j["hot_path_allocations"]), 0);

    // TCP both ways, byte for byte: what socat got and what came back.
    let recv = std::fs::read(&recv_path).expect("socat's copy");
    let echo = std::fs::read(&echo_path).expect("client's echo");
    assert_eq!(recv.len(), sent.len(), "bytes the kernel received");
    assert!(
        recv == sent,
        "the kernel received other bytes than were sent"
    );
    assert_eq!(echo.len(), sent.len(), "bytes echoed back: {c}");
    assert!(echo == sent, "the echo differs from what was sent");

    // ping to the tap's addresses: answered by the kernel, not the responder.
    let p4 = String::from_utf8_lossy(&ping4.stdout).into_owned();
    let p6 = String::from_utf8_lossy(&ping6.stdout).into_owned();
    assert!(
        ping4.status.success() && p4.contains("3 received"),
        "ping: {p4}\n{log}"
    );
    assert!(
        ping6.status.success() && p6.contains("3 received"),
        "ping -6: {p6}\n{log}"
    );
    let pb = String::from_utf8_lossy(&big6.stdout).into_owned();
    assert!(
        big6.status.success() && pb.contains("2 received"),
        "ping -6 -s 3000: {pb}\n{} {}\n{log}",
        j["exception_path"],
        j["reasons"]
    );
    let r = &j["responder"];
    assert_eq!(
        n(&r["icmp_echo_replies"]) + n(&r["icmp6_echo_replies"]),
        0,
        "{r}"
    );
    // The fragments went to the kernel whole, none to the drop counters.
    assert_eq!(n(&j["reassembly"]["fragments"]), 0, "{}", j["reassembly"]);
    for fam in ["v4", "v6"] {
        for reason in ["fragment_first", "fragment_later"] {
            let v = j["reasons"][fam][reason].as_u64().unwrap_or(0);
            assert_eq!(v, 0, "{fam} {reason}: {}", j["reasons"]);
        }
    }
    // The client resolved the tap's address to the port's MAC through the
    // kernel's ARP reply (the engine answers only for its own address).
    assert!(
        neigh4.contains(&net.host_mac()),
        "ARP entry for {TAP_V4}: {neigh4:?}"
    );

    // UDP to the engine's sockets: all in the sockets, none to the kernel.
    for name in ["count4", "count6"] {
        let s = socket_named(&j, name);
        assert_eq!(n(&s["offered"]), n(&c[name]), "{name}: {s}");
        assert_eq!(n(&s["consumed"]), COUNT_N as u64, "{name}: {s}");
    }
    assert_eq!(n(&j["udp"]["UdpInDatagrams"]), COUNT_N as u64);
    assert_eq!(n(&j["udp"]["Udp6InDatagrams"]), COUNT_N as u64);
    // UDP to a port no socket has: the kernel's (unbound_udp), all of it.
    let x = &j["exception_path"];
    assert_eq!(n(&x["unbound_udp"]), KERNEL_UDP_N as u64, "{x}");
    let kudp = std::fs::read_to_string(&kudp_path).unwrap_or_default();
    assert_eq!(
        kudp.lines().count(),
        KERNEL_UDP_N,
        "datagrams the kernel received"
    );
    assert_eq!(n(&j["udp"]["UdpNoPorts"]), 0);

    // Both ways counted; nothing lost on the way; the books hold the path.
    assert_eq!(n(&x["rate_limited"]), 0, "{x}");
    assert_eq!(n(&x["tx_errors"]), 0, "{x}");
    assert_eq!(n(&x["from_kernel_tx_errors"]), 0, "{x}");
    assert_eq!(n(&x["to_kernel"]), n(&j["exception"]), "{x}");
    // 256 KiB is at least 180 full segments each way, plus ACKs.
    assert!(n(&x["to_kernel"]) > 180 + KERNEL_UDP_N as u64, "{x}");
    assert!(n(&x["from_kernel"]) > 180, "{x}");
    let tap_port = j["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "net_tap0")
        .expect("the tap in the port list");
    assert_eq!(n(&tap_port["ipackets"]), n(&x["from_kernel"]), "{tap_port}");
}

/// The IPv4 header checksum (RFC 1071) of `h`, its own field zeroed first.
fn ip4_csum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    h[10..12].copy_from_slice(&(!(s as u16)).to_be_bytes());
}

/// A flood the kernel would have to take: a replay of TCP segments (one UDP
/// datagram to a bound socket per 8 frames) at full speed, with a
/// 2000-per-second limit. The RX lcore hands the kernel about that many a
/// second and drops the rest at the bucket; UDP goes to its socket only;
/// every frame is in exactly one place.
#[test]
fn a_tcp_flood_is_cut_by_the_rate_limit_and_udp_stays_with_its_socket() {
    use udpdemux::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    if !can_run(&[]) {
        return;
    }
    let dir = scratch("exc-flood");
    let frame = |dport: u16, tcp: bool, i: u16| -> Vec<u8> {
        let payload = [0x5au8; 40];
        let mut f = build::to_vec(&FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            vlans: &[],
            l3: L3Spec::V4 {
                src: "198.18.7.2".parse().unwrap(),
                dst: "198.18.7.1".parse().unwrap(),
                ttl: 64,
                options: &[],
                ident: i,
                frag: FragSpec::default(),
            },
            sport: 40000 + i,
            dport,
            payload: &payload,
            udp_csum: CsumMode::Correct,
        })
        .unwrap();
        if tcp {
            // The same packet as a TCP ACK segment: protocol 6, data
            // offset 5, flag ACK (the engine reads neither TCP checksum
            // nor payload; the kernel drops it: nothing here is its).
            f[14 + 9] = 6;
            ip4_csum(&mut f[14..34]);
            f[34 + 12] = 5 << 4;
            f[34 + 13] = 0x10;
        }
        f
    };
    let pcap = dir.join("flood.pcap");
    let mut w =
        udpdemux::pcap::PcapWriter::new(std::fs::File::create(&pcap).unwrap(), 65535).unwrap();
    for i in 0..512u16 {
        w.write_packet(u64::from(i) * 1000, &frame(9, i % 8 != 0, i))
            .unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let tap = format!("udx-f{}", std::process::id() % 100_000);
    let text = format!(
        r#"{eal}
[mempool]
mbufs = 4095
cache = 64

[[port]]
name = "net_pcap0"
addresses = ["198.18.7.1/24"]

[[lcore]]
id = 1
role = "rx"
queues = ["net_pcap0:0"]

[[socket]]
name = "udp"
local = "198.18.7.1:9"
handler = "count"

[exception]
device = "net_tap0,iface={tap}"
rate_pps = 2000
burst = 50
"#,
        eal = eal(
            "exc-flood",
            // Two TX queues (the RX lcore's and the main lcore's): net_pcap
            // has one per tx_pcap; what the kernel sends is written there.
            &[&format!(
                "net_pcap0,rx_pcap={},infinite_rx=1,tx_pcap={},tx_pcap={}",
                pcap.display(),
                dir.join("tx0.pcap").display(),
                dir.join("tx1.pcap").display()
            )]
        ),
    );
    let cfg = write(&dir, "c.toml", &text);
    let j = run_ok_json(&cfg, &["--duration", "1"]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    // The RX loop runs under the binary's counting allocator: the
    // exception path (bucket, tap write, bulk free) allocates nothing.
    assert_eq!(n(&j["hot_path_allocations"]), 0);
    let x = &j["exception_path"];
    let secs = j["seconds"].as_f64().unwrap();
    let rx = n(&j["rx_packets"]);
    let udp = n(&j["udp"]["UdpInDatagrams"]);
    // One in eight frames is UDP to the socket; all of them reach it.
    assert!(
        udp > 0 && udp * 8 >= rx - 8 && udp * 8 <= rx + 8,
        "udp {udp} of {rx}"
    );
    assert_eq!(n(&x["unbound_udp"]), 0, "{x}");
    // The rest is the exception path's: to the kernel at the limit, the
    // rest dropped at the bucket (a tap write refused counts too).
    let taken = n(&x["to_kernel"]) + n(&x["rate_limited"]) + n(&x["tx_errors"]);
    assert_eq!(taken, n(&j["exception"]), "{x}");
    assert_eq!(rx, udp + taken, "every frame in one place: {x}");
    let limit = (2000.0 * (secs + 0.5)) as u64 + 50;
    assert!(
        n(&x["to_kernel"]) + n(&x["tx_errors"]) <= limit,
        "{x} in {secs} s"
    );
    // At least the bucket's first burst; no more than the limit lets
    // through (above). Not a rate over `seconds`: the machine may pause the
    // engine for part of its run (the bucket then refills only to its burst).
    assert!(n(&x["to_kernel"]) >= 50, "the kernel got its share: {x}");
    assert!(n(&x["rate_limited"]) > 0, "the limit cut the flood: {x}");
    // Nothing left over for the parse-drop counters (listed when non-zero).
    assert_eq!(
        j["reasons"]["v4"]["not_udp"].as_u64().unwrap_or(0),
        0,
        "{}",
        j["reasons"]
    );
    eprintln!("{secs:.2} s: {rx} frames, {udp} UDP to the socket, exception {x}");
}
