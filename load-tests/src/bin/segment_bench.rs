//! Sealed-hour segments (`kiln_storage::segment`): an hour of a synthetic
//! fleet's samples as one segment at several zstd levels, its bytes per
//! sample and per core-day against the same rows' own data (what a row
//! store holds before its engine's overhead: `sample_row_bytes`), and the
//! time to encode and decode it, in the same run.
//!
//! `cargo run --release -p kiln-load-tests --bin segment_bench`

use std::time::Instant;

use clap::Parser;
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_model::NANOS_PER_HOUR;
use kiln_storage::{Scope, StoredSample, sample_row_bytes, segment};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "Sealed-hour segments: size and speed at several zstd levels")]
struct Args {
    /// Hosts in the hour.
    #[arg(long, default_value_t = 20)]
    hosts: usize,
    /// Cores each host samples at 19 Hz.
    #[arg(long, default_value_t = 8)]
    cores: usize,
    /// Distinct stacks in the fleet's population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// zstd levels to compare.
    #[arg(long, value_delimiter = ',', default_value = "3,9,12,19")]
    levels: Vec<i32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let population = StackPopulation::new(args.stacks, 1.1, 1);
    let fleet = Fleet::of_agents(args.hosts, args.cores * 19 * 5);
    let mut rng = StdRng::seed_from_u64(7);
    let hour = 490_000;
    let start_ns = hour * NANOS_PER_HOUR;
    let mut rows: Vec<StoredSample> = Vec::new();
    let mut samples = 0u64;
    // 720 intervals of 5 s: the hour.
    for interval in 0..720 {
        for host in 0..args.hosts {
            let batch = fleet.batch(&population, host, interval, start_ns, &mut rng);
            samples += batch.sample_count();
            rows.extend(StoredSample::of_batch(&batch));
        }
    }
    let core_days = (args.hosts * args.cores) as f64 / 24.0;
    let scope = Scope::new("acme", "web")?;
    let row_data = sample_row_bytes(&scope) * rows.len() as u64;
    println!(
        "segment_bench: {} hosts × {} cores for an hour: {} samples in {} rows ({:.2} rows a sample)",
        args.hosts,
        args.cores,
        samples,
        rows.len(),
        rows.len() as f64 / samples as f64
    );
    let mut report = Report::default();
    report.add("samples in the hour", samples as f64, "samples");
    report.add("rows in the hour", rows.len() as f64, "rows");
    report.add(
        "row data per core-day (sample_row_bytes)",
        row_data as f64 / core_days / 1e6,
        "MB",
    );
    for &level in &args.levels {
        let started = Instant::now();
        let (bytes, kept) = segment::encode_at_level(hour, &rows, level);
        let encode_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let (_, decoded) = segment::decode(&bytes)?;
        let decode_s = started.elapsed().as_secs_f64();
        anyhow::ensure!(decoded.len() == kept, "the segment lost rows");
        report.add(
            format!("level {level}: segment per core-day"),
            bytes.len() as f64 / core_days / 1e6,
            "MB",
        );
        report.add(
            format!("level {level}: bytes per sample"),
            bytes.len() as f64 / samples as f64,
            "bytes",
        );
        report.add(
            format!("level {level}: row data / segment"),
            row_data as f64 / bytes.len() as f64,
            "x",
        );
        report.add(
            format!("level {level}: encode"),
            rows.len() as f64 / encode_s / 1e6,
            "M rows/s",
        );
        report.add(
            format!("level {level}: decode"),
            rows.len() as f64 / decode_s / 1e6,
            "M rows/s",
        );
    }
    report.finish("segment");
    Ok(())
}
