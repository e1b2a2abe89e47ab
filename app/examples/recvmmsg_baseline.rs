//! Kernel baseline for the benchmark table: how many UDP datagrams per second
//! a plain kernel socket receives with `recvmmsg(2)` on this machine, for the
//! payload sizes the engine is measured with.
//!
//! Loopback only (127.0.0.1): a sender thread pinned to one CPU blasts
//! `sendmmsg(2)` batches at a receiver pinned to the other, for a bounded
//! time per size. The kernel does the work the engine replaces (IP and UDP
//! receive, socket lookup, rcvbuf accounting, the copy to user space), so
//! this is context for the engine's figures, not a like-for-like race: the
//! loopback path has no NIC, but it also pays for the sender's half: on
//! loopback the kernel's receive processing (IP, UDP lookup, enqueue to the
//! socket) runs in the sender's softirq, so the sender's CPU is usually the
//! limit and the figure is an upper bound of what one CPU pair does.
//!
//!     cargo run --release --example recvmmsg_baseline -- --sizes 64,512,1400 --secs 2 [--json]
//!
//! Received, sent and the kernel's own drop counters (`/proc/net/snmp`
//! `Udp: RcvbufErrors`, summed over the run) are reported: the books are
//! sent = received + dropped by the kernel, shown, not enforced (other
//! sockets on the machine may drop meanwhile).
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Datagrams per `sendmmsg` / `recvmmsg` call (the engine's RX burst is 32; 64 is the usual recvmmsg batch).
const BATCH: usize = 64;
/// Largest payload accepted: a 1500-byte MTU minus IPv4 and UDP headers.
const MAX_PAYLOAD: usize = 1472;

#[derive(Debug, thiserror::Error)]
enum BaselineError {
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        source: io::Error,
    },
    #[error("bad argument: {0}")]
    Arg(String),
}

fn sys(what: &'static str) -> BaselineError {
    BaselineError::Sys {
        what,
        source: io::Error::last_os_error(),
    }
}

struct Args {
    sizes: Vec<usize>,
    secs: f64,
    json: bool,
    rx_cpu: usize,
    tx_cpu: usize,
}

fn parse_args() -> Result<Args, BaselineError> {
    let mut a = Args {
        sizes: vec![64, 512, 1400],
        secs: 2.0,
        json: false,
        rx_cpu: 1,
        tx_cpu: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| BaselineError::Arg(format!("{k} needs a value")))
        };
        match k.as_str() {
            "--sizes" => {
                a.sizes = val()?
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .map_err(|_| BaselineError::Arg(format!("size {s:?}")))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--secs" => {
                a.secs = val()?
                    .parse()
                    .map_err(|_| BaselineError::Arg("--secs".into()))?
            }
            "--rx-cpu" => {
                a.rx_cpu = val()?
                    .parse()
                    .map_err(|_| BaselineError::Arg("--rx-cpu".into()))?
            }
            "--tx-cpu" => {
                a.tx_cpu = val()?
                    .parse()
                    .map_err(|_| BaselineError::Arg("--tx-cpu".into()))?
            }
            "--json" => a.json = true,
            "-h" | "--help" => {
                println!("recvmmsg_baseline [--sizes 64,512,1400] [--secs 2] [--rx-cpu 1] [--tx-cpu 0] [--json]");
                std::process::exit(0);
            }
            other => return Err(BaselineError::Arg(format!("unknown flag {other}"))),
        }
    }
    if a.sizes.is_empty() || a.sizes.iter().any(|&s| s == 0 || s > MAX_PAYLOAD) {
        return Err(BaselineError::Arg(format!(
            "sizes must be 1..={MAX_PAYLOAD}"
        )));
    }
    if !(a.secs > 0.0 && a.secs <= 60.0) {
        return Err(BaselineError::Arg("--secs must be in (0, 60]".into()));
    }
    Ok(a)
}

/// A UDP socket closed on drop.
struct Fd(i32);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe { libc::close(self.0) };
    }
}

fn udp_socket() -> Result<Fd, BaselineError> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        return Err(sys("socket"));
    }
    Ok(Fd(fd))
}

fn loopback(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn setsockopt_int(fd: &Fd, opt: i32, v: i32) -> bool {
    // SAFETY: v lives across the call; the length matches its type.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::SOL_SOCKET,
            opt,
            &v as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        ) == 0
    }
}

/// Pin the calling thread to one CPU, so sender and receiver do not share one.
fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "recvmmsg_baseline: cannot pin to CPU {cpu}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// `Udp: RcvbufErrors` from /proc/net/snmp (0 if unreadable).
fn rcvbuf_errors() -> u64 {
    let Ok(t) = std::fs::read_to_string("/proc/net/snmp") else {
        return 0;
    };
    let mut lines = t.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(head), Some(vals)) = (lines.next(), lines.next()) else {
        return 0;
    };
    head.split_whitespace()
        .zip(vals.split_whitespace())
        .find(|(k, _)| *k == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

struct Row {
    size: usize,
    secs: f64,
    sent: u64,
    received: u64,
    rcvbuf_errors: u64,
}

fn run_size(size: usize, secs: f64, rx_cpu: usize, tx_cpu: usize) -> Result<Row, BaselineError> {
    let rx = udp_socket()?;
    // As large as root may force (SO_RCVBUFFORCE ignores rmem_max), else what rmem_max allows.
    if !setsockopt_int(&rx, libc::SO_RCVBUFFORCE, 32 << 20) {
        setsockopt_int(&rx, libc::SO_RCVBUF, 32 << 20);
    }
    // Wake up every 100 ms even when nothing arrives, to see the stop flag.
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: tv lives across the call; the length matches its type.
    unsafe {
        libc::setsockopt(
            rx.0,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let addr = loopback(0);
    // SAFETY: addr is a valid sockaddr_in of the given length.
    if unsafe {
        libc::bind(
            rx.0,
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    } != 0
    {
        return Err(sys("bind"));
    }
    let mut bound: libc::sockaddr_in = loopback(0);
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: bound and len are valid for writing.
    if unsafe { libc::getsockname(rx.0, &mut bound as *mut _ as *mut libc::sockaddr, &mut len) }
        != 0
    {
        return Err(sys("getsockname"));
    }
    let port = u16::from_be(bound.sin_port);

    let tx = udp_socket()?;
    let dst = loopback(port);
    // SAFETY: dst is a valid sockaddr_in of the given length.
    if unsafe {
        libc::connect(
            tx.0,
            &dst as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    } != 0
    {
        return Err(sys("connect"));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let err0 = rcvbuf_errors();
    let sender = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        std::thread::spawn(move || {
            pin(tx_cpu);
            let payload = vec![0x5au8; size];
            let mut iov: Vec<libc::iovec> = (0..BATCH)
                .map(|_| libc::iovec {
                    iov_base: payload.as_ptr() as *mut libc::c_void,
                    iov_len: size,
                })
                .collect();
            let mut hdrs = mmsg_headers(&mut iov);
            let mut n_sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: hdrs and the buffers they point to outlive the call.
                let r = unsafe { libc::sendmmsg(tx.0, hdrs.as_mut_ptr(), BATCH as u32, 0) };
                if r > 0 {
                    n_sent += r as u64;
                }
            }
            sent.store(n_sent, Ordering::SeqCst);
            drop(tx);
        })
    };

    pin(rx_cpu);
    let mut bufs = vec![[0u8; 2048]; BATCH];
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    let mut hdrs = mmsg_headers(&mut iov);
    let mut received = 0u64;
    let mut bytes_ok = true;
    let start = Instant::now();
    let run = Duration::from_secs_f64(secs);
    while start.elapsed() < run {
        // SAFETY: hdrs and the buffers they point to outlive the call.
        let r = unsafe {
            libc::recvmmsg(
                rx.0,
                hdrs.as_mut_ptr(),
                BATCH as u32,
                0,
                std::ptr::null_mut(),
            )
        };
        if r > 0 {
            let r = r as usize;
            bytes_ok &= hdrs.iter().take(r).all(|h| h.msg_len as usize == size);
            received += r as u64;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    if sender.join().is_err() {
        return Err(BaselineError::Arg("sender thread panicked".into()));
    }
    // The sender is done: what is still queued was sent in time; take it so
    // that sent = received + the kernel's drops.
    loop {
        // SAFETY: as above; MSG_DONTWAIT so an empty queue ends the loop.
        let r = unsafe {
            libc::recvmmsg(
                rx.0,
                hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r <= 0 {
            break;
        }
        received += r as u64;
    }
    if !bytes_ok {
        return Err(BaselineError::Arg(format!(
            "received a datagram whose length is not {size}"
        )));
    }
    Ok(Row {
        size,
        secs: elapsed,
        sent: sent.load(Ordering::SeqCst),
        received,
        rcvbuf_errors: rcvbuf_errors().saturating_sub(err0),
    })
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("recvmmsg_baseline: error: {e}");
            std::process::exit(2);
        }
    };
    let mut rows = Vec::new();
    for &size in &args.sizes {
        match run_size(size, args.secs, args.rx_cpu, args.tx_cpu) {
            Ok(r) => rows.push(r),
            Err(e) => {
                eprintln!("recvmmsg_baseline: error: size {size}: {e}");
                std::process::exit(1);
            }
        }
    }
    if args.json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"payload\":{},\"seconds\":{:.3},\"sent\":{},\"received\":{},\"rcvbuf_errors\":{},\"mpps\":{:.4}}}",
                    r.size,
                    r.secs,
                    r.sent,
                    r.received,
                    r.rcvbuf_errors,
                    r.received as f64 / r.secs / 1e6
                )
            })
            .collect();
        println!("[{}]", items.join(","));
    } else {
        println!("| payload B | received Mpps | sent | received | kernel RcvbufErrors |");
        println!("|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {:.3} | {} | {} | {} |",
                r.size,
                r.received as f64 / r.secs / 1e6,
                r.sent,
                r.received,
                r.rcvbuf_errors
            );
        }
    }
}

/// One `mmsghdr` per iovec of `iov`, each pointing at its iovec (the
/// headers must not outlive `iov`).
fn mmsg_headers(iov: &mut [libc::iovec]) -> Vec<libc::mmsghdr> {
    iov.iter_mut()
        .map(|v| {
            // SAFETY: mmsghdr is plain data (all-zero is valid); it points at one iovec of `iov`.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect()
}
