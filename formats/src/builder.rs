//! The part of every import that turns stacks into a batch.

use kiln_model::{BatchBuilder, Frame, LabelSet, MAX_BATCH_ENTRIES, MAX_LABELS};

use crate::error::ImportError;
use crate::options::{ImportOptions, Imported};

/// Most frame references, summed over the distinct stacks, that one import
/// keeps: 128 MiB of 16-byte frame ids, so that the batch stays within
/// what a worker decodes ([`kiln_model::MAX_BATCH_BYTES`]). Text inputs
/// reach it only when huge; a pprof profile, whose samples refer to shared
/// locations, could otherwise blow a small input up into more stacks than
/// memory holds.
pub(crate) const MAX_STACK_FRAMES: usize = 1 << 23;

/// A [`BatchBuilder`] that adds the options' labels to every sample and
/// checks that the counts add up without overflow (the builder itself sums
/// duplicate samples unchecked; no per-sample sum can exceed the checked
/// total).
pub(crate) struct ImportBuilder<'o> {
    batch: BatchBuilder,
    options: &'o ImportOptions,
    total: u64,
    /// Frames of the distinct stacks so far.
    stack_frames: usize,
    /// [`MAX_STACK_FRAMES`], lower in tests.
    max_stack_frames: usize,
}

impl<'o> ImportBuilder<'o> {
    pub(crate) fn new(options: &'o ImportOptions, period_ns: u64) -> Self {
        Self {
            batch: BatchBuilder::new(options.source.clone(), options.now_ns, period_ns),
            options,
            total: 0,
            stack_frames: 0,
            max_stack_frames: MAX_STACK_FRAMES,
        }
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
        self.add_inner(timestamp_ns, frames, Some(labels), count)
    }

    fn add_inner(
        &mut self,
        timestamp_ns: i64,
        frames: &[Frame],
        labels: Option<LabelSet>,
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
            Some(mut labels) => {
                for (name, value) in self.options.labels.iter() {
                    labels.insert(name, value);
                }
                Some(labels)
            }
        };
        let labels = labels.as_ref().unwrap_or(&self.options.labels);
        // What a worker would refuse the whole batch for is refused here,
        // naming the input's problem (the builder cuts long names and deep
        // stacks itself).
        if labels.len() > MAX_LABELS {
            return Err(ImportError::TooManyLabels {
                count: labels.len(),
            });
        }
        self.batch.add(timestamp_ns, frames, labels, count);
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
