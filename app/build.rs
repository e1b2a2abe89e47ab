// The engine interposes DPDK's remove-callback functions for librte_pdump
// (app/src/main.rs, dpdk_sys::pdump): the binary must export them for the dynamic
// linker to bind librte_pdump's calls to them.
fn main() {
    // Only this file decides the link arguments: do not rerun (and relink
    // the release binary) when other files of the package change.
    println!("cargo:rerun-if-changed=build.rs");
    for f in ["rte_eth_remove_rx_callback", "rte_eth_remove_tx_callback"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={f}");
    }
}
