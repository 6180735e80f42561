//! Off-CPU profiling on this machine's real kernel: a C workload whose
//! waiting thread spends about 70% of its time off CPU in one function
//! (nanosleep) and 30% in another (poll), built without frame pointers,
//! profiled with `off_cpu` on in a cgroup of its own. Checks the off-CPU
//! weights, that they come apart from the CPU samples (their own batches,
//! in nanoseconds, labelled `device_kind=off_cpu`), and prints the off-CPU
//! program's cost per context switch from BPF run-time statistics.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON), clang, the agent built with its
//! eBPF program, and Linux 5.18 with BTF.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_agent::{Agent, AgentConfig, MemorySink, OFF_CPU_DEVICE_KIND};
use kiln_model::{Frame, FrameKind, label_names};
use kiln_test_support::CBuild;

use support::{Resolved, Symbols, TestCgroup, Workload, require_root, resolve_labelled};

/// CPU samples a second: enough for the CPU side to be checked.
const FREQUENCY_HZ: u64 = 99;
/// Off-CPU profile this long once the workload's tables are in: about 800
/// waits of each kind, so the shares are known well within a point.
const PROFILE_FOR: Duration = Duration::from_secs(8);
const TOLERANCE_POINTS: f64 = 5.0;

/// Whether a sample is an off-CPU one.
fn off_cpu(s: &Resolved) -> bool {
    s.labels.get(label_names::DEVICE_KIND) == Some(OFF_CPU_DEVICE_KIND)
}

fn compile(dir: &Path) -> std::path::PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/offcpu.c");
    let out = dir.join("offcpu");
    // Without frame pointers: the waits' user stacks are walked with the
    // .eh_frame tables, as the CPU samples' are.
    CBuild::clang()
        .args(["-O2", "-fomit-frame-pointer", "-pthread"])
        .file(&source, &out);
    out
}

/// (run time, runs) of the off-CPU program so far.
fn off_cpu_cost(agent: &Agent) -> (Duration, u64) {
    agent
        .off_cpu_kernel_cost()
        .expect("off-CPU profiling is on")
        .expect("reading the off-CPU program's statistics")
}

// Guards off-CPU profiling end to end: waits weighted by their time under
// the function that waited, whole user stacks and the kernel stack of each
// wait, and CPU samples unaffected.
#[test]
fn waits_are_weighted_by_time_apart_from_cpu_samples() {
    require_root();
    let Some(cgroup) = TestCgroup::create("off-cpu") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let symbols = Symbols::of(&exe);
    // Counts the programs' run time from here on (off again when dropped).
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("enable BPF stats");

    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        cgroup: Some(cgroup.path().to_owned()),
        off_cpu: true,
        off_cpu_threshold: Duration::from_millis(1),
        ..AgentConfig::default()
    });
    assert!(
        agent.off_cpu(),
        "off-CPU profiling did not start (see the log): it needs Linux 5.18 with BTF"
    );
    let mut sink = MemorySink::default();
    let workload = Workload(
        cgroup
            .command(&exe)
            .arg("120")
            .spawn()
            .expect("start the workload"),
    );
    let pid = workload.0.id().to_string();

    // Leave out the time until its unwind tables are in.
    let loading = Instant::now();
    while !agent.unwind_tables_loaded(workload.0.id()) {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
        assert!(
            loading.elapsed() < Duration::from_secs(30),
            "the workload's unwind tables were not loaded within 30 s: {:?}",
            agent.unwind_stats()
        );
    }
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();
    let (switch_ns0, switches0) = off_cpu_cost(&agent);
    let (sample_ns0, samples0) = agent.kernel_cost().unwrap();
    let started = Instant::now();
    let mut off_cpu_ns = 0;
    while started.elapsed() < PROFILE_FOR {
        std::thread::sleep(Duration::from_secs(1));
        off_cpu_ns += agent.tick(&mut sink).unwrap().off_cpu_ns;
    }
    let elapsed = started.elapsed();
    let (switch_ns1, switches1) = off_cpu_cost(&agent);
    let (sample_ns1, samples1) = agent.kernel_cost().unwrap();
    drop(workload);

    let switches = switches1 - switches0;
    let per_switch = (switch_ns1 - switch_ns0).as_nanos() as f64 / switches.max(1) as f64;
    let per_sample =
        (sample_ns1 - sample_ns0).as_nanos() as f64 / (samples1 - samples0).max(1) as f64;
    eprintln!(
        "off-CPU program: {switches} context switches on the host in {:.1} s, {per_switch:.0} ns \
         each on average (CPU sampler: {per_sample:.0} ns a sample)",
        elapsed.as_secs_f64()
    );

    let samples = resolve_labelled(&sink.batches, first);
    // Apart: every off-CPU sample is in a batch of nanoseconds, every CPU
    // sample in one of samples at the sampling period.
    for s in &samples {
        match off_cpu(s) {
            true => assert_eq!(s.period_ns, 1, "an off-CPU sample in a CPU batch"),
            false => assert_eq!(
                s.period_ns,
                1_000_000_000 / FREQUENCY_HZ,
                "a CPU sample in an off-CPU batch"
            ),
        }
    }
    let (off, cpu): (Vec<_>, Vec<_>) = samples.iter().partition(|s| off_cpu(s));
    let off_total: u64 = off.iter().map(|s| s.count).sum();
    assert_eq!(off_total, off_cpu_ns, "TickReport::off_cpu_ns");
    // The cgroup filter: no thread outside it (this test's own, which
    // sleeps between ticks) is recorded.
    let strangers: Vec<_> = off
        .iter()
        .filter(|s| s.pid() != Some(pid.as_str()))
        .map(|s| (s.labels.clone(), s.count))
        .collect();
    assert!(
        strangers.is_empty(),
        "waits outside the cgroup: {strangers:?}"
    );

    // The waiting thread is off CPU nearly all the time.
    let n = off_total as f64;
    eprintln!(
        "off CPU: {:.2} s of the workload's in {:.2} s",
        n / 1e9,
        elapsed.as_secs_f64()
    );
    assert!(
        n > 0.8e9 * elapsed.as_secs_f64() && n < 1.1e9 * elapsed.as_secs_f64(),
        "{:.2} s off CPU in {:.2} s: expected about one thread's wall time",
        n / 1e9,
        elapsed.as_secs_f64()
    );
    let weight = |pred: &dyn Fn(&Resolved) -> bool| -> f64 {
        100.0 * off.iter().filter(|s| pred(s)).map(|s| s.count).sum::<u64>() as f64 / n
    };
    let has =
        |s: &Resolved, function: &str| s.frames.iter().any(|f| symbols.name(f) == Some(function));
    let kernel_has = |s: &Resolved, part: &str| {
        s.frames.iter().any(|f| {
            matches!(f, Frame::Named { kind: FrameKind::Kernel, function, .. } if function.contains(part))
        })
    };
    let long = weight(&|s| has(s, "wait_long"));
    let short = weight(&|s| has(s, "wait_short"));
    let whole = weight(&|s| has(s, "waiter") && has(s, "wait_loop"));
    let long_in_nanosleep = weight(&|s| has(s, "wait_long") && kernel_has(s, "nanosleep"));
    let short_in_poll = weight(&|s| has(s, "wait_short") && kernel_has(s, "poll"));
    eprintln!(
        "off-CPU weight: wait_long {long:.1}% ({long_in_nanosleep:.1}% under a kernel \
         nanosleep frame), wait_short {short:.1}% ({short_in_poll:.1}% under a poll frame), \
         whole stacks (waiter -> wait_loop) {whole:.1}%"
    );
    for (function, got, truth) in [("wait_long", long, 70.0), ("wait_short", short, 30.0)] {
        assert!(
            (got - truth).abs() <= TOLERANCE_POINTS,
            "{function}: {got:.1}% of the off-CPU weight, expected {truth}% ± {TOLERANCE_POINTS}"
        );
    }
    assert!(
        whole >= 95.0,
        "only {whole:.1}% of the weight has whole user stacks"
    );
    assert!(
        long_in_nanosleep >= 0.95 * long && short_in_poll >= 0.95 * short,
        "the waits' kernel stacks are not where they waited"
    );

    // The CPU profile: the workload's samples are CPU samples (the burning
    // thread's, about one CPU's worth), with no off-CPU weight among them.
    let ours: Vec<_> = cpu
        .iter()
        .filter(|s| s.pid() == Some(pid.as_str()))
        .collect();
    let cpu_samples: u64 = ours.iter().map(|s| s.count).sum();
    let burning = ours
        .iter()
        .filter(|s| has(s, "burn"))
        .map(|s| s.count)
        .sum::<u64>();
    let waiting = ours
        .iter()
        .filter(|s| has(s, "wait_long") || has(s, "wait_short"))
        .map(|s| s.count)
        .sum::<u64>();
    let at_most = 1.2 * FREQUENCY_HZ as f64 * elapsed.as_secs_f64();
    eprintln!(
        "CPU: {cpu_samples} samples of the workload (at most {at_most:.0} for one thread), \
         {burning} in burn, {waiting} in the wait functions"
    );
    assert!(
        cpu_samples as f64 <= at_most && cpu_samples as f64 >= 0.3 * at_most,
        "{cpu_samples} CPU samples of the workload: expected one thread's at {FREQUENCY_HZ} Hz"
    );
    assert!(
        burning as f64 >= 0.9 * cpu_samples as f64,
        "{burning} of {cpu_samples} in burn"
    );
    assert!(
        (waiting as f64) <= 0.05 * cpu_samples as f64,
        "{waiting} CPU samples in the wait functions: off-CPU time leaked into the CPU profile"
    );
}
