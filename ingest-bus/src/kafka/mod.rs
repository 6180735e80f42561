//! The Kafka bus: the [`Bus`] seam over a Kafka-protocol broker, through
//! librdkafka (the `rdkafka` crate), for deployments where the gateway and
//! the ingest workers are separate processes on separate machines.
//!
//! - Publishing: one producer per bus, zstd-compressed batches (librdkafka
//!   lingers a few milliseconds to fill them), `acks=all`. The partition is
//!   chosen by [`partition_for`], as on the embedded bus, so a (tenant,
//!   host) key always lands on the same partition and so on the same
//!   worker, whose dictionary cache then stays warm.
//! - Consuming: every consumer of a group joins the broker's consumer
//!   group, which spreads the partitions over the members and moves a dead
//!   member's partitions to the others once its session times out.
//!   Offsets are committed only when the caller says so
//!   ([`Consumer::commit`]), after its write: nothing is auto-committed.
//!   Groups are scoped by topic: group `g` of topic `t` is `t.g` on the
//!   broker, so that deployments (or tests) sharing a broker on different
//!   topics never join one group, whose rebalances would stall them all.

//!
//! The client (librdkafka, a C library built from source) is behind the
//! `kafka` feature; without it a `kafka://` URL still parses, and opening
//! it says the build has no Kafka client.

#[cfg(feature = "kafka")]
mod client;
#[cfg(feature = "kafka")]
mod config;
#[cfg(feature = "kafka")]
mod consumer;
mod options;
#[cfg(feature = "kafka")]
mod topic;

#[cfg(feature = "kafka")]
pub use client::KafkaBus;
pub use options::KafkaOptions;
