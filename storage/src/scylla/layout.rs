//! Where sample and metric rows go: the shard of a stack or series, the
//! partitions of a write, and the batches each partition's rows are sent
//! in. Pure functions, so that the partitioning is tested without a server.

use std::collections::BTreeMap;

use kiln_model::MetricPoint;

use crate::profile::{StoredSample, hour_of};
use crate::rollup::Resolution;

/// Rows per unlogged batch. A sample row is under 100 bytes on the wire,
/// so 200 rows stay well below ScyllaDB's batch size warning (128 KiB)
/// while making one request carry many rows.
pub(super) const BATCH_ROWS: usize = 200;

/// The partition of a sample row within its scope: `(hour, shard)`.
pub(super) type Partition = (i64, i16);

/// The partition of a metric row within its scope: `(name, hour, shard)`.
pub(super) type MetricPartition<'a> = (&'a str, i64, i16);

/// The shard of a stack or label-set id among `shards` (> 0): ids are
/// content hashes, uniform in every bit, so folding the two halves and
/// taking the remainder spreads them evenly, and one stack's (one
/// series') rows of an hour stay in one partition.
pub(super) fn shard_of(id: u128, shards: i16) -> i16 {
    debug_assert!(shards > 0);
    let folded = (id as u64) ^ ((id >> 64) as u64);
    // The remainder is below `shards`, an i16, so it fits.
    (folded % shards.max(1) as u64) as i16
}

/// One partition's rows, at most [`BATCH_ROWS`], in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RowBatch<P, R> {
    pub(super) partition: P,
    pub(super) rows: Vec<R>,
}

/// A batch of sample rows.
pub(super) type SampleBatch = RowBatch<Partition, StoredSample>;

/// A batch of metric points.
pub(super) type MetricBatch<'a> = RowBatch<MetricPartition<'a>, &'a MetricPoint>;

/// Groups `rows` by the partition `place` gives each, keeps one row per
/// key (the last given winning, as in the other stores), and cuts each
/// partition's rows, in key order, into batches.
fn batches_by_partition<P: Ord + Clone, K: Ord, R: Clone>(
    rows: impl IntoIterator<Item = R>,
    place: impl Fn(&R) -> (P, K),
) -> Vec<RowBatch<P, R>> {
    let mut partitions: BTreeMap<P, BTreeMap<K, R>> = BTreeMap::new();
    for row in rows {
        let (partition, key) = place(&row);
        partitions.entry(partition).or_default().insert(key, row);
    }
    let mut batches = Vec::new();
    for (partition, rows) in partitions {
        let rows: Vec<R> = rows.into_values().collect();
        batches.extend(rows.chunks(BATCH_ROWS).map(|chunk| RowBatch {
            partition: partition.clone(),
            rows: chunk.to_vec(),
        }));
    }
    batches
}

/// Groups `samples` by partition and cuts each group into batches. Rows
/// with the same key (timestamp, stack, labels) are written once, the last
/// given winning.
pub(super) fn sample_batches(samples: &[StoredSample], shards: i16) -> Vec<SampleBatch> {
    batches_by_partition(samples.iter().copied(), |s| {
        let partition = (hour_of(s.timestamp_ns), shard_of(s.stack.0, shards));
        (partition, (s.timestamp_ns, s.stack.0, s.labels.0))
    })
}

/// Groups metric `points` by partition (name, hour, shard of the label
/// set) and cuts each group into batches; a key (timestamp, labels) given
/// twice is written once, the last given winning.
pub(super) fn metric_batches(points: &[MetricPoint], shards: i16) -> Vec<MetricBatch<'_>> {
    batches_by_partition(points, |p| {
        let hour = hour_of(p.timestamp_ns);
        let partition = (p.name.as_str(), hour, shard_of(p.labels.0, shards));
        (partition, (p.timestamp_ns, p.labels.0))
    })
}

/// The distinct `(hour, name)` pairs of a metric write, in order.
pub(super) fn metric_hours_of<'a>(batches: &[MetricBatch<'a>]) -> Vec<(i64, &'a str)> {
    let mut pairs: Vec<(i64, &str)> = batches
        .iter()
        .map(|b| (b.partition.1, b.partition.0))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// The distinct hours of a write, in order.
pub(super) fn hours_of(batches: &[SampleBatch]) -> Vec<i64> {
    let mut hours: Vec<i64> = batches.iter().map(|b| b.partition.0).collect();
    hours.dedup();
    hours
}

/// The `resolution` column of `rollups` and `rollup_hours`: the window
/// in seconds, 3600 for an hour and 86 400 for a day (not
/// [`Resolution::code`]: the column reads on its own, as DESIGN.md's
/// `resolution`).
pub(super) const fn resolution_secs(resolution: Resolution) -> i32 {
    let secs = resolution.nanos() / 1_000_000_000;
    assert!(secs > 0 && secs <= i32::MAX as i64);
    secs as i32
}

/// Hours per `rollups` partition.
pub(super) const HOURS_PER_DAY: i64 = 24;

/// The day (the `rollups` partition) of the window starting at hour
/// `window`, of either resolution: floor division, so hour -1 is in day
/// -1. A day's partition holds its 24 hour windows at
/// [`Resolution::Hour`], its one day window at [`Resolution::Day`].
pub(super) fn day_of(window: i64) -> i64 {
    window.div_euclid(HOURS_PER_DAY)
}

/// What retention deletes of the rollups of `windows` (their first hours,
/// in any order) of `resolution`, those that start before `before_hour`:
/// the distinct days of their partitions that hold only windows starting
/// before it, sorted (a partition tombstone each), and the day of
/// `before_hour` when it holds one of them and windows starting at or
/// after it as well (a slice of it, `window_start < before_hour`, as its
/// later windows stay). A day window starts at its partition's first
/// hour, so at [`Resolution::Day`] every day goes whole.
pub(super) fn rollup_days_before(
    windows: &[i64],
    resolution: Resolution,
    before_hour: i64,
) -> (Vec<i64>, Option<i64>) {
    let cutoff_day = day_of(before_hour);
    let mut whole: Vec<i64> = windows
        .iter()
        .filter(|&&window| window < before_hour)
        .map(|&window| day_of(window))
        .collect();
    whole.sort_unstable();
    whole.dedup();
    // The last window of the cutoff's day to start; `cutoff_day * 24` is at
    // most `before_hour`, so this cannot overflow.
    let last_start = cutoff_day * HOURS_PER_DAY + HOURS_PER_DAY - resolution.hours();
    let partial = whole
        .last()
        .copied()
        .filter(|&day| day == cutoff_day && last_start >= before_hour);
    if partial.is_some() {
        whole.pop();
    }
    (whole, partial)
}

/// A `u64` as the `bigint` with the same bits, and back: CQL has no
/// unsigned type.
pub(super) fn to_bigint(value: u64) -> i64 {
    value as i64
}

pub(super) fn from_bigint(value: i64) -> u64 {
    value as u64
}

#[cfg(test)]
mod tests {
    use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};
    use proptest::prelude::*;

    use super::*;

    fn sample(timestamp_ns: i64, stack: u128, count: u64) -> StoredSample {
        StoredSample {
            timestamp_ns,
            stack: StackId(stack),
            labels: LabelSetId(1),
            count,
            period_ns: 10_101_010,
        }
    }

    #[test]
    fn shards_are_in_range_and_spread() {
        let mut seen = [0u32; 16];
        for i in 0..16_000u128 {
            // Ids as content hashes look: mixed bits.
            let id = i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            seen[shard_of(id, 16) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        assert_eq!(shard_of(u128::MAX, 1), 0);
        assert_eq!(shard_of(u128::MAX, 4_096), 0);
        assert_eq!(shard_of(5, 4_096), 5);
    }

    #[test]
    fn batches_hold_one_partition_each_and_are_bounded() {
        let h = NANOS_PER_HOUR;
        let samples: Vec<_> = (0..1_000)
            .map(|i| sample((i % 3) * h + i, i as u128 * 0x1_0000_0001, 1))
            .collect();
        let batches = sample_batches(&samples, 4);
        let mut total = 0;
        for batch in &batches {
            assert!(!batch.rows.is_empty() && batch.rows.len() <= BATCH_ROWS);
            for row in &batch.rows {
                assert_eq!(hour_of(row.timestamp_ns), batch.partition.0);
                assert_eq!(shard_of(row.stack.0, 4), batch.partition.1);
            }
            total += batch.rows.len();
        }
        assert_eq!(total, samples.len());
        assert_eq!(hours_of(&batches), [0, 1, 2]);
    }

    #[test]
    fn repeated_keys_are_written_once_last_winning() {
        let batches = sample_batches(&[sample(7, 1, 1), sample(7, 1, 2), sample(8, 1, 3)], 16);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].rows, [sample(7, 1, 2), sample(8, 1, 3)]);
        assert!(sample_batches(&[], 16).is_empty());
    }

    fn point(name: &str, timestamp_ns: i64, labels: u128, value: f64) -> MetricPoint {
        MetricPoint {
            name: name.into(),
            labels: LabelSetId(labels),
            timestamp_ns,
            value,
        }
    }

    /// Metric batches hold one (name, hour, shard) each, keep the last
    /// value of a repeated point, and list each (hour, name) once.
    #[test]
    fn metric_batches_hold_one_partition_each() {
        let h = NANOS_PER_HOUR;
        let mut points: Vec<MetricPoint> = (0..900)
            .map(|i| {
                point(
                    ["a", "b"][i % 2],
                    (i as i64 % 3) * h + i as i64,
                    i as u128,
                    1.0,
                )
            })
            .collect();
        points.push(point("a", 0, 0, 7.0));
        let batches = metric_batches(&points, 4);
        let mut total = 0;
        for batch in &batches {
            assert!(!batch.rows.is_empty() && batch.rows.len() <= BATCH_ROWS);
            for row in &batch.rows {
                let (name, hour, shard) = batch.partition;
                assert_eq!(row.name, name);
                assert_eq!(hour_of(row.timestamp_ns), hour);
                assert_eq!(shard_of(row.labels.0, 4), shard);
            }
            total += batch.rows.len();
        }
        assert_eq!(total, 900);
        let first = batches
            .iter()
            .flat_map(|b| &b.rows)
            .find(|p| p.timestamp_ns == 0 && p.labels.0 == 0)
            .unwrap();
        assert_eq!(first.value, 7.0);
        let pairs = metric_hours_of(&batches);
        assert_eq!(
            pairs,
            [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]
        );
    }

    #[test]
    fn negative_timestamps_fall_in_earlier_hours() {
        let batches = sample_batches(&[sample(-1, 1, 1), sample(i64::MIN, 1, 1)], 1);
        assert_eq!(
            batches.iter().map(|b| b.partition.0).collect::<Vec<_>>(),
            [i64::MIN.div_euclid(NANOS_PER_HOUR), -1]
        );
    }

    #[test]
    fn rollups_are_windows_in_day_partitions() {
        assert_eq!(resolution_secs(Resolution::Hour), 3_600);
        assert_eq!(resolution_secs(Resolution::Day), 86_400);
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(23), 0);
        assert_eq!(day_of(24), 1);
        assert_eq!(day_of(-1), -1);
        assert_eq!(day_of(-24), -1);
        assert_eq!(day_of(-25), -2);
        let first = hour_of(i64::MIN);
        assert_eq!(day_of(first), first.div_euclid(24));
        // A day window's partition is the day of its first hour.
        for hour in [-49, -24, -1, 0, 23, 24, 47, first] {
            let window = Resolution::Day.window_of(hour);
            assert_eq!(day_of(window), day_of(hour));
            assert_eq!(day_of(window) * HOURS_PER_DAY, window);
        }
    }

    #[test]
    fn retention_deletes_whole_days_before_the_cutoffs_and_a_slice_of_it() {
        let hour = Resolution::Hour;
        // Cutoff at hour 50 (day 2): hours 3 and 20 (day 0), 30 (day 1)
        // and 49 (day 2) go; day 2 only up to hour 50.
        assert_eq!(
            rollup_days_before(&[49, 3, 30, 20], hour, 50),
            (vec![0, 1], Some(2))
        );
        // Cutoff at a day's first hour: whole days only.
        assert_eq!(
            rollup_days_before(&[47, 30, 3], hour, 48),
            (vec![0, 1], None)
        );
        // Nothing in the cutoff's day.
        assert_eq!(rollup_days_before(&[3], hour, 50), (vec![0], None));
        assert_eq!(rollup_days_before(&[], hour, 50), (vec![], None));
        // Hours at or after the cutoff are not retention's.
        assert_eq!(rollup_days_before(&[50, 70], hour, 50), (vec![], None));
        // Negative hours: -1 is in day -1, the cutoff 0's day is 0.
        assert_eq!(
            rollup_days_before(&[-1, -30], hour, 0),
            (vec![-2, -1], None)
        );
        assert_eq!(rollup_days_before(&[-3], hour, -2), (vec![], Some(-1)));
    }

    #[test]
    fn retention_deletes_the_days_whose_window_starts_before_the_cutoff() {
        let day = Resolution::Day;
        // Cutoff at hour 50 (day 2): days 0, 1 and 2 start before it and
        // go whole (day 2's partition holds only that window); day 3 stays.
        assert_eq!(
            rollup_days_before(&[72, 48, 0, 24], day, 50),
            (vec![0, 1, 2], None)
        );
        // Cutoff at a day's first hour: that day starts at it and stays.
        assert_eq!(
            rollup_days_before(&[24, 0, 48], day, 48),
            (vec![0, 1], None)
        );
        assert_eq!(rollup_days_before(&[48], day, 48), (vec![], None));
        assert_eq!(rollup_days_before(&[], day, 50), (vec![], None));
        // Negative days: day -1 starts at hour -24.
        assert_eq!(
            rollup_days_before(&[-24, -48], day, -2),
            (vec![-2, -1], None)
        );
        assert_eq!(rollup_days_before(&[-24, 0], day, 0), (vec![-1], None));
    }

    proptest! {
        /// Every u64, the extremes included, survives the bigint column.
        #[test]
        fn bigint_round_trips(value: u64) {
            prop_assert_eq!(from_bigint(to_bigint(value)), value);
        }
    }
}
