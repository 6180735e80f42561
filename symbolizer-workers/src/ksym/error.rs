//! Why bytes are not a ksym file: shared by the reader and the upgrade of
//! earlier versions.

use super::layout::VERSION;

/// Why bytes are not a ksym file [`Ksym::open`](super::Ksym::open) can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KsymError {
    /// Fewer bytes than a header.
    #[error("ksym data is too short ({len} bytes)")]
    TooShort { len: usize },
    /// The bytes do not start with `KSYM`.
    #[error("not a ksym file (bad magic)")]
    BadMagic,
    /// A version this build does not know.
    #[error("unsupported ksym version {0} (this build reads version {VERSION})")]
    UnsupportedVersion(u32),
    /// An earlier version, which [`upgrade`](super::upgrade()) rewrites in
    /// this one (the symbolizer's loader does so for stored files).
    #[error(
        "ksym version {0} is an earlier layout: ksym::upgrade rewrites it in version {VERSION}"
    )]
    Outdated(u32),
    /// The header's own length field is wrong, or its flags are unknown.
    #[error("corrupt ksym header")]
    BadHeader,
    /// A section extends past the end of the data.
    #[error("ksym section {section} lies outside the data")]
    SectionOutOfBounds { section: &'static str },
    /// Two sections disagree on how many ranges there are.
    #[error("ksym range tables disagree on their length")]
    RangeCount,
    /// Ranges are not sorted, or overlap.
    #[error("ksym range {index} is out of order or overlaps the next")]
    Unsorted { index: usize },
    /// A record refers to an entry that does not exist.
    #[error("ksym {what} {index} refers to a missing entry")]
    BadIndex { what: &'static str, index: usize },
    /// A string is not UTF-8 (found by [`Ksym::verify`](super::Ksym::verify)).
    #[error("ksym strings are not valid UTF-8")]
    BadUtf8,
    /// The line rows of a range do not decode.
    #[error("ksym line rows of range {range} are corrupt")]
    BadLines { range: usize },
}
