//! Stacks and samples.

use crate::ids::{ContentHasher, Domain, FrameId, LabelSetId, StackId};

/// The function name of the frame agents count idle CPU under: a stack of
/// this one frame ([`idle_stack_id`]) is a CPU doing nothing, which the
/// flamegraph shows and the CPU-over-time chart keeps apart from busy time.
pub const IDLE_FRAME: &str = "idle";

/// The idle frame ([`IDLE_FRAME`], kind idle).
pub fn idle_frame() -> crate::Frame {
    crate::Frame::named(crate::FrameKind::Idle, IDLE_FRAME)
}

/// The id of the stack of idle CPU: the idle frame alone.
pub fn idle_stack_id() -> StackId {
    stack_id(&[idle_frame().id()])
}

/// The id of the stack made of `frames` (root first).
pub fn stack_id(frames: &[FrameId]) -> StackId {
    let mut h = ContentHasher::new(Domain::Stack);
    h.u64(frames.len() as u64);
    for f in frames {
        h.u128(f.0);
    }
    StackId(h.finish())
}

/// A count of identical stacks seen at one time with one label set.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct Sample {
    /// Nanoseconds since the Unix epoch (the start of the agent's
    /// aggregation interval, the sample's own time, or the import time).
    pub timestamp_ns: i64,
    /// The stack.
    pub stack: StackId,
    /// Where it came from.
    pub labels: LabelSetId,
    /// How many times it was seen.
    pub count: u64,
}

/// Nanoseconds per hour: samples are partitioned by hour in storage.
pub const NANOS_PER_HOUR: i64 = 3_600 * 1_000_000_000;
