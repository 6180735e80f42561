//! What a lookup answers: one level of an inline chain.

use std::borrow::Cow;
use std::fmt;

use super::names::Names;
use crate::table::join_path;

/// One level of an inline chain: a function, a source file and a line,
/// held as indexes into the ksym file's records, whose strings are read
/// when asked for. A lookup writes 24 bytes per level and reads only the
/// names its caller reads (a mangled name or a directory rarely is).
#[derive(Clone, Copy)]
pub struct Frame<'a> {
    names: &'a Names<'a>,
    function: u32,
    file: u32,
    /// Line number; 0 when unknown.
    pub line: u32,
}

impl<'a> Frame<'a> {
    /// The frame of `function` and `file` (record indexes; `NONE` or out
    /// of range for unknown) at `line`.
    #[inline(always)]
    pub(super) fn new(names: &'a Names<'a>, function: u32, file: u32, line: u32) -> Self {
        Frame {
            names,
            function,
            file,
            line,
        }
    }

    /// Function name (demangled); `None` when unknown. Borrowed from the
    /// file, but for a name it keeps only as a mangled one (C++, mostly),
    /// which is demangled when read: once per file through a
    /// [`KsymFile`](super::KsymFile), which keeps it, else each time.
    pub fn function(&self) -> Option<Cow<'a, str>> {
        self.names.function(self.function)
    }

    /// The mangled name, when the function has one. Owned when it is made
    /// again from the name and its hash (a Rust legacy name, which ksym
    /// keeps so).
    pub fn mangled(&self) -> Option<Cow<'a, str>> {
        self.names.mangled(self.function)
    }

    /// The source file's directory (may be empty).
    pub fn dir(&self) -> Option<&'a str> {
        self.names.file(self.file, 0)
    }

    /// The source file's name.
    pub fn file(&self) -> Option<&'a str> {
        self.names.file(self.file, 8)
    }

    /// The full path of the source file, `dir/file`.
    pub fn path(&self) -> Option<String> {
        self.file().map(|f| join_path(self.dir().unwrap_or(""), f))
    }
}

/// Frames are equal when they read the same: from different files too.
impl PartialEq for Frame<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.line == other.line
            && self.function() == other.function()
            && self.mangled() == other.mangled()
            && self.dir() == other.dir()
            && self.file() == other.file()
    }
}

impl Eq for Frame<'_> {}

impl fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("function", &self.function())
            .field("mangled", &self.mangled())
            .field("dir", &self.dir())
            .field("file", &self.file())
            .field("line", &self.line)
            .finish()
    }
}
