//! The profile-store conformance suite against a real ScyllaDB node, and
//! what only a shared cluster shows: two sessions (as two worker
//! processes) seeing one another's writes, replays that replace rather
//! than add, and migrations that run again harmlessly.
//!
//! The node comes from `KILN_TEST_SCYLLA` (`host:port`, or a whole
//! `scylla://host:port/keyspace` URL); without it every test here says it
//! was skipped and passes. ScyllaDB cannot be installed on Kiln's CI
//! machines, so `scripts/test.sh` runs these tests against Apache
//! Cassandra 5.0 (the same CQL for the plain tables the store uses),
//! fetched from Maven Central and started by
//! `scripts/cassandra-test-server.sh`:
//!
//! ```text
//! export KILN_TEST_SCYLLA="$(scripts/cassandra-test-server.sh start /tmp/kiln-cassandra)"
//! cargo test -p kiln-storage --test scylla_conformance
//! scripts/cassandra-test-server.sh stop /tmp/kiln-cassandra
//! ```
//!
//! Against ScyllaDB itself, on a machine with Docker:
//!
//! ```text
//! docker run --rm -p 9042:9042 scylladb/scylla --smp 1
//! KILN_TEST_SCYLLA=127.0.0.1:9042 cargo test -p kiln-storage --test scylla_conformance
//! ```
//!
//! Tests use the keyspace `kiln_test` (replication factor 1, 4 sample
//! shards so that scans visit several partitions) and fresh tenant names
//! on every run, so a node kept between runs is fine.

use std::sync::Arc;

use kiln_model::{LabelSetId, StackId};
use kiln_storage::{
    LocalObjectStore, ProfileStore, Scope, ScyllaProfileStore, SealedStore, StoredSample,
    conformance,
};

/// The test keyspace's URL, or `None` (after saying so) when tests should
/// skip.
fn server() -> Option<String> {
    match std::env::var("KILN_TEST_SCYLLA") {
        Ok(url) if url.starts_with("scylla://") => Some(url),
        Ok(node) if !node.is_empty() => Some(format!(
            "scylla://{node}/kiln_test?replication_factor=1&sample_shards=4"
        )),
        _ => {
            eprintln!(
                "skipped: KILN_TEST_SCYLLA not set (export KILN_TEST_SCYLLA=\"$(scripts/\
                 cassandra-test-server.sh start /tmp/kiln-cassandra)\", or name a ScyllaDB \
                 node: docker run --rm -p 9042:9042 scylladb/scylla --smp 1, then \
                 KILN_TEST_SCYLLA=127.0.0.1:9042)"
            );
            None
        }
    }
}

/// A store on a migrated test keyspace.
async fn store(url: &str) -> ScyllaProfileStore {
    ScyllaProfileStore::migrate(url)
        .await
        .unwrap_or_else(|e| panic!("migrate KILN_TEST_SCYLLA: {e:?}"));
    ScyllaProfileStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to KILN_TEST_SCYLLA: {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_profile_store_conforms() {
    let Some(url) = server() else { return };
    let store = store(&url).await;
    conformance::profile_store(&store).await;
    // A second run on the same keyspace sees nothing of the first.
    conformance::profile_store(&store).await;
}

/// Migrating again keeps the tables, their rows and the recorded shard
/// count, even when the URL asks for another.
/// Sealing over ScyllaDB (or Cassandra) rows: deletes by key, and an
/// hour index that keeps the hours it listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_scylla_store_conforms() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let objects = Arc::new(LocalObjectStore::open(dir.path()).unwrap());
    // No write margin: the suite seals what it has just written, and
    // ScyllaDB deletes a sealed hour by write time.
    let store = SealedStore::new(Arc::new(store(&url).await), objects)
        .with_write_margin(std::time::Duration::ZERO);
    conformance::sealed_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_again_is_harmless() {
    let Some(url) = server() else { return };
    let first = store(&url).await;
    let shards = first.sample_shards();
    // A later option overrides an earlier one of the same name.
    let separator = if url.contains('?') { '&' } else { '?' };
    let other_shards = format!("{url}{separator}sample_shards=7");
    ScyllaProfileStore::migrate(&other_shards).await.unwrap();
    let again = ScyllaProfileStore::connect(&url).await.unwrap();
    assert_eq!(again.sample_shards(), shards);
}

/// Two sessions, as two worker processes: what one writes the other
/// reads, and a replay through the second replaces rather than adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_share_one_keyspace() {
    let Some(url) = server() else { return };
    let (a, b) = (store(&url).await, store(&url).await);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let scope = Scope::new(format!("shared-{nanos}"), "p").unwrap();
    let samples: Vec<StoredSample> = (0..1000)
        .map(|i| StoredSample {
            timestamp_ns: 1_700_000_000_000_000_000 + i * 10_000_000_000,
            stack: StackId(i as u128 % 7 * 0x1234_5678_9abc_def1),
            labels: LabelSetId(1),
            count: 1,
            period_ns: 10_101_010,
        })
        .collect();
    a.put_samples(&scope, &samples).await.unwrap();
    b.put_samples(&scope, &samples).await.unwrap();
    let back = b.scan_samples(&scope, i64::MIN, i64::MAX).await.unwrap();
    assert_eq!(back.len(), samples.len());
    assert_eq!(
        back.iter().map(|s| s.count).sum::<u64>(),
        1000,
        "a replay through a second session added counts"
    );
}

/// A keyspace that was never migrated is named in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_keyspace_is_refused() {
    let Some(url) = server() else { return };
    let node = url
        .trim_start_matches("scylla://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let err = ScyllaProfileStore::connect(&format!("scylla://{node}/kiln_never_migrated"))
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("kiln_never_migrated"),
        "{err:?}"
    );
}

/// The store works behind `dyn`, as the server holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_store_works_behind_dyn() {
    let Some(url) = server() else { return };
    let profiles: std::sync::Arc<dyn ProfileStore> = std::sync::Arc::new(store(&url).await);
    assert_eq!(profiles.get_frames("nobody", &[]).await.unwrap(), vec![]);
}
