//! Function names, source files and lines of Go binaries from
//! `.gopclntab`, the table the Go runtime itself symbolizes with (and
//! `go tool addr2line`): it survives `go build -ldflags=-s -w` and
//! `strip`, which leave a Go binary without `.symtab` or DWARF.
//!
//! Layout of Go 1.18 and later (magic `0xfffffff0`; `0xfffffff1` from Go
//! 1.20, same layout), all little-endian here:
//!
//! ```text
//! header   magic u32 | 0 u8 | 0 u8 | min instruction size u8 | pointer size u8
//!          then pointer-sized: nfunc | nfiles | textStart | funcnameOffset
//!          | cuOffset | filetabOffset | pctabOffset | pclnOffset
//! functab  at pclnOffset: (nfunc + 1) × (entryOff u32 | funcOff u32), entry
//!          offsets from textStart, ascending; the last entry is the end of text
//! _func    at pclnOffset + funcOff: entryOff u32 | nameOff i32 | args u32
//!          | deferreturn u32 | pcsp u32 | pcfile u32 | pcln u32 | npcdata u32
//!          | cuOffset u32 | …
//! names    at funcnameOffset + nameOff: NUL-terminated
//! cutab    at cuOffset: u32 per (compilation unit, file): offsets into filetab
//! filetab  at filetabOffset: NUL-terminated paths
//! pc-value at pctabOffset + pcfile (or + pcln), 0: no table. Pairs of
//!          (value delta: zig-zag varint, pc delta: varint × min instruction
//!          size) from value -1 at the function's entry, until a value delta
//!          byte of 0; each value holds from the pc before its pc delta.
//!          pcfile values index the function's unit's files in cutab.
//! ```
//!
//! The function of an address is the outermost one (the table's inline
//! trees are not read), and its file and line are those of the code there,
//! inlined or not: what `go tool addr2line` answers.
//!
//! Anything out of bounds or out of order ends the table early: a damaged
//! table gives fewer names and lines, never an error.

use std::collections::HashMap;

use object::{Object, ObjectSection};

use super::demangle;
use super::elf::{Symbol, in_text};
use super::intern::Interner;
use crate::table::{Function, LineRow, NONE, SourceFile};

const MAGIC_GO_1_18: u32 = 0xffff_fff0;
const MAGIC_GO_1_20: u32 = 0xffff_fff1;

/// Offsets of the `_func` fields read here (the same in Go 1.18 to 1.24).
const FUNC_NAME_OFF: usize = 4;
const FUNC_PCFILE: usize = 20;
const FUNC_PCLN: usize = 24;
const FUNC_CU_OFFSET: usize = 32;

/// The functions `.gopclntab` names, sorted, or none when the file has no
/// such table of a layout this reads.
pub(super) fn function_symbols(
    file: &object::File<'_>,
    text: &[(u64, u64)],
    functions: &mut Interner<Function>,
) -> Vec<Symbol> {
    let Some(table) = Table::of(file) else {
        return Vec::new();
    };
    let mut out: Vec<Symbol> = Vec::new();
    for func in table.functions() {
        if !in_text(text, func.start, func.start.saturating_add(1)) {
            continue;
        }
        out.push(Symbol {
            start: func.start,
            end: func.end,
            function: functions.intern(demangle::function(func.name)),
            file: NONE,
        });
    }
    out
}

/// One line-table sequence per function `.gopclntab` describes (rows of
/// file and line from its pcfile and pcln tables, ending with a row of
/// file [`NONE`] at its end, as DWARF sequences do), or none when the file
/// has no such table of a layout this reads.
pub(super) fn line_sequences(
    file: &object::File<'_>,
    text: &[(u64, u64)],
    files: &mut Interner<SourceFile>,
) -> Vec<Vec<LineRow>> {
    let Some(table) = Table::of(file) else {
        return Vec::new();
    };
    // cutab index → interned file: a unit's files are shared by all its
    // functions, so each path is read and interned once.
    let mut file_index: HashMap<usize, u32> = HashMap::new();
    let mut out = Vec::new();
    for func in table.functions() {
        if !in_text(text, func.start, func.start.saturating_add(1)) {
            continue;
        }
        let Some(rows) = table.line_rows(&func, &mut |slot| {
            *file_index.entry(slot).or_insert_with(|| {
                table
                    .file_name(slot)
                    .map_or(NONE, |path| files.intern(SourceFile::from_path(path)))
            })
        }) else {
            continue;
        };
        out.push(rows);
    }
    out
}

/// A function of the table: `[start, end)`, its name, and where its
/// `_func` record is.
struct Func<'a> {
    start: u64,
    end: u64,
    name: &'a str,
    record: usize,
}

/// A parsed header: where the parts of the table are.
struct Table<'a> {
    data: &'a [u8],
    nfunc: usize,
    text_start: u64,
    /// Bytes per pc delta unit (the minimum instruction size).
    quantum: u64,
    funcnames: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
}

impl<'a> Table<'a> {
    /// The `.gopclntab` of `file`, when it has one of a layout this reads.
    fn of(file: &'a object::File<'_>) -> Option<Table<'a>> {
        if !file.is_little_endian() {
            return None;
        }
        let data = file.section_by_name(".gopclntab")?.data().ok()?;
        let text_section = file.section_by_name(".text").map(|s| s.address());
        Table::parse(data, text_section)
    }

    /// `text_section`: the `.text` address, used when the header's text
    /// start is 0 (left to a relocation).
    fn parse(data: &'a [u8], text_section: Option<u64>) -> Option<Table<'a>> {
        let magic = read_u32(data, 0)?;
        if magic != MAGIC_GO_1_18 && magic != MAGIC_GO_1_20 {
            return None;
        }
        let &[pad1, pad2, min_lc, ptr] = data.get(4..8)? else {
            return None;
        };
        if pad1 != 0 || pad2 != 0 || !matches!(min_lc, 1 | 2 | 4) || !matches!(ptr, 4 | 8) {
            return None;
        }
        let word = |i: usize| read_word(data, 8 + i * usize::from(ptr), ptr);
        let nfunc = usize::try_from(word(0)?).ok()?;
        let text_start = match word(2)? {
            0 => text_section?,
            t => t,
        };
        let offset = |i: usize| usize::try_from(word(i)?).ok();
        let funcnames = offset(3)?;
        let pcln = offset(7)?;
        // The function table alone needs 8 bytes a function: a count
        // larger than the data can hold is damage.
        if funcnames >= data.len() || pcln >= data.len() || nfunc > (data.len() - pcln) / 8 {
            return None;
        }
        Some(Table {
            data,
            nfunc,
            text_start,
            quantum: u64::from(min_lc),
            funcnames,
            // Out-of-range offsets of these only lose files and lines:
            // every read below is checked.
            cutab: offset(4)?,
            filetab: offset(5)?,
            pctab: offset(6)?,
            pcln,
        })
    }

    /// Each function, in address order, until the first entry that does
    /// not read.
    fn functions(&self) -> impl Iterator<Item = Func<'a>> + '_ {
        let entry = move |i: usize| -> Option<(u32, u32)> {
            let at = self.pcln.checked_add(i.checked_mul(8)?)?;
            Some((read_u32(self.data, at)?, read_u32(self.data, at + 4)?))
        };
        (0..self.nfunc)
            .map_while(move |i| {
                let (entry_off, func_off) = entry(i)?;
                let (next_off, _) = entry(i + 1)?;
                if next_off < entry_off {
                    return None;
                }
                let record = self.pcln.checked_add(usize::try_from(func_off).ok()?)?;
                let name_off = self.field(record, FUNC_NAME_OFF)? as i32;
                let name = self.name(usize::try_from(name_off).ok()?)?;
                let start = self.text_start.checked_add(u64::from(entry_off))?;
                let end = self.text_start.checked_add(u64::from(next_off))?;
                Some(Func {
                    start,
                    end,
                    name,
                    record,
                })
            })
            .filter(|f| f.start < f.end && !f.name.is_empty())
    }

    /// The `u32` field at `offset` of the `_func` record at `record`.
    fn field(&self, record: usize, offset: usize) -> Option<u32> {
        read_u32(self.data, record.checked_add(offset)?)
    }

    /// The line rows of `func`, its end row last; `file_of` turns a cutab
    /// slot into a file index. `None` when it has no line table.
    fn line_rows(
        &self,
        func: &Func<'_>,
        file_of: &mut dyn FnMut(usize) -> u32,
    ) -> Option<Vec<LineRow>> {
        let lines = self.pc_values(self.field(func.record, FUNC_PCLN)?, func)?;
        // Without a file table every row still has its line.
        let file_values = self
            .field(func.record, FUNC_PCFILE)
            .and_then(|at| self.pc_values(at, func))
            .unwrap_or_default();
        let cu = self.field(func.record, FUNC_CU_OFFSET).map(|c| c as usize);
        let mut rows: Vec<LineRow> = Vec::with_capacity(lines.len() + 1);
        let (mut li, mut fi) = (0, 0);
        let mut pc = func.start;
        while pc < func.end {
            // Advance both tables to the value in effect at `pc`.
            while li + 1 < lines.len() && lines[li + 1].0 <= pc {
                li += 1;
            }
            while fi + 1 < file_values.len() && file_values[fi + 1].0 <= pc {
                fi += 1;
            }
            let line = lines.get(li).filter(|v| v.0 <= pc).map_or(0, |v| v.1);
            let file = file_values
                .get(fi)
                .filter(|v| v.0 <= pc)
                .and_then(|v| {
                    let fileno = usize::try_from(v.1).ok()?;
                    cu?.checked_add(fileno)
                })
                .map_or(NONE, &mut *file_of);
            let line = u32::try_from(line).unwrap_or(0);
            if rows.last().is_none_or(|r| r.file != file || r.line != line) {
                rows.push(LineRow {
                    addr: pc,
                    file,
                    line,
                });
            }
            // The next pc where either table changes.
            let next = [lines.get(li + 1), file_values.get(fi + 1)]
                .into_iter()
                .flatten()
                .map(|v| v.0)
                .filter(|&next| next > pc)
                .min();
            match next {
                Some(next) => pc = next,
                None => break,
            }
        }
        rows.push(LineRow {
            addr: func.end,
            file: NONE,
            line: 0,
        });
        (rows.len() >= 2).then_some(rows)
    }

    /// The pc-value table at `offset` of the pctab for `func`: `(pc,
    /// value)`, each value holding from its pc to the next one's (the
    /// last to the function's end), pcs ascending within the function.
    /// `None` for offset 0 (no table).
    fn pc_values(&self, offset: u32, func: &Func<'_>) -> Option<Vec<(u64, i32)>> {
        if offset == 0 {
            return None;
        }
        let mut p = self
            .data
            .get(self.pctab.checked_add(usize::try_from(offset).ok()?)?..)?;
        let mut out = Vec::new();
        let (mut pc, mut value) = (func.start, -1i32);
        while pc < func.end {
            let Some((value_delta, rest)) = read_varint(p) else {
                break;
            };
            // A zero byte ends the table (except as the first delta).
            if value_delta == 0 && !out.is_empty() {
                break;
            }
            let Some((pc_delta, rest)) = read_varint(rest) else {
                break;
            };
            p = rest;
            // Zig-zag: the low bit is the sign.
            value = value
                .wrapping_add(((value_delta >> 1) ^ 0u32.wrapping_sub(value_delta & 1)) as i32);
            let next = pc.saturating_add(u64::from(pc_delta).saturating_mul(self.quantum));
            if next > pc {
                out.push((pc, value));
            }
            pc = next;
        }
        // Past the table's end (the function's alignment padding) the
        // value is unknown, as for the runtime: -1.
        if pc < func.end {
            out.push((pc, -1));
        }
        Some(out)
    }

    /// The path of the file in cutab slot `slot`, when it reads.
    fn file_name(&self, slot: usize) -> Option<&'a str> {
        let at = self.cutab.checked_add(slot.checked_mul(4)?)?;
        let offset = read_u32(self.data, at)?;
        if offset == u32::MAX {
            return None;
        }
        let rest = self
            .data
            .get(self.filetab.checked_add(usize::try_from(offset).ok()?)?..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..len])
            .ok()
            .filter(|p| !p.is_empty())
    }

    /// The NUL-terminated name at `offset` in the name table.
    fn name(&self, offset: usize) -> Option<&'a str> {
        let rest = self.data.get(self.funcnames.checked_add(offset)?..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..len]).ok()
    }
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// A Go varint (LEB128, at most 5 bytes for a `u32`) and what follows it.
fn read_varint(p: &[u8]) -> Option<(u32, &[u8])> {
    let mut value = 0u32;
    for (i, &byte) in p.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &p[i + 1..]));
        }
    }
    None
}

fn read_word(data: &[u8], at: usize, size: u8) -> Option<u64> {
    match size {
        4 => read_u32(data, at).map(u64::from),
        _ => {
            let bytes = data.get(at..at.checked_add(8)?)?;
            Some(u64::from_le_bytes(bytes.try_into().ok()?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.20-style table with 64-bit words: two functions at text
    /// start 0x401000, `main.main` then `main.helper`, text ending at +0x60.
    fn hand_built(magic: u32) -> Vec<u8> {
        let header = 8 + 8 * 8;
        let names = b"main.main\0main.helper\0";
        let funcnames = header;
        let pcln = funcnames + names.len();
        let mut d = Vec::new();
        d.extend(magic.to_le_bytes());
        d.extend([0, 0, 1, 8]);
        for word in [2u64, 0, 0x401000, funcnames as u64, 0, 0, 0, pcln as u64] {
            d.extend(word.to_le_bytes());
        }
        d.extend(names);
        // functab: 3 entries, then two _func records at pcln-relative
        // offsets 24 and 32.
        for (entry, func) in [(0u32, 24u32), (0x40, 32), (0x60, 0)] {
            d.extend(entry.to_le_bytes());
            d.extend(func.to_le_bytes());
        }
        for (entry, name) in [(0u32, 0i32), (0x40, 10)] {
            d.extend(entry.to_le_bytes());
            d.extend(name.to_le_bytes());
        }
        d
    }

    fn functions(data: &[u8]) -> Vec<(u64, u64, String)> {
        match Table::parse(data, None) {
            Some(t) => t
                .functions()
                .map(|f| (f.start, f.end, f.name.to_owned()))
                .collect(),
            None => Vec::new(),
        }
    }

    #[test]
    fn hand_built_table_names_its_functions() {
        for magic in [MAGIC_GO_1_18, MAGIC_GO_1_20] {
            assert_eq!(
                functions(&hand_built(magic)),
                [
                    (0x401000, 0x401040, "main.main".to_owned()),
                    (0x401040, 0x401060, "main.helper".to_owned()),
                ]
            );
        }
    }

    #[test]
    fn other_versions_and_damage_give_no_or_fewer_names() {
        // Go 1.16's magic: a layout this does not read.
        assert!(functions(&hand_built(0xffff_fffa)).is_empty());
        let good = hand_built(MAGIC_GO_1_20);
        // Every truncation: never a panic, never more than the whole.
        for len in 0..good.len() {
            assert!(functions(&good[..len]).len() <= 2);
        }
        // A function count far beyond the data.
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(functions(&huge).is_empty());
        // Entries out of order end the table.
        let mut unordered = good.clone();
        let pcln = 8 + 64 + b"main.main\0main.helper\0".len();
        unordered[pcln + 8..pcln + 12].copy_from_slice(&0x80u32.to_le_bytes());
        assert_eq!(functions(&unordered).len(), 1);
    }

    /// A function at 0x1000..0x1010 with hand-encoded pc-value tables:
    /// lines 10, 12, 10 and files x.go, y.go changing at other pcs.
    /// Laid out as `lines_table` expects: pad, pcln, pcfile, cutab,
    /// filetab, `_func` record.
    fn with_lines() -> Vec<u8> {
        let mut d = vec![0u8]; // offset 0 of the pctab means "no table"
        let pcln = d.len();
        // +11 → 10 for 4 bytes, +2 → 12 for 8, -2 → 10 for 4, end.
        d.extend([22, 4, 4, 8, 3, 4, 0]);
        let pcfile = d.len();
        // +1 → file 0 for 8 bytes, +1 → file 1 for 8, end.
        d.extend([2, 8, 2, 8, 0]);
        let cutab = d.len();
        d.extend(0u32.to_le_bytes());
        d.extend(7u32.to_le_bytes());
        let filetab = d.len();
        d.extend(b"a/x.go\0b/y.go\0");
        let record = d.len();
        d.extend([0u8; 36]);
        d[record + FUNC_PCFILE..][..4].copy_from_slice(&(pcfile as u32).to_le_bytes());
        d[record + FUNC_PCLN..][..4].copy_from_slice(&(pcln as u32).to_le_bytes());
        assert_eq!((cutab, filetab, record), (13, 21, 35));
        d
    }

    fn lines_table(data: &[u8]) -> Option<Vec<(u64, Option<String>, u32)>> {
        let cutab = 1 + 7 + 5;
        let table = Table {
            data,
            nfunc: 1,
            text_start: 0x1000,
            quantum: 1,
            funcnames: 0,
            cutab,
            filetab: cutab + 8,
            pctab: 0,
            pcln: 0,
        };
        let func = Func {
            start: 0x1000,
            end: 0x1010,
            name: "main.f",
            record: cutab + 8 + 14,
        };
        let mut names = Vec::new();
        let rows = table.line_rows(&func, &mut |slot| {
            names.push(table.file_name(slot).map(str::to_owned));
            (names.len() - 1) as u32
        })?;
        Some(
            rows.into_iter()
                .map(|r| {
                    let file = names.get(r.file as usize).cloned().flatten();
                    (r.addr, file, r.line)
                })
                .collect(),
        )
    }

    #[test]
    fn pc_value_tables_give_files_and_lines() {
        let data = with_lines();
        let x = Some("a/x.go".to_owned());
        let y = Some("b/y.go".to_owned());
        assert_eq!(
            lines_table(&data).unwrap(),
            [
                (0x1000, x.clone(), 10),
                (0x1004, x, 12),
                (0x1008, y.clone(), 12),
                (0x100c, y, 10),
                (0x1010, None, 0),
            ]
        );
        // Every truncation: never a panic, never a row past the function.
        for len in 0..data.len() {
            if let Some(rows) = lines_table(&data[..len]) {
                assert!(rows.iter().all(|r| (0x1000..=0x1010).contains(&r.0)));
            }
        }
    }
}
