//! The `echo` handler: each datagram's payload goes back to its sender with
//! addresses and ports swapped, through the port it arrived on, in one
//! `tx_burst` per port per consumer burst.
//!
//! The reply is written into a fresh mbuf from the request's own pool (the
//! pool of the NUMA node that received it) rather than rewritten in place:
//! the request then leaves through `Socket::consume` like every other
//! delivered datagram, so the socket's memory is released by one code path,
//! and the reply never carries the request's IP options, extension headers
//! or Ethernet padding. The cost is one payload copy per datagram.
use std::net::IpAddr;

use dpdk_sys::{port, Mbuf, MbufBurst, MbufRef};

use super::{datagram_of, TxCtx, CONSUME_BURST};
use crate::control::Iface;
use crate::counters::ConsumerStats;
use crate::parse::build::{self, ReplyOpts};
use crate::parse::Datagram;

/// The source for a reply: the request's destination, unless that was a
/// group or broadcast address (RFC 1122 §4.1.3.5: reply from a unicast
/// address of ours). `None`: do not reply (no unicast address configured,
/// or the sender is not a single host).
pub fn reply_source(d: &Datagram, iface: &Iface) -> Option<Option<IpAddr>> {
    let sender_ok = match d.src {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || iface.is_v4_broadcast(a)),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    };
    if !sender_ok || d.sport == 0 {
        return None;
    }
    let group = match d.dst {
        IpAddr::V4(a) => a.is_multicast() || iface.is_v4_broadcast(a),
        IpAddr::V6(a) => a.is_multicast(),
    };
    if group {
        iface.source_for(d.family).map(Some)
    } else {
        Some(None)
    }
}

/// Build the reply to `m` in a new mbuf from `m`'s pool. `None`: not
/// answerable or no buffer.
fn build_reply(m: MbufRef<'_>, iface: &Iface) -> Option<Mbuf> {
    if m.nb_segs() != 1 {
        return build_reply_gathered(m, iface);
    }
    let frame = m.data();
    let d = datagram_of(frame, &crate::meta::dgram(m))?;
    let src = reply_source(&d, iface)?;
    let payload = d.payload(frame)?;
    let len = u16::try_from(build::reply_len(&d, payload.len())).ok()?;
    // A fresh mbuf, freed on every way out but the last.
    let mut r = m.alloc_from_pool()?;
    let opts = ReplyOpts {
        src,
        ..ReplyOpts::default()
    };
    let out = r.append(len)?;
    let written = build::write_udp_reply(frame, &d, payload, opts, out).ok();
    (written == Some(usize::from(len))).then_some(r)
}

/// Largest payload of a reply that leaves as one frame: the reply's IP
/// datagram fits the port's MTU (1500, `send::MTU`); larger ones are
/// fragmented ([`send_fragmented`]).
/// The reply has no IP options or extension headers.
#[inline]
fn fits_one_frame(family: crate::parse::Family, payload_len: u16) -> bool {
    usize::from(payload_len) <= crate::send::max_payload(family)
}

/// Largest reassembled payload gathered into one reply frame.
const GATHER_MAX: usize = crate::send::MTU - 20 - 8;

/// [`build_reply`] for a reassembled datagram (several segments) whose
/// reply fits one frame: the payload is gathered into one buffer.
#[cold]
fn build_reply_gathered(m: MbufRef<'_>, iface: &Iface) -> Option<Mbuf> {
    let d = crate::handlers::datagram_of_mbuf(m, &crate::meta::dgram(m))?;
    if usize::from(d.payload_len) > GATHER_MAX {
        return None;
    }
    let src = reply_source(&d, iface)?;
    let mut buf = [0u8; GATHER_MAX];
    let mut n = 0;
    for seg in crate::handlers::payload_segments(m, &d) {
        buf.get_mut(n..n + seg.len())?.copy_from_slice(seg);
        n += seg.len();
    }
    let payload = &buf[..n];
    let len = u16::try_from(build::reply_len(&d, payload.len())).ok()?;
    let mut r = m.alloc_from_pool()?;
    let opts = ReplyOpts {
        src,
        ..ReplyOpts::default()
    };
    let out = r.append(len)?;
    // The request's headers are all in its first segment.
    let written = build::write_udp_reply(m.data(), &d, payload, opts, out).ok();
    (written == Some(usize::from(len))).then_some(r)
}

/// Headers of a reply with no payload: Ethernet, two tags, IPv6, UDP.
const HEAD_MAX: usize = 14 + 8 + 40 + 8;

/// Most fragments of one reply: 65 535 bytes over a 1500-byte MTU take 46.
const FRAGS_MAX: usize = 64;

/// Echoes `m`, whose reply does not fit one frame, as fragments sent at
/// once on `queue` of `port` (after the batch before it, so replies keep
/// their order). The kernel's `IP_PMTUDISC_WANT` (a UDP socket's default):
/// the fragments carry no DF. True when every fragment went to the NIC;
/// counted in `FragOKs` / `FragCreates`, or `FragFails` when a buffer was
/// missing.
#[cold]
#[inline(never)]
fn send_fragmented(
    m: MbufRef<'_>,
    iface: &Iface,
    frag: &crate::frag_out::FragOut,
    port: u16,
    queue: u16,
) -> bool {
    use crate::parse::fragment::{finish_udp_head, sum_parts, Fragmenter};
    let Some(d) = crate::handlers::datagram_of_mbuf(m, &crate::meta::dgram(m))
    else {
        return false;
    };
    let Some(src) = reply_source(&d, iface) else {
        return false;
    };
    // The reply's headers, written for an empty payload, then given the
    // real UDP length and checksum (summed over the request's segments).
    let mut head = [0u8; HEAD_MAX];
    let opts = ReplyOpts {
        src,
        ..ReplyOpts::default()
    };
    let Ok(n) = build::write_udp_reply(m.data(), &d, &[], opts, &mut head) else {
        return false;
    };
    let l3 = ether_len(&d);
    let payload = || crate::handlers::payload_segments(m, &d);
    let len = usize::from(d.payload_len);
    let Some(l4) = finish_udp_head(&mut head[..n], l3, d.family, len, sum_parts(payload())) else {
        return false;
    };
    let (hdrs, udp) = head[..n].split_at(l4);
    let udp_len = crate::parse::udp::HEADER_LEN + len;
    let ident = frag.next_ident(d.family);
    let Some(fr) = Fragmenter::new(
        hdrs,
        l3,
        d.family,
        udp_len,
        crate::send::MTU,
        ident,
    ) else {
        frag.count(d.family, None);
        return false;
    };
    let mut out: MbufBurst<FRAGS_MAX> = MbufBurst::new();
    let written = crate::frag_out::write_fragments(
        &fr,
        || std::iter::once(udp).chain(payload()),
        || m.alloc_from_pool(),
        &mut out,
    );
    frag.count(d.family, written);
    if written.is_none() {
        // The fragments written so far are freed with `out`.
        return false;
    }
    port::tx_from(port, queue, &mut out);
    // What the NIC did not take is freed with `out`: the peer cannot
    // reassemble the datagram, so it counts as not sent.
    out.is_empty()
}

/// Bytes before the reply's IP header: Ethernet and the request's tags.
fn ether_len(d: &Datagram) -> usize {
    crate::parse::ether::HEADER_LEN
        + crate::parse::ether::VLAN_TAG_LEN * usize::from(d.vlan_count.min(2))
}

/// Replies waiting for one `tx_burst` on one port.
struct TxBatch {
    port: u16,
    bufs: MbufBurst<CONSUME_BURST>,
}

impl TxBatch {
    /// Hand the batch to the NIC; what it refuses is freed and counted.
    fn flush(&mut self, queue: u16, stats: &ConsumerStats) {
        if self.bufs.is_empty() {
            return;
        }
        let sent = port::tx_from(self.port, queue, &mut self.bufs);
        stats.tx.add(sent as u64);
        // The NIC did not take these: freed.
        stats.tx_errors.add(self.bufs.len() as u64);
        self.bufs.clear();
    }
}

/// Echo a burst of delivered datagrams. The requests stay the caller's (to
/// consume); every reply built is sent or counted in `tx_errors` and freed,
/// and so is every datagram that got no reply.
pub fn echo_burst<const N: usize>(stats: &ConsumerStats, bufs: &MbufBurst<N>, tx: TxCtx<'_>) {
    let Some(queue) = tx.queue else {
        stats.tx_errors.add(bufs.len() as u64);
        return;
    };
    let mut batch = TxBatch {
        port: u16::MAX,
        bufs: MbufBurst::new(),
    };
    for m in bufs.iter() {
        // The port it arrived on (`MbufMeta::init` set it).
        let port_id = m.port();
        let Some(iface) = tx.ifaces.get(port_id).filter(|i| queue < i.tx_queues) else {
            stats.tx_errors.add(1);
            continue;
        };
        // A reply over the MTU goes as fragments, after what is batched.
        let meta = crate::meta::dgram(m);
        let whole = fits_one_frame(meta.family, meta.payload_len);
        if !whole {
            batch.flush(queue, stats);
            if send_fragmented(m, iface, tx.frag, port_id, queue) {
                stats.tx.add(1);
            } else {
                stats.tx_errors.add(1);
            }
            continue;
        }
        let Some(r) = build_reply(m, iface) else {
            stats.tx_errors.add(1);
            continue;
        };
        if batch.port != port_id || batch.bufs.spare() == 0 {
            batch.flush(queue, stats);
            batch.port = port_id;
        }
        // There is room: the batch was just flushed if full.
        if let Err(r) = batch.bufs.push(r) {
            stats.tx_errors.add(1);
            drop(r);
        }
    }
    batch.flush(queue, stats);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Family;

    fn iface() -> Iface {
        Iface {
            port: 0,
            mac: [2, 0, 0, 0, 0, 1],
            v4: vec![("198.18.0.1".parse().unwrap(), 24)],
            v6: vec![],
            tx_queues: 1,
            lessons: None,
            tx_csum: false,
        }
    }

    fn d(src: &str, sport: u16, dst: &str) -> Datagram {
        let src: IpAddr = src.parse().unwrap();
        Datagram {
            family: if src.is_ipv4() {
                Family::V4
            } else {
                Family::V6
            },
            vlan_count: 0,
            l3_off: 14,
            l4_off: 34,
            payload_off: 42,
            payload_len: 0,
            src,
            dst: dst.parse().unwrap(),
            sport,
            dport: 7,
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
        }
    }

    #[test]
    fn reply_sources() {
        let i = iface();
        assert_eq!(
            reply_source(&d("198.18.0.2", 5, "198.18.0.1"), &i),
            Some(None),
            "unicast: request's destination"
        );
        let own = Some(Some("198.18.0.1".parse().unwrap()));
        assert_eq!(
            reply_source(&d("198.18.0.2", 5, "198.18.0.255"), &i),
            own,
            "subnet broadcast: our address"
        );
        assert_eq!(
            reply_source(&d("198.18.0.2", 5, "239.1.1.1"), &i),
            own,
            "multicast: our address"
        );
        assert_eq!(
            reply_source(&d("198.18.0.2", 0, "198.18.0.1"), &i),
            None,
            "source port 0"
        );
        assert_eq!(
            reply_source(&d("198.18.0.255", 5, "198.18.0.1"), &i),
            None,
            "broadcast sender"
        );
        assert_eq!(
            reply_source(&d("fd00::2", 5, "ff02::1"), &i),
            None,
            "group without a v6 address"
        );
    }
}
