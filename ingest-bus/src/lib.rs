//! Kiln's ingest bus: the durable queue between the gateway, which
//! publishes agent batches, and the ingest workers, which consume them.
//!
//! - [`Bus`] and [`Consumer`]: the seam, with Kafka's semantics
//!   (partitions, keys, consumer groups, committed offsets, at-least-once
//!   delivery). Callers hold an `Arc<dyn Bus>`.
//! - [`EmbeddedBus`]: the implementation for one process and a local disk,
//!   the default of `kiln up`: checksummed segment files, fsync'd before a
//!   publish returns, repaired after a crash.
//! - [`KafkaBus`]: the implementation for distributed deployments, on a
//!   Kafka topic (through librdkafka): the gateway publishes, separate
//!   worker processes share the partitions as one consumer group.
//! - [`BusUrl`]: either of them, named by URL (`file:///DIR`,
//!   `kafka://HOST:PORT/TOPIC`).
//! - [`partition_for`]: how a key picks its partition, the same for every
//!   implementation.
//! - [`LagReader`]: a consumer's lag per assigned partition (committed
//!   offset against the partition's end), for both implementations.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use kiln_ingest_bus::{Bus, EmbeddedBus};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir()?;
//! let bus: Arc<dyn Bus> = Arc::new(EmbeddedBus::open(dir.path(), 4)?);
//!
//! // The gateway publishes; the record is on disk when this returns.
//! bus.publish(b"host-a", b"batch 1".to_vec()).await?;
//!
//! // A worker consumes, processes, then commits.
//! let mut worker = bus.consumer("ingest").await?;
//! for record in worker.poll(64, usize::MAX, Duration::from_secs(1)).await? {
//!     assert_eq!(record.payload, b"batch 1");
//!     worker.commit(record.partition, record.offset + 1).await?;
//! }
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod bus;
mod embedded;
mod error;
mod kafka;
mod url;

pub use bus::{Bus, Consumer, LagReader, PartitionLag, Published, Record, partition_for};
pub use embedded::{EmbeddedBus, EmbeddedBusOptions};
pub use error::{BusError, PublishError};
#[cfg(feature = "kafka")]
pub use kafka::KafkaBus;
pub use kafka::KafkaOptions;
pub use url::BusUrl;
