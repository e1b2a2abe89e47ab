// The engine interposes DPDK's remove-callback functions for librte_pdump
// (dpdk-bindings/src/pdump.rs): the binary must export them for the dynamic
// linker to bind librte_pdump's calls to them.
fn main() {
    for f in ["rte_eth_remove_rx_callback", "rte_eth_remove_tx_callback"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={f}");
    }
}
