//! The embedded bus: a durable, partitioned append-only log in a local
//! directory, for single-process deployments (`kiln up`) and tests.
//!
//! ```text
//! <dir>/bus.meta                      format version, partition count
//! <dir>/bus.lock                      held while the bus is open
//! <dir>/partitions/<p>/<base>.log     segments, named by first offset
//! <dir>/groups/<group>.offsets        committed offsets of a group
//! ```
//!
//! File I/O runs on tokio's blocking pool (`spawn_blocking`) rather than
//! inline in the async methods: an fsync takes milliseconds, and on a
//! current-thread runtime (actix) blocking inline would stall every other
//! task on it.

mod consumer;
mod fs;
mod group;
mod meta;
mod offsets;
mod partition;
mod reader;
mod segment;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::bus::{Bus, Consumer, Published, partition_for};
use crate::error::{BusError, PublishError};
use consumer::EmbeddedConsumer;
use group::Groups;
use partition::Partition;

/// Tuning for an [`EmbeddedBus`]; `Default` gives the values documented on
/// each field.
///
/// # Examples
///
/// ```
/// let options = kiln_ingest_bus::EmbeddedBusOptions::default().segment_bytes(16 << 20);
/// assert_eq!(options.segment_bytes, 16 << 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmbeddedBusOptions {
    /// A segment file is closed and a new one started before a record
    /// would take it past this size. Retention deletes whole segments, so
    /// this is also the granularity of freeing space. Default 64 MiB.
    pub segment_bytes: u64,
    /// The largest key plus payload [`Bus::publish`] accepts. Default
    /// 64 MiB.
    pub max_record_bytes: usize,
}

impl Default for EmbeddedBusOptions {
    fn default() -> Self {
        EmbeddedBusOptions {
            segment_bytes: 64 << 20,
            max_record_bytes: 64 << 20,
        }
    }
}

impl EmbeddedBusOptions {
    /// Sets [`segment_bytes`](Self::segment_bytes).
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Sets [`max_record_bytes`](Self::max_record_bytes).
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    fn validate(&self) -> Result<(), BusError> {
        if self.segment_bytes == 0 {
            return Err(BusError::InvalidOption("segment_bytes must be above 0"));
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > segment::MAX_RECORD_BYTES {
            return Err(BusError::InvalidOption(
                "max_record_bytes must be between 1 and 4 GiB - 12 bytes",
            ));
        }
        Ok(())
    }
}

/// A [`Bus`] kept in a local directory: durable, partitioned, with consumer
/// groups, and no server to run.
///
/// Cloning is cheap and gives another handle to the same bus. The directory
/// stays locked until the last handle and the last consumer are dropped.
///
/// # Examples
///
/// ```
/// # use kiln_ingest_bus::{Bus, EmbeddedBus};
/// # use std::time::Duration;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir()?;
/// let bus = EmbeddedBus::open(dir.path(), 4)?;
/// let at = bus.publish(b"host-a", b"batch".to_vec()).await?;
///
/// let mut consumer = bus.consumer("workers").await?;
/// let records = consumer.poll(100, usize::MAX, Duration::from_secs(1)).await?;
/// assert_eq!(records[0].payload, b"batch");
/// consumer.commit(at.partition, at.offset + 1).await?;
/// assert_eq!(bus.committed("workers")?.unwrap()[at.partition as usize], 1);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct EmbeddedBus {
    inner: Arc<Inner>,
}

/// What handles and consumers share.
struct Inner {
    dir: PathBuf,
    options: EmbeddedBusOptions,
    partitions: Vec<Arc<Partition>>,
    groups: Groups,
    /// Woken when any partition's durable end grows or a group's
    /// membership changes: what blocked polls wait on.
    notify: Arc<Notify>,
    /// Holds the directory's lock until dropped.
    _lock: std::fs::File,
}

impl Inner {
    fn partition_count(&self) -> u32 {
        // `open` creates at most u32::MAX partitions.
        self.partitions.len() as u32
    }
}

impl EmbeddedBus {
    /// Opens the bus in `dir` with default options, creating it with
    /// `partitions` partitions if it does not exist.
    ///
    /// Blocks while it scans and repairs the end of each partition's log:
    /// call it at startup or from a blocking thread.
    pub fn open(dir: &Path, partitions: u32) -> Result<EmbeddedBus, BusError> {
        EmbeddedBus::open_with(dir, partitions, EmbeddedBusOptions::default())
    }

    /// [`EmbeddedBus::open`] with options.
    ///
    /// A torn record at the end of a partition (a crash mid-write) is cut
    /// off; damage followed by valid records is skipped; both are logged
    /// with `tracing::warn!`. Records acknowledged by `publish` were
    /// fsync'd and are never cut.
    pub fn open_with(
        dir: &Path,
        partitions: u32,
        options: EmbeddedBusOptions,
    ) -> Result<EmbeddedBus, BusError> {
        options.validate()?;
        if partitions == 0 {
            return Err(BusError::NoPartitions);
        }
        fs::create_dir(dir)?;
        let lock = meta::lock(dir)?;
        meta::load_or_create(dir, partitions)?;
        let notify = Arc::new(Notify::new());
        let partitions_dir = dir.join("partitions");
        fs::create_dir(&partitions_dir)?;
        let partitions = (0..partitions)
            .map(|p| {
                let dir = partitions_dir.join(p.to_string());
                Partition::open(dir, p, options.segment_bytes, notify.clone()).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let groups = Groups::load(dir.join("groups"), partitions.len() as u32)?;
        tracing::info!(dir = %dir.display(), partitions = partitions.len(), "opened embedded bus");
        Ok(EmbeddedBus {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                options,
                partitions,
                groups,
                notify,
                _lock: lock,
            }),
        })
    }

    /// The bus directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Per partition, one past the last durable record: the offset the next
    /// record gets. Minus a group's [`committed`](Self::committed) offsets,
    /// that is the group's lag.
    pub fn end_offsets(&self) -> Vec<u64> {
        self.inner
            .partitions
            .iter()
            .map(|p| p.durable_end())
            .collect()
    }

    /// Per partition, the offset of the oldest record still kept (records
    /// below it were deleted by [`truncate_consumed`](Self::truncate_consumed)).
    pub fn start_offsets(&self) -> Vec<u64> {
        self.inner
            .partitions
            .iter()
            .map(|p| p.start_offset())
            .collect()
    }

    /// Per partition, the offset `group` resumes at; `None` if the group
    /// does not exist (no consumer of it was ever created).
    pub fn committed(&self, group: &str) -> Result<Option<Vec<u64>>, BusError> {
        offsets::validate_group_name(group)?;
        Ok(self.inner.groups.get(group).map(|g| g.committed()))
    }

    /// The consumer groups that exist, by name.
    pub fn groups(&self) -> Vec<String> {
        self.inner.groups.names()
    }

    /// Deletes a consumer group and its committed offsets, so it no longer
    /// holds back [`truncate_consumed`](Self::truncate_consumed). `Ok(false)`
    /// if there was no such group; an error if it has live consumers.
    pub async fn delete_group(&self, group: &str) -> Result<bool, BusError> {
        let inner = self.inner.clone();
        let group = group.to_owned();
        tokio::task::spawn_blocking(move || inner.groups.delete(&group))
            .await
            .map_err(|_| BusError::Panicked)?
    }

    /// Deletes every segment whose records all lie below the committed
    /// offsets of every group, and returns how many it deleted. The segment
    /// being written is never deleted. With no groups at all nothing is
    /// deleted: records published before the first consumer group exists
    /// are kept for it.
    ///
    /// Retention is by consumption only: a group that stops committing
    /// keeps every record from its offset on.
    pub async fn truncate_consumed(&self) -> Result<usize, BusError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            inner.groups.with_min_committed(|min| {
                let Some(min) = min else { return Ok(0) };
                let mut removed = 0;
                for (partition, &offset) in inner.partitions.iter().zip(min) {
                    removed += partition.remove_segments_below(offset)?;
                }
                Ok(removed)
            })
        })
        .await
        .map_err(|_| BusError::Panicked)?
    }
}

#[async_trait]
impl Bus for EmbeddedBus {
    fn partition_count(&self) -> u32 {
        self.inner.partition_count()
    }

    /// Appends on tokio's blocking pool; concurrent publishes to a partition
    /// share fsyncs (group commit), so throughput grows with concurrency.
    ///
    /// # Cancel safety
    ///
    /// If the returned future is dropped before it completes, the record may
    /// or may not have been appended.
    async fn publish(&self, key: &[u8], payload: Vec<u8>) -> Result<Published, PublishError> {
        let limit = self.inner.options.max_record_bytes;
        let size = key.len().saturating_add(payload.len());
        if size > limit {
            let source = BusError::RecordTooLarge { size, limit };
            return Err(PublishError { payload, source });
        }
        let partition = partition_for(key, self.partition_count());
        let key = key.to_vec();
        // The blocking task borrows the payload through an Arc, so it can be
        // handed back on failure even if the task panicked or never ran:
        // either way the task's clone is dropped by the time `await` returns.
        let payload = Arc::new(payload);
        let task_payload = payload.clone();
        // The task holds the whole bus, not just the partition: if this
        // future is dropped mid-write, the directory lock must outlive the
        // write, or a reopen could repair the tail while it is being written.
        let inner = self.inner.clone();
        let appended = tokio::task::spawn_blocking(move || {
            inner.partitions[partition as usize].append(&key, &task_payload)
        })
        .await;
        match appended {
            Ok(Ok(offset)) => Ok(Published { partition, offset }),
            Ok(Err(source)) => Err(PublishError {
                payload: Arc::unwrap_or_clone(payload),
                source,
            }),
            Err(_) => Err(PublishError {
                payload: Arc::unwrap_or_clone(payload),
                source: BusError::Panicked,
            }),
        }
    }

    async fn consumer(&self, group: &str) -> Result<Box<dyn Consumer>, BusError> {
        offsets::validate_group_name(group)?;
        let inner = self.inner.clone();
        let name = group.to_owned();
        let group = tokio::task::spawn_blocking(move || {
            inner.groups.get_or_create(&name, || {
                // A new group starts at the oldest record kept.
                inner.partitions.iter().map(|p| p.start_offset()).collect()
            })
        })
        .await
        .map_err(|_| BusError::Panicked)??;
        let member = group.join();
        // Members already polling must give up partitions to the new one.
        self.inner.notify.notify_waiters();
        Ok(Box::new(EmbeddedConsumer::new(
            self.inner.clone(),
            group,
            member,
        )))
    }

    async fn committed_offsets(&self, group: &str) -> Result<Vec<u64>, BusError> {
        Ok(self
            .committed(group)?
            .unwrap_or_else(|| vec![0; self.partition_count() as usize]))
    }
}

impl fmt::Debug for EmbeddedBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedBus")
            .field("dir", &self.inner.dir)
            .field("partitions", &self.inner.partitions.len())
            .field("options", &self.inner.options)
            .finish()
    }
}
