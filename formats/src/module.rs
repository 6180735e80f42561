//! Module (binary, library, kernel) names as perf and pprof print them.

/// The file name of a module path: everything after the last `/`
/// (`/usr/lib/libc.so.6` → `libc.so.6`; `[kernel.kallsyms]` stays).
pub(crate) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Bracketed names perf and the kernel give to user-space mappings that
/// are not files. Any other bracketed name is a kernel image or module:
/// perf prints loaded kernel modules as `[nf_conntrack]`.
const USER_SPACE_PSEUDO_MODULES: [&str; 8] = [
    "[unknown]",
    "[vdso]",
    "[vsyscall]",
    "[vvar]",
    "[vvar_vclock]",
    "[heap]",
    "[stack]",
    "[uprobes]",
];

/// Whether `module` (a path or a bracketed name) is kernel code: the kernel
/// image (`[kernel.kallsyms]`, a `vmlinux` file), or a kernel module
/// (`[nf_conntrack]`, `….ko`). stackcollapse-perf.pl decides the same way,
/// except that it also takes `[vdso]` and friends for the kernel.
pub(crate) fn is_kernel(module: &str) -> bool {
    let name = basename(module);
    if module.starts_with('[') {
        return !USER_SPACE_PSEUDO_MODULES.contains(&module)
            && !module.starts_with("[anon")
            && !module.starts_with("[stack:");
    }
    name.ends_with(".ko")
        || name.contains(".ko.")
        || name == "vmlinux"
        || name.starts_with("vmlinux-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_modules_are_told_from_user_space_ones() {
        for kernel in [
            "[kernel.kallsyms]",
            "[nf_conntrack_ipv4]",
            "/lib/modules/6.1.0/kernel/fs/ext4/ext4.ko",
            "/lib/modules/6.1.0/kernel/fs/ext4/ext4.ko.xz",
            "/usr/lib/debug/boot/vmlinux-6.1.0-18-amd64",
            "vmlinux",
        ] {
            assert!(is_kernel(kernel), "{kernel}");
        }
        for user in [
            "[vdso]",
            "[unknown]",
            "[anon:rust]",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/tmp/perf-1234.map",
            "/home/me/vmlinux-tools/app",
        ] {
            assert!(!is_kernel(user), "{user}");
        }
    }

    #[test]
    fn basename_keeps_what_follows_the_last_slash() {
        assert_eq!(basename("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(basename("[kernel.kallsyms]"), "[kernel.kallsyms]");
        assert_eq!(basename("dir/"), "");
    }
}
