//! `agent_bench`: what the agent costs on this machine with every core
//! busy. Needs root and clang (it compiles the test workload).
//!
//! For each frequency (19 Hz and 99 Hz by default) it starts one copy of
//! `tests/workloads/shares.c` per CPU (frame-pointer build, so stacks are
//! real), runs the agent in this process for `--seconds` with a sink that
//! encodes and counts every batch, and reports:
//!
//! - agent CPU as a fraction of the machine's CPU: this process's user +
//!   system time (getrusage) plus the kernel's run time of the eBPF program,
//!   which getrusage cannot see because it is charged to the interrupted
//!   task (BPF run-time statistics are switched on for the run);
//! - ns per sample: the eBPF program alone, and everything;
//! - peak RSS of this process (the agent plus a few KiB of bench);
//! - bytes sent per busy core-minute: encoded batch bytes (what the HTTP
//!   sink posts), overall and without the first batch, which carries the
//!   whole dictionary.
//!
//! ```text
//! sudo target/release/agent_bench [--seconds 60] [--frequencies 19,99] [--no-eh-frame]
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kiln_agent::{Agent, AgentConfig, Delivery, Sink, SinkError};
use kiln_model::{Batch, Frame, label_names};

/// Encodes each batch as the HTTP sink would and counts the bytes: of the
/// whole batch, and of the part that is the burners' own samples (this
/// machine is shared, and other processes' stacks would blur the figure).
#[derive(Default)]
struct CountingSink {
    burner_pids: HashSet<String>,
    batches: u64,
    bytes: u64,
    first_bytes: u64,
    burner_bytes: u64,
    burner_first_bytes: u64,
}

impl Sink for CountingSink {
    fn send(&mut self, batch: &Batch) -> Result<Delivery, SinkError> {
        let n = batch.encode().len() as u64;
        let own = burners_only(batch, &self.burner_pids).encode().len() as u64;
        if self.batches == 0 {
            self.first_bytes = n;
            self.burner_first_bytes = own;
        }
        self.batches += 1;
        self.bytes += n;
        self.burner_bytes += own;
        Ok(Delivery::Delivered)
    }
}

/// The batch the agent would have sent had the burners been alone: their
/// samples, and the dictionary entries of this batch those refer to.
fn burners_only(batch: &Batch, pids: &HashSet<String>) -> Batch {
    let labels: HashSet<_> = batch
        .label_sets
        .iter()
        .filter(|l| {
            l.labels
                .get(label_names::PID)
                .is_some_and(|p| pids.contains(p))
        })
        .map(|l| l.id)
        .collect();
    let samples: Vec<_> = batch
        .samples
        .iter()
        .filter(|s| labels.contains(&s.labels))
        .cloned()
        .collect();
    let stacks: HashSet<_> = samples.iter().map(|s| s.stack).collect();
    let stack_entries: Vec<_> = batch
        .stacks
        .iter()
        .filter(|s| stacks.contains(&s.id))
        .cloned()
        .collect();
    let frames: HashSet<_> = stack_entries.iter().flat_map(|s| s.frames.iter()).collect();
    let frame_entries: Vec<_> = batch
        .frames
        .iter()
        .filter(|f| frames.contains(&f.id))
        .cloned()
        .collect();
    let files: HashSet<_> = frame_entries
        .iter()
        .filter_map(|f| match f.frame {
            Frame::Address { file_id, .. } => Some(file_id),
            Frame::Named { .. } => None,
        })
        .collect();
    Batch {
        source: batch.source.clone(),
        sent_at_ns: batch.sent_at_ns,
        period_ns: batch.period_ns,
        // The sampler's batches carry no metric points.
        metrics: Vec::new(),
        frames: frame_entries,
        stacks: stack_entries,
        label_sets: batch
            .label_sets
            .iter()
            .filter(|l| labels.contains(&l.id))
            .cloned()
            .collect(),
        executables: batch
            .executables
            .iter()
            .filter(|e| files.contains(&e.file_id))
            .cloned()
            .collect(),
        samples,
    }
}

struct Burners(Vec<Child>);

impl Drop for Burners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn peak_rss_kib() -> u64 {
    // SAFETY: as above.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    usage.ru_maxrss as u64
}

fn compile_workload() -> anyhow::Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c");
    let dir = std::env::temp_dir().join(format!("kiln-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("shares");
    let status = Command::new("clang")
        .args(["-O2", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .context("running clang (apt-get install clang)")?;
    if !status.success() {
        bail!("compiling {} failed", source.display());
    }
    Ok(out)
}

struct Row {
    frequency: u64,
    fraction: f64,
    bpf_ns_per_sample: f64,
    total_ns_per_sample: f64,
    samples: u64,
    rss_kib: u64,
    bytes_per_core_minute: f64,
    steady_bytes_per_core_minute: f64,
    burner_bytes_per_core_minute: f64,
    burner_steady_bytes_per_core_minute: f64,
}

fn run(workload: &Path, frequency: u64, seconds: u64, unwind_tables: bool) -> anyhow::Result<Row> {
    let cpus = std::thread::available_parallelism()?.get();
    let burners = Burners(
        (0..cpus)
            .map(|_| {
                Command::new(workload)
                    .args([&(seconds + 10).to_string(), "cpu"])
                    .spawn()
            })
            .collect::<Result<_, _>>()?,
    );
    std::thread::sleep(Duration::from_millis(500));

    let mut agent = Agent::start(AgentConfig {
        frequency_hz: frequency,
        unwind_tables,
        ..AgentConfig::default()
    })?;
    let mut sink = CountingSink {
        burner_pids: burners.0.iter().map(|c| c.id().to_string()).collect(),
        ..CountingSink::default()
    };
    let interval = agent.config().interval;
    // From here on: loading the program is a one-time cost, left out.
    let (bpf0, runs0) = agent.kernel_cost()?;
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut next = started + interval;
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += interval;
        agent.tick(&mut sink)?;
    }
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu0;
    let (bpf1, runs1) = agent.kernel_cost()?;
    drop(burners);
    let (bpf, samples) = (bpf1 - bpf0, runs1 - runs0);
    if samples == 0 {
        bail!("the eBPF program's run count did not move: BPF statistics are off");
    }
    let total = cpu + bpf;
    let core_minutes = cpus as f64 * wall.as_secs_f64() / 60.0;
    // The first batch carries the whole dictionary; later ones mostly
    // sample rows referring to it.
    let steady_share = sink.batches.saturating_sub(1) as f64 / sink.batches.max(1) as f64;
    Ok(Row {
        frequency,
        fraction: total.as_secs_f64() / (wall.as_secs_f64() * cpus as f64),
        bpf_ns_per_sample: bpf.as_nanos() as f64 / samples as f64,
        total_ns_per_sample: total.as_nanos() as f64 / samples as f64,
        samples,
        rss_kib: peak_rss_kib(),
        bytes_per_core_minute: sink.bytes as f64 / core_minutes,
        steady_bytes_per_core_minute: (sink.bytes - sink.first_bytes) as f64
            / (core_minutes * steady_share),
        burner_bytes_per_core_minute: sink.burner_bytes as f64 / core_minutes,
        burner_steady_bytes_per_core_minute: (sink.burner_bytes - sink.burner_first_bytes) as f64
            / (core_minutes * steady_share),
    })
}

fn main() -> anyhow::Result<()> {
    let mut seconds = 60;
    let mut frequencies = vec![19, 99];
    let mut unwind_tables = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().context("--seconds N")?.parse()?,
            "--frequencies" => {
                frequencies = args
                    .next()
                    .context("--frequencies A,B")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--no-eh-frame" => unwind_tables = false,
            other => {
                bail!("unknown argument {other:?} (--seconds N, --frequencies A,B, --no-eh-frame)")
            }
        }
    }
    let workload = compile_workload()?;
    // Keeps BPF run-time statistics on while the fd lives.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (needs root)")?;
    println!(
        "| Hz | agent CPU (% of machine) | eBPF ns/sample | all ns/sample | samples | peak RSS \
         | bytes/busy core-min: host, steady | burners alone, steady |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for frequency in frequencies {
        let r = run(&workload, frequency, seconds, unwind_tables)?;
        println!(
            "| {} | {:.3}% | {:.0} | {:.0} | {} | {:.1} MiB | {:.0}, {:.0} | {:.0}, {:.0} |",
            r.frequency,
            100.0 * r.fraction,
            r.bpf_ns_per_sample,
            r.total_ns_per_sample,
            r.samples,
            r.rss_kib as f64 / 1024.0,
            r.bytes_per_core_minute,
            r.steady_bytes_per_core_minute,
            r.burner_bytes_per_core_minute,
            r.burner_steady_bytes_per_core_minute,
        );
    }
    let _ = std::fs::remove_dir_all(workload.parent().unwrap_or(Path::new("/nonexistent")));
    Ok(())
}
