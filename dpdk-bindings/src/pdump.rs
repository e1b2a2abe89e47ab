//! DPDK's packet-capture server (`librte_pdump`), so `dpdk-dumpcap` and
//! `dpdk-pdump` can attach to a running primary as secondary processes.
//!
//! `rte_pdump_init` reserves the shared capture-statistics memzone and
//! registers the `mp_pdump` IPC action. Nothing is installed on a port
//! until a capture asks: the action's handler (on the EAL's IPC thread)
//! then adds RX/TX callbacks that copy the matching mbufs into the
//! capturing process's ring, and removes them when the capture ends. With
//! no capture running, the ports' burst functions see no callback at all.
use std::ffi::{c_int, CStr};
use std::sync::Mutex;

use crate::error::{DpdkError, Result};
use crate::ffi;

/// The capture server of this process; [`Drop`] unregisters it
/// (`rte_pdump_uninit`). At most one at a time, while the EAL is up.
#[derive(Debug)]
pub struct Pdump {
    _private: (),
}

impl Pdump {
    /// `rte_pdump_init`. Fails (ENOMEM) when the EAL's memory cannot hold
    /// the statistics memzone (`2 x RTE_MAX_ETHPORTS x RTE_MAX_QUEUES_PER_PORT`
    /// cache lines: 4 MiB with Debian's build). Under `--no-shconf` DPDK has
    /// no IPC, the action is not registered, and no capture can attach.
    pub fn init() -> Result<Pdump> {
        if !crate::eal::is_up() {
            return Err(DpdkError::Usage(
                "rte_pdump_init needs the EAL to be initialised first".into(),
            ));
        }
        // SAFETY: the EAL is up (checked above); the call reserves a memzone
        // and registers an IPC action, both owned by DPDK until uninit.
        let rc = unsafe { ffi::rte_pdump_init() };
        if rc != 0 {
            return Err(DpdkError::from_errno("rte_pdump_init"));
        }
        Ok(Pdump { _private: () })
    }
}

impl Drop for Pdump {
    fn drop(&mut self) {
        // SAFETY: this guard's init succeeded and the EAL is still up (the
        // engine drops it before the EAL); uninit unregisters the action and
        // frees the memzone. A capture still attached keeps its callbacks,
        // which reference only the secondary's own ring and pool.
        unsafe {
            ffi::rte_pdump_uninit();
        }
        QUIESCE.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// What runs on DPDK's IPC thread right after a capture's RX or TX callback
/// has been unlinked, before the capturing process hears about it: the
/// engine waits there until every lcore that runs callbacks has left the
/// one it may be inside. DPDK 22.11's `rte_pdump_disable` handler answers
/// as soon as the callback is unlinked (`rte_eth_remove_rx_callback` leaves
/// it to the caller to make sure the callback is no longer running), and
/// dumpcap frees the ring and pool the callback copies into the moment the
/// answer arrives: an RX lcore still inside the callback then writes into
/// freed (zeroed) memory and the engine dies (seen: SIGSEGV in
/// `rte_pcapng_copy` on the RX lcore, 3 of 12 captures stopped under load).
type Quiesce = Box<dyn Fn() + Send + Sync>;
static QUIESCE: Mutex<Option<Quiesce>> = Mutex::new(None);

impl Pdump {
    /// Install the wait that runs after DPDK unlinks a capture callback (see
    /// [`QUIESCE`]); it runs on DPDK's IPC thread, never on an lcore. It
    /// stays installed until this guard drops.
    pub fn set_quiesce(&self, f: impl Fn() + Send + Sync + 'static) {
        *QUIESCE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(f));
    }
}

fn quiesce() {
    if let Some(f) = QUIESCE.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        f();
    }
}

type RemoveFn = unsafe extern "C" fn(u16, u16, *const ffi::rte_eth_rxtx_callback) -> c_int;

/// The next definition of `name` after this executable's own: librte_ethdev's.
fn next_definition(name: &CStr) -> Option<RemoveFn> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other
    // precondition; it returns null when no later object defines the name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `remove_then_quiesce`'s callers pass only DPDK 22.11's two
    // remove-callback names, whose C signature is exactly `RemoveFn`
    // (rte_ethdev.h, as bindgen generated it in `ffi`).
    Some(unsafe { std::mem::transmute::<*mut libc::c_void, RemoveFn>(p) })
}

/// DPDK's `rte_eth_remove_{rx,tx}_callback` (`name`) followed by the
/// installed [`Pdump::set_quiesce`] wait. The `udpdemux` binary defines and
/// exports both C symbols as calls to this (app/src/main.rs), so the dynamic
/// linker binds librte_pdump's calls there; no library defines them, so a C
/// program linking the client's `libudpdemux.so` keeps DPDK's own.
///
/// # Safety
/// `name` is `rte_eth_remove_rx_callback` or `rte_eth_remove_tx_callback`
/// and the arguments are valid for it (DPDK's contract).
pub unsafe fn remove_then_quiesce(
    name: &CStr,
    port_id: u16,
    queue_id: u16,
    user_cb: *const ffi::rte_eth_rxtx_callback,
) -> c_int {
    let Some(real) = next_definition(name) else {
        return -libc::ENOTSUP;
    };
    // SAFETY: DPDK's own function with the caller's own arguments.
    let rc = unsafe { real(port_id, queue_id, user_cb) };
    if rc == 0 {
        quiesce();
    }
    rc
}

/// The callback handle type of the remove-callback functions.
pub use ffi::rte_eth_rxtx_callback as RxTxCallback;
