//! Inline chains as every ksym writer writes them: at every offset of a
//! range where the set of inlined calls around it changes, the innermost
//! call's node, each node (function, call file, call line, parent) written
//! once (for the range, in `write.rs`; for the whole file in version 1).

use crate::table::{Inline, Range};

/// Calls `at` with each address of `range` where the set of inlined calls
/// around it changes, and those calls, outermost first (of two calls at
/// one depth, which only broken DWARF has, the later-starting one, the
/// closer).
pub(super) fn changes<'t>(range: &'t Range, mut at: impl FnMut(u64, &[&'t Inline])) {
    if range.inlines.is_empty() {
        return;
    }
    let mut calls: Vec<&Inline> = range.inlines.iter().filter(|c| c.start < c.end).collect();
    calls.sort_by_key(|c| (c.start, c.depth, c.end));
    let mut bounds: Vec<u64> = calls.iter().flat_map(|c| [c.start, c.end]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut active: Vec<&Inline> = Vec::new();
    let mut chain: Vec<&Inline> = Vec::new();
    let mut next = 0;
    for &addr in &bounds {
        if addr >= range.end {
            break;
        }
        active.retain(|c| c.end > addr);
        while next < calls.len() && calls[next].start <= addr {
            if calls[next].end > addr {
                active.push(calls[next]);
            }
            next += 1;
        }
        active.sort_by_key(|c| (c.depth, c.start));
        chain.clear();
        for (i, c) in active.iter().enumerate() {
            if active.get(i + 1).is_none_or(|d| d.depth != c.depth) {
                chain.push(c);
            }
        }
        at(addr, &chain);
    }
}
