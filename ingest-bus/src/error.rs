//! The errors of every bus operation.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why a bus operation failed.
///
/// Messages are short and name the file, partition or group involved; the
/// underlying I/O error, when there is one, is the error's
/// [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// A file or directory operation failed (`op` is the verb: "fsync",
    /// "open", "rename", …).
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The error the operating system returned.
        #[source]
        source: io::Error,
    },

    /// A bus was asked for zero partitions.
    #[error("a bus needs at least one partition")]
    NoPartitions,

    /// An option is out of range.
    #[error("invalid bus option: {0}")]
    InvalidOption(&'static str),

    /// The directory holds a bus created with another partition count.
    /// Records are placed by hashing their key modulo the count, so
    /// changing it would reorder every key's records.
    #[error(
        "bus at {} has {existing} partitions, not {requested}; open it with {existing} or use a new directory",
        path.display()
    )]
    PartitionCountMismatch {
        /// The bus directory.
        path: PathBuf,
        /// The count recorded when the bus was created.
        existing: u32,
        /// The count this open asked for.
        requested: u32,
    },

    /// The bus metadata file is missing or malformed.
    #[error("bad bus metadata file {}: {reason}", path.display())]
    BadMetadata {
        /// The metadata file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// Another bus, in this process or another, has the directory open.
    #[error("bus directory {} is already open elsewhere (its lock file is held)", path.display())]
    Locked {
        /// The bus directory.
        path: PathBuf,
    },

    /// A consumer group name outside `[A-Za-z0-9._-]{1,64}`.
    #[error(
        "invalid consumer group name {name:?}: use 1 to 64 of the characters A-Z a-z 0-9 . _ -"
    )]
    InvalidGroupName {
        /// The name given.
        name: String,
    },

    /// A partition number at or past the partition count.
    #[error("partition {partition} does not exist; the bus has {count} partitions")]
    NoSuchPartition {
        /// The partition asked for.
        partition: u32,
        /// How many partitions the bus has.
        count: u32,
    },

    /// A commit past the end of what the partition holds.
    #[error(
        "cannot commit offset {offset} on partition {partition}: the partition ends at offset {end}"
    )]
    CommitPastEnd {
        /// The partition.
        partition: u32,
        /// The offset the commit asked for.
        offset: u64,
        /// The partition's end offset (one past its last record).
        end: u64,
    },

    /// A committed-offsets file is malformed.
    #[error("bad committed-offsets file {}: {reason}", path.display())]
    BadOffsets {
        /// The offsets file.
        path: PathBuf,
        /// What is wrong with it, and where.
        reason: String,
    },

    /// A record's key and payload together exceed the configured limit.
    #[error("record of {size} bytes (key and payload) exceeds the limit of {limit} bytes")]
    RecordTooLarge {
        /// Key plus payload length.
        size: usize,
        /// The bus's `max_record_bytes`.
        limit: usize,
    },

    /// A partition stopped accepting writes after an fsync failed, or a
    /// failed write whose partial record could not be cut off. (A write
    /// that fails cleanly, as on a full disk, fails only its own append.)
    ///
    /// After a failed fsync the kernel may already have dropped the dirty
    /// pages, so the file's contents are unknown; like Kafka taking a log
    /// directory offline, the partition refuses further writes until the
    /// bus is reopened (which rescans and repairs the tail).
    #[error(
        "partition {partition} accepts no writes since an earlier failure ({cause}); reopen the bus"
    )]
    PartitionFailed {
        /// The partition.
        partition: u32,
        /// The first failure, with its cause.
        cause: String,
    },

    /// A consumer group cannot be deleted while consumers are using it.
    #[error("consumer group {group:?} still has {members} live consumers")]
    GroupInUse {
        /// The group.
        group: String,
        /// How many consumers are live.
        members: usize,
    },

    /// A Kafka client call failed, or the brokers refused a request.
    #[error("Kafka: cannot {op}: {detail}")]
    Kafka {
        /// What was being done ("publish", "commit", …).
        op: &'static str,
        /// What librdkafka or the broker said.
        detail: String,
    },

    /// A `kafka://` bus in a build without the Kafka client (the `kafka`
    /// feature; the `kiln` binary's default `distributed` feature turns it
    /// on).
    #[error(
        "this build of Kiln has no Kafka client: rebuild with the `distributed` feature \
         (cargo build --release -p kiln --features distributed)"
    )]
    KafkaNotBuilt,

    /// A bus URL that names no bus Kiln has, or is malformed.
    #[error("bad bus URL {url:?}: {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An internal task of the bus panicked (a bug in this crate).
    #[error("an internal task of the bus panicked")]
    Panicked,
}

impl BusError {
    /// This error and its chain of causes on one line, for logs and for
    /// [`BusError::PartitionFailed`], which must outlive the `io::Error`.
    pub fn describe(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    /// Whether the disk is full (or the user's quota on it): an error
    /// that passes once room is made, unlike most I/O errors.
    pub fn storage_full(&self) -> bool {
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            if let Some(io) = cause.downcast_ref::<io::Error>()
                && matches!(
                    io.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                )
            {
                return true;
            }
            source = cause.source();
        }
        false
    }
}

impl BusError {
    /// Builds the `map_err` closure for a Kafka client error:
    /// `producer.flush(t).map_err(BusError::kafka("flush"))?`.
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka(op: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> BusError {
        move |e| BusError::Kafka {
            op,
            detail: e.to_string(),
        }
    }
}

/// Builds the `map_err` closure for an I/O error on `path`:
/// `file.sync_data().map_err(io("fsync", &path))?`.
pub(crate) fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BusError + 'a {
    move |source| BusError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A record that could not be published, handed back with the reason.
///
/// The payload is returned, never dropped, so the caller can retry, spool
/// it, or report it: [`PublishError::into_payload`].
#[derive(thiserror::Error)]
#[error("could not publish a record of {} bytes", payload.len())]
pub struct PublishError {
    /// The payload that was not published.
    pub payload: Vec<u8>,
    /// Why.
    #[source]
    pub source: BusError,
}

impl PublishError {
    /// Takes back the payload that was not published.
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }
}

// Payloads are batches of up to megabytes; a derived Debug would print
// every byte into the log.
impl fmt::Debug for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublishError")
            .field("payload_len", &self.payload.len())
            .field("source", &self.source)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload comes back out of the error intact, and the message
    /// chain names the file and the OS error.
    #[test]
    fn publish_error_returns_payload_and_explains() {
        let err = PublishError {
            payload: vec![7; 10],
            source: io("fsync", Path::new("/x/0.log"))(io::Error::other("disk on fire")),
        };
        assert_eq!(err.to_string(), "could not publish a record of 10 bytes");
        assert_eq!(err.source.describe(), "cannot fsync /x/0.log: disk on fire");
        assert!(format!("{err:?}").contains("payload_len: 10"));
        assert_eq!(err.into_payload(), vec![7; 10]);
    }
}
