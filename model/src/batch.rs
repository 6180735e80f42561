//! The agent batch: what an agent (or an import) sends to the backend.
//!
//! On the wire a batch is an 8-byte header followed by a zstd frame holding
//! the rkyv archive of a [`Batch`]:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "KLNB"
//!      4     2  format version, little endian (2)
//!      6     2  flags, must be 0
//!      8     …  zstd(rkyv(Batch))
//! ```
//!
//! The header stays readable without decompressing, so a consumer can refuse
//! a version it does not know with a clear error (and keep the bytes) before
//! touching the payload.
//!
//! Versions: 1 had no metric points; 2 (this build's) appends
//! [`Batch::metrics`]. Version 1 payloads, from older agents and their
//! spools, are still read: [`Batch::decode`] converts them to the current
//! struct with no metrics (module `v1` keeps their layout).

mod builder;
#[cfg(feature = "codec")]
mod codec;
#[cfg(feature = "codec")]
mod inflate;
mod known;
mod limits;
mod v1;

use crate::frame::Frame;
use crate::ids::{FileId, FrameId, LabelSetId, StackId};
use crate::labels::LabelSet;
use crate::metric::{MAX_METRIC_POINTS, MetricError, MetricPoint};
use crate::stack::{Sample, stack_id};

pub use builder::{BatchBuilder, TRUNCATED_FRAME};
pub use known::{KnownEntries, NothingKnown};
pub use limits::{
    MAX_BATCH_ENTRIES, MAX_BUILD_ID_LEN, MAX_LABEL_NAME_LEN, MAX_LABEL_VALUE_LEN, MAX_LABELS,
    MAX_NAME_LEN, MAX_STACK_DEPTH,
};

/// First four bytes of every encoded batch.
pub const BATCH_MAGIC: [u8; 4] = *b"KLNB";
/// The batch format version this build writes.
pub const BATCH_VERSION: u16 = 2;
/// The oldest batch format version this build reads.
pub const OLDEST_BATCH_VERSION: u16 = 1;
/// Size of the fixed header before the compressed payload.
pub const BATCH_HEADER_LEN: usize = 8;
/// Largest decompressed payload accepted, against decompression bombs.
/// Within it, [`Batch::decode`] checks the limits of each field and list
/// ([`MAX_NAME_LEN`], [`MAX_BATCH_ENTRIES`], …) before deserializing.
pub const MAX_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// A frame with its id, as carried in a batch's dictionary.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct FrameEntry {
    /// Must equal `frame.id()`.
    pub id: FrameId,
    /// The frame.
    pub frame: Frame,
}

/// A stack with its id, as carried in a batch's dictionary.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct StackEntry {
    /// Must equal `stack_id(&frames)`.
    pub id: StackId,
    /// Frame ids, root first.
    pub frames: Vec<FrameId>,
}

/// A label set with its id.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct LabelSetEntry {
    /// Must equal `labels.id()`.
    pub id: LabelSetId,
    /// The labels.
    pub labels: LabelSet,
}

/// An executable or library the batch's frames point into.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct Executable {
    /// Its id.
    pub file_id: FileId,
    /// Its file name (`libc.so.6`).
    pub name: String,
    /// Its GNU build id in hex, when it has one.
    pub build_id: Option<String>,
}

/// One batch of samples and the dictionary entries they need.
///
/// Samples may refer to frames and stacks sent in earlier batches: an agent
/// sends each dictionary entry once and then only its id, for as long as it
/// believes the backend has it.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Batch {
    /// Who sent it: the agent's host name, or `import` for imports.
    pub source: String,
    /// When it was sent, in nanoseconds since the Unix epoch.
    pub sent_at_ns: i64,
    /// CPU time one sample stands for, in nanoseconds (1e9 / frequency).
    pub period_ns: u64,
    /// New frames.
    pub frames: Vec<FrameEntry>,
    /// New stacks.
    pub stacks: Vec<StackEntry>,
    /// New label sets.
    pub label_sets: Vec<LabelSetEntry>,
    /// Executables first seen in this batch.
    pub executables: Vec<Executable>,
    /// The samples.
    pub samples: Vec<Sample>,
    /// Metric points (since version 2), their label sets in `label_sets`
    /// as for samples.
    pub metrics: Vec<MetricPoint>,
}

/// Why a batch could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than the header.
    #[error("batch is {len} bytes, shorter than its {BATCH_HEADER_LEN}-byte header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The magic number is wrong: this is not a Kiln batch.
    #[error("not a Kiln batch: magic bytes are {found:02x?}, expected \"KLNB\"")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A format version this build does not read.
    #[error(
        "batch format version {found} is not supported \
         (this build reads versions {OLDEST_BATCH_VERSION} to {BATCH_VERSION})"
    )]
    UnsupportedVersion {
        /// The version in the header.
        found: u16,
    },
    /// Flags this build does not know.
    #[error("batch header flags {found:#06x} are not supported (expected 0)")]
    UnsupportedFlags {
        /// The flags in the header.
        found: u16,
    },
    /// The payload is not valid zstd, or is too large.
    #[error("batch payload does not decompress: {0}")]
    Decompress(#[source] std::io::Error),
    /// The payload decompresses to more than the decoder allows
    /// ([`MAX_BATCH_BYTES`], or less where the caller said so).
    #[error("batch payload decompresses to more than {limit} bytes")]
    TooLarge {
        /// The limit it passed.
        limit: usize,
    },
    /// The archive inside fails validation.
    #[error("batch payload is not a valid archive: {0}")]
    Archive(String),
    /// A dictionary entry's id does not match its content.
    #[error("batch dictionary entry {what} {id} does not match the hash of its content")]
    IdMismatch {
        /// `frame`, `stack` or `label set`.
        what: &'static str,
        /// The id carried in the batch.
        id: String,
    },
    /// A metric point has an invalid name or a value that is not finite.
    #[error("batch metric point {index}: {source}")]
    InvalidMetric {
        /// Its position in [`Batch::metrics`].
        index: usize,
        /// What is wrong with it.
        #[source]
        source: MetricError,
    },
    /// A string is longer than its limit ([`MAX_NAME_LEN`] for names,
    /// [`MAX_LABEL_NAME_LEN`], [`MAX_LABEL_VALUE_LEN`] for labels and the
    /// source, [`MAX_BUILD_ID_LEN`]).
    #[error("batch {field} is {len} bytes long, more than the {limit} allowed")]
    FieldTooLong {
        /// Which field, e.g. `frame 3 function name`.
        field: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A list holds more than [`MAX_BATCH_ENTRIES`].
    #[error("batch holds {count} {what}, more than the {limit} allowed")]
    TooManyEntries {
        /// `frames`, `stacks`, `label sets`, `executables` or `samples`.
        what: &'static str,
        /// Entries in the batch.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A stack is deeper than [`MAX_STACK_DEPTH`].
    #[error("batch stack {index} has {depth} frames, more than the {MAX_STACK_DEPTH} allowed")]
    StackTooDeep {
        /// Its position in [`Batch::stacks`].
        index: usize,
        /// Its frames.
        depth: usize,
    },
    /// A label set has more than [`MAX_LABELS`] labels.
    #[error("batch label set {index} has {count} labels, more than the {MAX_LABELS} allowed")]
    TooManyLabels {
        /// Its position in [`Batch::label_sets`].
        index: usize,
        /// Its labels.
        count: usize,
    },
    /// The sample counts add up to more than a `u64` holds, so no total
    /// (a flamegraph's root) could be computed.
    #[error("batch sample counts add up to more than {}", u64::MAX)]
    CountOverflow,
    /// More metric points than [`MAX_METRIC_POINTS`].
    #[error("batch holds {count} metric points, more than the {MAX_METRIC_POINTS} allowed")]
    TooManyMetrics {
        /// Points in the batch.
        count: usize,
    },
}

/// Reads and checks the header; returns the version.
pub fn batch_version(bytes: &[u8]) -> Result<u16, BatchError> {
    if bytes.len() < BATCH_HEADER_LEN {
        return Err(BatchError::TooShort { len: bytes.len() });
    }
    let magic: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
    if magic != BATCH_MAGIC {
        return Err(BatchError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if !(OLDEST_BATCH_VERSION..=BATCH_VERSION).contains(&version) {
        return Err(BatchError::UnsupportedVersion { found: version });
    }
    let flags = u16::from_le_bytes([bytes[6], bytes[7]]);
    if flags != 0 {
        return Err(BatchError::UnsupportedFlags { found: flags });
    }
    Ok(version)
}

impl Batch {
    /// Checks that every dictionary id is the hash of its content, so a
    /// buggy or hostile sender cannot poison the content-addressed store.
    pub fn verify_ids(&self) -> Result<(), BatchError> {
        for f in &self.frames {
            if f.frame.id() != f.id {
                return Err(BatchError::IdMismatch {
                    what: "frame",
                    id: f.id.to_string(),
                });
            }
        }
        for s in &self.stacks {
            if stack_id(&s.frames) != s.id {
                return Err(BatchError::IdMismatch {
                    what: "stack",
                    id: s.id.to_string(),
                });
            }
        }
        for l in &self.label_sets {
            if l.labels.id() != l.id {
                return Err(BatchError::IdMismatch {
                    what: "label set",
                    id: l.id.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Drops the dictionary entries `known` holds.
    pub fn leave_out(&mut self, known: &impl KnownEntries) {
        self.frames.retain(|f| !known.knows_frame(f.id));
        self.stacks.retain(|s| !known.knows_stack(s.id));
        self.label_sets.retain(|l| !known.knows_label_set(l.id));
        self.executables
            .retain(|e| !known.knows_executable(e.file_id));
    }

    /// Checks every metric point (name, finite value) and their number,
    /// so that stores only ever see valid points.
    pub fn verify_metrics(&self) -> Result<(), BatchError> {
        if self.metrics.len() > MAX_METRIC_POINTS {
            return Err(BatchError::TooManyMetrics {
                count: self.metrics.len(),
            });
        }
        for (index, point) in self.metrics.iter().enumerate() {
            point
                .check()
                .map_err(|source| BatchError::InvalidMetric { index, source })?;
        }
        Ok(())
    }

    /// Total sample count. A decoded batch's counts always add up within a
    /// `u64` ([`BatchError::CountOverflow`]); a batch built by hand that
    /// does not gets `u64::MAX` rather than a panic or a wrapped sum.
    pub fn sample_count(&self) -> u64 {
        self.samples
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.count))
    }
}

/// What [`Batch::peek_within`] reads of a batch without building it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPeek {
    /// Who sent it (the agent's host name).
    pub source: String,
    /// The sum of its samples' counts.
    pub samples: u64,
    /// Its sample rows (what the ingest quota meters).
    pub sample_rows: usize,
    /// Its new stacks.
    pub stacks: usize,
    /// Its metric points.
    pub metric_points: usize,
}

impl BatchPeek {
    /// The same figures of a batch already built.
    pub fn of(batch: &Batch) -> BatchPeek {
        BatchPeek {
            source: batch.source.clone(),
            samples: batch.sample_count(),
            sample_rows: batch.samples.len(),
            stacks: batch.stacks.len(),
            metric_points: batch.metrics.len(),
        }
    }
}

#[cfg(all(test, feature = "codec"))]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::frame::FrameKind;
    use crate::test_strategies::{arb_frame, arb_labels};

    fn arb_batch() -> impl Strategy<Value = Batch> {
        (
            prop::collection::vec(
                (
                    any::<i64>(),
                    prop::collection::vec(arb_frame(), 0..6),
                    arb_labels(),
                    1u64..1000,
                ),
                0..12,
            ),
            any::<u64>(),
            prop::collection::vec(
                (
                    "[a-z0-9_.]{1,20}",
                    arb_labels(),
                    any::<i64>(),
                    any::<f64>().prop_filter("finite", |v| v.is_finite()),
                ),
                0..8,
            ),
        )
            .prop_map(|(samples, period, metrics)| {
                let mut b = BatchBuilder::new("host-a", 1, period);
                for (ts, frames, labels, count) in samples {
                    b.add(ts, &frames, &labels, count);
                }
                for (name, labels, ts, value) in metrics {
                    b.metric(&name, &labels, ts, value).unwrap();
                }
                b.finish()
            })
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(batch in arb_batch()) {
            let bytes = batch.encode();
            prop_assert_eq!(Batch::decode(&bytes).unwrap(), batch);
        }

        /// Guards the decoder against arbitrary input: an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = Batch::decode(&bytes);
            if bytes.len() >= 8 {
                for version in OLDEST_BATCH_VERSION..=BATCH_VERSION {
                    let [lo, hi] = version.to_le_bytes();
                    bytes[..8].copy_from_slice(&[b'K', b'L', b'N', b'B', lo, hi, 0, 0]);
                    let _ = Batch::decode(&bytes);
                }
            }
        }
    }

    #[test]
    fn unknown_version_is_refused_by_name() {
        let mut bytes = BatchBuilder::new("h", 0, 1).finish().encode();
        bytes[4] = 9;
        let err = Batch::decode(&bytes).unwrap_err();
        assert!(matches!(err, BatchError::UnsupportedVersion { found: 9 }));
        assert!(err.to_string().contains("version 9"));
        assert!(err.to_string().contains("versions 1 to 2"), "{err}");
        bytes[4] = 0;
        assert!(matches!(
            Batch::decode(&bytes),
            Err(BatchError::UnsupportedVersion { found: 0 })
        ));
    }

    fn gpu_labels(index: &str) -> LabelSet {
        LabelSet::new()
            .with(crate::label_names::HOST, "h")
            .with(crate::label_names::GPU, index)
    }

    /// Guards "the same point written twice is one point" at the source:
    /// the builder keeps the later reading, and shares label sets with
    /// samples.
    #[test]
    fn builder_keeps_one_value_per_metric_point() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let gpu0 = gpu_labels("0");
        b.add(5, &[Frame::named(FrameKind::Native, "main")], &gpu0, 1);
        b.metric("gpu.power_watts", &gpu0, 5, 100.0).unwrap();
        b.metric("gpu.power_watts", &gpu0, 5, 120.0).unwrap();
        b.metric("gpu.power_watts", &gpu0, 6, 130.0).unwrap();
        b.metric("gpu.power_watts", &gpu_labels("1"), 5, 90.0)
            .unwrap();
        b.metric("gpu.sm_clock_mhz", &gpu0, 5, 1980.0).unwrap();
        assert_eq!(b.metric_count(), 4);
        let batch = b.finish();
        assert_eq!(batch.label_sets.len(), 2);
        let values: Vec<f64> = batch.metrics.iter().map(|p| p.value).collect();
        assert_eq!(values, [120.0, 130.0, 90.0, 1980.0]);
        assert_eq!(batch.metrics[0].labels, gpu0.id());
        assert_eq!(Batch::decode(&batch.encode()).unwrap(), batch);
    }

    #[test]
    fn builder_refuses_bad_points_and_leaves_the_batch_alone() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let labels = gpu_labels("0");
        let err = b.metric("GPU Util", &labels, 0, 1.0).unwrap_err();
        assert!(err.to_string().contains("invalid metric name"), "{err}");
        let err = b.metric("gpu.power_watts", &labels, 0, f64::INFINITY);
        assert!(matches!(err, Err(MetricError::NotFinite { .. })));
        let batch = b.finish();
        assert!(batch.metrics.is_empty() && batch.label_sets.is_empty());
    }

    #[test]
    fn builder_caps_points_per_batch() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let labels = LabelSet::new();
        for ts in 0..MAX_METRIC_POINTS as i64 {
            b.metric("m", &labels, ts, 1.0).unwrap();
        }
        assert_eq!(b.metric("m", &labels, -1, 1.0), Err(MetricError::TooMany));
        // Replacing a point already in the batch is still fine.
        b.metric("m", &labels, 0, 2.0).unwrap();
    }

    /// A hand-made batch (not from the builder) with a bad point is
    /// refused on decoding, naming the point and the problem.
    #[test]
    fn decode_refuses_invalid_metric_points() {
        let point = |name: &str, value: f64| MetricPoint {
            name: name.into(),
            labels: LabelSetId(1),
            timestamp_ns: 0,
            value,
        };
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        batch.metrics = vec![point("ok", 1.0), point("", 1.0)];
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(
            matches!(err, BatchError::InvalidMetric { index: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("metric point 1"), "{err}");
        batch.metrics = vec![point("ok", f64::NAN)];
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(
            err.to_string().contains("NaN is not a finite number"),
            "{err}"
        );
        batch.metrics = vec![point("ok", 1.0); MAX_METRIC_POINTS + 1];
        assert!(matches!(
            Batch::decode(&batch.encode()),
            Err(BatchError::TooManyMetrics { .. })
        ));
    }

    #[test]
    fn forged_dictionary_id_is_refused() {
        let mut b = BatchBuilder::new("h", 0, 1);
        b.add(
            0,
            &[Frame::named(FrameKind::Native, "main")],
            &LabelSet::new(),
            1,
        );
        let mut batch = b.finish();
        batch.frames[0].id = FrameId(42);
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(matches!(err, BatchError::IdMismatch { what: "frame", .. }));
    }

    /// Holds the ids it was given.
    #[derive(Default)]
    struct Held {
        frames: Vec<FrameId>,
        stacks: Vec<StackId>,
        label_sets: Vec<LabelSetId>,
        executables: Vec<FileId>,
    }

    impl KnownEntries for Held {
        fn knows_frame(&self, id: FrameId) -> bool {
            self.frames.contains(&id)
        }
        fn knows_stack(&self, id: StackId) -> bool {
            self.stacks.contains(&id)
        }
        fn knows_label_set(&self, id: LabelSetId) -> bool {
            self.label_sets.contains(&id)
        }
        fn knows_executable(&self, id: FileId) -> bool {
            self.executables.contains(&id)
        }
    }

    /// Guards the worker's decode: the entries a reader holds are left
    /// out, everything else of the batch (its samples, metric points,
    /// other entries) is as a full decode gives it.
    #[test]
    fn held_entries_are_left_out_and_the_rest_kept() {
        let mut b = BatchBuilder::new("host-a", 9, 10);
        let (main, work) = (
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, "work"),
        );
        let (p, q) = (
            LabelSet::new().with("process", "p"),
            LabelSet::new().with("process", "q"),
        );
        b.add(1, std::slice::from_ref(&main), &p, 3);
        b.add(2, &[main.clone(), work.clone()], &q, 4);
        b.metric("cpu_seconds", &p, 1, 0.5).unwrap();
        b.add_executable(Executable {
            file_id: FileId(5),
            name: "libc.so.6".into(),
            build_id: None,
        });
        let batch = b.finish();
        let bytes = batch.encode();
        let full = Batch::decode(&bytes).unwrap();
        assert_eq!(full, batch);
        assert_eq!(
            Batch::decode_leaving_out(&bytes, MAX_BATCH_BYTES, &NothingKnown).unwrap(),
            full
        );

        let held = Held {
            frames: vec![main.id()],
            stacks: vec![batch.stacks[0].id],
            label_sets: vec![p.id()],
            executables: vec![FileId(5)],
        };
        let partial = Batch::decode_leaving_out(&bytes, MAX_BATCH_BYTES, &held).unwrap();
        let mut expected = full.clone();
        expected.leave_out(&held);
        assert_eq!(partial, expected);
        assert_eq!(partial.frames.len(), 1);
        assert_eq!(partial.frames[0].id, work.id());
        assert_eq!(partial.stacks, full.stacks[1..]);
        assert_eq!(partial.label_sets.len(), 1);
        assert_eq!(partial.label_sets[0].id, q.id());
        assert!(partial.executables.is_empty());
        assert_eq!(partial.samples, full.samples);
        assert_eq!(partial.metrics, full.metrics);
        assert_eq!(
            (
                partial.source.as_str(),
                partial.sent_at_ns,
                partial.period_ns
            ),
            ("host-a", 9, 10)
        );
    }

    /// An entry left out is not checked: it is never stored, and the
    /// content stored under its id was checked when it was first written.
    /// One the reader needs still is.
    #[test]
    fn only_entries_the_reader_needs_are_checked_against_their_ids() {
        let mut b = BatchBuilder::new("h", 0, 1);
        b.add(
            0,
            &[Frame::named(FrameKind::Native, "main")],
            &LabelSet::new(),
            1,
        );
        let mut batch = b.finish();
        batch.frames[0].id = FrameId(42);
        let forged = batch.encode();
        let held = Held {
            frames: vec![FrameId(42)],
            ..Held::default()
        };
        let decoded = Batch::decode_leaving_out(&forged, MAX_BATCH_BYTES, &held).unwrap();
        assert!(decoded.frames.is_empty());
        assert!(matches!(
            Batch::decode_leaving_out(&forged, MAX_BATCH_BYTES, &NothingKnown),
            Err(BatchError::IdMismatch { what: "frame", .. })
        ));
    }

    /// A batch with one frame named `name`, and its encoding.
    fn with_function_name(name: &str) -> Batch {
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        let frame = Frame::named(FrameKind::Native, name);
        batch.frames.push(FrameEntry {
            id: frame.id(),
            frame,
        });
        batch
    }

    /// Guards the gateway's checks: a peek names the same limits a full
    /// decode does, and reads the figures the gateway meters; only the
    /// ids' content (the worker's full decode) is left unchecked.
    #[test]
    fn peeking_checks_every_limit_but_not_the_ids() {
        let mut b = BatchBuilder::new("host-a", 0, 1);
        let labels = LabelSet::new().with("process", "p");
        b.add(0, &[Frame::named(FrameKind::Native, "main")], &labels, 3);
        b.add(1, &[Frame::named(FrameKind::Native, "main")], &labels, 4);
        let batch = b.finish();
        let peek = Batch::peek_within(&batch.encode(), MAX_BATCH_BYTES).unwrap();
        assert_eq!(peek, BatchPeek::of(&batch));
        assert_eq!((peek.samples, peek.sample_rows), (7, 2));

        let long = with_function_name(&"f".repeat(MAX_NAME_LEN + 1)).encode();
        let err = Batch::peek_within(&long, MAX_BATCH_BYTES).unwrap_err();
        assert_eq!(
            err.to_string(),
            Batch::decode(&long).unwrap_err().to_string()
        );
        assert!(err.to_string().contains("frame 0 function name"), "{err}");
        assert!(Batch::peek_within(b"not a batch", MAX_BATCH_BYTES).is_err());

        let mut forged = batch.clone();
        forged.frames[0].id = FrameId(7);
        let forged = forged.encode();
        assert!(Batch::peek_within(&forged, MAX_BATCH_BYTES).is_ok());
        assert!(matches!(
            Batch::decode(&forged),
            Err(BatchError::IdMismatch { .. })
        ));
    }

    /// Guards "a caller's lower payload limit stops inflating at it": a
    /// gateway must not inflate a worker's worth per agent batch.
    #[test]
    fn decode_within_stops_at_the_callers_limit() {
        let big = with_function_name(&"f".repeat(MAX_NAME_LEN));
        let bytes = big.encode();
        assert_eq!(Batch::decode_within(&bytes, MAX_BATCH_BYTES).unwrap(), big);
        let err = Batch::decode_within(&bytes, 1024).unwrap_err();
        assert!(
            matches!(err, BatchError::TooLarge { limit: 1024 }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "batch payload decompresses to more than 1024 bytes"
        );
        // A limit above the decoder's own is the decoder's.
        assert_eq!(Batch::decode_within(&bytes, usize::MAX).unwrap(), big);
    }

    /// Guards the name limit on decoding, at the limit and one past it;
    /// the message names the frame, the field and the limit.
    #[test]
    fn decode_refuses_names_past_the_limit() {
        let ok = with_function_name(&"f".repeat(MAX_NAME_LEN));
        assert_eq!(Batch::decode(&ok.encode()).unwrap(), ok);
        let long = with_function_name(&"f".repeat(MAX_NAME_LEN + 1));
        let err = Batch::decode(&long.encode()).unwrap_err();
        assert!(
            matches!(err, BatchError::FieldTooLong { len, limit: MAX_NAME_LEN, .. } if len == MAX_NAME_LEN + 1),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "batch frame 0 function name is 4097 bytes long, more than the 4096 allowed"
        );
        let mut batch = with_function_name("f");
        batch.frames[0].frame = Frame::Named {
            kind: FrameKind::Native,
            function: "f".into(),
            module: Some("m".repeat(MAX_NAME_LEN + 1)),
            file: None,
            line: 0,
        };
        batch.frames[0].id = batch.frames[0].frame.id();
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(err.to_string().contains("frame 0 module"), "{err}");
        batch.frames[0].frame = Frame::Named {
            kind: FrameKind::Native,
            function: "f".into(),
            module: None,
            file: Some("/".repeat(MAX_NAME_LEN + 1)),
            line: 0,
        };
        batch.frames[0].id = batch.frames[0].frame.id();
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(err.to_string().contains("frame 0 file name"), "{err}");
    }

    #[test]
    fn decode_refuses_a_long_source_and_executable_fields() {
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        batch.source = "h".repeat(MAX_LABEL_VALUE_LEN + 1);
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(
            err.to_string().starts_with("batch source is 1025 bytes"),
            "{err}"
        );
        batch.source = "h".into();
        batch.executables.push(Executable {
            file_id: FileId(1),
            name: "x".repeat(MAX_NAME_LEN + 1),
            build_id: None,
        });
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(err.to_string().contains("executable 0 name"), "{err}");
        batch.executables[0].name = "libc.so.6".into();
        batch.executables[0].build_id = Some("a".repeat(MAX_BUILD_ID_LEN + 1));
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(err.to_string().contains("executable 0 build id"), "{err}");
        batch.executables[0].build_id = Some("a".repeat(MAX_BUILD_ID_LEN));
        Batch::decode(&batch.encode()).unwrap();
    }

    /// Label sets: at most MAX_LABELS labels, names and values bounded.
    #[test]
    fn decode_refuses_label_sets_past_the_limits() {
        let with_labels = |labels: LabelSet| {
            let mut batch = BatchBuilder::new("h", 0, 1).finish();
            batch.label_sets.push(LabelSetEntry {
                id: labels.id(),
                labels,
            });
            Batch::decode(&batch.encode())
        };
        let many = |n: usize| (0..n).map(|i| (format!("l{i}"), "v")).collect::<LabelSet>();
        with_labels(many(MAX_LABELS)).unwrap();
        let err = with_labels(many(MAX_LABELS + 1)).unwrap_err();
        assert!(
            matches!(
                err,
                BatchError::TooManyLabels {
                    index: 0,
                    count: 65
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "batch label set 0 has 65 labels, more than the 64 allowed"
        );
        let err =
            with_labels(LabelSet::new().with("n".repeat(MAX_LABEL_NAME_LEN + 1), "v")).unwrap_err();
        assert!(
            err.to_string().contains("label set 0 label 0 name"),
            "{err}"
        );
        let err = with_labels(LabelSet::new().with("host", "v".repeat(MAX_LABEL_VALUE_LEN + 1)))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("label set 0 label \"host\" value is 1025 bytes long"),
            "{err}"
        );
    }

    #[test]
    fn decode_refuses_stacks_past_the_depth_limit() {
        let frame = Frame::named(FrameKind::Native, "f").id();
        let stack = |depth: usize| {
            let frames = vec![frame; depth];
            StackEntry {
                id: stack_id(&frames),
                frames,
            }
        };
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        batch.stacks = vec![stack(3), stack(MAX_STACK_DEPTH)];
        Batch::decode(&batch.encode()).unwrap();
        batch.stacks.push(stack(MAX_STACK_DEPTH + 1));
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "batch stack 2 has 4097 frames, more than the 4096 allowed"
        );
    }

    /// Guards the entry limit (samples here; every list shares the check).
    #[test]
    fn decode_refuses_too_many_entries() {
        let sample = Sample {
            timestamp_ns: 0,
            stack: StackId(1),
            labels: LabelSetId(1),
            count: 1,
        };
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        batch.samples = vec![sample; MAX_BATCH_ENTRIES + 1];
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(
            matches!(
                err,
                BatchError::TooManyEntries {
                    what: "samples",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "batch holds 1048577 samples, more than the 1048576 allowed"
        );
        batch.samples.pop();
        assert_eq!(
            Batch::decode(&batch.encode()).unwrap().samples.len(),
            MAX_BATCH_ENTRIES
        );
    }

    /// Guards "two samples of 2^63 make a flamegraph answer 500 forever":
    /// counts whose sum a u64 cannot hold are refused at decode, and
    /// `sample_count` never overflows.
    #[test]
    fn decode_refuses_counts_that_overflow_a_u64() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let labels = LabelSet::new();
        b.add(0, &[Frame::named(FrameKind::Native, "a")], &labels, 1 << 63);
        b.add(
            1,
            &[Frame::named(FrameKind::Native, "a")],
            &labels,
            (1 << 63) - 1,
        );
        let fits = b.finish();
        assert_eq!(
            Batch::decode(&fits.encode()).unwrap().sample_count(),
            u64::MAX
        );
        let mut over = fits.clone();
        over.samples[1].count = 1 << 63;
        assert_eq!(over.sample_count(), u64::MAX);
        let err = Batch::decode(&over.encode()).unwrap_err();
        assert!(matches!(err, BatchError::CountOverflow), "{err:?}");
        assert_eq!(
            err.to_string(),
            "batch sample counts add up to more than 18446744073709551615"
        );
    }

    #[test]
    fn decode_refuses_long_metric_names_before_deserializing() {
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        batch.metrics = vec![MetricPoint {
            name: "m".repeat(10_000),
            labels: LabelSetId(1),
            timestamp_ns: 0,
            value: 1.0,
        }];
        let err = Batch::decode(&batch.encode()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("batch metric point 0 name is 10000 bytes"),
            "{err}"
        );
    }

    /// The builder makes what the decoder would refuse fit, so one odd name
    /// or a runaway stack does not cost an agent its whole batch.
    #[test]
    fn builder_cuts_what_decode_would_refuse() {
        let long = "é".repeat(MAX_NAME_LEN);
        let mut b = BatchBuilder::new("s".repeat(5000), 0, 1);
        let deep: Vec<Frame> = (0..MAX_STACK_DEPTH + 10)
            .map(|i| Frame::named(FrameKind::Native, format!("f{i}")))
            .collect();
        let labels = LabelSet::new().with("host", "v".repeat(5000));
        b.add(0, &deep, &labels, 1);
        b.add(
            0,
            &[Frame::named(FrameKind::Native, long.as_str())],
            &labels,
            1,
        );
        b.add_executable(Executable {
            file_id: FileId(1),
            name: "x".repeat(MAX_NAME_LEN * 2),
            build_id: Some("0".repeat(1000)),
        });
        let batch = b.finish();
        let back = Batch::decode(&batch.encode()).unwrap();
        assert_eq!(back, batch);
        assert_eq!(back.source.len(), MAX_LABEL_VALUE_LEN);
        assert_eq!(back.stacks[0].frames.len(), MAX_STACK_DEPTH);
        let root = &back.frames[0].frame;
        assert_eq!(root, &Frame::named(FrameKind::Truncated, TRUNCATED_FRAME));
        // The leaf-most frames are kept.
        let leaf = back.frames[back.stacks[0].frames.len() - 1].frame.clone();
        assert_eq!(leaf, deep[deep.len() - 1]);
        let Frame::Named { function, .. } = &back.frames.last().unwrap().frame else {
            panic!("a named frame");
        };
        assert!(function.len() <= MAX_NAME_LEN && function.ends_with('…'));
        assert!(back.executables[0].build_id.is_none());
    }

    #[test]
    fn builder_sums_equal_samples() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let frames = [Frame::named(FrameKind::Native, "main")];
        let labels = LabelSet::new().with("process", "x");
        b.add(5, &frames, &labels, 2);
        b.add(5, &frames, &labels, 3);
        b.add(6, &frames, &labels, 1);
        let batch = b.finish();
        assert_eq!(batch.frames.len(), 1);
        assert_eq!(batch.stacks.len(), 1);
        assert_eq!(batch.samples.len(), 2);
        assert_eq!(batch.samples[0].count, 5);
        assert_eq!(batch.sample_count(), 6);
    }

    /// Guards the order a worker's sort only merges: time, then stack,
    /// then label set, whatever order they were added in.
    #[test]
    fn builder_gives_samples_in_key_order() {
        let mut b = BatchBuilder::new("h", 0, 1);
        let stacks: Vec<Vec<Frame>> = (0..20)
            .map(|i| vec![Frame::named(FrameKind::Native, format!("f{i}"))])
            .collect();
        let labels = [
            LabelSet::new().with("process", "x"),
            LabelSet::new().with("process", "y"),
        ];
        for i in 0..200usize {
            let ts = [30, 10, 20][i % 3];
            b.add(ts, &stacks[i * 7 % 20], &labels[i % 2], 1);
        }
        let batch = b.finish();
        let keys: Vec<_> = batch
            .samples
            .iter()
            .map(|s| (s.timestamp_ns, s.stack, s.labels))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(batch.sample_count(), 200);
    }
}
