//! How to reach a Kafka bus, and the librdkafka settings that follow.

use std::time::Duration;

use rdkafka::ClientConfig;

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
pub(super) const DEFAULT_TOPIC: &str = "kiln-ingest";

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

    /// Settings every client shares.
    fn common(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        config
    }

    /// An admin client (topic creation).
    pub(crate) fn admin_config(&self) -> ClientConfig {
        self.common()
    }

    /// The producer: zstd batches, acknowledged by every in-sync replica,
    /// failing after `publish_timeout` (give or take a second: see
    /// [`RECONNECT_BACKOFF_MAX_MS`]).
    pub(crate) fn producer_config(&self) -> ClientConfig {
        let mut config = self.common();
        config
            .set("compression.type", "zstd")
            .set("linger.ms", millis(self.linger))
            .set("acks", "all")
            .set("message.timeout.ms", millis(self.publish_timeout))
            .set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS)
            // The record limit plus room for the batch framing.
            .set(
                "message.max.bytes",
                (self.max_record_bytes + (1 << 16)).to_string(),
            );
        config
    }

    /// A consumer of `group`: manual commits only, starting at the oldest
    /// record when the group has committed nothing (a new deployment
    /// ingests what the gateway accepted before the first worker came up).
    pub(crate) fn consumer_config(&self, group: &str) -> ClientConfig {
        let mut config = self.common();
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", millis(self.session_timeout))
            // Heartbeats a third of the session, as Kafka recommends.
            .set("heartbeat.interval.ms", millis(self.session_timeout / 3))
            // How long the broker may hold a fetch that finds no data. A
            // broker that does not answer early when data arrives (tansu)
            // adds all of it to every batch's publish-to-queryable time;
            // librdkafka's 500 ms default was the whole latency floor.
            // The cost is ten empty fetches a second per idle consumer.
            .set("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
            .set(
                "receive.message.max.bytes",
                (self.max_record_bytes + (1 << 20)).to_string(),
            );
        config
    }
}

/// See `fetch.wait.max.ms` in [`KafkaOptions::consumer_config`].
const FETCH_WAIT_MAX_MS: &str = "100";

/// The producer's longest wait between reconnects to a broker that went
/// away. librdkafka's default (10 s) also delays noticing that the
/// records queued for that broker timed out: with a 5 s publish timeout,
/// a publish to a stopped broker failed after 8.6 s; with this, after
/// 5.8 s (the agent's Kafka outage test).
const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

fn millis(d: Duration) -> String {
    d.as_millis().max(1).to_string()
}

#[cfg(test)]
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

    #[test]
    fn producer_compresses_and_waits_for_all_replicas() {
        let config = KafkaOptions::new("h:1").producer_config();
        assert_eq!(config.get("compression.type"), Some("zstd"));
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("linger.ms"), Some("5"));
        assert_eq!(config.get("message.timeout.ms"), Some("10000"));
        // Bounds how late a publish to a broker that went away fails.
        assert_eq!(config.get("reconnect.backoff.max.ms"), Some("1000"));
    }

    #[test]
    fn consumers_never_commit_on_their_own() {
        let config = KafkaOptions::new("h:1").consumer_config("g");
        assert_eq!(config.get("group.id"), Some("g"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(config.get("auto.offset.reset"), Some("earliest"));
        // Bounds publish-to-queryable latency on brokers that hold fetches.
        assert_eq!(config.get("fetch.wait.max.ms"), Some("100"));
    }
}
