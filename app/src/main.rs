//! The `udpdemux` command: run the engine, check a config, generate traffic.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use udpdemux::config::Config;
use udpdemux::engine::{self, RunOptions};

#[global_allocator]
static ALLOC: udpdemux::alloc_guard::CountingAlloc = udpdemux::alloc_guard::CountingAlloc;

#[derive(Parser)]
#[command(name = "udpdemux", version, about = "Kernel-bypass UDP receive engine on DPDK")]
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
        #[arg(long)]
        bare: bool,
    },
    /// Generate traffic: write a pcap (with a manifest of exact counts) or transmit on a DPDK port.
    Gen(udpdemux::gen::GenArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Run { config, duration, stats_json, bare } => (|| -> anyhow::Result<()> {
            let cfg = Config::load(&config)?;
            if let Some(d) = duration {
                if !(d.is_finite() && d > 0.0) {
                    anyhow::bail!("--duration must be a positive number of seconds");
                }
            }
            engine::run(&cfg, &RunOptions { duration, stats_json, bare, config_path: Some(config.clone()) })?;
            Ok(())
        })(),
        Cmd::Gen(args) => udpdemux::gen::run(&args),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain joined, never a backtrace.
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("udpdemux: error: {}", msg.join(": "));
            ExitCode::from(1)
        }
    }
}
