//! Encoding a [`SymbolTable`] as version 1 ksym bytes.

use std::collections::HashMap;

use super::layout::*;
use super::varint;
use crate::ksym::{chains, pages};
use crate::table::{NONE, Range, SymbolTable};

/// Encodes `table` (ranges sorted and not overlapping, as extraction
/// makes them) as a version 1 ksym file, for tests of the upgrade and
/// for comparison: [`crate::ksym::encode`] writes the current version.
/// The same table always gives the same bytes. Functions and files no
/// range refers to are left out.
///
/// A range longer than 4 GiB is cut to 4 GiB.
pub fn encode(table: &SymbolTable) -> Vec<u8> {
    let mut w = Writer::default();
    let mut starts = Vec::with_capacity(table.ranges.len() * 8);
    let mut ranges = Vec::with_capacity(table.ranges.len() * 32);
    let mut chains = Vec::new();
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for range in &table.ranges {
        let len = u32::try_from(range.end.saturating_sub(range.start)).unwrap_or(u32::MAX);
        let function = w.function(table, range.function);
        let lines_off = lines.len();
        let mark_first = marks.len() / 16;
        let rows = w.lines(table, range, len, &mut lines, &mut marks);
        let mark_count = marks.len() / 16 - mark_first;
        let chain_first = chains.len() / 8;
        w.chains(table, range, &mut chains);
        let chain_count = chains.len() / 8 - chain_first;
        starts.extend(range.start.to_le_bytes());
        let record = [
            len,
            function,
            to_u32(lines_off),
            rows,
            to_u32(chain_first),
            to_u32(chain_count),
            to_u32(mark_first),
            to_u32(mark_count),
        ];
        for v in record {
            ranges.extend(v.to_le_bytes());
        }
    }

    let bounds: Vec<(u64, u64)> = table
        .ranges
        .iter()
        .map(|r| {
            let len = u32::try_from(r.end.saturating_sub(r.start)).unwrap_or(u32::MAX);
            (r.start, r.start + u64::from(len))
        })
        .collect();
    let pages = pages::build_over(&bounds, PAGE_LAYOUT);
    SECTION_TABLE.write(
        VERSION,
        0,
        [
            &starts,
            &ranges,
            &chains,
            &w.nodes.bytes,
            &w.funcs,
            &w.files,
            &marks,
            &w.blob,
            &lines,
            &pages,
        ],
    )
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
    strings: HashMap<String, [u32; 2]>,
    funcs: Vec<u8>,
    files: Vec<u8>,
    blob: Vec<u8>,
    nodes: Nodes,
}

/// Each distinct inline node of a file once, numbered in order of first
/// use (which keeps the output deterministic), as 16-byte records: the
/// nodes section.
#[derive(Default)]
struct Nodes {
    ids: HashMap<[u32; 4], u32>,
    bytes: Vec<u8>,
}

impl Nodes {
    /// The id of the node (function, call file, call line, parent).
    fn intern(&mut self, key: [u32; 4]) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = to_u32(self.bytes.len() / 16);
        for v in key {
            self.bytes.extend(v.to_le_bytes());
        }
        self.ids.insert(key, id);
        id
    }
}

impl Writer {
    /// Writes `s` into the blob once; returns its (offset, len).
    fn string(&mut self, s: &str) -> [u32; 2] {
        if let Some(&at) = self.strings.get(s) {
            return at;
        }
        let at = [to_u32(self.blob.len()), to_u32(s.len())];
        self.blob.extend_from_slice(s.as_bytes());
        self.strings.insert(s.to_owned(), at);
        at
    }

    fn function(&mut self, table: &SymbolTable, f: u32) -> u32 {
        let Some(func) = table.functions.get(f as usize) else {
            return NONE;
        };
        if let Some(&id) = self.func_ids.get(&f) {
            return id;
        }
        let name = self.string(&func.name);
        let mangled = func
            .mangled
            .as_deref()
            .map_or([NONE, 0], |m| self.string(m));
        let id = to_u32(self.funcs.len() / 16);
        for v in name.into_iter().chain(mangled) {
            self.funcs.extend(v.to_le_bytes());
        }
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
        let id = to_u32(self.files.len() / 16);
        for v in dir.into_iter().chain(name) {
            self.files.extend(v.to_le_bytes());
        }
        self.file_ids.insert(f, id);
        id
    }

    /// Writes the line rows of `range`, and a mark every [`MARK_EVERY`]
    /// rows; returns how many rows.
    fn lines(
        &mut self,
        table: &SymbolTable,
        range: &Range,
        len: u32,
        out: &mut Vec<u8>,
        marks: &mut Vec<u8>,
    ) -> u32 {
        // `len` rather than `range.end`: the length as written, which only
        // differs for a range cut to 4 GiB.
        let end = range.start + u64::from(len);
        let (mut addr, mut line, mut file) = (range.start, 0i64, NONE);
        let first = out.len();
        let mut rows = 0;
        for row in &range.lines {
            // Rows must go forward within the range; extraction makes them
            // so, and anything else is dropped rather than encoded wrongly.
            if row.addr < addr || row.addr >= end || (rows > 0 && row.addr == addr) {
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
            if rows % MARK_EVERY == 0 {
                let state = [
                    to_u32((addr - range.start) as usize),
                    to_u32(out.len() - first),
                    row.line,
                    file,
                ];
                for v in state {
                    marks.extend(v.to_le_bytes());
                }
            }
        }
        rows
    }

    /// Writes the chain entries of `range`: at every address where the set
    /// of inlined calls around it changes, the innermost call's node.
    fn chains(&mut self, table: &SymbolTable, range: &Range, out: &mut Vec<u8>) {
        let mut last = NONE;
        chains::changes(range, |at, calls| {
            let mut node = NONE;
            for c in calls {
                let function = self.function(table, c.function);
                let file = self.file(table, c.call_file);
                node = self.nodes.intern([function, file, c.call_line, node]);
            }
            if node != last && (node != NONE || last != NONE) {
                out.extend(to_u32((at - range.start) as usize).to_le_bytes());
                out.extend(node.to_le_bytes());
                last = node;
            }
        });
    }
}
