//! What the ELF itself says: executable sections and function symbols.

use object::{
    Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind, SymbolKind, SymbolSection,
};

use super::demangle;
use super::intern::Interner;
use crate::table::{Function, NONE, SourceFile};

/// A function symbol: `[start, end)` named `function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Symbol {
    pub start: u64,
    pub end: u64,
    /// Index into the function interner.
    pub function: u32,
    /// For a local symbol, the source file its `STT_FILE` symbol names
    /// (index into the file interner), or [`NONE`]: all a symbolizer can
    /// say of the file of code without line tables.
    pub file: u32,
}

/// The address ranges of the executable sections, sorted.
///
/// DWARF of code the linker discarded keeps "tombstone" addresses (0, or
/// -1/-2 in DWARF 5); anything outside these ranges is such code.
///
/// In a separate debug file the code sections are `SHT_NOBITS` (their
/// bytes stayed in the stripped file) but keep their addresses and the
/// executable flag: they count, so that a debug file alone (from a distro
/// package or debuginfod) yields its symbols.
pub(super) fn text_ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| (s.kind() == SectionKind::Text || is_exec_alloc(s.flags())) && s.size() > 0)
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    ranges.sort_unstable();
    ranges
}

/// Whether ELF section flags say "allocated, executable".
fn is_exec_alloc(flags: SectionFlags) -> bool {
    let want = object::elf::SHF_ALLOC.0 | object::elf::SHF_EXECINSTR.0;
    matches!(flags, SectionFlags::Elf { sh_flags, .. } if sh_flags.0 & want == want)
}

/// Whether `[start, end)` lies within one of `text` (sorted ranges).
pub(super) fn in_text(text: &[(u64, u64)], start: u64, end: u64) -> bool {
    let i = text.partition_point(|&(s, _)| s <= start);
    i > 0 && start < end && end <= text[i - 1].1
}

/// One candidate symbol before aliases are merged.
struct Candidate<'a> {
    start: u64,
    size: u64,
    /// 1 global or weak, 0 local: of aliases, a name visible outside the
    /// file wins (`malloc` rather than a local `__GI___libc_malloc`).
    rank: u8,
    /// File, then index in its table.
    order: (usize, usize),
    name: &'a str,
    file: Option<&'a str>,
}

/// Which symbol tables [`function_symbols`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tables {
    /// The table `llvm-symbolizer` reads: the ELF's `.symtab`, or its
    /// `.dynsym` when it has no `.symtab` (a stripped file). Its names win
    /// over DWARF's (they name aliases and code without debug info).
    Primary,
    /// All the others, including the debug file's: they only name code
    /// nothing else names (their local `foo.cold` parts would otherwise
    /// hide the DWARF name `foo`).
    Secondary,
}

/// Function symbols of `files` (the ELF, then its debug file) from
/// the `tables` wanted, one per address, each ending where the next begins
/// at the latest.
///
/// This mirrors how `llvm-symbolizer` reads symbol tables: an address
/// belongs to the nearest symbol at or below it, if that one's size covers
/// it.
pub(super) fn function_symbols(
    objects: &[&object::File<'_>],
    tables: Tables,
    text: &[(u64, u64)],
    functions: &mut Interner<Function>,
    files: &mut Interner<SourceFile>,
) -> Vec<Symbol> {
    let mut candidates = Vec::new();
    for (f, file) in objects.iter().enumerate() {
        let has_symtab = file.symbols().next().is_some();
        let primary = [
            (file.symbols(), f == 0),
            (file.dynamic_symbols(), f == 0 && !has_symtab),
        ];
        for (symbols, is_primary) in primary {
            if is_primary != (tables == Tables::Primary) {
                continue;
            }
            let mut file_name = None;
            for (index, sym) in symbols.enumerate() {
                if sym.kind() == SymbolKind::File {
                    file_name = sym.name().ok().filter(|n| !n.is_empty());
                    continue;
                }
                // Not `is_definition()`: that leaves out GNU ifuncs
                // (`memchr`), which name code like any function. Untyped
                // symbols in code are assembly labels (zstd's
                // `HUF_decompress…_asm_loop`), named by llvm-symbolizer too.
                let code_kind = matches!(sym.kind(), SymbolKind::Text | SymbolKind::Unknown);
                if !code_kind || !matches!(sym.section(), SymbolSection::Section(_)) {
                    continue;
                }
                let Ok(name) = sym.name() else { continue };
                // `$x`-style mapping symbols and `.L` local labels name no
                // function.
                let label = name.starts_with('$') || name.starts_with(".L");
                if name.is_empty()
                    || label
                    || !in_text(text, sym.address(), sym.address().saturating_add(1))
                {
                    continue;
                }
                candidates.push(Candidate {
                    start: sym.address(),
                    size: sym.size(),
                    rank: u8::from(sym.is_global() || sym.is_weak()),
                    order: (f, index),
                    name,
                    file: if sym.is_local() { file_name } else { None },
                });
            }
        }
    }
    // Best alias first within an address. Between equals, the largest and
    // then the last in its table, as llvm-symbolizer picks them (so that
    // `kiln symbols resolve` and it name `_ZN…D1Ev`/`D2Ev` aliases alike);
    // symbol order is fixed for a file, so output stays deterministic.
    candidates.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(b.rank.cmp(&a.rank))
            .then(a.order.0.cmp(&b.order.0))
            .then(b.size.cmp(&a.size))
            .then(b.order.1.cmp(&a.order.1))
    });
    let mut out: Vec<Symbol> = Vec::with_capacity(candidates.len());
    let mut i = 0;
    while i < candidates.len() {
        let best = &candidates[i];
        let mut j = i;
        let mut size = 0;
        // Aliases share the name of the best one and the largest size.
        while j < candidates.len() && candidates[j].start == best.start {
            size = size.max(candidates[j].size);
            j += 1;
        }
        // A symbol without a size (assembly, crt files) reaches to the next
        // symbol or the end of its section, as llvm-symbolizer takes it.
        let section_end = text.get(
            text.partition_point(|&(s, _)| s <= best.start)
                .wrapping_sub(1),
        );
        // A size past the end of the section is damage: clip it.
        let mut end = match (size, section_end) {
            (0, Some(&(_, e))) => e,
            (_, Some(&(_, e))) => best.start.saturating_add(size).min(e),
            _ => best.start.saturating_add(size),
        };
        if let Some(next) = candidates.get(j) {
            end = end.min(next.start);
        }
        let function = functions.intern(demangle::function(best.name));
        let file = best
            .file
            .map_or(NONE, |f| files.intern(SourceFile::from_path(f)));
        out.push(Symbol {
            start: best.start,
            end,
            function,
            file,
        });
        i = j;
    }
    out
}
