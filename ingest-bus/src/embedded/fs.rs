//! File-system steps that must survive a power cut: creating directories,
//! replacing small files atomically, syncing directory entries.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::error::{BusError, io};

/// Makes a file's creation, rename or removal in `dir` durable: until the
/// directory itself is fsync'd, a crash can forget the entry even when the
/// file's data was synced.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), BusError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))
}

/// Creates `dir` (and missing parents) if needed and makes its entry
/// durable.
pub(crate) fn create_dir(dir: &Path) -> Result<(), BusError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io("create directory", dir))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Replaces `path` with `contents` so that after a crash the file holds
/// either the old or the new contents, never a mix: write a temporary file,
/// fsync it, rename it over `path`, fsync the directory.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), BusError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let mut file = File::create(tmp).map_err(io("create", tmp))?;
    file.write_all(contents).map_err(io("write", tmp))?;
    file.sync_all().map_err(io("fsync", tmp))?;
    fs::rename(tmp, path).map_err(io("rename", tmp))?;
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing/f");
        let err = write_atomic(&path, b"x").unwrap_err();
        assert!(err.to_string().contains("missing/f.tmp"), "{err}");
    }
}
