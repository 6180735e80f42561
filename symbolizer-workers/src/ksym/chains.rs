//! Inline chains as every ksym version writes them: at every offset of a
//! range where the set of inlined calls around it changes, the innermost
//! call's node, each node (function, call file, call line, parent) written
//! once ([`Nodes`] for the whole file, as version 1 does; versions 3 and 4 keep
//! each range's own, in `write.rs`).

use std::collections::HashMap;

use crate::table::{Inline, Range};

/// Each distinct inline node of a file once, numbered in order of first
/// use (which keeps the output deterministic), as 16-byte records: the
/// nodes section of version 1.
#[derive(Debug, Default)]
pub(super) struct Nodes {
    ids: HashMap<[u32; 4], u32>,
    pub(super) bytes: Vec<u8>,
}

impl Nodes {
    /// The id of the node (function, call file, call line, parent).
    pub(super) fn intern(&mut self, key: [u32; 4]) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = u32::try_from(self.bytes.len() / 16).unwrap_or(u32::MAX);
        for v in key {
            self.bytes.extend(v.to_le_bytes());
        }
        self.ids.insert(key, id);
        id
    }
}

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
