//! Finds the system DPDK with pkg-config and generates bindings with bindgen.
//! DPDK's fast-path API is `static inline` (rx_burst, mbuf alloc, ring
//! enqueue ...): `wrap_static_fns` emits a C file of exported wrappers that we
//! compile with `cc`, so Rust can call them.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim.c");

    let lib = match pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            // One line, naming the fix; cargo shows it as the build error.
            eprintln!("error: DPDK >= 22.11 not found by pkg-config ({e}); run `sudo bash scripts/setup.sh` (installs libdpdk-dev, libclang-dev, pkg-config)");
            println!("cargo:warning=DPDK >= 22.11 not found by pkg-config: run `sudo bash scripts/setup.sh`");
            std::process::exit(1);
        }
    };

    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let wrap_c = out.join("static_fns.c");
    let mut clang_args: Vec<String> = lib
        .include_paths
        .iter()
        .map(|p| format!("-I{}", p.display()))
        .collect();
    // Match Debian's own cflags (pkg-config --cflags libdpdk): corei7, not native,
    // so the generated layout and the compiled wrappers agree with the library.
    clang_args.push("-march=corei7".into());

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(&clang_args)
        .allowlist_function("rte_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*|RING_F_.*|LCORE_ID_ANY|SOCKET_ID_ANY|MEMPOOL_F_.*|RTE_MBUF_.*")
        .allowlist_function("__rte_.*")
        // Packed types whose layout bindgen cannot reproduce (checked on 22.11).
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .generate_comments(false)
        .layout_tests(false)
        .derive_default(true)
        .clang_macro_fallback()
        .parse_callbacks(Box::new(U64Macros))
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrap_c)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("error: bindgen over DPDK headers failed ({e}); run `sudo bash scripts/setup.sh` (needs libclang-dev)");
            std::process::exit(1);
        });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings");
    keep_used_wrappers(&wrap_c);

    let mut build = cc::Build::new();
    build
        .file(&wrap_c)
        .file("shim.c")
        .include(env::current_dir().unwrap())
        .flag("-march=corei7")
        .flag("-include")
        .flag("rte_config.h")
        .flag("-Wno-deprecated-declarations")
        .flag("-Wno-duplicate-decl-specifier")
        .opt_level(3);
    for p in &lib.include_paths {
        build.include(p);
    }
    // The generated file includes wrapper.h by its absolute path.
    build.compile("dpdk_static_fns");
}

/// The `static inline` functions the crate calls. bindgen wraps all 374 of
/// 22.11's; compiling every wrapper (each inlines its function, and the
/// file includes every DPDK header) took 15 s of each build's critical path,
/// in every build CI makes (test, clippy, loom, fuzz). A call to one not
/// listed fails to link with "undefined reference to `NAME__extern'":
/// add NAME here. `tests/static_fns.rs` checks that each one listed is
/// called.
const USED_STATIC_FNS: &[&str] = &[
    "rte_eth_rx_burst",
    "rte_eth_tx_burst",
    "rte_lcore_id",
    "rte_mbuf_refcnt_read",
    "rte_mbuf_refcnt_update",
    "rte_mempool_default_cache",
    "rte_mempool_ops_enqueue_bulk",
    "rte_pktmbuf_alloc",
    "rte_pktmbuf_alloc_bulk",
    "rte_pktmbuf_append",
    "rte_pktmbuf_chain",
    "rte_pktmbuf_data_room_size",
    "rte_pktmbuf_free",
    "rte_pktmbuf_priv_size",
    "rte_pktmbuf_reset",
    "rte_ring_count",
    "rte_ring_dequeue_burst",
    "rte_ring_enqueue_burst",
    "rte_ring_get_capacity",
    "rte_ring_mp_enqueue_burst",
];

/// Cuts bindgen's wrapper file (one wrapper per line) to [`USED_STATIC_FNS`].
fn keep_used_wrappers(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).expect("read the static wrappers");
    let name_of = |line: &str| {
        let head = &line[..line.find("__extern(")?];
        let start = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        Some(head[start..].to_string())
    };
    let mut found = Vec::new();
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| match name_of(line) {
            Some(name) if USED_STATIC_FNS.contains(&name.as_str()) => {
                found.push(name);
                true
            }
            Some(_) => false,
            None => true,
        })
        .collect();
    for want in USED_STATIC_FNS {
        if !found.iter().any(|f| f == want) {
            panic!("dpdk-sys build.rs: USED_STATIC_FNS names {want}, which bindgen did not wrap (not a static inline function of this DPDK)");
        }
    }
    std::fs::write(path, kept.join("\n") + "\n").expect("write the static wrappers");
}

/// DPDK's flag macros (RTE_MBUF_F_*, RTE_ETH_*_OFFLOAD_*, RTE_ETH_RSS_*) are
/// 64-bit masks; type them u64 so they combine with the fields they test.
#[derive(Debug)]
struct U64Macros;
impl bindgen::callbacks::ParseCallbacks for U64Macros {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        if name.starts_with("RTE_MBUF_F_")
            || name.starts_with("RTE_ETH_RX_OFFLOAD_")
            || name.starts_with("RTE_ETH_TX_OFFLOAD_")
            || name.starts_with("RTE_ETH_RSS_")
        {
            Some(bindgen::callbacks::IntKind::U64)
        } else {
            None
        }
    }
}
