//! A ksym file held in memory for many lookups, as the symbolizer's
//! loader keeps it.

use super::names::Demangled;
use super::packed::Blocks;
use super::{Ksym, KsymError};

/// Ksym bytes whose strings were checked whole once, when they were
/// loaded, so that every [`Ksym`] read from them slices its strings
/// without checking them (for a file too large for [`Ksym::open`] to
/// check them: on Kiln's own release build, a fifth of a lookup's time
/// was checking the UTF-8 of the names it read).
#[derive(Debug)]
pub struct KsymFile {
    /// A `Vec` as it came (a boxed slice would copy one read with spare
    /// capacity to shed it).
    bytes: Vec<u8>,
    text_checked: bool,
    /// The names the file keeps only as mangled ones, demangled once.
    demangled: Demangled,
    /// The blocks of mangled names, decompressed once.
    blocks: Blocks,
}

impl KsymFile {
    /// Takes ksym bytes of the current layout (upgrade earlier ones
    /// first), checking their header as [`Ksym::open`] does and their
    /// strings whole: linear in the strings' size (about 0.1 ms per MiB).
    /// Strings that fail the check are checked as each lookup reads them.
    pub fn new(bytes: Vec<u8>) -> Result<KsymFile, KsymError> {
        let mut ksym = Ksym::open(&bytes)?;
        let text_checked = ksym.names.check_text();
        let demangled = Demangled::for_names(&ksym.names);
        let blocks = Blocks::for_packed(&ksym.names.packed);
        Ok(KsymFile {
            bytes,
            text_checked,
            demangled,
            blocks,
        })
    }

    /// The file, for lookups.
    pub fn ksym(&self) -> Ksym<'_> {
        let mut ksym = Ksym::open(&self.bytes).expect("the bytes opened in KsymFile::new");
        if self.text_checked {
            // SAFETY: new() checked the text of these bytes, which have
            // not changed since (nothing here hands out `&mut` to them).
            unsafe { ksym.names.assume_text_checked() };
        }
        ksym.names.demangled = Some(&self.demangled);
        ksym.names.blocks = Some(&self.blocks);
        ksym
    }

    /// The ksym bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes this file holds, and may come to hold as lookups read
    /// it: its own, and the text of its mangled names once decompressed
    /// (at most the `mangled` section's text; a C++ file's is about six
    /// times the section). The names demangled from them are not counted:
    /// how long they are is known only once they are made.
    pub fn memory(&self) -> usize {
        let text = Ksym::open(&self.bytes).map_or(0, |k| k.names.packed.text_len());
        self.bytes.len().saturating_add(text)
    }
}
