//! Publish throughput of the embedded bus against the number of concurrent
//! publishers, to see what group commit buys: every acknowledged publish
//! is fsync'd, and concurrent publishers share fsyncs.
//!
//! ```text
//! cargo run --release -p kiln-ingest-bus --example publish_throughput [DIR]
//! ```
//!
//! DIR (default: a temporary directory) should be on the disk to measure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_ingest_bus::{Bus, EmbeddedBus};

const PAYLOAD_BYTES: usize = 4096;
const RUN: Duration = Duration::from_secs(2);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = match std::env::args_os().nth(1) {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("publishers  records/s  MiB/s   (1 partition, {PAYLOAD_BYTES}-byte payloads)");
    for publishers in [1usize, 4, 16, 64] {
        let dir = base.path().join(publishers.to_string());
        let bus: Arc<dyn Bus> = Arc::new(EmbeddedBus::open(&dir, 1)?);
        let started = Instant::now();
        let published = runtime.block_on(async {
            let tasks: Vec<_> = (0..publishers)
                .map(|_| {
                    let bus = bus.clone();
                    tokio::spawn(async move {
                        let mut n = 0u64;
                        while started.elapsed() < RUN {
                            bus.publish(b"key", vec![7; PAYLOAD_BYTES]).await?;
                            n += 1;
                        }
                        Ok::<_, kiln_ingest_bus::PublishError>(n)
                    })
                })
                .collect();
            let mut total = 0;
            for task in tasks {
                total += task.await.expect("publisher task panicked")?;
            }
            Ok::<_, kiln_ingest_bus::PublishError>(total)
        })?;
        let rate = published as f64 / started.elapsed().as_secs_f64();
        let mib = rate * PAYLOAD_BYTES as f64 / (1 << 20) as f64;
        println!("{publishers:>10}  {rate:>9.0}  {mib:>5.1}");
    }
    Ok(())
}
