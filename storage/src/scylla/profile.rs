//! [`ProfileStore`] on ScyllaDB: dictionary rows as single-partition
//! statements and samples and rollups as single-partition unlogged
//! batches, many in flight at once, through the statements of
//! [`cql`](super::cql).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ::scylla::policies::timestamp_generator::TimestampGenerator;
use ::scylla::statement::batch::{Batch, BatchType};
use ::scylla::value::Counter;
use async_trait::async_trait;
use futures_util::{StreamExt, TryStreamExt, stream};
use kiln_model::{
    Executable, FileId, FrameId, LabelSet, LabelSetEntry, LabelSetId, MetricPoint, StackEntry,
    StackId,
};
use uuid::Uuid;

use super::ScyllaProfileStore;
use super::cql::Dict;
use super::layout::{self, MetricBatch, SampleBatch};
use crate::error::{DecodeError, StoreError};
use crate::profile::{
    DeletedHours, ProfileStore, StoredFrame, StoredMetricPoint, StoredSample, check_metric_name,
    check_metric_points, hour_of, metric_bytes_per_hour, sample_bytes_per_hour,
};
use crate::rollup::{HourVersion, Resolution, RollupRow, merge_rows};
use crate::scope::Scope;
use crate::values;

/// Requests in flight at once per call. Enough to keep a few nodes' shards
/// busy from one writer; the driver's per-connection limit is far higher.
const IN_FLIGHT: usize = 64;

/// A scan's row: `(ts, stack_id, labelset_id, sample_count, period_ns)`.
type SampleRow = (i64, Uuid, Uuid, i64, i64);

/// A metric scan's row: `(ts, labelset_id, value)`.
type MetricRow = (i64, Uuid, f64);

/// A rollup scan's row: `(stack_id, labelset_id, period_ns, sample_count)`.
type RollupScanRow = (Uuid, Uuid, i64, i64);

impl ScyllaProfileStore {
    /// Upserts dictionary rows `(id, encoded value)` of `tenant`.
    async fn put_dict(
        &self,
        dict: Dict,
        tenant: &str,
        rows: Vec<(u128, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let statement = self.inner.statements.upsert(dict);
        let session = &self.inner.session;
        let requests: Vec<_> = rows
            .into_iter()
            .map(|(id, value)| async move {
                session
                    .execute_unpaged(statement, (tenant, Uuid::from_u128(id), value))
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla("write dictionary rows", e))
            })
            .collect();
        run_all(requests).await.map(drop)
    }

    /// Reads dictionary rows of `tenant` in the order of `ids`, decoding
    /// each with `decode(id, bytes)`.
    async fn get_dict<T: Clone>(
        &self,
        dict: Dict,
        tenant: &str,
        ids: &[u128],
        decode: fn(u128, &[u8]) -> Result<T, DecodeError>,
    ) -> Result<Vec<Option<T>>, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "read dictionary rows";
        let statement = self.inner.statements.select(dict);
        let session = &self.inner.session;
        let unique: BTreeSet<u128> = ids.iter().copied().collect();
        let requests: Vec<_> = unique
            .into_iter()
            .map(|id| async move {
                let result = session
                    .execute_unpaged(statement, (tenant, Uuid::from_u128(id)))
                    .await
                    .map_err(|e| StoreError::scylla(op, e))?
                    .into_rows_result()
                    .map_err(|e| StoreError::scylla(op, e))?;
                let Some((bytes,)) = result
                    .maybe_first_row::<(Vec<u8>,)>()
                    .map_err(|e| StoreError::scylla(op, e))?
                else {
                    return Ok(None);
                };
                let value = decode(id, &bytes).map_err(|reason| StoreError::Corrupt {
                    what: dict.row(),
                    key: format!("{tenant}/{id:032x}"),
                    reason,
                })?;
                Ok::<_, StoreError>(Some((id, value)))
            })
            .collect();
        let found: HashMap<u128, T> = run_all(requests).await?.into_iter().flatten().collect();
        Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
    }

    /// Writes one partition's rows as one unlogged batch.
    async fn put_sample_batch(&self, scope: &Scope, batch: &SampleBatch) -> Result<(), StoreError> {
        let statement = &self.inner.statements.insert_sample;
        let (hour, shard) = batch.partition;
        let mut cql_batch = Batch::new(BatchType::Unlogged);
        let mut values = Vec::with_capacity(batch.rows.len());
        for row in &batch.rows {
            cql_batch.append_statement(statement.clone());
            values.push((
                scope.tenant(),
                scope.project(),
                hour,
                shard,
                row.timestamp_ns,
                Uuid::from_u128(row.stack.0),
                Uuid::from_u128(row.labels.0),
                layout::to_bigint(row.count),
                layout::to_bigint(row.period_ns),
            ));
        }
        self.inner
            .session
            .batch(&cql_batch, values)
            .await
            .map_err(|e| StoreError::scylla("write samples", e))?;
        Ok(())
    }

    /// Deletes hour `hour`'s partitions, then its index row, as of the
    /// write timestamp `before_us`: rows (and an index row) written since
    /// stay.
    async fn delete_hour_written_before(
        &self,
        scope: &Scope,
        hour: i64,
        before_us: i64,
    ) -> Result<(), StoreError> {
        let statements = &self.inner.statements;
        let session = &self.inner.session;
        let partitions: Vec<_> = (0..self.inner.sample_shards)
            .map(|shard| async move {
                session
                    .execute_unpaged(
                        &statements.delete_sample_partition_written_before,
                        (before_us, scope.tenant(), scope.project(), hour, shard),
                    )
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla("delete sealed samples", e))
            })
            .collect();
        run_all(partitions).await?;
        // The index row last: a scan that still finds it reads empty
        // partitions, never the other way round.
        session
            .execute_unpaged(
                &statements.delete_sample_hour_written_before,
                (before_us, scope.tenant(), scope.project(), hour),
            )
            .await
            .map_err(|e| StoreError::scylla("delete a sealed hour's index row", e))?;
        Ok(())
    }

    /// Writes one metric partition's rows as one unlogged batch.
    async fn put_metric_batch(
        &self,
        scope: &Scope,
        batch: &MetricBatch<'_>,
    ) -> Result<(), StoreError> {
        let statement = &self.inner.statements.insert_metric;
        let (name, hour, shard) = batch.partition;
        let mut cql_batch = Batch::new(BatchType::Unlogged);
        let mut values = Vec::with_capacity(batch.rows.len());
        for row in &batch.rows {
            cql_batch.append_statement(statement.clone());
            values.push((
                scope.tenant(),
                scope.project(),
                name,
                hour,
                shard,
                row.timestamp_ns,
                Uuid::from_u128(row.labels.0),
                row.value,
            ));
        }
        self.inner
            .session
            .batch(&cql_batch, values)
            .await
            .map_err(|e| StoreError::scylla("write metric points", e))?;
        Ok(())
    }

    /// The `(hour, name)` pairs of `scope`'s metrics in hours `[first, last]`.
    async fn indexed_metric_hours(
        &self,
        scope: &Scope,
        first: i64,
        last: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let op = "read the hours that hold metrics";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.select_metric_names.clone(),
                (scope.tenant(), scope.project(), first, last),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(i64, String)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }

    /// The points of one metric partition with `from_ns <= ts < to_ns`.
    async fn scan_metric_partition(
        &self,
        scope: &Scope,
        (name, hour, shard): layout::MetricPartition<'_>,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredMetricPoint>, StoreError> {
        let op = "scan metric points";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.scan_metrics.clone(),
                (
                    scope.tenant(),
                    scope.project(),
                    name,
                    hour,
                    shard,
                    from_ns,
                    to_ns,
                ),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<MetricRow>()
            .map_err(|e| StoreError::scylla(op, e))?
            .map_ok(|(ts, labels, value)| StoredMetricPoint {
                timestamp_ns: ts,
                labels: LabelSetId(labels.as_u128()),
                value,
            })
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }

    /// The hours in `[first, last]` that hold samples of `scope`.
    async fn indexed_sample_hours(
        &self,
        scope: &Scope,
        first: i64,
        last: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let op = "read the hours that hold samples";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.select_sample_hours.clone(),
                (scope.tenant(), scope.project(), first, last),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(i64,)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .map_ok(|(hour,)| hour)
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }

    /// The rows of one partition with `from_ns <= ts < to_ns`.
    async fn scan_partition(
        &self,
        scope: &Scope,
        (hour, shard): layout::Partition,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError> {
        let op = "scan samples";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.scan_samples.clone(),
                (scope.tenant(), scope.project(), hour, shard, from_ns, to_ns),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<SampleRow>()
            .map_err(|e| StoreError::scylla(op, e))?
            .map_ok(|(ts, stack, labels, count, period_ns)| StoredSample {
                timestamp_ns: ts,
                stack: StackId(stack.as_u128()),
                labels: LabelSetId(labels.as_u128()),
                count: layout::from_bigint(count),
                period_ns: layout::from_bigint(period_ns),
            })
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }
}

impl ScyllaProfileStore {
    /// Writes rows of the rollup of the window of `resolution` starting
    /// at hour `window` (at most [`layout::BATCH_ROWS`], distinct keys) as
    /// one unlogged batch at client timestamp `timestamp` (microseconds).
    async fn put_rollup_batch(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
        rows: &[RollupRow],
        timestamp: i64,
    ) -> Result<(), StoreError> {
        let statement = &self.inner.statements.insert_rollup;
        let day = layout::day_of(window);
        let resolution = layout::resolution_secs(resolution);
        let mut cql_batch = Batch::new(BatchType::Unlogged);
        cql_batch.set_timestamp(Some(timestamp));
        let mut values = Vec::with_capacity(rows.len());
        for row in rows {
            cql_batch.append_statement(statement.clone());
            values.push((
                scope.tenant(),
                scope.project(),
                day,
                resolution,
                window,
                Uuid::from_u128(row.stack.0),
                Uuid::from_u128(row.labels.0),
                layout::to_bigint(row.period_ns),
                layout::to_bigint(row.count),
            ));
        }
        self.inner
            .session
            .batch(&cql_batch, values)
            .await
            .map_err(|e| StoreError::scylla("write a rollup", e))?;
        Ok(())
    }

    /// The windows of `resolution` starting in hours `[first, last]` with
    /// a rollup of `scope`, each (its first hour) with its version, as
    /// `rollup_hours` lists them: in order.
    async fn indexed_rollup_hours(
        &self,
        scope: &Scope,
        resolution: Resolution,
        first: i64,
        last: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        let op = "read rollup versions";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.select_rollup_hours.clone(),
                (
                    scope.tenant(),
                    scope.project(),
                    layout::resolution_secs(resolution),
                    first,
                    last,
                ),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(i64, i64)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .map_ok(|(hour, version)| HourVersion {
                hour,
                version: layout::from_bigint(version),
            })
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }

    /// Retention's part of the rollups of `resolution`: the windows
    /// `rollup_hours` lists as starting before `before_hour` go, by day
    /// partition ([`layout::rollup_days_before`]: a partition tombstone
    /// each, or a range tombstone within the cutoff's day), then their
    /// `rollup_hours` rows (one range tombstone).
    async fn delete_rollups_before(
        &self,
        scope: &Scope,
        resolution: Resolution,
        before_hour: i64,
    ) -> Result<(), StoreError> {
        let statements = &self.inner.statements;
        let (tenant, project) = (scope.tenant(), scope.project());
        let secs = layout::resolution_secs(resolution);
        // From the least hour a `bigint` holds, not `hour_of(i64::MIN)`:
        // whatever window was written goes.
        let windows: Vec<i64> = self
            .indexed_rollup_hours(scope, resolution, i64::MIN, before_hour - 1)
            .await?
            .iter()
            .map(|w| w.hour)
            .collect();
        let (whole_days, cutoff_day) =
            layout::rollup_days_before(&windows, resolution, before_hour);
        self.delete_each(
            "delete rollup partitions",
            &statements.delete_rollup_partition,
            whole_days
                .iter()
                .map(|&day| (tenant, project, day, secs))
                .collect(),
        )
        .await?;
        self.delete_each(
            "delete rollups",
            &statements.delete_rollups_before,
            cutoff_day
                .map(|day| (tenant, project, day, secs, before_hour))
                .into_iter()
                .collect(),
        )
        .await?;
        self.delete_each(
            "delete rollup hours",
            &statements.delete_rollup_hours_before,
            vec![(tenant, project, secs, before_hour)],
        )
        .await
    }

    /// Adds `bytes` per hour to the scope's usage counters; after the rows
    /// are written, so a failed write counts nothing (its retry counts
    /// once).
    async fn add_stored_bytes(
        &self,
        scope: &Scope,
        bytes: &[(i64, u64)],
    ) -> Result<(), StoreError> {
        let deltas: Vec<(i64, i64)> = bytes
            .iter()
            .map(|&(hour, added)| (hour, i64::try_from(added).unwrap_or(i64::MAX)))
            .collect();
        self.update_stored_bytes("count stored bytes", scope, &deltas)
            .await
    }

    /// Adds `delta` (negative: subtracts) to the usage counter of each
    /// hour, many in flight.
    async fn update_stored_bytes(
        &self,
        op: &'static str,
        scope: &Scope,
        deltas: &[(i64, i64)],
    ) -> Result<(), StoreError> {
        let session = &self.inner.session;
        let statement = &self.inner.statements.add_stored_bytes;
        let updates: Vec<_> = deltas
            .iter()
            .map(|&(hour, delta)| async move {
                // A `counter` column takes (and gives) the driver's
                // `Counter`, not a plain i64 (which is `bigint` only).
                session
                    .execute_unpaged(
                        statement,
                        (Counter(delta), scope.tenant(), scope.project(), hour),
                    )
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla(op, e))
            })
            .collect();
        run_all(updates).await.map(drop)
    }

    /// Runs one delete statement per value tuple, many in flight.
    async fn delete_each<V: ::scylla::serialize::row::SerializeRow + Send + Sync>(
        &self,
        op: &'static str,
        statement: &::scylla::statement::prepared::PreparedStatement,
        values: Vec<V>,
    ) -> Result<(), StoreError> {
        let session = &self.inner.session;
        let deletes: Vec<_> = values
            .iter()
            .map(|v| async move {
                session
                    .execute_unpaged(statement, v)
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla(op, e))
            })
            .collect();
        run_all(deletes).await.map(drop)
    }
}

/// Runs `requests`, at most [`IN_FLIGHT`] at a time, stopping at the
/// first error; the results in no particular order.
async fn run_all<T>(
    requests: Vec<impl Future<Output = Result<T, StoreError>>>,
) -> Result<Vec<T>, StoreError> {
    stream::iter(requests)
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await
}

#[async_trait]
impl ProfileStore for ScyllaProfileStore {
    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError> {
        let rows = frames
            .iter()
            .map(|e| (e.id.0, values::encode_stored_frame(e)))
            .collect();
        self.put_dict(Dict::Frames, tenant, rows).await
    }

    async fn put_stacks(&self, tenant: &str, stacks: &[StackEntry]) -> Result<(), StoreError> {
        let rows = stacks
            .iter()
            .map(|e| (e.id.0, values::encode_stack(&e.frames)))
            .collect();
        self.put_dict(Dict::Stacks, tenant, rows).await
    }

    async fn put_label_sets(&self, tenant: &str, sets: &[LabelSetEntry]) -> Result<(), StoreError> {
        let rows = sets
            .iter()
            .map(|e| (e.id.0, values::encode_label_set(&e.labels)))
            .collect();
        self.put_dict(Dict::LabelSets, tenant, rows).await
    }

    async fn put_executables(
        &self,
        tenant: &str,
        executables: &[Executable],
    ) -> Result<(), StoreError> {
        // A file id given twice in one call: the last one wins, as the
        // writes would otherwise race.
        let rows: HashMap<u128, Vec<u8>> = executables
            .iter()
            .map(|e| (e.file_id.0, values::encode_executable(e)))
            .collect();
        self.put_dict(Dict::Executables, tenant, rows.into_iter().collect())
            .await
    }

    async fn put_samples(&self, scope: &Scope, samples: &[StoredSample]) -> Result<(), StoreError> {
        let batches = layout::sample_batches(samples, self.inner.sample_shards);
        if batches.is_empty() {
            return Ok(());
        }
        // Hours first: a scan finds an hour whose samples exist (an hour
        // row without samples, left by a failed write, costs one empty
        // read).
        let session = &self.inner.session;
        let insert_hour = &self.inner.statements.insert_sample_hour;
        let hours: Vec<_> = layout::hours_of(&batches)
            .into_iter()
            .map(|hour| async move {
                session
                    .execute_unpaged(insert_hour, (scope.tenant(), scope.project(), hour))
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla("write sample hours", e))
            })
            .collect();
        run_all(hours).await?;
        let writes: Vec<_> = batches
            .iter()
            .map(|batch| self.put_sample_batch(scope, batch))
            .collect();
        run_all(writes).await?;
        self.add_stored_bytes(scope, &sample_bytes_per_hour(scope, samples))
            .await
    }

    /// By partition, as of `written_before_ns` (see the trait): rows of
    /// a sealed hour written before it are all in `samples`.
    async fn delete_sealed_samples(
        &self,
        scope: &Scope,
        samples: &[StoredSample],
        written_before_ns: i64,
    ) -> Result<u64, StoreError> {
        let mut hours: Vec<i64> = samples.iter().map(|s| hour_of(s.timestamp_ns)).collect();
        hours.sort_unstable();
        hours.dedup();
        // CQL write timestamps are µs; `USING TIMESTAMP t` deletes what was
        // written at or before t.
        let before_us = written_before_ns.div_euclid(1_000) - 1;
        for hour in hours {
            self.delete_hour_written_before(scope, hour, before_us)
                .await?;
        }
        Ok(samples.len() as u64)
    }

    async fn put_metric_points(
        &self,
        scope: &Scope,
        points: &[MetricPoint],
    ) -> Result<(), StoreError> {
        check_metric_points(points)?;
        let batches = layout::metric_batches(points, self.inner.sample_shards);
        if batches.is_empty() {
            return Ok(());
        }
        // The name index first, as the sample hours.
        let session = &self.inner.session;
        let insert_name = &self.inner.statements.insert_metric_name;
        let names: Vec<_> = layout::metric_hours_of(&batches)
            .into_iter()
            .map(|(hour, name)| async move {
                session
                    .execute_unpaged(insert_name, (scope.tenant(), scope.project(), hour, name))
                    .await
                    .map(drop)
                    .map_err(|e| StoreError::scylla("write metric names", e))
            })
            .collect();
        run_all(names).await?;
        let writes: Vec<_> = batches
            .iter()
            .map(|batch| self.put_metric_batch(scope, batch))
            .collect();
        run_all(writes).await?;
        self.add_stored_bytes(scope, &metric_bytes_per_hour(scope, points))
            .await
    }

    /// The hours come from the indexes; every shard's partition of each
    /// goes (a partition tombstone each), and at each resolution the
    /// rollups of the windows starting before the cutoff hour that
    /// `rollup_hours` lists (a partition tombstone per day partition that
    /// holds only such windows, a range tombstone within the cutoff's day
    /// partition of hours), then the index rows
    /// (range tombstones), then the usage counters are brought down to
    /// zero. In that order, a delete cut short leaves index rows of empty
    /// partitions (a later run finds and deletes them again), never data
    /// that no index points to.
    async fn delete_hours_before(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<DeletedHours, StoreError> {
        let before_hour = hour_of(before_ns);
        let first = hour_of(i64::MIN);
        if before_hour <= first {
            return Ok(DeletedHours::default());
        }
        let statements = &self.inner.statements;
        let (tenant, project) = (scope.tenant(), scope.project());
        let shards = 0..self.inner.sample_shards;

        let mut sample_hours = self
            .indexed_sample_hours(scope, first, before_hour - 1)
            .await?;
        sample_hours.sort_unstable();
        sample_hours.dedup();
        let partitions: Vec<_> = sample_hours
            .iter()
            .flat_map(|&hour| {
                shards
                    .clone()
                    .map(move |shard| (tenant, project, hour, shard))
            })
            .collect();
        self.delete_each(
            "delete sample partitions",
            &statements.delete_sample_partition,
            partitions,
        )
        .await?;

        let metric_hours = self
            .indexed_metric_hours(scope, first, before_hour - 1)
            .await?;
        let partitions: Vec<_> = metric_hours
            .iter()
            .flat_map(|(hour, name)| {
                shards
                    .clone()
                    .map(move |shard| (tenant, project, name.as_str(), *hour, shard))
            })
            .collect();
        self.delete_each(
            "delete metric partitions",
            &statements.delete_metric_partition,
            partitions,
        )
        .await?;

        for resolution in Resolution::ALL {
            self.delete_rollups_before(scope, resolution, before_hour)
                .await?;
        }

        let bound = vec![(tenant, project, before_hour)];
        self.delete_each(
            "delete sample hours",
            &statements.delete_sample_hours_before,
            bound.clone(),
        )
        .await?;
        self.delete_each(
            "delete metric names",
            &statements.delete_metric_names_before,
            bound,
        )
        .await?;

        let op = "read stored bytes";
        let usage: Vec<(i64, Counter)> = self
            .inner
            .session
            .execute_iter(
                statements.select_stored_bytes_before.clone(),
                (tenant, project, before_hour),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(i64, Counter)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))?;
        // The counters are brought to zero, not deleted: CQL (Cassandra
        // and ScyllaDB alike) does not support updating a counter again
        // after its delete, and a late write to a deleted hour would do
        // just that (on Cassandra it brings the deleted count back). A
        // decrement also keeps bytes a concurrent write added meanwhile.
        let live: Vec<(i64, i64)> = usage
            .iter()
            .filter(|(_, bytes)| bytes.0 > 0)
            .map(|(hour, bytes)| (*hour, bytes.0))
            .collect();
        let bytes = live.iter().map(|(_, b)| *b as u64).sum();
        let decrements: Vec<(i64, i64)> = live.iter().map(|&(hour, b)| (hour, -b)).collect();
        self.update_stored_bytes("uncount deleted bytes", scope, &decrements)
            .await?;
        Ok(DeletedHours {
            sample_hours: sample_hours.len() as u64,
            metric_hours: metric_hours.len() as u64,
            bytes,
        })
    }

    /// One partition read of the counters, then, per project, the hours
    /// its indexes (`sample_hours`, `metric_names`) still hold: counters
    /// cannot carry a TTL, so an hour counts while an index row of it
    /// lives. Index rows are written with every write of their hour and
    /// the samples' TTL, so they expire with the last rows of the hour.
    /// (The TTL runs from the write, not from the samples' timestamps: a
    /// cutoff computed from the clock and the TTL would drop hours of
    /// late-arriving or backfilled samples that are still stored.)
    async fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "read stored bytes";
        let rows: Vec<(String, i64, Counter)> = self
            .inner
            .session
            .execute_iter(self.inner.statements.select_stored_bytes.clone(), (tenant,))
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(String, i64, Counter)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))?;
        let mut by_project: BTreeMap<String, Vec<(i64, u64)>> = BTreeMap::new();
        // Hours a retention delete brought to zero need no index read.
        for (project, hour, bytes) in rows.into_iter().filter(|(_, _, b)| b.0 > 0) {
            by_project
                .entry(project)
                .or_default()
                .push((hour, bytes.0 as u64));
        }
        let counts: Vec<_> = by_project
            .into_iter()
            .map(|(project, hours)| async move {
                let scope = Scope::new(tenant, project)?;
                let first = hours.iter().map(|(hour, _)| *hour).min().unwrap_or(0);
                let last = hours.iter().map(|(hour, _)| *hour).max().unwrap_or(0);
                let mut live: BTreeSet<i64> = self
                    .indexed_sample_hours(&scope, first, last)
                    .await?
                    .into_iter()
                    .collect();
                live.extend(
                    self.indexed_metric_hours(&scope, first, last)
                        .await?
                        .into_iter()
                        .map(|(hour, _)| hour),
                );
                Ok::<u64, StoreError>(
                    hours
                        .iter()
                        .filter(|(hour, _)| live.contains(hour))
                        .map(|(_, bytes)| bytes)
                        .sum(),
                )
            })
            .collect();
        Ok(run_all(counts).await?.into_iter().sum())
    }

    /// The `stored_bytes` counters of the range: one slice of the
    /// tenant's partition. Hours that retention brought down to zero are
    /// left out.
    async fn hour_versions(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let op = "read hour versions";
        let mut versions: Vec<HourVersion> = self
            .inner
            .session
            .execute_iter(
                self.inner.statements.select_stored_bytes_between.clone(),
                (
                    scope.tenant(),
                    scope.project(),
                    hour_of(from_ns),
                    hour_of(to_ns - 1),
                ),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<(i64, Counter)>()
            .map_err(|e| StoreError::scylla(op, e))?
            .try_filter_map(|(hour, bytes)| async move {
                Ok((bytes.0 > 0).then_some(HourVersion {
                    hour,
                    version: bytes.0 as u64,
                }))
            })
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))?;
        versions.sort_unstable();
        Ok(versions)
    }

    /// Not atomic, so ordered by client timestamps: two timestamps from
    /// the session's generator, `deleted_at < written_at`. At `deleted_at`
    /// the window's `rollup_hours` row goes, then its rows (a range
    /// tombstone of the slice `window_start = window` of the partition of
    /// its first hour's day); at `written_at` the
    /// merged rows go in (unlogged batches, many in flight), then the
    /// version. The rows' timestamp is later than the delete's, so the
    /// delete never shadows them (a tombstone wins a tie), and a rollup
    /// of the window written meanwhile by another process keeps only the
    /// rows of whichever took the later timestamps. The version goes
    /// first and comes back last, so a rewrite cut short leaves the
    /// window without a rollup (its queries read the samples), never a partial
    /// one marked with a version.
    async fn put_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
        version: u64,
        rows: &[RollupRow],
    ) -> Result<(), StoreError> {
        let rows = merge_rows(rows);
        let secs = layout::resolution_secs(resolution);
        let statements = &self.inner.statements;
        let session = &self.inner.session;
        let (tenant, project) = (scope.tenant(), scope.project());
        // The generator is strictly monotonic: `written_at > deleted_at`,
        // and every later timestamp of this session is later still.
        let deleted_at = self.inner.timestamps.next_timestamp();
        let written_at = self.inner.timestamps.next_timestamp();
        debug_assert!(written_at > deleted_at);
        let at = |statement: &::scylla::statement::prepared::PreparedStatement, timestamp| {
            let mut statement = statement.clone();
            statement.set_timestamp(Some(timestamp));
            statement
        };

        session
            .execute_unpaged(
                &at(&statements.delete_rollup_hour, deleted_at),
                (tenant, project, secs, window),
            )
            .await
            .map_err(|e| StoreError::scylla("delete a rollup version", e))?;
        session
            .execute_unpaged(
                &at(&statements.delete_rollup, deleted_at),
                (tenant, project, layout::day_of(window), secs, window),
            )
            .await
            .map_err(|e| StoreError::scylla("delete an earlier rollup", e))?;
        let writes: Vec<_> = rows
            .chunks(layout::BATCH_ROWS)
            .map(|chunk| self.put_rollup_batch(scope, resolution, window, chunk, written_at))
            .collect();
        run_all(writes).await?;
        session
            .execute_unpaged(
                &at(&statements.insert_rollup_hour, written_at),
                (tenant, project, secs, window, layout::to_bigint(version)),
            )
            .await
            .map_err(|e| StoreError::scylla("write a rollup version", e))?;
        Ok(())
    }

    /// From the `rollup_hours` index table: one partition slice.
    async fn rollup_versions(
        &self,
        scope: &Scope,
        resolution: Resolution,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let mut versions = self
            .indexed_rollup_hours(scope, resolution, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        versions.sort_unstable();
        Ok(versions)
    }

    /// One clustering slice of the partition of the window's first hour's
    /// day.
    async fn scan_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
    ) -> Result<Vec<RollupRow>, StoreError> {
        let op = "scan a rollup";
        self.inner
            .session
            .execute_iter(
                self.inner.statements.scan_rollup.clone(),
                (
                    scope.tenant(),
                    scope.project(),
                    layout::day_of(window),
                    layout::resolution_secs(resolution),
                    window,
                ),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?
            .rows_stream::<RollupScanRow>()
            .map_err(|e| StoreError::scylla(op, e))?
            .map_ok(|(stack, labels, period_ns, count)| RollupRow {
                stack: StackId(stack.as_u128()),
                labels: LabelSetId(labels.as_u128()),
                period_ns: layout::from_bigint(period_ns),
                count: layout::from_bigint(count),
            })
            .try_collect()
            .await
            .map_err(|e| StoreError::scylla(op, e))
    }

    async fn scan_metric_points(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredMetricPoint>, StoreError> {
        check_metric_name(name)?;
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let hours = self
            .indexed_metric_hours(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        let mut scans = Vec::new();
        for (hour, _) in hours.iter().filter(|(_, n)| n == name) {
            for shard in 0..self.inner.sample_shards {
                scans.push(self.scan_metric_partition(scope, (name, *hour, shard), from_ns, to_ns));
            }
        }
        let parts = run_all(scans).await?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// From the `sample_hours` index table (clustered by hour, so the
    /// read is one partition slice of the hours with data).
    async fn sample_hours(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let mut hours = self
            .indexed_sample_hours(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        // Clustering order is ascending already; sorting keeps the promise
        // whatever the table's order becomes.
        hours.sort_unstable();
        hours.dedup();
        Ok(hours)
    }

    /// From the `metric_names` index table: its (hour, name) rows of the
    /// range, those of `name`.
    async fn metric_hours(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        check_metric_name(name)?;
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let mut hours: Vec<i64> = self
            .indexed_metric_hours(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?
            .into_iter()
            .filter_map(|(hour, n)| (n == name).then_some(hour))
            .collect();
        hours.sort_unstable();
        hours.dedup();
        Ok(hours)
    }

    async fn metric_names(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<String>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let hours = self
            .indexed_metric_hours(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        let names: BTreeSet<String> = hours.into_iter().map(|(_, name)| name).collect();
        Ok(names.into_iter().collect())
    }

    async fn get_frames(
        &self,
        tenant: &str,
        ids: &[FrameId],
    ) -> Result<Vec<Option<StoredFrame>>, StoreError> {
        let ids: Vec<u128> = ids.iter().map(|id| id.0).collect();
        self.get_dict(Dict::Frames, tenant, &ids, |id, bytes| {
            values::decode_stored_frame(FrameId(id), bytes)
        })
        .await
    }

    async fn get_stacks(
        &self,
        tenant: &str,
        ids: &[StackId],
    ) -> Result<Vec<Option<Vec<FrameId>>>, StoreError> {
        let ids: Vec<u128> = ids.iter().map(|id| id.0).collect();
        self.get_dict(Dict::Stacks, tenant, &ids, |_, bytes| {
            values::decode_stack(bytes)
        })
        .await
    }

    async fn get_label_sets(
        &self,
        tenant: &str,
        ids: &[LabelSetId],
    ) -> Result<Vec<Option<LabelSet>>, StoreError> {
        let ids: Vec<u128> = ids.iter().map(|id| id.0).collect();
        self.get_dict(Dict::LabelSets, tenant, &ids, |_, bytes| {
            values::decode_label_set(bytes)
        })
        .await
    }

    async fn get_executables(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<Executable>>, StoreError> {
        let ids: Vec<u128> = ids.iter().map(|id| id.0).collect();
        self.get_dict(Dict::Executables, tenant, &ids, |id, bytes| {
            values::decode_executable(FileId(id), bytes)
        })
        .await
    }

    async fn scan_samples(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        // `to_ns` is exclusive; `to_ns - 1` cannot overflow as `to_ns > from_ns`.
        let hours = self
            .indexed_sample_hours(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        let mut scans = Vec::with_capacity(hours.len() * self.inner.sample_shards as usize);
        for hour in hours {
            for shard in 0..self.inner.sample_shards {
                scans.push(self.scan_partition(scope, (hour, shard), from_ns, to_ns));
            }
        }
        let parts = run_all(scans).await?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Does nothing more: every write returned once `LOCAL_QUORUM`
    /// replicas acknowledged it. A replica acknowledges once the write is
    /// in its commit log; with ScyllaDB's default periodic commit-log sync
    /// the durability of an acknowledged write is its replication (a
    /// quorum of replicas losing power within the sync period loses it),
    /// which a client cannot strengthen. Run with `commitlog_sync: batch`
    /// where that matters.
    async fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
