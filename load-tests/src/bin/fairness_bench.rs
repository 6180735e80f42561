//! Query fairness between tenants: one tenant's small flamegraph, alone
//! and while another tenant runs heavy flamegraphs on the same query node
//! without pause, as many at once as its concurrency limit lets it.
//!
//! The heavy tenant's data is the synthetic fleet's profile over
//! `--hours` hours (one storage partition each, each scan thousands of
//! samples); the light tenant's is one hour of a few stacks. Both are
//! written straight into one embedded store, which one query node (the
//! query role, on an actix system of its own, serving HTTP on loopback)
//! reads. The figure that matters is the light query's latency beside the
//! heavy ones over its latency alone (goal: within 2×).
//!
//! `cargo run --release -p kiln-load-tests --bin fairness_bench`

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_actors::roles::{self, HttpOptions};
use kiln_load_tests::report::{Report, percentile};
use kiln_load_tests::store::write_batch;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_load_tests::systems::{http_client, spawn_system, tenant_key};
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, NANOS_PER_HOUR};
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ObjectStore,
    ProfileStore, Scope,
};
use kiln_symbolizer_workers::SymbolizerConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "A small query's latency alone and beside another tenant's heavy queries")]
struct Args {
    /// Hours of the heavy tenant's data, one storage partition each.
    #[arg(long, default_value_t = 24)]
    hours: usize,
    /// Hosts in the heavy tenant's fleet.
    #[arg(long, default_value_t = 40)]
    hosts: usize,
    /// 5-second intervals each host sends per hour.
    #[arg(long, default_value_t = 3)]
    intervals: usize,
    /// Distinct stacks in the heavy tenant's population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// Heavy queries running at once (the tenant's default
    /// `max_concurrent_queries` is 8).
    #[arg(long, default_value_t = 8)]
    heavy: usize,
    /// Light queries timed, alone and beside the heavy ones.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Aggregator actors (threads) of the query node.
    #[arg(long, default_value_t = 2)]
    aggregators: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn ProfileStore> =
        Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?);
    let objects: Arc<dyn ObjectStore> =
        Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedMetadataStore::open(
        &dir.path().join("metadata.json"),
    )?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let now_hour = kiln_model::now_ns().div_euclid(NANOS_PER_HOUR);
    let first_hour = now_hour - args.hours as i64 - 1;
    let heavy = Scope::new("heavy", "default")?;
    let light = Scope::new("light", "default")?;
    let (heavy_samples, heavy_key, light_key) = runtime.block_on(async {
        let samples = fill_heavy(&*store, &heavy, first_hour, &args).await?;
        fill_light(&*store, &light, first_hour + args.hours as i64 - 1).await?;
        store.sync().await?;
        let heavy_key = tenant_key(&*metadata, &heavy).await?;
        let light_key = tenant_key(&*metadata, &light).await?;
        anyhow::Ok((samples, heavy_key, light_key))
    })?;
    let hour_s = NANOS_PER_HOUR / 1_000_000_000;
    let range = format!(
        "from={}&to={}",
        first_hour * hour_s,
        (first_hour + args.hours as i64) * hour_s
    );
    println!(
        "fairness_bench: heavy tenant {heavy_samples} samples over {} partitions; light \
         tenant one partition; {} heavy queries at once; {} aggregators",
        args.hours, args.heavy, args.aggregators
    );

    let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let url = format!("http://{addr}");
    let (store_, objects_, metadata_) = (store.clone(), objects.clone(), metadata.clone());
    let aggregators = args.aggregators;
    let (system, _) = spawn_system("query", move || async move {
        let http = HttpOptions {
            workers: 2,
            ..HttpOptions::new(addr)
        };
        let running = roles::start_query(
            store_,
            objects_,
            metadata_,
            aggregators,
            SymbolizerConfig::default(),
            None,
            http,
        )
        .await?;
        Ok((Some(running.local_addr), Some(running.server)))
    })?;

    let flamegraph = format!("/api/v1/flamegraph?{range}&format=flamewire");
    let light_query = Query::new(&url, &flamegraph, &light_key);
    let heavy_query = Query::new(&url, &flamegraph, &heavy_key);
    // Warm both (caches of label sets, frames and stacks), and time one
    // heavy query alone.
    light_query.run()?;
    let heavy_alone = heavy_query.run()?;
    let light_alone = light_query.times(args.queries)?;

    let stop = Arc::new(AtomicBool::new(false));
    let heavy_done = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let mut loops = Vec::new();
    for _ in 0..args.heavy {
        let (query, stop) = (heavy_query.clone(), Arc::clone(&stop));
        let (done, refused) = (Arc::clone(&heavy_done), Arc::clone(&refused));
        loops.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match query.run() {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    // Let the heavy queries fill the node first.
    std::thread::sleep(heavy_alone.max(Duration::from_millis(500)));
    let started = Instant::now();
    let light_beside = light_query.times(args.queries)?;
    let beside_for = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for handle in loops {
        let _ = handle.join();
    }
    system.stop();

    let mut report = Report::default();
    report.add("heavy tenant's samples", heavy_samples as f64, "samples");
    report.time("heavy flamegraph alone", heavy_alone);
    for (what, times) in [("alone", &light_alone), ("beside heavy", &light_beside)] {
        report.time(
            format!("light flamegraph {what}: p50"),
            percentile(times, 50),
        );
        report.time(
            format!("light flamegraph {what}: p95"),
            percentile(times, 95),
        );
    }
    for p in [50, 95] {
        report.add(
            format!("light beside heavy / alone, p{p}"),
            percentile(&light_beside, p).as_secs_f64() / percentile(&light_alone, p).as_secs_f64(),
            "x",
        );
    }
    report.add(
        "heavy flamegraphs answered meanwhile",
        heavy_done.load(Ordering::Relaxed) as f64,
        "queries",
    );
    report.add(
        "heavy flamegraphs refused (429) meanwhile",
        refused.load(Ordering::Relaxed) as f64,
        "queries",
    );
    report.time("light queries' time beside heavy", beside_for);
    report.finish("fairness");
    Ok(())
}

/// Writes the heavy tenant's fleet for `args.hours` hours from
/// `first_hour`, as the ingest writer does; returns its sample count.
async fn fill_heavy(
    store: &dyn ProfileStore,
    scope: &Scope,
    first_hour: i64,
    args: &Args,
) -> anyhow::Result<u64> {
    let population = StackPopulation::new(args.stacks, 1.1, 1);
    let fleet = Fleet::of_agents(args.hosts, 760);
    let mut rng = StdRng::seed_from_u64(3);
    let mut samples = 0;
    for hour in 0..args.hours as i64 {
        let start_ns = (first_hour + hour) * NANOS_PER_HOUR;
        for interval in 0..args.intervals {
            for host in 0..args.hosts {
                let batch = fleet.batch(&population, host, interval, start_ns, &mut rng);
                write_batch(store, scope, &batch).await?;
                samples += batch.sample_count();
            }
        }
    }
    Ok(samples)
}

/// Writes the light tenant's profile: a few stacks in hour `hour`.
async fn fill_light(store: &dyn ProfileStore, scope: &Scope, hour: i64) -> anyhow::Result<()> {
    let start_ns = hour * NANOS_PER_HOUR;
    let mut builder = BatchBuilder::new("light-host", start_ns, 10_000_000);
    let labels = LabelSet::new().with("process", "small-service");
    for (i, leaf) in ["parse", "handle", "respond"].iter().enumerate() {
        let frames = [
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, *leaf),
        ];
        builder.add(start_ns + 1_000_000_000, &frames, &labels, 10 + i as u64);
    }
    write_batch(store, scope, &builder.finish()).await
}

/// One flamegraph request, as a tenant's UI sends it.
#[derive(Clone)]
struct Query {
    url: String,
    authorization: String,
}

impl Query {
    fn new(base: &str, path: &str, key: &str) -> Query {
        Query {
            url: format!("{base}{path}"),
            authorization: format!("Bearer {key}"),
        }
    }

    /// Runs it once; its time, or an error for any answer but 200.
    fn run(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut response = http_client(Duration::from_secs(300))
            .get(&self.url)
            .header("authorization", &self.authorization)
            .header("accept-encoding", "zstd")
            .call()?;
        let mut body = Vec::new();
        response.body_mut().as_reader().read_to_end(&mut body)?;
        let took = started.elapsed();
        anyhow::ensure!(
            response.status() == 200,
            "{}: HTTP {}",
            self.url,
            response.status()
        );
        Ok(took)
    }

    /// `n` runs one after another, sorted.
    fn times(&self, n: usize) -> anyhow::Result<Vec<Duration>> {
        let mut times = (0..n).map(|_| self.run()).collect::<Result<Vec<_>, _>>()?;
        times.sort();
        Ok(times)
    }
}
