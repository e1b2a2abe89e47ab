//! The DNS benchmark's query generator (scripts/bench.sh, section `dns`):
//! one set of queries, fed to both modes of the responder.
//!
//!     dns_load pcap OUT --dst ADDR:PORT [--count N] [--name NAME]
//!     dns_load kernel --dst ADDR:PORT [--count N] [--name NAME] [--secs S] [--sockets K]
//!
//! The queries: `--count` (default 4096) A queries for `--name` (default
//! `www.example.test.`, two A records in conf/dns-zone.toml), with RD set,
//! IDs 0, 1, ... and sources 198.18.7.1 ports 10000 + i % 256 (the pcap
//! form) or K kernel sockets (the kernel form). `pcap` writes them as
//! Ethernet frames to OUT (for `net_pcap`'s `infinite_rx` replay into the
//! engine: the engine-mode responder answers as fast as it can take them).
//! `kernel` sends the same payloads over K unconnected kernel UDP sockets
//! with `sendmmsg`, as fast as the kernel takes them, for S seconds
//! (default 3), and counts the answers it gets back with `recvmmsg`;
//! prints one JSON line: seconds, queries sent, answers received, answers
//! per second (Mpps), and answers that were not a response to one of ours.
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use udpdemux_dns::wire::Name;

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

/// An A query for `name` with `id` and RD, no EDNS (RFC 1035 4.1).
fn query(name: &Name, id: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(12 + name.as_wire().len() + 4);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&0x0100u16.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(name.as_wire());
    q.extend_from_slice(&[0, 1, 0, 1]);
    q
}

const BATCH: usize = 32;

fn main() {
    let usage = "usage: dns_load (pcap OUT | kernel) --dst ADDR:PORT [--count N] [--name NAME] [--secs S] [--sockets K]";
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| fail(usage));
    let out = if mode == "pcap" {
        Some(args.next().unwrap_or_else(|| fail(usage)))
    } else if mode == "kernel" {
        None
    } else {
        fail(usage)
    };
    let (mut dst, mut count, mut name, mut secs, mut sockets): (
        Option<SocketAddr>,
        usize,
        String,
        f64,
        usize,
    ) = (None, 4096, "www.example.test.".into(), 3.0, 4);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| fail(usage));
        match a.as_str() {
            "--dst" => dst = v.parse().ok(),
            "--count" => count = v.parse().unwrap_or_else(|_| fail(usage)),
            "--name" => name = v,
            "--secs" => secs = v.parse().unwrap_or_else(|_| fail(usage)),
            "--sockets" => sockets = v.parse::<usize>().unwrap_or_else(|_| fail(usage)).max(1),
            _ => fail(usage),
        }
    }
    let dst = dst.unwrap_or_else(|| fail("--dst ADDR:PORT is required"));
    let qname = Name::from_text(&name).unwrap_or_else(|| fail("--name is not a domain name"));
    let queries: Vec<Vec<u8>> = (0..count.max(1)).map(|i| query(&qname, i as u16)).collect();
    match out {
        Some(path) => write_pcap(&path, dst, &queries),
        None => kernel(dst, &queries, secs, sockets),
    }
}

fn write_pcap(path: &str, dst: SocketAddr, queries: &[Vec<u8>]) {
    use udpdemux::pcap::PcapWriter;
    let f = std::fs::File::create(path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let mut w =
        PcapWriter::new(std::io::BufWriter::new(f), 65535).unwrap_or_else(|e| fail(&e.to_string()));
    let src_ip: std::net::IpAddr = if dst.is_ipv4() {
        "198.18.7.1".parse().unwrap()
    } else {
        "fd00:7::1".parse().unwrap()
    };
    for (i, q) in queries.iter().enumerate() {
        let src = SocketAddr::new(src_ip, 10_000 + (i % 256) as u16);
        let spec = udpdemux::send::frame_spec([2, 0, 0, 0, 7, 1], src, dst, q)
            .unwrap_or_else(|| fail("--dst of another family"));
        let mut f = udpdemux::parse::build::to_vec(&spec).unwrap_or_else(|e| fail(&e.to_string()));
        // To the engine's port: promiscuous, so any unicast MAC.
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        w.write_packet(i as u64 * 1000, &f)
            .unwrap_or_else(|e| fail(&e.to_string()));
    }
    w.flush().unwrap_or_else(|e| fail(&e.to_string()));
}

fn kernel(dst: SocketAddr, queries: &[Vec<u8>], secs: f64, sockets: usize) {
    let bind: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let socks: Vec<UdpSocket> = (0..sockets)
        .map(|_| {
            let s = UdpSocket::bind(bind).unwrap_or_else(|e| fail(&e.to_string()));
            s.set_nonblocking(true)
                .unwrap_or_else(|e| fail(&e.to_string()));
            s
        })
        .collect();
    let (storage, len) = sockaddr(dst);
    let mut rbufs = vec![[0u8; 2048]; BATCH];
    let (mut sent, mut answered, mut foreign) = (0u64, 0u64, 0u64);
    let mut next = 0usize;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for s in &socks {
            // SAFETY: the headers point at `queries`' buffers (read only by
            // the kernel) and at `storage`, all live for the call.
            let n = unsafe { send_batch(s, queries, &mut next, &storage, len) };
            sent += n as u64;
            // SAFETY: the headers point at `rbufs`, live for the call.
            let (got, bad) = unsafe { recv_batch(s, &mut rbufs) };
            answered += got;
            foreign += bad;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // Late answers to what was sent in time are still answers, not the rate's.
    println!(
        "{{\"seconds\":{seconds},\"sent\":{sent},\"answered\":{answered},\"mpps\":{},\"not_responses\":{foreign}}}",
        answered as f64 / seconds / 1e6
    );
}

fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, u32) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = v.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as u16;
            sin6.sin6_port = v.port().to_be();
            sin6.sin6_addr.s6_addr = v.ip().octets();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as u32)
}

/// One `sendmmsg` of the next BATCH queries; how many the kernel took.
///
/// # Safety
/// `storage` holds a socket address of `len` bytes.
unsafe fn send_batch(
    s: &UdpSocket,
    queries: &[Vec<u8>],
    next: &mut usize,
    storage: &libc::sockaddr_storage,
    len: u32,
) -> usize {
    let mut iov: [libc::iovec; BATCH] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; BATCH];
    // SAFETY: all-zero is a valid mmsghdr.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (i, (v, h)) in iov.iter_mut().zip(hdrs.iter_mut()).enumerate() {
        let q = &queries[(*next + i) % queries.len()];
        v.iov_base = q.as_ptr() as *mut libc::c_void;
        v.iov_len = q.len();
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_name =
            (storage as *const libc::sockaddr_storage as *mut libc::sockaddr_storage).cast();
        h.msg_hdr.msg_namelen = len;
    }
    // SAFETY: every header points at a live buffer of its stated length.
    let n = unsafe {
        libc::sendmmsg(
            s.as_raw_fd(),
            hdrs.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_DONTWAIT,
        )
    };
    let n = n.max(0) as usize;
    *next = (*next + n) % queries.len();
    n
}

/// `recvmmsg` until nothing waits: (responses, datagrams that were not a response).
///
/// # Safety
/// None beyond the call's own: the buffers are `bufs`.
unsafe fn recv_batch(s: &UdpSocket, bufs: &mut [[u8; 2048]]) -> (u64, u64) {
    let (mut good, mut bad) = (0u64, 0u64);
    loop {
        let mut iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: all-zero is a valid mmsghdr.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every header points at a live buffer of its stated length.
        let n = unsafe {
            libc::recvmmsg(
                s.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            return (good, bad);
        }
        for (h, b) in hdrs.iter().zip(bufs.iter()).take(n as usize) {
            let len = h.msg_len as usize;
            // QR set: a response.
            if len >= 12 && b[2] & 0x80 != 0 {
                good += 1;
            } else {
                bad += 1;
            }
        }
    }
}
