//! How far the ingest pipeline has got: the committed offset of every bus
//! partition, so that an import can answer only once its batch is queryable.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kiln_ingest_bus::Bus;
use tokio::sync::watch;
use tracing::debug;

/// How often a gateway asks the bus for the workers' committed offsets.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Read side: wait for a published record to be written and committed.
#[derive(Debug, Clone)]
pub struct IngestProgress {
    committed: watch::Receiver<Vec<u64>>,
    dead_letters: Arc<AtomicU64>,
}

/// Write side, held by the bus consumer.
#[derive(Debug)]
pub(crate) struct ProgressSender {
    committed: watch::Sender<Vec<u64>>,
    dead_letters: Arc<AtomicU64>,
}

/// A progress channel for `partitions` partitions, all at offset 0.
pub(crate) fn channel(partitions: u32) -> (ProgressSender, IngestProgress) {
    let (tx, rx) = watch::channel(vec![0; partitions as usize]);
    let dead_letters = Arc::new(AtomicU64::new(0));
    (
        ProgressSender {
            committed: tx,
            dead_letters: dead_letters.clone(),
        },
        IngestProgress {
            committed: rx,
            dead_letters,
        },
    )
}

impl ProgressSender {
    /// Counts a record set aside in the dead-letter area.
    pub(crate) fn dead_lettered(&self) {
        self.dead_letters.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that `partition` is committed up to `next_offset`.
    pub(crate) fn committed(&self, partition: u32, next_offset: u64) {
        self.committed.send_modify(|offsets| {
            if let Some(slot) = offsets.get_mut(partition as usize) {
                *slot = (*slot).max(next_offset);
            }
        });
    }
}

impl IngestProgress {
    /// Records this process's ingest pipeline has set aside in the object
    /// store's dead-letter area since it started (refused envelopes and
    /// batches, and records the store refused for good); 0 in a process
    /// that only follows other workers' progress.
    pub fn dead_letters(&self) -> u64 {
        self.dead_letters.load(Ordering::Relaxed)
    }

    /// Progress of workers in other processes, read from the committed
    /// offsets of their consumer `group` on `bus` every 200 ms: what a
    /// gateway, which publishes but does not consume, waits on. The polling
    /// task runs on the current runtime until every clone of the returned
    /// progress is dropped.
    pub fn follow(bus: Arc<dyn Bus>, group: &'static str) -> IngestProgress {
        let (sender, progress) = channel(bus.partition_count());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(FOLLOW_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = sender.committed.closed() => return,
                    _ = ticks.tick() => {}
                }
                match bus.committed_offsets(group).await {
                    Ok(offsets) => {
                        for (partition, next) in offsets.into_iter().enumerate() {
                            // At most the partition count, a u32.
                            sender.committed(partition as u32, next);
                        }
                    }
                    // Imports then answer `queryable: false` after their
                    // wait; nothing else depends on it.
                    Err(e) => debug!(error = %e, "reading the workers' committed offsets failed"),
                }
            }
        });
        progress
    }

    /// Waits until the record at `offset` of `partition` is committed.
    /// Returns `false` if that did not happen within `timeout` (the record
    /// is durable on the bus all the same, and will be processed).
    pub async fn wait_committed(&self, partition: u32, offset: u64, timeout: Duration) -> bool {
        let mut rx = self.committed.clone();
        let done = rx.wait_for(|offsets| {
            offsets
                .get(partition as usize)
                .is_some_and(|&next| next > offset)
        });
        matches!(tokio::time::timeout(timeout, done).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_ingest_bus::EmbeddedBus;

    use super::*;

    /// A gateway's view follows commits made by a consumer it does not
    /// own, and only those.
    #[actix_rt::test]
    async fn follow_sees_another_consumers_commits() {
        let dir = tempfile::tempdir().unwrap();
        let bus: Arc<dyn Bus> = Arc::new(EmbeddedBus::open(dir.path(), 2).unwrap());
        let progress = IngestProgress::follow(bus.clone(), "workers");
        let first = bus.publish(b"host-a", b"one".to_vec()).await.unwrap();
        let second = bus.publish(b"host-a", b"two".to_vec()).await.unwrap();
        let mut worker = bus.consumer("workers").await.unwrap();
        worker
            .commit(first.partition, first.offset + 1)
            .await
            .unwrap();

        let wait = Duration::from_secs(10);
        assert!(
            progress
                .wait_committed(first.partition, first.offset, wait)
                .await
        );
        let short = Duration::from_millis(600);
        assert!(
            !progress
                .wait_committed(second.partition, second.offset, short)
                .await
        );
        worker
            .commit(second.partition, second.offset + 1)
            .await
            .unwrap();
        assert!(
            progress
                .wait_committed(second.partition, second.offset, wait)
                .await
        );
    }
}
