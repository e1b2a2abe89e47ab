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

use dpdk_sys::{ffi, mbuf, port};

use super::{datagram_of, TxCtx, CONSUME_BURST};
use crate::control::Iface;
use crate::counters::ConsumerStats;
use crate::meta::MbufMeta;
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
///
/// # Safety
/// `m` is a live, delivered mbuf the caller owns.
unsafe fn build_reply(m: *mut ffi::rte_mbuf, iface: &Iface) -> Option<*mut ffi::rte_mbuf> {
    // SAFETY: per the contract: live, ours, metadata set at RX.
    let (frame, meta) = unsafe { (mbuf::data(m), MbufMeta::get(m)) };
    let d = datagram_of(frame, meta)?;
    let src = reply_source(&d, iface)?;
    let payload = d.payload(frame)?;
    let len = u16::try_from(build::reply_len(&d, payload.len())).ok()?;
    // SAFETY: an mbuf's pool pointer is valid while the mbuf lives.
    let r = unsafe { ffi::rte_pktmbuf_alloc((*m).pool) };
    if r.is_null() {
        return None;
    }
    // SAFETY: r is a fresh mbuf we own; append returns `len` writable bytes or null.
    let p = unsafe { ffi::rte_pktmbuf_append(r, len) };
    let opts = ReplyOpts {
        src,
        ..ReplyOpts::default()
    };
    let written = (!p.is_null())
        .then(|| {
            // SAFETY: append gave us `len` bytes inside r's data room, not aliasing `frame`.
            let out = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, usize::from(len)) };
            build::write_udp_reply(frame, &d, payload, opts, out).ok()
        })
        .flatten();
    if written != Some(usize::from(len)) {
        // SAFETY: r is ours and not handed to anyone.
        unsafe { ffi::rte_pktmbuf_free(r) };
        return None;
    }
    Some(r)
}

/// Replies waiting for one `tx_burst` on one port.
struct TxBatch {
    port: u16,
    bufs: [*mut ffi::rte_mbuf; CONSUME_BURST],
    n: usize,
}

impl TxBatch {
    /// Hand the batch to the NIC; what it refuses is freed and counted.
    fn flush(&mut self, queue: u16, stats: &ConsumerStats) {
        if self.n == 0 {
            return;
        }
        let sent = port::tx_burst(self.port, queue, &mut self.bufs[..self.n]);
        stats.tx.add(sent as u64);
        let refused = &mut self.bufs[sent..self.n];
        stats.tx_errors.add(refused.len() as u64);
        // SAFETY: the NIC did not take these: still ours.
        unsafe { mbuf::free_bulk(refused) };
        self.n = 0;
    }
}

/// Echo a burst of delivered datagrams. The requests stay the caller's (to
/// consume); every reply built is sent or counted in `tx_errors` and freed,
/// and so is every datagram that got no reply.
///
/// # Safety
/// Every pointer is a live mbuf dequeued from the ring of the socket whose
/// consumer counters `stats` are, and owned by the caller.
pub unsafe fn echo_burst(stats: &ConsumerStats, bufs: &[*mut ffi::rte_mbuf], tx: TxCtx<'_>) {
    let Some(queue) = tx.queue else {
        stats.tx_errors.add(bufs.len() as u64);
        return;
    };
    let mut batch = TxBatch {
        port: u16::MAX,
        bufs: [std::ptr::null_mut(); CONSUME_BURST],
        n: 0,
    };
    for &m in bufs {
        // SAFETY: per the contract.
        let port_id = unsafe { MbufMeta::get(m) }.port;
        let Some(iface) = tx.ifaces.get(port_id).filter(|i| queue < i.tx_queues) else {
            stats.tx_errors.add(1);
            continue;
        };
        // SAFETY: per the contract.
        let Some(r) = (unsafe { build_reply(m, iface) }) else {
            stats.tx_errors.add(1);
            continue;
        };
        if batch.port != port_id || batch.n == batch.bufs.len() {
            batch.flush(queue, stats);
            batch.port = port_id;
        }
        batch.bufs[batch.n] = r;
        batch.n += 1;
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
