//! What one batch may hold: the limits [`Batch::decode`](super::Batch::decode)
//! checks on the archive, before a byte of it becomes an owned value.
//!
//! Each limit is far above what Kiln's agent or importers produce, and low
//! enough that a hostile batch cannot make a worker hold much more than the
//! batch's decompressed bytes ([`MAX_BATCH_BYTES`](super::MAX_BATCH_BYTES)).
//! They are checked on the validated rkyv archive, so that, for example, a
//! 250 MiB function name (which zstd packs into ~10 KB) is refused by its
//! length and never copied into a `String`.

#[cfg(feature = "codec")]
use super::{
    ArchivedExecutable, ArchivedFrameEntry, ArchivedLabelSetEntry, ArchivedStackEntry, BatchError,
};
#[cfg(feature = "codec")]
use crate::frame::ArchivedFrame;
#[cfg(feature = "codec")]
use crate::stack::ArchivedSample;
#[cfg(feature = "codec")]
use rkyv::string::ArchivedString;
#[cfg(feature = "codec")]
use rkyv::vec::ArchivedVec;

/// Longest function, module or file name of a named frame, and longest
/// executable name (a path), in bytes. Demangled C++ template names (CUDA
/// kernels among them) run to a few KiB; anything longer is not a name.
/// [`BatchBuilder`](super::BatchBuilder) cuts longer ones to fit.
pub const MAX_NAME_LEN: usize = 4096;

/// Longest label name, in bytes (`host`, `process`, a pprof label key).
pub const MAX_LABEL_NAME_LEN: usize = 256;

/// Longest label value, in bytes (a host name, a thread name, a container
/// id, a pod name). Also the limit of a batch's `source`, a host name.
pub const MAX_LABEL_VALUE_LEN: usize = 1024;

/// Longest executable build id, in bytes of hex: a GNU build id is 20
/// bytes (40 hex digits) with SHA-1, at most 64 with other hashes.
pub const MAX_BUILD_ID_LEN: usize = 128;

/// Most labels in one label set. Kiln's agent sets about ten (host, pid,
/// process, thread, tid, container, device kind, GPU labels).
pub const MAX_LABELS: usize = 64;

/// Deepest stack, in frames. The agent walks at most 127 user and 127
/// kernel frames (`KILN_MAX_STACK_DEPTH`), plus a few GPU and marker
/// frames; imports cut deeper stacks to this many, keeping the leaf-most
/// frames under a `[truncated]` root, as pprof import always did.
pub const MAX_STACK_DEPTH: usize = 4096;

/// Most entries of each kind (frames, stacks, label sets, executables,
/// samples) in one batch. An agent sends a few thousand per 10 s
/// interval; at ~50 archived bytes an entry, [`MAX_BATCH_BYTES`] would
/// allow about five million, and a worker holds each decoded.
///
/// [`MAX_BATCH_BYTES`]: super::MAX_BATCH_BYTES
pub const MAX_BATCH_ENTRIES: usize = 1 << 20;

#[cfg(feature = "codec")]
/// Checks a length against a limit, naming the field on failure.
fn check_len(len: usize, limit: usize, field: impl FnOnce() -> String) -> Result<(), BatchError> {
    if len > limit {
        return Err(BatchError::FieldTooLong {
            field: field(),
            len,
            limit,
        });
    }
    Ok(())
}

#[cfg(feature = "codec")]
/// Checks a list's length against [`MAX_BATCH_ENTRIES`].
fn check_entries(what: &'static str, count: usize) -> Result<(), BatchError> {
    if count > MAX_BATCH_ENTRIES {
        return Err(BatchError::TooManyEntries {
            what,
            count,
            limit: MAX_BATCH_ENTRIES,
        });
    }
    Ok(())
}

#[cfg(feature = "codec")]
/// The archived parts of a batch of any version, to check against the
/// limits.
pub(super) struct ArchivedParts<'a> {
    pub source: &'a ArchivedString,
    pub frames: &'a ArchivedVec<ArchivedFrameEntry>,
    pub stacks: &'a ArchivedVec<ArchivedStackEntry>,
    pub label_sets: &'a ArchivedVec<ArchivedLabelSetEntry>,
    pub executables: &'a ArchivedVec<ArchivedExecutable>,
    pub samples: &'a ArchivedVec<ArchivedSample>,
}

#[cfg(feature = "codec")]
impl ArchivedParts<'_> {
    /// Checks every limit of this module, and that the sample counts add up
    /// within a `u64`.
    pub(super) fn check(&self) -> Result<(), BatchError> {
        check_len(self.source.len(), MAX_LABEL_VALUE_LEN, || "source".into())?;
        check_entries("frames", self.frames.len())?;
        check_entries("stacks", self.stacks.len())?;
        check_entries("label sets", self.label_sets.len())?;
        check_entries("executables", self.executables.len())?;
        check_entries("samples", self.samples.len())?;
        for (i, entry) in self.frames.iter().enumerate() {
            if let ArchivedFrame::Named {
                function,
                module,
                file,
                ..
            } = &entry.frame
            {
                check_len(function.len(), MAX_NAME_LEN, || {
                    format!("frame {i} function name")
                })?;
                if let Some(module) = module.as_ref() {
                    check_len(module.len(), MAX_NAME_LEN, || format!("frame {i} module"))?;
                }
                if let Some(file) = file.as_ref() {
                    check_len(file.len(), MAX_NAME_LEN, || format!("frame {i} file name"))?;
                }
            }
        }
        for (i, entry) in self.stacks.iter().enumerate() {
            if entry.frames.len() > MAX_STACK_DEPTH {
                return Err(BatchError::StackTooDeep {
                    index: i,
                    depth: entry.frames.len(),
                });
            }
        }
        for (i, entry) in self.label_sets.iter().enumerate() {
            let pairs = entry.labels.archived_pairs();
            if pairs.len() > MAX_LABELS {
                return Err(BatchError::TooManyLabels {
                    index: i,
                    count: pairs.len(),
                });
            }
            for (j, pair) in pairs.iter().enumerate() {
                check_len(pair.0.len(), MAX_LABEL_NAME_LEN, || {
                    format!("label set {i} label {j} name")
                })?;
                check_len(pair.1.len(), MAX_LABEL_VALUE_LEN, || {
                    format!("label set {i} label {:?} value", pair.0.as_str())
                })?;
            }
        }
        for (i, e) in self.executables.iter().enumerate() {
            check_len(e.name.len(), MAX_NAME_LEN, || {
                format!("executable {i} name")
            })?;
            if let Some(build_id) = e.build_id.as_ref() {
                check_len(build_id.len(), MAX_BUILD_ID_LEN, || {
                    format!("executable {i} build id")
                })?;
            }
        }
        let mut total = 0u64;
        for s in self.samples.iter() {
            total = total
                .checked_add(s.count.to_native())
                .ok_or(BatchError::CountOverflow)?;
        }
        Ok(())
    }
}

/// `s` cut to at most `limit` bytes, on a char boundary, ending in `…`
/// when cut: what [`BatchBuilder`](super::BatchBuilder) does to names too
/// long to send, so that one odd name does not cost the whole batch.
pub(crate) fn clamp(s: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= limit {
        return s.into();
    }
    const ELLIPSIS: &str = "…";
    let mut cut = limit.saturating_sub(ELLIPSIS.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{ELLIPSIS}", &s[..cut]).into()
}
