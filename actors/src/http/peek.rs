//! What a gateway reads of an agent batch before publishing it: the
//! header, and from the archive, without building the batch, the few
//! figures it needs (the source, whose bus key keeps one host's batches in
//! order; the sample count its quota meters; sizes for the answer).
//!
//! The worker decodes every batch in full (dictionary ids hashed, every
//! limit and metric point checked) and sets aside those that fail, under
//! their tenant's dead letters; decoding each batch at the gateway as well
//! cost as much CPU again. What is checked here is what a client must hear
//! about at once, with the problem named: bytes that are not a batch, a
//! version this build does not read, a payload that does not decompress or
//! inflates past the gateway's limit, an archive that does not validate,
//! a source too long to key by, counts that overflow.

use std::io::Read;

use kiln_model::{
    BATCH_HEADER_LEN, BATCH_VERSION, Batch, BatchError, MAX_LABEL_VALUE_LEN, batch_version,
};

/// An agent batch as the gateway sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSummary {
    /// Who sent it (the agent's host name).
    pub source: String,
    /// Its samples (the sum of their counts).
    pub samples: u64,
    /// Its new stacks.
    pub stacks: usize,
    /// Its metric points.
    pub metric_points: usize,
}

impl BatchSummary {
    fn of(batch: &Batch) -> Self {
        BatchSummary {
            source: batch.source.clone(),
            samples: batch.sample_count(),
            stacks: batch.stacks.len(),
            metric_points: batch.metrics.len(),
        }
    }
}

/// Checks `bytes`'s header, decompresses its payload (refusing one past
/// `max_payload` bytes) and validates the archive, without deserializing
/// it or hashing its dictionary: the checks a gateway makes. A batch of an
/// older version (whose layout only the model crate knows) is decoded in
/// full; only old agents send those.
///
/// # Examples
///
/// ```
/// use kiln_model::BatchBuilder;
///
/// let bytes = BatchBuilder::new("host-a", 0, 1).finish().encode();
/// let summary = kiln_actors::http::peek_batch(&bytes, 1 << 20).unwrap();
/// assert_eq!(summary.source, "host-a");
/// let err = kiln_actors::http::peek_batch(b"not a batch", 1 << 20).unwrap_err();
/// assert!(err.to_string().contains("not a Kiln batch"));
/// ```
pub fn peek_batch(bytes: &[u8], max_payload: usize) -> Result<BatchSummary, BatchError> {
    if batch_version(bytes)? != BATCH_VERSION {
        return Batch::decode_within(bytes, max_payload).map(|b| BatchSummary::of(&b));
    }
    let payload = decompress(&bytes[BATCH_HEADER_LEN..], max_payload)?;
    let archived = rkyv::access::<rkyv::Archived<Batch>, rkyv::rancor::Error>(&payload)
        .map_err(|e| BatchError::Archive(e.to_string()))?;
    if archived.source.len() > MAX_LABEL_VALUE_LEN {
        return Err(BatchError::FieldTooLong {
            field: "source".into(),
            len: archived.source.len(),
            limit: MAX_LABEL_VALUE_LEN,
        });
    }
    let samples = archived
        .samples
        .iter()
        .try_fold(0u64, |sum, s| sum.checked_add(s.count.to_native()))
        .ok_or(BatchError::CountOverflow)?;
    Ok(BatchSummary {
        source: archived.source.as_str().to_owned(),
        samples,
        stacks: archived.stacks.len(),
        metric_points: archived.metrics.len(),
    })
}

/// The zstd payload, inflated up to `limit` bytes, aligned for rkyv.
fn decompress(compressed: &[u8], limit: usize) -> Result<rkyv::util::AlignedVec<16>, BatchError> {
    let mut payload = rkyv::util::AlignedVec::<16>::new();
    let mut decoder = zstd::stream::Decoder::new(compressed).map_err(BatchError::Decompress)?;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = decoder.read(&mut chunk).map_err(BatchError::Decompress)?;
        if n == 0 {
            return Ok(payload);
        }
        if payload.len() + n > limit {
            return Err(BatchError::TooLarge { limit });
        }
        payload.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, MetricPoint};

    use super::*;

    fn batch() -> Batch {
        let mut b = BatchBuilder::new("host-a", 0, 1);
        let frames = [Frame::named(FrameKind::Native, "main")];
        b.add(1, &frames, &LabelSet::new(), 3);
        b.add(2, &frames, &LabelSet::new(), 4);
        b.finish()
    }

    /// Guards the quota and the answer: the figures read from the archive
    /// are those of the decoded batch.
    #[test]
    fn a_summary_agrees_with_the_decoded_batch() {
        let b = batch();
        let summary = peek_batch(&b.encode(), 1 << 20).unwrap();
        assert_eq!(summary, BatchSummary::of(&b));
        assert_eq!(summary.samples, 7);
    }

    /// What the gateway still refuses, each with the problem named.
    #[test]
    fn garbage_is_refused_with_a_reason() {
        let too_short = peek_batch(b"KLN", 1 << 20).unwrap_err();
        assert!(matches!(too_short, BatchError::TooShort { len: 3 }));
        let mut newer = batch().encode();
        newer[4] = 9;
        let err = peek_batch(&newer, 1 << 20).unwrap_err();
        assert!(matches!(err, BatchError::UnsupportedVersion { found: 9 }));
        let mut not_zstd = batch().encode();
        not_zstd.truncate(BATCH_HEADER_LEN);
        not_zstd.extend_from_slice(b"not zstd at all");
        let err = peek_batch(&not_zstd, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("does not decompress"), "{err}");
        let mut not_an_archive = batch().encode();
        not_an_archive.truncate(BATCH_HEADER_LEN);
        zstd::stream::copy_encode(&b"junk"[..], &mut not_an_archive, 1).unwrap();
        let err = peek_batch(&not_an_archive, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a valid archive"), "{err}");
        let err = peek_batch(&batch().encode(), 16).unwrap_err();
        assert!(matches!(err, BatchError::TooLarge { limit: 16 }));
    }

    /// What moved to the worker: a batch whose dictionary ids or metric
    /// points are wrong passes the gateway (the worker sets it aside).
    #[test]
    fn deep_checks_are_left_to_the_worker() {
        let mut b = batch();
        b.stacks[0].frames.push(b.frames[0].id);
        b.metrics.push(MetricPoint {
            name: "gpu.utilization".into(),
            labels: b.label_sets[0].id,
            timestamp_ns: 1,
            value: f64::NAN,
        });
        let bytes = b.encode();
        assert!(Batch::decode(&bytes).is_err());
        let summary = peek_batch(&bytes, 1 << 20).unwrap();
        assert_eq!(summary.metric_points, 1);
    }
}
