//! `ClientSocket::send_burst` (issue 17): a client process sends through a
//! running engine (`udpdemux run` on `net_af_packet`, one end of a veth
//! pair) to kernel sockets in a network namespace made here. The engine
//! resolves the kernel's addresses by ARP and neighbour discovery (no
//! static neighbours), builds the frames from the client's requests and
//! transmits them from its main lcore, while a consumer lcore answers the
//! kernel's echo traffic on its own TX queue. The kernel must receive
//! exactly what was sent, and the exit JSON's `UdpOutDatagrams` must be
//! exactly what the kernel received. This test's process is the client
//! (one EAL per process: one test in this file).
mod common;
use common::*;
#[path = "../../app/tests/common/netns.rs"]
mod netns;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use udpdemux_client::Client;

/// Receivers on 198.18.0.2:7000 and [fd00::2]:7000, and an echo client to
/// the engine's echo socket (198.18.0.1:7), started by a line on stdin;
/// argv: seconds, echoes.
const KERNEL: &str = r#"
import json, select, socket, sys, time
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
dur, echo_n = float(sys.argv[1]), int(sys.argv[2])
def rx(fam, addr, port):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.bind((addr, port))
    s.setblocking(False)
    return s
socks = {"v4": rx(socket.AF_INET, "198.18.0.2", 7000), "v6": rx(socket.AF_INET6, "fd00::2", 7000)}
names = {s: k for k, s in socks.items()}
echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
echo.setblocking(False)
got = {k: [] for k in socks}
frm = {k: [] for k in socks}
echo_sent, echo_got = 0, 0
print("ready", flush=True)
t0 = time.time()
next_echo = None  # set by a line on stdin: after the resolution checks
while time.time() < t0 + dur:
    now = time.time()
    if next_echo is not None and echo_sent < echo_n and now >= next_echo:
        try:
            echo.sendto(b"echo%05d" % echo_sent, ("198.18.0.1", 7))
            echo_sent += 1
        except BlockingIOError:
            pass  # still resolving the engine's MAC: again at the next tick
        next_echo = now + 0.003
    r, _, _ = select.select(list(socks.values()) + [echo, sys.stdin], [], [], 0.001)
    if sys.stdin in r:
        sys.stdin.readline()
        next_echo = time.time()
        r.remove(sys.stdin)
    for s in r:
        while True:
            try:
                data, src = s.recvfrom(65535)
            except BlockingIOError:
                break
            if s is echo:
                echo_got += 1
                continue
            k = names[s]
            got[k].append(data.decode())
            a = "%s:%d" % (src[0], src[1])
            if a not in frm[k]:
                frm[k].append(a)
print(json.dumps({"got": got, "from": frm, "echo_sent": echo_sent, "echo_got": echo_got}), flush=True)
"#;

fn payloads(tag: &str, r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("{tag}{i:04}")).collect()
}

fn send(sock: &udpdemux_client::ClientSocket<'_>, to: &str, p: &[String]) -> usize {
    let to: SocketAddr = to.parse().unwrap();
    let d: Vec<(SocketAddr, &[u8])> = p.iter().map(|x| (to, x.as_bytes())).collect();
    sock.send_burst(&d)
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_client_sends_through_the_engine_to_kernel_sockets() {
    if !netns::can_run(&["ip", "ethtool", "python3", "sysctl"]) {
        return;
    }
    hugepages_ready(64).unwrap();
    let net = netns::Net::create("csd", "198.18.0.2/24", "fd00::2/64");
    let mut kernel = net
        .command(&["python3", "-c", KERNEL, "11", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 in the namespace");
    let mut go = kernel.stdin.take().unwrap();
    let mut out = BufReader::new(kernel.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    // Three queue pairs: the RX lcore, the consumer lcore (echo) and the
    // main lcore (the clients' TX rings) each transmit on their own.
    let body = r#"[engine]
duration_secs = 60

[mempool]
mbufs = 4095
cache = 128

[[port]]
name = "{port}"
rx_queues = 3
tx_queues = 3
rx_checksum_offload = false
addresses = ["198.18.0.1/24", "fd00::1/64"]

[[lcore]]
id = 1
role = "rx"
queues = ["{port}:0", "{port}:1", "{port}:2"]

[[lcore]]
id = 2
role = "consumer"

[[socket]]
name = "echo4"
local = "198.18.0.1:7"
handler = "echo"
rcvbuf = 4194304
"#;
    let mut engine = Engine::start(
        "send",
        &format!("net_af_packet0,iface={},qpairs=3", net.host),
        "net_af_packet0",
        Opts {
            lcores: "0@0,1@1,2@1".into(),
            ..Opts::body(body)
        },
    );
    let client = Client::attach(&engine.prefix).expect("attach");
    let o =
        |name: &str, local: &str| udpdemux::api::SocketOptions::new(name, local.parse().unwrap());
    let s4 = client
        .bind(o("ctx4", "198.18.0.1:6000"))
        .expect("bind ctx4");
    // A wildcard socket: the engine sends from the port's fd00::1.
    let s6 = client.bind(o("ctx6", "[::]:6001")).expect("bind ctx6");
    // Unresolved: three each (unres_qlen), none gives way.
    assert_eq!(send(&s4, "198.18.0.2:7000", &payloads("c", 0..3)), 3);
    assert_eq!(send(&s6, "[fd00::2]:7000", &payloads("d", 0..3)), 3);
    std::thread::sleep(Duration::from_millis(1000));
    // Resolved by now (the kernel spoke first to neither address: its echo
    // traffic starts only now); sent while that traffic is answered from
    // the consumer lcore.
    writeln!(go, "go").unwrap();
    for k in 0..20 {
        let r = k * 10 + 3..k * 10 + 13;
        assert_eq!(send(&s4, "198.18.0.2:7000", &payloads("c", r.clone())), 10);
        assert_eq!(send(&s6, "[fd00::2]:7000", &payloads("d", r)), 10);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let the main lcore drain the rings before the sockets close (a
    // closed client's ring is freed, counted as `client_freed`).
    std::thread::sleep(Duration::from_millis(500));
    s4.close().expect("close ctx4");
    s6.close().expect("close ctx6");
    client.detach();
    let status = kernel.wait().unwrap();
    let mut json = String::new();
    out.read_line(&mut json).unwrap();
    assert!(status.success(), "kernel side failed");
    let j = engine.stop();
    let k: serde_json::Value = serde_json::from_str(&json).expect("kernel JSON");

    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(strs(&k["got"]["v4"]), payloads("c", 0..203));
    assert_eq!(strs(&k["got"]["v6"]), payloads("d", 0..203));
    assert_eq!(strs(&k["from"]["v4"]), vec!["198.18.0.1:6000"]);
    assert_eq!(strs(&k["from"]["v6"]), vec!["fd00::1:6001"]);
    let s = &j["send"];
    assert_eq!(n(&s["client_requests"]), 406, "{s}");
    assert_eq!(
        (n(&s["bad_requests"]), n(&s["client_freed"])),
        (0, 0),
        "{s}"
    );
    assert_eq!(
        (n(&s["out_datagrams"][0]), n(&s["out_datagrams"][1])),
        (203, 203),
        "{s}"
    );
    assert_eq!(n(&s["neigh"]["resolved"]), 2, "{s}");
    assert_eq!(n(&s["neigh"]["released"]), 6, "{s}");
    let echo_got = n(&k["echo_got"]);
    assert_eq!(n(&k["echo_sent"]), 300);
    // Some of the echo traffic overlapped the client's sends (all of it,
    // unless the machine is so busy the engine's lcores, which share a
    // CPU here, miss frames: those are not sent, so not counted either).
    let echo = socket_named(&j, "echo4");
    assert!(echo_got > 0, "no echo reply: {echo} {}", j["ports"]);
    assert_eq!(n(&echo["tx"]), echo_got, "{echo}");
    let udp = &j["udp"];
    assert_eq!(n(&udp["UdpOutDatagrams"]), 203 + echo_got, "{udp}");
    assert_eq!(n(&udp["Udp6OutDatagrams"]), 203, "{udp}");
    assert_eq!(n(&udp["UdpSndbufErrors"]), 0, "{udp}");
}
