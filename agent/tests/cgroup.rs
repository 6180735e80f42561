//! The agent told to profile one cgroup v2 (`--cgroup`): it samples the
//! processes in the cgroup and in the cgroups below it, and nothing else
//! on the host, whose processes get no unwind tables either.
//!
//! Root test on the real kernel, like `profile.rs`; it makes its cgroups
//! under the cgroup v2 mount, and skips, saying so, where there is none.

mod support;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink};

use support::{TestCgroup, Workload, compile_workload, require_root, resolve};

const FREQUENCY_HZ: u64 = 499;
/// Samples each busy process must get for its absence elsewhere to mean
/// something: a second of a busy process at 499 Hz gives hundreds.
const AT_LEAST: u64 = 100;

// Guards the filter in the eBPF program: a process in the cgroup and one
// in a cgroup below it are sampled and get unwind tables; a process
// outside, just as busy, is neither, and no other task of the host (the
// idle task, the test itself) shows up. An agent without the filter,
// running at the same time, sees the outside process, so its absence is
// the filter's doing.
#[test]
fn only_the_cgroup_and_those_below_it_are_profiled() {
    require_root();
    let Some(cgroup) = TestCgroup::create("profile-one") else {
        return;
    };
    let below = cgroup.child("below");
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_workload(dir.path(), &["-O2", "-fomit-frame-pointer"]);

    let config = AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        ..AgentConfig::default()
    };
    let mut filtered = support::start_agent(AgentConfig {
        cgroup: Some(cgroup.path().to_owned()),
        ..config.clone()
    });
    let mut everything = support::start_agent(config);
    let (mut filtered_sink, mut everything_sink) = (MemorySink::default(), MemorySink::default());

    let inside = Workload(cgroup.command(&exe).args(["60", "cpu"]).spawn().unwrap());
    let nested = Workload(below.command(&exe).args(["60", "cpu"]).spawn().unwrap());
    let outside = Workload(Command::new(&exe).args(["60", "cpu"]).spawn().unwrap());
    let [inside_pid, nested_pid, outside_pid] = [&inside, &nested, &outside].map(|w| w.0.id());

    // Profile until both agents have seen enough of the processes each
    // should see (or a deadline, on a machine too busy to give them CPU).
    let started = Instant::now();
    let (filtered_counts, everything_counts) = loop {
        std::thread::sleep(Duration::from_secs(1));
        filtered.tick(&mut filtered_sink).unwrap();
        everything.tick(&mut everything_sink).unwrap();
        let filtered_counts = samples_by_pid(&filtered_sink);
        let everything_counts = samples_by_pid(&everything_sink);
        let enough = |counts: &HashMap<Option<String>, u64>, pids: &[u32]| {
            pids.iter()
                .all(|pid| counts.get(&Some(pid.to_string())).copied().unwrap_or(0) >= AT_LEAST)
        };
        let tables_loaded =
            filtered.unwind_tables_loaded(inside_pid) && filtered.unwind_tables_loaded(nested_pid);
        if (enough(&filtered_counts, &[inside_pid, nested_pid])
            && enough(&everything_counts, &[outside_pid])
            && tables_loaded)
            || started.elapsed() > Duration::from_secs(30)
        {
            break (filtered_counts, everything_counts);
        }
    };
    let count = |counts: &HashMap<Option<String>, u64>, pid: u32| {
        counts.get(&Some(pid.to_string())).copied().unwrap_or(0)
    };
    eprintln!(
        "with --cgroup: {filtered_counts:?}; without: inside {}, below {}, outside {} of {} \
         samples (pids {inside_pid}, {nested_pid}, {outside_pid})",
        count(&everything_counts, inside_pid),
        count(&everything_counts, nested_pid),
        count(&everything_counts, outside_pid),
        everything_counts.values().sum::<u64>()
    );

    assert!(
        count(&everything_counts, outside_pid) >= AT_LEAST,
        "the agent without --cgroup sampled the outside process only {} times: too busy a \
         machine for this test to mean anything",
        count(&everything_counts, outside_pid)
    );
    for (what, pid) in [("in the cgroup", inside_pid), ("below it", nested_pid)] {
        let n = count(&filtered_counts, pid);
        assert!(n >= AT_LEAST, "the process {what} got only {n} samples");
        assert!(
            filtered.unwind_tables_loaded(pid),
            "the process {what} got no unwind tables"
        );
    }
    let strangers: Vec<_> = filtered_counts
        .iter()
        .filter(|(pid, _)| ![Some(inside_pid), Some(nested_pid)].contains(&pid_number(pid)))
        .collect();
    assert!(
        strangers.is_empty(),
        "the agent with --cgroup sampled tasks outside it (pid label: samples): {strangers:?}"
    );
    assert!(
        !filtered.unwind_tables_loaded(outside_pid),
        "the process outside the cgroup got unwind tables"
    );
}

/// Samples per pid label in every batch of `sink`.
fn samples_by_pid(sink: &MemorySink) -> HashMap<Option<String>, u64> {
    let mut counts = HashMap::new();
    for (pid, _, n) in resolve(&sink.batches, 0) {
        *counts.entry(pid).or_default() += n;
    }
    counts
}

fn pid_number(label: &Option<String>) -> Option<u32> {
    label.as_deref()?.parse().ok()
}
