//! The conformance suites against the embedded implementations, and what
//! only a local store can show: data surviving a reopen.

use bytes::Bytes;
use kiln_model::{Frame, FrameEntry, FrameKind, LabelSetId, StackId};
use std::sync::Arc;

use kiln_storage::{
    EmbeddedProfileStore, LocalObjectStore, ObjectKey, ObjectStore, ProfileStore, Scope,
    SealedStore, StoredFrame, StoredSample, conformance,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_profile_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedProfileStore::open(dir.path()).unwrap();
    conformance::profile_store(&store).await;
}

/// Sealing, over the embedded store and local objects (`kiln up`): the
/// whole profile suite through the sealed store, then the sealing suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_embedded_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let rows = Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles")).unwrap());
    let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects")).unwrap());
    let store = SealedStore::new(rows, objects);
    conformance::profile_store(&store).await;
    conformance::sealed_store(&store).await;
}

/// Running the suite twice on one store shows that its runs do not see each
/// other's data (as against a shared ScyllaDB cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_runs_do_not_interfere() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedProfileStore::open(dir.path()).unwrap();
    conformance::profile_store(&store).await;
    conformance::profile_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_object_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalObjectStore::open(dir.path()).unwrap();
    conformance::object_store(&store).await;
    // And again on the same root, as a second run against a shared bucket.
    conformance::object_store(&store).await;
}

/// Guards "data survives drop and reopen": everything written and synced is
/// read back by a fresh store on the same directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_profile_store_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let scope = Scope::new("acme", "web").unwrap();
    let frame = Frame::named(FrameKind::Native, "main");
    let entry = StoredFrame::from(FrameEntry {
        id: frame.id(),
        frame,
    });
    let samples: Vec<StoredSample> = (0..1000)
        .map(|i| StoredSample {
            timestamp_ns: -500 + i,
            stack: StackId(i as u128),
            labels: LabelSetId(7),
            count: i as u64,
            period_ns: 10_101_010,
        })
        .collect();
    {
        let store = EmbeddedProfileStore::open(dir.path()).unwrap();
        store
            .put_frames("acme", std::slice::from_ref(&entry))
            .await
            .unwrap();
        store.put_samples(&scope, &samples).await.unwrap();
        store.sync().await.unwrap();
    }
    let store = EmbeddedProfileStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get_frames("acme", &[entry.id]).await.unwrap(),
        vec![Some(entry)]
    );
    assert_eq!(
        store
            .scan_samples(&scope, i64::MIN, i64::MAX)
            .await
            .unwrap(),
        samples
    );
    // The reopened store takes writes, and they survive too.
    store.put_samples(&scope, &samples[..1]).await.unwrap();
    drop(store);
    let store = EmbeddedProfileStore::open(dir.path()).unwrap();
    assert_eq!(
        store.scan_samples(&scope, -500, -499).await.unwrap(),
        samples[..1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_object_store_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let key = ObjectKey::new("tenants/acme/x.ksym").unwrap();
    LocalObjectStore::open(dir.path())
        .unwrap()
        .put(&key, Bytes::from_static(b"symbols"))
        .await
        .unwrap();
    let store = LocalObjectStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().as_deref(),
        Some(&b"symbols"[..])
    );
}

/// The traits stay object-safe: callers hold them behind `Arc<dyn …>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_work_behind_dyn() {
    let dir = tempfile::tempdir().unwrap();
    let profiles: std::sync::Arc<dyn ProfileStore> =
        std::sync::Arc::new(EmbeddedProfileStore::open(&dir.path().join("p")).unwrap());
    let objects: std::sync::Arc<dyn ObjectStore> =
        std::sync::Arc::new(LocalObjectStore::open(&dir.path().join("o")).unwrap());
    conformance::profile_store(profiles.as_ref()).await;
    conformance::object_store(objects.as_ref()).await;
}
