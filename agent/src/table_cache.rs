//! Unwind tables saved on disk by FileId, so that a restarted agent loads
//! a big library's table by reading 8 bytes a row instead of evaluating its
//! `.eh_frame` again (seconds of CPU for LLVM-sized files).
//!
//! One file per table, `<FileId>.unwind`: a header (magic, row count), the
//! rows as the BPF program reads them, and an xxh3 of all
//! that, so a file cut short by a crash or a full disk is rebuilt rather
//! than trusted. Files are written to a temporary name and renamed into
//! place. The directory is kept under a byte budget: the least recently
//! used files (by modification time, refreshed on every load) go first.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kiln_model::FileId;
use tracing::debug;
use xxhash_rust::xxh3::xxh3_64;

use crate::abi::UnwindRow;
use crate::unwind::UnwindTable;

/// First bytes of every table file; the last byte is the format version.
const MAGIC: [u8; 8] = *b"KILNUT\0\x02";
/// Magic, row count.
const HEADER: usize = 8 + 8;
const ROW: usize = size_of::<UnwindRow>();
const CHECKSUM: usize = 8;
const SUFFIX: &str = "unwind";

/// The agent's table cache directory.
#[derive(Debug)]
pub(crate) struct TableCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes of table files in the directory, as last counted.
    used: u64,
}

impl TableCache {
    /// Opens (creating it, readable by root only) the cache at `dir`,
    /// holding at most `max_bytes` of tables.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> io::Result<TableCache> {
        fs::create_dir_all(dir)?;
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        }
        let mut cache = TableCache {
            dir: dir.to_owned(),
            max_bytes,
            used: 0,
        };
        cache.used = cache.entries().iter().map(|e| e.1).sum();
        Ok(cache)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.dir.join(format!("{file}.{SUFFIX}"))
    }

    /// The table saved for `file`, if one is and it reads back whole.
    pub(crate) fn load(&self, file: FileId) -> Option<UnwindTable> {
        let path = self.path(file);
        let bytes = fs::read(&path).ok()?;
        match decode(&bytes) {
            Some(table) => {
                // Recently used: trimmed last.
                if let Ok(f) = fs::File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Some(table)
            }
            None => {
                debug!(path = %path.display(), "unwind table cache entry unreadable: rebuilding it");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Saves `table` as `file`'s, then trims the directory to its budget.
    /// Failures (a full disk) are logged and otherwise ignored: the cache
    /// only saves work.
    pub(crate) fn store(&mut self, file: FileId, table: &UnwindTable) {
        let bytes = encode(table);
        if bytes.len() as u64 > self.max_bytes {
            return;
        }
        let path = self.path(file);
        let tmp = self.dir.join(format!("{file}.{SUFFIX}.tmp"));
        let written = fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            debug!(path = %path.display(), error = %e, "saving an unwind table failed");
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.used += bytes.len() as u64;
        if self.used > self.max_bytes {
            self.trim();
        }
    }

    /// Deletes the least recently used tables until the directory holds
    /// at most 90% of its budget (so that the next few stores do not trim
    /// again).
    fn trim(&mut self) {
        let mut entries = self.entries();
        entries.sort_by_key(|e| e.2);
        self.used = entries.iter().map(|e| e.1).sum();
        let target = self.max_bytes / 10 * 9;
        for (path, len, _) in entries {
            if self.used <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                self.used -= len;
            }
        }
    }

    /// (path, bytes, last use) of every table file.
    fn entries(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == SUFFIX))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((e.path(), meta.len(), meta.modified().ok()?))
            })
            .collect()
    }

    /// Bytes of tables in the directory.
    #[cfg(test)]
    fn used(&self) -> u64 {
        self.used
    }
}

/// Writes `table` to `path` in the cache's file format (for tools and
/// benchmarks; the agent writes through [`TableCache`]).
pub fn save_unwind_table(table: &UnwindTable, path: &Path) -> io::Result<()> {
    fs::write(path, encode(table))
}

/// Reads a table in the cache's file format, refusing a damaged one.
pub fn load_unwind_table(path: &Path) -> io::Result<UnwindTable> {
    decode(&fs::read(path)?).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a whole unwind table file", path.display()),
        )
    })
}

fn encode(table: &UnwindTable) -> Vec<u8> {
    let rows = table.packed();
    let mut out = Vec::with_capacity(HEADER + rows.len() * ROW + CHECKSUM);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(rows.len() as u64).to_le_bytes());
    for row in rows {
        out.extend_from_slice(&row.pc.to_le_bytes());
        out.extend_from_slice(&row.cfa_offset.to_le_bytes());
        out.extend_from_slice(&row.rbp_offset.to_le_bytes());
        out.push(row.rules);
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Option<UnwindTable> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(CHECKSUM)?)?;
    if xxh3_64(body).to_le_bytes() != sum || body.get(..8)? != MAGIC {
        return None;
    }
    let u64_at = |at: usize| Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?));
    let count = usize::try_from(u64_at(8)?).ok()?;
    let rows = body.get(HEADER..)?;
    if rows.len() != count.checked_mul(ROW)? {
        return None;
    }
    let rows = rows
        .chunks_exact(ROW)
        .map(|r| UnwindRow {
            pc: u32::from_le_bytes([r[0], r[1], r[2], r[3]]),
            cfa_offset: i16::from_le_bytes([r[4], r[5]]),
            rbp_offset: i8::from_le_bytes([r[6]]),
            rules: r[7],
        })
        .collect();
    Some(UnwindTable::from_rows(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc_table() -> Option<UnwindTable> {
        let libc = std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        libc.exists()
            .then(|| UnwindTable::from_path(libc, u64::MAX).unwrap())
    }

    // Guards the round trip: a saved table loads back row for row.
    #[test]
    fn a_saved_table_loads_back_the_same() {
        let Some(table) = libc_table() else { return };
        let dir = tempfile::tempdir().unwrap();
        let mut cache = TableCache::open(dir.path(), 1 << 30).unwrap();
        assert!(cache.load(FileId(7)).is_none());
        cache.store(FileId(7), &table);
        assert_eq!(cache.load(FileId(7)), Some(table.clone()));
        // And from a cache opened again (a restarted agent).
        let cache = TableCache::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(cache.load(FileId(7)), Some(table));
        assert!(cache.used() > 0);
    }

    // Guards against trusting a damaged file: one cut short or with a
    // flipped byte is not loaded, and is removed.
    #[test]
    fn a_damaged_file_is_not_loaded() {
        let Some(table) = libc_table() else { return };
        let dir = tempfile::tempdir().unwrap();
        let mut cache = TableCache::open(dir.path(), 1 << 30).unwrap();
        cache.store(FileId(1), &table);
        let path = cache.path(FileId(1));
        let mut bytes = fs::read(&path).unwrap();
        bytes[100] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(cache.load(FileId(1)).is_none());
        assert!(!path.exists());
        cache.store(FileId(1), &table);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(cache.load(FileId(1)).is_none());
        for junk in [&b""[..], b"KILNUT\0\x02", &[0u8; 64]] {
            assert!(decode(junk).is_none());
        }
    }

    // Guards the budget: storing past it removes the least recently used
    // tables, not the one just stored nor one just loaded.
    #[test]
    fn the_least_recently_used_tables_go_past_the_budget() {
        let Some(table) = libc_table() else { return };
        let one = encode(&table).len() as u64;
        let dir = tempfile::tempdir().unwrap();
        let mut cache = TableCache::open(dir.path(), 3 * one + one / 2).unwrap();
        for id in 1..=3 {
            cache.store(FileId(id), &table);
            // Modification times must differ for the order to be defined.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(cache.load(FileId(1)).is_some());
        std::thread::sleep(std::time::Duration::from_millis(20));
        cache.store(FileId(4), &table);
        assert!(cache.used() <= 3 * one + one / 2);
        assert!(cache.load(FileId(2)).is_none(), "the least recently used");
        assert!(cache.load(FileId(1)).is_some(), "loaded, so recently used");
        assert!(cache.load(FileId(4)).is_some(), "just stored");
    }
}
