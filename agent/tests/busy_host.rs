//! The agent as a user runs it: on the whole host (no cgroup filter), with
//! its default unwind-table budget, on a host made busy the way a real one
//! is: hundreds of distinct live programs, each with a sizeable
//! `.eh_frame` and each waking now and then (so each is sampled and gets
//! its tables), and a real large binary (rustc, which maps the rustc
//! driver and LLVM libraries, 150 and 200 MB) compiling now and then. The
//! load is sized for a 2-core CI machine: the programs take about a fifth
//! of a core together, rustc about half of one. Then a
//! workload built without frame pointers must unwind as well as it does
//! alone: its samples reach `main`, in the shares it spends.
//!
//! This is the case the first unwinder failed in the field: a flat table
//! map that the host's running programs filled within seconds, and big
//! libraries refused outright. Root test on the real kernel, like
//! `profile.rs`. The busy host is `kiln_test_support::busy_host`, which
//! `peer_bench` runs the agent and its peers on too.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink, StackCoverage};
use kiln_test_support::busy_host::{BusyHost, PROGRAMS, build_programs};

use support::{Symbols, Workload, compile_workload, require_root, resolve};

const FREQUENCY_HZ: u64 = 299;
/// Samples of the workload the shares are read from: a share is then known
/// to about ±0.85 points, so ±3 is three and a half standard deviations of
/// noise (at 1,000 samples it was two, and a run read 26.6 for 30).
const MIN_WORKLOAD_SAMPLES: u64 = 3000;
const PROFILE_AT_MOST: Duration = Duration::from_secs(60);
const TOLERANCE_POINTS: f64 = 3.0;
const ROOTED_AT_LEAST: f64 = 0.99;

// Guards unwinding on a whole, busy host with default flags: the unwind
// tables of hundreds of running programs and of a 200 MB library do not
// crowd out a new program's, whose samples reach main (≥ 99%) in the
// shares it spends (±3 points).
#[test]
fn a_workload_unwinds_whole_on_a_busy_host() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let programs = build_programs(dir.path());
    let exe = compile_workload(dir.path(), &["-O2", "-fomit-frame-pointer"]);
    let symbols = Symbols::of(&exe);

    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        ..AgentConfig::default()
    });
    let mut sink = MemorySink::default();
    let mut busy = BusyHost::start(dir.path(), &programs);

    // The host settles: every program has been sampled a few times, and
    // rustc's libraries' tables are built.
    let settling = Instant::now();
    let mut coverage = StackCoverage::default();
    while settling.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_secs(1));
        coverage = agent.tick(&mut sink).unwrap().coverage;
    }
    let loaded = busy
        .pids()
        .filter(|&pid| agent.unwind_tables_loaded(pid))
        .count();
    let settled = agent.unwind_stats().unwrap();
    eprintln!(
        "busy host settled: {loaded} of {PROGRAMS} programs with their tables loaded, \
         {settled:?}, last interval's walks {coverage:?}"
    );

    // The new program: its tables must find room among all of that.
    let workload = Workload(
        Command::new(&exe)
            .args([&(PROFILE_AT_MOST.as_secs() + 20).to_string(), "cpu"])
            .spawn()
            .unwrap(),
    );
    let pid = workload.0.id();
    let waited = Instant::now();
    while !agent.unwind_tables_loaded(pid) {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the workload's unwind tables were not loaded within 20 s on the busy host: {:?}",
            agent.unwind_stats()
        );
        std::thread::sleep(Duration::from_millis(100));
        agent.tick(&mut sink).unwrap();
    }
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();
    let pid_label = pid.to_string();
    let started = Instant::now();
    let mut host_walks = StackCoverage::default();
    let samples = loop {
        std::thread::sleep(Duration::from_secs(1));
        let c = agent.tick(&mut sink).unwrap().coverage;
        host_walks.rooted += c.rooted;
        host_walks.no_table += c.no_table;
        host_walks.evicted += c.evicted;
        host_walks.no_mapping += c.no_mapping;
        host_walks.bad_frame += c.bad_frame;
        host_walks.depth += c.depth;
        let samples: Vec<_> = resolve(&sink.batches, first)
            .into_iter()
            .filter(|s| s.0.as_deref() == Some(pid_label.as_str()))
            .collect();
        let n: u64 = samples.iter().map(|s| s.2).sum();
        if n >= MIN_WORKLOAD_SAMPLES || started.elapsed() >= PROFILE_AT_MOST {
            break samples;
        }
    };
    let rustc_runs = busy.stop_compiling();
    let stats = agent.unwind_stats().unwrap();
    drop(workload);
    drop(busy);

    let total: u64 = samples.iter().map(|s| s.2).sum();
    let under = |name: &str| -> u64 {
        samples
            .iter()
            .filter(|s| s.1.iter().any(|f| symbols.name(f) == Some(name)))
            .map(|s| s.2)
            .sum()
    };
    let rooted = under("main");
    let shares: Vec<f64> = ["work_sixty", "work_thirty", "work_ten"]
        .iter()
        .map(|f| 100.0 * under(f) as f64 / total.max(1) as f64)
        .collect();
    eprintln!(
        "workload: {rooted} of {total} samples reach main, shares {shares:.1?} (truth 60/30/10); \
         rustc ran {rustc_runs} times; unwinder {stats:?}; host walks {host_walks:?} \
         ({:.1}% rooted)",
        100.0 * host_walks.rooted_share().unwrap_or(0.0)
    );
    assert!(
        total >= MIN_WORKLOAD_SAMPLES / 2,
        "only {total} samples of the workload in {PROFILE_AT_MOST:?}"
    );
    assert!(
        rooted as f64 >= ROOTED_AT_LEAST * total as f64,
        "only {rooted} of {total} samples reach main"
    );
    for (share, truth) in shares.iter().zip([60.0, 30.0, 10.0]) {
        assert!(
            (share - truth).abs() <= TOLERANCE_POINTS,
            "shares {shares:.1?}, truth 60/30/10"
        );
    }
    // The big libraries got tables: none was refused for its size, and
    // the largest built is LLVM-sized.
    let (largest_rows, _) = stats.largest_build.expect("tables were built");
    assert!(
        largest_rows >= 500_000,
        "the largest table built has {largest_rows} rows: rustc's libraries got none"
    );
    assert_eq!(stats.refused, 0, "tables found no room: {stats:?}");
}
