//! Code objects read from an interpreter's memory: a Python frame's
//! function name, file and first line, and the line table that gives the
//! line of each of its instructions.

use std::io;

use super::layout::{Layout, PyVersion};
use super::linetable::{LineTableFormat, line_for_offset};
use super::memory::Memory;

/// Longest name or file path read (characters); longer ones are cut.
const MAX_STR_CHARS: u64 = 4096;
/// Longest line table read: a function of thousands of lines has one of a
/// few KiB.
const MAX_LINE_TABLE: u64 = 1 << 20;

/// Why a code object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// Its memory (or a string's) could not be read: the process exited,
    /// or the address was not a code object.
    #[error("reading the code object's memory at {addr:#x}: {source}")]
    Memory {
        /// Where.
        addr: u64,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A string that is not a compact `str` (they all are since 3.12, and
    /// code objects' names always were), or has a bad kind.
    #[error("the str object at {0:#x} is not a compact string")]
    NotCompact(u64),
    /// A size field out of range.
    #[error("the object at {addr:#x} claims {len} items")]
    BadLength {
        /// Where.
        addr: u64,
        /// The size it claimed.
        len: i64,
    },
}

/// What a Python frame's code object says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// The qualified name (`Server.handle`; 3.10: the plain name).
    pub name: String,
    /// The source file (`co_filename`).
    pub file: String,
    /// `co_firstlineno`.
    pub first_line: u32,
    line_table: Vec<u8>,
    format: LineTableFormat,
    /// Bytes from the code object's start to its bytecode (3.11+), which
    /// the eBPF side counts from; 0 for 3.10, where it counts from the
    /// bytecode.
    bytecode_at: u32,
}

impl CodeInfo {
    /// Reads the code object at `code` laid out as `layout` says.
    pub fn read(mem: &dyn Memory, layout: &Layout, code: u64) -> Result<CodeInfo, CodeError> {
        let ptr = |offset: u32| {
            let at = code.wrapping_add(u64::from(offset));
            mem.u64_at(at)
                .map_err(|source| CodeError::Memory { addr: at, source })
        };
        let name_field = layout.code_qualname.unwrap_or(layout.code_name);
        let name = read_str(mem, layout, ptr(name_field)?)?;
        let file = read_str(mem, layout, ptr(layout.code_filename)?)?;
        let at = code.wrapping_add(u64::from(layout.code_firstlineno));
        let first_line = mem
            .u32_at(at)
            .map_err(|source| CodeError::Memory { addr: at, source })?;
        let line_table = read_bytes(mem, layout, ptr(layout.code_linetable)?)?;
        let pep626 = layout.version
            < PyVersion {
                major: 3,
                minor: 11,
            };
        Ok(CodeInfo {
            name,
            file,
            first_line,
            line_table,
            format: if pep626 {
                LineTableFormat::Pep626
            } else {
                LineTableFormat::Locations
            },
            bytecode_at: if pep626 { 0 } else { layout.code_bytecode },
        })
    }

    /// The line of the instruction the eBPF side recorded as `instr` (code
    /// units from where it counts); the first line when the table has none
    /// for it.
    pub fn line(&self, instr: u16) -> u32 {
        let offset = (u32::from(instr) * 2).saturating_sub(self.bytecode_at);
        line_for_offset(self.format, &self.line_table, self.first_line, offset)
            .unwrap_or(self.first_line)
    }
}

/// A compact `str` object's text (`PyASCIIObject` / `PyCompactUnicodeObject`).
pub fn read_str(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<String, CodeError> {
    let memory = |at: u64, source| CodeError::Memory { addr: at, source };
    let state_at = addr.wrapping_add(u64::from(layout.unicode_state));
    let state = mem.u32_at(state_at).map_err(|e| memory(state_at, e))?;
    let len_at = addr.wrapping_add(u64::from(layout.unicode_length));
    let len = mem.u64_at(len_at).map_err(|e| memory(len_at, e))? as i64;
    if !(0..=1 << 30).contains(&len) {
        return Err(CodeError::BadLength { addr, len });
    }
    let kind = (state >> layout.unicode_kind_shift) & 7;
    let compact = state >> layout.unicode_compact_bit & 1 == 1;
    let ascii = state >> layout.unicode_ascii_bit & 1 == 1;
    if !compact || !matches!(kind, 1 | 2 | 4) {
        return Err(CodeError::NotCompact(addr));
    }
    let chars = (len as u64).min(MAX_STR_CHARS);
    let data = addr.wrapping_add(u64::from(if ascii {
        layout.unicode_ascii_data
    } else {
        layout.unicode_compact_data
    }));
    let mut buf = vec![0u8; (chars * u64::from(kind)) as usize];
    mem.read(data, &mut buf).map_err(|e| memory(data, e))?;
    Ok(match kind {
        // Latin-1 (ASCII included): each byte is its code point.
        1 => buf.iter().map(|&b| char::from(b)).collect(),
        2 => char::decode_utf16(
            buf.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        _ => buf
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
    })
}

/// A `bytes` object's contents.
pub fn read_bytes(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<Vec<u8>, CodeError> {
    let size_at = addr.wrapping_add(u64::from(layout.bytes_size));
    let len = mem.u64_at(size_at).map_err(|source| CodeError::Memory {
        addr: size_at,
        source,
    })? as i64;
    if !(0..=MAX_LINE_TABLE as i64).contains(&len) {
        return Err(CodeError::BadLength { addr, len });
    }
    let data = addr.wrapping_add(u64::from(layout.bytes_data));
    let mut buf = vec![0u8; len as usize];
    mem.read(data, &mut buf)
        .map_err(|source| CodeError::Memory { addr: data, source })?;
    Ok(buf)
}
