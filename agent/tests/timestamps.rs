//! Samples keep the second they were taken, whatever the interval between
//! drains: with a 3 s interval, on the whole host, no second holds more
//! samples than the host's CPUs can take in one (a chart of CPU over time
//! would otherwise show three seconds' work in one and claim three times
//! the machine's cores).
//!
//! Needs root (or CAP_BPF + CAP_PERFMON) and the agent built with its
//! eBPF program.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink};

use support::require_root;

const FREQUENCY_HZ: u64 = 99;

// Guards per-second sample timestamps (issue 17): samples spread over the
// seconds they were taken in, and no second holds several seconds' worth.
// (A virtual machine's idle CPUs may take fewer samples than their share:
// only the upper bound is the machine's.)
#[test]
fn no_second_holds_more_samples_than_the_cpus_take() {
    require_root();
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(3),
        host: "kiln-agent-test".into(),
        ..AgentConfig::default()
    });
    let cpus = agent.cpus() as u64;
    let mut sink = MemorySink::default();
    let started = Instant::now();
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();
    while started.elapsed() < Duration::from_secs(12) {
        std::thread::sleep(Duration::from_secs(3));
        agent.tick(&mut sink).unwrap();
    }
    let mut per_second: BTreeMap<i64, u64> = BTreeMap::new();
    for batch in &sink.batches[first..] {
        for s in &batch.samples {
            *per_second
                .entry(s.timestamp_ns.div_euclid(1_000_000_000))
                .or_default() += s.count;
        }
    }
    // The first and last seconds are partly outside the drains.
    let whole: Vec<u64> = per_second.values().copied().skip(1).collect();
    let whole = &whole[..whole.len().saturating_sub(1)];
    let most = whole.iter().copied().max().unwrap_or(0);
    let capacity = cpus * FREQUENCY_HZ;
    eprintln!(
        "{} whole seconds; samples per second: most {most}, least {}, the host's {cpus} CPUs take {capacity}",
        whole.len(),
        whole.iter().min().unwrap_or(&0)
    );
    assert!(
        whole.len() >= 7,
        "samples fell in only {} distinct seconds: {per_second:?}",
        whole.len()
    );
    assert!(
        most * 100 <= capacity * 110,
        "a second holds {most} samples, more than {cpus} CPUs at {FREQUENCY_HZ} Hz take: {per_second:?}"
    );
}
