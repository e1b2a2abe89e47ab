//! The traffic spec (TOML) and the deterministic frame stream it describes.
//!
//! Every frame is written by [`udpdemux::parse::build`]; malformed ones are a
//! valid frame with bytes edited afterwards, each kind chosen so that
//! [`udpdemux::parse::parse`] rejects it for exactly one [`Reason`].
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tools::rng::SplitMix64;
use udpdemux::parse::build::{self, CsumMode, ExtSpec, FragSpec, FrameSpec, L3Spec};
use udpdemux::parse::{ether, ipv4, ipv6, udp, Family, Reason};

/// Shortest Ethernet frame a NIC delivers, FCS stripped (IEEE 802.3 minimum
/// 64 bytes on the wire less the 4-byte FCS); shorter frames get zero padding.
pub const MIN_FRAME: usize = 60;
/// Payloads are bounded by a 1500-byte IP MTU (RFC 894), per family.
pub const MTU: usize = 1500;
/// Payload used by "truncated" frames when the drawn size is smaller, so the
/// cut frame stays at least [`MIN_FRAME`] long and padding cannot hide the cut.
const TRUNCATED_MIN_PAYLOAD: u16 = 64;
/// Linux's default `net.ipv4.ip_local_port_range` (32768-60999): where a
/// kernel client's source ports come from.
const EPHEMERAL: (u16, u16) = (32768, 60999);
/// Arbitrary but fixed: 2023-11-14T22:13:20Z, so pcaps are byte-identical.
pub const BASE_TS_NS: u64 = 1_700_000_000 * 1_000_000_000;
/// One frame per microsecond in pcap timestamps (1 Mpps nominal).
pub const TS_STEP_NS: u64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read traffic spec {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("traffic spec {path}: {msg}")]
    Parse { path: PathBuf, msg: String },
    #[error("traffic spec: {0}")]
    Invalid(String),
}

/// Malformed frame kinds, as named in the spec (`kinds = [...]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Malformed {
    /// IP length runs past the end of the frame.
    Truncated,
    /// IPv4 header checksum wrong (IPv4 only).
    BadIpCsum,
    /// UDP checksum wrong.
    BadUdpCsum,
    /// UDP length runs past the IP payload.
    BadUdpLen,
    /// IPv6 UDP with checksum 0 (RFC 8200 §8.1; IPv6 only).
    Ipv6ZeroCsum,
    /// First fragment (MF set, offset 0).
    Fragment,
    /// ARP request (not IP at all; needs an IPv4 destination to ask for).
    NotIp,
    /// IP carrying TCP.
    NotUdp,
    /// A valid datagram to an address:port no `[[dst]]` names.
    NoPort,
}

impl Malformed {
    pub const ALL: [Malformed; 9] = [
        Malformed::Truncated,
        Malformed::BadIpCsum,
        Malformed::BadUdpCsum,
        Malformed::BadUdpLen,
        Malformed::Ipv6ZeroCsum,
        Malformed::Fragment,
        Malformed::NotIp,
        Malformed::NotUdp,
        Malformed::NoPort,
    ];

    pub const fn index(self) -> usize {
        self as usize
    }

    /// The spec's name for it.
    pub const fn name(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::BadIpCsum => "bad-ip-csum",
            Malformed::BadUdpCsum => "bad-udp-csum",
            Malformed::BadUdpLen => "bad-udp-len",
            Malformed::Ipv6ZeroCsum => "ipv6-zero-csum",
            Malformed::Fragment => "fragment",
            Malformed::NotIp => "not-ip",
            Malformed::NotUdp => "not-udp",
            Malformed::NoPort => "no-port",
        }
    }

    /// The parse error reason the engine must count it under; `None` for
    /// `NoPort`, which parses fine and is dropped by the socket lookup.
    pub const fn expected_reason(self) -> Option<Reason> {
        match self {
            Malformed::Truncated => Some(Reason::Truncated),
            Malformed::BadIpCsum => Some(Reason::BadIpChecksum),
            Malformed::BadUdpCsum => Some(Reason::UdpChecksum),
            Malformed::BadUdpLen => Some(Reason::BadUdpLength),
            Malformed::Ipv6ZeroCsum => Some(Reason::Udp6ZeroChecksum),
            Malformed::Fragment => Some(Reason::FragmentFirst),
            Malformed::NotIp => Some(Reason::NotIp),
            Malformed::NotUdp => Some(Reason::NotUdp),
            Malformed::NoPort => None,
        }
    }

    /// The family this kind must be built on, if it is tied to one.
    const fn forced_family(self) -> Option<Family> {
        match self {
            Malformed::BadIpCsum | Malformed::NotIp => Some(Family::V4),
            Malformed::Ipv6ZeroCsum => Some(Family::V6),
            _ => None,
        }
    }
}

/// What a generated frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A datagram a configured socket must receive.
    Valid,
    Malformed(Malformed),
}

/// One generated frame and what the receiver must make of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenFrame {
    /// The Ethernet frame without FCS, padded to [`MIN_FRAME`].
    pub bytes: Vec<u8>,
    pub kind: FrameKind,
    /// Where the datagram is addressed (for malformed kinds: where it was
    /// aimed before being broken; `None` for not-ip).
    pub dst: Option<SocketAddr>,
    /// `None` for not-ip frames.
    pub family: Option<Family>,
    pub vlan_tags: u8,
    /// Index into [`TrafficSpec::targets`] for `Valid` frames.
    pub target: Option<usize>,
}

/// The spec file as written. CLI flags edit this before [`TrafficSpec::new`]
/// checks it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Frames in a pcap (ignored by the transmit mode, which cycles).
    #[serde(default = "d_count")]
    pub count: u64,
    /// Share of non-flood frames that are IPv6; unset: destinations are
    /// drawn by weight regardless of family.
    #[serde(default)]
    pub ipv6_share: Option<f64>,
    /// Distinct (source address, source port) pairs per destination.
    #[serde(default = "d_flows")]
    pub flows: u32,
    #[serde(default = "d_src_v4")]
    pub src_v4: String,
    #[serde(default = "d_src_v6")]
    pub src_v6: String,
    #[serde(default = "d_src_mac")]
    pub src_mac: String,
    #[serde(default = "d_dst_mac")]
    pub dst_mac: String,
    /// One UDP payload size for every frame (exclusive with `sizes`).
    #[serde(default)]
    pub size: Option<u16>,
    /// UDP payload size mix: (bytes, share).
    #[serde(default)]
    pub sizes: Option<Vec<(u16, f64)>>,
    /// VLAN IDs, outermost first: one tag is 802.1Q (0x8100), two are
    /// 802.1ad (outer 0x88a8) + 802.1Q.
    #[serde(default)]
    pub vlan: Vec<u16>,
    /// Share of frames carrying the tags (default 1 when `vlan` is set).
    #[serde(default)]
    pub vlan_share: Option<f64>,
    #[serde(default, rename = "dst")]
    pub dsts: Vec<DstSpec>,
    #[serde(default)]
    pub flood: Option<FloodSpec>,
    #[serde(default)]
    pub malformed: Option<MalformedSpec>,
}

/// A destination socket. `size`/`sizes`/`vlan`/`vlan_share` here override
/// the top-level ones for this destination only.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DstSpec {
    pub addr: SocketAddr,
    #[serde(default = "d_weight")]
    pub weight: f64,
    #[serde(default)]
    pub size: Option<u16>,
    #[serde(default)]
    pub sizes: Option<Vec<(u16, f64)>>,
    #[serde(default)]
    pub vlan: Option<Vec<u16>>,
    #[serde(default)]
    pub vlan_share: Option<f64>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FloodSpec {
    /// Share of all frames.
    pub share: f64,
    pub dst: SocketAddr,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MalformedSpec {
    /// Share of all frames; kinds take turns round-robin, so each gets
    /// its exact share of them.
    pub share: f64,
    /// Default: every kind the destinations' families allow.
    #[serde(default)]
    pub kinds: Option<Vec<Malformed>>,
}

fn d_seed() -> u64 {
    1
}
fn d_count() -> u64 {
    1000
}
fn d_flows() -> u32 {
    64
}
fn d_src_v4() -> String {
    "198.18.0.0/16".into()
}
fn d_src_v6() -> String {
    "fd00:1::/64".into()
}
fn d_src_mac() -> String {
    "02:00:00:00:00:01".into()
}
fn d_dst_mac() -> String {
    "02:00:00:00:00:02".into()
}
fn d_weight() -> f64 {
    1.0
}

impl SpecFile {
    /// A spec with defaults and no destinations (for flag-only use).
    pub fn empty() -> SpecFile {
        // Every field has a default, so the empty document is valid TOML for it.
        toml::from_str("").unwrap_or_else(|_| unreachable!("all SpecFile fields have defaults"))
    }
}

/// A destination the generator aims at: a `[[dst]]` or the flood victim.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    sizes: Vec<u16>,
    size_cum: Vec<f64>,
    vlans: Vec<(u16, u16)>,
    vlan_share: f64,
    flows: Vec<(IpAddr, u16)>,
}

/// A checked spec, ready to generate.
#[derive(Clone, Debug)]
pub struct TrafficSpec {
    raw: SpecFile,
    targets: Vec<Target>,
    /// Indices of `[[dst]]` targets (not the victim unless also listed),
    /// with cumulative weights: all, IPv4 only, IPv6 only.
    pick_all: (Vec<usize>, Vec<f64>),
    pick_v4: (Vec<usize>, Vec<f64>),
    pick_v6: (Vec<usize>, Vec<f64>),
    flood: Option<(f64, usize)>,
    malformed: Option<(f64, Vec<Malformed>)>,
    no_port: u16,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// "198.18.0.0/16" -> (network, prefix length), host bits cleared.
fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    let addr: IpAddr = a.parse().ok()?;
    let len: u8 = l.parse().ok()?;
    match addr {
        IpAddr::V4(v) if len <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            Some((IpAddr::V4(Ipv4Addr::from(u32::from(v) & mask)), len))
        }
        IpAddr::V6(v) if len <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            Some((IpAddr::V6(Ipv6Addr::from(u128::from(v) & mask)), len))
        }
        _ => None,
    }
}

/// A host address inside the prefix; avoids the all-zeros and all-ones
/// host parts where the prefix has room (network/broadcast, RFC 919/922;
/// subnet-router anycast, RFC 4291 §2.6.1).
fn host_in(rng: &mut SplitMix64, net: IpAddr, len: u8) -> IpAddr {
    match net {
        IpAddr::V4(n) => {
            let bits = 32 - u32::from(len);
            if bits == 0 {
                return net;
            }
            let mask = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            loop {
                let h = (rng.next_u64() as u32) & mask;
                if bits < 2 || (h != 0 && h != mask) {
                    return IpAddr::V4(Ipv4Addr::from(u32::from(n) | h));
                }
            }
        }
        IpAddr::V6(n) => {
            let bits = 128 - u32::from(len);
            if bits == 0 {
                return net;
            }
            let mask = if bits == 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            };
            loop {
                let r = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
                let h = r & mask;
                if bits < 2 || h != 0 {
                    return IpAddr::V6(Ipv6Addr::from(u128::from(n) | h));
                }
            }
        }
    }
}

/// Addresses that no receiver would deliver: unspecified, multicast,
/// loopback (Linux drops v6 loopback on a non-loopback device, and v4
/// 127/8 as a martian), broadcast.
fn unusable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            v.is_unspecified() || v.is_multicast() || v.is_loopback() || v.is_broadcast()
        }
        IpAddr::V6(v) => v.is_unspecified() || v.is_multicast() || v.is_loopback(),
    }
}

fn family_of(a: &SocketAddr) -> Family {
    if a.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    }
}

fn max_payload(f: Family) -> usize {
    match f {
        Family::V4 => MTU - ipv4::HEADER_LEN - udp::HEADER_LEN,
        Family::V6 => MTU - ipv6::HEADER_LEN - udp::HEADER_LEN,
    }
}

fn share_ok(name: &str, v: f64) -> Result<f64, SpecError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(SpecError::Invalid(format!(
            "{name} = {v}: must be a share between 0 and 1"
        )))
    }
}

fn cumulative(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut acc = 0.0;
    weights
        .map(|w| {
            acc += w;
            acc
        })
        .collect()
}

fn vlan_tags(ids: &[u16], who: &str) -> Result<Vec<(u16, u16)>, SpecError> {
    // IEEE 802.1Q: VID 4095 is reserved; 0 is a priority tag (allowed).
    if let Some(bad) = ids.iter().find(|&&v| v > 4094) {
        return Err(SpecError::Invalid(format!(
            "{who}: VLAN ID {bad} out of range 0..=4094"
        )));
    }
    match ids {
        [] => Ok(Vec::new()),
        [one] => Ok(vec![(ether::ethertype::VLAN, *one)]),
        [outer, inner] => Ok(vec![
            (ether::ethertype::QINQ, *outer),
            (ether::ethertype::VLAN, *inner),
        ]),
        _ => Err(SpecError::Invalid(format!(
            "{who}: at most two VLAN tags (802.1ad outer + 802.1Q inner)"
        ))),
    }
}

fn size_mix(
    size: Option<u16>,
    sizes: &Option<Vec<(u16, f64)>>,
    fam: Family,
    who: &str,
) -> Result<(Vec<u16>, Vec<f64>), SpecError> {
    let mix: Vec<(u16, f64)> = match (size, sizes) {
        (Some(_), Some(_)) => {
            return Err(SpecError::Invalid(format!(
                "{who}: give `size` or `sizes`, not both"
            )))
        }
        (Some(s), None) => vec![(s, 1.0)],
        (None, Some(v)) => v.clone(),
        (None, None) => vec![(64, 1.0)],
    };
    if mix.is_empty() {
        return Err(SpecError::Invalid(format!("{who}: `sizes` is empty")));
    }
    for &(s, w) in &mix {
        if usize::from(s) > max_payload(fam) {
            return Err(SpecError::Invalid(format!(
                "{who}: payload size {s} exceeds {} bytes, the {:?} UDP payload of a {MTU}-byte MTU",
                max_payload(fam),
                fam
            )));
        }
        if !(w.is_finite() && w > 0.0) {
            return Err(SpecError::Invalid(format!(
                "{who}: size share {w} must be positive"
            )));
        }
    }
    Ok((
        mix.iter().map(|m| m.0).collect(),
        cumulative(mix.iter().map(|m| m.1)),
    ))
}

impl TrafficSpec {
    /// Reads without checking, so callers can apply overrides first.
    pub fn read_file(path: &Path) -> Result<SpecFile, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| SpecError::Parse {
            path: path.into(),
            msg: e
                .to_string()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" "),
        })
    }

    #[cfg(test)]
    pub fn from_toml(text: &str) -> Result<TrafficSpec, SpecError> {
        let raw: SpecFile = toml::from_str(text).map_err(|e| SpecError::Parse {
            path: "<string>".into(),
            msg: e.to_string(),
        })?;
        TrafficSpec::new(raw)
    }

    /// Checks `raw` and precomputes everything the stream needs.
    pub fn new(raw: SpecFile) -> Result<TrafficSpec, SpecError> {
        if raw.dsts.is_empty() {
            return Err(SpecError::Invalid("no [[dst]] destinations".into()));
        }
        if raw.flows == 0 || raw.flows > 65_536 {
            return Err(SpecError::Invalid(format!(
                "flows = {}: must be 1..=65536",
                raw.flows
            )));
        }
        let src_mac = parse_mac(&raw.src_mac).ok_or_else(|| {
            SpecError::Invalid(format!(
                "src_mac {:?} is not aa:bb:cc:dd:ee:ff",
                raw.src_mac
            ))
        })?;
        let dst_mac = parse_mac(&raw.dst_mac).ok_or_else(|| {
            SpecError::Invalid(format!(
                "dst_mac {:?} is not aa:bb:cc:dd:ee:ff",
                raw.dst_mac
            ))
        })?;
        if src_mac[0] & 1 != 0 {
            return Err(SpecError::Invalid(format!(
                "src_mac {} is a group address; a source must be unicast (IEEE 802)",
                raw.src_mac
            )));
        }
        let src4 = match parse_prefix(&raw.src_v4) {
            Some((IpAddr::V4(n), l)) => (IpAddr::V4(n), l),
            _ => {
                return Err(SpecError::Invalid(format!(
                    "src_v4 {:?} is not an IPv4 prefix like 198.18.0.0/16",
                    raw.src_v4
                )))
            }
        };
        let src6 = match parse_prefix(&raw.src_v6) {
            Some((IpAddr::V6(n), l)) => (IpAddr::V6(n), l),
            _ => {
                return Err(SpecError::Invalid(format!(
                    "src_v6 {:?} is not an IPv6 prefix like fd00:1::/64",
                    raw.src_v6
                )))
            }
        };
        for (name, (net, _)) in [("src_v4", src4), ("src_v6", src6)] {
            if unusable(net) || matches!(net, IpAddr::V4(v) if v.octets()[0] == 0) {
                return Err(SpecError::Invalid(format!(
                    "{name} {net}: not a unicast source prefix"
                )));
            }
        }

        let top_vlan = vlan_tags(&raw.vlan, "vlan")?;
        let top_vlan_share = share_ok("vlan_share", raw.vlan_share.unwrap_or(1.0))?;
        let mut targets = Vec::new();
        let mut weights = Vec::new();
        for (i, d) in raw.dsts.iter().enumerate() {
            let who = format!("dst {}", d.addr);
            // A group is a destination too (multicast fan-out, issue 18):
            // its frames go to the group's Ethernet address.
            let group = d.addr.ip().is_multicast();
            if (unusable(d.addr.ip()) && !group) || d.addr.port() == 0 {
                return Err(SpecError::Invalid(format!(
                    "{who}: not a unicast or multicast address with a non-zero port"
                )));
            }
            if raw.dsts[..i].iter().any(|o| o.addr == d.addr) {
                return Err(SpecError::Invalid(format!("{who} listed twice")));
            }
            if !(d.weight.is_finite() && d.weight > 0.0) {
                return Err(SpecError::Invalid(format!(
                    "{who}: weight {} must be positive",
                    d.weight
                )));
            }
            let fam = family_of(&d.addr);
            let (size, sizes) = if d.size.is_some() || d.sizes.is_some() {
                (d.size, &d.sizes)
            } else {
                (raw.size, &raw.sizes)
            };
            let (sizes, size_cum) = size_mix(size, sizes, fam, &who)?;
            let vlans = match &d.vlan {
                Some(v) => vlan_tags(v, &who)?,
                None => top_vlan.clone(),
            };
            let vlan_share = match d.vlan_share {
                Some(s) => share_ok("dst.vlan_share", s)?,
                None => top_vlan_share,
            };
            targets.push(Target {
                addr: d.addr,
                sizes,
                size_cum,
                vlans,
                vlan_share,
                flows: Vec::new(),
            });
            weights.push(d.weight);
        }
        let listed = targets.len();
        let sel = |f: Option<Family>| {
            let idx: Vec<usize> = (0..listed)
                .filter(|&i| f.is_none() || f == Some(family_of(&targets[i].addr)))
                .collect();
            let cum = cumulative(idx.iter().map(|&i| weights[i]));
            (idx, cum)
        };
        let pick_all = sel(None);
        let pick_v4 = sel(Some(Family::V4));
        let pick_v6 = sel(Some(Family::V6));

        if let Some(s) = raw.ipv6_share {
            let s = share_ok("ipv6_share", s)?;
            if s > 0.0 && pick_v6.0.is_empty() {
                return Err(SpecError::Invalid(format!(
                    "ipv6_share = {s} but no IPv6 [[dst]]"
                )));
            }
            if s < 1.0 && pick_v4.0.is_empty() {
                return Err(SpecError::Invalid(format!(
                    "ipv6_share = {s} leaves IPv4 frames but there is no IPv4 [[dst]]"
                )));
            }
        }

        let mut flood = None;
        let mut taken = 0.0;
        if let Some(f) = &raw.flood {
            let share = share_ok("flood.share", f.share)?;
            if unusable(f.dst.ip()) || f.dst.port() == 0 {
                return Err(SpecError::Invalid(format!(
                    "flood.dst {}: not a unicast address with a non-zero port",
                    f.dst
                )));
            }
            let idx = match targets.iter().position(|t| t.addr == f.dst) {
                Some(i) => i,
                None => {
                    let fam = family_of(&f.dst);
                    let (sizes, size_cum) = size_mix(raw.size, &raw.sizes, fam, "flood")?;
                    targets.push(Target {
                        addr: f.dst,
                        sizes,
                        size_cum,
                        vlans: top_vlan.clone(),
                        vlan_share: top_vlan_share,
                        flows: Vec::new(),
                    });
                    targets.len() - 1
                }
            };
            taken += share;
            flood = Some((share, idx));
        }
        let mut malformed = None;
        if let Some(m) = &raw.malformed {
            let share = share_ok("malformed.share", m.share)?;
            let kinds: Vec<Malformed> = match &m.kinds {
                Some(k) => k.clone(),
                None => Malformed::ALL
                    .into_iter()
                    .filter(|k| match k.forced_family() {
                        Some(Family::V4) => !pick_v4.0.is_empty(),
                        Some(Family::V6) => !pick_v6.0.is_empty(),
                        None => true,
                    })
                    .collect(),
            };
            if share > 0.0 && kinds.is_empty() {
                return Err(SpecError::Invalid("malformed.kinds is empty".into()));
            }
            for k in &kinds {
                match k.forced_family() {
                    Some(Family::V4) if pick_v4.0.is_empty() => {
                        return Err(SpecError::Invalid(format!(
                            "malformed kind {} needs an IPv4 [[dst]]",
                            k.name()
                        )))
                    }
                    Some(Family::V6) if pick_v6.0.is_empty() => {
                        return Err(SpecError::Invalid(format!(
                            "malformed kind {} needs an IPv6 [[dst]]",
                            k.name()
                        )))
                    }
                    _ => {}
                }
            }
            taken += share;
            malformed = Some((share, kinds));
        }
        if taken > 1.0 + 1e-9 {
            return Err(SpecError::Invalid(format!(
                "flood.share + malformed.share = {taken} exceeds 1"
            )));
        }

        // The first port from 9 (discard, RFC 863) that no target uses, on
        // any address: a wildcard socket on a used port would catch it.
        let mut no_port = 9u16;
        while targets.iter().any(|t| t.addr.port() == no_port) {
            no_port += 1;
        }

        // Flows: a sub-stream per target so they do not depend on order.
        let dst_ips: HashSet<IpAddr> = targets.iter().map(|t| t.addr.ip()).collect();
        for (i, t) in targets.iter_mut().enumerate() {
            let mut rng = SplitMix64::fork(raw.seed, 1 + i as u64);
            let (net, len) = if t.addr.is_ipv4() { src4 } else { src6 };
            let mut seen = HashSet::new();
            let want = raw.flows as usize;
            // Bounded: tiny prefixes may not have `flows` distinct pairs
            // apart from destination addresses.
            for _ in 0..want.saturating_mul(32) {
                if seen.len() == want {
                    break;
                }
                let src = host_in(&mut rng, net, len);
                if dst_ips.contains(&src) {
                    continue;
                }
                let span = u64::from(EPHEMERAL.1 - EPHEMERAL.0) + 1;
                let port = EPHEMERAL.0 + rng.below(span) as u16;
                if seen.insert((src, port)) {
                    t.flows.push((src, port));
                }
            }
            if t.flows.is_empty() {
                return Err(SpecError::Invalid(format!(
                    "no source address in {net}/{len} differs from the destinations"
                )));
            }
        }

        Ok(TrafficSpec {
            raw,
            targets,
            pick_all,
            pick_v4,
            pick_v6,
            flood,
            malformed,
            no_port,
            src_mac,
            dst_mac,
        })
    }

    pub fn seed(&self) -> u64 {
        self.raw.seed
    }
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.raw.count
    }
    /// Every socket a valid frame can go to: the `[[dst]]` list in order,
    /// then the flood victim if it is not listed.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }
    /// The port no-port frames go to (on a listed destination's address).
    pub fn no_port(&self) -> u16 {
        self.no_port
    }
    /// Malformed kinds this spec can produce.
    pub fn malformed_kinds(&self) -> &[Malformed] {
        self.malformed.as_ref().map_or(&[], |m| &m.1)
    }

    /// The spec's `count` frames.
    pub fn frames(&self) -> std::iter::Take<Frames<'_>> {
        self.stream()
            .take(usize::try_from(self.raw.count).unwrap_or(usize::MAX))
    }

    /// The endless stream whose first `count` frames are [`Self::frames`].
    pub fn stream(&self) -> Frames<'_> {
        Frames {
            spec: self,
            rng: SplitMix64::new(self.raw.seed),
            index: 0,
            malformed_turn: 0,
        }
    }
}

/// Iterator over generated frames.
pub struct Frames<'a> {
    spec: &'a TrafficSpec,
    rng: SplitMix64,
    index: u64,
    malformed_turn: usize,
}

impl Iterator for Frames<'_> {
    type Item = GenFrame;

    fn next(&mut self) -> Option<GenFrame> {
        let spec = self.spec;
        let r = self.rng.unit();
        let flood_share = spec.flood.map_or(0.0, |f| f.0);
        let (kind, ti) = match (&spec.flood, &spec.malformed) {
            (Some((share, victim)), _) if r < *share => (FrameKind::Valid, *victim),
            (_, Some((share, kinds))) if r < flood_share + share && !kinds.is_empty() => {
                let k = kinds[self.malformed_turn % kinds.len()];
                self.malformed_turn += 1;
                let ti = self.pick_target(k.forced_family());
                (FrameKind::Malformed(k), ti)
            }
            _ => (FrameKind::Valid, self.pick_target(None)),
        };
        let frame = self.build(kind, ti);
        self.index += 1;
        Some(frame)
    }
}

impl Frames<'_> {
    fn pick_target(&mut self, forced: Option<Family>) -> usize {
        let s = self.spec;
        let fam = forced.or_else(|| {
            s.raw.ipv6_share.map(|p| {
                if self.rng.unit() < p {
                    Family::V6
                } else {
                    Family::V4
                }
            })
        });
        let (idx, cum) = match fam {
            None => &s.pick_all,
            Some(Family::V4) => &s.pick_v4,
            Some(Family::V6) => &s.pick_v6,
        };
        // new() guarantees the family asked for has a target.
        idx.get(self.rng.pick(cum)).copied().unwrap_or(0)
    }

    fn build(&mut self, kind: FrameKind, ti: usize) -> GenFrame {
        let spec = self.spec;
        let t = &spec.targets[ti];
        let rng = &mut self.rng;
        let (src, sport) = t.flows[rng.below(t.flows.len() as u64) as usize];
        let mut size = t.sizes[rng.pick(&t.size_cum)];
        let tagged = !t.vlans.is_empty() && rng.unit() < t.vlan_share;
        let vlans: &[(u16, u16)] = if tagged { &t.vlans } else { &[] };
        let bad = match kind {
            FrameKind::Valid => None,
            FrameKind::Malformed(m) => Some(m),
        };
        if bad == Some(Malformed::Truncated) {
            size = size.max(TRUNCATED_MIN_PAYLOAD);
        }
        let payload: Vec<u8> = (0..usize::from(size))
            .map(|i| match self.index.to_be_bytes().get(i) {
                Some(b) => *b,
                None => (i as u8).wrapping_add(self.index as u8),
            })
            .collect();
        let dst = match bad {
            Some(Malformed::NoPort) => SocketAddr::new(t.addr.ip(), spec.no_port),
            _ => t.addr,
        };
        let udp_csum = match bad {
            Some(Malformed::BadUdpCsum) => CsumMode::Wrong,
            Some(Malformed::Ipv6ZeroCsum) => CsumMode::Zero,
            _ => CsumMode::Correct,
        };
        let frag = bad == Some(Malformed::Fragment);
        let ident = self.index as u16;
        let ext6 = [ExtSpec::Fragment {
            offset: 0,
            more: true,
            ident: u32::from(ident),
        }];
        let l3 = match (src, dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => L3Spec::V4 {
                src: s,
                dst: d,
                ttl: 64,
                options: &[],
                ident,
                // Linux sends UDP with DF (IP_PMTUDISC_WANT); a fragment cannot have it.
                frag: FragSpec {
                    dont_frag: !frag,
                    more_frags: frag,
                    offset: 0,
                },
            },
            (IpAddr::V6(s), IpAddr::V6(d)) => L3Spec::V6 {
                src: s,
                dst: d,
                hop_limit: 64,
                ext: if frag { &ext6 } else { &[] },
            },
            // Flows are drawn from the prefix of the target's own family.
            _ => unreachable!("source and destination families match by construction"),
        };
        // A group's frames go to its Ethernet address (RFC 1112 §6.4, RFC 2464 §7).
        let dst_mac = match dst.ip() {
            IpAddr::V4(g) if g.is_multicast() => {
                let o = g.octets();
                [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
            }
            IpAddr::V6(g) if g.is_multicast() => ether::ipv6_multicast_mac(&g),
            _ => spec.dst_mac,
        };
        let fs = FrameSpec {
            src_mac: spec.src_mac,
            dst_mac,
            vlans,
            l3,
            sport,
            dport: dst.port(),
            payload: &payload,
            udp_csum,
        };
        // Sizes are bounded by the MTU in new(), so the writer cannot refuse.
        let mut bytes =
            build::to_vec(&fs).unwrap_or_else(|e| unreachable!("checked spec builds: {e}"));
        let l3_off = ether::HEADER_LEN + ether::VLAN_TAG_LEN * vlans.len();
        let fam = family_of(&dst);
        let l4_off = l3_off
            + if fam == Family::V4 {
                ipv4::HEADER_LEN
            } else {
                ipv6::HEADER_LEN
            };
        let mut family = Some(fam);
        match bad {
            Some(Malformed::Truncated) => {
                // Cut half the payload: the IP length now runs past the frame.
                let keep = bytes.len() - usize::from(size) / 2;
                bytes.truncate(keep);
            }
            Some(Malformed::BadIpCsum) => {
                // XOR with 0x5555 can never turn the field into its other
                // ones'-complement zero (0x0000 <-> 0xffff), so it stays wrong.
                if let Some(c) = bytes.get_mut(l3_off + 10..l3_off + 12) {
                    c[0] ^= 0x55;
                    c[1] ^= 0x55;
                }
            }
            Some(Malformed::BadUdpLen) => {
                // UDP length 8 bytes past the IP payload (Linux: short_packet).
                let ulen = udp::HEADER_LEN + usize::from(size) + 8;
                if let Some(f) = bytes.get_mut(l4_off + 4..l4_off + 6) {
                    f.copy_from_slice(&(ulen as u16).to_be_bytes());
                }
            }
            Some(Malformed::NotUdp) => {
                const TCP: u8 = 6;
                if fam == Family::V4 {
                    if let Some(p) = bytes.get_mut(l3_off + 9) {
                        *p = TCP;
                    }
                    if let Some(h) = bytes.get_mut(l3_off..l4_off) {
                        ipv4::Ipv4Packet::new_unchecked(h).fill_checksum();
                    }
                } else if let Some(p) = bytes.get_mut(l3_off + 6) {
                    *p = TCP;
                }
            }
            Some(Malformed::NotIp) => {
                // An ARP request (RFC 826) for the destination's address.
                if let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst.ip()) {
                    bytes.truncate(l3_off);
                    bytes[..6].copy_from_slice(&[0xff; 6]);
                    bytes[l3_off - 2..l3_off].copy_from_slice(&ether::ethertype::ARP.to_be_bytes());
                    bytes.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
                    bytes.extend_from_slice(&spec.src_mac);
                    bytes.extend_from_slice(&s.octets());
                    bytes.extend_from_slice(&[0; 6]);
                    bytes.extend_from_slice(&d.octets());
                }
                family = None;
            }
            None
            | Some(
                Malformed::BadUdpCsum
                | Malformed::Ipv6ZeroCsum
                | Malformed::Fragment
                | Malformed::NoPort,
            ) => {}
        }
        if bytes.len() < MIN_FRAME {
            bytes.resize(MIN_FRAME, 0);
        }
        GenFrame {
            bytes,
            kind,
            dst: if bad == Some(Malformed::NotIp) {
                None
            } else {
                Some(dst)
            },
            family,
            vlan_tags: vlans.len() as u8,
            target: (kind == FrameKind::Valid).then_some(ti),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udpdemux::parse::{parse, Offload, ParseError};

    const SPEC: &str = r#"
        seed = 7
        count = 3000
        ipv6_share = 0.5
        flows = 8
        vlan = [100, 200]
        vlan_share = 0.3
        sizes = [[0, 0.2], [64, 0.5], [1452, 0.3]]
        [[dst]]
        addr = "198.18.1.1:53"
        weight = 3
        [[dst]]
        addr = "198.18.1.2:53"
        [[dst]]
        addr = "[fd00::1]:53"
        [[dst]]
        addr = "[fd00::2]:5353"
        size = 1
        vlan = []
        [flood]
        share = 0.2
        dst = "198.18.1.9:9999"
        [malformed]
        share = 0.3
    "#;

    #[test]
    fn each_malformed_kind_hits_exactly_its_reason() {
        let spec = TrafficSpec::from_toml(SPEC).expect("spec");
        let mut seen = [0u64; 9];
        for f in spec.frames() {
            assert!(f.bytes.len() >= MIN_FRAME);
            let got = parse(&f.bytes, Offload::default());
            match f.kind {
                FrameKind::Valid => {
                    let d = got.expect("valid frame parses");
                    assert_eq!(Some(SocketAddr::new(d.dst, d.dport)), f.dst);
                    assert_eq!(f.target.map(|t| spec.targets()[t].addr), f.dst);
                }
                FrameKind::Malformed(Malformed::NoPort) => {
                    let d = got.expect("no-port parses");
                    assert_eq!(d.dport, spec.no_port());
                    assert!(spec.targets().iter().all(|t| t.addr.port() != d.dport));
                }
                FrameKind::Malformed(m) => {
                    let e: ParseError = got.expect_err("malformed frame must not parse");
                    assert_eq!(Some(e.reason()), m.expected_reason(), "{m:?}: {e:?}");
                    seen[m.index()] += 1;
                }
            }
        }
        // Round-robin: 3000 * 0.3 / 9 = 100 each, give or take the draw.
        for m in Malformed::ALL.iter().filter(|m| **m != Malformed::NoPort) {
            assert!(seen[m.index()] > 50, "{m:?} only {}", seen[m.index()]);
        }
    }

    #[test]
    fn same_seed_same_frames_other_seed_differs() {
        let a: Vec<_> = TrafficSpec::from_toml(SPEC)
            .expect("spec")
            .frames()
            .collect();
        let b: Vec<_> = TrafficSpec::from_toml(SPEC)
            .expect("spec")
            .frames()
            .collect();
        assert_eq!(a, b);
        let c: Vec<_> = TrafficSpec::from_toml(&SPEC.replace("seed = 7", "seed = 8"))
            .expect("spec")
            .frames()
            .collect();
        assert_ne!(a, c);
    }

    #[test]
    fn shares_weights_and_flows_hold() {
        let spec = TrafficSpec::from_toml(SPEC).expect("spec");
        let frames: Vec<_> = spec.frames().collect();
        let n = frames.len() as f64;
        let victim: SocketAddr = "198.18.1.9:9999".parse().expect("addr");
        let flood = frames.iter().filter(|f| f.dst == Some(victim)).count() as f64;
        assert!((flood / n - 0.2).abs() < 0.03, "flood share {}", flood / n);
        let a: SocketAddr = "198.18.1.1:53".parse().expect("addr");
        let b: SocketAddr = "198.18.1.2:53".parse().expect("addr");
        let na = frames
            .iter()
            .filter(|f| f.kind == FrameKind::Valid && f.dst == Some(a))
            .count() as f64;
        let nb = frames
            .iter()
            .filter(|f| f.kind == FrameKind::Valid && f.dst == Some(b))
            .count() as f64;
        assert!((na / nb - 3.0).abs() < 0.8, "weight 3:1 gave {na}:{nb}");
        // Per destination at most `flows` distinct (src, sport).
        let mut pairs = HashSet::new();
        for f in frames
            .iter()
            .filter(|f| f.kind == FrameKind::Valid && f.dst == Some(a))
        {
            let d = parse(&f.bytes, Offload::default()).expect("valid");
            pairs.insert((d.src, d.sport));
            assert!(d.src.to_string().starts_with("198.18."));
            assert!((EPHEMERAL.0..=EPHEMERAL.1).contains(&d.sport));
        }
        assert_eq!(pairs.len(), 8);
        // Per-dst overrides: fd00::2 has 1-byte payloads and no tags.
        let d2: SocketAddr = "[fd00::2]:5353".parse().expect("addr");
        for f in frames
            .iter()
            .filter(|f| f.kind == FrameKind::Valid && f.dst == Some(d2))
        {
            let d = parse(&f.bytes, Offload::default()).expect("valid");
            assert_eq!((d.payload_len, d.vlan_count), (1, 0));
        }
        let tagged = frames.iter().filter(|f| f.vlan_tags == 2).count() as f64;
        assert!(tagged > 0.15 * n && tagged < 0.35 * n, "tagged {tagged}");
    }

    #[test]
    fn short_frames_are_padded_to_60() {
        let spec =
            TrafficSpec::from_toml("size = 0\n[[dst]]\naddr = \"198.18.1.1:7\"").expect("spec");
        let f = spec.frames().next().expect("one");
        assert_eq!(f.bytes.len(), 60);
        let d = parse(&f.bytes, Offload::default()).expect("valid");
        assert_eq!(d.payload_len, 0);
    }

    #[test]
    fn bad_specs_are_refused_with_a_reason() {
        let cases = [
            ("", "no [[dst]]"),
            ("ipv6_share = 0.5\n[[dst]]\naddr = \"198.18.1.1:53\"", "no IPv6"),
            ("size = 1473\n[[dst]]\naddr = \"198.18.1.1:53\"", "exceeds 1472"),
            ("[[dst]]\naddr = \"[fd00::1]:53\"\nsize = 1453", "exceeds 1452"),
            ("vlan = [1, 2, 3]\n[[dst]]\naddr = \"198.18.1.1:53\"", "at most two"),
            ("vlan = [4095]\n[[dst]]\naddr = \"198.18.1.1:53\"", "4095"),
            ("[[dst]]\naddr = \"[::1]:53\"", "unicast"),
            ("[[dst]]\naddr = \"198.18.1.1:53\"\n[malformed]\nshare = 0.1\nkinds = [\"ipv6-zero-csum\"]", "needs an IPv6"),
            ("[[dst]]\naddr = \"198.18.1.1:53\"\n[flood]\nshare = 0.7\ndst = \"198.18.1.2:1\"\n[malformed]\nshare = 0.4", "exceeds 1"),
            ("bogus = 1\n[[dst]]\naddr = \"198.18.1.1:53\"", "unknown field"),
            ("src_v4 = \"fd00::/8\"\n[[dst]]\naddr = \"198.18.1.1:53\"", "src_v4"),
        ];
        for (text, want) in cases {
            let err = TrafficSpec::from_toml(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
