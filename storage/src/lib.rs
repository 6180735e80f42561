//! Where Kiln keeps profiles and symbol files: the [`ProfileStore`] and
//! [`ObjectStore`] traits, their embedded implementations, and the
//! conformance suites every implementation passes.
//!
//! - [`ProfileStore`]: samples, metric points and the frame, stack,
//!   label-set and executable dictionaries, keyed by tenant (and project)
//!   first.
//!   [`EmbeddedProfileStore`] keeps them in an LSM tree (fjall) in one
//!   directory, [`PostgresProfileStore`] in a PostgreSQL database,
//!   [`ScyllaProfileStore`] in a ScyllaDB keyspace, all with the same keys.
//! - [`MetadataStore`]: tenants, projects, API keys (stored hashed, with
//!   their [`Roles`]) and per-tenant [`TenantLimits`].
//!   [`EmbeddedMetadataStore`] keeps them in one file,
//!   [`PostgresMetadataStore`] in PostgreSQL.
//! - [`ObjectStore`]: whole blobs under validated [`ObjectKey`]s, such as
//!   symbol files. [`LocalObjectStore`] keeps them as files under a
//!   directory, [`S3ObjectStore`] in an S3 bucket (AWS, MinIO, Garage).
//! - `conformance` (feature `conformance`): the checks every backend runs.
//!   The PostgreSQL stores run them when `KILN_TEST_POSTGRES` holds a URL
//!   (`scripts/pg-test-server.sh start DIR` prints one), the S3 store when
//!   `KILN_TEST_S3` does (`scripts/s3-test-server.sh start DIR`), the
//!   ScyllaDB store when `KILN_TEST_SCYLLA` names a CQL node
//!   (`scripts/cassandra-test-server.sh start DIR` starts Apache
//!   Cassandra, which CI runs it against, and prints one).
//!
//! Callers hold `Arc<dyn ProfileStore>` and `Arc<dyn ObjectStore>`, so the
//! URL on the command line picks the backend at run time.
//!
//! ```
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use kiln_model::{Frame, FrameEntry, FrameKind};
//! use kiln_storage::{
//!     EmbeddedProfileStore, LocalObjectStore, ObjectKey, ObjectStore, ProfileStore, StoredFrame,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kiln_storage::StoreError> {
//! let dir = tempfile::tempdir().unwrap();
//! let profiles: Arc<dyn ProfileStore> =
//!     Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles"))?);
//! let objects: Arc<dyn ObjectStore> =
//!     Arc::new(LocalObjectStore::open(&dir.path().join("objects"))?);
//!
//! let frame = Frame::named(FrameKind::Kernel, "do_syscall_64");
//! let row = StoredFrame::from(FrameEntry { id: frame.id(), frame });
//! profiles.put_frames("acme", &[row.clone()]).await?;
//! assert_eq!(profiles.get_frames("acme", &[row.id]).await?, vec![Some(row.clone())]);
//! // Tenants never see each other's rows.
//! assert_eq!(profiles.get_frames("other", &[row.id]).await?, vec![None]);
//!
//! let key = ObjectKey::new("global/readme.txt")?;
//! objects.put(&key, Bytes::from_static(b"hello")).await?;
//! assert_eq!(objects.list("global/").await?, vec![key]);
//! # Ok(())
//! # }
//! ```

mod access;
mod api_key;
#[cfg(feature = "conformance")]
pub mod conformance;
mod embedded;
mod embedded_metadata;
mod error;
mod limits;
mod local_dir;
mod metadata;
mod object;
mod object_key;
#[cfg(feature = "postgres")]
mod postgres;
mod profile;
mod rollup;
#[cfg(feature = "s3")]
mod s3;
mod scope;
#[cfg(feature = "scylla")]
mod scylla;
mod sealed;
pub mod segment;
mod values;

pub use access::{Grant, Role, Roles, UnknownRole};
pub use api_key::{ApiKey, KeyHash, MAX_REGION_LEN, is_region_name, key_region};
pub use embedded::EmbeddedProfileStore;
pub use embedded_metadata::EmbeddedMetadataStore;
pub use error::{DecodeError, StoreError};
pub use limits::TenantLimits;
pub use local_dir::LocalObjectStore;
pub use metadata::{ApiKeyInfo, MAX_LABEL_LEN, MetadataStore, NewApiKey};
pub use object::ObjectStore;
pub use object_key::{MAX_KEY_LEN, ObjectKey};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresMetadataStore, PostgresProfileStore};
pub use profile::{
    DeletedHours, ProfileStore, StoredFrame, StoredMetricPoint, StoredSample, metric_row_bytes,
    sample_row_bytes,
};
pub use rollup::{
    HourVersion, Resolution, RollupRow, current_rollups, merge_rows as merge_rollup_rows,
    window_versions,
};
#[cfg(feature = "s3")]
pub use s3::{AddressingStyle, PART_SIZE as S3_PART_SIZE, S3Config, S3ObjectStore};
pub use scope::{MAX_NAME_LEN, Scope};
#[cfg(feature = "scylla")]
pub use scylla::{ScyllaProfileStore, ScyllaUrl};
pub use sealed::{SEAL_WRITE_MARGIN, SealedHour, SealedStore};
