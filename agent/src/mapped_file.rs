//! Opening the files other processes map, safely, as root.
//!
//! The agent runs as root and reads the executables and libraries of every
//! process it samples: for their FileIds, their ELF facts, their unwind
//! tables and the symbols it uploads. A path in `/proc/<pid>/maps` is only
//! where the file *was*: its owner may since have renamed a FIFO over it
//! (an `open()` that blocks the agent's thread for good), a device node
//! (whose driver's `open()` has side effects; `/dev/zero` reads forever),
//! or a symlink to a file the user may not read (`/etc/shadow`, which the
//! agent would then upload). So every open of a mapped file goes through
//! [`open_mapped`]:
//!
//! - First `/proc/<pid>/map_files/<start>-<end>`: the kernel resolves it
//!   to the very file the mapping holds (even deleted, or in another
//!   mount namespace), not by path, so no rename can redirect it.
//! - Only when that fails (no CAP_SYS_ADMIN, or the mapping is gone), the
//!   mapping's path under the process's root, resolved by `openat2` with
//!   `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS` and
//!   `O_NOFOLLOW`: the path in `maps` is the kernel's own (`d_path`), with
//!   no symlink in it, so any symlink met now was put there since.
//!
//! Either way the file is first opened `O_PATH`, which runs no driver and
//! waits on no FIFO; `fstat` must then show a regular file with the
//! mapping's device and inode. Only then is it opened for reading, through
//! that same descriptor (`/proc/self/fd/N`), `O_RDONLY | O_NONBLOCK |
//! O_CLOEXEC`, and checked once more. A caller that gets an error logs it
//! at debug and goes on: the frames keep their addresses, unnamed.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use crate::in_root::openat2_in_root;
use crate::procfs::Mapping;

/// Why a mapped file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum MappedFileError {
    /// The mapping is anonymous or a pseudo-file (`[vdso]`).
    #[error("{path:?} maps no file")]
    NotAFile {
        /// The mapping's path or pseudo-name.
        path: String,
    },
    /// Neither the `map_files` link nor the path under the process's root
    /// could be opened (usually: the process exited).
    #[error("cannot open {path}")]
    Open {
        /// The last path tried.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The path holds a symlink now (as its last component, or one
    /// before): something was swapped in since the file was mapped.
    #[error("{path} is a symlink now, not the mapped file")]
    Symlink {
        /// The path tried.
        path: PathBuf,
    },
    /// What was found is a FIFO, a device, a socket or a directory.
    #[error("{path} is a {kind}, not a regular file")]
    NotRegular {
        /// The path tried.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A regular file, but another one than the mapping holds.
    #[error(
        "{path} is device {found_dev:#x} inode {found_inode}, the mapping's file is device \
         {dev:#x} inode {inode}: replaced since it was mapped"
    )]
    Replaced {
        /// The path tried.
        path: PathBuf,
        /// Its device (`major << 32 | minor`) and inode.
        found_dev: u64,
        /// Its inode.
        found_inode: u64,
        /// The mapping's device.
        dev: u64,
        /// The mapping's inode.
        inode: u64,
    },
}

/// A file some process maps, as the batcher saw it: what the symbol
/// uploader opens later (with [`open_mapped`], so a file swapped since is
/// refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedSource {
    /// The process that maps it.
    pub pid: u32,
    /// One of its mappings of the file.
    pub mapping: Mapping,
}

impl MappedSource {
    /// Opens the file (see [`open_mapped`]).
    pub fn open(&self) -> Result<File, MappedFileError> {
        open_mapped(self.pid, &self.mapping)
    }
}

/// Opens for reading the file `mapping` of process `pid` maps, only if it
/// is still that file and a regular one (see the module docs): through
/// `/proc/<pid>/map_files`, else through the mapping's path under
/// `/proc/<pid>/root` without following any symlink.
pub fn open_mapped(pid: u32, mapping: &Mapping) -> Result<File, MappedFileError> {
    if !mapping.is_file() {
        return Err(MappedFileError::NotAFile {
            path: mapping.path.clone(),
        });
    }
    let via = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        mapping.start, mapping.end
    ));
    // The magic link is followed on purpose: it leads to the mapped file
    // itself, not to whatever its path holds now.
    let by_link = open_path(&via, true);
    let (path, fd, strict_dev) = match by_link {
        Ok(fd) => (via, fd, false),
        Err(first) => {
            // A deleted file has no path to fall back to.
            let path = mapping
                .path
                .strip_suffix(" (deleted)")
                .unwrap_or(&mapping.path);
            if path.len() != mapping.path.len() {
                return Err(MappedFileError::Open {
                    path: via,
                    source: first,
                });
            }
            let rooted = PathBuf::from(format!("/proc/{pid}/root{path}"));
            match open_in_root(pid, path) {
                Ok(fd) => (rooted, fd, true),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return Err(MappedFileError::Symlink { path: rooted });
                }
                Err(source) => {
                    return Err(MappedFileError::Open {
                        path: rooted,
                        source,
                    });
                }
            }
        }
    };
    let stat = check(&path, &fd, mapping, strict_dev)?;
    // Reopened through the O_PATH descriptor: the same inode, whatever
    // happened to any path since.
    let reopen = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let file = open_path(&reopen, false)
        .map(File::from)
        .map_err(|source| MappedFileError::Open {
            path: path.clone(),
            source,
        })?;
    let again = fstat(&file).map_err(|source| MappedFileError::Open {
        path: path.clone(),
        source,
    })?;
    if (again.st_dev, again.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(MappedFileError::Replaced {
            path,
            found_dev: dev_of(again.st_dev),
            found_inode: again.st_ino,
            dev: mapping.dev,
            inode: mapping.inode,
        });
    }
    Ok(file)
}

/// Checks that `fd` is a regular file with the mapping's device and inode.
/// `strict_dev`: the device must match too. Through `map_files` the kernel
/// vouches for the file itself, and there the device is compared only
/// where `stat` and `maps` number devices alike: btrfs reports a
/// subvolume's own device to `stat`, the filesystem's in `maps`.
fn check(
    path: &std::path::Path,
    fd: &OwnedFd,
    mapping: &Mapping,
    strict_dev: bool,
) -> Result<libc::stat, MappedFileError> {
    let stat = fstat(fd).map_err(|source| MappedFileError::Open {
        path: path.to_owned(),
        source,
    })?;
    let kind = match stat.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        // O_PATH | O_NOFOLLOW opens a trailing symlink itself.
        libc::S_IFLNK => {
            return Err(MappedFileError::Symlink {
                path: path.to_owned(),
            });
        }
        libc::S_IFIFO => Some("FIFO"),
        libc::S_IFCHR => Some("character device"),
        libc::S_IFBLK => Some("block device"),
        libc::S_IFSOCK => Some("socket"),
        libc::S_IFDIR => Some("directory"),
        _ => Some("special file"),
    };
    if let Some(kind) = kind {
        return Err(MappedFileError::NotRegular {
            path: path.to_owned(),
            kind,
        });
    }
    let found_dev = dev_of(stat.st_dev);
    let dev_ok = found_dev == mapping.dev || (!strict_dev && on_btrfs(fd));
    if stat.st_ino != mapping.inode || !dev_ok {
        return Err(MappedFileError::Replaced {
            path: path.to_owned(),
            found_dev,
            found_inode: stat.st_ino,
            dev: mapping.dev,
            inode: mapping.inode,
        });
    }
    Ok(stat)
}

/// A `dev_t` as `/proc/<pid>/maps` writes it, packed like
/// [`Mapping::dev`]: `major << 32 | minor`.
fn dev_of(dev: libc::dev_t) -> u64 {
    (u64::from(libc::major(dev)) << 32) | u64::from(libc::minor(dev))
}

fn on_btrfs(fd: &OwnedFd) -> bool {
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    // SAFETY: statfs is plain data; fstatfs writes it whole on success.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out-pointer.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) };
    rc == 0 && fs.f_type as i64 == BTRFS_SUPER_MAGIC
}

fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; fstat writes it whole on success.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

fn c_path(path: &std::path::Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// `open(path)`: `O_PATH` (no driver's open, no FIFO wait) when
/// `path_only`, else for reading, never blocking, never inherited.
fn open_path(path: &std::path::Path, path_only: bool) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    let flags = if path_only {
        libc::O_PATH | libc::O_CLOEXEC
    } else {
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY
    };
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `O_PATH` descriptor of `path` (absolute, as in `maps`) inside the root
/// of process `pid`, following no symlink and no magic link at any
/// component, and never leaving that root.
fn open_in_root(pid: u32, path: &str) -> io::Result<OwnedFd> {
    let root = open_path(std::path::Path::new(&format!("/proc/{pid}/root")), true)?;
    openat2_in_root(
        &root,
        path,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    /// A mapping of `path` by this process at an address range it does
    /// not have, so that `map_files` fails and the path is what is tried.
    fn crafted(path: &std::path::Path, dev: u64, inode: u64) -> Mapping {
        Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            dev,
            inode,
            path: path.to_str().unwrap().to_owned(),
        }
    }

    fn dev_ino(path: &std::path::Path) -> (u64, u64) {
        let meta = std::fs::metadata(path).unwrap();
        (dev_of(meta.dev()), meta.ino())
    }

    #[test]
    fn the_path_fallback_opens_the_mapped_file_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"the mapped file").unwrap();
        let (dev, ino) = dev_ino(&path);
        let mut file = open_mapped(std::process::id(), &crafted(&path, dev, ino)).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "the mapped file");
    }

    #[test]
    fn a_path_swapped_after_mapping_is_refused_unopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"the mapped file").unwrap();
        let (dev, ino) = dev_ino(&path);
        let mapping = crafted(&path, dev, ino);
        let pid = std::process::id();
        // The mapped inode stays (as a mapping keeps it), under another
        // name; then the path is swapped.
        let kept = dir.path().join("kept");
        std::fs::hard_link(&path, &kept).unwrap();

        // Another regular file.
        let other = dir.path().join("other");
        std::fs::write(&other, b"secret").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(matches!(
            open_mapped(pid, &mapping),
            Err(MappedFileError::Replaced { .. })
        ));

        // A symlink, even to the mapped inode itself.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&kept, &path).unwrap();
        let e = open_mapped(pid, &mapping).unwrap_err();
        assert!(matches!(e, MappedFileError::Symlink { .. }), "{e}");

        // A symlink in a directory component.
        let real_dir = dir.path().join("real");
        std::fs::create_dir(&real_dir).unwrap();
        let linked_dir = dir.path().join("linked");
        std::os::unix::fs::symlink(&real_dir, &linked_dir).unwrap();
        std::fs::write(real_dir.join("lib.so"), b"x").unwrap();
        let (dev2, ino2) = dev_ino(&real_dir.join("lib.so"));
        let e = open_mapped(pid, &crafted(&linked_dir.join("lib.so"), dev2, ino2)).unwrap_err();
        assert!(matches!(e, MappedFileError::Symlink { .. }), "{e}");

        // A FIFO: refused without blocking (no reader open on it).
        std::fs::remove_file(&path).unwrap();
        let c = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_mapped(pid, &mapping).unwrap_err();
        assert!(
            matches!(e, MappedFileError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );

        // A symlink to a device.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let e = open_mapped(pid, &mapping).unwrap_err();
        assert!(matches!(e, MappedFileError::Symlink { .. }), "{e}");
        // A device itself, found at the path (/dev/zero's own, with the
        // device and inode it has).
        let (zdev, zino) = dev_ino(std::path::Path::new("/dev/zero"));
        let e =
            open_mapped(pid, &crafted(std::path::Path::new("/dev/zero"), zdev, zino)).unwrap_err();
        assert!(
            matches!(
                e,
                MappedFileError::NotRegular {
                    kind: "character device",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn anonymous_and_deleted_mappings_have_no_path_to_fall_back_to() {
        let mut m = crafted(std::path::Path::new("/x"), 0, 0);
        m.path = "[vdso]".into();
        assert!(matches!(
            open_mapped(1, &m),
            Err(MappedFileError::NotAFile { .. })
        ));
        let mut m = crafted(std::path::Path::new("/tmp/gone (deleted)"), 1, 2);
        m.path = "/tmp/gone (deleted)".into();
        assert!(matches!(
            open_mapped(std::process::id(), &m),
            Err(MappedFileError::Open { .. })
        ));
    }

    /// Through `map_files` the mapped file is opened, whatever its path
    /// holds now: our own executable's text mapping.
    #[test]
    fn map_files_opens_the_mapping_of_a_live_process() {
        let pid = std::process::id();
        let maps = crate::procfs::read_maps(pid).unwrap();
        let addr = map_files_opens_the_mapping_of_a_live_process as *const () as usize as u64;
        let m = maps
            .iter()
            .find(|m| m.start <= addr && addr < m.end)
            .unwrap();
        let file = open_mapped(pid, m).unwrap();
        let meta = file.metadata().unwrap();
        assert_eq!(meta.ino(), m.inode);
        assert!(meta.is_file());
    }
}
