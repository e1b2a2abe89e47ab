//! A network namespace with one end of a veth pair in it, for tests where
//! the kernel is the peer of an engine on `net_af_packet` (the same setup
//! as `netns_e2e`), and the engine's config for the other end
//! ([`EngineToml`]). Addresses: 198.18.0.0/15 and fd00::/8 only.
#![allow(dead_code)]
use std::process::{Command, Output};

/// The engine's addresses on the host end, as most tests give its port.
pub const ENGINE_V4: &str = "198.18.0.1";
pub const ENGINE_V6: &str = "fd00::1";
/// The kernel's addresses on the namespace's end ([`Net::new`]).
pub const CLIENT_V4: &str = "198.18.0.2/24";
pub const CLIENT_V6: &str = "fd00::2/64";

pub fn cmd(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e}"))
}

pub fn must(prog: &str, args: &[&str]) -> Output {
    let o = cmd(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Whether this machine can run the test: root and the tools. In CI (`CI`
/// set) a missing piece is a failure, elsewhere the test says why and passes.
pub fn can_run(tools: &[&str]) -> bool {
    let in_ci = std::env::var_os("CI").is_some();
    if !dpdk_sys::os::is_root() {
        assert!(!in_ci, "CI must run this test as root");
        eprintln!("skipped: needs root (network namespaces, af_packet)");
        return false;
    }
    for p in tools {
        if !have(p) {
            assert!(
                !in_ci,
                "{p} is not installed: scripts/setup.sh must install it"
            );
            eprintln!("skipped: {p} is not installed (scripts/setup.sh installs it)");
            return false;
        }
    }
    true
}

/// The namespace and the veth pair; removed on drop.
pub struct Net {
    pub ns: String,
    pub host: String,
    pub peer: String,
    /// One namespace (so one `net_af_packet` engine) at a time per test
    /// binary: DPDK 22.11's af_packet PMD names its `PACKET_FANOUT` group
    /// `(getpid() ^ ifindex) & 0xffff`, groups are per network namespace,
    /// and a second engine whose pid and interface XOR to the same id
    /// (consecutive pids and interface indexes do, easily) fails its probe
    /// with EINVAL: "could not set PACKET_FANOUT". Two tests of one binary
    /// run at once and start their engines side by side, so they take
    /// turns here (CI saw it once, 2026-12-01, in quic_echo.rs).
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_NET: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Net {
    /// `tag` keeps names apart between test binaries running at once.
    pub fn create(tag: &str, v4: &str, v6: &str) -> Net {
        let pid = std::process::id();
        // A test that panicked while holding it still released it.
        let turn = ONE_NET.lock().unwrap_or_else(|p| p.into_inner());
        let net = Net {
            ns: format!("udx{tag}{pid}"),
            host: format!("u{tag}{}a", pid % 100_000),
            peer: format!("u{tag}{}b", pid % 100_000),
            _one_at_a_time: turn,
        };
        let (ns, host, peer) = (net.ns.as_str(), net.host.as_str(), net.peer.as_str());
        must("ip", &["netns", "add", ns]);
        must(
            "ip",
            &["link", "add", host, "type", "veth", "peer", "name", peer],
        );
        must("ip", &["link", "set", peer, "netns", ns]);
        // The engine owns the host end: the host kernel must not chatter on it.
        must(
            "sysctl",
            &["-q", "-w", &format!("net.ipv6.conf.{host}.disable_ipv6=1")],
        );
        // Real checksums on the wire (veth would leave them to offload).
        must("ethtool", &["-K", host, "tx", "off", "rx", "off"]);
        must("ip", &["link", "set", host, "up"]);
        net.add_addr(v4);
        net.add_addr(v6);
        must(
            "ip",
            &[
                "netns", "exec", ns, "ethtool", "-K", peer, "tx", "off", "rx", "off",
            ],
        );
        must("ip", &["-n", ns, "link", "set", "lo", "up"]);
        must("ip", &["-n", ns, "link", "set", peer, "up"]);
        net
    }

    /// [`Net::create`] with the kernel at [`CLIENT_V4`] and [`CLIENT_V6`].
    pub fn new(tag: &str) -> Net {
        Net::create(tag, CLIENT_V4, CLIENT_V6)
    }

    /// Another address (`addr/len`) on the namespace's end; an IPv6 one
    /// without duplicate address detection, so usable at once.
    pub fn add_addr(&self, addr: &str) {
        let mut a = vec!["-n", &self.ns, "addr", "add", addr, "dev", &self.peer];
        if addr.contains(':') {
            a.push("nodad");
        }
        must("ip", &a);
    }

    /// A permanent neighbour entry in the namespace: `ip` is at `mac`.
    pub fn neigh_permanent(&self, ip: &str, mac: &str) {
        must(
            "ip",
            &[
                "-n",
                &self.ns,
                "neigh",
                "replace",
                ip,
                "lladdr",
                mac,
                "dev",
                &self.peer,
                "nud",
                "permanent",
            ],
        );
    }

    /// `ip netns exec` into the namespace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns.as_str()]).args(args);
        c
    }

    pub fn exec(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("ip netns exec")
    }

    /// The host end's MAC address (the engine's port).
    pub fn host_mac(&self) -> String {
        std::fs::read_to_string(format!("/sys/class/net/{}/address", self.host))
            .expect("host mac")
            .trim()
            .to_string()
    }

    /// The namespace's end's MAC address (the kernel's).
    pub fn peer_mac(&self) -> String {
        let o = self.exec(&["cat", &format!("/sys/class/net/{}/address", self.peer)]);
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    }
}

/// The engine's config for the host end of a [`Net`]: its `[eal]` table,
/// `[engine]` (stats every second), `[mempool]` (4095 mbufs), the port
/// with [`ENGINE_V4`]/24 and [`ENGINE_V6`]/64, and one RX lcore (id 1)
/// polling every RX queue; a test changes what it needs and adds the rest
/// (sockets, more lcores, further tables) in [`EngineToml::text`].
pub struct EngineToml {
    vdev: String,
    port: &'static str,
    rx_queues: usize,
    tx_queues: usize,
    /// The RX queues each RX lcore (ids 1, 2, ...) polls.
    rx_lcores: Vec<Vec<usize>>,
    /// The EAL's `lcores` map, when not `0,1`.
    lcores: Option<String>,
    stats: bool,
    /// Tables between `[engine]` and `[mempool]`.
    tables: String,
    mbufs: u32,
    addresses: Vec<String>,
}

impl EngineToml {
    /// `net_af_packet` on the host end with `qpairs` queue pairs.
    pub fn af_packet(net: &Net, qpairs: usize) -> EngineToml {
        EngineToml::with(
            format!("net_af_packet0,iface={},qpairs={qpairs}", net.host),
            "net_af_packet0",
            qpairs,
            qpairs,
        )
    }

    /// `net_pcap` live on the host end: incoming frames only
    /// (`rx_iface_in`, so the engine does not read back what it sends),
    /// one RX queue and two TX queues (the RX and the main lcore's).
    pub fn pcap_live(net: &Net) -> EngineToml {
        EngineToml::with(
            format!(
                "net_pcap0,rx_iface_in={h},tx_iface={h},tx_iface={h}",
                h = net.host
            ),
            "net_pcap0",
            1,
            2,
        )
    }

    fn with(vdev: String, port: &'static str, rx_queues: usize, tx_queues: usize) -> EngineToml {
        EngineToml {
            vdev,
            port,
            rx_queues,
            tx_queues,
            rx_lcores: vec![(0..rx_queues).collect()],
            lcores: None,
            stats: true,
            tables: String::new(),
            mbufs: 4095,
            addresses: vec![format!("{ENGINE_V4}/24"), format!("{ENGINE_V6}/64")],
        }
    }

    /// The EAL's `lcores` map (e.g. `0@0,1@1,2@1`).
    pub fn lcores(mut self, map: &str) -> EngineToml {
        self.lcores = Some(map.to_string());
        self
    }

    /// No periodic stats (`[engine]` left out).
    pub fn no_periodic_stats(mut self) -> EngineToml {
        self.stats = false;
        self
    }

    pub fn mbufs(mut self, n: u32) -> EngineToml {
        self.mbufs = n;
        self
    }

    /// The port's addresses (`addr/len`).
    pub fn addresses(mut self, a: &[&str]) -> EngineToml {
        self.addresses = a.iter().map(|x| x.to_string()).collect();
        self
    }

    /// One RX lcore per list (ids 1, 2, ...), polling those queues.
    pub fn rx_lcores(mut self, queues: &[&[usize]]) -> EngineToml {
        self.rx_lcores = queues.iter().map(|q| q.to_vec()).collect();
        self
    }

    /// A table (e.g. `[reassembly]`) before `[mempool]`.
    pub fn table(mut self, text: &str) -> EngineToml {
        self.tables += text;
        self.tables += "\n";
        self
    }

    /// The vdev argument of the host end.
    pub fn vdev(&self) -> &str {
        &self.vdev
    }

    /// The whole config: `eal(tag, &[vdev])` (the tests' `[eal]` table:
    /// this file is shared with the client crate's tests, which have none),
    /// the tables above, then `rest`.
    pub fn text(&self, eal: impl Fn(&str, &[&str]) -> String, tag: &str, rest: &str) -> String {
        let mut t = eal(tag, &[&self.vdev]);
        if let Some(map) = &self.lcores {
            t = t.replace("lcores = \"0,1\"", &format!("lcores = \"{map}\""));
        }
        if self.stats {
            t += "\n[engine]\nstats_interval_ms = 1000\n";
        }
        if !self.tables.is_empty() {
            t += "\n";
            t += &self.tables;
        }
        let list = |v: Vec<String>| v.join(", ");
        t += &format!(
            "\n[mempool]\nmbufs = {}\ncache = 64\n\n[[port]]\nname = \"{}\"\nrx_queues = {}\ntx_queues = {}\nrx_checksum_offload = false\naddresses = [{}]\n",
            self.mbufs,
            self.port,
            self.rx_queues,
            self.tx_queues,
            list(self.addresses.iter().map(|a| format!("{a:?}")).collect()),
        );
        for (i, queues) in self.rx_lcores.iter().enumerate() {
            let q = queues
                .iter()
                .map(|q| format!("\"{}:{q}\"", self.port))
                .collect();
            t += &format!(
                "\n[[lcore]]\nid = {}\nrole = \"rx\"\nqueues = [{}]\n",
                i + 1,
                list(q)
            );
        }
        t + rest
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = cmd("ip", &["link", "del", &self.host]);
        let _ = cmd("ip", &["netns", "del", &self.ns]);
    }
}

/// The kernel side of the send tests, run in the namespace: UDP receivers
/// (`name=addr:port`, IPv4 or IPv6 by the address), and an echo client to
/// `--echo addr:port:count` (3 ms apart) started by a `go` line on stdin;
/// a `send NAME HOST PORT PAYLOAD` line sends from receiver NAME's socket.
/// Prints `ready`, then `total N` each time the receivers' total grows;
/// on a `stop` line it reads for 0.3 s more and prints its JSON: per
/// receiver the payloads (text), the senders seen and the ECN codepoints
/// seen (`ecn`, IP_RECVTOS / IPV6_RECVTCLASS), and the echo
/// requests sent and replies received.
pub const KERNEL: &str = r#"
import json, select, socket, sys, time
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
socks, echo_to, echo_n = {}, None, 0
args = sys.argv[1:]
while args:
    a = args.pop(0)
    if a == "--echo":
        h, p, n = args.pop(0).rsplit(":", 2)
        echo_to, echo_n = (h, int(p)), int(n)
        continue
    name, hp = a.split("=", 1)
    h, p = hp.rsplit(":", 1)
    fam = socket.AF_INET6 if ":" in h else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.bind((h, int(p)))
    s.setblocking(False)
    # The ECN bits each datagram arrived with (IP_RECVTOS, IPV6_RECVTCLASS).
    if fam == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, 13, 1)
    else:
        s.setsockopt(socket.IPPROTO_IPV6, 66, 1)
    socks[s] = name
echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
echo.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
echo.setblocking(False)
got = {n: [] for n in socks.values()}
ecn = {n: [] for n in socks.values()}
frm = {n: [] for n in socks.values()}
echo_sent, echo_got, total = 0, 0, 0
next_echo, stop_at = None, None
print("ready", flush=True)
while stop_at is None or time.time() < stop_at:
    now = time.time()
    if next_echo is not None and echo_sent < echo_n and now >= next_echo:
        try:
            echo.sendto(b"echo%05d" % echo_sent, echo_to)
            echo_sent += 1
        except BlockingIOError:
            pass  # the kernel is still resolving the engine: next tick
        next_echo = now + 0.003
    r, _, _ = select.select(list(socks) + [echo, sys.stdin], [], [], 0.001)
    if sys.stdin in r:
        cmd = sys.stdin.readline().strip()
        if cmd == "go":
            next_echo = time.time()
        elif cmd.startswith("send "):
            _, name, h, p, payload = cmd.split(" ", 4)
            out = next(k for k, v in socks.items() if v == name)
            out.sendto(payload.encode(), (h, int(p)))
        elif cmd == "stop" or cmd == "":
            stop_at = time.time() + 0.3
        r.remove(sys.stdin)
    for s in r:
        while True:
            try:
                data, anc, _, src = s.recvmsg(65535, 64)
            except BlockingIOError:
                break
            if s is echo:
                echo_got += 1
                continue
            n = socks[s]
            for lvl, typ, b in anc:
                if (lvl, typ) in ((socket.IPPROTO_IP, 1), (socket.IPPROTO_IPV6, 67)):
                    e = b[0] & 3 if len(b) == 1 else int.from_bytes(b[:4], sys.byteorder) & 3
                    if e not in ecn[n]:
                        ecn[n].append(e)
            got[n].append(data.decode())
            a = "%s:%d" % (src[0], src[1])
            if a not in frm[n]:
                frm[n].append(a)
            total += 1
            print("total %d" % total, flush=True)
print(json.dumps({"got": got, "from": frm, "ecn": ecn, "echo_sent": echo_sent, "echo_got": echo_got}), flush=True)
"#;

/// [`KERNEL`] running in a namespace.
pub struct Kernel {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    total: u64,
}

impl Kernel {
    pub fn start(net: &Net, args: &[&str]) -> Kernel {
        use std::io::BufRead;
        let mut a = vec!["python3", "-c", KERNEL];
        a.extend_from_slice(args);
        let mut child = net
            .command(&a)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 in the namespace");
        let stdin = child.stdin.take().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let k = Kernel {
            child,
            stdin,
            lines,
            total: 0,
        };
        let first = k.lines.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(first.as_deref(), Ok("ready"), "kernel side did not start");
        k
    }

    pub fn say(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").expect("kernel side stdin");
    }

    /// Wait until the receivers got `n` datagrams in all (or `secs` pass);
    /// what they got.
    pub fn wait_total(&mut self, n: u64, secs: u64) -> u64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while self.total < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(t) = l.strip_prefix("total ") {
                        self.total = t.parse().unwrap();
                    }
                }
                Err(_) => break,
            }
        }
        self.total
    }

    /// Stop it; its JSON.
    pub fn finish(mut self) -> serde_json::Value {
        self.say("stop");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let l = self.lines.recv_timeout(left).expect("kernel side JSON");
            if l.starts_with('{') {
                let st = self.child.wait().unwrap();
                assert!(st.success(), "kernel side failed");
                return serde_json::from_str(&l).expect("kernel JSON");
            }
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
