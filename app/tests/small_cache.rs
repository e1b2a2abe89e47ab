//! The small-buffer cache (seed 003) through real DPDK: under pressure the
//! copy preserves every byte and the demux result, an entry held by a
//! consumer is never handed out again, and every entry is back at exit.
mod common;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use udpdemux::pcap::PcapReader;

const SOCKETS: [(&str, &str); 5] = [
    ("dns4", "198.18.1.1:53"),
    ("echo4", "198.18.1.2:7"),
    ("app4", "198.18.1.3:5000"),
    ("dns6", "[fd00::1]:53"),
    ("app6", "[fd00::2]:5000"),
];

/// The default capture replayed once; every socket writes what it consumes
/// to a pcap; consumers are paused while traffic flows (consume_rate_pps = 1)
/// so rings and rcvbuf fill up, then consume everything at shutdown.
fn config(dir: &Path, tag: &str, cache: &str, rcvbuf: u32) -> PathBuf {
    let pcap = repo().join("conf/default.pcap");
    let mut t = eal(tag, &[&format!("net_pcap0,rx_pcap={}", pcap.display())]);
    t.push_str("[engine]\nstop_when_idle_ms = 300\n");
    t.push_str(&format!("[small_cache]\n{cache}\n"));
    t.push_str(&rx_port("net_pcap0"));
    for (name, local) in SOCKETS {
        t.push_str(&format!(
            "[[socket]]\nname = \"{name}\"\nlocal = \"{local}\"\nrcvbuf = {rcvbuf}\nconsume_rate_pps = 1\nhandler = \"pcap\"\npcap_file = \"{}\"\n",
            dir.join(format!("{tag}-{name}.pcap")).display()
        ));
    }
    write(dir, &format!("{tag}.toml"), &t)
}

fn frames(p: &Path) -> Vec<Vec<u8>> {
    PcapReader::open(p).unwrap().map(|r| r.unwrap().1).collect()
}

#[test]
fn copies_are_exact_and_land_on_the_right_socket() {
    let d = scratch("smallcache");
    let input = frames(&repo().join("conf/default.pcap"));
    // rcvbuf 400 kB: 84 full-size mbufs reach rcvbuf/2, then small copies (576 B) fit the rest.
    let on = run_ok_json(
        &config(&d, "on", "enabled = true\nentries = 1024", 400_000),
        &[],
    );
    let off = run_ok_json(&config(&d, "off", "enabled = false", 400_000), &[]);
    let roomy = run_ok_json(&config(&d, "roomy", "enabled = false", 8 << 20), &[]);
    for j in [&on, &off, &roomy] {
        assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    }
    assert!(
        on["small_cache"]["condensed"].as_u64().unwrap() > 100,
        "{}",
        on["small_cache"]
    );
    assert_eq!(off["small_cache"]["condensed"], 0);
    let drops = |j: &Value| -> u64 {
        j["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s["drops"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| v.as_u64().unwrap())
                    .sum::<u64>()
            })
            .sum()
    };
    assert_eq!(drops(&roomy), 0);
    assert!(
        drops(&off) > 0,
        "without the cache the 400 kB budget overflows"
    );
    assert_eq!(
        drops(&on),
        0,
        "with the cache everything fits: {}",
        on["sockets"]
    );
    let saved = on["small_cache"]["bytes_saved"].as_u64().unwrap();
    assert_eq!(
        saved,
        on["small_cache"]["condensed"].as_u64().unwrap() * (2368 - 576)
    );

    for (name, _) in SOCKETS {
        let with_cache = frames(&d.join(format!("on-{name}.pcap")));
        let reference = frames(&d.join(format!("roomy-{name}.pcap")));
        assert_eq!(
            with_cache.len() as u64,
            socket_named(&on, name)["consumed"].as_u64().unwrap()
        );
        // Same datagrams, same bytes, same order (FIFO per socket) as without the cache.
        assert_eq!(
            with_cache, reference,
            "socket {name}: delivered frames differ with the cache on"
        );
        for f in &with_cache {
            assert!(
                input.contains(f),
                "socket {name}: a delivered frame is not one that was sent"
            );
        }
        assert!(socket_named(&on, name)["rmem_high_water"].as_u64().unwrap() <= 400_000 + 2368);
        // The consumer reads the payload length from the mbuf's dynfield,
        // which the copy must carry over (and releases truesize from
        // buf_len: the books' rmem == 0 above checks that).
        assert_eq!(
            socket_named(&on, name)["consumed_bytes"],
            socket_named(&roomy, name)["consumed_bytes"],
            "socket {name}: payload bytes counted from condensed copies"
        );
        let lat: u64 = socket_named(&on, name)["consumer_latency_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(
            lat,
            socket_named(&on, name)["consumed"].as_u64().unwrap(),
            "socket {name}: one latency sample each"
        );
        // consume_rate_pps = 1 holds the replay in the rings until shutdown: a
        // copy without its RX stamp would read as decades, not seconds.
        assert_eq!(
            socket_named(&on, name)["consumer_latency_us"][31],
            0,
            "socket {name}: RX stamps carried by the copies"
        );
    }
    let pools: BTreeMap<String, (u64, u64)> = on["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                (p["size"].as_u64().unwrap(), p["avail"].as_u64().unwrap()),
            )
        })
        .collect();
    let (size, avail) = pools["small_pool_s0"];
    assert_eq!(size, avail, "every small mbuf back in its pool at exit");
}

#[test]
fn an_entry_held_by_a_consumer_is_never_reused() {
    let d = scratch("smallbusy");
    let input = frames(&repo().join("conf/default.pcap"));
    // 16 entries only and paused consumers: the ring wraps onto held entries.
    let j = run_ok_json(
        &config(&d, "busy", "enabled = true\nentries = 16", 400_000),
        &[],
    );
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    let c = &j["small_cache"];
    assert!(
        c["busy"].as_u64().unwrap() > 0,
        "the next entry was found held: {c}"
    );
    assert!(c["condensed"].as_u64().unwrap() >= 16, "{c}");
    for (name, local) in SOCKETS {
        let got = frames(&d.join(format!("busy-{name}.pcap")));
        assert_eq!(
            got.len() as u64,
            socket_named(&j, name)["consumed"].as_u64().unwrap()
        );
        let port: u16 = local.rsplit(':').next().unwrap().parse().unwrap();
        for f in &got {
            // Had a held entry been overwritten, its bytes would be another datagram's.
            assert!(input.contains(f), "socket {name}: corrupted datagram");
            let d = udpdemux::parse::parse(f, Default::default()).unwrap();
            assert_eq!(d.dport, port, "socket {name}: datagram of another socket");
        }
    }
}
