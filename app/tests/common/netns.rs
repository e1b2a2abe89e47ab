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
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = cmd("ip", &["link", "del", &self.host]);
        let _ = cmd("ip", &["netns", "del", &self.ns]);
    }
}
