//! The bus envelope with a validated [`Scope`]: what the gateway publishes
//! for each accepted batch. The byte format is [`kiln_model::Envelope`]'s
//! (an in-cluster agent's Kafka sink writes it too); see there.

use kiln_model::Envelope;
use kiln_storage::Scope;

pub use kiln_model::EnvelopeError;

/// Who a batch belongs to and when it arrived: the envelope's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// Whose batch this is.
    pub scope: Scope,
    /// When the gateway accepted it.
    pub received_at_ns: i64,
}

impl EnvelopeHeader {
    /// The bus key: tenant and host, so that one host's batches stay in one
    /// partition (and one worker's dictionary cache).
    pub fn bus_key(&self, source: &str) -> Vec<u8> {
        kiln_model::bus_key(self.scope.tenant(), source)
    }

    /// The envelope's bytes around `batch` (an encoded [`kiln_model::Batch`]).
    pub fn wrap(&self, batch: &[u8]) -> Vec<u8> {
        Envelope::new(
            self.scope.tenant(),
            self.scope.project(),
            self.received_at_ns,
            batch,
        )
        .expect("a Scope's names pass the envelope's check: it is the same rule")
        .encode()
    }

    /// Splits envelope bytes into the header and the batch bytes.
    pub fn parse(bytes: &[u8]) -> Result<(EnvelopeHeader, &[u8]), EnvelopeError> {
        let envelope = Envelope::parse(bytes)?;
        let header = EnvelopeHeader {
            scope: Scope::new(envelope.tenant(), envelope.project())
                .expect("checked names make a Scope: it is the same rule"),
            received_at_ns: envelope.received_at_ns(),
        };
        Ok((header, envelope.batch()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> EnvelopeHeader {
        EnvelopeHeader {
            scope: Scope::new("acme", "web").unwrap(),
            received_at_ns: -5,
        }
    }

    #[test]
    fn round_trip() {
        let bytes = header().wrap(&[1, 2, 3]);
        let (h, batch) = EnvelopeHeader::parse(&bytes).unwrap();
        assert_eq!(h, header());
        assert_eq!(batch, [1, 2, 3]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = header().wrap(&[]);
        for n in 0..bytes.len() {
            assert!(
                EnvelopeHeader::parse(&bytes[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
    }
}
