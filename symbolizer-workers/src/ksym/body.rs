//! A range's body read in place: its line rows and inline chain as
//! fixed-width columns (see the layout in [`super`]), found by going to
//! the offset's bucket rather than by search or decoding.

use super::layout::{BLOCK, BUCKET_SHIFT, Format};
use crate::table::NONE;

/// One range's body, read in place. Built from a range record whose body
/// [`Ksym::open`](super::Ksym::open) found inside the bodies section;
/// the values in it are checked by [`Ksym::verify`](super::Ksym::verify)
/// only, so every read here stays within the body (whose bounds
/// [`Body::new`] checks once) and a damaged value reads as unknown.
///
/// It holds the body's counts only: where each column begins is worked
/// out when a lookup asks for it, from the counts and the widths, so a
/// lookup does the few multiplications and additions its columns need
/// rather than laying out every column (which, held in a struct of
/// twelve columns, spilled to the stack on every lookup).
#[derive(Debug, Clone, Copy)]
pub(super) struct Body<'a> {
    /// From the body's first byte to the end of the bodies section.
    bytes: &'a [u8],
    pub(super) format: Format,
    pub(super) base_line: u32,
    rows: usize,
    chains: usize,
    row_buckets: usize,
    chain_buckets: usize,
    local_nodes: usize,
    /// Where the rows' bucket starts begin: after the base line and counts.
    header: usize,
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
    /// The range's file table, which `call_files` index.
    pub(super) files: Column<'a>,
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
    /// The low bytes: `len` of them from `lows` in `bytes`, which runs on
    /// to the end of the bodies section (`count_in_bucket` reads a
    /// block at a time).
    bytes: &'a [u8],
    lows: usize,
    len: usize,
}

/// `len` values of `width` bytes (0 to 4) from byte `start` of
/// `bytes`, which runs on to the end of the bodies section: a value is
/// read as the 4 bytes there, masked to its width, rather than by a
/// branch on the width, which varies from range to range and would be
/// mispredicted (the writer pads the section so that the last value has
/// 4 bytes to read).
#[derive(Debug, Clone, Copy)]
pub(super) struct Column<'a> {
    bytes: &'a [u8],
    start: usize,
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
        self.value_at(self.start + index * self.width)
    }

    /// Values `index` and `index + 1`, read at once: a bucket's first
    /// offset and the next bucket's; [`NONE`] for both unless both are in
    /// the column (its callers check that first, so this check is folded
    /// into theirs).
    #[inline(always)]
    fn pair(&self, index: usize) -> (u32, u32) {
        if index.saturating_add(1) >= self.len {
            return (NONE, NONE);
        }
        let at = self.start + index * self.width;
        let second = self.value_at(at + self.width);
        (self.value_at(at), second)
    }

    /// The value at byte `at`: the 4 bytes there, masked to the width.
    /// `at` is a value's in the column, which lies within its body, and
    /// [`Body::new`] made sure that 4 bytes can be read at the body's end:
    /// no bounds check here, where lookups spend most of their reads.
    #[inline(always)]
    fn value_at(&self, at: usize) -> u32 {
        debug_assert!(at + 4 <= self.bytes.len());
        // SAFETY: every column is built by `Body::column` inside its body:
        // `start + len * width <= end` (the columns are laid out one after
        // another up to `Body::end`), and `value_at` is only given the
        // position of a value of the column (`get` and `pair` check
        // their indexes are below `len`), so `at <= end`; `Body::new`
        // returns a body only when `end + READ_PAST_END <= bytes.len()`,
        // so the 4 bytes from `at` are within `bytes`.
        let word = unsafe {
            self.bytes
                .as_ptr()
                .add(at)
                .cast::<[u8; 4]>()
                .read_unaligned()
        };
        u32::from_le_bytes(word) & mask(self.width)
    }
}

/// The mask of `width` bytes: none for width 0, all for width 4.
#[inline(always)]
fn mask(width: usize) -> u32 {
    const MASKS: [u32; 8] = [0, 0xff, 0xffff, 0xff_ffff, u32::MAX, 0, 0, 0];
    MASKS[width & 7]
}

/// Bytes a column read may take past its body's last byte: a value is read
/// as the 4 bytes where it starts. The writer pads the bodies section
/// for it; a body too close to the end of an unpadded one (a damaged
/// file) is not read.
const READ_PAST_END: usize = 4;

/// The value of `width` bytes at `at` in `bytes`, where it may not be all
/// there (a body's header, read before its end is known): 0 for bytes
/// past the end.
#[inline(always)]
fn checked_value_at(bytes: &[u8], at: usize, width: usize) -> u32 {
    match bytes.get(at..).and_then(|b| b.first_chunk::<4>()) {
        Some(&word) => u32::from_le_bytes(word) & mask(width),
        None => unpadded_value_at(bytes, at, width),
    }
}

/// [`checked_value_at`] where fewer than 4 bytes are left: the last bytes
/// of a section not padded (a damaged file). Out of line: the common path
/// stays short.
#[cold]
#[inline(never)]
fn unpadded_value_at(bytes: &[u8], at: usize, width: usize) -> u32 {
    let mut word = [0u8; 4];
    let end = at.saturating_add(width).min(bytes.len());
    let tail = bytes.get(at..end).unwrap_or_default();
    word[..tail.len()].copy_from_slice(tail);
    u32::from_le_bytes(word)
}

/// [`Offsets::count_in_bucket`] where fewer than [`BLOCK`] bytes are left
/// (a damaged file's section, not padded): byte by byte.
#[cold]
#[inline(never)]
fn count_unpadded(bytes: &[u8], lows: usize, at: usize, hi: usize, low: u8) -> usize {
    let lows = bytes.get(lows..).unwrap_or_default();
    let rest = lows.get(at..hi).unwrap_or_default();
    at + rest.iter().take_while(|&&b| b <= low).count()
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
        let bytes = bodies.get(at..)?;
        let mut body = Body {
            bytes,
            format,
            base_line: 0,
            rows,
            chains,
            row_buckets: 0,
            chain_buckets: 0,
            local_nodes: 0,
            header: 0,
        };
        // The header: the base line and the rows' bucket count when there
        // are rows, the chain's bucket count and node count when there is
        // a chain.
        let value = |at: usize, width: usize| checked_value_at(bytes, at, width);
        let count = |at: usize| value(at, format.count) as usize;
        if rows > 0 {
            body.base_line = value(0, 4);
            body.row_buckets = count(4);
            body.header = 4 + format.count;
        }
        if chains > 0 {
            body.chain_buckets = count(body.header);
            body.local_nodes = count(body.header + format.count);
            body.header += 2 * format.count;
        }
        // Counts are below 2^32 and widths at most 4: the sums cannot
        // overflow a 64-bit usize. Column reads rely on the bytes after
        // the end being there (see `Column::value_at`).
        (body.end() + READ_PAST_END <= bytes.len()).then_some(body)
    }

    /// The column of `len` values of `width` bytes at byte `start`.
    #[inline(always)]
    fn column(&self, start: usize, width: usize, len: usize) -> Column<'a> {
        Column {
            bytes: self.bytes,
            start,
            width,
            len,
        }
    }

    /// Where each column after the header begins, in the order the writer
    /// puts them.
    #[inline(always)]
    fn row_lows_at(&self) -> usize {
        self.header + self.row_buckets * self.format.row_bucket
    }
    #[inline(always)]
    fn chain_starts_at(&self) -> usize {
        self.row_lows_at() + self.rows
    }
    #[inline(always)]
    fn chain_lows_at(&self) -> usize {
        self.chain_starts_at() + self.chain_buckets * self.format.chain_bucket
    }
    #[inline(always)]
    fn lines_at(&self) -> usize {
        self.chain_lows_at() + self.chains
    }
    #[inline(always)]
    fn file_indexes_at(&self) -> usize {
        self.lines_at() + self.rows * self.format.line
    }
    #[inline(always)]
    fn files_at(&self) -> usize {
        self.file_indexes_at() + self.rows * self.format.file
    }
    #[inline(always)]
    fn nodes_at(&self) -> usize {
        self.files_at() + self.format.files * self.format.file_entry
    }
    #[inline(always)]
    fn local_at(&self) -> usize {
        self.nodes_at() + self.chains * self.format.node
    }
    /// The byte after the body's last column.
    #[inline(always)]
    fn end(&self) -> usize {
        let f = &self.format;
        self.local_at() + self.local_nodes * (f.function + f.file + f.call_line + f.node)
    }

    /// The line rows' offsets.
    #[inline(always)]
    pub(super) fn rows(&self) -> Offsets<'a> {
        Offsets {
            starts: self.column(self.header, self.format.row_bucket, self.row_buckets),
            bytes: self.bytes,
            lows: self.row_lows_at(),
            len: self.rows,
        }
    }

    /// The chain entries' offsets.
    #[inline(always)]
    pub(super) fn chain(&self) -> Offsets<'a> {
        Offsets {
            starts: self.column(
                self.chain_starts_at(),
                self.format.chain_bucket,
                self.chain_buckets,
            ),
            bytes: self.bytes,
            lows: self.chain_lows_at(),
            len: self.chains,
        }
    }

    /// Per row, its line above the base line.
    #[inline(always)]
    pub(super) fn lines(&self) -> Column<'a> {
        self.column(self.lines_at(), self.format.line, self.rows)
    }

    /// Per row, its index into the range's file table.
    #[inline(always)]
    pub(super) fn file_indexes(&self) -> Column<'a> {
        self.column(self.file_indexes_at(), self.format.file, self.rows)
    }

    /// Per chain entry, its innermost node: 1 + an index of
    /// [`local`](Self::local), 0 for none.
    #[inline(always)]
    pub(super) fn nodes(&self) -> Column<'a> {
        self.column(self.nodes_at(), self.format.node, self.chains)
    }

    /// Number of the range's own inline nodes.
    #[inline(always)]
    pub(super) fn local_len(&self) -> u32 {
        self.local_nodes as u32
    }

    /// The range's own inline nodes.
    #[inline(always)]
    pub(super) fn local(&self) -> LocalNodes<'a> {
        let (n, f) = (self.local_nodes, &self.format);
        let functions = self.local_at();
        let call_files = functions + f.function * n;
        let call_lines = call_files + f.file * n;
        LocalNodes {
            functions: self.column(functions, f.function, n),
            call_files: self.column(call_files, f.file, n),
            call_lines: self.column(call_lines, f.call_line, n),
            parents: self.column(call_lines + f.call_line * n, f.node, n),
            files: self.file_table(),
        }
    }

    /// Where `offset` stands among the range's rows and chain entries, and
    /// the offset before which it stays the same (see
    /// [`Offsets::count_and_next`]).
    #[inline(always)]
    pub(super) fn position_until(&self, offset: u32) -> (Position, u64) {
        let (rows, next_row) = self.rows().count_and_next(offset);
        let (entries, next_entry) = self.chain().count_and_next(offset);
        (Position { rows, entries }, next_row.min(next_entry))
    }

    /// (file, line) at `at`: of its last row, (none, 0) before the first.
    #[inline(always)]
    pub(super) fn line_of(&self, at: Position) -> (u32, u32) {
        let Some(row) = at.rows.checked_sub(1) else {
            return (NONE, 0);
        };
        let line = self.base_line.wrapping_add(self.lines().get(row));
        (self.file(self.file_indexes().get(row) as usize), line)
    }

    /// Entry `index` of the range's file table, or none.
    #[inline(always)]
    pub(super) fn file(&self, index: usize) -> u32 {
        self.file_table().get(index)
    }

    /// The range's file table: file record indexes (or none).
    #[inline(always)]
    fn file_table(&self) -> Column<'a> {
        self.column(self.files_at(), self.format.file_entry, self.format.files)
    }

    /// The innermost inline node at `at` as the chain refers to it (see
    /// [`Body::nodes`]), or [`NONE`] before the first chain entry.
    #[inline(always)]
    pub(super) fn node_of(&self, at: Position) -> u32 {
        match at.entries.checked_sub(1) {
            Some(entry) => self.nodes().get(entry),
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

    /// Where bucket `bucket` begins and ends: [`bucket_start`] of it and
    /// of the next, the two read at once where both are stored.
    ///
    /// [`bucket_start`]: Self::bucket_start
    #[inline(always)]
    fn bucket_bounds(&self, bucket: usize) -> (usize, usize) {
        match bucket.checked_sub(1) {
            Some(i) if i + 1 < self.buckets() => {
                let (lo, hi) = self.starts.pair(i);
                (lo as usize, hi as usize)
            }
            _ => (self.bucket_start(bucket), self.bucket_start(bucket + 1)),
        }
    }

    /// How many offsets are at or before `offset` (those of the buckets
    /// before its bucket, and those of its bucket whose low byte is at or
    /// below its low byte), and the offset before which that count stays
    /// the same: the next offset of
    /// its bucket, else the next bucket's start (which may hold one), or
    /// never after the last offset. A batch in address order answers the
    /// addresses before it without counting again. In a damaged file (not
    /// ascending) it may be at or before `offset`, which answers none.
    #[inline(always)]
    pub(super) fn count_and_next(&self, offset: u32) -> (usize, u64) {
        let bucket = offset >> BUCKET_SHIFT;
        let (lo, hi) = self.bucket_bounds(bucket as usize);
        let hi = hi.min(self.len);
        let count = self.count_in_bucket(lo, hi, offset as u8);
        let high = u64::from(bucket) << BUCKET_SHIFT;
        let next = if count >= self.len {
            u64::MAX
        } else if count < hi {
            high | u64::from(self.bytes.get(self.lows + count).copied().unwrap_or(0))
        } else {
            high + (1 << BUCKET_SHIFT)
        };
        (count, next)
    }

    /// The offsets `[lo, hi)` of one bucket with a low byte at or below
    /// `low`, plus `lo`. A bucket's low bytes ascend, so those are the
    /// leading ones: found [`BLOCK`] bytes at a time, without a branch
    /// per byte (a bucket holds at most 256 offsets).
    #[inline(always)]
    fn count_in_bucket(&self, lo: usize, hi: usize, low: u8) -> usize {
        let mut at = lo;
        while at < hi {
            // The bytes after the bucket (of the next one, or of another
            // column, or padding) are read too and make no difference:
            // the count stops at the bucket's end.
            let Some(block) = self.block_at(self.lows + at) else {
                return count_unpadded(self.bytes, self.lows, at, hi, low);
            };
            let leading = leading_at_or_below(block, low);
            if leading < BLOCK {
                return (at + leading).min(hi);
            }
            at += BLOCK;
        }
        hi.max(lo)
    }

    /// The [`BLOCK`] bytes from byte `at`, when there are as many.
    #[inline(always)]
    fn block_at(&self, at: usize) -> Option<&[u8; BLOCK]> {
        // One comparison, where slicing makes two (see Column::value_at).
        if at < self.bytes.len().saturating_sub(BLOCK - 1) {
            // SAFETY: `at + BLOCK <= self.bytes.len()`, checked just
            // above; an array of bytes has the alignment of a byte.
            Some(unsafe { &*self.bytes.as_ptr().add(at).cast::<[u8; BLOCK]>() })
        } else {
            None
        }
    }

    /// The offset at `index`, as `count_and_next` reads the column:
    /// for [`Ksym::verify`](super::Ksym::verify).
    pub(super) fn offsets(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        let mut bucket = 0;
        (0..self.len()).map(move |i| {
            while bucket < self.buckets() && self.bucket_start(bucket + 1) <= i {
                bucket += 1;
            }
            let high = u32::try_from(bucket).ok()?.checked_mul(1 << BUCKET_SHIFT)?;
            Some(high + u32::from(*self.bytes.get(self.lows + i)?))
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
