//! Constants of the ksym layout shared by the writer and the reader.

pub(super) use super::header::MAGIC;
/// Bumped whenever the meaning of any byte changes. The only version
/// read: files of earlier ones are [upgraded](super::upgrade()).
pub const VERSION: u32 = 6;

/// Sections, in header order.
pub(super) const RANGES: usize = 0;
pub(super) const BODIES: usize = 1;
/// Empty: version 2's inline nodes, shared by every range, which every
/// range has of its own since. Its header entry stays, with no records.
pub(super) const NODES: usize = 2;
pub(super) const FUNCS: usize = 3;
pub(super) const FILES: usize = 4;
pub(super) const BLOB: usize = 5;
pub(super) const PAGES: usize = 6;
/// Mangled names, compressed in blocks (see `packed`).
pub(super) const MANGLED: usize = 7;
pub(super) const SECTIONS: usize = 8;

/// The sections of a file of range records of `records`, in header order:
/// names and record sizes in bytes.
pub(super) const fn section_table(records: Records) -> super::header::Sections<SECTIONS> {
    super::header::Sections {
        names: [
            "ranges", "bodies", "nodes", "funcs", "files", "blob", "pages", "mangled",
        ],
        record: [records.len(), 1, 16, 16, 16, 1, 4, 1],
    }
}

/// Set in the header's flags: the file is [`Widths::Narrow`].
pub(super) const NARROW: u32 = 1;
/// Set in the header's flags: the file's range records are
/// [`Records::Compact`].
pub(super) const COMPACT: u32 = 2;

/// How the range records are laid out: one choice per file (its header's
/// flags), passed to lookups as a constant like [`Widths`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Records {
    /// 24 bytes: start u32 | len u32 | function u32 | body u32 | format
    /// u32 | rows u16 | chains u16, for files whose ranges all end below
    /// 4 GiB, which is every file but a kernel's (a range with more than
    /// 65,535 rows or chain entries is written as several): 25% fewer
    /// record bytes, 4.5% of a large Rust program's file.
    Compact,
    /// 32 bytes: start u64 | len u32 | function u32 | body u32 | rows u32
    /// | chains u32 | format u32, for files with code above 4 GiB.
    Full,
}

/// Most rows, and most chain entries, a [`Records::Compact`] record
/// counts (16 bits each).
pub(super) const MAX_COMPACT_COUNT: usize = 0xffff;

/// Bytes of a [`Records::Full`] range record.
pub(super) const FULL_RANGE_LEN: usize = 32;
/// Bytes of a [`Records::Compact`] range record.
pub(super) const COMPACT_RANGE_LEN: usize = 24;

impl Records {
    /// The layout of a table whose ranges end at or before `end`.
    pub(super) fn for_end(end: u64) -> Records {
        match end <= u64::from(u32::MAX) {
            true => Records::Compact,
            false => Records::Full,
        }
    }

    /// Bytes of a record.
    pub(super) const fn len(self) -> usize {
        match self {
            Records::Compact => COMPACT_RANGE_LEN,
            Records::Full => FULL_RANGE_LEN,
        }
    }
}

/// The choices a file makes once for all its ranges (its header's
/// flags), which each lookup takes as constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileLayout {
    pub widths: Widths,
    pub records: Records,
}

impl FileLayout {
    /// The layout a file with these header `flags` has, or `None` for
    /// flags that are not defined.
    pub(super) fn from_flags(flags: u32) -> Option<FileLayout> {
        if flags & !(NARROW | COMPACT) != 0 {
            return None;
        }
        Some(FileLayout {
            widths: match flags & NARROW {
                0 => Widths::Wide,
                _ => Widths::Narrow,
            },
            records: match flags & COMPACT {
                0 => Records::Full,
                _ => Records::Compact,
            },
        })
    }

    /// The header flags that say this layout.
    pub(super) fn flags(self) -> u32 {
        let narrow = match self.widths {
            Widths::Narrow => NARROW,
            Widths::Wide => 0,
        };
        let compact = match self.records {
            Records::Compact => COMPACT,
            Records::Full => 0,
        };
        narrow | compact
    }
}

/// How wide the bodies' node functions and file table entries are: one
/// choice for the whole file (its header's flags), so that a lookup reads
/// them as constants, in a copy of its code per choice. (Chosen per range,
/// in `format`, they were values a lookup held alongside the others: 11%
/// more instructions per lookup, spilled to the stack, for 5% fewer bytes
/// than this.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Widths {
    /// Node functions in 3 bytes, file table entries in 2: a file with
    /// fewer than 2^24 − 1 functions and 2^16 − 1 files, which is every
    /// file but the largest. All ones (0xff_ffff, 0xffff) is none: an
    /// index past the records, which reads as unknown.
    Narrow,
    /// Both in 4 bytes, for files too large for
    /// [`Narrow`](Self::Narrow).
    Wide,
}

impl Widths {
    /// The widths of a table of `functions` functions and `files` files.
    pub(super) fn for_table(functions: usize, files: usize) -> Widths {
        if functions < 0xff_ffff && files < 0xffff {
            Widths::Narrow
        } else {
            Widths::Wide
        }
    }

    /// Bytes of a node's function.
    #[inline(always)]
    pub(super) fn function(self) -> usize {
        match self {
            Widths::Narrow => 3,
            Widths::Wide => 4,
        }
    }

    /// Bytes of a file table entry.
    #[inline(always)]
    pub(super) fn file_entry(self) -> usize {
        match self {
            Widths::Narrow => 2,
            Widths::Wide => 4,
        }
    }
}

/// Whether `value`, read from a column of `width` bytes, is none: `NONE`,
/// or all ones of a narrower width (how a narrow file writes none).
pub(super) fn reads_as_none(value: u32, width: usize) -> bool {
    value == crate::table::NONE || (width < 4 && value == (1 << (8 * width)) - 1)
}

/// The page index: pages from 64 bytes, about one small function, and at
/// most 2 entries per range. Small pages let the index point at the one or
/// two ranges that can hold an address, so that a lookup reads one range
/// record rather than searching many.
pub(super) const PAGE_LAYOUT: super::pages::Layout = super::pages::Layout {
    min_shift: 6,
    per_range: 2,
};

/// Offsets in a range are kept as buckets of this many bytes: per bucket,
/// where its rows begin, and per row only its low byte. A lookup goes
/// straight to its bucket and counts a few bytes there: no search, and a
/// byte per row rather than two.
pub(super) const BUCKET_SHIFT: u32 = 8;

/// A column of offsets has at most this many buckets per offset before
/// it, plus [`SPARSE_BUCKETS`]: bounds what its bucket starts can cost.
pub(super) const MAX_BUCKETS_PER_OFFSET: u64 = 4;
/// Buckets any column may have, whatever its number of offsets: a range
/// may run 64 KiB without a new line row (straight-line code on one line).
pub(super) const SPARSE_BUCKETS: u64 = 256;

/// Low bytes are compared this many at a time.
pub(super) const BLOCK: usize = 16;

/// Zero bytes after the last body: what reading a block of low bytes, or
/// a value 4 bytes at a time, may read past the last one.
pub(super) const BODIES_PADDING: usize = BLOCK - 1;

/// How a range's body is laid out, packed in the range record's `format`
/// word: the byte widths of the rows' bucket starts (bits 0-1), lines
/// (2-3), file indexes (4-5) and the chain's bucket starts (6-7), each as
/// a code 0-3 for 0, 1, 2 or 4 bytes; the number of files in the range's
/// file table (bits 8-23); whether the body's bucket counts are 4 bytes
/// rather than 2 (bit 24); the widths of the chain's node references
/// (bits 25-26) and of the range's own inline nodes' call lines (27-28).
/// Other bits are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Format {
    /// Width of a bucket start of the rows: 0 (no buckets), 1, 2 or 4.
    pub row_bucket: usize,
    /// Width of a row's line (above the body's base line): 0, 1, 2 or 4.
    pub line: usize,
    /// Width of a row's index into the file table: 0 (one file), 1, 2 or 4.
    pub file: usize,
    /// Width of a bucket start of the chain: 0 (no buckets), 1, 2 or 4.
    pub chain_bucket: usize,
    /// Entries in the range's file table.
    pub files: usize,
    /// Width of the body's bucket counts (and node count): 2 or 4.
    pub count: usize,
    /// Width of the chain's references to the range's own inline nodes,
    /// in its body, and of their parents: 1, 2 or 4 (0, which the writer
    /// never writes, reads as no node).
    pub node: usize,
    /// Width of the call lines of the range's own nodes: 0, 1, 2 or 4.
    pub call_line: usize,
    /// Width of the functions of the range's own nodes: the file's
    /// [`Widths::function`].
    pub function: usize,
    /// Width of the entries of the range's file table: the file's
    /// [`Widths::file_entry`].
    pub file_entry: usize,
}

/// Most files one range's table may hold (16 bits of `format`).
pub(super) const MAX_RANGE_FILES: usize = 0xffff;

impl Format {
    pub(super) fn pack(self) -> u32 {
        // Width 0, 1, 2, 4 as code 0, 1, 2, 3.
        let code = |w: usize| (usize::BITS - w.leading_zeros()).min(3);
        code(self.row_bucket)
            | code(self.line) << 2
            | code(self.file) << 4
            | code(self.chain_bucket) << 6
            | (self.files.min(MAX_RANGE_FILES) as u32) << 8
            | u32::from(self.count == 4) << 24
            | code(self.node) << 25
            | code(self.call_line) << 27
    }

    /// The format of a `format` word in a file of `widths`; `None` when
    /// bits that must be 0 are not.
    #[inline(always)]
    pub(super) fn unpack(word: u32, widths: Widths) -> Option<Format> {
        /// Code 0, 1, 2, 3 as width 0, 1, 2, 4.
        #[inline(always)]
        fn width(code: u32) -> usize {
            const WIDTHS: [u8; 4] = [0, 1, 2, 4];
            usize::from(WIDTHS[(code & 3) as usize])
        }
        if word >> 29 != 0 {
            return None;
        }
        Some(Format {
            row_bucket: width(word),
            line: width(word >> 2),
            file: width(word >> 4),
            chain_bucket: width(word >> 6),
            files: (word >> 8 & 0xffff) as usize,
            count: if word >> 24 & 1 == 1 { 4 } else { 2 },
            node: width(word >> 25),
            call_line: width(word >> 27),
            function: widths.function(),
            file_entry: widths.file_entry(),
        })
    }

    /// The smallest width (1, 2 or 4) that holds `max`, or 0 for 0 when
    /// `zero_ok`.
    pub(super) fn width_for(max: u64, zero_ok: bool) -> usize {
        match max {
            0 if zero_ok => 0,
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        }
    }
}
