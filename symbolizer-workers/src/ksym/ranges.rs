//! Range records read in place, in either layout a file may have (see
//! [`Records`](super::layout::Records)).

use super::fields::field;
use super::layout::FULL_RANGE_LEN;

/// A range record of `N` bytes: [`FULL_RANGE_LEN`] for `Records::Full`,
/// `COMPACT_RANGE_LEN` for `Records::Compact`.
/// Lookups read records with `N` a constant (see `read::with_layout!`), so
/// where each field lies is a constant too.
#[derive(Debug, Clone, Copy)]
pub(super) struct RangeRecord<'r, const N: usize>(pub(super) &'r [u8; N]);

impl<const N: usize> RangeRecord<'_, N> {
    const FULL: bool = N == FULL_RANGE_LEN;

    /// The range's first address.
    #[inline(always)]
    pub(super) fn start(self) -> u64 {
        match Self::FULL {
            true => u64::from(field(self.0, 0)) | u64::from(field(self.0, 4)) << 32,
            false => u64::from(field(self.0, 0)),
        }
    }

    /// The range's length in bytes.
    #[inline(always)]
    pub(super) fn len(self) -> u32 {
        field(self.0, if Self::FULL { 8 } else { 4 })
    }

    /// The function whose code the range is: a function record index.
    #[inline(always)]
    pub(super) fn function(self) -> u32 {
        field(self.0, if Self::FULL { 12 } else { 8 })
    }

    /// Where the range's body begins in the bodies section.
    #[inline(always)]
    pub(super) fn body(self) -> u32 {
        field(self.0, if Self::FULL { 16 } else { 12 })
    }

    /// How the range's body is laid out (`layout::Format`, packed).
    #[inline(always)]
    pub(super) fn format(self) -> u32 {
        field(self.0, if Self::FULL { 28 } else { 16 })
    }

    /// The numbers of the range's line rows and chain entries.
    #[inline(always)]
    pub(super) fn counts(self) -> (usize, usize) {
        match Self::FULL {
            true => (field(self.0, 20) as usize, field(self.0, 24) as usize),
            false => {
                let both = field(self.0, 20);
                ((both & 0xffff) as usize, (both >> 16) as usize)
            }
        }
    }
}

/// Record `i` of `bytes`, records of `N` bytes.
#[inline(always)]
pub(super) fn record<const N: usize>(bytes: &[u8], i: usize) -> Option<RangeRecord<'_, N>> {
    super::fields::records::<N>(bytes).get(i).map(RangeRecord)
}
