//! A range's body read in place: its line rows and inline chain as
//! fixed-width columns (see the layout in [`super`]), found by going to
//! the offset's bucket rather than by search or decoding.

use super::layout::{BLOCK, BUCKET_SHIFT, Format};
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
    /// Per chain entry, its innermost node: an id in the nodes section
    /// when `format.node` is 0, else 1 + an index of `local`, 0 for none.
    pub(super) nodes: Column<'a>,
    /// The range's own inline nodes (none when `format.node` is 0).
    pub(super) local: LocalNodes<'a>,
}

/// A range's own inline nodes, as columns: per node, its function (an
/// index of the function records), where it was called from (an index
/// of the range's file table, and a line) and its parent (1 + an earlier
/// node's index, 0 for none: the range's own function).
#[derive(Debug, Clone, Copy)]
pub(super) struct LocalNodes<'a> {
    pub(super) functions: Column<'a>,
    pub(super) call_files: Column<'a>,
    pub(super) call_lines: Column<'a>,
    pub(super) parents: Column<'a>,
}

/// Where an offset stands in a range's body: how many of its line rows
/// and of its chain entries start at or before it. Offsets at the same
/// position have the same inline chain, files and lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    rows: usize,
    entries: usize,
}

/// An ascending column of offsets in a range: per bucket of
/// 2^[`BUCKET_SHIFT`] bytes after the first, the index of its first
/// offset; then each offset's low byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offsets<'a> {
    pub(super) starts: Column<'a>,
    /// The low bytes, and the bytes after them to the end of the bodies
    /// section (which `count_at_or_before` reads a block at a time).
    lows: &'a [u8],
    len: usize,
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

impl LocalNodes<'_> {
    /// Number of nodes.
    #[inline(always)]
    pub(super) fn len(&self) -> u32 {
        self.functions.len() as u32
    }
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
        let local_nodes = match format.node {
            0 => 0,
            _ => bucket_count(&mut rest, chains, format)?,
        };
        // Bucket starts take bytes: a count of them with no width would
        // have `verify` walk billions of buckets that are not there.
        if (row_buckets > 0 && format.row_bucket == 0)
            || (chain_buckets > 0 && format.chain_bucket == 0)
        {
            return None;
        }
        let row_starts = Column::take(&mut rest, row_buckets, format.row_bucket)?;
        let row_lows = Column::take(&mut rest, rows, 1)?;
        let chain_starts = Column::take(&mut rest, chain_buckets, format.chain_bucket)?;
        let chain_lows = Column::take(&mut rest, chains, 1)?;
        Some(Body {
            format,
            base_line,
            rows: Offsets {
                starts: row_starts,
                lows: row_lows.bytes,
                len: rows,
            },
            chain: Offsets {
                starts: chain_starts,
                lows: chain_lows.bytes,
                len: chains,
            },
            lines: Column::take(&mut rest, rows, format.line)?,
            file_indexes: Column::take(&mut rest, rows, format.file)?,
            files: Column::take(&mut rest, format.files, 4)?,
            nodes: Column::take(&mut rest, chains, format.node_ref())?,
            local: LocalNodes {
                functions: Column::take(&mut rest, local_nodes, 4)?,
                call_files: Column::take(&mut rest, local_nodes, format.file)?,
                call_lines: Column::take(&mut rest, local_nodes, format.call_line)?,
                parents: Column::take(&mut rest, local_nodes, format.node)?,
            },
        })
    }

    /// Where `offset` stands among the range's rows and chain entries.
    #[inline(always)]
    pub(super) fn position(&self, offset: u32) -> Position {
        Position {
            rows: self.rows.count_at_or_before(offset),
            entries: self.chain.count_at_or_before(offset),
        }
    }

    /// (file, line) at `at`: of its last row, (none, 0) before the first.
    #[inline(always)]
    pub(super) fn line_of(&self, at: Position) -> (u32, u32) {
        let Some(row) = at.rows.checked_sub(1) else {
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

    /// The innermost inline node at `at` as the chain refers to it (see
    /// [`Body::nodes`]), or [`NONE`] before the first chain entry.
    #[inline(always)]
    pub(super) fn node_of(&self, at: Position) -> u32 {
        match at.entries.checked_sub(1) {
            Some(entry) => self.nodes.get(entry),
            None => NONE,
        }
    }
}

impl Offsets<'_> {
    /// Number of offsets.
    pub(super) fn len(&self) -> usize {
        self.len
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
    /// below its low byte. A bucket's low bytes ascend, so those are the
    /// leading ones: found [`BLOCK`] bytes at a time, without a branch
    /// per byte (a bucket holds at most 256 offsets).
    #[inline(always)]
    pub(super) fn count_at_or_before(&self, offset: u32) -> usize {
        let bucket = (offset >> BUCKET_SHIFT) as usize;
        let (lo, hi) = (self.bucket_start(bucket), self.bucket_start(bucket + 1));
        let hi = hi.min(self.len);
        let low = offset as u8;
        let mut at = lo;
        while at < hi {
            // The bytes after the bucket (of the next one, or of another
            // column, or padding) are read too and make no difference:
            // the count stops at the bucket's end.
            let Some(block) = self.lows.get(at..).and_then(|b| b.first_chunk::<BLOCK>()) else {
                // A damaged file's section, not padded: byte by byte.
                let rest = self.lows.get(at..hi).unwrap_or_default();
                return at + rest.iter().take_while(|&&b| b <= low).count();
            };
            let leading = leading_at_or_below(block, low);
            if leading < BLOCK {
                return (at + leading).min(hi);
            }
            at += BLOCK;
        }
        hi.max(lo)
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
            Some(high + u32::from(*self.lows.get(i)?))
        })
    }
}

/// How many of the leading bytes of `block` are at or below `low`: one
/// vector compare and a mask of its lanes (SSE2, which every x86-64 has).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn leading_at_or_below(block: &[u8; BLOCK], low: u8) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_set1_epi8,
    };
    // SAFETY: `block` is 16 readable bytes, which an unaligned load may
    // read from any address; SSE2 is part of every x86-64 target.
    let at_or_below = unsafe {
        let bytes = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
        let low = _mm_set1_epi8(low as i8);
        // Unsigned `b <= low` is `max(b, low) == low`.
        _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(bytes, low), low)) as u32
    };
    // Bits 16 and up of the complement are set: at most BLOCK.
    (!at_or_below).trailing_zeros() as usize
}

/// How many of the leading bytes of `block` are at or below `low`: a mask
/// of the comparisons, then its first clear bit.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn leading_at_or_below(block: &[u8; BLOCK], low: u8) -> usize {
    let mut above = 1u32 << BLOCK;
    for (i, &b) in block.iter().enumerate() {
        above |= u32::from(b > low) << i;
    }
    above.trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_at_or_below_counts_like_a_scan() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let block: [u8; BLOCK] = std::array::from_fn(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8);
            // A bucket's low bytes ascend; the bytes after it need not.
            let mut ascending = block;
            ascending.sort_unstable();
            for block in [block, ascending] {
                for low in [0, 1, 0x7f, 0x80, 0xfe, 0xff, x as u8, (x >> 8) as u8] {
                    let scan = block.iter().take_while(|&&b| b <= low).count();
                    assert_eq!(leading_at_or_below(&block, low), scan, "{block:?} {low}");
                }
            }
        }
    }
}
