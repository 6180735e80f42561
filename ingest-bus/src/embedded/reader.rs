//! Following one partition for one consumer: walking its segments in
//! order, and stepping over damage with a warning rather than stopping.
//!
//! # Damaged records
//!
//! A record that fails its checksum in a segment that is already sealed
//! can only come from the disk (a sealed segment was fsync'd whole). The
//! reader skips to the next valid record, in the same segment if one
//! follows, else in the next segment, and logs a warning naming the group,
//! partition, file, byte position and the offsets lost. It does not stop:
//! a stuck partition would halt ingest for everyone on it, while the loss
//! is already done and is reported. (LevelDB's log reader makes the same
//! choice, reporting dropped bytes to a `Reporter` and reading on.)

use std::sync::Arc;

use crate::bus::Record;
use crate::embedded::partition::{Locate, Partition};
use crate::embedded::segment::{self, Damage, Next, SegmentReader};
use crate::error::{BusError, io};

/// A consumer's read position in one partition.
#[derive(Debug)]
pub(crate) struct PartitionReader {
    partition: Arc<Partition>,
    /// For log lines.
    group: Arc<str>,
    /// The offset the open segment should hold at the reader's position.
    expected: u64,
    /// Records below this were processed before this reader started; they
    /// are read past but not delivered.
    deliver_from: u64,
    /// Opened on the first read.
    segment: Option<SegmentReader>,
    /// Whether the reader is waiting at damage it cannot yet skip (already
    /// warned about).
    stuck: bool,
}

impl PartitionReader {
    /// A reader delivering `partition`'s records from offset `from`.
    pub(crate) fn new(partition: Arc<Partition>, group: Arc<str>, from: u64) -> PartitionReader {
        let end = partition.durable_end();
        let from = if from > end {
            // The log lost records the group had already processed (its
            // files were removed or restored from an older copy). Offsets
            // from `end` up will be new records, which the group must see.
            tracing::warn!(
                group = &*group,
                partition = partition.id(),
                "committed offset {from} is past the partition's end {end}; resuming at {end}"
            );
            end
        } else {
            from
        };
        PartitionReader {
            partition,
            group,
            expected: from,
            deliver_from: from,
            segment: None,
            stuck: false,
        }
    }

    pub(crate) fn partition(&self) -> u32 {
        self.partition.id()
    }

    /// The offset of the next record this reader delivers.
    pub(crate) fn position(&self) -> u64 {
        self.expected.max(self.deliver_from)
    }

    /// Whether durable records lie past the reader's position.
    pub(crate) fn has_news(&self) -> bool {
        self.partition.durable_end() > self.position()
    }

    /// Appends to `out` the durable records past the reader's position until
    /// `out` holds `max`.
    ///
    /// Blocks on file I/O: call it from a blocking thread.
    pub(crate) fn read(
        &mut self,
        max: usize,
        max_bytes: usize,
        out: &mut Vec<Record>,
    ) -> Result<(), BusError> {
        let end = self.partition.durable_end();
        let mut bytes = 0usize;
        while out.len() < max && bytes < max_bytes && self.position() < end {
            if self.segment.is_none() {
                self.open_at(self.position())?;
            }
            let Some(segment) = self.segment.as_mut() else {
                break;
            };
            match segment.next(self.expected, end)? {
                Next::Record(record) => {
                    if record.offset > self.expected {
                        tracing::warn!(
                            group = &*self.group,
                            partition = self.partition.id(),
                            file = %segment.path().display(),
                            "offsets {}..{} are missing from the segment (lost to earlier damage)",
                            self.expected,
                            record.offset,
                        );
                    }
                    self.expected = record.offset + 1;
                    self.stuck = false;
                    if record.offset >= self.deliver_from {
                        bytes = bytes.saturating_add(record.payload.len());
                        out.push(Record {
                            partition: self.partition.id(),
                            offset: record.offset,
                            key: record.key,
                            payload: record.payload,
                        });
                    }
                }
                Next::NotYet => break,
                Next::End => {
                    if !self.next_segment() {
                        break;
                    }
                }
                Next::Damaged(damage) => {
                    if !self.skip_damage(damage, end)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens the segment holding `offset`, or the oldest one if retention
    /// deleted it.
    fn open_at(&mut self, mut offset: u64) -> Result<(), BusError> {
        // Retention can delete the segment between looking it up and opening
        // it; a second look then finds a later one. Two misses in a row mean
        // the file is gone for another reason.
        let mut missed = None;
        loop {
            let base = match self.partition.locate(offset) {
                Locate::In(base) => base,
                Locate::BelowStart(start) => {
                    tracing::warn!(
                        group = &*self.group,
                        partition = self.partition.id(),
                        "offsets {offset}..{start} were deleted by retention before this group read them"
                    );
                    self.deliver_from = self.deliver_from.max(start);
                    offset = start;
                    start
                }
            };
            match SegmentReader::open(self.partition.dir(), base)? {
                Some(segment) => {
                    self.expected = base;
                    self.deliver_from = self.deliver_from.max(offset);
                    self.segment = Some(segment);
                    return Ok(());
                }
                None if missed == Some(base) => {
                    let path = self.partition.dir().join(segment::file_name(base));
                    return Err(io("open", &path)(std::io::ErrorKind::NotFound.into()));
                }
                None => missed = Some(base),
            }
        }
    }

    /// Moves from the end of the open segment to the next one. `false` if
    /// there is none: the active segment ended before the partition's end,
    /// so durable records are missing from it.
    fn next_segment(&mut self) -> bool {
        let Some(segment) = &self.segment else {
            return false;
        };
        match self.partition.segment_after(segment.base()) {
            Some(next) => {
                if next > self.expected {
                    tracing::warn!(
                        group = &*self.group,
                        partition = self.partition.id(),
                        file = %segment.path().display(),
                        "offsets {}..{next} are missing: the segment ends early",
                        self.expected,
                    );
                }
                self.deliver_from = self.position();
                self.expected = next;
                self.segment = None;
                true
            }
            None => {
                if !self.stuck {
                    tracing::warn!(
                        group = &*self.group,
                        partition = self.partition.id(),
                        file = %segment.path().display(),
                        "the active segment ends before offset {}; waiting for it to grow",
                        self.expected,
                    );
                    self.stuck = true;
                }
                false
            }
        }
    }

    /// Steps over damage at the open segment's position. `false` if there
    /// is nothing valid past it yet (damage at the end of the active
    /// segment): the reader then waits there and tries again later.
    fn skip_damage(&mut self, damage: Damage, end: u64) -> Result<bool, BusError> {
        let Some(segment) = self.segment.as_mut() else {
            return Ok(false);
        };
        let at = segment.position();
        let next_base = self.partition.segment_after(segment.base());
        let bound = next_base.unwrap_or(end);
        if let Some((pos, offset)) = segment.find_next(at, self.expected, bound)? {
            tracing::warn!(
                group = &*self.group,
                partition = self.partition.id(),
                file = %segment.path().display(),
                "skipping damaged bytes {at}..{pos} ({damage}); records with offsets {}..{offset} are lost",
                self.expected,
            );
            segment.seek(pos);
            // The loss is reported; do not report the gap again when the
            // record at `pos` is read.
            self.expected = offset;
            self.stuck = false;
            return Ok(true);
        }
        match next_base {
            Some(next) => {
                tracing::warn!(
                    group = &*self.group,
                    partition = self.partition.id(),
                    file = %segment.path().display(),
                    "skipping the rest of the segment from byte {at} ({damage}); \
                     records with offsets {}..{next} are lost",
                    self.expected,
                );
                self.deliver_from = self.position();
                self.expected = next;
                self.segment = None;
                self.stuck = false;
                Ok(true)
            }
            None => {
                if !self.stuck {
                    tracing::warn!(
                        group = &*self.group,
                        partition = self.partition.id(),
                        file = %segment.path().display(),
                        "damaged record at byte {at} of the active segment ({damage}); \
                         waiting for a valid record past it",
                    );
                    self.stuck = true;
                }
                Ok(false)
            }
        }
    }
}
