//! The page index, the same in every ksym version but for its sizes: a
//! page shift, then for each page of the covered address span the first
//! range that ends after the page's start, so a lookup searches only the
//! ranges of its page.

use super::KsymError;
use super::fields::u32_at;

/// A version's page sizes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Smallest page, as a shift.
    pub min_shift: u32,
    /// Pages per range at most: where code is spread thinly over the
    /// address space, pages grow instead.
    pub per_range: u64,
}

/// The page index over ranges given as (start, end), sorted.
pub(super) fn build_over(bounds: &[(u64, u64)], layout: Layout) -> Vec<u8> {
    let (Some(first), Some(last)) = (bounds.first(), bounds.last()) else {
        return Vec::new();
    };
    let ends: Vec<u64> = bounds.iter().map(|&(_, end)| end).collect();
    let end = ends
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(last.0.saturating_add(1));
    let span = end.saturating_sub(first.0);
    let mut shift = layout.min_shift;
    while shift < 63 && (span >> shift) + 2 > layout.per_range * bounds.len() as u64 {
        shift += 1;
    }
    let base = first.0 >> shift << shift;
    let count = ((end - 1).saturating_sub(base) >> shift) + 1;
    let mut out = Vec::with_capacity(4 * (count as usize + 1));
    out.extend(shift.to_le_bytes());
    let mut r = 0;
    for page in 0..count {
        let page_start = base + (page << shift);
        while r < ends.len() && ends[r] <= page_start {
            r += 1;
        }
        out.extend(u32::try_from(r).unwrap_or(u32::MAX).to_le_bytes());
    }
    out
}

/// Checks what a lookup needs of a page index over `n` ranges before it
/// reads one (its shift), in constant time.
pub(super) fn check_shift(pages: &[u8], n: usize, layout: Layout) -> Result<(), KsymError> {
    let shift = u32_at(pages, 0);
    let sound = match pages.is_empty() {
        true => n == 0,
        false => (layout.min_shift..64).contains(&shift) && pages.len() >= 8,
    };
    match sound {
        true => Ok(()),
        false => Err(KsymError::BadIndex {
            what: "page",
            index: 0,
        }),
    }
}

/// Checks that `pages` is the page index [`build_over`] makes for ranges
/// of these `bounds` (sorted): an index that is sound but wrong would
/// send lookups of some addresses to ranges that do not hold them.
pub(super) fn check_exact(
    pages: &[u8],
    bounds: &[(u64, u64)],
    layout: Layout,
) -> Result<(), KsymError> {
    let expected = build_over(bounds, layout);
    match expected.iter().zip(pages).position(|(a, b)| a != b) {
        None if expected.len() == pages.len() => Ok(()),
        first => Err(KsymError::BadIndex {
            what: "page",
            index: first.unwrap_or(expected.len().min(pages.len())) / 4,
        }),
    }
}
