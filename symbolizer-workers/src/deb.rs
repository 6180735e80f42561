//! Debug files inside Debian packages (`.deb`), for the global symbol
//! store: a `.deb` is an `ar` archive whose `data.tar` (xz, zstd, gzip or
//! plain) holds the package's files; debug packages (`libc6-dbg`, the
//! `*-dbgsym` ones) keep theirs under `usr/lib/debug/.build-id/xx/rest.debug`,
//! named by the build id of the stripped file they belong to.

use std::io::Read;
use std::path::Path;

/// Largest debug file read from a package.
const MAX_DEBUG_FILE_BYTES: u64 = 4 << 30;

/// Why a package could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DebError {
    /// The file could not be opened or read.
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The package is not an `ar` archive, or it is damaged.
    #[error("{path} is not a Debian package (ar archive)")]
    NotAr {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The package has no `data.tar*` member.
    #[error("{path} has no data.tar member")]
    NoData { path: String },
    /// The data member is compressed in a way this build does not read.
    #[error("{path}: unsupported data member {member} (data.tar, .xz, .zst and .gz are read)")]
    Compression { path: String, member: String },
    /// The data archive is damaged.
    #[error("{path}: damaged {member}")]
    Tar {
        path: String,
        member: String,
        #[source]
        source: std::io::Error,
    },
}

/// A debug file found in a package.
#[derive(Debug)]
pub struct DebugMember {
    /// Its path in the package (`usr/lib/debug/.build-id/xx/rest.debug`).
    pub path: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Calls `visit` with each build-id debug file of the package at `deb`,
/// in archive order; returns how many there were. Other files (source,
/// docs, debug files by path) are skipped: only build-id names tie a debug
/// file to the stripped file a profile saw.
pub fn debug_files_in_deb(deb: &Path, visit: impl FnMut(DebugMember)) -> Result<usize, DebError> {
    let path = deb.display().to_string();
    let file = std::fs::File::open(deb).map_err(|source| DebError::Read {
        path: path.clone(),
        source,
    })?;
    debug_files_in_deb_reader(std::io::BufReader::new(file), path, visit)
}

/// [`debug_files_in_deb`] on a package read from `package` (named `path`
/// in errors): what the `deb_read` fuzz target feeds.
pub fn debug_files_in_deb_reader(
    package: impl Read,
    path: String,
    mut visit: impl FnMut(DebugMember),
) -> Result<usize, DebError> {
    let mut archive = ar::Archive::new(package);
    while let Some(entry) = archive.next_entry() {
        let entry = entry.map_err(|source| DebError::NotAr {
            path: path.clone(),
            source,
        })?;
        let member = String::from_utf8_lossy(entry.header().identifier()).into_owned();
        let Some(compression) = member.strip_prefix("data.tar") else {
            continue;
        };
        let reader: Box<dyn Read + '_> = match compression {
            "" => Box::new(entry),
            ".xz" => Box::new(liblzma::read::XzDecoder::new(entry)),
            ".zst" => Box::new(zstd::Decoder::new(entry).map_err(|source| DebError::Tar {
                path: path.clone(),
                member: member.clone(),
                source,
            })?),
            ".gz" => Box::new(flate2::read::GzDecoder::new(entry)),
            _ => return Err(DebError::Compression { path, member }),
        };
        let tar_error = |source| DebError::Tar {
            path: path.clone(),
            member: member.clone(),
            source,
        };
        let mut count = 0;
        let mut tar = tar::Archive::new(reader);
        for entry in tar.entries().map_err(tar_error)? {
            let entry = entry.map_err(tar_error)?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let name = entry.path().map_err(tar_error)?;
            let name = name.to_string_lossy();
            let name = name.trim_start_matches("./");
            if !is_build_id_debug_path(name) {
                continue;
            }
            let name = name.to_owned();
            let mut data = Vec::new();
            entry
                .take(MAX_DEBUG_FILE_BYTES)
                .read_to_end(&mut data)
                .map_err(tar_error)?;
            visit(DebugMember { path: name, data });
            count += 1;
        }
        return Ok(count);
    }
    Err(DebError::NoData { path })
}

/// Whether `path` is `usr/lib/debug/.build-id/<2 hex>/<hex>.debug`.
fn is_build_id_debug_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("usr/lib/debug/.build-id/") else {
        return false;
    };
    let Some((dir, file)) = rest.split_once('/') else {
        return false;
    };
    let Some(stem) = file.strip_suffix(".debug") else {
        return false;
    };
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    dir.len() == 2 && hex(dir) && hex(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_build_id_debug_paths_count() {
        assert!(is_build_id_debug_path(
            "usr/lib/debug/.build-id/93/ac61ec5a8eb1396f9fbd350e3169a558528a40.debug"
        ));
        for path in [
            "usr/lib/debug/.build-id/93/ac61.debug.gz",
            "usr/lib/debug/.build-id/93/ac61",
            "usr/lib/debug/.build-id/9/ac61.debug",
            "usr/lib/debug/.build-id/zz/ac61.debug",
            "usr/lib/debug/.build-id/93/sub/ac61.debug",
            "usr/lib/debug/usr/lib/libc.so.6.debug",
            "usr/share/doc/libc6-dbg/copyright",
        ] {
            assert!(!is_build_id_debug_path(path), "{path}");
        }
    }

    #[test]
    fn files_that_are_not_packages_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.deb");
        std::fs::write(&junk, "not an archive").unwrap();
        assert!(matches!(
            debug_files_in_deb(&junk, |_| {}),
            Err(DebError::NotAr { .. })
        ));
        assert!(matches!(
            debug_files_in_deb(&dir.path().join("missing.deb"), |_| {}),
            Err(DebError::Read { .. })
        ));
    }
}
