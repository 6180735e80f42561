//! Reading ksym bytes in place: [`Ksym::open`] checks the header,
//! lookups answer, [`Ksym::verify`] checks the rest.

use super::body::{Body, Offsets, Position};
use super::fields::{check, records, scan_point, u32_at};
use super::layout::*;
use super::names::Names;
use super::packed::Packed;
use super::pages;
use super::ranges::{RangeRecord, record};
use super::{Frame, KsymError};
use crate::table::NONE;

/// Evaluates `$body` with `$layout` bound to `$k`'s layout as a constant:
/// each arm is a copy of `$body`'s code (of the `#[inline(always)]`
/// functions it calls) in which the widths of node functions and file
/// table entries, and the size of range records, are known. A macro
/// rather than a function taking a closure: with four arms, the compiler
/// called one copy of the closure with the layout as a value.
macro_rules! with_layout {
    ($k:expr, |$layout:ident| $body:expr) => {{
        use $crate::ksym::layout::{FileLayout, Records, Widths};
        match ($k.layout.widths, $k.layout.records) {
            (Widths::Narrow, Records::Compact) => {
                let $layout = FileLayout {
                    widths: Widths::Narrow,
                    records: Records::Compact,
                };
                $body
            }
            (Widths::Narrow, Records::Full) => {
                let $layout = FileLayout {
                    widths: Widths::Narrow,
                    records: Records::Full,
                };
                $body
            }
            (Widths::Wide, Records::Compact) => {
                let $layout = FileLayout {
                    widths: Widths::Wide,
                    records: Records::Compact,
                };
                $body
            }
            (Widths::Wide, Records::Full) => {
                let $layout = FileLayout {
                    widths: Widths::Wide,
                    records: Records::Full,
                };
                $body
            }
        }
    }};
}
pub(super) use with_layout;

/// A ksym file, read in place.
#[derive(Debug, Clone, Copy)]
pub struct Ksym<'a> {
    ranges: &'a [u8],
    bodies: &'a [u8],
    pub(super) names: Names<'a>,
    /// The page index section: the shift, then the entries.
    pages: &'a [u8],
    /// The page index's entries, and what locates an address's entry
    /// among them (read once at open: a lookup starts here).
    page_entries: &'a [[u8; 4]],
    page_base: u64,
    page_shift: u32,
    /// The file's widths of node functions and file table entries and
    /// its range records' layout, which each lookup passes down as
    /// constants (see [`Widths`] and [`Records`]).
    pub(super) layout: FileLayout,
}

/// A range record read for lookups in it: its bounds, its function and
/// its body (`None` when the format is unknown: its addresses then get
/// the function alone).
#[derive(Debug, Clone, Copy)]
pub(super) struct Located<'a> {
    start: u64,
    len: u32,
    function: u32,
    body: Option<Body<'a>>,
}

impl Located<'_> {
    /// Whether `addr` lies in the range.
    #[inline(always)]
    pub(super) fn covers(&self, addr: u64) -> bool {
        addr.checked_sub(self.start)
            .is_some_and(|offset| offset < u64::from(self.len))
    }

    /// Where `addr`, which the range covers, stands in its body; `None`
    /// when the range has none.
    #[inline(always)]
    pub(super) fn position(&self, addr: u64) -> Option<Position> {
        // `covers` holds: the offset fits the range's u32 length.
        self.position_until(addr).0
    }

    /// [`position`](Self::position) of `addr`, which the range covers,
    /// and the address before which it stays the same: addresses from
    /// `addr` up to there have the same answer.
    #[inline(always)]
    pub(super) fn position_until(&self, addr: u64) -> (Option<Position>, u64) {
        let offset = addr.wrapping_sub(self.start) as u32;
        let (at, next) = match &self.body {
            Some(body) => {
                let (at, next) = body.position_until(offset);
                (Some(at), next)
            }
            None => (None, u64::MAX),
        };
        // Past u64::MAX only in a damaged file, whose range covers every
        // address from its start on.
        (at, self.start.saturating_add(next.min(u64::from(self.len))))
    }
}

impl<'a> Ksym<'a> {
    /// Opens ksym bytes in constant time (but for small files, whose
    /// strings it checks once to read them faster): the header and the
    /// sections' bounds are checked, the records in them are not, as
    /// lookups read every record, value and string with bounds checks (a
    /// damaged one reads as unknown) and stop an inline chain that does
    /// not lead outward. [`verify`](Self::verify) checks them all. Corrupt
    /// input gives an error or wrong names, never a panic or a hang. A
    /// file of an earlier version gives [`KsymError::Outdated`]:
    /// [`upgrade`](super::upgrade()) it first.
    pub fn open(data: &'a [u8]) -> Result<Ksym<'a>, KsymError> {
        // The flags say how long a range record is, which sizes the
        // ranges section: they are read first (0 when the header is short,
        // which `read` then refuses).
        let layout = FileLayout::from_flags(u32_at(data, 12));
        let sized_by = layout.map_or(Records::Full, |l| l.records);
        let (sections, _) = section_table(sized_by).read(data, |version| match version {
            VERSION => Ok(()),
            1..VERSION => Err(KsymError::Outdated(version)),
            _ => Err(KsymError::UnsupportedVersion(version)),
        })?;
        let layout = layout.ok_or(KsymError::BadHeader)?;
        if !sections[NODES].is_empty() {
            return Err(KsymError::BadHeader);
        }
        let packed = Packed::open(sections[MANGLED])?;
        let names = Names::new(sections[FUNCS], sections[FILES], sections[BLOB], packed);
        let mut k = Ksym {
            ranges: sections[RANGES],
            bodies: sections[BODIES],
            names,
            pages: sections[PAGES],
            page_entries: &[],
            page_base: 0,
            page_shift: 0,
            layout,
        };
        pages::check_shift(k.pages, k.len(), PAGE_LAYOUT)?;
        if let Some((first, _)) = k.range(0) {
            // check_shift() checked the shift is below 64 and entries follow.
            k.page_shift = u32_at(k.pages, 0);
            k.page_base = first >> k.page_shift << k.page_shift;
            k.page_entries = records::<4>(&k.pages[4..]);
        }
        Ok(k)
    }

    /// Checks the fixed-size records: indexes within their sections,
    /// ranges sorted, the page index.
    fn check_records(&self) -> Result<(), KsymError> {
        match self.layout.records {
            Records::Full => self.check_records_of::<FULL_RANGE_LEN>(),
            Records::Compact => self.check_records_of::<COMPACT_RANGE_LEN>(),
        }
    }

    /// [`check_records`](Self::check_records) with range records of `N`
    /// bytes.
    fn check_records_of<const N: usize>(&self) -> Result<(), KsymError> {
        let n_funcs = self.names.functions();
        let mut prev_end = 0u64;
        for (r, range) in records::<N>(self.ranges).iter().enumerate() {
            let range = RangeRecord(range);
            let start = range.start();
            let len = u64::from(range.len());
            let end = start
                .checked_add(len)
                .ok_or(KsymError::Unsorted { index: r })?;
            if (r > 0 && start < prev_end) || len == 0 {
                return Err(KsymError::Unsorted { index: r });
            }
            prev_end = end;
            check("range", r, range.function(), n_funcs, true)?;
            if self.body(range, self.layout.widths).is_none() {
                return Err(KsymError::BadLines { range: r });
            }
        }
        let bounds: Vec<(u64, u64)> = (0..self.len()).filter_map(|i| self.range(i)).collect();
        pages::check_exact(self.pages, &bounds, PAGE_LAYOUT)
    }

    /// Checks every record, body value and string, which [`open`](Self::open)
    /// leaves to the lookups that read them (keeping open fast on large
    /// files; lookups stay safe either way, and a damaged value or string
    /// reads as unknown): for files received from elsewhere, before
    /// storing them.
    pub fn verify(&self) -> Result<(), KsymError> {
        self.check_records()?;
        self.names.verify()?;
        match self.layout.records {
            Records::Full => self.verify_bodies::<FULL_RANGE_LEN>(),
            Records::Compact => self.verify_bodies::<COMPACT_RANGE_LEN>(),
        }
    }

    /// Checks every body, of range records of `N` bytes.
    fn verify_bodies<const N: usize>(&self) -> Result<(), KsymError> {
        for (r, range) in records::<N>(self.ranges).iter().enumerate() {
            let range = RangeRecord(range);
            let Some(body) = self.body(range, self.layout.widths) else {
                return Err(KsymError::BadLines { range: r });
            };
            if !body_is_sound(&body, range.len(), &self.names) {
                return Err(KsymError::BadLines { range: r });
            }
        }
        Ok(())
    }

    /// The body of `range` in a file of `widths` (the file's, passed as
    /// a constant by lookups), or `None` when its format is unknown or it
    /// does not lie within the bodies section.
    #[inline(always)]
    fn body<const N: usize>(&self, range: RangeRecord<'_, N>, widths: Widths) -> Option<Body<'a>> {
        let (rows, chains) = range.counts();
        Body::new(
            self.bodies,
            range.body() as usize,
            rows,
            chains,
            Format::unpack(range.format(), widths)?,
        )
    }

    /// The size in bytes of each section, by name: for size reports.
    pub fn section_sizes(&self) -> [(&'static str, usize); SECTIONS] {
        let lens = [
            self.ranges.len(),
            self.bodies.len(),
            0,
            self.names.funcs.len(),
            self.names.files.len(),
            self.names.blob.len(),
            self.pages.len(),
            self.names.packed.len,
        ];
        let names = section_table(self.layout.records).names;
        std::array::from_fn(|i| (names[i], lens[i]))
    }

    /// Number of address ranges.
    pub fn len(&self) -> usize {
        self.ranges.len() / self.layout.records.len()
    }

    /// Whether there are no ranges at all.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The `[start, end)` of range `i`, for callers that sample addresses.
    pub fn range(&self, i: usize) -> Option<(u64, u64)> {
        let (start, len) = match self.layout.records {
            Records::Full => record::<FULL_RANGE_LEN>(self.ranges, i).map(|r| (r.start(), r.len())),
            Records::Compact => {
                record::<COMPACT_RANGE_LEN>(self.ranges, i).map(|r| (r.start(), r.len()))
            }
        }?;
        Some((start, start.saturating_add(u64::from(len))))
    }

    /// Symbolizes `addr` (a file-relative virtual address): fills `out`
    /// (cleared first) with its inline chain, innermost function first and
    /// the function that holds the code last. Returns whether any range
    /// covers `addr`. Does not allocate once `out` has room for the chain.
    pub fn lookup<'s>(&'s self, addr: u64, out: &mut Vec<Frame<'s>>) -> bool {
        out.clear();
        with_layout!(self, |layout| self.lookup_into(addr, layout, out)).is_some()
    }

    /// [`lookup`](Self::lookup), with `None` for an address no range
    /// covers. The loads that depend on one another: the page index, the
    /// range record, its body (rows, chain and inline nodes in a few
    /// adjacent cache lines), then, as the caller reads names, each
    /// frame's function and file records.
    #[inline(always)]
    fn lookup_into<'s>(
        &'s self,
        addr: u64,
        layout: FileLayout,
        out: &mut Vec<Frame<'s>>,
    ) -> Option<()> {
        let range = self.locate(addr, layout)?;
        self.push_frames(&range, addr, out);
        Some(())
    }

    /// The range that covers `addr`, if any, in a file of `layout`.
    #[inline(always)]
    pub(super) fn locate(&self, addr: u64, layout: FileLayout) -> Option<Located<'a>> {
        match layout.records {
            Records::Full => self.locate_in::<FULL_RANGE_LEN>(addr, layout.widths),
            Records::Compact => self.locate_in::<COMPACT_RANGE_LEN>(addr, layout.widths),
        }
    }

    /// [`locate`](Self::locate) among range records of `N` bytes.
    #[inline(always)]
    fn locate_in<const N: usize>(&self, addr: u64, widths: Widths) -> Option<Located<'a>> {
        let (lo, hi) = self.page(addr)?;
        let ranges = records::<N>(self.ranges).get(lo..hi)?;
        let after = scan_point(ranges, |r| RangeRecord(r).start() <= addr);
        let range = RangeRecord(ranges.get(after.checked_sub(1)?)?);
        // A page index that verify() would reject (a damaged file)
        // may start the search past `addr`: then nothing covers it.
        let function = range.function();
        self.names.prefetch_function(function);
        let located = Located {
            start: range.start(),
            len: range.len(),
            function,
            body: self.body(range, widths),
        };
        located.covers(addr).then_some(located)
    }

    /// Pushes the inline chain at `addr`, which `range` covers, onto `out`:
    /// innermost function first.
    #[inline(always)]
    pub(super) fn push_frames<'s>(
        &'s self,
        range: &Located<'a>,
        addr: u64,
        out: &mut Vec<Frame<'s>>,
    ) {
        self.push_frames_at(range, range.position(addr), out);
    }

    /// Pushes the inline chain at `at` in `range` (`None` for a range
    /// without a body) onto `out`: innermost function first.
    #[inline(always)]
    pub(super) fn push_frames_at<'s>(
        &'s self,
        range: &Located<'a>,
        at: Option<Position>,
        out: &mut Vec<Frame<'s>>,
    ) {
        let (Some(body), Some(at)) = (&range.body, at) else {
            out.push(Frame::new(&self.names, range.function, NONE, 0));
            return;
        };
        let (mut file, mut line) = body.line_of(at);
        self.names.prefetch_file(file);
        let mut node = body.node_of(at);
        // Parents come before their children (verify() checks), so the
        // walk ends; in a damaged file, at the first that does not.
        if node.wrapping_sub(1) < body.local_len() {
            // The range's own nodes, in its body: the cache lines the
            // chain was read from, or the next ones (laid out only where
            // an inlined call covers the address).
            let local = body.local();
            while let Some(i) = node.checked_sub(1).filter(|&i| i < local.len()) {
                let i = i as usize;
                out.push(Frame::new(&self.names, local.functions.get(i), file, line));
                file = local.files.get(local.call_files.get(i) as usize);
                line = local.call_lines.get(i);
                let parent = local.parents.get(i);
                node = if parent < node { parent } else { 0 };
            }
        }
        out.push(Frame::new(&self.names, range.function, file, line));
    }

    /// The ranges `[lo, hi)` that can hold `addr`, from the page index.
    #[inline]
    fn page(&self, addr: u64) -> Option<(usize, usize)> {
        let n = self.len();
        let page = usize::try_from(addr.checked_sub(self.page_base)? >> self.page_shift).ok()?;
        let lo = u32::from_le_bytes(*self.page_entries.get(page)?) as usize;
        let hi = match self.page_entries.get(page + 1) {
            Some(&next) => u32::from_le_bytes(next) as usize + 1,
            None => n,
        };
        Some((lo, hi.min(n)))
    }
}

/// Whether a body's own inline nodes are ones a lookup can use: chain references and parents to nodes that exist (parents before
/// their children), functions and call files that exist.
fn local_nodes_are_sound(body: &Body<'_>, n_funcs: usize) -> bool {
    let local = body.local();
    let n = local.len();
    (0..body.chain().len()).all(|i| body.nodes().get(i) <= n)
        && (0..n as usize).all(|i| {
            let function = local.functions.get(i);
            (reads_as_none(function, body.format.function) || (function as usize) < n_funcs)
                && (local.call_files.get(i) as usize) < body.format.files
                && (local.parents.get(i) as usize) <= i
        })
}

/// Whether every value in `body` (of a range of `len` bytes) is one a
/// lookup can use: offsets ascending within the range, lines that do not
/// overflow, file and node indexes that exist.
fn body_is_sound(body: &Body<'_>, len: u32, names: &Names<'_>) -> bool {
    // Bucket starts take bytes: a count of them with no width would have
    // the walks below go through billions of buckets that are not there.
    let format = body.format;
    if (body.rows().buckets() > 0 && format.row_bucket == 0)
        || (body.chain().buckets() > 0 && format.chain_bucket == 0)
    {
        return false;
    }
    let n_files = names.files();
    let ascending = |offsets: &Offsets<'_>| {
        let starts_ascend = (1..=offsets.buckets())
            .try_fold(0, |prev, b| {
                let start = offsets.bucket_start(b);
                (prev <= start && start <= offsets.len()).then_some(start)
            })
            .is_some();
        let mut prev = None;
        starts_ascend
            && offsets.offsets().all(|offset| {
                let ok = offset.is_some_and(|o| o < len && prev.is_none_or(|p| p < o));
                prev = offset;
                ok
            })
    };
    let rows = body.rows().len();
    let lines_fit = (0..rows).all(|i| body.base_line.checked_add(body.lines().get(i)).is_some());
    let indexes_fit = (0..rows).all(|i| (body.file_indexes().get(i) as usize) < format.files);
    let files_exist = (0..format.files).all(|i| {
        let f = body.file(i);
        reads_as_none(f, format.file_entry) || (f as usize) < n_files
    });
    let nodes_exist = local_nodes_are_sound(body, names.functions());
    ascending(&body.rows())
        && ascending(&body.chain())
        && lines_fit
        && indexes_fit
        && files_exist
        && nodes_exist
}
