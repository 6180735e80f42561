//! Which cgroup v2 the agent profiles, when told one (`--cgroup`): its id
//! and its depth, which the eBPF program compares with those of the
//! sampled task's ancestor at that depth
//! (`bpf_get_current_ancestor_cgroup_id`), so that tasks in cgroups below
//! it count too.
//!
//! A cgroup's id is the inode number of its directory in the cgroup2
//! filesystem, and the root cgroup's is 1; its level is how many
//! directories lie between it and the root. Both are read from the
//! filesystem, so nothing here needs privilege: a typo is reported before
//! the agent touches the kernel.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The id (and directory inode number) of the root of the cgroup v2
/// hierarchy: kernfs numbers its nodes from 1, and the root is the first.
const ROOT_CGROUP_ID: u64 = 1;

/// Why a path cannot be profiled as a cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The path could not be resolved or examined.
    #[error("reading cgroup {}", path.display())]
    Unreadable {
        /// The path as given.
        path: PathBuf,
        /// What the filesystem said.
        #[source]
        source: io::Error,
    },
    /// The path is not a directory of a cgroup v2 filesystem (a cgroup v1
    /// hierarchy's directory, with its own `cgroup.procs`, included: the
    /// program can only match v2 cgroups).
    #[error(
        "{} is not a cgroup v2 directory ({what}); cgroup v2 is {}",
        path.display(),
        match mount {
            Some(mount) => format!("mounted at {}", mount.display()),
            None => "not mounted on this host".to_string(),
        }
    )]
    NotCgroup2 {
        /// The path as given.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
        /// Where cgroup v2 is mounted, if it is: where to look instead.
        mount: Option<PathBuf>,
    },
    /// The cgroup2 filesystem the path is on is mounted from a cgroup
    /// below the root (inside a cgroup namespace, or a bind mount of a
    /// subtree), so the cgroup's depth below the root is unknown.
    #[error(
        "{}: the cgroup2 filesystem here is mounted from a cgroup below the root (a cgroup \
         namespace?), so the cgroup's depth is unknown; run the agent in the host's cgroup \
         namespace with the host's /sys/fs/cgroup",
        path.display()
    )]
    RootNotVisible {
        /// The path as given.
        path: PathBuf,
    },
}

/// A cgroup v2 the eBPF program filters samples by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// Its directory, as resolved (no symbolic links, absolute).
    pub path: PathBuf,
    /// Its id: its directory's inode number.
    pub id: u64,
    /// Its depth below the root cgroup (the root is 0).
    pub level: u32,
}

impl Cgroup {
    /// The cgroup whose directory is `path`.
    ///
    /// A cgroup removed and made again under the same path is a new
    /// cgroup with a new id: the agent keeps profiling the one it resolved.
    pub fn resolve(path: &Path) -> Result<Cgroup, CgroupError> {
        let unreadable = |source| CgroupError::Unreadable {
            path: path.to_owned(),
            source,
        };
        let resolved = path.canonicalize().map_err(unreadable)?;
        if !resolved.is_dir() {
            return Err(CgroupError::NotCgroup2 {
                path: path.to_owned(),
                what: "not a directory",
                mount: cgroup2_mount(),
            });
        }
        let what = match filesystem(&resolved).map_err(unreadable)? {
            Filesystem::Cgroup2 => None,
            Filesystem::Cgroup1 => Some("on a cgroup v1 hierarchy"),
            Filesystem::Other => Some("not on a cgroup filesystem"),
        };
        if let Some(what) = what {
            return Err(CgroupError::NotCgroup2 {
                path: path.to_owned(),
                what,
                mount: cgroup2_mount(),
            });
        }
        let id = std::fs::metadata(&resolved).map_err(unreadable)?.ino();
        let level = levels_below_root(&resolved)
            .map_err(unreadable)?
            .ok_or_else(|| CgroupError::RootNotVisible {
                path: path.to_owned(),
            })?;
        Ok(Cgroup {
            path: resolved,
            id,
            level,
        })
    }
}

/// How many directories up from `dir` (on a cgroup2 filesystem) the root
/// cgroup is, each step one level; `None` when the filesystem ends first,
/// its mount showing a subtree only.
fn levels_below_root(dir: &Path) -> io::Result<Option<u32>> {
    for (level, ancestor) in (0..).zip(dir.ancestors()) {
        if filesystem(ancestor)? != Filesystem::Cgroup2 {
            return Ok(None);
        }
        if std::fs::metadata(ancestor)?.ino() == ROOT_CGROUP_ID {
            return Ok(Some(level));
        }
    }
    Ok(None)
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on hosts
/// with only v2; `/sys/fs/cgroup/unified` on hybrid ones), from
/// `/proc/self/mountinfo`; `None` when it is not mounted.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        // "36 35 0:30 / /sys/fs/cgroup rw,… shared:9 - cgroup2 cgroup2 rw,…":
        // the mount point is the fifth field, the type follows the "-".
        let (mount, rest) = line.split_once(" - ")?;
        let fstype = rest.split_whitespace().next()?;
        let point = mount.split_whitespace().nth(4)?;
        // (Octal escapes of odd characters are left as they are.)
        (fstype == "cgroup2").then(|| PathBuf::from(point))
    })
}

/// The kinds of filesystem a cgroup path may be on.
#[derive(Debug, PartialEq, Eq)]
enum Filesystem {
    Cgroup2,
    Cgroup1,
    Other,
}

/// Which filesystem `path` is on.
fn filesystem(path: &Path) -> io::Result<Filesystem> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: all-zero bytes are a valid `statfs` (plain integers), which
    // the call overwrites.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a `statfs` we own.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match fs.f_type {
        libc::CGROUP2_SUPER_MAGIC => Filesystem::Cgroup2,
        libc::CGROUP_SUPER_MAGIC => Filesystem::Cgroup1,
        _ => Filesystem::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards that a plain directory (which may even hold a file named
    // cgroup.procs) is refused, with its path in the message.
    #[test]
    fn a_plain_directory_is_not_a_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        let e = Cgroup::resolve(dir.path()).unwrap_err();
        assert!(matches!(e, CgroupError::NotCgroup2 { .. }), "{e:?}");
        let message = e.to_string();
        assert!(
            message.starts_with(&format!(
                "{} is not a cgroup v2 directory (not on a cgroup filesystem)",
                dir.path().display()
            )),
            "{message}"
        );
    }

    // Guards that a missing path is named, with the reason.
    #[test]
    fn a_missing_path_is_named() {
        let e = Cgroup::resolve(Path::new("/sys/fs/cgroup/kiln-no-such-cgroup")).unwrap_err();
        assert!(matches!(e, CgroupError::Unreadable { .. }), "{e:?}");
        assert!(
            e.to_string() == "reading cgroup /sys/fs/cgroup/kiln-no-such-cgroup",
            "{e}"
        );
    }

    // Guards the levels: the root is level 0 with id 1, whatever the
    // mount point. Runs where cgroup v2 is mounted (and readable).
    #[test]
    fn the_root_cgroup_is_level_zero() {
        let Some(mount) = cgroup2_mount() else {
            eprintln!("skipped: cgroup v2 is not mounted on this host");
            return;
        };
        let root = Cgroup::resolve(&mount).unwrap();
        assert_eq!((root.id, root.level), (ROOT_CGROUP_ID, 0), "{root:?}");
    }
}
