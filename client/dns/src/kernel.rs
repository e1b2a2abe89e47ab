//! The same responder over kernel UDP sockets: `recvmmsg` a batch on each
//! readable socket, answer it, `sendmmsg` the replies in one call.
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use udpdemux::runtime::alloc_guard::{thread_hot_allocations, HotSection};

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

/// One socket's batch buffers, and the `recvmmsg`/`sendmmsg` headers
/// pointing into them, made once: answering a batch allocates nothing.
/// Every buffer is a boxed slice that is never resized, so the pointers
/// the headers hold stay valid when the `Batch` itself moves.
struct Batch {
    bufs: Box<[[u8; BUF]]>,
    addrs: Box<[libc::sockaddr_storage]>,
    replies: Box<[Vec<u8>]>,
    /// One per datagram, pointing into `bufs`.
    riov: Box<[libc::iovec]>,
    /// One per datagram, pointing into `riov` and `addrs`.
    rhdrs: Box<[libc::mmsghdr]>,
    /// Filled per batch with the answered datagrams' replies.
    siov: Box<[libc::iovec]>,
    /// Filled per batch, pointing into `siov` and `addrs`.
    shdrs: Box<[libc::mmsghdr]>,
}

impl Batch {
    fn new() -> Batch {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut b = Batch {
            bufs: vec![[0; BUF]; BATCH].into(),
            // SAFETY: all-zero is a valid sockaddr_storage.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH].into(),
            replies: (0..BATCH).map(|_| Vec::with_capacity(MAX_UDP)).collect(),
            riov: vec![empty; BATCH].into(),
            // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
            rhdrs: vec![unsafe { std::mem::zeroed() }; BATCH].into(),
            siov: vec![empty; BATCH].into(),
            // SAFETY: as above.
            shdrs: vec![unsafe { std::mem::zeroed() }; BATCH].into(),
        };
        for (v, x) in b.riov.iter_mut().zip(b.bufs.iter_mut()) {
            v.iov_base = x.as_mut_ptr().cast();
            v.iov_len = BUF;
        }
        for (i, h) in b.rhdrs.iter_mut().enumerate() {
            h.msg_hdr.msg_iov = &mut b.riov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        }
        b
    }
}

/// Answer on one socket until nothing is waiting: how many datagrams.
fn serve_once(sock: &UdpSocket, zone: &Zone, b: &mut Batch, c: &mut Counters) -> usize {
    let fd = sock.as_raw_fd();
    for h in b.rhdrs.iter_mut() {
        // recvmmsg writes the source's length here: room for any.
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    }
    // SAFETY: every header points at live buffers of the stated sizes
    // (made in Batch::new, never moved: boxed slices).
    let n = unsafe {
        libc::recvmmsg(
            fd,
            b.rhdrs.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n <= 0 {
        return 0;
    }
    let n = (n as usize).min(BATCH);
    let mut k = 0;
    for i in 0..n {
        let h = &b.rhdrs[i];
        let len = (h.msg_len as usize).min(BUF);
        let o = zone.respond(&b.bufs[i][..len], MAX_UDP, &mut b.replies[i]);
        c.count(o);
        if o.is_some() {
            b.siov[k] = libc::iovec {
                iov_base: b.replies[i].as_mut_ptr().cast(),
                iov_len: b.replies[i].len(),
            };
            let s = &mut b.shdrs[k].msg_hdr;
            s.msg_iov = &mut b.siov[k];
            s.msg_iovlen = 1;
            s.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            s.msg_namelen = h.msg_hdr.msg_namelen;
            k += 1;
        }
    }
    let mut sent = 0;
    while sent < k {
        // SAFETY: the first k headers point at live replies and addresses.
        let r = unsafe { libc::sendmmsg(fd, b.shdrs[sent..k].as_mut_ptr(), (k - sent) as u32, 0) };
        if r <= 0 {
            break;
        }
        sent += r as usize;
    }
    c.responses += sent as u64;
    c.send_failed += (k - sent) as u64;
    n
}

/// Bind `addrs` (port 0: any free port), call `ready` with the bound
/// addresses, then answer until SIGINT/SIGTERM.
pub fn serve(
    addrs: &[SocketAddr],
    zone: &Zone,
    ready: impl FnOnce(&[SocketAddr]),
) -> std::io::Result<Counters> {
    serve_until(addrs, zone, ready, stopping)
}

/// [`serve`] until `stop` says so (checked at least every 100 ms). The
/// answering loop runs marked hot: what it allocates is counted in
/// [`Counters::hot_path_allocations`].
pub fn serve_until(
    addrs: &[SocketAddr],
    zone: &Zone,
    ready: impl FnOnce(&[SocketAddr]),
    stop: impl Fn() -> bool,
) -> std::io::Result<Counters> {
    let socks: Vec<UdpSocket> = addrs
        .iter()
        .map(UdpSocket::bind)
        .collect::<Result<_, _>>()?;
    let bound: Vec<SocketAddr> = socks
        .iter()
        .map(|s| s.local_addr())
        .collect::<Result<_, _>>()?;
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
    ready(&bound);
    let before = thread_hot_allocations();
    let hot = HotSection::enter();
    while !stop() {
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
    drop(hot);
    c.hot_path_allocations = thread_hot_allocations() - before;
    Ok(c)
}
