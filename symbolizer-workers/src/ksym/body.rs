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
    pub(super) lines: Column<'a>,
    pub(super) file_indexes: Column<'a>,
    pub(super) files: Column<'a>,
    pub(super) nodes: Column<'a>,
}

/// An ascending column of offsets in a range: per bucket of
/// 2^[`BUCKET_SHIFT`] bytes after the first, the index of its first
/// offset; then each offset's low byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offsets<'a> {
    pub(super) starts: Column<'a>,
    pub(super) lows: &'a [u8],
}

/// `len` values of `width` bytes (0, 1, 2 or 4) at the start of `bytes`,
/// which runs on to the end of the bodies section: a value is read as the
/// 4 bytes there, masked to its width, rather than by a branch on the
/// width, which varies from range to range and would be mispredicted (the
/// writer pads the section so that the last value has 4 bytes to read).
#[derive(Debug, Clone, Copy)]
pub(super) struct Column<'a> {
    bytes: &'a [u8],
    width: usize,
    len: usize,
}

impl<'a> Column<'a> {
    /// Takes a column of `len` values of `width` bytes off the front of
    /// `rest`; `None` when they do not fit.
    #[inline(always)]
    fn take(rest: &mut &'a [u8], len: usize, width: usize) -> Option<Column<'a>> {
        let bytes = *rest;
        *rest = rest.get(len.checked_mul(width)?..)?;
        Some(Column { bytes, width, len })
    }

    /// Number of values.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Value `index`: 0 in a column of width 0 (whose every value is 0),
    /// [`NONE`] past the end.
    #[inline(always)]
    pub(super) fn get(&self, index: usize) -> u32 {
        if index >= self.len {
            return NONE;
        }
        let at = index * self.width;
        let mask = ((1u64 << (8 * self.width)) - 1) as u32;
        match self.bytes.get(at..at + 4) {
            Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & mask,
            // The last bytes of a section not padded (a damaged file).
            None => {
                let mut word = [0u8; 4];
                let end = (at + self.width).min(self.bytes.len());
                let tail = self.bytes.get(at..end).unwrap_or_default();
                word[..tail.len()].copy_from_slice(tail);
                u32::from_le_bytes(word)
            }
        }
    }
}

/// The bucket count of a column of `len` offsets, taken off the front of
/// `rest` when there is one (when `len` > 0).
#[inline(always)]
fn bucket_count(rest: &mut &[u8], len: usize, format: Format) -> Option<usize> {
    match len {
        0 => Some(0),
        _ => Some(Column::take(rest, 1, format.count)?.get(0) as usize),
    }
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
        let base_line = match rows {
            0 => 0,
            _ => Column::take(&mut rest, 1, 4)?.get(0),
        };
        let row_buckets = bucket_count(&mut rest, rows, format)?;
        let chain_buckets = bucket_count(&mut rest, chains, format)?;
        let row_starts = Column::take(&mut rest, row_buckets, format.row_bucket)?;
        let row_lows = Column::take(&mut rest, rows, 1)?;
        let chain_starts = Column::take(&mut rest, chain_buckets, format.chain_bucket)?;
        let chain_lows = Column::take(&mut rest, chains, 1)?;
        Some(Body {
            format,
            base_line,
            rows: Offsets {
                starts: row_starts,
                lows: row_lows.bytes.get(..rows)?,
            },
            chain: Offsets {
                starts: chain_starts,
                lows: chain_lows.bytes.get(..chains)?,
            },
            lines: Column::take(&mut rest, rows, format.line)?,
            file_indexes: Column::take(&mut rest, rows, format.file)?,
            files: Column::take(&mut rest, format.files, 4)?,
            nodes: Column::take(&mut rest, chains, 4)?,
        })
    }

    /// (file, line) of the last row at or before `offset`: (none, 0)
    /// before the first row.
    #[inline(always)]
    pub(super) fn line_at(&self, offset: u32) -> (u32, u32) {
        let Some(row) = self.rows.count_at_or_before(offset).checked_sub(1) else {
            return (NONE, 0);
        };
        let line = self.base_line.wrapping_add(self.lines.get(row));
        (self.file(self.file_indexes.get(row) as usize), line)
    }

    /// Entry `index` of the range's file table, or none.
    #[inline(always)]
    pub(super) fn file(&self, index: usize) -> u32 {
        self.files.get(index)
    }

    /// The innermost inline node at `offset`, or none.
    #[inline(always)]
    pub(super) fn node_at(&self, offset: u32) -> u32 {
        match self.chain.count_at_or_before(offset).checked_sub(1) {
            Some(entry) => self.nodes.get(entry),
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
        self.starts.len()
    }

    /// Where bucket `bucket` begins: 0 for the first, the offsets' count
    /// for any after the last.
    #[inline(always)]
    pub(super) fn bucket_start(&self, bucket: usize) -> usize {
        match bucket.checked_sub(1) {
            None => 0,
            Some(i) if i < self.buckets() => self.starts.get(i) as usize,
            Some(_) => self.len(),
        }
    }

    /// How many offsets are at or before `offset`: those of the buckets
    /// before its bucket, and those of its bucket whose low byte is at or
    /// below its low byte (a bucket holds at most 256 offsets).
    #[inline(always)]
    pub(super) fn count_at_or_before(&self, offset: u32) -> usize {
        let bucket = (offset >> BUCKET_SHIFT) as usize;
        let (lo, hi) = (self.bucket_start(bucket), self.bucket_start(bucket + 1));
        let low = offset as u8;
        let window = self.lows.get(lo..hi).unwrap_or_default();
        lo + count_at_or_below(window, low)
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

/// How many of `bytes` are at or below `low`, without a branch per byte:
/// 16 bytes at a time, each block's count kept in a byte, which the
/// compiler turns into a few vector instructions per block (counting into
/// a `usize` directly, it widens every byte to 64 bits first and handles
/// two bytes per step).
#[inline(always)]
fn count_at_or_below(bytes: &[u8], low: u8) -> usize {
    let (blocks, rest) = bytes.as_chunks::<16>();
    let mut count = 0;
    for block in blocks {
        let mut in_block = 0u8;
        for &b in block {
            in_block += u8::from(b <= low);
        }
        count += usize::from(in_block);
    }
    count + rest.iter().filter(|&&b| b <= low).count()
}
