//! One partition's log: a directory of segments, the append path with its
//! group commit, tail recovery on open, and retention.
//!
//! # Durability
//!
//! A record is acknowledged only after `fdatasync` of the segment holding
//! it. Appends take the partition lock only to write their bytes; the fsync
//! happens outside it under a second lock, and whoever holds that lock
//! syncs everything written so far. Publishers that arrive while an fsync
//! is running queue behind it and mostly find their record already synced,
//! so N concurrent publishers cost far fewer than N fsyncs (group commit).
//!
//! Consumers see only the synced prefix ([`Partition::durable_end`]). If
//! they could see written but unsynced records, a power cut could remove a
//! record a consumer had already processed and committed, and the offset
//! would then be reused for a different record, which the group would skip.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::embedded::fs;
use crate::embedded::segment::{self, Frame, Next, SegmentReader};
use crate::error::{BusError, io};

/// One partition of an embedded bus.
pub(crate) struct Partition {
    id: u32,
    dir: PathBuf,
    segment_bytes: u64,
    log: Mutex<Log>,
    /// Held while syncing; see the module docs.
    sync_turn: Mutex<()>,
    /// Every record below this offset is fsync'd: what consumers may read.
    durable: AtomicU64,
    /// Woken whenever `durable` grows (shared by all partitions of a bus).
    notify: Arc<Notify>,
}

/// The writer's state, under the partition lock.
struct Log {
    /// Base offsets of the segments, ascending; the last is the active one.
    segments: Vec<u64>,
    active: Arc<File>,
    /// Bytes written to the active segment.
    active_len: u64,
    /// The offset the next record gets.
    next_offset: u64,
    /// Set by the first failed write or fsync; see
    /// [`BusError::PartitionFailed`].
    failed: Option<String>,
}

/// Where an offset lives, as far as the segment list knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locate {
    /// In the segment with this base offset (or it is the end offset).
    In(u64),
    /// Below the oldest segment still kept, which starts here.
    BelowStart(u64),
}

impl Partition {
    /// Opens (or creates) the partition in `dir`, repairing the tail of its
    /// last segment.
    pub(crate) fn open(
        dir: PathBuf,
        id: u32,
        segment_bytes: u64,
        notify: Arc<Notify>,
    ) -> Result<Partition, BusError> {
        fs::create_dir(&dir)?;
        let mut segments = segment::list(&dir)?;
        let active = match segments.last() {
            Some(&base) => {
                let path = dir.join(segment::file_name(base));
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io("open", &path))?
            }
            None => {
                segments.push(0);
                create_segment(&dir, 0)?
            }
        };
        let base = segments.last().copied().unwrap_or_default();
        let path = dir.join(segment::file_name(base));
        let (active_len, next_offset) = recover(&active, &path, base, id)?;
        // Records written before a crash may still be only in the page
        // cache; they become visible to consumers now, so make them durable.
        active.sync_data().map_err(io("fsync", &path))?;
        tracing::debug!(
            partition = id,
            segments = segments.len(),
            next_offset,
            "opened partition"
        );
        Ok(Partition {
            id,
            dir,
            segment_bytes,
            log: Mutex::new(Log {
                segments,
                active: Arc::new(active),
                active_len,
                next_offset,
                failed: None,
            }),
            sync_turn: Mutex::new(()),
            durable: AtomicU64::new(next_offset),
            notify,
        })
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// One past the last durable record: what consumers may read up to.
    pub(crate) fn durable_end(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The offset of the oldest record still kept.
    pub(crate) fn start_offset(&self) -> u64 {
        self.with_segments(|s| s.first().copied().unwrap_or_default())
    }

    /// Appends a record and returns its offset once it is durable.
    ///
    /// Blocks on file I/O: call it from a blocking thread.
    pub(crate) fn append(&self, key: &[u8], payload: &[u8]) -> Result<u64, BusError> {
        // Encoding and checksumming the payload happen before taking the
        // lock, so concurrent publishers only serialise on the write itself.
        let mut frame = Frame::new(key, payload)?;
        let offset = {
            let mut log = self.lock_log()?;
            if let Some(cause) = &log.failed {
                return Err(self.failed(cause));
            }
            if log.active_len > 0 && log.active_len + frame.len() > self.segment_bytes {
                self.roll(&mut log)?;
            }
            let offset = log.next_offset;
            frame.seal(offset);
            if let Err(e) = log.active.write_all_at(frame.bytes(), log.active_len) {
                let path = self.active_path(&log);
                let e = io("write", &path)(e);
                // A write that failed (a full disk) may have left part of
                // the record: cut it off, and the log is as it was, ready
                // for the next append once there is room. Only when that
                // fails too is the file's end unknown.
                return match log.active.set_len(log.active_len) {
                    Ok(()) => Err(e),
                    Err(_) => Err(self.fail(&mut log, e)),
                };
            }
            log.active_len += frame.len();
            log.next_offset += 1;
            offset
        };
        self.sync_through(offset)?;
        Ok(offset)
    }

    /// Returns once the record at `offset` (already written) is durable,
    /// syncing it and everything written before it unless a concurrent
    /// caller already did.
    fn sync_through(&self, offset: u64) -> Result<(), BusError> {
        // The guarded value is (), so a panic elsewhere cannot leave it
        // inconsistent.
        let _turn = self
            .sync_turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.durable_end() > offset {
            return Ok(()); // synced by whoever held the turn before us
        }
        let (file, end, path) = {
            let log = self.lock_log()?;
            if let Some(cause) = &log.failed {
                return Err(self.failed(cause));
            }
            // Every record below `end` is in this file or in an older
            // segment, which was synced when it was rolled.
            (log.active.clone(), log.next_offset, self.active_path(&log))
        };
        if let Err(e) = file.sync_data() {
            let e = io("fsync", &path)(e);
            let mut log = self.lock_log()?;
            return Err(self.fail(&mut log, e));
        }
        self.durable.store(end, Ordering::Release);
        self.notify.notify_waiters();
        Ok(())
    }

    /// Seals the active segment and starts a new one at the next offset.
    /// A segment that cannot be created (a full disk) changes nothing: the
    /// active one stays, and the next append tries again. A failed fsync
    /// fails the partition.
    fn roll(&self, log: &mut Log) -> Result<(), BusError> {
        // The sealed segment must be durable before records go to the next
        // one: `sync_through` only syncs the active segment.
        if let Err(e) = log.active.sync_data() {
            let e = io("fsync", &self.active_path(log))(e);
            return Err(self.fail(log, e));
        }
        let base = log.next_offset;
        let file = create_segment(&self.dir, base)?;
        log.segments.push(base);
        log.active = Arc::new(file);
        log.active_len = 0;
        tracing::debug!(partition = self.id, base, "rolled to a new segment");
        Ok(())
    }

    /// Deletes the segments whose records are all below `offset`; never the
    /// active segment. Returns how many were deleted.
    pub(crate) fn remove_segments_below(&self, offset: u64) -> Result<usize, BusError> {
        let mut removed = 0;
        loop {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            // A segment's records all lie below the next segment's base.
            if log.segments.len() < 2 || log.segments[1] > offset {
                break;
            }
            let path = self.dir.join(segment::file_name(log.segments[0]));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &path)(e)),
            }
            log.segments.remove(0);
            removed += 1;
            tracing::debug!(partition = self.id, file = %path.display(), "deleted a consumed segment");
        }
        if removed > 0 {
            fs::sync_dir(&self.dir)?;
        }
        Ok(removed)
    }

    /// The segment holding `offset`.
    pub(crate) fn locate(&self, offset: u64) -> Locate {
        self.with_segments(
            |segments| match segments.iter().rev().find(|&&base| base <= offset) {
                Some(&base) => Locate::In(base),
                None => Locate::BelowStart(segments.first().copied().unwrap_or_default()),
            },
        )
    }

    /// The base offset of the segment after the one starting at `base`, if
    /// that one is sealed.
    pub(crate) fn segment_after(&self, base: u64) -> Option<u64> {
        self.with_segments(|s| s.iter().copied().find(|&b| b > base))
    }

    /// The segment list, for readers. A panic while holding the lock cannot
    /// leave the list half-updated (it changes by single pushes and
    /// removes), so a poisoned lock is still safe to read.
    fn with_segments<R>(&self, f: impl FnOnce(&[u64]) -> R) -> R {
        f(&self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .segments)
    }

    /// The writer's lock. A panic while appending may have left the file
    /// and the counters disagreeing, so a poisoned lock fails the partition.
    fn lock_log(&self) -> Result<MutexGuard<'_, Log>, BusError> {
        self.log.lock().map_err(|_| BusError::PartitionFailed {
            partition: self.id,
            cause: "an internal panic while appending".into(),
        })
    }

    fn active_path(&self, log: &Log) -> PathBuf {
        let base = log.segments.last().copied().unwrap_or_default();
        self.dir.join(segment::file_name(base))
    }

    /// Marks the partition failed by `e` and returns `e` for the caller.
    fn fail(&self, log: &mut Log, e: BusError) -> BusError {
        let cause = e.describe();
        tracing::error!(partition = self.id, error = %cause, "partition stops accepting writes; reopen the bus to recover");
        log.failed = Some(cause);
        e
    }

    fn failed(&self, cause: &str) -> BusError {
        BusError::PartitionFailed {
            partition: self.id,
            cause: cause.to_owned(),
        }
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("id", &self.id)
            .field("dir", &self.dir)
            .field("durable_end", &self.durable_end())
            .finish_non_exhaustive()
    }
}

/// Creates an empty segment file and makes its directory entry durable.
fn create_segment(dir: &Path, base: u64) -> Result<File, BusError> {
    let path = dir.join(segment::file_name(base));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io("create", &path))?;
    if let Err(e) = fs::sync_dir(dir) {
        // Not a segment yet: the next roll creates it again.
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(file)
}

/// Scans the active segment after a restart. Returns its valid length and
/// the next offset.
///
/// A torn tail (a record cut short or garbage after the last valid record:
/// what a crash in the middle of a write leaves) is truncated. Damage with
/// valid records after it is skipped instead, keeping those records: it
/// cannot be told apart from a bad sector in acknowledged data, and
/// truncating there could lose acknowledged records. Both are logged with
/// the file, byte position and offsets involved.
fn recover(file: &File, path: &Path, base: u64, partition: u32) -> Result<(u64, u64), BusError> {
    let handle = file.try_clone().map_err(io("open", path))?;
    let mut reader = SegmentReader::new(handle, path.to_path_buf(), base);
    let mut expected = base;
    loop {
        match reader.next(expected, u64::MAX)? {
            Next::Record(record) => {
                if record.offset > expected {
                    tracing::warn!(
                        partition,
                        file = %path.display(),
                        "offsets {expected}..{} are missing from the segment (lost to earlier damage)",
                        record.offset,
                    );
                }
                expected = record.offset + 1;
            }
            Next::End | Next::NotYet => break,
            Next::Damaged(damage) => {
                let at = reader.position();
                if let Some((pos, offset)) = reader.find_next(at, expected, u64::MAX)? {
                    tracing::warn!(
                        partition,
                        file = %path.display(),
                        "skipping damaged bytes {at}..{pos} of the last segment ({damage}); \
                         records with offsets {expected}..{offset} are lost",
                    );
                    reader.seek(pos);
                    expected = offset;
                    continue;
                }
                let len = file.metadata().map_err(io("stat", path))?.len();
                tracing::warn!(
                    partition,
                    file = %path.display(),
                    "truncating a torn tail of {} bytes at byte {at} ({damage}): \
                     a write cut short by a crash, or damage to the last records",
                    len - at,
                );
                file.set_len(at).map_err(io("truncate", path))?;
                break;
            }
        }
    }
    Ok((reader.position(), expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path, segment_bytes: u64) -> Partition {
        Partition::open(dir.join("p"), 0, segment_bytes, Arc::new(Notify::new())).unwrap()
    }

    #[test]
    fn appends_get_consecutive_offsets_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1 << 20);
        for i in 0..5u64 {
            assert_eq!(p.append(b"k", &i.to_le_bytes()).unwrap(), i);
        }
        assert_eq!(p.durable_end(), 5);
        drop(p);
        let p = open(dir.path(), 1 << 20);
        assert_eq!((p.durable_end(), p.append(b"k", b"x").unwrap()), (5, 5));
    }

    /// Rolling happens before a record would overflow the segment, and a
    /// record bigger than a whole segment still gets one of its own.
    #[test]
    fn segments_roll_at_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 100);
        for _ in 0..4 {
            p.append(b"", &[0; 30]).unwrap(); // 50-byte frames: two per segment
        }
        p.append(b"", &[0; 500]).unwrap();
        p.append(b"", &[0; 1]).unwrap();
        assert_eq!(p.with_segments(<[u64]>::to_vec), vec![0, 2, 4, 5]);
        assert_eq!(
            (p.locate(3), p.locate(9), p.segment_after(2)),
            (Locate::In(2), Locate::In(5), Some(4))
        );
    }

    /// Retention never deletes the active segment, nor one holding any
    /// record at or above the bound.
    #[test]
    fn retention_keeps_unconsumed_and_active_segments() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 100);
        for _ in 0..6 {
            p.append(b"", &[0; 30]).unwrap();
        }
        assert_eq!(p.with_segments(<[u64]>::to_vec), vec![0, 2, 4]);
        assert_eq!(p.remove_segments_below(3).unwrap(), 1);
        assert_eq!((p.start_offset(), p.locate(1)), (2, Locate::BelowStart(2)));
        assert_eq!(p.remove_segments_below(u64::MAX).unwrap(), 1);
        assert_eq!(p.with_segments(<[u64]>::to_vec), vec![4]);
        assert_eq!(segment::list(p.dir()).unwrap(), vec![4]);
    }
}
