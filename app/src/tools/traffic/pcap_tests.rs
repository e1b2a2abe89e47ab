//! The generator's contract, checked on the library side of the tool:
//! same seed, same bytes; the manifest says exactly what `parse` finds in
//! the pcap read back; every malformed kind lands in its one drop reason.
//! (`app/tests/gen_pcap.rs` checks the same through the command, and the
//! transmit mode.)
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use udpdemux::parse::{parse, Family, Offload};
use udpdemux::pcap::{PcapReader, LINKTYPE_ETHERNET};

use super::{manifest_path, write_pcap, FrameKind, GenArgs, Malformed, Manifest, TrafficSpec};

fn traffic(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conf/traffic")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("udpdemux-traffic-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("tmp dir");
    d.join(name)
}

fn spec_with(file: &str, count: Option<u64>, seed: Option<u64>) -> TrafficSpec {
    GenArgs {
        config: Some(traffic(file)),
        count,
        seed,
        ..GenArgs::default()
    }
    .spec()
    .expect("spec")
}

#[test]
fn same_seed_gives_identical_bytes() {
    let spec = spec_with("mix.toml", Some(2000), None);
    let (a, b) = (tmp("same-a.pcap"), tmp("same-b.pcap"));
    write_pcap(&spec, &a, None).expect("write a");
    write_pcap(&spec, &b, None).expect("write b");
    let (ba, bb) = (
        std::fs::read(&a).expect("read"),
        std::fs::read(&b).expect("read"),
    );
    assert!(ba.len() > 24 + 2000 * 16);
    assert_eq!(ba, bb, "same seed, different bytes");
    assert_eq!(
        std::fs::read(manifest_path(&a)).expect("m"),
        std::fs::read(manifest_path(&b)).expect("m")
    );
    let other = spec_with("mix.toml", Some(2000), Some(99));
    let c = tmp("same-c.pcap");
    write_pcap(&other, &c, None).expect("write c");
    assert_ne!(
        ba,
        std::fs::read(&c).expect("read"),
        "another seed must change the stream"
    );
}

/// Recounts a pcap with `parse` alone, the way the engine will.
fn recount(spec: &TrafficSpec, path: &Path) -> Manifest {
    let sockets: Vec<SocketAddr> = spec.targets().iter().map(|t| t.addr).collect();
    let mut m = Manifest {
        seed: spec.seed(),
        ..Manifest::default()
    };
    for a in &sockets {
        m.per_dst.insert(a.to_string(), 0);
    }
    let rd = PcapReader::open(path).expect("open");
    assert_eq!(rd.linktype(), LINKTYPE_ETHERNET);
    for rec in rd {
        let (_, bytes) = rec.expect("record");
        m.frames += 1;
        m.bytes += bytes.len() as u64;
        assert!(bytes.len() >= 60, "frame shorter than the Ethernet minimum");
        let vlan_tpids = [[0x81, 0x00], [0x88, 0xa8]];
        if bytes
            .get(12..14)
            .is_some_and(|t| vlan_tpids.iter().any(|v| v == t))
        {
            m.vlan_tagged += 1;
        }
        match parse(&bytes, Offload::default()) {
            Ok(d) => {
                match d.family {
                    Family::V4 => m.family.v4 += 1,
                    Family::V6 => m.family.v6 += 1,
                }
                let to = SocketAddr::new(d.dst, d.dport);
                match m.per_dst.get_mut(&to.to_string()) {
                    Some(n) => {
                        *n += 1;
                        m.valid += 1;
                    }
                    None => m.no_socket += 1,
                }
            }
            Err(e) => {
                match e.family() {
                    Some(Family::V4) => m.family.v4 += 1,
                    Some(Family::V6) => m.family.v6 += 1,
                    None => m.family.other += 1,
                }
                *m.per_reason
                    .entry(e.reason().name().to_string())
                    .or_default() += 1;
            }
        }
    }
    m
}

fn check_manifest(file: &str, count: Option<u64>) {
    let spec = spec_with(file, count, None);
    let out = tmp(&format!("{file}.pcap"));
    let returned = write_pcap(&spec, &out, None).expect("write");
    let on_disk: Manifest =
        serde_json::from_str(&std::fs::read_to_string(manifest_path(&out)).expect("manifest"))
            .expect("json");
    assert_eq!(returned, on_disk);
    let seen = recount(&spec, &out);
    assert_eq!(seen.frames, spec.count());
    assert_eq!(
        (
            seen.frames,
            seen.bytes,
            seen.valid,
            &seen.per_dst,
            seen.no_socket,
            &seen.per_reason,
            &seen.family,
            seen.vlan_tagged
        ),
        (
            on_disk.frames,
            on_disk.bytes,
            on_disk.valid,
            &on_disk.per_dst,
            on_disk.no_socket,
            &on_disk.per_reason,
            &on_disk.family,
            on_disk.vlan_tagged
        ),
        "{file}: manifest disagrees with parse"
    );
    // Per kind and per reason agree (no-port is the only kind without a reason).
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in &on_disk.malformed {
        let kind = Malformed::ALL
            .into_iter()
            .find(|m| m.name() == k)
            .expect("known kind");
        match kind.expected_reason() {
            Some(r) if *n > 0 => *by_reason.entry(r.name().to_string()).or_default() += n,
            Some(_) => {}
            None => assert_eq!(*n, on_disk.no_socket),
        }
    }
    assert_eq!(by_reason, on_disk.per_reason);
}

#[test]
fn manifest_matches_parse_default() {
    check_manifest("default.toml", None);
    // The committed default capture must stay small and cover every kind.
    let spec = spec_with("default.toml", None, None);
    let m = write_pcap(&spec, &tmp("default-size.pcap"), None).expect("write");
    assert!(
        std::fs::metadata(tmp("default-size.pcap"))
            .expect("stat")
            .len()
            < 300_000
    );
    assert_eq!(m.malformed.len(), Malformed::ALL.len());
    assert!(m.malformed.values().all(|&n| n >= 3), "{:?}", m.malformed);
    assert!(m.family.v4 > 300 && m.family.v6 > 300, "{:?}", m.family);
}

#[test]
fn manifest_matches_parse_mix_and_flood() {
    check_manifest("mix.toml", Some(5000));
    check_manifest("flood.toml", Some(5000));
    let spec = spec_with("flood.toml", Some(5000), None);
    let m = write_pcap(&spec, &tmp("flood-share.pcap"), None).expect("write");
    let victim = m.per_dst["198.18.1.9:9999"] as f64;
    assert!(
        (victim / 5000.0 - 0.9).abs() < 0.02,
        "victim share {}",
        victim / 5000.0
    );
}

#[test]
fn every_malformed_kind_maps_to_its_reason() {
    let text = r#"
        seed = 5
        count = 1800
        ipv6_share = 0.5
        sizes = [[0, 0.3], [200, 0.4], [1452, 0.3]]
        vlan = [10, 20]
        vlan_share = 0.5
        [[dst]]
        addr = "198.18.1.1:53"
        [[dst]]
        addr = "[fd00::1]:53"
        [malformed]
        share = 1.0
    "#;
    let spec = TrafficSpec::from_toml(text).expect("spec");
    let mut per_kind = [0u32; Malformed::ALL.len()];
    for f in spec.frames() {
        let FrameKind::Malformed(kind) = f.kind else {
            panic!("share 1.0 gave a valid frame")
        };
        per_kind[kind.index()] += 1;
        match (kind.expected_reason(), parse(&f.bytes, Offload::default())) {
            (Some(want), Err(e)) => assert_eq!(e.reason(), want, "{kind:?}"),
            (None, Ok(d)) => {
                assert_eq!(d.dport, spec.no_port());
                assert!(spec.targets().iter().all(|t| t.addr.port() != d.dport));
            }
            (want, got) => panic!("{kind:?}: expected {want:?}, parse gave {got:?}"),
        }
    }
    // Round-robin over all nine kinds: exactly 200 each.
    assert_eq!(per_kind, [200; 9]);
}
