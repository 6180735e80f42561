//! The PostgreSQL stores: [`PostgresProfileStore`] (samples and
//! dictionaries, for small and medium deployments and for tests that need
//! one store shared by several processes) and [`PostgresMetadataStore`]
//! (tenants, projects, API keys, symbol status), on one connection pool.
//!
//! All SQL, and why the schema is what it is, lives in [`schema`]; the
//! trait implementations are in `profile` and `metadata`.

mod arrays;
mod metadata;
mod profile;
mod schema;

use std::fmt;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

use crate::error::StoreError;

/// The driver's error type, named for the helpers' signatures.
type PgError = tokio_postgres::Error;

/// How long a caller waits for a free connection before the operation
/// fails, rather than hanging while the server is down or the pool is
/// exhausted.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection pool to one database, shared by both stores.
#[derive(Clone)]
struct Db {
    pool: Pool,
    /// The URL with any password hidden, for `Debug` and logs.
    url: String,
}

impl Db {
    /// Builds the pool and opens one connection, so that a wrong host,
    /// database or credential fails here, naming the problem, rather than
    /// at the first write.
    async fn connect(url: &str) -> Result<Db, StoreError> {
        let shown = redact(url);
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: PgError| StoreError::InvalidUrl {
                url: shown.clone(),
                source: Box::new(e),
            })?;
        if config.get_application_name().is_none() {
            // Shows as the client in pg_stat_activity.
            config.application_name("kiln");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            // A connection the server closed is noticed (`is_closed`) and
            // replaced; Fast skips a test query on every checkout.
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::postgres("build the connection pool", e))?;
        let db = Db { pool, url: shown };
        db.check_schema_version().await?;
        tracing::debug!(url = %db.url, "connected to postgres");
        Ok(db)
    }

    /// A pooled connection.
    async fn client(&self, op: &'static str) -> Result<Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::postgres(op, e))
    }

    /// Refuses a database that a newer Kiln migrated. An older or empty
    /// one is fine: `migrate` brings it up to date, and until then
    /// operations fail naming the missing table.
    async fn check_schema_version(&self) -> Result<(), StoreError> {
        let client = self.client("connect").await?;
        let op = "read the schema version";
        let exists: bool = client
            .query_one(schema::VERSION_TABLE_EXISTS, &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| StoreError::postgres(op, e))?;
        if !exists {
            return Ok(());
        }
        let found = read_version(&client, op).await?;
        let expected = latest_version();
        if found > expected {
            return Err(StoreError::IncompatibleSchema { found, expected });
        }
        if found < expected {
            tracing::warn!(found, expected, url = %self.url, "postgres schema is not migrated yet");
        }
        Ok(())
    }

    /// Creates or upgrades the schema; see [`schema`]'s "Migrations".
    async fn migrate(&self) -> Result<(), StoreError> {
        let op = "migrate the schema";
        let pg = |e| StoreError::postgres(op, e);
        let mut client = self.client(op).await?;
        let tx = client.transaction().await.map_err(pg)?;
        tx.execute(schema::LOCK_MIGRATIONS, &[&schema::MIGRATION_LOCK])
            .await
            .map_err(pg)?;
        tx.batch_execute(schema::CREATE_VERSION_TABLE)
            .await
            .map_err(pg)?;
        let found = read_version(&tx, op).await?;
        let expected = latest_version();
        if found > expected {
            return Err(StoreError::IncompatibleSchema { found, expected });
        }
        // `found` is in 0..=expected here, so the slice is in bounds.
        let missing = schema::MIGRATIONS
            .get(usize::try_from(found).unwrap_or(0)..)
            .unwrap_or_default();
        for step in missing {
            tx.batch_execute(step).await.map_err(pg)?;
        }
        tx.execute(schema::WRITE_VERSION, &[&expected])
            .await
            .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        if found < expected {
            tracing::info!(from = found, to = expected, url = %self.url, "migrated postgres schema");
        }
        Ok(())
    }

    /// Runs `sql` once per parameter set: one statement alone, several in
    /// one transaction so that a call's rows are written all or none, as
    /// the embedded store's batches are. The statement is prepared once per
    /// connection (deadpool's statement cache).
    async fn execute_batches(
        &self,
        op: &'static str,
        sql: &'static str,
        batches: Vec<Params>,
    ) -> Result<(), StoreError> {
        let steps = batches.into_iter().map(|params| (sql, params)).collect();
        self.execute_steps(op, steps).await
    }

    /// Runs each `(sql, params)` in order: one alone, several in one
    /// transaction (all or none), as [`execute_batches`](Self::execute_batches).
    async fn execute_steps(
        &self,
        op: &'static str,
        steps: Vec<(&'static str, Params)>,
    ) -> Result<(), StoreError> {
        let pg = |e| StoreError::postgres(op, e);
        let mut client = self.client(op).await?;
        if let [(sql, params)] = steps.as_slice() {
            let statement = client.prepare_cached(sql).await.map_err(pg)?;
            client
                .execute(&statement, &refs(params))
                .await
                .map_err(pg)?;
            return Ok(());
        }
        let tx = client.transaction().await.map_err(pg)?;
        for (sql, params) in &steps {
            let statement = tx.prepare_cached(sql).await.map_err(pg)?;
            tx.execute(&statement, &refs(params)).await.map_err(pg)?;
        }
        tx.commit().await.map_err(pg)
    }
}

/// One statement's parameters, owned so that they can be built before the
/// connection is taken from the pool.
type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// The parameter list the driver takes.
fn refs(params: &Params) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// The newest schema version this build knows.
fn latest_version() -> i32 {
    // A handful of entries; the cast cannot truncate.
    schema::MIGRATIONS.len() as i32
}

/// The recorded schema version, 0 before the first migration.
async fn read_version(client: &impl GenericClient, op: &'static str) -> Result<i32, StoreError> {
    let row = client
        .query_opt(schema::READ_VERSION, &[])
        .await
        .map_err(|e| StoreError::postgres(op, e))?;
    row.map_or(Ok(0), |row| row.try_get(0))
        .map_err(|e| StoreError::postgres(op, e))
}

/// `url` with its password replaced by `***`, in both the URL form
/// (`postgres://user:secret@host`) and the key-value form
/// (`password=secret`).
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        // The user info ends at the last '@' before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            let userinfo = &rest[..at];
            if let Some((user, _password)) = userinfo.split_once(':') {
                return format!("{scheme}://{user}:***{}", &rest[at..]);
            }
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A [`ProfileStore`](crate::ProfileStore) in a PostgreSQL database: the
/// `samples`, `frames`, `stacks`, `labelsets`, `executables`, `metrics`
/// and `metric_names` tables
/// (`storage/src/postgres/schema.rs` holds every statement and the
/// reasoning behind the schema).
///
/// Cloning is cheap and shares the connection pool. Every write is a
/// committed transaction when it returns, so [`sync`] has nothing left to
/// do (see there).
///
/// [`sync`]: crate::ProfileStore::sync
///
/// # Examples
///
/// ```no_run
/// use kiln_storage::{PostgresProfileStore, ProfileStore, Scope};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kiln_storage::StoreError> {
/// // Needs a server: scripts/pg-test-server.sh start DIR prints such a URL.
/// let store = PostgresProfileStore::connect("postgres://kiln@127.0.0.1:15432/kiln_test").await?;
/// store.migrate().await?;
/// let scope = Scope::new("acme", "web")?;
/// let samples = store.scan_samples(&scope, 0, i64::MAX).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresProfileStore {
    db: Db,
}

impl PostgresProfileStore {
    /// Connects to the database at `url` (`postgres://user[:password]@host
    /// [:port]/database`, or libpq's `key=value` form). Fails with
    /// [`StoreError::InvalidUrl`] when the URL does not parse,
    /// [`StoreError::Backend`] when no connection can be made, and
    /// [`StoreError::IncompatibleSchema`] when a newer Kiln migrated the
    /// database. TLS is not supported yet.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresProfileStore {
            db: Db::connect(url).await?,
        })
    }

    /// Creates the tables, or brings an older schema up to date; safe to
    /// run again and from several processes at once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.db.migrate().await
    }

    /// The metadata store of the same database, on the same pool.
    pub fn metadata(&self) -> PostgresMetadataStore {
        PostgresMetadataStore {
            db: self.db.clone(),
        }
    }
}

impl fmt::Debug for PostgresProfileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresProfileStore")
            .field("url", &self.db.url)
            .finish_non_exhaustive()
    }
}

/// A [`MetadataStore`](crate::MetadataStore) in a PostgreSQL database: the
/// `tenants`, `projects`, `api_keys` and `tenant_limits` tables.
#[derive(Clone)]
pub struct PostgresMetadataStore {
    db: Db,
}

impl PostgresMetadataStore {
    /// Connects as [`PostgresProfileStore::connect`] does.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresMetadataStore {
            db: Db::connect(url).await?,
        })
    }

    /// Creates or upgrades the schema, as
    /// [`PostgresProfileStore::migrate`] does (it is one schema).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.db.migrate().await
    }
}

impl fmt::Debug for PostgresMetadataStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresMetadataStore")
            .field("url", &self.db.url)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards that a password never reaches an error message or a log.
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://kiln:s3cr@t@db:5432/kiln"),
            "postgres://kiln:***@db:5432/kiln"
        );
        assert_eq!(
            redact("postgres://kiln@127.0.0.1:1/kiln_test"),
            "postgres://kiln@127.0.0.1:1/kiln_test"
        );
        assert_eq!(
            redact("host=db user=kiln password=hunter2 dbname=k"),
            "host=db user=kiln password=*** dbname=k"
        );
    }

    #[tokio::test]
    async fn a_bad_url_is_named_without_its_password() {
        let err = PostgresProfileStore::connect("postgres://u:pw@host:notaport/db")
            .await
            .unwrap_err();
        match &err {
            StoreError::InvalidUrl { url, .. } => {
                assert_eq!(url, "postgres://u:***@host:notaport/db");
            }
            other => panic!("{other:?}"),
        }
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    /// A schema of its own on the `KILN_TEST_POSTGRES` server (through
    /// `search_path`), dropped at the end, and a connection to administer
    /// it; `None` when the variable is unset.
    async fn private_schema() -> Option<(String, String, tokio_postgres::Client)> {
        let Ok(url) = std::env::var("KILN_TEST_POSTGRES") else {
            eprintln!("skipped: KILN_TEST_POSTGRES not set (scripts/pg-test-server.sh start DIR)");
            return None;
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let schema = format!("kiln_test_{}_{nanos}", std::process::id());
        let (admin, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
        let separator = if url.contains('?') { '&' } else { '?' };
        let scoped = format!("{url}{separator}options=-c%20search_path%3D{schema}");
        Some((schema, scoped, admin))
    }

    /// Guards the migration path: an empty database is migrated from
    /// scratch, again harmlessly, and a newer schema is refused at connect
    /// and at migrate rather than misread.
    #[tokio::test]
    async fn migrations_start_from_nothing_and_refuse_newer_schemas() {
        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        let db = Db::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        db.migrate().await.unwrap();
        let tables: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
                &[&schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            tables, 15,
            "kiln_schema, the eight tables of version 1, the two of version 2, the one of version 3, \
             the one of version 4 and the two of version 5"
        );

        admin
            .batch_execute(&format!("UPDATE {schema}.kiln_schema SET version = 99"))
            .await
            .unwrap();
        let expected = latest_version();
        match Db::connect(&url).await {
            Err(StoreError::IncompatibleSchema {
                found: 99,
                expected: e,
            }) if e == expected => {}
            other => panic!("connect to a newer schema: {:?}", other.map(|db| db.url)),
        }
        match db.migrate().await {
            Err(StoreError::IncompatibleSchema { found: 99, .. }) => {}
            other => panic!("migrate a newer schema: {other:?}"),
        }
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// Guards the sealing delete against the planner: with the statistics
    /// of a table that holds many rows of other tenants and none yet of
    /// this one (as before autovacuum has seen a new tenant's load), a
    /// join of the keys with `samples` was planned as a scan of the
    /// tenant's rows once per key (`fleet_bench` sealed for 12 minutes).
    /// The delete must probe the primary key once per key and delete by
    /// `ctid`, whatever the statistics.
    #[tokio::test]
    async fn the_sealing_delete_probes_each_key_whatever_the_statistics() {
        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        let db = Db::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        admin
            .batch_execute(&format!(
                "SET search_path = {schema};
                 INSERT INTO samples
                 SELECT 'busy', 'p', 0, 0, i, gen_random_uuid(), gen_random_uuid(), 1, 1
                 FROM generate_series(1, 50000) AS i;
                 ANALYZE samples;"
            ))
            .await
            .unwrap();
        let ids: Vec<uuid::Uuid> = (0..1000u128).map(uuid::Uuid::from_u128).collect();
        let numbers: Vec<i64> = (0..1000).collect();
        let plan: Vec<String> = admin
            .query(
                &format!("EXPLAIN {}", schema::DELETE_SAMPLES),
                &[
                    &"new-tenant",
                    &"p",
                    &schema::SHARD,
                    &numbers,
                    &numbers,
                    &ids,
                    &ids,
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let plan = plan.join("\n");
        let probe = plan
            .lines()
            .position(|l| l.contains("Index Cond") && l.contains("labelset_id = k.labelset_id"));
        assert!(probe.is_some(), "no probe of the whole key:\n{plan}");
        assert!(plan.contains("Tid Scan"), "not deleted by ctid:\n{plan}");
        assert!(
            !plan.contains("Join Filter"),
            "keys compared outside the index:\n{plan}"
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// Guards the upgrade of a database an older Kiln migrated: a database
    /// at version 1 (no metric tables) gains them, its rows kept.
    #[tokio::test]
    async fn a_version_1_database_is_upgraded() {
        use crate::ProfileStore;
        use kiln_model::{LabelSetId, MetricPoint};

        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        admin
            .batch_execute(&format!(
                "SET search_path = {schema}; {}; {}",
                schema::CREATE_VERSION_TABLE,
                schema::MIGRATIONS[0]
            ))
            .await
            .unwrap();
        admin
            .execute(
                &format!("INSERT INTO {schema}.kiln_schema (version) VALUES (1)"),
                &[],
            )
            .await
            .unwrap();
        let store = PostgresProfileStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let version: i32 = admin
            .query_one(&format!("SELECT version FROM {schema}.kiln_schema"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, latest_version());
        let scope = crate::Scope::new("t", "p").unwrap();
        let point = MetricPoint {
            name: "gpu.power_watts".into(),
            labels: LabelSetId(1),
            timestamp_ns: 5,
            value: 250.5,
        };
        store.put_metric_points(&scope, &[point]).await.unwrap();
        assert_eq!(
            store.metric_names(&scope, 0, 10).await.unwrap(),
            ["gpu.power_watts"]
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// Guards migration V4's count of what was stored before it: a
    /// version-3 database's samples and metric points are in
    /// `stored_bytes` after the upgrade, at the sizes writes count.
    #[tokio::test]
    async fn a_version_3_database_counts_its_stored_bytes() {
        use crate::ProfileStore;

        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        admin
            .batch_execute(&format!(
                "SET search_path = {schema}; {}; {}; {}; {};
                 INSERT INTO kiln_schema (version) VALUES (3);
                 INSERT INTO samples VALUES
                     ('t', 'p', 1, 0, 3600000000001, gen_random_uuid(), gen_random_uuid(), 1, 1),
                     ('t', 'p', 2, 0, 7200000000001, gen_random_uuid(), gen_random_uuid(), 1, 1);
                 INSERT INTO metrics VALUES
                     ('t', 'p', 'gpu.power', 1, 3600000000002, gen_random_uuid(), 1.0);",
                schema::CREATE_VERSION_TABLE,
                schema::MIGRATIONS[0],
                schema::MIGRATIONS[1],
                schema::MIGRATIONS[2],
            ))
            .await
            .unwrap();
        let store = PostgresProfileStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let scope = crate::Scope::new("t", "p").unwrap();
        assert_eq!(
            store.stored_bytes("t").await.unwrap(),
            2 * crate::sample_row_bytes(&scope) + crate::metric_row_bytes(&scope, "gpu.power")
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// Guards migration V5: a version-4 database gains the rollup tables
    /// (hours and days apart), and the usage it already counted is the
    /// version of its hours.
    #[tokio::test]
    async fn a_version_4_database_gains_rollups() {
        use crate::ProfileStore;
        use crate::rollup::{HourVersion, Resolution, RollupRow};
        use kiln_model::{LabelSetId, StackId};

        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        admin
            .batch_execute(&format!(
                "SET search_path = {schema}; {}; {}; {}; {}; {};
                 INSERT INTO kiln_schema (version) VALUES (4);
                 INSERT INTO stored_bytes VALUES ('t', 'p', 1, 70);",
                schema::CREATE_VERSION_TABLE,
                schema::MIGRATIONS[0],
                schema::MIGRATIONS[1],
                schema::MIGRATIONS[2],
                schema::MIGRATIONS[3],
            ))
            .await
            .unwrap();
        let store = PostgresProfileStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let scope = crate::Scope::new("t", "p").unwrap();
        let hour = HourVersion {
            hour: 1,
            version: 70,
        };
        assert_eq!(
            store.hour_versions(&scope, 0, i64::MAX).await.unwrap(),
            [hour]
        );
        let row = RollupRow {
            stack: StackId(1),
            labels: LabelSetId(2),
            period_ns: 3,
            count: 4,
        };
        store
            .put_rollup(&scope, Resolution::Hour, 1, 70, &[row])
            .await
            .unwrap();
        store
            .put_rollup(&scope, Resolution::Day, 0, 70, &[])
            .await
            .unwrap();
        assert_eq!(
            store
                .scan_rollup(&scope, Resolution::Hour, 1)
                .await
                .unwrap(),
            [row]
        );
        assert_eq!(
            store
                .rollup_versions(&scope, Resolution::Hour, 0, i64::MAX)
                .await
                .unwrap(),
            [hour]
        );
        assert_eq!(
            store
                .rollup_versions(&scope, Resolution::Day, 0, i64::MAX)
                .await
                .unwrap(),
            [HourVersion {
                hour: 0,
                version: 70
            }]
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// Damaged bytes in the database surface as `Corrupt`, naming the row,
    /// never as a panic.
    #[tokio::test]
    async fn corrupt_rows_are_errors_not_panics() {
        use crate::ProfileStore;
        use kiln_model::FrameId;

        let Some((schema, url, admin)) = private_schema().await else {
            return;
        };
        let store = PostgresProfileStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        admin
            .batch_execute(&format!(
                "INSERT INTO {schema}.frames VALUES ('t', '00000000-0000-0000-0000-000000000abc', '\\x010063');"
            ))
            .await
            .unwrap();
        match store.get_frames("t", &[FrameId(0xabc)]).await {
            Err(StoreError::Corrupt {
                what: "frame", key, ..
            }) => {
                assert_eq!(key, format!("t/{:032x}", 0xabc));
            }
            other => panic!("{other:?}"),
        }
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_backend_error() {
        // Port 1 on loopback: nothing listens, the connection is refused.
        let err = PostgresProfileStore::connect("postgres://kiln@127.0.0.1:1/kiln")
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Backend {
                    backend: "postgres",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
