//! The `ObjectStore` trait: whole blobs (symbol files) under path-like keys.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::object_key::ObjectKey;

/// Where blobs live: symbol files (`global/<file_id>.ksym`,
/// `tenants/<t>/<file_id>.ksym`) and other whole objects.
///
/// Implementations: [`LocalObjectStore`](crate::LocalObjectStore) (files
/// under a directory), [`S3ObjectStore`](crate::S3ObjectStore) (a bucket). All of them pass
/// `conformance::object_store` (feature
/// `conformance`). Callers hold an `Arc<dyn ObjectStore>`.
#[async_trait]
pub trait ObjectStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores `bytes` under `key`, replacing what was there. Atomic: a
    /// concurrent or later reader sees the old object or the new one, never
    /// part of one; once `put` returns `Ok`, the object is durable.
    async fn put(&self, key: &ObjectKey, bytes: bytes::Bytes) -> Result<(), StoreError>;

    /// The object under `key`, or `None` if there is none.
    async fn get(&self, key: &ObjectKey) -> Result<Option<bytes::Bytes>, StoreError>;

    /// Whether an object is stored under `key`.
    async fn exists(&self, key: &ObjectKey) -> Result<bool, StoreError>;

    /// Removes the object under `key`; removing a missing key is `Ok`.
    async fn delete(&self, key: &ObjectKey) -> Result<(), StoreError>;

    /// The keys that start with `prefix` (plain string comparison, as in S3:
    /// `tenants/a` matches `tenants/ab/…`, `tenants/a/` does not), sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>, StoreError>;
}
