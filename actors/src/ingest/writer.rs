//! The write stage: a poll's batches (dictionary entries, samples and
//! metric points) → the profile store, made durable in one sync.

use std::borrow::Cow;

use futures_util::stream::{self, StreamExt};
use kiln_model::MetricPoint;
use kiln_storage::{ProfileStore, Scope, StoreError, StoredSample};

use super::symbolize::Symbolized;
use crate::fast_hash::FastSet;

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
/// The poll's batches are written together, in two phases: every
/// tenant's dictionary entries (frames, stacks, label sets, executables),
/// then every scope's samples and metric points. A batch's samples may
/// refer to frames an earlier batch of the poll carries (`symbolize`
/// writes each once), so no sample is written before the whole poll's
/// dictionary: a reader that sees a sample can resolve its stack.
///
/// Each tenant's (or scope's) entries of the whole poll go to the store
/// in `at_once` calls per kind, not one per batch: a call is a statement
/// and a round trip on a distributed store, and a poll's batches, one per
/// agent, share a few scopes (`fleet_bench`: per-batch statements were
/// most of a worker's time on PostgreSQL). Up to `at_once` calls are
/// made concurrently.
///
/// A group the store refuses for good ([`is_permanent`]) is written again
/// batch by batch, to find the batches at fault; those are skipped and
/// named in the answer, so that one bad record cannot stop ingest. Any
/// other error stops the write and is the answer (retry the whole poll:
/// writes are idempotent).
pub(crate) async fn write(
    store: &dyn ProfileStore,
    batches: &[Symbolized],
    at_once: usize,
) -> Result<Written, StoreError> {
    let mut refused: Vec<Option<StoreError>> = batches.iter().map(|_| None).collect();
    for phase in [Phase::Dictionary, Phase::Rows] {
        let groups = phase.groups(batches, &refused, at_once.max(1));
        let mut writes = stream::iter(groups)
            .map(|group| phase.write_group(store, batches, group))
            .buffer_unordered(at_once.max(1));
        while let Some(result) = writes.next().await {
            // A transient error drops the writes still under way: the
            // whole poll is written again.
            for (i, e) in result? {
                refused[i] = Some(e);
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

/// What of a poll one pass of [`write`] writes.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Frames, stacks, label sets, executables: per tenant.
    Dictionary,
    /// Samples and metric points, which refer to the dictionary: per
    /// scope.
    Rows,
}

impl Phase {
    /// The batches not yet refused, grouped by what one call of this
    /// phase may hold: a tenant's, or a scope's, each cut in up to
    /// `parts` runs of the poll's order. One call a scope would leave a
    /// distributed store one connection's worth of work per poll (a
    /// PostgreSQL backend inserting a whole poll's rows alone, while the
    /// worker waits: `fleet_bench`'s two workers fell behind); `parts`
    /// calls keep the `at_once` writes the store had before, each still
    /// carrying many batches.
    fn groups(
        self,
        batches: &[Symbolized],
        refused: &[Option<StoreError>],
        parts: usize,
    ) -> Vec<Vec<usize>> {
        let mut groups: Vec<(&Scope, Vec<usize>)> = Vec::new();
        for (i, batch) in batches.iter().enumerate() {
            if refused[i].is_some() {
                continue;
            }
            let scope = &batch.decoded.header.scope;
            let same = |other: &Scope| match self {
                Phase::Dictionary => other.tenant() == scope.tenant(),
                Phase::Rows => other == scope,
            };
            match groups.iter_mut().find(|(s, _)| same(s)) {
                Some((_, members)) => members.push(i),
                None => groups.push((scope, vec![i])),
            }
        }
        groups
            .into_iter()
            .flat_map(|(_, members)| {
                let run = members.len().div_ceil(parts);
                members
                    .chunks(run)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Writes one group in one call per kind; when the store refuses it
    /// for good, batch by batch, to name the batches at fault. `Ok` holds
    /// the refused batches; `Err` is an error to retry the poll on.
    async fn write_group(
        self,
        store: &dyn ProfileStore,
        batches: &[Symbolized],
        group: Vec<usize>,
    ) -> Result<Vec<(usize, StoreError)>, StoreError> {
        let members: Vec<&Symbolized> = group.iter().map(|&i| &batches[i]).collect();
        match self.write(store, &members).await {
            Ok(()) => return Ok(Vec::new()),
            Err(e) if !is_permanent(&e) => return Err(e),
            Err(e) if group.len() == 1 => return Ok(vec![(group[0], e)]),
            Err(_) => {}
        }
        let mut refused = Vec::new();
        for (&i, batch) in group.iter().zip(members) {
            match self.write(store, &[batch]).await {
                Ok(()) => {}
                Err(e) if is_permanent(&e) => refused.push((i, e)),
                Err(e) => return Err(e),
            }
        }
        Ok(refused)
    }

    /// Writes what this phase writes of `batches` (all of one group), one
    /// call per kind.
    async fn write(
        self,
        store: &dyn ProfileStore,
        batches: &[&Symbolized],
    ) -> Result<(), StoreError> {
        let Some(first) = batches.first() else {
            return Ok(());
        };
        let scope = &first.decoded.header.scope;
        let tenant = scope.tenant();
        match self {
            Phase::Dictionary => {
                let frames = unique(batches, |b| &b.frames, |f| f.id);
                store.put_frames(tenant, &frames).await?;
                let stacks = unique(batches, |b| &b.decoded.batch.stacks, |s| s.id);
                store.put_stacks(tenant, &stacks).await?;
                let sets = unique(batches, |b| &b.decoded.batch.label_sets, |l| l.id);
                store.put_label_sets(tenant, &sets).await?;
                let files = unique(batches, |b| &b.decoded.batch.executables, |e| e.file_id);
                store.put_executables(tenant, &files).await
            }
            Phase::Rows => {
                let samples: Vec<StoredSample> = batches
                    .iter()
                    .flat_map(|b| StoredSample::of_batch(&b.decoded.batch))
                    .collect();
                store.put_samples(scope, &samples).await?;
                // Their keys are deterministic too, so a replayed poll
                // rewrites the same points.
                let points: Vec<MetricPoint> = batches
                    .iter()
                    .flat_map(|b| b.decoded.batch.metrics.iter().cloned())
                    .collect();
                store.put_metric_points(scope, &points).await
            }
        }
    }
}

/// The entries `entries` picks from each of `batches`, each id once (the
/// first batch's: a dictionary id names one content); a lone batch's are
/// borrowed as they are.
fn unique<'a, T: Clone, K: Eq + std::hash::Hash>(
    batches: &[&'a Symbolized],
    entries: impl Fn(&'a Symbolized) -> &'a Vec<T>,
    id: impl Fn(&T) -> K,
) -> Cow<'a, [T]> {
    if let [only] = batches {
        return Cow::Borrowed(entries(only));
    }
    let mut seen = FastSet::default();
    batches
        .iter()
        .flat_map(|b| entries(b).iter())
        .filter(|e| seen.insert(id(e)))
        .cloned()
        .collect()
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
