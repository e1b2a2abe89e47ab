//! Multicast through real DPDK (issue 18, part 4): a capture of datagrams
//! to groups, replayed by net_pcap, fanned out to every member socket.
//!
//! The kernel's rules (`__udp4_lib_mcast_deliver`, `ip_check_mc_rcu`): a
//! datagram to a group joined on the port goes to every socket on its port
//! bound to the group or to the wildcard (one that never joined included:
//! `IP_MULTICAST_ALL`), not to one bound to a unicast address; a group no
//! socket joined is dropped (`unjoined`); a joined group on a port no
//! socket has is `UdpIgnoredMulti`. Each member's pcap must hold exactly
//! the input's frames for its group, byte for byte and in order; a member
//! with a tiny rcvbuf and a slow consumer drops its own copies only; the
//! books (extended for copies) balance, every clone is back in its pool
//! and nothing was allocated on the RX path.
mod common;
use common::*;
use std::path::Path;

/// Classic pcap records' frames (24-byte file header, 16-byte record headers).
fn pcap_frames(p: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let n = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + n].to_vec());
        at += 16 + n;
    }
    assert_eq!(at, b.len(), "{}: trailing bytes", p.display());
    out
}

/// The frames of `all` sent to `dst` ("239.1.2.3:5000" or "[ff15::1]:5001").
fn frames_to(all: &[Vec<u8>], dst: &str) -> Vec<Vec<u8>> {
    let d: std::net::SocketAddr = dst.parse().unwrap();
    all.iter()
        .filter(|f| match d {
            std::net::SocketAddr::V4(a) => {
                f[12..14] == [8, 0]
                    && f[30..34] == a.ip().octets()
                    && f[36..38] == a.port().to_be_bytes()
            }
            std::net::SocketAddr::V6(a) => {
                f[12..14] == [0x86, 0xdd]
                    && f[38..54] == a.ip().octets()
                    && f[56..58] == a.port().to_be_bytes()
            }
        })
        .cloned()
        .collect()
}

/// `udpdemux gen` into DIR/in.pcap with `args` (seed, count, destinations...),
/// no malformed frames; the capture's path.
fn capture(d: &Path, args: &[&str]) -> std::path::PathBuf {
    let input = d.join("in.pcap");
    let mut a = vec![
        "gen",
        "--out",
        input.to_str().unwrap(),
        "--malformed-share",
        "0",
    ];
    a.extend_from_slice(args);
    let o = run(&a);
    assert!(o.status.success(), "gen: {}", stderr(&o));
    input
}

/// A config replaying `input` once on one RX lcore; the caller appends
/// its tables (`[mempool]`, the sockets).
fn replay_cfg(tag: &str, input: &Path) -> String {
    let mut cfg = eal(tag, &[&format!("net_pcap0,rx_pcap={}", input.display())]);
    cfg.push_str(
        "[engine]\nstop_when_idle_ms = 300\n[[port]]\nname = \"net_pcap0\"\n[[lcore]]\nid = 1\nrole = \"rx\"\nqueues = [\"net_pcap0:0\"]\n",
    );
    cfg
}

#[test]
fn group_datagrams_reach_every_member_and_only_members() {
    let d = scratch("mcast");
    let input = capture(
        &d,
        &[
            "--count",
            "600",
            "--seed",
            "18",
            "--dst",
            "239.1.2.3:5000=4",
            "--dst",
            "[ff15::1]:5001=2",
            "--dst",
            "239.9.9.9:5000=1",
            "--dst",
            "239.1.2.3:5009=1",
        ],
    );
    let all = pcap_frames(&input);
    let (g4, g6) = (
        frames_to(&all, "239.1.2.3:5000"),
        frames_to(&all, "[ff15::1]:5001"),
    );
    let unjoined = frames_to(&all, "239.9.9.9:5000").len() as u64;
    let ignored = frames_to(&all, "239.1.2.3:5009").len() as u64;
    assert!(g4.len() > 100 && g6.len() > 50 && unjoined > 0 && ignored > 0);

    let pcap = |n: &str| {
        format!(
            "handler = \"pcap\"\npcap_file = {}\n",
            toml_str(d.join(format!("{n}.pcap")).to_str().unwrap())
        )
    };
    let mut cfg = replay_cfg("mcast", &input);
    let join4 = "multicast = \"239.1.2.3\"\nrcvbuf = 4194304\n";
    cfg += &socket_toml("m1", "239.1.2.3:5000", &format!("{join4}{}", pcap("m1")));
    cfg += &socket_toml("m2", "239.1.2.3:5000", &format!("{join4}{}", pcap("m2")));
    // Bound to the wildcard, joined nothing: the kernel delivers the group
    // to it all the same (IP_MULTICAST_ALL = 1).
    cfg += &socket_toml(
        "wild",
        "0.0.0.0:5000",
        &format!("rcvbuf = 4194304\n{}", pcap("wild")),
    );
    // One datagram at a time, taken 50 per second: drops its own copies.
    cfg += &socket_toml(
        "tiny",
        "239.1.2.3:5000",
        "multicast = \"239.1.2.3\"\nrcvbuf = 4096\nconsume_rate_pps = 50\n",
    );
    // Same port, bound to a unicast address: never a member.
    cfg += &socket_toml("uni", "198.18.0.1:5000", "");
    let join6 = "multicast = \"ff15::1\"\nrcvbuf = 4194304\n";
    cfg += &socket_toml("m6", "[ff15::1]:5001", &format!("{join6}{}", pcap("m6")));
    cfg += &socket_toml(
        "wild6",
        "[::]:5001",
        &format!("rcvbuf = 4194304\n{}", pcap("wild6")),
    );
    let path = write(&d, "mcast.toml", &cfg);
    let j = run_ok_json(&path, &[]);

    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["hot_path_allocations"], 0);
    assert_eq!(j["rx_packets"], all.len() as u64);
    let n4 = g4.len() as u64;
    let n6 = g6.len() as u64;
    for (name, want) in [
        ("m1", &g4),
        ("m2", &g4),
        ("wild", &g4),
        ("m6", &g6),
        ("wild6", &g6),
    ] {
        let s = socket_named(&j, name);
        let n = want.len() as u64;
        assert_eq!(s["offered"], n, "{name}: {s}");
        assert_eq!(s["multicast"], n, "{name}");
        assert_eq!(s["delivered"], n, "{name}");
        assert_eq!(s["consumed"], n, "{name}");
        assert_eq!(s["rmem"], 0, "{name}");
        let got = pcap_frames(&d.join(format!("{name}.pcap")));
        assert!(
            got == *want,
            "{name}: its pcap is not the group's datagrams in order"
        );
    }
    let t = socket_named(&j, "tiny");
    let t_drops = t["drops"]["rcvbuf_full"].as_u64().unwrap();
    assert_eq!(t["offered"], n4);
    assert!(t_drops > 0, "tiny dropped nothing: {t}");
    assert_eq!(t["delivered"].as_u64().unwrap() + t_drops, n4);
    let uni = socket_named(&j, "uni");
    assert_eq!(uni["offered"], 0, "a unicast binding is no member: {uni}");

    assert_eq!(j["ip"]["IpInMcastPkts"], n4 + ignored);
    assert_eq!(j["ip"]["Ip6InMcastPkts"], n6);
    assert_eq!(j["udp"]["UdpIgnoredMulti"], ignored);
    assert_eq!(j["udp"]["UdpInDatagrams"], 0, "no unicast datagram");
    assert_eq!(
        j["udp"]["UdpNoPorts"], 0,
        "a group's datagram is never NoPorts"
    );
    // Only tiny's own drops are rcvbuf errors.
    assert_eq!(j["udp"]["UdpRcvbufErrors"], t_drops);
    let m = &j["multicast"];
    assert_eq!(m["copies"], 4 * n4 + 2 * n6);
    assert_eq!(m["nobufs"], 0);
    assert_eq!(m["unjoined"], unjoined);
    assert_eq!(m["groups"], 2);
    let clones = j["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "clone_pool")
        .expect("clone_pool in the summary");
    assert_eq!(clones["avail"], clones["size"], "every clone back");
}

#[test]
fn a_clone_pool_too_small_costs_members_their_copies_counted() {
    let d = scratch("mcast-nobufs");
    let input = capture(
        &d,
        &["--count", "400", "--seed", "7", "--dst", "239.1.2.3:5000"],
    );
    // Two clones for three extra members and a consumer that holds them:
    // most copies cannot be made.
    let mut cfg = replay_cfg("mcast-nobufs", &input);
    cfg.push_str("[mempool]\nclones = 2\ncache = 0\n");
    for n in ["a", "b", "c", "e"] {
        cfg += &socket_toml(
            n,
            "239.1.2.3:5000",
            "multicast = \"239.1.2.3\"\nrcvbuf = 4194304\nconsume_rate_pps = 20\n",
        );
    }
    let j = run_ok_json(&write(&d, "c.toml", &cfg), &[]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let m = &j["multicast"];
    let (copies, nobufs) = (m["copies"].as_u64().unwrap(), m["nobufs"].as_u64().unwrap());
    assert!(nobufs > 0, "{m}");
    assert_eq!(
        copies + nobufs,
        4 * 400,
        "every member got a copy or a count"
    );
    // The kernel counts a failed clone as the member's RcvbufErrors.
    assert_eq!(j["udp"]["UdpRcvbufErrors"], nobufs);
    let offered: u64 = ["a", "b", "c", "e"]
        .iter()
        .map(|n| socket_named(&j, n)["offered"].as_u64().unwrap())
        .sum();
    assert_eq!(offered, copies);
}

/// The two other shapes of fan-out: a group larger than a run's member list
/// (40 members: one datagram at a time), and a family with a connected
/// socket (its members depend on the source: runs of one), connected to
/// the capture's single source, so it gets every datagram too.
#[test]
fn large_groups_and_connected_members_get_every_datagram() {
    let d = scratch("mcast-shapes");
    let input = capture(
        &d,
        &[
            "--count",
            "200",
            "--seed",
            "3",
            "--flows",
            "1",
            "--dst",
            "239.1.2.3:5000",
        ],
    );
    let all = pcap_frames(&input);
    let f = &all[0];
    let src = format!(
        "{}.{}.{}.{}:{}",
        f[26],
        f[27],
        f[28],
        f[29],
        u16::from_be_bytes([f[34], f[35]])
    );
    assert!(
        all.iter()
            .all(|g| g[26..30] == f[26..30] && g[34..36] == f[34..36]),
        "one flow"
    );
    let n = all.len() as u64;
    for (tag, members, connected) in [("large", 40, false), ("connected", 3, true)] {
        let mut cfg = replay_cfg(tag, &input);
        let mut names = Vec::new();
        for i in 0..members {
            let name = format!("g{i}");
            cfg += &socket_toml(
                &name,
                "239.1.2.3:5000",
                "multicast = \"239.1.2.3\"\nrcvbuf = 4194304\n",
            );
            names.push(name);
        }
        if connected {
            cfg += &socket_toml(
                "conn",
                "239.1.2.3:5000",
                &format!("remote = \"{src}\"\nrcvbuf = 4194304\n"),
            );
            // Connected elsewhere: never a member of this flow's datagrams.
            cfg += &socket_toml("other", "0.0.0.0:5000", "remote = \"198.18.77.77:7\"\n");
            names.push("conn".into());
        }
        let j = run_ok_json(&write(&d, &format!("{tag}.toml"), &cfg), &[]);
        assert_eq!(j["books_balanced"], true, "{tag}: {}", j["problems"]);
        assert_eq!(j["hot_path_allocations"], 0, "{tag}");
        for name in &names {
            let s = socket_named(&j, name);
            assert_eq!(s["offered"], n, "{tag} {name}: {s}");
            assert_eq!(s["consumed"], n, "{tag} {name}: {s}");
        }
        if connected {
            assert_eq!(socket_named(&j, "other")["offered"], 0, "{tag}");
        }
        assert_eq!(j["multicast"]["copies"], n * names.len() as u64, "{tag}");
    }
}

/// Bursts of 64: one chunk can hold 64 datagrams to one group, longer than
/// a fan-out run (`mcast::RUN_MAX`, 32). The RX lcore cuts the run, and
/// every member still gets every datagram, in order, each once.
#[test]
fn runs_longer_than_a_run_are_cut_not_lost() {
    let d = scratch("mcast-long-runs");
    let input = capture(
        &d,
        &["--count", "500", "--seed", "5", "--dst", "239.1.2.3:5000"],
    );
    let all = pcap_frames(&input);
    let n = all.len() as u64;
    let mut cfg =
        replay_cfg("mcast-long-runs", &input).replace("[engine]\n", "[engine]\nburst = 64\n");
    let mut names = Vec::new();
    for i in 0..3 {
        let name = format!("r{i}");
        let file = toml_str(d.join(format!("{name}.pcap")).to_str().unwrap());
        cfg += &socket_toml(
            &name,
            "239.1.2.3:5000",
            &format!("multicast = \"239.1.2.3\"\nrcvbuf = 4194304\nhandler = \"pcap\"\npcap_file = {file}\n"),
        );
        names.push(name);
    }
    let j = run_ok_json(&write(&d, "long.toml", &cfg), &[]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["hot_path_allocations"], 0);
    assert_eq!(j["rx_packets"], n);
    // The replay came in bursts of more than a run: a chunk held more
    // datagrams to the group than `fan_out_run` takes at once.
    let q = &j["lcores"][0]["queues"][0];
    let (pkts, bursts) = (
        q["packets"].as_u64().unwrap(),
        q["bursts"].as_u64().unwrap(),
    );
    assert!(pkts == n && pkts > 32 * bursts, "{q}");
    for name in &names {
        let s = socket_named(&j, name);
        assert_eq!(s["offered"], n, "{name}: {s}");
        assert_eq!(s["delivered"], n, "{name}: {s}");
        assert_eq!(s["consumed"], n, "{name}: {s}");
        let got = pcap_frames(&d.join(format!("{name}.pcap")));
        assert!(got == all, "{name}: its pcap is not the replay in order");
    }
    assert_eq!(j["multicast"]["copies"], 3 * n);
}
