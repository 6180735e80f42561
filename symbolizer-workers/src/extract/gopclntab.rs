//! Function names of Go binaries from `.gopclntab`, the table the Go
//! runtime itself symbolizes with: it survives `go build -ldflags=-s -w`
//! and `strip`, which leave a Go binary without `.symtab` or DWARF.
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
//! _func    at pclnOffset + funcOff: entryOff u32 | nameOff i32 | …
//! names    at funcnameOffset + nameOff: NUL-terminated
//! ```
//!
//! Only names are read (not the pc-value tables of files and lines).
//! Anything out of bounds or out of order ends the table early: a damaged
//! table gives fewer names, never an error.

use object::{Object, ObjectSection};

use super::demangle;
use super::elf::{Symbol, in_text};
use super::intern::Interner;
use crate::table::{Function, NONE};

const MAGIC_GO_1_18: u32 = 0xffff_fff0;
const MAGIC_GO_1_20: u32 = 0xffff_fff1;

/// The functions `.gopclntab` names, sorted, or none when the file has no
/// such table of a layout this reads.
pub fn function_symbols(
    file: &object::File<'_>,
    text: &[(u64, u64)],
    functions: &mut Interner<Function>,
) -> Vec<Symbol> {
    if !file.is_little_endian() {
        return Vec::new();
    }
    let Some(data) = file
        .section_by_name(".gopclntab")
        .and_then(|s| s.data().ok())
    else {
        return Vec::new();
    };
    let text_section = file.section_by_name(".text").map(|s| s.address());
    let Some(table) = Table::parse(data, text_section) else {
        return Vec::new();
    };
    let mut out: Vec<Symbol> = Vec::new();
    for (start, end, name) in table.functions() {
        if !in_text(text, start, start.saturating_add(1)) {
            continue;
        }
        out.push(Symbol {
            start,
            end,
            function: functions.intern(demangle::function(name)),
            file: NONE,
        });
    }
    out
}

/// A parsed header: where the parts of the table are.
struct Table<'a> {
    data: &'a [u8],
    nfunc: usize,
    text_start: u64,
    funcnames: usize,
    pcln: usize,
}

impl<'a> Table<'a> {
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
        let funcnames = usize::try_from(word(3)?).ok()?;
        let pcln = usize::try_from(word(7)?).ok()?;
        // The function table alone needs 8 bytes a function: a count
        // larger than the data can hold is damage.
        if funcnames >= data.len() || pcln >= data.len() || nfunc > (data.len() - pcln) / 8 {
            return None;
        }
        Some(Table {
            data,
            nfunc,
            text_start,
            funcnames,
            pcln,
        })
    }

    /// `(start, end, name)` of each function, in address order, until the
    /// first entry that does not read.
    fn functions(&self) -> impl Iterator<Item = (u64, u64, &'a str)> + '_ {
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
                let func = self.pcln.checked_add(usize::try_from(func_off).ok()?)?;
                let name_off = read_u32(self.data, func.checked_add(4)?)? as i32;
                let name = self.name(usize::try_from(name_off).ok()?)?;
                let start = self.text_start.checked_add(u64::from(entry_off))?;
                let end = self.text_start.checked_add(u64::from(next_off))?;
                Some((start, end, name))
            })
            .filter(|&(start, end, name)| start < end && !name.is_empty())
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
                .map(|(s, e, n)| (s, e, n.to_owned()))
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
}
