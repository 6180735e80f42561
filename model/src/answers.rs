//! The query API's answers for the flamegraph's side panels (top
//! functions, CPU over time, label values), as the query node writes them
//! and the UI reads them. The GPU view's are in `gpu_view`, metric series
//! in `metric`; flamegraphs travel as Flamewire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::FrameKind;

/// One row of `GET /api/v1/top`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopFunction {
    /// Function name.
    pub name: String,
    /// Binary or module.
    pub module: Option<String>,
    /// Kind of code.
    pub kind: FrameKind,
    /// Samples in the function itself.
    pub self_samples: u64,
    /// Samples in the function and what it called (recursion counted once).
    pub total_samples: u64,
    /// `self_samples` in cores over the range.
    pub self_cores: f64,
    /// `total_samples` in cores over the range.
    pub total_cores: f64,
}

/// `GET /api/v1/timeline`: CPU over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Start of the first point, ns since the epoch.
    pub from_ns: i64,
    /// End of the range.
    pub to_ns: i64,
    /// Width of each point.
    pub step_ns: i64,
    /// One point per step, empty steps included.
    pub points: Vec<TimelinePoint>,
}

/// One step of a [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Start of the step.
    pub t_ns: i64,
    /// Samples in it, idle ones included.
    pub samples: u64,
    /// Average cores busy: CPU time, idle left out, ÷ step width.
    pub cores: f64,
    /// Average cores idle (the agents' idle samples ÷ step width): with
    /// `cores`, the machines' whole capacity where agents count idle (0
    /// for imports).
    pub idle_cores: f64,
}

/// `GET /api/v1/labels`: label name → value → samples.
pub type LabelValues = BTreeMap<String, BTreeMap<String, u64>>;
