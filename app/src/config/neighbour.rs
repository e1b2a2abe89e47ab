//! `[neighbour]`: the neighbour table `send_burst` resolves next hops with
//! (`crate::neigh`), the kernel's `net.ipv4.neigh.*` knobs by their kernel
//! names where there is one, and static entries (`ip neigh add ... nud
//! permanent`).
use std::net::IpAddr;

use serde::Deserialize;

use super::{IfAddr, PortConf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourConf {
    /// Neighbours at most, over every port (the kernel's `gc_thresh3`).
    #[serde(default = "d_entries")]
    pub entries: u32,
    /// Datagrams held per unresolved neighbour (`unres_qlen`).
    #[serde(default = "d_unres_qlen")]
    pub unres_qlen: u32,
    /// Solicits sent before a resolution fails (`mcast_solicit`).
    #[serde(default = "d_mcast_solicit")]
    pub mcast_solicit: u8,
    /// Between two solicits (`retrans_time_ms`).
    #[serde(default = "d_retrans_ms")]
    pub retrans_ms: u64,
    /// A confirmed entry stays reachable this long (`base_reachable_time_ms`).
    #[serde(default = "d_reachable_ms")]
    pub reachable_ms: u64,
    /// A stale entry unused this long is collected (`gc_stale_time`).
    #[serde(default = "d_gc_stale_ms")]
    pub gc_stale_ms: u64,
    /// Learn the MAC of on-link sources from the datagrams they send
    /// (`heard`); off: only ARP and neighbour discovery teach the table.
    #[serde(default = "d_true")]
    pub learn_from_traffic: bool,
    /// Permanent entries.
    #[serde(default, rename = "static")]
    pub statics: Vec<StaticNeighbour>,
}

/// One `[[neighbour.static]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticNeighbour {
    pub ip: IpAddr,
    /// "02:00:00:00:00:02".
    pub mac: String,
    /// The `[[port]]` it is on; by default the port with `ip` on one of
    /// its subnets.
    #[serde(default)]
    pub port: Option<String>,
}

fn d_entries() -> u32 {
    256
}
fn d_unres_qlen() -> u32 {
    3
}
fn d_mcast_solicit() -> u8 {
    3
}
fn d_retrans_ms() -> u64 {
    1000
}
fn d_reachable_ms() -> u64 {
    30_000
}
fn d_gc_stale_ms() -> u64 {
    60_000
}
fn d_true() -> bool {
    true
}

impl Default for NeighbourConf {
    fn default() -> Self {
        NeighbourConf {
            entries: d_entries(),
            unres_qlen: d_unres_qlen(),
            mcast_solicit: d_mcast_solicit(),
            retrans_ms: d_retrans_ms(),
            reachable_ms: d_reachable_ms(),
            gc_stale_ms: d_gc_stale_ms(),
            learn_from_traffic: true,
            statics: Vec::new(),
        }
    }
}

/// "aa:bb:cc:dd:ee:ff" (or with '-'), a unicast MAC that is not all zero.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!(
            "{s:?} is not a MAC address (six hex bytes, \"02:00:00:00:00:02\")"
        ));
    }
    for (b, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(format!(
                "{s:?} is not a MAC address (six hex bytes, \"02:00:00:00:00:02\")"
            ));
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| {
            format!("{s:?} is not a MAC address (six hex bytes, \"02:00:00:00:00:02\")")
        })?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!(
            "{s:?} is a multicast or zero MAC: a neighbour has a unicast one"
        ));
    }
    Ok(mac)
}

fn on_link(a: &IfAddr, ip: IpAddr) -> bool {
    match (a.addr, ip) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            let m = u32::MAX.checked_shl(32 - u32::from(a.prefix)).unwrap_or(0);
            u32::from(x) & m == u32::from(y) & m
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(a.prefix))
                .unwrap_or(0);
            u128::from(x) & m == u128::from(y) & m
        }
        _ => false,
    }
}

impl NeighbourConf {
    /// The index in `ports` of the port static entry `s` is on.
    pub fn static_port(s: &StaticNeighbour, ports: &[PortConf]) -> Result<usize, String> {
        let what = format!("neighbour.static ip = \"{}\"", s.ip);
        let reach = |p: &PortConf| p.addresses.iter().any(|a| on_link(a, s.ip));
        match &s.port {
            Some(name) => {
                let i = ports.iter().position(|p| &p.name == name).ok_or_else(|| {
                    format!("{what}: port = {name:?} is no [[port]]: name one of the config's ports")
                })?;
                if !reach(&ports[i]) {
                    return Err(format!(
                        "{what}: not on a subnet of port {name:?}'s addresses: add one that holds it, or fix the ip"
                    ));
                }
                Ok(i)
            }
            None => ports.iter().position(reach).ok_or_else(|| {
                format!(
                    "{what}: on no port's subnet (every neighbour is on-link): add an address holding it to a [[port]], or fix the ip"
                )
            }),
        }
    }

    /// Every problem, one line each.
    pub fn problems(&self, ports: &[PortConf]) -> Vec<String> {
        let mut out = Vec::new();
        if self.entries == 0 || self.entries > 4096 {
            out.push(format!(
                "neighbour.entries = {}: must be 1..=4096",
                self.entries
            ));
        }
        if self.unres_qlen > 256 {
            out.push(format!(
                "neighbour.unres_qlen = {}: must be 0..=256 (datagrams held per unresolved neighbour)",
                self.unres_qlen
            ));
        }
        if self.mcast_solicit == 0 || self.mcast_solicit > 32 {
            out.push(format!(
                "neighbour.mcast_solicit = {}: must be 1..=32",
                self.mcast_solicit
            ));
        }
        for (key, v, max) in [
            ("retrans_ms", self.retrans_ms, 60_000),
            ("reachable_ms", self.reachable_ms, 3_600_000),
            ("gc_stale_ms", self.gc_stale_ms, 86_400_000),
        ] {
            if v == 0 || v > max {
                out.push(format!("neighbour.{key} = {v}: must be 1..={max}"));
            }
        }
        if self.statics.len() > self.entries as usize {
            out.push(format!(
                "neighbour: {} static entries but entries = {}: raise neighbour.entries",
                self.statics.len(),
                self.entries
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.statics {
            let what = format!("neighbour.static ip = \"{}\"", s.ip);
            if let Err(e) = parse_mac(&s.mac) {
                out.push(format!("{what}: mac = {e}"));
            }
            let bad_ip = match s.ip {
                IpAddr::V4(a) => a.is_unspecified() || a.is_multicast() || a.is_broadcast(),
                IpAddr::V6(a) => a.is_unspecified() || a.is_multicast(),
            };
            if bad_ip {
                out.push(format!(
                    "{what}: not a unicast address: a neighbour has one"
                ));
                continue;
            }
            if ports
                .iter()
                .any(|p| p.addresses.iter().any(|a| a.addr == s.ip))
            {
                out.push(format!("{what}: is a port's own address: remove the entry"));
                continue;
            }
            match Self::static_port(s, ports) {
                Ok(i) => {
                    if !seen.insert((i, s.ip)) {
                        out.push(format!("{what}: listed twice: keep one entry"));
                    }
                }
                Err(e) => out.push(e),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Ok([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02-00-00-00-00-0A"), Ok([2, 0, 0, 0, 0, 10]));
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:0g",
            "2:0:0:0:0:1",
            "01:00:5e:00:00:01",
            "00:00:00:00:00:00",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }
}
