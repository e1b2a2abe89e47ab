//! DPDK telemetry (v2 socket, `dpdk-telemetry.py`): register commands and
//! build their replies.
//!
//! Callbacks run on DPDK's telemetry client threads (one per connection, not
//! EAL lcores), so they may allocate and block briefly. A reply is one
//! `rte_tel_data` that DPDK owns and serialises to JSON after the callback
//! returns. Limits of 22.11 (rte_telemetry.h): names and string values are
//! at most `RTE_TEL_MAX_STRING_LEN - 1` bytes, a dict holds at most
//! `RTE_TEL_MAX_DICT_ENTRIES`, an array `RTE_TEL_MAX_ARRAY_ENTRIES`, and the
//! whole JSON reply at most 16 KiB (entries that do not fit are left out by
//! DPDK's JSON writer).
//!
//! A command is a Rust closure ([`register`]): DPDK 22.11 passes its
//! callbacks no context pointer, so one C callback of this module looks
//! the command up in a table and calls the closure with the params and a
//! [`TelData`] reply.
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::{DpdkError, Result};
use crate::ffi;

/// A command's reply builder: called with the params text ("" when none,
/// trimmed) and the reply to fill; false (or a panic) makes DPDK reply
/// `null` for the command.
pub type Handler = dyn Fn(&str, &mut TelData) -> bool + Send + Sync + 'static;

/// The registered commands, looked up by name on each call.
static COMMANDS: Mutex<Vec<(CString, Arc<Handler>)>> = Mutex::new(Vec::new());

/// Longest command DPDK accepts, terminator included (`MAX_CMD_LEN` in telemetry.c).
pub const MAX_CMD_LEN: usize = 56;
/// Entries a dict can hold (`RTE_TEL_MAX_DICT_ENTRIES`); more fail with `-ENOSPC`.
pub const MAX_DICT_ENTRIES: usize = ffi::RTE_TEL_MAX_DICT_ENTRIES as usize;
/// Longest help text, terminator included (`MAX_HELP_LEN`).
pub const MAX_HELP_LEN: usize = 64;

/// Register `cmd` (must start with '/') answered by `f`. Valid before or
/// after `rte_eal_init`; commands are kept for the life of the process, and
/// a command registered twice is refused.
pub fn register(
    cmd: &CStr,
    help: &CStr,
    f: impl Fn(&str, &mut TelData) -> bool + Send + Sync + 'static,
) -> Result<()> {
    if cmd.to_bytes().first() != Some(&b'/')
        || cmd.to_bytes().len() >= MAX_CMD_LEN
        || help.to_bytes().len() >= MAX_HELP_LEN
    {
        return Err(DpdkError::Usage(format!(
            "telemetry command {cmd:?}: must start with '/' and be under {MAX_CMD_LEN} bytes, help under {MAX_HELP_LEN}"
        )));
    }
    let mut cmds = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
    if cmds.iter().any(|(c, _)| c.as_c_str() == cmd) {
        return Err(DpdkError::Usage(format!(
            "telemetry command {cmd:?} is already registered"
        )));
    }
    // SAFETY: both strings are NUL-terminated and DPDK copies them;
    // `dispatch` is a plain function valid for the life of the process.
    let rc =
        unsafe { ffi::rte_telemetry_register_cmd(cmd.as_ptr(), Some(dispatch), help.as_ptr()) };
    if rc < 0 {
        return Err(DpdkError::from_ret("rte_telemetry_register_cmd", rc));
    }
    cmds.push((cmd.to_owned(), Arc::new(f)));
    Ok(())
}

/// The one C callback: finds the closure registered for `cmd` and runs it
/// (a panic is caught: it must not unwind into DPDK's thread).
unsafe extern "C" fn dispatch(
    cmd: *const c_char,
    params: *const c_char,
    d: *mut ffi::rte_tel_data,
) -> c_int {
    if cmd.is_null() {
        return -1;
    }
    // SAFETY: DPDK passes the NUL-terminated command it matched.
    let cmd = unsafe { CStr::from_ptr(cmd) };
    let f = {
        let cmds = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
        match cmds.iter().find(|(c, _)| c.as_c_str() == cmd) {
            Some((_, f)) => Arc::clone(f),
            None => return -1,
        }
    };
    // SAFETY: DPDK passes its reply object for this invocation only.
    let Some(mut t) = (unsafe { TelData::from_callback(d) }) else {
        return -1;
    };
    // SAFETY: DPDK passes NULL or the NUL-terminated text after the comma.
    let p = unsafe { params_of(params) };
    match catch_unwind(AssertUnwindSafe(|| f(&p, &mut t))) {
        Ok(true) => 0,
        Ok(false) => -1,
        Err(_) => {
            log::error!("telemetry command {cmd:?} panicked");
            -1
        }
    }
}

/// A dict key DPDK accepts: 22.11 refuses names with characters other than
/// `[A-Za-z0-9_/]` (`-EINVAL`, and the whole reply becomes `null`), so any
/// other character (from a socket name in a config file) becomes '_'.
fn tel_name(s: &str) -> CString {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '/' {
                c
            } else {
                '_'
            }
        })
        .collect();
    tel_cstring(&clean)
}

/// A C string for DPDK: truncated to what a telemetry name/value may hold and
/// cut at an interior NUL (names come from config files and could hold one).
fn tel_cstring(s: &str) -> CString {
    let max = ffi::RTE_TEL_MAX_STRING_LEN as usize - 1;
    let bytes = s.as_bytes();
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bytes.len())
        .min(max);
    // Never split a UTF-8 sequence: the JSON reply must stay valid text.
    let mut end = end;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    CString::new(&bytes[..end]).unwrap_or_default()
}

fn check(what: &'static str, rc: c_int) -> Result<()> {
    if rc < 0 {
        Err(DpdkError::from_ret(what, rc))
    } else {
        Ok(())
    }
}

/// A reply (or a container inside one) being built.
pub struct TelData {
    d: *mut ffi::rte_tel_data,
    /// Allocated by us (a container not yet handed to a parent): freed on drop.
    owned: bool,
}

impl TelData {
    /// Wrap the reply DPDK passed to a callback.
    ///
    /// # Safety
    /// `d` must be the `rte_tel_data` pointer of the current callback
    /// invocation, used only during that invocation.
    unsafe fn from_callback(d: *mut ffi::rte_tel_data) -> Option<TelData> {
        if d.is_null() {
            None
        } else {
            Some(TelData { d, owned: false })
        }
    }

    fn alloc() -> Result<TelData> {
        // SAFETY: no preconditions; returns NULL on allocation failure.
        let d = unsafe { ffi::rte_tel_data_alloc() };
        if d.is_null() {
            return Err(DpdkError::from_ret("rte_tel_data_alloc", -libc::ENOMEM));
        }
        Ok(TelData { d, owned: true })
    }

    pub fn start_dict(&mut self) -> Result<()> {
        // SAFETY: self.d is a live rte_tel_data (callback reply or our allocation).
        check("rte_tel_data_start_dict", unsafe {
            ffi::rte_tel_data_start_dict(self.d)
        })
    }

    pub fn start_u64_array(&mut self) -> Result<()> {
        // SAFETY: as in start_dict.
        check("rte_tel_data_start_array", unsafe {
            ffi::rte_tel_data_start_array(self.d, ffi::rte_tel_value_type_RTE_TEL_U64_VAL)
        })
    }

    /// A plain string reply.
    pub fn string(&mut self, s: &str) -> Result<()> {
        let c = CString::new(s.replace('\0', "")).unwrap_or_default();
        // SAFETY: live reply; DPDK copies the string (at most its single-string limit).
        check("rte_tel_data_string", unsafe {
            ffi::rte_tel_data_string(self.d, c.as_ptr())
        })
    }

    pub fn add_array_u64(&mut self, v: u64) -> Result<()> {
        // SAFETY: live array reply; DPDK bounds-checks the entry count.
        check("rte_tel_data_add_array_u64", unsafe {
            ffi::rte_tel_data_add_array_u64(self.d, v)
        })
    }

    pub fn add_u64(&mut self, name: &str, v: u64) -> Result<()> {
        let n = tel_name(name);
        // SAFETY: live dict; DPDK copies the name and bounds-checks the entry count.
        check("rte_tel_data_add_dict_u64", unsafe {
            ffi::rte_tel_data_add_dict_u64(self.d, n.as_ptr(), v)
        })
    }

    pub fn add_str(&mut self, name: &str, v: &str) -> Result<()> {
        let (n, v) = (tel_name(name), tel_cstring(v));
        // SAFETY: live dict; DPDK copies both strings.
        check("rte_tel_data_add_dict_string", unsafe {
            ffi::rte_tel_data_add_dict_string(self.d, n.as_ptr(), v.as_ptr())
        })
    }

    /// Add a nested u64 array under `name`.
    pub fn add_u64_array(&mut self, name: &str, vals: &[u64]) -> Result<()> {
        let mut c = TelData::alloc()?;
        c.start_u64_array()?;
        for &v in vals.iter().take(ffi::RTE_TEL_MAX_ARRAY_ENTRIES as usize) {
            c.add_array_u64(v)?;
        }
        self.add_container(name, c)
    }

    /// Add a nested dict under `name`, filled by `fill`.
    pub fn add_dict(
        &mut self,
        name: &str,
        fill: impl FnOnce(&mut TelData) -> Result<()>,
    ) -> Result<()> {
        let mut c = TelData::alloc()?;
        c.start_dict()?;
        fill(&mut c)?;
        self.add_container(name, c)
    }

    fn add_container(&mut self, name: &str, mut c: TelData) -> Result<()> {
        let n = tel_name(name);
        // SAFETY: live dict and a live container we allocated; keep = 0 hands
        // the container to DPDK, which frees it after writing the reply.
        let rc = unsafe { ffi::rte_tel_data_add_dict_container(self.d, n.as_ptr(), c.d, 0) };
        if rc >= 0 {
            c.owned = false;
        }
        check("rte_tel_data_add_dict_container", rc)
    }
}

impl Drop for TelData {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: allocated by rte_tel_data_alloc and not handed to a parent.
            unsafe { ffi::rte_tel_data_free(self.d) };
        }
    }
}

/// The params string of a callback ("" when absent), as UTF-8 (lossy).
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string valid for the call.
unsafe fn params_of(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: per the contract.
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .trim()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_truncated_on_char_boundaries_and_at_nul() {
        assert_eq!(tel_cstring("abc").as_bytes(), b"abc");
        assert_eq!(tel_cstring("ab\0cd").as_bytes(), b"ab");
        let long = "é".repeat(100); // 200 bytes
        let c = tel_cstring(&long);
        assert!(c.as_bytes().len() <= 127);
        assert!(std::str::from_utf8(c.as_bytes()).is_ok());
    }

    #[test]
    fn names_keep_only_what_dpdk_accepts() {
        assert_eq!(tel_name("drop_rcvbuf_full").as_bytes(), b"drop_rcvbuf_full");
        assert_eq!(tel_name("dns-4.a:b é").as_bytes(), b"dns_4_a_b__");
    }

    #[test]
    fn register_rejects_bad_commands_before_calling_dpdk() {
        let h = CString::new("h").unwrap();
        assert!(register(&CString::new("nope").unwrap(), &h, |_, _| true).is_err());
        let long = CString::new(format!("/{}", "x".repeat(60))).unwrap();
        assert!(register(&long, &h, |_, _| true).is_err());
        assert!(COMMANDS.lock().unwrap().is_empty(), "nothing kept");
    }
}
