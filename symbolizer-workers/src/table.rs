//! The symbol table one ELF yields: what extraction produces and what the
//! ksym encoder writes. It is plain owned data, sorted and indexed, so that
//! both sides stay simple and the encoding is deterministic.

/// Index value meaning "none" in the `u32` index fields below.
pub const NONE: u32 = u32::MAX;

/// Everything known about the code of one ELF file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolTable {
    /// Function names, referenced by index.
    pub functions: Vec<Function>,
    /// Source files, referenced by index.
    pub files: Vec<SourceFile>,
    /// Top-level address ranges: sorted by `start`, not overlapping.
    pub ranges: Vec<Range>,
}

/// A function's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Function {
    /// Demangled name (Rust names without their hash), or the name as
    /// written when it is not mangled.
    pub name: String,
    /// The mangled (linkage) name, when it differs from `name`.
    pub mangled: Option<String>,
}

/// A source file, with the directory kept apart from the file name so
/// that the many files of one directory share its string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceFile {
    /// Directory, as DWARF gives it (made absolute with the compilation
    /// directory when DWARF gives it relative); may be empty.
    pub dir: String,
    /// The file name (the last path component).
    pub name: String,
}

impl SourceFile {
    /// Splits a full path at its last `/`.
    pub fn from_path(path: &str) -> SourceFile {
        match path.rfind('/') {
            Some(0) => SourceFile {
                dir: "/".into(),
                name: path[1..].into(),
            },
            Some(i) => SourceFile {
                dir: path[..i].into(),
                name: path[i + 1..].into(),
            },
            None => SourceFile {
                dir: String::new(),
                name: path.into(),
            },
        }
    }

    /// The full path: `dir/name`, or `name` when there is no directory.
    pub fn path(&self) -> String {
        join_path(&self.dir, &self.name)
    }
}

/// Joins a directory and a file name the way [`SourceFile::path`] does.
pub fn join_path(dir: &str, name: &str) -> String {
    // Built with one allocation of the final size rather than through
    // `format!`: a symbolizer worker joins one path per frame it answers.
    let slash = !dir.is_empty() && !dir.ends_with('/');
    let mut path = String::with_capacity(dir.len() + usize::from(slash) + name.len());
    path.push_str(dir);
    if slash {
        path.push('/');
    }
    path.push_str(name);
    path
}

/// One top-level range of code: `[start, end)` belongs to one function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Range {
    /// First address (file-relative virtual address).
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Index into [`SymbolTable::functions`].
    pub function: u32,
    /// Line rows sorted by address, all within `[start, end)`; a row holds
    /// until the next one. Addresses before the first row have no line.
    pub lines: Vec<LineRow>,
    /// Inlined calls within this range, in any order.
    pub inlines: Vec<Inline>,
}

/// From `addr` on, code comes from `file:line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRow {
    /// Address where the row starts.
    pub addr: u64,
    /// Index into [`SymbolTable::files`], or [`NONE`].
    pub file: u32,
    /// Line number; 0 when unknown.
    pub line: u32,
}

/// Code of `function` inlined at `call_file:call_line` of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inline {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Nesting depth: 1 for a call inlined into the range's function, 2 for
    /// one inlined into that, and so on.
    pub depth: u32,
    /// The inlined function: index into [`SymbolTable::functions`].
    pub function: u32,
    /// The caller's file: index into [`SymbolTable::files`], or [`NONE`].
    pub call_file: u32,
    /// The caller's line; 0 when unknown.
    pub call_line: u32,
}
