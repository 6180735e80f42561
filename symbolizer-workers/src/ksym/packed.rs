//! Strings kept compressed: the mangled names of a ksym file, sorted, so
//! that neighbours share most of their bytes, and zstd-compressed in
//! blocks of about [`BLOCK_TEXT`] bytes.
//!
//! A lookup's caller rarely reads a mangled name, but a C++ file's names
//! are made from them (see `names::DEMANGLED`): they were more than half
//! of such a file, and a sixth of that compressed. A name is read by
//! decompressing its block, which a [`KsymFile`](super::KsymFile) does
//! once per block (see [`Blocks`]), and a plain [`Ksym`](super::Ksym) each
//! time.
//!
//! ```text
//! blocks   u32
//! table    per block: text_end u32 | data_end u32: where its text ends in
//!          the text of all blocks one after another, and where its
//!          compressed bytes end in `data`
//! data     a zstd frame per block
//! ```
//!
//! A string is an (offset, len) pair into the text of all blocks, and
//! lies within one block.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use super::KsymError;
use super::fields::u32_at;

/// Text per block, about: a block is closed at the first string that
/// ends past it. Reading one name decompresses its block (about 10 µs
/// for this size); larger blocks compress a little better (a C++
/// program's mangled names: 6.6 times smaller in blocks of 16 KiB, 7.8
/// in blocks of 64 KiB).
pub(super) const BLOCK_TEXT: usize = 16 << 10;
/// The most text a block may hold, which is what a reader allocates at
/// most to decompress one: a file that says more is damaged, and reads
/// as no name. The writer keeps no mangled name longer than
/// [`MAX_STRING`], so its blocks stay below this.
const MAX_BLOCK_TEXT: usize = 2 << 20;
/// The longest mangled name kept (none seen comes near).
pub(super) const MAX_STRING: usize = 1 << 20;
/// zstd level: level 19 made libstdc++'s file 0.3% smaller and took
/// 4 times as long to write it (190 ms against 47).
const LEVEL: i32 = 9;

/// The section, read in place.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Packed<'a> {
    table: &'a [u8],
    data: &'a [u8],
    /// Bytes of the section, for size reports.
    pub(super) len: usize,
}

impl<'a> Packed<'a> {
    /// Reads the section's block count and checks its table lies within
    /// it (constant time: blocks are checked as they are read, or by
    /// [`verify`](Self::verify)). An empty section has no blocks.
    pub(super) fn open(section: &'a [u8]) -> Result<Packed<'a>, KsymError> {
        if section.is_empty() {
            return Ok(Packed::default());
        }
        let bad = KsymError::SectionOutOfBounds { section: "mangled" };
        let blocks = section.get(..4).map(|_| u32_at(section, 0) as usize);
        let table_end = blocks
            .and_then(|b| b.checked_mul(8))
            .and_then(|t| t.checked_add(4))
            .ok_or(bad.clone())?;
        Ok(Packed {
            table: section.get(4..table_end).ok_or(bad)?,
            data: &section[table_end..],
            len: section.len(),
        })
    }

    fn blocks(&self) -> usize {
        self.table.len() / 8
    }

    /// Bytes of text in all blocks.
    pub(super) fn text_len(&self) -> usize {
        match self.blocks() {
            0 => 0,
            n => u32_at(self.table, 8 * (n - 1)) as usize,
        }
    }

    /// Where block `i`'s text lies in the text, and its compressed bytes;
    /// `None` when its bounds are out of order or out of the section.
    fn block(&self, i: usize) -> Option<(Range<usize>, &'a [u8])> {
        let end = |i: usize, at: usize| u32_at(self.table, 8 * i + at) as usize;
        let (text_start, data_start) = match i {
            0 => (0, 0),
            _ => (end(i - 1, 0), end(i - 1, 4)),
        };
        let (text_end, data_end) = (end(i, 0), end(i, 4));
        if text_end < text_start || text_end - text_start > MAX_BLOCK_TEXT {
            return None;
        }
        Some((text_start..text_end, self.data.get(data_start..data_end)?))
    }

    /// The block whose text holds offset `at`: the first that ends after
    /// it (the last when none does; a damaged table only misleads the
    /// search, which ends all the same).
    fn block_at(&self, at: usize) -> usize {
        let (mut lo, mut hi) = (0, self.blocks().saturating_sub(1));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match (u32_at(self.table, 8 * mid) as usize) <= at {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        lo
    }

    /// Block `i`'s text; `None` when it does not decompress to as many
    /// bytes as the table says.
    fn decompress(&self, i: usize) -> Option<Box<[u8]>> {
        let (text, data) = self.block(i)?;
        let out = zstd::bulk::decompress(data, text.len()).ok()?;
        (out.len() == text.len()).then(|| out.into_boxed_slice())
    }

    /// The string at `offset` of `len` bytes: borrowed from `cache`'s copy
    /// of its block, else decompressed now. `None` when it does not lie
    /// within one block or is not UTF-8.
    pub(super) fn string(
        &self,
        offset: u32,
        len: u32,
        cache: Option<&'a Blocks>,
    ) -> Option<Cow<'a, str>> {
        let start = offset as usize;
        let end = start.checked_add(len as usize)?;
        let i = self.block_at(start);
        let (text, _) = self.block(i)?;
        let within = start.checked_sub(text.start)?..end.checked_sub(text.start)?;
        match cache.and_then(|c| c.slots.get(i)) {
            Some(slot) => {
                let block = slot.get_or_init(|| self.decompress(i)).as_deref()?;
                std::str::from_utf8(block.get(within)?)
                    .ok()
                    .map(Cow::Borrowed)
            }
            None => {
                let block = self.decompress(i)?;
                let s = std::str::from_utf8(block.get(within)?).ok()?;
                Some(Cow::Owned(s.to_owned()))
            }
        }
    }

    /// Checks every block decompresses to the text its table says,
    /// keeping each in `cache` for the names read next.
    pub(super) fn verify(&self, cache: &Blocks) -> Result<(), KsymError> {
        let decompressed = |i: usize| match cache.slots.get(i) {
            Some(slot) => slot.get_or_init(|| self.decompress(i)).is_some(),
            None => self.decompress(i).is_some(),
        };
        match (0..self.blocks()).all(decompressed) {
            true => Ok(()),
            false => Err(KsymError::SectionOutOfBounds { section: "mangled" }),
        }
    }
}

/// A file's blocks, each decompressed when first read and kept: what a
/// [`KsymFile`](super::KsymFile) holds beside the file's bytes, so that a
/// name of its block reads as a borrowed string from then on.
#[derive(Debug, Default)]
pub(super) struct Blocks {
    slots: Box<[OnceLock<BlockText>]>,
}

/// A block's text; `None` for a block that did not decompress.
type BlockText = Option<Box<[u8]>>;

impl Blocks {
    /// Empty slots, one per block of `packed`.
    pub(super) fn for_packed(packed: &Packed<'_>) -> Blocks {
        Blocks {
            slots: (0..packed.blocks()).map(|_| OnceLock::new()).collect(),
        }
    }
}

/// The section holding `text`, cut into blocks at string `starts`
/// (ascending offsets into `text` where its strings begin: no string
/// spans two blocks). The same text always gives the same bytes (with
/// the same zstd).
pub(super) fn pack(text: &[u8], starts: impl IntoIterator<Item = usize>) -> Vec<u8> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut cuts = Vec::new();
    let mut block_start = 0;
    for start in starts {
        if start - block_start >= BLOCK_TEXT {
            cuts.push(start);
            block_start = start;
        }
    }
    cuts.push(text.len());
    // The writer keeps less than 4 GiB of text (`to_u32` in `write`).
    let to_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let mut table = Vec::with_capacity(4 + 8 * cuts.len());
    table.extend(to_u32(cuts.len()).to_le_bytes());
    let mut data = Vec::new();
    let mut block_start = 0;
    for &end in &cuts {
        let frame = zstd::bulk::compress(&text[block_start..end], LEVEL)
            .expect("zstd compresses any bytes into memory");
        data.extend_from_slice(&frame);
        table.extend(to_u32(end).to_le_bytes());
        table.extend(to_u32(data.len()).to_le_bytes());
        block_start = end;
    }
    table.extend_from_slice(&data);
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings written in many blocks read back, from a cache or not; one
    /// outside the text, or across two blocks, reads as none.
    #[test]
    fn strings_read_back_from_their_blocks() {
        let strings: Vec<String> = (0..3000).map(|i| format!("_ZN3app{i}fooEv{i:x}")).collect();
        let mut text = Vec::new();
        let mut starts = Vec::new();
        for s in &strings {
            starts.push(text.len());
            text.extend_from_slice(s.as_bytes());
        }
        let section = pack(&text, starts.iter().copied());
        let packed = Packed::open(&section).unwrap();
        assert!(packed.blocks() > 3, "{} blocks", packed.blocks());
        assert!(
            section.len() * 4 < text.len(),
            "{} of {}",
            section.len(),
            text.len()
        );
        assert_eq!(packed.text_len(), text.len());
        let cache = Blocks::for_packed(&packed);
        packed.verify(&cache).unwrap();
        for (s, &at) in strings.iter().zip(&starts) {
            let (at, len) = (at as u32, s.len() as u32);
            assert_eq!(packed.string(at, len, None).as_deref(), Some(s.as_str()));
            let cached = packed.string(at, len, Some(&cache));
            assert!(matches!(cached, Some(Cow::Borrowed(c)) if c == s));
        }
        let second = packed.block(1).unwrap().0.start as u32;
        assert_eq!(packed.string(second - 2, 4, None), None);
        assert_eq!(packed.string(text.len() as u32, 1, None), None);
    }

    /// A damaged table or block reads as no string, and fails `verify`.
    #[test]
    fn damaged_blocks_read_as_nothing() {
        let text = b"_Z1fv_Z1gv";
        let mut section = pack(text, [0, 5]);
        assert_eq!(
            Packed::open(&section)
                .unwrap()
                .string(5, 5, None)
                .as_deref(),
            Some("_Z1gv")
        );
        // The block claims more text than it holds.
        section[4..8].copy_from_slice(&11u32.to_le_bytes());
        let packed = Packed::open(&section).unwrap();
        assert_eq!(packed.string(5, 5, None), None);
        assert!(packed.verify(&Blocks::for_packed(&packed)).is_err());
        // A block count the section cannot hold.
        section[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Packed::open(&section).is_err());
        assert!(Packed::open(&section[..2]).is_err());
    }
}
