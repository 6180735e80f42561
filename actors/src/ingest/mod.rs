//! The ingest pipeline: `BusConsumer → decode → dedup → symbolize →
//! write → commit`.
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
//!
//! # Using the machine
//!
//! Decoding (MAC, zstd, archive checks, id hashes) is most of a worker's
//! CPU and needs nothing but the record, while the rest must go in order:
//! the deduper may only trust what earlier polls made durable, and a
//! partition's offsets may only be committed past rows that are synced. So
//! the pipeline has two halves: up to [`PipelineConfig::depth`] polls are
//! in flight, the younger ones decoding on Tokio's blocking pool (each
//! split among [`PipelineConfig::decoders`] threads) while the oldest is
//! deduplicated, symbolized, written ([`PipelineConfig::writes`] batches
//! at once, every dictionary entry of the poll before any sample) and
//! committed on the pipeline's arbiter. Polls are stored and committed in
//! the order they were taken; the bus is not read further ahead than
//! `depth` polls (the backpressure), which also bounds memory to `depth`
//! polls' records.
//!
//! One task per partition was the other way to use more cores, but a
//! consumer polls all its partitions through one handle and the store
//! syncs once per poll for all of them; per-partition tasks would split
//! the consumer, multiply the syncs, and write (and look up) once per
//! partition the frames that hosts running the same binaries share. One
//! ordered store half keeps the commit rule as simple as it was.

mod backoff;
mod consumer;
mod dead_letter;
mod decoder;
mod deduper;
mod progress;
mod symbolize;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, Arbiter};
use kiln_ingest_bus::{Bus, BusError};
use kiln_storage::{ObjectStore, ProfileStore};
use kiln_symbolizer_workers::Symbolizer;

pub use progress::IngestProgress;

use crate::envelope::BusKey;
use crate::telemetry::WorkerMetrics;

/// The consumer group of Kiln's ingest workers.
pub const CONSUMER_GROUP: &str = "kiln-ingest";

/// How long a poll of a few records waits for more, by default.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(200);

/// How much of the machine one worker's pipeline uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Polls in flight at once: the oldest is stored while the others
    /// decode. 1 stores each poll before the next is taken: decoding and
    /// storing never overlap (what ingest did before it was a pipeline).
    pub depth: usize,
    /// Blocking threads one poll's records are decoded on.
    pub decoders: usize,
    /// Batches of one poll written to the store at once (dictionaries
    /// first, then samples, so a sample never precedes its stack).
    pub writes: usize,
    /// How long a poll that found only a few records waits for more
    /// (zero: never): fewer, fuller polls cost less CPU per sample, at up
    /// to this much more latency on a quiet bus.
    pub linger: Duration,
}

impl PipelineConfig {
    /// One stage at a time on one thread: each poll decoded, then stored,
    /// before the next is taken. For comparison (`ingest_bench`) and for
    /// machines where ingest must stay on one core.
    pub const SEQUENTIAL: PipelineConfig = PipelineConfig {
        depth: 1,
        decoders: 1,
        writes: 1,
        linger: DEFAULT_LINGER,
    };
}

impl Default for PipelineConfig {
    /// Two polls in flight (one decoding while one is stored), each
    /// decoded on as many threads as the machine has cores and written as
    /// many batches at once.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        PipelineConfig {
            depth: 2,
            decoders: cores,
            writes: cores,
            linger: DEFAULT_LINGER,
        }
    }
}

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
///
/// The pipeline runs with [`PipelineConfig::default`]; see [`start_with`].
pub async fn start(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    symbolizer: Addr<Symbolizer>,
    bus_key: BusKey,
    metrics: WorkerMetrics,
) -> Result<IngestProgress, BusError> {
    let config = PipelineConfig::default();
    start_with(bus, store, objects, symbolizer, bus_key, metrics, config).await
}

/// [`start`], with `config` saying how many polls are in flight and how
/// many threads decode.
pub async fn start_with(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    symbolizer: Addr<Symbolizer>,
    bus_key: BusKey,
    metrics: WorkerMetrics,
    config: PipelineConfig,
) -> Result<IngestProgress, BusError> {
    let consumer = bus.consumer(CONSUMER_GROUP).await?;
    metrics.watch_lag(consumer.lag_reader());
    let (sender, progress) = progress::channel(bus.partition_count());
    let arbiter = Arbiter::new();
    let started = arbiter.spawn(async move {
        let deduper = deduper::Deduper::default();
        let stages = consumer::Stages {
            decoder: decoder::Decoder::new(
                bus_key,
                deduper.clone(),
                config.decoders,
                metrics.clone(),
            ),
            deduper,
            symbolizer,
            store,
            writes: config.writes,
            objects,
            metrics,
        };
        consumer::BusConsumer::new(consumer, stages, sender, config).start();
    });
    debug_assert!(started, "a new arbiter accepts work");
    Ok(progress)
}
