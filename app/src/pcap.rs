//! Classic libpcap files (the `.pcap` format of tcpdump/libpcap, not pcapng).
//!
//! Layout (libpcap `sf-pcap.c`, IETF draft-ietf-opsawg-pcap): a 24-byte
//! file header (magic, version 2.4, thiszone, sigfigs, snaplen, link type)
//! then records of a 16-byte header (seconds, micro- or nanoseconds,
//! captured length, original length) and the captured bytes. The magic
//! tells both the byte order of every later field and the timestamp unit.
//!
//! The writer produces little-endian microsecond files with
//! `LINKTYPE_ETHERNET`, the format every tool reads. The reader takes both
//! byte orders and both timestamp units and never panics on a truncated or
//! corrupt file: every length is checked before it is used, and a record
//! length above libpcap's own maximum is an error, not an allocation.
//!
//! `write_packet` does no allocation, so a consumer lcore can call it per
//! datagram (wrap the sink in a `BufWriter` to keep it to one syscall per
//! buffer).
use std::io::{self, Read, Write};

/// Microsecond-resolution magic (as written by tcpdump).
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Nanosecond-resolution magic (libpcap >= 1.5 `PCAP_TSTAMP_PRECISION_NANO`).
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// `LINKTYPE_ETHERNET` (tcpdump.org link-layer header types).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// libpcap's `MAXIMUM_SNAPLEN`: larger record lengths mark a corrupt file
/// (libpcap refuses them too, "bigger than maximum of 262144").
pub const MAX_SNAPLEN: u32 = 262_144;
/// Bytes of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Bytes of each record header.
pub const RECORD_HEADER_LEN: usize = 16;

const NANOS_PER_SEC: u64 = 1_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("pcap I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("not a classic pcap file: magic {0:#010x}")]
    BadMagic(u32),
    #[error("unsupported pcap version {major}.{minor} (only 2.x)")]
    Version { major: u16, minor: u16 },
    #[error("truncated pcap file: {what} at byte {offset} needs {need} bytes, only {got} left")]
    Truncated {
        what: &'static str,
        offset: u64,
        need: usize,
        got: usize,
    },
    #[error(
        "corrupt pcap record at byte {offset}: captured length {caplen} exceeds the maximum {max}"
    )]
    CapLen { offset: u64, caplen: u32, max: u32 },
}

/// Timestamp unit of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Micro,
    Nano,
}

/// What `write_packet` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The record is in the file.
    Yes,
    /// The record would take the file past its size limit: nothing was
    /// written, and nothing will be from now on (the file stays valid).
    LimitReached,
}

/// Writes a classic pcap file, little-endian, `LINKTYPE_ETHERNET`.
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    precision: Precision,
    /// Bytes written so far, file header included.
    bytes: u64,
    limit: Option<u64>,
    limit_hit: bool,
    packets: u64,
    refused: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header. `snaplen` 0 means libpcap's maximum (262144);
    /// longer packets are cut to `snaplen` and keep their original length.
    pub fn new(out: W, snaplen: u32) -> Result<Self, PcapError> {
        Self::with_precision(out, snaplen, Precision::Micro)
    }

    pub fn with_precision(
        mut out: W,
        snaplen: u32,
        precision: Precision,
    ) -> Result<Self, PcapError> {
        let snaplen = if snaplen == 0 {
            MAX_SNAPLEN
        } else {
            snaplen.min(MAX_SNAPLEN)
        };
        let magic = match precision {
            Precision::Micro => MAGIC_MICROS,
            Precision::Nano => MAGIC_NANOS,
        };
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs are 0 in every modern writer.
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            snaplen,
            precision,
            bytes: FILE_HEADER_LEN as u64,
            limit: None,
            limit_hit: false,
            packets: 0,
            refused: 0,
        })
    }

    /// Stop writing once the file would exceed `max_bytes` (header
    /// included). The record that would cross the limit is refused whole,
    /// so the file never ends in a partial record.
    pub fn set_size_limit(&mut self, max_bytes: Option<u64>) {
        self.limit = max_bytes;
    }

    /// Appends one record; `ts_ns` is nanoseconds since the Unix epoch.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8]) -> Result<Written, PcapError> {
        self.write_segments(ts_ns, data.len(), std::iter::once(data))
    }

    /// [`write_packet`](Self::write_packet) for a packet in several
    /// segments (a reassembled datagram's mbuf chain): `len` bytes in all,
    /// written as one record.
    pub fn write_segments<'s>(
        &mut self,
        ts_ns: u64,
        len: usize,
        segs: impl Iterator<Item = &'s [u8]>,
    ) -> Result<Written, PcapError> {
        if self.limit_hit {
            self.refused += 1;
            return Ok(Written::LimitReached);
        }
        let orig_len = u32::try_from(len).unwrap_or(u32::MAX);
        let caplen = orig_len.min(self.snaplen);
        let rec_len = RECORD_HEADER_LEN as u64 + u64::from(caplen);
        if let Some(limit) = self.limit {
            if self.bytes + rec_len > limit {
                self.limit_hit = true;
                self.refused += 1;
                return Ok(Written::LimitReached);
            }
        }
        // Seconds wrap in 2106 (u32); the format cannot say more.
        let secs = (ts_ns / NANOS_PER_SEC) as u32;
        let sub = ts_ns % NANOS_PER_SEC;
        let frac = match self.precision {
            Precision::Micro => sub / 1000,
            Precision::Nano => sub,
        } as u32;
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&caplen.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&h)?;
        // Exactly caplen bytes (<= len): the segments' first caplen, then
        // zeros should they hold less than they said.
        let mut left = caplen as usize;
        for seg in segs {
            let k = seg.len().min(left);
            self.out.write_all(&seg[..k])?;
            left -= k;
            if left == 0 {
                break;
            }
        }
        while left != 0 {
            let k = left.min(64);
            self.out.write_all(&[0u8; 64][..k])?;
            left -= k;
        }
        self.bytes += rec_len;
        self.packets += 1;
        Ok(Written::Yes)
    }

    /// True once a record was refused for the size limit.
    pub fn limit_reached(&self) -> bool {
        self.limit_hit
    }
    /// Records written.
    pub fn packets(&self) -> u64 {
        self.packets
    }
    /// Records refused because of the size limit.
    pub fn refused(&self) -> u64 {
        self.refused
    }
    /// File size so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the sink.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a classic pcap file of either byte order and timestamp unit.
/// Iterating yields `(timestamp in ns since the epoch, captured bytes)`;
/// after the first error the iterator ends.
pub struct PcapReader<R: Read> {
    inp: R,
    big_endian: bool,
    precision: Precision,
    snaplen: u32,
    linktype: u32,
    version: (u16, u16),
    /// Byte offset of the next record (for error messages).
    offset: u64,
    done: bool,
}

/// Fills `buf` as far as the input goes; returns how many bytes it got
/// (short only at end of input).
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut inp: R) -> Result<Self, PcapError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let got = read_full(&mut inp, &mut h)?;
        if got < FILE_HEADER_LEN {
            return Err(PcapError::Truncated {
                what: "file header",
                offset: 0,
                need: FILE_HEADER_LEN,
                got,
            });
        }
        let m = [h[0], h[1], h[2], h[3]];
        let (big_endian, precision) = if u32::from_le_bytes(m) == MAGIC_MICROS {
            (false, Precision::Micro)
        } else if u32::from_le_bytes(m) == MAGIC_NANOS {
            (false, Precision::Nano)
        } else if u32::from_be_bytes(m) == MAGIC_MICROS {
            (true, Precision::Micro)
        } else if u32::from_be_bytes(m) == MAGIC_NANOS {
            (true, Precision::Nano)
        } else {
            return Err(PcapError::BadMagic(u32::from_be_bytes(m)));
        };
        let u16_at = |o: usize| {
            let b = [h[o], h[o + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let u32_at = |o: usize| {
            let b = [h[o], h[o + 1], h[o + 2], h[o + 3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let version = (u16_at(4), u16_at(6));
        // libpcap accepts major 2 with any minor (2.2, 2.3, 2.4).
        if version.0 != 2 {
            return Err(PcapError::Version {
                major: version.0,
                minor: version.1,
            });
        }
        Ok(PcapReader {
            inp,
            big_endian,
            precision,
            snaplen: u32_at(16),
            linktype: u32_at(20),
            version,
            offset: FILE_HEADER_LEN as u64,
            done: false,
        })
    }

    /// Link type: the low 16 bits of the header field (the upper bits may
    /// carry an FCS length, draft-ietf-opsawg-pcap §4).
    pub fn linktype(&self) -> u32 {
        self.linktype & 0xffff
    }
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }
    pub fn precision(&self) -> Precision {
        self.precision
    }
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    fn field(&self, b: [u8; 4]) -> u32 {
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next record into `buf` (reused, so a replay loop need not
    /// allocate): `Ok(Some((ts_ns, orig_len)))`, `Ok(None)` at a clean end.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<(u64, u32)>, PcapError> {
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = read_full(&mut self.inp, &mut h)?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_LEN {
            return Err(PcapError::Truncated {
                what: "record header",
                offset: self.offset,
                need: RECORD_HEADER_LEN,
                got,
            });
        }
        let secs = self.field([h[0], h[1], h[2], h[3]]);
        let frac = self.field([h[4], h[5], h[6], h[7]]);
        let caplen = self.field([h[8], h[9], h[10], h[11]]);
        let orig_len = self.field([h[12], h[13], h[14], h[15]]);
        if caplen > MAX_SNAPLEN {
            return Err(PcapError::CapLen {
                offset: self.offset,
                caplen,
                max: MAX_SNAPLEN,
            });
        }
        // caplen <= MAX_SNAPLEN, so this resize is bounded.
        buf.resize(caplen as usize, 0);
        let got = read_full(&mut self.inp, buf)?;
        if got < buf.len() {
            return Err(PcapError::Truncated {
                what: "record data",
                offset: self.offset + RECORD_HEADER_LEN as u64,
                need: buf.len(),
                got,
            });
        }
        self.offset += RECORD_HEADER_LEN as u64 + u64::from(caplen);
        // A corrupt microsecond field >= 10^6 is kept as is (libpcap does
        // not check it either); u64 holds any u32 seconds plus any fraction.
        let sub = match self.precision {
            Precision::Micro => u64::from(frac) * 1000,
            Precision::Nano => u64::from(frac),
        };
        Ok(Some((u64::from(secs) * NANOS_PER_SEC + sub, orig_len)))
    }
}

impl PcapReader<io::BufReader<std::fs::File>> {
    pub fn open(path: &std::path::Path) -> Result<Self, PcapError> {
        PcapReader::new(io::BufReader::new(std::fs::File::open(path)?))
    }
}

impl PcapWriter<io::BufWriter<std::fs::File>> {
    pub fn create(path: &std::path::Path, snaplen: u32) -> Result<Self, PcapError> {
        PcapWriter::new(io::BufWriter::new(std::fs::File::create(path)?), snaplen)
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<(u64, Vec<u8>), PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = Vec::new();
        match self.next_into(&mut buf) {
            Ok(Some((ts, _))) => Some(Ok((ts, buf))),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::build::{self, CsumMode, FragSpec, FrameSpec, L3Spec};
    use std::net::Ipv4Addr;

    fn frame(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        build::to_vec(&FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlans: &[],
            l3: L3Spec::V4 {
                src: Ipv4Addr::new(198, 18, 0, 1),
                dst: Ipv4Addr::new(198, 18, 1, 1),
                ttl: 64,
                options: &[],
                ident: 7,
                frag: FragSpec {
                    dont_frag: true,
                    ..FragSpec::default()
                },
            },
            sport,
            dport,
            payload,
            udp_csum: CsumMode::Correct,
        })
        .expect("valid spec")
    }

    fn write_all(pkts: &[(u64, Vec<u8>)], snaplen: u32) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), snaplen).expect("header");
        for (ts, p) in pkts {
            assert_eq!(w.write_packet(*ts, p).expect("write"), Written::Yes);
        }
        w.into_inner().expect("flush")
    }

    #[test]
    fn header_bytes_are_libpcap_little_endian_micro() {
        let f = write_all(&[], 65535);
        assert_eq!(
            f,
            vec![
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
    }

    #[test]
    fn record_bytes() {
        // 1.000002003 s: micro file keeps 2 us (the 3 ns are below its unit).
        let f = write_all(&[(1_000_002_003, vec![0xaa, 0xbb, 0xcc])], 0);
        assert_eq!(
            &f[24..],
            &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc]
        );
    }

    #[test]
    fn roundtrip_micro_and_nano() {
        let pkts = vec![
            (1_700_000_000_123_456_000, frame(1, 2, b"x")),
            (1_700_000_001_000_001_000, frame(3, 4, &[0; 100])),
        ];
        let f = write_all(&pkts, 0);
        let back: Vec<_> = PcapReader::new(&f[..])
            .expect("hdr")
            .map(|r| r.expect("rec"))
            .collect();
        assert_eq!(back, pkts);

        let mut w = PcapWriter::with_precision(Vec::new(), 0, Precision::Nano).expect("hdr");
        w.write_packet(5_000_000_007, b"abc").expect("w");
        let f = w.into_inner().expect("flush");
        let mut r = PcapReader::new(&f[..]).expect("hdr");
        assert_eq!(r.precision(), Precision::Nano);
        assert_eq!(
            r.next().expect("one").expect("ok"),
            (5_000_000_007, b"abc".to_vec())
        );
        assert!(r.next().is_none());
    }

    #[test]
    fn snaplen_cuts_and_keeps_orig_len() {
        let f = write_all(&[(0, vec![9; 100])], 60);
        let mut r = PcapReader::new(&f[..]).expect("hdr");
        assert_eq!(r.snaplen(), 60);
        let mut buf = Vec::new();
        assert_eq!(r.next_into(&mut buf).expect("ok"), Some((0, 100)));
        assert_eq!(buf.len(), 60);
    }

    /// A big-endian nanosecond file written by hand, as a SPARC or a
    /// `tcpdump --time-stamp-precision=nano` on a big-endian host writes it.
    #[test]
    fn reads_big_endian_nano() {
        let mut f = vec![
            0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0,
            1,
        ];
        f.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 4, 0x11, 0x22]);
        let mut r = PcapReader::new(&f[..]).expect("hdr");
        assert!(r.big_endian());
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        let mut buf = Vec::new();
        assert_eq!(r.next_into(&mut buf).expect("ok"), Some((2_000_000_009, 4)));
        assert_eq!(buf, vec![0x11, 0x22]);
        assert_eq!(r.next_into(&mut buf).expect("clean end"), None);
    }

    #[test]
    fn reads_big_endian_micro() {
        let mut f = vec![
            0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0,
            1,
        ];
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0x77]);
        let got: Vec<_> = PcapReader::new(&f[..])
            .expect("hdr")
            .collect::<Result<_, _>>()
            .expect("ok");
        assert_eq!(got, vec![(1_000_005_000, vec![0x77])]);
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let f = write_all(&[(1, frame(1, 2, b"hello")), (2, frame(3, 4, b"world"))], 0);
        let first_end = 24 + 16 + frame(1, 2, b"hello").len();
        for cut in 0..f.len() {
            let r = PcapReader::new(&f[..cut]);
            if cut < 24 {
                assert!(
                    matches!(
                        r,
                        Err(PcapError::Truncated {
                            what: "file header",
                            ..
                        })
                    ),
                    "cut {cut}"
                );
                continue;
            }
            let items: Vec<_> = r.expect("hdr").collect();
            let oks = items.iter().filter(|i| i.is_ok()).count();
            let errs = items.iter().filter(|i| i.is_err()).count();
            if cut == 24 || cut == first_end {
                assert_eq!(errs, 0, "cut {cut} is a record boundary");
            } else {
                assert_eq!(errs, 1, "cut {cut}");
                assert!(
                    matches!(items.last(), Some(Err(PcapError::Truncated { .. }))),
                    "cut {cut}"
                );
            }
            assert_eq!(oks, usize::from(cut >= first_end), "cut {cut}");
        }
    }

    #[test]
    fn corrupt_files_are_errors() {
        let good = write_all(&[(1, vec![1, 2, 3])], 0);
        let mut bad_magic = good.clone();
        bad_magic[0] = 0;
        assert!(matches!(
            PcapReader::new(&bad_magic[..]),
            Err(PcapError::BadMagic(_))
        ));
        let mut bad_ver = good.clone();
        bad_ver[4] = 3;
        assert!(matches!(
            PcapReader::new(&bad_ver[..]),
            Err(PcapError::Version { major: 3, .. })
        ));
        // A captured length of 4 GiB must not become an allocation.
        let mut huge = good.clone();
        huge[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut r = PcapReader::new(&huge[..]).expect("hdr");
        assert!(matches!(
            r.next(),
            Some(Err(PcapError::CapLen {
                caplen: u32::MAX,
                ..
            }))
        ));
        assert!(r.next().is_none(), "iteration ends after an error");
    }

    #[test]
    fn size_limit_refuses_whole_records_and_reports() {
        let mut w = PcapWriter::new(Vec::new(), 0).expect("hdr");
        // Header 24 + two records of 16 + 10 = 76: a limit of 80 takes two.
        w.set_size_limit(Some(80));
        assert_eq!(w.write_packet(0, &[0; 10]).expect("w"), Written::Yes);
        assert_eq!(w.write_packet(0, &[0; 10]).expect("w"), Written::Yes);
        assert_eq!(
            w.write_packet(0, &[0; 1]).expect("w"),
            Written::LimitReached
        );
        // Even a record that would fit is refused once the limit was hit, so
        // the file is a clean prefix of the stream.
        assert_eq!(w.write_packet(0, &[]).expect("w"), Written::LimitReached);
        assert!(w.limit_reached());
        assert_eq!((w.packets(), w.refused(), w.bytes()), (2, 2, 76));
        let f = w.into_inner().expect("flush");
        assert_eq!(f.len(), 76);
        assert_eq!(PcapReader::new(&f[..]).expect("hdr").count(), 2);
    }

    /// An outside reader agrees: tshark decodes our file's UDP ports and
    /// capinfos counts its packets.
    #[test]
    fn tshark_reads_our_file() {
        let have = |tool: &str| {
            std::process::Command::new(tool)
                .arg("-v")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        if !have("tshark") || !have("capinfos") {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: scripts/setup.sh must install tshark"
            );
            println!("SKIPPED: tshark/capinfos not installed (apt-get install tshark)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("udpdemux-pcap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("t.pcap");
        let ports = [(40000u16, 53u16), (40001, 5353), (1234, 9999)];
        {
            let mut w = PcapWriter::create(&path, 65535).expect("create");
            for (i, &(s, d)) in ports.iter().enumerate() {
                w.write_packet(
                    1_700_000_000_000_000_000 + i as u64 * 1000,
                    &frame(s, d, b"payload"),
                )
                .expect("w");
            }
            w.into_inner().expect("flush");
        }
        let out = std::process::Command::new("tshark")
            .args(["-r"])
            .arg(&path)
            .args([
                "-T",
                "fields",
                "-e",
                "udp.srcport",
                "-e",
                "udp.dstport",
                "-e",
                "udp.checksum.status",
            ])
            .args(["-o", "udp.check_checksum:TRUE"])
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        let want: Vec<Vec<String>> = ports
            .iter()
            .map(|(s, d)| vec![s.to_string(), d.to_string(), "1".to_string()])
            .collect();
        // udp.checksum.status 1 = PROTO_CHECKSUM_E_GOOD (epan/proto.h: 0 bad, 1 good, 2 unverified).
        assert_eq!(rows, want, "tshark output: {text}");
        let info = std::process::Command::new("capinfos")
            .args(["-c", "-M"])
            .arg(&path)
            .output()
            .expect("run capinfos");
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(
            info.lines()
                .any(|l| l.starts_with("Number of packets:") && l.trim_end().ends_with(" 3")),
            "capinfos: {info}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
