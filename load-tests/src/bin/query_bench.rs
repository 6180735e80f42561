//! Flamegraph query latency of the aggregation cluster: one query node
//! against 2 and 3 query nodes that share partition scans (`kiln query
//! --peers`), on the same stored data, in the same run.
//!
//! The data is the synthetic fleet's profile over `--hours` hours (one
//! storage partition each), written straight into one embedded store that
//! every node reads, as query nodes share their deployment's store. Each
//! node is a query role on an actix system of its own (as
//! `distributed_bench` runs its roles), serving HTTP on loopback; every
//! query goes to the first node, which scans the partitions it owns and
//! asks its peers for theirs over `POST /internal/v1/scan`.
//!
//! - Cold: the first query of freshly started nodes (their label-set and
//!   frame caches empty; the operating system's page cache of the store's
//!   files stays warm), `--cold` fresh starts per cluster size.
//! - Warm: `--queries` queries in a row on nodes that answered one before.
//!
//! Where the time goes: the store's scans alone (every partition at once,
//! outside the query path), and the queried node's own split of each
//! flamegraph, from its `flamegraph built` debug event: gathering the
//! partials (scans, the wire for peers' scans, the merge), resolving the
//! stacks to frames, and building the graph; the rest of a query's time is
//! encoding the answer and HTTP. Before timing, every cluster's collapsed
//! flamegraph is checked against the single node's.
//!
//! `cargo run --release -p kiln-load-tests --bin query_bench`

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use kiln_actors::query::{
    CLUSTER_SECRET_HEADER, ClusterSecret, DEFAULT_PEER_TIMEOUT, PeerOptions, ScanCounts,
};
use kiln_actors::roles::{self, HttpOptions};
use kiln_actors::{DEFAULT_PROJECT, DEFAULT_TENANT};
use kiln_load_tests::report::{Report, percentile};
use kiln_load_tests::store::write_batch;
use kiln_load_tests::synth::{Fleet, StackPopulation};
use kiln_load_tests::systems::{http_client, spawn_system, tenant_key};
use kiln_model::NANOS_PER_HOUR;
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ObjectStore,
    ProfileStore, Scope,
};
use kiln_symbolizer_workers::SymbolizerConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;

#[derive(Debug, Parser)]
#[command(about = "Flamegraph query latency: 1 query node against 2 and 3 sharing scans")]
struct Args {
    /// Hours of data, one storage partition each: a day, so that
    /// rendezvous hashing has enough partitions to spread evenly.
    #[arg(long, default_value_t = 24)]
    hours: usize,
    /// Hosts in the simulated fleet.
    #[arg(long, default_value_t = 40)]
    hosts: usize,
    /// 5-second intervals each host sends per hour.
    #[arg(long, default_value_t = 3)]
    intervals: usize,
    /// Samples per host per interval (8 cores × 19 Hz × 5 s = 760).
    #[arg(long, default_value_t = 760)]
    samples: usize,
    /// Distinct stacks in the population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// Largest cluster measured (1, 2, … up to this many query nodes).
    #[arg(long, default_value_t = 3)]
    max_nodes: usize,
    /// Aggregator actors (threads) per node.
    #[arg(long, default_value_t = 2)]
    aggregators: usize,
    /// Warm queries per cluster size.
    #[arg(long, default_value_t = 20)]
    queries: usize,
    /// Cold starts (one query each) per cluster size.
    #[arg(long, default_value_t = 5)]
    cold: usize,
}

/// What every node presents to its peers' internal endpoints.
const SECRET: &str = "query-bench-cluster-secret";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let splits = Splits::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(
            splits
                .clone()
                .with_filter(Targets::new().with_target("kiln_actors::query", LevelFilter::DEBUG)),
        ),
    )?;

    let dir = tempfile::tempdir()?;
    let store: Arc<dyn ProfileStore> =
        Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?);
    let objects: Arc<dyn ObjectStore> =
        Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let range = runtime.block_on(fill(&*store, &args))?;
    // Who may read it: a key of its tenant and project, which every node
    // checks (with its key cache, as in production).
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedMetadataStore::open(
        &dir.path().join("metadata.json"),
    )?);
    let key = runtime.block_on(tenant_key(&*metadata, &range.scope))?;
    let access = Access {
        metadata,
        authorization: format!("Bearer {key}"),
    };
    println!(
        "query_bench: {} samples over {} partitions, {} stacks; up to {} query nodes of {} aggregators",
        range.samples, args.hours, args.stacks, args.max_nodes, args.aggregators
    );

    let mut report = Report::default();
    report.add("samples stored", range.samples as f64, "samples");
    let store_scan = runtime.block_on(time_store_scans(&*store, &range))?;
    report.time("store scans alone, every partition at once", store_scan);

    let expected = {
        let cluster = QueryCluster::start(1, &store, &objects, &access, args.aggregators)?;
        let collapsed = cluster.collapsed(&range)?;
        cluster.stop();
        collapsed
    };
    anyhow::ensure!(!expected.is_empty(), "the single node found no samples");

    let mut warm_p50s = Vec::new();
    let mut cold_p50s = Vec::new();
    for nodes in 1..=args.max_nodes.max(1) {
        let name = if nodes == 1 {
            "1 node".to_owned()
        } else {
            format!("{nodes} peers")
        };
        println!("{name}:");
        let mut cold = Vec::new();
        for _ in 0..args.cold {
            let cluster = QueryCluster::start(nodes, &store, &objects, &access, args.aggregators)?;
            cold.push(cluster.flamegraph(&range)?);
            cluster.stop();
        }
        let cold_splits = splits.take();

        let cluster = QueryCluster::start(nodes, &store, &objects, &access, args.aggregators)?;
        anyhow::ensure!(
            cluster.collapsed(&range)? == expected,
            "{name}: the flamegraph differs from the single node's"
        );
        let mut warm = Vec::new();
        for _ in 0..args.queries {
            warm.push(cluster.flamegraph(&range)?);
        }
        let warm_splits = splits.take();
        let counts = cluster.scan_counts()?;
        cluster.stop();

        cold.sort();
        warm.sort();
        report.time(format!("{name}: cold p50"), percentile(&cold, 50));
        report.time(format!("{name}: cold p95"), percentile(&cold, 95));
        report.time(format!("{name}: warm p50"), percentile(&warm, 50));
        report.time(format!("{name}: warm p95"), percentile(&warm, 95));
        for (which, taken) in [("cold", &cold_splits), ("warm", &warm_splits)] {
            let split = Split::median(taken);
            report.add(
                format!("{name}: {which} gather (median)"),
                split.gather_ms,
                "ms",
            );
            report.add(
                format!("{name}: {which} resolve (median)"),
                split.resolve_ms,
                "ms",
            );
            report.add(
                format!("{name}: {which} build (median)"),
                split.build_ms,
                "ms",
            );
        }
        if let Some(counts) = counts {
            let (here, peers) = counts;
            report.add(
                format!("{name}: scans run by the queried node"),
                here.local as f64,
                "scans",
            );
            report.add(
                format!("{name}: scans its peers answered"),
                here.remote as f64,
                "scans",
            );
            report.add(
                format!("{name}: scans its peers served"),
                peers.iter().map(|c| c.served).sum::<u64>() as f64,
                "scans",
            );
            anyhow::ensure!(here.fallback == 0, "{name}: a peer failed a scan");
        }
        cold_p50s.push((name.clone(), percentile(&cold, 50)));
        warm_p50s.push((name, percentile(&warm, 50)));
    }
    for (which, p50s) in [("cold", &cold_p50s), ("warm", &warm_p50s)] {
        let single = p50s[0].1.as_secs_f64();
        for (name, p50) in &p50s[1..] {
            report.add(
                format!("{name} / 1 node {which} p50"),
                p50.as_secs_f64() / single,
                "x",
            );
        }
    }
    report.finish("query");
    Ok(())
}

/// The stored range: what the queries ask for.
struct StoredRange {
    scope: Scope,
    /// The first hour's start, in seconds since the epoch.
    from_s: i64,
    /// The end of the last hour.
    to_s: i64,
    samples: u64,
}

/// Writes the fleet's batches for `args.hours` whole hours ending at least
/// an hour ago, as the ingest writer does (dictionary first, samples last,
/// one sync at the end).
async fn fill(store: &dyn ProfileStore, args: &Args) -> anyhow::Result<StoredRange> {
    let population = StackPopulation::new(args.stacks, 1.1, 1);
    let fleet = Fleet::of_agents(args.hosts, args.samples);
    let now_hour = kiln_model::now_ns().div_euclid(NANOS_PER_HOUR);
    let first_hour = now_hour - args.hours as i64 - 1;
    let scope = Scope::new(DEFAULT_TENANT, DEFAULT_PROJECT)?;
    let mut rng = StdRng::seed_from_u64(3);
    let mut samples = 0;
    for hour in 0..args.hours as i64 {
        let start_ns = (first_hour + hour) * NANOS_PER_HOUR;
        for interval in 0..args.intervals {
            for host in 0..args.hosts {
                let batch = fleet.batch(&population, host, interval, start_ns, &mut rng);
                write_batch(store, &scope, &batch).await?;
                samples += batch.sample_count();
            }
        }
    }
    store.sync().await?;
    let hour_s = NANOS_PER_HOUR / 1_000_000_000;
    Ok(StoredRange {
        scope,
        from_s: first_hour * hour_s,
        to_s: (first_hour + args.hours as i64) * hour_s,
        samples,
    })
}

/// The median time of the store's scans of every partition, all at once
/// (as one node's aggregators run them), outside the query path.
async fn time_store_scans(
    store: &dyn ProfileStore,
    range: &StoredRange,
) -> anyhow::Result<Duration> {
    let hour_ns = NANOS_PER_HOUR;
    let hours = (range.from_s * 1_000_000_000 / hour_ns)..(range.to_s * 1_000_000_000 / hour_ns);
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let scans = hours
            .clone()
            .map(|h| store.scan_samples(&range.scope, h * hour_ns, (h + 1) * hour_ns));
        for scanned in futures_util::future::join_all(scans).await {
            scanned?;
        }
        times.push(started.elapsed());
    }
    times.sort();
    Ok(percentile(&times, 50))
}

/// The metadata store the query nodes check keys against, and what the
/// bench's requests present.
struct Access {
    metadata: Arc<dyn MetadataStore>,
    /// `Bearer KEY`, a key with the read role on the stored scope.
    authorization: String,
}

/// Query nodes sharing one store, each on an actix system of its own.
struct QueryCluster {
    /// Each node's public API.
    urls: Vec<String>,
    /// Each node's peers' listener (`/internal/`).
    peer_urls: Vec<String>,
    authorization: String,
    systems: Vec<actix_rt::System>,
}

impl QueryCluster {
    /// `nodes` query nodes; with more than one, each knows all of them as
    /// its peers.
    fn start(
        nodes: usize,
        store: &Arc<dyn ProfileStore>,
        objects: &Arc<dyn ObjectStore>,
        access: &Access,
        aggregators: usize,
    ) -> anyhow::Result<QueryCluster> {
        // The public listeners first, then the peers' own.
        let mut addrs = free_addrs(2 * nodes)?;
        let peer_addrs = addrs.split_off(nodes);
        let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
        let peer_urls: Vec<String> = peer_addrs.iter().map(|a| format!("http://{a}")).collect();
        let mut systems = Vec::new();
        for (i, addr) in addrs.into_iter().enumerate() {
            let peers = (nodes > 1)
                .then(|| {
                    anyhow::Ok(PeerOptions {
                        listen: peer_addrs[i],
                        advertise: peer_urls[i].clone(),
                        peers: peer_urls.clone(),
                        secret: ClusterSecret::new(SECRET)?,
                        timeout: DEFAULT_PEER_TIMEOUT,
                    })
                })
                .transpose()?;
            let (store, objects) = (store.clone(), objects.clone());
            let metadata = access.metadata.clone();
            let http = HttpOptions {
                workers: 2,
                ..HttpOptions::new(addr)
            };
            let (system, _) = spawn_system(&format!("query-{i}"), move || async move {
                let symbolizer = SymbolizerConfig::default();
                let running = roles::start_query(
                    store,
                    objects,
                    metadata,
                    aggregators,
                    symbolizer,
                    peers,
                    http,
                )
                .await?;
                Ok((Some(running.local_addr), Some(running.server)))
            })?;
            systems.push(system);
        }
        Ok(QueryCluster {
            urls,
            peer_urls,
            authorization: access.authorization.clone(),
            systems,
        })
    }

    fn get(&self, node: usize, path: &str) -> anyhow::Result<ureq::http::Response<ureq::Body>> {
        let base = match path.starts_with("/internal/") {
            true => &self.peer_urls[node],
            false => &self.urls[node],
        };
        let url = format!("{base}{path}");
        let mut response = http_client(Duration::from_secs(300))
            .get(&url)
            .header("authorization", &self.authorization)
            .header(CLUSTER_SECRET_HEADER, SECRET)
            .call()?;
        if response.status() != 200 {
            let mut text = String::new();
            response.body_mut().as_reader().read_to_string(&mut text)?;
            anyhow::bail!("{url}: HTTP {}: {text}", response.status());
        }
        Ok(response)
    }

    /// The first node's answer to a flamegraph of the whole range in
    /// `format`.
    fn whole_flamegraph(
        &self,
        range: &StoredRange,
        format: &str,
    ) -> anyhow::Result<ureq::http::Response<ureq::Body>> {
        self.get(
            0,
            &format!(
                "/api/v1/flamegraph?from={}&to={}&format={format}",
                range.from_s, range.to_s
            ),
        )
    }

    /// One flamegraph of the whole range from the first node, as the UI
    /// asks for it (Flamewire); returns its latency, body read.
    fn flamegraph(&self, range: &StoredRange) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut response = self.whole_flamegraph(range, "flamewire")?;
        let mut body = Vec::new();
        response.body_mut().as_reader().read_to_end(&mut body)?;
        anyhow::ensure!(!body.is_empty(), "an empty flamegraph");
        Ok(started.elapsed())
    }

    /// The whole range's collapsed stacks from the first node, as a set of
    /// lines (their order is not part of the answer).
    fn collapsed(&self, range: &StoredRange) -> anyhow::Result<BTreeSet<String>> {
        let mut response = self.whole_flamegraph(range, "collapsed")?;
        let mut text = String::new();
        response.body_mut().as_reader().read_to_string(&mut text)?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// The first node's scan counts and its peers', when it has peers.
    fn scan_counts(&self) -> anyhow::Result<Option<(ScanCounts, Vec<ScanCounts>)>> {
        if self.urls.len() < 2 {
            return Ok(None);
        }
        let mut counts = Vec::new();
        for node in 0..self.urls.len() {
            let mut response = self.get(node, "/internal/v1/scan-counts")?;
            counts.push(response.body_mut().read_json::<ScanCounts>()?);
        }
        let first = counts.remove(0);
        Ok(Some((first, counts)))
    }

    fn stop(self) {
        for system in &self.systems {
            system.stop();
        }
    }
}

/// `n` loopback addresses free a moment ago (bound together, so distinct),
/// for nodes that must know each other's URLs before they start.
fn free_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("finding free ports")?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<Vec<_>, _>>()?)
}

/// The queried node's split of one flamegraph, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Split {
    /// Scans (here, or a peer's over the wire) and the merge.
    gather_ms: f64,
    /// Stacks to frames.
    resolve_ms: f64,
    /// The graph.
    build_ms: f64,
}

impl Split {
    /// Each part's median over `splits`.
    fn median(splits: &[Split]) -> Split {
        let median = |part: fn(&Split) -> f64| {
            let mut values: Vec<f64> = splits.iter().map(part).collect();
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied().unwrap_or_default()
        };
        Split {
            gather_ms: median(|s| s.gather_ms),
            resolve_ms: median(|s| s.resolve_ms),
            build_ms: median(|s| s.build_ms),
        }
    }
}

/// Collects the query coordinator's `flamegraph built` debug events.
#[derive(Debug, Clone, Default)]
struct Splits(Arc<Mutex<Vec<Split>>>);

impl Splits {
    /// The splits collected since the last take.
    fn take(&self) -> Vec<Split> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<S: tracing::Subscriber> Layer<S> for Splits {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = SplitFields::default();
        event.record(&mut fields);
        if fields.built {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(fields.split);
        }
    }
}

/// Reads a `flamegraph built` event's fields.
#[derive(Debug, Default)]
struct SplitFields {
    built: bool,
    split: Split,
}

impl Visit for SplitFields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        match field.name() {
            "scan_ms" => self.split.gather_ms = value,
            "resolve_ms" => self.split.resolve_ms = value,
            "build_ms" => self.split.build_ms = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.built = format!("{value:?}") == "flamegraph built";
        }
    }
}
