//! Version 1 of the ksym layout, as Kiln wrote it before version 2.
//!
//! Kept for two reasons: object stores hold version 1 files, which
//! [`upgrade`](super::upgrade) reads here and rewrites in the current
//! layout so that profiles keep their names without re-extraction; and
//! its writer lets the tests make version 1 files and the benchmark show
//! what the new layout bought. Nothing else writes version 1.
//!
//! # Layout
//!
//! All integers little-endian; sections start 8-aligned. A string is an
//! (offset u32, len u32) pair into `blob`, where each distinct string is
//! stored once; "none" is `u32::MAX` ([`NONE`](crate::NONE)).
//!
//! ```text
//! header   "KSYM" | version u32 | header_len u32 | 0 u32
//!          then per section, in this order: offset u32 | count u32
//! starts   u64 × ranges              first address of each range, ascending
//! ranges   32 B × ranges             len u32 | function u32 | lines_off u32
//!                                    | line_rows u32 | chain_first u32 | chain_count u32
//!                                    | mark_first u32 | mark_count u32
//! chains   8 B                       offset in range u32 | node u32: from that
//!                                    offset on, the innermost inlined call
//! nodes    16 B                      function u32 | call_file u32 | call_line u32
//!                                    | parent u32 (an earlier node, or none)
//! funcs    16 B                      name string | mangled string (or none)
//! files    16 B                      dir string | name string
//! marks    16 B                      offset in range u32 | lines position u32
//!                                    | line u32 | file u32: the decoder's state
//!                                    after every 32nd row of long ranges
//! blob     bytes                     UTF-8 string bytes
//! lines    bytes                     per range, line_rows rows of
//!                                    varint(addr_delta << 1 | file_changed)
//!                                    zigzag varint(line_delta) [varint(file + 1)]
//! pages    4 B                       page shift u32, then per page of
//!                                    2^shift bytes from the first range's page:
//!                                    the first range ending after the page start
//! ```
//!
//! The page index narrows the binary search over `starts` to the few
//! ranges of one page (a lookup's first cache misses are otherwise spent
//! there); pages are 4 KiB or larger, at most 4 per range.
//!
//! Line rows start from (range start, line 0, no file); a row holds until
//! the next one.
//!
//! [`Ksym::open`] checks every fixed-size record (offsets, indexes, sort
//! order) and, up to 4 MiB, the UTF-8 of the strings; the variable-length
//! line rows (and the strings of larger files) are checked as lookups read
//! them (a corrupt row ends the walk, a corrupt string reads as unknown)
//! and in full by [`Ksym::verify`], which an upload path should call.

mod layout;
mod read;
mod unpack;
mod write;

pub use layout::VERSION;
pub use read::Ksym;
pub use write::encode;
