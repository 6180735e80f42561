//! [`ProfileStore`] on PostgreSQL: rows sorted and de-duplicated by key,
//! sent as column arrays through the statements of [`schema`].

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use kiln_model::{
    Executable, FileId, FrameId, LabelSet, LabelSetEntry, LabelSetId, MetricPoint, StackEntry,
    StackId,
};
use uuid::Uuid;

use super::arrays::ArrayParam;
use super::schema::{self, Dict};
use super::{Params, PostgresProfileStore};
use crate::error::{DecodeError, StoreError};
use crate::profile::{
    DeletedHours, ProfileStore, StoredFrame, StoredMetricPoint, StoredSample, check_metric_name,
    check_metric_points, hour_of, metric_bytes_per_hour, sample_bytes_per_hour,
};
use crate::rollup::{HourVersion, Resolution, RollupRow, merge_rows};
use crate::scope::Scope;
use crate::values;

/// Rows per statement. One array-valued statement costs the same round trip
/// whatever its size, so bigger is faster until the statement's memory on
/// the server and the time it holds row locks grow; 10 000 rows is about
/// 1 MB of parameters.
const CHUNK_ROWS: usize = 10_000;

/// The hours `$3..=$4` holding samples of scope `$1`/`$2`, ascending: a
/// loose index scan (a skip scan PostgreSQL does not plan by itself). Each
/// step of the recursion is one probe of the primary key (tenant, project,
/// hour, …) for the first hour after the last one found, so the statement
/// costs one index descent per hour with data, however many hours the
/// range spans; `SELECT DISTINCT hour` would read every row of the range.
///
/// Kept here rather than in `schema.rs` with the rest of the SQL while that
/// file's migrations are being changed for tenancy; it needs no table or
/// index of its own (the primary key answers it), so no migration.
const SELECT_SAMPLE_HOURS: &str = "
WITH RECURSIVE hours (hour) AS (
    (SELECT hour FROM samples
     WHERE tenant = $1 AND project = $2 AND hour >= $3 AND hour <= $4
     ORDER BY hour LIMIT 1)
    UNION ALL
    SELECT (SELECT s.hour FROM samples s
            WHERE s.tenant = $1 AND s.project = $2 AND s.hour > h.hour AND s.hour <= $4
            ORDER BY s.hour LIMIT 1)
    FROM hours h
    WHERE h.hour IS NOT NULL
)
SELECT hour FROM hours WHERE hour IS NOT NULL";

/// The hours `$4..=$5` holding points of metric `$3` of scope `$1`/`$2`,
/// ascending: the loose index scan of [`SELECT_SAMPLE_HOURS`] on the
/// primary key of `metrics` (tenant, project, name, hour, …). The
/// `metric_names` index would answer too, but by reading every name of
/// every hour in the range.
const SELECT_METRIC_HOURS: &str = "
WITH RECURSIVE hours (hour) AS (
    (SELECT hour FROM metrics
     WHERE tenant = $1 AND project = $2 AND name = $3 AND hour >= $4 AND hour <= $5
     ORDER BY hour LIMIT 1)
    UNION ALL
    SELECT (SELECT m.hour FROM metrics m
            WHERE m.tenant = $1 AND m.project = $2 AND m.name = $3
                AND m.hour > h.hour AND m.hour <= $5
            ORDER BY m.hour LIMIT 1)
    FROM hours h
    WHERE h.hour IS NOT NULL
)
SELECT hour FROM hours WHERE hour IS NOT NULL";

/// A sample row's key within its scope, in primary-key order.
type SampleKey = (i64, i64, u128, u128);

/// A metric row's key within its scope, in primary-key order: name, hour,
/// ts, labels.
type MetricKey<'a> = (&'a str, i64, i64, u128);

/// `rows` sorted by key, one per key, the last given for a key winning:
/// what a write statement takes (see schema's "Writes": sorted, so that
/// concurrent writes lock rows in one order; unique, as one statement may
/// not touch a row twice). A stable sort, which runs through a poll's
/// already ordered stretches (each batch's samples come in time order):
/// an unstable one took 1.6 times as long on `fleet_bench`'s polls, and a
/// `BTreeMap` sorts the same way and then builds a tree.
fn sorted_unique<K: Ord, V>(rows: impl Iterator<Item = (K, V)>) -> Vec<(K, V)> {
    let mut rows: Vec<(K, V)> = rows.collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    // Equal keys keep the order given, so the later row replaces the kept one.
    rows.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        same
    });
    rows
}

impl PostgresProfileStore {
    /// Upserts dictionary rows `(id, encoded value)` of `tenant`.
    async fn put_dict(
        &self,
        dict: Dict,
        tenant: &str,
        rows: impl Iterator<Item = (u128, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        // Sorted and unique by id: see schema's "Writes". For repeated ids
        // the last value wins; content-addressed ids carry equal values.
        let rows = sorted_unique(rows);
        if rows.is_empty() {
            return Ok(());
        }
        let batches = rows
            .chunks(CHUNK_ROWS)
            .map(|chunk| -> Params {
                vec![
                    Box::new(tenant.to_owned()),
                    Box::new(ArrayParam::uuid(chunk.iter().map(|(id, _)| *id))),
                    Box::new(ArrayParam::bytea(chunk.iter().map(|(_, v)| v.as_slice()))),
                ]
            })
            .collect();
        self.db
            .execute_batches("write dictionary rows", dict.upsert(), batches)
            .await
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
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let op = "read dictionary rows";
        let pg = |e| StoreError::postgres(op, e);
        let unique: Vec<Uuid> = ids
            .iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|&id| Uuid::from_u128(id))
            .collect();
        let client = self.db.client(op).await?;
        let statement = client.prepare_cached(dict.select()).await.map_err(pg)?;
        let rows = client
            .query(&statement, &[&tenant, &unique])
            .await
            .map_err(pg)?;
        let mut found = HashMap::with_capacity(rows.len());
        for row in rows {
            let id = row.try_get::<_, Uuid>(0).map_err(pg)?.as_u128();
            let bytes: &[u8] = row.try_get(1).map_err(pg)?;
            let value = decode(id, bytes).map_err(|reason| StoreError::Corrupt {
                what: dict.row(),
                key: format!("{tenant}/{id:032x}"),
                reason,
            })?;
            found.insert(id, value);
        }
        Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
    }
}

/// The `resolution` column of a rollup table (see schema): the
/// resolution's code, 1 or 24.
fn resolution_column(resolution: Resolution) -> i16 {
    i16::from(resolution.code())
}

/// The parameters of [`schema::ADD_STORED_BYTES`]: `bytes` per hour of
/// `scope`.
fn usage_params(scope: &Scope, bytes: &[(i64, u64)]) -> Params {
    vec![
        Box::new(scope.tenant().to_owned()),
        Box::new(scope.project().to_owned()),
        Box::new(bytes.iter().map(|(hour, _)| *hour).collect::<Vec<i64>>()),
        // Far below 2^63: a row is under 300 bytes.
        Box::new(
            bytes
                .iter()
                .map(|(_, b)| i64::try_from(*b).unwrap_or(i64::MAX))
                .collect::<Vec<i64>>(),
        ),
    ]
}

impl PostgresProfileStore {
    /// Runs one of the hour statements above, whose rows are one `bigint`.
    async fn hours(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<i64>, StoreError> {
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let statement = client.prepare_cached(sql).await.map_err(pg)?;
        let rows = client.query(&statement, params).await.map_err(pg)?;
        rows.iter()
            .map(|row| row.try_get::<_, i64>(0))
            .collect::<Result<_, _>>()
            .map_err(pg)
    }

    /// Runs [`schema::SELECT_HOUR_VERSIONS`] (`resolution` `None`) or
    /// [`schema::SELECT_ROLLUP_VERSIONS`] (`Some`: the windows of that
    /// resolution) for the hours of `from_ns` to `to_ns - 1`; nothing when
    /// the range is empty.
    async fn versions(
        &self,
        op: &'static str,
        sql: &str,
        scope: &Scope,
        resolution: Option<Resolution>,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let pg = |e| StoreError::postgres(op, e);
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        let (tenant, project) = (scope.tenant(), scope.project());
        let resolution = resolution.map(resolution_column);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&tenant, &project];
        if let Some(resolution) = &resolution {
            params.push(resolution);
        }
        params.push(&first_hour);
        params.push(&last_hour);
        let client = self.db.client(op).await?;
        let statement = client.prepare_cached(sql).await.map_err(pg)?;
        let rows = client.query(&statement, &params).await.map_err(pg)?;
        rows.iter()
            .map(|row| {
                Ok(HourVersion {
                    hour: row.try_get(0)?,
                    // u64 stored as the same 64 bits (see schema).
                    version: row.try_get::<_, i64>(1)? as u64,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg)
    }
}

#[async_trait]
impl ProfileStore for PostgresProfileStore {
    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError> {
        let rows = frames
            .iter()
            .map(|e| (e.id.0, values::encode_stored_frame(e)));
        self.put_dict(Dict::Frames, tenant, rows).await
    }

    async fn put_stacks(&self, tenant: &str, stacks: &[StackEntry]) -> Result<(), StoreError> {
        let rows = stacks
            .iter()
            .map(|e| (e.id.0, values::encode_stack(&e.frames)));
        self.put_dict(Dict::Stacks, tenant, rows).await
    }

    async fn put_label_sets(&self, tenant: &str, sets: &[LabelSetEntry]) -> Result<(), StoreError> {
        let rows = sets
            .iter()
            .map(|e| (e.id.0, values::encode_label_set(&e.labels)));
        self.put_dict(Dict::LabelSets, tenant, rows).await
    }

    async fn put_executables(
        &self,
        tenant: &str,
        executables: &[Executable],
    ) -> Result<(), StoreError> {
        let rows = executables
            .iter()
            .map(|e| (e.file_id.0, values::encode_executable(e)));
        self.put_dict(Dict::Executables, tenant, rows).await
    }

    async fn put_samples(&self, scope: &Scope, samples: &[StoredSample]) -> Result<(), StoreError> {
        // Sorted and unique by key (see schema's "Writes"); for a key given
        // twice the later value wins, which the trait leaves open.
        let rows = samples.iter().map(|s| {
            let key = (
                hour_of(s.timestamp_ns),
                s.timestamp_ns,
                s.stack.0,
                s.labels.0,
            );
            (key, (s.count, s.period_ns))
        });
        let rows = sorted_unique(rows);
        if rows.is_empty() {
            return Ok(());
        }
        let steps = rows
            .chunks(CHUNK_ROWS)
            .map(|chunk| -> Params {
                type Row = (SampleKey, (u64, u64));
                let column = |f: fn(&Row) -> i64| ArrayParam::int8(chunk.iter().map(f));
                let uuids = |f: fn(&Row) -> u128| ArrayParam::uuid(chunk.iter().map(f));
                vec![
                    Box::new(scope.tenant().to_owned()),
                    Box::new(scope.project().to_owned()),
                    Box::new(schema::SHARD),
                    Box::new(column(|r| r.0.0)),
                    Box::new(column(|r| r.0.1)),
                    Box::new(uuids(|r| r.0.2)),
                    Box::new(uuids(|r| r.0.3)),
                    // u64 stored as the same 64 bits (see schema).
                    Box::new(column(|r| r.1.0 as i64)),
                    Box::new(column(|r| r.1.1 as i64)),
                ]
            })
            .map(|params| (schema::UPSERT_SAMPLES, params));
        // Usage in the same transaction, last (see ADD_STORED_BYTES).
        let usage = usage_params(scope, &sample_bytes_per_hour(scope, samples));
        let steps = steps
            .chain(std::iter::once((schema::ADD_STORED_BYTES, usage)))
            .collect();
        self.db.execute_steps("write samples", steps).await
    }

    async fn delete_sealed_samples(
        &self,
        scope: &Scope,
        samples: &[StoredSample],
        _written_before_ns: i64,
    ) -> Result<u64, StoreError> {
        // By key: a row written since with one of these keys is the same
        // row written again (a replay), which the segment holds. Sorted by
        // key, as writes are, so concurrent deletes and writes
        // lock rows in one order.
        let mut keys: Vec<SampleKey> = samples
            .iter()
            .map(|s| {
                (
                    hour_of(s.timestamp_ns),
                    s.timestamp_ns,
                    s.stack.0,
                    s.labels.0,
                )
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(0);
        }
        let steps = keys
            .chunks(CHUNK_ROWS)
            .map(|chunk| -> Params {
                let column = |f: fn(&SampleKey) -> i64| ArrayParam::int8(chunk.iter().map(f));
                let uuids = |f: fn(&SampleKey) -> u128| ArrayParam::uuid(chunk.iter().map(f));
                vec![
                    Box::new(scope.tenant().to_owned()),
                    Box::new(scope.project().to_owned()),
                    Box::new(schema::SHARD),
                    Box::new(column(|k| k.0)),
                    Box::new(column(|k| k.1)),
                    Box::new(uuids(|k| k.2)),
                    Box::new(uuids(|k| k.3)),
                ]
            })
            .map(|params| (schema::DELETE_SAMPLES, params))
            .collect();
        self.db
            .execute_steps("delete sealed samples", steps)
            .await?;
        Ok(samples.len() as u64)
    }

    async fn put_metric_points(
        &self,
        scope: &Scope,
        points: &[MetricPoint],
    ) -> Result<(), StoreError> {
        check_metric_points(points)?;
        // Sorted and unique by key (see schema's "Writes"); for a key given
        // twice the later value wins.
        let rows = points.iter().map(|p| {
            let key = (
                p.name.as_str(),
                hour_of(p.timestamp_ns),
                p.timestamp_ns,
                p.labels.0,
            );
            (key, p.value)
        });
        let rows: Vec<(MetricKey<'_>, f64)> = sorted_unique(rows);
        if rows.is_empty() {
            return Ok(());
        }
        let tenant = || Box::new(scope.tenant().to_owned());
        let project = || Box::new(scope.project().to_owned());
        // The name index first, as ScyllaDB's hours: a name listed whose
        // points a failed write left out costs one empty scan.
        let names: BTreeSet<(i64, &str)> = rows.iter().map(|((n, h, ..), _)| (*h, *n)).collect();
        let names: Params = vec![
            tenant(),
            project(),
            Box::new(names.iter().map(|(h, _)| *h).collect::<Vec<i64>>()),
            Box::new(
                names
                    .iter()
                    .map(|(_, n)| (*n).to_owned())
                    .collect::<Vec<String>>(),
            ),
        ];
        self.db
            .execute_batches(
                "write metric names",
                schema::INSERT_METRIC_NAMES,
                vec![names],
            )
            .await?;
        let steps = rows
            .chunks(CHUNK_ROWS)
            .map(|chunk| -> Params {
                vec![
                    tenant(),
                    project(),
                    Box::new(
                        chunk
                            .iter()
                            .map(|r| r.0.0.to_owned())
                            .collect::<Vec<String>>(),
                    ),
                    Box::new(chunk.iter().map(|r| r.0.1).collect::<Vec<i64>>()),
                    Box::new(chunk.iter().map(|r| r.0.2).collect::<Vec<i64>>()),
                    Box::new(
                        chunk
                            .iter()
                            .map(|r| Uuid::from_u128(r.0.3))
                            .collect::<Vec<Uuid>>(),
                    ),
                    Box::new(chunk.iter().map(|r| r.1).collect::<Vec<f64>>()),
                ]
            })
            .map(|params| (schema::UPSERT_METRICS, params));
        let usage = usage_params(scope, &metric_bytes_per_hour(scope, points));
        let steps = steps
            .chain(std::iter::once((schema::ADD_STORED_BYTES, usage)))
            .collect();
        self.db.execute_steps("write metric points", steps).await
    }

    /// One transaction: the counts for the log, then the rows and the
    /// rollups (of every resolution, the windows that start before the
    /// cutoff hour), then the usage. The samples' delete is one range of the
    /// primary key; the freed space is reused after autovacuum.
    async fn delete_hours_before(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<DeletedHours, StoreError> {
        let op = "delete hours past retention";
        let pg = |e| StoreError::postgres(op, e);
        let before_hour = hour_of(before_ns);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&scope.tenant(), &scope.project(), &before_hour];
        let mut client = self.db.client(op).await?;
        let tx = client.transaction().await.map_err(pg)?;
        let count = |row: tokio_postgres::Row| -> Result<u64, StoreError> {
            Ok(u64::try_from(row.try_get::<_, i64>(0).map_err(pg)?).unwrap_or(0))
        };
        let statement = tx
            .prepare_cached(schema::COUNT_SAMPLE_HOURS_BEFORE)
            .await
            .map_err(pg)?;
        let sample_hours = count(tx.query_one(&statement, &params).await.map_err(pg)?)?;
        let run = async |sql: &'static str| -> Result<u64, StoreError> {
            let statement = tx.prepare_cached(sql).await.map_err(pg)?;
            tx.execute(&statement, &params).await.map_err(pg)
        };
        run(schema::DELETE_SAMPLES_BEFORE).await?;
        run(schema::DELETE_METRICS_BEFORE).await?;
        let metric_hours = run(schema::DELETE_METRIC_NAMES_BEFORE).await?;
        // Windows of every resolution that start before the cutoff, one
        // prefix range each; versions before rows: the order a concurrent
        // rollup locks them in.
        for resolution in Resolution::ALL {
            let resolution = resolution_column(resolution);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&scope.tenant(), &scope.project(), &resolution, &before_hour];
            for sql in [
                schema::DELETE_ROLLUP_HOURS_BEFORE,
                schema::DELETE_ROLLUPS_BEFORE,
            ] {
                let statement = tx.prepare_cached(sql).await.map_err(pg)?;
                tx.execute(&statement, &params).await.map_err(pg)?;
            }
        }
        let statement = tx
            .prepare_cached(schema::DELETE_STORED_BYTES_BEFORE)
            .await
            .map_err(pg)?;
        let bytes = count(tx.query_one(&statement, &params).await.map_err(pg)?)?;
        tx.commit().await.map_err(pg)?;
        Ok(DeletedHours {
            sample_hours,
            metric_hours,
            bytes,
        })
    }

    async fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "read stored bytes";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let statement = client
            .prepare_cached(schema::SUM_STORED_BYTES)
            .await
            .map_err(pg)?;
        let row = client.query_one(&statement, &[&tenant]).await.map_err(pg)?;
        Ok(u64::try_from(row.try_get::<_, i64>(0).map_err(pg)?).unwrap_or(0))
    }

    async fn hour_versions(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        self.versions(
            "read hour versions",
            schema::SELECT_HOUR_VERSIONS,
            scope,
            None,
            from_ns,
            to_ns,
        )
        .await
    }

    /// One transaction: the version first (it serializes two rollups of
    /// the window, see [`schema::UPSERT_ROLLUP_VERSION`]), then the delete
    /// of the earlier rollup's rows, then the new rows, merged and sorted
    /// by key.
    async fn put_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
        version: u64,
        rows: &[RollupRow],
    ) -> Result<(), StoreError> {
        let rows = merge_rows(rows);
        let resolution = resolution_column(resolution);
        let tenant = || Box::new(scope.tenant().to_owned());
        let project = || Box::new(scope.project().to_owned());
        let mut steps: Vec<(&'static str, Params)> = vec![
            (
                schema::UPSERT_ROLLUP_VERSION,
                // u64 stored as the same 64 bits (see schema).
                vec![
                    tenant(),
                    project(),
                    Box::new(resolution),
                    Box::new(window),
                    Box::new(version as i64),
                ],
            ),
            (
                schema::DELETE_ROLLUP,
                vec![tenant(), project(), Box::new(resolution), Box::new(window)],
            ),
        ];
        steps.extend(
            rows.chunks(CHUNK_ROWS)
                .map(|chunk| -> (&'static str, Params) {
                    let uuids = |f: fn(&RollupRow) -> u128| -> Vec<Uuid> {
                        chunk.iter().map(|r| Uuid::from_u128(f(r))).collect()
                    };
                    let column = |f: fn(&RollupRow) -> u64| -> Vec<i64> {
                        chunk.iter().map(|r| f(r) as i64).collect()
                    };
                    let params: Params = vec![
                        tenant(),
                        project(),
                        Box::new(resolution),
                        Box::new(window),
                        Box::new(uuids(|r| r.stack.0)),
                        Box::new(uuids(|r| r.labels.0)),
                        // u64 stored as the same 64 bits (see schema).
                        Box::new(column(|r| r.period_ns)),
                        Box::new(column(|r| r.count)),
                    ];
                    (schema::INSERT_ROLLUPS, params)
                }),
        );
        self.db.execute_steps("write a rollup", steps).await
    }

    async fn rollup_versions(
        &self,
        scope: &Scope,
        resolution: Resolution,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        self.versions(
            "read rollup versions",
            schema::SELECT_ROLLUP_VERSIONS,
            scope,
            Some(resolution),
            from_ns,
            to_ns,
        )
        .await
    }

    async fn scan_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
    ) -> Result<Vec<RollupRow>, StoreError> {
        let op = "scan a rollup";
        let resolution = resolution_column(resolution);
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let statement = client
            .prepare_cached(schema::SCAN_ROLLUP)
            .await
            .map_err(pg)?;
        let rows = client
            .query(
                &statement,
                &[&scope.tenant(), &scope.project(), &resolution, &window],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                Ok(RollupRow {
                    stack: StackId(row.try_get::<_, Uuid>(0)?.as_u128()),
                    labels: LabelSetId(row.try_get::<_, Uuid>(1)?.as_u128()),
                    period_ns: row.try_get::<_, i64>(2)? as u64,
                    count: row.try_get::<_, i64>(3)? as u64,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg)
    }

    async fn sample_hours(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        self.hours(
            "find the hours that hold samples",
            SELECT_SAMPLE_HOURS,
            &[&scope.tenant(), &scope.project(), &first_hour, &last_hour],
        )
        .await
    }

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
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        self.hours(
            "find the hours that hold metric points",
            SELECT_METRIC_HOURS,
            &[
                &scope.tenant(),
                &scope.project(),
                &name,
                &first_hour,
                &last_hour,
            ],
        )
        .await
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
        let op = "scan metric points";
        let pg = |e| StoreError::postgres(op, e);
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        let client = self.db.client(op).await?;
        let statement = client
            .prepare_cached(schema::SCAN_METRICS)
            .await
            .map_err(pg)?;
        let rows = client
            .query(
                &statement,
                &[
                    &scope.tenant(),
                    &scope.project(),
                    &name,
                    &first_hour,
                    &last_hour,
                    &from_ns,
                    &to_ns,
                ],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                Ok(StoredMetricPoint {
                    timestamp_ns: row.try_get(0)?,
                    labels: LabelSetId(row.try_get::<_, Uuid>(1)?.as_u128()),
                    value: row.try_get(2)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg)
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
        let op = "read metric names";
        let pg = |e| StoreError::postgres(op, e);
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        let client = self.db.client(op).await?;
        let statement = client
            .prepare_cached(schema::SELECT_METRIC_NAMES)
            .await
            .map_err(pg)?;
        let rows = client
            .query(
                &statement,
                &[&scope.tenant(), &scope.project(), &first_hour, &last_hour],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| row.try_get::<_, String>(0))
            .collect::<Result<_, _>>()
            .map_err(pg)
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
        let op = "scan samples";
        let pg = |e| StoreError::postgres(op, e);
        // `to_ns` is exclusive; `to_ns - 1` cannot overflow as `to_ns > from_ns`.
        let (first_hour, last_hour) = (hour_of(from_ns), hour_of(to_ns - 1));
        let client = self.db.client(op).await?;
        let statement = client
            .prepare_cached(schema::SCAN_SAMPLES)
            .await
            .map_err(pg)?;
        let rows = client
            .query(
                &statement,
                &[
                    &scope.tenant(),
                    &scope.project(),
                    &first_hour,
                    &last_hour,
                    &from_ns,
                    &to_ns,
                ],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                Ok(StoredSample {
                    timestamp_ns: row.try_get(0)?,
                    stack: StackId(row.try_get::<_, Uuid>(1)?.as_u128()),
                    labels: LabelSetId(row.try_get::<_, Uuid>(2)?.as_u128()),
                    count: row.try_get::<_, i64>(3)? as u64,
                    period_ns: row.try_get::<_, i64>(4)? as u64,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg)
    }

    /// Does nothing: every write above returned only once its transaction
    /// committed, and with PostgreSQL's default `synchronous_commit = on` a
    /// commit returns only after its WAL record is flushed to disk. (A
    /// server configured with `synchronous_commit = off` trades exactly
    /// this guarantee away; that is the operator's choice, and no client
    /// call could win it back short of forcing a checkpoint.)
    async fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::sorted_unique;

    #[test]
    fn rows_are_sorted_by_key_and_the_last_given_for_a_key_wins() {
        let given = [(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e'), (3, 'f')];
        assert_eq!(
            sorted_unique(given.into_iter()),
            vec![(1, 'e'), (2, 'd'), (3, 'f')]
        );
        assert!(sorted_unique(std::iter::empty::<(u8, u8)>()).is_empty());
    }
}
