//! The embedded bus's [`Consumer`]: a group member reading its share of
//! the partitions.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::bus::{Consumer, LagReader, PartitionLag, Record, take_within};
use crate::embedded::Inner;
use crate::embedded::group::Group;
use crate::embedded::reader::PartitionReader;
use crate::error::BusError;

/// A member of a consumer group of an [`EmbeddedBus`](crate::EmbeddedBus).
pub(crate) struct EmbeddedConsumer {
    inner: Arc<Inner>,
    group: Arc<Group>,
    member: u64,
    /// Shared with the blocking task that reads files, so that a poll that
    /// is cancelled mid-read loses nothing (see `poll`).
    state: Arc<Mutex<ReadState>>,
}

#[derive(Debug, Default)]
struct ReadState {
    /// The group generation `readers` were built for.
    generation: Option<u64>,
    /// One per assigned partition.
    readers: Vec<PartitionReader>,
    /// Which reader reads first next time, so that a busy partition does
    /// not starve the others.
    cursor: usize,
    /// Records read but not yet returned by `poll`.
    pending: Vec<Record>,
}

impl EmbeddedConsumer {
    pub(crate) fn new(inner: Arc<Inner>, group: Arc<Group>, member: u64) -> EmbeddedConsumer {
        EmbeddedConsumer {
            inner,
            group,
            member,
            state: Arc::default(),
        }
    }

    /// Takes up to `max` pending records, within `max_bytes`.
    fn take_pending(state: &mut ReadState, max: usize, max_bytes: usize) -> Vec<Record> {
        take_within(&mut state.pending, max, max_bytes)
    }

    /// Brings the readers in line with the group's current assignment.
    /// Readers of partitions kept keep their positions; partitions newly
    /// assigned start at the group's committed offset.
    fn rebalance(&self, state: &mut ReadState) {
        let (generation, assigned) = self
            .group
            .assignment(self.member, self.inner.partition_count());
        if state.generation == Some(generation) {
            return;
        }
        let committed = self.group.committed();
        let mut old: BTreeMap<u32, PartitionReader> = state
            .readers
            .drain(..)
            .map(|r| (r.partition(), r))
            .collect();
        state.readers = assigned
            .into_iter()
            .map(|p| {
                old.remove(&p).unwrap_or_else(|| {
                    let partition = self.inner.partitions[p as usize].clone();
                    PartitionReader::new(
                        partition,
                        self.group.name().clone(),
                        committed[p as usize],
                    )
                })
            })
            .collect();
        state.generation = Some(generation);
        state.cursor = 0;
        tracing::debug!(
            group = &**self.group.name(),
            member = self.member,
            partitions = ?state.readers.iter().map(PartitionReader::partition).collect::<Vec<_>>(),
            "consumer assignment changed"
        );
    }
}

impl ReadState {
    /// Reads records into `pending` until it holds `max`, or `max_bytes`
    /// of payload, going round the partitions from `cursor`.
    fn fill(&mut self, max: usize, max_bytes: usize) -> Result<(), BusError> {
        let n = self.readers.len();
        if n == 0 {
            return Ok(());
        }
        let start = self.cursor % n;
        self.cursor = start + 1;
        // A budget of 0 still reads one record: polls always make progress.
        let max_bytes = max_bytes.max(1);
        let mut bytes: usize = self.pending.iter().map(|r| r.payload.len()).sum();
        for i in 0..n {
            if self.pending.len() >= max || bytes >= max_bytes {
                break;
            }
            let before = self.pending.len();
            self.readers[(start + i) % n].read(max, max_bytes - bytes, &mut self.pending)?;
            bytes += self.pending[before..]
                .iter()
                .map(|r| r.payload.len())
                .sum::<usize>();
        }
        Ok(())
    }
}

fn lock(state: &Mutex<ReadState>) -> MutexGuard<'_, ReadState> {
    // Readers only advance after a record is safely in `pending`, so a
    // panic mid-read leaves a consistent state.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait]
impl Consumer for EmbeddedConsumer {
    /// Files are read on tokio's blocking pool (`spawn_blocking`), so a
    /// slow disk never stalls the caller's runtime; on a single-threaded
    /// runtime such as actix's that would stall every actor.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: records read by a poll that is cancelled are returned by
    /// the next one.
    async fn poll(
        &mut self,
        max: usize,
        max_bytes: usize,
        timeout: Duration,
    ) -> Result<Vec<Record>, BusError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        // `None`: a timeout too large to represent, which is forever.
        let deadline = Instant::now().checked_add(timeout);
        let notify = self.inner.notify.clone();
        loop {
            // Registered before looking, so a publish between the look and
            // the wait still wakes us.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            let has_news = {
                let mut state = lock(&self.state);
                if !state.pending.is_empty() {
                    return Ok(Self::take_pending(&mut state, max, max_bytes));
                }
                self.rebalance(&mut state);
                state.readers.iter().any(PartitionReader::has_news)
            };
            if has_news {
                let state = self.state.clone();
                let read = tokio::task::spawn_blocking(move || lock(&state).fill(max, max_bytes));
                read.await.map_err(|_| BusError::Panicked)??;
                let mut state = lock(&self.state);
                if !state.pending.is_empty() {
                    return Ok(Self::take_pending(&mut state, max, max_bytes));
                }
                // Nothing readable after all (damage being waited out): wait
                // for more records like everyone else.
            }
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Ok(Vec::new());
                    }
                }
                None => notified.await,
            }
        }
    }

    async fn commit(&mut self, partition: u32, next_offset: u64) -> Result<(), BusError> {
        self.commit_all(&[(partition, next_offset)]).await
    }

    /// Checks every offset, then stores them all in one write.
    async fn commit_all(&mut self, offsets: &[(u32, u64)]) -> Result<(), BusError> {
        let count = self.inner.partition_count();
        for &(partition, next_offset) in offsets {
            let end = self
                .inner
                .partitions
                .get(partition as usize)
                .ok_or(BusError::NoSuchPartition { partition, count })?
                .durable_end();
            if next_offset > end {
                return Err(BusError::CommitPastEnd {
                    partition,
                    offset: next_offset,
                    end,
                });
            }
        }
        let group = self.group.clone();
        let offsets = offsets.to_vec();
        // Holding the bus keeps the directory locked until the write is done,
        // even if this future is dropped and the consumer with it.
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let _open = inner;
            group.commit_all(&offsets)
        })
        .await
        .map_err(|_| BusError::Panicked)?
    }

    fn lag_reader(&self) -> Arc<dyn LagReader> {
        Arc::new(EmbeddedLag {
            inner: Arc::downgrade(&self.inner),
            group: self.group.clone(),
            member: self.member,
        })
    }
}

/// The lag of one [`EmbeddedConsumer`]: its assigned partitions' ends
/// against the group's committed offsets, read from memory (no I/O).
#[derive(Debug)]
struct EmbeddedLag {
    /// Weak, so that a reader kept after the bus is closed does not hold
    /// its directory's lock.
    inner: Weak<Inner>,
    group: Arc<Group>,
    member: u64,
}

#[async_trait]
impl LagReader for EmbeddedLag {
    fn topic(&self) -> &str {
        "embedded"
    }

    async fn lag(&self) -> Result<Vec<PartitionLag>, BusError> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(Vec::new());
        };
        // A member that left (its consumer dropped) is assigned nothing.
        let (_, assigned) = self.group.assignment(self.member, inner.partition_count());
        let committed = self.group.committed();
        Ok(assigned
            .into_iter()
            .map(|p| PartitionLag {
                partition: p,
                committed: committed[p as usize],
                end: inner.partitions[p as usize].durable_end(),
            })
            .collect())
    }
}

impl Drop for EmbeddedConsumer {
    fn drop(&mut self) {
        self.group.leave(self.member);
        // The remaining members take over this one's partitions at their
        // next poll; wake the ones waiting.
        self.inner.notify.notify_waiters();
    }
}

impl fmt::Debug for EmbeddedConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("EmbeddedConsumer")
            .field("group", &self.group.name())
            .field("member", &self.member)
            .field(
                "positions",
                &state
                    .readers
                    .iter()
                    .map(|r| (r.partition(), r.position()))
                    .collect::<BTreeMap<_, _>>(),
            )
            .finish_non_exhaustive()
    }
}
