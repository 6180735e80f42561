//! The decode stage: bus records → envelope headers and batches, once each
//! envelope's MAC verifies under the bus key.
//!
//! Decoding (a MAC over every byte, zstd, archive validation, a hash of
//! every dictionary entry) is most of ingest's CPU, and it needs nothing
//! but the record: a poll's records are decoded on Tokio's blocking pool,
//! split among up to [`PipelineConfig::decoders`] threads, while the
//! pipeline's event loop stores the poll before it.
//!
//! [`PipelineConfig::decoders`]: super::PipelineConfig::decoders

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use futures_util::future::join_all;
use kiln_ingest_bus::Record;
use kiln_model::{Batch, MAX_BATCH_BYTES};
use tokio::task::JoinError;

use super::deduper::Deduper;
use crate::envelope::{BusKey, EnvelopeHeader};
use crate::telemetry::{Stage, WorkerMetrics};

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

/// One poll of the bus, decoded.
#[derive(Debug, Default)]
pub(crate) struct DecodedPoll {
    /// Per partition, the offset after the poll's last record: what is
    /// committed once the poll is stored.
    pub next_offsets: BTreeMap<u32, u64>,
    /// The records that decoded, in the poll's order.
    pub decoded: Vec<Decoded>,
    /// Those that did not.
    pub rejected: Vec<Rejected>,
}

/// Decodes polls off the event loop.
#[derive(Debug, Clone)]
pub(crate) struct Decoder {
    key: BusKey,
    /// What is already written, left out of the batches undecoded.
    known: Deduper,
    /// Most blocking threads one poll is split among (at least 1).
    threads: usize,
    metrics: WorkerMetrics,
}

impl Decoder {
    /// A decoder that trusts records signed with `key`, leaves out of
    /// each batch the dictionary entries `known` holds, and splits each
    /// poll among up to `threads` blocking threads; its time is counted as
    /// [`Stage::Decode`] in `metrics`.
    pub(crate) fn new(key: BusKey, known: Deduper, threads: usize, metrics: WorkerMetrics) -> Self {
        Decoder {
            key,
            known,
            threads: threads.max(1),
            metrics,
        }
    }

    /// Starts decoding `records` at once, on the blocking pool; the
    /// returned future only collects the result, so the work goes on
    /// whether or not it is polled yet. An error means a decoding thread
    /// panicked.
    pub(crate) fn decode(
        &self,
        records: Vec<Record>,
    ) -> impl Future<Output = Result<DecodedPoll, JoinError>> + Send + 'static {
        let started = Instant::now();
        let mut poll = DecodedPoll::default();
        for record in &records {
            let next = poll.next_offsets.entry(record.partition).or_insert(0);
            *next = (*next).max(record.offset + 1);
        }
        let per_thread = records.len().div_ceil(self.threads).max(1);
        let mut records = records.into_iter();
        let mut chunks = Vec::new();
        loop {
            let chunk: Vec<Record> = records.by_ref().take(per_thread).collect();
            if chunk.is_empty() {
                break;
            }
            let key = self.key.clone();
            let known = self.known.clone();
            chunks.push(tokio::task::spawn_blocking(move || {
                let out: Vec<_> = chunk.into_iter().map(|r| decode(r, &key, &known)).collect();
                (out, Instant::now())
            }));
        }
        let metrics = self.metrics.clone();
        async move {
            let mut finished = started;
            for chunk in join_all(chunks).await {
                let (out, done) = chunk?;
                finished = finished.max(done);
                for result in out {
                    match result {
                        Ok(decoded) => poll.decoded.push(decoded),
                        Err(rejected) => poll.rejected.push(rejected),
                    }
                }
            }
            // From the start to the last thread's end, however late the
            // pipeline collects it.
            metrics.observe(Stage::Decode, finished - started);
            Ok(poll)
        }
    }
}

/// Decodes one record, leaving out of its batch the dictionary entries
/// its tenant has in `known`.
pub(crate) fn decode(record: Record, key: &BusKey, known: &Deduper) -> Result<Decoded, Rejected> {
    let parsed = match EnvelopeHeader::parse(&record.payload, key) {
        Ok((header, bytes)) => match known.with_known(header.scope.tenant(), |known| {
            Batch::decode_leaving_out(bytes, MAX_BATCH_BYTES, &known)
        }) {
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
        let decoded = decode(
            record(header.wrap(&batch(), &key())),
            &key(),
            &Deduper::default(),
        )
        .unwrap();
        assert_eq!(decoded.header, header);
        assert_eq!(decoded.record.offset, 7);
    }

    /// Guards the decode's shortcut and its scope: the entries a tenant
    /// has written are left out of its batches, undecoded, and only of
    /// its own: one tenant's writes never vouch for another's entries.
    #[test]
    fn entries_the_tenant_has_written_are_left_out_of_its_batches_only() {
        use kiln_model::{Frame, FrameKind, LabelSet};

        let mut b = BatchBuilder::new("h", 0, 1);
        let (main, work) = (
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, "work"),
        );
        b.add(1, &[main.clone(), work.clone()], &LabelSet::new(), 2);
        let batch = b.finish();
        let known = Deduper::default();
        known.remember([super::super::deduper::Remember {
            tenant: "acme".into(),
            frames: vec![main.id()],
            stacks: vec![batch.stacks[0].id],
            ..Default::default()
        }]);
        let wrapped = |tenant: &str| {
            let header = EnvelopeHeader {
                scope: Scope::new(tenant, "web").unwrap(),
                received_at_ns: 1,
            };
            record(header.wrap(&batch.encode(), &key()))
        };
        let acme = decode(wrapped("acme"), &key(), &known).unwrap().batch;
        assert_eq!(acme.frames.len(), 1);
        assert_eq!(acme.frames[0].id, work.id());
        assert!(acme.stacks.is_empty());
        assert_eq!(acme.samples, batch.samples);
        let other = decode(wrapped("globex"), &key(), &known).unwrap().batch;
        assert_eq!(other, batch);
    }

    /// Guards the trust boundary: a record naming a tenant under a wrong
    /// MAC, or under none, is refused with no tenant, so that it is never
    /// filed under the tenant it names.
    #[test]
    fn forged_and_unsigned_records_name_no_tenant() {
        let forged = Envelope::new("victim", "web", 0, &batch())
            .unwrap()
            .encode(b"a key the worker does not hold");
        let err = decode(record(forged), &key(), &Deduper::default()).unwrap_err();
        assert_eq!(err.tenant, None);
        assert!(
            err.reason.starts_with("envelope MAC does not verify"),
            "{}",
            err.reason
        );
        let mut unsigned = b"KLNE\x01\x06victim\x03web".to_vec();
        unsigned.extend_from_slice(&0i64.to_le_bytes());
        unsigned.extend_from_slice(&batch());
        let err = decode(record(unsigned), &key(), &Deduper::default()).unwrap_err();
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
        let err = decode(
            record(header.wrap(b"KLNB\x09\0\0\0", &key())),
            &key(),
            &Deduper::default(),
        )
        .unwrap_err();
        assert_eq!(err.tenant.as_deref(), Some("acme"));
        assert!(err.reason.contains("version 9"), "{}", err.reason);
    }
}
