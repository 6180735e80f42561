//! Finding libcupti at run time.
//!
//! In order: `KILN_CUPTI_PATH`; a copy the process already loaded (found
//! in `/proc/self/maps`, opened with `RTLD_NOLOAD` so no second copy comes
//! in — PyTorch, for one, links its own); the sonames the dynamic loader
//! knows; the CUDA install's `extras/CUPTI/lib64` under `$CUDA_HOME` and
//! `/usr/local/cuda`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use libloading::os::unix::Library;

/// Sonames tried through the loader's search path, newest first.
const SONAMES: [&str; 5] = [
    "libcupti.so",
    "libcupti.so.13",
    "libcupti.so.12",
    "libcupti.so.11.8",
    "libcupti.so.11.7",
];

/// No libcupti could be opened.
#[derive(Debug, thiserror::Error)]
#[error("libcupti not found (set KILN_CUPTI_PATH); tried: {}", tried.iter().map(|(p, e)| format!("{} ({e})", p.display())).collect::<Vec<_>>().join("; "))]
pub struct LoadError {
    /// Every place tried, with the loader's answer.
    pub tried: Vec<(PathBuf, String)>,
}

/// Where to look, in order, given the environment's override and
/// `CUDA_HOME` and the already-mapped copies (see the module docs).
pub fn candidate_paths(
    override_path: Option<OsString>,
    cuda_home: Option<OsString>,
    mapped: &[PathBuf],
) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    if let Some(path) = override_path.filter(|p| !p.is_empty()) {
        out.push((PathBuf::from(path), false));
    }
    for path in mapped {
        out.push((path.clone(), true));
    }
    for soname in SONAMES {
        out.push((PathBuf::from(soname), false));
    }
    let mut dirs = Vec::new();
    if let Some(home) = cuda_home.filter(|p| !p.is_empty()) {
        dirs.push(PathBuf::from(home));
    }
    dirs.push(PathBuf::from("/usr/local/cuda"));
    for dir in dirs {
        out.push((dir.join("extras/CUPTI/lib64/libcupti.so"), false));
    }
    out
}

/// Paths of libcupti copies mapped into this process, from a
/// `/proc/<pid>/maps` text.
pub(super) fn mapped_copies(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let is_cupti = Path::new(path)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libcupti.so"));
        if is_cupti && !out.iter().any(|p| p.as_os_str() == path) {
            out.push(PathBuf::from(path));
        }
    }
    out
}

/// Opens libcupti (see the module docs for the order).
pub fn load_library() -> Result<(Library, PathBuf), LoadError> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let candidates = candidate_paths(
        std::env::var_os("KILN_CUPTI_PATH"),
        std::env::var_os("CUDA_HOME"),
        &mapped_copies(&maps),
    );
    let mut tried = Vec::new();
    for (path, already_loaded) in candidates {
        let mut flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
        if already_loaded {
            flags |= libc::RTLD_NOLOAD;
        }
        // SAFETY: libcupti's initializers are safe to run in a CUDA
        // process; that is what the injection mechanism is for.
        match unsafe { Library::open(Some(&path), flags) } {
            Ok(lib) => return Ok((lib, path)),
            Err(e) => tried.push((path, e.to_string())),
        }
    }
    Err(LoadError { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_override_loaded_sonames_dirs() {
        let mapped = vec![PathBuf::from("/opt/torch/lib/libcupti.so.12")];
        let paths = candidate_paths(Some("/x/libcupti.so".into()), Some("/cuda".into()), &mapped);
        let names: Vec<_> = paths.iter().map(|(p, _)| p.to_str().unwrap()).collect();
        assert_eq!(names[0], "/x/libcupti.so");
        assert_eq!(names[1], "/opt/torch/lib/libcupti.so.12");
        assert!(
            paths[1].1,
            "an already-mapped copy is opened with RTLD_NOLOAD"
        );
        assert_eq!(names[2], "libcupti.so");
        assert!(names.contains(&"libcupti.so.12"));
        assert_eq!(
            names[names.len() - 2],
            "/cuda/extras/CUPTI/lib64/libcupti.so"
        );
        assert_eq!(
            names[names.len() - 1],
            "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"
        );

        // Empty variables are as good as unset.
        let paths = candidate_paths(Some("".into()), Some("".into()), &[]);
        assert_eq!(paths[0].0, PathBuf::from("libcupti.so"));
    }

    #[test]
    fn finds_mapped_copies_once() {
        let maps = "\
7f00-7f01 r--p 00000000 08:01 1 /usr/lib/libc.so.6
7f02-7f03 r-xp 00001000 08:01 2 /opt/cuda/lib/libcupti.so.12.4.99
7f03-7f04 r--p 00002000 08:01 2 /opt/cuda/lib/libcupti.so.12.4.99
7f05-7f06 rw-p 00000000 00:00 0
";
        assert_eq!(
            mapped_copies(maps),
            vec![PathBuf::from("/opt/cuda/lib/libcupti.so.12.4.99")]
        );
    }

    /// With no CUDA here, loading fails with an error naming every place
    /// tried (the missing-library path).
    #[test]
    fn missing_library_names_what_was_tried() {
        if std::env::var_os("KILN_CUPTI_PATH").is_some() {
            return;
        }
        let Err(e) = load_library() else {
            // A machine with CUPTI installed: nothing to check here.
            return;
        };
        let text = e.to_string();
        assert!(text.contains("libcupti.so.12"), "{text}");
        assert!(
            text.contains("/usr/local/cuda/extras/CUPTI/lib64"),
            "{text}"
        );
    }
}
