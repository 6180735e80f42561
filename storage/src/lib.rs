//! Where Kiln keeps profiles and symbol files: the [`ProfileStore`] and
//! [`ObjectStore`] traits, their embedded implementations, and the
//! conformance suites every implementation passes.
//!
//! - [`ProfileStore`]: samples and the frame, stack, label-set and
//!   executable dictionaries, keyed by tenant (and project) first.
//!   [`EmbeddedProfileStore`] keeps them in an LSM tree (fjall) in one
//!   directory; the ScyllaDB and PostgreSQL stores keep the same keys.
//! - [`ObjectStore`]: whole blobs under validated [`ObjectKey`]s, such as
//!   symbol files. [`LocalObjectStore`] keeps them as files under a
//!   directory; the S3 store in a bucket.
//! - `conformance` (feature `conformance`): the checks every backend runs.
//!
//! Callers hold `Arc<dyn ProfileStore>` and `Arc<dyn ObjectStore>`, so the
//! URL on the command line picks the backend at run time.
//!
//! ```
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use kiln_model::{Frame, FrameEntry, FrameKind};
//! use kiln_storage::{EmbeddedProfileStore, LocalObjectStore, ObjectKey, ObjectStore, ProfileStore};
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
//! let entry = FrameEntry { id: frame.id(), frame: frame.clone() };
//! profiles.put_frames("acme", &[entry.clone()]).await?;
//! assert_eq!(profiles.get_frames("acme", &[entry.id]).await?, vec![Some(frame)]);
//! // Tenants never see each other's rows.
//! assert_eq!(profiles.get_frames("other", &[entry.id]).await?, vec![None]);
//!
//! let key = ObjectKey::new("global/readme.txt")?;
//! objects.put(&key, Bytes::from_static(b"hello")).await?;
//! assert_eq!(objects.list("global/").await?, vec![key]);
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "conformance")]
pub mod conformance;
mod embedded;
mod error;
mod local_dir;
mod object;
mod object_key;
mod profile;
mod scope;

pub use embedded::EmbeddedProfileStore;
pub use error::{DecodeError, StoreError};
pub use local_dir::LocalObjectStore;
pub use object::ObjectStore;
pub use object_key::{MAX_KEY_LEN, ObjectKey};
pub use profile::{ProfileStore, StoredSample};
pub use scope::{MAX_NAME_LEN, Scope};
