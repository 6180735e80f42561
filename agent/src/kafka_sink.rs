//! The Kafka sink: an agent inside the cluster publishes its batches
//! straight onto the ingest bus's Kafka topic, skipping the gateway, in
//! the very records a gateway would publish — the bus envelope with the
//! tenant and project, keyed by (tenant, host) — so the workers consume
//! them unchanged.
//!
//! The gateway takes a batch's tenant from the caller's credential; here
//! nothing checks it: the agent names its tenant and project itself, and
//! anyone who can write to the topic can write for any tenant. So the
//! Kafka sink is for trusted agents inside the cluster's network, with a
//! configured tenant and project; agents elsewhere go through a gateway.
//!
//! While Kafka is unreachable, batches are spooled and replayed in order,
//! as with the HTTP sink ([`SpoolingSink`]). Unlike an HTTP backend, a
//! broker that is away costs the publish timeout to find out; so once a
//! publish (or the first connect) has found it away, the transport says so
//! ([`Transport::ready`]) and batches go straight to the spool, while one
//! reconnect at a time probes the broker in the background, with backoff
//! (`link`). The agent's loop never waits on a broker known to be down.

mod link;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_ingest_bus::KafkaOptions;
use kiln_model::{Envelope, ScopeNameError, check_scope_name};

use crate::sink::{Attempt, Spool, SpoolingSink, Transport};
use link::Link;

/// How long the broker has to take a batch before it is spooled. Shorter
/// than the gateway's: the agent's loop waits on it, once per outage.
pub const KAFKA_PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes batches to Kafka, spooling them while it is away.
pub type KafkaSink = SpoolingSink<KafkaTransport>;

impl KafkaSink {
    /// A sink publishing to the topic of `options` for `tenant`/`project`,
    /// keyed by `host` (the agent's host name, which its batches carry as
    /// their source), with an optional spool.
    pub fn kafka(
        options: KafkaOptions,
        tenant: &str,
        project: &str,
        host: &str,
        spool: Option<Spool>,
    ) -> Result<Self, KafkaSinkError> {
        let transport = KafkaTransport::new(options, tenant, project, host)?;
        Ok(SpoolingSink::with_transport(transport, spool))
    }
}

/// Why a Kafka sink could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum KafkaSinkError {
    /// The tenant or project name is not one the store accepts.
    #[error(transparent)]
    Scope(#[from] ScopeNameError),
    /// The runtime that drives the Kafka client could not start.
    #[error("cannot start the Kafka client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// One Kafka topic, for one tenant's project and host. Connects on first
/// use, and again in the background after the broker was found away, so
/// that an agent started or running while Kafka is down spools and carries
/// on.
pub struct KafkaTransport {
    tenant: String,
    project: String,
    key: Vec<u8>,
    link: Link,
}

impl KafkaTransport {
    /// A transport for `tenant`/`project` keyed by `host`; nothing is
    /// connected yet.
    pub fn new(
        options: KafkaOptions,
        tenant: &str,
        project: &str,
        host: &str,
    ) -> Result<Self, KafkaSinkError> {
        check_scope_name("tenant", tenant)?;
        check_scope_name("project", project)?;
        let link = Link::new(options.publish_timeout(KAFKA_PUBLISH_TIMEOUT))
            .map_err(KafkaSinkError::Runtime)?;
        Ok(KafkaTransport {
            tenant: tenant.to_owned(),
            project: project.to_owned(),
            key: kiln_model::bus_key(tenant, host),
            link,
        })
    }

    /// Publishes tried so far, delivered or not: a batch spooled because
    /// the broker is known to be away costs none.
    pub fn publish_attempts(&self) -> u64 {
        self.link.publishes()
    }

    /// Connects started so far: the first, then one per reconnect probe.
    pub fn connect_attempts(&self) -> u64 {
        self.link.connects()
    }
}

impl Transport for KafkaTransport {
    fn try_send(&mut self, batch: &[u8]) -> Attempt {
        let received_at_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64);
        let payload = Envelope::new(&self.tenant, &self.project, received_at_ns, batch)
            .expect("names checked in new")
            .encode();
        self.link.publish(&self.key, payload)
    }

    fn ready(&mut self) -> Result<(), String> {
        self.link.ready()
    }
}

impl fmt::Debug for KafkaTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options = self.link.options();
        f.debug_struct("KafkaTransport")
            .field("brokers", &options.brokers)
            .field("topic", &options.topic)
            .field("tenant", &self.tenant)
            .field("project", &self.project)
            .field("connected", &self.link.is_up())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use kiln_model::Batch;

    use super::*;
    use crate::sink::{Delivery, Sink};

    fn options(brokers: &str) -> KafkaOptions {
        KafkaOptions::new(brokers).topic("kiln-agent-test")
    }

    #[test]
    fn names_a_store_would_refuse_are_refused_up_front() {
        let err = KafkaTransport::new(options("127.0.0.1:9"), "Acme", "web", "h").unwrap_err();
        assert!(
            err.to_string().contains("invalid tenant name \"Acme\""),
            "{err}"
        );
        assert!(KafkaTransport::new(options("127.0.0.1:9"), "acme", "", "h").is_err());
    }

    // Guards that an unreachable broker spools the batch (which the
    // integration test in kiln/tests/distributed.rs then replays into a
    // real broker) rather than losing it or failing the agent.
    #[test]
    fn an_unreachable_broker_spools() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        // Port 9 (discard) on loopback: nothing listens there.
        let mut sink =
            KafkaSink::kafka(options("127.0.0.1:9"), "acme", "web", "h", Some(spool)).unwrap();
        let batch = Batch {
            source: "h".into(),
            ..Batch::default()
        };
        assert_eq!(sink.send(&batch).unwrap(), Delivery::Spooled);
        // Known away after the first connect failed: the next batch is
        // spooled behind it without a publish.
        assert_eq!(sink.send(&batch).unwrap(), Delivery::Spooled);
        assert_eq!(sink.transport().publish_attempts(), 0);
        let files = sink.spool().unwrap().files().unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(std::fs::read(&files[0].0).unwrap(), batch.encode());
    }
}
