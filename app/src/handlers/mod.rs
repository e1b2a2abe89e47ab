//! Built-in socket handlers, run by the lcore that consumes a socket's ring
//! (a consumer lcore, or the main lcore): `count` (discard), `echo` (send the
//! payload back) and `pcap` (write the frames to a file). RX lcores never
//! touch anything here.
pub mod echo;
pub mod pcap_sink;

use std::net::{IpAddr, SocketAddr};

use crate::config::{Handler, SocketConf};
use crate::control::Ifaces;
use crate::meta::DgramMeta;
use dpdk_sys::MbufRef;
use crate::parse::ether::{self, EthernetFrame};
use crate::parse::ipv4::Ipv4Packet;
use crate::parse::ipv6::Ipv6Packet;
use crate::parse::udp::{self, UdpPacket};
use crate::parse::{Datagram, Family};

/// Datagrams taken from a ring per dequeue: the most a handler is given
/// at once (echo sizes its TX batch by it).
pub const CONSUME_BURST: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("cannot create pcap file {path}: {source}")]
    PcapCreate {
        path: std::path::PathBuf,
        source: crate::pcap::PcapError,
    },
    #[error("handler \"pcap\" needs pcap_file")]
    PcapNoFile,
}

/// Per-socket handler state, owned by whoever consumes the socket.
pub enum State {
    Stateless,
    Pcap(pcap_sink::PcapSink),
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Stateless => f.write_str("Stateless"),
            State::Pcap(p) => f.debug_tuple("Pcap").field(&p.path()).finish(),
        }
    }
}

impl State {
    /// What the socket's handler needs before the first datagram (the pcap file is created here).
    pub fn for_conf(conf: &SocketConf) -> Result<State, HandlerError> {
        match conf.handler {
            Handler::Pcap => {
                let path = conf.pcap_file.as_deref().ok_or(HandlerError::PcapNoFile)?;
                Ok(State::Pcap(pcap_sink::PcapSink::create(
                    path,
                    conf.pcap_limit_bytes,
                )?))
            }
            Handler::Count | Handler::Echo | Handler::None => Ok(State::Stateless),
        }
    }
}

/// Where a consuming lcore may transmit: the ports and its own TX queue on
/// each (None: this lcore has no TX queue, replies are counted as errors).
#[derive(Debug, Clone, Copy)]
pub struct TxCtx<'a> {
    pub ifaces: &'a Ifaces,
    pub queue: Option<u16>,
    /// Identification and counters for replies that must be fragmented.
    pub frag: &'a crate::frag_out::FragOut,
}

/// Rebuild the parse result of a delivered datagram from its metadata and
/// frame (the RX lcore validated both; this only re-reads addresses and
/// ports at the stored offsets). `None` if they disagree.
pub fn datagram_of(frame: &[u8], meta: &DgramMeta) -> Option<Datagram> {
    datagram_within(frame, frame.len(), meta)
}

/// [`datagram_of`] for a delivered mbuf of one segment or several (a
/// reassembled datagram): the headers are in the first segment, the
/// payload ends within the packet's length.
pub fn datagram_of_mbuf(m: MbufRef<'_>, meta: &DgramMeta) -> Option<Datagram> {
    datagram_within(m.data(), m.pkt_len() as usize, meta)
}

/// The bytes of `d`'s UDP payload in `m`, segment by segment (one slice
/// for a single-segment mbuf).
pub fn payload_segments<'a>(m: MbufRef<'a>, d: &Datagram) -> impl Iterator<Item = &'a [u8]> {
    let start = usize::from(d.payload_off);
    let end = start + usize::from(d.payload_len);
    let mut at = 0usize;
    m.segments().filter_map(move |seg| {
        let (a, b) = (at, at + seg.len());
        at = b;
        let lo = start.max(a);
        let hi = end.min(b);
        (lo < hi).then(|| &seg[lo - a..hi - a])
    })
}

fn datagram_within(frame: &[u8], total_len: usize, meta: &DgramMeta) -> Option<Datagram> {
    let l3 = usize::from(meta.l3_off);
    let l4 = usize::from(meta.l4_off);
    let vlans = l3.checked_sub(ether::HEADER_LEN)? / ether::VLAN_TAG_LEN;
    let family = meta.family;
    let (src, dst) = match family {
        Family::V4 => {
            let ip = Ipv4Packet::new_checked(frame.get(l3..)?).ok()?;
            (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()))
        }
        Family::V6 => {
            let ip = Ipv6Packet::new_checked(frame.get(l3..)?).ok()?;
            (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()))
        }
    };
    // Only the ports are read: the header's first 4 bytes are enough.
    let ports = UdpPacket::new_unchecked(frame.get(l4..l4 + udp::field::DST_PORT.end)?);
    // The IP header was read past l3 >= 14: the Ethernet header is there.
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let payload_end = usize::from(meta.payload_off()).checked_add(usize::from(meta.payload_len))?;
    if payload_end > total_len {
        return None;
    }
    Some(Datagram {
        family,
        vlan_count: u8::try_from(vlans).ok()?,
        l3_off: meta.l3_off,
        l4_off: meta.l4_off,
        payload_off: meta.payload_off(),
        payload_len: meta.payload_len,
        src,
        dst,
        sport: ports.src_port(),
        dport: ports.dst_port(),
        src_mac: eth.src_mac(),
        dst_mac: eth.dst_mac(),
    })
}

/// Source and destination socket addresses of a datagram.
pub fn addrs(d: &Datagram) -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::new(d.src, d.sport),
        SocketAddr::new(d.dst, d.dport),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use crate::parse::{self, Offload};

    fn meta_of(d: &Datagram) -> DgramMeta {
        // The fields the RX lcore fills (MbufMeta::init writes the same).
        DgramMeta {
            l3_off: d.l3_off,
            l4_off: d.l4_off,
            payload_len: d.payload_len,
            family: d.family,
            ..DgramMeta::default()
        }
    }

    #[test]
    fn datagram_is_rebuilt_exactly_from_meta() {
        let tags = [(0x8100, 5)];
        for (l3, vlans) in [
            (
                L3Spec::V4 {
                    src: "198.18.0.2".parse().unwrap(),
                    dst: "198.18.0.1".parse().unwrap(),
                    ttl: 64,
                    options: &[1, 1, 1, 0],
                    ident: 3,
                    frag: FragSpec::default(),
                },
                &tags[..],
            ),
            (
                L3Spec::V6 {
                    src: "fd00::2".parse().unwrap(),
                    dst: "fd00::1".parse().unwrap(),
                    hop_limit: 64,
                    ext: &[],
                },
                &[][..],
            ),
        ] {
            let f = build::to_vec(&FrameSpec {
                src_mac: [2, 0, 0, 0, 0, 2],
                dst_mac: [2, 0, 0, 0, 0, 1],
                vlans,
                l3,
                sport: 4000,
                dport: 7,
                payload: b"hello",
                udp_csum: CsumMode::Correct,
            })
            .unwrap();
            let d = parse::parse(&f, Offload::default()).unwrap();
            assert_eq!(datagram_of(&f, &meta_of(&d)), Some(d));
            // A frame shorter than the metadata says is refused, not read past.
            assert_eq!(datagram_of(&f[..f.len() - 1], &meta_of(&d)), None);
        }
    }
}
