//! [`KafkaBus`]: the [`Bus`] over librdkafka's producer, consumers and
//! admin client.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::consumer::KafkaConsumer;
use super::options::KafkaOptions;
use super::topic;
use crate::bus::{Bus, Consumer, Published, partition_for};
use crate::error::{BusError, PublishError};

/// How long an offsets lookup may take before it counts as failed.
const OFFSETS_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`Bus`] on a Kafka topic.
///
/// Cloning is cheap and shares the producer.
#[derive(Clone)]
pub struct KafkaBus {
    inner: Arc<Inner>,
}

struct Inner {
    options: KafkaOptions,
    producer: FutureProducer,
    partitions: u32,
    /// One group-less client per consumer group, to read the group's
    /// committed offsets without joining it.
    offset_readers: Mutex<HashMap<String, Arc<BaseConsumer>>>,
}

impl KafkaBus {
    /// Connects to the brokers and looks up the topic, creating it with
    /// `options.partitions` partitions when it does not exist. The
    /// partition count is the topic's, which may differ from
    /// `options.partitions` for an existing topic.
    pub async fn connect(options: KafkaOptions) -> Result<KafkaBus, BusError> {
        options.validate()?;
        let producer: FutureProducer = options
            .producer_config()
            .create()
            .map_err(BusError::kafka("create a producer"))?;
        let partitions = topic::ensure(&options, &producer).await?;
        tracing::info!(
            brokers = options.brokers,
            topic = options.topic,
            partitions,
            "connected to the Kafka bus"
        );
        Ok(KafkaBus {
            inner: Arc::new(Inner {
                options,
                producer,
                partitions,
                offset_readers: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The options it was connected with.
    pub fn options(&self) -> &KafkaOptions {
        &self.inner.options
    }

    /// Waits until every record handed to the producer is acknowledged, or
    /// `timeout` passes.
    pub fn flush(&self, timeout: Duration) -> Result<(), BusError> {
        self.inner
            .producer
            .flush(timeout)
            .map_err(BusError::kafka("flush the producer"))
    }

    /// The broker's name for `group` of this bus's topic.
    fn broker_group(&self, group: &str) -> String {
        format!("{}.{group}", self.inner.options.topic)
    }

    fn offset_reader(&self, group: &str) -> Result<Arc<BaseConsumer>, BusError> {
        let mut readers = self
            .inner
            .offset_readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(reader) = readers.get(group) {
            return Ok(reader.clone());
        }
        // A consumer that never subscribes does not join the group: it
        // only asks the group coordinator for the committed offsets.
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.inner.options.brokers)
            .set("group.id", self.broker_group(group))
            .set("enable.auto.commit", "false")
            .create()
            .map_err(BusError::kafka("create an offsets reader"))?;
        let reader = Arc::new(reader);
        readers.insert(group.to_owned(), reader.clone());
        Ok(reader)
    }
}

#[async_trait]
impl Bus for KafkaBus {
    fn partition_count(&self) -> u32 {
        self.inner.partitions
    }

    /// Hands the record to the producer and waits for the broker's
    /// acknowledgement (`acks=all`). Fails after the options'
    /// `publish_timeout` when no broker takes it, so that a gateway can
    /// answer 503 rather than hold its caller.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the record may or may
    /// not have been published.
    async fn publish(&self, key: &[u8], payload: Vec<u8>) -> Result<Published, PublishError> {
        let size = key.len().saturating_add(payload.len());
        let limit = self.inner.options.max_record_bytes;
        if size > limit {
            let source = BusError::RecordTooLarge { size, limit };
            return Err(PublishError { payload, source });
        }
        let partition = partition_for(key, self.inner.partitions);
        let record = FutureRecord::to(&self.inner.options.topic)
            .key(key)
            .payload(&payload)
            // Below the partition count, which came from an i32.
            .partition(partition as i32);
        // The queue timeout bounds the wait for room in librdkafka's local
        // queue; message.timeout.ms bounds the delivery itself.
        let sent = self
            .inner
            .producer
            .send(record, self.inner.options.publish_timeout)
            .await;
        match sent {
            Ok(delivery) => Ok(Published {
                partition: delivery.partition as u32,
                offset: delivery.offset as u64,
            }),
            Err((e, _)) => Err(PublishError {
                payload,
                source: BusError::kafka("publish")(e),
            }),
        }
    }

    async fn consumer(&self, group: &str) -> Result<Box<dyn Consumer>, BusError> {
        if group.is_empty() {
            return Err(BusError::InvalidGroupName {
                name: group.to_owned(),
            });
        }
        Ok(Box::new(KafkaConsumer::join(
            &self.inner.options,
            &self.broker_group(group),
        )?))
    }

    /// Asks the group coordinator for the group's committed offsets; a
    /// partition the group never committed reads 0.
    async fn committed_offsets(&self, group: &str) -> Result<Vec<u64>, BusError> {
        let reader = self.offset_reader(group)?;
        let topic = self.inner.options.topic.clone();
        let partitions = self.inner.partitions;
        tokio::task::spawn_blocking(move || {
            let mut wanted = TopicPartitionList::new();
            for p in 0..partitions {
                wanted.add_partition(&topic, p as i32);
            }
            let found = reader
                .committed_offsets(wanted, OFFSETS_TIMEOUT)
                .map_err(BusError::kafka("read committed offsets"))?;
            let mut offsets = vec![0; partitions as usize];
            for element in found.elements_for_topic(&topic) {
                if let (Offset::Offset(next), Some(slot)) = (
                    element.offset(),
                    offsets.get_mut(element.partition() as usize),
                ) {
                    *slot = next.max(0) as u64;
                }
            }
            Ok(offsets)
        })
        .await
        .map_err(|_| BusError::Panicked)?
    }
}

impl fmt::Debug for KafkaBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaBus")
            .field("brokers", &self.inner.options.brokers)
            .field("topic", &self.inner.options.topic)
            .field("partitions", &self.inner.partitions)
            .finish()
    }
}
