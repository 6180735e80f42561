//! What a lookup answers: one level of an inline chain.

use crate::table::join_path;

/// One level of an inline chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Frame<'a> {
    /// Function name (demangled); `None` when unknown.
    pub function: Option<&'a str>,
    /// The mangled name, when the function has one.
    pub mangled: Option<&'a str>,
    /// The source file's directory (may be empty).
    pub dir: Option<&'a str>,
    /// The source file's name.
    pub file: Option<&'a str>,
    /// Line number; 0 when unknown.
    pub line: u32,
}

impl Frame<'_> {
    /// The full path of the source file, `dir/file`.
    pub fn path(&self) -> Option<String> {
        self.file.map(|f| join_path(self.dir.unwrap_or(""), f))
    }
}
