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

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use kiln_agent::{Agent, AgentConfig, MemorySink};
use kiln_model::{Frame, FrameKind, label_names};

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

/// Kills the processes when dropped.
struct Busy(Vec<Child>);

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One configuration's figures.
struct Figures {
    ns_per_sample: f64,
    agent_cpu_percent: f64,
    samples: u64,
    python_frames_per_sample: f64,
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn measure(args: &Args, busy: &Busy, python: bool) -> anyhow::Result<Figures> {
    let mut agent = Agent::start(AgentConfig {
        frequency_hz: args.frequency,
        interval: Duration::from_secs(1),
        python,
        ..AgentConfig::default()
    })
    .context("starting the agent (root is needed)")?;
    let mut sink = MemorySink::default();
    let pids: Vec<u32> = busy.0.iter().map(Child::id).collect();
    let settling = Instant::now();
    while !pids
        .iter()
        .all(|&p| agent.unwind_tables_loaded(p) && (!python || agent.python_version(p).is_some()))
    {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink)?;
        if settling.elapsed() > Duration::from_secs(60) {
            bail!("the busy processes were not all loaded within 60 s");
        }
    }
    agent.tick(&mut sink)?;
    let first = sink.batches.len();
    let (run0, runs0) = agent.kernel_cost()?;
    let cpu0 = cpu_time();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink)?;
    }
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu0;
    let (run1, runs1) = agent.kernel_cost()?;

    // Python frames in the busy processes' samples.
    let wanted: Vec<String> = pids.iter().map(u32::to_string).collect();
    let (mut frames, mut stacks, mut labels) = (HashMap::new(), HashMap::new(), HashMap::new());
    let (mut samples, mut python_frames) = (0u64, 0u64);
    for (i, batch) in sink.batches.iter().enumerate() {
        frames.extend(batch.frames.iter().map(|e| (e.id, e.frame.clone())));
        stacks.extend(batch.stacks.iter().map(|e| (e.id, e.frames.clone())));
        labels.extend(batch.label_sets.iter().map(|e| (e.id, e.labels.clone())));
        if i < first {
            continue;
        }
        for s in &batch.samples {
            let pid = labels
                .get(&s.labels)
                .and_then(|l: &kiln_model::LabelSet| l.get(label_names::PID));
            if !pid.is_some_and(|p| wanted.iter().any(|w| w == p)) {
                continue;
            }
            let n = stacks
                .get(&s.stack)
                .map_or(0, |ids: &Vec<kiln_model::FrameId>| {
                    ids.iter()
                        .filter(|id| {
                            matches!(
                                frames.get(id),
                                Some(Frame::Named {
                                    kind: FrameKind::Python,
                                    ..
                                })
                            )
                        })
                        .count()
                });
            samples += s.count;
            python_frames += n as u64 * s.count;
        }
    }
    Ok(Figures {
        ns_per_sample: (run1 - run0).as_nanos() as f64 / (runs1 - runs0).max(1) as f64,
        agent_cpu_percent: 100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        samples,
        python_frames_per_sample: python_frames as f64 / samples.max(1) as f64,
    })
}

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
    // BPF run-time statistics, on until dropped.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    println!(
        "{} processes of {} spinning {} Python frames deep; {} Hz, {} s each",
        args.processes,
        args.python.display(),
        args.depth,
        args.frequency,
        args.seconds
    );
    println!(
        "{:<18} {:>14} {:>12} {:>9} {:>16}",
        "configuration", "eBPF ns/sample", "agent CPU", "samples", "py frames/sample"
    );
    let mut rows = Vec::new();
    for (name, python) in [("python unwinder", true), ("--no-python", false)] {
        let f = measure(&args, &busy, python)?;
        println!(
            "{name:<18} {:>14.0} {:>11.2}% {:>9} {:>16.1}",
            f.ns_per_sample, f.agent_cpu_percent, f.samples, f.python_frames_per_sample
        );
        rows.push(f);
    }
    println!(
        "ratio (unwinder / without): eBPF time per sample {:.2}x, agent CPU {:.2}x",
        rows[0].ns_per_sample / rows[1].ns_per_sample.max(1.0),
        rows[0].agent_cpu_percent / rows[1].agent_cpu_percent.max(1e-9)
    );
    drop(busy);
    let _ = std::fs::remove_file(&script);
    Ok(())
}
