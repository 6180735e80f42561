//! Code objects read from an interpreter's memory: a Python frame's
//! function name, file and first line, and the line table that gives the
//! line of each of its instructions.

use std::io;

use super::layout::{Layout, PyVersion};
use super::linetable::{LineTableFormat, line_for_offset};
use crate::memory::Memory;

/// Longest name or file path read (characters); longer ones are cut.
const MAX_STR_CHARS: u64 = 4096;
/// Longest line table read: a function of thousands of lines has one of a
/// few KiB; a process cannot make the agent hold more than this per code
/// object it shows.
const MAX_LINE_TABLE: u64 = 256 << 10;

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
    /// Bytes it holds: what the namer's cache counts against its budget.
    pub fn size(&self) -> usize {
        size_of::<CodeInfo>() + self.name.len() + self.file.len() + self.line_table.len()
    }

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
pub(super) fn read_str(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<String, CodeError> {
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
pub(super) fn read_bytes(
    mem: &dyn Memory,
    layout: &Layout,
    addr: u64,
) -> Result<Vec<u8>, CodeError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryImage;
    use crate::python::layout::known_layout;

    const CODE: u64 = 0x10_0000;
    const NAME: u64 = 0x20_0000;
    const FILE: u64 = 0x21_0000;
    const TABLE: u64 = 0x22_0000;

    /// A compact `str` as `layout` lays it out: ASCII, or Latin-1/UCS-2.
    fn put_str(img: &mut MemoryImage, layout: &Layout, at: u64, text: &str) {
        let ascii = text.is_ascii();
        let kind: u32 = if text.chars().all(|c| (c as u32) < 256) {
            1
        } else {
            2
        };
        let state = kind << layout.unicode_kind_shift
            | 1 << layout.unicode_compact_bit
            | u32::from(ascii) << layout.unicode_ascii_bit;
        img.put_u32(at + u64::from(layout.unicode_state), state);
        img.put_u64(
            at + u64::from(layout.unicode_length),
            text.chars().count() as u64,
        );
        let data: Vec<u8> = match kind {
            1 => text.chars().map(|c| c as u8).collect(),
            _ => text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        };
        let data_at = if ascii {
            layout.unicode_ascii_data
        } else {
            layout.unicode_compact_data
        };
        img.put(at + u64::from(data_at), &data);
    }

    /// A code object of `layout`'s version named `name` in `file`, first
    /// line 40, whose first four code units are on line 42.
    fn image(layout: &Layout, name: &str, file: &str) -> MemoryImage {
        let mut img = MemoryImage::new();
        let name_field = layout.code_qualname.unwrap_or(layout.code_name);
        img.put_u64(CODE + u64::from(name_field), NAME);
        img.put_u64(CODE + u64::from(layout.code_filename), FILE);
        img.put_u32(CODE + u64::from(layout.code_firstlineno), 40);
        img.put_u64(CODE + u64::from(layout.code_linetable), TABLE);
        put_str(&mut img, layout, NAME, name);
        put_str(&mut img, layout, FILE, file);
        let table: &[u8] = if layout.version
            < (PyVersion {
                major: 3,
                minor: 11,
            }) {
            // PEP 626: 8 bytes of bytecode on line first + 2.
            &[8, 2]
        } else {
            // Locations: one "no columns" entry of 4 code units, line +2.
            &[0x80 | 13 << 3 | 3, 4]
        };
        img.put_u64(TABLE + u64::from(layout.bytes_size), table.len() as u64);
        img.put(TABLE + u64::from(layout.bytes_data), table);
        img
    }

    /// The `instr` the eBPF side records for code unit `unit` of the
    /// bytecode.
    fn instr(layout: &Layout, unit: u16) -> u16 {
        if layout.version
            < (PyVersion {
                major: 3,
                minor: 11,
            })
        {
            unit
        } else {
            (layout.code_bytecode / 2) as u16 + unit
        }
    }

    // Guards naming frames of every supported version without its
    // interpreter: a code object laid out by the version's offsets.
    #[test]
    fn code_objects_of_every_version_are_named() {
        for minor in 10..=14 {
            let version = PyVersion { major: 3, minor };
            let layout =
                known_layout(version).unwrap_or_else(|| panic!("no layout for {version:?}"));
            for (name, file) in [("Server.handle", "/srv/app.py"), ("größe", "/srv/名前.py")] {
                let img = image(&layout, name, file);
                let info = CodeInfo::read(&img, &layout, CODE)
                    .unwrap_or_else(|e| panic!("3.{minor}: {e}"));
                assert_eq!(
                    (info.name.as_str(), info.file.as_str()),
                    (name, file),
                    "3.{minor}"
                );
                assert_eq!(info.first_line, 40);
                assert_eq!(
                    info.line(instr(&layout, 2)),
                    42,
                    "3.{minor}: inside the table"
                );
                assert_eq!(
                    info.line(instr(&layout, 9)),
                    40,
                    "3.{minor}: past it, the first line"
                );
            }
        }
    }

    #[test]
    fn unreadable_and_corrupt_objects_are_errors() {
        let layout = known_layout(PyVersion {
            major: 3,
            minor: 12,
        })
        .unwrap();
        let img = image(&layout, "f", "a.py");
        assert!(matches!(
            CodeInfo::read(&img, &layout, CODE + 0x1000),
            Err(CodeError::Memory { .. })
        ));
        // A length no string has.
        let mut bad = img.clone();
        bad.put_u64(NAME + u64::from(layout.unicode_length), u64::MAX);
        assert!(matches!(
            CodeInfo::read(&bad, &layout, CODE),
            Err(CodeError::BadLength { .. })
        ));
        // Not compact.
        let mut bad = img;
        bad.put_u32(
            NAME + u64::from(layout.unicode_state),
            1 << layout.unicode_kind_shift,
        );
        assert!(matches!(
            CodeInfo::read(&bad, &layout, CODE),
            Err(CodeError::NotCompact(_))
        ));
    }
}
