//! Every CQL statement of the ScyllaDB store, in one place for review, with
//! the schema's reasoning beside it.
//!
//! # Tables
//!
//! DESIGN.md's storage schema, with the keys of the embedded and PostgreSQL
//! stores: tenant (and project) lead every partition key, so no statement
//! can read a row without naming its tenant.
//!
//! - **`samples`**, partition `(tenant, project, hour, shard)`, clustering
//!   `(ts, stack_id, labelset_id)`. One partition holds one hour of one
//!   project's samples, split over `sample_shards` partitions by stack id
//!   (see `layout::shard_of`). A sample row is about 80 bytes on disk
//!   (ts, two uuids, two bigints, per-row overhead), so a partition of
//!   10 MB, ScyllaDB's comfortable size, is about 125 000 rows: with the
//!   default 16 shards, two million distinct (timestamp, stack, label set)
//!   rows per project and hour, some 500 hosts at 19 Hz sending a few
//!   hundred distinct stacks per 10-second batch. Bigger projects need more
//!   shards (`?sample_shards=N` at the first migrate); the count is fixed
//!   per keyspace (in `kiln_schema`) so that every writer puts a given row
//!   in the same partition and a replay overwrites rather than adds.
//!   Deriving the shard from the stack id (not at random) keeps a stack's
//!   rows of an hour together, which a per-stack query will want.
//! - **TWCS and a default TTL on `samples`**: rows arrive roughly in time
//!   order and are never updated after their batch, so time-window
//!   compaction keeps each day's rows in their own SSTables and drops whole
//!   SSTables when their TTL runs out, instead of rewriting live data to
//!   purge dead rows. One-day windows give 30 windows at the default 30-day
//!   TTL (TWCS wants a few dozen at most). `gc_grace_seconds` is 3 hours,
//!   not 10 days: samples mostly expire rather than being deleted, and a
//!   short grace lets expired SSTables go soon after the TTL. A tenant's
//!   shorter retention deletes whole partitions (one partition tombstone
//!   per (hour, shard), no row tombstones); should a replica miss one and
//!   repair not run within the grace, the rows it keeps come back until
//!   their TTL, which bounds the harm.
//! - **`sample_hours`**, partition `(tenant, project)`, clustering `hour`:
//!   which hours hold samples. A scan reads it (one small partition, 8 760
//!   rows a year) to learn the hours to visit, so an open-ended range
//!   (`i64::MIN..i64::MAX`) costs what the data costs, not one request per
//!   possible hour. Every sample write writes its hours first, with the
//!   same TTL, so an hour's row outlives the samples written with it.
//! - **Dictionaries** (`frames`, `stacks`, `labelsets`, `executables`):
//!   partition `(tenant, id)`, one row each, value a `blob` in the shared
//!   encoding of `crate::values` (as in the PostgreSQL store: read whole,
//!   by id, never by field; a blob takes any bytes). One row per partition
//!   spreads them evenly over the ring; ids are content hashes, so rows
//!   never change (executables aside, which a rewrite replaces). No TTL:
//!   a stack written once is referenced by samples for as long as its
//!   samples live, and the writer does not know when that ends.
//! - **Ids are `uuid`** (128-bit, `Uuid::from_u128`), **unsigned 64-bit
//!   values `bigint`** holding the same 64 bits, as in the PostgreSQL store.
//! - **`metrics`**, partition `(tenant, project, name, hour, shard)`,
//!   clustering `(ts, labelset_id)`, value a `double`: DESIGN.md's
//!   `((tenant, project, name, hour), ts, labelset_id)`, with the series
//!   spread over the keyspace's `sample_shards` by label-set id (as
//!   samples are by stack id), since a fleet's GPUs reading every second
//!   make one metric-hour large: 8 000 GPUs give 29 M points an hour, about
//!   1.5 GB, some 90 MB per partition with 16 shards. A query reads one
//!   metric over a range: its hours' partitions, every shard. TWCS, TTL
//!   and grace as `samples`.
//! - **`metric_names`**, partition `(tenant, project)`, clustering
//!   `(hour, name)`: which metrics each hour holds, like `sample_hours`
//!   (and with its TTL); it gives both the UI's list of metrics and the
//!   hours a metric's scan visits.
//! - **`stored_bytes`**, partition `(tenant)`, clustering `(project,
//!   hour)`, a `counter`: the bytes each hour's writes added
//!   (`crate::profile::sample_row_bytes` per sample row, `metric_row_bytes`
//!   per point), so a tenant's usage is one small partition read (a row per
//!   project and hour) plus, per project, a slice of its two index
//!   partitions. Counters cannot carry a TTL, so a read counts only the
//!   hours that `sample_hours` or `metric_names` still hold (their rows
//!   expire with the last rows of their hour; a cutoff from the clock
//!   would not do, as the TTL runs from the write, not from a sample's
//!   timestamp). Retention brings the counters of the hours it deletes
//!   down to zero by subtracting what they hold, rather than deleting
//!   them: a counter must not be updated again after its delete (neither
//!   Cassandra nor ScyllaDB guarantees the result; Cassandra brings the
//!   deleted count back), and a late write to a deleted hour does that.
//!   So a project's zeroed rows stay, one per hour it ever wrote, which
//!   reads skip; two retention runs racing on one scope would subtract
//!   twice. A counter update is not idempotent: the driver does not retry
//!   it, and a batch written again counts again. Counter values are bound
//!   and read as the driver's `Counter`, not `i64` (`bigint` only). A
//!   positive counter is also its hour's **version** for rollups
//!   (`hour_versions`): every write of the hour makes it grow.
//! - **`rollups`**, partition `(tenant, project, day, resolution)`,
//!   clustering `(window_start, stack_id, labelset_id, period_ns)`, value
//!   `sample_count`: DESIGN.md's `((tenant, project, day, resolution),
//!   window_start, stack_id, labelset_id) → count`, each window's samples
//!   summed per stack, reduced label set and period (`crate::rollup`), at
//!   two resolutions. `resolution` is the window in seconds: 3600 for an
//!   hour, 86 400 for a day (`layout::resolution_secs`; not
//!   `Resolution::code`, so the column reads on its own). `window_start`
//!   is the window's first hour and `day` the day of that hour,
//!   `window_start.div_euclid(24)`, so one window's rollup is one
//!   clustering slice: a day's hour partition holds its 24 hour windows
//!   (a week's query of hours reads seven partitions, not 168), and its
//!   day partition its one day window (a month's query of days reads 30
//!   small partitions). A rollup is rewritten when its window is rolled
//!   again: a range delete of the slice `window_start = window` at client
//!   timestamp `t`, then the rows in unlogged batches at a later
//!   timestamp, so the delete cannot shadow them (a tombstone wins a tie)
//!   and two rollups of one window racing keep the later one's rows
//!   only. Same TTL as `samples` (a rollup goes about when its samples
//!   do; rows of a rollup whose write failed before its `rollup_hours`
//!   row expire), but the default grace: its deletes are part of every
//!   rewrite, not only of retention, and a replica missing one must not
//!   bring an earlier rollup's rows back into a current one. Retention
//!   deletes the windows that start before the cutoff hour: at each
//!   resolution, whole day partitions that hold only such windows (every
//!   day partition before the cutoff's day, and at `Day` the cutoff's own
//!   when its window starts before the cutoff) and a `window_start < hour`
//!   slice of the cutoff's day partition of hours.
//! - **`rollup_hours`**, partition `(tenant, project)`, clustering
//!   `(resolution, hour)` (`resolution` as in `rollups`, `hour` a window's
//!   first hour), value `version` (`bigint`, u64 bits): which windows of
//!   each resolution have a rollup and the version of the window's data
//!   it was made from, like `sample_hours` (and with its TTL); a
//!   resolution's windows in a range of hours are one clustering slice.
//!   Written after the rollup's rows, and deleted (at the rows' delete
//!   timestamp) before them, so a rollup is listed only while it is
//!   whole. Retention reads it to find the windows, hence the day
//!   partitions, to delete. The hour versions themselves are the
//!   `stored_bytes` counters (above), which every write of an hour adds
//!   to; a day's is the sum of its hours'.
//! - **`kiln_schema`**: the schema version and the keyspace's sample shard
//!   count, one row.
//!
//! # Statements
//!
//! All prepared once per session (the driver routes a prepared statement
//! to a replica of its partition: token-aware, its default load
//! balancing), with bind markers only: no value is ever formatted into
//! CQL. The only formatted statement is `CREATE KEYSPACE`, whose name
//! [`super::url`] restricts to `[a-z][a-z0-9_]{0,47}` and whose numbers are
//! integers.
//!
//! - Sample writes are **unlogged batches of one partition's rows**
//!   (`layout::sample_batches`): one request, applied as one mutation on
//!   each replica. Batches spanning partitions would make the coordinator
//!   fan out and hold the whole batch, so they are never used; dictionary
//!   rows (a partition each) go as single statements, many in flight.
//! - Reads of dictionaries are one single-partition `SELECT` per id, many
//!   in flight, rather than `IN (…)` over partition keys, which makes one
//!   coordinator wait for the slowest of many replicas.
//! - Writes and reads use `LOCAL_QUORUM`: a row a worker has written is
//!   seen by every query node. Client-side monotonic timestamps make a
//!   later write of the same key win even within one millisecond.
//! - A rollup's rewrite takes two timestamps from the session's generator
//!   and sets them on its statements (`set_timestamp`): the delete of the
//!   window's earlier rollup at the first, the new rows and version at the
//!   second, which is later, so the delete cannot shadow them.
//!
//! # Migrations
//!
//! `CREATE … IF NOT EXISTS` throughout; the driver waits for schema
//! agreement after each. The `kiln_schema` row is written only when
//! missing, by a read and then a plain insert: not a lightweight
//! transaction, which keyspaces on tablets (ScyllaDB's default for new
//! keyspaces) do not support in every release. So `kiln store migrate`
//! runs once, before the workers start; two first migrations racing with
//! different shard counts would leave the later one's count. A keyspace
//! at a newer version than [`SCHEMA_VERSION`] is refused.

/// The schema version this build writes and reads: 2 added `metrics` and
/// `metric_names`, 3 `stored_bytes`, 4 `rollups` and `rollup_hours`.
pub(super) const SCHEMA_VERSION: i32 = 4;

/// Creates the keyspace `keyspace` (validated by `url`) with
/// `replication_factor` replicas in every datacenter.
pub(super) fn create_keyspace(keyspace: &str, replication_factor: u16) -> String {
    format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
         {{'class': 'NetworkTopologyStrategy', 'replication_factor': {replication_factor}}}"
    )
}

/// Creates the tables in the session's keyspace; `sample_ttl_secs` is the
/// default TTL of `samples` and `sample_hours`.
pub(super) fn create_tables(sample_ttl_secs: u32) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS samples (
    tenant      text,
    project     text,
    hour        bigint,   -- ts.div_euclid(1 h), floor division
    shard       smallint, -- layout::shard_of(stack_id)
    ts          bigint,   -- ns since the Unix epoch
    stack_id    uuid,
    labelset_id uuid,
    sample_count bigint,  -- u64 bits (`count` is a CQL function name)
    period_ns   bigint,   -- u64 bits
    PRIMARY KEY ((tenant, project, hour, shard), ts, stack_id, labelset_id)
) WITH compaction = {{'class': 'TimeWindowCompactionStrategy',
                      'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}}
  AND default_time_to_live = {sample_ttl_secs}
  AND gc_grace_seconds = 10800"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS sample_hours (
    tenant  text,
    project text,
    hour    bigint,
    PRIMARY KEY ((tenant, project), hour)
) WITH default_time_to_live = {sample_ttl_secs}
  AND gc_grace_seconds = 10800"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS metrics (
    tenant      text,
    project     text,
    name        text,     -- [a-z0-9_.]{{1,128}}
    hour        bigint,   -- ts.div_euclid(1 h), floor division
    shard       smallint, -- layout::shard_of(labelset_id)
    ts          bigint,   -- ns since the Unix epoch
    labelset_id uuid,
    value       double,
    PRIMARY KEY ((tenant, project, name, hour, shard), ts, labelset_id)
) WITH compaction = {{'class': 'TimeWindowCompactionStrategy',
                      'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}}
  AND default_time_to_live = {sample_ttl_secs}
  AND gc_grace_seconds = 10800"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS metric_names (
    tenant  text,
    project text,
    hour    bigint,
    name    text,
    PRIMARY KEY ((tenant, project), hour, name)
) WITH default_time_to_live = {sample_ttl_secs}
  AND gc_grace_seconds = 10800"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS rollups (
    tenant       text,
    project      text,
    day          bigint,   -- window_start.div_euclid(24), floor division
    resolution   int,      -- the window in seconds: 3600 or 86400
    window_start bigint,   -- the window's first hour
    stack_id     uuid,
    labelset_id  uuid,     -- without per-instance labels
    period_ns    bigint,   -- u64 bits
    sample_count bigint,   -- u64 bits, summed (`count` is a CQL function name)
    PRIMARY KEY ((tenant, project, day, resolution), window_start, stack_id, labelset_id, period_ns)
) WITH default_time_to_live = {sample_ttl_secs}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS rollup_hours (
    tenant     text,
    project    text,
    resolution int,      -- as in rollups: 3600 or 86400
    hour       bigint,   -- the window's first hour
    version    bigint,   -- u64 bits: the stored_bytes count (a day: their sum) it was made from
    PRIMARY KEY ((tenant, project), resolution, hour)
) WITH default_time_to_live = {sample_ttl_secs}
  AND gc_grace_seconds = 10800"
        ),
        "CREATE TABLE IF NOT EXISTS stored_bytes (
    tenant  text,
    project text,
    hour    bigint,
    bytes   counter,
    PRIMARY KEY ((tenant), project, hour)
)"
        .to_owned(),
        dictionary_table("frames", "frame_id"),
        dictionary_table("stacks", "stack_id"),
        dictionary_table("labelsets", "labelset_id"),
        dictionary_table("executables", "file_id"),
        "CREATE TABLE IF NOT EXISTS kiln_schema (
    name          text PRIMARY KEY, -- always 'kiln'
    version       int,
    sample_shards smallint
)"
        .to_owned(),
    ]
}

fn dictionary_table(table: &str, id: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (
    tenant text,
    {id}   uuid,
    value  blob,              -- crate::values encoding
    PRIMARY KEY ((tenant, {id}))
)"
    )
}

/// Records version `?` and shard count `?`; written when no row exists,
/// and again (same shard count) when a migration raises the version.
pub(super) const INIT_SCHEMA_ROW: &str =
    "INSERT INTO kiln_schema (name, version, sample_shards) VALUES ('kiln', ?, ?)";

/// `(version, sample_shards)`; no row before the first migration.
pub(super) const READ_SCHEMA_ROW: &str =
    "SELECT version, sample_shards FROM kiln_schema WHERE name = 'kiln'";

/// One sample row; the key columns first, as in the table.
pub(super) const INSERT_SAMPLE: &str = "INSERT INTO samples \
    (tenant, project, hour, shard, ts, stack_id, labelset_id, sample_count, period_ns) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Marks hour `?` of a scope as holding samples.
pub(super) const INSERT_SAMPLE_HOUR: &str =
    "INSERT INTO sample_hours (tenant, project, hour) VALUES (?, ?, ?)";

/// The hours of a scope in `[?, ?]` (inclusive) that hold samples.
pub(super) const SELECT_SAMPLE_HOURS: &str =
    "SELECT hour FROM sample_hours WHERE tenant = ? AND project = ? AND hour >= ? AND hour <= ?";

/// `(ts, stack_id, labelset_id, sample_count, period_ns)` of one partition with
/// `? <= ts < ?`.
pub(super) const SCAN_SAMPLES: &str = "SELECT ts, stack_id, labelset_id, sample_count, period_ns \
    FROM samples WHERE tenant = ? AND project = ? AND hour = ? AND shard = ? \
    AND ts >= ? AND ts < ?";

/// One metric point; the key columns first, as in the table.
pub(super) const INSERT_METRIC: &str = "INSERT INTO metrics \
    (tenant, project, name, hour, shard, ts, labelset_id, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

/// Marks metric `?` of a scope as holding points in hour `?`.
pub(super) const INSERT_METRIC_NAME: &str =
    "INSERT INTO metric_names (tenant, project, hour, name) VALUES (?, ?, ?, ?)";

/// `(hour, name)` of a scope's metrics in hours `[?, ?]` (inclusive).
pub(super) const SELECT_METRIC_NAMES: &str = "SELECT hour, name FROM metric_names \
    WHERE tenant = ? AND project = ? AND hour >= ? AND hour <= ?";

/// `(ts, labelset_id, value)` of one metric partition with `? <= ts < ?`.
pub(super) const SCAN_METRICS: &str = "SELECT ts, labelset_id, value FROM metrics \
    WHERE tenant = ? AND project = ? AND name = ? AND hour = ? AND shard = ? \
    AND ts >= ? AND ts < ?";

/// Adds `?` bytes to hour `?` of a scope (tenant `?`, project `?`); a
/// retention delete adds minus the count, bringing it to zero.
pub(super) const ADD_STORED_BYTES: &str =
    "UPDATE stored_bytes SET bytes = bytes + ? WHERE tenant = ? AND project = ? AND hour = ?";

/// `(project, hour, bytes)` of every hour of a tenant.
pub(super) const SELECT_STORED_BYTES: &str =
    "SELECT project, hour, bytes FROM stored_bytes WHERE tenant = ?";

/// `(hour, bytes)` of a scope's hours before `?`.
pub(super) const SELECT_STORED_BYTES_BEFORE: &str =
    "SELECT hour, bytes FROM stored_bytes WHERE tenant = ? AND project = ? AND hour < ?";

/// Deletes one sample partition's rows written before the timestamp `?`
/// (µs, as the driver's client-side timestamps): one partition tombstone
/// that a later write outlives (sealing, `crate::sealed`).
pub(super) const DELETE_SAMPLE_PARTITION_WRITTEN_BEFORE: &str = "DELETE FROM samples \
    USING TIMESTAMP ? WHERE tenant = ? AND project = ? AND hour = ? AND shard = ?";

/// Deletes an hour's `sample_hours` row written before the timestamp `?`,
/// with its partitions: a write after it puts the row back.
pub(super) const DELETE_SAMPLE_HOUR_WRITTEN_BEFORE: &str = "DELETE FROM sample_hours \
    USING TIMESTAMP ? WHERE tenant = ? AND project = ? AND hour = ?";

/// Deletes one sample partition: one partition tombstone.
pub(super) const DELETE_SAMPLE_PARTITION: &str =
    "DELETE FROM samples WHERE tenant = ? AND project = ? AND hour = ? AND shard = ?";

/// Deletes a scope's `sample_hours` rows before hour `?`: one range
/// tombstone.
pub(super) const DELETE_SAMPLE_HOURS_BEFORE: &str =
    "DELETE FROM sample_hours WHERE tenant = ? AND project = ? AND hour < ?";

/// Deletes one metric partition.
pub(super) const DELETE_METRIC_PARTITION: &str = "DELETE FROM metrics \
    WHERE tenant = ? AND project = ? AND name = ? AND hour = ? AND shard = ?";

/// Deletes a scope's `metric_names` rows before hour `?`: one range
/// tombstone.
pub(super) const DELETE_METRIC_NAMES_BEFORE: &str =
    "DELETE FROM metric_names WHERE tenant = ? AND project = ? AND hour < ?";

/// `(hour, bytes)` of a scope's hours in `[?, ?]` (inclusive): their
/// versions.
pub(super) const SELECT_STORED_BYTES_BETWEEN: &str = "SELECT hour, bytes FROM stored_bytes \
    WHERE tenant = ? AND project = ? AND hour >= ? AND hour <= ?";

/// One rollup row; the key columns first, as in the table.
pub(super) const INSERT_ROLLUP: &str = "INSERT INTO rollups \
    (tenant, project, day, resolution, window_start, stack_id, labelset_id, period_ns, \
    sample_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// `(stack_id, labelset_id, period_ns, sample_count)` of one window's
/// rollup: one clustering slice of one partition.
pub(super) const SCAN_ROLLUP: &str = "SELECT stack_id, labelset_id, period_ns, sample_count \
    FROM rollups WHERE tenant = ? AND project = ? AND day = ? AND resolution = ? \
    AND window_start = ?";

/// Deletes one window's rollup rows: one range tombstone.
pub(super) const DELETE_ROLLUP: &str = "DELETE FROM rollups \
    WHERE tenant = ? AND project = ? AND day = ? AND resolution = ? AND window_start = ?";

/// Deletes one day's rollup partition of one resolution: one partition
/// tombstone.
pub(super) const DELETE_ROLLUP_PARTITION: &str = "DELETE FROM rollups \
    WHERE tenant = ? AND project = ? AND day = ? AND resolution = ?";

/// Deletes the rollups of one day's partition starting before hour `?`:
/// one range tombstone.
pub(super) const DELETE_ROLLUPS_BEFORE: &str = "DELETE FROM rollups \
    WHERE tenant = ? AND project = ? AND day = ? AND resolution = ? AND window_start < ?";

/// Records the version `?` of the rollup of the window of resolution `?`
/// starting at hour `?` (tenant `?`, project `?`).
pub(super) const INSERT_ROLLUP_HOUR: &str = "INSERT INTO rollup_hours \
    (tenant, project, resolution, hour, version) VALUES (?, ?, ?, ?, ?)";

/// `(hour, version)` of a scope's rollups of one resolution whose windows
/// start in hours `[?, ?]` (inclusive): one clustering slice.
pub(super) const SELECT_ROLLUP_HOURS: &str = "SELECT hour, version FROM rollup_hours \
    WHERE tenant = ? AND project = ? AND resolution = ? AND hour >= ? AND hour <= ?";

/// Deletes the `rollup_hours` row of one window.
pub(super) const DELETE_ROLLUP_HOUR: &str = "DELETE FROM rollup_hours \
    WHERE tenant = ? AND project = ? AND resolution = ? AND hour = ?";

/// Deletes a scope's `rollup_hours` rows of one resolution whose windows
/// start before hour `?`: one range tombstone.
pub(super) const DELETE_ROLLUP_HOURS_BEFORE: &str = "DELETE FROM rollup_hours \
    WHERE tenant = ? AND project = ? AND resolution = ? AND hour < ?";

/// The dictionary tables, each with its upsert and its read by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dict {
    Frames,
    Stacks,
    LabelSets,
    Executables,
}

impl Dict {
    pub(super) const ALL: [Dict; 4] = [
        Dict::Frames,
        Dict::Stacks,
        Dict::LabelSets,
        Dict::Executables,
    ];

    /// Writes `(tenant, id, value)`, replacing a row with the same key.
    pub(super) fn upsert(self) -> &'static str {
        match self {
            Dict::Frames => "INSERT INTO frames (tenant, frame_id, value) VALUES (?, ?, ?)",
            Dict::Stacks => "INSERT INTO stacks (tenant, stack_id, value) VALUES (?, ?, ?)",
            Dict::LabelSets => {
                "INSERT INTO labelsets (tenant, labelset_id, value) VALUES (?, ?, ?)"
            }
            Dict::Executables => {
                "INSERT INTO executables (tenant, file_id, value) VALUES (?, ?, ?)"
            }
        }
    }

    /// The value of `(tenant, id)`; no row when there is none.
    pub(super) fn select(self) -> &'static str {
        match self {
            Dict::Frames => "SELECT value FROM frames WHERE tenant = ? AND frame_id = ?",
            Dict::Stacks => "SELECT value FROM stacks WHERE tenant = ? AND stack_id = ?",
            Dict::LabelSets => "SELECT value FROM labelsets WHERE tenant = ? AND labelset_id = ?",
            Dict::Executables => "SELECT value FROM executables WHERE tenant = ? AND file_id = ?",
        }
    }

    /// What one row is called in errors.
    pub(super) fn row(self) -> &'static str {
        match self {
            Dict::Frames => "frame",
            Dict::Stacks => "stack",
            Dict::LabelSets => "label set",
            Dict::Executables => "executable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement that touches a profile table names the tenant in its
    /// key: the rule that no read or write is unscoped.
    #[test]
    fn every_row_statement_is_scoped_by_tenant() {
        let mut statements = vec![
            INSERT_SAMPLE,
            INSERT_SAMPLE_HOUR,
            SELECT_SAMPLE_HOURS,
            SCAN_SAMPLES,
            INSERT_METRIC,
            INSERT_METRIC_NAME,
            SELECT_METRIC_NAMES,
            SCAN_METRICS,
            ADD_STORED_BYTES,
            SELECT_STORED_BYTES,
            SELECT_STORED_BYTES_BEFORE,
            DELETE_SAMPLE_PARTITION_WRITTEN_BEFORE,
            DELETE_SAMPLE_HOUR_WRITTEN_BEFORE,
            DELETE_SAMPLE_PARTITION,
            DELETE_SAMPLE_HOURS_BEFORE,
            DELETE_METRIC_PARTITION,
            DELETE_METRIC_NAMES_BEFORE,
            SELECT_STORED_BYTES_BETWEEN,
            INSERT_ROLLUP,
            SCAN_ROLLUP,
            DELETE_ROLLUP,
            DELETE_ROLLUP_PARTITION,
            DELETE_ROLLUPS_BEFORE,
            INSERT_ROLLUP_HOUR,
            SELECT_ROLLUP_HOURS,
            DELETE_ROLLUP_HOUR,
            DELETE_ROLLUP_HOURS_BEFORE,
        ];
        for dict in Dict::ALL {
            statements.push(dict.upsert());
            statements.push(dict.select());
        }
        for statement in statements {
            assert!(statement.contains("tenant"), "{statement}");
            if statement.starts_with("SELECT") {
                assert!(statement.contains("WHERE tenant = ?"), "{statement}");
            }
        }
    }

    /// Bind markers match the columns written, so a statement cannot
    /// prepare with a column left unbound.
    #[test]
    fn inserts_bind_every_column() {
        let mut inserts = vec![
            INSERT_SAMPLE,
            INSERT_SAMPLE_HOUR,
            INSERT_METRIC,
            INSERT_METRIC_NAME,
            INSERT_ROLLUP,
            INSERT_ROLLUP_HOUR,
        ];
        inserts.extend(Dict::ALL.map(Dict::upsert));
        for insert in inserts {
            let (columns, values) = insert.split_once("VALUES").unwrap();
            let columns = columns.matches(',').count() + 1;
            assert_eq!(values.matches('?').count(), columns, "{insert}");
        }
    }

    /// The scan reads one partition: every partition key column is bound,
    /// so ScyllaDB never needs ALLOW FILTERING or a full scan.
    #[test]
    fn scans_name_whole_partitions() {
        for column in ["tenant = ?", "project = ?", "hour = ?", "shard = ?"] {
            assert!(SCAN_SAMPLES.contains(column), "{column}");
        }
        for column in [
            "tenant = ?",
            "project = ?",
            "name = ?",
            "hour = ?",
            "shard = ?",
        ] {
            assert!(SCAN_METRICS.contains(column), "{column}");
        }
        for statement in [
            SCAN_SAMPLES,
            SELECT_SAMPLE_HOURS,
            SCAN_METRICS,
            SELECT_METRIC_NAMES,
            SCAN_ROLLUP,
            SELECT_ROLLUP_HOURS,
            SELECT_STORED_BYTES_BETWEEN,
        ] {
            assert!(!statement.contains("ALLOW FILTERING"));
        }
        // A rollup's reads and deletes name its whole partition.
        for column in ["tenant = ?", "project = ?", "day = ?", "resolution = ?"] {
            for statement in [
                SCAN_ROLLUP,
                DELETE_ROLLUP,
                DELETE_ROLLUP_PARTITION,
                DELETE_ROLLUPS_BEFORE,
            ] {
                assert!(statement.contains(column), "{statement}: {column}");
            }
        }
        // `rollup_hours` statements name the resolution, so the two
        // resolutions' windows never mix.
        for statement in [
            INSERT_ROLLUP_HOUR,
            SELECT_ROLLUP_HOURS,
            DELETE_ROLLUP_HOUR,
            DELETE_ROLLUP_HOURS_BEFORE,
        ] {
            assert!(statement.contains("resolution"), "{statement}");
        }
        // Retention deletes name whole partitions, or a clustering range
        // within one.
        for column in ["tenant = ?", "project = ?", "hour = ?", "shard = ?"] {
            assert!(DELETE_SAMPLE_PARTITION.contains(column), "{column}");
            assert!(DELETE_METRIC_PARTITION.contains(column), "{column}");
        }
        assert!(DELETE_METRIC_PARTITION.contains("name = ?"));
    }

    /// The usage counters are only ever added to: a counter deleted and
    /// then updated again (a late write to a deleted hour) has no
    /// guaranteed value on Cassandra or ScyllaDB, so retention subtracts.
    #[test]
    fn usage_counters_are_never_deleted() {
        for statement in [
            ADD_STORED_BYTES,
            DELETE_SAMPLE_PARTITION,
            DELETE_SAMPLE_HOURS_BEFORE,
            DELETE_METRIC_PARTITION,
            DELETE_METRIC_NAMES_BEFORE,
            DELETE_ROLLUP,
            DELETE_ROLLUP_PARTITION,
            DELETE_ROLLUPS_BEFORE,
            DELETE_ROLLUP_HOUR,
            DELETE_ROLLUP_HOURS_BEFORE,
        ] {
            assert!(
                !statement.contains("DELETE FROM stored_bytes"),
                "{statement}"
            );
        }
        assert!(ADD_STORED_BYTES.contains("SET bytes = bytes + ?"));
    }

    #[test]
    fn ddl_carries_the_design_choices() {
        let tables = create_tables(86_400);
        let samples = &tables[0];
        assert!(
            samples.contains(
                "PRIMARY KEY ((tenant, project, hour, shard), ts, stack_id, labelset_id)"
            )
        );
        assert!(samples.contains("TimeWindowCompactionStrategy"));
        assert!(samples.contains("default_time_to_live = 86400"));
        assert!(tables[1].contains("default_time_to_live = 86400"));
        let metrics = &tables[2];
        assert!(
            metrics.contains("PRIMARY KEY ((tenant, project, name, hour, shard), ts, labelset_id)")
        );
        assert!(metrics.contains("TimeWindowCompactionStrategy"));
        assert!(metrics.contains("default_time_to_live = 86400"));
        assert!(tables[3].contains("PRIMARY KEY ((tenant, project), hour, name)"));
        assert!(tables[3].contains("default_time_to_live = 86400"));
        let rollups = &tables[4];
        assert!(rollups.contains(
            "PRIMARY KEY ((tenant, project, day, resolution), window_start, stack_id, \
             labelset_id, period_ns)"
        ));
        assert!(rollups.contains("default_time_to_live = 86400"));
        // Rewrites delete: the default grace, not the samples' short one.
        assert!(!rollups.contains("gc_grace_seconds"));
        assert!(tables[5].contains("PRIMARY KEY ((tenant, project), resolution, hour)"));
        assert!(tables[5].contains("resolution int"));
        assert!(tables[5].contains("version    bigint"));
        assert!(tables[5].contains("default_time_to_live = 86400"));
        assert!(tables[6].contains("bytes   counter"));
        assert!(!tables[6].contains("default_time_to_live"));
        assert_eq!(tables.len(), 12);
        for table in &tables {
            assert!(table.starts_with("CREATE TABLE IF NOT EXISTS"), "{table}");
        }
        assert_eq!(
            create_keyspace("kiln", 3),
            "CREATE KEYSPACE IF NOT EXISTS kiln WITH replication = \
             {'class': 'NetworkTopologyStrategy', 'replication_factor': 3}"
        );
    }
}
