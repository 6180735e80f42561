//! The function and file records of a ksym file and the strings they
//! point into (the blob, and the compressed mangled names of `packed`):
//! what turns a lookup's indexes into names.
//!
//! A function record is (name, mangled name) and a file record is
//! (directory, file name), each string an (offset, length) pair of `u32`
//! into the blob, `NONE` for none. The top bit of a length is a flag, not
//! part of it: see [`HASH_IN_RECORD`] and [`DERIVED`]; so is the next bit
//! of a function name's length: see [`DEMANGLED`].

use crate::table::NONE;

use std::borrow::Cow;
use std::sync::OnceLock;

use super::fields::u32_at;
use super::packed::{Blocks, Packed};
use super::{KsymError, rust_legacy};

/// Bytes of a function or file record.
const RECORD: usize = 16;
/// Set in the length of a function's name: in place of its
/// mangled name's (offset, length), the record holds the 64-bit hash of
/// a Rust legacy name, which mangling the function's name with it gives
/// back (see [`rust_legacy`]). In a large Rust program most functions
/// are such, and 8 bytes in the record take the place of a 16-character
/// string in the blob and the 8 bytes that pointed at it.
pub(super) const HASH_IN_RECORD: u32 = 1 << 31;
/// Set in the length of a function's mangled name: the string is the hash
/// of a Rust legacy name as text, one that [`HASH_IN_RECORD`] cannot hold
/// (not in lower-case hex, or followed by a `.llvm.` suffix), then what
/// followed it.
pub(super) const DERIVED: u32 = 1 << 31;
/// Set in the length of a function's name: the name is not
/// stored, as demangling the function's mangled name (which is) gives it
/// back, which the writer checked; the name's offset is its slot in a
/// [`Demangled`] cache instead. A demangled C++ name is about three times
/// its mangled form (its templates written out where the mangled one
/// refers back to them), and the two were four fifths of a C++ file.
pub(super) const DEMANGLED: u32 = 1 << 30;
/// The flag bit of a length.
const LEN_FLAG: u32 = 1 << 31;
/// Blobs up to this size are checked as UTF-8 whole at open: about 0.1 ms
/// per MiB; beyond a few MiB, lookups check their own strings instead,
/// keeping open fast.
const CHECK_BLOB_AT_OPEN: usize = 4 << 20;
/// [`Names::new`] checks the records of small files only: about 1 ms per
/// 100k records.
const CHECK_RECORDS_AT_OPEN: usize = 20_000;

#[derive(Debug, Clone, Copy)]
pub(super) struct Names<'a> {
    pub(super) funcs: &'a [u8],
    pub(super) files: &'a [u8],
    pub(super) blob: &'a [u8],
    /// Where mangled names are: compressed, apart from the blob.
    pub(super) packed: Packed<'a>,
    /// Where the blocks of [`packed`](Self::packed) are kept once
    /// decompressed; without it, a block is decompressed each time a
    /// name in it is read.
    pub(super) blocks: Option<&'a Blocks>,
    /// Whether [`check_text`](Self::check_text) found the blob UTF-8 and
    /// every string record within it, starting and ending on character
    /// boundaries: strings are then sliced without being checked again.
    text_checked: bool,
    /// Where names kept only as mangled ones are demangled once (see
    /// [`DEMANGLED`]); without it, they are demangled each time they are
    /// read.
    pub(super) demangled: Option<&'a Demangled>,
}

/// The names of a file's functions that it keeps only as mangled names
/// (see [`DEMANGLED`]), each demangled when first read and kept for the
/// file's other readers: what [`KsymFile`](super::KsymFile) holds beside
/// the file's bytes, so that a name reads in a lookup as any other does.
#[derive(Debug, Default)]
pub(super) struct Demangled {
    slots: Box<[OnceLock<Box<str>>]>,
}

impl Demangled {
    /// Empty slots for the names of `names` kept only as mangled ones: as
    /// many as it has such records (which number their slots from 0).
    pub(super) fn for_names(names: &Names<'_>) -> Demangled {
        let count = (0..names.functions())
            .filter(|&i| u32_at(names.funcs, RECORD * i + 4) & DEMANGLED != 0)
            .count();
        Demangled {
            slots: (0..count).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl<'a> Names<'a> {
    /// The names of the records, checking nothing: a string outside the
    /// blob reads as unknown. A small blob (with few records) is checked
    /// whole, where that costs little, for the fast path of
    /// [`string`](Self::string).
    pub(super) fn new(
        funcs: &'a [u8],
        files: &'a [u8],
        blob: &'a [u8],
        packed: Packed<'a>,
    ) -> Names<'a> {
        let mut names = Names {
            funcs,
            files,
            blob,
            packed,
            blocks: None,
            text_checked: false,
            demangled: None,
        };
        let records = (funcs.len() + files.len()) / RECORD;
        if blob.len() <= CHECK_BLOB_AT_OPEN && records <= CHECK_RECORDS_AT_OPEN {
            names.check_text();
        }
        names
    }

    /// Checks the blob and the string records whole, for the fast path of
    /// [`string`](Self::string): linear in their size (about 0.1 ms per
    /// MiB). Returns whether they passed.
    pub(super) fn check_text(&mut self) -> bool {
        self.text_checked = std::str::from_utf8(self.blob).is_ok_and(|text| {
            self.check_records().is_ok() && self.strings_on_char_boundaries(text)
        });
        self.text_checked
    }

    /// Takes the fast path of [`string`](Self::string) without checking.
    ///
    /// # Safety
    ///
    /// [`check_text`](Self::check_text) passed on names read from the same
    /// bytes, unchanged since.
    pub(super) unsafe fn assume_text_checked(&mut self) {
        self.text_checked = true;
    }

    /// Checks that every string of the records lies within the blob.
    fn check_records(&self) -> Result<(), KsymError> {
        self.each_string_field(|field| self.check_string(&field))
    }

    /// Calls `each` with every place the records hold a string, until it
    /// fails: both halves of each record, but for the hash a function
    /// record may hold instead of its mangled name, and the slot it may
    /// hold instead of its name. Plain loops, which the compiler makes
    /// tight: as a chain of flattened iterators it was 2.7 to 3.9 times
    /// slower, by how much the compiler inlined (`Ksym::open` of glibc's
    /// file, which checks its strings: 20 µs, against 54 to 78 µs).
    fn each_string_field<E>(
        &self,
        mut each: impl FnMut(StringField<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        for index in 0..self.functions() {
            let at = RECORD * index;
            let flags = u32_at(self.funcs, at + 4);
            // A function's mangled name may be none.
            let field = |at: usize, mangled: bool| StringField {
                what: "function",
                index,
                records: self.funcs,
                at,
                none_ok: mangled,
                packed: mangled,
            };
            if flags & DEMANGLED == 0 {
                each(field(at, false))?;
            }
            if flags & HASH_IN_RECORD == 0 {
                each(field(at + 8, true))?;
            }
        }
        for index in 0..self.files() {
            for at in [RECORD * index, RECORD * index + 8] {
                each(StringField {
                    what: "file",
                    index,
                    records: self.files,
                    at,
                    none_ok: false,
                    packed: false,
                })?;
            }
        }
        Ok(())
    }

    /// Number of function records.
    pub(super) fn functions(&self) -> usize {
        self.funcs.len() / RECORD
    }

    /// Number of file records.
    pub(super) fn files(&self) -> usize {
        self.files.len() / RECORD
    }

    /// Checks every string record and every string's UTF-8, which
    /// [`Names::new`] leaves to lookups.
    pub(super) fn verify(&self) -> Result<(), KsymError> {
        self.check_records()?;
        // Each block decompressed once, checked, then read for its names.
        let blocks = Blocks::for_packed(&self.packed);
        self.packed.verify(&blocks)?;
        let names = Names {
            blocks: Some(&blocks),
            ..*self
        };
        names.each_string_field(|field| {
            let read = match field.packed {
                true => names.packed_string(field.records, field.at).is_some(),
                false => names.string(field.records, field.at).is_some(),
            };
            match u32_at(field.records, field.at) != NONE && !read {
                true => Err(KsymError::BadUtf8),
                false => Ok(()),
            }
        })
    }

    /// Asks the CPU to start loading function record `index`, which a
    /// lookup's caller will read next: see [`prefetch`].
    #[inline(always)]
    pub(super) fn prefetch_function(&self, index: u32) {
        prefetch(self.funcs, RECORD * index as usize);
    }

    /// Asks the CPU to start loading file record `index`: see [`prefetch`].
    #[inline(always)]
    pub(super) fn prefetch_file(&self, index: u32) {
        prefetch(self.files, RECORD * index as usize);
    }

    /// The name of function record `index`; `None` for a record that is
    /// not there.
    #[inline(always)]
    pub(super) fn function(&self, index: u32) -> Option<Cow<'a, str>> {
        let record = super::fields::records::<RECORD>(self.funcs).get(index as usize)?;
        if u32_at(record, 4) & DEMANGLED != 0 {
            // Demangled before: in its slot, two loads away.
            let slot = self
                .demangled
                .and_then(|d| d.slots.get(u32_at(record, 0) as usize));
            if let Some(name) = slot.and_then(OnceLock::get) {
                return Some(Cow::Borrowed(name));
            }
            return self.demangled_name(record);
        }
        self.string(record, 0).map(Cow::Borrowed)
    }

    /// The name of a function `record` keeps only as its mangled name:
    /// from its slot of the [`Demangled`] cache, demangled there when
    /// first read, or demangled now without one (or for a slot that is not
    /// there, in a damaged file).
    #[cold]
    #[inline(never)]
    fn demangled_name(&self, record: &[u8; RECORD]) -> Option<Cow<'a, str>> {
        let mangled = self.packed_string(record, 8)?;
        let demangle = || {
            crate::extract::demangle::demangle(&mangled)
                .unwrap_or_else(|| mangled.to_string())
                .into_boxed_str()
        };
        let slot = u32_at(record, 0) as usize;
        match self.demangled.and_then(|d| d.slots.get(slot)) {
            Some(cell) => Some(Cow::Borrowed(cell.get_or_init(demangle))),
            None => Some(Cow::Owned(demangle().into_string())),
        }
    }

    /// The string at byte `at` (0 or 8) of file record `index`.
    #[inline(always)]
    pub(super) fn file(&self, index: u32, at: usize) -> Option<&'a str> {
        let record = super::fields::records::<RECORD>(self.files).get(index as usize)?;
        self.string(record, at)
    }

    /// The function's mangled name: as stored, or made from its name and
    /// hash when only the hash is (a Rust legacy name).
    pub(super) fn mangled(&self, index: u32) -> Option<Cow<'a, str>> {
        let record = super::fields::records::<RECORD>(self.funcs).get(index as usize)?;
        if u32_at(record, 4) & HASH_IN_RECORD != 0 {
            let hash = u64::from(u32_at(record, 8)) | u64::from(u32_at(record, 12)) << 32;
            let name = self.string(record, 0)?;
            return Some(Cow::Owned(rust_legacy::mangle(
                name,
                &format!("{hash:016x}"),
            )));
        }
        let stored = self.packed_string(record, 8)?;
        if u32_at(record, 12) & DERIVED == 0 {
            return Some(stored);
        }
        let name = self.string(record, 0)?;
        Some(Cow::Owned(rust_legacy::mangle_derived(name, &stored)))
    }

    /// The compressed string whose (offset, len) is at `at` in `records`
    /// (the flag bit is not part of the length): a function's mangled name
    /// or hash text; `None` for none.
    fn packed_string(&self, records: &[u8], at: usize) -> Option<Cow<'a, str>> {
        let offset = u32_at(records, at);
        if offset == NONE {
            return None;
        }
        self.packed
            .string(offset, u32_at(records, at + 4) & !LEN_FLAG, self.blocks)
    }

    /// Where the string whose (offset, len) is at `at` in `records` lies
    /// in the blob, as far as the record says (the flag bit is not part of
    /// the length); `None` for none.
    #[inline(always)]
    fn span(records: &[u8], at: usize) -> Option<(usize, usize)> {
        let off = u32_at(records, at);
        if off == NONE {
            return None;
        }
        let len = u32_at(records, at + 4) & !LEN_FLAG;
        Some((off as usize, (off as usize).checked_add(len as usize)?))
    }

    /// The string whose (offset, len) is at `at` in `records`.
    #[inline(always)]
    pub(super) fn string(&self, records: &[u8], at: usize) -> Option<&'a str> {
        let (off, end) = Self::span(records, at)?;
        let bytes = self.blob.get(off..end)?;
        match self.text_checked {
            // SAFETY: `text_checked` is set only when check_text() found
            // (on these bytes, or, by assume_text_checked's contract, on
            // the same bytes before) the whole blob UTF-8 and every
            // string field of `funcs` and `files` (the only records
            // passed here, one record of them, at a string field: never
            // at a hash, which `mangled` reads apart) to start and end on
            // a character boundary, so `bytes` is UTF-8 (a mangled name
            // kept compressed is read by `packed_string`, never here). Slicing unchecked spares each lookup two reads
            // into the blob per string (its boundary bytes): cache misses
            // for strings the caller may never read (a mangled name, a
            // directory).
            true => Some(unsafe { std::str::from_utf8_unchecked(bytes) }),
            false => std::str::from_utf8(bytes).ok(),
        }
    }

    /// Whether every string record (checked to lie within the blob)
    /// starts and ends on a character boundary of `text`: what lets
    /// [`string`](Self::string) slice without checking. Reads one record
    /// after another, so it costs little next to the UTF-8 check.
    fn strings_on_char_boundaries(&self, text: &str) -> bool {
        self.each_string_field(|field| {
            let on_boundaries = field.packed
                || match Self::span(field.records, field.at) {
                    Some((off, end)) => text.is_char_boundary(off) && text.is_char_boundary(end),
                    None => u32_at(field.records, field.at) == NONE,
                };
            on_boundaries.then_some(()).ok_or(())
        })
        .is_ok()
    }

    /// Checks the string of `field` lies within the blob.
    fn check_string(&self, field: &StringField<'_>) -> Result<(), KsymError> {
        if u32_at(field.records, field.at) == NONE && field.none_ok {
            return Ok(());
        }
        let within = Self::span(field.records, field.at).filter(|&(off, end)| match field.packed {
            true => end <= self.packed.text_len(),
            false => self.blob.get(off..end).is_some(),
        });
        match within {
            Some(_) => Ok(()),
            None => Err(KsymError::BadIndex {
                what: field.what,
                index: field.index,
            }),
        }
    }
}

/// A string of the records: at byte `at` of `records`, in record `index`
/// of those of `what`.
struct StringField<'a> {
    what: &'static str,
    index: usize,
    records: &'a [u8],
    at: usize,
    /// Whether it may be none.
    none_ok: bool,
    /// Whether it is compressed (see [`Names::packed`]) rather than in
    /// the blob.
    packed: bool,
}

/// Starts loading the cache line of `bytes[at]` (of the last byte when
/// `at` is past the end, as for an unknown function: a prefetch is cheaper
/// than a branch the CPU would mispredict): a lookup knows which records
/// its caller will read (the function's, the file's) long before the
/// caller reads them, and in a large file each is a cache miss; started
/// early, they overlap with the rest of the lookup instead of following it.
#[inline(always)]
fn prefetch(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(last) = bytes.len().checked_sub(1) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let byte: *const u8 = &bytes[at.min(last)];
        // SAFETY: a prefetch is a hint: it reads nothing into the program
        // and cannot fault; the address is within `bytes` anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(byte.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

#[cfg(test)]
mod tests {
    use crate::table::{Function, Range, SymbolTable};

    /// A hash in a function record is not a string: the whole-text check
    /// (what lets lookups slice names unchecked) passes over it, rather
    /// than failing on it as an (offset, len) pair far outside the blob.
    #[test]
    fn records_holding_hashes_pass_the_text_check() {
        let table = SymbolTable {
            functions: vec![Function {
                name: "app::f".into(),
                mangled: Some("_ZN3app1f17h0123456789abcdefE".into()),
            }],
            files: vec![],
            ranges: vec![Range {
                start: 0x1000,
                end: 0x1010,
                function: 0,
                lines: vec![],
                inlines: vec![],
            }],
        };
        let bytes = super::super::encode(&table);
        let mut k = super::super::Ksym::open(&bytes).unwrap();
        assert!(k.names.check_text());
        k.verify().unwrap();
        let mut frames = Vec::new();
        k.lookup(0x1000, &mut frames);
        let mangled = frames[0].mangled();
        assert_eq!(mangled.as_deref(), Some("_ZN3app1f17h0123456789abcdefE"));
    }
}
