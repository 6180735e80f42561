//! Distributed ingest: throughput of the synthetic fleet's batches through
//! the gateway (HTTP) → bus → workers → store, and the latency from a
//! batch's publish to its samples answering a query.
//!
//! Three clusters, each in this process (one actix system per role, on
//! threads of its own), measured in the same run:
//!
//! - baseline: the embedded bus and store, gateway and one worker sharing
//!   them, as `kiln up` runs;
//! - Kafka (tansu) and PostgreSQL with one worker;
//! - the same with two workers (one consumer group).
//!
//! Throughput is timed from the first POST until the workers' committed
//! offsets cover every batch; latency is one probe batch at a time on the
//! idle cluster, from its POST until the query API returns its samples.
//!
//! `KILN_TEST_KAFKA=… KILN_TEST_POSTGRES=… cargo run --release -p kiln-load-tests --bin distributed_bench`
//! (scripts/kafka-test-server.sh and scripts/pg-test-server.sh print the
//! URLs).

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use kiln_actors::ingest::CONSUMER_GROUP;
use kiln_actors::roles::{self, HttpOptions};
use kiln_ingest_bus::{Bus, BusUrl, EmbeddedBus};
use kiln_load_tests::report::{Report, percentile};
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_load_tests::systems::{http_client, spawn_system, tenant_key};
use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet};
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ObjectStore,
    PostgresProfileStore, ProfileStore, Scope,
};
use kiln_symbolizer_workers::SymbolizerConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "Gateway → Kafka → workers throughput and publish-to-queryable latency")]
struct Args {
    /// The broker, kafka://HOST:PORT (a fresh topic is created per run).
    #[arg(long, env = "KILN_TEST_KAFKA")]
    kafka: String,
    /// A PostgreSQL server, postgres://USER@HOST:PORT/DB (a fresh database
    /// is created per cluster, with psql).
    #[arg(long, env = "KILN_TEST_POSTGRES")]
    postgres: String,
    /// Hosts in the simulated fleet.
    #[arg(long, default_value_t = 50)]
    hosts: usize,
    /// 5-second intervals each host sends.
    #[arg(long, default_value_t = 8)]
    intervals: usize,
    /// Samples per host per interval (8 cores × 19 Hz × 5 s = 760).
    #[arg(long, default_value_t = 760)]
    samples: usize,
    /// Distinct stacks in the population.
    #[arg(long, default_value_t = 5_000)]
    stacks: usize,
    /// Concurrent HTTP clients posting batches.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Latency probes per cluster.
    #[arg(long, default_value_t = 40)]
    probes: usize,
    /// Bus partitions.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let population = StackPopulation::new(args.stacks, 1.1, 1);
    let fleet = Fleet::of_agents(args.hosts, args.samples);
    let mut rng = StdRng::seed_from_u64(2);
    // An hour ago, so that the probes' "now-5m" queries do not scan them.
    let start_ns = kiln_model::now_ns() - 3_600_000_000_000;
    let batches: Vec<Batch> = (0..args.intervals)
        .flat_map(|i| (0..args.hosts).map(move |h| (h, i)))
        .map(|(h, i)| fleet.batch(&population, h, i, start_ns, &mut rng))
        .collect();
    let samples: u64 = batches.iter().map(Batch::sample_count).sum();
    let encoded: Arc<Vec<Vec<u8>>> = Arc::new(batches.iter().map(Batch::encode).collect());
    println!(
        "distributed_bench: {} batches, {samples} samples, {} stacks, {} clients, {} partitions",
        encoded.len(),
        args.stacks,
        args.clients,
        args.partitions
    );

    let mut report = Report::default();
    report.add("samples", samples as f64, "samples");
    let mut throughputs = Vec::new();
    for kind in [Kind::Embedded, Kind::Kafka(1), Kind::Kafka(2)] {
        let name = kind.name();
        println!("{name}:");
        let cluster = Cluster::start(kind, &args)?;
        let elapsed = cluster.ingest(&encoded, args.clients)?;
        let rate = samples as f64 / elapsed.as_secs_f64();
        report.add(format!("{name}: ingest samples/s"), rate, "samples/s");
        throughputs.push((name.clone(), rate));
        let mut latencies = cluster.probe(args.probes)?;
        latencies.sort();
        report.time(
            format!("{name}: publish→queryable p50"),
            percentile(&latencies, 50),
        );
        report.time(
            format!("{name}: publish→queryable p99"),
            percentile(&latencies, 99),
        );
        cluster.stop();
    }
    let baseline = throughputs[0].1;
    for (name, rate) in &throughputs[1..] {
        report.add(
            format!("{name} / embedded throughput"),
            rate / baseline,
            "x",
        );
    }
    report.add(
        "2 workers / 1 worker throughput",
        throughputs[2].1 / throughputs[1].1,
        "x",
    );
    report.finish("distributed");
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Embedded,
    Kafka(usize),
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Embedded => "embedded".into(),
            Kind::Kafka(1) => "kafka, 1 worker".into(),
            Kind::Kafka(n) => format!("kafka, {n} workers"),
        }
    }
}

/// A gateway, workers and a query node, each on an actix system of its own.
struct Cluster {
    gateway: String,
    query: String,
    /// `Bearer KEY`: a key (ingest and read) of the bench's tenant, which
    /// the gateway and the query node check every request's against.
    authorization: String,
    /// A handle on the bus, to read the workers' committed offsets.
    bus: Arc<dyn Bus>,
    runtime: tokio::runtime::Runtime,
    systems: Vec<actix_rt::System>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start(kind: Kind, args: &Args) -> anyhow::Result<Cluster> {
        let dir = tempfile::tempdir()?;
        // Multi-threaded, so that tasks the clients spawn here (the
        // PostgreSQL connection, librdkafka's callbacks) keep running
        // between this thread's own calls.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let objects: Arc<dyn ObjectStore> =
            Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
        type Backends = (
            Arc<dyn Bus>,
            Arc<dyn ProfileStore>,
            Arc<dyn MetadataStore>,
            usize,
        );
        let (bus, store, metadata, workers): Backends = match kind {
            Kind::Embedded => (
                Arc::new(EmbeddedBus::open(&dir.path().join("bus"), args.partitions)?),
                Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?),
                Arc::new(EmbeddedMetadataStore::open(
                    &dir.path().join("metadata.json"),
                )?),
                1,
            ),
            Kind::Kafka(workers) => {
                let topic = format!("bench-{}", unique());
                let url: BusUrl =
                    format!("{}/{topic}?partitions={}", args.kafka, args.partitions).parse()?;
                let bus = runtime.block_on(url.open(args.partitions))?;
                let db = fresh_database(&args.postgres)?;
                let store = runtime.block_on(async {
                    let store = PostgresProfileStore::connect(&db).await?;
                    store.migrate().await?;
                    anyhow::Ok(store)
                })?;
                // Tenants and keys in the same database, as `kiln gateway
                // --metadata` and `kiln query --metadata` would use it.
                let metadata = Arc::new(store.metadata());
                (bus, Arc::new(store), metadata, workers)
            }
        };
        let scope = Scope::new("bench", "bench")?;
        let key = runtime.block_on(tenant_key(&*metadata, &scope))?;
        let mut systems = Vec::new();
        let listen: SocketAddr = "127.0.0.1:0".parse()?;
        let http = HttpOptions {
            workers: 2,
            ..HttpOptions::new(listen)
        };
        // The key the gateway signs bus records with and the workers verify.
        let bus_key = kiln_actors::envelope::BusKey::generate()?;
        let (gateway_system, gateway) = spawn_system("gateway", {
            let (bus, store, objects) = (bus.clone(), store.clone(), objects.clone());
            let metadata = metadata.clone();
            let http = http.clone();
            let bus_key = bus_key.clone();
            move || async move {
                let running =
                    roles::start_gateway(bus, store, objects, metadata, None, http, bus_key)
                        .await?;
                Ok((Some(running.local_addr), Some(running.server)))
            }
        })?;
        systems.push(gateway_system);
        for _ in 0..workers {
            let (system, _) = spawn_system("worker", {
                let (bus, store, objects) = (bus.clone(), store.clone(), objects.clone());
                let bus_key = bus_key.clone();
                move || async move {
                    let symbolizer = SymbolizerConfig::default();
                    // Its /metrics listener, on a port of its own.
                    let running = roles::start_worker(
                        bus,
                        store,
                        objects,
                        symbolizer,
                        bus_key,
                        listen,
                        Default::default(),
                    )
                    .await?;
                    Ok((None, Some(running.server)))
                }
            })?;
            systems.push(system);
        }
        let (query_system, query) = spawn_system("query", {
            let (store, objects) = (store.clone(), objects.clone());
            move || async move {
                let symbolizer = SymbolizerConfig::default();
                let running =
                    roles::start_query(store, objects, metadata, 2, symbolizer, None, http).await?;
                Ok((Some(running.local_addr), Some(running.server)))
            }
        })?;
        systems.push(query_system);
        let cluster = Cluster {
            gateway: format!("http://{}", gateway.context("gateway address")?),
            query: format!("http://{}", query.context("query address")?),
            authorization: format!("Bearer {key}"),
            bus,
            runtime,
            systems,
            _dir: dir,
        };
        // Wait until the workers hold their partitions: one batch through.
        let warmup = probe_batch("warmup");
        cluster.post(&warmup)?;
        cluster.wait_committed(1, Duration::from_secs(120))?;
        Ok(cluster)
    }

    fn post(&self, batch: &[u8]) -> anyhow::Result<()> {
        let mut response = http_client(Duration::from_secs(120))
            .post(format!("{}/api/v1/ingest", self.gateway))
            .header("authorization", &self.authorization)
            .send(batch)?;
        let status = response.status().as_u16();
        if status != 200 {
            let mut text = String::new();
            response.body_mut().as_reader().read_to_string(&mut text)?;
            bail!("gateway answered {status}: {text}");
        }
        Ok(())
    }

    /// Waits until the workers have committed `records` records in all.
    fn wait_committed(&self, records: u64, timeout: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let offsets = self
                .runtime
                .block_on(self.bus.committed_offsets(CONSUMER_GROUP))?;
            if offsets.iter().sum::<u64>() >= records {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!("workers committed {offsets:?}, not {records} records, in {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Posts every batch from `clients` threads; returns the time until the
    /// workers committed the last.
    fn ingest(&self, batches: &Arc<Vec<Vec<u8>>>, clients: usize) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let next = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..clients.max(1))
            .map(|_| {
                let (batches, next, gateway) =
                    (batches.clone(), next.clone(), self.gateway.clone());
                let authorization = self.authorization.clone();
                std::thread::spawn(move || -> anyhow::Result<()> {
                    let agent = http_client(Duration::from_secs(120));
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(batch) = batches.get(i) else {
                            return Ok(());
                        };
                        let response = agent
                            .post(format!("{gateway}/api/v1/ingest"))
                            .header("authorization", &authorization)
                            .send(&batch[..])?;
                        anyhow::ensure!(
                            response.status() == 200,
                            "gateway answered {}",
                            response.status()
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        }
        // The warmup batch was the first record.
        self.wait_committed(batches.len() as u64 + 1, Duration::from_secs(1200))?;
        Ok(started.elapsed())
    }

    /// Publish-to-queryable latency of `n` probe batches, one at a time.
    fn probe(&self, n: usize) -> anyhow::Result<Vec<Duration>> {
        let mut latencies = Vec::with_capacity(n);
        for i in 0..n {
            let tag = format!("probe-{i}");
            let batch = probe_batch(&tag);
            let started = Instant::now();
            self.post(&batch)?;
            let url = format!(
                "{}/api/v1/flamegraph?from=now-5m&format=collapsed&probe={tag}",
                self.query
            );
            loop {
                let mut response = http_client(Duration::from_secs(120))
                    .get(&url)
                    .header("authorization", &self.authorization)
                    .call()?;
                let mut body = String::new();
                response.body_mut().as_reader().read_to_string(&mut body)?;
                if !body.trim().is_empty() {
                    break;
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(60),
                    "{tag} never arrived"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            latencies.push(started.elapsed());
        }
        Ok(latencies)
    }

    fn stop(self) {
        for system in &self.systems {
            system.stop();
        }
    }
}

/// One small batch whose samples carry the label `probe=TAG`, stamped now.
fn probe_batch(tag: &str) -> Vec<u8> {
    let now = kiln_model::now_ns();
    let mut b = BatchBuilder::new(format!("prober-{tag}"), now, 10_000_000);
    let frames = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, "probe"),
    ];
    b.add(now, &frames, &LabelSet::new().with("probe", tag), 1);
    b.finish().encode()
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// A fresh database on the server at `server_url`; returns its URL.
fn fresh_database(server_url: &str) -> anyhow::Result<String> {
    let name = format!("kiln_bench_{}", unique().replace('-', "_"));
    let status = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", server_url, "-c"])
        .arg(format!("CREATE DATABASE {name}"))
        .status()
        .context("running psql")?;
    anyhow::ensure!(status.success(), "psql could not create database {name}");
    let (base, _) = server_url
        .rsplit_once('/')
        .context("a PostgreSQL URL ends in /DATABASE")?;
    Ok(format!("{base}/{name}"))
}
