//! Reading DWARF (versions 2 to 5) with gimli: line tables, and for every
//! function its address ranges and the tree of calls inlined into it.

use std::borrow::Cow;
use std::collections::HashMap;

use gimli::{AttributeValue, DebuggingInformationEntry, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSection};

use super::elf::in_text;
use super::intern::Interner;
use super::{ExtractError, demangle};
use crate::table::{Function, LineRow, NONE, SourceFile};

type R<'a> = EndianSlice<'a, RunTimeEndian>;
type Unit<'a> = gimli::Unit<R<'a>>;

/// A function with code: a `DW_TAG_subprogram` with addresses.
#[derive(Debug, Default)]
pub(super) struct Subprogram {
    pub ranges: Vec<(u64, u64)>,
    /// Index into the function interner, or [`NONE`].
    pub function: u32,
    pub inlines: Vec<InlinedCall>,
}

/// A `DW_TAG_inlined_subroutine` within a [`Subprogram`].
#[derive(Debug)]
pub(super) struct InlinedCall {
    pub ranges: Vec<(u64, u64)>,
    pub depth: u32,
    pub function: u32,
    pub call_file: u32,
    pub call_line: u32,
}

/// What the DWARF of one file holds.
#[derive(Debug, Default)]
pub(super) struct DwarfInfo {
    pub subprograms: Vec<Subprogram>,
    /// Line-table sequences; each ends with a row of file [`NONE`], line 0
    /// at its end address.
    pub sequences: Vec<Vec<LineRow>>,
    /// Compilation units that could not be read (and were skipped).
    pub skipped_units: usize,
}

/// The DWARF sections of `file`, decompressed where they are compressed.
pub(super) struct Sections<'d> {
    sections: gimli::DwarfSections<Cow<'d, [u8]>>,
    endian: RunTimeEndian,
    info_bytes: usize,
    total_bytes: usize,
}

impl<'d> Sections<'d> {
    pub(super) fn load(file: &object::File<'d>) -> Result<Self, ExtractError> {
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let (mut info_bytes, mut total_bytes) = (0, 0);
        let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'d, [u8]>, ExtractError> {
            let data = match file.section_by_name(id.name()) {
                Some(section) => {
                    section
                        .uncompressed_data()
                        .map_err(|source| ExtractError::Section {
                            name: id.name(),
                            source,
                        })?
                }
                None => Cow::Borrowed(&[][..]),
            };
            total_bytes += data.len();
            if id == gimli::SectionId::DebugInfo {
                info_bytes = data.len();
            }
            Ok(data)
        })?;
        Ok(Sections {
            sections,
            endian,
            info_bytes,
            total_bytes,
        })
    }

    /// Whether there is any DWARF to read.
    pub(super) fn has_info(&self) -> bool {
        self.info_bytes > 0
    }

    /// Total size of the (uncompressed) DWARF sections, for size reports.
    pub(super) fn total_size(&self) -> usize {
        self.total_bytes
    }

    /// Reads functions, inline trees and line tables. `text` are the
    /// executable ranges of the ELF: code outside them was discarded by the
    /// linker and is ignored.
    pub(super) fn read(
        &self,
        text: &[(u64, u64)],
        functions: &mut Interner<Function>,
        files: &mut Interner<SourceFile>,
    ) -> Result<DwarfInfo, ExtractError> {
        let dwarf = self.sections.borrow(|s| EndianSlice::new(s, self.endian));
        let mut info = DwarfInfo::default();
        let mut units = Vec::new();
        let mut headers = dwarf.units();
        loop {
            match headers.next() {
                Ok(Some(header)) => match dwarf.unit(header) {
                    Ok(unit) => units.push(unit),
                    Err(_) => info.skipped_units += 1,
                },
                Ok(None) => break,
                // The unit list cannot be walked past a bad header.
                Err(_) => {
                    info.skipped_units += 1;
                    break;
                }
            }
        }
        let mut reader = Reader {
            dwarf: &dwarf,
            units: &units,
            names: HashMap::new(),
            text,
        };
        for i in 0..units.len() {
            let mut file_map = HashMap::new();
            let ok = reader.lines(i, &mut file_map, files, &mut info).is_ok()
                & reader
                    .functions(i, &mut file_map, functions, files, &mut info)
                    .is_ok();
            if !ok {
                info.skipped_units += 1;
            }
        }
        Ok(info)
    }
}

/// Entries deeper than this in a `DW_AT_specification`/`abstract_origin`
/// chain are not followed: real chains are 2 or 3 long, and a cycle in
/// hostile input must not hang us.
const MAX_NAME_CHAIN: usize = 8;

struct Reader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<R<'d>>,
    units: &'a [Unit<'d>],
    /// Function index per DIE (by `.debug_info` offset), for the abstract
    /// origins that many inlined calls share.
    names: HashMap<usize, u32>,
    text: &'a [(u64, u64)],
}

/// Per unit: line-table file index → file interner index.
type FileMap = HashMap<u64, u32>;

/// One level of the DIE tree walk.
#[derive(Clone, Copy)]
struct Scope {
    depth: isize,
    /// The subprogram with code this DIE belongs to.
    subprogram: Option<usize>,
    inline_depth: u32,
}

impl<'d> Reader<'_, 'd> {
    fn lines(
        &mut self,
        u: usize,
        file_map: &mut FileMap,
        files: &mut Interner<SourceFile>,
        info: &mut DwarfInfo,
    ) -> gimli::Result<()> {
        let units = self.units;
        let unit = &units[u];
        let Some(program) = unit.line_program.clone() else {
            return Ok(());
        };
        let mut rows = program.rows();
        let mut sequence: Vec<LineRow> = Vec::new();
        while let Some((header, row)) = rows.next_row()? {
            let addr = row.address();
            if row.end_sequence() {
                let keep = sequence.first().is_some_and(|first| {
                    in_text(
                        self.text,
                        first.addr,
                        addr.max(first.addr.saturating_add(1)),
                    )
                });
                sequence.push(LineRow {
                    addr,
                    file: NONE,
                    line: 0,
                });
                if keep {
                    info.sequences.push(std::mem::take(&mut sequence));
                } else {
                    sequence.clear();
                }
                continue;
            }
            let index = row.file_index();
            let file = match file_map.get(&index) {
                Some(&f) => f,
                None => {
                    let f = file_path(self.dwarf, unit, header, index)
                        .map_or(NONE, |path| files.intern(SourceFile::from_path(&path)));
                    file_map.insert(index, f);
                    f
                }
            };
            let line = row
                .line()
                .map_or(0, |l| u32::try_from(l.get()).unwrap_or(u32::MAX));
            sequence.push(LineRow { addr, file, line });
        }
        Ok(())
    }

    fn functions(
        &mut self,
        u: usize,
        file_map: &mut FileMap,
        functions: &mut Interner<Function>,
        files: &mut Interner<SourceFile>,
        info: &mut DwarfInfo,
    ) -> gimli::Result<()> {
        let units = self.units;
        let unit = &units[u];
        let mut entries = unit.entries_raw(None)?;
        let mut die = DebuggingInformationEntry::default();
        let mut stack: Vec<Scope> = Vec::new();
        while !entries.is_empty() {
            if !entries.read_entry(&mut die)? {
                continue;
            }
            while stack.last().is_some_and(|s| s.depth >= die.depth) {
                stack.pop();
            }
            let parent = stack.last().copied();
            let mut scope = Scope {
                depth: die.depth,
                subprogram: parent.and_then(|p| p.subprogram),
                inline_depth: parent.map_or(0, |p| p.inline_depth),
            };
            match die.tag {
                gimli::DW_TAG_subprogram => {
                    let ranges = self.ranges(unit, &die)?;
                    scope.inline_depth = 0;
                    scope.subprogram = None;
                    if !ranges.is_empty() {
                        let function = self.function_of(u, &die, functions, 0)?;
                        info.subprograms.push(Subprogram {
                            ranges,
                            function,
                            inlines: Vec::new(),
                        });
                        scope.subprogram = Some(info.subprograms.len() - 1);
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    scope.inline_depth += 1;
                    if let Some(s) = scope.subprogram {
                        let ranges = self.ranges(unit, &die)?;
                        if !ranges.is_empty() {
                            let function = self.function_of(u, &die, functions, 0)?;
                            let call_file = match die.attr_value(gimli::DW_AT_call_file) {
                                Some(AttributeValue::FileIndex(index)) => {
                                    self.file_index(u, index, file_map, files)
                                }
                                Some(v) => match v.udata_value() {
                                    Some(index) => self.file_index(u, index, file_map, files),
                                    None => NONE,
                                },
                                None => NONE,
                            };
                            let call_line = die
                                .attr_value(gimli::DW_AT_call_line)
                                .and_then(|v| v.udata_value())
                                .map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX));
                            info.subprograms[s].inlines.push(InlinedCall {
                                ranges,
                                depth: scope.inline_depth,
                                function,
                                call_file,
                                call_line,
                            });
                        }
                    }
                }
                _ => {}
            }
            if die.has_children {
                stack.push(scope);
            }
        }
        Ok(())
    }

    /// The DIE's address ranges that lie in executable sections.
    ///
    /// Not `Dwarf::die_ranges`: gimli 0.34 computes `low_pc + high_pc` (the
    /// offset form) unchecked, which panics in builds with overflow checks
    /// on a hostile file (found by the `elf_extract` fuzz target). A range
    /// whose end overflows is dropped here instead.
    fn ranges(
        &self,
        unit: &Unit<'d>,
        die: &DebuggingInformationEntry<R<'d>>,
    ) -> gimli::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut keep = |begin: u64, end: u64| {
            if begin < end && in_text(self.text, begin, end) {
                out.push((begin, end));
            }
        };
        if let Some(value) = die.attr_value(gimli::DW_AT_ranges)
            && let Some(mut list) = self.dwarf.attr_ranges(unit, value)?
        {
            while let Some(r) = list.next()? {
                keep(r.begin, r.end);
            }
            return Ok(out);
        }
        let Some(low_pc) = die.attr_value(gimli::DW_AT_low_pc) else {
            return Ok(out);
        };
        let Some(begin) = self.dwarf.attr_address(unit, low_pc)? else {
            return Ok(out);
        };
        let end = match die.attr_value(gimli::DW_AT_high_pc) {
            Some(AttributeValue::Udata(size)) => begin.checked_add(size),
            Some(value) => self.dwarf.attr_address(unit, value)?,
            None => None,
        };
        if let Some(end) = end {
            keep(begin, end);
        }
        Ok(out)
    }

    fn file_index(
        &self,
        u: usize,
        index: u64,
        file_map: &mut FileMap,
        files: &mut Interner<SourceFile>,
    ) -> u32 {
        if let Some(&f) = file_map.get(&index) {
            return f;
        }
        let unit = &self.units[u];
        let f = unit
            .line_program
            .as_ref()
            .and_then(|p| file_path(self.dwarf, unit, p.header(), index))
            .map_or(NONE, |path| files.intern(SourceFile::from_path(&path)));
        file_map.insert(index, f);
        f
    }

    /// The function a subprogram or inlined call names, like
    /// `llvm-symbolizer` does: a linkage name anywhere along the
    /// specification/abstract-origin chain wins over a plain name.
    fn function_of(
        &mut self,
        u: usize,
        die: &DebuggingInformationEntry<R<'d>>,
        functions: &mut Interner<Function>,
        hops: usize,
    ) -> gimli::Result<u32> {
        let mut linkage = None;
        let mut name = None;
        let mut next = None;
        for attr in die.attrs() {
            match attr.name() {
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    linkage = Some(self.dwarf.attr_string(&self.units[u], attr.value())?)
                }
                gimli::DW_AT_name => {
                    name = Some(self.dwarf.attr_string(&self.units[u], attr.value())?)
                }
                gimli::DW_AT_specification | gimli::DW_AT_abstract_origin => {
                    next = Some(attr.value())
                }
                _ => {}
            }
        }
        if let Some(linkage) = linkage {
            return Ok(functions.intern(demangle::function(&linkage.to_string_lossy())));
        }
        if let Some(next) = next
            && hops < MAX_NAME_CHAIN
            && let Some((nu, offset)) = self.resolve(u, next)
        {
            let key = self.units[nu].header.debug_info_offset().map_or(0, |o| o.0) + offset.0;
            let found = match self.names.get(&key) {
                Some(&f) => f,
                None => {
                    let target = self.units[nu].entry(offset)?;
                    let f = self.function_of(nu, &target, functions, hops + 1)?;
                    self.names.insert(key, f);
                    f
                }
            };
            // The origin's linkage name wins; its plain name only when this
            // DIE has none of its own.
            if found != NONE
                && (name.is_none() || functions.get(found).is_some_and(|f| f.mangled.is_some()))
            {
                return Ok(found);
            }
        }
        Ok(name.map_or(NONE, |n| {
            functions.intern(demangle::plain(&n.to_string_lossy()))
        }))
    }

    /// The unit and offset a reference attribute points to.
    fn resolve(&self, u: usize, value: AttributeValue<R<'d>>) -> Option<(usize, UnitOffset)> {
        match value {
            AttributeValue::UnitRef(offset) => Some((u, offset)),
            AttributeValue::DebugInfoRef(offset) => {
                let i = self.units.partition_point(|unit| {
                    unit.header.debug_info_offset().is_some_and(|o| o <= offset)
                });
                let nu = i.checked_sub(1)?;
                let local = offset.to_unit_offset(&self.units[nu].header)?;
                Some((nu, local))
            }
            _ => None,
        }
    }
}

/// The full path of line-table file `index`, as `llvm-symbolizer` builds
/// it: the file name, under its directory, under the compilation directory
/// when those are relative.
fn file_path(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<'_>,
    header: &gimli::LineProgramHeader<R<'_>>,
    index: u64,
) -> Option<String> {
    let file = header.file(index)?;
    let name = dwarf
        .attr_string(unit, file.path_name())
        .ok()?
        .to_string_lossy()
        .into_owned();
    if name.starts_with('/') {
        return Some(name);
    }
    let mut dir = match file.directory(header) {
        Some(d) => dwarf
            .attr_string(unit, d)
            .ok()?
            .to_string_lossy()
            .into_owned(),
        None => String::new(),
    };
    if !dir.starts_with('/')
        && let Some(comp) = unit.comp_dir
    {
        let comp = comp.to_string_lossy();
        dir = if dir.is_empty() {
            comp.into_owned()
        } else {
            crate::table::join_path(&comp, &dir)
        };
    }
    Some(crate::table::join_path(&dir, &name))
}
