//! `Decoder`: bus record → envelope header and batch.

use actix::{Actor, Context, Handler, Message};
use kiln_ingest_bus::Record;
use kiln_model::Batch;

use crate::envelope::EnvelopeHeader;

/// A decoded bus record.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// Whose batch, and when it arrived.
    pub header: EnvelopeHeader,
    /// The batch.
    pub batch: Batch,
}

/// A record that could not be decoded. It goes to the dead-letter area of
/// the object store, whole, so that nothing accepted is ever lost silently.
#[derive(Debug)]
pub(crate) struct Rejected {
    /// The record, as it was on the bus.
    pub record: Record,
    /// Its tenant, when the envelope could be read.
    pub tenant: Option<String>,
    /// What was wrong.
    pub reason: String,
}

/// Decodes one record.
#[derive(Debug, Message)]
#[rtype(result = "Result<Decoded, Rejected>")]
pub(crate) struct Decode(pub Record);

/// Decompresses and validates batches (the CPU-heavy step of ingest, so it
/// runs in an actor of its own).
#[derive(Debug, Default)]
pub(crate) struct Decoder;

impl Actor for Decoder {
    type Context = Context<Self>;
}

impl Handler<Decode> for Decoder {
    type Result = Result<Decoded, Rejected>;

    fn handle(&mut self, Decode(record): Decode, _: &mut Context<Self>) -> Self::Result {
        decode(record)
    }
}

pub(crate) fn decode(record: Record) -> Result<Decoded, Rejected> {
    let decoded = EnvelopeHeader::parse(&record.payload)
        .map_err(|e| (None, e.to_string()))
        .and_then(|(header, bytes)| match Batch::decode(bytes) {
            Ok(batch) => Ok(Decoded { header, batch }),
            Err(e) => Err((Some(header.scope.tenant().to_owned()), e.to_string())),
        });
    decoded.map_err(|(tenant, reason)| Rejected {
        record,
        tenant,
        reason,
    })
}
