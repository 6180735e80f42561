//! Metric points: timestamped numbers beside the profiles (GPU utilization,
//! clocks, memory, power; later the agent's own coverage), one series per
//! (metric name, label set).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::LabelSetId;

/// Longest metric name, in bytes. Short enough for a one-byte length
/// prefix in the embedded store's keys, long enough for dotted names.
pub const MAX_METRIC_NAME_LEN: usize = 128;

/// Most metric points one batch may carry: an agent sending every 10 s
/// reads a few hundred (tens of readings per GPU per second); this bounds
/// what a buggy or hostile sender makes a worker hold.
pub const MAX_METRIC_POINTS: usize = 100_000;

/// Names of the metrics Kiln's agent sends. Any other valid name is allowed
/// too; the UI derives a series' unit from the name's last `_` word
/// (`_percent`, `_bytes`, `_mhz`, `_watts`, `_celsius`, `_bytes_per_second`).
pub mod names {
    /// GPU utilization: percent of the last sample period a kernel ran
    /// (NVML `nvmlDeviceGetUtilizationRates().gpu`).
    pub const GPU_UTILIZATION: &str = "gpu.utilization_percent";
    /// Percent of the last sample period device memory was read or written.
    pub const GPU_MEMORY_UTILIZATION: &str = "gpu.memory_utilization_percent";
    /// SM clock, in MHz.
    pub const GPU_SM_CLOCK: &str = "gpu.sm_clock_mhz";
    /// Memory clock, in MHz.
    pub const GPU_MEMORY_CLOCK: &str = "gpu.memory_clock_mhz";
    /// Device memory in use, in bytes.
    pub const GPU_MEMORY_USED: &str = "gpu.memory_used_bytes";
    /// Device memory in all, in bytes.
    pub const GPU_MEMORY_TOTAL: &str = "gpu.memory_total_bytes";
    /// Power draw, in watts.
    pub const GPU_POWER: &str = "gpu.power_watts";
    /// Temperature, in degrees Celsius.
    pub const GPU_TEMPERATURE: &str = "gpu.temperature_celsius";
    /// PCIe receive throughput, in bytes per second.
    pub const GPU_PCIE_RX: &str = "gpu.pcie_rx_bytes_per_second";
    /// PCIe transmit throughput, in bytes per second.
    pub const GPU_PCIE_TX: &str = "gpu.pcie_tx_bytes_per_second";
    /// Device memory used by one process (label `pid`, and `process` where
    /// known, besides the GPU's), in bytes.
    pub const GPU_PROCESS_MEMORY: &str = "gpu.process_memory_used_bytes";
    /// User-stack walks of one agent interval that ended one way (label
    /// [`STACK_WALK_OUTCOME`], one of [`STACK_WALK_OUTCOMES`], beside
    /// `host`): every outcome is sent each interval, zeros too, so series'
    /// averages over a range compare with each other.
    pub const STACK_WALKS: &str = "agent.stack_walks";
    /// The label of [`STACK_WALKS`] naming how the walks ended.
    pub const STACK_WALK_OUTCOME: &str = "outcome";
    /// How a walk may end: `rooted` reached the outermost frame (`_start`,
    /// a thread's entry); the others stopped early, and say why.
    pub const STACK_WALK_OUTCOMES: [&str; 6] = [
        "rooted",
        "no_table",
        "evicted",
        "no_mapping",
        "bad_frame",
        "depth",
    ];
    /// Samples of one agent interval whose user stack ran JIT-compiled
    /// code (a frame in anonymous executable memory), by how that code
    /// was named (label [`JIT_SAMPLE_OUTCOME`], one of
    /// [`JIT_SAMPLE_OUTCOMES`], beside `host`): every outcome is sent in
    /// an interval that had any, zeros too.
    pub const JIT_SAMPLES: &str = "agent.jit_samples";
    /// The label of [`JIT_SAMPLES`] naming the outcome.
    pub const JIT_SAMPLE_OUTCOME: &str = "outcome";
    /// How a sample's JIT frames were named: `named`, every one from the
    /// process's perf map; `not_in_map`, the map lacked one of them;
    /// `no_map`, the process writes no perf map the agent could read (or
    /// `kiln-agent --no-perf-maps`).
    pub const JIT_SAMPLE_OUTCOMES: [&str; 3] = ["named", "not_in_map", "no_map"];
}

/// What share of the user-stack walks in a range reached their root, from
/// the [`names::STACK_WALKS`] series of a metrics answer: the figure a
/// user checks before trusting a flamegraph's callers.
#[derive(Debug, Clone, PartialEq)]
pub struct StackWalkShares {
    /// Share of walks that reached their root, 0..=1.
    pub rooted: f64,
    /// The other outcomes with their shares, largest first, zeros left out.
    pub broken: Vec<(String, f64)>,
}

impl StackWalkShares {
    /// The coverage over every series of `set` (all hosts), or `None` when
    /// it is not the stack-walk metric or holds no walks. Each point is
    /// the average of an outcome's per-interval counts in a step; every
    /// outcome is sent every interval, so sums of averages compare as the
    /// counts do.
    pub fn of(set: &MetricSeriesSet) -> Option<StackWalkShares> {
        if set.name != names::STACK_WALKS {
            return None;
        }
        let mut by_outcome: BTreeMap<&str, f64> = BTreeMap::new();
        for series in &set.series {
            let Some(outcome) = series.labels.get(names::STACK_WALK_OUTCOME) else {
                continue;
            };
            let sum: f64 = series.points.iter().map(|p| p.value).sum();
            *by_outcome.entry(outcome.as_str()).or_default() += sum;
        }
        let walks: f64 = by_outcome.values().sum();
        if walks <= 0.0 {
            return None;
        }
        let rooted = by_outcome.get("rooted").copied().unwrap_or(0.0) / walks;
        let mut broken: Vec<(String, f64)> = by_outcome
            .into_iter()
            .filter(|&(outcome, n)| outcome != "rooted" && n > 0.0)
            .map(|(outcome, n)| (outcome.to_owned(), n / walks))
            .collect();
        broken.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some(StackWalkShares { rooted, broken })
    }
}

/// One reading of one series: the value of metric `name` for the label set
/// `labels` at `timestamp_ns`.
///
/// The label set is carried by id, like a sample's: its entry travels in the
/// batch's `label_sets` (or an earlier batch's). A point is keyed by (name,
/// labels, timestamp): writing the same key again replaces its value, so a
/// replayed batch never counts a point twice.
///
/// Equality compares values bit for bit (a total relation, so that
/// [`Batch`](crate::Batch) stays `Eq`): `0.0` and `-0.0` differ, and a NaN
/// equals itself, though a valid point never holds one.
#[derive(Debug, Clone, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct MetricPoint {
    /// The metric, `[a-z0-9_.]{1,128}` ([`check_metric_name`]).
    pub name: String,
    /// The series' labels (host, gpu, gpu_name, …).
    pub labels: LabelSetId,
    /// Nanoseconds since the Unix epoch.
    pub timestamp_ns: i64,
    /// The reading; finite.
    pub value: f64,
}

impl PartialEq for MetricPoint {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.labels == other.labels
            && self.timestamp_ns == other.timestamp_ns
            && self.value.to_bits() == other.value.to_bits()
    }
}

impl Eq for MetricPoint {}

impl MetricPoint {
    /// Checks the name and the value ([`check_metric_name`], finite value).
    pub fn check(&self) -> Result<(), MetricError> {
        check_metric_name(&self.name)?;
        check_metric_value(&self.name, self.value)
    }
}

/// Why a metric point was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    /// The name breaks the rule of [`check_metric_name`].
    #[error("invalid metric name {name:?}: {reason}")]
    InvalidName {
        /// The name as given (cut to 200 bytes when longer).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The value is NaN or infinite.
    #[error("metric {name:?}: value {value} is not a finite number")]
    NotFinite {
        /// The metric.
        name: String,
        /// The value, as text (`NaN`, `inf`, `-inf`).
        value: String,
    },
    /// A batch would hold more than [`MAX_METRIC_POINTS`] points.
    #[error("a batch holds at most {MAX_METRIC_POINTS} metric points; send the rest in another")]
    TooMany,
}

/// Checks a metric name: 1 to [`MAX_METRIC_NAME_LEN`] bytes of `[a-z0-9_.]`
/// (`gpu.utilization_percent`). The error names the offending character.
///
/// # Examples
///
/// ```
/// use kiln_model::check_metric_name;
///
/// assert!(check_metric_name("gpu.power_watts").is_ok());
/// let err = check_metric_name("GPU power").unwrap_err();
/// assert!(err.to_string().contains("contains 'G'"));
/// ```
pub fn check_metric_name(name: &str) -> Result<(), MetricError> {
    let refuse = |reason: String| {
        let mut shown = name.to_owned();
        if shown.len() > 200 {
            let mut cut = 200;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
        }
        Err(MetricError::InvalidName {
            name: shown,
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty".to_owned());
    }
    if name.len() > MAX_METRIC_NAME_LEN {
        return refuse(format!(
            "it is {} bytes, longer than {MAX_METRIC_NAME_LEN}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '.'))
    {
        return refuse(format!(
            "it contains {c:?}; use lower-case letters, digits, '_' and '.'"
        ));
    }
    Ok(())
}

/// Checks that `value` is finite; `name` goes into the error.
pub(crate) fn check_metric_value(name: &str, value: f64) -> Result<(), MetricError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(MetricError::NotFinite {
            name: name.to_owned(),
            value: value.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the UI's "stacks whole" figure: shares over all hosts' series,
    // broken outcomes largest first, other metrics ignored.
    #[test]
    fn stack_walk_shares_sum_every_host() {
        let series = |host: &str, outcome: &str, values: &[f64]| MetricSeries {
            labels: BTreeMap::from([
                ("host".to_owned(), host.to_owned()),
                (names::STACK_WALK_OUTCOME.to_owned(), outcome.to_owned()),
            ]),
            points: values
                .iter()
                .enumerate()
                .map(|(i, &value)| MetricValue {
                    t_ns: i as i64,
                    value,
                })
                .collect(),
        };
        let mut set = MetricSeriesSet {
            name: names::STACK_WALKS.to_owned(),
            from_ns: 0,
            to_ns: 2,
            step_ns: 1,
            series: vec![
                series("a", "rooted", &[40.0, 50.0]),
                series("b", "rooted", &[5.0]),
                series("a", "no_table", &[3.0, 0.0]),
                series("b", "bad_frame", &[2.0]),
                series("a", "depth", &[0.0, 0.0]),
            ],
        };
        let shares = StackWalkShares::of(&set).unwrap();
        assert_eq!(shares.rooted, 0.95);
        assert_eq!(
            shares.broken,
            vec![
                ("no_table".to_owned(), 0.03),
                ("bad_frame".to_owned(), 0.02)
            ]
        );
        set.name = "gpu.power_watts".to_owned();
        assert_eq!(StackWalkShares::of(&set), None);
        set.name = names::STACK_WALKS.to_owned();
        set.series.clear();
        assert_eq!(StackWalkShares::of(&set), None);
    }

    #[test]
    fn names_follow_the_rule_and_errors_say_why() {
        for name in ["a", "0", "gpu.sm_clock_mhz", "a..b_", &"x".repeat(128)] {
            check_metric_name(name).unwrap();
        }
        let reason = |name: &str| match check_metric_name(name) {
            Err(MetricError::InvalidName { reason, .. }) => reason,
            other => panic!("{name:?} was accepted: {other:?}"),
        };
        assert!(reason("").contains("empty"));
        assert!(reason(&"x".repeat(129)).contains("129 bytes"));
        assert!(reason("gpu-util").contains("'-'"));
        assert!(reason("Gpu").contains("'G'"));
        assert!(reason("gpu util").contains("' '"));
        assert!(reason("gpu/util").contains("'/'"));
        assert!(reason("température").contains("'é'"));
        // A huge name is cut in the error, on a character boundary.
        let long = "é".repeat(500);
        match check_metric_name(&long) {
            Err(MetricError::InvalidName { name, .. }) => assert!(name.len() <= 200),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_must_be_finite() {
        let point = |value| MetricPoint {
            name: "m".into(),
            labels: LabelSetId(1),
            timestamp_ns: 0,
            value,
        };
        point(0.0).check().unwrap();
        point(-1e300).check().unwrap();
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = point(bad).check().unwrap_err();
            assert!(err.to_string().contains("not a finite number"), "{err}");
        }
    }

    /// Guards the bitwise equality that keeps `Batch: Eq` lawful.
    #[test]
    fn equality_is_bitwise() {
        let p = |value| MetricPoint {
            name: "m".into(),
            labels: LabelSetId(1),
            timestamp_ns: 0,
            value,
        };
        assert_eq!(p(f64::NAN), p(f64::NAN));
        assert_ne!(p(0.0), p(-0.0));
        assert_eq!(p(1.5), p(1.5));
    }
}

/// The answer to `GET /api/v1/metrics`: one metric's series over a range,
/// as the query node writes it and the UI reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSeriesSet {
    /// The metric (`gpu.utilization_percent`).
    pub name: String,
    /// Start of the range (and of the first step), ns since the epoch.
    pub from_ns: i64,
    /// End of the range (exclusive).
    pub to_ns: i64,
    /// Width of each point: point `t_ns` averages the readings in
    /// `[t_ns, t_ns + step_ns)`.
    pub step_ns: i64,
    /// One series per label set, sorted by labels.
    pub series: Vec<MetricSeries>,
}

/// One series of a [`MetricSeriesSet`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSeries {
    /// Its labels (`host`, `gpu`, `gpu_name`, …).
    pub labels: BTreeMap<String, String>,
    /// One point per step that holds readings, in time order; steps
    /// without readings are left out (gaps, not zeros).
    pub points: Vec<MetricValue>,
}

/// One step of a [`MetricSeries`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    /// Start of the step.
    pub t_ns: i64,
    /// Average of the readings in the step.
    pub value: f64,
}

/// The answer to `GET /api/v1/metrics/names`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricNames {
    /// Start of the range, ns since the epoch.
    pub from_ns: i64,
    /// End of the range.
    pub to_ns: i64,
    /// The metrics with readings in the hours the range touches, sorted.
    pub names: Vec<String>,
}
