//! A static zone from TOML:
//!
//! ```toml
//! origin = "example.test."
//! ttl = 300
//! [names."www"]          # relative to the origin; "@" is the origin
//! a = ["198.18.5.1"]
//! aaaa = ["fd00:5::1"]
//! ```
use std::collections::HashMap;
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
/// NXDOMAIN, RFC 8020), all in one map so a query costs one lookup.
#[derive(Debug, Clone)]
pub struct Zone {
    pub origin: Name,
    pub ttl: u32,
    /// ahash, keyed from the OS RNG per process (`RandomState::new`),
    /// rather than std's SipHash: it is cheaper on the short
    /// keys names are, and with secret keys a sender cannot aim queries at
    /// one bucket. Flooding needs inserts, and only the operator's zone
    /// file inserts (once, at load); queries only look up, whose cost is
    /// bounded by the table the zone built.
    names: HashMap<Box<[u8]>, Entry, ahash::RandomState>,
}

/// A name's records, laid out once at load so every answer is a borrowed
/// slice: its A records, then its AAAA records (ANY is the whole of it,
/// A before AAAA).
#[derive(Debug, Clone, Default)]
struct Entry {
    rdata: Box<[Rdata]>,
    /// How many of `rdata` are A records (the first ones).
    a: usize,
}

impl Entry {
    fn new(r: &Records) -> Entry {
        let a = r.a.iter().map(|a| Rdata::A(*a));
        let aaaa = r.aaaa.iter().map(|a| Rdata::Aaaa(*a));
        Entry {
            rdata: a.chain(aaaa).collect(),
            a: r.a.len(),
        }
    }

    fn of_type(&self, qtype: u16) -> &[Rdata] {
        match qtype {
            rtype::A => &self.rdata[..self.a],
            rtype::AAAA => &self.rdata[self.a..],
            rtype::ANY => &self.rdata,
            _ => &[],
        }
    }
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
        let mut names: HashMap<Box<[u8]>, Entry, ahash::RandomState> = HashMap::default();
        names.insert(origin.as_wire().into(), Entry::default());
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
            // Every name between it and the origin exists (with no records
            // unless it has some of its own).
            let mut w = name.as_wire();
            while w.len() >= origin.as_wire().len() {
                names.entry(w.into()).or_default();
                let skip = 1 + usize::from(w[0]);
                if w[0] == 0 || skip >= w.len() {
                    break;
                }
                w = &w[skip..];
            }
            names.insert(name.as_wire().into(), Entry::new(&r));
        }
        Ok(Zone {
            origin,
            ttl: f.ttl,
            names,
        })
    }

    /// The answer for `name` and `qtype` (ANY: A and AAAA), borrowed from
    /// the zone: no allocation.
    pub fn lookup(&self, name: &Name, qtype: u16) -> Lookup<'_> {
        // Every name of the map is within the origin (checked at load):
        // only a miss needs to tell NXDOMAIN from not ours.
        match self.names.get(name.lowercase().as_wire()) {
            Some(e) => Lookup::Found(e.of_type(qtype)),
            None if name.is_within(&self.origin) => Lookup::NoName,
            None => Lookup::NotAuthoritative,
        }
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
            Lookup::Found(&[Rdata::A("198.18.5.1".parse().unwrap())])
        );
        assert_eq!(
            a("MAIL.example.test", rtype::AAAA),
            Lookup::Found(&[Rdata::Aaaa("fd00::25".parse().unwrap())])
        );
        assert_eq!(a("mail.example.test", rtype::A), Lookup::Found(&[]));
        // y exists (x.y does): NODATA; z does not.
        assert_eq!(a("y.example.test", rtype::A), Lookup::Found(&[]));
        assert_eq!(a("z.example.test", rtype::A), Lookup::NoName);
        assert_eq!(a("w.x.y.example.test", rtype::A), Lookup::NoName);
        assert_eq!(a("test", rtype::A), Lookup::NotAuthoritative);
        assert_eq!(a("example.org", rtype::A), Lookup::NotAuthoritative);
        // ANY: the A records, then the AAAA ones; the slices borrow the zone.
        let www = Zone::parse(
            "origin = \"example.test\"\nttl = 1\n[names.www]\na = [\"198.18.5.1\", \"198.18.5.2\"]\naaaa = [\"fd00::1\"]\n",
        )
        .unwrap();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let rd = |s: &str| match ip(s) {
            std::net::IpAddr::V4(a) => Rdata::A(a),
            std::net::IpAddr::V6(a) => Rdata::Aaaa(a),
        };
        assert_eq!(
            www.lookup(&name("WWW.example.test"), rtype::ANY),
            Lookup::Found(&[rd("198.18.5.1"), rd("198.18.5.2"), rd("fd00::1")])
        );
        assert_eq!(
            www.lookup(&name("www.example.test"), rtype::A),
            Lookup::Found(&[rd("198.18.5.1"), rd("198.18.5.2")])
        );
        assert_eq!(
            www.lookup(&name("www.example.test"), rtype::AAAA),
            Lookup::Found(&[rd("fd00::1")])
        );
        assert_eq!(
            www.lookup(&name("example.test"), rtype::ANY),
            Lookup::Found(&[])
        );
        // Other types at a name with records: NODATA.
        assert_eq!(a("example.test", 15), Lookup::Found(&[]));
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
