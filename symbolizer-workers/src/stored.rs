//! Symbol files as the object store keeps them: zstd-compressed ksym,
//! built from an ELF file by [`build_stored`] and read back, checked, by
//! [`decode_stored`]. Every way symbols arrive (upload, distro crawl,
//! debuginfod) goes through these two, so they are stored alike.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use crate::extract::{ExtractError, ExtractOptions, extract_bytes};
use crate::ksym::{self, Ksym, KsymError, KsymFile};

/// zstd level of stored ksym files: written once, read often.
const ZSTD_LEVEL: i32 = 9;
/// Largest decompressed ksym accepted: a hostile object cannot exhaust
/// memory.
const MAX_KSYM_BYTES: u64 = 1 << 30;
/// Largest ksym file taken from elsewhere (an agent's upload, another
/// region's global symbols): symbols already extracted, a fraction of the
/// ELF's size; the largest libraries' with DWARF run to a few hundred MiB.
pub const MAX_KSYM_UPLOAD: usize = 512 << 20;

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

/// Checks a ksym file made elsewhere whole (it is untrusted: every header,
/// record, index and string) and compresses it as [`build_stored`] does.
/// A file of an earlier ksym version is rewritten in the current one
/// first. [`StoredError::Ksym`] names what does not verify.
pub fn stored_from_ksym(data: &[u8]) -> Result<StoredSymbols, StoredError> {
    let current = ksym::upgrade(data)?;
    let symbols = Ksym::open(&current)?;
    symbols.verify()?;
    // Line rows and inline chains live in range bodies; files of names
    // only have none but the source files local symbols name (just the
    // section's padding when there are none of those either).
    let dwarf = symbols
        .section_sizes()
        .iter()
        .any(|&(name, len)| name == "bodies" && len > 16);
    let compressed = zstd::encode_all(&current[..], ZSTD_LEVEL)?;
    Ok(StoredSymbols {
        compressed,
        ranges: symbols.len(),
        dwarf,
    })
}

/// A stored symbol file, read back.
#[derive(Debug)]
pub struct DecodedSymbols {
    /// The file, ready for lookups.
    pub file: KsymFile,
    /// When the file was stored in an earlier ksym version: it compressed
    /// again in the current one, to store in its place so that the
    /// upgrade is done once.
    pub upgraded: Option<Vec<u8>>,
}

/// Decompresses a stored symbol file and opens it, checking its strings
/// whole ([`KsymFile`]). It is not verified again: [`build_stored`]
/// verified it before it was stored, and lookups in a file damaged since
/// read its damage as unknown names (verifying costs 20 ms on a 60 MB
/// file, a fifth of decompressing it). A file an earlier Kiln stored in
/// an earlier ksym version is [upgraded](ksym::upgrade) to the current
/// one: profiles keep their names without the ELF being uploaded again.
pub fn decode_stored(compressed: &[u8]) -> Result<DecodedSymbols, StoredError> {
    let mut bytes = Vec::new();
    zstd::Decoder::new(compressed)?
        .take(MAX_KSYM_BYTES)
        .read_to_end(&mut bytes)?;
    let mut upgraded = None;
    if let Cow::Owned(current) = ksym::upgrade(&bytes)? {
        upgraded = Some(zstd::encode_all(&current[..], ZSTD_LEVEL)?);
        bytes = current;
    }
    Ok(DecodedSymbols {
        file: KsymFile::new(bytes)?,
        upgraded,
    })
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
        let decoded = decode_stored(&stored.compressed).unwrap();
        assert_eq!(decoded.file.ksym().len(), stored.ranges);
        assert!(decoded.upgraded.is_none());
    }

    /// Guards the upgrade path of stored files: a version 1 file an
    /// earlier Kiln stored comes back in the current version, with the
    /// same answers (compared address by address on real programs in
    /// tests/extract.rs).
    #[test]
    fn stored_version_1_files_come_back_upgraded() {
        use crate::table::{Function, LineRow, Range, SourceFile, SymbolTable};
        let table = SymbolTable {
            functions: vec![Function {
                name: "main".into(),
                mangled: None,
            }],
            files: vec![SourceFile::from_path("/src/main.c")],
            ranges: vec![Range {
                start: 0x1000,
                end: 0x1040,
                function: 0,
                lines: vec![LineRow {
                    addr: 0x1010,
                    file: 0,
                    line: 7,
                }],
                inlines: vec![],
            }],
        };
        let stored = zstd::encode_all(&ksym::v1::encode(&table)[..], 1).unwrap();
        let decoded = decode_stored(&stored).unwrap();
        assert_eq!(decoded.file.bytes(), ksym::encode(&table));
        // What to store in its place: the current version, compressed.
        let again = zstd::decode_all(&decoded.upgraded.unwrap()[..]).unwrap();
        assert_eq!(again, ksym::encode(&table));
        let mut frames = Vec::new();
        let symbols = decoded.file.ksym();
        symbols.lookup(0x1020, &mut frames);
        assert_eq!(frames[0].function().as_deref(), Some("main"));
        assert_eq!(frames[0].path().as_deref(), Some("/src/main.c"));
        assert_eq!(frames[0].line, 7);
    }

    /// Every earlier version comes back upgraded, with the bytes to store
    /// in its place; the current version comes back as it is: stored
    /// files of versions 2 to 5 (the fixtures of tests/ksym.rs, which
    /// compares their answers) and of version 1 (above).
    #[test]
    fn stored_files_of_every_earlier_version_come_back_upgraded() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (version, fixture) in [
            (2, "v2/shapes.ksym.zst"),
            (3, "v3/rust-like.ksym.zst"),
            (4, "v4/rust-like.ksym.zst"),
            (5, "v5/rust-like.ksym.zst"),
        ] {
            let stored = std::fs::read(fixtures.join(fixture)).unwrap();
            let old = zstd::decode_all(&stored[..]).unwrap();
            assert_eq!(old[4..8], u32::to_le_bytes(version));
            assert_eq!(Ksym::open(&old).unwrap_err(), KsymError::Outdated(version));
            let decoded = decode_stored(&stored).unwrap();
            let upgraded = decoded.upgraded.expect("an earlier version is upgraded");
            let current = zstd::decode_all(&upgraded[..]).unwrap();
            assert_eq!(current, decoded.file.bytes(), "version {version}");
            assert_eq!(current[4..8], ksym::VERSION.to_le_bytes());
            // Stored in its place, it comes back as it is.
            let again = decode_stored(&upgraded).unwrap();
            assert!(again.upgraded.is_none(), "version {version}");
            assert_eq!(again.file.bytes(), current);
        }
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
