//! Embedded ingest throughput: a Zipf-distributed synthetic fleet's batches
//! through the bus and the pipeline (`Decoder → Deduper → Writer`), against
//! the baseline of writing every batch's rows, dictionary entries included,
//! straight into the same kind of store: what a writer without the
//! Deduper's caches would do. Each batch carries its whole dictionary (an
//! agent would send only new entries), so the Deduper has work to do.
//!
//! `cargo run --release -p kiln-load-tests --bin ingest_bench`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_actors::envelope::EnvelopeHeader;
use kiln_ingest_bus::{Bus, EmbeddedBus};
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_model::Batch;
use kiln_storage::{EmbeddedProfileStore, LocalObjectStore, ProfileStore, Scope, StoredSample};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "Embedded ingest throughput with a Zipf stack population")]
struct Args {
    /// Hosts in the simulated fleet.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// 5-second intervals each host sends.
    #[arg(long, default_value_t = 12)]
    intervals: usize,
    /// Samples per host per interval (8 cores × 19 Hz × 5 s = 760).
    #[arg(long, default_value_t = 760)]
    samples: usize,
    /// Distinct stacks in the population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Processes per host.
    #[arg(long, default_value_t = 8)]
    processes: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let population = StackPopulation::new(args.stacks, args.zipf, 1);
    let fleet = Fleet {
        hosts: args.hosts,
        processes: args.processes,
        samples_per_interval: args.samples,
        period_ns: 1_000_000_000 / 19,
    };
    let mut rng = StdRng::seed_from_u64(2);
    let start_ns = 1_800_000_000_000_000_000;
    let batches: Vec<Batch> = (0..args.intervals)
        .flat_map(|i| (0..args.hosts).map(move |h| (h, i)))
        .map(|(h, i)| fleet.batch(&population, h, i, start_ns, &mut rng))
        .collect();
    let samples: u64 = batches.iter().map(Batch::sample_count).sum();
    let rows: usize = batches.iter().map(|b| b.samples.len()).sum();
    let encoded: Vec<Vec<u8>> = batches.iter().map(Batch::encode).collect();
    let wire_bytes: usize = encoded.iter().map(Vec::len).sum();
    println!(
        "ingest_bench: {} batches, {samples} samples in {rows} rows, {} stacks, zipf {}",
        batches.len(),
        args.stacks,
        args.zipf
    );

    let mut report = Report::default();
    report.add("samples", samples as f64, "samples");
    report.add("sample rows", rows as f64, "rows");
    report.add(
        "batch wire bytes per sample",
        wire_bytes as f64 / samples as f64,
        "B",
    );

    let runtime = actix_rt::System::new();
    runtime.block_on(async {
        let baseline = baseline(&batches).await?;
        report.time("baseline: direct store writes, no dedup", baseline);
        report.add(
            "baseline samples/s",
            samples as f64 / baseline.as_secs_f64(),
            "samples/s",
        );

        let (publish, drain) = pipeline(&encoded).await?;
        report.time("pipeline: publish to bus (fsync each)", publish);
        report.add(
            "publish batches/s",
            encoded.len() as f64 / publish.as_secs_f64(),
            "batches/s",
        );
        report.time("pipeline: bus -> store, committed", drain);
        report.add(
            "pipeline samples/s",
            samples as f64 / drain.as_secs_f64(),
            "samples/s",
        );
        report.add(
            "pipeline rows/s",
            rows as f64 / drain.as_secs_f64(),
            "rows/s",
        );
        report.add(
            "pipeline / baseline throughput",
            baseline.as_secs_f64() / drain.as_secs_f64(),
            "x",
        );
        anyhow::Ok(())
    })?;
    report.finish("ingest");
    Ok(())
}

/// Writes every batch's rows straight into a fresh store, one sync per 256
/// batches (what the pipeline does per poll).
async fn baseline(batches: &[Batch]) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedProfileStore::open(dir.path())?;
    let scope = Scope::new("bench", "bench")?;
    let started = Instant::now();
    for chunk in batches.chunks(256) {
        for b in chunk {
            store.put_frames("bench", &b.frames).await?;
            store.put_stacks("bench", &b.stacks).await?;
            store.put_label_sets("bench", &b.label_sets).await?;
            let rows = StoredSample::of_batch(b);
            store.put_samples(&scope, &rows).await?;
        }
        store.sync().await?;
    }
    Ok(started.elapsed())
}

/// Publishes every batch to an embedded bus, then starts the pipeline and
/// waits until everything is committed.
async fn pipeline(encoded: &[Vec<u8>]) -> anyhow::Result<(Duration, Duration)> {
    let dir = tempfile::tempdir()?;
    let bus = Arc::new(EmbeddedBus::open(&dir.path().join("bus"), 4)?);
    let store = Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?);
    let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
    let header = EnvelopeHeader {
        scope: Scope::new("bench", "bench")?,
        received_at_ns: 0,
    };
    let started = Instant::now();
    let mut last = BTreeMap::new();
    for (i, batch) in encoded.iter().enumerate() {
        let key = header.bus_key(&format!("host-{i}"));
        let published = bus
            .publish(&key, header.wrap(batch))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        last.insert(published.partition, published.offset);
    }
    let publish = started.elapsed();

    let started = Instant::now();
    let progress = kiln_actors::ingest::start(bus, store, objects).await?;
    for (partition, offset) in last {
        let done = progress
            .wait_committed(partition, offset, Duration::from_secs(600))
            .await;
        anyhow::ensure!(done, "pipeline did not finish partition {partition}");
    }
    Ok((publish, started.elapsed()))
}
