//! Opening a path inside a directory tree that others write (processes'
//! roots, container runtimes' state), as the agent, which is root, must:
//! resolved by the kernel inside that tree, never through a magic link.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `openat2(root, relative, flags | O_CLOEXEC)` resolved inside `root`
/// (`RESOLVE_IN_ROOT`: `..` and absolute symlinks stay in it), never
/// through a magic link, and with `resolve`'s further rules: how the
/// agent, which is root, opens paths in trees others write (processes'
/// roots, container runtimes' state). `relative` may start with `/`; an
/// empty one is the root itself.
pub(crate) fn openat2_in_root(
    root: &impl AsRawFd,
    relative: &str,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let relative = relative.trim_start_matches('/');
    let c = std::ffi::CString::new(if relative.is_empty() { "." } else { relative })
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: open_how is plain data (non_exhaustive: built zeroed, the
    // kernel's meaning of zero for every field we do not set).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS | resolve;
    // SAFETY: valid descriptor, NUL-terminated path, and a pointer to a
    // struct of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        // ENOSYS (before Linux 5.6): no safe way to resolve the path, so
        // none is taken.
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
