//! Stacks put together from locations whose frames are shared: pprof's
//! and OTLP's samples both list locations leaf first, and a location may
//! stand for several frames (a call and what was inlined into it).

use kiln_model::{Frame, FrameKind, MAX_STACK_DEPTH};

/// Name of the frame that marks a cut stack.
pub(crate) const TRUNCATED: &str = "[truncated]";

/// The frame of one line of a location: its function's `name` (the
/// location's `address` when the function has none), `file` when known,
/// and `line`, a negative or huge one (nonsense) as unknown.
pub(crate) fn line_frame(
    kind: FrameKind,
    name: &str,
    address: u64,
    module: Option<String>,
    file: &str,
    line: i64,
) -> Frame {
    Frame::Named {
        kind,
        function: if name.is_empty() {
            format!("{address:#x}")
        } else {
            name.to_owned()
        },
        module,
        file: Some(file).filter(|f| !f.is_empty()).map(str::to_owned),
        line: u32::try_from(line).unwrap_or(0),
    }
}

/// Puts the frames of a stack in `frames`, root first, from its
/// locations' frames (`locations` leaf first, each location's frames root
/// first), keeping at most [`MAX_STACK_DEPTH`]: a deeper stack keeps its
/// leaf-most frames under a [`FrameKind::Truncated`] root, as the agent
/// cuts stacks. Each location reference costs a byte or two of input and
/// may stand for many frames, so without the cut a small input could ask
/// for a huge stack. Every location is still looked up (a bad reference
/// past the cut is still an error).
pub(crate) fn leaf_first<'f, E>(
    locations: impl IntoIterator<Item = Result<&'f [Frame], E>>,
    frames: &mut Vec<Frame>,
) -> Result<(), E> {
    frames.clear();
    // Walk leaf first, then reverse. One frame past the limit tells a
    // stack that is too deep.
    for location in locations {
        let location = location?;
        let room = (MAX_STACK_DEPTH + 1).saturating_sub(frames.len());
        frames.extend(location.iter().rev().take(room).cloned());
    }
    if frames.len() > MAX_STACK_DEPTH {
        frames.truncate(MAX_STACK_DEPTH - 1);
        frames.push(Frame::named(FrameKind::Truncated, TRUNCATED));
    }
    frames.reverse();
    Ok(())
}

/// The depth of the stack [`leaf_first`] makes of locations of
/// `location_depths` frames each.
pub(crate) fn depth(location_depths: impl IntoIterator<Item = usize>) -> usize {
    location_depths
        .into_iter()
        .fold(0usize, |sum, d| sum.saturating_add(d))
        .min(MAX_STACK_DEPTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_reversed_and_deep_stacks_cut_under_a_marker() {
        let a = [
            Frame::named(FrameKind::Native, "caller"),
            Frame::named(FrameKind::Native, "inlined"),
        ];
        let b = [Frame::named(FrameKind::Native, "main")];
        let mut frames = Vec::new();
        leaf_first::<()>([Ok(&a[..]), Ok(&b[..])], &mut frames).unwrap();
        let names: Vec<_> = frames
            .iter()
            .map(|f| match f {
                Frame::Named { function, .. } => function.as_str(),
                Frame::Address { .. } => "?",
            })
            .collect();
        assert_eq!(names, ["main", "caller", "inlined"]);
        let deep = vec![Frame::named(FrameKind::Native, "f"); MAX_STACK_DEPTH + 5];
        leaf_first::<()>([Ok(&deep[..])], &mut frames).unwrap();
        assert_eq!(frames.len(), MAX_STACK_DEPTH);
        assert_eq!(frames[0], Frame::named(FrameKind::Truncated, TRUNCATED));
        assert_eq!(depth([3, MAX_STACK_DEPTH]), MAX_STACK_DEPTH);
    }
}
