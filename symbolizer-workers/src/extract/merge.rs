//! Merging symbol-table functions, DWARF functions and line tables into
//! one [`SymbolTable`] of non-overlapping ranges.

use super::dwarf::DwarfInfo;
use super::elf::Symbol;
use crate::table::{Inline, LineRow, NONE, Range};

/// Builds the ranges of the table. An address's function is the primary
/// symbol table's when a symbol there covers it, else DWARF's, else the
/// other symbol tables' (`llvm-symbolizer` does the same with the first
/// two: the ELF's symbol table names aliases and code without debug
/// info). Its inline chain and lines are DWARF's.
pub(super) fn ranges(primary: &[Symbol], secondary: &[Symbol], dwarf: &DwarfInfo) -> Vec<Range> {
    let (lines, covered) = line_rows(&dwarf.sequences);
    let pieces = dwarf_pieces(dwarf);

    let mut bounds: Vec<u64> =
        Vec::with_capacity(2 * (primary.len() + secondary.len() + pieces.len()));
    for s in primary.iter().chain(secondary) {
        bounds.extend([s.start, s.end]);
    }
    for p in &pieces {
        bounds.extend([p.0, p.1]);
    }
    for c in &covered {
        bounds.extend([c.0, c.1]);
    }
    bounds.sort_unstable();
    bounds.dedup();

    // (start, end, function, subprogram, file of a local symbol)
    let mut spans: Vec<(u64, u64, u32, Option<usize>, u32)> = Vec::new();
    let (mut si, mut ti, mut pi, mut ci) = (0, 0, 0, 0);
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        let sym = covering(primary, &mut si, a);
        let other = covering(secondary, &mut ti, a);
        while pi < pieces.len() && pieces[pi].1 <= a {
            pi += 1;
        }
        let sub = pieces.get(pi).filter(|p| p.0 <= a).map(|p| p.2);
        let dwarf_name = sub
            .map(|s| dwarf.subprograms[s].function)
            .filter(|&f| f != NONE);
        while ci < covered.len() && covered[ci].1 <= a {
            ci += 1;
        }
        // Code with lines but no function (padding, assembly) still has
        // a file and line to show.
        let has_lines = covered.get(ci).is_some_and(|c| c.0 <= a);
        let function = match (sym, dwarf_name, other) {
            (Some(s), _, _) => s.function,
            (None, Some(f), _) => f,
            (None, None, Some(s)) => s.function,
            (None, None, None) if sub.is_some() || has_lines => NONE,
            (None, None, None) => continue,
        };
        let file = sym.map_or(NONE, |s| s.file);
        match spans.last_mut() {
            Some(last) if last.1 == a && last.2 == function && last.3 == sub && last.4 == file => {
                last.1 = b
            }
            _ => spans.push((a, b, function, sub, file)),
        }
    }

    spans
        .into_iter()
        .map(|(start, end, function, sub, file)| {
            let mut lines = lines_within(&lines, start, end);
            if lines.is_empty() && file != NONE {
                lines.push(LineRow {
                    addr: start,
                    file,
                    line: 0,
                });
            }
            Range {
                start,
                end,
                function,
                lines,
                inlines: sub.map_or_else(Vec::new, |s| inlines_within(dwarf, s, start, end)),
            }
        })
        .collect()
}

/// The symbol of sorted, non-overlapping `symbols` that covers `at`, with
/// `i` a cursor that only moves forward (as `at` does).
fn covering<'s>(symbols: &'s [Symbol], i: &mut usize, at: u64) -> Option<&'s Symbol> {
    while *i < symbols.len() && symbols[*i].end <= at {
        *i += 1;
    }
    symbols.get(*i).filter(|s| s.start <= at)
}

/// All line rows, sorted, from sequences that do not overlap (the first
/// of overlapping sequences wins); of rows at one address the last holds,
/// as in `llvm-symbolizer`. Also the `[start, end)` the sequences cover.
fn line_rows(sequences: &[Vec<LineRow>]) -> (Vec<LineRow>, Vec<(u64, u64)>) {
    let mut order: Vec<&Vec<LineRow>> = sequences.iter().filter(|s| s.len() >= 2).collect();
    order.sort_by_key(|s| s[0].addr);
    let mut rows: Vec<LineRow> = Vec::new();
    let mut covered: Vec<(u64, u64)> = Vec::new();
    let mut end = 0;
    for seq in order {
        if seq[0].addr < end {
            continue;
        }
        end = seq[seq.len() - 1].addr;
        covered.push((seq[0].addr, end));
        for &row in seq.iter() {
            match rows.last_mut() {
                Some(last) if last.addr == row.addr => *last = row,
                _ => rows.push(row),
            }
        }
    }
    (rows, covered)
}

/// The rows in effect within `[start, end)`, the first at `start`.
fn lines_within(rows: &[LineRow], start: u64, end: u64) -> Vec<LineRow> {
    let first = rows.partition_point(|r| r.addr <= start);
    let mut out: Vec<LineRow> = Vec::new();
    if first > 0 && rows[first - 1].file != NONE {
        out.push(LineRow {
            addr: start,
            ..rows[first - 1]
        });
    }
    for row in rows[first..].iter().take_while(|r| r.addr < end) {
        // Rows that change nothing would only cost space.
        if out
            .last()
            .is_some_and(|l| l.file == row.file && l.line == row.line)
        {
            continue;
        }
        if out.is_empty() && row.file == NONE {
            continue;
        }
        out.push(*row);
    }
    out
}

/// Address pieces of DWARF subprograms, sorted and clipped so that they do
/// not overlap (the one starting first keeps the overlap): (start, end,
/// subprogram index).
fn dwarf_pieces(dwarf: &DwarfInfo) -> Vec<(u64, u64, usize)> {
    let mut pieces: Vec<(u64, u64, usize)> = dwarf
        .subprograms
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.ranges.iter().map(move |&(a, b)| (a, b, i)))
        .collect();
    // Of subprograms at one address (aliases: assembly often declares
    // several names for one body), the last declared wins, as in
    // llvm-symbolizer.
    pieces.sort_unstable_by_key(|&(a, b, i)| (a, std::cmp::Reverse(i), b));
    let mut out: Vec<(u64, u64, usize)> = Vec::with_capacity(pieces.len());
    for (mut a, b, i) in pieces {
        if let Some(last) = out.last() {
            a = a.max(last.1);
        }
        if a < b {
            out.push((a, b, i));
        }
    }
    out
}

fn inlines_within(dwarf: &DwarfInfo, sub: usize, start: u64, end: u64) -> Vec<Inline> {
    let mut out = Vec::new();
    for call in &dwarf.subprograms[sub].inlines {
        for &(a, b) in &call.ranges {
            let (a, b) = (a.max(start), b.min(end));
            if a < b {
                out.push(Inline {
                    start: a,
                    end: b,
                    depth: call.depth,
                    function: call.function,
                    call_file: call.call_file,
                    call_line: call.call_line,
                });
            }
        }
    }
    out
}
