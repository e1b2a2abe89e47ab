//! The same responder over kernel UDP sockets: `recvmmsg` a batch on each
//! readable socket, answer it, `sendmmsg` the replies in one call.
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use crate::zone::Zone;
use crate::{stopping, Counters};

/// Datagrams per `recvmmsg`/`sendmmsg`.
pub const BATCH: usize = 32;
/// The receive buffer per datagram (larger queries are cut: FORMERR).
const BUF: usize = 4096;
/// The largest response sent (IPv6's minimum MTU keeps clear of
/// fragmentation: the value EDNS flag day 2020 recommends is 1232; this
/// path takes the Ethernet MTU like the engine does).
pub const MAX_UDP: usize = 1452;

/// One socket's batch buffers.
struct Batch {
    bufs: Vec<[u8; BUF]>,
    addrs: Vec<libc::sockaddr_storage>,
    replies: Vec<Vec<u8>>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            bufs: vec![[0; BUF]; BATCH],
            // SAFETY: all-zero is a valid sockaddr_storage.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            replies: (0..BATCH).map(|_| Vec::with_capacity(MAX_UDP)).collect(),
        }
    }
}

/// Answer on one socket until nothing is waiting: how many datagrams.
fn serve_once(sock: &UdpSocket, zone: &Zone, b: &mut Batch, c: &mut Counters) -> usize {
    let fd = sock.as_raw_fd();
    let mut iov: Vec<libc::iovec> = b
        .bufs
        .iter_mut()
        .map(|x| libc::iovec {
            iov_base: x.as_mut_ptr().cast(),
            iov_len: BUF,
        })
        .collect();
    // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
    let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; BATCH];
    for (i, h) in hdrs.iter_mut().enumerate() {
        h.msg_hdr.msg_iov = &mut iov[i];
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    }
    // SAFETY: every header points at live buffers of the stated sizes.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n <= 0 {
        return 0;
    }
    let n = n as usize;
    let mut out: Vec<(usize, libc::socklen_t)> = Vec::with_capacity(n);
    for (i, h) in hdrs.iter().enumerate().take(n) {
        let len = (h.msg_len as usize).min(BUF);
        let o = zone.respond(&b.bufs[i][..len], MAX_UDP, &mut b.replies[i]);
        c.count(o);
        if o.is_some() {
            out.push((i, h.msg_hdr.msg_namelen));
        }
    }
    let mut siov: Vec<libc::iovec> = out
        .iter()
        .map(|&(i, _)| libc::iovec {
            iov_base: b.replies[i].as_mut_ptr().cast(),
            iov_len: b.replies[i].len(),
        })
        .collect();
    // SAFETY: as above.
    let mut shdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; out.len()];
    for (k, &(i, nl)) in out.iter().enumerate() {
        shdrs[k].msg_hdr.msg_iov = &mut siov[k];
        shdrs[k].msg_hdr.msg_iovlen = 1;
        shdrs[k].msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        shdrs[k].msg_hdr.msg_namelen = nl;
    }
    let mut sent = 0;
    while sent < shdrs.len() {
        // SAFETY: every header points at live buffers and addresses.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                shdrs[sent..].as_mut_ptr(),
                (shdrs.len() - sent) as u32,
                0,
            )
        };
        if r <= 0 {
            break;
        }
        sent += r as usize;
    }
    c.responses += sent as u64;
    c.send_failed += (shdrs.len() - sent) as u64;
    n
}

/// Bind `addrs` (port 0: any free port), call `ready` with the bound
/// addresses, then answer until SIGINT/SIGTERM.
pub fn serve(
    addrs: &[SocketAddr],
    zone: &Zone,
    ready: impl FnOnce(&[SocketAddr]),
) -> std::io::Result<Counters> {
    let socks: Vec<UdpSocket> = addrs
        .iter()
        .map(UdpSocket::bind)
        .collect::<Result<_, _>>()?;
    let bound: Vec<SocketAddr> = socks
        .iter()
        .map(|s| s.local_addr())
        .collect::<Result<_, _>>()?;
    ready(&bound);
    let mut batches: Vec<Batch> = socks.iter().map(|_| Batch::new()).collect();
    let mut c = Counters::default();
    let mut pfds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stopping() {
        // SAFETY: pfds is a live array of pollfd of the given length.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 100) };
        if r <= 0 {
            continue;
        }
        for (k, s) in socks.iter().enumerate() {
            if pfds[k].revents & libc::POLLIN != 0 {
                while serve_once(s, zone, &mut batches[k], &mut c) == BATCH {}
            }
        }
    }
    Ok(c)
}
