//! Why an import failed.
//!
//! Every message names what was wrong precisely enough to fix the input: the
//! line number (from 1) and the field for the text formats, the index or id
//! of the offending message for pprof.

use crate::limits::{MAX_DECOMPRESSED_BYTES, MAX_STACK_FRAMES};

/// Why an input could not be imported. Nothing is imported when any part of
/// the input is wrong: an import is all or nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The input has no bytes at all.
    #[error("input is empty")]
    Empty,
    /// The input parsed but holds no sample (only blank lines or comments,
    /// only zero counts, or a profile without samples).
    #[error("no samples in input")]
    NoSamples,
    /// A text format's input is not UTF-8.
    #[error("input is not valid UTF-8 at byte {byte} (line {line})")]
    NotUtf8 {
        /// Offset of the first invalid byte, from 0.
        byte: usize,
        /// The line it is on, from 1.
        line: usize,
    },
    /// The distinct stacks hold more frames than one import keeps.
    #[error(
        "input has more than {MAX_STACK_FRAMES} frames in its distinct stacks, \
         more than one import keeps; split it"
    )]
    TooManyFrames,
    /// The counts add up to more than a `u64` holds.
    #[error("sample counts add up to more than {}", u64::MAX)]
    CountOverflow,

    /// Collapsed stacks: a line has no count after its stack.
    #[error("line {line}: no sample count after the stack (expected \"frame;frame;… <count>\")")]
    CollapsedNoCount {
        /// Line number, from 1.
        line: usize,
    },
    /// Collapsed stacks: the last field of a line is not a count.
    #[error("line {line}: sample count {count:?} is {problem}")]
    CollapsedBadCount {
        /// Line number, from 1.
        line: usize,
        /// The text where the count should be, shortened when long.
        count: String,
        /// What is wrong with it: `not a number`, `not a whole number`, or
        /// `larger than 18446744073709551615`.
        problem: &'static str,
    },
    /// Collapsed stacks: a line has a count but no stack.
    #[error("line {line}: the stack before the sample count is empty")]
    CollapsedEmptyStack {
        /// Line number, from 1.
        line: usize,
    },
    /// Collapsed stacks: two `;` with nothing between them, or one at the
    /// start or end of the stack.
    #[error("line {line}: frame {frame} of stack {stack:?} is empty")]
    CollapsedEmptyFrame {
        /// Line number, from 1.
        line: usize,
        /// Position of the empty frame in the stack, from 1 (root).
        frame: usize,
        /// The stack, shortened when long.
        stack: String,
    },

    /// perf script: a sample header has no `<seconds>.<fraction>:` time
    /// preceded by a pid (and optionally a `[cpu]`).
    #[error(
        "line {line}: sample header {header:?} has no \"<pid> <seconds>.<fraction>:\" \
         (expected e.g. \"app 1234/1235 [001] 12345.678901: 250000 cpu-clock:\")"
    )]
    PerfBadHeader {
        /// Line number, from 1.
        line: usize,
        /// The header line, shortened when long.
        header: String,
    },
    /// perf script: a sample header has a pid and time but nothing before
    /// them to name the process.
    #[error("line {line}: sample header {header:?} has no command name before the pid")]
    PerfNoCommand {
        /// Line number, from 1.
        line: usize,
        /// The header line, shortened when long.
        header: String,
    },
    /// perf script: a sample's time does not fit in nanoseconds.
    #[error("line {line}: sample time {time:?} is out of range")]
    PerfTimeOutOfRange {
        /// Line number, from 1.
        line: usize,
        /// The time field.
        time: String,
    },
    /// perf script: a line of a sample's stack does not start with the
    /// frame's hexadecimal address.
    #[error("line {line}: stack frame line {text:?} does not start with a hexadecimal address")]
    PerfBadFrame {
        /// Line number, from 1.
        line: usize,
        /// The stack line, shortened when long.
        text: String,
    },
    /// perf script: an event was asked for and no sample has it.
    #[error("no samples of event {event:?} in input (events seen: {})", seen.join(", "))]
    PerfNoSuchEvent {
        /// The event asked for.
        event: String,
        /// The events the input has, in the order first seen.
        seen: Vec<String>,
    },

    /// pprof: gzip-compressed input that does not decompress.
    #[error("pprof: gzip data is corrupt: {0}")]
    Gzip(#[source] std::io::Error),
    /// pprof: gzip-compressed input larger than the limit once decompressed.
    #[error("pprof: gzip data decompresses to more than {} MiB", MAX_DECOMPRESSED_BYTES >> 20)]
    TooLarge,
    /// pprof: the bytes are not a `perftools.profiles.Profile` message.
    #[error("pprof: not a valid profile.proto message: {0}")]
    PprofDecode(#[source] prost::DecodeError),
    /// pprof: the profile declares no sample types, so its values mean
    /// nothing.
    #[error("pprof: the profile declares no sample types")]
    PprofNoSampleTypes,
    /// pprof: a sample's value count differs from the sample type count.
    #[error(
        "pprof: sample {sample} has {values} values, but the profile declares {types} sample types"
    )]
    PprofValueCount {
        /// Index in the profile's sample list, from 0.
        sample: usize,
        /// Values the sample has.
        values: usize,
        /// Sample types the profile declares.
        types: usize,
    },
    /// pprof: a sample's count is negative.
    #[error("pprof: sample {sample} has a negative {value_type} value {value}")]
    PprofNegativeCount {
        /// Index in the profile's sample list, from 0.
        sample: usize,
        /// Name of the sample type used as the count.
        value_type: String,
        /// The value.
        value: i64,
    },
    /// pprof: a string index past the end of the string table.
    #[error("pprof: {field} refers to string {index}, but the string table has {len} entries")]
    PprofBadString {
        /// Which field, e.g. `function id 3 name`.
        field: String,
        /// The index.
        index: i64,
        /// Entries in the string table.
        len: usize,
    },
    /// pprof: a sample refers to a location the profile does not define.
    #[error("pprof: sample {sample} refers to location id {id}, which the profile does not define")]
    PprofUnknownLocation {
        /// Index in the profile's sample list, from 0.
        sample: usize,
        /// The location id.
        id: u64,
    },
    /// pprof: a location refers to a function the profile does not define.
    #[error(
        "pprof: location id {location} refers to function id {id}, which the profile does not define"
    )]
    PprofUnknownFunction {
        /// The location's id.
        location: u64,
        /// The function id.
        id: u64,
    },
    /// pprof: a location refers to a mapping the profile does not define.
    #[error(
        "pprof: location id {location} refers to mapping id {id}, which the profile does not define"
    )]
    PprofUnknownMapping {
        /// The location's id.
        location: u64,
        /// The mapping id.
        id: u64,
    },
    /// pprof: two locations, functions or mappings share an id (or one has
    /// id 0, which the format reserves for "none").
    #[error("pprof: {what} id {id} is {}", if *id == 0 { "reserved (ids start at 1)" } else { "defined twice" })]
    PprofBadId {
        /// `location`, `function` or `mapping`.
        what: &'static str,
        /// The id.
        id: u64,
    },
    /// pprof: the profile holds more of something than one import decodes
    /// (see the limits in `pprof/limits.rs`).
    #[error(
        "pprof: the profile has more than {limit} {what}, more than one import takes; split it"
    )]
    PprofTooMany {
        /// What: `samples`, `locations`, `lines in locations`, ….
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// pprof: one location has more lines (inlined calls) than a stack
    /// holds frames.
    #[error(
        "pprof: location {location} (counting from 0) has more than {limit} lines, \
         more than a stack holds"
    )]
    PprofLocationLines {
        /// Its position in the profile's location list, from 0.
        location: usize,
        /// The limit.
        limit: usize,
    },
    /// A sample has more labels (its own and the import's) than a batch
    /// may carry.
    #[error(
        "a sample has {count} labels, more than the {} a sample may carry",
        kiln_model::MAX_LABELS
    )]
    TooManyLabels {
        /// Its labels.
        count: usize,
    },
    /// More distinct stacks, frames, label sets or samples than one batch
    /// carries.
    #[error(
        "input has more than {} distinct {what}, more than one import keeps; split it",
        kiln_model::MAX_BATCH_ENTRIES
    )]
    TooManyEntries {
        /// `stacks`, `frames`, `label sets` or `samples`.
        what: &'static str,
    },
    /// pprof: a sample label whose key is the empty string.
    #[error("pprof: sample {sample} has a label with an empty key")]
    PprofEmptyLabelKey {
        /// Index in the profile's sample list, from 0.
        sample: usize,
    },
}

/// Longest excerpt of the input quoted in an error message, in characters:
/// enough to recognize a line without echoing a megabyte of garbage.
const SNIPPET_CHARS: usize = 120;

/// `text`, cut to [`SNIPPET_CHARS`] characters with `…` when longer.
pub(crate) fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_cuts_long_text_on_a_char_boundary() {
        let long = "é".repeat(500);
        let s = snippet(&long);
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(snippet("short"), "short");
    }

    #[test]
    fn messages_name_the_line_and_the_field() {
        let e = ImportError::CollapsedBadCount {
            line: 7,
            count: "12x".into(),
            problem: "not a number",
        };
        assert_eq!(
            e.to_string(),
            "line 7: sample count \"12x\" is not a number"
        );
        let e = ImportError::PprofUnknownLocation { sample: 4, id: 99 };
        assert_eq!(
            e.to_string(),
            "pprof: sample 4 refers to location id 99, which the profile does not define"
        );
        let e = ImportError::PprofBadId {
            what: "location",
            id: 0,
        };
        assert_eq!(
            e.to_string(),
            "pprof: location id 0 is reserved (ids start at 1)"
        );
    }
}
