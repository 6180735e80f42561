//! Symbol files as the object store keeps them: zstd-compressed ksym,
//! built from an ELF file by [`build_stored`] and read back, checked, by
//! [`decode_stored`]. Every way symbols arrive (upload, distro crawl,
//! debuginfod) goes through these two, so they are stored alike.

use std::io::Read;
use std::path::Path;

use crate::extract::{ExtractError, ExtractOptions, extract_bytes};
use crate::ksym::{self, Ksym, KsymError};

/// zstd level of stored ksym files: written once, read often.
const ZSTD_LEVEL: i32 = 9;
/// Largest decompressed ksym accepted: a hostile object cannot exhaust
/// memory.
const MAX_KSYM_BYTES: u64 = 1 << 30;

/// Why a symbol file could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    /// The ELF file's symbols could not be extracted.
    #[error(transparent)]
    Extract(#[from] ExtractError),
    /// The ksym bytes do not read back (a bug when just written, damage
    /// when read from the store).
    #[error("symbol file does not verify")]
    Ksym(#[from] KsymError),
    /// zstd failed, or the data is not zstd, or too large.
    #[error("symbol file compression")]
    Zstd(#[from] std::io::Error),
}

/// A symbol file ready to store.
#[derive(Debug)]
pub struct StoredSymbols {
    /// zstd-compressed ksym.
    pub compressed: Vec<u8>,
    /// Address ranges in it.
    pub ranges: usize,
    /// Whether the ELF had DWARF (else function names only).
    pub dwarf: bool,
}

/// Extracts the symbols of the ELF `data` (no separate debug file is
/// looked for: what is given is all that goes in) and compresses their
/// ksym. `name` names the file in errors.
pub fn build_stored(name: &Path, data: &[u8]) -> Result<StoredSymbols, StoredError> {
    let options = ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    };
    let extracted = extract_bytes(name, data, &options)?;
    let bytes = ksym::encode(&extracted.table);
    let symbols = Ksym::open(&bytes)?;
    symbols.verify()?;
    let compressed = zstd::encode_all(&bytes[..], ZSTD_LEVEL)?;
    Ok(StoredSymbols {
        compressed,
        ranges: symbols.len(),
        dwarf: extracted.dwarf_bytes > 0,
    })
}

/// Decompresses a stored symbol file and verifies it in full, so that
/// lookups in it cannot fail.
pub fn decode_stored(compressed: &[u8]) -> Result<Vec<u8>, StoredError> {
    let mut bytes = Vec::new();
    zstd::Decoder::new(compressed)?
        .take(MAX_KSYM_BYTES)
        .read_to_end(&mut bytes)?;
    Ksym::open(&bytes)?.verify()?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_executable_round_trips() {
        let path = std::env::current_exe().unwrap();
        let data = std::fs::read(&path).unwrap();
        let stored = build_stored(&path, &data).unwrap();
        assert!(stored.ranges > 0);
        let bytes = decode_stored(&stored.compressed).unwrap();
        assert_eq!(Ksym::open(&bytes).unwrap().len(), stored.ranges);
    }

    #[test]
    fn damaged_files_are_refused() {
        assert!(matches!(
            decode_stored(b"not zstd"),
            Err(StoredError::Zstd(_))
        ));
        let not_ksym = zstd::encode_all(&b"KSYX and more"[..], 1).unwrap();
        assert!(matches!(
            decode_stored(&not_ksym),
            Err(StoredError::Ksym(_))
        ));
        assert!(matches!(
            build_stored(Path::new("junk"), b"junk"),
            Err(StoredError::Extract(_))
        ));
    }
}
