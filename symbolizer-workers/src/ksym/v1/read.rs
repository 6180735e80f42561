//! Reading version 1 ksym bytes in place: [`Ksym::open`] validates,
//! lookups answer, [`Ksym::to_table`] reads everything back for
//! [`upgrade`](crate::ksym::upgrade).

use super::layout::*;
use crate::ksym::fields::{
    check, field, partition_point, records, scan_point, u32_at, u64_at, window,
};
use crate::ksym::names::Names;
use crate::ksym::pages;
use crate::ksym::{Frame, KsymError, varint};
use crate::table::NONE;

/// A version 1 ksym file, read in place.
#[derive(Debug, Clone, Copy)]
pub struct Ksym<'a> {
    pub(super) starts: &'a [u8],
    pub(super) ranges: &'a [u8],
    pub(super) chains: &'a [u8],
    pub(super) nodes: &'a [u8],
    pub(super) names: Names<'a>,
    pub(super) marks: &'a [u8],
    pub(super) lines: &'a [u8],
    pub(super) pages: &'a [u8],
}

impl<'a> Ksym<'a> {
    /// Opens ksym bytes, validating every offset and index, so that
    /// lookups need no checks that can fail. Corrupt input gives an error,
    /// never a panic; the time taken is linear in the size.
    pub fn open(data: &'a [u8]) -> Result<Ksym<'a>, KsymError> {
        let (sections, _) = SECTION_TABLE.read(data, |version| match version {
            VERSION => Ok(()),
            _ => Err(KsymError::UnsupportedVersion(version)),
        })?;
        let names = Names::open(sections[FUNCS], sections[FILES], sections[BLOB], None)?;
        let k = Ksym {
            starts: sections[STARTS],
            ranges: sections[RANGES],
            chains: sections[CHAINS],
            nodes: sections[NODES],
            names,
            marks: sections[MARKS],
            lines: sections[LINES],
            pages: sections[PAGES],
        };
        k.validate()?;
        Ok(k)
    }

    fn validate(&self) -> Result<(), KsymError> {
        let n_funcs = self.names.functions();
        let n_files = self.names.files();
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
        pages::check(self.pages, n, PAGE_LAYOUT)
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

    /// Checks every line row and string, which [`open`](Self::open) leaves
    /// to the lookups that read them (keeping open fast on large files;
    /// lookups stay safe either way, and a corrupt row or string reads as
    /// unknown): for files received from elsewhere, before storing them.
    pub fn verify(&self) -> Result<(), KsymError> {
        self.names.verify()?;
        let n_files = self.names.files();
        for r in 0..self.len() {
            let start = u64_at(self.starts, 8 * r);
            let end = start + u64::from(u32_at(self.ranges, 32 * r));
            self.validate_lines(r, start, end, n_files)?;
        }
        Ok(())
    }

    fn validate_lines(
        &self,
        r: usize,
        start: u64,
        end: u64,
        n_files: usize,
    ) -> Result<(), KsymError> {
        let bad = KsymError::BadLines { range: r };
        let mut pos = u32_at(self.ranges, 32 * r + 8) as usize;
        let rows = u32_at(self.ranges, 32 * r + 12);
        let (mut addr, mut line) = (start, 0i64);
        for i in 0..rows {
            let head = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
            let delta = varint::read_i64(self.lines, &mut pos).ok_or(bad.clone())?;
            if head & 1 == 1 {
                let file = varint::read_u64(self.lines, &mut pos).ok_or(bad.clone())?;
                if file > n_files as u64 {
                    return Err(bad);
                }
            }
            let step = head >> 1;
            addr = addr.checked_add(step).ok_or(bad.clone())?;
            line = line.checked_add(delta).ok_or(bad.clone())?;
            if addr >= end || (i > 0 && step == 0) || !(0..=i64::from(u32::MAX)).contains(&line) {
                return Err(bad);
            }
        }
        Ok(())
    }

    /// The size in bytes of each section, by name: for size reports.
    pub fn section_sizes(&self) -> [(&'static str, usize); SECTIONS] {
        let lens = [
            self.starts.len(),
            self.ranges.len(),
            self.chains.len(),
            self.nodes.len(),
            self.names.funcs.len(),
            self.names.files.len(),
            self.marks.len(),
            self.names.blob.len(),
            self.lines.len(),
            self.pages.len(),
        ];
        std::array::from_fn(|i| (SECTION_TABLE.names[i], lens[i]))
    }

    /// Number of address ranges.
    pub fn len(&self) -> usize {
        self.starts.len() / 8
    }

    /// Whether there are no ranges at all.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The `[start, end)` of range `i`, for callers that sample addresses.
    pub fn range(&self, i: usize) -> Option<(u64, u64)> {
        (i < self.len()).then(|| {
            let start = u64_at(self.starts, 8 * i);
            (
                start,
                start.saturating_add(u64::from(u32_at(self.ranges, 32 * i))),
            )
        })
    }

    /// Symbolizes `addr` (a file-relative virtual address): fills `out`
    /// (cleared first) with its inline chain, innermost function first and
    /// the function that holds the code last. Returns whether any range
    /// covers `addr`. Does not allocate once `out` has room for the chain.
    pub fn lookup<'s>(&'s self, addr: u64, out: &mut Vec<Frame<'s>>) -> bool {
        out.clear();
        self.lookup_into(addr, out).is_some()
    }

    /// [`lookup`](Self::lookup), with `None` for an address no range
    /// covers.
    ///
    /// Records are read through fixed-size views (`&[[u8; N]]`), so that
    /// a field read has no bounds check.
    #[inline]
    fn lookup_into<'s>(&'s self, addr: u64, out: &mut Vec<Frame<'s>>) -> Option<()> {
        // The last range starting at or before `addr`, searched for among
        // the ranges of its page.
        let (lo, hi) = self.page(addr)?;
        let starts = records::<8>(self.starts);
        let after = scan_point(starts.get(lo..hi)?, |s| u64::from_le_bytes(*s) <= addr);
        let r = (lo + after).checked_sub(1)?;
        let start = u64::from_le_bytes(*starts.get(r)?);
        let range = records::<32>(self.ranges).get(r)?;
        // A page index that open() could not fully check (a damaged file)
        // may start the search past `addr`: then nothing covers it.
        let offset = addr.checked_sub(start)?;
        if offset >= u64::from(field(range, 0)) {
            return None;
        }
        let offset = offset as u32;
        let (mut file, mut line) = self.line_at(range, offset);
        let mut node = self.chain_at(range, offset);
        // Bounded by the node count: open() checked that parents come first.
        let nodes = records::<16>(self.nodes);
        while let Some(n) = nodes.get(node as usize) {
            out.push(Frame::new(&self.names, field(n, 0), file, line));
            file = field(n, 4);
            line = field(n, 8);
            node = field(n, 12);
        }
        out.push(Frame::new(&self.names, field(range, 4), file, line));
        Some(())
    }

    /// The ranges `[lo, hi)` that can hold `addr`, from the page index.
    #[inline]
    fn page(&self, addr: u64) -> Option<(usize, usize)> {
        let n = self.len();
        let shift = u32_at(self.pages, 0);
        let base = u64_at(self.starts, 0)
            .checked_shr(shift)?
            .checked_shl(shift)?;
        let page = usize::try_from(addr.checked_sub(base)? >> shift).ok()?;
        let pages = self.pages.len() / 4 - 1;
        if page >= pages {
            return None;
        }
        let lo = u32_at(self.pages, 4 + 4 * page) as usize;
        let hi = if page + 1 < pages {
            u32_at(self.pages, 8 + 4 * page) as usize + 1
        } else {
            n
        };
        Some((lo, hi.min(n)))
    }

    /// (file, line) of the last line row at or before `offset` in `range`:
    /// from the last mark before it, decoding at most [`MARK_EVERY`] rows.
    #[inline]
    fn line_at(&self, range: &[u8; 32], offset: u32) -> (u32, u32) {
        let lines_off = field(range, 8) as usize;
        let mut rows = field(range, 12);
        let marks = window(
            records::<16>(self.marks),
            field(range, 24),
            field(range, 28),
        );
        let passed = partition_point(marks, |m| field(m, 0) <= offset);
        let (mut at, mut line, mut file, mut pos) = (0u32, 0u32, NONE, lines_off);
        if let Some(m) = passed.checked_sub(1).and_then(|i| marks.get(i)) {
            at = field(m, 0);
            pos = lines_off.saturating_add(field(m, 4) as usize);
            line = field(m, 8);
            file = field(m, 12);
            rows = rows.saturating_sub(MARK_EVERY.saturating_mul(passed as u32));
        }
        let (mut found_file, mut found_line) = (file, line);
        let mut rest = self.lines.get(pos..).unwrap_or_default();
        for _ in 0..rows {
            let (Some(head), Some(delta)) =
                (varint::next_u64(&mut rest), varint::next_i64(&mut rest))
            else {
                break;
            };
            if head & 1 == 1 {
                file = varint::next_u64(&mut rest).map_or(NONE, |f| (f as u32).wrapping_sub(1));
            }
            at = at.wrapping_add(u32::try_from(head >> 1).unwrap_or(u32::MAX));
            line = i64::from(line).wrapping_add(delta) as u32;
            if at > offset {
                break;
            }
            (found_file, found_line) = (file, line);
        }
        (found_file, found_line)
    }

    /// The innermost inline node at `offset` in `range`.
    #[inline]
    fn chain_at(&self, range: &[u8; 32], offset: u32) -> u32 {
        let chains = window(
            records::<8>(self.chains),
            field(range, 16),
            field(range, 20),
        );
        let passed = partition_point(chains, |c| field(c, 0) <= offset);
        passed
            .checked_sub(1)
            .and_then(|i| chains.get(i))
            .map_or(NONE, |c| field(c, 4))
    }
}
