//! Compact unwind tables from an ELF's `.eh_frame`, for walking code built
//! without frame pointers.
//!
//! gimli evaluates each FDE's call-frame instructions into rows; this module
//! keeps, for x86-64, only what a BPF walker needs at each address: how to
//! find the CFA (rsp or rbp plus an offset, or the PLT rule), and where the
//! caller's rbp was saved. The return address is always at CFA − 8 on
//! x86-64, so it needs no column. Rows are sorted by address; a row holds
//! until the next one, and [`CfaRule::None`] marks addresses no FDE covers.
//!
//! A table is kept as the eBPF program reads it: 8-byte rows
//! ([`UnwindRow`]) with 32-bit file-relative addresses (code above 4 GiB
//! gets no table), so a big library's table (LLVM: about a million rows)
//! costs 8 MiB, and building it holds little more than that. FDEs are visited in address
//! order (from `.eh_frame_hdr`'s sorted index when there is one), so rows
//! come out sorted with nothing to sort afterwards.
//!
//! [`Unwinder`](crate::unwinder::Unwinder) loads the tables of each
//! process's files into the eBPF program's maps, where `unwind_step()` in
//! `walk.bpf.h` walks them.

use std::collections::HashMap;

use gimli::{
    BaseAddresses, CfaRule as GimliCfa, CommonInformationEntry, EhFrame, EhFrameHdr, EhFrameOffset,
    EndianSlice, LittleEndian, RegisterRule, UnwindContext, UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ReadRef};

use crate::abi::{self, UnwindRow};

/// Largest `.eh_frame` the agent builds a table for. A row takes 5 to 7
/// bytes of `.eh_frame` (libc: 150 KiB, 28k rows; LLVM's library: 6 MiB,
/// about a million rows), and building holds the section and the rows in
/// memory for the time it takes, so this bounds the agent's peak: past it
/// a file is walked by frame pointers.
pub const MAX_EH_FRAME_BYTES: u64 = 128 * 1024 * 1024;

/// Why no table could be built.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    /// The file is not an ELF we can parse.
    #[error("parsing the ELF file")]
    Elf(#[from] object::Error),
    /// The file has no `.eh_frame` section.
    #[error("the file has no .eh_frame section")]
    NoEhFrame,
    /// `.eh_frame` is malformed.
    #[error("parsing .eh_frame")]
    Dwarf(#[from] gimli::Error),
    /// `.eh_frame` is larger than the agent builds tables for.
    #[error(".eh_frame is {0} bytes, more than the agent builds a table for")]
    TooBig(u64),
    /// The file has code above the 4 GiB a row's 32-bit address reaches.
    #[error("the file has code at {0:#x}, above the 4 GiB a table row reaches")]
    Span(u64),
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How to find the CFA at an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CfaRule {
    /// No FDE covers the address.
    None,
    /// CFA = rsp + offset.
    Rsp(i32),
    /// CFA = rbp + offset.
    Rbp(i32),
    /// The PLT stub rule: CFA = rsp + 8, plus 8 more when
    /// `(rip & 15) >= threshold` (the second half of a 16-byte stub, after
    /// its `push`).
    Plt {
        /// 10 or 11, as the linker wrote it.
        threshold: u8,
    },
    /// A rule the BPF walker will not evaluate (another DWARF expression,
    /// or a CFA in another register): it falls back to frame pointers.
    Unsupported,
    /// The return address is undefined: the outermost frame (`_start`, a
    /// new thread's entry), where the walk ends.
    End,
}

/// Where the caller's rbp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RbpRule {
    /// Not saved: rbp still holds the caller's value.
    Same,
    /// Saved at CFA + offset.
    AtCfa(i16),
    /// Saved in a way the walker does not follow; the caller's rbp is lost.
    Unsupported,
}

/// One row of an [`UnwindTable`]: from `pc` (a file-relative virtual address) up to the next
/// row's `pc`, these rules hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRow {
    /// First address the row covers.
    pub pc: u64,
    /// How to find the CFA.
    pub cfa: CfaRule,
    /// Where the caller's rbp is.
    pub rbp: RbpRule,
}

/// The CFA rule as the BPF row holds it: its type and 16-bit offset. A
/// rule whose offset does not fit (a frame of over 32 KiB) becomes
/// [`CfaRule::Unsupported`], which the walker follows by frame pointers.
fn pack_cfa(cfa: CfaRule) -> (u8, i16) {
    let offset = |o: i32| i16::try_from(o).ok();
    match cfa {
        CfaRule::None => (abi::CFA_NONE, 0),
        CfaRule::Rsp(o) => offset(o).map_or((abi::CFA_UNSUPPORTED, 0), |o| (abi::CFA_RSP, o)),
        CfaRule::Rbp(o) => offset(o).map_or((abi::CFA_UNSUPPORTED, 0), |o| (abi::CFA_RBP, o)),
        CfaRule::Plt { threshold } => (abi::CFA_PLT, i16::from(threshold)),
        CfaRule::Unsupported => (abi::CFA_UNSUPPORTED, 0),
        CfaRule::End => (abi::CFA_END, 0),
    }
}

/// The rbp rule as the BPF row holds it: its type and 8-bit offset.
fn pack_rbp(rbp: RbpRule) -> (u8, i8) {
    match rbp {
        RbpRule::Same => (abi::RBP_SAME, 0),
        RbpRule::AtCfa(o) => {
            i8::try_from(o).map_or((abi::RBP_UNSUPPORTED, 0), |o| (abi::RBP_AT_CFA, o))
        }
        RbpRule::Unsupported => (abi::RBP_UNSUPPORTED, 0),
    }
}

/// A row for the BPF table, at file-relative address `pc`.
fn pack(pc: u32, cfa: CfaRule, rbp: RbpRule) -> UnwindRow {
    let (cfa_type, cfa_offset) = pack_cfa(cfa);
    let (rbp_type, rbp_offset) = pack_rbp(rbp);
    UnwindRow {
        pc,
        cfa_offset,
        rbp_offset,
        rules: cfa_type | (rbp_type << 4),
    }
}

/// The rules a packed row holds, as the walker will read them.
fn unpack(row: &UnwindRow) -> (CfaRule, RbpRule) {
    let cfa = match row.rules & 15 {
        abi::CFA_NONE => CfaRule::None,
        abi::CFA_RSP => CfaRule::Rsp(i32::from(row.cfa_offset)),
        abi::CFA_RBP => CfaRule::Rbp(i32::from(row.cfa_offset)),
        abi::CFA_PLT => CfaRule::Plt {
            threshold: u8::try_from(row.cfa_offset).unwrap_or(0),
        },
        abi::CFA_END => CfaRule::End,
        _ => CfaRule::Unsupported,
    };
    let rbp = match row.rules >> 4 {
        abi::RBP_SAME => RbpRule::Same,
        abi::RBP_AT_CFA => RbpRule::AtCfa(i16::from(row.rbp_offset)),
        _ => RbpRule::Unsupported,
    };
    (cfa, rbp)
}

/// The unwind table of one file, sorted by address, as the BPF program
/// reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindTable {
    rows: Vec<UnwindRow>,
}

impl UnwindTable {
    /// Builds the table of an x86-64 ELF file from its bytes.
    pub fn from_elf(data: &[u8]) -> Result<UnwindTable, UnwindError> {
        Self::from_object(&object::File::parse(data)?, MAX_EH_FRAME_BYTES)
    }

    /// Builds the table of the x86-64 ELF file at `path`, reading only its
    /// headers and `.eh_frame` (and `.eh_frame_hdr`). Files whose
    /// `.eh_frame` is over `max_bytes` (or [`MAX_EH_FRAME_BYTES`]) are
    /// refused before any parsing.
    pub fn from_path(path: &std::path::Path, max_bytes: u64) -> Result<UnwindTable, UnwindError> {
        let file = std::fs::File::open(path).map_err(|e| UnwindError::Read {
            path: path.to_path_buf(),
            source: e,
        })?;
        Self::from_file(file, max_bytes)
    }

    /// As [`UnwindTable::from_path`], from a file already open (one the
    /// agent opened safely through a process's `map_files`).
    pub fn from_file(file: std::fs::File, max_bytes: u64) -> Result<UnwindTable, UnwindError> {
        let cache = object::ReadCache::new(file);
        Self::from_object(&object::File::parse(&cache)?, max_bytes)
    }

    fn from_object<'data, R: ReadRef<'data>>(
        elf: &object::File<'data, R>,
        max_bytes: u64,
    ) -> Result<UnwindTable, UnwindError> {
        let section = elf
            .section_by_name(".eh_frame")
            .ok_or(UnwindError::NoEhFrame)?;
        if section.size() > MAX_EH_FRAME_BYTES.min(max_bytes) {
            return Err(UnwindError::TooBig(section.size()));
        }
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = elf.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = elf.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let eh_frame = EhFrame::new(section.data()?, LittleEndian);
        // The index is an optimisation: without it (or when it is
        // unreadable), the FDEs are found by walking .eh_frame.
        let hdr = elf.section_by_name(".eh_frame_hdr").and_then(|hdr| {
            let bases = bases.clone().set_eh_frame_hdr(hdr.address());
            Some((hdr.data().ok()?, bases))
        });
        let fdes = match hdr.and_then(|(data, bases)| fdes_from_index(data, &bases).ok()) {
            Some(fdes) => fdes,
            None => fdes_from_section(&eh_frame, &bases)?,
        };
        build(&eh_frame, &bases, fdes)
    }

    /// A table from rows saved earlier (the disk cache).
    pub(crate) fn from_rows(rows: Vec<UnwindRow>) -> UnwindTable {
        UnwindTable { rows }
    }

    /// The rows as the BPF program reads them.
    pub(crate) fn packed(&self) -> &[UnwindRow] {
        &self.rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Kernel memory the table takes once loaded: its rows, in whole pages
    /// (the map is mmapable, so the kernel allocates pages).
    pub fn kernel_bytes(&self) -> u64 {
        kernel_bytes(self.rows.len())
    }

    /// The rows, sorted by address, with file-relative addresses.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = TableRow> + '_ {
        self.rows.iter().map(|r| self.row(r))
    }

    /// The row that holds at `pc`; `None` before the first row.
    pub fn find(&self, pc: u64) -> Option<TableRow> {
        let i = self
            .rows
            .partition_point(|r| u64::from(r.pc) <= pc)
            .checked_sub(1)?;
        Some(self.row(&self.rows[i]))
    }

    fn row(&self, row: &UnwindRow) -> TableRow {
        let (cfa, rbp) = unpack(row);
        TableRow {
            pc: u64::from(row.pc),
            cfa,
            rbp,
        }
    }
}

/// Kernel memory of a loaded table of `rows` rows.
pub(crate) fn kernel_bytes(rows: usize) -> u64 {
    const PAGE: u64 = 4096;
    (rows as u64 * size_of::<UnwindRow>() as u64).div_ceil(PAGE) * PAGE
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// (first address, offset in .eh_frame) of every FDE, from
/// `.eh_frame_hdr`'s index, which the linker sorted by address.
fn fdes_from_index(data: &[u8], bases: &BaseAddresses) -> Result<Vec<(u64, usize)>, gimli::Error> {
    let hdr = EhFrameHdr::new(data, LittleEndian).parse(bases, 8)?;
    let table = hdr.table().ok_or(gimli::Error::NoUnwindInfoForAddress)?;
    let mut fdes = Vec::new();
    let mut entries = table.iter(bases);
    while let Some((start, fde)) = entries.next()? {
        fdes.push((start.direct()?, table.pointer_to_offset(fde)?.0));
    }
    // Sorted by the linker; sorting again costs nothing then, and makes a
    // hand-made index safe.
    fdes.sort_unstable();
    Ok(fdes)
}

/// (first address, offset in .eh_frame) of every FDE, by walking the
/// section, sorted by address.
fn fdes_from_section(
    eh_frame: &EhFrame<Slice<'_>>,
    bases: &BaseAddresses,
) -> Result<Vec<(u64, usize)>, UnwindError> {
    let mut cies = CieCache::default();
    let mut fdes = Vec::new();
    let mut entries = eh_frame.entries(bases);
    while let Some(entry) = entries.next()? {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(|section, bases, offset| cies.get(section, bases, offset))?;
            fdes.push((fde.initial_address(), fde.offset()));
        }
    }
    fdes.sort_unstable();
    Ok(fdes)
}

/// CIEs by offset: a library has a handful, shared by thousands of FDEs,
/// and parsing one per FDE would be most of the work.
#[derive(Default)]
struct CieCache<'a> {
    cies: HashMap<usize, CommonInformationEntry<Slice<'a>>>,
}

impl<'a> CieCache<'a> {
    fn get(
        &mut self,
        section: &EhFrame<Slice<'a>>,
        bases: &BaseAddresses,
        offset: EhFrameOffset<usize>,
    ) -> Result<CommonInformationEntry<Slice<'a>>, gimli::Error> {
        if let Some(cie) = self.cies.get(&offset.0) {
            return Ok(cie.clone());
        }
        let cie = section.cie_from_offset(bases, offset)?;
        self.cies.insert(offset.0, cie.clone());
        Ok(cie)
    }
}

/// Evaluates the FDEs, in address order, into packed rows.
fn build(
    eh_frame: &EhFrame<Slice<'_>>,
    bases: &BaseAddresses,
    fdes: Vec<(u64, usize)>,
) -> Result<UnwindTable, UnwindError> {
    let mut out = RowWriter {
        rows: Vec::new(),
        last_is_end: false,
    };
    let mut cies = CieCache::default();
    let mut ctx = UnwindContext::new();
    for (_, offset) in fdes {
        let fde = eh_frame.fde_from_offset(bases, EhFrameOffset(offset), |section, bases, o| {
            cies.get(section, bases, o)
        })?;
        let mut table = fde.rows(eh_frame, bases, &mut ctx)?;
        while let Some(row) = table.next_row()? {
            let cfa = if matches!(row.register(X86_64::RA), Some(RegisterRule::Undefined)) {
                CfaRule::End
            } else {
                cfa_rule(row.cfa(), eh_frame)
            };
            out.push(
                row.start_address(),
                cfa,
                rbp_rule(row.register(X86_64::RBP)),
                false,
            )?;
        }
        out.push(fde.end_address(), CfaRule::None, RbpRule::Same, true)?;
    }
    out.rows.shrink_to_fit();
    Ok(UnwindTable { rows: out.rows })
}

/// Appends rows in address order: one row per address (an FDE's row wins
/// over the end marker of the FDE before it), none that repeats the rules
/// of the row before.
struct RowWriter {
    rows: Vec<UnwindRow>,
    /// Whether the last row is an FDE's end marker.
    last_is_end: bool,
}

impl RowWriter {
    fn push(
        &mut self,
        pc: u64,
        cfa: CfaRule,
        rbp: RbpRule,
        is_end: bool,
    ) -> Result<(), UnwindError> {
        let offset = u32::try_from(pc).map_err(|_| UnwindError::Span(pc))?;
        let row = pack(offset, cfa, rbp);
        if let Some(last) = self.rows.last_mut() {
            if offset < last.pc {
                // Overlapping FDEs (rare, and a linker bug): the one that
                // starts first keeps the addresses.
                return Ok(());
            }
            if offset == last.pc {
                if self.last_is_end && !is_end {
                    *last = row;
                    self.last_is_end = false;
                    // The end marker it replaces may have stood between
                    // two rows with the same rules.
                    let n = self.rows.len();
                    if n >= 2
                        && self.rows[n - 2].rules == row.rules
                        && self.rows[n - 2].cfa_offset == row.cfa_offset
                        && self.rows[n - 2].rbp_offset == row.rbp_offset
                    {
                        self.rows.pop();
                    }
                }
                return Ok(());
            }
            if last.rules == row.rules
                && last.cfa_offset == row.cfa_offset
                && last.rbp_offset == row.rbp_offset
            {
                self.last_is_end = is_end && self.last_is_end;
                return Ok(());
            }
        }
        self.rows.push(row);
        self.last_is_end = is_end;
        Ok(())
    }
}

/// The PLT stubs' CFA expression, as GNU ld and lld write it:
/// `DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
/// DW_OP_lit<threshold>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus`.
fn plt_threshold(expr: &[u8]) -> Option<u8> {
    match expr {
        [
            0x77,
            0x08,
            0x80,
            0x00,
            0x3f,
            0x1a,
            lit,
            0x2a,
            0x33,
            0x24,
            0x22,
        ] if (0x30..=0x4f).contains(lit) => Some(lit - 0x30),
        _ => None,
    }
}

fn cfa_rule(rule: &GimliCfa<usize>, eh_frame: &EhFrame<Slice<'_>>) -> CfaRule {
    match *rule {
        GimliCfa::RegisterAndOffset { register, offset } => {
            let Ok(offset) = i32::try_from(offset) else {
                return CfaRule::Unsupported;
            };
            if register == X86_64::RSP {
                CfaRule::Rsp(offset)
            } else if register == X86_64::RBP {
                CfaRule::Rbp(offset)
            } else {
                CfaRule::Unsupported
            }
        }
        GimliCfa::Expression(ref e) => e
            .get(eh_frame)
            .ok()
            .and_then(|expr| plt_threshold(expr.0.slice()))
            .map_or(CfaRule::Unsupported, |threshold| CfaRule::Plt { threshold }),
    }
}

fn rbp_rule(rule: Option<RegisterRule<usize>>) -> RbpRule {
    match rule {
        None | Some(RegisterRule::SameValue) => RbpRule::Same,
        Some(RegisterRule::Offset(o)) => {
            i16::try_from(o).map_or(RbpRule::Unsupported, RbpRule::AtCfa)
        }
        Some(_) => RbpRule::Unsupported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the PLT pattern match on the bytes GNU ld writes.
    #[test]
    fn plt_expression_is_recognised() {
        let expr = [
            0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
        ];
        assert_eq!(plt_threshold(&expr), Some(11));
        assert_eq!(plt_threshold(&expr[..10]), None);
    }

    fn system_library(names: &[&str]) -> Option<std::path::PathBuf> {
        names
            .iter()
            .flat_map(|n| {
                [
                    std::path::Path::new("/lib/x86_64-linux-gnu").join(n),
                    std::path::Path::new("/usr/lib64").join(n),
                ]
            })
            .find(|p| p.exists())
    }

    // Guards the table of a real system library: it builds, covers its
    // code, and almost all of it is in rules the walker will follow.
    #[test]
    fn libc_table_is_mostly_supported() {
        let Some(libc) = system_library(&["libc.so.6"]) else {
            return;
        };
        let table = UnwindTable::from_elf(&std::fs::read(&libc).unwrap()).unwrap();
        let rows: Vec<TableRow> = table.rows().collect();
        assert!(rows.len() > 1000, "{} rows", rows.len());
        assert!(
            rows.windows(2).all(|w| w[0].pc < w[1].pc),
            "sorted, no duplicates"
        );
        let unsupported = rows
            .iter()
            .filter(|r| r.cfa == CfaRule::Unsupported || r.rbp == RbpRule::Unsupported)
            .count();
        let plt = rows
            .iter()
            .filter(|r| matches!(r.cfa, CfaRule::Plt { .. }))
            .count();
        eprintln!(
            "{}: {} rows ({} KiB as BPF rows), {unsupported} unsupported, {plt} PLT",
            libc.display(),
            rows.len(),
            table.kernel_bytes() / 1024
        );
        assert!(
            unsupported * 100 < rows.len(),
            "{unsupported} of {} rows unsupported",
            rows.len()
        );
    }

    /// The table as the first builder made it: every row of every FDE in
    /// section order, sorted afterwards, the first row at an address kept
    /// (an FDE's over the end marker of the one before), repeats dropped.
    fn sorted_after_the_fact(data: &[u8]) -> Vec<TableRow> {
        let file = object::File::parse(data).unwrap();
        let section = file.section_by_name(".eh_frame").unwrap();
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = file.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = file.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let eh_frame = EhFrame::new(section.data().unwrap(), LittleEndian);
        let mut rows: Vec<(TableRow, bool)> = Vec::new();
        let mut ctx = UnwindContext::new();
        let mut entries = eh_frame.entries(&bases);
        while let Some(entry) = entries.next().unwrap() {
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let fde = partial.parse(EhFrame::cie_from_offset).unwrap();
            let mut table = fde.rows(&eh_frame, &bases, &mut ctx).unwrap();
            while let Some(row) = table.next_row().unwrap() {
                let cfa = if matches!(row.register(X86_64::RA), Some(RegisterRule::Undefined)) {
                    CfaRule::End
                } else {
                    cfa_rule(row.cfa(), &eh_frame)
                };
                // As the BPF row will hold them.
                let (cfa, rbp) = unpack(&pack(0, cfa, rbp_rule(row.register(X86_64::RBP))));
                rows.push((
                    TableRow {
                        pc: row.start_address(),
                        cfa,
                        rbp,
                    },
                    false,
                ));
            }
            let end = TableRow {
                pc: fde.end_address(),
                cfa: CfaRule::None,
                rbp: RbpRule::Same,
            };
            rows.push((end, true));
        }
        rows.sort_by_key(|(r, is_end)| (r.pc, *is_end));
        rows.dedup_by_key(|(r, _)| r.pc);
        let mut rows: Vec<TableRow> = rows.into_iter().map(|(r, _)| r).collect();
        rows.dedup_by(|next, prev| next.cfa == prev.cfa && next.rbp == prev.rbp);
        rows
    }

    // Guards the build in address order (from .eh_frame_hdr's index, rows
    // written as they come): on real libraries it gives exactly the rows
    // that evaluating every FDE and sorting afterwards gives.
    #[test]
    fn building_in_address_order_matches_sorting_every_row() {
        let libraries: Vec<_> = [
            &["libc.so.6"][..],
            &["libstdc++.so.6"],
            &["libLLVM-15.so.1", "libLLVM-14.so.1"],
        ]
        .iter()
        .filter_map(|names| system_library(names))
        .collect();
        assert!(!libraries.is_empty(), "no system library found");
        for path in libraries {
            let data = std::fs::read(&path).unwrap();
            let built: Vec<TableRow> = UnwindTable::from_elf(&data).unwrap().rows().collect();
            let reference = sorted_after_the_fact(&data);
            assert_eq!(built.len(), reference.len(), "{}", path.display());
            if let Some((a, b)) = built.iter().zip(&reference).find(|(a, b)| a != b) {
                panic!("{}: built {a:?}, expected {b:?}", path.display());
            }
        }
    }

    // Guards the 8-byte row: offsets that do not fit its fields become
    // rules the walker does not follow (frame pointers), never wrong ones.
    #[test]
    fn offsets_too_big_for_a_row_are_unsupported() {
        let row = pack(0, CfaRule::Rsp(40_000), RbpRule::AtCfa(-300));
        assert_eq!(unpack(&row), (CfaRule::Unsupported, RbpRule::Unsupported));
        let row = pack(7, CfaRule::Rbp(-16), RbpRule::AtCfa(-16));
        assert_eq!(unpack(&row), (CfaRule::Rbp(-16), RbpRule::AtCfa(-16)));
        let row = pack(7, CfaRule::Plt { threshold: 11 }, RbpRule::Same);
        assert_eq!(
            unpack(&row),
            (CfaRule::Plt { threshold: 11 }, RbpRule::Same)
        );
    }
}
