//! The `pcap` handler: every delivered datagram's frame, as received, into
//! a classic pcap file (Ethernet link type) that tshark/Wireshark open, up
//! to a size limit. Timestamps are the RX lcore's TSC stamps mapped to wall
//! time once, when the file is created.
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use dpdk_sys::{eal, MbufBurst};

use super::HandlerError;
use crate::counters::ConsumerStats;
use crate::pcap::{PcapWriter, Written};

pub struct PcapSink {
    path: PathBuf,
    w: PcapWriter<BufWriter<File>>,
    base_ns: u64,
    base_tsc: u64,
    tsc_hz: u64,
    write_error_logged: bool,
}

impl PcapSink {
    /// Create (truncate) the file and write its header.
    pub fn create(path: &Path, limit_bytes: u64) -> Result<PcapSink, HandlerError> {
        let mut w = PcapWriter::create(path, 0).map_err(|source| HandlerError::PcapCreate {
            path: path.into(),
            source,
        })?;
        w.set_size_limit(Some(limit_bytes));
        let base_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Ok(PcapSink {
            path: path.into(),
            w,
            base_ns,
            base_tsc: eal::rdtsc(),
            tsc_hz: eal::tsc_hz().max(1),
            write_error_logged: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new size limit (reload). A file that already reached its old limit
    /// stays closed, so it remains a clean prefix of the stream.
    pub fn set_limit(&mut self, limit_bytes: u64) {
        self.w.set_size_limit(Some(limit_bytes));
    }

    /// Wall-clock nanoseconds of a TSC stamp.
    fn ts_ns(&self, tsc: u64) -> u64 {
        let d = tsc.saturating_sub(self.base_tsc) as u128 * 1_000_000_000 / self.tsc_hz as u128;
        self.base_ns
            .saturating_add(u64::try_from(d).unwrap_or(u64::MAX))
    }

    /// Write a burst of delivered datagrams of socket `name`; counts go to
    /// its consumer's `written` / `not_written`. The caller frees the mbufs
    /// afterwards.
    pub fn write_burst<const N: usize>(
        &mut self,
        name: &str,
        stats: &ConsumerStats,
        bufs: &MbufBurst<N>,
    ) {
        let (mut ok, mut refused) = (0u64, 0u64);
        for m in bufs.iter() {
            let rx_tsc = crate::meta::dgram(m).rx_tsc;
            match self
                .w
                .write_segments(self.ts_ns(rx_tsc), m.pkt_len() as usize, m.segments())
            {
                Ok(Written::Yes) => ok += 1,
                Ok(Written::LimitReached) => refused += 1,
                Err(e) => {
                    refused += 1;
                    if !self.write_error_logged {
                        self.write_error_logged = true;
                        log::error!("socket {}: pcap {}: {e}", name, self.path.display());
                    }
                }
            }
        }
        // One write(2) per burst: the file is readable up to here at any time.
        if let Err(e) = self.w.flush() {
            if !self.write_error_logged {
                self.write_error_logged = true;
                log::error!("socket {}: pcap {}: {e}", name, self.path.display());
            }
        }
        stats.written.add(ok);
        stats.not_written.add(refused);
    }
}
