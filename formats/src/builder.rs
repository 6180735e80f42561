//! The part of every import that turns stacks into a batch.

use std::borrow::Cow;

use kiln_model::{BatchBuilder, Executable, Frame, LabelSet, MAX_BATCH_ENTRIES, MAX_LABELS};

use crate::error::ImportError;
use crate::limits::MAX_STACK_FRAMES;
use crate::options::{ImportOptions, Imported};
use crate::weights;

/// A [`BatchBuilder`] that adds the import's labels to every sample and
/// checks that the counts add up without overflow (the builder itself sums
/// duplicate samples unchecked; no per-sample sum can exceed the checked
/// total). Every importer builds through it: the file formats one batch
/// per import, OTLP one per (source, period), several when large.
pub(crate) struct ImportBuilder {
    batch: BatchBuilder,
    /// Labels added to every sample, winning over the input's.
    labels: LabelSet,
    total: u64,
    /// Frames of the distinct stacks so far.
    stack_frames: usize,
    /// [`MAX_STACK_FRAMES`], lower in tests.
    max_stack_frames: usize,
    /// When set, each sample's count is spread over this window's seconds
    /// ([`weights::spread`]) instead of being stamped at its timestamp.
    window: Option<(i64, i64)>,
}

/// What adding some samples may add to a batch at most: what
/// [`ImportBuilder::fits`] weighs before they are added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Entries {
    pub stacks: usize,
    pub frames: usize,
    pub label_sets: usize,
    pub samples: usize,
    /// Frames of the distinct stacks (see [`MAX_STACK_FRAMES`]).
    pub stack_frames: usize,
}

impl ImportBuilder {
    /// A builder for an import with `options`: its source, time and
    /// labels.
    pub(crate) fn new(options: &ImportOptions, period_ns: u64) -> Self {
        let mut builder = Self::for_batch(
            &options.source,
            options.now_ns,
            period_ns,
            options.labels.clone(),
        );
        builder.window = options.time_window;
        builder
    }

    /// A builder for a batch from `source`, sent at `sent_at_ns`, whose
    /// samples each stand for `period_ns`, with `labels` added to each.
    pub(crate) fn for_batch(
        source: &str,
        sent_at_ns: i64,
        period_ns: u64,
        labels: LabelSet,
    ) -> Self {
        Self {
            batch: BatchBuilder::new(source, sent_at_ns, period_ns),
            labels,
            total: 0,
            stack_frames: 0,
            max_stack_frames: MAX_STACK_FRAMES,
            window: None,
        }
    }

    /// Whether `more` fits beside what the batch holds with every list
    /// within `share` of its limit (1 for the limits themselves, 2 for
    /// half of them), and the counts, `more_count` added, within a `u64`.
    pub(crate) fn fits(&self, more: Entries, more_count: u64, share: usize) -> bool {
        let within = |now: usize, more: usize, limit: usize| {
            now.saturating_add(more) <= limit / share.max(1)
        };
        self.total.checked_add(more_count).is_some()
            && within(self.batch.stack_count(), more.stacks, MAX_BATCH_ENTRIES)
            && within(self.batch.frame_count(), more.frames, MAX_BATCH_ENTRIES)
            && within(
                self.batch.label_set_count(),
                more.label_sets,
                MAX_BATCH_ENTRIES,
            )
            && within(
                self.batch.sample_entry_count(),
                more.samples,
                MAX_BATCH_ENTRIES,
            )
            && within(self.stack_frames, more.stack_frames, self.max_stack_frames)
    }

    /// Whether no sample was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Records an executable the batch's address frames point into.
    pub(crate) fn add_executable(&mut self, executable: Executable) {
        self.batch.add_executable(executable);
    }

    /// Adds `count` samples of `frames` (root first) with the options'
    /// labels only.
    pub(crate) fn add(
        &mut self,
        timestamp_ns: i64,
        frames: &[Frame],
        count: u64,
    ) -> Result<(), ImportError> {
        self.add_inner(timestamp_ns, frames, None, count)
    }

    /// Adds `count` samples of `frames` (root first) with the input's
    /// `labels`, overridden by the options' labels.
    pub(crate) fn add_labeled(
        &mut self,
        timestamp_ns: i64,
        frames: &[Frame],
        labels: LabelSet,
        count: u64,
    ) -> Result<(), ImportError> {
        self.add_inner(timestamp_ns, frames, Some(Cow::Owned(labels)), count)
    }

    /// [`Self::add_labeled`] with borrowed labels: samples that share a
    /// label set need not copy it.
    pub(crate) fn add_labeled_ref(
        &mut self,
        timestamp_ns: i64,
        frames: &[Frame],
        labels: &LabelSet,
        count: u64,
    ) -> Result<(), ImportError> {
        self.add_inner(timestamp_ns, frames, Some(Cow::Borrowed(labels)), count)
    }

    fn add_inner(
        &mut self,
        timestamp_ns: i64,
        frames: &[Frame],
        labels: Option<Cow<'_, LabelSet>>,
        count: u64,
    ) -> Result<(), ImportError> {
        // A zero count is no sample at all: recording it would only make an
        // empty entry.
        if count == 0 {
            return Ok(());
        }
        self.total = self
            .total
            .checked_add(count)
            .ok_or(ImportError::CountOverflow)?;
        let stacks_before = self.batch.stack_count();
        let labels = match labels {
            None => None,
            Some(labels) if self.labels.is_empty() => Some(labels),
            Some(labels) => {
                let mut labels = labels.into_owned();
                for (name, value) in self.labels.iter() {
                    labels.insert(name, value);
                }
                Some(Cow::Owned(labels))
            }
        };
        let labels = labels.as_deref().unwrap_or(&self.labels);
        // What a worker would refuse the whole batch for is refused here,
        // naming the input's problem (the builder cuts long names and deep
        // stacks itself).
        if labels.len() > MAX_LABELS {
            return Err(ImportError::TooManyLabels {
                count: labels.len(),
            });
        }
        match self.window {
            None => self.batch.add(timestamp_ns, frames, labels, count),
            Some((start, end)) => {
                let duration = u64::try_from(end.saturating_sub(start)).unwrap_or(0);
                let batch = &mut self.batch;
                // Stamped where each second is covered: consecutive
                // windows of one sender meeting inside a second keep
                // apart rows.
                weights::spread(start, duration, count, |at, share| {
                    batch.add(at, frames, labels, share);
                });
            }
        }
        if self.batch.stack_count() > stacks_before {
            self.stack_frames += frames.len();
            if self.stack_frames > self.max_stack_frames {
                return Err(ImportError::TooManyFrames);
            }
        }
        let entries = [
            ("stacks", self.batch.stack_count()),
            ("frames", self.batch.frame_count()),
            ("label sets", self.batch.label_set_count()),
            ("samples", self.batch.sample_entry_count()),
        ];
        if let Some((what, _)) = entries.iter().find(|(_, n)| *n > MAX_BATCH_ENTRIES) {
            return Err(ImportError::TooManyEntries { what });
        }
        Ok(())
    }

    /// The batch, or [`ImportError::NoSamples`] when nothing was added.
    pub(crate) fn finish(self) -> Result<Imported, ImportError> {
        if self.total == 0 {
            return Err(ImportError::NoSamples);
        }
        let stacks = self.batch.stack_count();
        Ok(Imported {
            batch: self.batch.finish(),
            samples: self.total,
            stacks,
            skipped_samples: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use kiln_model::FrameKind;

    use super::*;

    /// Guards the memory bound: frames of distinct stacks are counted,
    /// repeated stacks are free.
    #[test]
    fn distinct_stack_frames_are_bounded() {
        let options = ImportOptions::new(0);
        let mut out = ImportBuilder::new(&options, 1);
        out.max_stack_frames = 4;
        let a = [
            Frame::named(FrameKind::Native, "a"),
            Frame::named(FrameKind::Native, "b"),
        ];
        let c = [
            Frame::named(FrameKind::Native, "c"),
            Frame::named(FrameKind::Native, "d"),
        ];
        for _ in 0..10 {
            out.add(0, &a, 1).unwrap();
        }
        out.add(0, &c, 1).unwrap();
        out.add(1, &c, 1).unwrap();
        let err = out.add(0, &a[..1], 1).unwrap_err();
        assert!(matches!(err, ImportError::TooManyFrames));
    }
}
