//! Receive coalescing with the kernel's UDP GRO semantics (`UDP_GRO`,
//! `udp_gro_receive` / `udp_gro_receive_segment`): consecutive datagrams of
//! one flow (same source and destination address and port), with the same
//! ECN codepoint (the IP layer's GRO flushes on a TOS / traffic class
//! change), and of one size are copied into one buffer one after another;
//! the caller learns the `stride` (the size of each but the last) and the
//! `count`. The last may be shorter and then ends the run, as in the
//! kernel; an empty datagram is never merged (a stride of 0 would hide it).
//!
//! A QUIC stack reads a whole run as one receive (quinn's `RecvMeta` with
//! `stride < len`), which is what makes GRO pay: one call up the stack per
//! run instead of per datagram.
//!
//! The logic is over [`Segment`], so it is tested without an EAL; the
//! batch of received mbufs (`api::RecvBatch::coalesce`) and anything else
//! with a flow, an ECN codepoint and a payload use the same code.
use std::net::SocketAddr;

/// One received datagram as coalescing sees it.
pub trait Segment {
    /// Source, destination.
    fn flow(&self) -> (SocketAddr, SocketAddr);
    /// ECN codepoint (the low 2 bits of IPv4 TOS / IPv6 traffic class).
    fn ecn(&self) -> u8;
    /// UDP payload length.
    fn payload_len(&self) -> usize;
    /// Copies the payload into `out` (exactly `payload_len()` bytes long).
    fn copy_to(&self, out: &mut [u8]);
}

/// One coalesced receive: `count` datagrams of `flow`, copied into the
/// start of the caller's buffer, `len` bytes in all, each `stride` bytes
/// long but the last (which may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesced {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ecn: u8,
    /// Bytes written into the buffer.
    pub len: usize,
    /// The size of every datagram but the last (`len` when `count` is 1).
    pub stride: usize,
    /// Datagrams in the run.
    pub count: usize,
}

impl Coalesced {
    /// The run split back into its datagrams (`buf` is the buffer it was
    /// written into).
    pub fn split<'b>(&self, buf: &'b [u8]) -> impl Iterator<Item = &'b [u8]> {
        let stride = self.stride.max(1);
        buf[..self.len.min(buf.len())].chunks(stride)
    }
}

/// Coalesce from the front of `segs` into `out`: at most `max_segments`
/// datagrams (at least one is taken if it fits), stopping at the first of
/// another flow, ECN codepoint or size, after a shorter one, or when `out`
/// has no room for the next. `None` when `segs` is empty or its first
/// datagram is longer than `out` (the caller gives a bigger buffer, or
/// takes it alone).
pub fn coalesce<S: Segment>(
    segs: impl IntoIterator<Item = S>,
    out: &mut [u8],
    max_segments: usize,
) -> Option<Coalesced> {
    let mut it = segs.into_iter();
    let first = it.next()?;
    let stride = first.payload_len();
    let dst = out.get_mut(..stride)?;
    first.copy_to(dst);
    let (src, to) = first.flow();
    let mut c = Coalesced {
        src,
        dst: to,
        ecn: first.ecn(),
        len: stride,
        stride,
        count: 1,
    };
    if stride == 0 {
        return Some(c);
    }
    for s in it {
        if c.count >= max_segments || s.flow() != (c.src, c.dst) || s.ecn() != c.ecn {
            break;
        }
        let n = s.payload_len();
        if n == 0 || n > stride {
            break;
        }
        let Some(room) = out.get_mut(c.len..c.len + n) else {
            break;
        };
        s.copy_to(room);
        c.len += n;
        c.count += 1;
        if n < stride {
            // The kernel's rule: a shorter segment is the run's last.
            break;
        }
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug)]
    struct Dg {
        src: SocketAddr,
        dst: SocketAddr,
        ecn: u8,
        payload: Vec<u8>,
    }

    impl Segment for &Dg {
        fn flow(&self) -> (SocketAddr, SocketAddr) {
            (self.src, self.dst)
        }
        fn ecn(&self) -> u8 {
            self.ecn
        }
        fn payload_len(&self) -> usize {
            self.payload.len()
        }
        fn copy_to(&self, out: &mut [u8]) {
            out.copy_from_slice(&self.payload);
        }
    }

    fn dg(src: &str, len: usize, tag: u8, ecn: u8) -> Dg {
        Dg {
            src: src.parse().unwrap(),
            dst: "198.18.0.1:4433".parse().unwrap(),
            ecn,
            payload: (0..len)
                .map(|i| tag.wrapping_mul(31).wrapping_add(i as u8))
                .collect(),
        }
    }

    #[test]
    fn ten_equal_datagrams_become_one_buffer_and_split_back() {
        let v: Vec<Dg> = (0..10).map(|i| dg("198.18.0.2:999", 1200, i, 2)).collect();
        let mut buf = vec![0u8; 64 * 1024];
        let c = coalesce(&v, &mut buf, 64).unwrap();
        assert_eq!((c.count, c.stride, c.len, c.ecn), (10, 1200, 12_000, 2));
        let back: Vec<&[u8]> = c.split(&buf).collect();
        assert_eq!(back.len(), 10);
        for (b, d) in back.iter().zip(&v) {
            assert_eq!(*b, &d.payload[..]);
        }
    }

    #[test]
    fn a_shorter_datagram_ends_the_run_and_others_break_it() {
        let mut v: Vec<Dg> = (0..3).map(|i| dg("198.18.0.2:999", 100, i, 0)).collect();
        v.push(dg("198.18.0.2:999", 40, 9, 0));
        v.push(dg("198.18.0.2:999", 100, 10, 0));
        let mut buf = vec![0u8; 4096];
        let c = coalesce(&v, &mut buf, 64).unwrap();
        assert_eq!((c.count, c.stride, c.len), (4, 100, 340));
        let back: Vec<&[u8]> = c.split(&buf).collect();
        assert_eq!(back.last().unwrap(), &&v[3].payload[..]);
        // Another source, another ECN codepoint, a longer one: each ends it.
        for other in [
            dg("198.18.0.3:999", 100, 1, 0),
            dg("198.18.0.2:999", 100, 1, 3),
            dg("198.18.0.2:999", 101, 1, 0),
        ] {
            let w = [v[0].clone(), other];
            assert_eq!(coalesce(&w, &mut buf, 64).unwrap().count, 1);
        }
        // The limit and the buffer's room bound a run.
        assert_eq!(coalesce(&v, &mut buf, 2).unwrap().count, 2);
        assert_eq!(coalesce(&v, &mut buf[..250], 64).unwrap().count, 2);
        // Too big for the buffer, or nothing: no receive.
        assert!(coalesce(&v, &mut buf[..99], 64).is_none());
        assert!(coalesce(&v[..0], &mut buf, 64).is_none());
        // An empty datagram stands alone.
        let z = [dg("198.18.0.2:999", 0, 0, 0), dg("198.18.0.2:999", 0, 0, 0)];
        let c = coalesce(&z, &mut buf, 64).unwrap();
        assert_eq!((c.count, c.len, c.stride), (1, 0, 0));
        assert_eq!(c.split(&buf).count(), 0);
    }

    use proptest::prelude::*;

    /// A datagram from few flows, codepoints and sizes, so runs form and break.
    fn any_dg() -> impl Strategy<Value = Dg> {
        (
            0u8..3,
            0u8..2,
            prop_oneof![Just(0usize), Just(40), Just(100), 0usize..130],
            any::<u8>(),
        )
            .prop_map(|(src, ecn, len, tag)| {
                dg(&format!("198.18.0.{}:999", 2 + src), len, tag, ecn)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Receiving a whole queue run by run, the way the adapter does:
        /// every datagram is taken exactly once and in order (each run's
        /// `count` advances the queue; none is skipped or repeated), a run
        /// splits back into exactly its datagrams' payloads (an empty
        /// datagram is a run of its own with nothing to split), and a run
        /// keeps the kernel's rules: one flow and codepoint, all of the
        /// first's size but a shorter last, within `max` and the buffer.
        #[test]
        fn a_queue_received_run_by_run_gives_back_every_datagram_in_order(
            v in proptest::collection::vec(any_dg(), 0..40),
            max in 1usize..12,
            room in 100usize..1200,
        ) {
            let mut buf = vec![0u8; room];
            let mut i = 0;
            while i < v.len() {
                let Some(c) = coalesce(&v[i..], &mut buf, max) else {
                    // Only a datagram too big for the buffer stops a receive.
                    prop_assert!(v[i].payload.len() > room);
                    i += 1;
                    continue;
                };
                let run = &v[i..i + c.count];
                prop_assert!(c.count >= 1 && c.count <= max && c.len <= room);
                prop_assert_eq!((c.src, c.dst, c.ecn), (run[0].src, run[0].dst, run[0].ecn));
                prop_assert_eq!(c.len, run.iter().map(|d| d.payload.len()).sum::<usize>());
                prop_assert_eq!(c.stride, run[0].payload.len());
                for (k, d) in run.iter().enumerate() {
                    prop_assert_eq!((d.src, d.dst, d.ecn), (c.src, c.dst, c.ecn));
                    let last = k + 1 == run.len();
                    prop_assert!(d.payload.len() == c.stride || (last && d.payload.len() < c.stride));
                }
                let back: Vec<&[u8]> = c.split(&buf).collect();
                let want: Vec<&[u8]> = run.iter().map(|d| &d.payload[..]).filter(|p| !p.is_empty()).collect();
                prop_assert_eq!(back, want);
                i += c.count;
            }
        }
    }
}
