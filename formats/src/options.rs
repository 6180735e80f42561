//! What an import is told, and what it hands back.

use kiln_model::{Batch, FrameKind, LabelSet};

/// CPU time one sample stands for when the input does not say: 10 ms, the
/// period of sampling at 100 Hz.
pub const DEFAULT_PERIOD_NS: u64 = 10_000_000;

/// How an import stamps and labels what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// The time of the import, in nanoseconds since the Unix epoch: the
    /// timestamp of samples whose input has no time (collapsed stacks, pprof
    /// without `time_nanos`), the batch's `sent_at_ns`, and where
    /// [`PerfTimestamps::ShiftToNow`] moves the last perf sample.
    pub now_ns: i64,
    /// CPU time one sample stands for when the input does not say (collapsed
    /// stacks always; perf script for events other than `cpu-clock` and
    /// `task-clock`; pprof without a CPU or nanosecond period).
    pub default_period_ns: u64,
    /// Labels added to every sample. They win over labels of the same name
    /// that the input gives a sample (perf's `process`, pprof's labels).
    pub labels: LabelSet,
    /// The batch's source (`Batch::source`), e.g. `import`.
    pub source: String,
    /// How perf script sample times become timestamps.
    pub perf_timestamps: PerfTimestamps,
    /// perf script: import only samples of this event (its name as perf
    /// prints it, `cycles:u`, or without modifiers, `cycles`). `None` takes
    /// the event of the first sample, as stackcollapse-perf.pl does: adding
    /// up cycles and instructions would mean nothing.
    pub perf_event: Option<String>,
    /// The kind of the input's named frames (collapsed stacks, pprof
    /// lines) that are not kernel frames: [`FrameKind::Native`] unless the
    /// sender says what ran (Pyroscope's `spyName`: Python, Go, …).
    pub frame_kind: FrameKind,
    /// `[start, end)` in nanoseconds: the input's weight is spread over
    /// the window's seconds (as the agent stamps its samples) instead of
    /// being stamped at one time. For senders that say which window a
    /// profile covers (Pyroscope's `from` and `until`).
    pub time_window: Option<(i64, i64)>,
    /// pprof: sample labels renamed (`from`, `to`) as they are read, one
    /// renamed to `""` left out: a sender's names for labels Kiln has a
    /// name of its own for (Pyroscope's `thread_name` is Kiln's `thread`).
    pub label_renames: &'static [(&'static str, &'static str)],
}

impl ImportOptions {
    /// Options for an import at `now_ns`: the default period, no labels,
    /// source `import`, perf times shifted to end at `now_ns`, the first
    /// perf event, native frames, no time window, labels as named.
    pub fn new(now_ns: i64) -> Self {
        Self {
            now_ns,
            default_period_ns: DEFAULT_PERIOD_NS,
            labels: LabelSet::new(),
            source: "import".to_owned(),
            perf_timestamps: PerfTimestamps::default(),
            perf_event: None,
            frame_kind: FrameKind::Native,
            time_window: None,
            label_renames: &[],
        }
    }
}

/// How the times of perf script samples become Kiln timestamps.
///
/// perf stamps samples with its `perf_clock`, which on most kernels counts
/// from boot, not from 1970: `12345.678901` is three and a half hours after
/// the machine started. Taken as is, such samples land in January 1970.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PerfTimestamps {
    /// Shift every sample by the same amount so that the last one lands at
    /// [`ImportOptions::now_ns`]: the spacing between samples is kept, and
    /// the profile reads as if it had just been recorded. The default.
    #[default]
    ShiftToNow,
    /// Take perf's seconds as seconds since the Unix epoch, for recordings
    /// made with `perf record -k CLOCK_REALTIME` (`--clockid realtime`).
    AsRecorded,
}

/// What an import produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The samples, their stacks and frames, ready to send.
    pub batch: Batch,
    /// Total sample count (the sum of the batch's sample counts).
    pub samples: u64,
    /// Number of distinct stacks.
    pub stacks: usize,
    /// perf script samples left out: those of another event than the one
    /// imported (see [`ImportOptions::perf_event`]), and those whose stack
    /// has no frame (perf printed none, or only process-name frames that
    /// stackcollapse-perf.pl drops). Always 0 for the other formats.
    pub skipped_samples: u64,
}
