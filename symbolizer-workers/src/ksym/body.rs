//! A range's body read in place: its line rows and inline chain as
//! fixed-width columns (see the layout in [`super`]), found by going to
//! the offset's bucket rather than by search or decoding.

use super::layout::{BUCKET_SHIFT, Format};
use crate::table::NONE;

/// The columns of one range's body. Built from a range record whose body
/// [`Ksym::open`](super::Ksym::open) found inside the bodies section;
/// the values in it are checked by [`Ksym::verify`](super::Ksym::verify)
/// only, so every read here is bounds-checked and a damaged value reads
/// as unknown.
#[derive(Debug, Clone, Copy)]
pub(super) struct Body<'a> {
    pub(super) format: Format,
    pub(super) base_line: u32,
    pub(super) rows: Offsets<'a>,
    pub(super) chain: Offsets<'a>,
    pub(super) lines: &'a [u8],
    pub(super) file_indexes: &'a [u8],
    pub(super) files: &'a [u8],
    pub(super) nodes: &'a [u8],
}

/// An ascending column of offsets in a range: per bucket of
/// 2^[`BUCKET_SHIFT`] bytes after the first, the index of its first
/// offset; then each offset's low byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offsets<'a> {
    pub(super) starts: &'a [u8],
    pub(super) width: usize,
    pub(super) lows: &'a [u8],
}

/// Splits `len` bytes off the front of `rest`.
#[inline(always)]
fn take<'a>(rest: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(len)?;
    *rest = tail;
    Some(head)
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
        let mut rest = bodies.get(at..)?;
        let count = |rest: &mut &[u8], present: bool| -> Option<usize> {
            if !present {
                return Some(0);
            }
            let bytes = take(rest, format.count)?;
            Some(value_at(bytes, format.count, 0) as usize)
        };
        let base_line = if rows > 0 {
            value_at(take(&mut rest, 4)?, 4, 0)
        } else {
            0
        };
        let row_buckets = count(&mut rest, rows > 0)?;
        let chain_buckets = count(&mut rest, chains > 0)?;
        let rows_starts = take(&mut rest, row_buckets.checked_mul(format.row_bucket)?)?;
        let row_lows = take(&mut rest, rows)?;
        let chain_starts = take(&mut rest, chain_buckets.checked_mul(format.chain_bucket)?)?;
        let chain_lows = take(&mut rest, chains)?;
        Some(Body {
            format,
            base_line,
            rows: Offsets {
                starts: rows_starts,
                width: format.row_bucket,
                lows: row_lows,
            },
            chain: Offsets {
                starts: chain_starts,
                width: format.chain_bucket,
                lows: chain_lows,
            },
            lines: take(&mut rest, rows.checked_mul(format.line)?)?,
            file_indexes: take(&mut rest, rows.checked_mul(format.file)?)?,
            files: take(&mut rest, format.files.checked_mul(4)?)?,
            nodes: take(&mut rest, chains.checked_mul(4)?)?,
        })
    }

    /// (file, line) of the last row at or before `offset`: (none, 0)
    /// before the first row.
    #[inline(always)]
    pub(super) fn line_at(&self, offset: u32) -> (u32, u32) {
        let Some(row) = self.rows.count_at_or_before(offset).checked_sub(1) else {
            return (NONE, 0);
        };
        let line = self
            .base_line
            .wrapping_add(value_at(self.lines, self.format.line, row));
        let index = value_at(self.file_indexes, self.format.file, row);
        (self.file(index as usize), line)
    }

    /// Entry `index` of the range's file table, or none.
    #[inline(always)]
    pub(super) fn file(&self, index: usize) -> u32 {
        value_at(self.files, 4, index)
    }

    /// The innermost inline node at `offset`, or none.
    #[inline(always)]
    pub(super) fn node_at(&self, offset: u32) -> u32 {
        match self.chain.count_at_or_before(offset).checked_sub(1) {
            Some(entry) => value_at(self.nodes, 4, entry),
            None => NONE,
        }
    }
}

impl Offsets<'_> {
    /// Number of offsets.
    pub(super) fn len(&self) -> usize {
        self.lows.len()
    }

    /// Number of buckets after the first.
    pub(super) fn buckets(&self) -> usize {
        self.starts.len().checked_div(self.width).unwrap_or(0)
    }

    /// Where bucket `bucket` begins: 0 for the first, the offsets' count
    /// for any after the last.
    #[inline(always)]
    pub(super) fn bucket_start(&self, bucket: usize) -> usize {
        match bucket.checked_sub(1) {
            None => 0,
            Some(i) if i < self.buckets() => value_at(self.starts, self.width, i) as usize,
            Some(_) => self.len(),
        }
    }

    /// How many offsets are at or before `offset`: those of the buckets
    /// before its bucket, and those of its bucket whose low byte is at or
    /// below its low byte, counted without a branch (the compiler
    /// vectorizes the count; a bucket holds at most 256 offsets).
    #[inline(always)]
    pub(super) fn count_at_or_before(&self, offset: u32) -> usize {
        let bucket = (offset >> BUCKET_SHIFT) as usize;
        let (lo, hi) = (self.bucket_start(bucket), self.bucket_start(bucket + 1));
        let low = offset as u8;
        let window = self.lows.get(lo..hi).unwrap_or_default();
        lo + window.iter().filter(|&&b| b <= low).count()
    }

    /// The offset at `index`, as `count_at_or_before` reads the column:
    /// for [`Ksym::verify`](super::Ksym::verify).
    pub(super) fn offsets(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        let mut bucket = 0;
        (0..self.len()).map(move |i| {
            while bucket < self.buckets() && self.bucket_start(bucket + 1) <= i {
                bucket += 1;
            }
            let high = u32::try_from(bucket).ok()?.checked_mul(1 << BUCKET_SHIFT)?;
            Some(high + u32::from(self.lows[i]))
        })
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
