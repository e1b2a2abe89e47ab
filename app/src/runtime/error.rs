//! The engine's error type, apart from the steps that raise it so setup,
//! teardown and the entry can share it without importing each other.
use std::path::PathBuf;

use dpdk_sys::DpdkError;

use super::registry::RegistryError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Setup(String),
    /// `msg`: the EAL's own words first, then `err`, then a hint matched to
    /// the argument that failed (see `eal_log::eal_hint`).
    #[error("EAL init failed: {msg}")]
    Eal { err: DpdkError, msg: String },
    #[error("{0}")]
    Dpdk(#[from] DpdkError),
    /// A socket could not be added or removed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the books do not balance: {0}")]
    Books(String),
}
