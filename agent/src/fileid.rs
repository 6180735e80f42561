//! File ids of executables and libraries, and the ELF load segments that
//! turn a runtime address into the file-relative virtual address that
//! symbols are keyed by.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_model::{Executable, FileId};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{FileKind, Object, ReadCache, elf};

use crate::mapped_file::{MappedFileError, open_mapped};
use crate::procfs::Mapping;

/// A process's executable file mappings, each with its file.
pub(crate) type ProcessMappings = Vec<(Mapping, Arc<FileInfo>)>;

/// Why a file could not be identified.
#[derive(Debug, thiserror::Error)]
pub enum FileIdError {
    /// The mapped file was not opened: gone, or not the file mapped any
    /// more (see [`crate::open_mapped`]).
    #[error(transparent)]
    Mapped(#[from] MappedFileError),
    /// The file could not be opened or read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One `PT_LOAD` program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `PF_X` in `p_flags`: it holds code.
    pub executable: bool,
}

/// What the agent knows about one executable file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Its id.
    pub file_id: FileId,
    /// Its file name, without directories.
    pub name: String,
    /// The GNU build id in hex, when it has one.
    pub build_id: Option<String>,
    /// `PT_LOAD` segments; empty when the file is not an ELF we can read,
    /// and then file offsets stand in for virtual addresses.
    pub loads: Vec<LoadSegment>,
}

impl FileInfo {
    /// Reads the file at `path` (which may be a `/proc/<pid>/map_files`
    /// link) and names it `name`.
    ///
    /// Only the ELF headers and notes are read, and for files without a
    /// build id the first and last 4 KiB, never the whole file.
    ///
    /// Only for files the agent trusts (its own, a debug directory's):
    /// files that processes map are read with [`FileInfo::of_mapping`].
    pub fn read(path: &Path, name: &str) -> Result<FileInfo, FileIdError> {
        let file = File::open(path).map_err(|source| FileIdError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        FileInfo::from_file(file, path, name)
    }

    /// Reads the file that `mapping` of process `pid` maps, opened by
    /// [`open_mapped`] (only if it is still that file and a regular one),
    /// and names it after the mapping.
    pub fn of_mapping(pid: u32, mapping: &Mapping) -> Result<FileInfo, FileIdError> {
        let file = open_mapped(pid, mapping)?;
        FileInfo::from_file(file, Path::new(&mapping.path), mapping.name())
    }

    /// Reads the open `file` (`path` names it in errors) and names it
    /// `name`.
    pub fn from_file(file: File, path: &Path, name: &str) -> Result<FileInfo, FileIdError> {
        let err = |source| FileIdError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = file.metadata().map_err(err)?.len();
        let cache = ReadCache::new(file);
        let (build_id, loads) = elf_facts(&cache).unwrap_or_default();
        let file_id = match &build_id {
            Some(id) => FileId::from_build_id(id),
            None => {
                let mut file = cache.into_inner();
                head_tail_id(&mut file, len).map_err(err)?
            }
        };
        Ok(FileInfo {
            file_id,
            name: name.to_string(),
            build_id: build_id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect()),
            loads,
        })
    }

    /// The file-relative virtual address of the runtime address `addr` in
    /// `mapping`: its file offset, moved by the `PT_LOAD` that holds it.
    pub fn vaddr(&self, mapping: &Mapping, addr: u64) -> u64 {
        let offset = addr
            .wrapping_sub(mapping.start)
            .wrapping_add(mapping.offset);
        self.loads
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.filesz)
            .map(|s| offset - s.offset + s.vaddr)
            .unwrap_or(offset)
    }

    /// The bias of the executable `mapping`: runtime address − file
    /// virtual address, the same for every address of the mapping. It is
    /// the executable `PT_LOAD` in the mapping's file range that says it
    /// (else the one covering most of it), not the one holding the
    /// mapping's first byte: lld starts the text segment in the page where
    /// the read-only segment before it ends, a page above its file offset
    /// in virtual addresses, so the text mapping's first page belongs to
    /// both (and its first byte to the wrong one, which would put every
    /// address a page off).
    pub fn bias(&self, mapping: &Mapping) -> u64 {
        let start = mapping.offset;
        let end = start.saturating_add(mapping.end.saturating_sub(mapping.start));
        let overlap = |s: &&LoadSegment| {
            let from = s.offset.max(start);
            let to = s.offset.saturating_add(s.filesz).min(end);
            to.saturating_sub(from)
        };
        let vaddr_of_start = self
            .loads
            .iter()
            .filter(|s| overlap(s) > 0)
            .max_by_key(|s| (s.executable, overlap(s)))
            .map_or(start, |s| {
                start.wrapping_sub(s.offset).wrapping_add(s.vaddr)
            });
        mapping.start.wrapping_sub(vaddr_of_start)
    }

    /// The [`Executable`] record for a batch.
    pub fn executable(&self) -> Executable {
        Executable {
            file_id: self.file_id,
            name: self.name.clone(),
            build_id: self.build_id.clone(),
        }
    }
}

/// The build id and load segments of an ELF file; `None` when it is not
/// one we can parse.
fn elf_facts(data: &ReadCache<File>) -> Option<(Option<Vec<u8>>, Vec<LoadSegment>)> {
    match FileKind::parse(data).ok()? {
        FileKind::Elf64 => facts_of::<elf::FileHeader64<object::Endianness>>(data),
        FileKind::Elf32 => facts_of::<elf::FileHeader32<object::Endianness>>(data),
        _ => None,
    }
}

fn facts_of<'a, H: FileHeader<Endian = object::Endianness>>(
    data: &'a ReadCache<File>,
) -> Option<(Option<Vec<u8>>, Vec<LoadSegment>)> {
    let file = object::read::elf::ElfFile::<H, &'a ReadCache<File>>::parse(data).ok()?;
    let endian = file.endian();
    let loads = file
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| LoadSegment {
            offset: p.p_offset(endian).into(),
            vaddr: p.p_vaddr(endian).into(),
            filesz: p.p_filesz(endian).into(),
            executable: p.p_flags(endian) & elf::PF_X != 0,
        })
        .collect();
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    Some((build_id, loads))
}

fn head_tail_id(file: &mut File, len: u64) -> io::Result<FileId> {
    FileId::of_file(None, len, |offset, buf| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(buf)
    })
}

/// File infos by (device, inode), so each file is read once however many
/// processes map it. Files that were opened but could not be read are
/// remembered as such; a file that one process's mapping could not lead to
/// (it exited, or its path was swapped) is not: that says nothing of the
/// file, and remembering it would hide a shared library (every later
/// process's libcrypto, say) for the agent's whole life.
#[derive(Debug, Default)]
pub(crate) struct FileCache {
    files: HashMap<(u64, u64), Option<Arc<FileInfo>>>,
}

/// Bound on remembered files; past it the cache starts over (a host maps
/// a few thousand files at most, so this only trips on churn).
const MAX_FILES: usize = 16 * 1024;

impl FileCache {
    /// The file `mapping` maps, read through `/proc/<pid>/map_files` so
    /// that files in other mount namespaces and deleted files are found
    /// (see [`open_mapped`]: a file swapped since it was mapped is never
    /// read).
    pub(crate) fn get(&mut self, pid: u32, mapping: &Mapping) -> Option<Arc<FileInfo>> {
        let key = (mapping.dev, mapping.inode);
        if let Some(hit) = self.files.get(&key) {
            return hit.clone();
        }
        if self.files.len() >= MAX_FILES {
            self.files.clear();
        }
        let info = match FileInfo::of_mapping(pid, mapping) {
            Ok(info) => Some(Arc::new(info)),
            Err(e @ FileIdError::Mapped(_)) => {
                tracing::debug!(error = %e, path = %mapping.path, pid, "mapping not opened");
                return None;
            }
            Err(e @ FileIdError::Read { .. }) => {
                tracing::debug!(error = %e, path = %mapping.path, "unreadable mapped file");
                None
            }
        };
        self.files.insert(key, info.clone());
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the build-id path and the PT_LOAD arithmetic on a real ELF:
    // our own test binary.
    #[test]
    fn own_executable_has_loads_and_an_id() {
        let exe = std::env::current_exe().unwrap();
        let info = FileInfo::read(&exe, "me").unwrap();
        assert!(!info.loads.is_empty());
        let again = FileInfo::read(&exe, "me").unwrap();
        assert_eq!(info.file_id, again.file_id, "ids are stable");
    }

    // Guards the cache against a race the whole host meets all the time:
    // a process that maps a library exits between its maps being read
    // and the file being opened. That failure is the process's, so the
    // next process that maps the same library must still get its file.
    #[test]
    fn a_mapping_whose_process_exited_does_not_hide_its_file() {
        let maps = crate::procfs::read_maps(std::process::id()).unwrap();
        let libc = maps
            .iter()
            .find(|m| m.is_file() && m.name().starts_with("libc.so"))
            .expect("the test binary maps libc")
            .clone();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        let gone = exited.id();
        exited.wait().unwrap();

        let mut cache = FileCache::default();
        assert!(
            cache.get(gone, &libc).is_none(),
            "an exited pid opens nothing"
        );
        let found = cache.get(std::process::id(), &libc);
        assert!(
            found.is_some_and(|f| f.name.starts_with("libc.so")),
            "a live process's mapping of the same file is read"
        );
    }

    #[test]
    fn vaddr_moves_offsets_through_the_load_segment() {
        let info = FileInfo {
            file_id: FileId(1),
            name: "x".into(),
            build_id: None,
            loads: vec![
                LoadSegment {
                    offset: 0,
                    vaddr: 0,
                    filesz: 0x1000,
                    executable: false,
                },
                LoadSegment {
                    offset: 0x1000,
                    vaddr: 0x401000,
                    filesz: 0x2000,
                    executable: true,
                },
            ],
        };
        let mapping = Mapping {
            start: 0x5555_0000_1000,
            end: 0x5555_0000_3000,
            offset: 0x1000,
            dev: 0,
            inode: 1,
            path: "/x".into(),
        };
        assert_eq!(info.vaddr(&mapping, 0x5555_0000_1010), 0x401010);
        assert_eq!(info.vaddr(&mapping, 0x5555_0000_2fff), 0x402fff);
    }

    /// lld's layout (here `shares.c` linked by rust-lld, the linker of
    /// every Rust program since 1.90): the text segment starts at file
    /// offset 0x8a0 but vaddr 0x18a0, in the page where the read-only
    /// segment ends, so its mapping's first byte is in the read-only
    /// segment's range. The bias is the text segment's, for every address.
    #[test]
    fn the_bias_is_the_text_segments_when_it_shares_a_page() {
        let segment = |offset, vaddr, filesz, executable| LoadSegment {
            offset,
            vaddr,
            filesz,
            executable,
        };
        let info = FileInfo {
            file_id: FileId(1),
            name: "x".into(),
            build_id: None,
            loads: vec![
                segment(0, 0, 0x898, false),
                segment(0x8a0, 0x18a0, 0x430, true),
                segment(0xcd0, 0x2cd0, 0x1d8, false),
            ],
        };
        // The r-xp mapping: the page at file offset 0, mapped a page in.
        let text = Mapping {
            start: 0x5555_0000_1000,
            end: 0x5555_0000_2000,
            offset: 0,
            dev: 0,
            inode: 1,
            path: "/x".into(),
        };
        let bias = info.bias(&text);
        assert_eq!(bias, 0x5555_0000_0000);
        // The same as each address's own vaddr.
        for addr in [0x5555_0000_18a0, 0x5555_0000_1cc0] {
            assert_eq!(addr - bias, info.vaddr(&text, addr));
        }
        // GNU ld's layout, the text at vaddr == offset: unchanged.
        let gnu = FileInfo {
            loads: vec![
                segment(0, 0, 0x1000, false),
                segment(0x1000, 0x1000, 0x2000, true),
            ],
            ..info.clone()
        };
        let text = Mapping {
            start: 0x5555_0000_1000,
            end: 0x5555_0000_3000,
            offset: 0x1000,
            ..text
        };
        assert_eq!(gnu.bias(&text), 0x5555_0000_0000);
        // No segment known (not an ELF we parse): the offset.
        let none = FileInfo {
            loads: vec![],
            ..info
        };
        assert_eq!(none.bias(&text), 0x5555_0000_0000);
    }

    #[test]
    fn files_without_build_id_hash_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let info = FileInfo::read(&path, "blob").unwrap();
        assert_eq!(info.build_id, None);
        assert_eq!(
            info.file_id,
            FileId::from_head_tail(&[7; 4096], &[7; 4096], 10_000)
        );
    }
}
