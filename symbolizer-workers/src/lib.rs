//! Symbolization for Kiln: extraction of ELF and DWARF symbols, the `ksym`
//! symbol file format, and (later) the symbolizer worker actors.
//!
//! [`extract`] reads an ELF file — its symbol tables, and the DWARF line
//! tables and inline trees of the file or of its separate debug file — into
//! a [`SymbolTable`]; [`ksym::encode`] writes that as a compact `ksym`
//! file, and [`Ksym`] answers lookups from the bytes in place.
//!
//! # Examples
//!
//! ```no_run
//! use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract, ksym};
//!
//! let extracted = extract(std::path::Path::new("/usr/bin/ls"), &ExtractOptions::default())?;
//! let bytes = ksym::encode(&extracted.table);
//! let symbols = Ksym::open(&bytes)?;
//! let mut frames = Vec::new();
//! symbols.lookup(0x4a20, &mut frames);
//! for frame in &frames {
//!     // Innermost (inlined) function first.
//!     println!("{} at {}:{}", frame.function.unwrap_or("??"), frame.file.unwrap_or("??"), frame.line);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod deb;
#[cfg(feature = "service")]
pub mod debuginfod;
mod extract;
mod fileid;
pub mod ksym;
#[cfg(feature = "service")]
mod service;
mod stored;
mod table;

pub use deb::{DebError, DebugMember, debug_files_in_deb};
pub use extract::{
    DebugDirs, ExtractError, ExtractOptions, Extracted, demangle, extract, extract_bytes,
};
pub use fileid::file_id;
pub use ksym::{Frame, Ksym, KsymError};
#[cfg(feature = "service")]
pub use service::{
    FileAddrs, Resolve, Resolved, ResolvedFrame, Symbolizer, SymbolizerConfig, SymbolsStored,
};
pub use stored::{StoredError, StoredSymbols, build_stored, decode_stored};
pub use table::{Function, Inline, LineRow, NONE, Range, SourceFile, SymbolTable, join_path};
