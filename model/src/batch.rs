//! The agent batch: what an agent (or an import) sends to the backend.
//!
//! On the wire a batch is an 8-byte header followed by a zstd frame holding
//! the rkyv archive of a [`Batch`]:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "KLNB"
//!      4     2  format version, little endian (1)
//!      6     2  flags, must be 0
//!      8     …  zstd(rkyv(Batch))
//! ```
//!
//! The header stays readable without decompressing, so a consumer can refuse
//! a version it does not know with a clear error (and keep the bytes) before
//! touching the payload.

use std::collections::HashMap;

use crate::frame::Frame;
use crate::ids::{FileId, FrameId, LabelSetId, StackId};
use crate::labels::LabelSet;
use crate::stack::{Sample, stack_id};

/// First four bytes of every encoded batch.
pub const BATCH_MAGIC: [u8; 4] = *b"KLNB";
/// The batch format version this build writes and reads.
pub const BATCH_VERSION: u16 = 1;
/// Size of the fixed header before the compressed payload.
pub const BATCH_HEADER_LEN: usize = 8;
/// Largest decompressed payload accepted, against decompression bombs.
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
        "batch format version {found} is not supported (this build reads version {BATCH_VERSION})"
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
    /// The payload decompresses to more than [`MAX_BATCH_BYTES`].
    #[error("batch payload decompresses to more than {MAX_BATCH_BYTES} bytes")]
    TooLarge,
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
    if version != BATCH_VERSION {
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

    /// Total sample count.
    pub fn sample_count(&self) -> u64 {
        self.samples.iter().map(|s| s.count).sum()
    }
}

#[cfg(feature = "codec")]
mod codec {
    use std::io::Read;

    use super::*;

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

        /// Decodes and validates a batch; checks dictionary ids too.
        pub fn decode(bytes: &[u8]) -> Result<Batch, BatchError> {
            batch_version(bytes)?;
            let mut payload = rkyv::util::AlignedVec::<16>::new();
            let mut decoder = zstd::stream::Decoder::new(&bytes[BATCH_HEADER_LEN..])
                .map_err(BatchError::Decompress)?;
            let mut chunk = [0u8; 64 * 1024];
            loop {
                let n = decoder.read(&mut chunk).map_err(BatchError::Decompress)?;
                if n == 0 {
                    break;
                }
                if payload.len() + n > MAX_BATCH_BYTES {
                    return Err(BatchError::TooLarge);
                }
                payload.extend_from_slice(&chunk[..n]);
            }
            let batch = rkyv::from_bytes::<Batch, rkyv::rancor::Error>(&payload)
                .map_err(|e| BatchError::Archive(e.to_string()))?;
            batch.verify_ids()?;
            Ok(batch)
        }
    }
}

/// Builds a [`Batch`] from whole stacks, interning frames, stacks and label
/// sets, and summing samples that share (time, stack, labels).
#[derive(Debug, Default)]
pub struct BatchBuilder {
    batch: Batch,
    frames: HashMap<FrameId, ()>,
    stacks: HashMap<StackId, ()>,
    label_sets: HashMap<LabelSetId, ()>,
    samples: HashMap<(i64, StackId, LabelSetId), u64>,
    sample_order: Vec<(i64, StackId, LabelSetId)>,
}

impl BatchBuilder {
    /// A builder for a batch from `source` whose samples each stand for
    /// `period_ns` nanoseconds of CPU.
    pub fn new(source: impl Into<String>, sent_at_ns: i64, period_ns: u64) -> Self {
        Self {
            batch: Batch {
                source: source.into(),
                sent_at_ns,
                period_ns,
                ..Batch::default()
            },
            ..Self::default()
        }
    }

    /// Adds `count` samples of the stack `frames` (root first).
    pub fn add(&mut self, timestamp_ns: i64, frames: &[Frame], labels: &LabelSet, count: u64) {
        let mut ids = Vec::with_capacity(frames.len());
        for frame in frames {
            let id = frame.id();
            if self.frames.insert(id, ()).is_none() {
                self.batch.frames.push(FrameEntry {
                    id,
                    frame: frame.clone(),
                });
            }
            ids.push(id);
        }
        let stack = stack_id(&ids);
        if self.stacks.insert(stack, ()).is_none() {
            self.batch.stacks.push(StackEntry {
                id: stack,
                frames: ids,
            });
        }
        let label_id = labels.id();
        if self.label_sets.insert(label_id, ()).is_none() {
            self.batch.label_sets.push(LabelSetEntry {
                id: label_id,
                labels: labels.clone(),
            });
        }
        let key = (timestamp_ns, stack, label_id);
        let slot = self.samples.entry(key).or_insert_with(|| {
            self.sample_order.push(key);
            0
        });
        *slot += count;
    }

    /// Records an executable the frames point into.
    pub fn add_executable(&mut self, executable: Executable) {
        if !self
            .batch
            .executables
            .iter()
            .any(|e| e.file_id == executable.file_id)
        {
            self.batch.executables.push(executable);
        }
    }

    /// Number of distinct stacks so far.
    pub fn stack_count(&self) -> usize {
        self.batch.stacks.len()
    }

    /// The finished batch, samples in first-seen order.
    pub fn finish(mut self) -> Batch {
        self.batch.samples = self
            .sample_order
            .iter()
            .map(|key| Sample {
                timestamp_ns: key.0,
                stack: key.1,
                labels: key.2,
                count: self.samples[key],
            })
            .collect();
        self.batch
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
        )
            .prop_map(|(samples, period)| {
                let mut b = BatchBuilder::new("host-a", 1, period);
                for (ts, frames, labels, count) in samples {
                    b.add(ts, &frames, &labels, count);
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
                bytes[..8].copy_from_slice(&[b'K', b'L', b'N', b'B', 1, 0, 0, 0]);
                let _ = Batch::decode(&bytes);
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
}
