//! The one error type every store returns.

use std::path::PathBuf;

/// Why a store operation failed.
///
/// Marked `#[non_exhaustive]` because every backend (embedded, ScyllaDB,
/// PostgreSQL, S3) may add the ways its engine fails.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A tenant or project name does not match `[a-z0-9][a-z0-9_-]{0,62}`.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// `tenant` or `project`.
        what: &'static str,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An object key is not a safe relative path.
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given (possibly cut short when very long).
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A stored value or key does not decode: the data on disk is damaged or
    /// was written by an incompatible version. The store never panics on it.
    #[error("stored {what} at {key} is corrupt")]
    Corrupt {
        /// What was being read: `frame`, `stack`, `sample`, ….
        what: &'static str,
        /// Where: the tenant and id, or the raw key in hex.
        key: String,
        /// What the decoder found wrong.
        #[source]
        reason: DecodeError,
    },

    /// The directory holds data in a storage format this build does not read.
    #[error(
        "store at {} has storage format version {found}, this build reads version {expected}",
        path.display()
    )]
    IncompatibleFormat {
        /// The store's directory.
        path: PathBuf,
        /// The version found there.
        found: u32,
        /// The version this build reads and writes.
        expected: u32,
    },

    /// The storage engine refused the data itself (a constraint, a value
    /// out of range, a row too large): writing it again fails the same way,
    /// so a caller must set it aside rather than retry.
    #[error("{backend} refused the data while trying to {op}: {reason}")]
    Refused {
        /// Which engine.
        backend: &'static str,
        /// What the store was doing.
        op: &'static str,
        /// The engine's reason (for PostgreSQL: SQLSTATE and message).
        reason: String,
    },

    /// The storage engine underneath failed (I/O, a poisoned journal, a lock
    /// held by another process, a database server error, …).
    #[error("{backend} storage engine failed while trying to {op}: {source}")]
    Backend {
        /// Which engine: `fjall`, `scylla`, `postgres`, `s3`.
        backend: &'static str,
        /// What the store was doing.
        op: &'static str,
        /// The engine's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// A file system operation of a directory-backed store failed.
    #[error("could not {op} {}", path.display())]
    Io {
        /// What the store was doing: `create`, `rename`, `read`, ….
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A database or object store URL does not parse or names an option
    /// this build does not know. The URL is shown with any password hidden.
    #[error("invalid store url {url:?}")]
    InvalidUrl {
        /// The URL as given, password replaced by `***`.
        url: String,
        /// What the driver found wrong with it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// The database holds a schema newer than this build knows: a newer
    /// Kiln migrated it. Refused rather than misread.
    #[error(
        "database schema version {found} is newer than the version {expected} this build knows; \
         upgrade kiln"
    )]
    IncompatibleSchema {
        /// The version recorded in the database.
        found: i32,
        /// The newest version this build can migrate to.
        expected: i32,
    },

    /// A tenant, project or key to be created exists already.
    #[error("{what} {name:?} already exists")]
    AlreadyExists {
        /// `tenant`, `project`, ….
        what: &'static str,
        /// Its name (`tenant/project` for a project).
        name: String,
    },

    /// An operation names a tenant or project that does not exist.
    #[error("{what} {name:?} does not exist")]
    NotFound {
        /// `tenant`, `project`, ….
        what: &'static str,
        /// Its name (`tenant/project` for a project).
        name: String,
    },

    /// A metric point's name breaks `[a-z0-9_.]{1,128}`, or its value is
    /// not finite.
    #[error("invalid metric point")]
    InvalidMetric(#[source] kiln_model::MetricError),

    /// An argument other than a name is out of its allowed range.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// What was given: `api key label`, ….
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A request to an S3 bucket failed: the server was unreachable, refused
    /// the credentials, or answered with an error status.
    #[error("s3 could not {op} {key:?} in bucket {bucket:?}")]
    ObjectRequest {
        /// What the store was doing: `put`, `get`, `list`, ….
        op: &'static str,
        /// The bucket.
        bucket: String,
        /// The object's key, or the prefix of a list.
        key: String,
        /// The client's error, with the server's status and message when
        /// it answered.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// The blocking task that ran the operation panicked or was cancelled
    /// (the runtime is shutting down).
    #[error("storage task did not finish")]
    Task(#[from] tokio::task::JoinError),
}

impl StoreError {
    /// Wraps an error of the embedded engine.
    pub(crate) fn fjall(op: &'static str, source: fjall::Error) -> Self {
        StoreError::Backend {
            backend: "fjall",
            op,
            source: Box::new(source),
        }
    }

    /// Wraps an error of the PostgreSQL driver or its connection pool.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(
        op: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let source: Box<dyn std::error::Error + Send + Sync> = Box::new(source);
        let refusal = source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.as_db_error())
            .filter(|db| refuses_for_good(db.code().code()));
        if let Some(db) = refusal {
            return StoreError::Refused {
                backend: "postgres",
                op,
                reason: format!("SQLSTATE {}: {}", db.code().code(), db.message()),
            };
        }
        StoreError::Backend {
            backend: "postgres",
            op,
            source,
        }
    }

    /// Whether writing the same data again would fail the same way.
    pub fn is_refusal_of_the_data(&self) -> bool {
        matches!(
            self,
            StoreError::InvalidName { .. }
                | StoreError::InvalidKey { .. }
                | StoreError::InvalidMetric(_)
                | StoreError::InvalidArgument { .. }
                | StoreError::Refused { .. }
        )
    }

    /// Wraps an error of the ScyllaDB driver.
    #[cfg(feature = "scylla")]
    pub(crate) fn scylla(
        op: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            backend: "scylla",
            op,
            source: Box::new(source),
        }
    }

    /// Wraps an I/O error with the operation and path it concerns.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Why stored bytes did not decode; the source of [`StoreError::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before the value does.
    #[error("value ends early: {needed} more bytes needed for {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// How many bytes it needed beyond the end.
        needed: usize,
    },
    /// Bytes are left over after the value.
    #[error("{extra} unexpected bytes after the value")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The leading version byte is one this build does not know.
    #[error("unknown encoding version {0}")]
    UnknownVersion(u8),
    /// A tag, enum number or integer is out of its field's range.
    #[error("{field} value {value} is out of range")]
    OutOfRange {
        /// The field holding it.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A variable-length integer is longer than ten bytes or overflows.
    #[error("malformed variable-length integer in {field}")]
    BadVarint {
        /// The field holding it.
        field: &'static str,
    },
    /// A string is not UTF-8.
    #[error("{field} is not valid UTF-8")]
    NotUtf8 {
        /// The field holding it.
        field: &'static str,
    },
    /// A compressed value (a sealed-hour segment) does not inflate: its
    /// zstd frame is damaged or cut short.
    #[error("compressed value is damaged or cut short")]
    Compression,
    /// A key has the wrong length for its table.
    #[error("key is {len} bytes, expected {expected}")]
    KeyLength {
        /// The key's length.
        len: usize,
        /// The length its table's layout gives.
        expected: usize,
    },
}

/// PostgreSQL error classes that refuse the data itself, not the moment:
/// data exceptions (22), integrity constraint violations (23) and program
/// limits such as a row too large (54). Connection, resource, lock and
/// serialization errors (08, 53, 55, 40) pass and are retried.
#[cfg(feature = "postgres")]
fn refuses_for_good(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("22" | "23" | "54"))
}

#[cfg(all(test, feature = "postgres"))]
mod refusal_tests {
    use super::*;

    #[test]
    fn only_data_refusals_are_for_good() {
        assert!(refuses_for_good("23514")); // check_violation
        assert!(refuses_for_good("22003")); // numeric_value_out_of_range
        assert!(refuses_for_good("54000")); // program_limit_exceeded
        assert!(!refuses_for_good("08006")); // connection_failure
        assert!(!refuses_for_good("53300")); // too_many_connections
        assert!(!refuses_for_good("40001")); // serialization_failure
        assert!(!refuses_for_good(""));
    }
}
