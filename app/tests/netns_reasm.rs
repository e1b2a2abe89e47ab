//! Fragment reassembly end to end with the kernel as the client: the
//! engine runs on one end of a veth pair with one RX lcore, so one
//! reassembly table (steering fragments between RX lcores:
//! `netns_steer`). Twice: through `net_pcap` live on the veth (`rx_iface_in`:
//! incoming frames only, else the engine would capture its own fragmented
//! replies and reassemble them as well), IPv4
//! and IPv6; and through `net_af_packet` (two queue pairs, both polled by
//! the one RX lcore), IPv6 only: DPDK 22.11's af_packet PMD joins its
//! sockets to a `PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG` group, so
//! the kernel reassembles IPv4 fragments before the PMD sees them (a
//! 3028-byte frame, cut to af_packet's 2048-byte frame slot), and no IPv4
//! fragment reaches the engine that way. In a network namespace this test creates, kernel UDP sockets
//! send 3000-byte datagrams (IPv4 and IPv6), which the kernel fragments at
//! the veth's 1500-byte MTU. The engine must reassemble them and its pcap
//! sockets must hold every datagram whole, byte for byte, with `ReasmOKs`
//! counted and the books balanced. Then echo sockets answer 1500-, 3000-,
//! 9000- and 65 000-byte datagrams, IPv4 and IPv6: every reply is over the
//! veth's 1500-byte MTU, so the engine sends it as fragments
//! (`FragOKs` / `FragCreates`), and the kernel client must get each one
//! back whole, byte for byte. Last, since this kernel has no `netem`, a
//! python client ([`RAW`]) cuts 3000-, 9000- and 65 000-byte datagrams to
//! the echo sockets into fragments itself, shuffles them, interleaves the
//! datagrams, adds exact duplicates, and sends them through an
//! `AF_PACKET` socket (IPv4 on `net_pcap` only, for the reason above);
//! a kernel UDP socket must get every echo whole, the duplicates must be
//! dropped alone (Linux's `inet_frag_queue_insert`), and one datagram per
//! family whose fragments overlap must fail (`ReasmOverlaps`) and never be
//! echoed. Addresses: 198.18.0.0/24 and fd00::/64 inside the namespace
//! only.
//!
//! Needs root, `ip`, `ethtool` and `python3`; without them it says why and
//! passes (in CI, where they are installed, a missing one is a failure).
mod common;
use common::*;
#[path = "common/netns.rs"]
mod netns;
use netns::{can_run, EngineToml, Net, CLIENT_V4, CLIENT_V6, ENGINE_V4, ENGINE_V6};

use std::time::Duration;

use udpdemux::parse::{parse, Offload};
use udpdemux::pcap::PcapReader;

const COUNT: usize = 20;
const SIZE: usize = 3000;
/// Echoed datagrams: every reply is over the 1500-byte MTU.
const ECHO_SIZES: [usize; 4] = [1500, 3000, 9000, 65_000];
/// Datagrams the raw client cuts into fragments itself.
const RAW_SIZES: [usize; 3] = [3000, 9000, 65_000];

/// The kernel-side client: COUNT numbered datagrams of SIZE bytes to each
/// pcap socket (a first small one to resolve the neighbour), printed as hex.
const CLIENT: &str = r#"
import json, socket, sys, time
v4, v6, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def payload(i):
    head = b"%06d|" % i
    return (head + bytes((i * 13 + k) % 256 for k in range(size)))[:size]
out = {}
for name, fam, addr in [("v4", socket.AF_INET, v4), ("v6", socket.AF_INET6, v6)]:
    s = socket.socket(fam, socket.SOCK_DGRAM)
    # Resolve the engine's MAC first (ARP / ND), with a datagram the pcap
    # socket does not get (port 9 has no socket).
    s.sendto(b"hello", (addr, 9))
    time.sleep(0.5)
    sent = []
    for i in range(count):
        p = payload(i)
        assert s.sendto(p, (addr, 5555)) == len(p)
        sent.append(p.hex())
        time.sleep(0.01)
    out[name] = sent
# Echo, IPv4 and IPv6, of datagrams the kernel fragments on the way in
# (IPv6 over the 1280-byte route MTU the test set) and the engine must
# fragment on the way out (its replies are over the 1500-byte MTU): each
# must come back whole, byte for byte. Every send is listed (a lost reply
# is sent again, at most three times).
sizes4 = [int(x) for x in sys.argv[5].split(",") if x]
sizes6 = [int(x) for x in sys.argv[6].split(",") if x]
ok, sends = 0, []
for fam, addr, sizes, six in [(socket.AF_INET, v4, sizes4, False), (socket.AF_INET6, v6, sizes6, True)]:
    e = socket.socket(fam, socket.SOCK_DGRAM)
    e.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    e.settimeout(3.0)
    for size in sizes:
        p = (b"%06d|" % size + bytes((size * 7 + k) % 251 for k in range(size)))[:size]
        for attempt in range(3):
            assert e.sendto(p, (addr, 7)) == len(p)
            sends.append([six, size])
            try:
                got, frm = e.recvfrom(70000)
            except socket.timeout:
                continue
            if got == p:
                ok += 1
            break
out["echo_ok"], out["echo_sends"] = ok, sends
print(json.dumps(out))
"#;

/// The shuffled-fragments client (the kernel here has no `netem`): UDP
/// datagrams to the echo sockets, from a kernel UDP socket's port so that
/// socket gets the echoes, cut into fragments by the script itself (IPv4:
/// 8-byte offsets, MF, fresh IDs, header checksum; IPv6: RFC 8200 fragment
/// header; the UDP checksum over the whole datagram), shuffled, the
/// datagrams interleaved, exact duplicates of some fragments added, and
/// sent through an `AF_PACKET` socket on the namespace's veth end to the
/// engine's MAC. Then one datagram whose fragments overlap. Every echo
/// must come back whole, byte for byte, and nothing for the overlapping
/// one. Arguments: engine MAC, interface, engine IPv4 and IPv6, client
/// IPv4 and IPv6, IPv4 sizes, IPv6 sizes (an empty list skips the family),
/// seed.
const RAW: &str = r#"
import json, random, socket, struct, sys, time
mac, ifname, e4, e6, c4, c6 = sys.argv[1:7]
sizes = {False: [int(x) for x in sys.argv[7].split(",") if x],
         True: [int(x) for x in sys.argv[8].split(",") if x]}
rng = random.Random(int(sys.argv[9]))
MTU = 1500
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind((ifname, 0))
eth = {six: bytes.fromhex(mac.replace(":", "")) + raw.getsockname()[4][:6]
       + (b"\x86\xdd" if six else b"\x08\x00") for six in (False, True)}
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
def udp(six, src, dst, sport, payload):
    n = 8 + len(payload)
    fam = socket.AF_INET6 if six else socket.AF_INET
    s, d = socket.inet_pton(fam, src), socket.inet_pton(fam, dst)
    pseudo = s + d + (struct.pack("!I3xB", n, 17) if six else struct.pack("!xBH", 17, n))
    c = csum(pseudo + struct.pack("!HHHH", sport, 7, n, 0) + payload) or 0xFFFF
    return struct.pack("!HHHH", sport, 7, n, c) + payload
def frame(six, src, dst, ident, off, chunk, more):
    fam = socket.AF_INET6 if six else socket.AF_INET
    s, d = socket.inet_pton(fam, src), socket.inet_pton(fam, dst)
    if six:
        # RFC 8200: the fragment header (next header UDP, offset in 8-byte
        # units in the top 13 bits, M the lowest bit, a 32-bit ID).
        fh = struct.pack("!BBHI", 17, 0, off | more, ident)
        ip = struct.pack("!IHBB", 6 << 28, 8 + len(chunk), 44, 64) + s + d + fh
    else:
        h = struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(chunk), ident,
                        (off // 8) | (0x2000 if more else 0), 64, 17, 0) + s + d
        ip = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return eth[six] + ip + chunk
def cut(six, src, dst, ident, d):
    room = (MTU - (48 if six else 20)) & ~7
    return [frame(six, src, dst, ident, o, d[o:o + room], o + room < len(d))
            for o in range(0, len(d), room)]
out = {"sends": [], "dups": [0, 0], "overlap_frags": [0, 0], "ok": 0, "bad": [], "stray": 0}
ids = rng.sample(range(1, 65536), 16)
for six in (False, True):
    if not sizes[six]:
        continue
    fam = socket.AF_INET6 if six else socket.AF_INET
    src, dst = (c6, e6) if six else (c4, e4)
    k = socket.socket(fam, socket.SOCK_DGRAM)
    k.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    k.bind((src, 0))
    sport = k.getsockname()[1]
    want, seqs = [], []
    for size in sizes[six]:
        p = (b"raw%d|%06d|" % (six, size) + bytes(rng.randrange(256) for _ in range(size)))[:size]
        want.append(p)
        ident = rng.randrange(1, 1 << 32) if six else ids.pop()
        fr = cut(six, src, dst, ident, udp(six, src, dst, sport, p))
        rng.shuffle(fr)
        # Exact duplicates of about a third of the fragments, each sent
        # after its original and before the datagram's last fragment (a
        # duplicate after completion would open a new datagram).
        seq = fr[:-1]
        for f in fr[:-1]:
            if rng.random() < 0.35:
                at = seq.index(f) + 1
                seq.insert(rng.randint(at, len(seq)), f)
                out["dups"][six] += 1
        seqs.append(seq + fr[-1:])
        out["sends"].append([six, size])
    # Overlap: the last fragment, the first, then bytes 1000..2000, over
    # the first's end (not inside it): the engine drops the whole datagram
    # (ReasmOverlaps) and never echoes it.
    op = (b"ovl%d|" % six + bytes(rng.randrange(256) for _ in range(3000)))[:3000]
    od = udp(six, src, dst, sport, op)
    ident = rng.randrange(1, 1 << 32) if six else ids.pop()
    room = (MTU - (48 if six else 20)) & ~7
    last = (len(od) // room) * room
    ov = [frame(six, src, dst, ident, last, od[last:], 0),
          frame(six, src, dst, ident, 0, od[:room], 1),
          frame(six, src, dst, ident, 1000, od[1000:2000], 1)]
    out["overlap_frags"][six] += len(ov)
    # Interleave the datagrams, each keeping its own order, then the
    # overlap. Paced: net_pcap's capture ring holds few frames, and the RX
    # lcore that drains it also sends the fragmented echoes.
    order = []
    while seqs:
        q = rng.choice(seqs)
        order.append(q.pop(0))
        if not q:
            seqs.remove(q)
    for f in order + ov:
        raw.send(f)
        time.sleep(0.002)
    k.settimeout(3.0)
    while want:
        try:
            got = k.recv(70000)
        except socket.timeout:
            break
        if got in want:
            want.remove(got)
            out["ok"] += 1
        else:
            out["bad"].append(got[:16].hex())
    out["bad"] += ["missing " + w[:12].decode() for w in want]
    # Nothing more may come (the overlapping datagram in particular).
    k.settimeout(1.0)
    try:
        got = k.recv(70000)
        out["stray"] += 1
        out["bad"].append("stray " + got[:12].hex())
    except socket.timeout:
        pass
print(json.dumps(out))
"#;

#[derive(Clone, Copy, PartialEq)]
enum Vdev {
    Pcap,
    AfPacket,
}

#[test]
fn kernel_fragments_are_reassembled_and_delivered_whole() {
    if !can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    case(Vdev::Pcap);
    case(Vdev::AfPacket);
}

fn case(vdev: Vdev) {
    let net = Net::new("r");
    let dir = scratch("netns-reasm");
    let conf = match vdev {
        Vdev::Pcap => EngineToml::pcap_live(&net),
        Vdev::AfPacket => EngineToml::af_packet(&net, 2),
    };
    let cap4 = dir.join("cap4.pcap");
    let cap6 = dir.join("cap6.pcap");
    let sockets = format!(
        r#"
[[socket]]
name = "echo6"
local = "[::]:7"
handler = "echo"
rcvbuf = 8388608

[[socket]]
name = "echo4"
local = "0.0.0.0:7"
handler = "echo"
rcvbuf = 8388608

[[socket]]
name = "cap4"
local = "{ENGINE_V4}:5555"
handler = "pcap"
pcap_file = "{cap4}"
rcvbuf = 8388608

[[socket]]
name = "cap6"
local = "[{ENGINE_V6}]:5555"
handler = "pcap"
pcap_file = "{cap6}"
rcvbuf = 8388608
"#,
        cap4 = cap4.display(),
        cap6 = cap6.display(),
    );
    let text = conf
        .table("[reassembly]\ntimeout_secs = 5")
        .text(eal, "netns-reasm", &sockets);
    let (engine, _, json) = EngineProc::start_ready(&dir, &text);
    // IPv6 to the engine over a 1280-byte route MTU (the veth stays at
    // 1500): 1400-byte datagrams fragment, and the engine's 1462-byte
    // echo replies still fit the link.
    let o = net.exec(&[
        "ip",
        "-6",
        "route",
        "add",
        &format!("{ENGINE_V6}/128"),
        "dev",
        &net.peer,
        "mtu",
        "1280",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // IPv4 through af_packet arrives defragmented by the kernel, cut to
    // the 2048-byte frame slot: only 1500 bytes (1542-byte frame) fit.
    let sizes4: &[usize] = match vdev {
        Vdev::Pcap => &ECHO_SIZES,
        Vdev::AfPacket => &ECHO_SIZES[..1],
    };
    let client = net.exec(&[
        "python3",
        "-c",
        CLIENT,
        ENGINE_V4,
        ENGINE_V6,
        &COUNT.to_string(),
        &SIZE.to_string(),
        &csv(sizes4),
        &csv(&ECHO_SIZES),
    ]);
    // Fragments the client built itself, shuffled, interleaved and
    // duplicated, then an overlapping datagram: IPv6 on both vdevs, IPv4
    // through net_pcap only (af_packet's fanout group defragments IPv4).
    let raw4: &[usize] = match vdev {
        Vdev::Pcap => &RAW_SIZES,
        Vdev::AfPacket => &[],
    };
    let mac = net.host_mac();
    let seed = std::process::id().to_string();
    let rawc = net.exec(&[
        "python3",
        "-c",
        RAW,
        &mac,
        &net.peer,
        ENGINE_V4,
        ENGINE_V6,
        CLIENT_V4.split('/').next().unwrap(),
        CLIENT_V6.split('/').next().unwrap(),
        &csv(raw4),
        &csv(&RAW_SIZES),
        &seed,
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, log) = engine.stop();
    assert_ran(&client, "client", &log);
    assert_ran(&rawc, "raw fragment client", &log);
    assert!(status.success(), "engine exit {status}; log:\n{log}");
    let c: serde_json::Value = serde_json::from_slice(&client.stdout).expect("client JSON");
    let j = stats_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);

    for (fam, cap, port_v6) in [("v4", &cap4, false), ("v6", &cap6, true)] {
        if vdev == Vdev::AfPacket && !port_v6 {
            continue;
        }
        let sent = unhex_all(&c[fam]);
        assert_eq!(sent.len(), COUNT);
        let mut got = Vec::new();
        for rec in PcapReader::open(cap).expect("open pcap") {
            let (_, frame) = rec.expect("pcap record");
            let d = parse(&frame, Offload::default()).expect("a whole UDP datagram");
            assert_eq!(d.dport, 5555);
            assert_eq!(d.family == udpdemux::parse::Family::V6, port_v6);
            got.push(d.payload(&frame).unwrap().to_vec());
        }
        assert_eq!(
            got.len(),
            COUNT,
            "{fam}: datagrams in the pcap\n{}\n{}\n{}\n{}\n{}",
            j["ip"],
            j["reasons"],
            j["udp"],
            j["responder"],
            j["rx_packets"]
        );
        assert!(
            got == sent,
            "{fam}: the pcap holds the datagrams sent, byte for byte"
        );
    }
    // 3000 bytes: three fragments each (IPv4 1480 + 1480 + 48 at the
    // veth's 1500 MTU).
    let ip = &j["ip"];
    // IPv4 through af_packet arrives defragmented by the kernel (see the
    // top): nothing for the engine's table.
    let v4 = if vdev == Vdev::Pcap { COUNT as u64 } else { 0 };
    // The echo sockets: every datagram answered whole, byte for byte,
    // from its reassembled chain, the reply cut into fragments.
    let kernel_sends = echo_sends(&c["echo_sends"]);
    let asked = sizes4.len() + ECHO_SIZES.len();
    assert_eq!(n(&c["echo_ok"]), asked as u64, "{c}");
    // The raw client: every echo back whole, nothing for the overlap.
    let rc: serde_json::Value = serde_json::from_slice(&rawc.stdout).expect("raw client JSON");
    let raw_sends = echo_sends(&rc["sends"]);
    assert_eq!(raw_sends.len(), raw4.len() + RAW_SIZES.len(), "{rc}");
    let why = format!("{rc}\n{}\n{}\n{}", j["ip"], j["reassembly"], j["reasons"]);
    assert_eq!(n(&rc["ok"]), raw_sends.len() as u64, "{why}");
    assert_eq!(rc["bad"], serde_json::json!([]), "{why}");
    let mut sends = kernel_sends.clone();
    sends.extend_from_slice(&raw_sends);
    check_fragmented_echo(&j, &sends);
    // IPv6 requests came over the 1280-byte route MTU; IPv4 ones at 1500,
    // and through af_packet the kernel reassembled them.
    let echo6: Vec<usize> = kernel_sends.iter().filter(|s| s.0).map(|s| s.1).collect();
    let echo4: Vec<usize> = kernel_sends.iter().filter(|s| !s.0).map(|s| s.1).collect();
    // The raw client's datagrams, cut at 1500 by the script, per family:
    // datagrams, their fragments, the exact duplicates added, and the
    // overlapping datagram's fragments (all dropped with it).
    let raw = |six: bool| {
        let mine = raw_sends.iter().filter(|s| s.0 == six);
        let fam = six as usize;
        (
            mine.clone().count() as u64,
            mine.map(|s| fragments(six, s.1, 1500)).sum::<u64>(),
            n(&rc["dups"][fam]),
            n(&rc["overlap_frags"][fam]),
        )
    };
    let (raw6, raw6_frags, dups6, ovl6) = raw(true);
    let (raw4n, raw4_frags, dups4, ovl4) = raw(false);
    assert!(dups6 > 0 && (raw4.is_empty() || dups4 > 0), "{rc}");
    assert_eq!(ovl6, 3, "{rc}");
    assert_eq!(ovl4, if raw4.is_empty() { 0 } else { 3 }, "{rc}");
    let v6 = COUNT as u64 + echo6.len() as u64 + raw6;
    assert_eq!(n(&ip["Ip6ReasmOKs"]), v6, "{ip}");
    // Three fragments for 3000 bytes (1232 + 1232 + 544 at the 1280 MTU).
    let v6_frags = 3 * COUNT as u64
        + echo6.iter().map(|&p| fragments(true, p, 1280)).sum::<u64>()
        + raw6_frags;
    assert_eq!(n(&ip["Ip6ReasmReqds"]), v6_frags + dups6 + ovl6, "{ip}");
    let (v4_oks, v4_frags) = if vdev == Vdev::Pcap {
        (
            v4 + echo4.len() as u64 + raw4n,
            3 * v4
                + echo4
                    .iter()
                    .map(|&p| fragments(false, p, 1500))
                    .sum::<u64>()
                + raw4_frags,
        )
    } else {
        (0, 0)
    };
    assert_eq!(n(&ip["IpReasmOKs"]), v4_oks, "{ip}");
    assert_eq!(n(&ip["IpReasmReqds"]), v4_frags + dups4 + ovl4, "{ip}");
    // The overlapping datagram is the only failure of each family sent
    // raw (`ReasmOverlaps` is also in `ReasmFails`, as in the kernel); a
    // duplicate fails nothing.
    let ovl_v4 = u64::from(!raw4.is_empty());
    for (k, want) in [
        ("IpReasmFails", ovl_v4),
        ("Ip6ReasmFails", 1),
        ("IpReasmOverlaps", ovl_v4),
        ("Ip6ReasmOverlaps", 1),
        ("IpReasmTimeout", 0),
        ("Ip6ReasmTimeout", 0),
    ] {
        assert_eq!(n(&ip[k]), want, "{k}: {ip}");
    }
    // The books in fragments: every one merged, except the duplicates
    // (dropped alone) and the overlapping datagram's (dropped with it).
    let r = &j["reassembly"];
    assert_eq!(n(&r["merged"]), v4_frags + v6_frags, "{r}");
    assert_eq!(n(&r["dropped"]), dups4 + dups6 + ovl4 + ovl6, "{r}");
    assert_eq!(n(&r["held"]), 0, "{r}");
    assert_eq!(
        n(&j["udp"]["UdpInDatagrams"]),
        v4 + echo4.len() as u64 + raw4n
    );
    assert_eq!(n(&j["udp"]["Udp6InDatagrams"]), v6);
    assert_eq!(j["hot_path_allocations"], 0);
}
