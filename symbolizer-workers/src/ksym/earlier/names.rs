//! The function and file records of versions 1 to 5, read whole: as
//! version 6's (see `ksym::names`), but with every string in the blob,
//! mangled names and hash texts too. Version 1 set no flags in them.

use crate::extract::demangle::demangle;
use crate::ksym::fields::{records, u32_at};
use crate::ksym::names::{DEMANGLED, DERIVED, HASH_IN_RECORD};
use crate::ksym::{KsymError, rust_legacy};
use crate::table::{Function, NONE, SourceFile};

/// The string whose (offset, len) is at byte `at` of `record` (record
/// `index` of those of `what`): `None` for none, an error when it does
/// not lie within `blob` or is not UTF-8. The top bit of a length is a
/// flag, not part of it.
fn string<'a>(
    blob: &'a [u8],
    record: &[u8; 16],
    at: usize,
    (what, index): (&'static str, usize),
) -> Result<Option<&'a str>, KsymError> {
    let offset = u32_at(record, at);
    if offset == NONE {
        return Ok(None);
    }
    let len = u32_at(record, at + 4) & !(1 << 31);
    let bytes = (offset as usize)
        .checked_add(len as usize)
        .and_then(|end| blob.get(offset as usize..end))
        .ok_or(KsymError::BadIndex { what, index })?;
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| KsymError::BadUtf8)
}

/// The functions of the records `funcs`, with their names as the readers
/// of those versions gave them.
pub(super) fn functions(funcs: &[u8], blob: &[u8]) -> Result<Vec<Function>, KsymError> {
    let function = |index: usize, record: &[u8; 16]| {
        let what = ("function", index);
        let flags = u32_at(record, 4);
        let hash = flags & HASH_IN_RECORD != 0;
        // The mangled name as kept: whole, or the hash text (DERIVED).
        let stored = match hash {
            true => None,
            false => string(blob, record, 8, what)?,
        };
        let name = match flags & DEMANGLED {
            0 => string(blob, record, 0, what)?.map(str::to_owned),
            // Not kept (version 5): demangling the mangled name gives it.
            _ => stored.map(|m| demangle(m).unwrap_or_else(|| m.to_owned())),
        };
        let name = name.ok_or(KsymError::BadIndex {
            what: "function",
            index,
        })?;
        let mangled = match (hash, stored) {
            (true, _) => {
                let hash = u64::from(u32_at(record, 8)) | u64::from(u32_at(record, 12)) << 32;
                Some(rust_legacy::mangle(&name, &format!("{hash:016x}")))
            }
            (false, Some(text)) if u32_at(record, 12) & DERIVED != 0 => {
                Some(rust_legacy::mangle_derived(&name, text))
            }
            (false, stored) => stored.map(str::to_owned),
        };
        Ok(Function { name, mangled })
    };
    records::<16>(funcs)
        .iter()
        .enumerate()
        .map(|(index, record)| function(index, record))
        .collect()
}

/// The source files of the records `files`.
pub(super) fn files(files: &[u8], blob: &[u8]) -> Result<Vec<SourceFile>, KsymError> {
    let file = |index: usize, record: &[u8; 16]| {
        let string = |at| {
            string(blob, record, at, ("file", index))?
                .map(str::to_owned)
                .ok_or(KsymError::BadIndex {
                    what: "file",
                    index,
                })
        };
        Ok(SourceFile {
            dir: string(0)?,
            name: string(8)?,
        })
    };
    records::<16>(files)
        .iter()
        .enumerate()
        .map(|(index, record)| file(index, record))
        .collect()
}
