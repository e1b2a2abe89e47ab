//! `udpdemux gen`: a traffic description turned into frames, deterministic
//! for a seed, written to a pcap with an exact manifest or transmitted on a
//! DPDK port.
//!
//! The manifest is the contract with end-to-end tests: it says exactly how
//! many valid datagrams went to each socket and how many frames of each
//! malformed kind (and so of each parse drop reason) are in the file.
pub mod spec;
pub mod tx;

#[cfg(test)]
mod pcap_tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use spec::{FrameKind, GenFrame, Malformed, SpecFile, TrafficSpec};
use udpdemux::parse::Family;
use udpdemux::pcap::PcapWriter;

/// Generate traffic from a spec: write a pcap and its manifest (--out), or
/// transmit on a DPDK port (--port). Spec knobs given as flags override the file.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GenArgs {
    /// Traffic spec (TOML, see conf/traffic/); without it, give --dst.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Pcap mode: write the frames to this file.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Manifest path (default: OUT.json, e.g. FILE.pcap.json).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Pcap mode: frames to write. Transmit mode: stop after sending this many.
    #[arg(long)]
    pub count: Option<u64>,
    #[arg(long)]
    pub ipv6_share: Option<f64>,
    /// Distinct (source address, source port) per destination.
    #[arg(long)]
    pub flows: Option<u32>,
    /// Destination socket ADDR[=WEIGHT], repeatable; replaces the spec's [[dst]] list.
    #[arg(long = "dst", value_name = "ADDR[=WEIGHT]")]
    pub dst: Vec<String>,
    /// One UDP payload size for all frames (replaces the size mix).
    #[arg(long)]
    pub size: Option<u16>,
    /// VLAN IDs, outermost first (e.g. 100 or 100,200).
    #[arg(long, value_delimiter = ',')]
    pub vlan: Option<Vec<u16>>,
    #[arg(long)]
    pub flood_share: Option<f64>,
    #[arg(long)]
    pub flood_dst: Option<SocketAddr>,
    #[arg(long)]
    pub malformed_share: Option<f64>,
    /// Comma-separated malformed kinds (truncated,bad-ip-csum,...).
    #[arg(long, value_delimiter = ',')]
    pub malformed_kinds: Option<Vec<String>>,

    /// Transmit mode: EAL arguments as one string ("--no-huge -m 256 --vdev=net_null0 -l 0").
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<String>,
    /// Transmit mode: the port's device name (net_null0, 0000:01:00.0).
    #[arg(long)]
    pub port: Option<String>,
    /// Frames per second; 0 sends as fast as the port takes them.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Distinct frames pre-built and sent in a loop.
    #[arg(long, default_value_t = 4096)]
    pub cycle: usize,
    /// Frames per tx_burst.
    #[arg(long, default_value_t = 32)]
    pub burst: u16,
    /// Seconds to wait for link up before sending (memif waits for its peer).
    #[arg(long, default_value_t = 10.0)]
    pub link_wait: f64,
    /// Transmit mode: after sending (and writing --stats-json), keep the port
    /// open this many seconds, or until SIGINT/SIGTERM, so the receiver can
    /// drain what is still in flight before the link goes (net_memif 22.11
    /// may crash a receiver that is reading while its peer disconnects).
    #[arg(long, default_value_t = 0.0)]
    pub linger: f64,
    /// Poll and free the port's RX queue: auto = on except for net_null,
    /// whose RX invents packets (net_ring loops TX back to RX and would fill).
    #[arg(long, value_enum, default_value_t = RxDrain::Auto)]
    pub rx_drain: RxDrain,
    /// Write the transmit totals as JSON here.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxDrain {
    #[default]
    Auto,
    On,
    Off,
}

/// Frame counts by family.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyCounts {
    pub v4: u64,
    pub v6: u64,
    /// Not IP (not-ip frames).
    pub other: u64,
}

/// Exact counts of what a pcap holds (or what the transmit mode sent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub seed: u64,
    pub frames: u64,
    /// Sum of frame lengths (no FCS), as DPDK's ibytes/obytes count them.
    pub bytes: u64,
    /// Valid datagrams to a configured socket (per_dst summed).
    pub valid: u64,
    /// Valid datagrams per destination socket ("198.18.1.1:53", "[fd00::1]:53").
    pub per_dst: BTreeMap<String, u64>,
    /// Frames per malformed kind (spec names, no-port included).
    pub malformed: BTreeMap<String, u64>,
    /// Frames per parse drop reason (`parse::Reason::name`): what the engine must count.
    pub per_reason: BTreeMap<String, u64>,
    /// Datagrams that parse but match no socket (the no-port kind).
    pub no_socket: u64,
    pub family: FamilyCounts,
    pub vlan_tagged: u64,
    /// Where no-port frames were sent (per family address).
    pub no_port_dst: Vec<String>,
}

/// Allocation-free counters indexed like the spec (used per frame sent).
#[derive(Clone, Debug)]
pub struct Tally {
    pub per_target: Vec<u64>,
    pub malformed: [u64; Malformed::ALL.len()],
    pub family: [u64; 3],
    pub vlan_tagged: u64,
    pub frames: u64,
    pub bytes: u64,
}

/// What counting needs to know about a frame, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameClass {
    pub kind: FrameKind,
    pub target: Option<usize>,
    pub family: Option<Family>,
    pub vlan: bool,
    pub len: u32,
}

impl GenFrame {
    pub fn class(&self) -> FrameClass {
        FrameClass {
            kind: self.kind,
            target: self.target,
            family: self.family,
            vlan: self.vlan_tags > 0,
            len: u32::try_from(self.bytes.len()).unwrap_or(u32::MAX),
        }
    }
}

impl Tally {
    pub fn new(spec: &TrafficSpec) -> Tally {
        Tally {
            per_target: vec![0; spec.targets().len()],
            malformed: [0; Malformed::ALL.len()],
            family: [0; 3],
            vlan_tagged: 0,
            frames: 0,
            bytes: 0,
        }
    }

    #[inline]
    pub fn add(&mut self, c: &FrameClass) {
        self.frames += 1;
        self.bytes += u64::from(c.len);
        match (c.kind, c.target) {
            (FrameKind::Valid, Some(t)) => {
                if let Some(n) = self.per_target.get_mut(t) {
                    *n += 1;
                }
            }
            (FrameKind::Malformed(m), _) => self.malformed[m.index()] += 1,
            // A valid frame always has a target (spec.rs sets both).
            (FrameKind::Valid, None) => {}
        }
        self.family[c.family.map_or(2, Family::index)] += 1;
        self.vlan_tagged += u64::from(c.vlan);
    }

    pub fn manifest(&self, spec: &TrafficSpec) -> Manifest {
        let mut m = Manifest {
            seed: spec.seed(),
            frames: self.frames,
            bytes: self.bytes,
            ..Manifest::default()
        };
        for (t, n) in spec.targets().iter().zip(&self.per_target) {
            m.per_dst.insert(t.addr.to_string(), *n);
            m.valid += n;
        }
        for k in spec.malformed_kinds() {
            m.malformed
                .insert(k.name().to_string(), self.malformed[k.index()]);
        }
        for k in Malformed::ALL {
            let n = self.malformed[k.index()];
            match k.expected_reason() {
                Some(r) => {
                    if n > 0 {
                        *m.per_reason.entry(r.name().to_string()).or_default() += n;
                    }
                }
                None => m.no_socket += n,
            }
        }
        m.family = FamilyCounts {
            v4: self.family[0],
            v6: self.family[1],
            other: self.family[2],
        };
        m.vlan_tagged = self.vlan_tagged;
        if spec.malformed_kinds().contains(&Malformed::NoPort) {
            let mut seen = Vec::new();
            for t in spec.targets() {
                let a = SocketAddr::new(t.addr.ip(), spec.no_port()).to_string();
                if !seen.contains(&a) {
                    seen.push(a);
                }
            }
            m.no_port_dst = seen;
        }
        m
    }
}

/// Default manifest path: the pcap path with ".json" appended.
pub fn manifest_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

/// Writes the spec's frames to `out` and the manifest beside it (or to
/// `manifest`); returns the manifest.
pub fn write_pcap(
    spec: &TrafficSpec,
    out: &Path,
    manifest: Option<&Path>,
) -> anyhow::Result<Manifest> {
    let mut w = PcapWriter::create(out, 65_535)
        .with_context(|| format!("cannot create {}", out.display()))?;
    let mut tally = Tally::new(spec);
    for (i, f) in spec.frames().enumerate() {
        let ts = spec::BASE_TS_NS + i as u64 * spec::TS_STEP_NS;
        w.write_packet(ts, &f.bytes)
            .with_context(|| format!("writing {}", out.display()))?;
        tally.add(&f.class());
    }
    w.into_inner()
        .with_context(|| format!("writing {}", out.display()))?;
    let m = tally.manifest(spec);
    let mpath = manifest.map_or_else(|| manifest_path(out), Path::to_path_buf);
    let text = serde_json::to_string_pretty(&m)?;
    std::fs::write(&mpath, text + "\n")
        .with_context(|| format!("cannot write manifest {}", mpath.display()))?;
    Ok(m)
}

impl GenArgs {
    /// The spec file (or defaults) with this command line's overrides.
    pub fn spec(&self) -> anyhow::Result<TrafficSpec> {
        let mut raw = match &self.config {
            Some(p) => TrafficSpec::read_file(p)?,
            None => SpecFile::empty(),
        };
        if let Some(v) = self.seed {
            raw.seed = v;
        }
        if let Some(v) = self.count {
            raw.count = v;
        }
        if let Some(v) = self.ipv6_share {
            raw.ipv6_share = Some(v);
        }
        if let Some(v) = self.flows {
            raw.flows = v;
        }
        if !self.dst.is_empty() {
            raw.dsts = self
                .dst
                .iter()
                .map(|d| {
                    let (a, w) = match d.rsplit_once('=') {
                        Some((a, w)) => (
                            a,
                            w.parse::<f64>()
                                .with_context(|| format!("--dst {d}: bad weight"))?,
                        ),
                        None => (d.as_str(), 1.0),
                    };
                    let addr: SocketAddr = a
                        .parse()
                        .with_context(|| format!("--dst {d}: not ADDR:PORT or [ADDR6]:PORT"))?;
                    Ok(spec::DstSpec {
                        addr,
                        weight: w,
                        size: None,
                        sizes: None,
                        vlan: None,
                        vlan_share: None,
                    })
                })
                .collect::<anyhow::Result<_>>()?;
        }
        if let Some(v) = self.size {
            raw.size = Some(v);
            raw.sizes = None;
            for d in &mut raw.dsts {
                d.size = None;
                d.sizes = None;
            }
        }
        if let Some(v) = &self.vlan {
            raw.vlan = v.clone();
        }
        match (self.flood_share, self.flood_dst, &mut raw.flood) {
            (Some(share), Some(dst), f) => *f = Some(spec::FloodSpec { share, dst }),
            (Some(share), None, Some(f)) => f.share = share,
            (None, Some(dst), Some(f)) => f.dst = dst,
            (None, None, _) => {}
            _ => anyhow::bail!(
                "--flood-share and --flood-dst both needed when the spec has no [flood]"
            ),
        }
        if self.malformed_share.is_some() || self.malformed_kinds.is_some() {
            let kinds = match &self.malformed_kinds {
                Some(ks) => Some(
                    ks.iter()
                        .map(|k| {
                            Malformed::ALL
                                .into_iter()
                                .find(|m| m.name() == k)
                                .ok_or_else(|| {
                                    anyhow::anyhow!("--malformed-kinds: unknown kind {k:?}")
                                })
                        })
                        .collect::<anyhow::Result<Vec<_>>>()?,
                ),
                None => raw.malformed.as_ref().and_then(|m| m.kinds.clone()),
            };
            let share = self
                .malformed_share
                .or(raw.malformed.as_ref().map(|m| m.share))
                .unwrap_or(0.0);
            raw.malformed = Some(spec::MalformedSpec { share, kinds });
        }
        let what = self
            .config
            .as_ref()
            .map_or_else(|| "command line".to_string(), |p| p.display().to_string());
        TrafficSpec::new(raw).with_context(|| format!("traffic spec from {what}"))
    }
}

/// `udpdemux gen`: pcap mode with `--out`, transmit mode with `--port`.
pub fn run(args: &GenArgs) -> anyhow::Result<()> {
    match (&args.out, &args.port) {
        (Some(_), Some(_)) => {
            anyhow::bail!("--out (write a pcap) and --port (transmit) are exclusive")
        }
        (None, None) => anyhow::bail!(
            "give --out FILE.pcap to write a pcap, or --port NAME with --eal ARGS to transmit"
        ),
        (Some(out), None) => {
            if args.eal.is_some() || args.stats_json.is_some() {
                anyhow::bail!("--eal and --stats-json belong to the transmit mode (--port)");
            }
            let spec = args.spec()?;
            let m = write_pcap(&spec, out, args.manifest.as_deref())?;
            println!(
                "wrote {} frames ({} bytes, {} valid, {} malformed) to {}; manifest {}",
                m.frames,
                m.bytes,
                m.valid,
                m.frames - m.valid,
                out.display(),
                args.manifest
                    .clone()
                    .unwrap_or_else(|| manifest_path(out))
                    .display()
            );
            Ok(())
        }
        (None, Some(_)) => {
            if args.manifest.is_some() {
                anyhow::bail!("--manifest belongs to the pcap mode (--out); use --stats-json when transmitting");
            }
            let spec = args.spec()?;
            tx::run(&spec, args)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file() {
        let args = GenArgs {
            dst: vec!["198.18.1.1:53=2".into(), "[fd00::1]:53".into()],
            size: Some(100),
            seed: Some(9),
            count: Some(10),
            malformed_share: Some(0.5),
            malformed_kinds: Some(vec!["truncated".into(), "no-port".into()]),
            ..GenArgs::default()
        };
        let spec = args.spec().expect("spec");
        assert_eq!((spec.seed(), spec.count()), (9, 10));
        assert_eq!(spec.targets().len(), 2);
        assert_eq!(
            spec.malformed_kinds(),
            &[Malformed::Truncated, Malformed::NoPort]
        );
        let bad = GenArgs {
            malformed_kinds: Some(vec!["nope".into()]),
            ..args.clone()
        };
        assert!(bad.spec().is_err());
        let half = GenArgs {
            flood_share: Some(0.1),
            ..args
        };
        assert!(half.spec().unwrap_err().to_string().contains("--flood-dst"));
    }

    #[test]
    fn manifest_path_appends_json() {
        assert_eq!(
            manifest_path(Path::new("/x/a.pcap")),
            PathBuf::from("/x/a.pcap.json")
        );
    }
}
