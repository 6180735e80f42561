//! `#[repr(C)]` mirrors of `src/bpf/types.h`, the one source of truth for
//! what crosses the kernel boundary. Field docs live there; a change there
//! bumps `KILN_ABI_VERSION`, and this file stops compiling until its own
//! [`ABI_VERSION`] follows.

/// The layout version these mirrors describe.
pub(crate) const ABI_VERSION: u32 = 12;

const _: () = assert!(
    ABI_VERSION == parse_u32(env!("KILN_BPF_ABI_VERSION")),
    "src/bpf/types.h changed KILN_ABI_VERSION: update the mirrors in abi.rs"
);

/// `KILN_MAX_STACK_DEPTH`.
pub(crate) const MAX_STACK_DEPTH: usize = 127;

/// `KILN_STACK_TRUNCATED`.
pub(crate) const STACK_TRUNCATED: u32 = 1 << 0;
/// `KILN_STACK_NO_TABLE`.
pub(crate) const STACK_NO_TABLE: u32 = 1 << 1;

/// `enum kiln_stat`: indexes of the per-CPU `stats` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stat {
    /// `KILN_STAT_SAMPLES`.
    Samples = 0,
    /// `KILN_STAT_IDLE`.
    Idle = 1,
    /// `KILN_STAT_COUNTS_FULL`.
    CountsFull = 2,
    /// `KILN_STAT_STACKS_FULL`.
    StacksFull = 3,
    /// `KILN_STAT_KERNEL_STACK_ERRORS`.
    KernelStackErrors = 4,
    /// `KILN_STAT_USER_STACK_ERRORS`.
    UserStackErrors = 5,
    /// `KILN_STAT_ANNOUNCE_DROPPED`.
    AnnounceDropped = 6,
    /// `KILN_STAT_LAUNCHES_DROPPED`.
    LaunchesDropped = 7,
    /// `KILN_STAT_OUTSIDE_CGROUP`.
    OutsideCgroup = 8,
    /// `KILN_STAT_WALK_ROOTED`.
    WalkRooted = 9,
    /// `KILN_STAT_WALK_NO_TABLE`.
    WalkNoTable = 10,
    /// `KILN_STAT_WALK_EVICTED`.
    WalkEvicted = 11,
    /// `KILN_STAT_WALK_NO_MAPPING`.
    WalkNoMapping = 12,
    /// `KILN_STAT_WALK_BAD_FRAME`.
    WalkBadFrame = 13,
    /// `KILN_STAT_WALK_DEPTH`.
    WalkDepth = 14,
    /// `KILN_STAT_OFF_CPU_WAITS`.
    OffCpuWaits = 15,
    /// `KILN_STAT_OFF_CPU_SHORT`.
    OffCpuShort = 16,
    /// `KILN_STAT_OFF_CPU_LOST_NS` (nanoseconds, not a count).
    OffCpuLostNs = 17,
    /// `KILN_STAT_PY_FRAMES`.
    PyFrames = 18,
    /// `KILN_STAT_PY_UNREADABLE`.
    PyUnreadable = 19,
    /// `KILN_STAT_PY_UNSUPPORTED`.
    PyUnsupported = 20,
    /// `KILN_STAT_PY_NO_THREAD`.
    PyNoThread = 21,
    /// `KILN_STAT_JVM_FRAMES`.
    JvmFrames = 22,
    /// `KILN_STAT_JVM_NO_BLOB`.
    JvmNoBlob = 23,
    /// `KILN_STAT_JVM_BAD_FRAME`.
    JvmBadFrame = 24,
    /// `KILN_STAT_JVM_GUESSED`.
    JvmGuessed = 25,
}

/// `KILN_STAT_NR`.
pub(crate) const STAT_NR: u32 = 26;

/// `struct kiln_sample_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub(crate) struct SampleKey {
    pub generation: u32,
    pub tgid: u32,
    pub tid: u32,
    pub second: u32,
    pub user_stack_id: u64,
    pub kernel_stack_id: u64,
}

/// `struct kiln_sample_value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub(crate) struct SampleValue {
    pub count: u64,
    pub comm: [u8; 16],
}

/// `struct kiln_stack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Stack {
    pub len: u32,
    pub flags: u32,
    pub addrs: [u64; MAX_STACK_DEPTH],
}

impl Stack {
    /// The recorded addresses, leaf first.
    pub(crate) fn frames(&self) -> &[u64] {
        &self.addrs[..(self.len as usize).min(MAX_STACK_DEPTH)]
    }
}

/// `struct kiln_new_process`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub(crate) struct NewProcess {
    pub tgid: u32,
    pub event: u32,
}

/// `KILN_PROCESS_SAMPLED`.
pub(crate) const PROCESS_SAMPLED: u32 = 1;
/// `KILN_PROCESS_EXEC`.
pub(crate) const PROCESS_EXEC: u32 = 2;
/// `KILN_PROCESS_REMAPPED`.
pub(crate) const PROCESS_REMAPPED: u32 = 3;
/// `KILN_PROCESS_TABLE_MISSING`.
pub(crate) const PROCESS_TABLE_MISSING: u32 = 4;

/// `struct kiln_control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub(crate) struct Control {
    pub abi_version: u32,
    pub generation: u32,
    pub cgroup_id: u64,
    pub cgroup_level: u32,
    pub reserved: u32,
    pub off_cpu_threshold_ns: u64,
}

/// `KILN_CFA_NONE`.
pub(crate) const CFA_NONE: u8 = 0;
/// `KILN_CFA_RSP`.
pub(crate) const CFA_RSP: u8 = 1;
/// `KILN_CFA_RBP`.
pub(crate) const CFA_RBP: u8 = 2;
/// `KILN_CFA_PLT`.
pub(crate) const CFA_PLT: u8 = 3;
/// `KILN_CFA_UNSUPPORTED`.
pub(crate) const CFA_UNSUPPORTED: u8 = 4;
/// `KILN_CFA_END`.
pub(crate) const CFA_END: u8 = 5;
/// `KILN_RBP_SAME`.
pub(crate) const RBP_SAME: u8 = 0;
/// `KILN_RBP_AT_CFA`.
pub(crate) const RBP_AT_CFA: u8 = 1;
/// `KILN_RBP_UNSUPPORTED`.
pub(crate) const RBP_UNSUPPORTED: u8 = 2;

/// `struct kiln_unwind_row`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub(crate) struct UnwindRow {
    pub pc: u32,
    pub cfa_offset: i16,
    pub rbp_offset: i8,
    /// CFA type in the low 4 bits, rbp type in the high 4.
    pub rules: u8,
}

/// `KILN_MAX_MAPPINGS`.
pub(crate) const MAX_MAPPINGS: usize = 4096;

/// `struct kiln_mapping`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub(crate) struct BpfMapping {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub table_id: u32,
    pub rows_len: u32,
}

/// `KILN_FRAME_TAG_MASK`: the top two bits, which say what a stack entry
/// that is not a native address is.
pub(crate) const FRAME_TAG_MASK: u64 = 3 << 62;
/// `KILN_PY_FRAME`: the tag of a stack entry that is a Python frame.
pub(crate) const PY_FRAME: u64 = 2 << 62;
/// `KILN_PY_INSTR_MAX`.
pub(crate) const PY_INSTR_MAX: u64 = 0x7fff;
/// `KILN_PY_INSTR_SHIFT`.
pub(crate) const PY_INSTR_SHIFT: u32 = 47;
/// `KILN_PY_CODE_MASK`.
pub(crate) const PY_CODE_MASK: u64 = (1 << PY_INSTR_SHIFT) - 1;
/// `KILN_PY_MARK_UNREADABLE`.
pub(crate) const PY_MARK_UNREADABLE: u64 = 1;
/// `KILN_PY_MARK_UNSUPPORTED`.
pub(crate) const PY_MARK_UNSUPPORTED: u64 = 2;
/// `KILN_PY_MARK_NO_THREAD`.
pub(crate) const PY_MARK_NO_THREAD: u64 = 3;
/// `KILN_PY_ENTRY_ONE`.
pub(crate) const PY_ENTRY_ONE: u8 = 0;
/// `KILN_PY_ENTRY_FLAG`.
pub(crate) const PY_ENTRY_FLAG: u8 = 1;
/// `KILN_PY_ENTRY_SHIM`.
pub(crate) const PY_ENTRY_SHIM: u8 = 2;
/// `KILN_PY_NONE`.
pub(crate) const PY_NONE: u32 = u32::MAX;

/// `KILN_JVM_FRAME`: the tag of a stack entry that is a JVM frame.
pub(crate) const JVM_FRAME: u64 = 3 << 62;
/// `KILN_JVM_KIND_SHIFT`.
pub(crate) const JVM_KIND_SHIFT: u32 = 60;
/// `KILN_JVM_NO_BCI`.
pub(crate) const JVM_NO_BCI: u64 = 0xffff;
/// `KILN_JVM_SEGMENT_BITS`.
pub(crate) const JVM_SEGMENT_BITS: u32 = 25;
/// `KILN_JVM_INTERPRETED`.
pub(crate) const JVM_INTERPRETED: u64 = 0;
/// `KILN_JVM_CODE`.
pub(crate) const JVM_CODE: u64 = 1;
/// `KILN_JVM_MARKER`.
pub(crate) const JVM_MARKER: u64 = 3;
/// `KILN_JVM_MARK_UNSUPPORTED`.
pub(crate) const JVM_MARK_UNSUPPORTED: u64 = 1;
/// `KILN_JVM_MARK_NO_BLOB`.
pub(crate) const JVM_MARK_NO_BLOB: u64 = 2;
/// `KILN_JVM_MARK_BAD_FRAME`.
pub(crate) const JVM_MARK_BAD_FRAME: u64 = 3;
/// `KILN_JVM_MAX_HEAPS`.
pub(crate) const JVM_MAX_HEAPS: usize = 4;
/// `KILN_JVM_CODE_OFFSETS`.
pub(crate) const JVM_CODE_OFFSETS: u8 = 1;

/// `struct kiln_jvm_heap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct JvmHeap {
    pub start: u64,
    pub end: u64,
    pub segmap: u64,
}

/// `struct kiln_jvm_proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct JvmProc {
    pub code_start: u64,
    pub code_end: u64,
    pub interp_start: u64,
    pub interp_end: u64,
    pub heaps: [JvmHeap; JVM_MAX_HEAPS],
    pub blob_frame_size: u16,
    pub blob_code_begin: u16,
    pub blob_code_end: u16,
    pub method_const_method: u16,
    pub const_method_size: u16,
    pub const_method_code_size: u16,
    pub heap_count: u8,
    pub log2_segment: u8,
    pub heapblock_size: u8,
    pub flags: u8,
    pub supported: u32,
    pub reserved: u32,
}

/// `struct kiln_python_proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PythonProc {
    pub eval_start: u64,
    pub eval_end: u64,
    pub runtime: u64,
    pub code_mask: u64,
    pub interpreters_head: u32,
    pub threads_head: u32,
    pub tstate_next: u32,
    pub tstate_thread_id: u32,
    pub tstate_frame: u32,
    pub cframe_current_frame: u32,
    pub frame_previous: u32,
    pub frame_code: u32,
    pub frame_instr: u32,
    pub frame_entry: u32,
    pub entry: u8,
    pub owner_cstack: u8,
    pub instr_is_pointer: u8,
    pub thread_id_is_tid: u8,
    pub supported: u32,
}

// The sizes the C side asserts with _Static_assert; with fields ordered so
// that none needs padding, equal sizes mean equal layouts.
const _: () = assert!(size_of::<SampleKey>() == 32);
const _: () = assert!(size_of::<SampleValue>() == 24);
const _: () = assert!(size_of::<Stack>() == 8 + 8 * MAX_STACK_DEPTH);
const _: () = assert!(size_of::<Control>() == 32);
const _: () = assert!(size_of::<NewProcess>() == 8);
const _: () = assert!(size_of::<UnwindRow>() == 8);
const _: () = assert!(size_of::<BpfMapping>() == 32);
const _: () = assert!(size_of::<PythonProc>() == 80);
const _: () = assert!(size_of::<JvmProc>() == 152);

// SAFETY: plain `#[repr(C)]` integers and arrays without padding: every bit
// pattern is a valid value, which is what aya's `Pod` requires.
unsafe impl aya::Pod for SampleKey {}
// SAFETY: as above.
unsafe impl aya::Pod for SampleValue {}
// SAFETY: as above.
unsafe impl aya::Pod for Stack {}
// SAFETY: as above.
unsafe impl aya::Pod for Control {}
// SAFETY: as above.
unsafe impl aya::Pod for UnwindRow {}
// SAFETY: as above.
unsafe impl aya::Pod for BpfMapping {}
// SAFETY: as above.
unsafe impl aya::Pod for PythonProc {}
// SAFETY: as above.
unsafe impl aya::Pod for JvmProc {}

const fn parse_u32(s: &str) -> u32 {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < bytes.len() {
        n = n * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// `struct kiln_gpu_launch`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct GpuLaunch {
    pub tgid: u32,
    pub tid: u32,
    pub correlation_id: u32,
    pub reserved: u32,
    /// Key of the launching stack in the `launch_stacks` map.
    pub stack_id: u64,
}

const _: () = assert!(size_of::<GpuLaunch>() == 24);

impl GpuLaunch {
    /// The record at the start of a `gpu_launches` ring buffer item, if
    /// the item is long enough to hold one.
    pub(crate) fn read(bytes: &[u8]) -> Option<GpuLaunch> {
        if bytes.len() < size_of::<GpuLaunch>() {
            return None;
        }
        // SAFETY: the length was checked, GpuLaunch is plain old data
        // (every bit pattern is valid), and read_unaligned has no
        // alignment requirement.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<GpuLaunch>()) })
    }
}
