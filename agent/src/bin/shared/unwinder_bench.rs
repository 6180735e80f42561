//! What `python_bench` and `jvm_bench` share: busy processes of a runtime,
//! profiled on the whole host with and without that runtime's unwinder,
//! and the figures of each run (eBPF ns per sample, agent CPU, frames of
//! the runtime per sample).

use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kiln_agent::{Agent, AgentConfig, MemorySink};
use kiln_model::{Frame, FrameKind, label_names};

/// Kills the processes when dropped.
pub(crate) struct Busy(pub(crate) Vec<Child>);

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
    /// Frames of the runtime's kind per sample of the busy processes.
    frames_per_sample: f64,
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

/// Profiles the host with `config` for `seconds` once `ready` says every
/// busy process is loaded; counts frames of `kind` in their samples.
fn measure(
    config: AgentConfig,
    busy: &Busy,
    seconds: u64,
    kind: FrameKind,
    ready: impl Fn(&Agent, u32) -> bool,
) -> anyhow::Result<Figures> {
    let mut agent = Agent::start(config).context("starting the agent (root is needed)")?;
    let mut sink = MemorySink::default();
    let pids: Vec<u32> = busy.0.iter().map(Child::id).collect();
    let settling = Instant::now();
    while !pids
        .iter()
        .all(|&p| agent.unwind_tables_loaded(p) && ready(&agent, p))
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
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink)?;
    }
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu0;
    let (run1, runs1) = agent.kernel_cost()?;

    let wanted: Vec<String> = pids.iter().map(u32::to_string).collect();
    let (mut frames, mut stacks, mut labels) = (HashMap::new(), HashMap::new(), HashMap::new());
    let (mut samples, mut runtime_frames) = (0u64, 0u64);
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
                            matches!(frames.get(id), Some(Frame::Named { kind: k, .. }) if *k == kind)
                        })
                        .count()
                });
            samples += s.count;
            runtime_frames += n as u64 * s.count;
        }
    }
    Ok(Figures {
        ns_per_sample: (run1 - run0).as_nanos() as f64 / (runs1 - runs0).max(1) as f64,
        agent_cpu_percent: 100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        samples,
        frames_per_sample: runtime_frames as f64 / samples.max(1) as f64,
    })
}

/// Measures `configs` (name, config, whether its unwinder is on) in turn
/// and prints a row each, then the first's ratios to the second; `ready`
/// says when the unwinder has found a process.
pub(crate) fn compare(
    busy: &Busy,
    seconds: u64,
    kind: FrameKind,
    frames_header: &str,
    configs: [(&str, AgentConfig, bool); 2],
    ready: impl Fn(&Agent, u32) -> bool,
) -> anyhow::Result<()> {
    // BPF run-time statistics, on until dropped.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    println!(
        "{:<18} {:>14} {:>12} {:>9} {:>18}",
        "configuration", "eBPF ns/sample", "agent CPU", "samples", frames_header
    );
    let mut rows = Vec::new();
    for (name, config, on) in configs {
        let f = measure(config, busy, seconds, kind, |agent, pid| {
            !on || ready(agent, pid)
        })?;
        println!(
            "{name:<18} {:>14.0} {:>11.2}% {:>9} {:>18.1}",
            f.ns_per_sample, f.agent_cpu_percent, f.samples, f.frames_per_sample
        );
        rows.push(f);
    }
    println!(
        "ratio (unwinder / without): eBPF time per sample {:.2}x, agent CPU {:.2}x",
        rows[0].ns_per_sample / rows[1].ns_per_sample.max(1.0),
        rows[0].agent_cpu_percent / rows[1].agent_cpu_percent.max(1e-9)
    );
    Ok(())
}
