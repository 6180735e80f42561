//! The `ksym` symbol file format: what Kiln stores per executable (keyed
//! by file id, zstd-compressed by the caller) and answers lookups from.
//!
//! A ksym file is read in place from one `&[u8]`: [`Ksym::open`] checks
//! every offset and index once, after which a lookup is two binary
//! searches, a short walk of delta-encoded line rows and a walk up an
//! inline chain, with no allocation. [`encode`] writes the same bytes for
//! the same table.
//!
//! # Layout (version 1)
//!
//! All integers little-endian; sections start 8-aligned.
//!
//! ```text
//! header   "KSYM" | version u32 | header_len u32 | 0 u32
//!          then per section, in this order: offset u32 | count u32
//! starts   u64 × ranges              first address of each range, ascending
//! ranges   24 B × ranges             len u32 | function u32 | lines_off u32
//!                                    | line_rows u32 | chain_first u32 | chain_count u32
//! chains   8 B                       offset in range u32 | node u32: from that
//!                                    offset on, the innermost inlined call
//! nodes    16 B                      function u32 | call_file u32 | call_line u32
//!                                    | parent u32 (an earlier node, or none)
//! funcs    8 B                       name str | mangled str (or none)
//! files    8 B                       dir str | name str
//! strs     8 B                       offset u32 | len u32 into blob
//! blob     bytes                     UTF-8 string bytes, each string once
//! lines    bytes                     per range, line_rows rows of
//!                                    varint(addr_delta << 1 | file_changed)
//!                                    zigzag varint(line_delta) [varint(file + 1)]
//! ```
//!
//! "none" is `u32::MAX` ([`NONE`](crate::NONE)). Line rows start from
//! (range start, line 0, no file); a row holds until the next one.

mod layout;
mod read;
mod varint;
mod write;

pub use read::{Frame, Ksym, KsymError};
pub use write::encode;
