//! The C API in C (issue 16, item 3): `examples/recv.c` and `tests/api.c`
//! are compiled against `include/udpdemux.h` and `libudpdemux.so` with
//! `-Wall -Wextra -Werror`, and run as clients of a real engine on a
//! finite replay: each receives exactly the manifest's datagrams of the
//! socket it opened, and the engine's books balance with the client's
//! consumption in them; the counters `api.c` reads with `udx_stats` are
//! the exit JSON's for its socket. The header is checked against the library's
//! exports and compiles as C++.
//!
//! The engine's spawn helpers and the replay's config are the client
//! crate's (`client/tests/common`), not copies.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn capi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `libudpdemux.so` in this test's profile directory, built once per run.
fn cdylib() -> &'static PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let prof = profile_dir();
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "udpdemux-capi", "--lib", "--target-dir"])
            .arg(prof.parent().unwrap())
            .current_dir(repo());
        match prof.file_name().unwrap().to_str().unwrap() {
            "debug" => {}
            "release" => {
                c.arg("--release");
            }
            other => {
                c.args(["--profile", other]);
            }
        }
        let o = c.output().expect("spawn cargo build");
        assert!(
            o.status.success(),
            "cargo build -p udpdemux-capi: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lib = prof.join("libudpdemux.so");
        assert!(lib.is_file(), "{} missing after the build", lib.display());
        lib
    })
}

/// Compile the C program `src` against the header and the cdylib, with
/// every warning an error; the executable's path.
fn cc(src: &Path, exe: &str) -> PathBuf {
    let lib = cdylib();
    let libdir = lib.parent().unwrap();
    let out = profile_dir().join("capi-c");
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join(exe);
    let o = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-pthread",
            "-I",
        ])
        .arg(capi_dir().join("include"))
        .arg(src)
        .arg("-L")
        .arg(libdir)
        .arg("-ludpdemux")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("spawn cc (apt-get install build-essential: scripts/setup.sh)");
    assert!(
        o.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The C recv example receives exactly the manifest's datagrams of `dns6`
/// (its opens of an unknown and of a busy socket print the library's
/// messages), `tests/api.c` then exercises every function and receives
/// exactly `app6`'s, the example run for a time on an engine-counted
/// socket gets nothing (the replay is over) and gives it back, and at
/// exit the engine's books balance: every socket
/// delivered and consumed the manifest's count, the C clients' datagrams
/// and payload bytes are in their sockets' books, and all memory is back.
#[test]
fn c_clients_receive_a_finite_replay_exactly_and_the_books_balance() {
    hugepages_ready(64).unwrap();
    let recv = cc(&capi_dir().join("examples/recv.c"), "recv");
    let api = cc(&capi_dir().join("tests/api.c"), "api");
    let m = manifest();
    let pcap = repo().join("conf/default.pcap");
    let vdev = format!("net_pcap0,rx_pcap={}", pcap.display());
    let mut engine = Engine::start("capi", &vdev, "net_pcap0", Opts::body(finite()));
    let n6 = m["per_dst"]["[fd00::1]:53"].as_u64().unwrap();
    let a6 = m["per_dst"]["[fd00::2]:5000"].as_u64().unwrap();

    let o = Command::new(&recv)
        .arg(&engine.prefix)
        .args([&format!("dns6={n6}"), "nosuch", "dns6"])
        .output()
        .expect("spawn recv");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.contains("open dns6 id="), "{out}");
    assert!(
        out.contains("open-error nosuch: cannot open socket \"nosuch\": no socket named \"nosuch\" in this engine (its sockets: dns4, echo4, app4, dns6, app6)"),
        "{out}"
    );
    assert!(
        out.contains("open-error dns6: cannot open socket \"dns6\": socket \"dns6\" is already open by client pid"),
        "{out}"
    );
    let (got, dns6_bytes) = received(&out, "dns6");
    assert_eq!(got, n6, "{out}");
    assert!(out.contains("dsts {\"[fd00::1]:53\"}"), "{out}");
    assert!(!out.contains("tsc_ok false"), "RX TSC: {out}");
    assert!(out.contains("closed dns6"), "{out}");
    assert!(out.contains("detached cleanup=true"), "{out}");

    let o = Command::new(&api)
        .args([&engine.prefix, "app6", &a6.to_string(), "[fd00::2]:5000"])
        .output()
        .expect("spawn api");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() && out.contains("api ok"), "{}", text(&o));
    let l = out
        .lines()
        .find(|l| l.starts_with("api app6 received "))
        .unwrap_or_else(|| panic!("{out}"));
    let w: Vec<&str> = l.split(' ').collect();
    let (got, app6_bytes): (u64, u64) = (w[3].parse().unwrap(), w[5].parse().unwrap());
    assert_eq!(got, a6, "{out}");
    assert!(l.ends_with("ports {0} drops 0"), "{l}");
    // What udx_stats read once the C client had freed everything.
    let c_stats: Vec<(String, u64)> = out
        .lines()
        .find_map(|l| l.strip_prefix("api stats app6 "))
        .unwrap_or_else(|| panic!("no udx_stats line: {out}"))
        .split(' ')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();

    // For S seconds (the replay is over: nothing comes), on a socket the
    // engine counts, which goes back to it at close.
    let o = Command::new(&recv)
        .args([&engine.prefix, "--secs", "0.3", "dns4"])
        .output()
        .expect("spawn recv");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        out.contains(
            "socket dns4 received 0 bytes 0 dsts {} srcs 0 tsc_ok true drops 0\nclosed dns4\n"
        ),
        "{out}"
    );

    let j = engine.stop();
    assert_eq!(j["books_balanced"], true, "{}", j["problems"]);
    assert_eq!(j["rx_packets"], m["frames"]);
    // The finite replay was over: the C client's stats are the exit's.
    let app6 = socket_named(&j, "app6");
    for (k, v) in &c_stats {
        let exit = match k.strip_prefix("drop_") {
            Some(r) => &app6["drops"][r],
            None => &app6[k.as_str()],
        };
        assert_eq!(exit, v, "app6 {k}: udx_stats {v}, exit JSON {exit}");
    }
    assert_eq!(c_stats.len(), 8, "{c_stats:?}");
    for (name, addr, client_bytes) in [
        ("dns4", "198.18.1.1:53", None),
        ("echo4", "198.18.1.2:7", None),
        ("app4", "198.18.1.3:5000", None),
        ("dns6", "[fd00::1]:53", Some(dns6_bytes)),
        ("app6", "[fd00::2]:5000", Some(app6_bytes)),
    ] {
        let s = socket_named(&j, name);
        let n = &m["per_dst"][addr];
        assert_eq!(&s["delivered"], n, "{name} delivered");
        assert_eq!(&s["consumed"], n, "{name} consumed");
        assert_eq!(s["freed_at_close"], 0, "{name}");
        assert_eq!(s["rmem"], 0, "{name}: memory released");
        let want = if client_bytes.is_some() {
            n.as_u64().unwrap()
        } else {
            0
        };
        assert_eq!(s["client_consumed"], want, "{name} consumed by a C client");
        if let Some(b) = client_bytes {
            assert_eq!(
                s["consumed_bytes"], b,
                "{name}: payload bytes the C client read"
            );
        }
    }
}

/// The header declares exactly the functions the library exports (no
/// more, no fewer), and it compiles as C++ too (its `extern "C"` block).
#[test]
fn the_header_declares_exactly_the_exports_and_compiles_as_cxx() {
    let lib = cdylib();
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("spawn nm (binutils)");
    assert!(nm.status.success(), "{}", text(&nm));
    let mut exported: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && w[1] == "T" && w[2].starts_with("udx_")).then(|| w[2].to_string())
        })
        .collect();
    exported.sort();
    let header = std::fs::read_to_string(capi_dir().join("include/udpdemux.h")).unwrap();
    let mut declared: Vec<String> = header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.starts_with("/*"))
        .filter_map(|l| {
            let name = l.split('(').next()?.split([' ', '*']).next_back()?;
            (l.contains('(') && name.starts_with("udx_")).then(|| name.to_string())
        })
        .collect();
    declared.sort();
    assert_eq!(declared, exported);
    assert!(
        exported.iter().any(|f| f == "udx_recv_burst"),
        "{exported:?}"
    );

    let o = Command::new("c++")
        .args([
            "-x",
            "c++",
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
        ])
        .arg(capi_dir().join("include/udpdemux.h"))
        .output()
        .expect("spawn c++ (build-essential)");
    assert!(o.status.success(), "{}", text(&o));
}
