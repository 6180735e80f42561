//! `BusConsumer`: polls the bus, decodes polls ahead on the blocking pool,
//! and stores them one after the other — dead letters, dedup, symbolize,
//! write and sync — committing each poll's offsets once it is durable.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, AsyncContext, Context, WrapFuture};
use kiln_ingest_bus::{Consumer, Record};
use kiln_storage::{ObjectStore, ProfileStore};
use kiln_symbolizer_workers::Symbolizer;
use tokio::task::JoinError;
use tracing::{error, warn};

use super::PipelineConfig;
use super::backoff::Backoff;
use super::dead_letter::dead_letter;
use super::decoder::{DecodedPoll, Decoder, Rejected};
use super::deduper::{Deduper, Remember};
use super::progress::ProgressSender;
use super::symbolize::{Symbolized, symbolize};
use super::writer::{Written, write};
use crate::telemetry::{DeadLetter, Stage, WorkerMetrics};

/// Most records taken in one poll (and written with one sync).
const POLL_MAX: usize = 256;
/// Most record bytes taken in one poll (at least one record is always
/// taken, so a record larger than this still moves ingest on). A poll's
/// records are all held decoded until its sync, and up to
/// [`PipelineConfig::depth`] polls are in flight; without this, a few
/// batches near the decoder's limit ([`kiln_model::MAX_BATCH_BYTES`]
/// decompressed each) times [`POLL_MAX`] would hold tens of GiB.
const POLL_MAX_BYTES: usize = 64 << 20;
/// How long a poll waits for the first record when no poll is in flight.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// What the consumer drives: the stages after the bus.
#[derive(Debug)]
pub(crate) struct Stages {
    pub decoder: Decoder,
    pub deduper: Deduper,
    pub symbolizer: Addr<Symbolizer>,
    pub store: Arc<dyn ProfileStore>,
    /// Batches of a poll written at once.
    pub writes: usize,
    pub objects: Arc<dyn ObjectStore>,
    /// Stage times, records and dead letters are counted here.
    pub metrics: WorkerMetrics,
}

/// Owns a bus consumer and runs the ingest loop on its arbiter.
#[derive(Debug)]
pub(crate) struct BusConsumer {
    run: Option<(Box<dyn Consumer>, Stages, ProgressSender)>,
    config: PipelineConfig,
}

impl BusConsumer {
    pub(crate) fn new(
        consumer: Box<dyn Consumer>,
        stages: Stages,
        progress: ProgressSender,
        config: PipelineConfig,
    ) -> Self {
        Self {
            run: Some((consumer, stages, progress)),
            config,
        }
    }
}

impl Actor for BusConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some((consumer, stages, progress)) = self.run.take() else {
            return;
        };
        ctx.spawn(run(consumer, stages, progress, self.config).into_actor(self));
    }
}

/// A poll that found few records waits `linger` and takes what came
/// since: on a quiet bus each poll would otherwise carry a record or two
/// and pay, for each, the hand-offs to and from the decoding threads, a
/// store sync and a commit, which a full poll pays once for 256 records
/// (a quarter of a worker's time was thread switching with polls of a
/// few records, `fleet_bench`). A busy bus fills polls by itself and
/// never waits here.
async fn fill(
    consumer: &mut dyn Consumer,
    mut records: Vec<Record>,
    linger: Duration,
) -> Vec<Record> {
    if records.is_empty() || records.len() >= POLL_MAX / 2 || linger.is_zero() {
        return records;
    }
    tokio::time::sleep(linger).await;
    let bytes: usize = records.iter().map(|r| r.payload.len()).sum();
    if let Ok(more) = consumer
        .poll(
            POLL_MAX - records.len(),
            POLL_MAX_BYTES.saturating_sub(bytes).max(1),
            Duration::ZERO,
        )
        .await
    {
        records.extend(more);
    }
    records
}

/// A poll being decoded on the blocking pool.
type InFlight = Pin<Box<dyn Future<Output = Result<DecodedPoll, JoinError>> + Send>>;

/// The ingest loop. Up to `config.depth` polls are in flight: the oldest
/// is stored on this task while the younger ones decode on the blocking
/// pool. Polls are stored, and their offsets committed, in the order they
/// were taken, so a partition's commits only move forward, and only past
/// records that are durable.
async fn run(
    mut consumer: Box<dyn Consumer>,
    mut stages: Stages,
    progress: ProgressSender,
    config: PipelineConfig,
) {
    let depth = config.depth.max(1);
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
    let mut backoff = Backoff::new();
    loop {
        // Take polls until `depth` are in flight (the backpressure: the
        // bus is not read further ahead than that). Wait for records only
        // when nothing is in flight: a poll decoded and waiting to be
        // stored must not wait on an idle bus.
        while in_flight.len() < depth {
            let wait = match in_flight.is_empty() {
                true => POLL_WAIT,
                false => Duration::ZERO,
            };
            let records = match consumer.poll(POLL_MAX, POLL_MAX_BYTES, wait).await {
                Ok(records) if in_flight.is_empty() => {
                    fill(&mut *consumer, records, config.linger).await
                }
                Ok(records) => records,
                Err(e) => {
                    warn!(error = %e, "polling the ingest bus failed; retrying");
                    if in_flight.is_empty() {
                        backoff.wait().await;
                    }
                    break;
                }
            };
            backoff = Backoff::new();
            if records.is_empty() {
                break;
            }
            stages.metrics.took_records(records.len());
            in_flight.push_back(Box::pin(stages.decoder.decode(records)));
        }
        let Some(oldest) = in_flight.pop_front() else {
            continue;
        };
        let poll = match oldest.await {
            Ok(poll) => poll,
            Err(e) => {
                error!(error = %e, "a decoding thread failed; ingest stops");
                return;
            }
        };
        store(&mut *consumer, &mut stages, &progress, poll).await;
    }
}

/// Stores one decoded poll: sets its rejected records aside, drops the
/// dictionary entries already written, symbolizes, writes and syncs
/// (retrying until the store takes it), commits its offsets, and only then
/// remembers what it wrote.
async fn store(
    consumer: &mut dyn Consumer,
    stages: &mut Stages,
    progress: &ProgressSender,
    poll: DecodedPoll,
) {
    let DecodedPoll {
        next_offsets,
        decoded,
        rejected,
    } = poll;
    let metrics = stages.metrics.clone();
    for Rejected {
        record,
        tenant,
        reason,
    } in rejected
    {
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
    let mut clock = StageClock::start(&metrics);
    let filtered: Vec<_> = decoded
        .into_iter()
        .map(|d| stages.deduper.filter(d))
        .collect();
    clock.lap(Stage::Dedup);
    let mut remember: Vec<Option<Remember>> =
        filtered.iter().map(|d| Some(Remember::of(d))).collect();
    let batches = symbolize(&stages.symbolizer, filtered).await;
    clock.lap(Stage::Symbolize);
    let written = write_until_taken(&*stages.store, &batches, stages.writes, &metrics).await;
    clock.lap(Stage::Write);
    for (i, e) in written.refused {
        // Refused for good: set aside, so that the records after it are
        // written and committed rather than retried forever.
        let decoded = &batches[i].decoded;
        let reason = format!("the store refused the batch: {e}");
        let tenant = Some(decoded.header.scope.tenant());
        dead_letter(&*stages.objects, &decoded.record, tenant, &reason).await;
        progress.dead_lettered();
        metrics.dead_lettered(DeadLetter::StoreRefused);
        // What it wrote before the refusal is not vouched for.
        remember[i] = None;
    }
    let received: Vec<i64> = batches
        .iter()
        .map(|b| b.decoded.header.received_at_ns)
        .collect();
    drop(batches);
    clock.restart();
    let next_offsets: Vec<(u32, u64)> = next_offsets.into_iter().collect();
    commit(consumer, &next_offsets).await;
    for (partition, next) in next_offsets {
        progress.committed(partition, next);
    }
    clock.lap(Stage::Commit);
    for received_at_ns in received {
        metrics.committed_at_age(received_at_ns);
    }
    stages.deduper.remember(remember.into_iter().flatten());
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
/// good. Other errors are retried with a capped exponential backoff:
/// nothing of this poll (nor of any poll after it) is committed yet, so
/// nothing is lost, and the store's writes are idempotent.
async fn write_until_taken(
    store: &dyn ProfileStore,
    batches: &[Symbolized],
    at_once: usize,
    metrics: &WorkerMetrics,
) -> Written {
    let mut backoff = Backoff::new();
    loop {
        match write(store, batches, at_once).await {
            Ok(written) => return written,
            Err(e) => {
                warn!(error = %e, retry_in = ?backoff.next(), "writing batches failed; retrying");
                metrics.write_retried();
                backoff.wait().await;
            }
        }
    }
}

/// Commits a poll's partitions, in one request where the bus can.
async fn commit(consumer: &mut dyn Consumer, offsets: &[(u32, u64)]) {
    // A failed commit only means redelivery (writes are idempotent), but
    // retry a few times so a transient failure does not cause it.
    let mut backoff = Backoff::new();
    for attempt in 1..=3 {
        match consumer.commit_all(offsets).await {
            Ok(()) => return,
            Err(e) => {
                warn!(?offsets, attempt, error = %e, "committing offsets failed");
                backoff.wait().await;
            }
        }
    }
}
