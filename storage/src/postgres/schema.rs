//! Every SQL statement of the PostgreSQL store, in one place for review,
//! with the schema's reasoning beside it.
//!
//! # Tables
//!
//! The profile tables are DESIGN.md's storage schema, with the keys of the
//! embedded store and of ScyllaDB: tenant (and project) first in every
//! primary key, so one tenant's rows are one contiguous index range and no
//! query can forget the tenant without missing the index.
//!
//! - **Ids are `uuid`**, not `bytea`: 16 bytes fixed width (a `bytea`
//!   carries a length header), compared as 16 bytes, and readable in
//!   `psql`. A 128-bit id is stored big-endian (`Uuid::from_u128`), so uuid
//!   order is numeric id order.
//! - **Unsigned 64-bit integers are `bigint`** holding the same 64 bits
//!   (`count`, `period_ns`: `u64 as i64` on the way in, `i64 as u64` on the
//!   way out). PostgreSQL has no unsigned type and `numeric` is variable
//!   width and slow; only counts above 2^63 would read negative in SQL
//!   sums, which no profile reaches.
//! - **Dictionary values are `bytea`** in the shared value encoding of
//!   `crate::values` (the embedded store's bytes): a frame or label set
//!   is always read whole, by id, never queried by field, so columns would
//!   only add work; and `bytea` takes any string, where `text` refuses NUL,
//!   which would make one odd function name fail a whole batch forever.
//!   Executables too, for the same reason (their names come from the
//!   agent); only their symbol status, which SQL does filter on, is a
//!   column.
//! - **`samples` keeps `hour` and `shard`** though `hour` follows from
//!   `ts`: the key is DESIGN.md's `(tenant, project, hour, shard)` partition
//!   key then `(ts, stack, labels)`, the same as every other store, and the
//!   scan bounds the index on the hour range. This store writes shard 0
//!   only ([`SHARD`]): sharding keeps ScyllaDB partitions small, which a
//!   B-tree does not need. Scans do not filter on shard, so rows of other
//!   shards (moved over from ScyllaDB) would still be found.
//! - **No declarative partitioning (yet).** Partitioning `samples` by hour
//!   range would make retention a `DROP TABLE` instead of a `DELETE`, but
//!   every partition must exist before its rows arrive (a DEFAULT partition
//!   holding early rows then blocks creating the matching partition), which
//!   needs a partition-managing job; and retention is per tenant, so one
//!   hour's partition holds rows of tenants with different retentions and
//!   could not be dropped whole anyway. Retention is a `DELETE` of a
//!   (tenant, project, hour range) prefix of the primary key
//!   ([`DELETE_SAMPLES_BEFORE`]); autovacuum makes the space reusable.
//!   The primary key already contains `hour`, the column a range
//!   partitioning would use (PostgreSQL requires the partition key in the
//!   primary key), so converting later is DDL and a copy, no key change.
//! - **`stored_bytes`** `(tenant, project, hour) → bytes`: what each hour's
//!   writes added (`crate::profile::sample_row_bytes` per sample row,
//!   `metric_row_bytes` per point), updated in the transaction that writes
//!   the rows and deleted with the hour, so a tenant's usage is a sum over
//!   one index range of a few thousand rows, never a scan of its samples.
//! - **`rollups`** `(tenant, project, resolution, hour, stack_id,
//!   labelset_id, period_ns) → count`: each window's samples summed per
//!   stack, reduced label set and period (`crate::rollup`), so that a
//!   query of days reads one row per stack and window. Two resolutions,
//!   told apart by `resolution` (`Resolution::code`: 1 for an hour, 24 for
//!   a day), `hour` being the window's first hour. Keyed like `samples`
//!   with `resolution` before the hour and without `shard` and `ts`: a
//!   window's rollup is one prefix range of the primary key, read whole
//!   ([`SCAN_ROLLUP`]) and replaced whole ([`DELETE_ROLLUP`] then
//!   [`INSERT_ROLLUPS`]), and a resolution's windows of a range (or before
//!   a cutoff) are one range too. **`rollup_hours`** `(tenant, project,
//!   resolution, hour) → version` marks each rolled window with the version
//!   of the data it was made from (an hour's `stored_bytes` value, or the
//!   sum of a day's); a query uses a window's rollup only while the two
//!   agree. The version is `bigint` holding the u64's bits, as `count` is.
//!   Neither table counts in `stored_bytes`: rollups are derived, and
//!   counting them would move the version they are marked with.
//! - **No BRIN index.** BRIN pays where a table has no B-tree on a column
//!   whose values grow with the heap order. Here the primary-key B-tree is
//!   needed anyway (for `ON CONFLICT`) and already answers the only query,
//!   a (tenant, project, hour range, ts range) scan; and rows of many
//!   tenants interleave on the heap, so BRIN ranges over `ts` would be
//!   wide and unselective.
//! - **`metrics`** keeps one metric point per row, primary key
//!   `(tenant, project, name, hour, ts, labelset_id)`: DESIGN.md's
//!   `((tenant, project, name, hour), ts, labelset_id)`, the key the
//!   embedded and ScyllaDB stores use. The name leads the time because a
//!   query reads one metric over a range, which the index then answers
//!   as one range scan. The value is `double precision` (IEEE 754, the
//!   f64 the agent sent, exactly). **`metric_names`** `(tenant, project,
//!   hour, name)` lists the names each hour holds, for the UI's list of
//!   charts: a `SELECT DISTINCT name` over `metrics` would read every point
//!   of the range.
//! - **No foreign keys from profile tables to `tenants`**: ingest writes
//!   millions of rows, each FK check is an index probe, and the tenant is
//!   checked once, when the gateway verifies the API key. The metadata
//!   tables do use them (a project needs its tenant, a key its project).
//!
//! # Writes
//!
//! Every write is one `INSERT … SELECT … FROM UNNEST($n::type[], …)`: the
//! rows travel as one array per column, so a batch of any size is one
//! prepared statement with a fixed parameter list (multi-row `VALUES` would
//! need a statement per batch size and hits the 65 535-parameter limit at a
//! few thousand rows). `ON CONFLICT … DO UPDATE` gives the trait's
//! "writing a key again replaces its value"; the `WHERE … IS DISTINCT FROM`
//! skips rows whose value is unchanged, so a replayed batch (at-least-once
//! delivery) writes no new row versions and leaves nothing to vacuum.
//!
//! Callers sort and de-duplicate rows by key first: `ON CONFLICT DO UPDATE`
//! refuses to touch one row twice in a statement, and two writers locking
//! overlapping rows in the same order cannot deadlock.
//!
//! # Migrations
//!
//! [`MIGRATIONS`] lists the schema's versions; the version a database is
//! at is in `kiln_schema`. `migrate` runs the missing ones in one
//! transaction (PostgreSQL DDL is transactional: all or nothing) under an
//! advisory lock (two workers starting together would otherwise race on
//! `CREATE TABLE IF NOT EXISTS`, which is not safe against concurrent
//! creation). Each step also uses `IF NOT EXISTS`, so a step that a crashed
//! tool half-applied by hand can be run again. A database at a newer
//! version than [`MIGRATIONS`] knows is refused.

/// The shard this store writes every sample to (see the module doc).
pub(super) const SHARD: i16 = 0;

/// Key of the advisory lock `migrate` holds; any constant unique to Kiln
/// ("kiln" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x6b69_6c6e;

/// Takes the migration lock until the transaction ends.
pub(super) const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_xact_lock($1)";

/// The table recording the schema version: one row at most.
pub(super) const CREATE_VERSION_TABLE: &str = "
CREATE TABLE IF NOT EXISTS kiln_schema (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version     integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now()
)";

/// The schema version: no row before the first migration. Only once
/// `kiln_schema` exists ([`VERSION_TABLE_EXISTS`]).
pub(super) const READ_VERSION: &str = "SELECT version FROM kiln_schema";

/// Whether `kiln_schema` exists (before the first migration it does not).
pub(super) const VERSION_TABLE_EXISTS: &str = "SELECT to_regclass('kiln_schema') IS NOT NULL";

/// Records the schema version.
pub(super) const WRITE_VERSION: &str = "
INSERT INTO kiln_schema (version) VALUES ($1)
ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()";

/// The schema's versions: entry `i` takes a database from version `i` to
/// `i + 1`. Only ever appended to; a released entry never changes.
pub(super) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// Version 1: the profile tables and the metadata tables.
const V1: &str = "
CREATE TABLE IF NOT EXISTS samples (
    tenant      text     NOT NULL,
    project     text     NOT NULL,
    hour        bigint   NOT NULL,  -- ts.div_euclid(1 h), floor division
    shard       smallint NOT NULL,
    ts          bigint   NOT NULL,  -- ns since the Unix epoch
    stack_id    uuid     NOT NULL,
    labelset_id uuid     NOT NULL,
    count       bigint   NOT NULL,  -- u64 bits
    period_ns   bigint   NOT NULL,  -- u64 bits
    PRIMARY KEY (tenant, project, hour, shard, ts, stack_id, labelset_id)
);

CREATE TABLE IF NOT EXISTS frames (
    tenant   text  NOT NULL,
    frame_id uuid  NOT NULL,
    value    bytea NOT NULL,        -- values::encode_frame
    PRIMARY KEY (tenant, frame_id)
);

CREATE TABLE IF NOT EXISTS stacks (
    tenant   text  NOT NULL,
    stack_id uuid  NOT NULL,
    value    bytea NOT NULL,        -- values::encode_stack: frame ids, root first
    PRIMARY KEY (tenant, stack_id)
);

CREATE TABLE IF NOT EXISTS labelsets (
    tenant      text  NOT NULL,
    labelset_id uuid  NOT NULL,
    value       bytea NOT NULL,     -- values::encode_label_set
    PRIMARY KEY (tenant, labelset_id)
);

CREATE TABLE IF NOT EXISTS executables (
    tenant        text     NOT NULL,
    file_id       uuid     NOT NULL,
    value         bytea    NOT NULL,  -- values::encode_executable: name, build id
    symbol_status smallint NOT NULL DEFAULT 0,  -- SymbolStatus numbers
    PRIMARY KEY (tenant, file_id)
);
-- The symbolizer's work queue (EXECUTABLES_WITH_STATUS): a tenant's
-- executables in one status, in file id order.
CREATE INDEX IF NOT EXISTS executables_by_symbol_status
    ON executables (tenant, symbol_status, file_id);

CREATE TABLE IF NOT EXISTS tenants (
    tenant     text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS projects (
    tenant     text        NOT NULL REFERENCES tenants (tenant) ON DELETE CASCADE,
    project    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, project)
);

-- Keys are stored as their SHA-256 only (see api_key.rs). A request's
-- key is looked up by hash before its tenant is known, hence the unique
-- index on key_hash; listing and revoking go by (tenant, id).
CREATE TABLE IF NOT EXISTS api_keys (
    tenant     text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    project    text        NOT NULL,
    key_hash   bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    prefix     text        NOT NULL,
    label      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, project) REFERENCES projects (tenant, project) ON DELETE CASCADE
);
";

/// Version 2: metric series.
const V2: &str = "
CREATE TABLE IF NOT EXISTS metrics (
    tenant      text             NOT NULL,
    project     text             NOT NULL,
    name        text             NOT NULL,  -- [a-z0-9_.]{1,128}
    hour        bigint           NOT NULL,  -- ts.div_euclid(1 h), floor division
    ts          bigint           NOT NULL,  -- ns since the Unix epoch
    labelset_id uuid             NOT NULL,
    value       double precision NOT NULL,
    PRIMARY KEY (tenant, project, name, hour, ts, labelset_id)
);

CREATE TABLE IF NOT EXISTS metric_names (
    tenant  text   NOT NULL,
    project text   NOT NULL,
    hour    bigint NOT NULL,
    name    text   NOT NULL,
    PRIMARY KEY (tenant, project, hour, name)
);
";

/// Version 3: key roles and last use, per-tenant limits. Keys made before
/// roles existed get ingest and read (bits 0b011, `Roles::INGEST_READ`):
/// what every key could do then.
const V3: &str = "
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS roles smallint NOT NULL DEFAULT 3;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS last_used_at timestamptz;

CREATE TABLE IF NOT EXISTS tenant_limits (
    tenant                 text   PRIMARY KEY REFERENCES tenants (tenant) ON DELETE CASCADE,
    ingest_samples_per_s   bigint,
    ingest_bytes_per_s     bigint,
    max_concurrent_queries integer,
    retention_days         integer
);
";

/// Version 4: the stored-bytes quota and the usage it is checked
/// against. The usage of rows written before this version is counted once
/// here (one scan of `samples` and `metrics`, grouped by the primary key's
/// leading columns), so a quota holds from the start. The sizes repeat
/// `profile::sample_row_bytes` (66 bytes after the names) and
/// `metric_row_bytes` (40 bytes after the names); `octet_length` counts
/// bytes, as Rust's `str::len` does.
const V4: &str = "
ALTER TABLE tenant_limits ADD COLUMN IF NOT EXISTS max_stored_bytes bigint;

CREATE TABLE IF NOT EXISTS stored_bytes (
    tenant  text   NOT NULL,
    project text   NOT NULL,
    hour    bigint NOT NULL,
    bytes   bigint NOT NULL,
    PRIMARY KEY (tenant, project, hour)
);

INSERT INTO stored_bytes AS u (tenant, project, hour, bytes)
SELECT tenant, project, hour, sum(bytes)::bigint FROM (
    SELECT tenant, project, hour,
           count(*) * (octet_length(tenant) + octet_length(project) + 66) AS bytes
    FROM samples GROUP BY tenant, project, hour
    UNION ALL
    SELECT tenant, project, hour,
           sum(octet_length(tenant) + octet_length(project) + octet_length(name) + 40) AS bytes
    FROM metrics GROUP BY tenant, project, hour
) AS written
GROUP BY tenant, project, hour
ON CONFLICT (tenant, project, hour) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes;
";

/// Version 5: rollups of hours and of days, and the version each was
/// made from. Windows written before this version have no rollup; the
/// rollup job makes them.
const V5: &str = "
CREATE TABLE IF NOT EXISTS rollups (
    tenant      text     NOT NULL,
    project     text     NOT NULL,
    resolution  smallint NOT NULL,  -- Resolution::code: 1 (hour) or 24 (day)
    hour        bigint   NOT NULL,  -- the window's first hour, ts.div_euclid(1 h)
    stack_id    uuid     NOT NULL,
    labelset_id uuid     NOT NULL,  -- the label set without per-instance labels
    period_ns   bigint   NOT NULL,  -- u64 bits
    count       bigint   NOT NULL,  -- u64 bits, the saturating sum
    PRIMARY KEY (tenant, project, resolution, hour, stack_id, labelset_id, period_ns)
);

CREATE TABLE IF NOT EXISTS rollup_hours (
    tenant     text     NOT NULL,
    project    text     NOT NULL,
    resolution smallint NOT NULL,   -- as in rollups
    hour       bigint   NOT NULL,   -- the window's first hour
    version    bigint   NOT NULL,   -- u64 bits: the window's version when rolled
    PRIMARY KEY (tenant, project, resolution, hour)
);
";

// ---------------------------------------------------------------- samples

/// Upserts samples of one scope. `$1` tenant, `$2` project, `$3` shard,
/// then one array per column, all of one length.
pub(super) const UPSERT_SAMPLES: &str = "
INSERT INTO samples AS s (tenant, project, hour, shard, ts, stack_id, labelset_id, count, period_ns)
SELECT $1::text, $2::text, u.hour, $3::smallint, u.ts, u.stack_id, u.labelset_id, u.count, u.period_ns
FROM UNNEST($4::bigint[], $5::bigint[], $6::uuid[], $7::uuid[], $8::bigint[], $9::bigint[])
    AS u (hour, ts, stack_id, labelset_id, count, period_ns)
ON CONFLICT (tenant, project, hour, shard, ts, stack_id, labelset_id) DO UPDATE
    SET count = EXCLUDED.count, period_ns = EXCLUDED.period_ns
    WHERE (s.count, s.period_ns) IS DISTINCT FROM (EXCLUDED.count, EXCLUDED.period_ns)";

/// Deletes samples of one scope by key: `$1` tenant, `$2` project, `$3`
/// shard, then one array per key column (hour, ts, stack, labels), all of
/// one length. Each key is one probe of the primary key: the shard is
/// bound so the probe uses the whole key (this store writes shard 0 only;
/// a row of another shard, moved over from ScyllaDB, stays and is read
/// beside the segment that also holds it, which a scan tolerates).
///
/// Each key is looked up on its own, in a `LATERAL` subquery that `LIMIT 1`
/// keeps the planner from flattening into a join: as a join (`DELETE …
/// USING UNNEST(…)`), a plan made when the statistics had not yet seen the
/// tenant's rows scanned all of them once per key (a nested loop with the
/// keys inside), and `fleet_bench`'s sealing pass ran for over 12 minutes
/// instead of half a minute. This plan is the same whatever the statistics
/// say: one primary-key probe per key, then the rows by their `ctid`. A
/// row changed between the probe and the delete has a new `ctid` and is
/// kept, as a later write should be.
pub(super) const DELETE_SAMPLES: &str = "
DELETE FROM samples
WHERE ctid = ANY(ARRAY(
    SELECT s.ctid
    FROM UNNEST($4::bigint[], $5::bigint[], $6::uuid[], $7::uuid[]) AS k (hour, ts, stack_id, labelset_id)
    CROSS JOIN LATERAL (
        SELECT ctid FROM samples
        WHERE tenant = $1 AND project = $2 AND hour = k.hour AND shard = $3
            AND ts = k.ts AND stack_id = k.stack_id AND labelset_id = k.labelset_id
        LIMIT 1
    ) AS s
))";

/// A scope's samples with `$5 <= ts < $6`, `$3..=$4` being the hours those
/// bounds fall in: the hour bounds let the primary-key index skip straight
/// to the range (`ts` comes after `shard` in the key). No `ORDER BY`: the
/// trait promises no order, and callers aggregate.
pub(super) const SCAN_SAMPLES: &str = "
SELECT ts, stack_id, labelset_id, count, period_ns
FROM samples
WHERE tenant = $1 AND project = $2 AND hour BETWEEN $3 AND $4 AND ts >= $5 AND ts < $6";

// --------------------------------------------------------------- retention

/// Adds bytes `$4` to hours `$3` of scope `$1`/`$2`. Run last in the
/// transaction that writes the rows, so that the usage rows, which every
/// writer of a tenant's hour updates, are locked only until it commits;
/// hours sorted, so two writers lock them in one order.
pub(super) const ADD_STORED_BYTES: &str = "
INSERT INTO stored_bytes AS u (tenant, project, hour, bytes)
SELECT $1::text, $2::text, a.hour, a.bytes FROM UNNEST($3::bigint[], $4::bigint[]) AS a (hour, bytes)
ON CONFLICT (tenant, project, hour) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes";

/// Tenant `$1`'s stored bytes, all projects: one index range.
pub(super) const SUM_STORED_BYTES: &str =
    "SELECT COALESCE(sum(bytes), 0)::bigint FROM stored_bytes WHERE tenant = $1";

/// The distinct hours before `$3` holding samples of scope `$1`/`$2`
/// (counted for the log, before they go).
pub(super) const COUNT_SAMPLE_HOURS_BEFORE: &str = "
SELECT count(DISTINCT hour) FROM samples WHERE tenant = $1 AND project = $2 AND hour < $3";

/// Deletes scope `$1`/`$2`'s samples of hours before `$3`: a prefix range
/// of the primary key.
pub(super) const DELETE_SAMPLES_BEFORE: &str =
    "DELETE FROM samples WHERE tenant = $1 AND project = $2 AND hour < $3";

/// Deletes scope `$1`/`$2`'s metric names of hours before `$3`, returning
/// how many (name, hour) pairs went: the partitions of metric points.
pub(super) const DELETE_METRIC_NAMES_BEFORE: &str =
    "DELETE FROM metric_names WHERE tenant = $1 AND project = $2 AND hour < $3";

/// Deletes scope `$1`/`$2`'s metric points of hours before `$3`. `name`
/// precedes `hour` in the key, so this is one index range per name.
pub(super) const DELETE_METRICS_BEFORE: &str =
    "DELETE FROM metrics WHERE tenant = $1 AND project = $2 AND hour < $3";

/// Deletes scope `$1`/`$2`'s usage of hours before `$3`, returning the
/// bytes it counted.
pub(super) const DELETE_STORED_BYTES_BEFORE: &str = "
WITH gone AS (
    DELETE FROM stored_bytes WHERE tenant = $1 AND project = $2 AND hour < $3 RETURNING bytes
)
SELECT COALESCE(sum(bytes), 0)::bigint FROM gone";

/// Deletes scope `$1`/`$2`'s rollup versions of the windows of
/// resolution `$3` that start before hour `$4`: a prefix range of the
/// primary key, run once per resolution. Before [`DELETE_ROLLUPS_BEFORE`]:
/// the order in which [`UPSERT_ROLLUP_VERSION`] and its rows are locked by
/// a concurrent rollup.
pub(super) const DELETE_ROLLUP_HOURS_BEFORE: &str = "
DELETE FROM rollup_hours WHERE tenant = $1 AND project = $2 AND resolution = $3 AND hour < $4";

/// Deletes scope `$1`/`$2`'s rollup rows of the windows of resolution `$3`
/// that start before hour `$4`: a prefix range of the primary key.
pub(super) const DELETE_ROLLUPS_BEFORE: &str = "
DELETE FROM rollups WHERE tenant = $1 AND project = $2 AND resolution = $3 AND hour < $4";

// ---------------------------------------------------------------- rollups

/// Each hour `$3..=$4` of scope `$1`/`$2` with its usage counter, the
/// hour's version (see `crate::rollup`), by hour: one index range of
/// `stored_bytes`.
pub(super) const SELECT_HOUR_VERSIONS: &str = "
SELECT hour, bytes FROM stored_bytes
WHERE tenant = $1 AND project = $2 AND hour BETWEEN $3 AND $4
ORDER BY hour";

/// Marks the window of resolution `$3` starting at hour `$4` of scope
/// `$1`/`$2` as rolled from version `$5`. Run first in the transaction
/// that writes the rollup: the row lock it takes (or the insert two first
/// rollups of the window race on) makes a second rollup of the same window
/// wait until the first commits, so that its [`DELETE_ROLLUP`] then sees,
/// and removes, every row of the first.
pub(super) const UPSERT_ROLLUP_VERSION: &str = "
INSERT INTO rollup_hours (tenant, project, resolution, hour, version) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, project, resolution, hour) DO UPDATE SET version = EXCLUDED.version";

/// Deletes the rows of the rollup of scope `$1`/`$2`'s window of
/// resolution `$3` starting at hour `$4`: one prefix range of the primary
/// key.
pub(super) const DELETE_ROLLUP: &str = "
DELETE FROM rollups WHERE tenant = $1 AND project = $2 AND resolution = $3 AND hour = $4";

/// Inserts rows of the rollup of scope `$1`/`$2`'s window of resolution
/// `$3` starting at hour `$4`, one array per column, all of one length. A
/// plain insert: [`DELETE_ROLLUP`] emptied the window in the same
/// transaction and the rows are unique by key (`merge_rows`), so a
/// conflict would be a bug, not a replay.
pub(super) const INSERT_ROLLUPS: &str = "
INSERT INTO rollups (tenant, project, resolution, hour, stack_id, labelset_id, period_ns, count)
SELECT $1::text, $2::text, $3::smallint, $4::bigint, u.stack_id, u.labelset_id, u.period_ns, u.count
FROM UNNEST($5::uuid[], $6::uuid[], $7::bigint[], $8::bigint[])
    AS u (stack_id, labelset_id, period_ns, count)";

/// The rolled windows of resolution `$3` of scope `$1`/`$2` whose first
/// hour lies in `$4..=$5`, each with the version it was made from, by
/// hour: one range of the primary key.
pub(super) const SELECT_ROLLUP_VERSIONS: &str = "
SELECT hour, version FROM rollup_hours
WHERE tenant = $1 AND project = $2 AND resolution = $3 AND hour BETWEEN $4 AND $5
ORDER BY hour";

/// The rows of the rollup of scope `$1`/`$2`'s window of resolution `$3`
/// starting at hour `$4`. No `ORDER BY`: the trait promises no order.
pub(super) const SCAN_ROLLUP: &str = "
SELECT stack_id, labelset_id, period_ns, count
FROM rollups WHERE tenant = $1 AND project = $2 AND resolution = $3 AND hour = $4";

// ---------------------------------------------------------------- metrics

/// Upserts metric points of one scope. `$1` tenant, `$2` project, then one
/// array per column, all of one length.
pub(super) const UPSERT_METRICS: &str = "
INSERT INTO metrics AS m (tenant, project, name, hour, ts, labelset_id, value)
SELECT $1::text, $2::text, u.name, u.hour, u.ts, u.labelset_id, u.value
FROM UNNEST($3::text[], $4::bigint[], $5::bigint[], $6::uuid[], $7::float8[])
    AS u (name, hour, ts, labelset_id, value)
ON CONFLICT (tenant, project, name, hour, ts, labelset_id) DO UPDATE
    SET value = EXCLUDED.value
    WHERE m.value IS DISTINCT FROM EXCLUDED.value";

/// Records that metrics `$4` have points in hours `$3` of scope `$1`/`$2`;
/// a pair already recorded is left alone.
pub(super) const INSERT_METRIC_NAMES: &str = "
INSERT INTO metric_names (tenant, project, hour, name)
SELECT $1::text, $2::text, u.hour, u.name FROM UNNEST($3::bigint[], $4::text[]) AS u (hour, name)
ON CONFLICT DO NOTHING";

/// Points of metric `$3` of a scope with `$6 <= ts < $7`, `$4..=$5` being
/// the hours those bounds fall in (as [`SCAN_SAMPLES`]).
pub(super) const SCAN_METRICS: &str = "
SELECT ts, labelset_id, value
FROM metrics
WHERE tenant = $1 AND project = $2 AND name = $3 AND hour BETWEEN $4 AND $5
    AND ts >= $6 AND ts < $7";

/// The distinct metric names of a scope's hours `$3..=$4`, sorted.
pub(super) const SELECT_METRIC_NAMES: &str = "
SELECT DISTINCT name FROM metric_names
WHERE tenant = $1 AND project = $2 AND hour BETWEEN $3 AND $4
ORDER BY name";

// ------------------------------------------------------------ dictionaries

/// The dictionary tables: same shape, `(tenant, <id>) → value`. Table
/// names cannot be statement parameters, hence one statement per table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dict {
    Frames,
    Stacks,
    LabelSets,
    Executables,
}

impl Dict {
    /// Upserts `$2` ids with `$3` values for tenant `$1`.
    pub(super) fn upsert(self) -> &'static str {
        match self {
            Dict::Frames => {
                "
INSERT INTO frames AS d (tenant, frame_id, value)
SELECT $1::text, u.id, u.value FROM UNNEST($2::uuid[], $3::bytea[]) AS u (id, value)
ON CONFLICT (tenant, frame_id) DO UPDATE SET value = EXCLUDED.value
    WHERE d.value IS DISTINCT FROM EXCLUDED.value"
            }
            Dict::Stacks => {
                "
INSERT INTO stacks AS d (tenant, stack_id, value)
SELECT $1::text, u.id, u.value FROM UNNEST($2::uuid[], $3::bytea[]) AS u (id, value)
ON CONFLICT (tenant, stack_id) DO UPDATE SET value = EXCLUDED.value
    WHERE d.value IS DISTINCT FROM EXCLUDED.value"
            }
            Dict::LabelSets => {
                "
INSERT INTO labelsets AS d (tenant, labelset_id, value)
SELECT $1::text, u.id, u.value FROM UNNEST($2::uuid[], $3::bytea[]) AS u (id, value)
ON CONFLICT (tenant, labelset_id) DO UPDATE SET value = EXCLUDED.value
    WHERE d.value IS DISTINCT FROM EXCLUDED.value"
            }
            // A rewrite replaces name and build id but keeps the symbol
            // status: the file id names the same bytes either way.
            Dict::Executables => {
                "
INSERT INTO executables AS d (tenant, file_id, value)
SELECT $1::text, u.id, u.value FROM UNNEST($2::uuid[], $3::bytea[]) AS u (id, value)
ON CONFLICT (tenant, file_id) DO UPDATE SET value = EXCLUDED.value
    WHERE d.value IS DISTINCT FROM EXCLUDED.value"
            }
        }
    }

    /// `(id, value)` of tenant `$1`'s rows among ids `$2`.
    pub(super) fn select(self) -> &'static str {
        match self {
            Dict::Frames => {
                "SELECT frame_id, value FROM frames WHERE tenant = $1 AND frame_id = ANY($2::uuid[])"
            }
            Dict::Stacks => {
                "SELECT stack_id, value FROM stacks WHERE tenant = $1 AND stack_id = ANY($2::uuid[])"
            }
            Dict::LabelSets => {
                "SELECT labelset_id, value FROM labelsets \
                 WHERE tenant = $1 AND labelset_id = ANY($2::uuid[])"
            }
            Dict::Executables => {
                "SELECT file_id, value FROM executables \
                 WHERE tenant = $1 AND file_id = ANY($2::uuid[])"
            }
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

// ---------------------------------------------------------------- metadata

/// Creates tenant `$1`; no row affected when it exists.
pub(super) const INSERT_TENANT: &str =
    "INSERT INTO tenants (tenant) VALUES ($1) ON CONFLICT DO NOTHING";

pub(super) const LIST_TENANTS: &str = "SELECT tenant FROM tenants ORDER BY tenant";

/// Creates project `$2` of tenant `$1`; no row affected when it exists, a
/// foreign-key violation when the tenant does not.
pub(super) const INSERT_PROJECT: &str =
    "INSERT INTO projects (tenant, project) VALUES ($1, $2) ON CONFLICT DO NOTHING";

pub(super) const LIST_PROJECTS: &str =
    "SELECT project FROM projects WHERE tenant = $1 ORDER BY project";

/// Stores a key's hash; a foreign-key violation when the project does not
/// exist.
pub(super) const INSERT_API_KEY: &str = "
INSERT INTO api_keys (tenant, project, key_hash, prefix, label, roles) VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, created_at";

pub(super) const LIST_API_KEYS: &str = "
SELECT id, project, label, prefix, created_at, revoked_at IS NOT NULL, roles, last_used_at
FROM api_keys WHERE tenant = $1 ORDER BY id";

/// Revokes tenant `$1`'s live key `$2`. The tenant in the condition keeps a
/// tenant from revoking another's key by id.
pub(super) const REVOKE_API_KEY: &str = "
UPDATE api_keys SET revoked_at = now() WHERE tenant = $1 AND id = $2 AND revoked_at IS NULL";

/// What a live key with hash `$1` grants.
pub(super) const GRANT_OF_KEY: &str =
    "SELECT tenant, project, roles, id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL";

/// Records the use of tenant `$1`'s key `$2` at `$3`.
pub(super) const RECORD_KEY_USE: &str =
    "UPDATE api_keys SET last_used_at = $3 WHERE tenant = $1 AND id = $2";

/// Sets tenant `$1`'s limits; a foreign-key violation when it does not exist.
pub(super) const UPSERT_TENANT_LIMITS: &str = "
INSERT INTO tenant_limits (tenant, ingest_samples_per_s, ingest_bytes_per_s, max_concurrent_queries, retention_days, max_stored_bytes)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant) DO UPDATE SET
    ingest_samples_per_s = EXCLUDED.ingest_samples_per_s,
    ingest_bytes_per_s = EXCLUDED.ingest_bytes_per_s,
    max_concurrent_queries = EXCLUDED.max_concurrent_queries,
    retention_days = EXCLUDED.retention_days,
    max_stored_bytes = EXCLUDED.max_stored_bytes";

/// Tenant `$1` and its limits (`NULL`s when never set); no row when the
/// tenant does not exist.
pub(super) const TENANT_LIMITS: &str = "
SELECT l.ingest_samples_per_s, l.ingest_bytes_per_s, l.max_concurrent_queries, l.retention_days,
       l.max_stored_bytes
FROM tenants t LEFT JOIN tenant_limits l ON l.tenant = t.tenant WHERE t.tenant = $1";
