//! Filling a profile store straight, without the ingest pipeline, for the
//! query benches.

use kiln_model::Batch;
use kiln_storage::{ProfileStore, Scope, StoredFrame, StoredSample};

/// Writes `batch` for `scope` as the ingest writer does: its dictionary
/// first, its samples last (no sync: the caller syncs once it is done).
pub async fn write_batch(
    store: &dyn ProfileStore,
    scope: &Scope,
    batch: &Batch,
) -> anyhow::Result<()> {
    let frames: Vec<StoredFrame> = batch.frames.iter().cloned().map(Into::into).collect();
    store.put_frames(scope.tenant(), &frames).await?;
    store.put_stacks(scope.tenant(), &batch.stacks).await?;
    store
        .put_label_sets(scope.tenant(), &batch.label_sets)
        .await?;
    store
        .put_samples(scope, &StoredSample::of_batch(batch))
        .await?;
    Ok(())
}
