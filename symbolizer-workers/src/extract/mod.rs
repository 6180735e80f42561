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
    /// Function names only: read no DWARF and no Go line table, so the
    /// table has no lines or inline chains. Reads only the symbol tables
    /// (and a Go binary's `.gopclntab`), which is what a caller that
    /// bounds its memory (the agent, by default) can afford on a large
    /// binary.
    pub names_only: bool,
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
    let elf = parse(path, data)?;
    let debug = if options.no_debug_file {
        None
    } else {
        debugfile::find(path, &elf, &options.debug_dirs)
    };
    let debug_file = debug.as_ref().map(|d| (d.path.as_path(), &d.data[..]));
    extract_parsed(&elf, debug_file, options)
}

/// Like [`extract_bytes`], with the separate debug file (its path and
/// bytes) given rather than looked for: for callers that find and open
/// files their own way (the agent opens what other processes map, as
/// root, and trusts no path the ELF names). `options.debug_dirs` and
/// `options.no_debug_file` are not used. A debug file that does not parse
/// is as good as none.
pub fn extract_with_debug_file(
    path: &Path,
    data: &[u8],
    debug_file: Option<(&Path, &[u8])>,
    options: &ExtractOptions,
) -> Result<Extracted, ExtractError> {
    let elf = parse(path, data)?;
    extract_parsed(&elf, debug_file, options)
}

fn parse<'d>(path: &Path, data: &'d [u8]) -> Result<object::File<'d>, ExtractError> {
    let elf = object::File::parse(data).map_err(|source| ExtractError::Parse {
        path: path.into(),
        source,
    })?;
    if elf.format() != object::BinaryFormat::Elf {
        return Err(ExtractError::NotElf {
            path: path.into(),
            format: elf.format(),
        });
    }
    Ok(elf)
}

fn extract_parsed<'d>(
    elf: &object::File<'d>,
    debug: Option<(&Path, &'d [u8])>,
    options: &ExtractOptions,
) -> Result<Extracted, ExtractError> {
    // A debug file that does not parse is as good as none.
    let debug_elf = debug.and_then(|(_, data)| object::File::parse(data).ok());

    let text = elf::text_ranges(elf);
    let mut functions = Interner::new();
    let mut files = Interner::new();
    let mut symbol_files = vec![elf];
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
        secondary = gopclntab::function_symbols(elf, &text, &mut functions);
    }

    if options.names_only {
        let ranges = merge::ranges(&primary, &secondary, &dwarf::DwarfInfo::default());
        return Ok(Extracted {
            table: SymbolTable {
                functions: functions.into_values(),
                files: files.into_values(),
                ranges,
            },
            debug_file: debug
                .filter(|_| debug_elf.is_some())
                .map(|(path, _)| path.to_path_buf()),
            dwarf_bytes: 0,
            skipped_units: 0,
        });
    }

    // DWARF from the debug file when it has some, else from the ELF.
    let sections = match &debug_elf {
        Some(d) => {
            let s = dwarf::Sections::load(d)?;
            if s.has_info() {
                s
            } else {
                dwarf::Sections::load(elf)?
            }
        }
        None => dwarf::Sections::load(elf)?,
    };
    let mut info = sections.read(&text, &mut functions, &mut files)?;
    // A Go binary without DWARF lines (`-ldflags=-w`, or stripped) still
    // has the runtime's own file and line tables.
    if info.sequences.is_empty() {
        info.sequences = gopclntab::line_sequences(elf, &text, &mut files);
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
        debug_file: debug
            .filter(|_| used_debug)
            .map(|(path, _)| path.to_path_buf()),
        dwarf_bytes,
        skipped_units: info.skipped_units,
    })
}
