//! The EAL as a secondary process that leaves the primary's devices alone.
//!
//! A DPDK 22.11 secondary asks its primary for the list of vdevs
//! (`bus_vdev_mp` IPC) and probes every one of them in its own process;
//! at `rte_eal_cleanup` the bus cleanup removes them again, which runs the
//! PMD's close. For `net_pcap` that close marks the primary's shared port
//! data link DOWN and every queue STOPPED, and a second close (after an
//! application's own `rte_eth_dev_close`) dereferences a NULL
//! `process_private` (the `dpdk-proc-info` crash, docs/design.md).
//!
//! [`SecondaryEal::init`] keeps the secondary from probing anything: before
//! `rte_eal_init` it registers its own handler for `bus_vdev_mp`; the vdev
//! bus's registration then fails with `EEXIST`, which its scan tolerates,
//! so the primary's device names arrive at our handler, are recorded, and
//! never become devices here. With `--no-pci` and no vdev, this process has
//! no ethdev port: nothing to configure, stop or close, and the bus cleanup
//! of `rte_eal_cleanup` has nothing to remove. Detaching still runs
//! `rte_eal_cleanup` (services, IPC socket, memory maps), unless a port
//! appeared anyway, in which case it is skipped rather than closing it.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::eal::{INITIALISED, UP};
use crate::error::{DpdkError, Result};
use crate::ffi;

/// The vdev bus's IPC action name (`VDEV_MP_KEY` in drivers/bus/vdev/vdev.c).
const VDEV_MP_KEY: &str = "bus_vdev_mp";
/// `VDEV_SCAN_ONE` of `struct vdev_param` (22.11): one device name from the primary.
const VDEV_SCAN_ONE: c_int = 2;

/// Device names the primary announced, in order.
static PRIMARY_VDEVS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Our `bus_vdev_mp` handler: record `VDEV_SCAN_ONE` names, probe nothing.
///
/// # Safety
/// Called by the EAL's IPC thread with a valid message.
unsafe extern "C" fn record_vdev(msg: *const ffi::rte_mp_msg, _peer: *const c_void) -> c_int {
    if msg.is_null() {
        return 0;
    }
    // SAFETY: the EAL passes a message valid for the call.
    let msg = unsafe { &*msg };
    // struct vdev_param { int type; int num; char name[RTE_DEV_NAME_MAX_LEN]; }
    let p = &msg.param;
    let len = (msg.len_param.max(0) as usize).min(p.len());
    if len < 8 {
        return 0;
    }
    let ty = c_int::from_ne_bytes([p[0], p[1], p[2], p[3]]);
    if ty != VDEV_SCAN_ONE {
        return 0;
    }
    let name = &p[8..len];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let name = String::from_utf8_lossy(&name[..end]).into_owned();
    if let Ok(mut v) = PRIMARY_VDEVS.lock() {
        if !v.contains(&name) {
            v.push(name);
        }
    }
    0
}

/// Whether a primary process holds the EAL config file at `config`
/// (`rte_eal_primary_proc_alive`: a write-lock test, callable before
/// `rte_eal_init`). `false` when the file does not exist.
pub fn primary_alive(config: &Path) -> bool {
    let Ok(c) = CString::new(config.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path valid for the call; the function only
    // opens, lock-tests and closes the file.
    unsafe { ffi::rte_eal_primary_proc_alive(c.as_ptr()) != 0 }
}

/// The EAL initialised as a secondary process that probed none of the
/// primary's devices. Not `Send`: the thread that initialised it is the
/// EAL's main lcore.
#[derive(Debug)]
pub struct SecondaryEal {
    primary_vdevs: Vec<String>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl SecondaryEal {
    /// `rte_eal_init` with `args` (without the program name; they must
    /// include `--proc-type=secondary`), keeping the primary's vdevs
    /// unprobed. An error when the EAL refuses, or when a port appeared in
    /// this process anyway (the EAL is then left up, without cleanup, so
    /// that nothing of the primary's is closed).
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<SecondaryEal> {
        if INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::Usage(
                "the EAL is already initialised in this process (once per process: a DPDK rule)"
                    .into(),
            ));
        }
        let mut owned: Vec<CString> = vec![CString::new("udpdemux-client").unwrap_or_default()];
        for a in args {
            owned.push(CString::new(a.as_ref()).map_err(|_| {
                DpdkError::Usage(format!("EAL argument {:?} contains NUL", a.as_ref()))
            })?);
        }
        let key = CString::new(VDEV_MP_KEY).unwrap_or_default();
        // SAFETY: a NUL-terminated name and a handler that lives for the
        // process (a plain fn); the IPC action list is a static of the EAL,
        // usable before rte_eal_init.
        let rc = unsafe { ffi::rte_mp_action_register(key.as_ptr(), Some(record_vdev)) };
        if rc != 0 {
            return Err(DpdkError::from_errno(
                "rte_mp_action_register(bus_vdev_mp) before rte_eal_init",
            ));
        }
        let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        // SAFETY: argv points at NUL-terminated strings that outlive the
        // call (`owned`); the EAL copies what it keeps.
        let ret = unsafe { ffi::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if ret < 0 {
            let err = DpdkError::from_errno("rte_eal_init (secondary)");
            // SAFETY: the name we registered above; no EAL state needed.
            unsafe { ffi::rte_mp_action_unregister(key.as_ptr()) };
            return Err(err);
        }
        UP.store(true, Ordering::SeqCst);
        // SAFETY: plain query of the EAL's process type after init.
        let ty = unsafe { ffi::rte_eal_process_type() };
        if ty != ffi::rte_proc_type_t_RTE_PROC_SECONDARY {
            return Err(DpdkError::Usage(
                "the EAL came up as a primary process: pass --proc-type=secondary".into(),
            ));
        }
        let ports = local_ports();
        if !ports.is_empty() {
            return Err(DpdkError::Usage(format!(
                "this secondary probed device(s) {} that the primary may own; it stays attached without cleanup so that none is closed: pass --no-pci and no --vdev",
                ports.join(", ")
            )));
        }
        let primary_vdevs = PRIMARY_VDEVS.lock().map(|v| v.clone()).unwrap_or_default();
        Ok(SecondaryEal {
            primary_vdevs,
            _not_send: std::marker::PhantomData,
        })
    }

    /// The vdevs the primary announced (and this process did not probe).
    pub fn primary_vdevs(&self) -> &[String] {
        &self.primary_vdevs
    }

    /// Whether the primary still holds its config file.
    pub fn primary_alive(&self) -> bool {
        // SAFETY: NULL selects this process's own runtime config path; the
        // EAL is up.
        unsafe { ffi::rte_eal_primary_proc_alive(std::ptr::null()) != 0 }
    }

    /// Leave: `rte_eal_cleanup` when this process has no port (it never
    /// has one unless something probed behind our back), else nothing.
    /// Whether the cleanup ran.
    pub fn detach(mut self) -> bool {
        // Drop then finds the EAL down and does nothing.
        self.cleanup()
    }

    fn cleanup(&mut self) -> bool {
        if !UP.swap(false, Ordering::SeqCst) {
            return false;
        }
        let ports = local_ports();
        if !ports.is_empty() {
            log::warn!(
                "not running rte_eal_cleanup: this secondary has port(s) {} whose close would reach the primary's shared port data",
                ports.join(", ")
            );
            return false;
        }
        // SAFETY: the EAL is up (UP was set by init and is cleared once
        // here); this process has no lcore of its own running and no port.
        let rc = unsafe { ffi::rte_eal_cleanup() };
        rc == 0
    }
}

impl Drop for SecondaryEal {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Names of the ethdev ports this process knows (probed here).
fn local_ports() -> Vec<String> {
    let mut out = Vec::new();
    // SAFETY: plain query; the EAL is up.
    let total = unsafe { ffi::rte_eth_dev_count_total() };
    if total == 0 {
        return out;
    }
    for id in 0..ffi::RTE_MAX_ETHPORTS as u16 {
        // SAFETY: plain query of this process's own port table.
        if unsafe { ffi::rte_eth_dev_is_valid_port(id) } == 0 {
            continue;
        }
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf holds RTE_ETH_NAME_MAX_LEN (64) bytes; the call
        // fails harmlessly for unused port ids.
        if unsafe { ffi::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) } == 0 {
            // SAFETY: the call NUL-terminated the name inside buf.
            let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
            out.push(name.to_string_lossy().into_owned());
        }
    }
    if out.is_empty() {
        out.push(format!("{total} port(s)"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: c_int, name: &str) -> ffi::rte_mp_msg {
        let mut m = ffi::rte_mp_msg::default();
        m.param[..4].copy_from_slice(&ty.to_ne_bytes());
        m.param[4..8].copy_from_slice(&1i32.to_ne_bytes());
        m.param[8..8 + name.len()].copy_from_slice(name.as_bytes());
        m.len_param = 8 + 64;
        m
    }

    #[test]
    fn the_vdev_handler_records_names_once_and_ignores_other_messages() {
        for (ty, name) in [
            (VDEV_SCAN_ONE, "net_test7"),
            (VDEV_SCAN_ONE, "net_test7"),
            (3, "net_rep"),
        ] {
            let m = msg(ty, name);
            // SAFETY: a valid message for the call; the peer is unused.
            assert_eq!(unsafe { record_vdev(&m, std::ptr::null()) }, 0);
        }
        // SAFETY: a NULL message is refused before any read.
        let rc = unsafe { record_vdev(std::ptr::null(), std::ptr::null()) };
        assert_eq!(rc, 0);
        let v = PRIMARY_VDEVS.lock().unwrap().clone();
        assert_eq!(v.iter().filter(|n| *n == "net_test7").count(), 1, "{v:?}");
        assert!(!v.iter().any(|n| n == "net_rep"), "{v:?}");
    }

    #[test]
    fn a_missing_config_has_no_primary() {
        assert!(!primary_alive(Path::new("/nonexistent/dpdk/config")));
    }
}
