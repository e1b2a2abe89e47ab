//! A network namespace with one end of a veth pair in it, for tests where
//! the kernel is the peer of an engine on `net_af_packet` (the same setup
//! as `netns_e2e`). Addresses: 198.18.0.0/15 and fd00::/8 only.
#![allow(dead_code)]
use std::process::{Command, Output};

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
}

impl Net {
    /// `tag` keeps names apart between test binaries running at once.
    pub fn create(tag: &str, v4: &str, v6: &str) -> Net {
        let pid = std::process::id();
        let net = Net {
            ns: format!("udx{tag}{pid}"),
            host: format!("u{tag}{}a", pid % 100_000),
            peer: format!("u{tag}{}b", pid % 100_000),
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
        must("ip", &["-n", ns, "addr", "add", v4, "dev", peer]);
        must("ip", &["-n", ns, "addr", "add", v6, "dev", peer, "nodad"]);
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
