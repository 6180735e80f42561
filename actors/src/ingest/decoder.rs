//! `Decoder`: bus record → envelope header and batch, once the envelope's
//! MAC verifies under the bus key.

use actix::{Actor, Context, Handler, Message};
use kiln_ingest_bus::Record;
use kiln_model::Batch;

use crate::envelope::{BusKey, EnvelopeHeader};

/// A decoded bus record.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// Whose batch, and when it arrived.
    pub header: EnvelopeHeader,
    /// The batch.
    pub batch: Batch,
    /// The record it came from, kept to set it aside whole should the
    /// store refuse it for good.
    pub record: Record,
}

/// A record that could not be decoded. It goes to the dead-letter area of
/// the object store, whole, so that nothing accepted is ever lost silently.
#[derive(Debug)]
pub(crate) struct Rejected {
    /// The record, as it was on the bus.
    pub record: Record,
    /// Its tenant, when the envelope's MAC verified: the tenant a record
    /// merely names is never trusted, so a forged one is set aside outside
    /// every tenant's area.
    pub tenant: Option<String>,
    /// What was wrong.
    pub reason: String,
}

/// Decodes one record.
#[derive(Debug, Message)]
#[rtype(result = "Result<Decoded, Rejected>")]
pub(crate) struct Decode(pub Record);

/// Verifies envelopes and decompresses and validates batches (the
/// CPU-heavy step of ingest, so it runs in an actor of its own).
#[derive(Debug)]
pub(crate) struct Decoder {
    key: BusKey,
}

impl Decoder {
    /// A decoder that trusts records signed with `key`.
    pub(crate) fn new(key: BusKey) -> Self {
        Decoder { key }
    }
}

impl Actor for Decoder {
    type Context = Context<Self>;
}

impl Handler<Decode> for Decoder {
    type Result = Result<Decoded, Rejected>;

    fn handle(&mut self, Decode(record): Decode, _: &mut Context<Self>) -> Self::Result {
        decode(record, &self.key)
    }
}

pub(crate) fn decode(record: Record, key: &BusKey) -> Result<Decoded, Rejected> {
    let parsed = match EnvelopeHeader::parse(&record.payload, key) {
        Ok((header, bytes)) => match Batch::decode(bytes) {
            Ok(batch) => Ok((header, batch)),
            Err(e) => Err((
                Some(header.scope.tenant().to_owned()),
                format!("batch refused: {e}"),
            )),
        },
        // Without a verified MAC (or an envelope at all) the tenant the
        // record names is unproven: it goes to no tenant's area.
        Err(e) => Err((None, e.to_string())),
    };
    match parsed {
        Ok((header, batch)) => Ok(Decoded {
            header,
            batch,
            record,
        }),
        Err((tenant, reason)) => Err(Rejected {
            record,
            tenant,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use kiln_model::{BatchBuilder, Envelope};
    use kiln_storage::Scope;

    use super::*;

    fn key() -> BusKey {
        BusKey::new("a-shared-bus-key-long-enough").unwrap()
    }

    fn record(payload: Vec<u8>) -> Record {
        Record {
            partition: 0,
            offset: 7,
            key: Vec::new(),
            payload,
        }
    }

    fn batch() -> Vec<u8> {
        BatchBuilder::new("h", 0, 1).finish().encode()
    }

    #[test]
    fn a_signed_record_decodes() {
        let header = EnvelopeHeader {
            scope: Scope::new("acme", "web").unwrap(),
            received_at_ns: 1,
        };
        let decoded = decode(record(header.wrap(&batch(), &key())), &key()).unwrap();
        assert_eq!(decoded.header, header);
        assert_eq!(decoded.record.offset, 7);
    }

    /// Guards the trust boundary: a record naming a tenant under a wrong
    /// MAC, or under none, is refused with no tenant, so that it is never
    /// filed under the tenant it names.
    #[test]
    fn forged_and_unsigned_records_name_no_tenant() {
        let forged = Envelope::new("victim", "web", 0, &batch())
            .unwrap()
            .encode(b"a key the worker does not hold");
        let err = decode(record(forged), &key()).unwrap_err();
        assert_eq!(err.tenant, None);
        assert!(
            err.reason.starts_with("envelope MAC does not verify"),
            "{}",
            err.reason
        );
        let mut unsigned = b"KLNE\x01\x06victim\x03web".to_vec();
        unsigned.extend_from_slice(&0i64.to_le_bytes());
        unsigned.extend_from_slice(&batch());
        let err = decode(record(unsigned), &key()).unwrap_err();
        assert_eq!(err.tenant, None);
        assert!(
            err.reason.starts_with("envelope MAC does not verify"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn a_bad_batch_under_a_good_mac_names_its_tenant() {
        let header = EnvelopeHeader {
            scope: Scope::new("acme", "web").unwrap(),
            received_at_ns: 1,
        };
        let err = decode(record(header.wrap(b"KLNB\x09\0\0\0", &key())), &key()).unwrap_err();
        assert_eq!(err.tenant.as_deref(), Some("acme"));
        assert!(err.reason.contains("version 9"), "{}", err.reason);
    }
}
