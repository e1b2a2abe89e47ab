//! The whole pipeline through real DPDK: a capture made by the generator is
//! replayed by net_pcap, and the engine's counts per socket and per drop
//! reason must equal the generator's manifest exactly; then a flood through
//! four RX lcores on two virtual nodes, for every strategy, with the books
//! balanced at exit.
mod common;
use common::*;
use serde_json::Value;

fn repo_file(p: &str) -> std::path::PathBuf {
    repo().join(p)
}

/// conf/default.toml with a private file prefix and no hugepages.
fn default_cfg(tag: &str, strategy: &str) -> std::path::PathBuf {
    let d = scratch(tag);
    let text = std::fs::read_to_string(repo_file("conf/default.toml")).unwrap();
    let pcap = repo_file("conf/default.pcap");
    let text = text
        .replace("no_huge = false", "no_huge = true")
        .replace(
            "file_prefix = \"udpdemux-default\"",
            &format!("file_prefix = \"{}\"", prefix(tag)),
        )
        .replace(
            "rx_pcap=default.pcap",
            &format!("rx_pcap={}", pcap.display()),
        )
        .replace(
            "strategy = \"numa-queues\"",
            &format!("strategy = \"{strategy}\""),
        );
    write(&d, "default.toml", &text)
}

#[test]
fn default_replay_matches_the_manifest_exactly() {
    let m = manifest();
    for strategy in ["numa-queues", "busylock", "direct"] {
        let j = run_ok_json(&default_cfg("replay", strategy), &[]);
        assert_eq!(
            j["rx_packets"], m["frames"],
            "{strategy}: every frame received"
        );
        assert_eq!(j["books_balanced"], true, "{strategy}: {}", j["problems"]);
        for (addr, n) in m["per_dst"].as_object().unwrap() {
            let s = socket(&j, addr);
            assert_eq!(&s["offered"], n, "{strategy}: {addr} offered");
            assert_eq!(&s["delivered"], n, "{strategy}: {addr} delivered");
            assert_eq!(&s["consumed"], n, "{strategy}: {addr} consumed");
            assert_eq!(s["rmem"], 0, "{strategy}: {addr} memory released");
        }
        // Drops before demux, by reason, summed over families.
        let mut got = std::collections::BTreeMap::<String, u64>::new();
        for fam in j["reasons"].as_object().unwrap().values() {
            for (r, v) in fam.as_object().unwrap() {
                *got.entry(r.clone()).or_default() += v.as_u64().unwrap();
            }
        }
        // The generator's fragments (UDP first fragments) go to reassembly.
        let taken = reassembled_reason(&j, "fragment_first");
        if taken > 0 {
            *got.entry("fragment_first".into()).or_default() += taken;
        }
        let want: std::collections::BTreeMap<String, u64> = m["per_reason"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(got, want, "{strategy}: drops by reason");
        let no_ports =
            j["udp"]["UdpNoPorts"].as_u64().unwrap() + j["udp"]["Udp6NoPorts"].as_u64().unwrap();
        assert_eq!(
            no_ports,
            m["no_socket"].as_u64().unwrap(),
            "{strategy}: no-port datagrams"
        );
        // The manifest's "valid" are datagrams to a declared socket; no-port ones are valid UDP too.
        let valid = m["valid"].as_u64().unwrap() + m["no_socket"].as_u64().unwrap();
        assert_eq!(
            j["lookups"].as_u64().unwrap(),
            valid,
            "{strategy}: exactly one lookup per valid UDP datagram"
        );
        let demuxed = j["udp"]["UdpInDatagrams"].as_u64().unwrap()
            + j["udp"]["Udp6InDatagrams"].as_u64().unwrap();
        assert_eq!(demuxed + no_ports, valid);
        assert_eq!(
            j["udp"]["Udp6InCsumErrors"].as_u64().unwrap(),
            j["reasons"]["v6"]["udp_checksum"].as_u64().unwrap_or(0)
                + j["reasons"]["v6"]["udp6_zero_checksum"]
                    .as_u64()
                    .unwrap_or(0)
        );
        assert_eq!(
            j["hot_path_allocations"], 0,
            "{strategy}: no allocation on the RX path"
        );
        assert_eq!(j["strategy"], strategy);
    }
}

/// `engine.idle_sleep_us`: the RX lcore sleeps once the replay is done
/// (and between its gaps), and nothing is lost or counted twice for it.
#[test]
fn idle_sleep_loses_nothing_and_sleeps_when_idle() {
    let m = manifest();
    let cfg = default_cfg("idle", "numa-queues");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "stop_when_idle_ms = 500",
        "stop_when_idle_ms = 500\nidle_sleep_us = 50\nidle_yield_us = 1000",
    );
    std::fs::write(&cfg, text).unwrap();
    let j = run_ok_json(&cfg, &[]);
    assert_eq!(j["rx_packets"], m["frames"], "every frame received");
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    for (addr, n) in m["per_dst"].as_object().unwrap() {
        let s = socket(&j, addr);
        assert_eq!(&s["delivered"], n, "{addr} delivered");
        assert_eq!(&s["consumed"], n, "{addr} consumed");
    }
    // A counter summed over the RX lcores.
    let lcores_sum = |key: &str| -> u64 {
        j["lcores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l[key].as_u64().unwrap())
            .sum()
    };
    let sleeps = lcores_sum("idle_sleeps");
    // 500 ms idle before the stop, sleeps of at most 50 µs: about 10 000
    // on an idle machine. Under SCHED_BATCH a woken loop waits for the task
    // running on its CPU to block or for the tick, so on a loaded machine
    // (this binary's other tests poll beside it; a build alongside gave 218)
    // a sleep can last a scheduler period, up to about 20 ms: 25 at least.
    assert!(sleeps >= 25, "the RX lcore slept {sleeps} times");
    // `idle_yield_us`: the first ms of each gap is spent yielding, the rest asleep.
    let yields = lcores_sum("idle_yields");
    assert!(yields > 0, "the RX lcore never yielded");
    // Sleeping loops share their CPUs: under SCHED_BATCH (`engine.idle_sched_batch`).
    let batch = |j: &serde_json::Value| -> Vec<bool> {
        let mut b: Vec<bool> = j["lcores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["thread"]["sched_batch"].as_bool().unwrap())
            .collect();
        b.push(j["main_lcore"]["sched_batch"].as_bool().unwrap());
        b
    };
    assert!(batch(&j).iter().all(|&b| b), "{:?}", batch(&j));
    // Without the setting it never sleeps, and keeps the default policy.
    let j = run_ok_json(&default_cfg("noidle", "numa-queues"), &[]);
    assert!(j["lcores"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["idle_sleeps"] == 0 && l["idle_yields"] == 0));
    assert!(batch(&j).iter().all(|&b| !b), "{:?}", batch(&j));
}

/// A CPU hog on the RX lcore's CPU (a thread of this test pinned there,
/// never blocking): the sleeping, yielding lcore would hand it a whole
/// slice per yield and, under `SCHED_BATCH`, wait out its slices on every
/// wake-up. It must notice (`runtime::idle::Contention`: half a window of
/// waits of 2 ms or more) and count the spell, and lose nothing for it.
#[test]
fn a_cpu_hog_beside_the_rx_lcore_starts_a_contended_spell() {
    let m = manifest();
    let cfg = default_cfg("hog", "numa-queues");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "stop_when_idle_ms = 500",
        "stop_when_idle_ms = 1500\nidle_sleep_us = 50\nidle_yield_us = 1000",
    );
    std::fs::write(&cfg, text).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hog = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
            // sched_setaffinity get a live set of the right size; pid 0 is
            // this thread.
            let pinned = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(1, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
            };
            let mut x = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            pinned
        })
    };
    let j = run_ok_json(&cfg, &[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(hog.join().unwrap(), "could not pin the hog to CPU 1");
    assert_eq!(j["rx_packets"], m["frames"], "every frame received");
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let spells: Vec<u64> = j["lcores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["thread"]["contended_spells"].as_u64().unwrap())
        .collect();
    assert!(
        spells.iter().all(|&n| n >= 1),
        "contended spells per RX lcore: {spells:?}"
    );
    assert!(j["main_lcore"]["contended_spells"].is_u64());
}

/// `engine.rx_prefetch_ahead` is a hint: the replay's books are exact with
/// it off as with it on (the default), and `rx_prefetch_alternate` counts
/// every received packet in exactly one of its two halves.
#[test]
fn prefetch_ahead_changes_no_count_and_alternate_splits_every_packet() {
    let m = manifest();
    for (tag, extra) in [
        ("ahead-off", "rx_prefetch_ahead = false"),
        ("ahead-alt", "rx_prefetch_alternate = true"),
    ] {
        let cfg = default_cfg(tag, "numa-queues");
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "stop_when_idle_ms = 500",
            &format!("stop_when_idle_ms = 500\n{extra}"),
        );
        std::fs::write(&cfg, text).unwrap();
        let j = run_ok_json(&cfg, &[]);
        assert_eq!(j["rx_packets"], m["frames"], "{tag}: every frame received");
        assert_eq!(j["books_balanced"], true, "{tag}: {}", j["problems"]);
        assert_eq!(j["hot_path_allocations"], 0, "{tag}");
        for (addr, n) in m["per_dst"].as_object().unwrap() {
            let s = socket(&j, addr);
            assert_eq!(&s["delivered"], n, "{tag}: {addr} delivered");
            assert_eq!(&s["consumed"], n, "{tag}: {addr} consumed");
        }
        let l = &j["lcores"][0];
        if tag == "ahead-alt" {
            let a = &l["alternate"];
            let (off, on) = (a["off"].as_u64().unwrap(), a["on"].as_u64().unwrap());
            assert_eq!(off + on, m["frames"].as_u64().unwrap(), "{a}");
        } else {
            assert!(l.get("alternate").is_none(), "{l}");
        }
    }
}

/// `run --alternate-floor`: the pipeline and a cross-core floor take turns
/// on the default replay looped (`infinite_rx`, its malformed frames too),
/// each mbuf in exactly one place: every received frame in one half, every
/// delivered one in the half that put it in the ring, the floor's uncharged
/// mbufs told apart from the pipeline's by the consumer (every socket's
/// memory back to 0), and nothing allocated on the way.
#[test]
fn alternate_floor_counts_every_datagram_in_one_half_and_balances() {
    for floor in ["pipeline", "pipeline-demux"] {
        let tag = format!("alt-{floor}");
        let cfg = default_cfg(&tag, "numa-queues");
        let text = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("default.pcap\"]", "default.pcap,infinite_rx=1\"]");
        assert!(text.contains("infinite_rx=1"), "{text}");
        std::fs::write(&cfg, text).unwrap();
        let j = run_ok_json(&cfg, &["--duration", "1.5", "--alternate-floor", floor]);
        assert_eq!(j["books_balanced"], true, "{floor}: {}", j["problems"]);
        assert_eq!(j["hot_path_allocations"], 0, "{floor}");
        let a = &j["lcores"][0]["floor_alternate"];
        assert_eq!(a["floor"], floor, "{a}");
        let got = |k: &str| a[k].as_u64().unwrap_or_else(|| panic!("{k}: {a}"));
        for k in [
            "floor_received",
            "pipeline_received",
            "floor_delivered",
            "pipeline_delivered",
        ] {
            assert!(got(k) > 0, "{floor}: both halves had turns: {a}");
        }
        assert_eq!(
            got("floor_received") + got("pipeline_received"),
            n(&j["rx_packets"]),
            "{floor}: {a}"
        );
        let delivered: u64 = j["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| n(&s["delivered"]))
            .sum();
        assert_eq!(
            got("floor_delivered") + got("pipeline_delivered"),
            delivered,
            "{floor}: {a}"
        );
        for s in j["sockets"].as_array().unwrap() {
            assert_eq!(s["consumed"], s["delivered"], "{floor}: {s}");
            assert_eq!(s["rmem"], 0, "{floor}: memory released: {s}");
        }
    }
}

/// What `--alternate-floor` cannot measure is refused at start with one
/// line naming the fix: a floor that is not cross-core, and the prefetch's
/// alternation, which takes turns on the same clock bit.
#[test]
fn alternate_floor_refuses_what_it_cannot_measure() {
    let cfg = default_cfg("alt-refused", "numa-queues");
    let json = cfg.with_extension("json");
    let c = cfg.to_str().unwrap();
    let o = run(&["run", "--config", c, "--alternate-floor", "checksums"]);
    assert!(!o.status.success());
    assert!(
        error_line(&o).contains("takes a cross-core floor"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "stop_when_idle_ms = 500",
        "stop_when_idle_ms = 500\nrx_prefetch_alternate = true",
    );
    std::fs::write(&cfg, text).unwrap();
    let o = run(&[
        "run",
        "--config",
        c,
        "--stats-json",
        json.to_str().unwrap(),
        "--alternate-floor",
        "pipeline",
    ]);
    assert!(!o.status.success());
    assert!(
        error_line(&o).contains("engine.rx_prefetch_alternate = false"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn numa_queues_takes_the_delivery_lock_per_batch_not_per_packet() {
    let j = run_ok_json(&default_cfg("locks", "numa-queues"), &[]);
    let d = run_ok_json(&default_cfg("locks-direct", "direct"), &[]);
    for (a, b) in j["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .zip(d["sockets"].as_array().unwrap())
    {
        let batches = a["batches"].as_u64().unwrap();
        assert_eq!(
            a["delivery_lock_acquisitions"].as_u64().unwrap(),
            batches,
            "one lock hold per batch"
        );
        let delivered = a["delivered"].as_u64().unwrap();
        assert!(batches <= delivered);
        // The RX lcore drains an elected stage once per burst, not per packet.
        if delivered >= 100 {
            assert!(
                batches * 2 <= delivered,
                "batching: {batches} batches for {delivered} datagrams"
            );
        }
        assert_eq!(
            b["delivery_lock_acquisitions"], b["delivered"],
            "direct: one lock per packet"
        );
    }
}

/// Four RX lcores on two virtual nodes (sharing the machine's CPUs: a
/// functional test, not a measurement), each replaying a flood capture
/// aimed at one victim socket with a small rcvbuf, for every strategy.
#[test]
fn flood_through_four_rx_lcores_on_two_nodes_balances_the_books() {
    let d = scratch("flood");
    let pcap = d.join("flood.pcap");
    let o = run(&[
        "gen",
        "--config",
        repo_file("conf/traffic/flood.toml").to_str().unwrap(),
        "--count",
        "2000",
        "--out",
        pcap.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "gen: {}", stderr(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("flood.pcap.json")).unwrap()).unwrap();
    let flood_dst = m["per_dst"]
        .as_object()
        .unwrap()
        .iter()
        .max_by_key(|(_, v)| v.as_u64().unwrap())
        .unwrap()
        .0
        .clone();
    let others: Vec<String> = m["per_dst"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| **k != flood_dst)
        .cloned()
        .collect();
    for strategy in ["numa-queues", "busylock", "direct"] {
        let vdevs: Vec<String> = (0..4)
            .map(|i| format!("net_pcap{i},rx_pcap={},infinite_rx=1", pcap.display()))
            .collect();
        let vd: Vec<&str> = vdevs.iter().map(|s| s.as_str()).collect();
        let mut text =
            eal("flood", &vd).replace("lcores = \"0,1\"", "lcores = \"0@0,1@1,2@1,3@0,4@1\"");
        text.push_str(&format!(
            "[engine]\nstrategy = \"{strategy}\"\nstats_interval_ms = 500\n[mempool]\nmbufs = 32767\n"
        ));
        for i in 0..4 {
            text.push_str(&format!("[[port]]\nname = \"net_pcap{i}\"\n"));
            text.push_str(&format!(
                "[[lcore]]\nid = {}\nrole = \"rx\"\nnode = {}\nqueues = [\"net_pcap{i}:0\"]\n",
                i + 1,
                i % 2
            ));
        }
        text.push_str(&format!(
            "[[socket]]\nname = \"victim\"\nlocal = \"{flood_dst}\"\nrcvbuf = 65536\n"
        ));
        for (i, o) in others.iter().enumerate() {
            text.push_str(&format!(
                "[[socket]]\nname = \"s{i}\"\nlocal = \"{o}\"\nrcvbuf = 4194304\n"
            ));
        }
        let cfg = write(&d, &format!("flood-{strategy}.toml"), &text);
        let j = run_ok_json(&cfg, &["--duration", "2"]);
        assert_eq!(j["books_balanced"], true, "{strategy}: {}", j["problems"]);
        assert!(
            j["rx_packets"].as_u64().unwrap() > 10_000,
            "{strategy}: traffic flowed"
        );
        let v = socket(&j, &flood_dst);
        let drops: u64 = v["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|x| x.as_u64().unwrap())
            .sum();
        assert!(
            drops > 0,
            "{strategy}: the victim's small rcvbuf overflows under flood: {v}"
        );
        assert!(
            v["rmem_high_water"].as_u64().unwrap() <= 65536 + 2368,
            "{strategy}: budget held: {v}"
        );
        assert_eq!(v["rmem"], 0);
        assert_eq!(j["lcores"].as_array().unwrap().len(), 4);
        let nodes: std::collections::BTreeSet<u64> = j["lcores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["node"].as_u64().unwrap())
            .collect();
        assert_eq!(nodes.len(), 2, "two virtual nodes");
        assert_eq!(j["hot_path_allocations"], 0);
        if strategy == "busylock" {
            assert!(
                v["busylock_acquisitions"].as_u64().unwrap() > 0,
                "busylock used above rcvbuf/2"
            );
        }
    }
}

/// `run --demux-only` (the RX core the bare loop is compared with) classifies
/// exactly as the full pipeline does, looks every datagram up once, and
/// frees what it demuxed instead of staging it: nothing reaches a socket.
#[test]
fn demux_only_classifies_like_the_pipeline_and_stages_nothing() {
    let m = manifest();
    let j = run_ok_json(&default_cfg("demux-only", "numa-queues"), &["--demux-only"]);
    assert_eq!(j["rx_packets"], m["frames"]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let demuxed: u64 = m["per_dst"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let in_dg = j["udp"]["UdpInDatagrams"].as_u64().unwrap()
        + j["udp"]["Udp6InDatagrams"].as_u64().unwrap();
    assert_eq!(in_dg, demuxed, "every datagram with a socket is demuxed");
    assert_eq!(
        j["demux_only_freed"].as_u64().unwrap(),
        demuxed,
        "and freed after the lookup"
    );
    let no_ports =
        j["udp"]["UdpNoPorts"].as_u64().unwrap() + j["udp"]["Udp6NoPorts"].as_u64().unwrap();
    assert_eq!(
        j["lookups"].as_u64().unwrap(),
        demuxed + no_ports,
        "one lookup per valid datagram"
    );
    for s in j["sockets"].as_array().unwrap() {
        assert_eq!(s["offered"], 0, "{}: nothing staged", s["name"]);
        assert_eq!(s["delivered"], 0, "{}: nothing delivered", s["name"]);
    }
    assert_eq!(j["hot_path_allocations"], 0);
}

/// `run --floor` (the lower bound the RX core's cost is read against) frees
/// every frame without classifying it, with the same books as the bare loop,
/// and does not allocate per packet either.
#[test]
fn floor_frees_every_frame_unclassified() {
    let m = manifest();
    for level in ["minimal", "checksums"] {
        let j = run_ok_json(
            &default_cfg(&format!("floor-{level}"), "numa-queues"),
            &["--floor", level],
        );
        assert_eq!(j["rx_packets"], m["frames"], "{level}");
        assert_eq!(j["books_balanced"], true, "{level}: {}", j["problems"]);
        assert_eq!(j["lookups"], 0, "{level}: the floor does not look up");
        assert_eq!(j["udp"]["UdpInDatagrams"], 0, "{level}");
        assert_eq!(j["udp"]["Udp6InDatagrams"], 0, "{level}");
        assert_eq!(j["hot_path_allocations"], 0, "{level}");
    }
    let o = run(&[
        "run",
        "--config",
        "x.toml",
        "--floor",
        "checksums",
        "--bare",
    ]);
    assert!(!o.status.success(), "--floor and --bare are one mode each");
}

/// `run --floor rte-hash` (DPDK's `rte_hash` in place of the checksums
/// floor's port table): it finds every bound destination, the configured
/// sockets' and the filler's, and only those. The engine's own lookup
/// (`--demux-only` on the same replay) is the oracle: the floor's misses are
/// its datagrams without a socket.
#[test]
fn rte_hash_floor_finds_exactly_the_bound_destinations() {
    let d = scratch("floor-rte-hash");
    // Filler bindings i = 0, 1, 4 975, 59 975, 59 976 and 59 999 of 60 000
    // (198.19.0.1's first and last port, the next address, the last
    // binding), the configured sockets of both families, the port after the
    // last binding and two addresses nothing binds.
    let dsts = [
        "198.19.0.1:1024",
        "198.19.0.1:1025",
        "198.19.0.1:60999",
        "198.19.0.2:1024",
        "198.19.0.1:5999",
        "198.19.0.2:1047",
        "198.18.1.1:53",
        "[fd00::1]:53",
        "[fd00::2]:5000",
        "198.19.0.2:1048",
        "198.19.1.1:1024",
        "[fd00::9]:53",
    ];
    let mut spec = String::from("seed = 5\ncount = 2000\nsize = 64\nflows = 4\n");
    for a in dsts {
        spec.push_str(&format!("\n[[dst]]\naddr = \"{a}\"\n"));
    }
    let gen_cfg = write(&d, "spread.toml", &spec);
    let pcap = d.join("spread.pcap");
    let o = run(&[
        "gen",
        "--config",
        gen_cfg.to_str().unwrap(),
        "--out",
        pcap.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "gen: {}", stderr(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("spread.pcap.json")).unwrap())
            .unwrap();
    let unbound = ["198.19.0.2:1048", "198.19.1.1:1024", "[fd00::9]:53"]
        .iter()
        .map(|a| n(&m["per_dst"][a]))
        .sum::<u64>();
    assert!(
        unbound > 0 && unbound < n(&m["frames"]),
        "the replay has both kinds"
    );
    let text = std::fs::read_to_string(default_cfg("floor-rte-hash-cfg", "numa-queues"))
        .unwrap()
        .replace(
            &format!("rx_pcap={}", repo_file("conf/default.pcap").display()),
            &format!("rx_pcap={}", pcap.display()),
        )
        .replace("[engine]\n", "[engine]\nfiller_sockets = 60000\n");
    let cfg = write(&d, "floor.toml", &text);
    let j = run_ok_json(&cfg, &["--floor", "rte-hash"]);
    assert_eq!(j["rx_packets"], m["frames"]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(
        j["floor_no_socket"].as_u64().unwrap(),
        unbound,
        "misses are the unbound destinations"
    );
    assert_eq!(j["lookups"], 0, "the engine's table is not used");
    assert_eq!(j["hot_path_allocations"], 0);
    let e = run_ok_json(&cfg, &["--demux-only"]);
    let no_ports = n(&e["udp"]["UdpNoPorts"]) + n(&e["udp"]["Udp6NoPorts"]);
    assert_eq!(no_ports, unbound, "the engine's lookup agrees");
}

/// `run --floor pipeline` (the denominator of the pipeline's ratio): every
/// frame ends in a socket's ring, a full ring, or "no socket"; the consumers
/// take everything put in the rings; nothing is classified, looked up or
/// charged; the RX lcore and the consumer allocate nothing. Once with the
/// main lcore consuming (the default config), once with a consumer lcore.
#[test]
fn pipeline_floor_puts_frames_in_rings_and_balances_the_books() {
    let m = manifest();
    // What `--floor pipeline` put in the rings: the checksum floor's
    // filter only takes frames away from it.
    let mut port_only = None;
    let mut checked = None;
    for (floor, consumer_lcore) in [
        ("pipeline", false),
        ("pipeline", true),
        ("pipeline-checksums", false),
        ("pipeline-rte-hash", false),
        ("pipeline-demux", false),
        ("pipeline-demux", true),
    ] {
        let cfg = default_cfg(&format!("floor-{floor}-{consumer_lcore}"), "numa-queues");
        if consumer_lcore {
            let text = std::fs::read_to_string(&cfg)
                .unwrap()
                .replace("lcores = \"0,1\"", "lcores = \"0@0,1@1,2@0\"");
            std::fs::write(
                &cfg,
                format!("{text}\n[[lcore]]\nid = 2\nrole = \"consumer\"\n"),
            )
            .unwrap();
        }
        let j = run_ok_json(&cfg, &["--floor", floor]);
        let what = format!(
            "--floor {floor}, {}",
            if consumer_lcore {
                "consumer lcore"
            } else {
                "main lcore"
            }
        );
        assert_eq!(j["rx_packets"], m["frames"], "{what}");
        assert_eq!(j["books_balanced"], true, "{what}: {}", j["problems"]);
        assert_eq!(j["lookups"], 0, "{what}: the floor does not look up");
        assert_eq!(j["udp"]["UdpInDatagrams"], 0, "{what}");
        assert_eq!(j["udp"]["Udp6InDatagrams"], 0, "{what}");
        assert_eq!(
            j["hot_path_allocations"], 0,
            "{what}: no allocation on RX or consumer"
        );
        let rx = j["rx_packets"].as_u64().unwrap();
        let no_socket = j["floor_no_socket"].as_u64().unwrap();
        let (mut delivered, mut full) = (0, 0);
        for s in j["sockets"].as_array().unwrap() {
            let name = format!("{what}: {}", s["name"]);
            let d = s["floor_delivered"].as_u64().unwrap();
            let f = s["floor_ring_full"].as_u64().unwrap();
            assert_eq!(
                s["delivered"].as_u64().unwrap(),
                d,
                "{name}: delivered = put in the ring"
            );
            assert_eq!(s["offered"].as_u64().unwrap(), d + f, "{name}");
            assert_eq!(s["drops"]["ring_full"].as_u64().unwrap(), f, "{name}");
            // Every socket of the default config has a consumer: it took everything.
            assert_eq!(
                s["consumed"].as_u64().unwrap(),
                d,
                "{name}: consumed what was delivered"
            );
            assert_eq!(s["freed_at_close"], 0, "{name}: its ring was empty at exit");
            assert_eq!(s["rmem"], 0, "{name}: nothing charged");
            assert!(
                s["consumed_bytes"].as_u64().unwrap() >= d * 60,
                "{name}: pkt_len read"
            );
            delivered += d;
            full += f;
        }
        assert_eq!(
            rx,
            delivered + full + no_socket,
            "{what}: rx = in rings + ring full + no socket"
        );
        // The default replay: every datagram to a declared port reaches a ring
        // (4096-entry rings hold the 1000-frame replay), plus what the floor
        // cannot tell apart from one (malformed frames to those ports).
        let to_sockets: u64 = m["per_dst"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        if floor == "pipeline-checksums" {
            // Frames whose checksums fail (the replay's corrupted ones) are
            // refused, so it delivers some, and never more than the port alone.
            let all = port_only.expect("--floor pipeline ran first");
            assert!(
                delivered > 0 && delivered < all,
                "{what}: {delivered} in rings, {all} with the port alone"
            );
            checked = Some(delivered);
        } else if floor == "pipeline-rte-hash" {
            // The same checksums, then the exact address and port: a subset
            // of what the port chose (the exact misses are in their own test).
            let cs = checked.expect("--floor pipeline-checksums ran first");
            assert!(
                delivered > 0 && delivered <= cs,
                "{what}: {delivered} in rings, {cs} by port after the checksums"
            );
        } else {
            assert!(
                delivered >= to_sockets,
                "{what}: {delivered} in rings, {to_sockets} datagrams to sockets"
            );
        }
        if floor == "pipeline" && !consumer_lcore {
            port_only = Some(delivered);
        }
        if floor == "pipeline-demux" {
            // The real parser and lookup: exactly the manifest's datagrams
            // per socket, and everything else (malformed, not UDP, no port)
            // freed without a socket.
            for (addr, n) in m["per_dst"].as_object().unwrap() {
                assert_eq!(&socket(&j, addr)["floor_delivered"], n, "{what}: {addr}");
            }
            assert_eq!(delivered, to_sockets, "{what}");
        }
        assert_eq!(full, 0, "{what}");
        assert!(
            no_socket > 0,
            "{what}: not-IP frames and no-port datagrams match no socket"
        );
        if consumer_lcore {
            let c = &j["consumers"][0];
            assert_eq!(
                c["datagrams"].as_u64().unwrap(),
                delivered,
                "the consumer lcore took them all: {c}"
            );
        } else {
            assert_eq!(j["consumers"].as_array().unwrap().len(), 0);
        }
    }
}

/// The default replay with a consumer lcore instead of the main lcore: the
/// consumer loop takes every delivered datagram, flushes its loop counters
/// and exits only once its rings are empty, with the books balanced.
#[test]
fn default_replay_through_a_consumer_lcore() {
    let m = manifest();
    let cfg = default_cfg("consumer-lcore", "numa-queues");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("lcores = \"0,1\"", "lcores = \"0@0,1@1,2@0\"");
    std::fs::write(
        &cfg,
        format!("{text}\n[[lcore]]\nid = 2\nrole = \"consumer\"\n"),
    )
    .unwrap();
    let j = run_ok_json(&cfg, &[]);
    assert_eq!(j["rx_packets"], m["frames"]);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let mut total = 0;
    for (addr, n) in m["per_dst"].as_object().unwrap() {
        let s = socket(&j, addr);
        assert_eq!(&s["delivered"], n, "{addr} delivered");
        assert_eq!(&s["consumed"], n, "{addr} consumed");
        assert_eq!(s["rmem"], 0, "{addr} memory released");
        let lat: u64 = s["consumer_latency_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(&lat, n, "{addr}: one latency sample per datagram");
        total += n.as_u64().unwrap();
    }
    let c = &j["consumers"][0];
    assert_eq!(c["datagrams"].as_u64().unwrap(), total, "{c}");
    assert!(c["polls"].as_u64().unwrap() >= c["idle_polls"].as_u64().unwrap());
    assert!(
        c["idle_polls"].as_u64().unwrap() > 0,
        "it polled empty rings too: {c}"
    );
    assert_eq!(j["hot_path_allocations"], 0);
}

/// The consumers' longest gap between polls (`longest_gap_us`): the engine
/// stopped whole for 200 ms (SIGSTOP, SIGCONT) while the main lcore consumes
/// a looped replay shows as a gap of at least that; RX lcores do not
/// measure it.
#[test]
fn a_stopped_consumer_shows_as_its_longest_gap() {
    let cfg = default_cfg("gap", "numa-queues");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("default.pcap\"]", "default.pcap,infinite_rx=1\"]");
    assert!(text.contains("infinite_rx=1"), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let json = cfg.with_extension("json");
    let mut engine = EngineProc::start(&cfg, &json);
    engine.wait_ready();
    std::thread::sleep(std::time::Duration::from_millis(300));
    engine.signal(libc::SIGSTOP);
    std::thread::sleep(std::time::Duration::from_millis(200));
    engine.signal(libc::SIGCONT);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (st, log) = engine.stop();
    assert!(st.success(), "{st}: {log}");
    let j = stats_json(&json);
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let gap = j["main_lcore"]["longest_gap_us"]
        .as_f64()
        .unwrap_or_else(|| panic!("main lcore's gap: {}", j["main_lcore"]));
    assert!(gap >= 190_000.0, "longest gap {gap} µs after a 200 ms stop");
    assert!(gap < 10_000_000.0, "longest gap {gap} µs");
    for l in j["lcores"].as_array().unwrap() {
        assert!(l["thread"]["longest_gap_us"].is_null(), "{l}");
    }
}
