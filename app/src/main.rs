//! The `udpdemux` command: run the engine, check a config, generate traffic.
//!
//! The engine is the library (`udpdemux`); the tools the command also
//! offers, `gen` and `bench-demux`, are this binary's own [`tools`] tree.
//!
//! Under `--cfg loom` (the model-check build) the crate keeps only its
//! pure-Rust heart, so the binary is empty there.

#[cfg(loom)]
fn main() {}

#[cfg(not(loom))]
#[global_allocator]
static ALLOC: udpdemux::runtime::alloc_guard::CountingAlloc =
    udpdemux::runtime::alloc_guard::CountingAlloc;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(not(loom))]
mod tools;

#[cfg(not(loom))]
mod cli {
    use std::path::PathBuf;
    use std::process::ExitCode;

    use clap::{Parser, Subcommand};

    use udpdemux::config::Config;
    use udpdemux::runtime::engine::{self, RunOptions};
    use udpdemux::runtime::shared::{Floor, Mode};

    use crate::tools;

    #[derive(Parser)]
    #[command(
        name = "udpdemux",
        version,
        about = "Kernel-bypass UDP receive engine on DPDK"
    )]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Run the engine with a config file.
        Run {
            #[arg(long, short)]
            config: PathBuf,
            /// Stop after this many seconds (overrides engine.duration_secs).
            #[arg(long)]
            duration: Option<f64>,
            /// Write the final counters as JSON to this file.
            #[arg(long)]
            stats_json: Option<PathBuf>,
            /// Bare rx-and-free loop, no parsing (baseline for benchmarks).
            #[arg(long, conflicts_with_all = ["demux_only", "floor"])]
            bare: bool,
            /// RX core only: parse, look up, store the result in the mbuf, count, free
            /// (no staging or delivery; the cost the bare loop is compared with).
            #[arg(long, conflicts_with = "floor")]
            demux_only: bool,
            /// Lower bound for --demux-only: read each frame's UDP destination port at a
            /// fixed offset, one read in a port-indexed table, result into the mbuf, free;
            /// `checksums` also verifies the IPv4 header and UDP checksums in software;
            /// `pipeline` is the minimal cross-core pipeline for the whole engine: port at a
            /// fixed offset, table per family, per-socket enqueue_burst into the delivery
            /// rings, consumers dequeue, read pkt_len and free in bulk.
            #[arg(long, value_enum)]
            floor: Option<Floor>,
            /// The pipeline and this cross-core floor (pipeline, pipeline-checksums,
            /// pipeline-demux, pipeline-rte-hash) in turns on the same lcores, every 2^27 TSC
            /// cycles: both measured in one run (`lcores[].floor_alternate` in the JSON).
            /// One RX lcore.
            #[arg(long, value_enum, conflicts_with_all = ["bare", "demux_only", "floor"])]
            alternate_floor: Option<Floor>,
            /// Interval lines and final counters: text, or nstat-style `name value rate` lines.
            #[arg(long, value_enum, default_value_t = udpdemux::nstat::StatsFormat::Text)]
            stats_format: udpdemux::nstat::StatsFormat,
            /// Print every socket's latency histograms (bpftrace style) at exit.
            #[arg(long)]
            histograms: bool,
        },
        /// Validate a config without starting traffic: one line per problem, non-zero exit on errors.
        Check {
            #[arg(long, short)]
            config: PathBuf,
        },
        /// Generate traffic: write a pcap (with a manifest of exact counts) or transmit on a DPDK port.
        Gen(Box<tools::traffic::GenArgs>),
        /// Micro-benchmark (no EAL): parse + early-demux ns per packet for 16 .. 1M sockets.
        BenchDemux {
            /// Table sizes.
            #[arg(long, value_delimiter = ',', default_value = "16,1000,100000,1000000")]
            sockets: Vec<usize>,
            /// Packets timed per row.
            #[arg(long, default_value_t = 2_000_000)]
            packets: usize,
            /// Print JSON instead of a Markdown table.
            #[arg(long)]
            json: bool,
        },
    }

    pub fn main() -> ExitCode {
        // Before any thread exists: one malloc arena, so a long run's heap
        // stays where malloc_trim can give it back (see the function).
        dpdk_sys::os::single_malloc_arena();
        let mut log =
            env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
        if udpdemux::config::journal_logging() {
            // The journal stamps every line itself: no second timestamp,
            // and a `<N>` syslog priority prefix it turns into the entry's
            // priority (SyslogLevelPrefix=, on by default).
            log.format(|buf, r| {
                use std::io::Write as _;
                let prio = match r.level() {
                    log::Level::Error => 3,
                    log::Level::Warn => 4,
                    log::Level::Info => 6,
                    log::Level::Debug | log::Level::Trace => 7,
                };
                writeln!(buf, "<{prio}>{} {}: {}", r.level(), r.target(), r.args())
            });
        } else {
            log.format_timestamp_millis();
        }
        log.init();
        let cli = Cli::parse();
        let res = match cli.cmd {
            Cmd::Check { config } => udpdemux::check::run(&config)
                .map(|_| ())
                .map_err(anyhow::Error::from),
            Cmd::Run {
                config,
                duration,
                stats_json,
                bare,
                demux_only,
                floor,
                alternate_floor,
                stats_format,
                histograms,
            } => (|| -> anyhow::Result<()> {
                // First: a SIGINT from now on stops the run with a summary.
                udpdemux::runtime::signals::install();
                let cfg = Config::load_for_start(&config)?;
                if let Some(d) = duration {
                    if !(d.is_finite() && d > 0.0) {
                        anyhow::bail!("--duration must be a positive number of seconds");
                    }
                }
                engine::run(
                    &cfg,
                    &RunOptions {
                        duration,
                        stats_json,
                        mode: match (bare, demux_only, floor, alternate_floor) {
                            (true, ..) => Mode::Bare,
                            (_, true, ..) => Mode::DemuxOnly,
                            (_, _, Some(f), _) => Mode::Floor(f),
                            (.., Some(f)) => Mode::Alternate(f),
                            _ => Mode::Pipeline,
                        },
                        config_path: Some(config.clone()),
                        stats_format,
                        histograms,
                    },
                )?;
                Ok(())
            })(),
            Cmd::Gen(args) => tools::traffic::run(&args),
            Cmd::BenchDemux {
                sockets,
                packets,
                json,
            } => {
                tools::bench_demux::run(&sockets, packets, json);
                Ok(())
            }
        };
        match res {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                // One line: the chain joined, never a backtrace, and no cause
                // twice (an error's text often already ends with its source's).
                let mut msg = String::new();
                for c in e.chain().map(|c| c.to_string()) {
                    if msg.contains(&c) {
                        continue;
                    }
                    if !msg.is_empty() {
                        msg.push_str(": ");
                    }
                    msg.push_str(&c);
                }
                eprintln!("udpdemux: error: {msg}");
                ExitCode::from(1)
            }
        }
    }
}

/// DPDK's remove-callback functions, interposed for librte_pdump: this
/// binary exports them (app/build.rs), so the dynamic linker binds
/// librte_pdump's calls here, and a capture that stops waits for the RX
/// lcores before dumpcap frees what the callback copies into
/// (`dpdk_sys::pdump::remove_then_quiesce`, `runtime::setup::quiesce_on_capture_stop`).
/// Defined in the binary only, so no library of the project overrides
/// DPDK's functions in someone else's process.
#[cfg(not(loom))]
mod pdump_interpose {
    use std::ffi::c_int;

    use dpdk_sys::pdump::{remove_then_quiesce, RxTxCallback};

    /// # Safety
    /// DPDK's contract for `rte_eth_remove_rx_callback`.
    #[no_mangle]
    pub unsafe extern "C" fn rte_eth_remove_rx_callback(
        port_id: u16,
        queue_id: u16,
        user_cb: *const RxTxCallback,
    ) -> c_int {
        // SAFETY: the name is the one this function stands for, and the
        // caller's arguments go on unchanged under DPDK's contract.
        unsafe { remove_then_quiesce(c"rte_eth_remove_rx_callback", port_id, queue_id, user_cb) }
    }

    /// # Safety
    /// DPDK's contract for `rte_eth_remove_tx_callback`.
    #[no_mangle]
    pub unsafe extern "C" fn rte_eth_remove_tx_callback(
        port_id: u16,
        queue_id: u16,
        user_cb: *const RxTxCallback,
    ) -> c_int {
        // SAFETY: as for the RX twin above.
        unsafe { remove_then_quiesce(c"rte_eth_remove_tx_callback", port_id, queue_id, user_cb) }
    }
}
