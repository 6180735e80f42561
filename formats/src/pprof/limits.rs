//! How much of a profile one import decodes, counted on the raw protobuf
//! before anything is built.
//!
//! Decoding costs far more memory than the encoded bytes: an empty `Sample`
//! is 2 bytes on the wire and 72 in memory, a `Line` 4 and 24, a packed
//! location id 1 and 8, and each line later becomes a frame with its own
//! strings. So [`check`] walks the message's wire format first (no
//! allocation) and counts what decoding would build; a profile past any
//! limit is refused by name before prost decodes a byte of it. Each limit
//! is far above the largest real profiles (a large Go service's heap
//! profile has ~10^5 samples and locations).

use crate::error::ImportError;
use crate::wire::{Field, Value, scalars, walk};

/// Most samples in one profile.
pub(super) const MAX_SAMPLES: usize = 1 << 22;
/// Most locations in one profile.
pub(super) const MAX_LOCATIONS: usize = 1 << 21;
/// Most functions in one profile.
pub(super) const MAX_FUNCTIONS: usize = 1 << 21;
/// Most mappings in one profile (a process maps thousands of files at most).
pub(super) const MAX_MAPPINGS: usize = 1 << 16;
/// Most lines, summed over all locations: each becomes a frame.
pub(super) const MAX_LINES: usize = 1 << 22;
/// Most lines in one location (a call and the calls inlined into it): no
/// stack holds more than [`kiln_model::MAX_STACK_DEPTH`] frames.
pub(super) const MAX_LOCATION_LINES: usize = kiln_model::MAX_STACK_DEPTH;
/// Most entries in the string table.
pub(super) const MAX_STRINGS: usize = 1 << 22;
/// Most location ids, summed over all samples.
pub(super) const MAX_SAMPLE_LOCATIONS: usize = 1 << 24;
/// Most values, summed over all samples.
pub(super) const MAX_SAMPLE_VALUES: usize = 1 << 24;
/// Most labels, summed over all samples.
pub(super) const MAX_SAMPLE_LABELS: usize = 1 << 22;
/// Most sample types (each sample has one value per type) and comments.
pub(super) const MAX_SAMPLE_TYPES: usize = 1 << 10;

/// What decoding a profile would build, as far as [`check`] counted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub samples: usize,
    pub sample_types: usize,
    pub comments: usize,
    pub mappings: usize,
    pub locations: usize,
    pub functions: usize,
    pub strings: usize,
    pub lines: usize,
    pub sample_locations: usize,
    pub sample_values: usize,
    pub sample_labels: usize,
}

/// Counts what decoding `bytes` as a `Profile` would build, refusing the
/// profile as soon as a count passes its limit. Malformed bytes end the
/// count without an error: prost's decode then names the problem.
pub(crate) fn check(bytes: &[u8]) -> Result<Counts, ImportError> {
    let mut counts = Counts::default();
    let _malformed = walk(bytes, |Field { number, value, .. }| {
        let over = |what, count: &mut usize, limit| bump(count, limit, what);
        match (number, value) {
            (1, Value::Bytes(_)) => {
                over("sample types", &mut counts.sample_types, MAX_SAMPLE_TYPES)
            }
            (2, Value::Bytes(sample)) => {
                over("samples", &mut counts.samples, MAX_SAMPLES)?;
                count_sample(sample, &mut counts)
            }
            (3, Value::Bytes(_)) => over("mappings", &mut counts.mappings, MAX_MAPPINGS),
            (4, Value::Bytes(location)) => {
                let index = counts.locations;
                over("locations", &mut counts.locations, MAX_LOCATIONS)?;
                count_location(index, location, &mut counts)
            }
            (5, Value::Bytes(_)) => over("functions", &mut counts.functions, MAX_FUNCTIONS),
            (6, Value::Bytes(_)) => over("strings", &mut counts.strings, MAX_STRINGS),
            (13, value) => add(
                &mut counts.comments,
                scalars(value),
                MAX_SAMPLE_TYPES,
                "comments",
            ),
            _ => Ok(()),
        }
    })?;
    Ok(counts)
}

fn count_sample(bytes: &[u8], counts: &mut Counts) -> Result<(), ImportError> {
    walk(bytes, |Field { number, value, .. }| match number {
        1 => add(
            &mut counts.sample_locations,
            scalars(value),
            MAX_SAMPLE_LOCATIONS,
            "location ids in samples",
        ),
        2 => add(
            &mut counts.sample_values,
            scalars(value),
            MAX_SAMPLE_VALUES,
            "values in samples",
        ),
        3 => bump(
            &mut counts.sample_labels,
            MAX_SAMPLE_LABELS,
            "labels in samples",
        ),
        _ => Ok(()),
    })
    .map(drop)
}

fn count_location(index: usize, bytes: &[u8], counts: &mut Counts) -> Result<(), ImportError> {
    let mut lines = 0usize;
    walk(bytes, |Field { number, value, .. }| {
        if let (4, Value::Bytes(_)) = (number, value) {
            lines += 1;
            if lines > MAX_LOCATION_LINES {
                return Err(ImportError::PprofLocationLines {
                    location: index,
                    limit: MAX_LOCATION_LINES,
                });
            }
            bump(&mut counts.lines, MAX_LINES, "lines in locations")?;
        }
        Ok(())
    })
    .map(drop)
}

/// Adds one to `count`, refusing a count past `limit`.
fn bump(count: &mut usize, limit: usize, what: &'static str) -> Result<(), ImportError> {
    add(count, 1, limit, what)
}

/// Adds `n` to `count`, refusing a count past `limit`.
fn add(count: &mut usize, n: usize, limit: usize, what: &'static str) -> Result<(), ImportError> {
    *count = count.saturating_add(n);
    if *count > limit {
        return Err(ImportError::PprofTooMany { what, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pprof::proto::{Line, Location, Profile, Sample};

    /// The counts agree with what prost decodes.
    #[test]
    fn counts_match_the_decoded_profile() {
        let profile = Profile {
            sample: vec![
                Sample {
                    location_id: vec![1, 2, 300],
                    value: vec![5, -1],
                    label: Vec::new(),
                },
                Sample::default(),
            ],
            location: vec![Location {
                id: 1,
                line: vec![Line::default(), Line::default()],
                ..Location::default()
            }],
            string_table: vec![String::new(), "x".into()],
            comment: vec![1, 2, 3],
            ..Profile::default()
        };
        let counts = check(&profile.encode_to_vec()).unwrap();
        assert_eq!(
            counts,
            Counts {
                samples: 2,
                locations: 1,
                lines: 2,
                strings: 2,
                comments: 3,
                sample_locations: 3,
                sample_values: 2,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn malformed_bytes_end_the_count_quietly() {
        assert_eq!(check(&[0x12, 0xff]).unwrap(), Counts::default());
        assert_eq!(check(&[0x0b]).unwrap(), Counts::default());
    }
}
