//! Synthetic stacks and fleets.

use std::collections::HashSet;

use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet, label_names};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// A call graph: function `i` calls the functions in `callees[i]`.
#[derive(Debug)]
pub struct CallGraph {
    names: Vec<String>,
    callees: Vec<Vec<u32>>,
}

impl CallGraph {
    /// `functions` functions in `modules` modules, each calling 1 to
    /// `max_fanout` others; function 0 is `main`.
    pub fn new(functions: usize, modules: usize, max_fanout: usize, rng: &mut StdRng) -> Self {
        let names = (0..functions)
            .map(|i| match i {
                0 => "main".to_owned(),
                _ => format!("app::module_{}::function_{i}", i % modules.max(1)),
            })
            .collect();
        let callees = (0..functions)
            .map(|_| {
                let n = rng.random_range(1..=max_fanout.max(1));
                (0..n)
                    .map(|_| rng.random_range(1..functions as u32))
                    .collect()
            })
            .collect();
        Self { names, callees }
    }

    /// A random walk from `main`, `depth` frames deep.
    pub fn walk(&self, depth: usize, rng: &mut StdRng) -> Vec<u32> {
        let mut stack = Vec::with_capacity(depth);
        let mut at = 0u32;
        stack.push(at);
        while stack.len() < depth {
            let callees = &self.callees[at as usize];
            at = callees[rng.random_range(0..callees.len())];
            stack.push(at);
        }
        stack
    }

    /// The name of function `i`.
    pub fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }
}

/// A population of distinct stacks drawn with a Zipf distribution.
#[derive(Debug)]
pub struct StackPopulation {
    /// The stacks, root first, hottest first.
    pub stacks: Vec<Vec<Frame>>,
    zipf: Zipf<f64>,
}

impl StackPopulation {
    /// `distinct` stacks of depth 8 to 48, Zipf exponent `exponent` (1.0 to
    /// 1.2 is typical of real profiles: a few stacks dominate).
    pub fn new(distinct: usize, exponent: f64, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let graph = CallGraph::new((distinct / 4).max(64), 40, 6, &mut rng);
        let mut seen = HashSet::new();
        let mut stacks = Vec::with_capacity(distinct);
        while stacks.len() < distinct {
            let depth = rng.random_range(8..=48);
            let walk = graph.walk(depth, &mut rng);
            if seen.insert(walk.clone()) {
                stacks.push(
                    walk.iter()
                        .map(|&f| Frame::named(FrameKind::Native, graph.name(f)))
                        .collect(),
                );
            }
        }
        let zipf = Zipf::new(distinct as f64, exponent).expect("valid Zipf parameters");
        Self { stacks, zipf }
    }

    /// The index of a stack drawn from the distribution.
    pub fn draw(&self, rng: &mut StdRng) -> usize {
        self.zipf.sample(rng) as usize - 1
    }
}

/// Hosts that each send one batch per interval, as agents do.
#[derive(Debug)]
pub struct Fleet {
    /// Hosts in the fleet.
    pub hosts: usize,
    /// Processes per host.
    pub processes: usize,
    /// Samples each host takes per interval (cores × Hz × seconds).
    pub samples_per_interval: usize,
    /// Sampling period in ns.
    pub period_ns: u64,
}

impl Fleet {
    /// `hosts` hosts of 8 processes each, sampled at the agent's default
    /// 19 Hz, taking `samples_per_interval` samples per host and interval.
    pub fn of_agents(hosts: usize, samples_per_interval: usize) -> Fleet {
        Fleet {
            hosts,
            processes: 8,
            samples_per_interval,
            period_ns: 1_000_000_000 / 19,
        }
    }

    /// The batch `host` sends for interval `interval` (5 s each, starting
    /// at `start_ns`), with every dictionary entry included.
    pub fn batch(
        &self,
        population: &StackPopulation,
        host: usize,
        interval: usize,
        start_ns: i64,
        rng: &mut StdRng,
    ) -> Batch {
        self.batch_of_generation(population, host, interval, start_ns, 0, rng)
    }

    /// [`batch`](Self::batch) for a host whose processes have restarted
    /// `generation` times: their pids, and so their label sets, are new
    /// ones (label churn).
    pub fn batch_of_generation(
        &self,
        population: &StackPopulation,
        host: usize,
        interval: usize,
        start_ns: i64,
        generation: usize,
        rng: &mut StdRng,
    ) -> Batch {
        let ts = start_ns + interval as i64 * 5_000_000_000;
        let host_name = format!("host-{host:04}");
        let mut b = BatchBuilder::new(host_name.clone(), ts, self.period_ns);
        let labels: Vec<LabelSet> = (0..self.processes)
            .map(|p| {
                let pid = 1000 + p + generation * self.processes;
                LabelSet::new()
                    .with(label_names::HOST, host_name.clone())
                    .with(label_names::PROCESS, format!("service-{p}"))
                    .with(label_names::PID, pid.to_string())
            })
            .collect();
        for _ in 0..self.samples_per_interval {
            let stack = population.draw(rng);
            let process = rng.random_range(0..self.processes);
            b.add(ts, &population.stacks[stack], &labels[process], 1);
        }
        b.finish()
    }
}

/// What one agent sent lately, as `kiln-agent`'s batcher remembers it
/// (`RecentlySent`): dictionary entries (frames, stacks, label sets) it
/// sent are left out of its later batches, since the backend has them.
/// An agent that restarts forgets ([`DictionaryMemory::forget`]) and sends
/// them all again.
#[derive(Debug, Default)]
pub struct DictionaryMemory {
    sent: HashSet<(u8, u128)>,
}

impl DictionaryMemory {
    /// Leaves out of `batch` the entries sent before, and remembers the
    /// rest as sent.
    pub fn strip(&mut self, batch: &mut Batch) {
        let sent = &mut self.sent;
        batch.frames.retain(|e| sent.insert((0, e.id.0)));
        batch.stacks.retain(|e| sent.insert((1, e.id.0)));
        batch.label_sets.retain(|e| sent.insert((2, e.id.0)));
    }

    /// The agent restarted.
    pub fn forget(&mut self) {
        self.sent.clear();
    }
}
