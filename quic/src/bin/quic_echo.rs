//! The QUIC echo server on udpdemux: an engine on `net_af_packet` over a
//! network interface (one end of a veth pair), quinn endpoints on engine
//! sockets through `udpdemux_quinn::UdxSocket`, a self-signed certificate
//! made at start (its DER written to `--cert-out` for the client to trust).
//!
//! `--attach PREFIX` runs no engine: it attaches to the engine already
//! running with `eal.file_prefix = PREFIX` as a client
//! (`udpdemux_client::Client`) and binds its `--listen` addresses there
//! (`UdxSocket::attach`), so the QUIC server runs in its own process.
//!
//! `--kernel` serves the same on quinn's default tokio UDP socket (the
//! kernel's UDP with GRO/GSO) instead: the benchmark's other side.
//!
//! With the engine in this process quinn runs on the engine's RX lcore by
//! default (`--runtime lcore`: `udpdemux_quinn::run_on_rx_lcore`, a
//! current-thread tokio runtime driven between the lcore's bursts, its
//! sends leaving from that lcore), or on two tokio worker threads
//! (`--runtime threads`). `--kernel` and `--attach` always use threads.
//!
//! Prints `ready` when it listens; stops when its standard input ends (or
//! a `stop` line), then prints one JSON line: the connections (accepted,
//! failed, how they ended, still open at the stop), the adapter's counters
//! and the engine's books (attached: the engine's are in its own exit
//! JSON). The connections are counted the same way in every mode.
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use udpdemux::api::SocketOptions;
use udpdemux::config::Config;
use udpdemux::runtime::engine::{Engine, RunOptions};
use udpdemux_client::Client;
use udpdemux_quinn::echo::{self, ServeStats};
use udpdemux_quinn::{Backend, Stats, UdxSocket};

#[derive(Parser)]
#[command(about = "QUIC echo server on udpdemux (or on the kernel's UDP with --kernel)")]
struct Args {
    /// The interface the engine drives with net_af_packet.
    #[arg(long)]
    iface: Option<String>,
    /// The port's addresses (CIDR), e.g. 198.18.0.1/24 and fd00::1/64.
    #[arg(long = "addr")]
    addrs: Vec<String>,
    /// Addresses to serve QUIC on (one endpoint each).
    #[arg(long = "listen", required = true)]
    listen: Vec<SocketAddr>,
    /// The EAL file prefix (unique per running engine).
    #[arg(long, default_value = "quic-echo")]
    prefix: String,
    /// Where to write the certificate (DER).
    #[arg(long)]
    cert_out: std::path::PathBuf,
    /// Streams a connection may have open at once.
    #[arg(long, default_value_t = 128)]
    streams: u32,
    /// Serve on the kernel's UDP (quinn's own socket) instead of udpdemux.
    #[arg(long, conflicts_with = "attach")]
    kernel: bool,
    /// With `--kernel`: the socket's SO_RCVBUF in bytes (the kernel
    /// doubles it, and caps the request at `net.core.rmem_max`). quinn's
    /// own socket keeps the system's default (`net.core.rmem_default`,
    /// 212 992 B on Debian), which a bulk flight overflows.
    #[arg(long, value_name = "BYTES", requires = "kernel")]
    kernel_rcvbuf: Option<usize>,
    /// Start no engine: attach to the one running with this
    /// eal.file_prefix (hugepages, `udpdemux run`) as a client.
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["iface", "addrs"])]
    attach: Option<String>,
    /// The engine's `engine.idle_sleep_us`: its RX lcore sleeps through
    /// gaps up to this long, leaving the CPU to quinn (0: poll without pause).
    /// Only for the engine this process starts (an attached engine has its
    /// own config; `--kernel` has none).
    #[arg(long, default_value_t = 100, conflicts_with_all = ["attach", "kernel"])]
    idle_sleep_us: u32,
    /// The engine's `engine.idle_yield_us`: for this long after its queues
    /// go empty the RX lcore yields its CPU between polls instead of
    /// sleeping (no timer armed, no wake-up for the next frame), then
    /// sleeps (0: sleep at once). The bench's veth, 5 alternating pairs:
    /// bulk +7-22%, handshakes 16 at once median +5%, one at a time +9-44%
    /// (docs/benchmarks.md).
    #[arg(long, default_value_t = 1000, conflicts_with_all = ["attach", "kernel"])]
    idle_yield_us: u32,
    /// The engine's `eal.lcores`: lcore 0 (main, TX) and lcore 1 (RX),
    /// pinned to CPUs 0 and 1 by default. Letting them float
    /// ("0@(0,1),1@(0,1)", as the runtime's threads do) trades handshakes
    /// for bulk on 2 CPUs: `BENCH_ONLY=quic` twice each, alternating, bulk
    /// / kernel 0.85 and 0.74 against 0.66 and 0.74 pinned, handshakes 0.79
    /// and 0.82 against 0.89 and 0.88 (docs/benchmarks.md). Pin them to
    /// spare CPUs ("0@2,1@3") where there are some.
    #[arg(long, default_value = "0,1", conflicts_with_all = ["attach", "kernel"])]
    lcores: String,
    /// Where quinn runs with the engine in this process: `lcore` (a
    /// current-thread tokio runtime driven by the engine's RX lcore between
    /// its bursts, sends leaving from that lcore: no thread hand-off per
    /// datagram), or `threads` (a tokio runtime of 2 worker threads, woken
    /// by the RX lcore, sends drained by the main lcore). `--kernel` and
    /// `--attach` always use `threads`.
    #[arg(long, value_enum, default_value_t = Placement::Lcore)]
    runtime: Placement,
}

/// `--runtime`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Placement {
    Lcore,
    Threads,
}

/// The engine's config: one port, the main lcore (TX drain) and one RX
/// lcore; a pool and receive budget sized for bulk QUIC.
///
/// `framecnt=4096`: the PMD's default ring of 512 frames per queue filled
/// during a client's flight while the RX lcore slept or was preempted, and
/// the kernel's fanout then rolled the flow over to the other queue, which
/// the RX lcore drains interleaved with the first: datagrams reordered,
/// which quinn takes for losses (3% of a bulk client's packets declared
/// lost with none dropped; 0 with 2048 or more frames, and 5-10% more
/// bytes/s).
fn engine_config(a: &Args, iface: &str) -> String {
    let addrs: Vec<String> = a.addrs.iter().map(|x| format!("{x:?}")).collect();
    format!(
        r#"[eal]
lcores = "{lcores}"
no_huge = true
memory_mb = 512
no_pci = true
file_prefix = "{prefix}"
vdevs = ["net_af_packet0,iface={iface},qpairs=2,framecnt=4096"]

[engine]
idle_sleep_us = {idle}
idle_yield_us = {yield_us}

[mempool]
mbufs = 16383
cache = 256

[[port]]
name = "net_af_packet0"
rx_queues = 2
tx_queues = 2
rx_checksum_offload = false
addresses = [{addrs}]

[[lcore]]
id = 1
role = "rx"
queues = ["net_af_packet0:0", "net_af_packet0:1"]
"#,
        prefix = a.prefix,
        lcores = a.lcores,
        idle = a.idle_sleep_us,
        // Without sleeps the lcore polls without pause: nothing to yield.
        yield_us = if a.idle_sleep_us > 0 {
            a.idle_yield_us
        } else {
            0
        },
        addrs = addrs.join(", ")
    )
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quic_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Wait for the end of standard input (or a `stop` line) on a thread.
fn stdin_stopper() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            match l {
                Ok(l) if l.trim() == "stop" => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        s.store(true, Ordering::SeqCst);
    });
    stop
}

/// How long the stop waits at most for connections still ending: a peer's
/// close keeps quinn's state for three PTOs, well under a second on an idle
/// LAN, but a PTO grows with the RTT's variance, which CPU contention (the
/// benchmark's own, a loaded CI machine) inflates. Nothing is waited for
/// when nothing is open.
const SETTLE: Duration = Duration::from_secs(10);

/// At the stop: call `tick` (which runs the engine's main lcore, or
/// sleeps) until every accepted connection has ended and the endpoints
/// hold none, or `SETTLE` has passed; what the endpoints still hold and
/// how long that took (ms).
fn settle(
    endpoints: &[quinn::Endpoint],
    conns: &ServeStats,
    mut tick: impl FnMut(),
) -> (usize, u128) {
    let t0 = Instant::now();
    loop {
        let open: usize = endpoints
            .iter()
            .map(quinn::Endpoint::open_connections)
            .sum();
        if (open == 0 && conns.live() == 0) || t0.elapsed() >= SETTLE {
            return (open, t0.elapsed().as_millis());
        }
        tick();
    }
}

fn run(a: &Args) -> Result<(), String> {
    let (server, cert) = echo::server_config(a.streams)?;
    std::fs::write(&a.cert_out, &cert)
        .map_err(|e| format!("cannot write {}: {e}", a.cert_out.display()))?;
    if a.kernel {
        return run_kernel(a, worker_threads()?, server);
    }
    if let Some(prefix) = &a.attach {
        return run_attached(a, prefix, worker_threads()?, server);
    }
    let iface = a.iface.as_deref().ok_or(
        "--iface names the interface the engine drives (or give --attach PREFIX, or --kernel)",
    )?;
    let dir = std::env::temp_dir().join(format!("udx-quic-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("engine.toml");
    std::fs::write(&path, engine_config(a, iface))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg = Config::load(&path).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = Engine::start(&cfg, &RunOptions::default()).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let conns = Arc::new(ServeStats::default());
    let on_lcore = a.runtime == Placement::Lcore;
    let rt = if on_lcore {
        current_thread()?
    } else {
        worker_threads()?
    };
    let (endpoints, stats) = serve_on(a, &rt, &server, &conns, |o| UdxSocket::open(&engine, o))?;
    // `--runtime lcore`: the runtime goes to the RX lcore (dropped there at
    // the engine's stop).
    let rt = if on_lcore {
        udpdemux_quinn::run_on_rx_lcore(&engine, 0, rt).map_err(|e| e.to_string())?;
        None
    } else {
        Some(rt)
    };
    println!("ready");
    let stop = stdin_stopper();
    while !stop.load(Ordering::SeqCst) {
        // The main lcore drains the TX ring and runs the neighbour timers
        // (with `--runtime lcore` the RX lcore does both; this loop keeps
        // the stats and signals).
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.05));
    }
    let (open, settle_ms) = settle(&endpoints, &conns, || {
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.05));
    });
    for ep in &endpoints {
        ep.close(quinn::VarInt::from_u32(0), b"bye");
    }
    // Let the close go out, then drop the endpoints (and their sockets).
    for _ in 0..4 {
        engine.main_loop(Some(t0.elapsed().as_secs_f64() + 0.05));
    }
    drop(endpoints);
    if let Some(rt) = rt {
        rt.shutdown_timeout(Duration::from_secs(2));
    }
    let summary = engine.stop().map_err(|e| e.to_string())?;
    // Which lcore sent quinn's datagrams: the RX lcore (`--runtime lcore`)
    // or the main lcore (null).
    let sent_from = summary
        .send
        .as_ref()
        .and_then(|s| s.serviced_by_lcore)
        .map_or("null".to_string(), |l| l.to_string());
    println!(
        r#"{{"connections":{},"sockets":[{}],"books_balanced":{},"problems":{:?},"sent_from_rx_lcore":{sent_from}}}"#,
        conns.json(open, settle_ms),
        socket_stats(&stats),
        summary.books_balanced,
        summary.problems
    );
    Ok(())
}

/// quinn's runtime on threads of its own (`--runtime threads`, `--kernel`,
/// `--attach`): two workers.
fn worker_threads() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))
}

/// The runtime `--runtime lcore` gives the RX lcore: one thread's (the
/// lcore's), timers only (the sockets are the engine's, no I/O driver).
fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))
}

/// Options of the engine socket for `l`, the `i`th listen address.
fn socket_options(i: usize, l: SocketAddr) -> SocketOptions {
    let mut o = SocketOptions::new(&format!("quic{i}"), l);
    // Room for a flight of bulk QUIC (the kernel's default 208 KiB
    // holds about 90 mbufs).
    o.rcvbuf = 16 << 20;
    o.ring_size = 8192;
    o
}

/// One endpoint serving echo per listen address, on the sockets `open`
/// makes (in process or attached), its connections counted in `conns`:
/// the endpoints and their sockets' counters.
fn serve_on<B: Backend>(
    a: &Args,
    rt: &tokio::runtime::Runtime,
    server: &quinn::ServerConfig,
    conns: &Arc<ServeStats>,
    open: impl Fn(SocketOptions) -> Result<UdxSocket<B>, udpdemux_quinn::OpenError>,
) -> Result<(Vec<quinn::Endpoint>, Vec<Arc<Stats>>), String> {
    let mut stats = Vec::new();
    let mut endpoints = Vec::new();
    for (i, l) in a.listen.iter().enumerate() {
        let sock = open(socket_options(i, *l)).map_err(|e| e.to_string())?;
        stats.push(sock.stats());
        let _guard = rt.enter();
        let ep = quinn::Endpoint::new_with_abstract_socket(
            quinn::EndpointConfig::default(),
            Some(server.clone()),
            Arc::new(sock),
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|e| format!("endpoint on {l}: {e}"))?;
        rt.spawn(echo::serve(ep.clone(), Arc::clone(conns)));
        endpoints.push(ep);
    }
    Ok((endpoints, stats))
}

/// The adapter's counters of every socket, JSON objects joined by commas.
fn socket_stats(stats: &[Arc<Stats>]) -> String {
    stats.iter().map(|s| s.json()).collect::<Vec<_>>().join(",")
}

/// The service on sockets of an engine running in another process: this
/// process attaches as its client and binds the listen addresses there.
/// The client stays on this thread (it is the process's EAL lcore); the
/// sockets, which borrow nothing of it, live on the runtime's.
fn run_attached(
    a: &Args,
    prefix: &str,
    rt: tokio::runtime::Runtime,
    server: quinn::ServerConfig,
) -> Result<(), String> {
    let client = Client::attach(prefix).map_err(|e| e.to_string())?;
    let conns = Arc::new(ServeStats::default());
    let (endpoints, stats) = serve_on(a, &rt, &server, &conns, |o| UdxSocket::attach(&client, o))?;
    println!("ready");
    let stop = stdin_stopper();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The engine's process runs its own main lcore: only wait here.
    let (open, settle_ms) = settle(&endpoints, &conns, || {
        std::thread::sleep(Duration::from_millis(50));
    });
    for ep in &endpoints {
        ep.close(quinn::VarInt::from_u32(0), b"bye");
    }
    // Let the close go out (the engine's main lcore drains this client's
    // TX ring), then drop the endpoints; the runtime's shutdown drops
    // their sockets (each unbound), before the client detaches.
    std::thread::sleep(Duration::from_millis(200));
    drop(endpoints);
    rt.shutdown_timeout(Duration::from_secs(2));
    let clean = client.detach();
    println!(
        r#"{{"connections":{},"sockets":[{}],"attached":{prefix:?},"detached_cleanly":{clean}}}"#,
        conns.json(open, settle_ms),
        socket_stats(&stats)
    );
    Ok(())
}

/// A kernel UDP socket bound to `addr` with SO_RCVBUF `bytes` (what
/// `quinn::Endpoint::server` binds, with a receive buffer of its own), and
/// the buffer the kernel granted: twice the request, which it caps at
/// `net.core.rmem_max` first.
fn kernel_socket(addr: SocketAddr, bytes: usize) -> std::io::Result<(std::net::UdpSocket, usize)> {
    let sock = std::net::UdpSocket::bind(addr)?;
    let state = quinn::udp::UdpSocketState::new((&sock).into())?;
    state.set_recv_buffer_size((&sock).into(), bytes)?;
    let granted = state.recv_buffer_size((&sock).into())?;
    Ok((sock, granted))
}

/// The same service on quinn's own tokio UDP sockets (the kernel's UDP,
/// with GRO/GSO where the kernel has them).
fn run_kernel(
    a: &Args,
    rt: tokio::runtime::Runtime,
    server: quinn::ServerConfig,
) -> Result<(), String> {
    let mut endpoints = Vec::new();
    let mut granted = Vec::new();
    let conns = Arc::new(ServeStats::default());
    for l in &a.listen {
        let _guard = rt.enter();
        let ep = match a.kernel_rcvbuf {
            None => quinn::Endpoint::server(server.clone(), *l),
            Some(bytes) => kernel_socket(*l, bytes).and_then(|(sock, g)| {
                granted.push(g);
                quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    Some(server.clone()),
                    sock,
                    Arc::new(quinn::TokioRuntime),
                )
            }),
        }
        .map_err(|e| format!("bind {l}: {e}"))?;
        rt.spawn(echo::serve(ep.clone(), Arc::clone(&conns)));
        endpoints.push(ep);
    }
    println!("ready");
    let stop = stdin_stopper();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (open, settle_ms) = settle(&endpoints, &conns, || {
        std::thread::sleep(Duration::from_millis(50));
    });
    for ep in &endpoints {
        ep.close(quinn::VarInt::from_u32(0), b"bye");
    }
    drop(endpoints);
    rt.shutdown_timeout(Duration::from_secs(2));
    println!(
        r#"{{"connections":{},"sockets":[],"kernel_rcvbuf":{},"books_balanced":true,"problems":[]}}"#,
        conns.json(open, settle_ms),
        // SO_RCVBUF as granted, per listen address: null when quinn's own
        // socket kept the system default.
        if a.kernel_rcvbuf.is_some() {
            format!("{granted:?}")
        } else {
            "null".to_string()
        }
    );
    Ok(())
}
