//! `Writer`: decoded batches (samples and metric points) → the profile
//! store, made durable in one sync.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use kiln_storage::{ProfileStore, StoreError, StoredSample};

use super::symbolize::Symbolized;

/// Writes batches; answers once they are durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), StoreError>")]
pub(crate) struct Write(pub Arc<Vec<Symbolized>>);

/// Writes to the profile store.
#[derive(Debug)]
pub(crate) struct Writer {
    store: Arc<dyn ProfileStore>,
}

impl Writer {
    pub(crate) fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self { store }
    }
}

impl Actor for Writer {
    type Context = Context<Self>;
}

impl Handler<Write> for Writer {
    type Result = ResponseFuture<Result<(), StoreError>>;

    fn handle(&mut self, Write(batches): Write, _: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        Box::pin(async move {
            for batch in batches.iter() {
                write_one(&*store, batch).await?;
            }
            // One sync for the whole poll: the bus offsets are committed
            // only after this returns.
            store.sync().await
        })
    }
}

async fn write_one(store: &dyn ProfileStore, batch: &Symbolized) -> Result<(), StoreError> {
    let scope = &batch.decoded.header.scope;
    let tenant = scope.tenant();
    let b = &batch.decoded.batch;
    // Dictionary first, samples last: a reader that sees a sample can
    // resolve its stack.
    store.put_frames(tenant, &batch.frames).await?;
    store.put_stacks(tenant, &b.stacks).await?;
    store.put_label_sets(tenant, &b.label_sets).await?;
    store.put_executables(tenant, &b.executables).await?;
    let samples = StoredSample::of_batch(b);
    store.put_samples(scope, &samples).await?;
    // Metric points refer to label sets only, written above. Their keys
    // are deterministic too, so a replayed poll rewrites the same points.
    store.put_metric_points(scope, &b.metrics).await
}
