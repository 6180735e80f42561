//! `python_bench`: what reading Python frames costs. Needs root.
//!
//! Starts `--processes` CPython processes (default 10) that each spin at
//! the bottom of a `--depth`-deep (default 50) Python call chain, then
//! profiles the whole host at `--frequency` (default 19 Hz, the agent's
//! default) twice in one run, on the same processes: once with the Python
//! unwinder and once without (`--no-python`). For each it reports the
//! eBPF program's time per sample (from BPF run-time statistics), the
//! agent's own CPU (user + system, all its threads, as a share of one
//! core), and how many Python frames the samples of those processes
//! carry.
//!
//! ```text
//! sudo target/release/python_bench [--python /usr/bin/python3.11] [--seconds 20]
//! ```

#[path = "shared/unwinder_bench.rs"]
mod unwinder_bench;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kiln_agent::AgentConfig;
use kiln_model::FrameKind;
use unwinder_bench::Busy;

#[derive(Parser)]
#[command(about = "Times the agent's CPython unwinder against profiling without it")]
struct Args {
    /// The interpreter to run the busy processes with.
    #[arg(long, default_value = "/usr/bin/python3.11")]
    python: PathBuf,
    /// Busy Python processes.
    #[arg(long, default_value_t = 10)]
    processes: usize,
    /// Python frames below the spinning function.
    #[arg(long, default_value_t = 50)]
    depth: usize,
    /// Samples per second per CPU.
    #[arg(long, default_value_t = 19)]
    frequency: u64,
    /// Seconds each configuration is measured, once its tables are in.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
}

/// Recurses to the depth asked for, then spins there.
const SCRIPT: &str = r#"
import sys
def down(n):
    if n == 0:
        x = 0
        while True:
            for i in range(1000):
                x += i
    return down(n - 1)
sys.setrecursionlimit(10000)
down(int(sys.argv[1]))
"#;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let script = std::env::temp_dir().join(format!("kiln-python-bench-{}.py", std::process::id()));
    std::fs::write(&script, SCRIPT)?;
    let busy = Busy(
        (0..args.processes)
            .map(|_| {
                Command::new(&args.python)
                    .arg(&script)
                    .arg(args.depth.to_string())
                    .spawn()
                    .with_context(|| format!("starting {}", args.python.display()))
            })
            .collect::<anyhow::Result<_>>()?,
    );
    println!(
        "{} processes of {} spinning {} Python frames deep; {} Hz, {} s each",
        args.processes,
        args.python.display(),
        args.depth,
        args.frequency,
        args.seconds
    );
    let config = |python| AgentConfig {
        frequency_hz: args.frequency,
        interval: Duration::from_secs(1),
        python,
        ..AgentConfig::default()
    };
    unwinder_bench::compare(
        &busy,
        args.seconds,
        FrameKind::Python,
        "py frames/sample",
        [
            ("python unwinder", config(true), true),
            ("--no-python", config(false), false),
        ],
        |agent, pid| agent.python_version(pid).is_some(),
    )?;
    drop(busy);
    let _ = std::fs::remove_file(&script);
    Ok(())
}
