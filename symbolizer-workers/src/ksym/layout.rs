//! Constants of the ksym layout shared by the writer and the reader.

pub const MAGIC: &[u8; 4] = b"KSYM";
/// Bumped whenever the meaning of any byte changes.
pub const VERSION: u32 = 2;

/// Sections, in header order.
pub const RANGES: usize = 0;
pub const BODIES: usize = 1;
pub const NODES: usize = 2;
pub const FUNCS: usize = 3;
pub const FILES: usize = 4;
pub const BLOB: usize = 5;
pub const PAGES: usize = 6;
pub const SECTIONS: usize = 7;

/// Record size of each section, in bytes.
pub const RECORD: [usize; SECTIONS] = [RANGE_LEN, 1, 16, 16, 16, 1, 4];

pub const HEADER_LEN: usize = 16 + 8 * SECTIONS;

/// A range record: start u64 | len u32 | function u32 | body u32 | rows u32
/// | chains u32 | format u32.
pub const RANGE_LEN: usize = 32;

/// The page index has at most this many entries per range: where the code
/// is spread thinly over the address space, pages grow instead.
pub const PAGES_PER_RANGE: u64 = 4;
/// Smallest page: 64 bytes, about one small function. Small pages let the
/// index point at the one or two ranges that can hold an address, so that
/// a lookup reads one range record rather than searching many.
pub const MIN_PAGE_SHIFT: u32 = 6;

/// Row and chain offsets arrays up to this long are counted through in
/// full (a loop without branches, which the compiler vectorizes); longer
/// ones are first narrowed to this by binary search.
pub const SCAN: usize = 32;

/// The byte widths of a body's columns, packed in a range record's
/// `format` word: offsets (bits 0-1), lines (2-3), file indexes (4-5),
/// each as a code 0-3 for 0, 1, 2 or 4 bytes, then the number of files in
/// the range's file table (bits 8-31).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// Width of a row or chain offset: 1, 2 or 4 (never 0).
    pub offset: usize,
    /// Width of a row's line (above the body's base line): 0, 1, 2 or 4.
    pub line: usize,
    /// Width of a row's index into the file table: 0 (one file), 1, 2 or 4.
    pub file: usize,
    /// Entries in the range's file table.
    pub files: usize,
}

/// Most files one range's table may hold (24 bits of `format`).
pub const MAX_RANGE_FILES: usize = (1 << 24) - 1;

impl Format {
    pub fn pack(self) -> u32 {
        // Width 0, 1, 2, 4 as code 0, 1, 2, 3.
        let code = |w: usize| (usize::BITS - w.leading_zeros()).min(3);
        code(self.offset) | code(self.line) << 2 | code(self.file) << 4 | (self.files as u32) << 8
    }

    /// The format of a `format` word; `None` for an offset width of 0 or
    /// unknown bits set.
    #[inline]
    pub fn unpack(word: u32) -> Option<Format> {
        let width = |code: u32| (1usize << (code & 3)) >> 1;
        let format = Format {
            offset: width(word),
            line: width(word >> 2),
            file: width(word >> 4),
            files: (word >> 8) as usize,
        };
        (format.offset != 0 && word & 0xc0 == 0).then_some(format)
    }

    /// The smallest width (1, 2 or 4) that holds `max`, or 0 for 0 when
    /// `zero_ok`.
    pub fn width_for(max: u64, zero_ok: bool) -> usize {
        match max {
            0 if zero_ok => 0,
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        }
    }

    /// The size of a body with `rows` rows and `chains` chain entries (in
    /// `u64`, where the counts of a damaged record cannot overflow it).
    #[inline]
    pub fn body_len(self, rows: u64, chains: u64) -> u64 {
        let base = if rows > 0 { 4 } else { 0 };
        let [offset, line, file, files] =
            [self.offset, self.line, self.file, self.files].map(|v| v as u64);
        base + (rows + chains) * offset + rows * (line + file) + 4 * (files + chains)
    }
}
