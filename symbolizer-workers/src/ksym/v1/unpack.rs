//! Reading a whole version 1 file back into the [`SymbolTable`] it was
//! written from, for [`upgrade`](crate::ksym::upgrade).

use super::read::Ksym;
use crate::ksym::fields::{u32_at, u64_at};
use crate::ksym::{KsymError, varint};
use crate::table::{Function, Inline, LineRow, NONE, Range, SourceFile, SymbolTable};

impl Ksym<'_> {
    /// The table these bytes encode, as far as the layout keeps it
    /// (encoding it again gives the same answers to every lookup):
    /// functions and files in their ksym order, each range's line rows,
    /// and its inline calls rebuilt from the chain entries. Verifies the
    /// whole file first, so damage gives an error, never a partial table.
    pub fn to_table(&self) -> Result<SymbolTable, KsymError> {
        self.verify()?;
        let names = &self.names;
        let string = |records: &[u8], at: usize| names.string(records, at).unwrap_or("");
        let functions = (0..names.functions())
            .map(|i| Function {
                name: string(names.funcs, 16 * i).to_owned(),
                mangled: names.string(names.funcs, 16 * i + 8).map(str::to_owned),
            })
            .collect();
        let files = (0..names.files())
            .map(|i| SourceFile {
                dir: string(names.files, 16 * i).to_owned(),
                name: string(names.files, 16 * i + 8).to_owned(),
            })
            .collect();
        let ranges = (0..self.len())
            .map(|r| self.range_at(r))
            .collect::<Result<_, _>>()?;
        Ok(SymbolTable {
            functions,
            files,
            ranges,
        })
    }

    fn range_at(&self, r: usize) -> Result<Range, KsymError> {
        let start = u64_at(self.starts, 8 * r);
        let rec = 32 * r;
        let len = u32_at(self.ranges, rec);
        Ok(Range {
            start,
            end: start + u64::from(len),
            function: u32_at(self.ranges, rec + 4),
            lines: self.rows(r, start)?,
            inlines: self.inlines(r, start, len),
        })
    }

    /// The line rows of range `r` (which `verify` found to decode).
    fn rows(&self, r: usize, start: u64) -> Result<Vec<LineRow>, KsymError> {
        let bad = KsymError::BadLines { range: r };
        let mut pos = u32_at(self.ranges, 32 * r + 8) as usize;
        let count = u32_at(self.ranges, 32 * r + 12);
        let (mut addr, mut line, mut file) = (start, 0i64, NONE);
        let mut rows = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let head = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
            let delta = varint::read_i64(self.lines, &mut pos).ok_or(bad.clone())?;
            if head & 1 == 1 {
                let f = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
                file = (f as u32).wrapping_sub(1);
            }
            addr += head >> 1;
            line += delta;
            rows.push(LineRow {
                addr,
                file,
                line: line as u32,
            });
        }
        Ok(rows)
    }

    /// The inline calls of range `r`: each chain entry holds the chain of
    /// nodes around its addresses, outermost at depth 1; a node that stays
    /// at its depth over consecutive entries is one call.
    fn inlines(&self, r: usize, start: u64, len: u32) -> Vec<Inline> {
        let first = u32_at(self.ranges, 32 * r + 16) as usize;
        let count = u32_at(self.ranges, 32 * r + 20) as usize;
        let mut calls: Vec<Inline> = Vec::new();
        // Per depth, the node and call open at the previous entry's end.
        let mut open: Vec<(u32, usize)> = Vec::new();
        let mut chain = Vec::new();
        for c in first..first + count {
            let from = u32_at(self.chains, 8 * c);
            let to = if c + 1 < first + count {
                u32_at(self.chains, 8 * (c + 1))
            } else {
                len
            };
            chain.clear();
            let mut node = u32_at(self.chains, 8 * c + 4);
            // Bounded: verify() checked that parents come first.
            while (node as usize) < self.nodes.len() / 16 {
                chain.push(node);
                node = u32_at(self.nodes, 16 * node as usize + 12);
            }
            chain.reverse();
            open.truncate(
                open.iter()
                    .zip(&chain)
                    .take_while(|((n, _), m)| n == *m)
                    .count(),
            );
            for (depth, &n) in chain.iter().enumerate() {
                if let Some(&(_, call)) = open.get(depth) {
                    calls[call].end = start + u64::from(to);
                    continue;
                }
                let at = 16 * n as usize;
                open.push((n, calls.len()));
                calls.push(Inline {
                    start: start + u64::from(from),
                    end: start + u64::from(to),
                    depth: depth as u32 + 1,
                    function: u32_at(self.nodes, at),
                    call_file: u32_at(self.nodes, at + 4),
                    call_line: u32_at(self.nodes, at + 8),
                });
            }
        }
        calls
    }
}
