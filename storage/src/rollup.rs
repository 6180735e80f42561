//! Rollups: a scope's samples summed per (stack, label set without its
//! per-instance labels, period) over a window of an hour or a day, so that
//! a query of days or weeks reads one row per stack and window instead of
//! every sample (DESIGN.md's `rollups` table, at two resolutions).
//!
//! A rollup is derived from stored data, never written beside it:
//! replayed batches replace samples (idempotent), and a sum kept on the
//! side of the writes would count a replay twice. So the query role rolls
//! up hours once they are written, then days from their hours
//! (`kiln-actors`' rollup job), and marks each rollup with the
//! **version** of the data it was made from. An hour's version is its
//! usage counter ([`ProfileStore::stored_bytes`](crate::ProfileStore::stored_bytes)
//! counts every write of the hour, so it only grows while the hour has
//! data); a day's is the sum of its hours' versions, which grows whenever
//! one of them does. A query uses a rollup only while its version is the
//! current one; a late write (an agent's spool delivered after an outage)
//! makes it stale, the query reads what lies below (the hours' rollups,
//! or the samples), and the job rolls it again.

use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};

/// The windows rollups sum over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolution {
    /// An hour: the samples table's partition, so that an hour's rollup
    /// stands in for exactly one partition's scan.
    Hour,
    /// A day (UTC): 24 hours' rollups in one, for ranges of days.
    Day,
}

impl Resolution {
    /// Both, finest first.
    pub const ALL: [Resolution; 2] = [Resolution::Hour, Resolution::Day];

    /// Hours in one window.
    pub const fn hours(self) -> i64 {
        match self {
            Resolution::Hour => 1,
            Resolution::Day => 24,
        }
    }

    /// Nanoseconds in one window.
    pub const fn nanos(self) -> i64 {
        self.hours() * NANOS_PER_HOUR
    }

    /// The first hour of the window that `hour` lies in.
    pub const fn window_of(self, hour: i64) -> i64 {
        hour.div_euclid(self.hours()) * self.hours()
    }

    /// A small number naming the resolution in keys and columns (the
    /// window's hours: 1 or 24).
    pub const fn code(self) -> u8 {
        self.hours() as u8
    }
}

/// One row of a window's rollup: the samples of one stack with one label
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

/// An hour (or a window's first hour) of a scope and a version of its
/// data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HourVersion {
    /// The hour, `timestamp_ns.div_euclid(NANOS_PER_HOUR)`; for a window,
    /// its first hour.
    pub hour: i64,
    /// For [`ProfileStore::hour_versions`](crate::ProfileStore::hour_versions),
    /// the hour's current version; for
    /// [`ProfileStore::rollup_versions`](crate::ProfileStore::rollup_versions),
    /// the version the window's rollup was made from.
    pub version: u64,
}

/// The current version of each window of `resolution` that holds data,
/// from the current versions of its hours (`hours`, as
/// [`ProfileStore::hour_versions`](crate::ProfileStore::hour_versions)
/// gives them): an hour's own, or the sum of a day's (saturating).
pub fn window_versions(resolution: Resolution, hours: &[HourVersion]) -> Vec<HourVersion> {
    let mut windows = std::collections::BTreeMap::<i64, u64>::new();
    for h in hours {
        let sum = windows.entry(resolution.window_of(h.hour)).or_default();
        *sum = sum.saturating_add(h.version);
    }
    windows
        .into_iter()
        .map(|(hour, version)| HourVersion { hour, version })
        .collect()
}

/// The windows of `rollups` whose version is the current one in `current`
/// (both by window, as [`window_versions`] and
/// [`ProfileStore::rollup_versions`](crate::ProfileStore::rollup_versions)
/// give them): the windows a query may read from rollups.
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
pub fn merge_rows(rows: &[RollupRow]) -> Vec<RollupRow> {
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

    #[test]
    fn a_days_version_sums_its_hours_and_grows_with_any() {
        let v = |hour, version| HourVersion { hour, version };
        // Hours of day 1 (24..48) and day -1 (-24..0).
        let hours = [v(-3, 5), v(24, 10), v(30, 20), v(47, 1)];
        assert_eq!(
            window_versions(Resolution::Day, &hours),
            vec![v(-24, 5), v(24, 31)]
        );
        assert_eq!(window_versions(Resolution::Hour, &hours), hours.to_vec());
        let later = [v(-3, 5), v(24, 10), v(30, 21), v(47, 1)];
        assert_eq!(window_versions(Resolution::Day, &later)[1].version, 32);
        assert_eq!(Resolution::Day.window_of(-1), -24);
        assert_eq!(Resolution::Day.window_of(47), 24);
    }
}
