//! Records per second through the aggregation path (parse + join +
//! aggregate), against two baselines measured in the same run: the parse
//! alone, and a plain `HashMap<u32, _>` join with a plain sum.
//!
//! `cargo bench -p kiln-gpu --bench aggregation`; criterion prints each
//! one's throughput in elements (kernel records) per second.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_cuda::activity::{self, synth};
use kiln_cuda::aggregate::Limits;
use kiln_cuda::injection::Config;
use kiln_cuda::join::Launch;
use kiln_cuda::pipeline::{Pipeline, ProducerCounts};

/// Kernel records per iteration (20 MB of activity records).
const RECORDS: usize = 100_000;
/// Distinct kernels and launching threads, as in a training step.
const KERNELS: u64 = 200;
const THREADS: u32 = 8;

/// Launches per activity buffer: the aggregator sees a run of launch
/// events, then the buffer holding their kernels.
const PER_BUFFER: usize = 10_000;

struct Workload {
    /// (launches, the buffer of their kernels), in arrival order.
    rounds: Vec<(Vec<Launch>, Vec<u8>)>,
}

/// Ids start just below u32::MAX so they wrap; within a buffer the
/// completions are reversed in windows of 64 (streams finish out of order).
fn workload() -> Workload {
    let first = u32::MAX - (RECORDS as u32 / 2);
    let mut rounds = Vec::new();
    for chunk_start in (0..RECORDS).step_by(PER_BUFFER) {
        let indices: Vec<usize> = (chunk_start..chunk_start + PER_BUFFER).collect();
        let launches = indices
            .iter()
            .map(|&i| Launch {
                correlation_id: first.wrapping_add(i as u32),
                tid: 1000 + (i as u32 % THREADS),
                timestamp_ns: i as u64 * 100,
                graph: false,
                marked: true,
            })
            .collect();
        let mut order = indices.clone();
        for window in order.chunks_mut(64) {
            window.reverse();
        }
        let mut buffer = Vec::with_capacity(PER_BUFFER * 200);
        for i in order {
            let start = i as u64 * 100;
            let name = 0x1000 + (i as u64 % KERNELS) * 64;
            let kernel = synth::kernel(
                first.wrapping_add(i as u32),
                name,
                start,
                start + 50 + i as u64 % 7,
            );
            synth::push_kernel(&mut buffer, &kernel);
        }
        rounds.push((launches, buffer));
    }
    Workload { rounds }
}

fn bench(c: &mut Criterion) {
    let w = workload();
    let limits = Limits::default();
    let config = Config::default();
    eprintln!(
        "memory bound: tables {} MiB + activity buffers {} MiB ({} × {} MiB) + queue {} events",
        limits.table_bytes() >> 20,
        (config.max_buffers * config.buffer_bytes) >> 20,
        config.max_buffers,
        config.buffer_bytes >> 20,
        config.queue_len,
    );

    let mut group = c.benchmark_group("aggregation");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.sample_size(20);
    group.measurement_time(std::time::Duration::from_secs(4));

    group.bench_function("parse_only", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for (_, buffer) in &w.rounds {
                activity::parse_buffer(buffer, |k| sum += k.duration_ns());
            }
            black_box(sum)
        })
    });

    group.bench_function("baseline_hashmap_join", |b| {
        b.iter(|| {
            let mut launches: HashMap<u32, Launch> = HashMap::new();
            let mut sums: HashMap<(u32, u64), (u64, u64)> = HashMap::new();
            for (round, buffer) in &w.rounds {
                for l in round {
                    launches.insert(l.correlation_id, *l);
                }
                activity::parse_buffer(buffer, |k| {
                    let tid = launches.remove(&k.correlation_id).map_or(0, |l| l.tid);
                    let sum = sums.entry((tid, k.name_ptr)).or_default();
                    sum.0 += 1;
                    sum.1 += k.duration_ns();
                });
            }
            black_box(sums.len())
        })
    });

    group.bench_function("pipeline_parse_join_aggregate", |b| {
        b.iter(|| {
            let mut p = Pipeline::new(1, limits, Box::new(|ptr| Some(format!("k{ptr}"))));
            for (round, buffer) in &w.rounds {
                for l in round {
                    p.on_launch(*l);
                }
                let left = activity::walk(buffer, |record| p.on_record(record));
                p.on_unwalked(left);
            }
            let snapshot = p.final_snapshot(1, ProducerCounts::default());
            assert_eq!(snapshot.counters.kernels, RECORDS as u64);
            assert_eq!(snapshot.counters.kernels_unjoined, 0);
            black_box(snapshot.kernels.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
