//! Sealed-hour segments: one hour of one scope's samples in a compact
//! columnar encoding, kept in the object store once the hour is settled
//! (`crate::sealed`).
//!
//! A row store pays for every sample row its key again (tenant, project,
//! hour, timestamp, two 16-byte ids) and its index: about 330 bytes a row
//! on PostgreSQL. Within one hour the same few thousand stacks and label
//! sets recur in every agent batch, so a segment names each id once, in a
//! sorted dictionary, and stores rows as small indexes into it. Rows are
//! sorted by (label set, stack, period, timestamp) and each column is
//! written apart, delta-encoded against the row before, so the columns
//! are long runs of small, repeating varints, which zstd then shrinks
//! further.
//!
//! ```text
//! segment   "KSEG"  zstd frame of the body
//! body      version:u8 (= 1)  hour:zigzag
//!           stacks:  n:varint  n × stack_id:16 BE      sorted, distinct
//!           labels:  n:varint  n × labelset_id:16 BE   sorted, distinct
//!           periods: n:varint  n × period_ns:varint     sorted, distinct
//!           rows:    n:varint, then five columns of n varints each:
//!             labels  index delta from the row before (rows sort by it first)
//!             stack   index delta within the same label set, else the index
//!             period  index
//!             time    delta from the row before within the same (labels,
//!                     stack, period) run; else zigzag(ts - hour start)
//!             count
//! ```
//!
//! Decoding checks every count against the bytes left and every index
//! against its dictionary, and inflates at most [`MAX_BODY_BYTES`], so a
//! damaged segment gives a [`DecodeError`], never a panic or a huge
//! allocation.

use std::io::Read as _;

use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};

use crate::error::DecodeError;
use crate::profile::StoredSample;
use crate::values::{Reader, Writer};

/// What every segment starts with.
const MAGIC: &[u8; 4] = b"KSEG";

/// The zstd level segments are written at. The columns do most of the
/// work: on an hour of 20 hosts (`segment_bench`), level 3 keeps 1.92 MB
/// per core-day at 1.9 M rows/s, level 12 1.84 MB at 0.67 M rows/s and
/// level 19 1.50 MB at 0.12 M rows/s; a query node seals every hour of
/// every host, so the encoding speed is what it pays.
const ZSTD_LEVEL: i32 = 3;

/// The most bytes a segment's body may inflate to: well above an hour of
/// a large scope (a thousand hosts: about 40 MB), far below what would
/// hurt a query node.
pub const MAX_BODY_BYTES: u64 = 1 << 30;

/// Encodes `samples` of `hour` (`timestamp_ns.div_euclid(NANOS_PER_HOUR)`)
/// as a segment. Rows with the same (timestamp, stack, label set), the
/// key of a sample row, are kept once (the last given), as a store keeps
/// one row per key. The bytes depend only on the set of rows, not on
/// their order, so two nodes sealing the same hour write the same bytes.
/// Returns the segment and how many samples (rows) it holds.
pub fn encode(hour: i64, samples: &[StoredSample]) -> (Vec<u8>, usize) {
    encode_at_level(hour, samples, ZSTD_LEVEL)
}

/// [`encode`] at zstd level `level` instead of the one seals use, for
/// `segment_bench` to compare levels.
pub fn encode_at_level(hour: i64, samples: &[StoredSample], level: i32) -> (Vec<u8>, usize) {
    // The last given of each key first, then one row per key.
    let mut keyed: Vec<(usize, StoredSample)> = samples.iter().copied().enumerate().collect();
    keyed.sort_unstable_by_key(|&(i, s)| (s.labels, s.stack, s.timestamp_ns, std::cmp::Reverse(i)));
    keyed.dedup_by_key(|(_, s)| (s.labels, s.stack, s.timestamp_ns));
    let mut rows: Vec<StoredSample> = keyed.into_iter().map(|(_, s)| s).collect();
    rows.sort_unstable_by_key(|s| (s.labels, s.stack, s.period_ns, s.timestamp_ns));

    let stacks = distinct(rows.iter().map(|s| s.stack));
    let labels = distinct(rows.iter().map(|s| s.labels));
    let periods = distinct(rows.iter().map(|s| s.period_ns));
    let start = hour.saturating_mul(NANOS_PER_HOUR);

    let mut w = Writer::new(64 + 16 * (stacks.len() + labels.len()) + 8 * rows.len());
    w.varint(zigzag(hour));
    w.varint(stacks.len() as u64);
    for s in &stacks {
        w.bytes(&s.0.to_be_bytes());
    }
    w.varint(labels.len() as u64);
    for l in &labels {
        w.bytes(&l.0.to_be_bytes());
    }
    w.varint(periods.len() as u64);
    for &p in &periods {
        w.varint(p);
    }
    w.varint(rows.len() as u64);
    // Each row's (label set, stack, period) in the dictionaries, found
    // once: the columns below are deltas between neighbours' indexes.
    let index: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|s| {
            (
                position(&labels, &s.labels),
                position(&stacks, &s.stack),
                position(&periods, &s.period_ns),
            )
        })
        .collect();
    let previous = |i: usize| i.checked_sub(1).map(|p| index[p]);
    for (i, &(label, _, _)) in index.iter().enumerate() {
        w.varint(label - previous(i).map_or(0, |p| p.0));
    }
    for (i, &(label, stack, _)) in index.iter().enumerate() {
        match previous(i) {
            Some((p_label, p_stack, _)) if p_label == label => w.varint(stack - p_stack),
            _ => w.varint(stack),
        };
    }
    for &(_, _, period) in &index {
        w.varint(period);
    }
    for (i, s) in rows.iter().enumerate() {
        // A run: rows of one (label set, stack, period), in time order.
        match previous(i) == Some(index[i]) {
            true => w.varint(s.timestamp_ns.abs_diff(rows[i - 1].timestamp_ns)),
            false => w.varint(zigzag(s.timestamp_ns.wrapping_sub(start))),
        };
    }
    for s in &rows {
        w.varint(s.count);
    }

    let body = w.into_bytes();
    let mut out = MAGIC.to_vec();
    // Compressing into a Vec cannot fail.
    zstd::stream::copy_encode(&body[..], &mut out, level).unwrap_or_default();
    (out, rows.len())
}

/// The hour and rows of a segment, sorted by (label set, stack, period,
/// timestamp).
pub fn decode(bytes: &[u8]) -> Result<(i64, Vec<StoredSample>), DecodeError> {
    let Some(compressed) = bytes.strip_prefix(MAGIC) else {
        return Err(DecodeError::OutOfRange {
            field: "segment magic",
            value: bytes.len() as u64,
        });
    };
    let mut body = Vec::new();
    zstd::stream::Decoder::new(compressed)
        .and_then(|d| d.take(MAX_BODY_BYTES + 1).read_to_end(&mut body))
        .map_err(|_| DecodeError::Compression)?;
    if body.len() as u64 > MAX_BODY_BYTES {
        return Err(DecodeError::OutOfRange {
            field: "segment body size",
            value: body.len() as u64,
        });
    }
    let mut r = Reader::new(&body)?;
    let hour = unzigzag(r.varint("hour")?);
    let start = hour.saturating_mul(NANOS_PER_HOUR);
    let n = r.count("stacks", 16)?;
    let stacks: Vec<StackId> = (0..n)
        .map(|_| Ok(StackId(u128::from_be_bytes(r.array("stack id")?))))
        .collect::<Result<_, DecodeError>>()?;
    let n = r.count("label sets", 16)?;
    let labels: Vec<LabelSetId> = (0..n)
        .map(|_| Ok(LabelSetId(u128::from_be_bytes(r.array("label set id")?))))
        .collect::<Result<_, DecodeError>>()?;
    let n = r.count("periods", 1)?;
    let periods: Vec<u64> = (0..n)
        .map(|_| r.varint("period"))
        .collect::<Result<_, _>>()?;
    // Five varints a row, one byte at least each.
    let n = r.count("rows", 5)?;

    let mut label_index = vec![0usize; n];
    let mut at = 0u64;
    for slot in label_index.iter_mut() {
        at = at
            .checked_add(r.varint("labels column")?)
            .ok_or(DecodeError::BadVarint {
                field: "labels column",
            })?;
        *slot = in_dictionary("labels column", at, labels.len())?;
    }
    let mut stack_index = vec![0usize; n];
    for i in 0..n {
        let delta = r.varint("stacks column")?;
        let at = match i > 0 && label_index[i - 1] == label_index[i] {
            true => (stack_index[i - 1] as u64).checked_add(delta),
            false => Some(delta),
        }
        .ok_or(DecodeError::BadVarint {
            field: "stacks column",
        })?;
        stack_index[i] = in_dictionary("stacks column", at, stacks.len())?;
    }
    let mut period_index = vec![0usize; n];
    for slot in period_index.iter_mut() {
        *slot = in_dictionary("periods column", r.varint("periods column")?, periods.len())?;
    }
    let mut rows: Vec<StoredSample> = Vec::with_capacity(n);
    for i in 0..n {
        let field = "time column";
        let value = r.varint(field)?;
        let same = i > 0
            && label_index[i - 1] == label_index[i]
            && stack_index[i - 1] == stack_index[i]
            && period_index[i - 1] == period_index[i];
        let timestamp_ns = match same {
            true => {
                let delta =
                    i64::try_from(value).map_err(|_| DecodeError::OutOfRange { field, value })?;
                rows[i - 1].timestamp_ns.checked_add(delta)
            }
            false => start.checked_add(unzigzag(value)),
        }
        .ok_or(DecodeError::OutOfRange { field, value })?;
        rows.push(StoredSample {
            timestamp_ns,
            stack: stacks[stack_index[i]],
            labels: labels[label_index[i]],
            count: 0,
            period_ns: periods[period_index[i]],
        });
    }
    for row in rows.iter_mut() {
        row.count = r.varint("counts column")?;
    }
    r.finish()?;
    Ok((hour, rows))
}

/// Where `value` is in `sorted`, a dictionary made from the rows that
/// hold it.
fn position<T: Ord>(sorted: &[T], value: &T) -> u64 {
    sorted.binary_search(value).unwrap_or_default() as u64
}

fn distinct<T: Ord>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = values.collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn in_dictionary(field: &'static str, index: u64, len: usize) -> Result<usize, DecodeError> {
    usize::try_from(index)
        .ok()
        .filter(|&i| i < len)
        .ok_or(DecodeError::OutOfRange {
            field,
            value: index,
        })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(ts: i64, stack: u128, labels: u128, count: u64, period_ns: u64) -> StoredSample {
        StoredSample {
            timestamp_ns: ts,
            stack: StackId(stack),
            labels: LabelSetId(labels),
            count,
            period_ns,
        }
    }

    fn sorted(mut rows: Vec<StoredSample>) -> Vec<StoredSample> {
        rows.sort_by_key(|s| (s.labels, s.stack, s.period_ns, s.timestamp_ns));
        rows
    }

    #[test]
    fn rows_come_back_sorted_and_whole() {
        let hour = 494_000;
        let start = hour * NANOS_PER_HOUR;
        let rows = vec![
            sample(start + 5, 9, 1, 3, 52_631_578),
            sample(start + 1, 9, 1, 1, 52_631_578),
            sample(start, 2, 7, u64::MAX, 1),
            sample(start + NANOS_PER_HOUR - 1, 2, 1, 0, 52_631_578),
        ];
        let bytes = encode(hour, &rows).0;
        assert!(bytes.starts_with(MAGIC));
        assert_eq!(decode(&bytes).unwrap(), (hour, sorted(rows)));
    }

    #[test]
    fn one_row_per_key_the_last_given() {
        let rows = vec![sample(10, 1, 1, 1, 100), sample(10, 1, 1, 2, 100)];
        assert_eq!(decode(&encode(0, &rows).0).unwrap().1, vec![rows[1]]);
        let rows = vec![sample(10, 1, 1, 1, 100), sample(10, 1, 1, 2, 200)];
        assert_eq!(decode(&encode(0, &rows).0).unwrap().1.len(), 1);
    }

    #[test]
    fn the_bytes_do_not_depend_on_row_order() {
        let rows: Vec<_> = (0..50)
            .map(|i| sample(i * 7, (i % 5) as u128, (i % 3) as u128, 1, 10))
            .collect();
        let mut reversed = rows.clone();
        reversed.reverse();
        assert_eq!(encode(3, &rows).0, encode(3, &reversed).0);
    }

    #[test]
    fn an_empty_hour_and_negative_hours_round_trip() {
        assert_eq!(decode(&encode(-2, &[]).0).unwrap(), (-2, vec![]));
        let rows = vec![sample(-NANOS_PER_HOUR - 3, 1, 1, 4, 10)];
        assert_eq!(decode(&encode(-2, &rows).0).unwrap(), (-2, rows));
    }

    #[test]
    fn damage_is_an_error_that_names_it() {
        let bytes = encode(1, &[sample(NANOS_PER_HOUR, 1, 2, 3, 4)]).0;
        let err = decode(&bytes[1..]).unwrap_err();
        assert!(err.to_string().contains("segment magic"), "{err}");
        let err = decode(&bytes[..bytes.len() - 2]).unwrap_err();
        assert!(matches!(err, DecodeError::Compression), "{err}");
        // A body that claims a million rows in a few bytes.
        let mut body = Writer::new(16);
        body.varint(0)
            .varint(0)
            .varint(0)
            .varint(0)
            .varint(1_000_000);
        let mut forged = MAGIC.to_vec();
        zstd::stream::copy_encode(&body.into_bytes()[..], &mut forged, 1).unwrap();
        let err = decode(&forged).unwrap_err();
        assert!(err.to_string().contains("rows"), "{err}");
    }

    proptest! {
        #[test]
        fn any_rows_of_the_hour_round_trip(
            hour in -10i64..500_000,
            rows in proptest::collection::vec(
                (0..NANOS_PER_HOUR, 0u128..40, 0u128..6, any::<u64>(), 1u64..4), 0..300),
        ) {
            let start = hour * NANOS_PER_HOUR;
            let rows: Vec<StoredSample> = rows
                .into_iter()
                .map(|(t, st, l, c, p)| sample(start + t, st, l, c, p * 1000))
                .collect();
            let (got_hour, got) = decode(&encode(hour, &rows).0).unwrap();
            prop_assert_eq!(got_hour, hour);
            let mut keys: Vec<_> = rows.iter().map(|s| (s.labels, s.stack, s.timestamp_ns)).collect();
            keys.sort_unstable();
            keys.dedup();
            prop_assert_eq!(got.len(), keys.len());
            for s in &got {
                prop_assert!(rows.contains(s), "{:?} was not given", s);
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut input = MAGIC.to_vec();
            input.extend(bytes);
            let _ = decode(&input);
        }
    }
}
