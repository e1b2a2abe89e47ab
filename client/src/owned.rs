//! [`OwnedSocket`]: a client's socket that borrows nothing, for code that
//! needs `Send + 'static` (an async runtime's tasks: quinn's adapter,
//! `udpdemux_quinn::UdxSocket::attach`).
//!
//! A [`crate::ClientSocket`] borrows its [`crate::Client`] (so it cannot
//! outlive the EAL) and shares its memzone with its batches through an
//! `Rc` (so no two threads take or release at once: a socket's in-flight
//! table and release totals have one writer). An [`OwnedSocket`] keeps
//! both rules another way:
//!
//! * it holds the attachment's lease (the lcore slot's lock; see
//!   `Lease` in the crate root) instead of a borrow: a client dropped
//!   before it leaves the EAL up, and the last owner tells the engine the
//!   client leaves;
//! * it keeps its one batch to itself: [`OwnedSocket::recv_burst`] and
//!   [`OwnedSocket::clear`] take `&mut self`, so taking and releasing are
//!   serialised by whoever owns it (a `Mutex`, in the quinn adapter),
//!   whatever thread that is. A thread that is not this process's EAL
//!   lcore frees mbufs without a mempool cache, straight to the pool's
//!   ring, which is multi-thread safe.
//!
//! What may be done from several threads at once (sending, looking at the
//! ring) is on [`SocketHandle`], `Send + Sync`, which
//! [`OwnedSocket::handle`] gives. The socket is closed (or unbound) when
//! the owned socket and all its handles are gone.
use std::sync::Arc;

use dpdk_sys::mp::AtomicZone;

use crate::{CloseError, Lease, Opened, OwnedBatch};

/// What an owned socket and its handles share: the opened socket (closed
/// when the last goes), then the lease (dropped after it).
#[derive(Debug)]
struct Shared {
    s: Opened,
    _lease: Arc<Lease>,
}

/// A client's socket that borrows nothing: `Send`, for a runtime's tasks.
/// It alone reads the socket's ring, into its one batch.
#[derive(Debug)]
pub struct OwnedSocket {
    // Drop order: the batch is released before the socket may close.
    batch: OwnedBatch,
    zone: Arc<AtomicZone>,
    shared: Arc<Shared>,
}

/// The part of an [`OwnedSocket`] any thread may use at once: sending
/// (`send_gso`, `send_burst`) and looking at the ring. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SocketHandle {
    shared: Arc<Shared>,
}

impl OwnedSocket {
    pub(crate) fn new(s: Opened, zone: AtomicZone, lease: Arc<Lease>) -> OwnedSocket {
        OwnedSocket {
            batch: OwnedBatch::new(),
            zone: Arc::new(zone),
            shared: Arc::new(Shared { s, _lease: lease }),
        }
    }

    /// A handle for sending and for watching the ring, from any thread.
    pub fn handle(&self) -> SocketHandle {
        SocketHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Take up to [`crate::BATCH`] datagrams into the socket's batch, freeing
    /// what it held before; how many arrived (0: none waiting). As
    /// [`crate::ClientSocket::recv_burst`]; read them with
    /// [`OwnedSocket::batch`].
    pub fn recv_burst(&mut self) -> usize {
        self.shared.s.recv_burst(&self.zone, &mut self.batch)
    }

    /// The datagrams of the last [`OwnedSocket::recv_burst`] (until
    /// [`OwnedSocket::clear`] or the next receive).
    pub fn batch(&self) -> &OwnedBatch {
        &self.batch
    }

    /// Free the batch's datagrams now (and release their memory from the
    /// socket's budget), not at the next receive.
    pub fn clear(&mut self) {
        self.batch.clear();
    }

    /// The socket's name in the engine.
    pub fn name(&self) -> &str {
        &self.shared.s.name
    }

    /// Free the batch, then close the socket (or unbind it, if this
    /// client bound it); if handles of it are still alive, the last of
    /// them closes it when dropped, and this returns `Ok`.
    pub fn close(self) -> Result<(), CloseError> {
        let OwnedSocket {
            mut batch, shared, ..
        } = self;
        batch.clear();
        match Arc::into_inner(shared) {
            Some(mut sh) => sh.s.close(),
            None => Ok(()),
        }
    }
}

impl SocketHandle {
    /// The engine's id of the socket.
    pub fn id(&self) -> u32 {
        self.shared.s.id
    }

    /// The socket's name in the engine.
    pub fn name(&self) -> &str {
        &self.shared.s.name
    }

    /// Datagrams waiting in the socket's ring now.
    pub fn pending(&self) -> u32 {
        self.shared.s.ring.count()
    }

    /// Whether the ring looks empty (two loads, no fence: a poller's
    /// look, as the engine's `Socket::poll_empty`).
    pub fn looks_empty(&self) -> bool {
        self.shared.s.ring.looks_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the quinn adapter relies on: the owned socket moves between
    /// threads (behind a lock), its handle is shared by them; a
    /// `ClientSocket` and its batches stay on the client's thread.
    #[test]
    fn the_owned_socket_is_send_and_its_handle_send_and_sync() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<OwnedSocket>();
        send::<SocketHandle>();
        sync::<SocketHandle>();
        send::<std::sync::Mutex<OwnedSocket>>();
        sync::<std::sync::Mutex<OwnedSocket>>();
    }
}
