//! Helpers shared by the integration tests.

#![allow(dead_code, reason = "each test crate uses its own subset")]

use std::collections::{BTreeMap, HashMap};

use kiln_model::{Batch, Frame, FrameId, StackId};

pub(crate) const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// The name a frame shows in a flamegraph.
pub(crate) fn frame_name(frame: &Frame) -> String {
    match frame {
        Frame::Named { function, .. } => function.clone(),
        Frame::Address { addr, .. } => format!("{addr:#x}"),
    }
}

/// A batch's stacks as collapsed lines (`root;…;leaf` → summed count).
pub(crate) fn collapsed(batch: &Batch) -> BTreeMap<String, u64> {
    collapsed_with(batch, |f| Some(frame_name(f)))
}

/// Like [`collapsed`], with `name` deciding each frame's name, or that it
/// is left out.
pub(crate) fn collapsed_with(
    batch: &Batch,
    name: impl Fn(&Frame) -> Option<String>,
) -> BTreeMap<String, u64> {
    let frames: HashMap<FrameId, &Frame> = batch.frames.iter().map(|f| (f.id, &f.frame)).collect();
    let stacks: HashMap<StackId, &Vec<FrameId>> =
        batch.stacks.iter().map(|s| (s.id, &s.frames)).collect();
    let mut out = BTreeMap::new();
    for sample in &batch.samples {
        let line = stacks[&sample.stack]
            .iter()
            .filter_map(|id| name(frames[id]))
            .collect::<Vec<_>>()
            .join(";");
        *out.entry(line).or_insert(0) += sample.count;
    }
    out
}

/// The frames of the stack of `batch`'s sample `i`, root first.
pub(crate) fn stack_frames(batch: &Batch, i: usize) -> Vec<Frame> {
    let stack = batch
        .stacks
        .iter()
        .find(|s| s.id == batch.samples[i].stack)
        .expect("sample's stack is in the batch");
    stack
        .frames
        .iter()
        .map(|id| {
            batch
                .frames
                .iter()
                .find(|f| f.id == *id)
                .expect("stack's frame is in the batch")
                .frame
                .clone()
        })
        .collect()
}

/// Reads a fixture from `tests/data`.
pub(crate) fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}
