//! Finding an ELF's separate debug file: by GNU build id, then by
//! `.gnu_debuglink` (name and CRC-32), in the places GDB looks.

use std::fs;
use std::path::{Path, PathBuf};

use object::Object;

/// Where to look for separate debug files.
#[derive(Debug, Clone)]
pub struct DebugDirs {
    /// Roots of debug trees, like `/usr/lib/debug`: searched for
    /// `.build-id/xx/rest.debug` and for `<root>/<dir of the ELF>/<link>`.
    pub roots: Vec<PathBuf>,
}

impl Default for DebugDirs {
    fn default() -> Self {
        DebugDirs {
            roots: vec![PathBuf::from("/usr/lib/debug")],
        }
    }
}

/// A debug file found for an ELF, read into memory.
#[derive(Debug)]
pub(super) struct DebugFile {
    pub path: PathBuf,
    pub data: Vec<u8>,
}

/// Looks for the debug file of `elf` (at `elf_path`). A file found by build
/// id must carry the same build id; one found by debug link must match the
/// link's CRC. Unreadable candidates are skipped: a missing debug file only
/// means fewer symbols.
pub(super) fn find(elf_path: &Path, elf: &object::File<'_>, dirs: &DebugDirs) -> Option<DebugFile> {
    if let Ok(Some(id)) = elf.build_id()
        && id.len() >= 2
    {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        for root in &dirs.roots {
            let path = root
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            if let Ok(data) = fs::read(&path)
                && build_id_of(&data).as_deref() == Some(id)
            {
                return Some(DebugFile { path, data });
            }
        }
    }
    let (name, crc) = elf.gnu_debuglink().ok().flatten()?;
    let name = std::str::from_utf8(name).ok()?;
    // A link is a bare file name; anything else could point anywhere.
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let dir = elf_path.canonicalize().ok()?.parent()?.to_path_buf();
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    for root in &dirs.roots {
        candidates.push(root.join(dir.strip_prefix("/").unwrap_or(&dir)).join(name));
    }
    let own = elf_path.canonicalize().ok();
    for path in candidates {
        if Some(&path) == own.as_ref() {
            continue;
        }
        if let Ok(data) = fs::read(&path)
            && crc32fast::hash(&data) == crc
        {
            return Some(DebugFile { path, data });
        }
    }
    None
}

fn build_id_of(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}
