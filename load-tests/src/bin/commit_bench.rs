//! A worker's offset commits on Kafka: a poll's partitions committed one
//! request each (`Consumer::commit` per partition, as workers did) against
//! all of them in one request (`Consumer::commit_all`, as they do now),
//! alternating rounds in the same run on the same consumer.
//!
//! ```sh
//! KILN_TEST_KAFKA=$(scripts/apache-kafka-test-server.sh start /tmp/ak) \
//!   cargo run --release -p kiln-load-tests --bin commit_bench
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use kiln_ingest_bus::{Bus, BusUrl};
use kiln_load_tests::report::{Report, percentile};

#[derive(Debug, Parser)]
#[command(about = "Kafka commits: one request per partition against one for all")]
struct Args {
    /// The broker, kafka://HOST:PORT (a fresh topic per run).
    #[arg(long, env = "KILN_TEST_KAFKA")]
    kafka: String,
    /// Partitions of the topic, all assigned to the one consumer (a poll's
    /// partitions: the fleet bench's topic has 4).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Rounds of each kind.
    #[arg(long, default_value_t = 300)]
    rounds: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Runtime::new()?.block_on(run(&args))
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let url = format!(
        "{}/commit-bench-{nanos}?partitions={}",
        args.kafka, args.partitions
    );
    let BusUrl::Kafka(options) = url.parse()? else {
        anyhow::bail!("{url} is not a kafka:// URL");
    };
    let bus = kiln_ingest_bus::KafkaBus::connect(options).await?;
    // A record on every partition, polled, so the consumer has them all
    // assigned and something to commit.
    let mut key = 0u64;
    let mut on = std::collections::BTreeSet::new();
    while on.len() < args.partitions as usize {
        let published = bus.publish(&key.to_be_bytes(), vec![0; 64]).await?;
        on.insert(published.partition);
        key += 1;
    }
    let mut consumer = bus.consumer("commit-bench").await?;
    let mut seen = 0;
    while seen < key {
        seen += consumer
            .poll(1024, usize::MAX, Duration::from_secs(5))
            .await?
            .len() as u64;
    }
    let ends: Vec<(u32, u64)> = (0..args.partitions).map(|p| (p, 0)).collect();
    let (mut apart, mut together) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let started = Instant::now();
        for &(partition, next) in &ends {
            consumer.commit(partition, next).await?;
        }
        apart.push(started.elapsed());
        let started = Instant::now();
        consumer.commit_all(&ends).await?;
        together.push(started.elapsed());
    }
    apart.sort();
    together.sort();
    println!(
        "commit_bench: {} partitions, {} rounds of each kind, alternating",
        args.partitions, args.rounds
    );
    let mut report = Report::default();
    for p in [50, 99] {
        report.time(
            format!("p{p}, one request per partition"),
            percentile(&apart, p),
        );
        report.time(
            format!("p{p}, one request for all"),
            percentile(&together, p),
        );
    }
    let median = |v: &[Duration]| percentile(v, 50).as_secs_f64();
    report.add(
        "median, per partition / all at once",
        median(&apart) / median(&together).max(1e-12),
        "x",
    );
    report.finish("commit");
    Ok(())
}
