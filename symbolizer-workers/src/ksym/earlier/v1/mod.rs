//! Version 1 of the ksym layout, as Kiln wrote it before version 2: read
//! whole for [`upgrade`](crate::ksym::upgrade()) (see `ksym::earlier`), and
//! written by [`encode`] for the tests, which make version 1 files with
//! it, and the benchmark, which reports their size. Nothing else writes
//! version 1, and nothing looks addresses up in it.
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
//! The page index narrowed a lookup's binary search over `starts` to the
//! few ranges of one page; pages are 4 KiB or larger, at most 4 per range.
//!
//! Line rows start from (range start, line 0, no file); a row holds until
//! the next one.
//!
//! `to_table` checks every record, line row and string: a damaged file
//! gives an error, never part of a table.

mod layout;
mod read;
mod unpack;
mod varint;
mod write;

pub use layout::VERSION;
pub(super) use unpack::to_table;
pub use write::encode;
