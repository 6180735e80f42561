//! Reading a whole version 1 file back into the [`SymbolTable`] it was
//! written from, for [`upgrade`](crate::ksym::upgrade()).

use super::read::Ksym;
use super::varint;
use crate::ksym::KsymError;
use crate::ksym::earlier::{Node, inlines, names};
use crate::ksym::fields::{u32_at, u64_at};
use crate::table::{LineRow, NONE, Range, SymbolTable};

/// The table version 1 `data` encodes, as far as the layout keeps it
/// (encoding it again gives the same answers to every lookup): functions
/// and files in their ksym order, each range's line rows, and its inline
/// calls rebuilt from the chain entries. Checks the whole file, so damage
/// gives an error, never a partial table.
pub(in crate::ksym::earlier) fn to_table(data: &[u8]) -> Result<SymbolTable, KsymError> {
    let k = Ksym::open(data)?;
    let functions = names::functions(k.funcs, k.blob)?;
    let files = names::files(k.files, k.blob)?;
    // open() checked every index of the nodes, and parents come first.
    let nodes: Vec<Node> = (0..k.nodes.len() / 16)
        .map(|i| {
            let [function, call_file, call_line, parent] =
                [0, 4, 8, 12].map(|at| u32_at(k.nodes, 16 * i + at));
            Node {
                function,
                call_file,
                call_line,
                parent: (parent != NONE).then_some(parent as usize),
            }
        })
        .collect();
    let ranges = (0..k.len())
        .map(|r| k.range_at(r, files.len(), &nodes))
        .collect::<Result<_, _>>()?;
    Ok(SymbolTable {
        functions,
        files,
        ranges,
    })
}

impl Ksym<'_> {
    /// Range `r`, in a file of `n_files` files and these inline `nodes`.
    fn range_at(&self, r: usize, n_files: usize, nodes: &[Node]) -> Result<Range, KsymError> {
        let start = u64_at(self.starts, 8 * r);
        let rec = 32 * r;
        let len = u32_at(self.ranges, rec);
        // open() checked the range's chain entries: within the chains
        // section, ascending within the range, each a node or none.
        let first = u32_at(self.ranges, rec + 16) as usize;
        let count = u32_at(self.ranges, rec + 20) as usize;
        let entries: Vec<(u32, Option<usize>)> = (first..first + count)
            .map(|c| {
                let node = u32_at(self.chains, 8 * c + 4);
                (
                    u32_at(self.chains, 8 * c),
                    (node != NONE).then_some(node as usize),
                )
            })
            .collect();
        Ok(Range {
            start,
            end: start + u64::from(len),
            function: u32_at(self.ranges, rec + 4),
            lines: self.rows(r, start, len, n_files)?,
            inlines: inlines(start, len, &entries, nodes),
        })
    }

    /// The line rows of range `r`, from `start`, `len` bytes long, in a
    /// file of `n_files` files: an error unless each decodes, lies within
    /// the range after the one before, and names a file that exists (or
    /// none) and a line that fits.
    fn rows(
        &self,
        r: usize,
        start: u64,
        len: u32,
        n_files: usize,
    ) -> Result<Vec<LineRow>, KsymError> {
        let bad = KsymError::BadLines { range: r };
        let mut pos = u32_at(self.ranges, 32 * r + 8) as usize;
        let count = u32_at(self.ranges, 32 * r + 12);
        let end = start + u64::from(len);
        let (mut addr, mut line, mut file) = (start, 0i64, NONE);
        let mut rows = Vec::new();
        for i in 0..count {
            let head = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
            let delta = varint::read_i64(self.lines, &mut pos).ok_or(bad.clone())?;
            if head & 1 == 1 {
                let f = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
                if f > n_files as u64 {
                    return Err(bad);
                }
                file = (f as u32).wrapping_sub(1);
            }
            let step = head >> 1;
            addr = addr.checked_add(step).ok_or(bad.clone())?;
            line = line.checked_add(delta).ok_or(bad.clone())?;
            let row_line = u32::try_from(line).map_err(|_| bad.clone())?;
            if addr >= end || (i > 0 && step == 0) {
                return Err(bad);
            }
            rows.push(LineRow {
                addr,
                file,
                line: row_line,
            });
        }
        Ok(rows)
    }
}
