//! Reading one process's perf map, safely and as it grows.
//!
//! The file is the profiled process's (`/tmp/perf-PID.map`, in a
//! directory every user may write), and the agent reading it is root. So
//! it is opened inside the process's own root (`/proc/PID/root`: a
//! container's `/tmp`, not the host's) by `openat2` with
//! `RESOLVE_NO_SYMLINKS` and `O_NOFOLLOW` (a symlink there can only have
//! been planted, to make the agent read another file) and `O_PATH` first
//! (no FIFO wait, no device's open); only a regular file owned by the
//! process's user, with no other link, is read, through that same
//! descriptor: in a sticky `/tmp` another user may create the name
//! before the process does, and would then name its frames; and a link
//! to another user's file (where `fs.protected_hardlinks` is off) would
//! show that file's lines as names.
//!
//! What was read is remembered (the file's identity and the offset read
//! to), so each refresh reads only what the runtime appended since; a
//! file that shrank or was replaced is read again from its start. Every
//! bound (bytes read, ranges kept, line and name length) holds however
//! the file is written.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use kiln_model::Frame;

use super::names::frame_of;
use super::parse::{Lines, parse_line};
use super::ranges::NewestRanges;
use crate::in_root::openat2_in_root;

/// Most bytes of one perf map read. A long-running Node server with
/// `--perf-basic-prof` appends every function it ever compiled, at
/// every tier, and never removes one: past this, later code stays
/// unnamed (`[unknown JIT]`) rather than the agent's memory growing with
/// the file.
pub(crate) const MAX_PERF_MAP_BYTES: u64 = 32 << 20;

/// Most address ranges kept per process (about 40 bytes each plus their
/// names, shared between a function's tiers): 256 Ki, some 10 MiB.
pub(crate) const MAX_RANGES: usize = 1 << 18;

/// Bytes read per `pread`.
const READ_CHUNK: usize = 64 << 10;

/// Where a process's perf map is, and whose it may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerfMapPath {
    /// The directory the path is resolved in, never left: the process's
    /// root, `/proc/PID/root`.
    pub root: PathBuf,
    /// The map inside that root: `/tmp/perf-N.map`, N the pid the process
    /// has in its own pid namespace.
    pub path: String,
    /// Users whose file is believed: the process's (real, effective,
    /// saved, filesystem).
    pub owners: Vec<u32>,
}

/// Why a perf map was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PerfMapError {
    /// The process writes none (or not yet).
    #[error("{path}: no perf map")]
    Missing {
        /// The path tried.
        path: String,
    },
    /// A symlink at the path or in a directory above it.
    #[error("{path} leads through a symlink: refused")]
    Symlink {
        /// The path tried.
        path: String,
    },
    /// A FIFO, a device, a socket or a directory.
    #[error("{path} is a {kind}, not a regular file: refused")]
    NotRegular {
        /// The path tried.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// A file of another user than the process's.
    #[error("{path} belongs to uid {uid}, not to the process's user: refused")]
    Owner {
        /// The path tried.
        path: String,
        /// Its owner.
        uid: u32,
    },
    /// A file with other names (hard links) than the map's.
    #[error("{path} has {links} links: refused")]
    Linked {
        /// The path tried.
        path: String,
        /// Its number of links.
        links: u64,
    },
    /// Opening or reading failed otherwise (the process exited, …).
    #[error("reading {path}")]
    Io {
        /// The path tried.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// How much of the map has been taken, since the agent started reading
/// the file it holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReadStats {
    /// Entries taken.
    pub entries: u64,
    /// Lines that were no entry (or too long), skipped.
    pub skipped: u64,
    /// A bound was reached ([`MAX_PERF_MAP_BYTES`], [`MAX_RANGES`]): later
    /// entries are not taken.
    pub full: bool,
}

/// The bounds of one reader: [`MAX_PERF_MAP_BYTES`] and [`MAX_RANGES`]
/// but in tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_bytes: u64,
    pub max_ranges: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: MAX_PERF_MAP_BYTES,
            max_ranges: MAX_RANGES,
        }
    }
}

/// One process's perf map as read so far, and where reading resumes.
#[derive(Debug)]
pub(crate) struct PerfMapReader {
    at: PerfMapPath,
    limits: Limits,
    /// (device, inode) of the file read; `None` before the first read.
    identity: Option<(u64, u64)>,
    /// Bytes of it read (the unfinished last line included).
    offset: u64,
    lines: Lines,
    ranges: NewestRanges<Frame>,
    /// Each distinct frame once, shared by its ranges (a V8 function's
    /// tiers, a split range's two halves).
    frames: HashSet<Arc<Frame>>,
    stats: ReadStats,
}

impl PerfMapReader {
    pub(crate) fn new(at: PerfMapPath, limits: Limits) -> Self {
        PerfMapReader {
            at,
            limits,
            identity: None,
            offset: 0,
            lines: Lines::default(),
            ranges: NewestRanges::default(),
            frames: HashSet::new(),
            stats: ReadStats::default(),
        }
    }

    /// What the map names the code at `addr`.
    pub(crate) fn frame(&self, addr: u64) -> Option<&Frame> {
        self.ranges.get(addr).map(|f| &**f)
    }

    /// Whether a file has been read (it may have had no entries).
    pub(crate) fn has_read(&self) -> bool {
        self.identity.is_some()
    }

    pub(crate) fn stats(&self) -> ReadStats {
        self.stats
    }

    /// Reads what was appended to the map since the last refresh (all of
    /// it the first time, or when the file shrank or was replaced), at
    /// most `budget` bytes of it (the rest at the next refresh); returns
    /// how many bytes it read. On an error, what was read before stays.
    pub(crate) fn refresh(&mut self, budget: u64) -> Result<u64, PerfMapError> {
        let path = self.at.path.clone();
        let io = |source: io::Error| PerfMapError::Io {
            path: path.clone(),
            source,
        };
        let root = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&self.at.root)
            .map_err(io)?;
        let handle = openat2_in_root(
            &root,
            &self.at.path,
            libc::O_PATH | libc::O_NOFOLLOW,
            libc::RESOLVE_NO_SYMLINKS,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => PerfMapError::Missing { path: path.clone() },
            Some(libc::ELOOP) => PerfMapError::Symlink { path: path.clone() },
            _ => io(e),
        })?;
        let handle = File::from(handle);
        let meta = handle.metadata().map_err(io)?;
        self.check(&meta)?;
        let identity = (meta.dev(), meta.ino());
        if self.identity != Some(identity) || meta.size() < self.offset {
            self.start_over(identity);
        }
        let until = meta
            .size()
            .min(self.limits.max_bytes)
            .min(self.offset.saturating_add(budget));
        if until <= self.offset {
            self.stats.full |= self.offset >= self.limits.max_bytes;
            return Ok(0);
        }
        let file = reopen_for_reading(&handle).map_err(io)?;
        let again = file.metadata().map_err(io)?;
        if (again.dev(), again.ino()) != identity {
            return Err(io(io::Error::other("the file changed while opened")));
        }
        let before = self.offset;
        let mut buf = vec![0u8; READ_CHUNK];
        while self.offset < until {
            let want = ((until - self.offset) as usize).min(READ_CHUNK);
            let n = match file.read_at(&mut buf[..want], self.offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            };
            self.offset += n as u64;
            self.take(n, &buf);
        }
        self.stats.full |= self.offset >= self.limits.max_bytes;
        Ok(self.offset - before)
    }

    /// Address ranges held.
    pub(crate) fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Refuses what is not a regular file of the process's user, with
    /// this one name.
    fn check(&self, meta: &std::fs::Metadata) -> Result<(), PerfMapError> {
        let path = || self.at.path.clone();
        let kind = meta.file_type();
        // O_PATH | O_NOFOLLOW opens a symlink at the end of the path itself.
        if kind.is_symlink() {
            return Err(PerfMapError::Symlink { path: path() });
        }
        if !kind.is_file() {
            let kind = if kind.is_fifo() {
                "FIFO"
            } else if kind.is_char_device() || kind.is_block_device() {
                "device"
            } else if kind.is_socket() {
                "socket"
            } else if kind.is_dir() {
                "directory"
            } else {
                "special file"
            };
            return Err(PerfMapError::NotRegular { path: path(), kind });
        }
        if !self.at.owners.contains(&meta.uid()) {
            return Err(PerfMapError::Owner {
                path: path(),
                uid: meta.uid(),
            });
        }
        if meta.nlink() != 1 {
            return Err(PerfMapError::Linked {
                path: path(),
                links: meta.nlink(),
            });
        }
        Ok(())
    }

    /// Forgets what was read, to read the file `identity` from its start.
    fn start_over(&mut self, identity: (u64, u64)) {
        self.identity = Some(identity);
        self.offset = 0;
        self.lines = Lines::default();
        self.ranges = NewestRanges::default();
        self.frames.clear();
        self.stats = ReadStats::default();
    }

    /// Takes the entries of the first `n` bytes of `buf`.
    fn take(&mut self, n: usize, buf: &[u8]) {
        let PerfMapReader {
            lines,
            ranges,
            frames,
            stats,
            limits,
            ..
        } = self;
        stats.skipped += lines.feed(&buf[..n], |line| {
            let Some(entry) = parse_line(line) else {
                stats.skipped += 1;
                return;
            };
            if ranges.len() >= limits.max_ranges {
                stats.full = true;
                return;
            }
            let frame = frame_of(&entry.name);
            let frame = match frames.get(&frame) {
                Some(known) => known.clone(),
                None => {
                    let frame = Arc::new(frame);
                    frames.insert(frame.clone());
                    frame
                }
            };
            ranges.insert(entry.start, entry.end, frame);
            stats.entries += 1;
        });
    }
}

/// Opens for reading the file an `O_PATH` descriptor holds: the same
/// inode, whatever its path holds now; never blocking, never inherited.
fn reopen_for_reading(handle: &File) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::Path;

    use kiln_model::FrameKind;

    /// A reader of `root/perf-1.map`, believing this process's user.
    fn reader(root: &Path, limits: Limits) -> PerfMapReader {
        PerfMapReader::new(
            PerfMapPath {
                root: root.to_owned(),
                path: "/perf-1.map".into(),
                // SAFETY: geteuid has no preconditions.
                owners: vec![unsafe { libc::geteuid() }],
            },
            limits,
        )
    }

    fn name(r: &PerfMapReader, addr: u64) -> Option<String> {
        match r.frame(addr)? {
            Frame::Named {
                kind: FrameKind::Jit,
                function,
                ..
            } => Some(function.clone()),
            other => panic!("{other:?}"),
        }
    }

    fn append(path: &Path, text: &[u8]) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text).unwrap();
    }

    // Guards incremental reading: a line cut in the middle waits for its
    // end, later lines are read from where the last read stopped, a later
    // entry over an earlier one wins, and garbage is skipped and counted.
    #[test]
    fn a_growing_map_is_read_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("perf-1.map");
        let mut r = reader(dir.path(), Limits::default());
        assert!(matches!(
            r.refresh(u64::MAX),
            Err(PerfMapError::Missing { .. })
        ));
        assert!(!r.has_read());
        append(&map, b"1000 100 first\n2000 10 JS:*half");
        r.refresh(u64::MAX).unwrap();
        assert_eq!(r.stats().entries, 1);
        assert_eq!(name(&r, 0x1050).as_deref(), Some("first"));
        assert_eq!(name(&r, 0x2000), None, "its line is not finished");
        append(&map, b" /app.js:3:1\nnot a line\n1040 20 newer\n\x00\x01\n");
        // Within a budget: a few bytes now, the rest next time.
        assert_eq!(r.refresh(4).unwrap(), 4);
        assert!(r.refresh(u64::MAX).unwrap() > 4);
        assert_eq!(name(&r, 0x2005).as_deref(), Some("half"));
        assert_eq!(name(&r, 0x1050).as_deref(), Some("newer"));
        assert_eq!(name(&r, 0x1060).as_deref(), Some("first"));
        assert_eq!(r.refresh(u64::MAX).unwrap(), 0, "nothing new");
        assert_eq!(
            r.stats(),
            ReadStats {
                entries: 3,
                skipped: 2,
                full: false
            }
        );
    }

    // Guards re-reading: a map replaced by another file (a new inode) or
    // cut short in place is read again from its start, its old entries
    // forgotten.
    #[test]
    fn a_replaced_or_shrunk_map_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("perf-1.map");
        let mut r = reader(dir.path(), Limits::default());
        append(&map, b"1000 100 old\n3000 100 other\n");
        r.refresh(u64::MAX).unwrap();
        let next = dir.path().join("next");
        std::fs::write(&next, b"1000 100 replaced\n").unwrap();
        std::fs::rename(&next, &map).unwrap();
        r.refresh(u64::MAX).unwrap();
        assert_eq!(r.stats().entries, 1);
        assert_eq!(name(&r, 0x1000).as_deref(), Some("replaced"));
        assert_eq!(name(&r, 0x3000), None);
        std::fs::File::create(&map).unwrap();
        append(&map, b"5000 1 cut\n");
        r.refresh(u64::MAX).unwrap();
        assert_eq!(name(&r, 0x5000).as_deref(), Some("cut"));
        assert_eq!(name(&r, 0x1000), None);
    }

    // Guards the bounds: reading stops at the byte bound and at the range
    // bound, saying so.
    #[test]
    fn a_huge_map_is_read_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("perf-1.map");
        let lines: String = (0..100)
            .map(|i| format!("{:x} 10 f{i:02}\n", 0x1000 + i * 0x10))
            .collect();
        append(&map, lines.as_bytes());
        let line = lines.len() as u64 / 100;
        let mut r = reader(
            dir.path(),
            Limits {
                max_bytes: 10 * line,
                max_ranges: 1000,
            },
        );
        assert_eq!(r.refresh(u64::MAX).unwrap(), 10 * line);
        assert_eq!(r.refresh(u64::MAX).unwrap(), 0);
        assert_eq!(r.stats().entries, 10);
        assert!(r.stats().full);
        let mut r = reader(
            dir.path(),
            Limits {
                max_bytes: 1 << 20,
                max_ranges: 5,
            },
        );
        r.refresh(u64::MAX).unwrap();
        assert_eq!((r.stats().entries, r.ranges()), (5, 5));
        assert!(r.stats().full);
        assert_eq!(name(&r, 0x1040).as_deref(), Some("f04"));
        assert_eq!(name(&r, 0x1050), None);
    }

    // Guards the opening: a symlink at the path or above it, a FIFO (not
    // waited on), a directory and another user's file are refused, and
    // nothing is read from them.
    #[test]
    fn planted_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.map");
        std::fs::write(&real, b"1000 100 planted\n").unwrap();
        let map = dir.path().join("perf-1.map");
        let mut r = reader(dir.path(), Limits::default());

        std::os::unix::fs::symlink(&real, &map).unwrap();
        let e = r.refresh(u64::MAX).unwrap_err();
        assert!(matches!(e, PerfMapError::Symlink { .. }), "{e}");
        std::fs::remove_file(&map).unwrap();

        // A symlinked directory on the way (as a /tmp that is a link).
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(inner.join("perf-1.map"), b"1000 100 planted\n").unwrap();
        std::os::unix::fs::symlink(&inner, dir.path().join("tmp")).unwrap();
        let mut through = PerfMapReader::new(
            PerfMapPath {
                path: "/tmp/perf-1.map".into(),
                ..r.at.clone()
            },
            Limits::default(),
        );
        let e = through.refresh(u64::MAX).unwrap_err();
        assert!(matches!(e, PerfMapError::Symlink { .. }), "{e}");

        let c = std::ffi::CString::new(map.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = r.refresh(u64::MAX).unwrap_err();
        assert!(
            matches!(e, PerfMapError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
        std::fs::remove_file(&map).unwrap();

        std::fs::create_dir(&map).unwrap();
        let e = r.refresh(u64::MAX).unwrap_err();
        assert!(
            matches!(
                e,
                PerfMapError::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "{e}"
        );
        std::fs::remove_dir(&map).unwrap();

        // A hard link to a file elsewhere.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, b"1000 100 linked\n").unwrap();
        std::fs::hard_link(&elsewhere, &map).unwrap();
        let e = r.refresh(u64::MAX).unwrap_err();
        assert!(matches!(e, PerfMapError::Linked { links: 2, .. }), "{e}");
        std::fs::remove_file(&map).unwrap();

        std::fs::write(&map, b"1000 100 someone else's\n").unwrap();
        // Root may give it away; another user cannot be tested unprivileged.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&map, Some(4242), None).unwrap();
            let e = r.refresh(u64::MAX).unwrap_err();
            assert!(matches!(e, PerfMapError::Owner { uid: 4242, .. }), "{e}");
        }
        assert!(!r.has_read());
        assert_eq!(r.frame(0x1000), None);
    }
}
