//! The version-1 batch layout, kept only to read what older agents sent
//! (and spooled): the [`Batch`] of version 1 had no metric points. Its
//! fields are declared in the same order and with the same types as then,
//! so that its rkyv archive reads exactly as version 1 wrote it. Never
//! written; never changed.

#[cfg(feature = "codec")]
use super::limits::ArchivedParts;
use super::{Batch, Executable, FrameEntry, LabelSetEntry, StackEntry};
use crate::stack::Sample;

/// [`Batch`] as format version 1 laid it out.
#[derive(Debug, rkyv::Archive, rkyv::Deserialize)]
pub(super) struct BatchV1 {
    source: String,
    sent_at_ns: i64,
    period_ns: u64,
    frames: Vec<FrameEntry>,
    stacks: Vec<StackEntry>,
    label_sets: Vec<LabelSetEntry>,
    executables: Vec<Executable>,
    samples: Vec<Sample>,
}

#[cfg(feature = "codec")]
impl ArchivedBatchV1 {
    /// What the limits are checked on.
    pub(super) fn parts(&self) -> ArchivedParts<'_> {
        ArchivedParts {
            source: &self.source,
            frames: &self.frames,
            stacks: &self.stacks,
            label_sets: &self.label_sets,
            executables: &self.executables,
            samples: &self.samples,
        }
    }
}

/// A version-1 batch is a current one without metric points.
impl From<BatchV1> for Batch {
    fn from(v1: BatchV1) -> Self {
        Batch {
            source: v1.source,
            sent_at_ns: v1.sent_at_ns,
            period_ns: v1.period_ns,
            frames: v1.frames,
            stacks: v1.stacks,
            label_sets: v1.label_sets,
            executables: v1.executables,
            samples: v1.samples,
            metrics: Vec::new(),
        }
    }
}
