//! The `Bus` and `Consumer` traits every implementation provides.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{BusError, PublishError};

/// One record read back from the bus.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    /// The partition it was read from.
    pub partition: u32,
    /// Its position in the partition: offsets start at 0 and grow by one per
    /// record.
    pub offset: u64,
    /// The key it was published with (it chose the partition).
    pub key: Vec<u8>,
    /// The payload it was published with.
    pub payload: Vec<u8>,
}

// Payloads are batches of up to megabytes; print lengths, not bytes.
impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

/// Takes records from the front of `pending`: at most `max`, and no more
/// than `max_bytes` of payload, but always the first one (when `max` is
/// not 0). What every consumer's `poll` hands out.
pub(crate) fn take_within(pending: &mut Vec<Record>, max: usize, max_bytes: usize) -> Vec<Record> {
    let mut bytes = 0usize;
    let mut n = 0;
    for record in pending.iter().take(max) {
        bytes = bytes.saturating_add(record.payload.len());
        if n > 0 && bytes > max_bytes {
            break;
        }
        n += 1;
    }
    pending.drain(..n).collect()
}

/// Where a published record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Published {
    /// The partition its key hashed to.
    pub partition: u32,
    /// Its offset within that partition.
    pub offset: u64,
}

/// A durable, partitioned, ordered log of records: the seam between the
/// gateway (which publishes agent batches) and the ingest workers (which
/// consume them).
///
/// Delivery is at least once, as with Kafka: a consumer that stops before
/// committing sees the same records again, so consumers must be idempotent
/// (Kiln's content-addressed writes are).
#[async_trait]
pub trait Bus: Send + Sync + fmt::Debug + 'static {
    /// How many partitions the bus has.
    fn partition_count(&self) -> u32;

    /// Appends durably (fsync'd) before returning Ok. The partition is
    /// chosen by hashing `key` ([`partition_for`]), so records with the
    /// same key keep their order.
    ///
    /// On failure the payload is handed back in the [`PublishError`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the record may or may
    /// not have been published.
    async fn publish(&self, key: &[u8], payload: Vec<u8>) -> Result<Published, PublishError>;

    /// A consumer in `group`; it resumes after the group's committed
    /// offsets.
    async fn consumer(&self, group: &str) -> Result<Box<dyn Consumer>, BusError>;

    /// Per partition, the offset `group` has committed up to (the next
    /// record it will process); 0 where it has committed nothing. This is
    /// how a process that does not consume (a gateway) learns that the
    /// workers have written a record it published.
    async fn committed_offsets(&self, group: &str) -> Result<Vec<u64>, BusError>;
}

/// Reads records for one consumer group.
#[async_trait]
pub trait Consumer: Send + fmt::Debug {
    /// Up to `max` records past this consumer's position, and no more
    /// than `max_bytes` of payload, waiting up to `timeout` for the first
    /// one; an empty `Vec` on timeout. The first record is always taken,
    /// however large, so that a consumer makes progress; the byte budget
    /// stops the poll before the record that would exceed it. Records
    /// already read and left over are kept for the next poll.
    ///
    /// Records of one partition come in offset order.
    ///
    /// # Cancel safety
    ///
    /// Implementations are cancel safe: records read by a poll whose future
    /// is dropped are returned by the next poll, so `poll` can be raced
    /// against shutdown signals in `select!`.
    async fn poll(
        &mut self,
        max: usize,
        max_bytes: usize,
        timeout: Duration,
    ) -> Result<Vec<Record>, BusError>;

    /// Durably records that the group has processed `partition` up to (not
    /// including) `next_offset`. A consumer of the group created later, or
    /// after a crash, starts there.
    async fn commit(&mut self, partition: u32, next_offset: u64) -> Result<(), BusError>;

    /// [`Consumer::commit`] of several partitions at once: `Ok` means all
    /// of them are stored. A consumer that can should store them in one
    /// request (one broker round trip, one file write): a worker commits
    /// every partition of a poll after its sync, and waits for it. This
    /// default commits them one after the other, stopping at the first
    /// error.
    async fn commit_all(&mut self, offsets: &[(u32, u64)]) -> Result<(), BusError> {
        for &(partition, next_offset) in offsets {
            self.commit(partition, next_offset).await?;
        }
        Ok(())
    }

    /// A handle that reports this consumer's lag from another task while
    /// the consumer polls (the consumer is `&mut` to its poll loop). It
    /// does not keep the consumer alive: once the consumer is dropped, it
    /// reports no partitions.
    fn lag_reader(&self) -> Arc<dyn LagReader>;
}

/// How far a consumer group is behind on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLag {
    /// The partition.
    pub partition: u32,
    /// The offset the group has committed up to (the next record it will
    /// process); where it has committed nothing, the oldest record kept.
    pub committed: u64,
    /// One past the last record of the partition (Kafka's high
    /// watermark): the offset the next record published gets.
    pub end: u64,
}

impl PartitionLag {
    /// Records published but not yet committed by the group.
    pub fn records(&self) -> u64 {
        self.end.saturating_sub(self.committed)
    }
}

/// Reads one consumer's lag: see [`Consumer::lag_reader`].
#[async_trait]
pub trait LagReader: Send + Sync + fmt::Debug {
    /// What the partitions belong to: the Kafka topic, or `embedded` for
    /// the embedded bus (which has one log and no topic name).
    fn topic(&self) -> &str;

    /// The group's lag on each partition assigned to this consumer now,
    /// by partition; empty while it has none (a rebalance, or after it was
    /// dropped). Each consumer of a group reports only its own
    /// partitions, so the group's lag is the sum over its consumers.
    async fn lag(&self) -> Result<Vec<PartitionLag>, BusError>;
}

/// The partition a key goes to: xxh3-64 of the key modulo the partition
/// count.
///
/// Every implementation uses this function, so a key lands on the same
/// partition whichever bus carries it, and across restarts (xxh3 is
/// seedless and stable across versions and platforms).
///
/// # Panics
///
/// If `partitions` is zero.
///
/// # Examples
///
/// ```
/// let p = kiln_ingest_bus::partition_for(b"host-a", 8);
/// assert!(p < 8);
/// assert_eq!(p, kiln_ingest_bus::partition_for(b"host-a", 8));
/// ```
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "partition_for needs at least one partition");
    // The remainder is below `partitions`, so it fits in a u32.
    (xxhash_rust::xxh3::xxh3_64(key) % u64::from(partitions)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the on-disk meaning of existing logs: if the hash ever
    /// changed, a key's new records would land on another partition than
    /// its old ones and lose their order.
    #[test]
    fn partitioning_is_stable() {
        let hash = xxhash_rust::xxh3::xxh3_64(b"host-a");
        assert_eq!(partition_for(b"host-a", 1), 0);
        assert_eq!(partition_for(b"host-a", 16), (hash % 16) as u32);
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06_8005_38d3_94c2);
    }

    /// Keys spread over all partitions rather than piling onto a few.
    #[test]
    fn partitioning_spreads_keys() {
        let mut counts = [0u32; 8];
        for i in 0..8000u32 {
            counts[partition_for(format!("host-{i}").as_bytes(), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    /// Guards the poll byte budget: it stops before the record that would
    /// exceed it, but always takes the first.
    #[test]
    fn take_within_keeps_to_the_byte_budget_but_takes_one() {
        let record = |len: usize| Record {
            partition: 0,
            offset: 0,
            key: Vec::new(),
            payload: vec![0; len],
        };
        let mut pending = vec![record(10), record(10), record(10), record(100)];
        assert_eq!(take_within(&mut pending, 10, 25).len(), 2);
        assert_eq!(take_within(&mut pending, 10, 25).len(), 1);
        // Larger than the budget on its own: taken anyway.
        assert_eq!(take_within(&mut pending, 10, 25).len(), 1);
        assert!(pending.is_empty());
        let mut pending = vec![record(1), record(1), record(1)];
        assert_eq!(take_within(&mut pending, 2, usize::MAX).len(), 2);
        assert_eq!(take_within(&mut pending, 0, usize::MAX).len(), 0);
    }

    #[test]
    fn record_debug_prints_lengths_not_bytes() {
        let r = Record {
            partition: 1,
            offset: 2,
            key: b"k".to_vec(),
            payload: vec![0; 1000],
        };
        assert_eq!(
            format!("{r:?}"),
            r#"Record { partition: 1, offset: 2, key: "k", payload_len: 1000 }"#
        );
    }
}
