//! Versions 2 to 5, read whole. Each is version 6 (see the layout in
//! `ksym`) but for:
//!
//! - no `mangled` section: mangled names and hash texts are in the blob;
//! - version 2: a body whose format gives its node references no width
//!   (code 0) has no node count and no nodes of its own, and refers by
//!   4-byte ids (or none) to the inline nodes of the `nodes` section,
//!   shared by every range (16 bytes each: function | call file |
//!   call line | parent, an earlier node or none);
//! - versions 2 and 3: no flags, every file wide with 32-byte range
//!   records; version 4: the narrow flag only, 32-byte records.
//!
//! (Version 3 kept the hash of every Rust legacy name as text, as version
//! 6 keeps those it cannot hold as a number: nothing to do here.)

use super::{Inline, Node, inlines, names};
use crate::ksym::KsymError;
use crate::ksym::fields::{check, records, u32_at};
use crate::ksym::header::Sections;
use crate::ksym::layout::{
    BUCKET_SHIFT, COMPACT, FileLayout, Format, PAGE_LAYOUT, Records, Widths, reads_as_none,
};
use crate::ksym::pages;
use crate::ksym::ranges::RangeRecord;
use crate::table::{LineRow, NONE, Range, SymbolTable};

/// The sections of these versions, in header order, with range records
/// of `records`.
fn section_table(records: Records) -> Sections<7> {
    Sections {
        names: [
            "ranges", "bodies", "nodes", "funcs", "files", "blob", "pages",
        ],
        record: [records.len(), 1, 16, 16, 16, 1, 4],
    }
}

/// The layout of a file of `version` with header `flags`, or `None` for
/// flags its version does not define.
fn layout(version: u32, flags: u32) -> Option<FileLayout> {
    match version {
        // The flags word was reserved: every file wide, of full records.
        ..4 => FileLayout::from_flags(0),
        4 if flags & COMPACT != 0 => None,
        _ => FileLayout::from_flags(flags),
    }
}

/// The table a file of `version` (2 to 5) encodes, when it verifies as
/// the reader of those versions verified it.
pub(super) fn to_table(data: &[u8], version: u32) -> Result<SymbolTable, KsymError> {
    let layout = layout(version, u32_at(data, 12));
    let sized_by = layout.map_or(Records::Full, |l| l.records);
    let (sections, _) = section_table(sized_by).read(data, |v| match v {
        2..=5 => Ok(()),
        _ => Err(KsymError::UnsupportedVersion(v)),
    })?;
    let layout = layout.ok_or(KsymError::BadHeader)?;
    let [ranges, bodies, nodes, funcs, files, blob, pages] = sections;
    let functions = names::functions(funcs, blob)?;
    let files = names::files(files, blob)?;
    let reader = Reader {
        functions: functions.len(),
        files: files.len(),
        shared: shared_nodes(nodes, functions.len(), files.len())?,
        bodies,
        widths: layout.widths,
    };
    let ranges = match layout.records {
        Records::Full => reader.ranges::<32>(ranges)?,
        Records::Compact => reader.ranges::<24>(ranges)?,
    };
    let bounds: Vec<(u64, u64)> = ranges.iter().map(|r| (r.start, r.end)).collect();
    pages::check_exact(pages, &bounds, PAGE_LAYOUT)?;
    Ok(SymbolTable {
        functions,
        files,
        ranges,
    })
}

/// The inline nodes of the `nodes` section (version 2).
fn shared_nodes(nodes: &[u8], functions: usize, files: usize) -> Result<Vec<Node>, KsymError> {
    let node = |i: usize, n: &[u8; 16]| {
        let [function, call_file, call_line, parent] = [0, 4, 8, 12].map(|at| u32_at(n, at));
        check("inline node", i, function, functions, true)?;
        check("inline node", i, call_file, files, true)?;
        check("inline node", i, parent, i, true)?;
        Ok(Node {
            function,
            call_file,
            call_line,
            parent: (parent != NONE).then_some(parent as usize),
        })
    };
    records::<16>(nodes)
        .iter()
        .enumerate()
        .map(|(i, n)| node(i, n))
        .collect()
}

/// What reading a file's ranges takes.
struct Reader<'a> {
    functions: usize,
    files: usize,
    shared: Vec<Node>,
    bodies: &'a [u8],
    widths: Widths,
}

impl Reader<'_> {
    /// The ranges of range records of `N` bytes: sorted, not empty, not
    /// overlapping, each with a body that reads.
    fn ranges<const N: usize>(&self, ranges: &[u8]) -> Result<Vec<Range>, KsymError> {
        let mut prev_end = 0;
        let mut out = Vec::with_capacity(ranges.len() / N);
        for (r, record) in records::<N>(ranges).iter().enumerate() {
            let record = RangeRecord(record);
            let (start, len, function) = (record.start(), record.len(), record.function());
            let end = start
                .checked_add(u64::from(len))
                .filter(|_| len > 0 && (r == 0 || start >= prev_end))
                .ok_or(KsymError::Unsorted { index: r })?;
            prev_end = end;
            check("range", r, function, self.functions, true)?;
            let (lines, inlines) = self
                .body(record, start, len)
                .ok_or(KsymError::BadLines { range: r })?;
            out.push(Range {
                start,
                end,
                function,
                lines,
                inlines,
            });
        }
        Ok(out)
    }

    /// The line rows and inline calls of the range of `record`, from
    /// `start`, `len` bytes long; `None` unless every value of its body
    /// is one a lookup could use.
    fn body<const N: usize>(
        &self,
        record: RangeRecord<'_, N>,
        start: u64,
        len: u32,
    ) -> Option<(Vec<LineRow>, Vec<Inline>)> {
        let f = Format::unpack(record.format(), self.widths)?;
        let (rows, chains) = record.counts();
        let mut body = Cursor(self.bodies.get(record.body() as usize..)?);
        let (mut base, mut row_buckets, mut chain_buckets, mut own_nodes) = (0, 0, 0, 0);
        if rows > 0 {
            base = body.value(4)?;
            row_buckets = body.value(f.count)? as usize;
        }
        if chains > 0 {
            chain_buckets = body.value(f.count)? as usize;
            if f.node != 0 {
                own_nodes = body.value(f.count)? as usize;
            }
        }
        // Bucket starts of no width would take no bytes.
        if (row_buckets > 0 && f.row_bucket == 0) || (chain_buckets > 0 && f.chain_bucket == 0) {
            return None;
        }
        let row_starts = body.values(f.row_bucket, row_buckets)?;
        let row_offsets = offsets(&row_starts, &body.values(1, rows)?, len)?;
        let chain_starts = body.values(f.chain_bucket, chain_buckets)?;
        let chain_offsets = offsets(&chain_starts, &body.values(1, chains)?, len)?;
        let lines = body.values(f.line, rows)?;
        let file_indexes = body.values(f.file, rows)?;
        // The range's file table: file record indexes, or none.
        let table = body
            .values(f.file_entry, f.files)?
            .into_iter()
            .map(|file| match reads_as_none(file, f.file_entry) {
                true => Some(NONE),
                false => ((file as usize) < self.files).then_some(file),
            })
            .collect::<Option<Vec<u32>>>()?;
        let rows = (0..rows)
            .map(|i| {
                Some(LineRow {
                    addr: start + u64::from(row_offsets[i]),
                    file: *table.get(file_indexes[i] as usize)?,
                    line: base.checked_add(lines[i])?,
                })
            })
            .collect::<Option<Vec<LineRow>>>()?;
        let own: Vec<Node>;
        let (chain, nodes): (Vec<Option<usize>>, &[Node]) = match f.node {
            // Ids of the shared nodes (version 2), or none.
            0 => {
                let chain = body
                    .values(4, chains)?
                    .into_iter()
                    .map(|id| match id {
                        NONE => Some(None),
                        _ => ((id as usize) < self.shared.len()).then_some(Some(id as usize)),
                    })
                    .collect::<Option<_>>()?;
                (chain, &self.shared)
            }
            // 1 + an index of the range's own nodes, 0 for none.
            width => {
                let chain = body
                    .values(width, chains)?
                    .into_iter()
                    .map(|n| (n as usize <= own_nodes).then(|| (n as usize).checked_sub(1)))
                    .collect::<Option<_>>()?;
                let functions = body.values(f.function, own_nodes)?;
                let call_files = body.values(f.file, own_nodes)?;
                let call_lines = body.values(f.call_line, own_nodes)?;
                let parents = body.values(width, own_nodes)?;
                own = (0..own_nodes)
                    .map(|i| {
                        let function = match reads_as_none(functions[i], f.function) {
                            true => NONE,
                            false => Some(functions[i])
                                .filter(|&function| (function as usize) < self.functions)?,
                        };
                        // A parent comes before its child.
                        let parent = Some(parents[i] as usize).filter(|&p| p <= i)?;
                        Some(Node {
                            function,
                            call_file: *table.get(call_files[i] as usize)?,
                            call_line: call_lines[i],
                            parent: parent.checked_sub(1),
                        })
                    })
                    .collect::<Option<_>>()?;
                (chain, &own)
            }
        };
        // The reader of these versions read a body only with 4 bytes
        // after it (the writer padded the section).
        if body.0.len() < 4 {
            return None;
        }
        let entries: Vec<(u32, Option<usize>)> = chain_offsets.into_iter().zip(chain).collect();
        Some((rows, inlines(start, len, &entries, nodes)))
    }
}

/// A body's values, read from its first byte on.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    /// The next `n` values of `width` bytes (0 to 4).
    fn values(&mut self, width: usize, n: usize) -> Option<Vec<u32>> {
        let (taken, rest) = self.0.split_at_checked(width.checked_mul(n)?)?;
        self.0 = rest;
        Some(match width {
            0 => vec![0; n],
            _ => taken
                .chunks_exact(width)
                .map(|value| {
                    let mut word = [0; 4];
                    word[..width].copy_from_slice(value);
                    u32::from_le_bytes(word)
                })
                .collect(),
        })
    }

    /// The next value of `width` bytes.
    fn value(&mut self, width: usize) -> Option<u32> {
        self.values(width, 1)?.pop()
    }
}

/// The offsets of a column whose buckets after the first begin at
/// `starts` (indexes of `lows`, the offsets' low bytes); `None` unless
/// the starts ascend within the column and the offsets ascend within the
/// range's `len` bytes.
fn offsets(starts: &[u32], lows: &[u32], len: u32) -> Option<Vec<u32>> {
    let mut prev = 0;
    for &start in starts {
        if start < prev || start as usize > lows.len() {
            return None;
        }
        prev = start;
    }
    let mut bucket = 0;
    let mut out: Vec<u32> = Vec::with_capacity(lows.len());
    for (i, &low) in lows.iter().enumerate() {
        while bucket < starts.len() && starts[bucket] as usize <= i {
            bucket += 1;
        }
        let offset = u32::try_from(bucket).ok()?.checked_mul(1 << BUCKET_SHIFT)? | low;
        if offset >= len || out.last().is_some_and(|&prev| prev >= offset) {
            return None;
        }
        out.push(offset);
    }
    Some(out)
}
