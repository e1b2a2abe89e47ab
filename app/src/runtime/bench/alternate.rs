//! `run --alternate-floor FLOOR`: the pipeline and one of its cross-core
//! floors (`pipeline`, `pipeline-checksums`, `pipeline-demux`,
//! `pipeline-rte-hash`) in turns on the same lcores, so that their ratio is
//! measured in one run.
//!
//! Why: on a VM whose two virtual CPUs the host moves about, the same
//! binary's cross-CPU rate swings 3x between runs and within one, and
//! pairs of separate runs give ratios of 0.75-1.31 for identical builds.
//! Taking turns every 2^27 TSC cycles (about 50 ms) lets both sides see the
//! same host, as `engine.rx_prefetch_alternate` does for the prefetch.
//!
//! How:
//! - The RX lcore looks at each burst's TSC stamp: bit [`SHIFT`] set, the
//!   pipeline takes the burst; clear, the floor does ([`pipeline_half`]).
//! - Both put mbufs into the same delivery rings, so the floor sets a
//!   dynamic mbuf flag ([`MARK_NAME`]) on what it enqueues: the consumers
//!   hand those to the floor's consumer (read `pkt_len`, free, release
//!   nothing: [`consume_floor_share`]) and the rest to the socket's own
//!   path, and teardown releases only the unmarked ones' truesize. The
//!   flag is one OR into the mbuf's first line, which the PMD has just
//!   written; the pipeline's half sets nothing.
//! - [`Halves`] counts each half's received datagrams per burst and its
//!   delivered ones at each turn (every socket's ring puts, by either side,
//!   read once per turn), so the run's JSON gives both and their ratios
//!   (`lcores[].floor_alternate`).
//!
//! One RX lcore only: with several, one lcore's turn would also count the
//! others' deliveries.
use dpdk_sys::MbufBurst;

use crate::runtime::shared::{Floor, Mode};
use crate::socket::Socket;

/// Half period: 2^27 TSC cycles, about 50 ms at 2.5 GHz (many bursts, and
/// well under a run's length). `engine.rx_prefetch_alternate` takes turns
/// on the same bit.
pub const SHIFT: u32 = 27;

/// The dynamic mbuf flag the floor's half sets.
pub const MARK_NAME: &str = "udpdemux_floor_mark";

/// Whether a burst stamped `tsc` is the pipeline's (else the floor's).
#[inline(always)]
pub fn pipeline_half(tsc: u64) -> bool {
    (tsc >> SHIFT) & 1 == 1
}

/// The checks `--alternate-floor` needs at setup, and its mark: 0 for
/// every other mode.
/// `external`: a socket read outside the engine (handler `none`), whose
/// reader would take the floor's uncharged mbufs for charged ones.
pub fn setup(
    mode: Mode,
    rx_lcores: usize,
    prefetch_alternate: bool,
    external: Option<&str>,
) -> Result<u64, String> {
    let Mode::Alternate(f) = mode else {
        return Ok(0);
    };
    if let Some(name) = external {
        return Err(format!(
            "--alternate-floor: socket {name:?} is read outside the engine (handler = \"none\"), which cannot tell the floor's uncharged mbufs: give it handler = \"count\""
        ));
    }
    if !f.is_pipeline() {
        return Err(format!(
            "--alternate-floor takes a cross-core floor (pipeline, pipeline-checksums, pipeline-demux, pipeline-rte-hash), not {f:?}"
        ));
    }
    if rx_lcores != 1 {
        return Err(format!(
            "--alternate-floor needs exactly one RX lcore (the config has {rx_lcores}): each turn counts what was delivered during it"
        ));
    }
    if prefetch_alternate {
        return Err(
            "--alternate-floor and engine.rx_prefetch_alternate take turns on the same clock bit: set engine.rx_prefetch_alternate = false"
                .into(),
        );
    }
    dpdk_sys::mbuf::dynflag_register(MARK_NAME).map_err(|e| format!("mbuf dynflag {MARK_NAME}: {e}"))
}

/// The floor named in the mode, for reports.
pub fn floor_of(mode: Mode) -> Option<Floor> {
    match mode {
        Mode::Alternate(f) => Some(f),
        _ => None,
    }
}

/// The RX lcore's books of the two halves: index 0 the floor's, 1 the
/// pipeline's.
#[derive(Debug, Default)]
pub struct Halves {
    pub received: [u64; 2],
    pub delivered: [u64; 2],
    /// The half of the last burst, and the rings' total at its turn's start.
    half: usize,
    at_turn: Option<u64>,
}

impl Halves {
    /// A burst of `n` in the half `pipeline`; at a turn, what the rings got
    /// since the last turn goes to the half that ended (`total` reads it:
    /// called once per turn).
    #[inline(always)]
    pub fn burst(&mut self, pipeline: bool, n: usize, total: impl FnOnce() -> u64) {
        let half = usize::from(pipeline);
        if half != self.half || self.at_turn.is_none() {
            self.turn(half, total());
        }
        self.received[half] += n as u64;
    }

    #[cold]
    fn turn(&mut self, half: usize, now: u64) {
        if let Some(at) = self.at_turn {
            self.delivered[self.half] += now.saturating_sub(at);
        }
        self.half = half;
        self.at_turn = Some(now);
    }

    /// The loop's end: the last half gets what came since its turn.
    pub fn finish(&mut self, total: u64) {
        let half = self.half;
        self.turn(half, total);
    }
}

/// The floor's share of a burst a consumer dequeued from `sock` with
/// `--alternate-floor` (`mark`, nonzero): consumed as the floor's consumer
/// does (`Socket::consume_floor`), and taken out of `bufs`, which keeps the
/// pipeline's mbufs in order. How many were the floor's.
#[inline]
pub fn consume_floor_share<const N: usize>(sock: &Socket, bufs: &mut MbufBurst<N>, mark: u64) -> usize {
    let marked = bufs.iter().filter(|m| m.ol_flags() & mark != 0).count();
    if marked == 0 {
        return 0;
    }
    if marked == bufs.len() {
        sock.consume_floor(bufs);
        return marked;
    }
    // Both sides' mbufs in one burst: only at a turn.
    let mut floor: MbufBurst<N> = MbufBurst::new();
    let mut rest: MbufBurst<N> = MbufBurst::new();
    for m in bufs.drain() {
        let to = if m.ol_flags() & mark != 0 {
            &mut floor
        } else {
            &mut rest
        };
        // Each holds at most what `bufs` did (N).
        if let Err(m) = to.push(m) {
            drop(m);
        }
    }
    sock.consume_floor(&mut floor);
    std::mem::swap(bufs, &mut rest);
    marked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_burst_counts_in_one_half_and_every_delivery_in_the_half_it_came() {
        let mut h = Halves::default();
        // Floor half: rings at 100 when it starts, 130 at the turn.
        h.burst(false, 8, || 100);
        h.burst(false, 4, || unreachable!("read only at a turn"));
        h.burst(true, 16, || 130);
        h.burst(true, 16, || unreachable!("read only at a turn"));
        h.burst(false, 2, || 170);
        h.finish(171);
        assert_eq!(h.received, [14, 32]);
        assert_eq!(h.delivered, [30 + 1, 40]);
    }

    #[test]
    fn setup_refuses_what_cannot_be_measured_this_way() {
        assert_eq!(setup(Mode::Pipeline, 3, true, Some("app")), Ok(0));
        let refused = |f, rx, prefetch, external| setup(Mode::Alternate(f), rx, prefetch, external).unwrap_err();
        assert!(refused(Floor::Checksums, 1, false, None).contains("cross-core floor"));
        assert!(refused(Floor::Pipeline, 2, false, None).contains("exactly one RX lcore"));
        assert!(refused(Floor::Pipeline, 1, true, None).contains("rx_prefetch_alternate = false"));
        assert!(refused(Floor::PipelineDemux, 1, false, Some("app")).contains("\"app\" is read outside"));
    }
}
