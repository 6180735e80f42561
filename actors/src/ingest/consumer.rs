//! `BusConsumer`: polls the bus and drives each poll through
//! decode → dedup → symbolize → write, then commits the offsets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, AsyncContext, Context, WrapFuture};
use kiln_ingest_bus::Consumer;
use kiln_storage::{ObjectKey, ObjectStore};
use kiln_symbolizer_workers::Symbolizer;
use tracing::{debug, error, warn};

use super::decoder::{Decode, Decoder, Rejected};
use super::deduper::{Deduper, Filter, Remember};
use super::progress::ProgressSender;
use super::symbolize::{Symbolized, symbolize};
use super::writer::{Write, Writer};

/// Most records taken in one poll (and written with one sync).
const POLL_MAX: usize = 256;
/// How long one poll waits for the first record.
const POLL_WAIT: Duration = Duration::from_millis(500);
/// Pause before retrying after the bus or the store failed.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The stages a consumer drives.
#[derive(Debug, Clone)]
pub(crate) struct Stages {
    pub decoder: Addr<Decoder>,
    pub deduper: Addr<Deduper>,
    pub symbolizer: Addr<Symbolizer>,
    pub writer: Addr<Writer>,
    pub objects: Arc<dyn ObjectStore>,
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
    loop {
        let records = match consumer.poll(POLL_MAX, POLL_WAIT).await {
            Ok(records) => records,
            Err(e) => {
                warn!(error = %e, "polling the ingest bus failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        let mut next_offsets = BTreeMap::new();
        let mut decoded = Vec::with_capacity(records.len());
        for record in records {
            let next = next_offsets.entry(record.partition).or_insert(0);
            *next = (*next).max(record.offset + 1);
            match stages.decoder.send(Decode(record)).await {
                Ok(Ok(batch)) => decoded.push(batch),
                Ok(Err(rejected)) => dead_letter(&*stages.objects, rejected).await,
                Err(e) => {
                    error!(error = %e, "decoder stopped; ingest stops");
                    return;
                }
            }
        }
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
        let remember: Vec<Remember> = filtered.iter().map(Remember::of).collect();
        let symbolized = symbolize(&stages.symbolizer, filtered).await;
        if !write(&stages.writer, symbolized).await {
            return;
        }
        for (partition, next) in next_offsets {
            commit(&mut *consumer, partition, next).await;
            progress.committed(partition, next);
        }
        for r in remember {
            stages.deduper.do_send(r);
        }
    }
}

/// Writes until the store takes the batches; `false` if the writer is gone.
async fn write(writer: &Addr<Writer>, batches: Vec<Symbolized>) -> bool {
    let batches = Arc::new(batches);
    loop {
        match writer.send(Write(batches.clone())).await {
            Ok(Ok(())) => return true,
            Ok(Err(e)) => {
                // Not committed, so nothing is lost: retry the same batches.
                warn!(error = %e, "writing batches failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => {
                error!(error = %e, "writer stopped; ingest stops");
                return false;
            }
        }
    }
}

async fn commit(consumer: &mut dyn Consumer, partition: u32, next: u64) {
    // A failed commit only means redelivery (writes are idempotent), but
    // retry a few times so a transient failure does not cause it.
    for attempt in 1..=3 {
        match consumer.commit(partition, next).await {
            Ok(()) => return,
            Err(e) => {
                warn!(partition, next, attempt, error = %e, "committing an offset failed");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// Stores a record that could not be decoded, whole, under its tenant's
/// `rejected/` prefix, so that a newer build can replay it.
async fn dead_letter(objects: &dyn ObjectStore, rejected: Rejected) {
    let Rejected {
        record,
        tenant,
        reason,
    } = rejected;
    let name = format!("p{}-o{}.envelope", record.partition, record.offset);
    let key = match &tenant {
        Some(t) => format!("tenants/{t}/rejected/{name}"),
        None => format!("rejected/{name}"),
    };
    warn!(
        partition = record.partition,
        offset = record.offset,
        tenant = tenant.as_deref().unwrap_or("?"),
        key,
        reason,
        "batch refused by the decoder; kept in the object store"
    );
    let key = match ObjectKey::new(&key) {
        Ok(key) => key,
        Err(e) => {
            error!(error = %e, "cannot name a dead letter; record dropped");
            return;
        }
    };
    loop {
        match objects.put(&key, record.payload.clone().into()).await {
            Ok(()) => {
                debug!(%key, "dead letter stored");
                return;
            }
            Err(e) => {
                warn!(error = %e, "storing a dead letter failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}
