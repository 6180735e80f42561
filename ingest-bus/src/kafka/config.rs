//! The librdkafka settings that follow from [`KafkaOptions`].

use std::time::Duration;

use rdkafka::ClientConfig;

use super::options::KafkaOptions;

impl KafkaOptions {
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
            // With librdkafka's default of one byte, a broker answers a
            // fetch as soon as a record arrives: a fetch (two syscalls each
            // way and a response to parse) per record or two, a quarter of
            // a worker's CPU at `fleet_bench`'s rate. Holding it until this
            // much is there, or `fetch.wait.max.ms` has passed, makes it up
            // to ten fuller fetches a second per broker, for at most that
            // wait more latency.
            .set("fetch.min.bytes", FETCH_MIN_BYTES)
            .set(
                "receive.message.max.bytes",
                (self.max_record_bytes + (1 << 20)).to_string(),
            );
        config
    }
}

/// See `fetch.wait.max.ms` in [`KafkaOptions::consumer_config`].
const FETCH_WAIT_MAX_MS: &str = "100";

/// See `fetch.min.bytes` in [`KafkaOptions::consumer_config`].
const FETCH_MIN_BYTES: &str = "1048576";

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
        // Fuller fetches under load, within that bound.
        assert_eq!(config.get("fetch.min.bytes"), Some("1048576"));
    }
}
