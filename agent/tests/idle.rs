//! Busy plus idle is the machine: on the whole host, with no spinner, one,
//! and one per CPU, the agent's samples of each interval (busy stacks and
//! the idle stack) add up to every CPU's whole time, and its busy share is
//! the kernel's own (`/proc/stat`), each within 10 % of the CPU count.
//! Other tests may run beside this one: the truth is the kernel's count of
//! the same interval, not what this test's spinners alone would make.
//!
//! Needs root, as the other agent tests.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kiln_agent::AgentConfig;

const FREQUENCY_HZ: u64 = 100;
/// How long each load is measured.
const MEASURE: Duration = Duration::from_secs(4);

/// Busy and total ticks of all CPUs, from `/proc/stat`'s `cpu` line.
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().next().unwrap();
    // user nice system idle iowait irq softirq steal
    let v: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap())
        .collect();
    let total: u64 = v.iter().sum();
    (total - v[3] - v[4], total)
}

/// Threads that spin until dropped.
struct Spinners(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Spinners {
    fn start(n: usize) -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    }
                })
            })
            .collect();
        Spinners(stop, threads)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn busy_and_idle_add_up_to_the_cpus_at_every_load() {
    support::require_root();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-idle-test".into(),
        ..AgentConfig::default()
    });
    let idle_stack = kiln_model::idle_stack_id();
    for spinners in [0, 1, cpus] {
        let _load = Spinners::start(spinners);
        std::thread::sleep(Duration::from_millis(500));
        agent.collect().unwrap();
        let (busy0, total0) = cpu_ticks();
        let start = Instant::now();
        std::thread::sleep(MEASURE);
        let batch = agent.collect().unwrap();
        let elapsed = start.elapsed().as_secs_f64();
        let (busy1, total1) = cpu_ticks();
        let (mut busy, mut idle) = (0u64, 0u64);
        for s in &batch.samples {
            if s.stack == idle_stack {
                idle += s.count;
            } else {
                busy += s.count;
            }
        }
        let per_cpu = FREQUENCY_HZ as f64 * elapsed;
        let seen_cpus = (busy + idle) as f64 / per_cpu;
        let busy_cores = busy as f64 / per_cpu;
        let truth = cpus as f64 * (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
        println!(
            "{spinners} spinners: busy {busy_cores:.2} cores (kernel: {truth:.2}), \
             busy + idle {seen_cpus:.2} of {cpus} CPUs"
        );
        assert!(
            (seen_cpus - cpus as f64).abs() <= 0.1 * cpus as f64,
            "{spinners} spinners: busy + idle is {seen_cpus:.2} CPUs, not {cpus}"
        );
        assert!(
            (busy_cores - truth).abs() <= 0.1 * cpus as f64,
            "{spinners} spinners: busy {busy_cores:.2} cores, the kernel counted {truth:.2}"
        );
    }
}
