//! The reference demux both the `demux` and `reload` targets check the
//! flow table against: the kernel's lookup order, written naively.
use std::net::IpAddr;

use udpdemux::flow_table::Binding;

/// 3: connected, 2: exact local address, 1: wildcard, 0: no match.
pub fn score(b: &Binding, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> u8 {
    if b.local.port() != dport || b.local.is_ipv4() != dst.is_ipv4() {
        return 0;
    }
    if !(b.local.ip().is_unspecified() || b.local.ip() == dst) {
        return 0;
    }
    match b.remote {
        Some(r) if r.ip() == src && r.port() == sport => 3,
        Some(_) => 0,
        None if b.local.ip().is_unspecified() => 1,
        None => 2,
    }
}
