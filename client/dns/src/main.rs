//! `udpdemux-dns`: an authoritative DNS responder for one static zone.
//!
//!     udpdemux-dns --zone ZONE.toml PREFIX [--bind NAME@ADDR]... [--open NAME]...
//!     udpdemux-dns --zone ZONE.toml --kernel ADDR [--kernel ADDR]...
//!
//! The first form attaches to the udpdemux engine running with file prefix
//! PREFIX, binds sockets (`--bind dns4@198.18.0.1:53`) or opens sockets of
//! the engine's config (`--open dns4`), and answers: `recv_burst` on each
//! socket, one response per query, the burst's responses in one
//! `send_burst`. The second answers on kernel UDP sockets (`recvmmsg`/
//! `sendmmsg`). Both print `ready` once serving (the kernel mode:
//! `listening ADDR` per socket first), and on SIGINT/SIGTERM their
//! counters as one JSON line, then exit 0. Errors: `error: ...` on
//! stderr, exit status 1.
use std::net::SocketAddr;
use std::path::PathBuf;

use udpdemux::parse::Family;
use udpdemux::runtime::alloc_guard::{thread_hot_allocations, CountingAlloc, HotSection};
use udpdemux_client::{Client, RecvBatch};
use udpdemux_dns::zone::Zone;
use udpdemux_dns::{install_stop_handler, kernel, stopping, Counters};

// The engine's counting allocator: the serving loops run marked hot, and
// what they allocate is the exit JSON's `hot_path_allocations` (the dig
// test requires 0 in both modes).
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const USAGE: &str = "usage: udpdemux-dns --zone ZONE.toml (PREFIX [--bind NAME@ADDR]... [--open NAME]... | --kernel ADDR...)";

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}

fn say(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut zone: Option<PathBuf> = None;
    let mut prefix = None;
    let mut binds: Vec<(String, SocketAddr)> = Vec::new();
    let mut opens: Vec<String> = Vec::new();
    let mut kern: Vec<SocketAddr> = Vec::new();
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| fail(USAGE));
        match a.as_str() {
            "--zone" => zone = Some(val().into()),
            "--bind" => {
                let v = val();
                let (n, l) = v.split_once('@').unwrap_or_else(|| fail(USAGE));
                let l = l
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("bad address {l}")));
                binds.push((n.to_string(), l));
            }
            "--open" => opens.push(val()),
            "--kernel" => {
                let v = val();
                kern.push(
                    v.parse()
                        .unwrap_or_else(|_| fail(&format!("bad address {v}"))),
                );
            }
            "-h" | "--help" => {
                say(USAGE);
                return;
            }
            _ if prefix.is_none() && !a.starts_with('-') => prefix = Some(a),
            _ => fail(USAGE),
        }
    }
    let zone =
        Zone::load(&zone.unwrap_or_else(|| fail(USAGE))).unwrap_or_else(|e| fail(&e.to_string()));
    install_stop_handler();
    if !kern.is_empty() {
        if prefix.is_some() || !binds.is_empty() || !opens.is_empty() {
            fail(USAGE);
        }
        let c = kernel::serve(&kern, &zone, |bound| {
            for b in bound {
                say(&format!("listening {b}"));
            }
            say("ready");
        })
        .unwrap_or_else(|e| fail(&e.to_string()));
        say(&c.json("kernel"));
    } else {
        let prefix = prefix.unwrap_or_else(|| fail(USAGE));
        if binds.is_empty() && opens.is_empty() {
            fail(USAGE);
        }
        let c = serve_engine(&prefix, &binds, &opens, &zone);
        say(&c.json("engine"));
    }
}

/// A placeholder for the unused slots of a burst.
const UNSPECIFIED: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

fn serve_engine(
    prefix: &str,
    binds: &[(String, SocketAddr)],
    opens: &[String],
    zone: &Zone,
) -> Counters {
    let client = Client::attach(prefix).unwrap_or_else(|e| fail(&e.to_string()));
    let mut socks = Vec::new();
    for (name, local) in binds {
        let o = udpdemux_client::SocketOptions::new(name, *local);
        socks.push(client.bind(o).unwrap_or_else(|e| fail(&e.to_string())));
    }
    for name in opens {
        socks.push(client.open(name).unwrap_or_else(|e| fail(&e.to_string())));
    }
    // Find the engine's TX pool and make this process's TX ring now (an
    // empty send does just that), not on the first answer.
    for s in &socks {
        s.send_burst(&[]);
    }
    say("ready");
    let mut c = Counters::default();
    let mut batch = RecvBatch::new();
    // One response buffer per datagram of a burst, reused; each has room
    // for the largest response (the path's limit), so answering never
    // grows one.
    let most = udpdemux::send::max_payload(Family::V4)
        .max(udpdemux::send::max_payload(Family::V6))
        .max(udpdemux_dns::wire::CLASSIC_UDP);
    let mut replies: Vec<Vec<u8>> = (0..udpdemux_client::BATCH)
        .map(|_| Vec::with_capacity(most))
        .collect();
    let mut query = vec![0u8; 65536];
    let mut idle = 0u32;
    let before = thread_hot_allocations();
    while !stopping() {
        // Receiving, answering and sending: hot. The idle back-off below
        // (a liveness check, a sleep) is not.
        let hot = HotSection::enter();
        let mut got = 0;
        for s in socks.iter_mut() {
            let n = s.recv_burst(&mut batch);
            if n == 0 {
                continue;
            }
            got += n;
            if replies.len() < n {
                replies.resize_with(n, || Vec::with_capacity(most));
            }
            // The burst's answered datagrams: (their source, their reply),
            // in a stack array rather than a Vec collected per burst.
            let mut burst: [(SocketAddr, &[u8]); udpdemux_client::BATCH] =
                [(UNSPECIFIED, &[]); udpdemux_client::BATCH];
            let mut k = 0;
            for (d, out) in batch.iter().zip(replies.iter_mut()) {
                let max = udpdemux::send::max_payload(if d.src().is_ipv4() {
                    Family::V4
                } else {
                    Family::V6
                });
                let msg: &[u8] = if d.is_contiguous() {
                    d.payload()
                } else {
                    let len = d.copy_payload(&mut query);
                    &query[..len]
                };
                let o = zone.respond(msg, max, out);
                c.count(o);
                if o.is_some() {
                    if let Some(slot) = burst.get_mut(k) {
                        *slot = (d.src(), out.as_slice());
                        k += 1;
                    } else {
                        // More than a batch: cannot happen (recv_burst
                        // fills at most BATCH), but never silently.
                        c.send_failed += 1;
                    }
                }
            }
            let sent = s.send_burst(&burst[..k]);
            c.responses += sent as u64;
            c.send_failed += (k - sent) as u64;
        }
        drop(hot);
        if got == 0 {
            // Poll hard while traffic flows, then back off to spare the CPU.
            idle = idle.saturating_add(1);
            if idle > 1000 {
                if !client.engine_alive() {
                    eprintln!("the engine is gone");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
        } else {
            idle = 0;
        }
    }
    c.hot_path_allocations = thread_hot_allocations() - before;
    // Free the last batch (its memory goes back to its socket) before closing.
    drop(batch);
    for s in socks {
        let name = s.name().to_string();
        if let Err(e) = s.close() {
            eprintln!("closing {name}: {e}");
        }
    }
    client.detach();
    c
}
