//! Rollups: each hour of a scope's samples summed per (stack, label set
//! without its per-instance labels, period), so that a query of days or
//! weeks reads one row per stack and hour instead of every sample
//! (DESIGN.md's `rollups` table, at a resolution of one hour).
//!
//! A rollup is derived from the hour's stored samples, never written
//! beside them: replayed batches replace samples (idempotent), and a sum
//! kept on the side of the writes would count a replay twice. So the
//! query role rolls up hours once they are written (`kiln-actors`'
//! rollup job), and marks each rollup with the **version** of the hour
//! it was made from: the hour's usage counter
//! ([`ProfileStore::stored_bytes`](crate::ProfileStore::stored_bytes)
//! counts every write of the hour, so it only grows while the hour has
//! data). A query uses the rollup of an hour only while its version is
//! the hour's current one; a late write (an agent's spool delivered
//! after an outage) makes it stale, the query reads the samples, and the
//! job rolls the hour again.

use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};

/// The window one rollup row sums: an hour, the samples table's
/// partition, so that an hour's rollup replaces exactly one partition's
/// scan.
pub const ROLLUP_WINDOW_NS: i64 = NANOS_PER_HOUR;

/// One row of an hour's rollup: the samples of one stack with one label
/// set (the samples' label sets without their per-instance labels,
/// `LabelSet::without_instance`) at one period, summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RollupRow {
    /// The stack.
    pub stack: StackId,
    /// The reduced label set.
    pub labels: LabelSetId,
    /// Time one sample stands for, in nanoseconds: samples of different
    /// periods (agents at different frequencies) stay apart, so that CPU
    /// time is exact.
    pub period_ns: u64,
    /// The summed count (saturating).
    pub count: u64,
}

/// An hour of a scope and a version of its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HourVersion {
    /// The hour, `timestamp_ns.div_euclid(NANOS_PER_HOUR)`.
    pub hour: i64,
    /// For [`ProfileStore::hour_versions`](crate::ProfileStore::hour_versions),
    /// the hour's current version; for
    /// [`ProfileStore::rollup_versions`](crate::ProfileStore::rollup_versions),
    /// the version its rollup was made from.
    pub version: u64,
}

/// The hours of `rollups` whose version is the current one in `current`
/// (both sorted by hour, as the stores return them): the hours a query may
/// read from rollups.
pub fn current_rollups(current: &[HourVersion], rollups: &[HourVersion]) -> Vec<i64> {
    let now: std::collections::HashMap<i64, u64> =
        current.iter().map(|h| (h.hour, h.version)).collect();
    rollups
        .iter()
        .filter(|r| now.get(&r.hour) == Some(&r.version))
        .map(|r| r.hour)
        .collect()
}

/// `rows` with the counts of equal keys (stack, labels, period) summed,
/// saturating, sorted by key: what a store writes for one hour's rollup.
pub(crate) fn merge_rows(rows: &[RollupRow]) -> Vec<RollupRow> {
    let mut merged = std::collections::BTreeMap::<(StackId, LabelSetId, u64), u64>::new();
    for row in rows {
        let count = merged
            .entry((row.stack, row.labels, row.period_ns))
            .or_default();
        *count = count.saturating_add(row.count);
    }
    merged
        .into_iter()
        .map(|((stack, labels, period_ns), count)| RollupRow {
            stack,
            labels,
            period_ns,
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rollups_of_the_current_version_are_current() {
        let v = |hour, version| HourVersion { hour, version };
        let current = [v(1, 10), v(2, 20), v(3, 30)];
        // Hour 1 rolled at its version, hour 2 before a late write, hour 4
        // rolled but since deleted.
        let rollups = [v(1, 10), v(2, 15), v(4, 40)];
        assert_eq!(current_rollups(&current, &rollups), vec![1]);
    }
}
