//! Symbolization for Kiln: extraction of ELF and DWARF symbols, the `ksym`
//! symbol file format, where symbols come from, and the symbolizer worker.
//!
//! [`extract`] reads an ELF file — its symbol tables, the DWARF line
//! tables and inline trees of the file or of its separate debug file, and
//! a Go binary's `.gopclntab` — into a [`SymbolTable`]; [`ksym::encode`]
//! writes that as a compact `ksym` file, and [`Ksym`] answers lookups from
//! the bytes in place. [`build_stored`] and [`decode_stored`] are the
//! object store's form of it (zstd-compressed, verified when read).
//!
//! Symbols arrive by upload, from Debian debug packages
//! ([`debug_files_in_deb`], for `kiln symbols crawl`) and from debuginfod
//! servers ([`debuginfod`]). The [`Symbolizer`] actor (feature `service`,
//! on by default) loads and caches stored symbol files and answers batched
//! [`Resolve`] lookups, fetching from debuginfod what is missing.
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
//!     println!("{} at {}:{}", frame.function().as_deref().unwrap_or("??"), frame.file().unwrap_or("??"), frame.line);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "client")]
mod client;
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

#[cfg(feature = "client")]
pub use client::{SymbolBody, SymbolClient, SymbolClientError, SymbolScope};
pub use deb::{DebError, DebugMember, debug_files_in_deb, debug_files_in_deb_reader};
pub use extract::{
    DebugDirs, ExtractError, ExtractOptions, Extracted, demangle, extract, extract_bytes,
    extract_with_debug_file,
};
pub use fileid::file_id;
pub use ksym::{Frame, Ksym, KsymError, KsymFile};
#[cfg(feature = "service")]
pub use service::{
    FileAddrs, FrameAddr, Resolve, Resolved, ResolvedFrame, SymbolizeError, Symbolizer,
    SymbolizerConfig, SymbolsStored, resolve_chains, symbolize_frames,
};
pub use stored::{
    DecodedSymbols, MAX_KSYM_UPLOAD, StoredError, StoredSymbols, build_stored, decode_stored,
    stored_from_ksym,
};
pub use table::{Function, Inline, LineRow, NONE, Range, SourceFile, SymbolTable, join_path};
