//! Collapsed ("folded") stacks, as written by Brendan Gregg's
//! `stackcollapse-*.pl` scripts and inferno:
//!
//! ```text
//! main;parse;read_line 12
//! main;parse;entry_SYSCALL_64_[k];do_syscall_64_[k] 3
//! ```
//!
//! One stack per line, root first, frames separated by `;`, then a space
//! and the sample count. Frame names are kept verbatim, so writing the
//! imported stacks back gives the same text; a name ending in `_[k]` (the
//! collapsers' kernel annotation) makes a [`FrameKind::Kernel`] frame,
//! any other a native one. The format carries no time, so every sample is
//! stamped [`ImportOptions::now_ns`], and no period, so the batch gets
//! [`ImportOptions::default_period_ns`]. A stack deeper than
//! [`MAX_STACK_DEPTH`] keeps its leaf-most frames under a `[truncated]`
//! root; names longer than [`kiln_model::MAX_NAME_LEN`] are cut.

use kiln_model::{Frame, FrameKind, MAX_STACK_DEPTH, TRUNCATED_FRAME};

use crate::builder::ImportBuilder;
use crate::error::{ImportError, snippet};
use crate::options::{ImportOptions, Imported};
use crate::text::numbered_lines;

/// The suffix `stackcollapse-perf.pl --kernel` and inferno's
/// `--annotate-kernel` put on kernel frames.
const KERNEL_SUFFIX: &str = "_[k]";

/// Imports collapsed stacks.
pub(crate) fn import(text: &str, options: &ImportOptions) -> Result<Imported, ImportError> {
    import_with(text, options, |line, text, frames| {
        let (stack, count) = text
            .rsplit_once([' ', '\t'])
            .ok_or(ImportError::CollapsedNoCount { line })?;
        let count = parse_count(line, count)?;
        parse_stack(line, stack, options.frame_kind, frames)?;
        Ok(count)
    })
}

/// Imports stacks one a line without counts (Pyroscope's `lines`
/// format): each line is one sample.
pub(crate) fn import_lines(text: &str, options: &ImportOptions) -> Result<Imported, ImportError> {
    import_with(text, options, |line, text, frames| {
        parse_stack(line, text, options.frame_kind, frames)?;
        Ok(1)
    })
}

/// Adds each non-blank line, read by `parse_line` into frames and a
/// count.
fn import_with(
    text: &str,
    options: &ImportOptions,
    mut parse_line: impl FnMut(usize, &str, &mut Vec<Frame>) -> Result<u64, ImportError>,
) -> Result<Imported, ImportError> {
    let mut out = ImportBuilder::new(options, options.default_period_ns);
    let mut frames = Vec::new();
    for (line, text) in numbered_lines(text) {
        // Leading and trailing blanks are layout, not part of a frame name.
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let count = parse_line(line, text, &mut frames)?;
        out.add(options.now_ns, &frames, count)?;
    }
    out.finish()
}

/// Parses the stack of one line into `frames` (root first); frames not
/// marked as kernel frames are of `kind`.
fn parse_stack(
    line: usize,
    stack: &str,
    kind: FrameKind,
    frames: &mut Vec<Frame>,
) -> Result<(), ImportError> {
    // More than one blank may separate the stack from its count.
    let stack = stack.trim_end();
    if stack.is_empty() {
        return Err(ImportError::CollapsedEmptyStack { line });
    }
    frames.clear();
    // A stack deeper than a batch holds keeps its leaf-most frames under a
    // `[truncated]` root; the frames cut are checked but never built, so a
    // line of millions of `;` costs no more than its bytes.
    let depth = stack.split(';').count();
    let skip = match depth > MAX_STACK_DEPTH {
        true => {
            frames.push(Frame::named(FrameKind::Truncated, TRUNCATED_FRAME));
            depth - (MAX_STACK_DEPTH - 1)
        }
        false => 0,
    };
    for (i, name) in stack.split(';').enumerate() {
        if name.is_empty() {
            return Err(ImportError::CollapsedEmptyFrame {
                line,
                frame: i + 1,
                stack: snippet(stack),
            });
        }
        if i < skip {
            continue;
        }
        let kind = if name.ends_with(KERNEL_SUFFIX) {
            FrameKind::Kernel
        } else {
            kind
        };
        frames.push(Frame::named(kind, name));
    }
    Ok(())
}

fn parse_count(line: usize, count: &str) -> Result<u64, ImportError> {
    let bad = |problem| ImportError::CollapsedBadCount {
        line,
        count: snippet(count),
        problem,
    };
    // Digits only: `u64::from_str` would also take a leading `+`.
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        // Differential folded files and some tools write fractional counts;
        // say so rather than calling `1.5` not a number.
        return Err(
            if count.contains('.') && count.parse::<f64>().is_ok_and(f64::is_finite) {
                bad("not a whole number")
            } else {
                bad("not a number")
            },
        );
    }
    count
        .parse()
        .map_err(|_| bad("larger than 18446744073709551615"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<Frame>, u64), ImportError> {
        let mut frames = Vec::new();
        let (stack, count) = text
            .rsplit_once([' ', '\t'])
            .ok_or(ImportError::CollapsedNoCount { line: 3 })?;
        let count = parse_count(3, count)?;
        parse_stack(3, stack, FrameKind::Native, &mut frames)?;
        Ok((frames, count))
    }

    #[test]
    fn frames_are_verbatim_and_kernel_suffix_sets_the_kind() {
        let (frames, count) = parse("main;std::vec<int> (x);sys_read_[k]  42").unwrap();
        assert_eq!(count, 42);
        assert_eq!(
            frames,
            [
                Frame::named(FrameKind::Native, "main"),
                Frame::named(FrameKind::Native, "std::vec<int> (x)"),
                Frame::named(FrameKind::Kernel, "sys_read_[k]"),
            ]
        );
    }

    /// Guards the messages the spec asks for: line, field and the bad text.
    #[test]
    fn bad_lines_name_line_and_field() {
        let msg = |text| parse(text).unwrap_err().to_string();
        assert_eq!(
            msg("a;b 12x"),
            "line 3: sample count \"12x\" is not a number"
        );
        assert_eq!(
            msg("a;b 1.5"),
            "line 3: sample count \"1.5\" is not a whole number"
        );
        assert_eq!(
            msg("a;b 99999999999999999999"),
            "line 3: sample count \"99999999999999999999\" is larger than 18446744073709551615"
        );
        assert_eq!(msg("a;;b 1"), "line 3: frame 2 of stack \"a;;b\" is empty");
        assert_eq!(msg("a;b; 1"), "line 3: frame 3 of stack \"a;b;\" is empty");
        assert!(msg("main").contains("line 3: no sample count"));
        assert_eq!(msg("a;b +1"), "line 3: sample count \"+1\" is not a number");
    }

    #[test]
    fn blank_lines_are_skipped_and_duplicates_summed() {
        let options = ImportOptions::new(5);
        let imported = import("\n a;b 2\n\na;b 3\r\na 1\n", &options).unwrap();
        assert_eq!(imported.samples, 6);
        assert_eq!(imported.stacks, 2);
        assert_eq!(imported.batch.samples.len(), 2);
        assert_eq!(imported.batch.samples[0].count, 5);
        assert!(imported.batch.samples.iter().all(|s| s.timestamp_ns == 5));
        assert_eq!(imported.batch.period_ns, options.default_period_ns);
    }

    #[test]
    fn zero_counts_only_is_no_samples() {
        let err = import("a 0\n\n", &ImportOptions::new(0)).unwrap_err();
        assert!(matches!(err, ImportError::NoSamples));
    }

    #[test]
    fn counts_that_overflow_are_refused() {
        let text = format!("a {}\nb 1\n", u64::MAX);
        let err = import(&text, &ImportOptions::new(0)).unwrap_err();
        assert!(matches!(err, ImportError::CountOverflow));
    }

    /// Guards the depth bound: a line of a million frames keeps the
    /// leaf-most ones under a `[truncated]` root, and the cut frames are
    /// still checked.
    #[test]
    fn deep_stacks_keep_their_leaf_most_frames() {
        let mut text = "f;".repeat(1_000_000);
        text.push_str("leaf 3");
        let (frames, count) = parse(&text).unwrap();
        assert_eq!(count, 3);
        assert_eq!(frames.len(), MAX_STACK_DEPTH);
        assert_eq!(
            frames[0],
            Frame::named(FrameKind::Truncated, TRUNCATED_FRAME)
        );
        assert_eq!(
            frames[MAX_STACK_DEPTH - 1],
            Frame::named(FrameKind::Native, "leaf")
        );
        let err = parse(&format!(";{text}")).unwrap_err();
        assert!(
            matches!(err, ImportError::CollapsedEmptyFrame { frame: 1, .. }),
            "{err}"
        );
        let exact = format!("{}leaf 1", "f;".repeat(MAX_STACK_DEPTH - 1));
        let (frames, _) = parse(&exact).unwrap();
        assert_eq!(frames.len(), MAX_STACK_DEPTH);
        assert_eq!(frames[0], Frame::named(FrameKind::Native, "f"));
    }

    /// A name of megabytes is imported cut to the batch's limit, not
    /// refused (and not sent whole to be refused by every worker).
    #[test]
    fn long_names_are_cut() {
        let text = format!("main;{} 1\n", "x".repeat(5 << 20));
        let imported = crate::import(
            crate::Format::Collapsed,
            text.as_bytes(),
            &ImportOptions::new(0),
        )
        .unwrap();
        let longest = imported
            .batch
            .frames
            .iter()
            .map(|f| match &f.frame {
                Frame::Named { function, .. } => function.len(),
                Frame::Address { .. } => 0,
            })
            .max();
        assert_eq!(longest, Some(kiln_model::MAX_NAME_LEN));
        kiln_model::Batch::decode(&imported.batch.encode()).unwrap();
    }
}
