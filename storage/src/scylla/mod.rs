//! The ScyllaDB profile store: samples at scale, on a cluster shared by
//! every worker and query node.
//!
//! All CQL, and why the schema is what it is, lives in [`cql`]; where a
//! sample row goes (hour, shard, batch) in `layout`; the URL in [`url`];
//! the trait implementation in `profile`.

mod cql;
mod layout;
mod profile;
mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::scylla::client::execution_profile::ExecutionProfile;
use ::scylla::client::session::Session;
use ::scylla::client::session_builder::SessionBuilder;
use ::scylla::policies::timestamp_generator::MonotonicTimestampGenerator;
use ::scylla::statement::Consistency;
use ::scylla::statement::prepared::PreparedStatement;

pub use url::ScyllaUrl;

use crate::error::{DecodeError, StoreError};
use cql::Dict;

/// How long opening a connection to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`ProfileStore`](crate::ProfileStore) in a ScyllaDB (or Cassandra)
/// keyspace: DESIGN.md's `samples`, `rollups`, `frames`, `stacks`,
/// `labelsets`, `executables` and `metrics` tables, and `sample_hours`,
/// `metric_names` and `rollup_hours`, the indexes of which hours hold
/// samples and metrics and which hour and day windows have rollups
/// (`storage/src/scylla/cql.rs` holds every
/// statement and the reasoning behind the schema).
///
/// Create the keyspace once with [`migrate`](Self::migrate) (`kiln store
/// migrate`), then [`connect`](Self::connect) from every process. Cloning
/// is cheap and shares the session (its connection pools and prepared
/// statements).
///
/// # Examples
///
/// ```no_run
/// use kiln_storage::{ProfileStore, Scope, ScyllaProfileStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kiln_storage::StoreError> {
/// let url = "scylla://127.0.0.1:9042/kiln?replication_factor=1";
/// ScyllaProfileStore::migrate(url).await?;
/// let store = ScyllaProfileStore::connect(url).await?;
/// let samples = store.scan_samples(&Scope::new("acme", "web")?, 0, i64::MAX).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ScyllaProfileStore {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    statements: Statements,
    /// The session's client-side timestamp generator, for the writes that
    /// set their timestamps themselves (a rollup's rewrite).
    timestamps: Arc<MonotonicTimestampGenerator>,
    /// Partitions per project and hour, as recorded in `kiln_schema`.
    sample_shards: i16,
    url: ScyllaUrl,
}

/// The prepared statements, one of each.
struct Statements {
    insert_sample: PreparedStatement,
    insert_sample_hour: PreparedStatement,
    select_sample_hours: PreparedStatement,
    scan_samples: PreparedStatement,
    insert_metric: PreparedStatement,
    insert_metric_name: PreparedStatement,
    select_metric_names: PreparedStatement,
    scan_metrics: PreparedStatement,
    add_stored_bytes: PreparedStatement,
    select_stored_bytes: PreparedStatement,
    select_stored_bytes_before: PreparedStatement,
    delete_sample_partition_written_before: PreparedStatement,
    delete_sample_hour_written_before: PreparedStatement,
    delete_sample_partition: PreparedStatement,
    delete_sample_hours_before: PreparedStatement,
    delete_metric_partition: PreparedStatement,
    delete_metric_names_before: PreparedStatement,
    select_stored_bytes_between: PreparedStatement,
    insert_rollup: PreparedStatement,
    scan_rollup: PreparedStatement,
    delete_rollup: PreparedStatement,
    delete_rollup_partition: PreparedStatement,
    delete_rollups_before: PreparedStatement,
    insert_rollup_hour: PreparedStatement,
    select_rollup_hours: PreparedStatement,
    delete_rollup_hour: PreparedStatement,
    delete_rollup_hours_before: PreparedStatement,
    upserts: [PreparedStatement; 4],
    selects: [PreparedStatement; 4],
}

impl Statements {
    async fn prepare(session: &Session) -> Result<Statements, StoreError> {
        let prepare = |cql: &'static str| async move {
            session
                .prepare(cql)
                .await
                .map_err(|e| StoreError::scylla("prepare a statement", e))
        };
        let mut upserts = Vec::with_capacity(4);
        let mut selects = Vec::with_capacity(4);
        for dict in Dict::ALL {
            upserts.push(prepare(dict.upsert()).await?);
            selects.push(prepare(dict.select()).await?);
        }
        let four = |v: Vec<PreparedStatement>| -> [PreparedStatement; 4] {
            v.try_into()
                .unwrap_or_else(|_| unreachable!("one statement per dictionary"))
        };
        Ok(Statements {
            insert_sample: prepare(cql::INSERT_SAMPLE).await?,
            insert_sample_hour: prepare(cql::INSERT_SAMPLE_HOUR).await?,
            select_sample_hours: prepare(cql::SELECT_SAMPLE_HOURS).await?,
            scan_samples: prepare(cql::SCAN_SAMPLES).await?,
            insert_metric: prepare(cql::INSERT_METRIC).await?,
            insert_metric_name: prepare(cql::INSERT_METRIC_NAME).await?,
            select_metric_names: prepare(cql::SELECT_METRIC_NAMES).await?,
            scan_metrics: prepare(cql::SCAN_METRICS).await?,
            add_stored_bytes: prepare(cql::ADD_STORED_BYTES).await?,
            select_stored_bytes: prepare(cql::SELECT_STORED_BYTES).await?,
            select_stored_bytes_before: prepare(cql::SELECT_STORED_BYTES_BEFORE).await?,
            delete_sample_partition_written_before: prepare(
                cql::DELETE_SAMPLE_PARTITION_WRITTEN_BEFORE,
            )
            .await?,
            delete_sample_hour_written_before: prepare(cql::DELETE_SAMPLE_HOUR_WRITTEN_BEFORE)
                .await?,
            delete_sample_partition: prepare(cql::DELETE_SAMPLE_PARTITION).await?,
            delete_sample_hours_before: prepare(cql::DELETE_SAMPLE_HOURS_BEFORE).await?,
            delete_metric_partition: prepare(cql::DELETE_METRIC_PARTITION).await?,
            delete_metric_names_before: prepare(cql::DELETE_METRIC_NAMES_BEFORE).await?,
            select_stored_bytes_between: prepare(cql::SELECT_STORED_BYTES_BETWEEN).await?,
            insert_rollup: prepare(cql::INSERT_ROLLUP).await?,
            scan_rollup: prepare(cql::SCAN_ROLLUP).await?,
            delete_rollup: prepare(cql::DELETE_ROLLUP).await?,
            delete_rollup_partition: prepare(cql::DELETE_ROLLUP_PARTITION).await?,
            delete_rollups_before: prepare(cql::DELETE_ROLLUPS_BEFORE).await?,
            insert_rollup_hour: prepare(cql::INSERT_ROLLUP_HOUR).await?,
            select_rollup_hours: prepare(cql::SELECT_ROLLUP_HOURS).await?,
            delete_rollup_hour: prepare(cql::DELETE_ROLLUP_HOUR).await?,
            delete_rollup_hours_before: prepare(cql::DELETE_ROLLUP_HOURS_BEFORE).await?,
            upserts: four(upserts),
            selects: four(selects),
        })
    }

    fn upsert(&self, dict: Dict) -> &PreparedStatement {
        &self.upserts[dict as usize]
    }

    fn select(&self, dict: Dict) -> &PreparedStatement {
        &self.selects[dict as usize]
    }
}

impl ScyllaProfileStore {
    /// Connects to the keyspace `url` names (`scylla://host:port/keyspace`,
    /// see [`ScyllaUrl`]) and prepares every statement. Fails with
    /// [`StoreError::InvalidUrl`] for a bad URL, [`StoreError::Backend`]
    /// when no node answers or the keyspace was not migrated, and
    /// [`StoreError::IncompatibleSchema`] when a newer Kiln migrated it.
    pub async fn connect(url: &str) -> Result<ScyllaProfileStore, StoreError> {
        let url = ScyllaUrl::parse(url)?;
        let timestamps = Arc::new(MonotonicTimestampGenerator::new());
        let session = open_session(&url, Some(&url.keyspace), timestamps.clone()).await?;
        let not_migrated = |found| {
            StoreError::scylla(
                "connect",
                NotMigrated {
                    keyspace: url.keyspace.clone(),
                    found,
                },
            )
        };
        let Some((version, sample_shards)) = read_schema_row(&session).await? else {
            return Err(not_migrated(None));
        };
        check_version(version)?;
        if version < cql::SCHEMA_VERSION {
            // Its statements would not prepare (missing tables); say why.
            return Err(not_migrated(Some(version)));
        }
        if sample_shards < 1 {
            return Err(StoreError::Corrupt {
                what: "schema row",
                key: format!("{}.kiln_schema", url.keyspace),
                reason: DecodeError::OutOfRange {
                    field: "sample_shards",
                    value: sample_shards as u64,
                },
            });
        }
        let statements = Statements::prepare(&session).await?;
        tracing::debug!(url = %url.shown(), sample_shards, "connected to scylla");
        Ok(ScyllaProfileStore {
            inner: Arc::new(Inner {
                session,
                statements,
                timestamps,
                sample_shards,
                url,
            }),
        })
    }

    /// Creates the keyspace and its tables when missing (`kiln store
    /// migrate`), with the URL's replication factor, sample TTL and shard
    /// count (see [`ScyllaUrl`]). Safe to run again: existing tables and
    /// the recorded shard count are kept.
    pub async fn migrate(url: &str) -> Result<(), StoreError> {
        let url = ScyllaUrl::parse(url)?;
        let op = "migrate the schema";
        let timestamps = Arc::new(MonotonicTimestampGenerator::new());
        let session = open_session(&url, None, timestamps).await?;
        session
            .query_unpaged(
                cql::create_keyspace(&url.keyspace, url.replication_factor),
                (),
            )
            .await
            .map_err(|e| StoreError::scylla(op, e))?;
        session
            .use_keyspace(&url.keyspace, false)
            .await
            .map_err(|e| StoreError::scylla(op, e))?;
        // Whole seconds below 20 years (ScyllaUrl's bound): fits a u32.
        let ttl = url.sample_ttl.as_secs().min(u64::from(u32::MAX)) as u32;
        for table in cql::create_tables(ttl) {
            session
                .query_unpaged(table, ())
                .await
                .map_err(|e| StoreError::scylla(op, e))?;
        }
        match read_schema_row(&session).await? {
            None => {
                session
                    .query_unpaged(
                        cql::INIT_SCHEMA_ROW,
                        (cql::SCHEMA_VERSION, url.sample_shards),
                    )
                    .await
                    .map_err(|e| StoreError::scylla(op, e))?;
            }
            Some((version, shards)) => {
                check_version(version)?;
                if version < cql::SCHEMA_VERSION {
                    // The new tables exist now (created above); record
                    // the version, keeping the shard count.
                    session
                        .query_unpaged(cql::INIT_SCHEMA_ROW, (cql::SCHEMA_VERSION, shards))
                        .await
                        .map_err(|e| StoreError::scylla(op, e))?;
                }
                if shards != url.sample_shards {
                    tracing::warn!(
                        keyspace = %url.keyspace,
                        recorded = shards,
                        requested = url.sample_shards,
                        "the keyspace keeps the sample shard count of its first migration"
                    );
                }
            }
        }
        tracing::info!(url = %url.shown(), "migrated scylla schema");
        Ok(())
    }

    /// Partitions per project and hour that this keyspace uses.
    pub fn sample_shards(&self) -> i16 {
        self.inner.sample_shards
    }
}

impl fmt::Debug for ScyllaProfileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScyllaProfileStore")
            .field("url", &self.inner.url)
            .field("sample_shards", &self.inner.sample_shards)
            .finish_non_exhaustive()
    }
}

/// A session to the cluster, in `keyspace` when given: `LOCAL_QUORUM`
/// reads and writes, client-side monotonic timestamps from `timestamps`,
/// token-aware load balancing (the driver's default).
async fn open_session(
    url: &ScyllaUrl,
    keyspace: Option<&str>,
    timestamps: Arc<MonotonicTimestampGenerator>,
) -> Result<Session, StoreError> {
    let profile = ExecutionProfile::builder()
        .consistency(Consistency::LocalQuorum)
        .build();
    let mut builder = SessionBuilder::new()
        .known_nodes(&url.nodes)
        .connection_timeout(CONNECT_TIMEOUT)
        .default_execution_profile_handle(profile.into_handle())
        .timestamp_generator(timestamps);
    if let Some((user, password)) = &url.credentials {
        builder = builder.user(user, password);
    }
    if let Some(keyspace) = keyspace {
        builder = builder.use_keyspace(keyspace, false);
    }
    builder
        .build()
        .await
        .map_err(|e| StoreError::scylla("connect", e))
}

/// `(version, sample_shards)` from `kiln_schema`, `None` before the first
/// migration finished.
async fn read_schema_row(session: &Session) -> Result<Option<(i32, i16)>, StoreError> {
    let op = "read the schema version";
    let result = session
        .query_unpaged(cql::READ_SCHEMA_ROW, ())
        .await
        .map_err(|e| StoreError::scylla(op, e))?
        .into_rows_result()
        .map_err(|e| StoreError::scylla(op, e))?;
    let row = result
        .maybe_first_row::<(i32, i16)>()
        .map_err(|e| StoreError::scylla(op, e))?;
    Ok(row)
}

fn check_version(found: i32) -> Result<(), StoreError> {
    if found > cql::SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema {
            found,
            expected: cql::SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// The keyspace has no `kiln_schema` row yet, or an older version's.
#[derive(Debug, thiserror::Error)]
#[error(
    "keyspace {keyspace:?} is not migrated{}; run `kiln store migrate` first",
    found.map(|v| format!(" to schema version {} (it is at {v})", cql::SCHEMA_VERSION)).unwrap_or_default()
)]
struct NotMigrated {
    keyspace: String,
    /// The version it is at, when it has one.
    found: Option<i32>,
}
