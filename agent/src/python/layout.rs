//! CPython's x86-64 memory layouts, for the Python unwinder.
//!
//! The eBPF side walks an interpreter's thread states and frames in the
//! profiled process's memory, and user space reads the code objects and
//! strings those frames point at. Both need byte offsets into CPython's
//! internal structs, which move with every minor version. This module has
//! them for CPython 3.10 to 3.14 as built by default on x86-64 (LP64, GIL,
//! no `Py_DEBUG`), and parses `_Py_DebugOffsets`: the table at the start of
//! `_PyRuntime` in which CPython 3.13+ describes its own layout for
//! out-of-process tools. That table describes the very build being profiled,
//! so it is preferred; the built-in 3.13 and 3.14 layouts are the fallback
//! when it is missing or unreadable.
//!
//! Where the numbers come from:
//! - 3.10 to 3.13: printed by `tests/data/python/layout_offsets.c`
//!   (`offsetof`/`sizeof` on the real headers, internal ones included)
//!   against pyenv's 3.10.13, 3.11.7, 3.12.1 and 3.13.0; the tests check the
//!   tables against it wherever those headers are installed. 3.13.18's
//!   headers give the same numbers as 3.13.0's.
//! - 3.14: worked out by hand from the 3.14 struct definitions
//!   (`Include/cpython/pystate.h`, `Include/cpython/code.h`,
//!   `Include/internal/pycore_interpframe_structs.h`,
//!   `Include/internal/pycore_stackref.h`,
//!   `Include/internal/pycore_debug_offsets.h`,
//!   `Include/cpython/unicodeobject.h`), then checked against the same C
//!   program compiled with Debian's 3.14.10 headers (libpython3.14-dev) and
//!   against the `_Py_DebugOffsets` in Debian's `libpython3.14.so.1.0`. The
//!   two offsets of huge structs (`interpreters.head` in `_PyRuntimeState`,
//!   `threads.head` in `PyInterpreterState`) are taken from those rather than
//!   summed by hand.
//!
//! Free-threaded (`Py_GIL_DISABLED`) builds have another object header,
//! another string state word and per-thread bytecode: none of that is
//! described here, and [`layout_from_debug_offsets`] refuses them.

use std::fmt;

/// A CPython minor version, e.g. 3.12.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyVersion {
    /// 3.
    pub major: u8,
    /// The minor version: 12 for 3.12.
    pub minor: u8,
}

impl PyVersion {
    /// The version `major.minor`.
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for PyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Where an unwinder finds what it needs in one CPython version's memory:
/// byte offsets on x86-64 (pointers and `Py_ssize_t` are 8 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The interpreter version these offsets are for.
    pub version: PyVersion,

    // _PyRuntimeState (the `_PyRuntime` symbol).
    /// `interpreters.head` in `_PyRuntimeState`: the first
    /// `PyInterpreterState*` (the main interpreter is the last one).
    pub runtime_interpreters_head: u32,

    // PyInterpreterState.
    /// The interpreter's first `PyThreadState*`: `tstate_head` in 3.10,
    /// `threads.head` from 3.11.
    pub interp_threads_head: u32,

    // PyThreadState.
    /// `next` in `PyThreadState`: the next thread of the interpreter.
    pub tstate_next: u32,
    /// `thread_id` (`unsigned long`): the thread's `pthread_self()`, which on
    /// x86-64 glibc is the thread's `fs` base.
    pub tstate_thread_id: u32,
    /// `native_thread_id` (`unsigned long`): the thread's kernel TID, from
    /// 3.11; `None` in 3.10, which does not record it. (Added to the
    /// requested fields: it lets eBPF match a thread state to the sampled
    /// task without reading its `fs` base.)
    pub tstate_native_thread_id: Option<u32>,
    /// The thread's current frame: `frame` (`PyFrameObject*`) in 3.10,
    /// `cframe` (`_PyCFrame*`, see [`Layout::cframe_current_frame`]) in 3.11
    /// and 3.12, `current_frame` (`_PyInterpreterFrame*`) from 3.13.
    pub tstate_frame: u32,
    /// 3.11 and 3.12: `current_frame` in `_PyCFrame`, read through the
    /// pointer at [`Layout::tstate_frame`]; `None` in other versions, where
    /// `tstate_frame` points at the frame itself.
    pub cframe_current_frame: Option<u32>,

    // The frame: PyFrameObject in 3.10, _PyInterpreterFrame from 3.11.
    /// The calling frame: `f_back` in 3.10, `previous` from 3.11.
    pub frame_previous: u32,
    /// The frame's code object: `f_code` up to 3.12, `f_executable` from
    /// 3.13 (a `_PyStackRef` in 3.14: apply [`Layout::code_tag_mask`]). From
    /// 3.13 it need not be a code object (the entry frame's is `None`): check
    /// the owner first, and the object's type where that matters.
    pub frame_code: u32,
    /// Where the frame is in its bytecode: in 3.10 `f_lasti` (an `int`, the
    /// index of the last instruction in 2-byte code units); in 3.11 and 3.12
    /// `prev_instr` and from 3.13 `instr_ptr`, pointers into the code
    /// object's inline bytecode (see [`Layout::code_bytecode`]).
    pub frame_instr: u32,
    /// 3.11 only: `is_entry` (`bool`), set on the first frame of each
    /// `_PyEval_EvalFrameDefault` call, i.e. where the interpreter was
    /// entered from C.
    pub frame_is_entry: Option<u32>,
    /// From 3.12: `owner` (`char`, an `enum _frameowner` value). 3.11 has an
    /// owner byte too, but marks C entry with `is_entry` instead, so it is
    /// left out there.
    pub frame_owner: Option<u32>,
    /// The owner value of the frame `_PyEval_EvalFrameDefault` pushes when C
    /// code enters the interpreter (the C-stack boundary): no Python code
    /// runs in such a frame. `FRAME_OWNED_BY_CSTACK` (3) in 3.12 and 3.13;
    /// `FRAME_OWNED_BY_INTERPRETER` (3) in 3.14, where
    /// `FRAME_OWNED_BY_CSTACK` moved to 4 and is assigned nowhere. In every
    /// version an owner at or above this value is no Python frame. 0 where
    /// there is no owner field ([`Layout::frame_owner`] is `None`).
    pub owner_cstack: u8,
    /// Mask to apply to the word at [`Layout::frame_code`] to get the
    /// `PyObject*`: `!0` where it is a plain pointer; in 3.14 it is a tagged
    /// `_PyStackRef` (`Py_TAG_BITS` = 3 in the GIL build: bit 0 marks a
    /// borrowed or immortal reference, both bits a tagged int).
    pub code_tag_mask: u64,

    // PyCodeObject.
    /// `co_filename` (`str*`).
    pub code_filename: u32,
    /// `co_name` (`str*`).
    pub code_name: u32,
    /// `co_qualname` (`str*`), from 3.11; `None` in 3.10.
    pub code_qualname: Option<u32>,
    /// `co_firstlineno` (`int`).
    pub code_firstlineno: u32,
    /// `co_linetable` (`bytes*`): the 3.10 line table in 3.10, the location
    /// table from 3.11.
    pub code_linetable: u32,
    /// From 3.11: `co_code_adaptive`, where the code object's bytecode starts
    /// inline (the base of [`Layout::frame_instr`]'s pointers). In 3.10:
    /// `co_code`, a pointer to a `bytes` object.
    pub code_bytecode: u32,

    // str (PyASCIIObject, PyCompactUnicodeObject) and bytes.
    /// The 32-bit `state` bitfield word in `PyASCIIObject`.
    pub unicode_state: u32,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters
    /// start.
    pub unicode_ascii_data: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' data
    /// starts (1, 2 or 4 bytes a character, as `kind` says).
    pub unicode_compact_data: u32,
    /// `length` in `PyASCIIObject`: the string's length in code points.
    pub unicode_length: u32,
    /// `ob_size` in `PyBytesObject`: the length in bytes.
    pub bytes_size: u32,
    /// `ob_sval` in `PyBytesObject`: where the bytes start.
    pub bytes_data: u32,
    /// Lowest bit of the 3-bit `kind` field in the state word (the
    /// character size in bytes: 1, 2 or 4).
    pub unicode_kind_shift: u32,
    /// Bit of `compact` in the state word.
    pub unicode_compact_bit: u32,
    /// Bit of `ascii` in the state word.
    pub unicode_ascii_bit: u32,
    // What the main interpreter runs (its config's run_filename, argv) is
    // left out: it sits deep in PyInterpreterState.config, whose layout moves
    // with every config option added, even between patch releases, and
    // _Py_DebugOffsets does not carry it.
}

/// Plain pointers: no tag bits to clear.
const UNTAGGED: u64 = !0;

/// The string state bits, the same in 3.10 to 3.14 (GIL build): `interned:2`,
/// `kind:3`, `compact:1`, `ascii:1` from bit 0 of the state word.
const UNICODE_KIND_SHIFT: u32 = 2;
const UNICODE_COMPACT_BIT: u32 = 5;
const UNICODE_ASCII_BIT: u32 = 6;

/// CPython 3.10 (from 3.10.13's headers).
const PY_3_10: Layout = Layout {
    version: PyVersion::new(3, 10),
    runtime_interpreters_head: 32,
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_thread_id: 176,
    tstate_native_thread_id: None,
    tstate_frame: 24,
    cframe_current_frame: None,
    frame_previous: 24,
    frame_code: 32,
    frame_instr: 96,
    frame_is_entry: None,
    frame_owner: None,
    owner_cstack: 0,
    code_tag_mask: UNTAGGED,
    code_filename: 104,
    code_name: 112,
    code_qualname: None,
    code_firstlineno: 40,
    code_linetable: 120,
    code_bytecode: 48,
    unicode_state: 32,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
    unicode_length: 16,
    bytes_size: 16,
    bytes_data: 32,
    unicode_kind_shift: UNICODE_KIND_SHIFT,
    unicode_compact_bit: UNICODE_COMPACT_BIT,
    unicode_ascii_bit: UNICODE_ASCII_BIT,
};

/// CPython 3.11 (from 3.11.7's headers).
const PY_3_11: Layout = Layout {
    version: PyVersion::new(3, 11),
    runtime_interpreters_head: 40,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_native_thread_id: Some(160),
    tstate_frame: 56,
    cframe_current_frame: Some(8),
    frame_previous: 48,
    frame_code: 32,
    frame_instr: 56,
    frame_is_entry: Some(68),
    frame_owner: None,
    owner_cstack: 0,
    code_tag_mask: UNTAGGED,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_firstlineno: 72,
    code_linetable: 136,
    code_bytecode: 184,
    unicode_state: 32,
    unicode_ascii_data: 48,
    unicode_compact_data: 72,
    unicode_length: 16,
    bytes_size: 16,
    bytes_data: 32,
    unicode_kind_shift: UNICODE_KIND_SHIFT,
    unicode_compact_bit: UNICODE_COMPACT_BIT,
    unicode_ascii_bit: UNICODE_ASCII_BIT,
};

/// CPython 3.12 (from 3.12.1's headers).
const PY_3_12: Layout = Layout {
    version: PyVersion::new(3, 12),
    runtime_interpreters_head: 40,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_thread_id: 136,
    tstate_native_thread_id: Some(144),
    tstate_frame: 56,
    cframe_current_frame: Some(0),
    frame_previous: 8,
    frame_code: 0,
    frame_instr: 56,
    frame_is_entry: None,
    frame_owner: Some(70),
    owner_cstack: 3,
    code_tag_mask: UNTAGGED,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_firstlineno: 68,
    code_linetable: 136,
    code_bytecode: 192,
    unicode_state: 32,
    unicode_ascii_data: 40,
    unicode_compact_data: 56,
    unicode_length: 16,
    bytes_size: 16,
    bytes_data: 32,
    unicode_kind_shift: UNICODE_KIND_SHIFT,
    unicode_compact_bit: UNICODE_COMPACT_BIT,
    unicode_ascii_bit: UNICODE_ASCII_BIT,
};

/// CPython 3.13 (from 3.13.0's headers; 3.13.18's agree).
const PY_3_13: Layout = Layout {
    version: PyVersion::new(3, 13),
    runtime_interpreters_head: 632,
    interp_threads_head: 7344,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_native_thread_id: Some(160),
    tstate_frame: 72,
    cframe_current_frame: None,
    frame_previous: 8,
    frame_code: 0,
    frame_instr: 56,
    frame_is_entry: None,
    frame_owner: Some(70),
    owner_cstack: 3,
    code_tag_mask: UNTAGGED,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_firstlineno: 68,
    code_linetable: 136,
    code_bytecode: 200,
    unicode_state: 32,
    unicode_ascii_data: 40,
    unicode_compact_data: 56,
    unicode_length: 16,
    bytes_size: 16,
    bytes_data: 32,
    unicode_kind_shift: UNICODE_KIND_SHIFT,
    unicode_compact_bit: UNICODE_COMPACT_BIT,
    unicode_ascii_bit: UNICODE_ASCII_BIT,
};

/// CPython 3.14, GIL build, worked out from the 3.14 headers (see the
/// module docs for the cross-checks):
/// - `PyThreadState`: prev 0, next 8, interp 16, eval_breaker 24, _status
///   32 (4-byte bitfield), holds_gil 36, _whence 40, state 44,
///   py_recursion_remaining 48, py_recursion_limit 52, recursion_headroom
///   56, tracing 60, what_event 64, current_frame 72, c_profilefunc 80,
///   c_tracefunc 88, c_profileobj 96, c_traceobj 104, current_exception 112,
///   exc_info 120, dict 128, gilstate_counter 136, async_exc 144, thread_id
///   152, native_thread_id 160.
/// - `_PyInterpreterFrame`: f_executable 0 (`_PyStackRef`), previous 8,
///   f_funcobj 16, f_globals 24, f_builtins 32, f_locals 40, frame_obj 48,
///   instr_ptr 56, stackpointer 64 (no `tlbc_index` without
///   `Py_GIL_DISABLED`), return_offset 72 (`uint16_t`), owner 74, visited 75.
///   The entry frame's owner is `FRAME_OWNED_BY_INTERPRETER` = 3
///   (`enum _frameowner`: THREAD 0, GENERATOR 1, FRAME_OBJECT 2,
///   INTERPRETER 3, CSTACK 4); Debian's 3.14.10 stores return_offset 0,
///   owner 3, visited 0 as one `movl $0x30000` into its entry frame.
/// - `PyCodeObject` (`_PyCode_DEF`): ob_refcnt 0, ob_type 8, ob_size 16,
///   co_consts 24, co_names 32, co_exceptiontable 40, co_flags 48, then the
///   `int`s co_argcount 52 … co_firstlineno 68 … co_version 92,
///   co_localsplusnames 96, co_localspluskinds 104, co_filename 112, co_name
///   120, co_qualname 128, co_linetable 136, co_weakreflist 144,
///   co_executors 152, _co_cached 160, _co_instrumentation_version 168,
///   _co_monitoring 176, _co_unique_id 184, _co_firsttraceable 192 (`int`,
///   padded), co_extra 200, co_code_adaptive 208 (no `co_tlbc` without
///   `Py_GIL_DISABLED`).
/// - `PyASCIIObject` is unchanged from 3.12 in the GIL build (the
///   free-threaded build makes `interned` a whole byte, moving the bits).
/// - `_PyStackRef` tags (`pycore_stackref.h`, GIL build): `Py_TAG_BITS` 3,
///   `Py_TAG_REFCNT` 1, `Py_INT_TAG` 3; a code object's reference carries
///   tag 0 or 1.
const PY_3_14: Layout = Layout {
    version: PyVersion::new(3, 14),
    runtime_interpreters_head: 808,
    interp_threads_head: 7344,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_native_thread_id: Some(160),
    tstate_frame: 72,
    cframe_current_frame: None,
    frame_previous: 8,
    frame_code: 0,
    frame_instr: 56,
    frame_is_entry: None,
    frame_owner: Some(74),
    owner_cstack: 3,
    code_tag_mask: !3,
    code_filename: 112,
    code_name: 120,
    code_qualname: Some(128),
    code_firstlineno: 68,
    code_linetable: 136,
    code_bytecode: 208,
    unicode_state: 32,
    unicode_ascii_data: 40,
    unicode_compact_data: 56,
    unicode_length: 16,
    bytes_size: 16,
    bytes_data: 32,
    unicode_kind_shift: UNICODE_KIND_SHIFT,
    unicode_compact_bit: UNICODE_COMPACT_BIT,
    unicode_ascii_bit: UNICODE_ASCII_BIT,
};

/// The built-in layout of a version this module knows: 3.10, 3.11 and 3.12,
/// and 3.13 and 3.14 as fallbacks for when an interpreter's
/// `_Py_DebugOffsets` is missing or unreadable (prefer
/// [`layout_from_debug_offsets`] there). `None` for any other version.
pub fn known_layout(version: PyVersion) -> Option<Layout> {
    let layout = match (version.major, version.minor) {
        (3, 10) => PY_3_10,
        (3, 11) => PY_3_11,
        (3, 12) => PY_3_12,
        (3, 13) => PY_3_13,
        (3, 14) => PY_3_14,
        _ => return None,
    };
    Some(layout)
}

/// The version in a `Py_Version` or `_Py_DebugOffsets.version` word
/// (`PY_VERSION_HEX`: major in bits 24–31, minor in bits 16–23, then micro,
/// release level and serial).
pub fn version_from_hex(hex: u64) -> PyVersion {
    PyVersion::new((hex >> 24) as u8, (hex >> 16) as u8)
}

/// Why `_Py_DebugOffsets` could not be turned into a [`Layout`].
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// Fewer bytes than the struct (or its header) takes.
    #[error("_Py_DebugOffsets too short: {got} bytes, {need} needed for {what}")]
    TooShort {
        /// What did not fit: the header, or a version's whole struct.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// The first 8 bytes are not `xdebugpy`: not a 3.13+ `_PyRuntime`, or
    /// not its start.
    #[error("_Py_DebugOffsets has a bad cookie {found:02x?} (expected \"xdebugpy\")")]
    BadCookie {
        /// The bytes found.
        found: [u8; 8],
    },
    /// A version whose `_Py_DebugOffsets` layout this module does not know
    /// (the struct changes with every minor version).
    #[error(
        "_Py_DebugOffsets of unsupported Python version {version} \
         (version word {hex:#x}); known: 3.13, 3.14"
    )]
    UnsupportedVersion {
        /// The version word.
        hex: u64,
        /// The version in it.
        version: PyVersion,
    },
    /// An alpha or beta: the struct's layout is only fixed from a minor
    /// version's first release candidate.
    #[error(
        "_Py_DebugOffsets of a Python {version} alpha or beta (version word {hex:#x}), \
         whose layout is not final"
    )]
    Prerelease {
        /// The version word.
        hex: u64,
        /// The version in it.
        version: PyVersion,
    },
    /// A free-threaded (`Py_GIL_DISABLED`) build, whose object, string and
    /// frame layouts this module does not describe.
    #[error("Python {version} is a free-threaded build, which is not supported")]
    FreeThreaded {
        /// The version.
        version: PyVersion,
    },
    /// A value that cannot be right: an offset past the end of its struct,
    /// or a flag that is neither 0 nor 1.
    #[error("_Py_DebugOffsets field {field} is implausible: {value} (limit {limit})")]
    Implausible {
        /// The field, as named in CPython's `_Py_DebugOffsets`.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The most it may be.
        limit: u64,
    },
}

/// Where the fields this module reads sit in one version's
/// `_Py_DebugOffsets`. Every member after the 8-byte cookie is a `uint64_t`,
/// so each position is 8 times the member's index in the struct.
struct DebugOffsetsPositions {
    /// `sizeof(_Py_DebugOffsets)`.
    size: usize,
    runtime_state_size: usize,
    runtime_state_interpreters_head: usize,
    interpreter_state_size: usize,
    interpreter_state_threads_head: usize,
    thread_state_size: usize,
    thread_state_next: usize,
    thread_state_current_frame: usize,
    thread_state_thread_id: usize,
    thread_state_native_thread_id: usize,
    interpreter_frame_size: usize,
    interpreter_frame_previous: usize,
    interpreter_frame_executable: usize,
    interpreter_frame_instr_ptr: usize,
    interpreter_frame_owner: usize,
    code_object_size: usize,
    code_object_filename: usize,
    code_object_name: usize,
    code_object_qualname: usize,
    code_object_linetable: usize,
    code_object_firstlineno: usize,
    code_object_co_code_adaptive: usize,
    bytes_object_size: usize,
    bytes_object_ob_size: usize,
    bytes_object_ob_sval: usize,
    unicode_object_size: usize,
    unicode_object_state: usize,
    unicode_object_length: usize,
    unicode_object_asciiobject_size: usize,
}

/// The cookie, the version word and `free_threaded`, the same in 3.13 and
/// 3.14.
const DEBUG_HEADER_SIZE: usize = 24;
const DEBUG_VERSION_AT: usize = 8;
const DEBUG_FREE_THREADED_AT: usize = 16;
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// 3.13 (`Include/internal/pycore_runtime.h`): runtime_state 3 members from
/// 24, interpreter_state 13 from 48, thread_state 9 from 152,
/// interpreter_frame 6 from 224, code_object 10 from 272, pyobject 2,
/// type_object 4, tuple_object 3, list_object 3, dict_object 3, float_object
/// 2, long_object 3, bytes_object 3 from 512, unicode_object 4 from 536, gc
/// 2; 584 bytes.
const DEBUG_OFFSETS_3_13: DebugOffsetsPositions = DebugOffsetsPositions {
    size: 584,
    runtime_state_size: 24,
    runtime_state_interpreters_head: 40,
    interpreter_state_size: 48,
    interpreter_state_threads_head: 72,
    thread_state_size: 152,
    thread_state_next: 168,
    thread_state_current_frame: 184,
    thread_state_thread_id: 192,
    thread_state_native_thread_id: 200,
    interpreter_frame_size: 224,
    interpreter_frame_previous: 232,
    interpreter_frame_executable: 240,
    interpreter_frame_instr_ptr: 248,
    interpreter_frame_owner: 264,
    code_object_size: 272,
    code_object_filename: 280,
    code_object_name: 288,
    code_object_qualname: 296,
    code_object_linetable: 304,
    code_object_firstlineno: 312,
    code_object_co_code_adaptive: 344,
    bytes_object_size: 512,
    bytes_object_ob_size: 520,
    bytes_object_ob_sval: 528,
    unicode_object_size: 536,
    unicode_object_state: 544,
    unicode_object_length: 552,
    unicode_object_asciiobject_size: 560,
};

/// 3.14 (`Include/internal/pycore_debug_offsets.h`), which grew against
/// 3.13: interpreter_state has 16 members (threads_main,
/// code_object_generation, tlbc_generation added) from 48, thread_state 9
/// from 176, interpreter_frame 8 (stackpointer, tlbc_index) from 248,
/// code_object 11 (co_tlbc) from 312, pyobject 2, type_object 4,
/// tuple_object 3, list_object 3, set_object 4 (new), dict_object 3,
/// float_object 2, long_object 3, bytes_object 3 from 592, unicode_object 4
/// from 616, gc 2, gen_object 4, llist_node 2 and debugger_support 6 (all
/// three new); 760 bytes.
const DEBUG_OFFSETS_3_14: DebugOffsetsPositions = DebugOffsetsPositions {
    size: 760,
    runtime_state_size: 24,
    runtime_state_interpreters_head: 40,
    interpreter_state_size: 48,
    interpreter_state_threads_head: 72,
    thread_state_size: 176,
    thread_state_next: 192,
    thread_state_current_frame: 208,
    thread_state_thread_id: 216,
    thread_state_native_thread_id: 224,
    interpreter_frame_size: 248,
    interpreter_frame_previous: 256,
    interpreter_frame_executable: 264,
    interpreter_frame_instr_ptr: 272,
    interpreter_frame_owner: 288,
    code_object_size: 312,
    code_object_filename: 320,
    code_object_name: 328,
    code_object_qualname: 336,
    code_object_linetable: 344,
    code_object_firstlineno: 352,
    code_object_co_code_adaptive: 384,
    bytes_object_size: 592,
    bytes_object_ob_size: 600,
    bytes_object_ob_sval: 608,
    unicode_object_size: 616,
    unicode_object_state: 624,
    unicode_object_length: 632,
    unicode_object_asciiobject_size: 640,
};

/// Little-endian `u64` at `at`; the caller has checked the length.
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    le.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(le)
}

/// Reads offsets out of a `_Py_DebugOffsets` image, checking each against
/// the size of its struct, also read from the image, so that a wrong
/// version's or a corrupt table is refused rather than steering eBPF to
/// wild reads.
struct Members<'a> {
    bytes: &'a [u8],
}

impl Members<'_> {
    /// The offset at `at` of a member `width` bytes wide inside a struct
    /// `size` bytes long.
    fn offset(
        &self,
        field: &'static str,
        at: usize,
        width: u64,
        size: u64,
    ) -> Result<u32, LayoutError> {
        let value = word(self.bytes, at);
        let fits = value.checked_add(width).is_some_and(|end| end <= size);
        match u32::try_from(value) {
            Ok(offset) if fits => Ok(offset),
            _ => Err(LayoutError::Implausible {
                field,
                value,
                limit: size.saturating_sub(width),
            }),
        }
    }
}

/// Parses `_Py_DebugOffsets` as found at the start of `_PyRuntime` in a
/// 3.13+ interpreter's data (bytes read from the ELF file's initialized data
/// at the `_PyRuntime` symbol, at least the struct's size: 584 bytes in
/// 3.13, 760 in 3.14; more is fine), checks its cookie (`xdebugpy`) and
/// version word, and returns the layout it describes. Fields the struct does
/// not carry (`owner_cstack`, `code_tag_mask`, the string state bits,
/// `unicode_compact_data`) come from the built-in layout of that version.
///
/// Refuses versions other than 3.13 and 3.14, their alphas and betas (the
/// struct is only fixed from the first release candidate), free-threaded
/// builds, and offsets that do not fit in the struct sizes the table gives.
pub fn layout_from_debug_offsets(bytes: &[u8]) -> Result<Layout, LayoutError> {
    if bytes.len() < DEBUG_HEADER_SIZE {
        return Err(LayoutError::TooShort {
            what: "the cookie, version and free_threaded words",
            need: DEBUG_HEADER_SIZE,
            got: bytes.len(),
        });
    }
    let mut found = [0u8; 8];
    found.copy_from_slice(&bytes[..8]);
    if &found != DEBUG_COOKIE {
        return Err(LayoutError::BadCookie { found });
    }

    let hex = word(bytes, DEBUG_VERSION_AT);
    let version = version_from_hex(hex);
    let (positions, known, what) = match (hex >> 32, version.major, version.minor) {
        (0, 3, 13) => (&DEBUG_OFFSETS_3_13, PY_3_13, "3.13's struct"),
        (0, 3, 14) => (&DEBUG_OFFSETS_3_14, PY_3_14, "3.14's struct"),
        _ => return Err(LayoutError::UnsupportedVersion { hex, version }),
    };
    // PY_VERSION_HEX's release level nibble: 0xA alpha, 0xB beta, 0xC
    // release candidate, 0xF final.
    if (hex >> 4) & 0xf < 0xc {
        return Err(LayoutError::Prerelease { hex, version });
    }
    match word(bytes, DEBUG_FREE_THREADED_AT) {
        0 => {}
        1 => return Err(LayoutError::FreeThreaded { version }),
        value => {
            return Err(LayoutError::Implausible {
                field: "free_threaded",
                value,
                limit: 1,
            });
        }
    }
    if bytes.len() < positions.size {
        return Err(LayoutError::TooShort {
            what,
            need: positions.size,
            got: bytes.len(),
        });
    }

    let p = positions;
    let m = Members { bytes };
    let runtime = word(bytes, p.runtime_state_size);
    let interp = word(bytes, p.interpreter_state_size);
    let tstate = word(bytes, p.thread_state_size);
    let frame = word(bytes, p.interpreter_frame_size);
    let code = word(bytes, p.code_object_size);
    let bytes_object = word(bytes, p.bytes_object_size);
    let unicode = word(bytes, p.unicode_object_size);
    Ok(Layout {
        runtime_interpreters_head: m.offset(
            "runtime_state.interpreters_head",
            p.runtime_state_interpreters_head,
            8,
            runtime,
        )?,
        interp_threads_head: m.offset(
            "interpreter_state.threads_head",
            p.interpreter_state_threads_head,
            8,
            interp,
        )?,
        tstate_next: m.offset("thread_state.next", p.thread_state_next, 8, tstate)?,
        tstate_thread_id: m.offset(
            "thread_state.thread_id",
            p.thread_state_thread_id,
            8,
            tstate,
        )?,
        tstate_native_thread_id: Some(m.offset(
            "thread_state.native_thread_id",
            p.thread_state_native_thread_id,
            8,
            tstate,
        )?),
        tstate_frame: m.offset(
            "thread_state.current_frame",
            p.thread_state_current_frame,
            8,
            tstate,
        )?,
        cframe_current_frame: None,
        frame_previous: m.offset(
            "interpreter_frame.previous",
            p.interpreter_frame_previous,
            8,
            frame,
        )?,
        frame_code: m.offset(
            "interpreter_frame.executable",
            p.interpreter_frame_executable,
            8,
            frame,
        )?,
        frame_instr: m.offset(
            "interpreter_frame.instr_ptr",
            p.interpreter_frame_instr_ptr,
            8,
            frame,
        )?,
        frame_is_entry: None,
        frame_owner: Some(m.offset(
            "interpreter_frame.owner",
            p.interpreter_frame_owner,
            1,
            frame,
        )?),
        code_filename: m.offset("code_object.filename", p.code_object_filename, 8, code)?,
        code_name: m.offset("code_object.name", p.code_object_name, 8, code)?,
        code_qualname: Some(m.offset("code_object.qualname", p.code_object_qualname, 8, code)?),
        code_firstlineno: m.offset(
            "code_object.firstlineno",
            p.code_object_firstlineno,
            4,
            code,
        )?,
        code_linetable: m.offset("code_object.linetable", p.code_object_linetable, 8, code)?,
        // sizeof(PyCodeObject) counts co_code_adaptive[1].
        code_bytecode: m.offset(
            "code_object.co_code_adaptive",
            p.code_object_co_code_adaptive,
            1,
            code,
        )?,
        unicode_state: m.offset("unicode_object.state", p.unicode_object_state, 4, unicode)?,
        // A size, not a member: it only has to fit in PyUnicodeObject.
        unicode_ascii_data: m.offset(
            "unicode_object.asciiobject_size",
            p.unicode_object_asciiobject_size,
            0,
            unicode,
        )?,
        unicode_length: m.offset("unicode_object.length", p.unicode_object_length, 8, unicode)?,
        bytes_size: m.offset(
            "bytes_object.ob_size",
            p.bytes_object_ob_size,
            8,
            bytes_object,
        )?,
        // sizeof(PyBytesObject) counts ob_sval[1].
        bytes_data: m.offset(
            "bytes_object.ob_sval",
            p.bytes_object_ob_sval,
            1,
            bytes_object,
        )?,
        ..known
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use object::{Object, ObjectSection, ObjectSymbol};

    use super::*;

    /// Every version with a built-in layout.
    const MINORS: [u8; 5] = [10, 11, 12, 13, 14];

    /// A layout as `layout_offsets.c` prints it: field name to decimal value
    /// or `none`.
    fn printed(l: &Layout) -> BTreeMap<&'static str, String> {
        fn some(v: u32) -> String {
            v.to_string()
        }
        fn opt(v: Option<u32>) -> String {
            v.map_or_else(|| "none".to_owned(), |v| v.to_string())
        }
        BTreeMap::from([
            ("version", l.version.to_string()),
            (
                "runtime_interpreters_head",
                some(l.runtime_interpreters_head),
            ),
            ("interp_threads_head", some(l.interp_threads_head)),
            ("tstate_next", some(l.tstate_next)),
            ("tstate_thread_id", some(l.tstate_thread_id)),
            ("tstate_native_thread_id", opt(l.tstate_native_thread_id)),
            ("tstate_frame", some(l.tstate_frame)),
            ("cframe_current_frame", opt(l.cframe_current_frame)),
            ("frame_previous", some(l.frame_previous)),
            ("frame_code", some(l.frame_code)),
            ("frame_instr", some(l.frame_instr)),
            ("frame_is_entry", opt(l.frame_is_entry)),
            ("frame_owner", opt(l.frame_owner)),
            ("owner_cstack", l.owner_cstack.to_string()),
            ("code_tag_mask", l.code_tag_mask.to_string()),
            ("code_filename", some(l.code_filename)),
            ("code_name", some(l.code_name)),
            ("code_qualname", opt(l.code_qualname)),
            ("code_firstlineno", some(l.code_firstlineno)),
            ("code_linetable", some(l.code_linetable)),
            ("code_bytecode", some(l.code_bytecode)),
            ("unicode_state", some(l.unicode_state)),
            ("unicode_ascii_data", some(l.unicode_ascii_data)),
            ("unicode_compact_data", some(l.unicode_compact_data)),
            ("unicode_length", some(l.unicode_length)),
            ("bytes_size", some(l.bytes_size)),
            ("bytes_data", some(l.bytes_data)),
            ("unicode_kind_shift", some(l.unicode_kind_shift)),
            ("unicode_compact_bit", some(l.unicode_compact_bit)),
            ("unicode_ascii_bit", some(l.unicode_ascii_bit)),
        ])
    }

    /// pyenv's installs, where this machine has them: `$PYENV_ROOT`,
    /// `~/.pyenv` or `/root/.pyenv`, the first that exists.
    fn pyenv_versions() -> Option<PathBuf> {
        let candidates = [
            std::env::var_os("PYENV_ROOT").map(PathBuf::from),
            std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")),
            Some(PathBuf::from("/root/.pyenv")),
        ];
        candidates
            .into_iter()
            .flatten()
            .map(|root| root.join("versions"))
            .find(|versions| versions.is_dir())
    }

    /// The first pyenv install of 3.`minor` (sorted by name) that has `rel`.
    fn pyenv_file(minor: u8, rel: &str) -> Option<PathBuf> {
        let prefix = format!("3.{minor}.");
        let mut hits: Vec<PathBuf> = std::fs::read_dir(pyenv_versions()?)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path().join(rel))
            .filter(|p| p.exists())
            .collect();
        hits.sort();
        hits.into_iter().next()
    }

    /// Include directories for 3.`minor`'s headers: `KILN_PYTHON3<minor>_INCLUDE`
    /// (colon-separated, e.g. a Debian libpython3.14-dev unpacked somewhere:
    /// `.../usr/include/python3.14:.../usr/include`), else pyenv's.
    fn include_dirs(minor: u8) -> Option<Vec<PathBuf>> {
        if let Some(dirs) = std::env::var_os(format!("KILN_PYTHON3{minor}_INCLUDE")) {
            return Some(std::env::split_paths(&dirs).collect());
        }
        let dir = pyenv_file(minor, &format!("include/python3.{minor}/Python.h"))?;
        Some(vec![dir.parent()?.to_path_buf()])
    }

    /// Test 1: each built-in table equals what the C program prints against
    /// that version's real headers.
    #[test]
    fn builtin_tables_match_the_headers() {
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/python/layout_offsets.c");
        assert!(source.exists(), "{} is missing", source.display());
        for minor in MINORS {
            let Some(includes) = include_dirs(minor) else {
                println!("skipped: no headers for 3.{minor}");
                continue;
            };
            let exe = std::env::temp_dir().join(format!(
                "kiln-layout-offsets-3{minor}-{}",
                std::process::id()
            ));
            let mut cc = Command::new("cc");
            // -w: the internal headers warn about themselves.
            cc.arg("-w").arg("-o").arg(&exe).arg(&source);
            for dir in &includes {
                cc.arg("-I").arg(dir);
            }
            let built = match cc.output() {
                Ok(built) => built,
                Err(e) => {
                    println!("skipped: no C compiler (cc: {e}) for 3.{minor}");
                    continue;
                }
            };
            assert!(
                built.status.success(),
                "compiling layout_offsets.c for 3.{minor} with {includes:?} failed:\n{}",
                String::from_utf8_lossy(&built.stderr)
            );
            let run = Command::new(&exe).output().expect("run layout_offsets");
            let _ = std::fs::remove_file(&exe);
            assert!(run.status.success(), "layout_offsets for 3.{minor} failed");
            let stdout = String::from_utf8(run.stdout).expect("utf-8 output");
            let from_c: BTreeMap<&str, String> = stdout
                .lines()
                .map(|line| {
                    let (k, v) = line.split_once('=').expect("name=value");
                    (k, v.to_owned())
                })
                .collect();
            let layout = known_layout(PyVersion::new(3, minor)).expect("built-in layout");
            let ours = printed(&layout);
            let differ: Vec<String> = ours
                .keys()
                .chain(from_c.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| ours.get(*k) != from_c.get(*k))
                .map(|k| {
                    format!(
                        "{k}: built-in {:?}, headers {:?}",
                        ours.get(k),
                        from_c.get(k)
                    )
                })
                .collect();
            assert!(differ.is_empty(), "3.{minor}: {differ:#?}");
            println!("3.{minor}: built-in table matches {includes:?}");
        }
    }

    /// `_PyRuntime`'s initialized bytes in an ELF shared library.
    fn runtime_bytes(path: &Path) -> Vec<u8> {
        let data = std::fs::read(path).expect("read libpython");
        let file = object::File::parse(&*data).expect("parse ELF");
        let symbol = file
            .dynamic_symbols()
            .chain(file.symbols())
            .find(|s| s.name() == Ok("_PyRuntime"))
            .expect("_PyRuntime symbol");
        let index = symbol.section_index().expect("_PyRuntime is defined");
        let section = file.section_by_index(index).expect("its section");
        // .data has file bytes (a .bss symbol would have none: _PyRuntime
        // is initialized, debug offsets included).
        let (file_offset, file_size) = section.file_range().expect("_PyRuntime has file bytes");
        let start = file_offset + (symbol.address() - section.address());
        let end = if symbol.size() > 0 {
            start + symbol.size()
        } else {
            file_offset + file_size
        };
        data[start as usize..end as usize].to_vec()
    }

    /// The libpython of 3.`minor`: `KILN_LIBPYTHON3<minor>`, else pyenv's.
    fn libpython(minor: u8) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(format!("KILN_LIBPYTHON3{minor}")) {
            return Some(PathBuf::from(path));
        }
        pyenv_file(minor, &format!("lib/libpython3.{minor}.so.1.0"))
    }

    /// Test 2: a real interpreter's debug offsets agree with the built-in
    /// table of its version (3.13 from pyenv; 3.14 where one is given).
    #[test]
    fn live_debug_offsets_match_builtin_tables() {
        for minor in [13, 14] {
            let Some(path) = libpython(minor) else {
                println!("skipped: no libpython3.{minor}.so.1.0 (pyenv or KILN_LIBPYTHON3{minor})");
                continue;
            };
            let bytes = runtime_bytes(&path);
            let layout = layout_from_debug_offsets(&bytes)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(layout.version, PyVersion::new(3, minor));
            assert_eq!(Some(layout), known_layout(PyVersion::new(3, minor)));
            println!(
                "3.{minor}: {} agrees with the built-in table",
                path.display()
            );
        }
    }

    /// `_Py_DebugOffsets` in 3.13, member by member
    /// (`Include/internal/pycore_runtime.h`); all `uint64_t` after the
    /// 8-byte cookie.
    const MEMBERS_3_13: &[&str] = &[
        "cookie",
        "version",
        "free_threaded",
        "runtime_state.size",
        "runtime_state.finalizing",
        "runtime_state.interpreters_head",
        "interpreter_state.size",
        "interpreter_state.id",
        "interpreter_state.next",
        "interpreter_state.threads_head",
        "interpreter_state.gc",
        "interpreter_state.imports_modules",
        "interpreter_state.sysdict",
        "interpreter_state.builtins",
        "interpreter_state.ceval_gil",
        "interpreter_state.gil_runtime_state",
        "interpreter_state.gil_runtime_state_enabled",
        "interpreter_state.gil_runtime_state_locked",
        "interpreter_state.gil_runtime_state_holder",
        "thread_state.size",
        "thread_state.prev",
        "thread_state.next",
        "thread_state.interp",
        "thread_state.current_frame",
        "thread_state.thread_id",
        "thread_state.native_thread_id",
        "thread_state.datastack_chunk",
        "thread_state.status",
        "interpreter_frame.size",
        "interpreter_frame.previous",
        "interpreter_frame.executable",
        "interpreter_frame.instr_ptr",
        "interpreter_frame.localsplus",
        "interpreter_frame.owner",
        "code_object.size",
        "code_object.filename",
        "code_object.name",
        "code_object.qualname",
        "code_object.linetable",
        "code_object.firstlineno",
        "code_object.argcount",
        "code_object.localsplusnames",
        "code_object.localspluskinds",
        "code_object.co_code_adaptive",
        "pyobject.size",
        "pyobject.ob_type",
        "type_object.size",
        "type_object.tp_name",
        "type_object.tp_repr",
        "type_object.tp_flags",
        "tuple_object.size",
        "tuple_object.ob_item",
        "tuple_object.ob_size",
        "list_object.size",
        "list_object.ob_item",
        "list_object.ob_size",
        "dict_object.size",
        "dict_object.ma_keys",
        "dict_object.ma_values",
        "float_object.size",
        "float_object.ob_fval",
        "long_object.size",
        "long_object.lv_tag",
        "long_object.ob_digit",
        "bytes_object.size",
        "bytes_object.ob_size",
        "bytes_object.ob_sval",
        "unicode_object.size",
        "unicode_object.state",
        "unicode_object.length",
        "unicode_object.asciiobject_size",
        "gc.size",
        "gc.collecting",
    ];

    /// `_Py_DebugOffsets` in 3.14, member by member
    /// (`Include/internal/pycore_debug_offsets.h`, as in 3.14.10).
    const MEMBERS_3_14: &[&str] = &[
        "cookie",
        "version",
        "free_threaded",
        "runtime_state.size",
        "runtime_state.finalizing",
        "runtime_state.interpreters_head",
        "interpreter_state.size",
        "interpreter_state.id",
        "interpreter_state.next",
        "interpreter_state.threads_head",
        "interpreter_state.threads_main",
        "interpreter_state.gc",
        "interpreter_state.imports_modules",
        "interpreter_state.sysdict",
        "interpreter_state.builtins",
        "interpreter_state.ceval_gil",
        "interpreter_state.gil_runtime_state",
        "interpreter_state.gil_runtime_state_enabled",
        "interpreter_state.gil_runtime_state_locked",
        "interpreter_state.gil_runtime_state_holder",
        "interpreter_state.code_object_generation",
        "interpreter_state.tlbc_generation",
        "thread_state.size",
        "thread_state.prev",
        "thread_state.next",
        "thread_state.interp",
        "thread_state.current_frame",
        "thread_state.thread_id",
        "thread_state.native_thread_id",
        "thread_state.datastack_chunk",
        "thread_state.status",
        "interpreter_frame.size",
        "interpreter_frame.previous",
        "interpreter_frame.executable",
        "interpreter_frame.instr_ptr",
        "interpreter_frame.localsplus",
        "interpreter_frame.owner",
        "interpreter_frame.stackpointer",
        "interpreter_frame.tlbc_index",
        "code_object.size",
        "code_object.filename",
        "code_object.name",
        "code_object.qualname",
        "code_object.linetable",
        "code_object.firstlineno",
        "code_object.argcount",
        "code_object.localsplusnames",
        "code_object.localspluskinds",
        "code_object.co_code_adaptive",
        "code_object.co_tlbc",
        "pyobject.size",
        "pyobject.ob_type",
        "type_object.size",
        "type_object.tp_name",
        "type_object.tp_repr",
        "type_object.tp_flags",
        "tuple_object.size",
        "tuple_object.ob_item",
        "tuple_object.ob_size",
        "list_object.size",
        "list_object.ob_item",
        "list_object.ob_size",
        "set_object.size",
        "set_object.used",
        "set_object.table",
        "set_object.mask",
        "dict_object.size",
        "dict_object.ma_keys",
        "dict_object.ma_values",
        "float_object.size",
        "float_object.ob_fval",
        "long_object.size",
        "long_object.lv_tag",
        "long_object.ob_digit",
        "bytes_object.size",
        "bytes_object.ob_size",
        "bytes_object.ob_sval",
        "unicode_object.size",
        "unicode_object.state",
        "unicode_object.length",
        "unicode_object.asciiobject_size",
        "gc.size",
        "gc.collecting",
        "gen_object.size",
        "gen_object.gi_name",
        "gen_object.gi_iframe",
        "gen_object.gi_frame_state",
        "llist_node.next",
        "llist_node.prev",
        "debugger_support.eval_breaker",
        "debugger_support.remote_debugger_support",
        "debugger_support.remote_debugging_enabled",
        "debugger_support.debugger_pending_call",
        "debugger_support.debugger_script_path",
        "debugger_support.debugger_script_path_size",
    ];

    /// Values for a synthetic table: struct sizes and offsets that differ
    /// from every real version's, so the test sees they come from the image.
    const SYNTHETIC: &[(&str, u64)] = &[
        ("runtime_state.size", 4096),
        ("runtime_state.interpreters_head", 1000),
        ("interpreter_state.size", 9000),
        ("interpreter_state.threads_head", 7000),
        ("thread_state.size", 400),
        ("thread_state.next", 16),
        ("thread_state.current_frame", 80),
        ("thread_state.thread_id", 160),
        ("thread_state.native_thread_id", 168),
        ("interpreter_frame.size", 90),
        ("interpreter_frame.previous", 16),
        ("interpreter_frame.executable", 8),
        ("interpreter_frame.instr_ptr", 64),
        ("interpreter_frame.owner", 76),
        ("code_object.size", 232),
        ("code_object.filename", 104),
        ("code_object.name", 96),
        ("code_object.qualname", 88),
        ("code_object.linetable", 144),
        ("code_object.firstlineno", 60),
        ("code_object.co_code_adaptive", 224),
        ("bytes_object.size", 40),
        ("bytes_object.ob_size", 24),
        ("bytes_object.ob_sval", 33),
        ("unicode_object.size", 64),
        ("unicode_object.state", 36),
        ("unicode_object.length", 24),
        ("unicode_object.asciiobject_size", 48),
    ];

    /// The layout SYNTHETIC describes for a version whose built-in layout is
    /// `known`.
    fn synthetic_layout(known: Layout) -> Layout {
        Layout {
            runtime_interpreters_head: 1000,
            interp_threads_head: 7000,
            tstate_next: 16,
            tstate_frame: 80,
            tstate_thread_id: 160,
            tstate_native_thread_id: Some(168),
            frame_previous: 16,
            frame_code: 8,
            frame_instr: 64,
            frame_owner: Some(76),
            code_filename: 104,
            code_name: 96,
            code_qualname: Some(88),
            code_linetable: 144,
            code_firstlineno: 60,
            code_bytecode: 224,
            bytes_size: 24,
            bytes_data: 33,
            unicode_state: 36,
            unicode_length: 24,
            unicode_ascii_data: 48,
            ..known
        }
    }

    /// A `_Py_DebugOffsets` image laid out as `members` lists, with the
    /// cookie, the version word, and `values` by member name.
    fn image(members: &[&str], version: u64, values: &[(&str, u64)]) -> Vec<u8> {
        let mut bytes = vec![0u8; members.len() * 8];
        let mut set = |name: &str, value: u64| {
            let i = members
                .iter()
                .position(|m| *m == name)
                .unwrap_or_else(|| panic!("no member {name}"));
            bytes[i * 8..i * 8 + 8].copy_from_slice(&value.to_le_bytes());
        };
        set("version", version);
        for &(name, value) in values {
            set(name, value);
        }
        bytes[..8].copy_from_slice(b"xdebugpy");
        bytes
    }

    /// Test 3: a 3.14 table as 3.14 lays it out parses to its values, with
    /// the rest from the built-in 3.14 layout.
    #[test]
    fn parses_a_3_14_image() {
        assert_eq!(MEMBERS_3_14.len() * 8, 760);
        let bytes = image(MEMBERS_3_14, 0x030e_00f0, SYNTHETIC);
        let layout = layout_from_debug_offsets(&bytes).expect("3.14 image");
        let known = known_layout(PyVersion::new(3, 14)).expect("3.14");
        assert_eq!(layout, synthetic_layout(known));
        // What the struct does not carry.
        assert_eq!(layout.owner_cstack, 3);
        assert_eq!(layout.code_tag_mask, !3);
        assert_eq!(layout.unicode_compact_data, 56);
        assert_eq!(layout.cframe_current_frame, None);
        assert_eq!(layout.frame_is_entry, None);

        // A release candidate has the final layout; trailing bytes (the
        // rest of _PyRuntime) are fine.
        let mut longer = image(MEMBERS_3_14, 0x030e_00c1, SYNTHETIC);
        longer.extend_from_slice(&[0xff; 64]);
        assert_eq!(layout_from_debug_offsets(&longer).expect("rc"), layout);
    }

    #[test]
    fn parses_a_3_13_image() {
        assert_eq!(MEMBERS_3_13.len() * 8, 584);
        let bytes = image(MEMBERS_3_13, 0x030d_05f0, SYNTHETIC);
        let layout = layout_from_debug_offsets(&bytes).expect("3.13 image");
        let known = known_layout(PyVersion::new(3, 13)).expect("3.13");
        assert_eq!(layout, synthetic_layout(known));
        assert_eq!(layout.code_tag_mask, !0);
    }

    /// The built-in 3.14 layout round-trips through a 3.14 image filled with
    /// its own offsets, as a real 3.14 `_PyRuntime` would be.
    #[test]
    fn builtin_3_14_round_trips() {
        let l = known_layout(PyVersion::new(3, 14)).expect("3.14");
        let values = [
            ("runtime_state.size", 4096),
            (
                "runtime_state.interpreters_head",
                l.runtime_interpreters_head.into(),
            ),
            ("interpreter_state.size", 16384),
            (
                "interpreter_state.threads_head",
                l.interp_threads_head.into(),
            ),
            ("thread_state.size", 4096),
            ("thread_state.next", l.tstate_next.into()),
            ("thread_state.current_frame", l.tstate_frame.into()),
            ("thread_state.thread_id", l.tstate_thread_id.into()),
            ("thread_state.native_thread_id", 160),
            ("interpreter_frame.size", 88),
            ("interpreter_frame.previous", l.frame_previous.into()),
            ("interpreter_frame.executable", l.frame_code.into()),
            ("interpreter_frame.instr_ptr", l.frame_instr.into()),
            ("interpreter_frame.owner", 74),
            ("code_object.size", 216),
            ("code_object.filename", l.code_filename.into()),
            ("code_object.name", l.code_name.into()),
            ("code_object.qualname", 128),
            ("code_object.linetable", l.code_linetable.into()),
            ("code_object.firstlineno", l.code_firstlineno.into()),
            ("code_object.co_code_adaptive", l.code_bytecode.into()),
            ("bytes_object.size", 40),
            ("bytes_object.ob_size", l.bytes_size.into()),
            ("bytes_object.ob_sval", l.bytes_data.into()),
            ("unicode_object.size", 64),
            ("unicode_object.state", l.unicode_state.into()),
            ("unicode_object.length", l.unicode_length.into()),
            (
                "unicode_object.asciiobject_size",
                l.unicode_ascii_data.into(),
            ),
        ];
        let bytes = image(MEMBERS_3_14, 0x030e_0af0, &values);
        assert_eq!(layout_from_debug_offsets(&bytes).expect("3.14"), l);
    }

    #[test]
    fn refuses_corrupt_tables() {
        let good = image(MEMBERS_3_14, 0x030e_00f0, SYNTHETIC);

        let mut bad_cookie = good.clone();
        bad_cookie[7] = b'z';
        let err = layout_from_debug_offsets(&bad_cookie).unwrap_err();
        assert!(matches!(err, LayoutError::BadCookie { .. }), "{err:?}");
        assert!(err.to_string().contains("cookie"), "{err}");

        // Shorter than 3.14's struct, and shorter than the header.
        let err = layout_from_debug_offsets(&good[..759]).unwrap_err();
        assert!(
            matches!(
                err,
                LayoutError::TooShort {
                    need: 760,
                    got: 759,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("too short"), "{err}");
        let err = layout_from_debug_offsets(&good[..10]).unwrap_err();
        assert!(
            matches!(err, LayoutError::TooShort { got: 10, .. }),
            "{err:?}"
        );
        // A 3.13 table is shorter: 584 bytes are enough for it but not 3.14.
        let mut as_3_13 = image(MEMBERS_3_13, 0x030d_00f0, SYNTHETIC);
        assert!(layout_from_debug_offsets(&as_3_13).is_ok());
        as_3_13.truncate(583);
        assert!(matches!(
            layout_from_debug_offsets(&as_3_13),
            Err(LayoutError::TooShort { need: 584, .. })
        ));

        // Versions without a known struct: 3.15, and 3.12 (no table at all).
        for hex in [0x030f_00f0_u64, 0x030c_00f0, 0x0400_00f0, 0x1_030e_00f0] {
            let err = layout_from_debug_offsets(&image(MEMBERS_3_14, hex, SYNTHETIC)).unwrap_err();
            assert!(
                matches!(err, LayoutError::UnsupportedVersion { hex: h, .. } if h == hex),
                "{err:?}"
            );
            assert!(err.to_string().contains("unsupported"), "{err}");
        }
        let err =
            layout_from_debug_offsets(&image(MEMBERS_3_14, 0x030f_00f0, SYNTHETIC)).unwrap_err();
        assert!(err.to_string().contains("3.15"), "{err}");

        // Alphas and betas.
        for hex in [0x030e_00a7_u64, 0x030e_00b3] {
            let err = layout_from_debug_offsets(&image(MEMBERS_3_14, hex, SYNTHETIC)).unwrap_err();
            assert!(matches!(err, LayoutError::Prerelease { .. }), "{err:?}");
        }

        // Free-threaded, and a free_threaded word that is no flag.
        let mut free = SYNTHETIC.to_vec();
        free.push(("free_threaded", 1));
        let err = layout_from_debug_offsets(&image(MEMBERS_3_14, 0x030e_00f0, &free)).unwrap_err();
        assert!(matches!(err, LayoutError::FreeThreaded { .. }), "{err:?}");
        assert!(err.to_string().contains("free-threaded"), "{err}");
        free.push(("free_threaded", 7));
        let err = layout_from_debug_offsets(&image(MEMBERS_3_14, 0x030e_00f0, &free)).unwrap_err();
        assert!(
            matches!(
                err,
                LayoutError::Implausible {
                    field: "free_threaded",
                    value: 7,
                    ..
                }
            ),
            "{err:?}"
        );

        // An offset past its struct, one past u32, and a zero struct size.
        for (name, value) in [
            ("thread_state.current_frame", 396),
            ("thread_state.current_frame", 1 << 40),
            ("interpreter_frame.size", 0),
        ] {
            let mut values = SYNTHETIC.to_vec();
            values.push((name, value));
            let err =
                layout_from_debug_offsets(&image(MEMBERS_3_14, 0x030e_00f0, &values)).unwrap_err();
            assert!(matches!(err, LayoutError::Implausible { .. }), "{err:?}");
            assert!(err.to_string().contains("implausible"), "{err}");
        }
        let mut values = SYNTHETIC.to_vec();
        values.push(("thread_state.current_frame", 396));
        let err = layout_from_debug_offsets(&image(MEMBERS_3_14, 0x030e_00f0, &values))
            .unwrap_err()
            .to_string();
        assert!(err.contains("thread_state.current_frame"), "{err}");
    }

    /// Test 4.
    #[test]
    fn version_words() {
        assert_eq!(version_from_hex(0x030b_07f0), PyVersion::new(3, 11));
        assert_eq!(version_from_hex(0x030e_00f0), PyVersion::new(3, 14));
        assert_eq!(version_from_hex(0x030d_00c3).to_string(), "3.13");
        assert!(PyVersion::new(3, 9) < PyVersion::new(3, 10));
    }

    #[test]
    fn knows_exactly_3_10_to_3_14() {
        for minor in MINORS {
            let v = PyVersion::new(3, minor);
            assert_eq!(known_layout(v).map(|l| l.version), Some(v));
        }
        for v in [
            PyVersion::new(3, 9),
            PyVersion::new(3, 15),
            PyVersion::new(2, 7),
        ] {
            assert_eq!(known_layout(v), None);
        }
    }

    /// What each version's unwinder branches on is set consistently.
    #[test]
    fn version_specific_fields() {
        let l = |minor| known_layout(PyVersion::new(3, minor)).expect("known");
        assert_eq!(l(10).code_qualname, None);
        assert_eq!(l(10).tstate_native_thread_id, None);
        assert!(l(11).frame_is_entry.is_some() && l(11).frame_owner.is_none());
        for minor in [11, 12] {
            assert!(l(minor).cframe_current_frame.is_some());
        }
        for minor in [10, 13, 14] {
            assert_eq!(l(minor).cframe_current_frame, None);
        }
        for minor in [12, 13, 14] {
            assert!(l(minor).frame_owner.is_some() && l(minor).frame_is_entry.is_none());
            assert_eq!(l(minor).owner_cstack, 3);
        }
        for minor in [10, 11, 12, 13] {
            assert_eq!(l(minor).code_tag_mask, !0);
        }
        assert_eq!(l(14).code_tag_mask, !3);
    }
}
