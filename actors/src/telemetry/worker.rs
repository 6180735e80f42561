//! What the ingest pipeline measures: stage latencies, record ages, dead
//! letters, and its consumer lag read at scrape time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kiln_ingest_bus::LagReader;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tracing::warn;

use super::{
    HistogramFamily, LAG_READ_TIMEOUT, PartitionLabels, RECORD_AGE_BUCKETS, ReasonLabels,
    StageLabels, stage_histogram,
};

/// A stage of the ingest pipeline: the `stage` label of
/// `kiln_worker_stage_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Envelopes verified, batches decompressed and decoded (on the
    /// blocking pool, while the poll before is stored: this stage overlaps
    /// the others).
    Decode,
    /// Dictionary entries already written dropped.
    Dedup,
    /// Address frames symbolized where symbols are at hand.
    Symbolize,
    /// Written to the store and synced (retries included).
    Write,
    /// Offsets committed to the bus.
    Commit,
}

impl Stage {
    const ALL: [Stage; 5] = [
        Stage::Decode,
        Stage::Dedup,
        Stage::Symbolize,
        Stage::Write,
        Stage::Commit,
    ];

    fn label(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Dedup => "dedup",
            Stage::Symbolize => "symbolize",
            Stage::Write => "write",
            Stage::Commit => "commit",
        }
    }
}

/// Why a bus record was set aside: the `reason` label of
/// `kiln_dead_letters_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetter {
    /// Its envelope is missing, malformed or not signed with the bus key.
    Envelope,
    /// Its envelope verified but its batch does not decode.
    Batch,
    /// The store refused the batch for good.
    StoreRefused,
}

impl DeadLetter {
    fn label(self) -> &'static str {
        match self {
            DeadLetter::Envelope => "envelope",
            DeadLetter::Batch => "batch",
            DeadLetter::StoreRefused => "store_refused",
        }
    }
}

/// What the ingest pipeline counts, and where its consumer lag is read.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    stages: HistogramFamily<StageLabels>,
    /// The handle of each [`Stage`], in [`Stage::ALL`]'s order.
    stage_handles: Arc<[Histogram]>,
    records: Counter,
    /// Store writes that failed and were tried again.
    write_retries: Counter,
    /// Seconds from a gateway's accepting a batch to its commit here.
    record_age: Histogram,
    dead_letters: Family<ReasonLabels, Counter>,
    lag: Family<PartitionLabels, Gauge>,
    lag_errors: Counter,
    lag_reader: Arc<Mutex<Option<Arc<dyn LagReader>>>>,
    /// The partitions the last reading reported, whose series the next
    /// removes when they are no longer this worker's.
    lag_shown: Arc<Mutex<BTreeSet<PartitionLabels>>>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        let stages = HistogramFamily::<StageLabels>::new_with_constructor(stage_histogram);
        let stage_handles = Stage::ALL
            .iter()
            .map(|s| {
                stages
                    .get_or_create(&StageLabels { stage: s.label() })
                    .clone()
            })
            .collect();
        WorkerMetrics {
            stages,
            stage_handles,
            records: Counter::default(),
            write_retries: Counter::default(),
            record_age: Histogram::new(RECORD_AGE_BUCKETS),
            dead_letters: Family::default(),
            lag: Family::default(),
            lag_errors: Counter::default(),
            lag_reader: Arc::default(),
            lag_shown: Arc::default(),
        }
    }
}

impl WorkerMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "worker_stage",
            "Time each stage of the ingest pipeline took per poll of the bus (up to 256 records): \
             decode, dedup, symbolize, write (store writes and sync, retries included), commit",
            Unit::Seconds,
            self.stages.clone(),
        );
        registry.register(
            "worker_records",
            "Bus records the ingest pipeline took (stored or set aside)",
            self.records.clone(),
        );
        registry.register(
            "worker_write_retries",
            "Writes of a poll's batches to the profile store that failed and are tried again \
             (a store down, a full disk): nothing is committed or lost meanwhile, and the lag \
             grows",
            self.write_retries.clone(),
        );
        registry.register_with_unit(
            "worker_record_age",
            "Time from a gateway's accepting a batch onto the bus to its commit by a worker, \
             written and synced, so queryable (the gateway's clock against the worker's): the \
             publish-to-queryable lag",
            Unit::Seconds,
            self.record_age.clone(),
        );
        registry.register(
            "dead_letters",
            "Bus records set aside in the object store's dead-letter area, by reason: envelope \
             (not signed with the bus key), batch (does not decode), store_refused",
            self.dead_letters.clone(),
        );
        registry.register(
            "worker_consumer_lag_records",
            "Records published to the bus but not yet committed by the workers' consumer group, \
             per partition this worker is assigned (read from the bus at scrape time: Kafka's \
             high watermark against the group's committed offset; the embedded bus's end against \
             its group's commit). Summed over the workers, the group's lag",
            self.lag.clone(),
        );
        registry.register(
            "worker_consumer_lag_errors",
            "Scrapes at which the consumer lag could not be read from the bus (the lag series \
             are then absent until a reading succeeds)",
            self.lag_errors.clone(),
        );
    }

    /// Records how long `stage` took for one poll.
    pub fn observe(&self, stage: Stage, took: Duration) {
        let i = Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0);
        self.stage_handles[i].observe(took.as_secs_f64());
    }

    /// Records the age of a batch accepted at `received_at_ns` (the
    /// gateway's clock) that is committed now.
    pub fn committed_at_age(&self, received_at_ns: i64) {
        let age_ns = kiln_model::now_ns().saturating_sub(received_at_ns).max(0);
        self.record_age.observe(age_ns as f64 / 1e9);
    }

    /// Counts a failed store write that will be tried again.
    pub fn write_retried(&self) {
        self.write_retries.inc();
    }

    /// Counts `n` records taken from the bus.
    pub fn took_records(&self, n: usize) {
        self.records.inc_by(n as u64);
    }

    /// Counts a record set aside.
    pub fn dead_lettered(&self, why: DeadLetter) {
        self.dead_letters
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc();
    }

    /// Reads the consumer lag from `reader` at each scrape from now on.
    pub fn watch_lag(&self, reader: Arc<dyn LagReader>) {
        *self
            .lag_reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reader);
    }

    /// Sets the lag gauges from the bus; partitions no longer this
    /// worker's, and every partition when the bus cannot be read, lose
    /// their series (absent, rather than a stale number).
    pub(super) async fn refresh_lag(&self) {
        let reader = self
            .lag_reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(reader) = reader else { return };
        let shown: BTreeSet<PartitionLabels> =
            match tokio::time::timeout(LAG_READ_TIMEOUT, reader.lag()).await {
                Ok(Ok(lags)) => lags
                    .into_iter()
                    .map(|l| {
                        let labels = PartitionLabels {
                            topic: reader.topic().to_owned(),
                            partition: l.partition,
                        };
                        let records = i64::try_from(l.records()).unwrap_or(i64::MAX);
                        self.lag.get_or_create(&labels).set(records);
                        labels
                    })
                    .collect(),
                Ok(Err(e)) => {
                    warn!(error = %e, "reading the consumer lag from the bus failed");
                    self.lag_errors.inc();
                    BTreeSet::new()
                }
                Err(_) => {
                    warn!(
                        timeout = ?LAG_READ_TIMEOUT,
                        "reading the consumer lag from the bus timed out"
                    );
                    self.lag_errors.inc();
                    BTreeSet::new()
                }
            };
        let mut before = self
            .lag_shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for gone in before.difference(&shown) {
            self.lag.remove(gone);
        }
        *before = shown;
    }
}
