//! Constants of the ksym layout shared by the writer and the reader.

/// Bumped whenever the meaning of any byte changes.
pub const VERSION: u32 = 1;

/// Sections, in header order.
pub(super) const STARTS: usize = 0;
pub(super) const RANGES: usize = 1;
pub(super) const CHAINS: usize = 2;
pub(super) const NODES: usize = 3;
pub(super) const FUNCS: usize = 4;
pub(super) const FILES: usize = 5;
pub(super) const MARKS: usize = 6;
pub(super) const BLOB: usize = 7;
pub(super) const LINES: usize = 8;
pub(super) const PAGES: usize = 9;
pub(super) const SECTIONS: usize = 10;

/// The sections, in header order: names and record sizes in bytes.
pub(crate) const SECTION_TABLE: crate::ksym::header::Sections<SECTIONS> =
    crate::ksym::header::Sections {
        names: [
            "starts", "ranges", "chains", "nodes", "funcs", "files", "marks", "blob", "lines",
            "pages",
        ],
        record: [8, 32, 8, 16, 16, 16, 16, 1, 1, 4],
    };

/// The page index: pages from 4 KiB, at most 4 entries per range.
pub(crate) const PAGE_LAYOUT: crate::ksym::pages::Layout = crate::ksym::pages::Layout {
    min_shift: 12,
    per_range: 4,
};

/// A range's line rows get a mark (a decoder restart point) every this
/// many rows, so that finding a row in a long function decodes at most
/// this many: about one byte per row buys lookups that do not slow down
/// with function size.
pub(super) const MARK_EVERY: u32 = 32;
