//! The write stage: a poll's batches (dictionary entries, samples and
//! metric points) → the profile store, made durable in one sync.

use futures_util::stream::{self, StreamExt};
use kiln_storage::{ProfileStore, StoreError, StoredSample};

use super::symbolize::Symbolized;

/// What a [`write`] did: every batch is durable but those `refused`.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// The batches the store refused for good (their positions in the
    /// write), with its error.
    pub refused: Vec<(usize, StoreError)>,
}

/// Whether the store refused a write for good: the record itself is at
/// fault (a name, a metric point, an argument out of range, a row the
/// engine's constraints refuse; a tenant or project the store does not
/// have), so writing it again would fail again.
/// Everything else (the engine, I/O, a timeout, a task cut short, a
/// corrupt or incompatible store the operator must mend) may pass on a
/// later try, and is retried.
pub(crate) fn is_permanent(error: &StoreError) -> bool {
    error.is_refusal_of_the_data()
        || matches!(
            error,
            StoreError::AlreadyExists { .. } | StoreError::NotFound { .. }
        )
}

/// Writes `batches` and syncs the store: once this returns `Ok`, every
/// batch is durable but those it names as refused.
///
/// Up to `at_once` batches are written concurrently (the embedded store
/// does its engine work on the blocking pool, a distributed one waits on
/// the network), in two phases: every batch's dictionary entries, then
/// every batch's samples and metric points. A batch's samples may refer
/// to frames an earlier batch of the poll carries (`symbolize` writes each
/// once), so no sample is written before the whole poll's dictionary: a
/// reader that sees a sample can resolve its stack.
///
/// A batch the store refuses for good ([`is_permanent`]) is skipped and
/// named in the answer, so that one bad record cannot stop ingest; any
/// other error stops the write and is the answer (retry the whole poll:
/// writes are idempotent).
pub(crate) async fn write(
    store: &dyn ProfileStore,
    batches: &[Symbolized],
    at_once: usize,
) -> Result<Written, StoreError> {
    let mut refused: Vec<Option<StoreError>> = batches.iter().map(|_| None).collect();
    for phase in [Phase::Dictionary, Phase::Rows] {
        let todo: Vec<usize> = (0..batches.len())
            .filter(|&i| refused[i].is_none())
            .collect();
        let mut writes = stream::iter(todo)
            .map(|i| async move { (i, phase.write(store, &batches[i]).await) })
            .buffer_unordered(at_once.max(1));
        while let Some((i, result)) = writes.next().await {
            match result {
                Ok(()) => {}
                Err(e) if is_permanent(&e) => refused[i] = Some(e),
                // The writes still under way are dropped: the whole poll
                // is written again.
                Err(e) => return Err(e),
            }
        }
    }
    // One sync for the whole poll: the bus offsets are committed only
    // after this returns.
    store.sync().await?;
    let refused = refused
        .into_iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e?)))
        .collect();
    Ok(Written { refused })
}

/// What of a batch one pass of [`write`] writes.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Frames, stacks, label sets, executables.
    Dictionary,
    /// Samples and metric points, which refer to the dictionary.
    Rows,
}

impl Phase {
    async fn write(self, store: &dyn ProfileStore, batch: &Symbolized) -> Result<(), StoreError> {
        let scope = &batch.decoded.header.scope;
        let tenant = scope.tenant();
        let b = &batch.decoded.batch;
        match self {
            Phase::Dictionary => {
                store.put_frames(tenant, &batch.frames).await?;
                store.put_stacks(tenant, &b.stacks).await?;
                store.put_label_sets(tenant, &b.label_sets).await?;
                store.put_executables(tenant, &b.executables).await
            }
            Phase::Rows => {
                let samples = StoredSample::of_batch(b);
                store.put_samples(scope, &samples).await?;
                // Their keys are deterministic too, so a replayed poll
                // rewrites the same points.
                store.put_metric_points(scope, &b.metrics).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the split between what is dead-lettered and what is retried.
    #[test]
    fn only_errors_of_the_record_itself_are_permanent() {
        let invalid = StoreError::InvalidArgument {
            what: "sample",
            reason: "no".into(),
        };
        assert!(is_permanent(&invalid));
        let metric = StoreError::InvalidMetric(kiln_model::MetricError::TooMany);
        assert!(is_permanent(&metric));
        let io = StoreError::Io {
            op: "write",
            path: "/x".into(),
            source: std::io::Error::other("disk full"),
        };
        assert!(!is_permanent(&io));
        let backend = StoreError::Backend {
            backend: "postgres",
            op: "put samples",
            source: Box::new(std::io::Error::other("timed out")),
        };
        assert!(!is_permanent(&backend));
    }
}
