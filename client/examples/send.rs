//! Attach to a running engine, bind a socket, send datagrams through it.
//!
//!     cargo run -p udpdemux-client --example send -- PREFIX NAME LOCAL DST COUNT [--burst B] [--gap-ms G] [--tag T] [--size S] [--go] [--wait]
//!
//! Binds socket NAME at LOCAL, then sends COUNT datagrams to DST, B at a
//! time (default 10) with G ms between bursts (default 0), payloads
//! `T0000`, `T0001`, ... (T defaults to NAME; with `--size S` each is
//! repeated to S bytes, over the MTU a fragmented datagram). Prints `attached`,
//! `bound NAME` (with `--go` it then waits for a line on stdin before it
//! sends), then `sent N` (how many the engine took: the others found
//! no mbuf or no ring room, and are counted by the engine). With `--wait` it then
//! waits for a line on stdin before it closes the socket (a closed
//! client's TX ring is freed by the engine, counted as `client_freed`, so
//! a test lets the engine drain it first). Prints `closed` and `detached`.
//! Errors: one line `error: ...` on stderr, exit status 1.
use std::io::BufRead;
use std::net::SocketAddr;
use std::time::Duration;

use udpdemux_client::Client;

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}

fn main() {
    let usage =
        "usage: send PREFIX NAME LOCAL DST COUNT [--burst B] [--gap-ms G] [--tag T] [--size S] [--go] [--wait]";
    let mut pos = Vec::new();
    let (mut burst, mut gap_ms, mut tag, mut wait) = (10usize, 0u64, None, false);
    let (mut size, mut go) = (None, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| fail(usage))
        };
        match a.as_str() {
            "--burst" => burst = num().clamp(1, 64) as usize,
            "--gap-ms" => gap_ms = num(),
            "--tag" => tag = Some(args.next().unwrap_or_else(|| fail(usage))),
            "--size" => size = Some(num().min(65_527) as usize),
            "--go" => go = true,
            "--wait" => wait = true,
            "-h" | "--help" => {
                println!("{usage}");
                return;
            }
            _ => pos.push(a),
        }
    }
    let [prefix, name, local, dst, count] =
        <[String; 5]>::try_from(pos).unwrap_or_else(|_| fail(usage));
    let local: SocketAddr = local
        .parse()
        .unwrap_or_else(|_| fail("LOCAL is not ADDR:PORT"));
    let dst: SocketAddr = dst.parse().unwrap_or_else(|_| fail("DST is not ADDR:PORT"));
    let count: usize = count
        .parse()
        .unwrap_or_else(|_| fail("COUNT is not a number"));
    let tag = tag.unwrap_or_else(|| name.clone());

    let client = Client::attach(&prefix).unwrap_or_else(|e| fail(&format!("attach: {e}")));
    println!("attached");
    let sock = client
        .bind(udpdemux::api::SocketOptions::new(&name, local))
        .unwrap_or_else(|e| fail(&format!("bind {name}: {e}")));
    println!("bound {name}");
    let payloads: Vec<String> = (0..count)
        .map(|i| {
            let p = format!("{tag}{i:04}");
            match size {
                Some(n) => p.repeat(n.div_ceil(p.len()))[..n].to_string(),
                None => p,
            }
        })
        .collect();
    if go {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    let mut taken = 0;
    for chunk in payloads.chunks(burst) {
        let d: Vec<(SocketAddr, &[u8])> = chunk.iter().map(|p| (dst, p.as_bytes())).collect();
        taken += sock.send_burst(&d);
        std::thread::sleep(Duration::from_millis(gap_ms));
    }
    println!("sent {taken}");
    if wait {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    sock.close()
        .unwrap_or_else(|e| fail(&format!("close: {e}")));
    println!("closed");
    client.detach();
    println!("detached");
}
