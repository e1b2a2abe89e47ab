//! DNS wire format (RFC 1035, EDNS0 from RFC 6891): a checked view of a
//! query and the builder of an authoritative response. Every read is
//! bounds-checked; malformed input is an error value, never a panic.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Byte offsets in the 12-byte header (RFC 1035 4.1.1).
pub mod field {
    use std::ops::Range;
    pub const ID: Range<usize> = 0..2;
    pub const FLAGS: Range<usize> = 2..4;
    pub const QDCOUNT: Range<usize> = 4..6;
    pub const ANCOUNT: Range<usize> = 6..8;
    pub const NSCOUNT: Range<usize> = 8..10;
    pub const ARCOUNT: Range<usize> = 10..12;
}

pub const HEADER_LEN: usize = field::ARCOUNT.end;
/// The largest UDP response without EDNS (RFC 1035 4.2.1).
pub const CLASSIC_UDP: usize = 512;
pub const MAX_NAME: usize = 255;
pub const MAX_LABEL: usize = 63;

pub mod flag {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    /// Checking disabled: copied from query to response (RFC 4035 3.1.6).
    pub const CD: u16 = 0x0010;
    pub const OPCODE_SHIFT: u16 = 11;
}

pub mod rtype {
    pub const A: u16 = 1;
    pub const AAAA: u16 = 28;
    pub const OPT: u16 = 41;
    pub const ANY: u16 = 255;
}

pub const CLASS_IN: u16 = 1;
pub const CLASS_ANY: u16 = 255;

/// Response codes (RFC 1035 4.1.1; BADVERS is extended, RFC 6891).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    NxDomain = 3,
    NotImp = 4,
    Refused = 5,
    BadVers = 16,
}

/// Why a message is not a well-formed query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("shorter than the 12-byte header")]
    ShortHeader,
    #[error("a response (QR set), not a query")]
    NotQuery,
    #[error("QDCOUNT {0}, not 1")]
    QdCount(u16),
    #[error("message ends inside {0}")]
    Truncated(&'static str),
    #[error("label of {0} bytes (at most 63)")]
    LabelTooLong(usize),
    #[error("name longer than 255 bytes")]
    NameTooLong,
    #[error("reserved label type {0:#04x}")]
    BadLabelType(u8),
    #[error("compression pointer not pointing backwards")]
    BadPointer,
    #[error("more than one OPT record")]
    DuplicateOpt,
    #[error("OPT record with a non-root owner name")]
    BadOptName,
    #[error("{0} bytes after the last record")]
    TrailingBytes(usize),
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline]
fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The fixed header of any DNS message, over at least [`HEADER_LEN`] bytes.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    b: &'a [u8],
}

impl<'a> Header<'a> {
    pub fn new_checked(b: &'a [u8]) -> Result<Header<'a>, ParseError> {
        if b.len() < HEADER_LEN {
            return Err(ParseError::ShortHeader);
        }
        Ok(Header { b })
    }
    fn f(&self, r: std::ops::Range<usize>) -> u16 {
        be16(self.b, r.start).unwrap_or(0)
    }
    pub fn id(&self) -> u16 {
        self.f(field::ID)
    }
    pub fn flags(&self) -> u16 {
        self.f(field::FLAGS)
    }
    pub fn is_response(&self) -> bool {
        self.flags() & flag::QR != 0
    }
    pub fn opcode(&self) -> u8 {
        ((self.flags() >> flag::OPCODE_SHIFT) & 0xf) as u8
    }
    pub fn rd(&self) -> bool {
        self.flags() & flag::RD != 0
    }
    pub fn qdcount(&self) -> u16 {
        self.f(field::QDCOUNT)
    }
    pub fn ancount(&self) -> u16 {
        self.f(field::ANCOUNT)
    }
    pub fn nscount(&self) -> u16 {
        self.f(field::NSCOUNT)
    }
    pub fn arcount(&self) -> u16 {
        self.f(field::ARCOUNT)
    }
}

/// A domain name in wire form (length-prefixed labels, ending in the root
/// label), uncompressed, case as received, at most 255 bytes. It lives in
/// a fixed buffer, not on the heap: a query's name is read into one on the
/// stack, so answering allocates nothing.
#[derive(Clone)]
pub struct Name {
    /// The first `len` bytes are the name; always well formed (every
    /// constructor checks), which [`Name::is_within`] relies on.
    wire: [u8; MAX_NAME],
    len: u8,
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_wire() == other.as_wire()
    }
}

impl Eq for Name {}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Name({self})")
    }
}

impl Name {
    pub fn root() -> Name {
        Name {
            wire: [0; MAX_NAME],
            len: 1,
        }
    }

    /// An empty name to append labels to (not a name until [`Name::end`]).
    fn empty() -> Name {
        Name {
            wire: [0; MAX_NAME],
            len: 0,
        }
    }

    /// Append a label (1..=63 bytes); `false` when the name with it and
    /// the root label would be over 255 bytes.
    fn push_label(&mut self, l: &[u8]) -> bool {
        let at = usize::from(self.len);
        let end = at + 1 + l.len();
        // Room for the label and the root label after it.
        if end >= MAX_NAME {
            return false;
        }
        self.wire[at] = l.len() as u8;
        self.wire[at + 1..end].copy_from_slice(l);
        self.len = end as u8;
        true
    }

    /// Append the root label (the caller checked there is room for it:
    /// every [`Name::push_label`] leaves room).
    fn end(&mut self) {
        let at = usize::from(self.len);
        self.wire[at] = 0;
        self.len += 1;
    }

    pub fn as_wire(&self) -> &[u8] {
        &self.wire[..usize::from(self.len)]
    }

    /// The labels, first to last (the root label left out).
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> {
        let w = self.as_wire();
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = usize::from(*w.get(at)?);
            if len == 0 {
                return None;
            }
            let l = w.get(at + 1..at + 1 + len)?;
            at += 1 + len;
            Some(l)
        })
    }

    /// The name in lower case (ASCII), for comparison. Length bytes are at
    /// most 63, below `A`: lowercasing the whole wire form leaves them be.
    pub fn lowercase(&self) -> Name {
        let mut n = self.clone();
        n.wire[..usize::from(n.len)].make_ascii_lowercase();
        n
    }

    /// Whether `self` is `other` or below it (labels compared
    /// case-insensitively): `other`'s wire form is a suffix of `self`'s
    /// that starts at one of its labels.
    pub fn is_within(&self, other: &Name) -> bool {
        let (a, b) = (self.as_wire(), other.as_wire());
        let mut at = 0;
        loop {
            let Some(rest) = a.get(at..) else {
                return false;
            };
            if rest.len() <= b.len() {
                return rest.eq_ignore_ascii_case(b);
            }
            match rest.first() {
                Some(&len) if len != 0 => at += 1 + usize::from(len),
                _ => return false,
            }
        }
    }

    /// A name from its text form (`www.example.test.` or without the final
    /// dot); `None` for an empty label, a label over 63 bytes, a name over
    /// 255 bytes, or a byte outside letters, digits, `-` and `_`.
    pub fn from_text(s: &str) -> Option<Name> {
        let s = s.strip_suffix('.').unwrap_or(s);
        let mut n = Name::empty();
        if !s.is_empty() {
            for l in s.split('.') {
                let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
                if l.is_empty() || l.len() > MAX_LABEL || !l.bytes().all(ok) {
                    return None;
                }
                if !n.push_label(l.as_bytes()) {
                    return None;
                }
            }
        }
        n.end();
        Some(n)
    }

    /// `self` followed by `origin` (a relative name made absolute).
    pub fn join(&self, origin: &Name) -> Option<Name> {
        let mut n = Name::empty();
        for l in self.labels().chain(origin.labels()) {
            if !n.push_label(l) {
                return None;
            }
        }
        n.end();
        Some(n)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut any = false;
        for l in self.labels() {
            any = true;
            write!(f, "{}.", String::from_utf8_lossy(l))?;
        }
        if !any {
            write!(f, ".")?;
        }
        Ok(())
    }
}

/// Most compression pointers one name may follow (a name has at most 127
/// labels; a loop is cut well before).
const MAX_HOPS: usize = 128;

/// Read the name at `at`; the name and the offset just past it (past the
/// first pointer, if it was compressed). Pointers are followed only to
/// earlier offsets, so they cannot loop.
pub fn read_name(msg: &[u8], at: usize) -> Result<(Name, usize), ParseError> {
    let mut name = Name::empty();
    let end = read_name_into(msg, at, &mut name)?;
    Ok((name, end))
}

/// [`read_name`] into `name` (overwritten), for callers that keep one
/// buffer; the offset just past the name.
fn read_name_into(msg: &[u8], at: usize, name: &mut Name) -> Result<usize, ParseError> {
    name.len = 0;
    let mut pos = at;
    let mut end = None;
    let mut hops = 0;
    loop {
        let len = *msg.get(pos).ok_or(ParseError::Truncated("a name"))?;
        match len & 0xc0 {
            0x00 => {
                let len = usize::from(len);
                if len == 0 {
                    // push_label left room for the root label.
                    name.end();
                    return Ok(end.unwrap_or(pos + 1));
                }
                let l = msg
                    .get(pos + 1..pos + 1 + len)
                    .ok_or(ParseError::Truncated("a label"))?;
                if !name.push_label(l) {
                    return Err(ParseError::NameTooLong);
                }
                pos += 1 + len;
            }
            0xc0 => {
                let lo = *msg.get(pos + 1).ok_or(ParseError::Truncated("a pointer"))?;
                let target = (usize::from(len & 0x3f) << 8) | usize::from(lo);
                if target >= pos || hops >= MAX_HOPS {
                    return Err(ParseError::BadPointer);
                }
                hops += 1;
                end.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return Err(ParseError::BadLabelType(len)),
        }
    }
}

/// What the OPT record of a query says (RFC 6891 6.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The requester's UDP payload size, as advertised (below 512 means 512).
    pub udp_size: u16,
    pub version: u8,
    pub dnssec_ok: bool,
}

/// A parsed query: one question, and EDNS if it had an OPT record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub opcode: u8,
    pub rd: bool,
    pub cd: bool,
    pub qname: Name,
    pub qtype: u16,
    pub qclass: u16,
    pub edns: Option<Edns>,
}

/// Skip one resource record at `at` (its owner read into `name`): its
/// type, class, TTL and the offset past its rdata.
fn skip_rr(msg: &[u8], at: usize, name: &mut Name) -> Result<(u16, u16, u32, usize), ParseError> {
    let p = read_name_into(msg, at, name)?;
    let t = be16(msg, p).ok_or(ParseError::Truncated("a record"))?;
    let c = be16(msg, p + 2).ok_or(ParseError::Truncated("a record"))?;
    let ttl = be32(msg, p + 4).ok_or(ParseError::Truncated("a record"))?;
    let rdlen = usize::from(be16(msg, p + 8).ok_or(ParseError::Truncated("a record"))?);
    let end = p + 10 + rdlen;
    if end > msg.len() {
        return Err(ParseError::Truncated("rdata"));
    }
    Ok((t, c, ttl, end))
}

/// Parse a query: header, exactly one question, and the other sections
/// (records skipped, the OPT record read).
pub fn parse_query(msg: &[u8]) -> Result<Query, ParseError> {
    let h = Header::new_checked(msg)?;
    if h.is_response() {
        return Err(ParseError::NotQuery);
    }
    if h.qdcount() != 1 {
        return Err(ParseError::QdCount(h.qdcount()));
    }
    let (qname, p) = read_name(msg, HEADER_LEN)?;
    let qtype = be16(msg, p).ok_or(ParseError::Truncated("the question"))?;
    let qclass = be16(msg, p + 2).ok_or(ParseError::Truncated("the question"))?;
    let mut p = p + 4;
    let mut edns = None;
    let others = usize::from(h.ancount()) + usize::from(h.nscount());
    let mut owner = Name::empty();
    for i in 0..others + usize::from(h.arcount()) {
        let (t, c, ttl, end) = skip_rr(msg, p, &mut owner)?;
        if i >= others && t == rtype::OPT {
            if edns.is_some() {
                return Err(ParseError::DuplicateOpt);
            }
            if owner.as_wire() != [0] {
                return Err(ParseError::BadOptName);
            }
            edns = Some(Edns {
                udp_size: c,
                version: (ttl >> 16) as u8,
                dnssec_ok: ttl & 0x8000 != 0,
            });
        }
        p = end;
    }
    if p != msg.len() {
        return Err(ParseError::TrailingBytes(msg.len() - p));
    }
    Ok(Query {
        id: h.id(),
        opcode: h.opcode(),
        rd: h.rd(),
        cd: h.flags() & flag::CD != 0,
        qname,
        qtype,
        qclass,
        edns,
    })
}

/// Resource record data this responder serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rdata {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
}

impl Rdata {
    pub fn rtype(&self) -> u16 {
        match self {
            Rdata::A(_) => rtype::A,
            Rdata::Aaaa(_) => rtype::AAAA,
        }
    }
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Rdata::A(a) => {
                out.extend_from_slice(&4u16.to_be_bytes());
                out.extend_from_slice(&a.octets());
            }
            Rdata::Aaaa(a) => {
                out.extend_from_slice(&16u16.to_be_bytes());
                out.extend_from_slice(&a.octets());
            }
        }
    }
}

/// The answer to a question, as the zone gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'z> {
    /// The name exists: its records of the asked type (none: NODATA),
    /// borrowed from the zone.
    Found(&'z [Rdata]),
    /// In the zone, but no such name: NXDOMAIN.
    NoName,
    /// Not in the zone: REFUSED.
    NotAuthoritative,
}

/// What a response says, for the responder's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub rcode: Rcode,
    pub answers: u16,
    pub truncated: bool,
}

/// The compression pointer to the question's name: it starts right after
/// the header (RFC 1035 4.1.4).
const QNAME_PTR: [u8; 2] = [0xc0, HEADER_LEN as u8];

/// Build the response to `msg` into `out` (cleared first), looking names
/// up with `lookup(name, qtype)`. `max_udp` is the most this server sends
/// in one datagram (the path's limit), `ttl` what answers carry; the response fits in
/// `min(max_udp, the query's EDNS size or 512)`, else its answers are
/// dropped and TC is set. `None`: no response at all (shorter than a
/// header, or itself a response: answering those invites loops).
pub fn respond<'z>(
    msg: &[u8],
    max_udp: usize,
    ttl: u32,
    out: &mut Vec<u8>,
    lookup: impl FnOnce(&Name, u16) -> Lookup<'z>,
) -> Option<Outcome> {
    out.clear();
    let h = Header::new_checked(msg).ok()?;
    if h.is_response() {
        return None;
    }
    let q = match parse_query(msg) {
        Ok(q) => q,
        Err(_) => {
            // FORMERR: the header alone (the question may be what is wrong).
            let fl = flag::QR | (h.flags() & (0xf << flag::OPCODE_SHIFT | flag::RD));
            header(out, h.id(), fl | Rcode::FormErr as u16, 0, 0, 0);
            return Some(Outcome {
                rcode: Rcode::FormErr,
                answers: 0,
                truncated: false,
            });
        }
    };
    let mut fl = flag::QR | (u16::from(q.opcode) << flag::OPCODE_SHIFT);
    if q.rd {
        fl |= flag::RD;
    }
    if q.cd {
        fl |= flag::CD;
    }
    let none: &[Rdata] = &[];
    let (rcode, records) = if q.edns.is_some_and(|e| e.version > 0) {
        (Rcode::BadVers, none)
    } else if q.opcode != 0 {
        (Rcode::NotImp, none)
    } else if q.qclass != CLASS_IN && q.qclass != CLASS_ANY {
        (Rcode::Refused, none)
    } else {
        match lookup(&q.qname, q.qtype) {
            Lookup::Found(r) => {
                fl |= flag::AA;
                (Rcode::NoError, r)
            }
            Lookup::NoName => {
                fl |= flag::AA;
                (Rcode::NxDomain, none)
            }
            Lookup::NotAuthoritative => (Rcode::Refused, none),
        }
    };
    let limit = match q.edns {
        Some(e) => usize::from(e.udp_size).max(CLASSIC_UDP),
        None => CLASSIC_UDP,
    }
    .min(max_udp.max(CLASSIC_UDP));
    fl |= (rcode as u16) & 0xf;
    // An answer record: pointer, type, class, TTL, rdlength and rdata.
    let rr_len = |r: &Rdata| 2 + 10 + if matches!(r, Rdata::A(_)) { 4 } else { 16 };
    const OPT_LEN: usize = 11;
    let fixed =
        HEADER_LEN + q.qname.as_wire().len() + 4 + if q.edns.is_some() { OPT_LEN } else { 0 };
    let full = fixed + records.iter().map(rr_len).sum::<usize>();
    let truncated = full > limit;
    let answers: &[Rdata] = if truncated { none } else { records };
    if truncated {
        fl |= flag::TC;
    }
    let ancount = answers.len() as u16;
    let arcount = u16::from(q.edns.is_some());
    header(out, q.id, fl, 1, ancount, arcount);
    out.extend_from_slice(q.qname.as_wire());
    out.extend_from_slice(&q.qtype.to_be_bytes());
    out.extend_from_slice(&q.qclass.to_be_bytes());
    for r in answers {
        out.extend_from_slice(&QNAME_PTR);
        out.extend_from_slice(&r.rtype().to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        r.write(out);
    }
    if let Some(e) = q.edns {
        // OPT: root owner, our payload size, extended RCODE (upper 8 bits),
        // version 0, the DO bit copied (RFC 3225 3), no options.
        out.push(0);
        out.extend_from_slice(&rtype::OPT.to_be_bytes());
        out.extend_from_slice(&(max_udp.clamp(CLASSIC_UDP, 0xffff) as u16).to_be_bytes());
        out.push(((rcode as u16) >> 4) as u8);
        out.push(0);
        out.push(if e.dnssec_ok { 0x80 } else { 0 });
        out.push(0);
        out.extend_from_slice(&0u16.to_be_bytes());
    }
    Some(Outcome {
        rcode,
        answers: ancount,
        truncated,
    })
}

fn header(out: &mut Vec<u8>, id: u16, flags: u16, qd: u16, an: u16, ar: u16) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&qd.to_be_bytes());
    out.extend_from_slice(&an.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&ar.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::Zone;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `dig @.. www.example.test A` (dig 9.18: RD, AD, EDNS 1232 with a cookie).
    const DIG_A: &str = "05530120000100000000000103777777076578616d706c650474657374000001000100002904d000000000000c000a000815947fd9f981e028";
    /// `dig +noedns www.example.test AAAA`.
    const DIG_AAAA_NOEDNS: &str =
        "fb550120000100000000000003777777076578616d706c65047465737400001c0001";
    /// `dig +bufsize=4096 +nocookie Big.Example.Test A` (mixed case).
    const DIG_BIG_4096: &str = "cdfb0120000100000000000103426967074578616d706c65045465737400000100010000291000000000000000";

    fn zone() -> &'static Zone {
        static Z: std::sync::OnceLock<Zone> = std::sync::OnceLock::new();
        Z.get_or_init(|| {
            Zone::parse(
                &std::fs::read_to_string(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../conf/dns-zone.toml"
                ))
                .unwrap(),
            )
            .unwrap()
        })
    }

    fn answer(q: &[u8], max: usize) -> (Vec<u8>, Outcome) {
        let mut out = Vec::new();
        let o = zone().respond(q, max, &mut out).expect("a response");
        (out, o)
    }

    #[test]
    fn parses_dig_queries() {
        let q = parse_query(&hex(DIG_A)).unwrap();
        assert_eq!(q.id, 0x0553);
        assert_eq!((q.opcode, q.rd), (0, true));
        assert_eq!(q.qname.to_string(), "www.example.test.");
        assert_eq!((q.qtype, q.qclass), (rtype::A, CLASS_IN));
        assert_eq!(
            q.edns,
            Some(Edns {
                udp_size: 1232,
                version: 0,
                dnssec_ok: false
            })
        );
        let q = parse_query(&hex(DIG_AAAA_NOEDNS)).unwrap();
        assert_eq!((q.id, q.qtype, q.edns), (0xfb55, rtype::AAAA, None));
        let q = parse_query(&hex(DIG_BIG_4096)).unwrap();
        assert_eq!(q.qname.to_string(), "Big.Example.Test.");
        assert_eq!(q.edns.unwrap().udp_size, 4096);
    }

    #[test]
    fn answers_a_field_by_field() {
        let (r, o) = answer(&hex(DIG_A), 1472);
        assert_eq!(
            o,
            Outcome {
                rcode: Rcode::NoError,
                answers: 2,
                truncated: false
            }
        );
        let h = Header::new_checked(&r).unwrap();
        assert_eq!(h.id(), 0x0553);
        // QR, AA, RD; opcode 0, RCODE 0; no RA, no TC.
        assert_eq!(h.flags(), flag::QR | flag::AA | flag::RD);
        assert_eq!(
            (h.qdcount(), h.ancount(), h.nscount(), h.arcount()),
            (1, 2, 0, 1)
        );
        let qname = hex("03777777076578616d706c65047465737400");
        assert_eq!(&r[12..12 + qname.len()], &qname[..]);
        let mut p = 12 + qname.len();
        assert_eq!(&r[p..p + 4], &[0, 1, 0, 1]);
        p += 4;
        for last in [10u8, 11] {
            // Pointer to offset 12, A, IN, TTL 300, rdlength 4, the address.
            assert_eq!(
                &r[p..p + 16],
                &[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 198, 18, 5, last]
            );
            p += 16;
        }
        // OPT: root, type 41, our size 1472, RCODE ext 0, version 0, no options.
        assert_eq!(&r[p..], &[0, 0, 41, 0x05, 0xc0, 0, 0, 0, 0, 0, 0]);
        // And our own parser reads the names back through the pointer.
        let (n, end) = read_name(&r, 12 + qname.len() + 4).unwrap();
        assert_eq!(
            (n.to_string().as_str(), end),
            ("www.example.test.", 12 + qname.len() + 6)
        );
    }

    #[test]
    fn answers_aaaa_without_edns() {
        let (r, o) = answer(&hex(DIG_AAAA_NOEDNS), 1452);
        assert_eq!(
            (o.rcode, o.answers, o.truncated),
            (Rcode::NoError, 1, false)
        );
        let h = Header::new_checked(&r).unwrap();
        assert_eq!((h.ancount(), h.arcount()), (1, 0));
        let tail = &r[r.len() - 28..];
        assert_eq!(&tail[..12], &[0xc0, 12, 0, 28, 0, 1, 0, 0, 1, 44, 0, 16]);
        assert_eq!(
            &tail[12..],
            &"fd00:5::10".parse::<Ipv6Addr>().unwrap().octets()
        );
    }

    fn query(name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
        let mut q = vec![
            0x12,
            0x34,
            0,
            0,
            0,
            1,
            0,
            0,
            0,
            0,
            0,
            u8::from(edns.is_some()),
        ];
        q.extend_from_slice(Name::from_text(name).unwrap().as_wire());
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        if let Some(sz) = edns {
            q.extend_from_slice(&[0, 0, 41]);
            q.extend_from_slice(&sz.to_be_bytes());
            q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        }
        q
    }

    #[test]
    fn nxdomain_nodata_refused() {
        let (r, o) = answer(&query("nope.example.test", rtype::A, None), 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::NxDomain, 0));
        assert_eq!(
            Header::new_checked(&r).unwrap().flags(),
            flag::QR | flag::AA | 3
        );
        // Known name, no AAAA: NOERROR, no answers (NODATA).
        let (r, o) = answer(&query("v4only.example.test", rtype::AAAA, None), 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::NoError, 0));
        assert_eq!(
            Header::new_checked(&r).unwrap().flags(),
            flag::QR | flag::AA
        );
        // An empty non-terminal: NODATA too.
        let (_, o) = answer(&query("a.example.test", rtype::A, None), 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::NoError, 0));
        // The apex, any case, and ANY.
        let (_, o) = answer(&query("EXAMPLE.test", rtype::ANY, None), 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::NoError, 2));
        // Outside the zone: REFUSED, not authoritative.
        let (r, o) = answer(&query("example.org", rtype::A, None), 1472);
        assert_eq!(o.rcode, Rcode::Refused);
        assert_eq!(Header::new_checked(&r).unwrap().flags(), flag::QR | 5);
        let (_, o) = answer(&query("xexample.test", rtype::A, None), 1472);
        assert_eq!(o.rcode, Rcode::Refused);
    }

    #[test]
    fn truncates_above_512_or_the_edns_size() {
        let (r, o) = answer(&query("big.example.test", rtype::A, None), 1472);
        assert_eq!((o.rcode, o.answers, o.truncated), (Rcode::NoError, 0, true));
        let h = Header::new_checked(&r).unwrap();
        assert_eq!(h.flags(), flag::QR | flag::AA | flag::TC);
        assert_eq!((h.qdcount(), h.ancount()), (1, 0));
        assert!(r.len() <= 512);
        // EDNS 1232: all 40 fit (16 bytes each).
        let (r, o) = answer(&query("big.example.test", rtype::A, Some(1232)), 1472);
        assert_eq!((o.answers, o.truncated), (40, false));
        assert_eq!(r.len(), 12 + 18 + 4 + 40 * 16 + 11);
        // EDNS 600 is less than the answer: truncated.
        let (r, o) = answer(&query("big.example.test", rtype::A, Some(600)), 1472);
        assert_eq!((o.answers, o.truncated), (0, true));
        assert_eq!(Header::new_checked(&r).unwrap().arcount(), 1);
        // An advertised size below 512 counts as 512; the path's limit caps it.
        let (_, o) = answer(&query("www.example.test", rtype::A, Some(100)), 1472);
        assert_eq!((o.answers, o.truncated), (2, false));
        let (_, o) = answer(&hex(DIG_BIG_4096), 600);
        assert_eq!((o.answers, o.truncated), (0, true));
        let (_, o) = answer(&hex(DIG_BIG_4096), 1452);
        assert_eq!((o.answers, o.truncated), (40, false));
    }

    #[test]
    fn formerr_and_silence() {
        let mut out = Vec::new();
        let z = zone();
        // Shorter than a header, or a response: no answer at all.
        assert_eq!(z.respond(&[1, 2, 3], 1472, &mut out), None);
        let mut resp = hex(DIG_A);
        resp[2] |= 0x80;
        assert_eq!(z.respond(&resp, 1472, &mut out), None);
        let formerr = |q: &[u8], why: ParseError| {
            assert_eq!(parse_query(q), Err(why));
            let mut out = Vec::new();
            let o = z.respond(q, 1472, &mut out).unwrap();
            assert_eq!(o.rcode, Rcode::FormErr);
            assert_eq!(out.len(), HEADER_LEN);
            assert_eq!(&out[..2], &q[..2]);
            assert_eq!(u16::from_be_bytes([out[2], out[3]]) & 0x800f, 0x8001);
        };
        let good = hex(DIG_AAAA_NOEDNS);
        let mut q = good.clone();
        q[5] = 2;
        formerr(&q, ParseError::QdCount(2));
        formerr(
            &good[..good.len() - 1],
            ParseError::Truncated("the question"),
        );
        formerr(&good[..20], ParseError::Truncated("a label"));
        let mut q = good.clone();
        q[12] = 64;
        formerr(&q, ParseError::BadLabelType(64));
        let mut q = good.clone();
        q.push(0);
        formerr(&q, ParseError::TrailingBytes(1));
        // A pointer to itself, and forward.
        let mut q = good[..12].to_vec();
        q.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        formerr(&q, ParseError::BadPointer);
        // A label of 64 cannot be written (0x40 is a label type); 255+ bytes:
        let mut q = good[..12].to_vec();
        for _ in 0..5 {
            q.push(63);
            q.extend_from_slice(&[b'a'; 63]);
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        formerr(&q, ParseError::NameTooLong);
        // Two OPT records.
        let mut q = query("www.example.test", rtype::A, Some(1232));
        q[11] = 2;
        q.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        formerr(&q, ParseError::DuplicateOpt);
    }

    #[test]
    fn a_backward_pointer_in_the_question_is_followed() {
        // Names after the question may point back into it (a record in the
        // answer section of a query is odd, but is skipped, not refused).
        let mut q = query("www.example.test", rtype::A, None);
        q[7] = 1; // ANCOUNT 1: a record whose owner is a pointer to 12
        q.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
        assert_eq!(
            parse_query(&q).unwrap().qname.to_string(),
            "www.example.test."
        );
        let (n, end) = read_name(&q, 34).unwrap();
        assert_eq!((n.to_string().as_str(), end), ("www.example.test.", 36));
    }

    #[test]
    fn badvers_notimp() {
        let mut q = query("www.example.test", rtype::A, Some(1232));
        let n = q.len();
        q[n - 5] = 1; // EDNS version 1
        let (r, o) = answer(&q, 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::BadVers, 0));
        // RCODE 16: 0 in the header, 1 in the OPT's extended RCODE.
        assert_eq!(u16::from_be_bytes([r[2], r[3]]) & 0xf, 0);
        assert_eq!(r[r.len() - 6], 1);
        let mut q = query("www.example.test", rtype::A, None);
        q[2] = 2 << 3; // opcode 2 (STATUS)
        let (_, o) = answer(&q, 1472);
        assert_eq!(o.rcode, Rcode::NotImp);
    }

    #[test]
    fn cd_and_do_are_copied() {
        let mut q = query("www.example.test", rtype::A, Some(1232));
        q[3] |= 0x10; // CD
        let n = q.len();
        q[n - 4] = 0x80; // DO
        let (r, o) = answer(&q, 1472);
        assert_eq!((o.rcode, o.answers), (Rcode::NoError, 2));
        assert_eq!(
            u16::from_be_bytes([r[2], r[3]]),
            flag::QR | flag::AA | flag::CD
        );
        assert_eq!(
            &r[r.len() - 11..],
            &[0, 0, 41, 0x05, 0xc0, 0, 0, 0x80, 0, 0, 0]
        );
    }

    #[test]
    fn names_fill_their_buffer_to_255_bytes_and_no_further() {
        // 3 labels of 63 and one of 61: 3 * 64 + 62 + the root = 255.
        let l63 = "a".repeat(63);
        let most = format!("{l63}.{l63}.{l63}.{}", "b".repeat(61));
        let n = Name::from_text(&most).unwrap();
        assert_eq!(n.as_wire().len(), MAX_NAME);
        assert_eq!(Name::from_text(&format!("{most}b")), None);
        assert_eq!(Name::from_text(&format!("x.{most}")), None);
        // The same on the wire: read back whole, one more byte refused.
        let mut q = vec![0u8; HEADER_LEN];
        q.extend_from_slice(n.as_wire());
        assert_eq!(read_name(&q, HEADER_LEN), Ok((n.clone(), q.len())));
        let mut q = vec![0u8; HEADER_LEN];
        q.extend_from_slice(&[1, b'x']);
        q.extend_from_slice(n.as_wire());
        assert_eq!(read_name(&q, HEADER_LEN), Err(ParseError::NameTooLong));
        // join stops at 255 too; lowercase keeps the length bytes.
        let rel = Name::from_text("x").unwrap();
        assert_eq!(rel.join(&n), None);
        let mixed = Name::from_text("Www.EXAMPLE.test").unwrap();
        assert_eq!(
            mixed.lowercase().as_wire(),
            Name::from_text("www.example.test").unwrap().as_wire()
        );
        assert_eq!(mixed.to_string(), "Www.EXAMPLE.test.");
        assert_eq!(Name::root().to_string(), ".");
        assert_eq!(Name::from_text("."), Some(Name::root()));
    }

    #[test]
    fn is_within_compares_whole_labels() {
        let n = |s: &str| Name::from_text(s).unwrap();
        let zone = n("example.test");
        assert!(n("www.example.test").is_within(&zone));
        assert!(n("A.B.Example.TEST").is_within(&zone));
        assert!(zone.is_within(&n("EXAMPLE.TEST")));
        assert!(!n("xexample.test").is_within(&zone));
        assert!(!n("test").is_within(&zone));
        assert!(!n("example.org").is_within(&zone));
        assert!(n("anything.at.all").is_within(&Name::root()));
        assert!(Name::root().is_within(&Name::root()));
        assert!(!Name::root().is_within(&n("test")));
        // A label whose bytes spell "test.": [5, 4 t e s t, 0]. The last 6
        // bytes equal the wire form of "test." but do not start a label.
        let q = [0u8; HEADER_LEN]
            .iter()
            .copied()
            .chain([5, 4, b't', b'e', b's', b't', 0])
            .collect::<Vec<u8>>();
        let (odd, _) = read_name(&q, HEADER_LEN).unwrap();
        assert!(!odd.is_within(&n("test")));
        assert!(odd.is_within(&Name::root()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        #[test]
        fn no_input_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let z = zone();
            let mut out = Vec::new();
            if let Some(o) = z.respond(&b, 1472, &mut out) {
                proptest::prop_assert!(out.len() <= 1472);
                proptest::prop_assert_eq!(&out[..2], &b[..2]);
                proptest::prop_assert!(o.answers == 0 || !o.truncated);
            }
        }

        #[test]
        fn mutated_queries_never_panic(i in 0usize..100, v in proptest::prelude::any::<u8>(), cut in 0usize..60) {
            let mut q = hex(DIG_A);
            let at = i % q.len();
            q[at] = v;
            q.truncate(q.len() - cut.min(q.len()));
            let mut out = Vec::new();
            let _ = zone().respond(&q, 1472, &mut out);
            let _ = parse_query(&q);
        }
    }
}
