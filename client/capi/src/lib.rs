//! The C API of `udpdemux-client` (issue 16, item 3): `libudpdemux.so` and
//! `include/udpdemux.h`, so C and C++ servers can attach to a running
//! engine, open its sockets and receive from them without a copy.
//!
//! Every entry point is a thin wrapper of `udpdemux-client`'s public API:
//! it checks its pointers (NULL is refused with [`UDX_ENULL`]), runs the
//! Rust call under [`std::panic::catch_unwind`] (a panic never unwinds into
//! C: it becomes [`UDX_EPANIC`]; the release profile's `panic = "abort"`
//! aborts the process instead), and
//! turns a Rust error into a negative code plus a one-line message for
//! `udx_last_error()` (thread-local). The header documents ownership and
//! lifetimes; `tests/c_example.rs` checks that it declares exactly what
//! this library exports, and a unit test that its constants are these.
//!
//! Handles are boxes given to C as raw pointers. A client is leaked into a
//! `&'static` so that the `ClientSocket`s borrowing it can live in their
//! own handles; `udx_detach` takes the box back only when no socket or
//! batch handle refers to it any more (it counts them), so no borrow
//! outlives it. Everything but the plain accessors must be called on the
//! thread that attached (the EAL's main lcore: `Client` is not `Send`, and
//! mempool caches are per lcore): other threads get [`UDX_ETHREAD`].
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr, CString};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use udpdemux_client::{
    AttachError, Client, ClientSocket, CloseError, OpenError, Received, RecvBatch, StatsError,
};

/// Success.
pub const UDX_OK: c_int = 0;
/// A pointer argument that must not be NULL was NULL.
pub const UDX_ENULL: c_int = -1;
/// An argument is not valid (a name that is not UTF-8, a bad file prefix).
pub const UDX_EINVAL: c_int = -2;
/// A datagram index past the batch's length.
pub const UDX_ERANGE: c_int = -3;
/// Called from a thread other than the one that attached.
pub const UDX_ETHREAD: c_int = -4;
/// Busy: the socket is already open, or the client still has sockets or
/// batches (detach).
pub const UDX_EBUSY: c_int = -5;
/// No engine runs on that file prefix (or it shares no memory).
pub const UDX_ENOENGINE: c_int = -6;
/// The EAL could not attach (or already did in this process).
pub const UDX_EATTACH: c_int = -7;
/// The engine has no socket of that name.
pub const UDX_ENOSOCKET: c_int = -8;
/// The engine refused the request or did not answer.
pub const UDX_EENGINE: c_int = -9;
/// An internal error (a Rust panic, caught).
pub const UDX_EPANIC: c_int = -10;

/// Datagrams one `udx_recv_burst` takes at most (`UDX_BATCH`).
pub const UDX_BATCH: usize = udpdemux_client::BATCH;

/// Why a call failed: its code and its one-line message.
struct Failure {
    code: c_int,
    msg: String,
}

fn failure(code: c_int, msg: impl Into<String>) -> Failure {
    Failure {
        code,
        msg: msg.into(),
    }
}

fn null(what: &str) -> Failure {
    failure(UDX_ENULL, format!("{what} is NULL"))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

fn this_thread() -> u64 {
    THREAD.with(|t| *t)
}

fn set_last_error(msg: &str) {
    let one_line: String = msg
        .chars()
        .map(|c| if c == '\n' || c == '\0' { ' ' } else { c })
        .collect();
    let c = CString::new(one_line).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Run an entry point's body: its value, or its failure's code (and
/// message for `udx_last_error`), or [`UDX_EPANIC`] if it panicked.
fn guard(f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            set_last_error(&format!("internal error in udpdemux's C API: {what}"));
            UDX_EPANIC
        }
    }
}

/// An attached client (`udx_client` in C).
pub struct ClientHandle {
    client: Client,
    thread: u64,
    sockets: Cell<usize>,
    batches: Cell<usize>,
}

/// An open socket (`udx_socket` in C).
pub struct SocketHandle {
    sock: ClientSocket<'static>,
    owner: &'static ClientHandle,
    name: CString,
}

/// A batch of received datagrams (`udx_batch` in C).
pub struct BatchHandle {
    batch: RecvBatch,
    owner: &'static ClientHandle,
}

fn check_thread(owner: &ClientHandle) -> Result<(), Failure> {
    if owner.thread == this_thread() {
        Ok(())
    } else {
        Err(failure(
            UDX_ETHREAD,
            "called from another thread than the one that attached: use the client, its sockets and batches on that thread only",
        ))
    }
}

/// A C string argument as `&str`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: `p` is not NULL, and by this function's contract it points to
    // a NUL-terminated string valid for 'a.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| failure(UDX_EINVAL, format!("{what} is not valid UTF-8")))
}

/// A handle argument as a reference.
///
/// # Safety
/// `p` is NULL or a handle this library returned and that was not freed.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: by this function's contract a non-NULL `p` points to a live
    // handle (a Box this library leaked); `as_ref` maps NULL to None.
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// A handle argument as a mutable reference.
///
/// # Safety
/// `p` is NULL or a handle this library returned and that was not freed,
/// not used by another call meanwhile.
unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: by this function's contract a non-NULL `p` points to a live
    // handle that nothing else references during the call.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

/// Store `v` through the out-pointer `out`.
///
/// # Safety
/// `out` is NULL or valid for a write of a `T`.
unsafe fn put<T>(out: *mut T, v: T) {
    // SAFETY: the caller checked `out` for NULL, and by this function's
    // contract it is valid for writing a `T`; `write` drops nothing there.
    unsafe { out.write(v) }
}

fn attach_code(e: &AttachError) -> c_int {
    match e {
        AttachError::InvalidPrefix { .. } => UDX_EINVAL,
        AttachError::NoSuchPrefix { .. }
        | AttachError::NotRunning { .. }
        | AttachError::NoSharedConfig { .. }
        | AttachError::NotAnEngine { .. } => UDX_ENOENGINE,
        _ => UDX_EATTACH,
    }
}

fn open_code(e: &OpenError) -> c_int {
    match e {
        OpenError::InvalidName { .. } => UDX_EINVAL,
        OpenError::NoSuchSocket { .. } => UDX_ENOSOCKET,
        OpenError::AlreadyOpen { .. } => UDX_EBUSY,
        _ => UDX_EENGINE,
    }
}

fn close_code(_: &CloseError) -> c_int {
    UDX_EENGINE
}

fn stats_code(e: &StatsError) -> c_int {
    match e {
        StatsError::InvalidName { .. } => UDX_EINVAL,
        StatsError::NoSuchSocket { .. } => UDX_ENOSOCKET,
        _ => UDX_EENGINE,
    }
}

/// One socket's counters (`udx_socket_stats` in C): `SocketStats` field
/// for field (see its documentation and the header's), in the header's
/// order; `local` as `udx_dgram_src` writes an address, `handler`
/// NUL-terminated.
#[repr(C)]
pub struct UdxSocketStats {
    pub id: u32,
    pub client_pid: u32,
    pub offered: u64,
    pub delivered: u64,
    pub consumed: u64,
    pub consumed_bytes: u64,
    pub client_consumed: u64,
    pub freed_at_close: u64,
    pub reclaimed_from_client: u64,
    pub lost_in_client_free: u64,
    pub drop_rcvbuf_full: u64,
    pub drop_rcvbuf_full_at_drain: u64,
    pub drop_ring_full: u64,
    pub drop_closed: u64,
    pub rcvbuf: u64,
    pub rmem: u64,
    pub rmem_high_water: u64,
    pub condensed: u64,
    pub ring_count: u64,
    pub ring_size: u64,
    pub local: libc::sockaddr_storage,
    pub local_len: libc::socklen_t,
    pub handler: [c_char; 16],
}

/// The calling thread's last error as one line ("" before any): see the header.
#[no_mangle]
pub extern "C" fn udx_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The name of an error code (`"UDX_ENULL"` ...), `"UDX_UNKNOWN"` for others.
#[no_mangle]
pub extern "C" fn udx_error_name(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        UDX_OK => c"UDX_OK",
        UDX_ENULL => c"UDX_ENULL",
        UDX_EINVAL => c"UDX_EINVAL",
        UDX_ERANGE => c"UDX_ERANGE",
        UDX_ETHREAD => c"UDX_ETHREAD",
        UDX_EBUSY => c"UDX_EBUSY",
        UDX_ENOENGINE => c"UDX_ENOENGINE",
        UDX_EATTACH => c"UDX_EATTACH",
        UDX_ENOSOCKET => c"UDX_ENOSOCKET",
        UDX_EENGINE => c"UDX_EENGINE",
        UDX_EPANIC => c"UDX_EPANIC",
        _ => c"UDX_UNKNOWN",
    };
    s.as_ptr()
}

/// The TSC now, the clock of `udx_dgram_rx_tsc`.
#[no_mangle]
pub extern "C" fn udx_tsc_now() -> u64 {
    dpdk_sys::eal::rdtsc()
}

/// Attach to the engine running with `eal.file_prefix = file_prefix`.
///
/// # Safety
/// `file_prefix` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn udx_attach(
    file_prefix: *const c_char,
    out: *mut *mut ClientHandle,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let prefix = unsafe { c_str(file_prefix, "file_prefix") }?;
        let client = Client::attach(prefix).map_err(|e| failure(attach_code(&e), e.to_string()))?;
        let h = Box::new(ClientHandle {
            client,
            thread: this_thread(),
            sockets: Cell::new(0),
            batches: Cell::new(0),
        });
        // SAFETY: `out` is not NULL and, by the contract, writable.
        unsafe { put(out, Box::into_raw(h)) };
        Ok(UDX_OK)
    })
}

/// Detach; the handle is freed on success.
///
/// # Safety
/// `client` is NULL or a handle from `udx_attach` not yet detached;
/// `cleaned_up` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn udx_detach(client: *mut ClientHandle, cleaned_up: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live client handle, by the contract.
        let h = unsafe { handle(client.cast_const(), "client") }?;
        check_thread(h)?;
        if h.sockets.get() > 0 || h.batches.get() > 0 {
            return Err(failure(
                UDX_EBUSY,
                format!(
                    "cannot detach: {} socket(s) still open and {} batch(es) not freed: udx_close and udx_batch_free them first",
                    h.sockets.get(),
                    h.batches.get()
                ),
            ));
        }
        // SAFETY: `client` came from Box::into_raw in udx_attach and is not
        // detached yet (the contract); no socket or batch handle refers to
        // it (both counts are 0), so this box is its only owner now.
        let h = unsafe { Box::from_raw(client) };
        let clean = h.client.detach();
        if !cleaned_up.is_null() {
            // SAFETY: not NULL and, by the contract, writable.
            unsafe { put(cleaned_up, c_int::from(clean)) };
        }
        Ok(UDX_OK)
    })
}

/// Open the engine's configured socket `name`.
///
/// # Safety
/// `client` is NULL or a live handle from `udx_attach`; `name` is NULL or
/// a NUL-terminated string; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn udx_open(
    client: *mut ClientHandle,
    name: *const c_char,
    out: *mut *mut SocketHandle,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live client handle, by the contract. It stays
        // alive while this socket's handle does: udx_detach refuses while
        // any socket is open.
        let h: &'static ClientHandle = unsafe { handle(client.cast_const(), "client") }?;
        check_thread(h)?;
        // SAFETY: NULL or a NUL-terminated string, by the contract.
        let name = unsafe { c_str(name, "name") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let sock = h
            .client
            .open(name)
            .map_err(|e| failure(open_code(&e), e.to_string()))?;
        let cname = CString::new(sock.name()).unwrap_or_default();
        h.sockets.set(h.sockets.get() + 1);
        let s = Box::new(SocketHandle {
            sock,
            owner: h,
            name: cname,
        });
        // SAFETY: `out` is not NULL and, by the contract, writable.
        unsafe { put(out, Box::into_raw(s)) };
        Ok(UDX_OK)
    })
}

/// Close a socket; the handle is freed whatever the result (except
/// `UDX_ENULL` and `UDX_ETHREAD`).
///
/// # Safety
/// `sock` is NULL or a live handle from `udx_open`.
#[no_mangle]
pub unsafe extern "C" fn udx_close(sock: *mut SocketHandle) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live socket handle, by the contract.
        let s = unsafe { handle(sock.cast_const(), "sock") }?;
        check_thread(s.owner)?;
        // SAFETY: from Box::into_raw in udx_open, not closed yet (the
        // contract); the reference above is not used after this.
        let s = unsafe { Box::from_raw(sock) };
        let owner = s.owner;
        let res = s.sock.close();
        owner.sockets.set(owner.sockets.get() - 1);
        res.map_err(|e| failure(close_code(&e), e.to_string()))?;
        Ok(UDX_OK)
    })
}

/// The counters of the engine's socket `name` (any of its sockets, open
/// here or not) into `*out`.
///
/// # Safety
/// `client` is NULL or a live handle from `udx_attach`; `name` is NULL or
/// a NUL-terminated string; `out` is NULL or valid for writing a
/// `udx_socket_stats`.
#[no_mangle]
pub unsafe extern "C" fn udx_stats(
    client: *const ClientHandle,
    name: *const c_char,
    out: *mut UdxSocketStats,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live client handle, by the contract.
        let h = unsafe { handle(client, "client") }?;
        check_thread(h)?;
        // SAFETY: NULL or a NUL-terminated string, by the contract.
        let name = unsafe { c_str(name, "name") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let st = h
            .client
            .stats(name)
            .map_err(|e| failure(stats_code(&e), e.to_string()))?;
        let mut handler = [0 as c_char; 16];
        for (d, b) in handler.iter_mut().zip(st.handler.bytes().take(15)) {
            *d = b as c_char;
        }
        // SAFETY: a zeroed sockaddr_storage is valid (all integers); it is
        // overwritten by put_sockaddr below.
        let mut local: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut local_len: libc::socklen_t = 0;
        // SAFETY: both are live locals, writable.
        unsafe { put_sockaddr(st.local, &mut local, &mut local_len) };
        let c = UdxSocketStats {
            id: st.id,
            client_pid: st.client_pid,
            offered: st.offered,
            delivered: st.delivered,
            consumed: st.consumed,
            consumed_bytes: st.consumed_bytes,
            client_consumed: st.client_consumed,
            freed_at_close: st.freed_at_close,
            reclaimed_from_client: st.reclaimed_from_client,
            lost_in_client_free: st.lost_in_client_free,
            drop_rcvbuf_full: st.drop_rcvbuf_full,
            drop_rcvbuf_full_at_drain: st.drop_rcvbuf_full_at_drain,
            drop_ring_full: st.drop_ring_full,
            drop_closed: st.drop_closed,
            rcvbuf: st.rcvbuf,
            rmem: st.rmem,
            rmem_high_water: st.rmem_high_water,
            condensed: st.condensed,
            ring_count: st.ring_count,
            ring_size: st.ring_size,
            local,
            local_len,
            handler,
        };
        // SAFETY: not NULL and, by the contract, writable.
        unsafe { put(out, c) };
        Ok(UDX_OK)
    })
}

/// The socket's name, valid until `udx_close`; NULL if `sock` is NULL.
///
/// # Safety
/// `sock` is NULL or a live handle from `udx_open`.
#[no_mangle]
pub unsafe extern "C" fn udx_socket_name(sock: *const SocketHandle) -> *const c_char {
    let mut name = std::ptr::null();
    guard(|| {
        // SAFETY: NULL or a live socket handle, by the contract.
        name = unsafe { handle(sock, "sock") }?.name.as_ptr();
        Ok(UDX_OK)
    });
    name
}

/// The engine's id of the socket.
///
/// # Safety
/// `sock` is NULL or a live handle from `udx_open`; `id` is NULL or valid
/// for writing a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn udx_socket_id(sock: *const SocketHandle, id: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live socket handle, by the contract.
        let s = unsafe { handle(sock, "sock") }?;
        if id.is_null() {
            return Err(null("id"));
        }
        // SAFETY: not NULL and, by the contract, writable.
        unsafe { put(id, s.sock.id()) };
        Ok(UDX_OK)
    })
}

/// A new, empty batch of the client's.
///
/// # Safety
/// `client` is NULL or a live handle from `udx_attach`; `out` is NULL or
/// valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn udx_batch_new(
    client: *mut ClientHandle,
    out: *mut *mut BatchHandle,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live client handle, by the contract; it stays
        // alive while the batch does (udx_detach refuses while batches exist).
        let h: &'static ClientHandle = unsafe { handle(client.cast_const(), "client") }?;
        check_thread(h)?;
        if out.is_null() {
            return Err(null("out"));
        }
        h.batches.set(h.batches.get() + 1);
        let b = Box::new(BatchHandle {
            batch: RecvBatch::new(),
            owner: h,
        });
        // SAFETY: `out` is not NULL and, by the contract, writable.
        unsafe { put(out, Box::into_raw(b)) };
        Ok(UDX_OK)
    })
}

/// Release the batch's datagrams and free it.
///
/// # Safety
/// `batch` is NULL or a live handle from `udx_batch_new`.
#[no_mangle]
pub unsafe extern "C" fn udx_batch_free(batch: *mut BatchHandle) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live batch handle, by the contract.
        let b = unsafe { handle(batch.cast_const(), "batch") }?;
        check_thread(b.owner)?;
        // SAFETY: from Box::into_raw in udx_batch_new, not freed yet (the
        // contract); the reference above is not used after this.
        let b = unsafe { Box::from_raw(batch) };
        let owner = b.owner;
        drop(b);
        owner.batches.set(owner.batches.get() - 1);
        Ok(UDX_OK)
    })
}

/// Release the batch's datagrams (it stays usable, empty).
///
/// # Safety
/// `batch` is NULL or a live handle from `udx_batch_new`.
#[no_mangle]
pub unsafe extern "C" fn udx_batch_release(batch: *mut BatchHandle) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live batch handle, not used elsewhere meanwhile.
        let b = unsafe { handle_mut(batch, "batch") }?;
        check_thread(b.owner)?;
        b.batch.clear();
        Ok(UDX_OK)
    })
}

/// Datagrams in the batch now.
///
/// # Safety
/// `batch` is NULL or a live handle from `udx_batch_new`.
#[no_mangle]
pub unsafe extern "C" fn udx_batch_len(batch: *const BatchHandle) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live batch handle, by the contract.
        let b = unsafe { handle(batch, "batch") }?;
        Ok(b.batch.len() as c_int)
    })
}

/// Receive up to `UDX_BATCH` datagrams into `batch`, releasing what it held.
///
/// # Safety
/// `sock` and `batch` are NULL or live handles of this library, neither
/// used by another call meanwhile.
#[no_mangle]
pub unsafe extern "C" fn udx_recv_burst(sock: *mut SocketHandle, batch: *mut BatchHandle) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live socket handle, not used elsewhere meanwhile.
        let s = unsafe { handle_mut(sock, "sock") }?;
        // SAFETY: NULL or a live batch handle, not used elsewhere meanwhile.
        let b = unsafe { handle_mut(batch, "batch") }?;
        check_thread(s.owner)?;
        check_thread(b.owner)?;
        let n = udpdemux_client::recv_burst(&mut s.sock, &mut b.batch);
        Ok(n as c_int)
    })
}

/// Datagram `i` of a batch, for the accessors.
///
/// # Safety
/// `batch` is NULL or a live handle from `udx_batch_new`.
unsafe fn datagram<'a>(batch: *const BatchHandle, i: usize) -> Result<Received<'a>, Failure> {
    // SAFETY: NULL or a live batch handle, by this function's contract.
    let b: &'a BatchHandle = unsafe { handle(batch, "batch") }?;
    let len = b.batch.len();
    b.batch.get(i).ok_or_else(|| {
        failure(
            UDX_ERANGE,
            format!("datagram index {i} is out of range: the batch holds {len}"),
        )
    })
}

/// The datagram's UDP payload: pointer and length, valid until the batch's
/// next recv_burst, release or free.
///
/// # Safety
/// `batch` is NULL or a live handle; `data` and `len` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_payload(
    batch: *const BatchHandle,
    i: usize,
    data: *mut *const u8,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if data.is_null() {
            return Err(null("data"));
        }
        if len.is_null() {
            return Err(null("len"));
        }
        // SAFETY: NULL or a live batch handle, by the contract.
        let d = unsafe { datagram(batch, i) }?;
        if !d.is_contiguous() {
            return Err(failure(
                UDX_EINVAL,
                format!(
                    "datagram {i} was reassembled from fragments: its {} bytes span several buffers (use udx_dgram_copy_payload)",
                    d.payload_len()
                ),
            ));
        }
        let p = d.payload();
        // SAFETY: both not NULL and, by the contract, writable.
        unsafe {
            put(data, p.as_ptr());
            put(len, p.len());
        }
        Ok(UDX_OK)
    })
}

/// Copies datagram i's UDP payload, every segment of it, into `buf` (`cap`
/// bytes); `*len` is the payload's whole length (more than `cap` when cut).
///
/// # Safety
/// `batch` is NULL or a live handle; `buf` is NULL or valid for `cap`
/// bytes of writes; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_copy_payload(
    batch: *const BatchHandle,
    i: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if buf.is_null() && cap != 0 {
            return Err(null("buf"));
        }
        if len.is_null() {
            return Err(null("len"));
        }
        // SAFETY: NULL or a live batch handle, by the contract.
        let d = unsafe { datagram(batch, i) }?;
        let out: &mut [u8] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: not NULL and valid for cap bytes of writes (the contract).
            unsafe { std::slice::from_raw_parts_mut(buf, cap) }
        };
        d.copy_payload(out);
        // SAFETY: not NULL and, by the contract, writable.
        unsafe { put(len, d.payload_len()) };
        Ok(UDX_OK)
    })
}

/// Write `a` into a `struct sockaddr_storage` as a `sockaddr_in` or
/// `sockaddr_in6` (network byte order), and its length into `addrlen`.
///
/// # Safety
/// `addr` and `addrlen` are not NULL and valid for writes.
unsafe fn put_sockaddr(
    a: SocketAddr,
    addr: *mut libc::sockaddr_storage,
    addrlen: *mut libc::socklen_t,
) {
    // SAFETY: `addr` is valid for writing one sockaddr_storage (the
    // contract): zero it all, so the bytes past the address are defined.
    unsafe { std::ptr::write_bytes(addr, 0, 1) };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned
            // for it (that is its purpose); `addr` is writable.
            unsafe { addr.cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and
            // aligned for it; `addr` is writable.
            unsafe { addr.cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `addrlen` is writable (the contract).
    unsafe { put(addrlen, len as libc::socklen_t) };
}

/// Shared body of `udx_dgram_src` and `udx_dgram_dst`.
///
/// # Safety
/// As theirs.
unsafe fn dgram_addr(
    batch: *const BatchHandle,
    i: usize,
    addr: *mut libc::sockaddr_storage,
    addrlen: *mut libc::socklen_t,
    src: bool,
) -> c_int {
    guard(|| {
        if addr.is_null() {
            return Err(null("addr"));
        }
        if addrlen.is_null() {
            return Err(null("addrlen"));
        }
        // SAFETY: NULL or a live batch handle, by the contract.
        let d = unsafe { datagram(batch, i) }?;
        let a = if src { d.src() } else { d.dst() };
        // SAFETY: both checked for NULL, writable by the contract.
        unsafe { put_sockaddr(a, addr, addrlen) };
        Ok(UDX_OK)
    })
}

/// The datagram's source address and port.
///
/// # Safety
/// `batch` is NULL or a live handle; `addr` is NULL or a writable
/// `struct sockaddr_storage`; `addrlen` is NULL or a writable `socklen_t`.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_src(
    batch: *const BatchHandle,
    i: usize,
    addr: *mut libc::sockaddr_storage,
    addrlen: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { dgram_addr(batch, i, addr, addrlen, true) }
}

/// The datagram's destination address and port.
///
/// # Safety
/// As `udx_dgram_src`.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_dst(
    batch: *const BatchHandle,
    i: usize,
    addr: *mut libc::sockaddr_storage,
    addrlen: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { dgram_addr(batch, i, addr, addrlen, false) }
}

/// One scalar of a datagram through an out-pointer.
///
/// # Safety
/// `batch` is NULL or a live handle; `out` is NULL or writable.
unsafe fn dgram_scalar<T>(
    batch: *const BatchHandle,
    i: usize,
    out: *mut T,
    what: &str,
    get: impl FnOnce(&Received<'_>) -> T,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(null(what));
        }
        // SAFETY: NULL or a live batch handle, by the contract.
        let d = unsafe { datagram(batch, i) }?;
        // SAFETY: not NULL and, by the contract, writable.
        unsafe { put(out, get(&d)) };
        Ok(UDX_OK)
    })
}

/// The TSC of the burst the datagram arrived in (clock: `udx_tsc_now`).
///
/// # Safety
/// `batch` is NULL or a live handle; `tsc` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_rx_tsc(
    batch: *const BatchHandle,
    i: usize,
    tsc: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { dgram_scalar(batch, i, tsc, "tsc", |d| d.rx_tsc()) }
}

/// The socket's drop count when the datagram's batch reached its ring.
///
/// # Safety
/// `batch` is NULL or a live handle; `drops` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_drops(
    batch: *const BatchHandle,
    i: usize,
    drops: *mut u32,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { dgram_scalar(batch, i, drops, "drops", |d| d.drops()) }
}

/// The DPDK port the datagram arrived on.
///
/// # Safety
/// `batch` is NULL or a live handle; `port` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn udx_dgram_port(
    batch: *const BatchHandle,
    i: usize,
    port: *mut u16,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { dgram_scalar(batch, i, port, "port", |d| d.port()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: udx_last_error returns this thread's NUL-terminated string.
        unsafe { CStr::from_ptr(udx_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_error_code_and_a_message() {
        let r = guard(|| panic!("boom"));
        assert_eq!(r, UDX_EPANIC);
        assert_eq!(last(), "internal error in udpdemux's C API: boom");
    }

    #[test]
    fn null_pointers_are_refused_with_their_name() {
        let mut c = std::ptr::null_mut();
        // SAFETY: NULL and valid pointers only.
        let r = unsafe { udx_attach(std::ptr::null(), &mut c) };
        assert_eq!(r, UDX_ENULL);
        assert_eq!(last(), "file_prefix is NULL");
        // SAFETY: NULL handles are refused before any use.
        unsafe {
            assert_eq!(
                udx_recv_burst(std::ptr::null_mut(), std::ptr::null_mut()),
                UDX_ENULL
            );
            assert_eq!(udx_batch_len(std::ptr::null()), UDX_ENULL);
            assert!(udx_socket_name(std::ptr::null()).is_null());
            assert_eq!(last(), "sock is NULL");
        }
    }

    #[test]
    fn messages_are_one_line_and_errors_are_named() {
        set_last_error("a\nb\0c");
        assert_eq!(last(), "a b c");
        let name = |c| {
            // SAFETY: udx_error_name returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(udx_error_name(c)) };
            s.to_str().unwrap()
        };
        assert_eq!(name(UDX_ERANGE), "UDX_ERANGE");
        assert_eq!(name(42), "UDX_UNKNOWN");
    }

    /// `udx_socket_stats` in the header lists `UdxSocketStats`'s fields,
    /// in its order, with the same C types, so the two layouts agree.
    #[test]
    fn the_header_declares_the_stats_struct_as_this_crate() {
        let h = include_str!("../include/udpdemux.h");
        let body = h
            .split("typedef struct udx_socket_stats {")
            .nth(1)
            .and_then(|b| b.split("} udx_socket_stats;").next())
            .expect("udx_socket_stats in the header");
        let fields: Vec<String> = body
            .lines()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.starts_with("/*") && !l.starts_with('*'))
            .map(|l| {
                l.trim_end_matches(';')
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let u64s = [
            "offered",
            "delivered",
            "consumed",
            "consumed_bytes",
            "client_consumed",
            "freed_at_close",
            "reclaimed_from_client",
            "lost_in_client_free",
            "drop_rcvbuf_full",
            "drop_rcvbuf_full_at_drain",
            "drop_ring_full",
            "drop_closed",
            "rcvbuf",
            "rmem",
            "rmem_high_water",
            "condensed",
            "ring_count",
            "ring_size",
        ];
        let mut want = vec!["uint32_t id".to_string(), "uint32_t client_pid".to_string()];
        want.extend(u64s.iter().map(|f| format!("uint64_t {f}")));
        want.push("struct sockaddr_storage local".into());
        want.push("socklen_t local_len".into());
        want.push("char handler[16]".into());
        assert_eq!(fields, want);
        assert_eq!(
            std::mem::size_of::<UdxSocketStats>(),
            8 + 8 * u64s.len() + std::mem::size_of::<libc::sockaddr_storage>() + 4 + 16 + 4,
            "no padding but the tail's"
        );
    }

    /// Every `#define UDX_*` of the header has the value of this crate's
    /// constant of that name, and every constant is in the header.
    #[test]
    fn the_header_defines_these_constants() {
        let h = include_str!("../include/udpdemux.h");
        let consts = [
            ("UDX_OK", UDX_OK as i64),
            ("UDX_ENULL", UDX_ENULL as i64),
            ("UDX_EINVAL", UDX_EINVAL as i64),
            ("UDX_ERANGE", UDX_ERANGE as i64),
            ("UDX_ETHREAD", UDX_ETHREAD as i64),
            ("UDX_EBUSY", UDX_EBUSY as i64),
            ("UDX_ENOENGINE", UDX_ENOENGINE as i64),
            ("UDX_EATTACH", UDX_EATTACH as i64),
            ("UDX_ENOSOCKET", UDX_ENOSOCKET as i64),
            ("UDX_EENGINE", UDX_EENGINE as i64),
            ("UDX_EPANIC", UDX_EPANIC as i64),
            ("UDX_BATCH", UDX_BATCH as i64),
        ];
        let defined: Vec<(String, i64)> = h
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                if w.next()? != "#define" {
                    return None;
                }
                let name = w.next()?;
                let v = w.next()?.trim_matches(|c| c == '(' || c == ')');
                Some((name.to_string(), v.parse().ok()?))
            })
            .filter(|(n, _)| n.starts_with("UDX_"))
            .collect();
        for (n, v) in consts {
            assert!(
                defined.iter().any(|(dn, dv)| dn == n && *dv == v),
                "{n} = {v} not in the header: {defined:?}"
            );
            // SAFETY: a static NUL-terminated string.
            let named = unsafe { CStr::from_ptr(udx_error_name(v as c_int)) };
            if n != "UDX_BATCH" {
                assert_eq!(named.to_str().unwrap(), n);
            }
        }
        assert_eq!(defined.len(), consts.len(), "{defined:?}");
    }
}
