//! Embedded ingest throughput: a Zipf-distributed synthetic fleet's batches
//! through the bus and the pipeline (decode → dedup → symbolize → write →
//! commit), against the baseline of writing every batch's rows,
//! dictionary entries included, straight into the same kind of store: what
//! a writer without the Deduper's caches would do. Each batch carries its
//! whole dictionary (an agent would send only new entries), so the Deduper
//! has work to do.
//!
//! Then the same fleet with native frames — addresses in a real ELF file
//! (`--symbols-elf`, by default this benchmark's own binary) — through the
//! pipeline twice: without symbols for the file, and with its symbols in
//! the object store (loaded into the symbolizer before the run, as a
//! long-running worker has them; the load is timed apart), so every new
//! frame is symbolized before it is written. Their ratio is the cost of
//! ingest-side symbolization.
//!
//! The pipeline runs twice per round, alternating: one stage at a time
//! (`PipelineConfig::SEQUENTIAL`: each poll decoded, then stored, on one
//! thread, as ingest ran before it was a pipeline) and with its stages in
//! parallel (`--depth` polls in flight, each decoded on `--decoders`
//! threads); the medians and their ratio are printed. The gateway's check
//! of a batch (`Batch::peek_within`) is timed against a full decode too.
//!
//! `cargo run --release -p kiln-load-tests --bin ingest_bench -- --rounds 3`

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_actors::envelope::EnvelopeHeader;
use kiln_actors::ingest::PipelineConfig;
use kiln_ingest_bus::{Bus, EmbeddedBus};
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_model::{Batch, FileId, Frame, FrameKind};
use kiln_storage::{
    EmbeddedProfileStore, LocalObjectStore, ObjectKey, ObjectStore, ProfileStore, Scope,
    StoredFrame, StoredSample,
};
use kiln_symbolizer_workers::{
    FileAddrs, Resolve, Symbolizer, SymbolizerConfig, build_stored, file_id,
};
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
    /// The ELF whose addresses the native-frame runs use (its symbols are
    /// built once, as an upload would). Default: this binary.
    #[arg(long)]
    symbols_elf: Option<PathBuf>,
    /// Runs of each pipeline compared (their medians are compared).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Polls in flight in the parallel pipeline (default: the worker's).
    #[arg(long)]
    depth: Option<usize>,
    /// Threads decoding one poll in the parallel pipeline (default: the
    /// worker's, one per core).
    #[arg(long)]
    decoders: Option<usize>,
    /// Batches of a poll written at once in the parallel pipeline
    /// (default: the worker's, one per core).
    #[arg(long)]
    writes: Option<usize>,
    /// Skips the native-frame (symbolization) runs.
    #[arg(long)]
    no_native: bool,
    /// Skips the baseline (direct store writes).
    #[arg(long)]
    no_baseline: bool,
}

fn median(runs: &mut [Duration]) -> Duration {
    runs.sort_unstable();
    runs[runs.len() / 2]
}

/// Symbols of one file, as the object store keeps them.
struct FileSymbols {
    id: FileId,
    compressed: Vec<u8>,
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

    let elf = match &args.symbols_elf {
        Some(path) => path.clone(),
        None => std::env::current_exe()?,
    };
    let native = match args.no_native {
        true => None,
        false => {
            let (native, symbols) = native_batches(&batches, &elf)?;
            let encoded: Vec<Vec<u8>> = native.iter().map(Batch::encode).collect();
            Some((native, symbols, encoded))
        }
    };

    let defaults = PipelineConfig::default();
    let config = PipelineConfig {
        depth: args.depth.unwrap_or(defaults.depth),
        decoders: args.decoders.unwrap_or(defaults.decoders),
        writes: args.writes.unwrap_or(defaults.writes),
        ..defaults
    };
    println!(
        "parallel pipeline: {} polls in flight, {} decoding threads, {} batches written at once; \
         {} cores",
        config.depth,
        config.decoders,
        config.writes,
        std::thread::available_parallelism().map_or(1, usize::from),
    );
    gateway_check(&encoded, &mut report)?;

    let runtime = actix_rt::System::new();
    runtime.block_on(async {
        let baseline = match args.no_baseline {
            true => None,
            false => Some(baseline(&batches).await?),
        };
        if let Some(baseline) = baseline {
            report.time("baseline: direct store writes, no dedup", baseline);
            report.add(
                "baseline samples/s",
                samples as f64 / baseline.as_secs_f64(),
                "samples/s",
            );
        }

        // One stage at a time against stages in parallel: they alternate,
        // `rounds` times each, and the medians are compared.
        let (mut one_stage, mut parallel, mut publish) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.rounds.max(1) {
            let run = isolated(&encoded, None, PipelineConfig::SEQUENTIAL)?;
            println!("  one stage at a time: {}", run.summary());
            one_stage.push(run.drain);
            publish.push(run.publish);
            let run = isolated(&encoded, None, config)?;
            println!("  parallel stages:     {}", run.summary());
            parallel.push(run.drain);
        }
        let publish = median(&mut publish);
        report.time("pipeline: publish to bus (fsync each)", publish);
        report.add(
            "publish batches/s",
            encoded.len() as f64 / publish.as_secs_f64(),
            "batches/s",
        );
        let (one_stage, drain) = (median(&mut one_stage), median(&mut parallel));
        report.time("one stage at a time: bus -> store (median)", one_stage);
        report.add(
            "one stage at a time: samples/s",
            samples as f64 / one_stage.as_secs_f64(),
            "samples/s",
        );
        report.time("parallel stages: bus -> store (median)", drain);
        report.add(
            "parallel stages: samples/s",
            samples as f64 / drain.as_secs_f64(),
            "samples/s",
        );
        report.add(
            "parallel / one stage throughput",
            one_stage.as_secs_f64() / drain.as_secs_f64(),
            "x",
        );
        report.add(
            "pipeline rows/s",
            rows as f64 / drain.as_secs_f64(),
            "rows/s",
        );
        if let Some(baseline) = baseline {
            report.add(
                "pipeline / baseline throughput",
                baseline.as_secs_f64() / drain.as_secs_f64(),
                "x",
            );
        }
        let Some((native, symbols, native_encoded)) = &native else {
            return anyhow::Ok(());
        };

        // The two alternate, `rounds` times each, and the medians are
        // compared: on a shared machine one run of each says little.
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..args.rounds.max(1) {
            without.push(isolated(native_encoded, None, config)?.drain);
            let symbolized = isolated(native_encoded, Some(symbols), config)?;
            with.push(symbolized.drain);
            if with.len() == 1 {
                if let Some(warm_up) = symbolized.warm_up {
                    report.time("loading the symbol file (once, before)", warm_up);
                }
                // The figure means something only if the frames were
                // symbolized.
                let (stored, symbolized) = symbolized.frames_with_symbols(native).await?;
                report.add("native frames stored", stored as f64, "frames");
                report.add(
                    "of them stored symbolized",
                    symbolized as f64 / stored as f64 * 100.0,
                    "%",
                );
            }
        }
        let (without, with) = (median(&mut without), median(&mut with));
        report.time("native frames, no symbols: bus -> store (median)", without);
        report.add(
            "native, no symbols: samples/s",
            samples as f64 / without.as_secs_f64(),
            "samples/s",
        );
        report.time("native frames, symbolized: bus -> store (median)", with);
        report.add(
            "native, symbolized: samples/s",
            samples as f64 / with.as_secs_f64(),
            "samples/s",
        );
        report.add(
            "symbolized / unsymbolized throughput",
            without.as_secs_f64() / with.as_secs_f64(),
            "x",
        );
        anyhow::Ok(())
    })?;
    report.finish("ingest");
    Ok(())
}

/// What a gateway spends per batch: the full decode it used to make, and
/// the check it makes now ([`Batch::peek_within`]).
fn gateway_check(encoded: &[Vec<u8>], report: &mut Report) -> anyhow::Result<()> {
    let limit = kiln_actors::http::ingest::MAX_AGENT_BATCH_PAYLOAD;
    let started = Instant::now();
    for bytes in encoded {
        Batch::decode_within(bytes, limit)?;
    }
    let decode = started.elapsed();
    let started = Instant::now();
    for bytes in encoded {
        Batch::peek_within(bytes, limit)?;
    }
    let peek = started.elapsed();
    let per_batch = |d: Duration| d.as_secs_f64() * 1e6 / encoded.len() as f64;
    report.add("gateway: full decode per batch", per_batch(decode), "us");
    report.add(
        "gateway: header and archive check per batch",
        per_batch(peek),
        "us",
    );
    report.add(
        "full decode / gateway check",
        decode.as_secs_f64() / peek.as_secs_f64(),
        "x",
    );
    Ok(())
}

/// User and system CPU time of this process so far, all threads.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// `stage 1.234 s, …` from a worker's metrics text: the sum of each
/// stage's times (`kiln_worker_stage_seconds_sum`).
fn stage_sums(metrics: &str) -> String {
    let prefix = "kiln_worker_stage_seconds_sum{stage=\"";
    let sums: Vec<String> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let (stage, value) = rest.split_once("\"} ")?;
            Some(format!("{stage} {:.3} s", value.parse::<f64>().ok()?))
        })
        .collect();
    sums.join(", ")
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
            let frames: Vec<StoredFrame> = b.frames.iter().cloned().map(Into::into).collect();
            store.put_frames("bench", &frames).await?;
            store.put_stacks("bench", &b.stacks).await?;
            store.put_label_sets("bench", &b.label_sets).await?;
            let rows = StoredSample::of_batch(b);
            store.put_samples(&scope, &rows).await?;
        }
        store.sync().await?;
    }
    Ok(started.elapsed())
}

/// The fleet's batches with every frame an address in `elf` (one function
/// of it per distinct frame name), and the file's symbols.
fn native_batches(batches: &[Batch], elf: &Path) -> anyhow::Result<(Vec<Batch>, FileSymbols)> {
    let data = std::fs::read(elf)?;
    let id = file_id(&data);
    let options = kiln_symbolizer_workers::ExtractOptions {
        no_debug_file: true,
        ..Default::default()
    };
    let table = kiln_symbolizer_workers::extract_bytes(elf, &data, &options)?.table;
    let starts: Vec<u64> = table.ranges.iter().map(|r| r.start).collect();
    anyhow::ensure!(!starts.is_empty(), "{} has no symbols", elf.display());
    let compressed = build_stored(elf, &data)?.compressed;
    // Each distinct name gets its own function, in the middle of its first
    // instruction bytes, as return addresses minus one are.
    let mut addresses: HashMap<Frame, Frame> = HashMap::new();
    let mut native_frame = |frame: &Frame| -> Frame {
        let next = addresses.len();
        addresses
            .entry(frame.clone())
            .or_insert_with(|| Frame::Address {
                kind: FrameKind::Native,
                file_id: id,
                addr: starts[next * 7919 % starts.len()] + 1,
            })
            .clone()
    };
    let native = batches
        .iter()
        .map(|b| {
            let mut builder = kiln_model::BatchBuilder::new("bench", 0, b.period_ns);
            let stacks: HashMap<_, _> = b.stacks.iter().map(|s| (s.id, &s.frames)).collect();
            let frames: HashMap<_, _> = b.frames.iter().map(|f| (f.id, &f.frame)).collect();
            let labels: HashMap<_, _> = b.label_sets.iter().map(|l| (l.id, &l.labels)).collect();
            for sample in &b.samples {
                let stack: Vec<Frame> = stacks[&sample.stack]
                    .iter()
                    .map(|f| native_frame(frames[f]))
                    .collect();
                builder.add(
                    sample.timestamp_ns,
                    &stack,
                    labels[&sample.labels],
                    sample.count,
                );
            }
            builder.finish()
        })
        .collect();
    Ok((native, FileSymbols { id, compressed }))
}

/// One pipeline run: how long publishing and draining took, and the store
/// it wrote.
struct Run {
    publish: Duration,
    /// Loading the symbols into the symbolizer, before the drain.
    warm_up: Option<Duration>,
    drain: Duration,
    /// The time each stage took, summed over the polls (stages that
    /// overlap add up to more than `drain`).
    stages: String,
    /// CPU time this process spent during the drain, all threads.
    cpu: Duration,
    store: Arc<EmbeddedProfileStore>,
    _dir: tempfile::TempDir,
}

impl Run {
    /// The drain, the stage sums, and the machine's load average after
    /// the run (another process's work skews the comparison).
    fn summary(&self) -> String {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load = load.split_whitespace().next().unwrap_or("?");
        let drain = self.drain.as_secs_f64();
        let cores = self.cpu.as_secs_f64() / drain;
        format!(
            "{drain:.3} s, {cores:.2} cores busy ({}); load {load}",
            self.stages
        )
    }

    /// Of the distinct frames of `batches`: how many the store holds, and
    /// how many of those with symbols.
    async fn frames_with_symbols(&self, batches: &[Batch]) -> anyhow::Result<(usize, usize)> {
        let ids: BTreeSet<_> = batches
            .iter()
            .flat_map(|b| &b.frames)
            .map(|f| f.id)
            .collect();
        let ids: Vec<_> = ids.into_iter().collect();
        let rows = self.store.get_frames("bench", &ids).await?;
        let stored: Vec<StoredFrame> = rows.into_iter().flatten().collect();
        let with_symbols = stored.iter().filter(|f| !f.symbols.is_empty()).count();
        Ok((stored.len(), with_symbols))
    }
}

/// [`pipeline`] on a thread of its own with an actix system that is
/// stopped after the run: the pipeline (and its store's background work)
/// ends with the run instead of going on beside the next one. Blocks.
fn isolated(
    encoded: &[Vec<u8>],
    symbols: Option<&FileSymbols>,
    config: PipelineConfig,
) -> anyhow::Result<Run> {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            let system = actix_rt::System::new();
            let run = system.block_on(pipeline(encoded, symbols, config));
            actix_rt::System::current().stop();
            system.run()?;
            run
        });
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the pipeline's thread panicked"))?
    })
}

/// Publishes every batch to an embedded bus, then starts the pipeline with
/// `config` and waits until everything is committed; with `symbols` in the
/// object store first when given.
async fn pipeline(
    encoded: &[Vec<u8>],
    symbols: Option<&FileSymbols>,
    config: PipelineConfig,
) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let bus = Arc::new(EmbeddedBus::open(&dir.path().join("bus"), 4)?);
    let store = Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?);
    let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
    if let Some(symbols) = symbols {
        let key = ObjectKey::tenant_symbols("bench", symbols.id)?;
        objects.put(&key, symbols.compressed.clone().into()).await?;
    }
    let header = EnvelopeHeader {
        scope: Scope::new("bench", "bench")?,
        received_at_ns: 0,
    };
    let bus_key = kiln_actors::envelope::BusKey::generate()?;
    let started = Instant::now();
    let mut last = BTreeMap::new();
    for (i, batch) in encoded.iter().enumerate() {
        let key = header.bus_key(&format!("host-{i}"));
        let published = bus
            .publish(&key, header.wrap(batch, &bus_key))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        last.insert(published.partition, published.offset);
    }
    let publish = started.elapsed();

    let symbolizer = Symbolizer::spawn(objects.clone(), SymbolizerConfig::default());
    // A long-running worker has its files' symbols loaded: load them
    // first, and time that apart.
    let warm_up = match symbols {
        Some(symbols) => {
            let started = Instant::now();
            let request = Resolve {
                tenant: "bench".into(),
                files: vec![FileAddrs {
                    file: symbols.id,
                    build_id: None,
                    addrs: vec![0],
                }],
                debuginfod_wait: None,
            };
            let resolved = symbolizer.send(request).await??;
            anyhow::ensure!(resolved[0].is_some(), "the stored symbols do not load");
            Some(started.elapsed())
        }
        None => None,
    };
    let started = Instant::now();
    let cpu_before = cpu_time();
    let metrics = kiln_actors::telemetry::Metrics::new(kiln_actors::telemetry::ServerRole::Worker);
    let progress = kiln_actors::ingest::start_with(
        bus,
        store.clone(),
        objects,
        symbolizer,
        bus_key,
        metrics.worker().clone(),
        config,
    )
    .await?;
    for (partition, offset) in last {
        let done = progress
            .wait_committed(partition, offset, Duration::from_secs(600))
            .await;
        anyhow::ensure!(done, "pipeline did not finish partition {partition}");
    }
    let drain = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    let text = metrics.scrape(true).await?;
    Ok(Run {
        publish,
        warm_up,
        drain,
        stages: stage_sums(&text),
        cpu,
        store,
        _dir: dir,
    })
}
