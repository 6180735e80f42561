//! How the user-stack walks of an interval ended: how many reached their
//! root, and why the others stopped early. A profiler is only as good as
//! its stacks, so the agent logs this every interval and sends it to the
//! backend as the metric [`STACK_WALKS`], one series per outcome, where the
//! UI shows the share of broken stacks for the selected range.

use kiln_model::{BatchBuilder, LabelSet, label_names, metric_names};

use crate::abi::Stat;

/// Metric of walk counts per interval, labelled `host` and `outcome`
/// (one of [`StackCoverage::OUTCOMES`]'s names).
pub const STACK_WALKS: &str = metric_names::STACK_WALKS;
/// The label naming a walk's outcome.
pub const OUTCOME_LABEL: &str = metric_names::STACK_WALK_OUTCOME;

/// Walks of one interval by how they ended (the program's
/// `KILN_STAT_WALK_*` counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCoverage {
    /// Reached the outermost frame (`_start`, a thread's entry).
    pub rooted: u64,
    /// Stopped at a frame whose file's table was not loaded yet (or the
    /// process's mappings were not).
    pub no_table: u64,
    /// Stopped at a frame whose table had been evicted for room.
    pub evicted: u64,
    /// Stopped at an address in no known mapping (JIT code, or code
    /// mapped since the process's maps were read).
    pub no_mapping: u64,
    /// Stopped at a frame whose rules led nowhere.
    pub bad_frame: u64,
    /// Filled the deepest stack the program records.
    pub depth: u64,
}

impl StackCoverage {
    /// Each outcome's metric label value and program counter.
    pub const OUTCOMES: [(&'static str, Stat); 6] = [
        ("rooted", Stat::WalkRooted),
        ("no_table", Stat::WalkNoTable),
        ("evicted", Stat::WalkEvicted),
        ("no_mapping", Stat::WalkNoMapping),
        ("bad_frame", Stat::WalkBadFrame),
        ("depth", Stat::WalkDepth),
    ];

    /// From the per-interval deltas of the program's counters.
    pub(crate) fn from_deltas(delta: impl Fn(Stat) -> u64) -> StackCoverage {
        StackCoverage {
            rooted: delta(Stat::WalkRooted),
            no_table: delta(Stat::WalkNoTable),
            evicted: delta(Stat::WalkEvicted),
            no_mapping: delta(Stat::WalkNoMapping),
            bad_frame: delta(Stat::WalkBadFrame),
            depth: delta(Stat::WalkDepth),
        }
    }

    /// Each outcome's name and count, in [`StackCoverage::OUTCOMES`] order.
    pub fn counts(&self) -> [(&'static str, u64); 6] {
        [
            ("rooted", self.rooted),
            ("no_table", self.no_table),
            ("evicted", self.evicted),
            ("no_mapping", self.no_mapping),
            ("bad_frame", self.bad_frame),
            ("depth", self.depth),
        ]
    }

    /// All walks.
    pub fn walks(&self) -> u64 {
        self.counts().iter().map(|(_, n)| n).sum()
    }

    /// Walks that stopped before their root.
    pub fn broken(&self) -> u64 {
        self.walks() - self.rooted
    }

    /// Share of walks that reached their root, 0..=1; `None` without walks.
    pub fn rooted_share(&self) -> Option<f64> {
        let walks = self.walks();
        (walks > 0).then(|| self.rooted as f64 / walks as f64)
    }

    /// Adds this interval's counts to a batch as [`STACK_WALKS`] points at
    /// `timestamp_ns`, every outcome even when zero, so that a series'
    /// average over a range compares with the others'.
    pub(crate) fn add_to(&self, builder: &mut BatchBuilder, host: &str, timestamp_ns: i64) {
        for (outcome, n) in self.counts() {
            let labels = LabelSet::new()
                .with(label_names::HOST, host.to_owned())
                .with(OUTCOME_LABEL, outcome.to_owned());
            if let Err(e) = builder.metric(STACK_WALKS, &labels, timestamp_ns, n as f64) {
                tracing::debug!(error = %e, "stack coverage point not sent");
            }
        }
    }

    /// Logs the interval's coverage: at info when stacks broke, else at
    /// debug.
    pub(crate) fn log(&self) {
        let Some(share) = self.rooted_share() else {
            return;
        };
        let percent = (share * 1000.0).round() / 10.0;
        if self.broken() == 0 {
            tracing::debug!(
                walks = self.walks(),
                rooted_percent = percent,
                "stack coverage"
            );
        } else {
            tracing::info!(
                walks = self.walks(),
                rooted_percent = percent,
                no_table = self.no_table,
                evicted = self.evicted,
                no_mapping = self.no_mapping,
                bad_frame = self.bad_frame,
                depth = self.depth,
                "stack coverage"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the lists of outcomes (the program's counters, the agent's
    // counts, the metric's label values) against drifting apart.
    #[test]
    fn outcomes_and_counts_name_the_same_counters() {
        let coverage = StackCoverage::from_deltas(|s| s as u64);
        let lists = StackCoverage::OUTCOMES
            .iter()
            .zip(coverage.counts())
            .zip(metric_names::STACK_WALK_OUTCOMES);
        for (((name, stat), (counted, n)), label) in lists {
            assert_eq!(*name, counted);
            assert_eq!(*name, label);
            assert_eq!(*stat as u64, n);
        }
        assert_eq!(coverage.broken(), coverage.walks() - coverage.rooted);
        assert_eq!(StackCoverage::default().rooted_share(), None);
    }

    // Guards the metric: six points, every outcome, zeros included.
    #[test]
    fn every_outcome_is_sent() {
        let mut builder = BatchBuilder::new(String::from("h"), 1, 1);
        StackCoverage {
            rooted: 9,
            bad_frame: 1,
            ..StackCoverage::default()
        }
        .add_to(&mut builder, "h", 5);
        let batch = builder.finish();
        assert_eq!(batch.metrics.len(), 6);
        let total: f64 = batch.metrics.iter().map(|m| m.value).sum();
        assert_eq!(total, 10.0);
    }
}
