//! Load-scaled ingest (issue 16, item 5): a simulated fleet's agents post
//! their batches to a `kiln gateway`, which publishes them to Kafka;
//! `kiln worker` processes, each in a cgroup of its own with a CPU quota
//! (`--worker-cores`), store them into PostgreSQL. Every role is a
//! separate `kiln` process, as deployed.
//!
//! The fleet: `--hosts` agents of 8 services each, sampling `--cores`
//! cores at 19 Hz and sending one batch per 5 s, stacks drawn from one
//! Zipf population. As `kiln-agent` does, an agent leaves out of a batch
//! the dictionary entries (frames, stacks, label sets) it sent before.
//! Each interval, `--churn-percent` of the hosts restart their processes
//! (new pids: new label sets) and `--restart-percent` of the agents
//! restart: the interval's batch is spooled and sent with the next one,
//! and the restarted agent sends every entry again.
//!
//! Phases, each with a fresh database and topic, at the same offered load:
//!
//! - `one`: one worker. At a load above its quota its lag grows.
//! - `two`: two workers, each with the same quota. Their lag stays flat.
//! - `kill`: two workers, one SIGKILLed halfway and started again 5 s
//!   later (no commit, no leaving the group): the samples stored equal the
//!   samples sent, so nothing was lost and nothing counted twice.
//!
//! Each phase reports what it stored per worker CPU-second (the cgroups'
//! CPU time, the drain after the load included), the consumer lag the
//! workers export (`kiln_worker_consumer_lag_records`, what an autoscaler
//! watches: its slope over the load), the publish-to-queryable lag
//! (`kiln_worker_record_age_seconds`, p50/p99 from its buckets; also of
//! the load's second half and last quarter, which a long `--seconds`
//! leaves to the steady state once the warm-up's backlog is gone), and the
//! bytes stored per core-day (PostgreSQL's size of the samples table, and
//! of the whole database with its dictionaries, whose share a run of
//! minutes overstates). Then a `kiln query` node seals the phase's hours
//! into segments, as its rollup pass does once hours settle, and counts
//! the samples back from them: the segments' bytes per core-day are what
//! a day of such load keeps.
//!
//! Needs root (cgroups), `psql`, a broker and a PostgreSQL server:
//!
//! ```sh
//! cargo build --release -p kiln -p kiln-load-tests
//! KILN_TEST_KAFKA=$(scripts/kafka-test-server.sh start /tmp/kk) \
//! KILN_TEST_POSTGRES=$(scripts/pg-test-server.sh start /tmp/pg) \
//!   target/release/fleet_bench
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use kiln_load_tests::cgroup::CpuQuota;
use kiln_load_tests::report::Report;
use kiln_load_tests::sealing::{Sealed, Stores, seal_and_count};
use kiln_load_tests::synth::{DictionaryMemory, Fleet, StackPopulation};
use kiln_load_tests::systems::http_client;
use kiln_test_support::KilnProcess;
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "A simulated fleet through kiln gateway → Kafka → kiln workers under CPU quotas")]
struct Args {
    /// The `kiln` binary the roles run.
    #[arg(long, default_value = "target/release/kiln")]
    kiln: PathBuf,
    /// The broker, kafka://HOST:PORT (a fresh topic per phase).
    #[arg(long, env = "KILN_TEST_KAFKA")]
    kafka: String,
    /// A PostgreSQL server, postgres://USER@HOST:PORT/DB (a fresh database
    /// per phase, made with psql).
    #[arg(long, env = "KILN_TEST_POSTGRES")]
    postgres: String,
    /// Agents (hosts) in the fleet.
    #[arg(long, default_value_t = 400)]
    hosts: usize,
    /// Cores each host samples at 19 Hz.
    #[arg(long, default_value_t = 8)]
    cores: usize,
    /// Distinct stacks in the fleet's population.
    #[arg(long, default_value_t = 20_000)]
    stacks: usize,
    /// Seconds of load per phase.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Cores each worker may use (its cgroup's quota).
    #[arg(long, default_value_t = 0.25)]
    worker_cores: f64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Percent of hosts whose processes restart (new pids) per interval.
    #[arg(long, default_value_t = 2.0)]
    churn_percent: f64,
    /// Percent of agents that restart per interval (that interval's batch
    /// is spooled and sent with the next).
    #[arg(long, default_value_t = 1.0)]
    restart_percent: f64,
    /// How long a phase may take to drain after its load, in seconds.
    #[arg(long, default_value_t = 180)]
    drain_seconds: u64,
    /// The phases to run.
    #[arg(long, value_delimiter = ',', default_value = "one,two,kill")]
    phases: Vec<Phase>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    /// One worker.
    One,
    /// Two workers.
    Two,
    /// Two workers, one SIGKILLed halfway and restarted.
    Kill,
}

impl Phase {
    fn workers(self) -> usize {
        match self {
            Phase::One => 1,
            Phase::Two | Phase::Kill => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::One => "1 worker",
            Phase::Two => "2 workers",
            Phase::Kill => "2 workers, one SIGKILLed",
        }
    }
}

/// The operator's token on the gateway.
const ADMIN_TOKEN: &str = "fleet-bench-admin-token";
/// What the gateway signs records with and the workers verify.
const BUS_KEY: &str = "fleet-bench-bus-key";
/// Seconds between an agent's batches.
const INTERVAL_S: u64 = 5;
/// Threads posting the fleet's batches.
const SENDERS: usize = 3;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        unsafe { libc::getuid() } == 0,
        "fleet_bench needs root, for the workers' cgroups"
    );
    anyhow::ensure!(
        args.kiln.is_file(),
        "no kiln binary at {} (cargo build --release -p kiln, or --kiln PATH)",
        args.kiln.display()
    );
    let population = Arc::new(StackPopulation::new(args.stacks, 1.1, 1));
    let offered = (args.hosts * args.cores * 19) as f64;
    println!(
        "fleet_bench: {} hosts × {} cores at 19 Hz = {offered:.0} samples/s offered, {} s per \
         phase; workers at {} cores each",
        args.hosts, args.cores, args.seconds, args.worker_cores
    );
    let mut report = Report::default();
    report.add("offered samples/s", offered, "samples/s");
    for phase in &args.phases {
        println!("{}:", phase.name());
        let result = run_phase(&args, *phase, &population)?;
        result.report(&mut report, phase.name(), &args);
        anyhow::ensure!(
            result.sealed.queried == result.stored && result.rows_left == 0,
            "after sealing, {} samples queried of {} stored, {} rows left",
            result.sealed.queried,
            result.stored,
            result.rows_left
        );
        if *phase == Phase::Kill {
            anyhow::ensure!(
                result.stored == result.sent,
                "after a worker's SIGKILL, {} samples stored of {} sent",
                result.stored,
                result.sent
            );
        }
    }
    report.finish("fleet");
    Ok(())
}

/// Where the `kill` phase's second worker is.
#[derive(Debug, Clone, Copy)]
enum Kill {
    Never,
    Pending,
    Killed(Instant),
    Restarted,
}

/// What one phase measured.
struct PhaseResult {
    sent: u64,
    /// Samples in the store once drained (or at the drain's deadline).
    stored: u64,
    /// Seconds the load ran.
    load_s: f64,
    /// The workers' CPU time, load and drain.
    worker_cpu: Duration,
    /// Their CPU time from the load's last quarter on (and the drain).
    last_quarter_cpu: Duration,
    /// `kiln_worker_stage_seconds` summed over the workers: per stage,
    /// (seconds, polls).
    stages: Vec<(String, f64, u64)>,
    /// (seconds since the load began, the group's lag in records).
    lag: Vec<(f64, u64)>,
    /// Seconds from the load's end until everything was committed, if it was.
    drained_after: Option<f64>,
    /// `kiln_worker_record_age_seconds`, summed over the workers: (upper
    /// bound, cumulative count).
    age_buckets: Vec<(f64, u64)>,
    /// The same, of the records committed in the load's second half.
    late_age_buckets: Vec<(f64, u64)>,
    /// The same, of its last quarter: in a run long enough for a backlog
    /// built while the workers warmed up to be gone, the steady state.
    last_quarter_age_buckets: Vec<(f64, u64)>,
    samples_table_bytes: u64,
    database_bytes: u64,
    /// The phase's hours sealed into segments afterwards.
    sealed: Sealed,
    /// Sample rows left in PostgreSQL after sealing.
    rows_left: u64,
}

fn run_phase(
    args: &Args,
    phase: Phase,
    population: &Arc<StackPopulation>,
) -> anyhow::Result<PhaseResult> {
    let dir = tempfile::tempdir()?;
    let store = fresh_database(&args.postgres)?;
    let status = Command::new(&args.kiln)
        .args(["store", "migrate", "--store", &store])
        .env("KILN_LOG", "warn")
        .status()?;
    anyhow::ensure!(status.success(), "kiln store migrate failed");
    let empty_bytes = sql_number(&store, "SELECT pg_database_size(current_database())")?;
    let bus = format!(
        "{}/fleet-{}?partitions={}",
        args.kafka,
        unique(),
        args.partitions
    );
    let objects = format!("file://{}", dir.path().join("objects").display());
    let backends = [
        "--bus",
        &bus,
        "--store",
        &store,
        "--objects",
        &objects,
        "--bus-key",
        BUS_KEY,
    ];
    let gateway = KilnProcess::start(
        &args.kiln,
        "gateway",
        &[
            &["gateway", "--listen", "127.0.0.1:0", "--metadata", &store][..],
            &["--admin-token", ADMIN_TOKEN],
            &backends,
        ]
        .concat(),
    );
    let key = create_tenant(args, gateway.url())?;
    let worker_args = [&["worker", "--listen", "127.0.0.1:0"][..], &backends].concat();
    let mut workers = Vec::new();
    for i in 0..phase.workers() {
        let quota = CpuQuota::new(
            &format!("kiln-fleet-bench-{}-{i}", std::process::id()),
            args.worker_cores,
        )?;
        let worker = KilnProcess::start(&args.kiln, &format!("worker-{i}"), &worker_args);
        quota.add(worker.pid())?;
        workers.push((worker, quota));
    }

    let start_s = now_ns().div_euclid(1_000_000_000);
    let load = Load::start(args, population, gateway.url(), &key);
    let started = Instant::now();
    let mut lag = Vec::new();
    let mut ages_at_half = None;
    let mut ages_at_three_quarters = None;
    let mut cpu_at_three_quarters = Duration::ZERO;
    let mut kill = match phase {
        Phase::Kill => Kill::Pending,
        _ => Kill::Never,
    };
    while !load.done() {
        std::thread::sleep(Duration::from_secs(1));
        let elapsed = started.elapsed().as_secs_f64();
        lag.push((elapsed, group_lag(&workers)));
        if ages_at_half.is_none() && elapsed >= args.seconds as f64 / 2.0 {
            ages_at_half = Some(record_age_buckets(&workers)?);
        }
        if ages_at_three_quarters.is_none() && elapsed >= args.seconds as f64 * 0.75 {
            ages_at_three_quarters = Some(record_age_buckets(&workers)?);
            cpu_at_three_quarters = cpu_used(&workers)?;
        }
        kill = match kill {
            Kill::Pending if elapsed >= args.seconds as f64 / 2.0 => {
                workers[1].0.kill9();
                Kill::Killed(Instant::now())
            }
            Kill::Killed(at) if at.elapsed() >= Duration::from_secs(5) => {
                let worker = KilnProcess::start(&args.kiln, "worker-1", &worker_args);
                workers[1].1.add(worker.pid())?;
                workers[1].0 = worker;
                Kill::Restarted
            }
            other => other,
        };
    }
    let sent = load.join()?;
    let load_s = started.elapsed().as_secs_f64();
    println!("  load done after {load_s:.1} s: {sent} samples sent; draining");

    let drain_started = Instant::now();
    let mut drained_after = None;
    let mut stored = 0;
    while drain_started.elapsed() < Duration::from_secs(args.drain_seconds) {
        stored = sql_number(&store, "SELECT coalesce(sum(count), 0) FROM samples")?;
        if stored >= sent && group_lag(&workers) == 0 {
            drained_after = Some(drain_started.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let worker_cpu = cpu_used(&workers)?;
    let age_buckets = record_age_buckets(&workers)?;
    let stages = stage_seconds(&workers)?;
    // The second half's and last quarter's ages: the end's counts less
    // those read then (a worker restarted since counts from zero, so the
    // `kill` phase's difference undercounts; it is left out there).
    let ages_since = |then: Option<Vec<(f64, u64)>>| match (phase, then) {
        (Phase::Kill, _) | (_, None) => Vec::new(),
        (_, Some(then)) => age_buckets
            .iter()
            .zip(&then)
            .map(|(&(le, end), &(_, mid))| (le, end.saturating_sub(mid)))
            .collect(),
    };
    let late_age_buckets = ages_since(ages_at_half);
    let last_quarter_age_buckets = ages_since(ages_at_three_quarters);
    let samples_table_bytes = sql_number(&store, "SELECT pg_total_relation_size('samples')")?;
    let database_bytes = sql_number(&store, "SELECT pg_database_size(current_database())")?
        .saturating_sub(empty_bytes);
    // What a day of such hours keeps once the query nodes' rollup pass
    // has sealed them: the segments.
    let sealed = seal_and_count(
        &args.kiln,
        &Stores {
            store: &store,
            objects: &objects,
            admin_token: ADMIN_TOKEN,
            tenant_key: &key,
        },
        start_s,
        now_ns().div_euclid(1_000_000_000) + 1,
    )?;
    let rows_left = sql_number(&store, "SELECT count(*) FROM samples")?;
    println!(
        "  sealed {} hours ({} rows) into {} bytes of segments in {:.1} s; {} samples queried back",
        sealed.hours, sealed.rows, sealed.segment_bytes, sealed.seconds, sealed.queried
    );
    // Processes out before their cgroups go.
    for (worker, quota) in workers {
        drop(worker);
        drop(quota);
    }
    drop(gateway);
    Ok(PhaseResult {
        sent,
        stored,
        load_s,
        worker_cpu,
        last_quarter_cpu: worker_cpu.saturating_sub(cpu_at_three_quarters),
        stages,
        lag,
        drained_after,
        age_buckets,
        late_age_buckets,
        last_quarter_age_buckets,
        samples_table_bytes,
        database_bytes,
        sealed,
        rows_left,
    })
}

impl PhaseResult {
    fn report(&self, report: &mut Report, name: &str, args: &Args) {
        let cpu_s = self.worker_cpu.as_secs_f64();
        report.add(format!("{name}: samples sent"), self.sent as f64, "samples");
        report.add(
            format!("{name}: samples stored"),
            self.stored as f64,
            "samples",
        );
        report.add(
            format!("{name}: stored / offered rate during the load"),
            self.stored as f64 / self.load_s / (args.hosts * args.cores * 19) as f64,
            "x",
        );
        report.add(format!("{name}: worker CPU"), cpu_s, "s");
        report.add(
            format!("{name}: samples per worker CPU-second"),
            self.stored as f64 / cpu_s.max(1e-9),
            "samples/s",
        );
        // The last quarter's records, counted by their ages, at the run's
        // mean samples per record (the kill phase's restarted worker
        // counts from zero: left out).
        let records = |buckets: &[(f64, u64)]| buckets.last().map_or(0, |b| b.1);
        let last_quarter_records = records(&self.last_quarter_age_buckets);
        if last_quarter_records > 0 {
            let per_record = self.stored as f64 / records(&self.age_buckets).max(1) as f64;
            report.add(
                format!("{name}: samples per worker CPU-second, last quarter"),
                last_quarter_records as f64 * per_record
                    / self.last_quarter_cpu.as_secs_f64().max(1e-9),
                "samples/s",
            );
        }
        // Where a poll's time went: each stage's mean wall time.
        for (stage, seconds, polls) in &self.stages {
            report.add(
                format!("{name}: stage {stage}, mean per poll"),
                seconds / (*polls).max(1) as f64,
                "s",
            );
        }
        // The lag's slope over the load's second half (least squares: it
        // saws with the agents' 5 s cadence): growing, or flat.
        let half: Vec<(f64, f64)> = self
            .lag
            .iter()
            .filter(|(t, _)| *t >= self.load_s / 2.0)
            .map(|&(t, l)| (t, l as f64))
            .collect();
        report.add(
            format!("{name}: lag slope, second half"),
            slope(&half),
            "records/s",
        );
        let peak = self.lag.iter().map(|(_, l)| *l).max().unwrap_or(0);
        report.add(format!("{name}: lag at its peak"), peak as f64, "records");
        report.add(
            format!("{name}: drained after the load in"),
            self.drained_after.unwrap_or(f64::NAN),
            "s",
        );
        report.add(
            format!("{name}: record age p50"),
            quantile(&self.age_buckets, 0.50),
            "s",
        );
        report.add(
            format!("{name}: record age p99"),
            quantile(&self.age_buckets, 0.99),
            "s",
        );
        for (part, buckets) in [
            ("second half", &self.late_age_buckets),
            ("last quarter", &self.last_quarter_age_buckets),
        ] {
            if buckets.is_empty() {
                continue;
            }
            for (p, q) in [("p50", 0.50), ("p99", 0.99)] {
                report.add(
                    format!("{name}: record age {p}, {part}"),
                    quantile(buckets, q),
                    "s",
                );
            }
        }
        let core_days = (args.hosts * args.cores) as f64 * self.load_s / 86_400.0;
        report.add(
            format!("{name}: samples table per core-day"),
            self.samples_table_bytes as f64 / core_days / 1e6,
            "MB",
        );
        report.add(
            format!("{name}: database per core-day"),
            self.database_bytes as f64 / core_days / 1e6,
            "MB",
        );
        report.add(
            format!("{name}: sealed segments per core-day"),
            self.sealed.segment_bytes as f64 / core_days / 1e6,
            "MB",
        );
        report.add(
            format!("{name}: sealed segment bytes per sample"),
            self.sealed.segment_bytes as f64 / self.stored.max(1) as f64,
            "bytes",
        );
        report.add(
            format!("{name}: sealing the run's hours"),
            self.sealed.seconds,
            "s",
        );
        report.add(
            format!("{name}: samples queried back from segments"),
            self.sealed.queried as f64,
            "samples",
        );
        report.add(
            format!("{name}: sample rows left after sealing"),
            self.rows_left as f64,
            "rows",
        );
        let series: Vec<String> = self
            .lag
            .iter()
            .map(|(t, l)| format!("{t:.0}s:{l}"))
            .collect();
        println!("  lag (records) over the load: {}", series.join(" "));
    }
}

/// The fleet's agents: threads posting each host's batch once per
/// interval, hosts spread evenly over it.
struct Load {
    threads: Vec<std::thread::JoinHandle<anyhow::Result<u64>>>,
}

impl Load {
    fn start(args: &Args, population: &Arc<StackPopulation>, gateway: &str, key: &str) -> Load {
        let intervals = (args.seconds / INTERVAL_S).max(1) as usize;
        let started = Instant::now();
        let start_ns = now_ns();
        let threads = (0..SENDERS)
            .map(|sender| {
                let population = population.clone();
                let (gateway, key) = (gateway.to_owned(), format!("Bearer {key}"));
                let (hosts, cores) = (args.hosts, args.cores);
                let (churn, restart) = (args.churn_percent, args.restart_percent);
                std::thread::spawn(move || {
                    let fleet = Fleet::of_agents(hosts, cores * 19 * INTERVAL_S as usize);
                    let mut rng = StdRng::seed_from_u64(sender as u64);
                    let client = http_client(Duration::from_secs(60));
                    let mut generations = vec![0usize; hosts];
                    let mut spooled: Vec<Vec<Vec<u8>>> = vec![Vec::new(); hosts];
                    let mut memories: Vec<DictionaryMemory> =
                        (0..hosts).map(|_| DictionaryMemory::default()).collect();
                    let mut sent = 0u64;
                    for interval in 0..intervals {
                        for host in (sender..hosts).step_by(SENDERS) {
                            let due = Duration::from_secs_f64(
                                (interval as f64 + host as f64 / hosts as f64) * INTERVAL_S as f64,
                            );
                            if let Some(wait) = due.checked_sub(started.elapsed()) {
                                std::thread::sleep(wait);
                            }
                            if percent_of(host, interval, 1) < churn {
                                generations[host] += 1;
                            }
                            let mut batch = fleet.batch_of_generation(
                                &population,
                                host,
                                interval,
                                start_ns,
                                generations[host],
                                &mut rng,
                            );
                            memories[host].strip(&mut batch);
                            sent += batch.sample_count();
                            spooled[host].push(batch.encode());
                            // A restarting agent sends this interval's
                            // batch with the next one, after which it
                            // has forgotten what it sent.
                            if percent_of(host, interval, 2) < restart && interval + 1 < intervals {
                                memories[host].forget();
                                continue;
                            }
                            for body in spooled[host].drain(..) {
                                post(&client, &gateway, &key, &body)?;
                            }
                        }
                    }
                    Ok(sent)
                })
            })
            .collect();
        Load { threads }
    }

    /// Whether every sender is through (or failed: `join` says why).
    fn done(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Samples sent by every thread.
    fn join(self) -> anyhow::Result<u64> {
        let mut sent = 0;
        for t in self.threads {
            sent += t
                .join()
                .map_err(|_| anyhow::anyhow!("a sender panicked"))??;
        }
        Ok(sent)
    }
}

/// The least-squares slope of `points`; 0 for fewer than two.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// A number in [0, 100) drawn from (host, interval, salt): the same
/// every run, so that phases see the same churn and restarts.
fn percent_of(host: usize, interval: usize, salt: u64) -> f64 {
    let mut x = (host as u64) << 32 ^ (interval as u64) << 8 ^ salt;
    x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    (x % 10_000) as f64 / 100.0
}

fn post(
    client: &ureq::Agent,
    gateway: &str,
    authorization: &str,
    body: &[u8],
) -> anyhow::Result<()> {
    // 429 and 503 are answers agents wait out and retry.
    for attempt in 0..20 {
        let response = client
            .post(format!("{gateway}/api/v1/ingest"))
            .header("authorization", authorization)
            .send(body)?;
        match response.status().as_u16() {
            200 => return Ok(()),
            429 | 503 => std::thread::sleep(Duration::from_millis(100 << attempt.min(5))),
            status => bail!("the gateway answered {status}"),
        }
    }
    bail!("the gateway refused a batch 20 times")
}

/// The consumer group's lag: the workers' `kiln_worker_consumer_lag_records`
/// summed (a worker reports its own partitions; one that is down reports
/// none).
fn group_lag(workers: &[(KilnProcess, CpuQuota)]) -> u64 {
    workers
        .iter()
        .filter_map(|(w, _)| metrics(w.url()).ok())
        .flat_map(|text| {
            text.lines()
                .filter(|l| l.starts_with("kiln_worker_consumer_lag_records{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum::<f64>() as u64
}

/// The CPU time the workers' cgroups have used.
fn cpu_used(workers: &[(KilnProcess, CpuQuota)]) -> anyhow::Result<Duration> {
    workers.iter().map(|(_, quota)| quota.used()).sum()
}

/// `kiln_worker_stage_seconds`' sums and counts, per stage, summed over
/// the workers: (stage, seconds, polls).
fn stage_seconds(workers: &[(KilnProcess, CpuQuota)]) -> anyhow::Result<Vec<(String, f64, u64)>> {
    let mut stages = std::collections::BTreeMap::<String, (f64, u64)>::new();
    for (worker, _) in workers {
        for line in metrics(worker.url())?.lines() {
            let (sum, rest) =
                if let Some(rest) = line.strip_prefix("kiln_worker_stage_seconds_sum{") {
                    (true, rest)
                } else if let Some(rest) = line.strip_prefix("kiln_worker_stage_seconds_count{") {
                    (false, rest)
                } else {
                    continue;
                };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let Some(stage) = labels
                .split(',')
                .find_map(|l| l.strip_prefix("stage=\""))
                .map(|v| v.trim_end_matches('"'))
            else {
                continue;
            };
            let value: f64 = value.trim().parse()?;
            let entry = stages.entry(stage.to_owned()).or_default();
            match sum {
                true => entry.0 += value,
                false => entry.1 += value as u64,
            }
        }
    }
    Ok(stages
        .into_iter()
        .map(|(stage, (seconds, polls))| (stage, seconds, polls))
        .collect())
}

/// `kiln_worker_record_age_seconds`'s buckets, summed over the workers.
fn record_age_buckets(workers: &[(KilnProcess, CpuQuota)]) -> anyhow::Result<Vec<(f64, u64)>> {
    let mut buckets = std::collections::BTreeMap::<u64, (f64, u64)>::new();
    for (worker, _) in workers {
        for line in metrics(worker.url())?.lines() {
            let Some(rest) = line.strip_prefix("kiln_worker_record_age_seconds_bucket{le=\"")
            else {
                continue;
            };
            let Some((le, count)) = rest.split_once("\"} ") else {
                continue;
            };
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse()?
            };
            let count: f64 = count.trim().parse()?;
            let entry = buckets.entry(le.to_bits()).or_insert((le, 0));
            entry.1 += count as u64;
        }
    }
    let mut sorted: Vec<(f64, u64)> = buckets.into_values().collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(sorted)
}

/// The `q` quantile of cumulative `buckets`, interpolated linearly within
/// the bucket it falls in (as Prometheus' `histogram_quantile`).
fn quantile(buckets: &[(f64, u64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    if total == 0 {
        return f64::NAN;
    }
    let rank = q * total as f64;
    let mut below = (0.0, 0u64);
    for &(le, count) in buckets {
        if count as f64 >= rank {
            if le.is_infinite() {
                return below.0;
            }
            let within = (rank - below.1 as f64) / (count - below.1).max(1) as f64;
            return below.0 + (le - below.0) * within;
        }
        below = (le, count);
    }
    below.0
}

fn metrics(base: &str) -> anyhow::Result<String> {
    let mut response = http_client(Duration::from_secs(10))
        .get(format!("{base}/metrics"))
        .call()?;
    Ok(response.body_mut().read_to_string()?)
}

/// `kiln tenant create` through the gateway; the key it prints last.
fn create_tenant(args: &Args, gateway: &str) -> anyhow::Result<String> {
    let out = Command::new(&args.kiln)
        .args([
            "tenant",
            "create",
            "--server",
            gateway,
            "--admin-token",
            ADMIN_TOKEN,
        ])
        .arg(format!("fleet{}", unique()))
        .env("KILN_LOG", "warn")
        .env_remove("KILN_API_KEY")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "kiln tenant create: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .last()
        .map(|k| k.trim().to_owned())
        .filter(|k| k.starts_with("kiln_"))
        .with_context(|| format!("no key in: {stdout}"))
}

/// A fresh database on the server; its URL.
fn fresh_database(server: &str) -> anyhow::Result<String> {
    let name = format!("kiln_fleet_{}", unique());
    psql(server, &format!("CREATE DATABASE {name}"))?;
    let (base, _) = server.rsplit_once('/').context("a URL with a database")?;
    Ok(format!("{base}/{name}"))
}

fn psql(database: &str, sql: &str) -> anyhow::Result<String> {
    let out = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            database,
            "-c",
            sql,
        ])
        .output()
        .context("run psql (Debian's postgresql-client)")?;
    anyhow::ensure!(
        out.status.success(),
        "psql: {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn sql_number(database: &str, sql: &str) -> anyhow::Result<u64> {
    let text = psql(database, sql)?;
    text.parse()
        .with_context(|| format!("{sql} gave {text:?}, not a number"))
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}_{nanos}", std::process::id())
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket_as_prometheus_does() {
        // 10 at or under 0.1 s, 90 more by 1 s, none past.
        let buckets = [(0.1, 10), (1.0, 100), (f64::INFINITY, 100)];
        assert!((quantile(&buckets, 0.05) - 0.05).abs() < 1e-9);
        assert!((quantile(&buckets, 0.55) - 0.55).abs() < 1e-9);
        assert!((quantile(&buckets, 0.99) - 0.99).abs() < 1e-9);
        // Past the last finite bound: that bound.
        let tail = [(1.0, 50), (f64::INFINITY, 100)];
        assert_eq!(quantile(&tail, 0.99), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
        assert!(quantile(&[(1.0, 0), (f64::INFINITY, 0)], 0.5).is_nan());
    }

    #[test]
    fn the_slope_sees_growth_through_a_sawtooth() {
        // Growing by 10 a second, sawing by ±30 with the 5 s cadence.
        let saw: Vec<(f64, f64)> = (0..60)
            .map(|t| {
                (
                    t as f64,
                    10.0 * t as f64 + if t % 5 < 3 { 30.0 } else { -30.0 },
                )
            })
            .collect();
        assert!((slope(&saw) - 10.0).abs() < 1.0, "{}", slope(&saw));
        let flat: Vec<(f64, f64)> = (0..60).map(|t| (t as f64, 100.0)).collect();
        assert_eq!(slope(&flat), 0.0);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
    }

    #[test]
    fn churn_and_restarts_are_the_same_every_run_and_near_their_rate() {
        let hits = (0..1000)
            .flat_map(|host| (0..10).map(move |i| (host, i)))
            .filter(|&(host, i)| percent_of(host, i, 1) < 2.0)
            .count();
        assert!((150..250).contains(&hits), "{hits} of 10,000 at 2%");
        assert_eq!(percent_of(7, 3, 2), percent_of(7, 3, 2));
    }
}
