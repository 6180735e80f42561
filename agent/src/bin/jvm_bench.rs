//! `jvm_bench`: what reading Java frames costs. Needs root, and a JDK
//! (`javac`).
//!
//! Starts `--processes` JVMs (default 4) that each spin at the bottom of a
//! `--depth`-deep (default 50) Java call chain (JIT-compiled after a
//! moment, as a service's code is), then profiles the whole host at
//! `--frequency` (default 19 Hz, the agent's default) twice in one run, on
//! the same processes: once with the JVM unwinder and once without
//! (`--no-java`). For each it reports the eBPF program's time per sample
//! (from BPF run-time statistics), the agent's own CPU (user + system, all
//! its threads, as a share of one core), and how many JVM frames the
//! samples of those processes carry.
//!
//! ```text
//! sudo target/release/jvm_bench [--java /usr/lib/jvm/java-17-openjdk-amd64/bin/java] [--seconds 20]
//! ```

#[path = "shared/unwinder_bench.rs"]
mod unwinder_bench;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kiln_agent::AgentConfig;
use kiln_model::FrameKind;
use unwinder_bench::Busy;

#[derive(Parser)]
#[command(about = "Times the agent's JVM unwinder against profiling without it")]
struct Args {
    /// The `java` to run the busy processes with.
    #[arg(long, default_value = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java")]
    java: PathBuf,
    /// The `javac` that compiles them.
    #[arg(long, default_value = "javac")]
    javac: PathBuf,
    /// Busy JVMs.
    #[arg(long, default_value_t = 4)]
    processes: usize,
    /// Java frames below the spinning method.
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
const SOURCE: &str = r#"
public final class Deep {
    static volatile long sink;
    static long down(int n) {
        if (n == 0) {
            long x = 0;
            while (true) {
                for (int i = 0; i < 1000; i++) x += i;
                sink = x;
            }
        }
        return down(n - 1) + 1;
    }
    public static void main(String[] args) {
        sink = down(Integer.parseInt(args[0]));
    }
}
"#;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("kiln-jvm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("Deep.java"), SOURCE)?;
    let compiled = Command::new(&args.javac)
        .arg("-d")
        .arg(&dir)
        .arg(dir.join("Deep.java"))
        .status()
        .with_context(|| format!("running {}", args.javac.display()))?;
    if !compiled.success() {
        bail!("{} failed", args.javac.display());
    }
    let busy = Busy(
        (0..args.processes)
            .map(|_| {
                Command::new(&args.java)
                    .arg("-Xss8m")
                    .arg("-cp")
                    .arg(&dir)
                    .arg("Deep")
                    .arg(args.depth.to_string())
                    .spawn()
                    .with_context(|| format!("starting {}", args.java.display()))
            })
            .collect::<anyhow::Result<_>>()?,
    );
    println!(
        "{} JVMs ({}) spinning {} Java frames deep; {} Hz, {} s each",
        args.processes,
        args.java.display(),
        args.depth,
        args.frequency,
        args.seconds
    );
    let config = |java| AgentConfig {
        frequency_hz: args.frequency,
        interval: Duration::from_secs(1),
        java,
        ..AgentConfig::default()
    };
    unwinder_bench::compare(
        &busy,
        args.seconds,
        FrameKind::Jvm,
        "jvm frames/sample",
        [
            ("jvm unwinder", config(true), true),
            ("--no-java", config(false), false),
        ],
        |agent, pid| agent.jvm(pid).is_some(),
    )?;
    drop(busy);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
