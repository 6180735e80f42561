//! Reading the fixed-size fields and records of ksym bytes, and the
//! searches over them: for the reader, and for that of earlier versions
//! (see `earlier`).

use crate::table::NONE;

use super::KsymError;

#[inline]
pub(super) fn u32_at(s: &[u8], at: usize) -> u32 {
    match s.get(at..at + 4) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => NONE,
    }
}

#[inline]
pub(super) fn u64_at(s: &[u8], at: usize) -> u64 {
    match s.get(at..at + 8) {
        Some(b) => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        None => u64::MAX,
    }
}

/// A section as its fixed-size records. Sections are a whole number of
/// records long (open() sized them so), so nothing is left over.
#[inline]
pub(super) fn records<const N: usize>(section: &[u8]) -> &[[u8; N]] {
    section.as_chunks::<N>().0
}

/// The `u32` at byte `at` of a record: with `at` a constant, the compiler
/// checks the bounds once, at build time.
#[inline]
pub(super) fn field<const N: usize>(record: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
}

/// The number of leading `items` for which `before` holds (it must hold
/// on a prefix): a binary search that branches, unlike the standard
/// library's since Rust 1.80. Measured here, branching is faster: the
/// searched windows are short and hold the next load's address, and a
/// predicted branch lets the CPU start the loads that follow (the range
/// record, its line rows) while this one's cache miss is served, where a
/// conditional move makes them wait.
#[inline]
pub(super) fn partition_point<T>(items: &[T], before: impl Fn(&T) -> bool) -> usize {
    let (mut lo, mut hi) = (0, items.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(&items[mid]) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`partition_point`] for the ranges of one page: scanned in order when
/// they are few (a page holds one or two; version 1's 4 KiB pages held
/// about 20 of glibc's small functions), as sequential cache lines cost
/// less than a binary search's dependent loads (measured 10% faster per
/// lookup on glibc in version 1); searched when many tiny functions share
/// a page.
#[inline]
pub(super) fn scan_point<T>(items: &[T], before: impl Fn(&T) -> bool) -> usize {
    const SCAN: usize = 32;
    if items.len() > SCAN {
        return partition_point(items, before);
    }
    items.iter().take_while(|item| before(item)).count()
}

/// Checks that `index` is [`NONE`] or below `count`.
pub(super) fn check(
    what: &'static str,
    record: usize,
    index: u32,
    count: usize,
    none_ok: bool,
) -> Result<(), KsymError> {
    if (index == NONE && none_ok) || (index as usize) < count {
        Ok(())
    } else {
        Err(KsymError::BadIndex {
            what,
            index: record,
        })
    }
}
