//! Compact unwind tables from an ELF's `.eh_frame`, for unwinding code
//! built without frame pointers (step 1 of the `.eh_frame` unwinder; see
//! the crate docs for the plan).
//!
//! gimli evaluates each FDE's call-frame instructions into rows; this module
//! keeps, for x86-64, only what a BPF walker needs at each address: how to
//! find the CFA (rsp or rbp plus an offset, or the PLT rule), and where the
//! caller's rbp was saved. The return address is always at CFA − 8 on
//! x86-64, so it needs no column. Rows are sorted by address; a row holds
//! until the next one, and [`CfaRule::None`] marks addresses no FDE covers.
//!
//! [`Unwinder`](crate::unwinder::Unwinder) pushes the tables of each
//! process's files into the eBPF program's maps (`unwind_rows`,
//! `proc_mappings`), where `unwind_step()` in `profiler.bpf.c` walks them.

use gimli::{
    BaseAddresses, CfaRule as GimliCfa, CieOrFde, EhFrame, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, X86_64,
};
use object::{Object, ObjectSection};

use crate::abi::{self, UnwindRow};

/// Largest `.eh_frame` the agent builds a table for, whatever the size of
/// its map. A row takes 5 to 7 bytes of `.eh_frame` (libc: 150 KiB, 28k
/// rows; a 55 MB Rust server: 3.9 MiB, 820k rows; LLVM's library: 5 MiB,
/// 950k rows), and building a table holds it in memory (the 820k rows
/// peak at ~45 MiB), so past this the agent's memory is worth more than
/// the file's stacks, which are walked by frame pointers. The map's size
/// usually decides first: a file's table may take at most half of it
/// (see `unwinder.rs`).
pub const MAX_EH_FRAME_BYTES: u64 = 8 * 1024 * 1024;

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

impl TableRow {
    /// The row as the BPF maps will hold it.
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "read once the BPF walker loads tables (the next step)"
        )
    )]
    pub(crate) fn to_abi(self) -> UnwindRow {
        let (cfa_type, cfa_offset) = match self.cfa {
            CfaRule::None => (abi::CFA_NONE, 0),
            CfaRule::Rsp(o) => (abi::CFA_RSP, o),
            CfaRule::Rbp(o) => (abi::CFA_RBP, o),
            CfaRule::Plt { threshold } => (abi::CFA_PLT, i32::from(threshold)),
            CfaRule::Unsupported => (abi::CFA_UNSUPPORTED, 0),
            CfaRule::End => (abi::CFA_END, 0),
        };
        let (rbp_type, rbp_offset) = match self.rbp {
            RbpRule::Same => (abi::RBP_SAME, 0),
            RbpRule::AtCfa(o) => (abi::RBP_AT_CFA, o),
            RbpRule::Unsupported => (abi::RBP_UNSUPPORTED, 0),
        };
        UnwindRow {
            pc: self.pc,
            cfa_offset,
            rbp_offset,
            cfa_type,
            rbp_type,
        }
    }
}

/// The unwind table of one file, sorted by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindTable {
    rows: Vec<TableRow>,
}

impl UnwindTable {
    /// Builds the table of an x86-64 ELF file from its bytes.
    pub fn from_elf(data: &[u8]) -> Result<UnwindTable, UnwindError> {
        let file = object::File::parse(data)?;
        let section = file
            .section_by_name(".eh_frame")
            .ok_or(UnwindError::NoEhFrame)?;
        let bytes = section.data()?;
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = file.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = file.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let eh_frame = EhFrame::new(bytes, LittleEndian);
        Self::from_eh_frame(&eh_frame, &bases)
    }

    /// Builds the table of the x86-64 ELF file at `path`, reading only its
    /// headers and `.eh_frame`.
    /// Files whose `.eh_frame` is over `max_bytes` (or
    /// [`MAX_EH_FRAME_BYTES`]) are refused before any parsing.
    pub fn from_path(path: &std::path::Path, max_bytes: u64) -> Result<UnwindTable, UnwindError> {
        let file = std::fs::File::open(path).map_err(|e| UnwindError::Read {
            path: path.to_path_buf(),
            source: e,
        })?;
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache)?;
        let section = elf
            .section_by_name(".eh_frame")
            .ok_or(UnwindError::NoEhFrame)?;
        if section.size() > MAX_EH_FRAME_BYTES.min(max_bytes) {
            return Err(UnwindError::TooBig(section.size()));
        }
        let bytes = section.data()?;
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = elf.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = elf.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        Self::from_eh_frame(&EhFrame::new(bytes, LittleEndian), &bases)
    }

    fn from_eh_frame(
        eh_frame: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>,
        bases: &BaseAddresses,
    ) -> Result<UnwindTable, UnwindError> {
        // Rows with whether they are an FDE's end marker, which must lose
        // to a row of an FDE that starts at the same address.
        let mut rows: Vec<(TableRow, bool)> = Vec::new();
        let mut ctx = UnwindContext::new();
        let mut entries = eh_frame.entries(bases);
        while let Some(entry) = entries.next()? {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let fde = partial.parse(EhFrame::cie_from_offset)?;
            let mut table = fde.rows(eh_frame, bases, &mut ctx)?;
            while let Some(row) = table.next_row()? {
                let end = matches!(row.register(X86_64::RA), Some(RegisterRule::Undefined));
                let cfa = if end {
                    CfaRule::End
                } else {
                    cfa_rule(row.cfa(), eh_frame)
                };
                let rbp = rbp_rule(row.register(X86_64::RBP));
                let pc = row.start_address();
                rows.push((TableRow { pc, cfa, rbp }, false));
            }
            let end = TableRow {
                pc: fde.end_address(),
                cfa: CfaRule::None,
                rbp: RbpRule::Same,
            };
            rows.push((end, true));
        }
        // By address, real rows before end markers; then one row per
        // address (the first), and no row that repeats the one before.
        rows.sort_by_key(|(r, is_end)| (r.pc, *is_end));
        rows.dedup_by_key(|(r, _)| r.pc);
        let mut rows: Vec<TableRow> = rows.into_iter().map(|(r, _)| r).collect();
        rows.dedup_by(|next, prev| next.cfa == prev.cfa && next.rbp == prev.rbp);
        rows.shrink_to_fit();
        Ok(UnwindTable { rows })
    }

    /// The rows, sorted by address.
    pub fn rows(&self) -> &[TableRow] {
        &self.rows
    }

    /// The row that holds at `pc`; `None` before the first row.
    pub fn find(&self, pc: u64) -> Option<&TableRow> {
        let i = self.rows.partition_point(|r| r.pc <= pc);
        self.rows.get(i.checked_sub(1)?)
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

fn cfa_rule(
    rule: &GimliCfa<usize>,
    eh_frame: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>,
) -> CfaRule {
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

    // Guards the table of a real system library: it builds, covers its
    // code, and almost all of it is in rules the walker will follow.
    #[test]
    fn libc_table_is_mostly_supported() {
        let Some(libc) = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            return;
        };
        let table = UnwindTable::from_elf(&std::fs::read(libc).unwrap()).unwrap();
        let rows = table.rows();
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
            "{libc}: {} rows ({} KiB as BPF rows), {unsupported} unsupported, {plt} PLT",
            rows.len(),
            rows.len() * size_of::<UnwindRow>() / 1024
        );
        assert!(
            unsupported * 100 < rows.len(),
            "{unsupported} of {} rows unsupported",
            rows.len()
        );
        for row in rows {
            let _ = row.to_abi();
        }
    }
}
