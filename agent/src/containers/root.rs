//! Reading container runtimes' state files under the host root, bounded
//! and never leaving it.
//!
//! The agent runs as root, and some of these directories are writable by
//! the users of the runtimes (or by whoever controls a container's
//! files), so every path is resolved by `openat2` with `RESOLVE_IN_ROOT`:
//! a symlink, absolute or `..`, resolves inside the root and cannot point
//! the agent at `/etc/shadow` outside it; magic links (`/proc/*/fd/*`) are
//! refused; the file itself must be a regular file (no FIFO to block on,
//! no device), and is read through a `take` of its cap, so a huge or
//! growing file costs at most the cap.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Most entries read from one directory: `/var/log/containers` has one
/// per container of the node (a few hundred); past this, the rest are not
/// looked at.
pub(super) const MAX_DIR_ENTRIES: usize = 65_536;

/// The host's root as the agent sees it (`--host-root`: `/`, or where a
/// DaemonSet mounts the host's `/run`, `/var/log`, `/var/lib`).
#[derive(Debug, Clone)]
pub(super) struct HostRoot {
    path: PathBuf,
}

/// What identifies a version of a file: when it is replaced or written,
/// one of these changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl HostRoot {
    pub(super) fn new(path: impl Into<PathBuf>) -> HostRoot {
        HostRoot { path: path.into() }
    }

    /// Opens `relative` (no leading `/` needed) inside the root with
    /// `flags`.
    fn open(&self, relative: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
        let root = open_dir(&self.path)?;
        // Symlinks inside the root are followed (`/var/run` → `/run`),
        // never out of it.
        crate::in_root::openat2_in_root(&root, relative, flags, 0)
    }

    /// The whole of the regular file `relative`, when it holds at most
    /// `cap` bytes; `None` when it is missing, not a regular file, a
    /// symlink itself, or larger.
    pub(super) fn read(&self, relative: &str, cap: usize) -> Option<Vec<u8>> {
        self.read_stamped(relative, cap).map(|(bytes, _)| bytes)
    }

    /// As [`HostRoot::read`], with the file's stamp.
    pub(super) fn read_stamped(&self, relative: &str, cap: usize) -> Option<(Vec<u8>, FileStamp)> {
        let fd = self
            .open(
                relative,
                // O_NOFOLLOW: the state files are regular files the
                // runtimes write; one that is a symlink was put there by
                // someone else. O_NONBLOCK: never wait on a FIFO.
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            )
            .ok()?;
        let file = File::from(fd);
        let stamp = stamp(&file)?;
        // Refused before reading: a 2 GiB sparse file costs one fstat.
        if stamp.size > cap as u64 {
            return None;
        }
        let mut bytes = Vec::with_capacity(stamp.size as usize);
        // One byte past the cap tells a file that grew since the fstat.
        file.take(cap as u64 + 1).read_to_end(&mut bytes).ok()?;
        (bytes.len() <= cap).then_some((bytes, stamp))
    }

    /// The stamp of the regular file `relative`, without reading it.
    pub(super) fn stamp(&self, relative: &str) -> Option<FileStamp> {
        let fd = self.open(relative, libc::O_PATH | libc::O_NOFOLLOW).ok()?;
        stamp(&File::from(fd))
    }

    /// The names in directory `relative`, at most `max`; `None` when it
    /// is missing or not a directory.
    pub(super) fn list(&self, relative: &str, max: usize) -> Option<Vec<OsString>> {
        let fd = self
            .open(relative, libc::O_RDONLY | libc::O_DIRECTORY)
            .ok()?;
        // Our own descriptor, listed through /proc: the directory stays
        // the one openat2 resolved inside the root.
        let entries = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        Some(
            entries
                .filter_map(Result::ok)
                .take(max)
                .map(|e| e.file_name())
                .collect(),
        )
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The stamp of an open regular file; `None` for anything else.
fn stamp(file: &File) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    meta.is_file().then(|| FileStamp {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the promise the module makes: reads stay in the root, are
    // bounded, and refuse what is not a regular file.
    #[test]
    fn reads_stay_in_the_root_and_are_bounded() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"{\"Name\":\"/leaked\"}").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/file"), b"12345").unwrap();
        assert_eq!(root.read("a/file", 5).as_deref(), Some(&b"12345"[..]));
        assert_eq!(root.read("/a/file", 5).as_deref(), Some(&b"12345"[..]));
        assert_eq!(root.read("a/file", 4), None, "over the cap");
        assert_eq!(root.read("a/missing", 100), None);
        assert_eq!(root.read("a", 100), None, "a directory");
        // `..` and absolute symlinks resolve inside the root.
        assert_eq!(root.read("../../../../etc/hostname", 1 << 20), None);
        let secret = outside.path().join("secret");
        std::os::unix::fs::symlink(&secret, dir.path().join("a/abs")).unwrap();
        assert_eq!(root.read("a/abs", 1 << 20), None);
        std::os::unix::fs::symlink("../../../../../../../..", dir.path().join("a/up")).unwrap();
        let through = format!("a/up{}", secret.display());
        assert_eq!(root.read(&through, 1 << 20), None);
        // A symlinked last component is refused even inside the root.
        std::os::unix::fs::symlink("file", dir.path().join("a/rel")).unwrap();
        assert_eq!(root.read("a/rel", 100), None);
        // A FIFO is not waited on.
        let fifo = CString::new(dir.path().join("a/fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(root.read("a/fifo", 100), None);
        let mut names = root.list("a", 100).unwrap();
        names.sort();
        assert_eq!(names, ["abs", "fifo", "file", "rel", "up"]);
        assert_eq!(root.list("a", 2).unwrap().len(), 2);
        assert_eq!(root.list("a/file", 100), None);
        assert!(root.stamp("a/file").is_some());
        assert_eq!(root.stamp("a/rel"), None);
    }
}
