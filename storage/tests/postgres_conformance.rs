//! The conformance suites against a real PostgreSQL server, and what only a
//! shared server can show: two clients (as two worker processes) seeing one
//! another's writes, and migrations that run again and race harmlessly.
//!
//! The server comes from `KILN_TEST_POSTGRES`, a URL such as the one
//! `scripts/pg-test-server.sh start DIR` prints. Without it every test here
//! says it was skipped and passes, so that `cargo test` works on a machine
//! without PostgreSQL. Every run uses fresh tenant names, so a database
//! kept between runs is fine.

use kiln_model::{LabelSetId, StackId};
use std::sync::Arc;

use kiln_storage::{
    LocalObjectStore, MetadataStore, PostgresMetadataStore, PostgresProfileStore, ProfileStore,
    Scope, SealedStore, StoredSample, conformance,
};

/// The server's URL, or `None` (after saying so) when tests should skip.
fn server() -> Option<String> {
    match std::env::var("KILN_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: KILN_TEST_POSTGRES not set (scripts/pg-test-server.sh start DIR)");
            None
        }
    }
}

/// A migrated store on the test server.
async fn store(url: &str) -> PostgresProfileStore {
    let store = PostgresProfileStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to KILN_TEST_POSTGRES: {e:?}"));
    store.migrate().await.expect("migrate");
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_profile_store_conforms() {
    let Some(url) = server() else { return };
    let store = store(&url).await;
    conformance::profile_store(&store).await;
    // A second run on the same database sees nothing of the first.
    conformance::profile_store(&store).await;
}

/// Sealing over PostgreSQL rows, as a distributed query node seals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_postgres_store_conforms() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let objects = Arc::new(LocalObjectStore::open(dir.path()).unwrap());
    let store = SealedStore::new(Arc::new(store(&url).await), objects);
    conformance::sealed_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_metadata_store_conforms() {
    let Some(url) = server() else { return };
    let profiles = store(&url).await;
    let metadata = PostgresMetadataStore::connect(&url).await.expect("connect");
    conformance::metadata_store(&metadata).await;
    // And through the profile store's own pool.
    conformance::metadata_store(&profiles.metadata()).await;
}

/// Guards "migrate is idempotent and safe to race": several processes'
/// workers start at once and each migrates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_are_harmless() {
    let Some(url) = server() else { return };
    let stores: Vec<PostgresProfileStore> = {
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(PostgresProfileStore::connect(&url).await.expect("connect"));
        }
        stores
    };
    let tasks: Vec<_> = stores
        .iter()
        .cloned()
        .map(|store| tokio::spawn(async move { store.migrate().await }))
        .collect();
    for task in tasks {
        task.await.expect("task").expect("concurrent migrate");
    }
    stores[0].migrate().await.expect("migrate again");
}

/// Two pools, as two worker processes: what one writes the other reads, and
/// a replay through the second replaces rather than adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_share_one_database() {
    let Some(url) = server() else { return };
    let (a, b) = (store(&url).await, store(&url).await);
    let tenant = format!("shared-{}", std::process::id());
    let scope = Scope::new(tenant, "p").unwrap();
    // Clear what an earlier run with the same process id left.
    let old = a.scan_samples(&scope, i64::MIN, i64::MAX).await.unwrap();
    let zeroed: Vec<_> = old
        .iter()
        .map(|s| StoredSample { count: 0, ..*s })
        .collect();
    a.put_samples(&scope, &zeroed).await.unwrap();

    let samples: Vec<StoredSample> = (0..1000)
        .map(|i| StoredSample {
            timestamp_ns: 1_700_000_000_000_000_000 + i * 1_000_000,
            stack: StackId(i as u128 % 7),
            labels: LabelSetId(1),
            count: 1,
            period_ns: 10_101_010,
        })
        .collect();
    a.put_samples(&scope, &samples).await.unwrap();
    b.put_samples(&scope, &samples).await.unwrap();
    let total: u64 = b
        .scan_samples(&scope, i64::MIN, i64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|s| s.count)
        .sum();
    assert_eq!(total, 1000, "a replay through a second client added counts");
}

/// Guards "rows are written in key order": writers whose batches overlap
/// (a replay racing the original, two workers after a rebalance) lock rows
/// in the same order, so PostgreSQL never has to abort one for a deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_concurrent_writers_do_not_deadlock() {
    let Some(url) = server() else { return };
    let store = store(&url).await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let scope = Scope::new(format!("race-{nanos}"), "p").unwrap();
    let samples: Vec<StoredSample> = (0..20_000)
        .map(|i| StoredSample {
            timestamp_ns: 1_700_000_000_000_000_000 + (i / 10) * 1_000,
            stack: StackId(i as u128),
            labels: LabelSetId(1),
            count: 1,
            period_ns: 10_101_010,
        })
        .collect();
    // Each writer sends the rows in its own order, in calls big enough to
    // take several statements (one transaction) each.
    let tasks: Vec<_> = (0..4)
        .map(|w| {
            let (store, scope) = (store.clone(), scope.clone());
            let mut rows = samples.clone();
            rows.rotate_left(w * 5_000);
            if w % 2 == 1 {
                rows.reverse();
            }
            tokio::spawn(async move { store.put_samples(&scope, &rows).await })
        })
        .collect();
    for task in tasks {
        task.await
            .expect("task")
            .expect("concurrent overlapping write");
    }
    let back = store
        .scan_samples(&scope, i64::MIN, i64::MAX)
        .await
        .unwrap();
    assert_eq!(back.len(), samples.len());
    assert_eq!(back.iter().map(|s| s.count).sum::<u64>(), 20_000);
}

/// The stores work behind `dyn`, as the server holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stores_work_behind_dyn() {
    let Some(url) = server() else { return };
    let store = store(&url).await;
    let profiles: std::sync::Arc<dyn ProfileStore> = std::sync::Arc::new(store.clone());
    let metadata: std::sync::Arc<dyn MetadataStore> = std::sync::Arc::new(store.metadata());
    let tenant = format!("dyn-{}", std::process::id());
    assert_eq!(profiles.get_frames(&tenant, &[]).await.unwrap(), vec![]);
    assert_eq!(metadata.verify_api_key("kiln_nope").await.unwrap(), None);
}
