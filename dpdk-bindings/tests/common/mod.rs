//! What the EAL-backed test files share. Each file is its own process,
//! and a process has one EAL: each test file calls [`one_lcore_eal`] once.
use dpdk_sys::Eal;

/// An EAL without hugepages, PCI or a shared config, on lcore 0 alone
/// (this thread), its files under `--file-prefix=dpdk-sys-TAG`. Needs root.
pub fn one_lcore_eal(tag: &str) -> Eal {
    let prefix = format!("--file-prefix=dpdk-sys-{tag}");
    Eal::init(&[
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-shconf",
        prefix.as_str(),
        "--lcores",
        "0",
    ])
    .expect("EAL init (run as root)")
}
