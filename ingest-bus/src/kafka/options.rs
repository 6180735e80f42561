//! How to reach a Kafka bus, and its tuning (what a `kafka://` URL says).

use std::time::Duration;

#[cfg(feature = "kafka")]
use crate::error::BusError;

/// Where a [`KafkaBus`](super::KafkaBus) connects, and its tuning;
/// [`KafkaOptions::new`] gives the defaults documented on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaOptions {
    /// Bootstrap brokers, `host:port[,host:port…]`.
    pub brokers: String,
    /// The topic carrying agent batches. Default `kiln-ingest`.
    pub topic: String,
    /// Partitions to create the topic with when it does not exist. It
    /// bounds how many workers share the load. Default 8.
    pub partitions: u32,
    /// How long a publish may wait for the brokers before it fails (and
    /// the gateway answers 503). Default 10 s.
    pub publish_timeout: Duration,
    /// How long the producer waits to fill a batch before sending it:
    /// larger batches compress better and cost fewer requests. Default
    /// 5 ms.
    pub linger: Duration,
    /// How long the group waits for a silent consumer (a killed worker)
    /// before handing its partitions to the others. Default 6 s.
    pub session_timeout: Duration,
    /// The largest key plus payload a publish accepts. Default 64 MiB
    /// (brokers must allow it too: `message.max.bytes`).
    pub max_record_bytes: usize,
}

/// The topic name used when a URL names none.
const DEFAULT_TOPIC: &str = "kiln-ingest";

impl KafkaOptions {
    /// Defaults, for `brokers`.
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaOptions {
            brokers: brokers.into(),
            topic: DEFAULT_TOPIC.to_owned(),
            partitions: 8,
            publish_timeout: Duration::from_secs(10),
            linger: Duration::from_millis(5),
            session_timeout: Duration::from_secs(6),
            max_record_bytes: 64 << 20,
        }
    }

    /// Sets [`topic`](Self::topic).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// Sets [`partitions`](Self::partitions).
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// Sets [`publish_timeout`](Self::publish_timeout).
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Sets [`session_timeout`](Self::session_timeout).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Checked when the client connects.
    #[cfg(feature = "kafka")]
    pub(crate) fn validate(&self) -> Result<(), BusError> {
        if self.brokers.trim().is_empty() {
            return Err(BusError::InvalidOption(
                "a Kafka bus needs at least one broker",
            ));
        }
        if self.topic.is_empty() {
            return Err(BusError::InvalidOption("a Kafka bus needs a topic name"));
        }
        if self.partitions == 0 || self.partitions > i32::MAX as u32 {
            return Err(BusError::NoPartitions);
        }
        if self.publish_timeout.is_zero() || self.session_timeout.is_zero() {
            return Err(BusError::InvalidOption(
                "Kafka publish and session timeouts must be above 0",
            ));
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > 1 << 30 {
            return Err(BusError::InvalidOption(
                "max_record_bytes must be between 1 byte and 1 GiB",
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "kafka"))]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_do_not() {
        assert!(KafkaOptions::new("127.0.0.1:9092").validate().is_ok());
        assert!(KafkaOptions::new(" ").validate().is_err());
        assert!(KafkaOptions::new("h:1").topic("").validate().is_err());
        assert!(matches!(
            KafkaOptions::new("h:1").partitions(0).validate(),
            Err(BusError::NoPartitions)
        ));
        assert!(
            KafkaOptions::new("h:1")
                .publish_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
    }
}
