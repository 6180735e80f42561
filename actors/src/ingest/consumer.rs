//! `BusConsumer`: polls the bus and drives each poll through
//! decode → dedup → symbolize → write, then commits the offsets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, AsyncContext, Context, WrapFuture};
use kiln_ingest_bus::{Consumer, Record};
use kiln_storage::{ObjectKey, ObjectStore};
use kiln_symbolizer_workers::Symbolizer;
use tracing::{debug, error, warn};

use super::decoder::{Decode, Decoder, Rejected};
use super::deduper::{Deduper, Filter, Remember};
use super::progress::ProgressSender;
use super::symbolize::{Symbolized, symbolize};
use super::writer::{Write, Writer, Written};
use crate::telemetry::{DeadLetter, Stage, WorkerMetrics};

/// Most records taken in one poll (and written with one sync).
const POLL_MAX: usize = 256;
/// Most record bytes taken in one poll (at least one record is always
/// taken, so a record larger than this still moves ingest on). A poll's
/// records are all held decoded until its sync; without this, a few
/// batches near the decoder's limit ([`kiln_model::MAX_BATCH_BYTES`]
/// decompressed each) times [`POLL_MAX`] would hold tens of GiB.
pub(crate) const POLL_MAX_BYTES: usize = 64 << 20;
/// How long one poll waits for the first record.
const POLL_WAIT: Duration = Duration::from_millis(500);
/// First pause before retrying after the bus or the store failed; it
/// doubles on each failure in a row, up to [`RETRY_MAX_PAUSE`].
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// Longest pause between retries.
const RETRY_MAX_PAUSE: Duration = Duration::from_secs(30);
/// Where records the pipeline sets aside go, under their tenant's area
/// (`tenants/<t>/dead-letters/`) when a verified envelope names it, at the
/// top of the object store otherwise.
pub(crate) const DEAD_LETTERS: &str = "dead-letters";

/// A capped exponential backoff: [`RETRY_PAUSE`], doubling to
/// [`RETRY_MAX_PAUSE`].
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Self {
        Backoff { next: RETRY_PAUSE }
    }

    /// Sleeps for the current pause, and doubles the next one.
    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(RETRY_MAX_PAUSE);
    }
}

/// The stages a consumer drives.
#[derive(Debug, Clone)]
pub(crate) struct Stages {
    pub decoder: Addr<Decoder>,
    pub deduper: Addr<Deduper>,
    pub symbolizer: Addr<Symbolizer>,
    pub writer: Addr<Writer>,
    pub objects: Arc<dyn ObjectStore>,
    /// Stage times, records and dead letters are counted here.
    pub metrics: WorkerMetrics,
}

/// Owns a bus consumer and runs the ingest loop.
#[derive(Debug)]
pub(crate) struct BusConsumer {
    consumer: Option<Box<dyn Consumer>>,
    stages: Stages,
    progress: Option<ProgressSender>,
}

impl BusConsumer {
    pub(crate) fn new(
        consumer: Box<dyn Consumer>,
        stages: Stages,
        progress: ProgressSender,
    ) -> Self {
        Self {
            consumer: Some(consumer),
            stages,
            progress: Some(progress),
        }
    }
}

impl Actor for BusConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (Some(consumer), Some(progress)) = (self.consumer.take(), self.progress.take()) else {
            return;
        };
        ctx.spawn(run(consumer, self.stages.clone(), progress).into_actor(self));
    }
}

async fn run(mut consumer: Box<dyn Consumer>, stages: Stages, progress: ProgressSender) {
    let mut backoff = Backoff::new();
    loop {
        let records = match consumer.poll(POLL_MAX, POLL_MAX_BYTES, POLL_WAIT).await {
            Ok(records) => records,
            Err(e) => {
                warn!(error = %e, "polling the ingest bus failed; retrying");
                backoff.wait().await;
                continue;
            }
        };
        backoff = Backoff::new();
        if records.is_empty() {
            continue;
        }
        let metrics = &stages.metrics;
        metrics.took_records(records.len());
        let mut clock = StageClock::start(metrics);
        let mut next_offsets = BTreeMap::new();
        let mut decoded = Vec::with_capacity(records.len());
        let mut rejected = Vec::new();
        for record in records {
            let next = next_offsets.entry(record.partition).or_insert(0);
            *next = (*next).max(record.offset + 1);
            match stages.decoder.send(Decode(record)).await {
                Ok(Ok(batch)) => decoded.push(batch),
                Ok(Err(refused)) => rejected.push(refused),
                Err(e) => {
                    error!(error = %e, "decoder stopped; ingest stops");
                    return;
                }
            }
        }
        clock.lap(Stage::Decode);
        for refused in rejected {
            let Rejected {
                record,
                tenant,
                reason,
            } = refused;
            // Only a verified envelope names its tenant.
            let why = match tenant {
                None => DeadLetter::Envelope,
                Some(_) => DeadLetter::Batch,
            };
            dead_letter(&*stages.objects, &record, tenant.as_deref(), &reason).await;
            progress.dead_lettered();
            metrics.dead_lettered(why);
        }
        // Storing dead letters is no stage's time.
        clock.restart();
        let mut filtered = Vec::with_capacity(decoded.len());
        for d in decoded {
            match stages.deduper.send(Filter(d)).await {
                Ok(d) => filtered.push(d),
                Err(e) => {
                    error!(error = %e, "deduper stopped; ingest stops");
                    return;
                }
            }
        }
        clock.lap(Stage::Dedup);
        let mut remember: Vec<Option<Remember>> =
            filtered.iter().map(|d| Some(Remember::of(d))).collect();
        let symbolized = symbolize(&stages.symbolizer, filtered).await;
        clock.lap(Stage::Symbolize);
        let Some((batches, written)) = write(&stages.writer, symbolized).await else {
            return;
        };
        clock.lap(Stage::Write);
        for (i, e) in written.refused {
            // Refused for good: set aside, so that the records after it
            // are written and committed rather than retried forever.
            let decoded = &batches[i].decoded;
            let reason = format!("the store refused the batch: {e}");
            dead_letter(
                &*stages.objects,
                &decoded.record,
                Some(decoded.header.scope.tenant()),
                &reason,
            )
            .await;
            progress.dead_lettered();
            metrics.dead_lettered(DeadLetter::StoreRefused);
            // What it wrote before the refusal is not vouched for.
            remember[i] = None;
        }
        drop(batches);
        clock.restart();
        for (partition, next) in next_offsets {
            commit(&mut *consumer, partition, next).await;
            progress.committed(partition, next);
        }
        clock.lap(Stage::Commit);
        for r in remember.into_iter().flatten() {
            stages.deduper.do_send(r);
        }
    }
}

/// Times the stages of one poll, each once (`kiln_worker_stage_seconds`).
struct StageClock<'a> {
    metrics: &'a WorkerMetrics,
    started: Instant,
}

impl<'a> StageClock<'a> {
    fn start(metrics: &'a WorkerMetrics) -> Self {
        StageClock {
            metrics,
            started: Instant::now(),
        }
    }

    /// Records the time since the last lap (or restart) as `stage`'s.
    fn lap(&mut self, stage: Stage) {
        let now = Instant::now();
        self.metrics
            .observe(stage, now.saturating_duration_since(self.started));
        self.started = now;
    }

    /// Starts the next stage's time now (what came between is no stage's).
    fn restart(&mut self) {
        self.started = Instant::now();
    }
}

/// Writes until the store takes the batches, but for those it refuses for
/// good; `None` if the writer is gone. Other errors are retried with a
/// capped exponential backoff: nothing is committed yet, so nothing is
/// lost, and the store's writes are idempotent.
async fn write(
    writer: &Addr<Writer>,
    batches: Vec<Symbolized>,
) -> Option<(Arc<Vec<Symbolized>>, Written)> {
    let batches = Arc::new(batches);
    let mut backoff = Backoff::new();
    loop {
        match writer.send(Write(batches.clone())).await {
            Ok(Ok(written)) => return Some((batches, written)),
            Ok(Err(e)) => {
                warn!(error = %e, retry_in = ?backoff.next, "writing batches failed; retrying");
                backoff.wait().await;
            }
            Err(e) => {
                error!(error = %e, "writer stopped; ingest stops");
                return None;
            }
        }
    }
}

async fn commit(consumer: &mut dyn Consumer, partition: u32, next: u64) {
    // A failed commit only means redelivery (writes are idempotent), but
    // retry a few times so a transient failure does not cause it.
    let mut backoff = Backoff::new();
    for attempt in 1..=3 {
        match consumer.commit(partition, next).await {
            Ok(()) => return,
            Err(e) => {
                warn!(partition, next, attempt, error = %e, "committing an offset failed");
                backoff.wait().await;
            }
        }
    }
}

/// Sets `record` aside in the object store, whole, with `reason` beside it
/// (`<name>.envelope` and `<name>.reason`, named by partition and offset):
/// under `tenants/<tenant>/dead-letters/` when `tenant` is known from a
/// verified envelope, under `dead-letters/` otherwise. It is logged once,
/// here; a newer build (or an operator) can replay it.
async fn dead_letter(
    objects: &dyn ObjectStore,
    record: &Record,
    tenant: Option<&str>,
    reason: &str,
) {
    let name = format!("p{}-o{}", record.partition, record.offset);
    let prefix = match tenant {
        Some(t) => format!("tenants/{t}/{DEAD_LETTERS}/"),
        None => format!("{DEAD_LETTERS}/"),
    };
    let key = format!("{prefix}{name}.envelope");
    warn!(
        partition = record.partition,
        offset = record.offset,
        tenant = tenant.unwrap_or("?"),
        key,
        reason,
        "bus record set aside in the dead-letter area"
    );
    let note = format!(
        "partition {}\noffset {}\nbytes {}\nreason {reason}\n",
        record.partition,
        record.offset,
        record.payload.len()
    );
    let objects_to_put = [
        (key, record.payload.clone()),
        (format!("{prefix}{name}.reason"), note.into_bytes()),
    ];
    for (key, bytes) in objects_to_put {
        let key = match ObjectKey::new(&key) {
            Ok(key) => key,
            Err(e) => {
                error!(error = %e, "cannot name a dead letter; record dropped");
                return;
            }
        };
        let mut backoff = Backoff::new();
        loop {
            match objects.put(&key, bytes.clone().into()).await {
                Ok(()) => {
                    debug!(%key, "dead letter stored");
                    break;
                }
                Err(e) => {
                    warn!(error = %e, "storing a dead letter failed; retrying");
                    backoff.wait().await;
                }
            }
        }
    }
}
