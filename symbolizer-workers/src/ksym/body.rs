//! A range's body read in place: its line rows and inline chain as
//! fixed-width columns (see the layout in [`super`]), searched without
//! decoding anything before the row wanted.

use super::layout::{Format, SCAN};
use crate::table::NONE;

/// The columns of one range's body. Built from a range record whose body
/// [`Ksym::open`](super::Ksym::open) found inside the bodies section;
/// the values in it are checked by [`Ksym::verify`](super::Ksym::verify)
/// only, so every read here is bounds-checked and a damaged value reads
/// as unknown.
#[derive(Debug, Clone, Copy)]
pub(super) struct Body<'a> {
    format: Format,
    base_line: u32,
    pub(super) row_offsets: &'a [u8],
    pub(super) chain_offsets: &'a [u8],
    pub(super) lines: &'a [u8],
    pub(super) file_indexes: &'a [u8],
    pub(super) files: &'a [u8],
    pub(super) nodes: &'a [u8],
}

impl<'a> Body<'a> {
    /// The body at `at` in `bodies`, of `rows` rows and `chains` chain
    /// entries; `None` when it does not fit.
    #[inline(always)]
    pub(super) fn new(
        bodies: &'a [u8],
        at: usize,
        rows: usize,
        chains: usize,
        format: Format,
    ) -> Option<Body<'a>> {
        let len = usize::try_from(format.body_len(rows as u64, chains as u64)).ok()?;
        let body = bodies.get(at..at.checked_add(len)?)?;
        let (base, body) = body.split_at(if rows > 0 { 4 } else { 0 });
        let base_line = base.try_into().map_or(0, u32::from_le_bytes);
        let (row_offsets, body) = body.split_at(rows * format.offset);
        let (chain_offsets, body) = body.split_at(chains * format.offset);
        let (lines, body) = body.split_at(rows * format.line);
        let (file_indexes, body) = body.split_at(rows * format.file);
        let (files, nodes) = body.split_at(4 * format.files);
        Some(Body {
            format,
            base_line,
            row_offsets,
            chain_offsets,
            lines,
            file_indexes,
            files,
            nodes,
        })
    }

    /// (file, line) of the last row at or before `offset`: (none, 0)
    /// before the first row.
    #[inline(always)]
    pub(super) fn line_at(&self, offset: u32) -> (u32, u32) {
        let Some(row) =
            count_at_or_before(self.row_offsets, self.format.offset, offset).checked_sub(1)
        else {
            return (NONE, 0);
        };
        let line = self
            .base_line
            .wrapping_add(value_at(self.lines, self.format.line, row));
        let index = value_at(self.file_indexes, self.format.file, row);
        (self.file(index as usize), line)
    }

    /// Entry `index` of the range's file table, or none.
    #[inline]
    pub(super) fn file(&self, index: usize) -> u32 {
        value_at(self.files, 4, index)
    }

    /// The innermost inline node at `offset`, or none.
    #[inline(always)]
    pub(super) fn node_at(&self, offset: u32) -> u32 {
        match count_at_or_before(self.chain_offsets, self.format.offset, offset).checked_sub(1) {
            Some(entry) => value_at(self.nodes, 4, entry),
            None => NONE,
        }
    }

    pub(super) fn format(&self) -> Format {
        self.format
    }

    pub(super) fn base_line(&self) -> u32 {
        self.base_line
    }
}

/// Value `index` of a column of `width`-byte values: 0 for width 0 (a
/// column whose every value is 0), [`NONE`] past the end.
#[inline(always)]
pub(super) fn value_at(column: &[u8], width: usize, index: usize) -> u32 {
    match width {
        0 => 0,
        1 => column.get(index).map_or(NONE, |&b| u32::from(b)),
        2 => column
            .as_chunks::<2>()
            .0
            .get(index)
            .map_or(NONE, |&b| u32::from(u16::from_le_bytes(b))),
        _ => column
            .as_chunks::<4>()
            .0
            .get(index)
            .map_or(NONE, |&b| u32::from_le_bytes(b)),
    }
}

/// How many values of an ascending column of `width`-byte values are at
/// or before `offset`.
#[inline(always)]
fn count_at_or_before(column: &[u8], width: usize, offset: u32) -> usize {
    match width {
        1 => count_le(column.as_chunks::<1>().0, offset),
        2 => count_le(column.as_chunks::<2>().0, offset),
        _ => count_le(column.as_chunks::<4>().0, offset),
    }
}

/// [`count_at_or_before`] for one width: a binary search down to a window
/// of [`SCAN`] values, which are then counted without a branch (the
/// compiler vectorizes the count): no mispredicted branch per row, where
/// a search to the end costs one every other step.
#[inline]
fn count_le<const W: usize>(values: &[[u8; W]], offset: u32) -> usize {
    let value = |v: &[u8; W]| {
        let mut word = [0u8; 4];
        word[..W].copy_from_slice(v);
        u32::from_le_bytes(word)
    };
    let (mut lo, mut hi) = (0, values.len());
    while hi - lo > SCAN {
        let mid = lo + (hi - lo) / 2;
        if value(&values[mid]) <= offset {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo + values[lo..hi].iter().filter(|v| value(v) <= offset).count()
}
