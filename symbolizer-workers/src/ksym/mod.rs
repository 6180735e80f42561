//! The `ksym` symbol file format: what Kiln stores per executable (keyed
//! by file id, zstd-compressed by the caller) and answers lookups from.
//!
//! A ksym file is read in place from one `&[u8]`: [`Ksym::open`] checks
//! its header, after which a lookup reads the page index, one range
//! record, that range's body (its line rows and inline chain, side by
//! side in fixed-width columns that are searched, not decoded) and walks
//! up the inline chain, with no allocation; it starts loading the function
//! and file records its caller reads next (cache misses in a large file)
//! as soon as it knows them. [`Ksym::lookup_many`] answers many addresses
//! in address order (radix-sorted), reading each range once and reusing
//! an answer up to the next line row or chain entry.
//! [`encode`] writes the same bytes for the same table.
//!
//! Version 6 is the only layout read here: [`Ksym::open`] refuses a file
//! of an earlier version (1 to 5) as [`KsymError::Outdated`], and
//! [`upgrade`](upgrade()) rewrites it in version 6, reading it whole once
//! with a reader of the earlier layouts kept apart for that (`earlier`);
//! the symbolizer's loader stores the result in the earlier file's place.
//!
//! # Layout (version 6)
//!
//! All integers little-endian; sections start 8-aligned. A string is an
//! (offset u32, len u32) pair into `blob`, or for a mangled name into the
//! text of the `mangled` section, where each distinct string is stored
//! once (a string that begins another is read from that one's bytes);
//! "none" is `u32::MAX` ([`NONE`](crate::NONE)).
//!
//! ```text
//! header   "KSYM" | version u32 | header_len u32 | flags u32
//!          then per section, in this order: offset u32 | count u32
//!          flags: bit 0 (NARROW) when the file has fewer than 2^24 − 1
//!          functions and 2^16 − 1 files: its node functions take 3
//!          bytes and its file table entries 2, all ones for none, else
//!          both take 4; bit 1 (COMPACT) when every range ends below
//!          4 GiB: its range records take 24 bytes, else 32
//! ranges   24 B × ranges   compact: start u32 | len u32 | function u32
//!                          | body u32 | format u32 | rows u16
//!                          | chains u16 (a range with more rows or
//!                          chain entries is written as several)
//!          32 B × ranges   else: start u64 | len u32 | function u32
//!                          | body u32 | rows u32 | chains u32
//!                          | format u32
//! bodies   bytes           per range, at `body`: see below; then 15 zero
//!                          bytes (lookups read values 4 bytes at a time,
//!                          low bytes 16 at a time)
//! nodes    none            empty: version 2's inline nodes, shared by
//!                          every range (its header entry stays)
//! funcs    16 B            name string | mangled string (or none); for a
//!                          Rust legacy name that mangling the name with
//!                          its hash gives back, the hash as a u64 in
//!                          place of the mangled string, and bit 31 of
//!                          the name's length set (or, for a hash not in
//!                          lower-case hex or followed by a `.llvm.`
//!                          suffix, the hash and suffix as text, and bit
//!                          31 of the mangled string's length set); for
//!                          a name that
//!                          demangling the mangled one gives back, a
//!                          slot number in place of the name's offset,
//!                          and bit 30 of its length set (see
//!                          `names::DEMANGLED`)
//! files    16 B            dir string | name string
//! blob     bytes           UTF-8: function and file names first, then
//!                          directories
//! pages    4 B             page shift u32, then per page of 2^shift bytes
//!                          from the first range's page: the first range
//!                          ending after the page start
//! mangled  bytes           mangled names (and hash texts), sorted,
//!                          zstd-compressed in blocks of about 16 KiB
//!                          (see `packed`)
//! ```
//!
//! A range's body holds its line rows and its inline chain as columns,
//! each value as wide as `format` says (see `layout::Format`: 0 to 4
//! bytes, as the values of that range need). Offsets in the range (where
//! a row or a chain entry starts) are split at 256-byte buckets: a lookup
//! reads where its bucket's entries begin and counts the low bytes there
//! that are at or below its own, with no search and no decoding.
//!
//! ```text
//! base_line u32                      only when rows > 0
//! row buckets    u16 or u32          only when rows > 0   } u32 when
//! chain buckets  u16 or u32          only when chains > 0 } format
//! nodes          u16 or u32          only when chains > 0 } says
//! row bucket starts  × row buckets   for each 256-byte bucket after the
//!                                    first, up to the last row's: the
//!                                    index of its first row
//! row low bytes  u8 × rows           offset & 0xff, ascending per bucket;
//!                                    before the first row, no line
//! chain bucket starts × chain buckets, chain low bytes u8 × chains: the
//!                                    same for the offsets where the
//!                                    innermost inlined call changes
//! row lines      × rows              line − base_line
//! row files      × rows              index into the file table
//! file table     u16 or u32 × files  file indexes (or none), of the
//!                                    rows and of the nodes' calls
//! chain nodes    × chains            innermost node from that offset on:
//!                                    1 + its index, 0 for none
//! node functions u24 or u32 × nodes  the range's own inline nodes, in
//! node files     × nodes             columns: function, where it was
//! node lines     × nodes             called (an index into the file
//! node parents   × nodes             table, a line), parent (1 + an
//!                                    earlier node's index, 0 for none)
//! ```
//!
//! A range's inline nodes are in its body, next to the chain that refers
//! to them, rather than in one section for the whole file (version 2's):
//! the walk up a chain reads the cache lines the chain was read from, and
//! references take one or two bytes rather than four. Version 3 kept the
//! hashes of Rust legacy names as text in the blob, and node functions
//! and file table entries in 4 bytes: 14% more bytes on a large Rust
//! program. Version 4 kept every range record in 32 bytes: 4.5% more on a
//! large Rust program. Version 5 kept mangled names uncompressed in the
//! blob: twice the bytes for a C++ program.
//!
//! Narrow or wide, and compact or not, are choices per file, not per
//! range, so that each lookup reads those widths and that record size as
//! constants (see `layout::FileLayout`): [`Ksym::lookup`] and
//! [`Ksym::lookup_many`] each have a copy per layout.
//!
//! A lookup's loads that depend on one another are thus: the page entry,
//! the range record (pages are small, from 64 bytes, so that a page holds
//! one or two ranges), the body's bucket starts and low bytes, the row's
//! line and file and the chain's node a few cache lines further, then per
//! frame its node (in the same body) and, when the caller reads them,
//! that node's function and file records. Version 1
//! ([`v1`]) had a separate array of starts, line rows as varints decoded
//! from a restart mark, and the chain in its own section: two to four
//! more dependent loads, two binary searches and a decoding loop.
//!
//! [`Ksym::open`] takes constant time whatever the file's size (but for
//! small files, whose strings it checks once so that lookups can slice
//! them unchecked): every record, value and string is read with bounds
//! checks by lookups (a damaged one reads as unknown; an inline chain
//! stops at a parent that does not come before its child) and checked in
//! full by [`Ksym::verify`], which the path that stores a file calls.

mod batch;
mod body;
mod chains;
mod earlier;
mod error;
mod fields;
mod file;
mod frame;
mod header;
mod layout;
mod names;
mod packed;
mod pages;
mod ranges;
mod read;
mod rust_legacy;
mod upgrade;
mod write;

pub use earlier::v1;
pub use error::KsymError;
pub use file::KsymFile;
pub use frame::Frame;
pub use layout::VERSION;
pub use read::Ksym;
pub use upgrade::upgrade;
pub use write::encode;

/// The media type (`Content-Type`) of a ksym file sent over HTTP: what the
/// agent uploads in place of a whole executable, and what the backend's
/// symbol upload accepts beside ELF files.
pub const MEDIA_TYPE: &str = "application/vnd.kiln.ksym";
