//! The `ProfileStore` trait: samples and the dictionaries they point into.

use async_trait::async_trait;
use kiln_model::{
    Executable, FileId, Frame, FrameEntry, FrameId, LabelSet, LabelSetEntry, LabelSetId,
    MetricPoint, StackEntry, StackId, Symbol,
};

use crate::error::StoreError;
use crate::rollup::{HourVersion, Resolution, RollupRow};
use crate::scope::Scope;

/// One stored sample row: a count of one stack with one label set at one
/// time, and the CPU (or GPU) time each of those samples stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoredSample {
    /// Nanoseconds since the Unix epoch; any `i64`, negative ones included.
    pub timestamp_ns: i64,
    /// The stack.
    pub stack: StackId,
    /// Where it came from.
    pub labels: LabelSetId,
    /// How many times the stack was seen.
    pub count: u64,
    /// Time one sample stands for, in nanoseconds (1e9 / frequency).
    pub period_ns: u64,
}

impl StoredSample {
    /// The rows of a batch's samples, each with the batch's period.
    pub fn of_batch(batch: &kiln_model::Batch) -> Vec<StoredSample> {
        batch
            .samples
            .iter()
            .map(|s| StoredSample {
                timestamp_ns: s.timestamp_ns,
                stack: s.stack,
                labels: s.labels,
                count: s.count,
                period_ns: batch.period_ns,
            })
            .collect()
    }
}

/// One stored reading of a metric series, as a scan of one metric name
/// returns it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredMetricPoint {
    /// Nanoseconds since the Unix epoch.
    pub timestamp_ns: i64,
    /// The series' label set.
    pub labels: LabelSetId,
    /// The reading.
    pub value: f64,
}

/// Checks metric points before a store writes them: their names go into
/// keys, so every store refuses what `Batch::decode` would.
pub(crate) fn check_metric_points(points: &[MetricPoint]) -> Result<(), StoreError> {
    points
        .iter()
        .try_for_each(|p| p.check().map_err(StoreError::InvalidMetric))
}

/// Checks the metric name a scan asks for.
pub(crate) fn check_metric_name(name: &str) -> Result<(), StoreError> {
    kiln_model::check_metric_name(name).map_err(StoreError::InvalidMetric)
}

/// One row of the frames table (DESIGN.md: `kind, file_id, addr | symbol
/// list`): a frame, and for an address frame symbolized on its way in,
/// its inline chain.
///
/// The symbols are what the frame's file had when it was written; frames
/// that arrived before their symbols are written without, and the query
/// path symbolizes them when it reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFrame {
    /// The frame's id (`frame.id()`).
    pub id: FrameId,
    /// The frame.
    pub frame: Frame,
    /// For a [`Frame::Address`]: its inline chain, **outermost function
    /// first**, one [`Symbol`] per level (an empty function name where the
    /// symbols name none); empty when it was written unsymbolized (or its
    /// symbols do not cover it). Always empty for a [`Frame::Named`],
    /// which names itself: stores do not keep symbols for those.
    pub symbols: Vec<Symbol>,
}

/// The row of a frame written without symbols.
impl From<FrameEntry> for StoredFrame {
    fn from(entry: FrameEntry) -> Self {
        StoredFrame {
            id: entry.id,
            frame: entry.frame,
            symbols: Vec::new(),
        }
    }
}

/// What [`ProfileStore::delete_hours_before`] removed, for the retention
/// job's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeletedHours {
    /// Hours of samples removed.
    pub sample_hours: u64,
    /// (metric, hour) partitions of metric points removed.
    pub metric_hours: u64,
    /// What [`ProfileStore::stored_bytes`] counted for them, now no longer
    /// counted.
    pub bytes: u64,
}

impl DeletedHours {
    /// Whether nothing was removed.
    pub fn is_empty(&self) -> bool {
        *self == DeletedHours::default()
    }
}

/// Bytes one sample row of `scope` counts for in [`ProfileStore::stored_bytes`]:
/// its key and value as data (scope names, hour, shard, timestamp, stack
/// and label-set ids, count, period), the same in every store. A
/// backend's own overhead (row headers, indexes, replication) is not the
/// tenant's to count, and counting it would make one quota mean different
/// amounts on different backends.
pub fn sample_row_bytes(scope: &Scope) -> u64 {
    (scope.tenant().len() + scope.project().len()) as u64 + 8 + 2 + 8 + 16 + 16 + 8 + 8
}

/// Bytes one metric point of `scope` named `name` counts for, as
/// [`sample_row_bytes`]: names, hour, timestamp, label-set id, value.
pub fn metric_row_bytes(scope: &Scope, name: &str) -> u64 {
    (scope.tenant().len() + scope.project().len() + name.len()) as u64 + 8 + 8 + 16 + 8
}

/// The bytes a write of `samples` adds per hour, sorted by hour.
pub(crate) fn sample_bytes_per_hour(scope: &Scope, samples: &[StoredSample]) -> Vec<(i64, u64)> {
    let row = sample_row_bytes(scope);
    let mut hours = std::collections::BTreeMap::<i64, u64>::new();
    for s in samples {
        *hours.entry(hour_of(s.timestamp_ns)).or_default() += row;
    }
    hours.into_iter().collect()
}

/// The bytes a write of metric `points` adds per hour, sorted by hour.
pub(crate) fn metric_bytes_per_hour(scope: &Scope, points: &[MetricPoint]) -> Vec<(i64, u64)> {
    let mut hours = std::collections::BTreeMap::<i64, u64>::new();
    for p in points {
        *hours.entry(hour_of(p.timestamp_ns)).or_default() += metric_row_bytes(scope, &p.name);
    }
    hours.into_iter().collect()
}

/// The hour (the partition of DESIGN.md's `samples` table) a timestamp
/// belongs to: `div_euclid` rounds toward minus infinity, so -1 ns is in
/// hour -1. Every store derives it here, so their keys agree.
pub(crate) fn hour_of(timestamp_ns: i64) -> i64 {
    timestamp_ns.div_euclid(kiln_model::NANOS_PER_HOUR)
}

/// Where profiles live: the `samples`, `stacks`, `frames`, `labelsets` and
/// `executables` tables of DESIGN.md's storage schema, and the metric
/// series beside them (`metrics`, keyed `((tenant, project, name, hour),
/// ts, labelset_id)`, and `metric_names`, the names each hour holds).
///
/// Implementations: [`EmbeddedProfileStore`](crate::EmbeddedProfileStore)
/// (an LSM in one directory), [`PostgresProfileStore`](crate::PostgresProfileStore),
/// [`ScyllaProfileStore`](crate::ScyllaProfileStore). All of them pass `conformance::profile_store`
/// (feature `conformance`). Callers hold an `Arc<dyn ProfileStore>`.
///
/// Dictionary tables are keyed by tenant and id. Frame, stack and label-set
/// ids are content hashes, so writing an entry again writes the same value;
/// a store does not check that an id matches its content (the ingest
/// pipeline does, with `Batch::verify_ids`). For every table, writing a key
/// again replaces its value.
///
/// Every method that takes a tenant name refuses an invalid one with
/// [`StoreError::InvalidName`] (see [`Scope`]).
#[async_trait]
pub trait ProfileStore: Send + Sync + std::fmt::Debug + 'static {
    /// Writes frames (and the symbols of those symbolized) under their
    /// ids; writing a frame again replaces its symbols too.
    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError>;

    /// Writes stacks (lists of frame ids, root first) under their ids.
    async fn put_stacks(&self, tenant: &str, stacks: &[StackEntry]) -> Result<(), StoreError>;

    /// Writes label sets under their ids.
    async fn put_label_sets(&self, tenant: &str, sets: &[LabelSetEntry]) -> Result<(), StoreError>;

    /// Writes executables under their file ids; a later write of the same
    /// file id replaces the earlier one.
    async fn put_executables(
        &self,
        tenant: &str,
        executables: &[Executable],
    ) -> Result<(), StoreError>;

    /// Writes sample rows.
    ///
    /// A sample's key is (scope, hour, shard, timestamp, stack, labels):
    /// writing the same key again REPLACES its value (idempotent replay), it
    /// does not add. When one call holds the same key twice, which of the two
    /// values is kept is unspecified (a ScyllaDB batch breaks such ties by
    /// value, not by position), so callers aggregate first.
    async fn put_samples(&self, scope: &Scope, samples: &[StoredSample]) -> Result<(), StoreError>;

    /// Reads frames, with their symbols: one entry per id, in the order
    /// of `ids`, `None` where the tenant has no such frame.
    async fn get_frames(
        &self,
        tenant: &str,
        ids: &[FrameId],
    ) -> Result<Vec<Option<StoredFrame>>, StoreError>;

    /// Reads stacks, as [`get_frames`](Self::get_frames) does frames.
    async fn get_stacks(
        &self,
        tenant: &str,
        ids: &[StackId],
    ) -> Result<Vec<Option<Vec<FrameId>>>, StoreError>;

    /// Reads label sets, as [`get_frames`](Self::get_frames) does frames.
    async fn get_label_sets(
        &self,
        tenant: &str,
        ids: &[LabelSetId],
    ) -> Result<Vec<Option<LabelSet>>, StoreError>;

    /// Reads executables, as [`get_frames`](Self::get_frames) does frames.
    async fn get_executables(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<Executable>>, StoreError>;

    /// Deletes the sample rows a seal has copied into a segment
    /// (`crate::sealed`): `samples` are what a scan of their hours gave,
    /// and that scan began after `written_before_ns`. Returns how many
    /// samples it was given.
    ///
    /// - Every row with a key (timestamp, stack, label set) of `samples`
    ///   goes, unless written again at or after `written_before_ns`.
    /// - A row written at or after `written_before_ns` with another key
    ///   stays: it may have come after the scan.
    /// - What else goes is the store's choice: a row store deletes by key;
    ///   ScyllaDB deletes each hour's partitions as of `written_before_ns`
    ///   (one partition tombstone, where a tombstone per row would make
    ///   every later scan of the hour read them all), and with them the
    ///   hour's index row, which a later write puts back.
    ///
    /// Nothing else changes: the hours' [`stored_bytes`](Self::stored_bytes)
    /// counters (so their versions) and rollups stay, for the data moved,
    /// it did not go.
    async fn delete_sealed_samples(
        &self,
        scope: &Scope,
        samples: &[StoredSample],
        written_before_ns: i64,
    ) -> Result<u64, StoreError>;

    /// The scope's samples with `from_ns <= timestamp_ns < to_ns`, in no
    /// particular order (callers aggregate). Empty when `from_ns >= to_ns`.
    async fn scan_samples(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError>;

    /// The hours (partitions of the `samples` table,
    /// `timestamp_ns.div_euclid(NANOS_PER_HOUR)`) from the hour of `from_ns`
    /// to the hour of `to_ns - 1` that hold at least one sample of `scope`,
    /// sorted and distinct. Empty when `from_ns >= to_ns`.
    ///
    /// This is the index of the partitions that hold data: the query path
    /// asks it before scanning, so that a range costs what its data costs.
    /// Every implementation answers in time that grows with the hours it
    /// returns, not with the hours in the range (`from_ns = 0` covers half
    /// a million hours).
    ///
    /// Kept per hour: an edge hour is listed when it holds samples, even if
    /// none of them lies within `[from_ns, to_ns)` (its scan is then empty).
    /// A store whose index is written before the samples (ScyllaDB) may
    /// also list an hour whose samples a failed write left out.
    async fn sample_hours(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError>;

    /// The hours holding points of metric `name`, as
    /// [`sample_hours`](Self::sample_hours) does samples.
    async fn metric_hours(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError>;

    /// Writes metric points. A point's key is (scope, name, hour,
    /// timestamp, labels): writing the same key again REPLACES its value, so
    /// a replayed batch leaves one point, not two. As for samples, which of
    /// two values one call gives for the same key is kept is unspecified.
    /// Also records each point's (hour, name) for
    /// [`metric_names`](Self::metric_names).
    ///
    /// Refuses the whole call with [`StoreError::InvalidMetric`] when a
    /// point's name breaks `kiln_model::check_metric_name` or its value is
    /// not finite.
    async fn put_metric_points(
        &self,
        scope: &Scope,
        points: &[MetricPoint],
    ) -> Result<(), StoreError>;

    /// The scope's points of metric `name` with `from_ns <= timestamp_ns <
    /// to_ns`, every series (label set) of it, in no particular order.
    /// Empty when `from_ns >= to_ns`. Label filters are the caller's: it
    /// resolves the label sets.
    async fn scan_metric_points(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredMetricPoint>, StoreError>;

    /// The names of the scope's metrics with points in the hours that
    /// `[from_ns, to_ns)` touches, sorted and distinct. The index is kept
    /// per hour, so a name whose points in the first or last hour all lie
    /// outside the range is listed too (its scan is then empty). Empty when
    /// `from_ns >= to_ns`.
    async fn metric_names(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// Deletes the scope's samples and metric points of every hour before
    /// the hour of `before_ns` (`hour < before_ns.div_euclid(1 h)`: whole
    /// hours that end at or before `before_ns`, so nothing at or after it
    /// goes), with their index rows ([`sample_hours`](Self::sample_hours),
    /// [`metric_names`](Self::metric_names)), the rollups of windows that
    /// start before that hour (a day that straddles it is stale without
    /// them anyway) and what [`stored_bytes`](Self::stored_bytes) counted
    /// for them. Dictionary
    /// rows stay: they are shared by every hour and not partitioned by
    /// time. This is retention; it costs what the deleted data costs, and
    /// a second call with the same bound finds nothing to do.
    ///
    /// A local store gives the disk space back: the embedded store drops
    /// the files that hold only deleted rows and compacts the rest when
    /// they were a large share of it.
    async fn delete_hours_before(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<DeletedHours, StoreError>;

    /// Bytes of `tenant`'s samples and metric points stored, summed over
    /// its projects: [`sample_row_bytes`] per sample row and
    /// [`metric_row_bytes`] per point, counted per (project, hour) as
    /// written and dropped with the hour by
    /// [`delete_hours_before`](Self::delete_hours_before). A row written
    /// again (a replayed batch) is counted again, so this can run above
    /// the data held until the hour is deleted; dictionaries (stacks,
    /// frames, label sets) are not counted. The cost is one read per
    /// (project, hour) with data, so callers cache it.
    async fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError>;

    /// The version of each hour of the scope's data (samples and metric
    /// points) from the hour of `from_ns` to the hour of `to_ns - 1`,
    /// sorted by hour: the hour's usage counter of
    /// [`stored_bytes`](Self::stored_bytes), which every write of the hour
    /// adds to, so a write makes the version grow. Hours without a counter
    /// (no data) are left out. Empty when `from_ns >= to_ns`. Costs one
    /// row per hour with data.
    async fn hour_versions(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError>;

    /// Writes the rollup of the window of `resolution` that starts at
    /// hour `window` (see `rollup.rs`), made from its data at `version`:
    /// `rows` replace every row of an earlier rollup of the window (a scan
    /// returns exactly `rows`, summed per key when one key comes twice),
    /// and [`rollup_versions`](Self::rollup_versions) then gives `version`
    /// for it. Rollups are not counted in [`stored_bytes`](Self::stored_bytes):
    /// they are derived, and counting them would change the versions they
    /// are marked with. `window` must be a window's first hour
    /// (`resolution.window_of(window) == window`).
    async fn put_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
        version: u64,
        rows: &[RollupRow],
    ) -> Result<(), StoreError>;

    /// The windows of `resolution` that start in the hours from the hour
    /// of `from_ns` to the hour of `to_ns - 1` and have a rollup, each
    /// (its first hour) with the version it was made from, sorted. Empty
    /// when `from_ns >= to_ns`.
    async fn rollup_versions(
        &self,
        scope: &Scope,
        resolution: Resolution,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError>;

    /// The rows of the rollup of the window of `resolution` starting at
    /// hour `window`, in no particular order; empty when it has none.
    async fn scan_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
    ) -> Result<Vec<RollupRow>, StoreError>;

    /// Makes every write that returned `Ok` durable (fsync). The ingest
    /// pipeline calls it before committing bus offsets.
    async fn sync(&self) -> Result<(), StoreError>;
}
