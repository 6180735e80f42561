//! Building a [`Batch`]: whole stacks and metric readings in, frames,
//! stacks and label sets interned, samples summed, names cut to fit.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Batch, Executable, FrameEntry, LabelSetEntry, StackEntry, limits};
use super::{
    MAX_BUILD_ID_LEN, MAX_LABEL_NAME_LEN, MAX_LABEL_VALUE_LEN, MAX_NAME_LEN, MAX_STACK_DEPTH,
};
use crate::frame::Frame;
use crate::ids::{FrameId, LabelSetId, StackId};
use crate::labels::LabelSet;
use crate::metric::{MAX_METRIC_POINTS, MetricError, MetricPoint, check_metric_value};
use crate::stack::{Sample, stack_id};

/// Builds a [`Batch`] from whole stacks and metric readings, interning
/// frames, stacks and label sets, summing samples that share (time, stack,
/// labels), and keeping one value per metric point (name, labels, time).
#[derive(Debug, Default)]
pub struct BatchBuilder {
    batch: Batch,
    frames: HashMap<FrameId, ()>,
    stacks: HashMap<StackId, ()>,
    label_sets: HashMap<LabelSetId, ()>,
    samples: HashMap<(i64, StackId, LabelSetId), u64>,
    sample_order: Vec<(i64, StackId, LabelSetId)>,
    /// Each point's position in `batch.metrics`.
    metrics: HashMap<(String, LabelSetId, i64), usize>,
}

impl BatchBuilder {
    /// A builder for a batch from `source` whose samples each stand for
    /// `period_ns` nanoseconds of CPU. A source longer than
    /// [`MAX_LABEL_VALUE_LEN`] is cut to it.
    pub fn new(source: impl Into<String>, sent_at_ns: i64, period_ns: u64) -> Self {
        let source = source.into();
        let source = match limits::clamp(&source, MAX_LABEL_VALUE_LEN) {
            Cow::Borrowed(_) => source,
            Cow::Owned(cut) => cut,
        };
        Self {
            batch: Batch {
                source,
                sent_at_ns,
                period_ns,
                ..Batch::default()
            },
            ..Self::default()
        }
    }

    /// Adds `count` samples of the stack `frames` (root first).
    ///
    /// What [`Batch::decode`] would refuse is made to fit instead, so that
    /// one odd frame does not cost the whole batch: names longer than
    /// [`MAX_NAME_LEN`] (label names and values longer than theirs) are cut,
    /// ending in `…`, and a stack deeper than [`MAX_STACK_DEPTH`] keeps its
    /// leaf-most frames under a [`FrameKind::Truncated`] root. Label sets
    /// of more than [`MAX_LABELS`] labels are left to the caller.
    ///
    /// [`FrameKind::Truncated`]: crate::FrameKind::Truncated
    pub fn add(&mut self, timestamp_ns: i64, frames: &[Frame], labels: &LabelSet, count: u64) {
        let depth = frames.len().min(MAX_STACK_DEPTH);
        let mut ids = Vec::with_capacity(depth);
        let mut push = |frame: Cow<'_, Frame>| {
            let id = frame.id();
            if self.frames.insert(id, ()).is_none() {
                self.batch.frames.push(FrameEntry {
                    id,
                    frame: frame.into_owned(),
                });
            }
            ids.push(id);
        };
        let kept = if frames.len() > MAX_STACK_DEPTH {
            push(Cow::Owned(Frame::named(
                crate::FrameKind::Truncated,
                TRUNCATED_FRAME,
            )));
            &frames[frames.len() - (MAX_STACK_DEPTH - 1)..]
        } else {
            frames
        };
        for frame in kept {
            push(fit_frame(frame));
        }
        let stack = stack_id(&ids);
        if self.stacks.insert(stack, ()).is_none() {
            self.batch.stacks.push(StackEntry {
                id: stack,
                frames: ids,
            });
        }
        let label_id = self.intern_labels(labels);
        let key = (timestamp_ns, stack, label_id);
        let slot = self.samples.entry(key).or_insert_with(|| {
            self.sample_order.push(key);
            0
        });
        *slot += count;
    }

    /// Adds the reading `value` of metric `name` for the series `labels` at
    /// `timestamp_ns` (a GPU's utilization, labelled by host, gpu and
    /// gpu_name). A second reading of the same (name, labels, time)
    /// replaces the first: stores keep one value per point.
    ///
    /// Refuses, leaving the batch as it was, a name that breaks
    /// [`check_metric_name`](crate::check_metric_name), a value that is not
    /// finite, and a point beyond [`MAX_METRIC_POINTS`] in one batch.
    ///
    /// # Examples
    ///
    /// ```
    /// use kiln_model::{BatchBuilder, LabelSet, label_names, metric_names};
    ///
    /// let mut b = BatchBuilder::new("host-a", 0, 10_000_000);
    /// let gpu = LabelSet::new()
    ///     .with(label_names::HOST, "host-a")
    ///     .with(label_names::GPU, "0")
    ///     .with(label_names::GPU_NAME, "NVIDIA H100 80GB HBM3");
    /// b.metric(metric_names::GPU_UTILIZATION, &gpu, 1_700_000_000_000_000_000, 87.0)?;
    /// assert!(b.metric("GPU util", &gpu, 0, 1.0).is_err());
    /// assert!(b.metric(metric_names::GPU_POWER, &gpu, 0, f64::NAN).is_err());
    /// assert_eq!(b.finish().metrics.len(), 1);
    /// # Ok::<(), kiln_model::MetricError>(())
    /// ```
    pub fn metric(
        &mut self,
        name: &str,
        labels: &LabelSet,
        timestamp_ns: i64,
        value: f64,
    ) -> Result<(), MetricError> {
        crate::metric::check_metric_name(name)?;
        check_metric_value(name, value)?;
        let label_id = labels.id();
        let key = (name.to_owned(), label_id, timestamp_ns);
        if let Some(&at) = self.metrics.get(&key) {
            self.batch.metrics[at].value = value;
            return Ok(());
        }
        if self.batch.metrics.len() >= MAX_METRIC_POINTS {
            return Err(MetricError::TooMany);
        }
        self.intern_labels(labels);
        self.metrics.insert(key, self.batch.metrics.len());
        self.batch.metrics.push(MetricPoint {
            name: name.to_owned(),
            labels: label_id,
            timestamp_ns,
            value,
        });
        Ok(())
    }

    /// Number of metric points so far.
    pub fn metric_count(&self) -> usize {
        self.batch.metrics.len()
    }

    /// The id of `labels`, adding its entry to the batch the first time.
    fn intern_labels(&mut self, labels: &LabelSet) -> LabelSetId {
        let labels = fit_labels(labels);
        let id = labels.id();
        if self.label_sets.insert(id, ()).is_none() {
            self.batch.label_sets.push(LabelSetEntry {
                id,
                labels: labels.into_owned(),
            });
        }
        id
    }

    /// Records an executable the frames point into (its name cut to
    /// [`MAX_NAME_LEN`], a build id longer than [`MAX_BUILD_ID_LEN`] left
    /// out: such a thing is no build id).
    pub fn add_executable(&mut self, mut executable: Executable) {
        if let Cow::Owned(cut) = limits::clamp(&executable.name, MAX_NAME_LEN) {
            executable.name = cut;
        }
        if executable
            .build_id
            .as_ref()
            .is_some_and(|b| b.len() > MAX_BUILD_ID_LEN)
        {
            executable.build_id = None;
        }
        if !self
            .batch
            .executables
            .iter()
            .any(|e| e.file_id == executable.file_id)
        {
            self.batch.executables.push(executable);
        }
    }

    /// Number of distinct stacks so far.
    pub fn stack_count(&self) -> usize {
        self.batch.stacks.len()
    }

    /// Number of distinct frames so far.
    pub fn frame_count(&self) -> usize {
        self.batch.frames.len()
    }

    /// Number of distinct label sets so far.
    pub fn label_set_count(&self) -> usize {
        self.batch.label_sets.len()
    }

    /// Number of samples so far (distinct (time, stack, labels)).
    pub fn sample_entry_count(&self) -> usize {
        self.sample_order.len()
    }

    /// The finished batch, samples in key order: time, stack, labels.
    ///
    /// The order of a store's keys (the hour is the time's), so that a
    /// worker's sort of a poll's samples, which must be in key order for
    /// the store (see `kiln-storage`'s PostgreSQL "Writes"), only merges
    /// the batches' runs: sorting each batch here costs a host a few
    /// hundred samples' sort every few seconds, where a worker sorted
    /// every host's samples from scratch (a third of its sample write on
    /// `fleet_bench`). A batch in another order is still taken.
    pub fn finish(mut self) -> Batch {
        self.sample_order.sort_unstable();
        self.batch.samples = self
            .sample_order
            .iter()
            .map(|key| Sample {
                timestamp_ns: key.0,
                stack: key.1,
                labels: key.2,
                count: self.samples[key],
            })
            .collect();
        self.batch
    }
}

/// The function name of the root frame [`BatchBuilder::add`] puts above a
/// stack it cut.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// `frame`, its names cut to [`MAX_NAME_LEN`] when longer.
fn fit_frame(frame: &Frame) -> Cow<'_, Frame> {
    let Frame::Named {
        kind,
        function,
        module,
        file,
        line,
    } = frame
    else {
        return Cow::Borrowed(frame);
    };
    let long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_NAME_LEN);
    if function.len() <= MAX_NAME_LEN && !long(module) && !long(file) {
        return Cow::Borrowed(frame);
    }
    let cut = |s: &str| limits::clamp(s, MAX_NAME_LEN).into_owned();
    Cow::Owned(Frame::Named {
        kind: *kind,
        function: cut(function),
        module: module.as_deref().map(cut),
        file: file.as_deref().map(cut),
        line: *line,
    })
}

/// `labels`, names and values cut to their limits when longer.
fn fit_labels(labels: &LabelSet) -> Cow<'_, LabelSet> {
    let fits = labels
        .iter()
        .all(|(n, v)| n.len() <= MAX_LABEL_NAME_LEN && v.len() <= MAX_LABEL_VALUE_LEN);
    if fits {
        return Cow::Borrowed(labels);
    }
    Cow::Owned(
        labels
            .iter()
            .map(|(n, v)| {
                (
                    limits::clamp(n, MAX_LABEL_NAME_LEN).into_owned(),
                    limits::clamp(v, MAX_LABEL_VALUE_LEN).into_owned(),
                )
            })
            .collect(),
    )
}
