//! The messages of pprof's `profile.proto` (package `perftools.profiles`,
//! <https://github.com/google/pprof/blob/main/proto/profile.proto>),
//! written out with prost's derive so that the build needs no `protoc`.
//!
//! Field numbers are the format: keep them as upstream has them. Fields
//! this crate does not read are declared anyway, so that a profile decoded
//! and encoded again (in tests) keeps them. Strings are indices into
//! [`Profile::string_table`]; ids are nonzero.

/// A whole profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each of a sample's values measures, e.g. `[samples/count,
    /// cpu/nanoseconds]`.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Binaries and libraries the locations belong to.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program locations the samples' stacks refer to.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the locations' lines refer to.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; entry 0 is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regexp of frames to drop, with their callees (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regexp of frames to keep even if `drop_frames` matches (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When collection started, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long collection took, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period counts, e.g. `cpu/nanoseconds`.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between two samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The preferred sample type (string index).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// The type and unit of a value.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ValueType {
    /// E.g. `cpu`, `samples`, `alloc_space` (string index).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `nanoseconds`, `count`, `bytes` (string index).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// Values measured at one stack.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The stack: location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per [`Profile::sample_type`].
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels: thread ids, request kinds, allocation sizes…
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A sample label: a key with a string or a number.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Label {
    /// String index.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of a string value, 0 for none.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// Unit of `num` (string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A binary or library mapped into the process.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Mapping {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Load address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// End of the mapped range.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Path or pseudo-name such as `[vdso]` (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether the profile has function names for this mapping.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Whether it has file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Whether it has line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Whether it has inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A program location: an address and the source lines it stands for.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Location {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The instruction address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost first: the last line is the function the earlier ones
    /// were inlined into.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether several symbols share the address (identical code folding).
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function and a source line.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// The source column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Function {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Human-readable name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Name as the system knows it, e.g. mangled (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Line where the function starts.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
