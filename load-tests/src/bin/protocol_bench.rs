//! The gateway's CPU per sample for each ingest protocol: the same
//! synthetic fleet's samples (the Zipf population and fleet
//! `ingest_bench` uses) as Kiln's own agent batches, as OTLP profiles
//! from the OpenTelemetry eBPF profiler (protobuf and OTLP/JSON, gzipped
//! as the collector's exporters send them), and as Pyroscope bodies
//! (pyroscope-go's multipart `/ingest` pprof, and `push.v1` requests),
//! shaped as `kiln_load_tests::protocols` says.
//!
//! What is timed per request body is what the gateway does with it before
//! publishing, on one thread:
//!
//! - **Kiln batches**: `Batch::peek_within` (header, zstd, archive
//!   validation, limits, sample count); the bytes are published as sent.
//! - **OTLP**: gunzip (`Content-Encoding: gzip`), `otlp::import` or
//!   `otlp::import_json`, and `Batch::encode` of each batch, as
//!   `actors/src/http/otlp.rs` `convert_and_publish` does.
//! - **Pyroscope `/ingest`**: `pyroscope::import_ingest` (the multipart
//!   body, the gzipped pprof) and `Batch::encode`; **Push**: gunzip,
//!   `pyroscope::import_push` and `Batch::encode`
//!   (`actors/src/http/pyroscope.rs`).
//!
//! Each format's bodies are timed in turn, `--rounds` times, the order
//! rotating each round so that the machine's noise falls on all of them
//! alike; the figures are medians of the rounds: samples per CPU-second of
//! the timing thread (`CLOCK_THREAD_CPUTIME_ID`, so time the thread spent
//! off the core is not counted) and per wall second, and each format's
//! ratio to Kiln's batches. Every round checks that each body converted
//! whole (no profile refused, no warning, the samples the batch had), and
//! before timing, the samples by host, pid and stack each format yields
//! are compared with the fleet's: a figure cannot come from a failing
//! path.
//!
//! `cargo run --release -p kiln-load-tests --bin protocol_bench -- --rounds 5`

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use kiln_formats::otlp::{OtlpImported, OtlpOptions};
use kiln_formats::pyroscope::{PushEncoding, PyroscopeImported, PyroscopeOptions};
use kiln_load_tests::protocols::{
    IngestRequest, StackCounts, gunzip, gzip, ingest_requests, otlp_json, otlp_request,
    push_requests,
};
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_model::Batch;
use prost::Message;
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(
    about = "Gateway CPU per sample: Kiln's agent batches against OTLP and Pyroscope bodies \
             of the same samples",
    long_about = "Gateway CPU per sample: the same synthetic fleet's samples as Kiln's agent \
                  batches, OTLP profiles (protobuf and JSON, gzipped, as the OpenTelemetry \
                  eBPF profiler's collector sends them) and Pyroscope bodies (pyroscope-go's \
                  multipart /ingest pprof, push.v1 requests). Times, on one thread, what the \
                  gateway does with each body before publishing (Kiln: Batch::peek_within; \
                  the others: decompression, conversion and Batch::encode of the batches), \
                  round after round in rotating order, and prints the medians as samples per \
                  CPU-second and per wall second, and each format's ratio to Kiln's batches."
)]
struct Args {
    /// Hosts in the simulated fleet.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// 5-second intervals each host sends (one Kiln batch and one OTLP
    /// request per host and interval; one Pyroscope request per process).
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
    /// Processes per host (each its own OTLP resource and Pyroscope
    /// sender).
    #[arg(long, default_value_t = 8)]
    processes: usize,
    /// Rounds; each times every format once, in rotating order.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Times only these formats (the others are still built and checked):
    /// for profiling one with `perf record`.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Format>,
}

/// The formats, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Kiln's agent batches.
    Kiln,
    /// OTLP protobuf, gzipped.
    OtlpProto,
    /// OTLP/JSON, gzipped.
    OtlpJson,
    /// Pyroscope `/ingest`, multipart pprof.
    PyroscopeIngest,
    /// Pyroscope `push.v1`, gzipped.
    PyroscopePush,
}

const FORMATS: [Format; 5] = [
    Format::Kiln,
    Format::OtlpProto,
    Format::OtlpJson,
    Format::PyroscopeIngest,
    Format::PyroscopePush,
];

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Kiln => "Kiln batch (peek_within)",
            Format::OtlpProto => "OTLP protobuf, gzip",
            Format::OtlpJson => "OTLP/JSON, gzip",
            Format::PyroscopeIngest => "Pyroscope /ingest multipart pprof",
            Format::PyroscopePush => "Pyroscope push.v1, gzip",
        }
    }
}

/// Every format's request bodies for the fleet.
struct Bodies {
    kiln: Vec<Vec<u8>>,
    otlp: Vec<Vec<u8>>,
    otlp_json: Vec<Vec<u8>>,
    ingest: Vec<IngestRequest>,
    push: Vec<Vec<u8>>,
}

impl Bodies {
    /// Built on every core (gzip is most of it); each batch's OTLP
    /// timestamps are drawn from a generator seeded by its index, so the
    /// bodies are the same whatever the number of cores.
    fn new(batches: &[Batch]) -> Self {
        let one = |(i, batch): (usize, &Batch)| {
            let request = otlp_request(batch, &mut StdRng::seed_from_u64(i as u64));
            Bodies {
                kiln: vec![batch.encode()],
                otlp: vec![gzip(&request.encode_to_vec())],
                otlp_json: vec![gzip(&otlp_json(&request))],
                ingest: ingest_requests(batch),
                push: push_requests(batch),
            }
        };
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let chunk = batches.len().div_ceil(threads).max(1);
        let parts: Vec<Vec<Bodies>> = std::thread::scope(|scope| {
            let workers: Vec<_> = batches
                .chunks(chunk)
                .enumerate()
                .map(|(c, part)| {
                    scope.spawn(move || {
                        part.iter()
                            .enumerate()
                            .map(|(i, b)| one((c * chunk + i, b)))
                            .collect()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a body builder panicked"))
                .collect()
        });
        let mut all = Bodies {
            kiln: Vec::new(),
            otlp: Vec::new(),
            otlp_json: Vec::new(),
            ingest: Vec::new(),
            push: Vec::new(),
        };
        for b in parts.into_iter().flatten() {
            all.kiln.extend(b.kiln);
            all.otlp.extend(b.otlp);
            all.otlp_json.extend(b.otlp_json);
            all.ingest.extend(b.ingest);
            all.push.extend(b.push);
        }
        all
    }

    /// Requests and the bytes sent of `format`.
    fn size(&self, format: Format) -> (usize, usize) {
        let sum = |bodies: &[Vec<u8>]| (bodies.len(), bodies.iter().map(Vec::len).sum());
        match format {
            Format::Kiln => sum(&self.kiln),
            Format::OtlpProto => sum(&self.otlp),
            Format::OtlpJson => sum(&self.otlp_json),
            Format::PyroscopeIngest => (
                self.ingest.len(),
                self.ingest.iter().map(|r| r.body.len()).sum(),
            ),
            Format::PyroscopePush => sum(&self.push),
        }
    }
}

/// What one pass over a format's bodies yielded.
#[derive(Debug, Default)]
struct Pass {
    samples: u64,
    rows: usize,
    /// Bytes of the encoded batches published.
    published: usize,
}

impl Pass {
    fn batches(&mut self, batches: &[Batch], samples: u64, rows: usize) {
        self.samples += samples;
        self.rows += rows;
        for batch in batches {
            self.published += black_box(batch.encode()).len();
        }
    }

    fn otlp(&mut self, imported: OtlpImported) -> anyhow::Result<()> {
        ensure!(
            imported.rejected_profiles == 0 && imported.warnings.is_empty(),
            "OTLP: {:?} {:?}",
            imported.problems,
            imported.warnings
        );
        self.batches(&imported.batches, imported.samples, imported.sample_rows);
        Ok(())
    }

    fn pyroscope(&mut self, imported: PyroscopeImported) -> anyhow::Result<()> {
        ensure!(
            imported.skipped.is_empty(),
            "Pyroscope: {:?}",
            imported.skipped
        );
        self.batches(&imported.batches, imported.samples, imported.sample_rows);
        Ok(())
    }
}

/// The gateway's work on each of `format`'s bodies; with `check`, what
/// the conversions yield is added to it.
fn pass(
    bodies: &Bodies,
    format: Format,
    now_ns: i64,
    mut check: Option<&mut StackCounts>,
) -> anyhow::Result<Pass> {
    let mut out = Pass::default();
    let mut keep = |batches: &[Batch]| {
        if let Some(counts) = check.as_deref_mut() {
            batches.iter().for_each(|b| counts.add(b));
        }
    };
    let otlp = OtlpOptions { now_ns };
    let pyroscope = PyroscopeOptions { now_ns };
    let limit = kiln_actors::http::ingest::MAX_AGENT_BATCH_PAYLOAD;
    match format {
        Format::Kiln => {
            for bytes in &bodies.kiln {
                let peek = Batch::peek_within(bytes, limit)?;
                out.samples += peek.samples;
                out.published += bytes.len();
            }
        }
        Format::OtlpProto | Format::OtlpJson => {
            let (list, json) = match format {
                Format::OtlpProto => (&bodies.otlp, false),
                _ => (&bodies.otlp_json, true),
            };
            for body in list {
                let body = gunzip(body)?;
                let imported = match json {
                    false => kiln_formats::otlp::import(&body, &otlp)?,
                    true => kiln_formats::otlp::import_json(&body, &otlp)?,
                };
                keep(&imported.batches);
                out.otlp(imported)?;
            }
        }
        Format::PyroscopeIngest => {
            for r in &bodies.ingest {
                let imported = kiln_formats::pyroscope::import_ingest(
                    &r.query,
                    Some(&r.content_type),
                    &r.body,
                    &pyroscope,
                )?;
                keep(&imported.batches);
                out.pyroscope(imported)?;
            }
        }
        Format::PyroscopePush => {
            for body in &bodies.push {
                let body = gunzip(body)?;
                let imported =
                    kiln_formats::pyroscope::import_push(&body, PushEncoding::Proto, &pyroscope)?;
                keep(&imported.batches);
                out.pyroscope(imported)?;
            }
        }
    }
    Ok(out)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: clock_gettime only writes the struct it is given.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
        t
    };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The median of `values` (the upper one of an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.rounds > 0, "--rounds must be at least 1");
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
    let mut fleet_counts = StackCounts::default();
    batches.iter().for_each(|b| fleet_counts.add(b));
    println!(
        "protocol_bench: {} hosts × {} intervals, {samples} samples in {rows} rows, {} stacks, \
         zipf {}; {} rounds, one thread",
        args.hosts, args.intervals, args.stacks, args.zipf, args.rounds
    );
    let started = Instant::now();
    let bodies = Bodies::new(&batches);
    println!("bodies built in {:.1} s", started.elapsed().as_secs_f64());
    // The conversions' "now": an hour after the fleet's last interval.
    let now_ns = start_ns + args.intervals as i64 * 5_000_000_000 + 3_600_000_000_000;

    // Every format's samples by host, pid and stack are the fleet's.
    for format in FORMATS {
        let mut counts = StackCounts::default();
        let check = (format != Format::Kiln).then_some(&mut counts);
        let out = pass(&bodies, format, now_ns, check)
            .with_context(|| format!("{}: converting", format.name()))?;
        if out.samples != samples {
            bail!(
                "{}: {} samples, the fleet has {samples}",
                format.name(),
                out.samples
            );
        }
        if format != Format::Kiln {
            let (n, first) = counts.differences(&fleet_counts);
            ensure!(
                n == 0,
                "{}: {n} (host, pid, stack) counts differ from the fleet's, e.g. {}",
                format.name(),
                first.unwrap_or_default()
            );
        }
    }
    println!("every format yields the fleet's samples by host, pid and stack");

    let timed: Vec<usize> = (0..FORMATS.len())
        .filter(|&i| args.only.is_empty() || args.only.contains(&FORMATS[i]))
        .collect();
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); FORMATS.len()];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); FORMATS.len()];
    let mut passes: Vec<Pass> = FORMATS.iter().map(|_| Pass::default()).collect();
    for round in 0..args.rounds {
        let mut line = format!("  round {}:", round + 1);
        for k in 0..timed.len() {
            let i = timed[(round + k) % timed.len()];
            let format = FORMATS[i];
            let (cpu0, wall0) = (thread_cpu(), Instant::now());
            let out = pass(&bodies, format, now_ns, None)?;
            let (c, w) = (thread_cpu() - cpu0, wall0.elapsed());
            ensure!(
                out.samples == samples,
                "{}: {} samples, the fleet has {samples}",
                format.name(),
                out.samples
            );
            cpu[i].push(samples as f64 / c.as_secs_f64());
            wall[i].push(samples as f64 / w.as_secs_f64());
            line.push_str(&format!(
                " {:?} {:.0}k/s;",
                format,
                samples as f64 / c.as_secs_f64() / 1e3
            ));
            passes[i] = out;
        }
        println!("{line}");
    }

    let mut report = Report::default();
    report.add("samples", samples as f64, "samples");
    report.add("agent batch rows", rows as f64, "rows");
    let kiln_cpu = timed.contains(&0).then(|| median(&cpu[0]));
    let mut table = vec![format!(
        "{:<34} {:>8} {:>10} {:>11} {:>7} {:>10} {:>8} {:>8}",
        "format", "requests", "sent B/smp", "k smp/CPU-s", "ratio", "k smp/s", "us/req", "rows/smp"
    )];
    for &i in &timed {
        let format = FORMATS[i];
        let (requests, bytes) = bodies.size(format);
        let (c, w) = (median(&cpu[i]), median(&wall[i]));
        let ratio = kiln_cpu.map_or(f64::NAN, |k| c / k);
        let rows_per_sample = match format {
            Format::Kiln => rows as f64 / samples as f64,
            _ => passes[i].rows as f64 / samples as f64,
        };
        table.push(format!(
            "{:<34} {:>8} {:>10.1} {:>11.1} {:>7.3} {:>10.1} {:>8.0} {:>8.3}",
            format.name(),
            requests,
            bytes as f64 / samples as f64,
            c / 1e3,
            ratio,
            w / 1e3,
            samples as f64 / c / requests as f64 * 1e6,
            rows_per_sample
        ));
        let name = format.name();
        report.add(format!("{name}: samples/CPU-s"), c, "samples/s");
        report.add(format!("{name}: samples/s wall"), w, "samples/s");
        report.add(format!("{name}: / Kiln batch"), ratio, "x");
        report.add(
            format!("{name}: sent bytes/sample"),
            bytes as f64 / samples as f64,
            "B",
        );
    }
    println!("\nmedians of {} rounds, one thread:", args.rounds);
    for line in table {
        println!("  {line}");
    }

    // Where each conversion's time goes: one more pass, by stage.
    println!("\nby stage, one pass, CPU time per 1k samples (ms):");
    println!(
        "  {:<34} {:>10} {:>10} {:>10}",
        "format", "gunzip", "convert", "encode"
    );
    for &i in &timed {
        let format = FORMATS[i];
        if format == Format::Kiln {
            continue;
        }
        let stages = stages(&bodies, format, now_ns)?;
        let per_k = |d: Duration| d.as_secs_f64() * 1e3 / (samples as f64 / 1e3);
        println!(
            "  {:<34} {:>10.3} {:>10.3} {:>10.3}",
            format.name(),
            per_k(stages[0]),
            per_k(stages[1]),
            per_k(stages[2])
        );
    }
    report.finish("protocol_bench");
    Ok(())
}

/// [`pass`] with its stages timed apart (thread CPU): decompressing the
/// body (`Content-Encoding`), converting it (the pprof's own gzip
/// included for Pyroscope), encoding the batches.
fn stages(bodies: &Bodies, format: Format, now_ns: i64) -> anyhow::Result<[Duration; 3]> {
    let mut t = [Duration::ZERO; 3];
    let mut timed = |stage: usize, t0: Duration| t[stage] += thread_cpu() - t0;
    let otlp = OtlpOptions { now_ns };
    let pyroscope = PyroscopeOptions { now_ns };
    let encode = |batches: &[Batch]| {
        for batch in batches {
            black_box(batch.encode());
        }
    };
    let list = match format {
        Format::OtlpProto => &bodies.otlp,
        Format::OtlpJson => &bodies.otlp_json,
        Format::PyroscopePush => &bodies.push,
        Format::Kiln => return Ok(t),
        Format::PyroscopeIngest => {
            for r in &bodies.ingest {
                let t0 = thread_cpu();
                let imported = kiln_formats::pyroscope::import_ingest(
                    &r.query,
                    Some(&r.content_type),
                    &r.body,
                    &pyroscope,
                )?;
                timed(1, t0);
                let t0 = thread_cpu();
                encode(&imported.batches);
                timed(2, t0);
            }
            return Ok(t);
        }
    };
    for body in list {
        let t0 = thread_cpu();
        let body = gunzip(body)?;
        timed(0, t0);
        let t0 = thread_cpu();
        let batches = match format {
            Format::OtlpProto => kiln_formats::otlp::import(&body, &otlp)?.batches,
            Format::OtlpJson => kiln_formats::otlp::import_json(&body, &otlp)?.batches,
            _ => {
                kiln_formats::pyroscope::import_push(&body, PushEncoding::Proto, &pyroscope)?
                    .batches
            }
        };
        timed(1, t0);
        let t0 = thread_cpu();
        encode(&batches);
        timed(2, t0);
    }
    Ok(t)
}
