//! Encoding a [`SymbolTable`] as ksym bytes.

use std::collections::HashMap;

use super::layout::*;
use super::varint;
use crate::table::{Inline, NONE, Range, SymbolTable};

/// Encodes `table` (ranges sorted and not overlapping, as extraction
/// makes them) as a ksym file. The same table always gives the same
/// bytes. Functions and files no range refers to are left out.
///
/// A range longer than 4 GiB is cut to 4 GiB.
pub fn encode(table: &SymbolTable) -> Vec<u8> {
    let mut w = Writer::default();
    let mut starts = Vec::with_capacity(table.ranges.len() * 8);
    let mut ranges = Vec::with_capacity(table.ranges.len() * 24);
    let mut chains = Vec::new();
    let mut lines = Vec::new();
    for range in &table.ranges {
        let len = u32::try_from(range.end.saturating_sub(range.start)).unwrap_or(u32::MAX);
        let function = w.function(table, range.function);
        let lines_off = lines.len();
        let rows = w.lines(table, range, &mut lines);
        let chain_first = chains.len() / 8;
        w.chains(table, range, &mut chains);
        let chain_count = chains.len() / 8 - chain_first;
        starts.extend(range.start.to_le_bytes());
        for v in [
            len,
            function,
            to_u32(lines_off),
            rows,
            to_u32(chain_first),
            to_u32(chain_count),
        ] {
            ranges.extend(v.to_le_bytes());
        }
    }

    let mut out = vec![0u8; HEADER_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&VERSION.to_le_bytes());
    out[8..12].copy_from_slice(&to_u32(HEADER_LEN).to_le_bytes());
    let sections: [(usize, &[u8]); SECTIONS] = [
        (STARTS, &starts),
        (RANGES, &ranges),
        (CHAINS, &chains),
        (NODES, &w.nodes),
        (FUNCS, &w.funcs),
        (FILES, &w.files),
        (STRS, &w.strs),
        (BLOB, &w.blob),
        (LINES, &lines),
    ];
    for (section, bytes) in sections {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let at = 16 + 8 * section;
        let (offset, count) = (to_u32(out.len()), to_u32(bytes.len() / RECORD[section]));
        out[at..at + 4].copy_from_slice(&offset.to_le_bytes());
        out[at + 4..at + 8].copy_from_slice(&count.to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Sizes beyond `u32` cannot be written; a table that large (over 4 GiB of
/// symbols) is not something extraction produces.
fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Interning state: each function, file, string and chain node is written
/// once, numbered in order of first use, which keeps the output
/// deterministic.
#[derive(Default)]
struct Writer {
    func_ids: HashMap<u32, u32>,
    file_ids: HashMap<u32, u32>,
    str_ids: HashMap<String, u32>,
    node_ids: HashMap<[u32; 4], u32>,
    funcs: Vec<u8>,
    files: Vec<u8>,
    strs: Vec<u8>,
    blob: Vec<u8>,
    nodes: Vec<u8>,
}

impl Writer {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.str_ids.get(s) {
            return id;
        }
        let id = to_u32(self.strs.len() / 8);
        self.strs.extend(to_u32(self.blob.len()).to_le_bytes());
        self.strs.extend(to_u32(s.len()).to_le_bytes());
        self.blob.extend_from_slice(s.as_bytes());
        self.str_ids.insert(s.to_owned(), id);
        id
    }

    fn function(&mut self, table: &SymbolTable, f: u32) -> u32 {
        let Some(func) = table.functions.get(f as usize) else {
            return NONE;
        };
        if let Some(&id) = self.func_ids.get(&f) {
            return id;
        }
        let name = self.string(&func.name);
        let mangled = func.mangled.as_deref().map_or(NONE, |m| self.string(m));
        let id = to_u32(self.funcs.len() / 8);
        self.funcs.extend(name.to_le_bytes());
        self.funcs.extend(mangled.to_le_bytes());
        self.func_ids.insert(f, id);
        id
    }

    fn file(&mut self, table: &SymbolTable, f: u32) -> u32 {
        let Some(file) = table.files.get(f as usize) else {
            return NONE;
        };
        if let Some(&id) = self.file_ids.get(&f) {
            return id;
        }
        let dir = self.string(&file.dir);
        let name = self.string(&file.name);
        let id = to_u32(self.files.len() / 8);
        self.files.extend(dir.to_le_bytes());
        self.files.extend(name.to_le_bytes());
        self.file_ids.insert(f, id);
        id
    }

    /// Writes the line rows of `range`; returns how many.
    fn lines(&mut self, table: &SymbolTable, range: &Range, out: &mut Vec<u8>) -> u32 {
        let (mut addr, mut line, mut file) = (range.start, 0i64, NONE);
        let mut rows = 0;
        for row in &range.lines {
            // Rows must go forward within the range; extraction makes them
            // so, and anything else is dropped rather than encoded wrongly.
            if row.addr < addr || row.addr >= range.end || (rows > 0 && row.addr == addr) {
                continue;
            }
            let row_file = self.file(table, row.file);
            let changed = row_file != file;
            varint::write_u64(out, ((row.addr - addr) << 1) | u64::from(changed));
            varint::write_i64(out, i64::from(row.line) - line);
            if changed {
                varint::write_u64(out, u64::from(row_file.wrapping_add(1)));
            }
            (addr, line, file) = (row.addr, i64::from(row.line), row_file);
            rows += 1;
        }
        rows
    }

    /// Writes the chain entries of `range`: at every address where the set
    /// of inlined calls around it changes, the innermost call's node.
    fn chains(&mut self, table: &SymbolTable, range: &Range, out: &mut Vec<u8>) {
        if range.inlines.is_empty() {
            return;
        }
        let mut calls: Vec<&Inline> = range.inlines.iter().filter(|c| c.start < c.end).collect();
        calls.sort_by_key(|c| (c.start, c.depth, c.end));
        let mut bounds: Vec<u64> = calls.iter().flat_map(|c| [c.start, c.end]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut active: Vec<&Inline> = Vec::new();
        let mut next = 0;
        let mut last = NONE;
        for &at in &bounds {
            if at >= range.end {
                break;
            }
            active.retain(|c| c.end > at);
            while next < calls.len() && calls[next].start <= at {
                if calls[next].end > at {
                    active.push(calls[next]);
                }
                next += 1;
            }
            // Outermost first; of two calls at one depth (which only broken
            // DWARF has), the later-starting one is the closer.
            active.sort_by_key(|c| (c.depth, c.start));
            let mut node = NONE;
            for (i, c) in active.iter().enumerate() {
                if active.get(i + 1).is_some_and(|d| d.depth == c.depth) {
                    continue;
                }
                let key = [
                    self.function(table, c.function),
                    self.file(table, c.call_file),
                    c.call_line,
                    node,
                ];
                node = match self.node_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = to_u32(self.nodes.len() / 16);
                        for v in key {
                            self.nodes.extend(v.to_le_bytes());
                        }
                        self.node_ids.insert(key, id);
                        id
                    }
                };
            }
            if node != last && (node != NONE || last != NONE) {
                out.extend(to_u32((at - range.start) as usize).to_le_bytes());
                out.extend(node.to_le_bytes());
                last = node;
            }
        }
    }
}
