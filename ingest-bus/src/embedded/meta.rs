//! The bus directory's metadata file and lock.
//!
//! `bus.meta` records the format version and partition count, fixed when
//! the bus is created: keys are placed by hashing modulo the count, so
//! reopening with another count would scatter every key's records.
//! `bus.lock` is held (flock) while a bus has the directory open, because
//! two writers appending to the same segments would corrupt them.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::embedded::fs;
use crate::error::{BusError, io};

const META_FILE: &str = "bus.meta";
const LOCK_FILE: &str = "bus.lock";
/// Bumped when the on-disk layout or record format changes meaning.
const FORMAT_VERSION: u32 = 1;
const MAGIC: &str = "kiln-ingest-bus";

/// Takes the directory's lock; it is released when the returned file is
/// closed (also when the process dies, so a crash leaves no stale lock).
pub(crate) fn lock(dir: &Path) -> Result<File, BusError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("open", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(BusError::Locked {
            path: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(io("lock", &path)(e)),
    }
}

/// Checks the metadata of an existing bus against `partitions`, or writes
/// it for a new one. Returns whether the bus is new.
pub(crate) fn load_or_create(dir: &Path, partitions: u32) -> Result<bool, BusError> {
    let path = dir.join(META_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let existing = parse(&text).map_err(|reason| BusError::BadMetadata {
                path: path.clone(),
                reason,
            })?;
            if existing != partitions {
                return Err(BusError::PartitionCountMismatch {
                    path: dir.to_path_buf(),
                    existing,
                    requested: partitions,
                });
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Metadata is written first when a bus is created, so data
            // without it means the file was lost: refuse to guess the
            // partition count.
            if dir.join("partitions").exists() {
                return Err(BusError::BadMetadata {
                    path,
                    reason: "missing, but the directory holds partitions".into(),
                });
            }
            let text = format!("{MAGIC} {FORMAT_VERSION}\npartitions {partitions}\n");
            fs::write_atomic(&path, text.as_bytes())?;
            Ok(true)
        }
        Err(e) => Err(io("read", &path)(e)),
    }
}

/// The partition count recorded in a metadata file.
fn parse(text: &str) -> Result<u32, String> {
    let mut lines = text.lines();
    let version = lines
        .next()
        .and_then(|l| l.strip_prefix(MAGIC))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .ok_or_else(|| format!("line 1 should be `{MAGIC} <version>`"))?;
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, but this build reads version {FORMAT_VERSION}"
        ));
    }
    let partitions = lines
        .next()
        .and_then(|l| l.strip_prefix("partitions "))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
        .ok_or("line 2 should be `partitions <count>` with a count above 0")?;
    Ok(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_then_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_or_create(dir.path(), 4).unwrap());
        assert!(!load_or_create(dir.path(), 4).unwrap());
        let err = load_or_create(dir.path(), 5).unwrap_err();
        assert!(matches!(
            err,
            BusError::PartitionCountMismatch {
                existing: 4,
                requested: 5,
                ..
            }
        ));
    }

    #[test]
    fn malformed_metadata_is_explained() {
        assert_eq!(parse("kiln-ingest-bus 1\npartitions 3\n"), Ok(3));
        assert!(
            parse("kiln-ingest-bus 2\npartitions 3\n")
                .unwrap_err()
                .contains("version 2")
        );
        assert!(
            parse("kiln-ingest-bus 1\npartitions 0\n")
                .unwrap_err()
                .contains("line 2")
        );
        assert!(parse("something else").unwrap_err().contains("line 1"));
    }

    #[test]
    fn lock_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        assert!(matches!(lock(dir.path()), Err(BusError::Locked { .. })));
        drop(held);
        lock(dir.path()).unwrap();
    }
}
