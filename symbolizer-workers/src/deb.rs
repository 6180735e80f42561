//! Debug files inside Debian packages (`.deb`), for the global symbol
//! store: a `.deb` is an `ar` archive whose `data.tar` (xz, zstd, gzip or
//! plain) holds the package's files; debug packages (`libc6-dbg`, the
//! `*-dbgsym` ones) keep theirs under `usr/lib/debug/.build-id/xx/rest.debug`,
//! named by the build id of the stripped file they belong to.

use std::io::{self, Read};
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
    let not_ar = |source| DebError::NotAr {
        path: path.clone(),
        source,
    };
    let mut archive = ArMembers::new(package).map_err(not_ar)?;
    while let Some((member, size)) = archive.next_member().map_err(not_ar)? {
        let Some(compression) = member.strip_prefix("data.tar") else {
            continue;
        };
        let entry = archive.member(size);
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

/// A reader that counts the bytes read through it.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The members of a package's `ar` archive, in the common format Debian
/// writes (`!<arch>` magic, 60-byte headers, names of up to 16 bytes,
/// GNU's trailing `/` allowed, members padded to even sizes). Name tables
/// and BSD long names, which no `.deb` has, are refused as damage. (The
/// `ar` crate read those too, and panicked on a GNU name reference past
/// its table: the `deb_read` fuzz target found it.)
struct ArMembers<R> {
    reader: Counting<R>,
    /// Where the next header starts, from the archive's start.
    next_header: u64,
}

impl<R: Read> ArMembers<R> {
    fn new(reader: R) -> io::Result<Self> {
        let mut reader = Counting {
            inner: reader,
            read: 0,
        };
        let mut magic = [0u8; 8];
        reader.read_exact(&mut magic)?;
        if &magic != b"!<arch>\n" {
            return Err(damaged("no ar magic (!<arch>)"));
        }
        Ok(ArMembers {
            reader,
            next_header: 8,
        })
    }

    /// The next member's name and size, past what is left of the one
    /// before; `None` at the archive's end.
    fn next_member(&mut self) -> io::Result<Option<(String, u64)>> {
        let skip = self.next_header.saturating_sub(self.reader.read);
        io::copy(&mut (&mut self.reader).take(skip), &mut io::sink())?;
        if self.reader.read < self.next_header {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut header = [0u8; 60];
        let got = read_up_to(&mut self.reader, &mut header)?;
        if got == 0 {
            return Ok(None);
        }
        if got < header.len() || &header[58..] != b"`\n" {
            return Err(damaged("a member header is cut short or malformed"));
        }
        let name = std::str::from_utf8(&header[..16])
            .map_err(|_| damaged("a member name is not text"))?
            .trim_end_matches(' ');
        let name = name.strip_suffix('/').unwrap_or(name);
        if name.is_empty() || name.starts_with('/') || name.starts_with("#1/") {
            return Err(damaged(
                "a member uses a long-name table, which packages do not",
            ));
        }
        let size: u64 = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim_end_matches(' ').parse().ok())
            .ok_or_else(|| damaged("a member size is not a number"))?;
        self.next_header = self
            .reader
            .read
            .saturating_add(size)
            .saturating_add(size & 1);
        Ok(Some((name.to_owned(), size)))
    }

    /// The bytes of the member [`ArMembers::next_member`] just named.
    fn member(&mut self, size: u64) -> io::Take<&mut Counting<R>> {
        (&mut self.reader).take(size)
    }
}

fn damaged(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads until `buf` is full or the input ends; how many bytes it read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
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

    // Guards the ar reader against the input the fuzz target found (a GNU
    // name reference past a missing name table made the ar crate panic):
    // refused as damage, never a panic.
    #[test]
    fn a_long_name_reference_is_damage_not_a_panic() {
        let mut deb = b"!<arch>\n".to_vec();
        deb.extend_from_slice(
            format!(
                "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                "/4000", 0, 0, 0, 644, 2
            )
            .as_bytes(),
        );
        deb.extend_from_slice(b"xx");
        let e = debug_files_in_deb_reader(&deb[..], "x.deb".into(), |_| {}).unwrap_err();
        assert!(matches!(e, DebError::NotAr { .. }), "{e:?}");
        // Cut short, and not an archive at all.
        for bad in [&deb[..70], &b"!<arch>"[..], &b"PK\x03\x04 zip"[..]] {
            let e = debug_files_in_deb_reader(bad, "x.deb".into(), |_| {}).unwrap_err();
            assert!(matches!(e, DebError::NotAr { .. }), "{e:?}");
        }
        // An empty archive has no data member.
        let e = debug_files_in_deb_reader(&b"!<arch>\n"[..], "x.deb".into(), |_| {}).unwrap_err();
        assert!(matches!(e, DebError::NoData { .. }), "{e:?}");
    }

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
