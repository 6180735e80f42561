//! Dictionary entries a reader already holds: [`Batch::decode_leaving_out`]
//! neither builds nor checks them.
//!
//! An agent sends each entry until it believes the backend has it, and
//! every agent of a fleet running the same binaries sends the same frames
//! and stacks; a worker that has stored an entry drops it from later
//! batches anyway. Leaving it in the archive saves building it (a stack's
//! frame list is an allocation) and hashing it to check its id: 8% of a
//! worker's CPU on `fleet_bench`, where most dictionary entries that
//! arrive are already stored.
//!
//! An entry left out is not checked against its id, which is safe because
//! it is never stored: the content stored under that id is the content
//! that was checked when it was first written. A batch whose entry does
//! not match its id is refused only when that entry is one the reader
//! needs.
//!
//! [`Batch::decode_leaving_out`]: super::Batch::decode_leaving_out

use crate::ids::{FileId, FrameId, LabelSetId, StackId};

/// Which dictionary entries a reader already holds.
pub trait KnownEntries {
    /// Whether the frame `id` is held.
    fn knows_frame(&self, id: FrameId) -> bool;
    /// Whether the stack `id` is held.
    fn knows_stack(&self, id: StackId) -> bool;
    /// Whether the label set `id` is held.
    fn knows_label_set(&self, id: LabelSetId) -> bool;
    /// Whether the executable `id` is held.
    fn knows_executable(&self, id: FileId) -> bool;
}

/// A reader that holds nothing yet: every entry is built and checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct NothingKnown;

impl KnownEntries for NothingKnown {
    fn knows_frame(&self, _: FrameId) -> bool {
        false
    }

    fn knows_stack(&self, _: StackId) -> bool {
        false
    }

    fn knows_label_set(&self, _: LabelSetId) -> bool {
        false
    }

    fn knows_executable(&self, _: FileId) -> bool {
        false
    }
}
