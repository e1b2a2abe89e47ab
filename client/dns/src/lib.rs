//! Issue 17's example server: a small authoritative DNS responder. The
//! wire format ([`wire`]) and the zone ([`zone`]) are shared by its two
//! transports: the udpdemux engine through the client library (the
//! `udpdemux-dns` binary's default) and kernel sockets with
//! `recvmmsg`/`sendmmsg` ([`kernel`], `--kernel ADDR`), so the two can be
//! compared on the same machine.
pub mod kernel;
pub mod wire;
pub mod zone;

use std::sync::atomic::{AtomicBool, Ordering};

use wire::{Outcome, Rcode};

/// What a responder did, printed as one JSON line when it stops.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams received.
    pub queries: u64,
    /// Responses handed to the transport.
    pub responses: u64,
    /// Received, not answered (not even a header, or a response).
    pub ignored: u64,
    pub noerror: u64,
    pub nxdomain: u64,
    pub formerr: u64,
    pub refused: u64,
    pub other_rcode: u64,
    pub truncated: u64,
    /// Answer records sent.
    pub answer_records: u64,
    /// Responses the transport did not take.
    pub send_failed: u64,
    /// Heap allocations made by the serving thread while it answered
    /// (0 is the design: see `hot_section`). Counted only where the
    /// global allocator is udpdemux's `CountingAlloc` (the binary).
    pub hot_path_allocations: u64,
}

impl Counters {
    pub fn count(&mut self, o: Option<Outcome>) {
        self.queries += 1;
        let Some(o) = o else {
            self.ignored += 1;
            return;
        };
        match o.rcode {
            Rcode::NoError => self.noerror += 1,
            Rcode::NxDomain => self.nxdomain += 1,
            Rcode::FormErr => self.formerr += 1,
            Rcode::Refused => self.refused += 1,
            _ => self.other_rcode += 1,
        }
        self.truncated += u64::from(o.truncated);
        self.answer_records += u64::from(o.answers);
    }

    pub fn json(&self, mode: &str) -> String {
        format!(
            "{{\"mode\":\"{mode}\",\"queries\":{},\"responses\":{},\"ignored\":{},\"noerror\":{},\"nxdomain\":{},\"formerr\":{},\"refused\":{},\"other_rcode\":{},\"truncated\":{},\"answer_records\":{},\"send_failed\":{},\"hot_path_allocations\":{}}}",
            self.queries,
            self.responses,
            self.ignored,
            self.noerror,
            self.nxdomain,
            self.formerr,
            self.refused,
            self.other_rcode,
            self.truncated,
            self.answer_records,
            self.send_failed,
            self.hot_path_allocations
        )
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Make SIGINT and SIGTERM set the flag [`stopping`] reads.
pub fn install_stop_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an
        // atomic (async-signal-safe), and the struct outlives the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stopping() -> bool {
    STOP.load(Ordering::Relaxed)
}
