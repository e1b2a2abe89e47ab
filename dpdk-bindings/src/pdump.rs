//! DPDK's packet-capture server (`librte_pdump`), so `dpdk-dumpcap` and
//! `dpdk-pdump` can attach to a running primary as secondary processes.
//!
//! `rte_pdump_init` reserves the shared capture-statistics memzone and
//! registers the `mp_pdump` IPC action. Nothing is installed on a port
//! until a capture asks: the action's handler (on the EAL's IPC thread)
//! then adds RX/TX callbacks that copy the matching mbufs into the
//! capturing process's ring, and removes them when the capture ends. With
//! no capture running, the ports' burst functions see no callback at all.
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
    }
}
