//! The ingest pipeline: `BusConsumer → Decoder → Deduper → Symbolizer →
//! Writer`.
//!
//! Each poll of the bus is decoded, stripped of dictionary entries already
//! written, its new address frames symbolized where their symbols are at
//! hand (`symbolize`), written to the profile store and synced; only then
//! are the offsets committed. A crash anywhere before the commit means the records
//! are read again, and since every id is a content hash and every sample key
//! is deterministic, writing them again changes nothing.
//!
//! One poll takes at most 256 records and 64 MiB of them (always at least
//! one). A record whose envelope MAC does not verify, a batch that does not
//! decode, and a batch the store refuses for good (an invalid argument, not
//! an outage) are set aside in the object store's dead-letter area and the
//! rest of the poll is written and committed; other store errors are
//! retried, with a backoff from 250 ms doubling to 30 s.

mod consumer;
mod decoder;
mod deduper;
mod progress;
mod symbolize;
mod writer;

use std::sync::Arc;

use actix::{Actor, Addr, Arbiter};
use kiln_ingest_bus::{Bus, BusError};
use kiln_storage::{ObjectStore, ProfileStore};
use kiln_symbolizer_workers::Symbolizer;

pub use progress::IngestProgress;

use crate::envelope::BusKey;
use crate::telemetry::WorkerMetrics;

/// The consumer group of Kiln's ingest workers.
pub const CONSUMER_GROUP: &str = "kiln-ingest";

/// Starts the pipeline on its own arbiter (thread), consuming `bus` as a
/// member of [`CONSUMER_GROUP`]; frames are symbolized by `symbolizer`
/// before they are written (give it the query side's, where there is one,
/// so that it hears of uploads at once).
///
/// Only records whose envelope MAC verifies under `bus_key` (the key the
/// gateways sign with) are stored; the others, and batches that do not
/// decode or that the store refuses for good, are set aside in the object
/// store's dead-letter area (`tenants/<t>/dead-letters/`, or
/// `dead-letters/` when no verified envelope names a tenant) and counted
/// ([`IngestProgress::dead_letters`], `kiln_dead_letters_total`).
///
/// Each poll's stage times and records are counted in `metrics`, which
/// also reads the consumer's lag when scraped.
pub async fn start(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    symbolizer: Addr<Symbolizer>,
    bus_key: BusKey,
    metrics: WorkerMetrics,
) -> Result<IngestProgress, BusError> {
    let consumer = bus.consumer(CONSUMER_GROUP).await?;
    metrics.watch_lag(consumer.lag_reader());
    let (sender, progress) = progress::channel(bus.partition_count());
    let arbiter = Arbiter::new();
    let started = arbiter.spawn(async move {
        let stages = consumer::Stages {
            decoder: decoder::Decoder::new(bus_key).start(),
            deduper: deduper::Deduper::default().start(),
            symbolizer,
            writer: writer::Writer::new(store).start(),
            objects,
            metrics,
        };
        consumer::BusConsumer::new(consumer, stages, sender).start();
    });
    debug_assert!(started, "a new arbiter accepts work");
    Ok(progress)
}
