//! Finds a CPython interpreter in an ELF file (the `python3.X` executable
//! of a static build, or `libpython3.X.so` of a shared one): its version,
//! where its bytecode loop and its runtime state are, and how its memory
//! is laid out.

use std::ops::Range;

use object::read::ReadRef;
use object::{Object, ObjectSection, ObjectSymbol};

use super::layout::{Layout, PyVersion, known_layout, layout_from_debug_offsets, version_from_hex};

/// The bytecode loop: where the native walk meets Python frames.
const EVAL_SYMBOL: &str = "_PyEval_EvalFrameDefault";
/// The runtime state, root of the interpreters and their threads.
const RUNTIME_SYMBOL: &str = "_PyRuntime";
/// `PY_VERSION_HEX` as a constant (3.11+).
const VERSION_SYMBOL: &str = "Py_Version";
/// Bytes of `_PyRuntime` read for its debug offsets (3.13+): the struct is
/// under 1 KiB in 3.13 and 3.14.
const DEBUG_OFFSETS_BYTES: u64 = 4096;

/// A CPython interpreter found in a file. Addresses are the file's
/// virtual addresses (add the load bias for a process's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// Its version.
    pub version: PyVersion,
    /// How its memory is laid out; `None` for a version the agent cannot
    /// read (its frames show as a marker).
    pub layout: Option<Layout>,
    /// `_PyEval_EvalFrameDefault`.
    pub eval: Range<u64>,
    /// `_PyRuntime`.
    pub runtime: u64,
}

/// Whether a mapped file's name says it may hold an interpreter: only
/// these are opened and searched for its symbols (`python3.11`,
/// `python3.12d`, `libpython3.11.so.1.0`, a venv's `python` after the
/// kernel resolved its link).
pub fn may_be_python(file_name: &str) -> bool {
    file_name.starts_with("python") || file_name.starts_with("libpython")
}

/// The interpreter in the ELF file `elf` (named `file_name`), or `None`
/// when it holds none (no bytecode loop, or no runtime state among its
/// symbols).
pub fn inspect<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    file_name: &str,
) -> Option<Interpreter> {
    let mut eval = None;
    let mut runtime = None;
    let mut version_at = None;
    // Dynamic symbols first: exported by every build that embeds Python
    // (extension modules link against them); the full table, when it was
    // not stripped, as a fallback.
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        let Ok(name) = sym.name() else { continue };
        match name {
            EVAL_SYMBOL if eval.is_none() && sym.size() > 0 => {
                eval = Some(sym.address()..sym.address() + sym.size());
            }
            RUNTIME_SYMBOL if runtime.is_none() => runtime = Some(sym.address()),
            VERSION_SYMBOL if version_at.is_none() => version_at = Some(sym.address()),
            _ => {}
        }
        if eval.is_some() && runtime.is_some() && version_at.is_some() {
            break;
        }
    }
    let (eval, runtime) = (eval?, runtime?);
    let version = version_at
        .and_then(|at| read_at(elf, at, 8))
        .and_then(|b| Some(version_from_hex(u64::from_le_bytes(b.try_into().ok()?))))
        .or_else(|| version_from_name(file_name))?;
    let layout = if version
        >= (PyVersion {
            major: 3,
            minor: 13,
        }) {
        // The interpreter says itself where its fields are; its own
        // description wins over ours, which is only the fallback.
        read_at(elf, runtime, DEBUG_OFFSETS_BYTES)
            .and_then(|bytes| layout_from_debug_offsets(bytes).ok())
            .or_else(|| known_layout(version))
    } else {
        known_layout(version)
    };
    Some(Interpreter {
        version,
        layout,
        eval,
        runtime,
    })
}

/// Up to `len` bytes of initialized data at virtual address `addr` (fewer
/// when its section ends first); `None` when no section with data holds
/// it (`.bss`).
fn read_at<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    addr: u64,
    len: u64,
) -> Option<&'data [u8]> {
    elf.sections().find_map(|section| {
        let start = section.address();
        let end = start.checked_add(section.size())?;
        if addr < start || addr >= end {
            return None;
        }
        section.data_range(addr, len.min(end - addr)).ok().flatten()
    })
}

/// The version in a file name: `python3.10`, `libpython3.10.so.1.0`.
fn version_from_name(file_name: &str) -> Option<PyVersion> {
    let rest = &file_name[file_name.find("python")? + "python".len()..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(PyVersion {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_may_hold_an_interpreter() {
        for name in [
            "python3.11",
            "python3",
            "libpython3.12.so.1.0",
            "python3.13d",
        ] {
            assert!(may_be_python(name), "{name}");
        }
        for name in ["libc.so.6", "ld-linux-x86-64.so.2", "mypython"] {
            assert!(!may_be_python(name), "{name}");
        }
    }

    #[test]
    fn version_from_file_names() {
        assert_eq!(
            version_from_name("libpython3.10.so.1.0"),
            Some(PyVersion {
                major: 3,
                minor: 10
            })
        );
        assert_eq!(
            version_from_name("python3.12d"),
            Some(PyVersion {
                major: 3,
                minor: 12
            })
        );
        assert_eq!(version_from_name("python3"), None);
    }

    /// Every interpreter on this machine that can be found: Debian's
    /// static `python3.11` and pyenv's shared builds.
    #[test]
    fn finds_the_installed_interpreters() {
        let candidates = [
            ("/usr/bin/python3.11", 3, 11),
            (
                "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0",
                3,
                10,
            ),
            (
                "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
                3,
                11,
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
                3,
                12,
            ),
            (
                "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0",
                3,
                13,
            ),
        ];
        for (path, major, minor) in candidates {
            let Ok(data) = std::fs::read(path) else {
                eprintln!("skipped: {path} is not installed");
                continue;
            };
            let elf = object::File::parse(&*data).unwrap();
            let name = path.rsplit('/').next().unwrap();
            let interp = inspect(&elf, name).unwrap_or_else(|| panic!("no interpreter in {path}"));
            assert_eq!(interp.version, PyVersion { major, minor }, "{path}");
            let layout = interp
                .layout
                .as_ref()
                .unwrap_or_else(|| panic!("no layout for {path}"));
            assert_eq!(layout.version, interp.version);
            assert!(
                interp.eval.end - interp.eval.start > 1000,
                "{path}: {:?}",
                interp.eval
            );
            assert!(interp.runtime > 0);
        }
    }

    #[test]
    fn files_without_an_interpreter() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let elf = object::File::parse(&*data).unwrap();
        assert_eq!(inspect(&elf, "python3"), None);
    }
}
