//! `engine.filler_sockets`: a flow table of up to millions of bindings for
//! the demux benchmarks (DPDK's memzone limit allows a few thousand
//! delivery rings, so the bindings all deliver to one socket, `filler`).
//! Setup adds them after the configured sockets; teardown removes them with
//! the rest; a reload keeps `filler` (see `reload::plan`).
use std::sync::Arc;

use crate::config::SocketConf;
use crate::flow_table::{Binding, SocketHandle};
use crate::runtime::registry::{self, RegistryError};
use crate::runtime::shared::Shared;

/// A socket `filler` bound to 198.19.0.1:1024 plus n-1 more bindings
/// (198.19.0.0/16, ports 1024..60999) that all deliver to it, published in
/// one table update.
pub(crate) fn add(shared: &Shared, n: u32) -> Result<(), RegistryError> {
    let addr = binding_addr;
    let conf: SocketConf = toml::from_str(&format!(
        "name = \"filler\"\nlocal = \"{}\"\nhandler = \"count\"\n",
        addr(0)
    ))
    .map_err(|e| RegistryError::FillerConf(e.to_string()))?;
    let sock = registry::add_socket(shared, conf)?;
    let handles = shared
        .table
        .update(|ed| {
            let mut hs = Vec::with_capacity(n as usize);
            for i in 1..n {
                hs.push(ed.insert(Binding::bound(addr(i)), Arc::clone(&sock))?);
            }
            Ok(hs)
        })
        .map_err(RegistryError::Filler)?;
    log::info!("filler: {n} bindings in 198.19.0.0/16 deliver to socket filler");
    *shared.filler_handles.lock().expect("filler lock") = handles;
    Ok(())
}

/// The address of the filler's binding `i` (0: the socket's own).
pub(crate) fn binding_addr(i: u32) -> std::net::SocketAddr {
    const PORTS: u32 = 59_976;
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 1)) + i / PORTS);
    std::net::SocketAddr::new(ip.into(), 1024 + (i % PORTS) as u16)
}

/// The extra bindings, taken for teardown to remove (the `filler` socket's
/// own binding goes with the registry's entries).
pub(crate) fn take_bindings(shared: &Shared) -> Vec<SocketHandle> {
    std::mem::take(
        &mut *shared
            .filler_handles
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    )
}
