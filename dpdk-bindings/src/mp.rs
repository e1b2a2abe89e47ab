//! DPDK multi-process IPC (`rte_mp_*`) and shared counters in a memzone.
//!
//! * [`register`] an action (a Rust closure called on the EAL's IPC thread
//!   with each request; it may keep the [`MpRequest`] and [`MpRequest::reply`]
//!   later from another thread, as DPDK's own hotplug handler does);
//! * [`request_sync`] from a secondary: one request, the primary's reply;
//! * [`AtomicZone`]: a memzone of `AtomicU64` slots that both processes map
//!   at the same address (hugepage memory the primary reserved).
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{DpdkError, Result};
use crate::ffi;

/// Longest action name (`RTE_MP_MAX_NAME_LEN` 64, with the NUL).
pub const MAX_NAME: usize = 63;
/// Longest request or reply parameter (`RTE_MP_MAX_PARAM_LEN`).
pub const MAX_PARAM: usize = 256;
/// Most file descriptors one message carries (`RTE_MP_MAX_FD_NUM`).
pub const MAX_FDS: usize = 8;

type Handler = Arc<dyn Fn(MpRequest) + Send + Sync>;

/// Registered actions by name (the IPC thread dispatches through here).
static HANDLERS: Mutex<Vec<(String, Handler)>> = Mutex::new(Vec::new());

/// One request received by an action: its parameter and who to answer.
#[derive(Debug)]
pub struct MpRequest {
    name: String,
    param: Vec<u8>,
    peer: CString,
}

impl MpRequest {
    /// The action name it was sent to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The request's parameter bytes.
    pub fn param(&self) -> &[u8] {
        &self.param
    }

    /// The sender's IPC socket path (it contains the sender's pid).
    pub fn peer(&self) -> &str {
        self.peer.to_str().unwrap_or("")
    }

    /// Answer (at most [`MAX_PARAM`] bytes; longer is cut). Callable from
    /// any thread while the EAL is up, once.
    pub fn reply(self, param: &[u8]) -> Result<()> {
        self.reply_with_fds(param, &[])
    }

    /// Answer with `param` and file descriptors (at most [`MAX_FDS`]),
    /// which the EAL passes with `SCM_RIGHTS`: the peer gets its own
    /// descriptors of the same files; these stay the caller's to close.
    pub fn reply_with_fds(self, param: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
        if fds.len() > MAX_FDS {
            return Err(DpdkError::Usage(format!(
                "{} descriptors in one IPC reply, at most {MAX_FDS}",
                fds.len()
            )));
        }
        let mut m = msg(&self.name, param)?;
        for (d, f) in m.fds.iter_mut().zip(fds) {
            *d = f.as_raw_fd();
        }
        m.num_fds = fds.len() as c_int;
        // SAFETY: a filled message and the peer's NUL-terminated path, both
        // valid for the call; DPDK sends it on its IPC socket (sendmsg,
        // thread-safe) and keeps neither pointer.
        let rc = unsafe { ffi::rte_mp_reply(&mut m, self.peer.as_ptr()) };
        if rc != 0 {
            return Err(DpdkError::from_errno(format!(
                "rte_mp_reply({})",
                self.name
            )));
        }
        Ok(())
    }
}

fn msg(name: &str, param: &[u8]) -> Result<ffi::rte_mp_msg> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(DpdkError::Usage(format!("bad IPC action name {name:?}")));
    }
    let mut m = ffi::rte_mp_msg::default();
    for (d, s) in m.name.iter_mut().zip(name.as_bytes()) {
        *d = *s as c_char;
    }
    let n = param.len().min(MAX_PARAM);
    m.param[..n].copy_from_slice(&param[..n]);
    m.len_param = n as c_int;
    Ok(m)
}

fn param_of(m: &ffi::rte_mp_msg) -> Vec<u8> {
    let n = (m.len_param.max(0) as usize).min(m.param.len());
    m.param[..n].to_vec()
}

fn name_of(m: &ffi::rte_mp_msg) -> String {
    let bytes: Vec<u8> = m
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The IPC thread's entry for every action registered through [`register`].
///
/// # Safety
/// Called by the EAL with a valid message and peer path for the call.
unsafe extern "C" fn dispatch(msg: *const ffi::rte_mp_msg, peer: *const c_void) -> c_int {
    if msg.is_null() || peer.is_null() {
        return -1;
    }
    // SAFETY: the EAL passes a message valid for the call.
    let m = unsafe { &*msg };
    // SAFETY: the peer is the sender's NUL-terminated socket path, valid
    // for the call; it is copied here.
    let peer = unsafe { CStr::from_ptr(peer as *const c_char) }.to_owned();
    let name = name_of(m);
    let handler = HANDLERS
        .lock()
        .ok()
        .and_then(|v| v.iter().find(|(n, _)| *n == name).map(|(_, h)| h.clone()));
    match handler {
        Some(h) => {
            h(MpRequest {
                name,
                param: param_of(m),
                peer,
            });
            0
        }
        None => -1,
    }
}

/// A registered action; unregistered on drop.
#[derive(Debug)]
pub struct MpAction {
    name: String,
}

/// Register `handler` for requests to `name` (the EAL must be up).
pub fn register<F>(name: &str, handler: F) -> Result<MpAction>
where
    F: Fn(MpRequest) + Send + Sync + 'static,
{
    msg(name, &[])?;
    let cname = CString::new(name).map_err(|_| DpdkError::Usage(format!("bad name {name:?}")))?;
    {
        let mut v = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        if v.iter().any(|(n, _)| n == name) {
            return Err(DpdkError::Usage(format!(
                "IPC action {name:?} already registered"
            )));
        }
        v.push((name.to_string(), Arc::new(handler)));
    }
    // SAFETY: a NUL-terminated name (DPDK copies it) and a plain fn that
    // lives for the process.
    let rc = unsafe { ffi::rte_mp_action_register(cname.as_ptr(), Some(dispatch)) };
    if rc != 0 {
        let err = DpdkError::from_errno(format!("rte_mp_action_register({name})"));
        HANDLERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(n, _)| n != name);
        return Err(err);
    }
    Ok(MpAction {
        name: name.to_string(),
    })
}

impl Drop for MpAction {
    fn drop(&mut self) {
        if crate::eal::is_up() {
            if let Ok(c) = CString::new(self.name.as_str()) {
                // SAFETY: the name we registered; DPDK removes it from its
                // list under its own lock.
                unsafe { ffi::rte_mp_action_unregister(c.as_ptr()) };
            }
        }
        HANDLERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(n, _)| *n != self.name);
    }
}

/// Send one request to the primary (from a secondary) and wait up to
/// `timeout` for its reply: the reply's parameter bytes (descriptors that
/// came with it are closed).
pub fn request_sync(name: &str, param: &[u8], timeout: Duration) -> Result<Vec<u8>> {
    request_sync_with_fds(name, param, timeout).map(|(p, _)| p)
}

/// Requests of this process wait for each other: DPDK refuses a request
/// while one of the same name to the same peer is pending ("A pending
/// request"), and a client's sockets may now close from several threads
/// at once (`udpdemux_client::OwnedSocket` on a runtime's threads).
static IN_FLIGHT: Mutex<()> = Mutex::new(());

/// [`request_sync`], keeping the file descriptors the reply carried.
pub fn request_sync_with_fds(
    name: &str,
    param: &[u8],
    timeout: Duration,
) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut m = msg(name, param)?;
    let _one = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    let mut reply = ffi::rte_mp_reply::default();
    let ts = ffi::timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: a filled message, an empty reply for DPDK to fill and a
    // timeout, all valid for the call.
    let rc = unsafe { ffi::rte_mp_request_sync(&mut m, &mut reply, &ts) };
    let err = (rc != 0).then(|| DpdkError::from_errno(format!("rte_mp_request_sync({name})")));
    let mut out = None;
    if !reply.msgs.is_null() {
        let n = usize::try_from(reply.nb_received).unwrap_or(0);
        // SAFETY: DPDK filled nb_received messages at msgs.
        let msgs = unsafe { std::slice::from_raw_parts(reply.msgs, n) };
        for (i, r) in msgs.iter().enumerate() {
            let k = usize::try_from(r.num_fds).unwrap_or(0).min(MAX_FDS);
            let fds: Vec<OwnedFd> = r.fds[..k]
                .iter()
                .filter(|&&fd| fd >= 0)
                // SAFETY: the EAL received these descriptors into this
                // process (SCM_RIGHTS) for this reply; nothing else owns
                // them, so each is wrapped (and closed) exactly once.
                .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            if i == 0 {
                out = Some((param_of(r), fds));
            }
        }
        // SAFETY: DPDK allocated msgs with malloc for the caller to free.
        unsafe { libc::free(reply.msgs as *mut c_void) };
    }
    if let Some(e) = err {
        return Err(e);
    }
    out.ok_or_else(|| {
        DpdkError::Usage(format!(
            "no reply to IPC request {name:?} within {timeout:?} ({} sent)",
            reply.nb_sent
        ))
    })
}

/// A memzone of `AtomicU64` slots, shared by every process of the EAL.
/// Reserved ones are freed on drop; looked-up ones are not (their
/// reserver frees them: a process that looks one up must stop using it
/// before that, by its own protocol with the reserver).
#[derive(Debug)]
pub struct AtomicZone {
    mz: NonNull<ffi::rte_memzone>,
    slots: NonNull<AtomicU64>,
    n: usize,
    owned: bool,
}

// SAFETY: the slots are atomics in memory that lives as long as the zone;
// the memzone descriptor is only read (and freed by its owner on drop).
unsafe impl Send for AtomicZone {}
// SAFETY: as above: only atomic accesses through shared references.
unsafe impl Sync for AtomicZone {}

impl AtomicZone {
    /// Reserve `name` with `n` slots, all 0, on NUMA socket `socket`.
    pub fn reserve(name: &str, n: usize, socket: i32) -> Result<AtomicZone> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::Usage(format!("bad memzone name {name:?}")))?;
        let len = n.max(1) * std::mem::size_of::<AtomicU64>();
        // SAFETY: a NUL-terminated name (DPDK copies it); memzones are
        // cache-line aligned.
        let p = unsafe { ffi::rte_memzone_reserve(cname.as_ptr(), len, socket, 0) };
        let z = Self::from_raw(p, n, true)
            .ok_or_else(|| DpdkError::from_errno(format!("rte_memzone_reserve({name}, {len})")))?;
        for s in z.slots() {
            s.store(0, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(z)
    }

    /// Find `name` (reserved by this or another process); at least `n`
    /// slots long.
    pub fn lookup(name: &str, n: usize) -> Result<AtomicZone> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::Usage(format!("bad memzone name {name:?}")))?;
        // SAFETY: a NUL-terminated name; a read of the shared memzone list.
        let p = unsafe { ffi::rte_memzone_lookup(cname.as_ptr()) };
        if p.is_null() {
            return Err(DpdkError::from_errno(format!("rte_memzone_lookup({name})")));
        }
        // SAFETY: a live memzone descriptor (shared config).
        let len = unsafe { (*p).len };
        if len < n * std::mem::size_of::<AtomicU64>() {
            return Err(DpdkError::Usage(format!(
                "memzone {name} holds {len} bytes, not {n} counters"
            )));
        }
        Self::from_raw(p, n, false)
            .ok_or_else(|| DpdkError::Usage(format!("memzone {name} has no address")))
    }

    fn from_raw(p: *const ffi::rte_memzone, n: usize, owned: bool) -> Option<AtomicZone> {
        let mz = NonNull::new(p as *mut ffi::rte_memzone)?;
        // SAFETY: a live memzone descriptor; `addr` is its virtual address,
        // the same in every process of the EAL.
        let addr = unsafe { mz.as_ref().__bindgen_anon_1.addr };
        let slots = NonNull::new(addr as *mut AtomicU64)?;
        if (slots.as_ptr() as usize) & (std::mem::align_of::<AtomicU64>() - 1) != 0 {
            return None;
        }
        Some(AtomicZone {
            mz,
            slots,
            n,
            owned,
        })
    }

    /// The counters.
    pub fn slots(&self) -> &[AtomicU64] {
        // SAFETY: the zone holds at least n aligned u64 (checked at reserve
        // or lookup); any bits are a valid AtomicU64; the memory lives
        // while the zone does (its owner frees it on drop).
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.n) }
    }

    /// The memzone's name.
    pub fn name(&self) -> String {
        // SAFETY: a live descriptor whose name the EAL NUL-terminated.
        unsafe { CStr::from_ptr(self.mz.as_ref().name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for AtomicZone {
    fn drop(&mut self) {
        if self.owned && crate::eal::is_up() {
            // SAFETY: we reserved it; nothing of ours uses it after this.
            unsafe { ffi::rte_memzone_free(self.mz.as_ptr()) };
        }
    }
}
