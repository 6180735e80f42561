//! A worker's decode of agent batches (`Batch::decode`: inflate, validate,
//! verify ids, deserialize): an agent's first batch, which carries every
//! dictionary entry it uses, against its later ones, which leave out the
//! entries it sent before (`DictionaryMemory`, as `kiln-agent` does), in
//! the same run.
//!
//! `cargo run --release -p kiln-load-tests --bin batch_decode_bench`

use std::time::Instant;

use clap::Parser;
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::{DictionaryMemory, Fleet, StackPopulation};
use kiln_model::Batch;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// The allocator `kiln` runs with, so that decoding costs here what it
/// costs a worker.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "Batch decode: an agent's first batch against its later ones")]
struct Args {
    /// Agents (hosts of the synthetic fleet), one batch of each kind each.
    #[arg(long, default_value_t = 200)]
    batches: usize,
    /// Samples per batch (8 cores × 19 Hz × 5 s = 760).
    #[arg(long, default_value_t = 760)]
    samples: usize,
    /// Batches of each agent before the one measured as "later".
    #[arg(long, default_value_t = 12)]
    warm: usize,
    /// Rounds over every batch, per kind, alternating kinds.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let population = StackPopulation::new(20_000, 1.1, 1);
    let fleet = Fleet::of_agents(args.batches, args.samples);
    let mut rng = StdRng::seed_from_u64(5);
    let mut first = Vec::new();
    let mut later = Vec::new();
    for host in 0..args.batches {
        let mut memory = DictionaryMemory::default();
        for interval in 0..=args.warm {
            let mut batch = fleet.batch(&population, host, interval, 0, &mut rng);
            memory.strip(&mut batch);
            if interval == 0 {
                first.push(batch.encode());
            } else if interval == args.warm {
                later.push(batch.encode());
            }
        }
    }
    let kib =
        |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>() as f64 / v.len() as f64 / 1024.0;
    println!(
        "batch_decode_bench: {} agents, {} samples a batch: first batches {:.1} KiB, batch {} {:.1} KiB on average",
        args.batches,
        args.samples,
        kib(&first),
        args.warm + 1,
        kib(&later)
    );
    let (mut first_ns, mut later_ns) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        for (kind, times) in [(&first, &mut first_ns), (&later, &mut later_ns)] {
            let started = Instant::now();
            for b in kind {
                std::hint::black_box(Batch::decode(b)?);
            }
            times.push(started.elapsed().as_nanos() as f64 / kind.len() as f64);
        }
    }
    first_ns.sort_by(f64::total_cmp);
    later_ns.sort_by(f64::total_cmp);
    let median = |v: &[f64]| v[v.len() / 2];
    let mut report = Report::default();
    for (name, times) in [("first batch", &first_ns), ("later batch", &later_ns)] {
        report.add(
            format!("decode, {name} (median)"),
            median(times) / 1e3,
            "µs/batch",
        );
        report.add(
            format!("samples decoded per CPU-second, {name}"),
            args.samples as f64 / (median(times) / 1e9),
            "samples/s",
        );
    }
    report.add("first / later", median(&first_ns) / median(&later_ns), "x");
    report.finish("batch_decode");
    Ok(())
}
