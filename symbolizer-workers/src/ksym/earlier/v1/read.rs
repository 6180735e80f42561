//! Opening version 1 ksym bytes: [`Ksym::open`] checks every record but
//! the line rows and the strings, which [`to_table`](super::to_table)
//! checks as it reads them.

use super::layout::*;
use crate::ksym::KsymError;
use crate::ksym::fields::{check, u32_at, u64_at};
use crate::ksym::pages;
use crate::table::NONE;

/// A version 1 ksym file's sections.
pub(super) struct Ksym<'a> {
    pub(super) starts: &'a [u8],
    pub(super) ranges: &'a [u8],
    pub(super) chains: &'a [u8],
    pub(super) nodes: &'a [u8],
    pub(super) funcs: &'a [u8],
    pub(super) files: &'a [u8],
    pub(super) blob: &'a [u8],
    pub(super) marks: &'a [u8],
    pub(super) lines: &'a [u8],
    pub(super) pages: &'a [u8],
}

impl<'a> Ksym<'a> {
    /// Opens ksym bytes, checking every fixed-size record: offsets,
    /// indexes, sort order, the page index.
    pub(super) fn open(data: &'a [u8]) -> Result<Ksym<'a>, KsymError> {
        let (sections, _) = SECTION_TABLE.read(data, |version| match version {
            VERSION => Ok(()),
            _ => Err(KsymError::UnsupportedVersion(version)),
        })?;
        let k = Ksym {
            starts: sections[STARTS],
            ranges: sections[RANGES],
            chains: sections[CHAINS],
            nodes: sections[NODES],
            funcs: sections[FUNCS],
            files: sections[FILES],
            blob: sections[BLOB],
            marks: sections[MARKS],
            lines: sections[LINES],
            pages: sections[PAGES],
        };
        k.validate()?;
        Ok(k)
    }

    fn validate(&self) -> Result<(), KsymError> {
        let n_funcs = self.funcs.len() / 16;
        let n_files = self.files.len() / 16;
        let n_nodes = self.nodes.len() / 16;
        for i in 0..n_nodes {
            check("inline node", i, u32_at(self.nodes, 16 * i), n_funcs, true)?;
            check(
                "inline node",
                i,
                u32_at(self.nodes, 16 * i + 4),
                n_files,
                true,
            )?;
            // Parents come first, so walking up a chain always ends.
            check("inline node", i, u32_at(self.nodes, 16 * i + 12), i, true)?;
        }
        let n_chains = self.chains.len() / 8;
        let n = self.starts.len() / 8;
        if self.ranges.len() / 32 != n {
            return Err(KsymError::RangeCount);
        }
        let mut prev_end = 0u64;
        for r in 0..n {
            let start = u64_at(self.starts, 8 * r);
            let rec = 32 * r;
            let len = u64::from(u32_at(self.ranges, rec));
            let end = start
                .checked_add(len)
                .ok_or(KsymError::Unsorted { index: r })?;
            if (r > 0 && start < prev_end) || len == 0 {
                return Err(KsymError::Unsorted { index: r });
            }
            prev_end = end;
            check("range", r, u32_at(self.ranges, rec + 4), n_funcs, true)?;
            let first = u32_at(self.ranges, rec + 16) as usize;
            let count = u32_at(self.ranges, rec + 20) as usize;
            if first.checked_add(count).is_none_or(|e| e > n_chains) {
                return Err(KsymError::BadIndex {
                    what: "range",
                    index: r,
                });
            }
            let mut prev = None;
            for c in first..first + count {
                let offset = u64::from(u32_at(self.chains, 8 * c));
                if offset >= len || prev.is_some_and(|p| p >= offset) {
                    return Err(KsymError::BadIndex {
                        what: "range",
                        index: r,
                    });
                }
                prev = Some(offset);
                check(
                    "inline chain",
                    c,
                    u32_at(self.chains, 8 * c + 4),
                    n_nodes,
                    true,
                )?;
            }
            self.check_marks(r, len, n_files)?;
        }
        check_pages(self.pages, n)
    }

    /// Checks the line marks of range `r` (of `len` bytes).
    fn check_marks(&self, r: usize, len: u64, n_files: usize) -> Result<(), KsymError> {
        let rec = 32 * r;
        let first = u32_at(self.ranges, rec + 24) as usize;
        let count = u32_at(self.ranges, rec + 28) as usize;
        let bad = KsymError::BadLines { range: r };
        if first
            .checked_add(count)
            .is_none_or(|e| e > self.marks.len() / 16)
        {
            return Err(bad);
        }
        let lines_off = u32_at(self.ranges, rec + 8) as usize;
        let mut prev = None;
        for m in first..first + count {
            let at = 16 * m;
            let offset = u64::from(u32_at(self.marks, at));
            let pos = lines_off.checked_add(u32_at(self.marks, at + 4) as usize);
            let file = u32_at(self.marks, at + 12);
            if offset >= len
                || prev.is_some_and(|p| p >= offset)
                || pos.is_none_or(|p| p > self.lines.len())
                || (file != NONE && file as usize >= n_files)
            {
                return Err(bad);
            }
            prev = Some(offset);
        }
        Ok(())
    }

    /// Number of address ranges.
    pub(super) fn len(&self) -> usize {
        self.starts.len() / 8
    }
}

/// Checks a page index over `n` ranges: a shift, then nondecreasing range
/// indexes.
fn check_pages(pages: &[u8], n: usize) -> Result<(), KsymError> {
    pages::check_shift(pages, n, PAGE_LAYOUT)?;
    let mut prev = 0;
    for at in (4..pages.len()).step_by(4) {
        let r = u32_at(pages, at) as usize;
        if r < prev || r > n {
            return Err(KsymError::BadIndex {
                what: "page",
                index: at / 4 - 1,
            });
        }
        prev = r;
    }
    Ok(())
}
