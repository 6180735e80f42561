//! Encoding and decoding batches: the header, then zstd(rkyv), and the
//! checks a decoded archive must pass before anything reads it.

use super::*;
use crate::metric::MAX_METRIC_NAME_LEN;

/// zstd level for batches: fast, and batches are small.
const ZSTD_LEVEL: i32 = 3;

impl Batch {
    /// Encodes the batch: header, then zstd(rkyv).
    pub fn encode(&self) -> Vec<u8> {
        let archive = rkyv::to_bytes::<rkyv::rancor::Error>(self)
            .expect("serializing a batch into memory cannot fail");
        let mut out = Vec::with_capacity(BATCH_HEADER_LEN + archive.len() / 3);
        out.extend_from_slice(&BATCH_MAGIC);
        out.extend_from_slice(&BATCH_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        zstd::stream::copy_encode(&archive[..], &mut out, ZSTD_LEVEL)
            .expect("compressing into memory cannot fail");
        out
    }

    /// Decodes and validates a batch of any version this build reads
    /// (an older one is converted to the current struct); checks
    /// dictionary ids and metric points too.
    pub fn decode(bytes: &[u8]) -> Result<Batch, BatchError> {
        Self::decode_within(bytes, MAX_BATCH_BYTES)
    }

    /// [`decode`](Self::decode), refusing a payload that decompresses
    /// to more than `max_payload` bytes (at most [`MAX_BATCH_BYTES`])
    /// before inflating further: a gateway takes agent batches, which
    /// are small, with a lower limit than a worker, which also reads
    /// large imports.
    pub fn decode_within(bytes: &[u8], max_payload: usize) -> Result<Batch, BatchError> {
        Self::decode_leaving_out(bytes, max_payload, &NothingKnown)
    }

    /// [`decode_within`](Self::decode_within), leaving out of the
    /// batch the dictionary entries `known` says are held: they are
    /// neither built nor checked against their ids (see
    /// [`KnownEntries`]). The archive is validated and every limit
    /// checked all the same.
    pub fn decode_leaving_out(
        bytes: &[u8],
        max_payload: usize,
        known: &impl KnownEntries,
    ) -> Result<Batch, BatchError> {
        let (version, payload) = inflate(bytes, max_payload)?;
        let archive = |e: rkyv::rancor::Error| BatchError::Archive(e.to_string());
        // Validate, check the limits on the archive, and only then make
        // owned values: a field over its limit is never copied.
        let batch = match version {
            1 => {
                let archived = rkyv::access::<v1::ArchivedBatchV1, rkyv::rancor::Error>(&payload)
                    .map_err(archive)?;
                archived.parts().check()?;
                let mut batch = rkyv::deserialize::<v1::BatchV1, rkyv::rancor::Error>(archived)
                    .map(Batch::from)
                    .map_err(archive)?;
                batch.leave_out(known);
                batch
            }
            _ => {
                let archived = access_checked(&payload)?;
                build_leaving_out(archived, known).map_err(archive)?
            }
        };
        batch.verify_ids()?;
        batch.verify_metrics()?;
        Ok(batch)
    }

    /// What a gateway checks of a batch before it takes it, without
    /// building it: the header, the payload decompressed within
    /// `max_payload`, the archive valid, every limit of
    /// [`decode`](Self::decode) (field lengths, entry counts, stack
    /// depth, counts that add up, metric points). What it leaves to
    /// the worker's full decode is the dictionary's ids against their
    /// content and the metric values, which cost as much CPU again. A
    /// batch of an earlier version is decoded in full (only old agents
    /// send those).
    pub fn peek_within(bytes: &[u8], max_payload: usize) -> Result<BatchPeek, BatchError> {
        let (version, payload) = inflate(bytes, max_payload)?;
        if version != BATCH_VERSION {
            return Self::decode_within(bytes, max_payload).map(|b| BatchPeek::of(&b));
        }
        let archived = access_checked(&payload)?;
        let samples = archived
            .samples
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(s.count.to_native()))
            .ok_or(BatchError::CountOverflow)?;
        Ok(BatchPeek {
            source: archived.source.as_str().to_owned(),
            samples,
            sample_rows: archived.samples.len(),
            stacks: archived.stacks.len(),
            metric_points: archived.metrics.len(),
        })
    }
}

/// The owned batch of `archived`, but for the dictionary entries
/// `known` holds.
fn build_leaving_out(
    archived: &ArchivedBatch,
    known: &impl KnownEntries,
) -> Result<Batch, rkyv::rancor::Error> {
    use rkyv::api::high::HighDeserializer;
    use rkyv::rancor::Error;

    /// The entries of `entries` that `held` does not hold, built.
    fn unknown<A, T>(
        entries: &rkyv::vec::ArchivedVec<A>,
        held: impl Fn(&A) -> bool,
    ) -> Result<Vec<T>, Error>
    where
        A: rkyv::Deserialize<T, HighDeserializer<Error>>,
    {
        entries
            .iter()
            .filter(|entry| !held(entry))
            .map(rkyv::deserialize::<T, Error>)
            .collect()
    }

    // Every field named: a field added to `Batch` must be built here.
    Ok(Batch {
        source: archived.source.as_str().to_owned(),
        sent_at_ns: archived.sent_at_ns.to_native(),
        period_ns: archived.period_ns.to_native(),
        frames: unknown(&archived.frames, |f: &ArchivedFrameEntry| {
            known.knows_frame(FrameId(f.id.0.to_native()))
        })?,
        stacks: unknown(&archived.stacks, |s: &ArchivedStackEntry| {
            known.knows_stack(StackId(s.id.0.to_native()))
        })?,
        label_sets: unknown(&archived.label_sets, |l: &ArchivedLabelSetEntry| {
            known.knows_label_set(LabelSetId(l.id.0.to_native()))
        })?,
        executables: unknown(&archived.executables, |e: &ArchivedExecutable| {
            known.knows_executable(FileId(e.file_id.0.to_native()))
        })?,
        samples: rkyv::deserialize::<Vec<Sample>, Error>(&archived.samples)?,
        metrics: rkyv::deserialize::<Vec<MetricPoint>, Error>(&archived.metrics)?,
    })
}

/// A batch's version and its payload decompressed, refused past
/// `max_payload` bytes (at most [`MAX_BATCH_BYTES`]) before inflating
/// further.
fn inflate(
    bytes: &[u8],
    max_payload: usize,
) -> Result<(u16, rkyv::util::AlignedVec<16>), BatchError> {
    let limit = max_payload.min(MAX_BATCH_BYTES);
    let version = batch_version(bytes)?;
    let payload =
        super::inflate::inflate(&bytes[BATCH_HEADER_LEN..], limit).map_err(|e| match e {
            super::inflate::InflateError::TooLarge => BatchError::TooLarge { limit },
            super::inflate::InflateError::Zstd(e) => BatchError::Decompress(e),
        })?;
    Ok((version, payload))
}

/// The current version's archive in `payload`, validated, with every
/// limit checked on it.
fn access_checked(payload: &[u8]) -> Result<&ArchivedBatch, BatchError> {
    let archived = rkyv::access::<ArchivedBatch, rkyv::rancor::Error>(payload)
        .map_err(|e| BatchError::Archive(e.to_string()))?;
    limits::ArchivedParts {
        source: &archived.source,
        frames: &archived.frames,
        stacks: &archived.stacks,
        label_sets: &archived.label_sets,
        executables: &archived.executables,
        samples: &archived.samples,
    }
    .check()?;
    if archived.metrics.len() > MAX_METRIC_POINTS {
        return Err(BatchError::TooManyMetrics {
            count: archived.metrics.len(),
        });
    }
    for (index, point) in archived.metrics.iter().enumerate() {
        if point.name.len() > MAX_METRIC_NAME_LEN {
            return Err(BatchError::FieldTooLong {
                field: format!("metric point {index} name"),
                len: point.name.len(),
                limit: MAX_METRIC_NAME_LEN,
            });
        }
    }
    Ok(archived)
}
