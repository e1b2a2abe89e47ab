//! A static zone from TOML:
//!
//! ```toml
//! origin = "example.test."
//! ttl = 300
//! [names."www"]          # relative to the origin; "@" is the origin
//! a = ["198.18.5.1"]
//! aaaa = ["fd00:5::1"]
//! ```
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

use crate::wire::{rtype, Lookup, Name, Rdata};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ZoneFile {
    origin: String,
    ttl: u32,
    #[serde(default)]
    names: HashMap<String, Records>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Records {
    #[serde(default)]
    pub a: Vec<Ipv4Addr>,
    #[serde(default)]
    pub aaaa: Vec<Ipv6Addr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("zone TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("not a domain name: {0:?}")]
    BadName(String),
    #[error("{0} is not within the origin {1}")]
    OutOfZone(String, String),
}

/// The zone: names (lower case) and their records, and every name that
/// exists because a name below it does (empty non-terminals: NODATA, not
/// NXDOMAIN, RFC 8020).
#[derive(Debug, Clone)]
pub struct Zone {
    pub origin: Name,
    pub ttl: u32,
    records: HashMap<Vec<u8>, Records>,
    exists: HashSet<Vec<u8>>,
}

impl Zone {
    pub fn load(path: &std::path::Path) -> Result<Zone, ZoneError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ZoneError::Io(path.display().to_string(), e))?;
        Zone::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Zone, ZoneError> {
        let f: ZoneFile = toml::from_str(text)?;
        let origin = Name::from_text(&f.origin)
            .ok_or_else(|| ZoneError::BadName(f.origin.clone()))?
            .lowercase();
        let mut records = HashMap::new();
        let mut exists = HashSet::new();
        exists.insert(origin.as_wire().to_vec());
        for (n, r) in f.names {
            let name = if n == "@" {
                origin.clone()
            } else if n.ends_with('.') {
                Name::from_text(&n).ok_or_else(|| ZoneError::BadName(n.clone()))?
            } else {
                Name::from_text(&n)
                    .and_then(|r| r.join(&origin))
                    .ok_or_else(|| ZoneError::BadName(n.clone()))?
            }
            .lowercase();
            if !name.is_within(&origin) {
                return Err(ZoneError::OutOfZone(n, origin.to_string()));
            }
            // The name and every name between it and the origin exist.
            let mut w = name.as_wire();
            while w.len() >= origin.as_wire().len() {
                exists.insert(w.to_vec());
                let skip = 1 + usize::from(w[0]);
                if w[0] == 0 || skip >= w.len() {
                    break;
                }
                w = &w[skip..];
            }
            records.insert(name.as_wire().to_vec(), r);
        }
        Ok(Zone {
            origin,
            ttl: f.ttl,
            records,
            exists,
        })
    }

    /// The answer for `name` and `qtype` (ANY: A and AAAA).
    pub fn lookup(&self, name: &Name, qtype: u16) -> Lookup {
        if !name.is_within(&self.origin) {
            return Lookup::NotAuthoritative;
        }
        let key = name.lowercase();
        if !self.exists.contains(key.as_wire()) {
            return Lookup::NoName;
        }
        let Some(r) = self.records.get(key.as_wire()) else {
            return Lookup::Found(Vec::new());
        };
        let a = r.a.iter().map(|a| Rdata::A(*a));
        let aaaa = r.aaaa.iter().map(|a| Rdata::Aaaa(*a));
        Lookup::Found(match qtype {
            rtype::A => a.collect(),
            rtype::AAAA => aaaa.collect(),
            rtype::ANY => a.chain(aaaa).collect(),
            _ => Vec::new(),
        })
    }

    /// The response to `msg` (see [`crate::wire::respond`]).
    pub fn respond(
        &self,
        msg: &[u8],
        max_udp: usize,
        out: &mut Vec<u8>,
    ) -> Option<crate::wire::Outcome> {
        crate::wire::respond(msg, max_udp, self.ttl, out, |n, t| self.lookup(n, t))
    }
}
