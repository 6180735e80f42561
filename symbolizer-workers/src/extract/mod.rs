//! Extraction: from an ELF file (and its separate debug file, when one is
//! found) to a [`SymbolTable`].

mod debugfile;
pub(crate) mod demangle;
mod dwarf;
mod elf;
mod gopclntab;
mod intern;
mod merge;

use std::path::{Path, PathBuf};

pub use debugfile::DebugDirs;
pub use demangle::demangle;

use intern::Interner;
use object::Object;

use crate::table::SymbolTable;

/// Errors of [`extract`].
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not an object file `object` can parse.
    #[error("{path} is not a valid ELF file")]
    Parse {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    /// The file is an object file, but not ELF.
    #[error("{path} is not an ELF file (found {format:?})")]
    NotElf {
        path: PathBuf,
        format: object::BinaryFormat,
    },
    /// A debug section could not be read or decompressed.
    #[error("cannot read section {name}")]
    Section {
        name: &'static str,
        #[source]
        source: object::Error,
    },
}

/// How [`extract`] works.
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    /// Where separate debug files are looked for.
    pub debug_dirs: DebugDirs,
    /// Do not look for a separate debug file.
    pub no_debug_file: bool,
}

/// What [`extract`] found, beside the table itself.
#[derive(Debug)]
pub struct Extracted {
    pub table: SymbolTable,
    /// The separate debug file used, if any.
    pub debug_file: Option<PathBuf>,
    /// Total size of the DWARF sections read (uncompressed).
    pub dwarf_bytes: usize,
    /// Compilation units skipped because they could not be read.
    pub skipped_units: usize,
}

/// Extracts the symbols of the ELF file at `path`.
///
/// Addresses in the result are the ELF's own virtual addresses (those of
/// its program headers): for a shared library or PIE, the address relative
/// to its load base.
pub fn extract(path: &Path, options: &ExtractOptions) -> Result<Extracted, ExtractError> {
    let data = std::fs::read(path).map_err(|source| ExtractError::Read {
        path: path.into(),
        source,
    })?;
    extract_bytes(path, &data, options)
}

/// Like [`extract`], for an ELF already in memory; `path` is where it was
/// read from (used to find its debug file by `.gnu_debuglink`, and in
/// errors).
pub fn extract_bytes(
    path: &Path,
    data: &[u8],
    options: &ExtractOptions,
) -> Result<Extracted, ExtractError> {
    let parse = |data| {
        object::File::parse(data).map_err(|source| ExtractError::Parse {
            path: path.into(),
            source,
        })
    };
    let elf = parse(data)?;
    if elf.format() != object::BinaryFormat::Elf {
        return Err(ExtractError::NotElf {
            path: path.into(),
            format: elf.format(),
        });
    }
    let debug = if options.no_debug_file {
        None
    } else {
        debugfile::find(path, &elf, &options.debug_dirs)
    };
    // A debug file that does not parse is as good as none.
    let debug_elf = debug
        .as_ref()
        .and_then(|d| object::File::parse(&d.data[..]).ok());

    let text = elf::text_ranges(&elf);
    let mut functions = Interner::new();
    let mut files = Interner::new();
    let mut symbol_files = vec![&elf];
    symbol_files.extend(debug_elf.as_ref());
    let primary = elf::function_symbols(
        &symbol_files,
        elf::Tables::Primary,
        &text,
        &mut functions,
        &mut files,
    );
    let mut secondary = elf::function_symbols(
        &symbol_files,
        elf::Tables::Secondary,
        &text,
        &mut functions,
        &mut files,
    );
    // A Go binary without a symbol table (`-ldflags=-s`, or stripped)
    // still names its functions in .gopclntab (and, below, its lines). With a symbol table, that
    // names the same functions already.
    if secondary.is_empty() && elf.symbols().next().is_none() {
        secondary = gopclntab::function_symbols(&elf, &text, &mut functions);
    }

    // DWARF from the debug file when it has some, else from the ELF.
    let sections = match &debug_elf {
        Some(d) => {
            let s = dwarf::Sections::load(d)?;
            if s.has_info() {
                s
            } else {
                dwarf::Sections::load(&elf)?
            }
        }
        None => dwarf::Sections::load(&elf)?,
    };
    let mut info = sections.read(&text, &mut functions, &mut files)?;
    // A Go binary without DWARF lines (`-ldflags=-w`, or stripped) still
    // has the runtime's own file and line tables.
    if info.sequences.is_empty() {
        info.sequences = gopclntab::line_sequences(&elf, &text, &mut files);
    }
    let ranges = merge::ranges(&primary, &secondary, &info);
    let dwarf_bytes = sections.total_size();
    let used_debug = debug_elf.is_some();
    drop(sections);
    drop(debug_elf);
    Ok(Extracted {
        table: SymbolTable {
            functions: functions.into_values(),
            files: files.into_values(),
            ranges,
        },
        debug_file: debug.filter(|_| used_debug).map(|d| d.path),
        dwarf_bytes,
        skipped_units: info.skipped_units,
    })
}
