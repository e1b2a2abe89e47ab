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

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_text(s).unwrap()
    }

    #[test]
    fn names_relative_absolute_and_the_apex() {
        let z = Zone::parse(
            r#"origin = "Example.TEST"
ttl = 60
[names."@"]
a = ["198.18.5.1"]
[names."Mail"]
aaaa = ["fd00::25"]
[names."x.y.example.test."]
a = ["198.18.5.2"]
"#,
        )
        .unwrap();
        assert_eq!(
            (z.origin.to_string().as_str(), z.ttl),
            ("example.test.", 60)
        );
        let a = |s: &str, t| z.lookup(&name(s), t);
        assert_eq!(
            a("example.test", rtype::A),
            Lookup::Found(vec![Rdata::A("198.18.5.1".parse().unwrap())])
        );
        assert_eq!(
            a("MAIL.example.test", rtype::AAAA),
            Lookup::Found(vec![Rdata::Aaaa("fd00::25".parse().unwrap())])
        );
        assert_eq!(a("mail.example.test", rtype::A), Lookup::Found(vec![]));
        // y exists (x.y does): NODATA; z does not.
        assert_eq!(a("y.example.test", rtype::A), Lookup::Found(vec![]));
        assert_eq!(a("z.example.test", rtype::A), Lookup::NoName);
        assert_eq!(a("w.x.y.example.test", rtype::A), Lookup::NoName);
        assert_eq!(a("test", rtype::A), Lookup::NotAuthoritative);
        assert_eq!(a("example.org", rtype::A), Lookup::NotAuthoritative);
        // Other types at a name with records: NODATA.
        assert_eq!(a("example.test", 15), Lookup::Found(vec![]));
    }

    #[test]
    fn bad_zones_are_refused() {
        let bad = |t: &str| Zone::parse(t).unwrap_err().to_string();
        assert!(
            bad("origin = \"example.test\"\nttl = 1\n[names.\"a..b\"]\n")
                .contains("not a domain name")
        );
        assert!(
            bad("origin = \"example.test\"\nttl = 1\n[names.\"other.org.\"]\n")
                .contains("not within the origin")
        );
        assert!(bad("origin = \"exa mple\"\nttl = 1\n").contains("not a domain name"));
        assert!(
            bad("origin = \"example.test\"\nttl = 1\n[names.w]\na = [\"fd00::1\"]\n")
                .contains("zone TOML")
        );
        assert!(bad("origin = \"example.test\"\n").contains("ttl"));
        let long = format!("origin = \"{}.test\"\nttl = 1\n", "a".repeat(64));
        assert!(bad(&long).contains("not a domain name"));
    }
}
