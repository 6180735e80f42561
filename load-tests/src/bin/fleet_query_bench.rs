//! A week's flamegraph of a 1,000-host fleet on one query node (issue 16,
//! item 7): read from the samples, then from the rollups (whole days from
//! day rollups, the hours at either end from hour rollups), on the same
//! stored data, in the same run.
//!
//! The fleet: `--hosts` hosts of `--processes` services each, every host
//! writing `--rows` sample rows per hour for `--days` days, stacks drawn
//! from one Zipf population (a fleet runs the same code), each row's
//! count the hour's samples of 8 cores at 19 Hz shared out. A real agent
//! writes far more rows per hour (one per stack and label set per 5 s
//! batch: thousands), so the samples' figure here is a floor of what
//! reading a real week's samples costs; the rollups' is not, as a rollup
//! holds one row per (stack, service) and hour whatever the agents sent.
//!
//! Steps: write the week straight into an embedded store (as the ingest
//! writer does); start one query node (`kiln query`'s role, its own
//! rollup job off) and time the week's flamegraph over HTTP, cold (fresh
//! node) and warm; run a rollup pass (`Rollups::run_once`, as the node's
//! job or `POST /api/v1/admin/rollups` would) and time it; time the same
//! flamegraph again, cold and warm; check that both answers are the same
//! collapsed stacks.
//!
//! `cargo run --release -p kiln-load-tests --bin fleet_query_bench`

use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_actors::roles::{self, HttpOptions};
use kiln_actors::rollup::Rollups;
use kiln_actors::{DEFAULT_PROJECT, DEFAULT_TENANT};
use kiln_load_tests::report::{Report, percentile};
use kiln_load_tests::synth::StackPopulation;
use kiln_load_tests::systems::{http_client, spawn_system, tenant_key};
use kiln_model::{BatchBuilder, LabelSet, LabelSetId, NANOS_PER_HOUR, StackId, label_names};
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ObjectStore,
    ProfileStore, Scope, StoredFrame, StoredSample,
};
use kiln_symbolizer_workers::SymbolizerConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Parser)]
#[command(about = "A week's flamegraph of a 1,000-host fleet: from samples against from rollups")]
struct Args {
    /// Hosts in the fleet.
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Days of data.
    #[arg(long, default_value_t = 7)]
    days: usize,
    /// Services (processes) per host.
    #[arg(long, default_value_t = 8)]
    processes: usize,
    /// Sample rows each host writes per hour.
    #[arg(long, default_value_t = 60)]
    rows: usize,
    /// Distinct stacks in the fleet's population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// Aggregator actors (threads) of the query node.
    #[arg(long, default_value_t = 2)]
    aggregators: usize,
    /// Warm queries per source.
    #[arg(long, default_value_t = 5)]
    queries: usize,
}

/// Samples one host takes in an hour: 8 cores at 19 Hz.
const SAMPLES_PER_HOST_HOUR: u64 = 8 * 19 * 3600;

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
    let scope = Scope::new(DEFAULT_TENANT, DEFAULT_PROJECT)?;
    let key = runtime.block_on(tenant_key(&*metadata, &scope))?;

    let started = Instant::now();
    let week = runtime.block_on(fill(&*store, &scope, &args))?;
    let fill_time = started.elapsed();
    println!(
        "fleet_query_bench: {} hosts × {} services, {} days: {} sample rows ({:.0} samples) in {:.1?}",
        args.hosts, args.processes, args.days, week.rows, week.samples as f64, fill_time
    );
    let mut report = Report::default();
    report.add("sample rows stored", week.rows as f64, "rows");
    report.add("samples they count", week.samples as f64, "samples");

    let node = || QueryNode::start(&store, &objects, &metadata, &key, args.aggregators);
    let (from_samples, samples_cold, samples_warm) = measure(&node, &week, args.queries)?;
    let (timeline_from_samples, timeline_samples) = measure_timeline(&node, &week, args.queries)?;

    let job = Rollups::new(store.clone(), metadata.clone());
    let started = Instant::now();
    let rolled = runtime.block_on(job.run_once(kiln_model::now_ns()));
    let roll_time = started.elapsed();
    anyhow::ensure!(rolled.failed.is_empty(), "rollup pass: {:?}", rolled.failed);
    anyhow::ensure!(
        rolled.rolled_hours == (args.days * 24) as u64,
        "rolled {} hours, not {}",
        rolled.rolled_hours,
        args.days * 24
    );
    report.add("rollup pass: hours rolled", rolled.rolled_hours as f64, "h");
    report.add(
        "rollup pass: hour rows written",
        rolled.rollup_rows as f64,
        "rows",
    );
    report.add(
        "rollup pass: days rolled",
        rolled.rolled_days as f64,
        "days",
    );
    report.add(
        "rollup pass: day rows written",
        rolled.day_rows as f64,
        "rows",
    );
    report.time("rollup pass: time", roll_time);
    report.add(
        "rollup pass: sample rows read per second",
        rolled.sample_rows as f64 / roll_time.as_secs_f64(),
        "rows/s",
    );
    report.add(
        "hour rollup rows / sample rows",
        rolled.rollup_rows as f64 / rolled.sample_rows.max(1) as f64,
        "x",
    );

    let (from_rollups, rollups_cold, rollups_warm) = measure(&node, &week, args.queries)?;
    let (timeline_from_rollups, timeline_rollups) = measure_timeline(&node, &week, args.queries)?;
    anyhow::ensure!(
        timeline_from_samples == timeline_from_rollups,
        "the week's timeline differs from samples and from rollups"
    );
    anyhow::ensure!(
        from_samples == from_rollups,
        "the week's flamegraph differs: {} collapsed lines from samples, {} from rollups",
        from_samples.len(),
        from_rollups.len()
    );
    report.add(
        "flamegraph: collapsed lines",
        from_samples.len() as f64,
        "lines",
    );
    report.time("week from samples: cold", samples_cold);
    report.time("week from samples: warm p50", samples_warm);
    report.time("week from rollups: cold", rollups_cold);
    report.time("week from rollups: warm p50", rollups_warm);
    report.add(
        "samples / rollups, warm p50",
        samples_warm.as_secs_f64() / rollups_warm.as_secs_f64(),
        "x",
    );
    report.add(
        "samples / rollups, cold",
        samples_cold.as_secs_f64() / rollups_cold.as_secs_f64(),
        "x",
    );
    report.time(
        "week's timeline (UI's default step) from samples: warm p50",
        timeline_samples,
    );
    report.time(
        "week's timeline (UI's default step) from rollups: warm p50",
        timeline_rollups,
    );
    report.finish("fleet_query");
    Ok(())
}

/// The stored week.
struct Week {
    /// First hour's start, seconds since the epoch.
    from_s: i64,
    /// Last hour's end.
    to_s: i64,
    rows: u64,
    samples: u64,
}

/// Writes the fleet's week, whole hours ending at least an hour ago:
/// the dictionaries once, then each hour's rows of every host in one
/// write.
async fn fill(store: &dyn ProfileStore, scope: &Scope, args: &Args) -> anyhow::Result<Week> {
    let population = StackPopulation::new(args.stacks, 1.1, 1);
    let tenant = scope.tenant();
    // The dictionaries, through a batch so that ids are the ingest path's.
    let labels: Vec<Vec<LabelSet>> = (0..args.hosts)
        .map(|host| {
            (0..args.processes)
                .map(|p| {
                    LabelSet::new()
                        .with(label_names::HOST, format!("host-{host:04}"))
                        .with(label_names::PROCESS, format!("service-{p}"))
                        .with(label_names::PID, (1000 + p).to_string())
                })
                .collect()
        })
        .collect();
    let mut dictionary = BatchBuilder::new("fleet", 0, 1);
    for stack in &population.stacks {
        dictionary.add(0, stack, &labels[0][0], 1);
    }
    for set in labels.iter().flatten() {
        dictionary.add(0, &population.stacks[0], set, 1);
    }
    let dictionary = dictionary.finish();
    let frames: Vec<StoredFrame> = dictionary.frames.iter().cloned().map(Into::into).collect();
    store.put_frames(tenant, &frames).await?;
    store.put_stacks(tenant, &dictionary.stacks).await?;
    store.put_label_sets(tenant, &dictionary.label_sets).await?;
    let stack_ids: Vec<StackId> = population
        .stacks
        .iter()
        .map(|stack| kiln_model::stack_id(&stack.iter().map(|f| f.id()).collect::<Vec<_>>()))
        .collect();
    let label_ids: Vec<Vec<LabelSetId>> = labels
        .iter()
        .map(|host| host.iter().map(LabelSet::id).collect())
        .collect();

    let hours = (args.days * 24) as i64;
    let now_hour = kiln_model::now_ns().div_euclid(NANOS_PER_HOUR);
    let first_hour = now_hour - hours - 1;
    let period_ns = 1_000_000_000 / 19;
    let count = (SAMPLES_PER_HOST_HOUR / args.rows.max(1) as u64).max(1);
    let mut rng = StdRng::seed_from_u64(3);
    let (mut rows, mut samples) = (0u64, 0u64);
    for hour in 0..hours {
        let start_ns = (first_hour + hour) * NANOS_PER_HOUR;
        let mut hour_rows = Vec::with_capacity(args.hosts * args.rows);
        for (host, services) in label_ids.iter().enumerate() {
            for row in 0..args.rows {
                // Rows of a host spread over its 5 s batches of the hour.
                let batch = (row * 720 / args.rows.max(1)) as i64;
                hour_rows.push(StoredSample {
                    timestamp_ns: start_ns + batch * 5_000_000_000 + host as i64,
                    stack: stack_ids[population.draw(&mut rng)],
                    labels: services[rng.random_range(0..services.len())],
                    count,
                    period_ns,
                });
            }
        }
        // Two draws of one stack and service in one batch are one row,
        // as an agent's batch sums them.
        let mut merged = std::collections::HashMap::new();
        for s in hour_rows {
            merged
                .entry((s.timestamp_ns, s.stack, s.labels))
                .and_modify(|m: &mut StoredSample| m.count += s.count)
                .or_insert(s);
        }
        let hour_rows: Vec<StoredSample> = merged.into_values().collect();
        rows += hour_rows.len() as u64;
        samples += hour_rows.iter().map(|s| s.count).sum::<u64>();
        store.put_samples(scope, &hour_rows).await?;
    }
    store.sync().await?;
    let hour_s = NANOS_PER_HOUR / 1_000_000_000;
    Ok(Week {
        from_s: first_hour * hour_s,
        to_s: (first_hour + hours) * hour_s,
        rows,
        samples,
    })
}

/// The week's collapsed flamegraph, then the time of its flamegraph on a
/// fresh node (cold) and the median of `queries` more (warm).
fn measure(
    node: &dyn Fn() -> anyhow::Result<QueryNode>,
    week: &Week,
    queries: usize,
) -> anyhow::Result<(BTreeSet<String>, Duration, Duration)> {
    let cold_node = node()?;
    let cold = cold_node.flamegraph(week)?;
    cold_node.stop();
    let warm_node = node()?;
    let collapsed = warm_node.collapsed(week)?;
    let mut warm = Vec::new();
    for _ in 0..queries.max(1) {
        warm.push(warm_node.flamegraph(week)?);
    }
    warm_node.stop();
    warm.sort();
    Ok((collapsed, cold, percentile(&warm, 50)))
}

/// The week's default timeline and the median time of `queries` of it on
/// a warm node.
fn measure_timeline(
    node: &dyn Fn() -> anyhow::Result<QueryNode>,
    week: &Week,
    queries: usize,
) -> anyhow::Result<(String, Duration)> {
    let node = node()?;
    let (body, _) = node.timeline(week)?;
    let mut times = Vec::new();
    for _ in 0..queries.max(1) {
        times.push(node.timeline(week)?.1);
    }
    node.stop();
    times.sort();
    Ok((body, percentile(&times, 50)))
}

/// One query node (`kiln query`'s role) on an actix system of its own,
/// its rollup job off: the bench runs the passes.
struct QueryNode {
    url: String,
    authorization: String,
    system: actix_rt::System,
}

impl QueryNode {
    fn start(
        store: &Arc<dyn ProfileStore>,
        objects: &Arc<dyn ObjectStore>,
        metadata: &Arc<dyn MetadataStore>,
        key: &str,
        aggregators: usize,
    ) -> anyhow::Result<QueryNode> {
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let (store, objects, metadata) = (store.clone(), objects.clone(), metadata.clone());
        let http = HttpOptions {
            workers: 2,
            rollup_every: None,
            ..HttpOptions::new(addr)
        };
        let (system, _) = spawn_system("query", move || async move {
            let running = roles::start_query(
                store,
                objects,
                metadata,
                aggregators,
                SymbolizerConfig::default(),
                None,
                http,
            )
            .await?;
            Ok((Some(running.local_addr), Some(running.server)))
        })?;
        Ok(QueryNode {
            url: format!("http://{addr}"),
            authorization: format!("Bearer {key}"),
            system,
        })
    }

    /// The week's flamegraph in `format`, its body.
    fn week(&self, week: &Week, format: &str) -> anyhow::Result<Vec<u8>> {
        let url = format!(
            "{}/api/v1/flamegraph?from={}&to={}&format={format}",
            self.url, week.from_s, week.to_s
        );
        let mut response = http_client(Duration::from_secs(600))
            .get(&url)
            .header("authorization", &self.authorization)
            .call()?;
        let mut body = Vec::new();
        response.body_mut().as_reader().read_to_end(&mut body)?;
        anyhow::ensure!(
            response.status() == 200,
            "{url}: HTTP {}: {}",
            response.status(),
            String::from_utf8_lossy(&body)
        );
        Ok(body)
    }

    /// The time of one flamegraph as the UI asks for it (Flamewire),
    /// body read.
    fn flamegraph(&self, week: &Week) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let body = self.week(week, "flamewire")?;
        anyhow::ensure!(!body.is_empty(), "an empty flamegraph");
        Ok(started.elapsed())
    }

    /// The week's timeline as the UI asks for it (no step) over a range
    /// starting 17 minutes into the week, as a UI range does, off the
    /// hour: its body and time.
    fn timeline(&self, week: &Week) -> anyhow::Result<(String, Duration)> {
        let url = format!(
            "{}/api/v1/timeline?from={}&to={}",
            self.url,
            week.from_s + 17 * 60,
            week.to_s
        );
        let started = Instant::now();
        let mut response = http_client(Duration::from_secs(600))
            .get(&url)
            .header("authorization", &self.authorization)
            .call()?;
        let body = response.body_mut().read_to_string()?;
        anyhow::ensure!(
            response.status() == 200,
            "{url}: HTTP {}: {body}",
            response.status()
        );
        Ok((body, started.elapsed()))
    }

    /// The week's collapsed stacks, as a set of lines.
    fn collapsed(&self, week: &Week) -> anyhow::Result<BTreeSet<String>> {
        let body = self.week(week, "collapsed")?;
        Ok(String::from_utf8(body)?
            .lines()
            .map(str::to_owned)
            .collect())
    }

    fn stop(self) {
        self.system.stop();
    }
}
