//! How well JIT code was named in an interval: of the samples whose user
//! stack ran JIT-compiled code, how many had every such frame named from
//! a perf map, and why the others did not. Logged every interval and sent
//! as the metric [`JIT_SAMPLES`], one series per outcome, as the walks'
//! coverage is (`coverage.rs`).

use kiln_model::{BatchBuilder, LabelSet, label_names, metric_names};

/// Metric of JIT samples per interval, labelled `host` and `outcome` (one
/// of [`JitCoverage::counts`]' names).
pub const JIT_SAMPLES: &str = metric_names::JIT_SAMPLES;
/// The label naming a JIT sample's outcome.
pub const JIT_OUTCOME_LABEL: &str = metric_names::JIT_SAMPLE_OUTCOME;

/// How one stack's JIT frames were named; a stack is as bad as its worst
/// frame (the order of the variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum JitOutcome {
    /// From the process's perf map.
    Named,
    /// The process's map has no entry there.
    NotInMap,
    /// The process has no perf map the agent read (none written, refused,
    /// or perf maps off).
    NoMap,
}

/// JIT samples of one interval by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitCoverage {
    /// Every JIT frame named from the perf map.
    pub named: u64,
    /// Some JIT frame the perf map did not cover.
    pub not_in_map: u64,
    /// The process had no perf map read.
    pub no_map: u64,
}

impl JitCoverage {
    /// Counts `samples` samples of a stack whose JIT frames came out as
    /// `outcome` (`None`: it had none).
    pub(crate) fn count(&mut self, outcome: Option<JitOutcome>, samples: u64) {
        match outcome {
            Some(JitOutcome::Named) => self.named += samples,
            Some(JitOutcome::NotInMap) => self.not_in_map += samples,
            Some(JitOutcome::NoMap) => self.no_map += samples,
            None => {}
        }
    }

    /// Each outcome's metric label value and count.
    pub fn counts(&self) -> [(&'static str, u64); 3] {
        let [named, not_in_map, no_map] = metric_names::JIT_SAMPLE_OUTCOMES;
        [
            (named, self.named),
            (not_in_map, self.not_in_map),
            (no_map, self.no_map),
        ]
    }

    /// Samples with JIT frames.
    pub fn samples(&self) -> u64 {
        self.named + self.not_in_map + self.no_map
    }

    /// Adds the interval's counts to a batch as [`JIT_SAMPLES`] points at
    /// `timestamp_ns`, every outcome, when there were any JIT samples.
    pub(crate) fn add_to(&self, builder: &mut BatchBuilder, host: &str, timestamp_ns: i64) {
        if self.samples() == 0 {
            return;
        }
        for (outcome, n) in self.counts() {
            let labels = LabelSet::new()
                .with(label_names::HOST, host.to_owned())
                .with(JIT_OUTCOME_LABEL, outcome.to_owned());
            if let Err(e) = builder.metric(JIT_SAMPLES, &labels, timestamp_ns, n as f64) {
                tracing::debug!(error = %e, "JIT coverage point not sent");
            }
        }
    }

    /// Logs the interval's counts: at info when some JIT frames of
    /// processes that write a perf map went unnamed, else at debug.
    pub(crate) fn log(&self) {
        if self.samples() == 0 {
            return;
        }
        if self.not_in_map > 0 {
            tracing::info!(
                named = self.named,
                not_in_map = self.not_in_map,
                no_map = self.no_map,
                "JIT samples"
            );
        } else {
            tracing::debug!(named = self.named, no_map = self.no_map, "JIT samples");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the metric: three points, zeros included, none without JIT
    // samples; a stack counts under its worst frame's outcome.
    #[test]
    fn every_outcome_is_sent_when_there_were_jit_samples() {
        let mut builder = BatchBuilder::new(String::from("h"), 1, 1);
        JitCoverage::default().add_to(&mut builder, "h", 5);
        assert!(builder.finish().metrics.is_empty());

        let mut coverage = JitCoverage::default();
        coverage.count(Some(JitOutcome::Named), 7);
        coverage.count(Some(JitOutcome::Named.max(JitOutcome::NotInMap)), 2);
        coverage.count(None, 100);
        assert_eq!(coverage.samples(), 9);
        let mut builder = BatchBuilder::new(String::from("h"), 1, 1);
        coverage.add_to(&mut builder, "h", 5);
        let batch = builder.finish();
        assert_eq!(batch.metrics.len(), 3);
        let total: f64 = batch.metrics.iter().map(|m| m.value).sum();
        assert_eq!(total, 9.0);
    }
}
