//! `KafkaConsumer`: a member of a Kafka consumer group.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use rdkafka::Message as _;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::options::KafkaOptions;
use crate::bus::{Consumer, LagReader, PartitionLag, Record, take_within};
use crate::error::BusError;

/// One member of a consumer group on the bus topic. The broker assigns it
/// partitions, and moves them when members join or leave (or die: after
/// the session timeout).
pub(super) struct KafkaConsumer {
    /// Shared with the blocking commits.
    consumer: Arc<StreamConsumer>,
    topic: String,
    group: String,
    /// Records received but not yet returned: what makes `poll` cancel
    /// safe. A record is moved here as soon as it is received and leaves
    /// only in the `Vec` a poll returns.
    pending: Vec<Record>,
}

impl KafkaConsumer {
    /// Joins `group` and subscribes to the bus topic.
    pub(super) fn join(options: &KafkaOptions, group: &str) -> Result<KafkaConsumer, BusError> {
        let consumer: StreamConsumer = options
            .consumer_config(group)
            .create()
            .map_err(BusError::kafka("create a consumer"))?;
        consumer
            .subscribe(&[&options.topic])
            .map_err(BusError::kafka("subscribe to the topic"))?;
        Ok(KafkaConsumer {
            consumer: Arc::new(consumer),
            topic: options.topic.clone(),
            group: group.to_owned(),
            pending: Vec::new(),
        })
    }
}

/// Whether a consumer error only reports the state of the connections
/// (a broker unreachable, all of them down): librdkafka queues one such
/// event per failed attempt and reconnects by itself, so they are no
/// failure of a poll. Handed to the caller as errors, each one made the
/// ingest loop back off (doubling, up to 30 s) and the events queued
/// while a broker was down came out one per pause: after a 15-second
/// broker restart a worker read nothing for minutes.
fn is_connection_event(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::MessageConsumption(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::Resolve
        )
    )
}

fn record_of(message: &BorrowedMessage<'_>) -> Record {
    Record {
        // librdkafka hands out partitions and offsets of assigned,
        // existing partitions only: both are non-negative.
        partition: message.partition() as u32,
        offset: message.offset() as u64,
        key: message.key().unwrap_or_default().to_vec(),
        payload: message.payload().unwrap_or_default().to_vec(),
    }
}

#[async_trait]
impl Consumer for KafkaConsumer {
    /// Waits up to `timeout` for one record, then takes whatever else
    /// librdkafka has already fetched, up to `max` records and `max_bytes`,
    /// without waiting.
    async fn poll(
        &mut self,
        max: usize,
        max_bytes: usize,
        timeout: Duration,
    ) -> Result<Vec<Record>, BusError> {
        let max = max.max(1);
        if self.pending.is_empty() {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                // `recv` is cancel safe: a message is taken off librdkafka's
                // queue only by the poll that returns it.
                match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                    Err(_elapsed) => return Ok(Vec::new()),
                    Ok(Err(e)) if is_connection_event(&e) => {
                        // librdkafka reconnects by itself; the event was
                        // logged as it came (the client context).
                        tracing::debug!(error = %e, "Kafka connection event skipped");
                    }
                    Ok(Err(e)) => return Err(BusError::kafka("poll")(e)),
                    Ok(Ok(message)) => {
                        self.pending.push(record_of(&message));
                        break;
                    }
                }
            }
        }
        let mut bytes: usize = self.pending.iter().map(|r| r.payload.len()).sum();
        while self.pending.len() < max && bytes < max_bytes {
            match self.consumer.recv().now_or_never() {
                Some(Ok(message)) => {
                    let record = record_of(&message);
                    bytes = bytes.saturating_add(record.payload.len());
                    self.pending.push(record);
                }
                Some(Err(e)) => {
                    // Hand back what was received; the error recurs on the
                    // next poll if it is lasting.
                    tracing::debug!(error = %e, "Kafka poll stopped early");
                    break;
                }
                None => break,
            }
        }
        Ok(take_within(&mut self.pending, max, max_bytes))
    }

    /// Commits synchronously (on tokio's blocking pool): `Ok` means the
    /// group coordinator stored the offset.
    async fn commit(&mut self, partition: u32, next_offset: u64) -> Result<(), BusError> {
        self.commit_all(&[(partition, next_offset)]).await
    }

    /// One `OffsetCommit` request for all the partitions.
    async fn commit_all(&mut self, offsets: &[(u32, u64)]) -> Result<(), BusError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::with_capacity(offsets.len());
        for &(partition, next_offset) in offsets {
            list.add_partition_offset(
                &self.topic,
                partition as i32,
                Offset::Offset(next_offset as i64),
            )
            .map_err(BusError::kafka("commit"))?;
        }
        let consumer = self.consumer.clone();
        tokio::task::spawn_blocking(move || consumer.commit(&list, CommitMode::Sync))
            .await
            .map_err(|_| BusError::Panicked)?
            .map_err(BusError::kafka("commit"))
    }

    fn lag_reader(&self) -> Arc<dyn LagReader> {
        Arc::new(KafkaLag {
            consumer: Arc::downgrade(&self.consumer),
            topic: self.topic.clone(),
        })
    }
}

/// How long one broker request of a lag reading may take.
const LAG_TIMEOUT: Duration = Duration::from_secs(5);

/// The lag of one [`KafkaConsumer`]: for each partition librdkafka has
/// assigned it, the group's committed offset (from the group coordinator)
/// against the partition's high watermark (from its leader). That is one
/// request for the offsets and one per assigned partition, on tokio's
/// blocking pool.
#[derive(Debug)]
struct KafkaLag {
    /// Weak: a reader kept after its consumer is dropped must not keep it
    /// in the group.
    consumer: Weak<StreamConsumer>,
    topic: String,
}

#[async_trait]
impl LagReader for KafkaLag {
    fn topic(&self) -> &str {
        &self.topic
    }

    async fn lag(&self) -> Result<Vec<PartitionLag>, BusError> {
        let Some(consumer) = self.consumer.upgrade() else {
            return Ok(Vec::new());
        };
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || {
            let assigned = consumer
                .assignment()
                .map_err(BusError::kafka("read the assignment"))?;
            if assigned.count() == 0 {
                return Ok(Vec::new());
            }
            let committed = consumer
                .committed_offsets(assigned, LAG_TIMEOUT)
                .map_err(BusError::kafka("read committed offsets"))?;
            let mut lags = Vec::new();
            for element in committed.elements_for_topic(&topic) {
                let partition = element.partition();
                let (low, high) = consumer
                    .fetch_watermarks(&topic, partition, LAG_TIMEOUT)
                    .map_err(BusError::kafka("read watermarks"))?;
                // Nothing committed: the group starts at the oldest record
                // kept (auto.offset.reset=earliest).
                let committed = match element.offset() {
                    Offset::Offset(next) => next,
                    _ => low,
                };
                lags.push(PartitionLag {
                    // librdkafka's partitions and offsets are never
                    // negative here.
                    partition: partition.max(0) as u32,
                    committed: committed.max(0) as u64,
                    end: high.max(0) as u64,
                });
            }
            lags.sort_by_key(|l| l.partition);
            Ok(lags)
        })
        .await
        .map_err(|_| BusError::Panicked)?
    }
}

impl fmt::Debug for KafkaConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConsumer")
            .field("topic", &self.topic)
            .field("group", &self.group)
            .field("pending", &self.pending.len())
            .finish()
    }
}
