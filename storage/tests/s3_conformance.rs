//! The object-store conformance suite against a real S3 server, and what
//! only S3 shows: multipart uploads of objects above the part size, and
//! errors that name the bucket and key.
//!
//! The server comes from `KILN_TEST_S3` (an `s3://bucket?endpoint=…` URL)
//! with `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, as
//! `scripts/s3-test-server.sh start DIR` prints them (Garage on
//! 127.0.0.1). Without it every test here says it was skipped and passes,
//! so that `cargo test` works on a machine without an S3 server. Every run
//! writes under fresh key prefixes, so a bucket kept between runs is fine.

use std::sync::Arc;

use bytes::Bytes;
use kiln_storage::{
    EmbeddedProfileStore, ObjectKey, ObjectStore, S3_PART_SIZE, S3ObjectStore, SealedStore,
    StoreError, conformance,
};

/// The store at `KILN_TEST_S3`, or `None` (after saying so) when tests
/// should skip.
fn store() -> Option<S3ObjectStore> {
    match std::env::var("KILN_TEST_S3") {
        Ok(url) if !url.is_empty() => Some(
            S3ObjectStore::from_url(&url).unwrap_or_else(|e| panic!("KILN_TEST_S3={url:?}: {e:?}")),
        ),
        _ => {
            eprintln!(
                "skipped: KILN_TEST_S3 not set \
                 (eval \"$(scripts/s3-test-server.sh start /tmp/kiln-s3)\")"
            );
            None
        }
    }
}

/// A key no other run uses.
fn fresh_key(name: &str) -> ObjectKey {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    ObjectKey::new(&format!("s3-test/{}-{nanos}/{name}", std::process::id())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_object_store_conforms() {
    let Some(store) = store() else { return };
    store.check().await.expect("connection check");
    conformance::object_store(&store).await;
}

/// Sealed hours in S3, as a deployment keeps them: the segments' keys,
/// listing and deletes against a real S3 server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_in_s3_conform() {
    let Some(objects) = store() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rows = Arc::new(EmbeddedProfileStore::open(dir.path()).unwrap());
    let store = SealedStore::new(rows, Arc::new(objects));
    conformance::sealed_store(&store).await;
}

/// Objects above the part size go up as multipart uploads (the ETag S3
/// gives a multipart object ends in `-<parts>`) and come back byte for
/// byte, including one that is an exact multiple of the part size (the
/// last read of the body is then empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_go_up_in_parts_and_come_back_whole() {
    let Some(store) = store() else { return };
    let bucket = s3_bucket();
    for (name, len, parts) in [
        ("three-parts", 2 * S3_PART_SIZE + 12_345, 3),
        ("exactly-two-parts", 2 * S3_PART_SIZE, 2),
        ("just-below", S3_PART_SIZE - 1, 1),
    ] {
        let key = fresh_key(name);
        // Differs at every offset of a small period and between parts, so
        // a misplaced or repeated part shows.
        let bytes: Vec<u8> = (0..len)
            .map(|i| (i % 253) as u8 ^ (i / S3_PART_SIZE) as u8)
            .collect();
        store.put(&key, Bytes::from(bytes.clone())).await.unwrap();
        let (head, status) = bucket.head_object(key.as_str()).await.unwrap();
        assert_eq!(status, 200);
        let etag = head.e_tag.unwrap_or_default();
        let multipart_suffix = format!("-{parts}\"");
        if parts > 1 {
            assert!(etag.ends_with(&multipart_suffix), "{name}: etag {etag}");
        } else {
            assert!(!etag.contains('-'), "{name}: etag {etag}");
        }
        let got = store.get(&key).await.unwrap().expect("object after put");
        assert_eq!(got.len(), len, "{name}");
        assert!(got == bytes, "{name}: the object came back changed");
        store.delete(&key).await.unwrap();
        assert!(!store.exists(&key).await.unwrap());
    }
}

/// A bucket that does not exist, or a wrong secret, fails with an error
/// that names the bucket, the key and the server's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_bucket_the_key_and_the_reason() {
    let Some(_) = store() else { return };
    let url = std::env::var("KILN_TEST_S3").unwrap();
    let mut missing = kiln_storage::S3Config::from_url(&url).unwrap();
    missing.bucket = "no-such-bucket-kiln".into();
    let store = S3ObjectStore::new(missing).unwrap();
    let key = ObjectKey::new("global/x.ksym").unwrap();
    let err = store.put(&key, Bytes::from_static(b"x")).await.unwrap_err();
    let StoreError::ObjectRequest { bucket, key: k, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (bucket.as_str(), k.as_str()),
        ("no-such-bucket-kiln", "global/x.ksym")
    );
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        cause.contains("404") || cause.contains("NoSuchBucket"),
        "{cause}"
    );
    assert!(store.check().await.is_err());
    // A missing bucket is an error, not an absent object.
    let err = store.get(&key).await.unwrap_err();
    assert!(format!("{err:?}").contains("NoSuchBucket"), "{err:?}");

    let wrong_secret = kiln_storage::S3Config::from_url_and_env(&url, |name| match name {
        "AWS_SECRET_ACCESS_KEY" => Some("0".repeat(64)),
        other => std::env::var(other).ok(),
    })
    .unwrap();
    let store = S3ObjectStore::new(wrong_secret).unwrap();
    let err = store.get(&key).await.unwrap_err();
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("403"), "{err}: {cause}");
}

/// The raw client on the test bucket, for what the store does not expose
/// (ETags).
fn s3_bucket() -> Box<s3::Bucket> {
    let config = kiln_storage::S3Config::from_url(&std::env::var("KILN_TEST_S3").unwrap()).unwrap();
    let region = s3::Region::Custom {
        region: config.region.clone(),
        endpoint: config.endpoint.clone().unwrap(),
    };
    let credentials = s3::creds::Credentials::new(
        std::env::var("AWS_ACCESS_KEY_ID").ok().as_deref(),
        std::env::var("AWS_SECRET_ACCESS_KEY").ok().as_deref(),
        None,
        None,
        None,
    )
    .unwrap();
    s3::Bucket::new(&config.bucket, region, credentials)
        .unwrap()
        .with_path_style()
}
