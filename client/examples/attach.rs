//! Attach to a running engine as a secondary process, then detach.
//!
//!     cargo run -p udpdemux-client --example attach -- PREFIX [--hold-ms N]
//!
//! Prints `attached PREFIX vdevs=[...]` and, after holding N ms (default 0),
//! `detached PREFIX cleanup=true`; on error one line `error: ...` on stderr
//! and exit status 1. The tests run it once per attach/detach cycle (the EAL
//! initialises once per process).
use std::time::Duration;

use udpdemux_client::Client;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut prefix = None;
    let mut hold_ms = 0u64;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--hold-ms" => {
                hold_ms = match args.next().and_then(|v| v.parse().ok()) {
                    Some(v) => v,
                    None => fail("--hold-ms takes a number of milliseconds"),
                }
            }
            "-h" | "--help" => {
                println!("usage: attach PREFIX [--hold-ms N]");
                return;
            }
            _ if prefix.is_none() => prefix = Some(a),
            _ => fail(&format!(
                "unexpected argument {a:?}: usage: attach PREFIX [--hold-ms N]"
            )),
        }
    }
    let Some(prefix) = prefix else {
        fail("usage: attach PREFIX [--hold-ms N] (PREFIX: the engine's eal.file_prefix)")
    };
    let client = match Client::attach(&prefix) {
        Ok(c) => c,
        Err(e) => fail(&e.to_string()),
    };
    println!(
        "attached {} vdevs={:?}",
        client.file_prefix(),
        client.engine_vdevs()
    );
    std::thread::sleep(Duration::from_millis(hold_ms));
    let alive = client.engine_alive();
    let clean = client.detach();
    println!("detached {prefix} cleanup={clean} engine_alive={alive}");
    if !clean {
        std::process::exit(2);
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}
