/* SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only */
/*
 * The one source of truth for everything that crosses the kernel boundary
 * between the eBPF programs (*.bpf.c) and the agent (agent/src/abi.rs mirrors it).
 *
 * If you change a struct, a constant or the meaning of a map here:
 *   - bump KILN_ABI_VERSION (build.rs hands it to the Rust side, and
 *     abi.rs refuses to compile when its own constant differs);
 *   - update the #[repr(C)] mirror in agent/src/abi.rs and its size
 *     assertions;
 *   - if you add a KILN_STAT_*, name it in abi.rs's `Stat` too.
 *
 * Layout rules: fixed-width types only, every field naturally aligned and
 * no implicit padding (padding is spelled out as a `reserved` field that
 * must be zero), flags as __u32 rather than bool.
 */
#ifndef KILN_TYPES_H
#define KILN_TYPES_H

#include <linux/types.h>

/* Changes whenever a layout below or a map's meaning changes. */
#define KILN_ABI_VERSION 12

/*
 * Deepest stack one sample records. 127 is the kernel's default
 * kernel.perf_event_max_stack, which bpf_get_stack() never exceeds.
 */
#define KILN_MAX_STACK_DEPTH 127

/* Flags of a struct kiln_stack. */
enum kiln_stack_flags {
	/* The walk filled all KILN_MAX_STACK_DEPTH slots: the stack was
	 * probably cut, and user space puts a truncation marker at its root. */
	KILN_STACK_TRUNCATED = 1u << 0,
	/* The .eh_frame walk stopped at a frame of a file whose table was
	 * not loaded yet (the process is new to the agent): user space puts a
	 * marker at its root saying so, rather than leaving a short stack. */
	KILN_STACK_NO_TABLE = 1u << 1,
};

/*
 * Counters in the per-CPU `stats` array, indexed by this enum. User space
 * sums them over CPUs; they only ever grow.
 */
enum kiln_stat {
	/* Samples the program saw (idle included) of the tasks it profiles
	 * (all, or those in kiln_control.cgroup_id). */
	KILN_STAT_SAMPLES = 0,
	/* Of those, samples of the idle task (pid 0). */
	KILN_STAT_IDLE = 1,
	/* Samples lost because `counts` was full when kiln_sample() tried to
	 * add a new key; user space reports them under a "lost" frame so
	 * totals stay right. */
	KILN_STAT_COUNTS_FULL = 2,
	/* Stacks that kiln_sample() could not store in `stacks` (map full);
	 * the sample keeps the stack id and user space shows "stack lost". */
	KILN_STAT_STACKS_FULL = 3,
	/* bpf_get_stack() failures for the kernel stack in record_stack(). */
	KILN_STAT_KERNEL_STACK_ERRORS = 4,
	/* bpf_get_stack() failures for the user stack in record_stack(). */
	KILN_STAT_USER_STACK_ERRORS = 5,
	/* New processes not announced because `new_processes` was full in
	 * announce_process(); they are announced on a later sample. */
	KILN_STAT_ANNOUNCE_DROPPED = 6,
	/* GPU launches not reported because `gpu_launches` was full. */
	KILN_STAT_LAUNCHES_DROPPED = 7,
	/* Samples dropped by kiln_sample() because the task is outside
	 * kiln_control.cgroup_id (not counted in KILN_STAT_SAMPLES). */
	KILN_STAT_OUTSIDE_CGROUP = 8,
	/*
	 * How each user-stack walk ended (one of these per sample with a
	 * user stack). ROOTED: it reached the outermost frame (a CFI row
	 * whose return address is undefined, as in _start and clone's child,
	 * or a frame-pointer chain ending in rbp = 0, as _start leaves it).
	 * The others say why it stopped early: NO_TABLE, a frame whose
	 * file's table is not loaded yet (or the process's mappings are not);
	 * EVICTED, a frame whose table was evicted for room; NO_MAPPING, an
	 * address in no mapping user space gave (JIT code, or mapped since);
	 * BAD_FRAME, a frame whose rules led nowhere (unreadable memory, a
	 * zero return address, a caller below its callee); DEPTH, the walk
	 * filled KILN_MAX_STACK_DEPTH frames.
	 */
	KILN_STAT_WALK_ROOTED = 9,
	KILN_STAT_WALK_NO_TABLE = 10,
	KILN_STAT_WALK_EVICTED = 11,
	KILN_STAT_WALK_NO_MAPPING = 12,
	KILN_STAT_WALK_BAD_FRAME = 13,
	KILN_STAT_WALK_DEPTH = 14,
	/*
	 * Off-CPU profiling (kiln_switch()). OFF_CPU_WAITS: waits of at
	 * least kiln_control.off_cpu_threshold_ns, counted in `off_cpu_counts`;
	 * OFF_CPU_SHORT: shorter waits, not counted; OFF_CPU_LOST_NS: not a
	 * count but nanoseconds, of waits lost because `off_cpu_counts` was
	 * full (user space reports them under a "lost" frame).
	 */
	KILN_STAT_OFF_CPU_WAITS = 15,
	KILN_STAT_OFF_CPU_SHORT = 16,
	KILN_STAT_OFF_CPU_LOST_NS = 17,
	/*
	 * The CPython unwinder (python_frame()). PY_FRAMES: Python frames put
	 * into stacks; PY_UNREADABLE: interpreter activations whose frames
	 * could not be read (a marker frame stands for them);
	 * PY_UNSUPPORTED: activations of an interpreter version the agent
	 * has no layout for (a marker frame too); PY_NO_THREAD: activations
	 * of a thread whose thread state was not found among the
	 * interpreter's threads.
	 */
	KILN_STAT_PY_FRAMES = 18,
	KILN_STAT_PY_UNREADABLE = 19,
	KILN_STAT_PY_UNSUPPORTED = 20,
	KILN_STAT_PY_NO_THREAD = 21,
	/*
	 * The JVM unwinder (jvm_step()). JVM_FRAMES: JVM frames put into
	 * stacks; JVM_NO_BLOB: a code-cache pc in no code blob (the walk ends
	 * with a marker); JVM_BAD_FRAME: a JVM frame whose caller was not
	 * found (a marker too); JVM_GUESSED: frames whose return address was
	 * searched for (a compiled method's prologue or epilogue, an
	 * interpreter entry).
	 */
	KILN_STAT_JVM_FRAMES = 22,
	KILN_STAT_JVM_NO_BLOB = 23,
	KILN_STAT_JVM_BAD_FRAME = 24,
	KILN_STAT_JVM_GUESSED = 25,
	/* Number of counters; keep last. */
	KILN_STAT_NR = 26,
};

/*
 * Key of the `counts` hash map: one entry per distinct
 * (generation, thread, second, user stack, kernel stack).
 */
struct kiln_sample_key {
	/* kiln_control.generation when the sample was taken. User space
	 * flips the generation, then drains every key of an older one, so
	 * it never races the program on the keys it is reading. */
	__u32 generation;
	/* Process id (the kernel's tgid); 0 for the idle task. */
	__u32 tgid;
	/* Thread id (the kernel's pid); 0 for the idle task. */
	__u32 tid;
	/* The second it was counted in (CLOCK_BOOTTIME, whole seconds):
	 * samples keep the time they were taken to the second, whatever the
	 * interval between drains, so no second of a chart shows more CPUs
	 * busy than the machine has. (In `off_cpu_counts`: the second the
	 * wait ended.) */
	__u32 second;
	/* Key into `stacks` of the user stack, 0 when there is none (kernel
	 * threads, idle, or the walk failed). */
	__u64 user_stack_id;
	/* Key into `stacks` of the kernel stack, 0 when there is none (the
	 * sample interrupted user code, idle, or the walk failed). */
	__u64 kernel_stack_id;
};
_Static_assert(sizeof(struct kiln_sample_key) == 32, "kiln_sample_key layout");

/*
 * Value of the `counts` hash map, and of `off_cpu_counts` (same key: there
 * the stacks are where the thread was when it went off CPU).
 */
struct kiln_sample_value {
	/* Samples with this key; in `off_cpu_counts`, nanoseconds off CPU.
	 * Added to atomically. */
	__u64 count;
	/* The thread's name (task->comm) when the key was first seen,
	 * NUL-padded. */
	char comm[16];
};
_Static_assert(sizeof(struct kiln_sample_value) == 24, "kiln_sample_value layout");

/*
 * Value of the `stacks` hash map (and the per-CPU `scratch` buffer): one
 * stack as bpf_get_stack() returns it, leaf first. Its key is a 64-bit
 * hash of (kind, addrs[0..len]), so the same stack always gets the same id
 * and the map needs no lock-step with user space.
 */
struct kiln_stack {
	/* Number of valid entries in addrs. */
	__u32 len;
	/* enum kiln_stack_flags. */
	__u32 flags;
	/* Instruction pointer first, then return addresses, leaf first. */
	__u64 addrs[KILN_MAX_STACK_DEPTH];
};
_Static_assert(sizeof(struct kiln_stack) == 8 + 8 * KILN_MAX_STACK_DEPTH, "kiln_stack layout");

/* Why a process is announced in `new_processes`. */
enum kiln_process_event {
	/* kiln_sample() saw it for the first time (as far as the
	 * `known_processes` LRU remembers): it may predate the agent. */
	KILN_PROCESS_SAMPLED = 1,
	/* It called execve (kiln_exec()): its mappings are new. */
	KILN_PROCESS_EXEC = 2,
	/* Its stack walk met an address in none of the mappings user space
	 * gave the program: it mapped something since (dlopen(), or libraries
	 * still being mapped by ld.so when its maps were read). */
	KILN_PROCESS_REMAPPED = 3,
	/* Its stack walk met a mapping whose table is not in unwind_tables
	 * (not built yet, or evicted): user space loads it again. */
	KILN_PROCESS_TABLE_MISSING = 4,
};

/*
 * A record of the `new_processes` ring buffer, so that user space reads a
 * process's maps while it is alive, not at the end of the interval, when a
 * short-lived process is gone.
 */
struct kiln_new_process {
	/* Process id (tgid). */
	__u32 tgid;
	/* enum kiln_process_event. */
	__u32 event;
};
_Static_assert(sizeof(struct kiln_new_process) == 8, "kiln_new_process layout");

/*
 * A record of the `gpu_launches` ring buffer: a CUDA kernel launch seen by
 * the uprobe on libkiln_cuda.so's kiln_cuda_launch_marker(correlation_id,
 * tid), with the id of the launching thread's user stack in the
 * `launch_stacks` map, so that the GPU frames of the launch hang under the
 * CPU code that made it. The stack goes apart: a training loop launches
 * thousands of kernels a second from a few stacks, and a record this
 * small keeps the ring buffer from filling between two reads.
 */
struct kiln_gpu_launch {
	/* Process id (tgid) and thread id of the launching thread. */
	__u32 tgid;
	__u32 tid;
	/* CUPTI's correlation id of the launch (the marker's first argument). */
	__u32 correlation_id;
	__u32 reserved;
	/* Key of the stack (a struct kiln_stack, leaf first) in `launch_stacks`. */
	__u64 stack_id;
};
_Static_assert(sizeof(struct kiln_gpu_launch) == 24, "kiln_gpu_launch layout");

/* The single entry of the `control` array: written by user space only. */
struct kiln_control {
	/* KILN_ABI_VERSION of the agent that loaded the program; the program
	 * records nothing until it matches its own. */
	__u32 abi_version;
	/* Current generation, stamped into every new kiln_sample_key. */
	__u32 generation;
	/* The cgroup v2 to profile (its id: the inode number of its
	 * directory), with the cgroups below it; 0 profiles every task. The
	 * programs drop samples, execs and GPU launches of other tasks. */
	__u64 cgroup_id;
	/* Its depth below the root cgroup (level 0): where the task's
	 * ancestors are compared with it. */
	__u32 cgroup_level;
	/* Always zero: explicit padding. */
	__u32 reserved;
	/* Off-CPU profiling: the shortest time off CPU that kiln_switch()
	 * counts, in ns; shorter waits are dropped. */
	__u64 off_cpu_threshold_ns;
};
_Static_assert(sizeof(struct kiln_control) == 32, "kiln_control layout");

/*
 * Value of the `off_cpu_start` map (key: the task_struct's address, which
 * kiln_switch() never dereferences): a thread that went off CPU, waiting,
 * and where. Kernel-side only: user space never reads this map, so it has
 * no mirror in abi.rs.
 */
struct kiln_off_cpu_start {
	/* bpf_ktime_get_ns() when it was switched out. */
	__u64 at_ns;
	/* Its process and thread ids. */
	__u32 tgid;
	__u32 tid;
	/* Key into `off_cpu_stacks` of its user stack. */
	__u64 user_stack_id;
	/* Its name (task->comm), for the count's value. */
	char comm[16];
};
_Static_assert(sizeof(struct kiln_off_cpu_start) == 40, "kiln_off_cpu_start layout");

/*
 * .eh_frame unwinding. User space (agent/src/unwind.rs) builds one table
 * per file; each is an array map of its own, sized to it, in the
 * `unwind_tables` hash of maps under the file's table id, shared by every
 * process that maps the file. `proc_mappings` holds, per process, an array
 * of its executable file mappings sorted by address, each naming its
 * file's table. One row of a table: from `pc` up to the next row's pc,
 * these rules hold. The return address is always at CFA - 8 on x86-64, so
 * it has no column.
 */
enum kiln_cfa_type {
	/* No FDE covers the address: fall back to frame pointers. */
	KILN_CFA_NONE = 0,
	/* CFA = rsp + cfa_offset. */
	KILN_CFA_RSP = 1,
	/* CFA = rbp + cfa_offset. */
	KILN_CFA_RBP = 2,
	/* PLT stub: CFA = rsp + 8, + 8 if (rip & 15) >= cfa_offset. */
	KILN_CFA_PLT = 3,
	/* A rule the walker does not evaluate: fall back to frame pointers. */
	KILN_CFA_UNSUPPORTED = 4,
	/* The return address is undefined: the outermost frame (_start,
	 * clone's child): the walk ends here. */
	KILN_CFA_END = 5,
};

enum kiln_rbp_type {
	/* rbp still holds the caller's value. */
	KILN_RBP_SAME = 0,
	/* The caller's rbp is saved at CFA + rbp_offset. */
	KILN_RBP_AT_CFA = 1,
	/* Saved where the walker does not look: the caller's rbp is lost. */
	KILN_RBP_UNSUPPORTED = 2,
};

/*
 * 8 bytes, so that a big library's table (LLVM's: about a million rows)
 * costs 8 MiB of kernel memory, not 16. Offsets that do not fit (a frame
 * of over 32 KiB) are written as KILN_CFA_UNSUPPORTED by user space.
 */
struct kiln_unwind_row {
	/* First address covered, as an offset from the table's base (the
	 * mapping's bias takes the base into account). */
	__u32 pc;
	/* Offset of the CFA from its base register (or the PLT threshold). */
	__s16 cfa_offset;
	/* Offset from the CFA of the saved rbp, for KILN_RBP_AT_CFA. */
	__s8 rbp_offset;
	/* enum kiln_cfa_type in the low 4 bits, enum kiln_rbp_type in the
	 * high 4. */
	__u8 rules;
};
_Static_assert(sizeof(struct kiln_unwind_row) == 8, "kiln_unwind_row layout");

/* Executable mappings one process's array in `proc_mappings` may hold:
 * the binary search takes 12 halvings. */
#define KILN_MAX_MAPPINGS 4096

/* One executable file mapping of a process. */
struct kiln_mapping {
	/* First runtime address. */
	__u64 start;
	/* One past the last runtime address. */
	__u64 end;
	/* runtime address - bias = the row pc (table-relative) of the
	 * address. */
	__u64 bias;
	/* Key of the file's table in `unwind_tables`; 0 when the file has
	 * none (no .eh_frame): its frames are walked by frame pointers. */
	__u32 table_id;
	/* Rows in the table. */
	__u32 rows_len;
};
_Static_assert(sizeof(struct kiln_mapping) == 32, "kiln_mapping layout");

/*
 * Stack entries that are not native addresses carry a tag in their top two
 * bits (native return addresses, below 2^47, never do): Python frames
 * 0b10, JVM frames 0b11.
 */
#define KILN_FRAME_TAG_MASK (3ULL << 62)

/*
 * Python frames. Where the native walk meets CPython's bytecode loop
 * (_PyEval_EvalFrameDefault), the interpreter frames that activation runs
 * take its place in the stack, each as one entry:
 *
 *   KILN_PY_FRAME | instr << KILN_PY_INSTR_SHIFT | code
 *
 * `code` is the code object's address (user-space addresses fit 47
 * bits); `instr` is where in its bytecode the frame is, in 2-byte code
 * units from the start of the bytecode, saturated at KILN_PY_INSTR_MAX
 * (3.10: f_lasti; 3.11+: the instruction pointer's distance from the code
 * object, which user space turns into code units). An entry with code 0
 * is a marker and `instr` an enum kiln_py_marker.
 */
#define KILN_PY_FRAME (2ULL << 62)
#define KILN_PY_INSTR_SHIFT 47
#define KILN_PY_INSTR_MAX 0x7fffULL
#define KILN_PY_CODE_MASK ((1ULL << KILN_PY_INSTR_SHIFT) - 1)

enum kiln_py_marker {
	/* The interpreter's frames could not be read. */
	KILN_PY_MARK_UNREADABLE = 1,
	/* An interpreter version the agent has no layout for. */
	KILN_PY_MARK_UNSUPPORTED = 2,
	/* The thread's state was not among the interpreter's threads. */
	KILN_PY_MARK_NO_THREAD = 3,
};

/* How one interpreter activation's frames end (kiln_python_proc.entry). */
enum kiln_py_entry {
	/* 3.10: one PyFrameObject per activation. */
	KILN_PY_ENTRY_ONE = 0,
	/* 3.11: the activation's first frame has is_entry set (and is the
	 * last one it runs). */
	KILN_PY_ENTRY_FLAG = 1,
	/* 3.12+: below the activation's first frame is a shim frame (owner
	 * >= owner_cstack: FRAME_OWNED_BY_CSTACK in 3.12 and 3.13,
	 * FRAME_OWNED_BY_INTERPRETER in 3.14), which is not a Python frame. */
	KILN_PY_ENTRY_SHIM = 2,
};

/*
 * Value of the `python_procs` hash map (key: tgid): where a Python
 * process's interpreter is and how its memory is laid out, written by user
 * space (agent/src/python/) when it reads the process's mappings. Offsets
 * are in bytes; KILN_PY_NONE means "no such field".
 */
#define KILN_PY_NONE 0xffffffffu
struct kiln_python_proc {
	/* Runtime addresses of _PyEval_EvalFrameDefault, [start, end). */
	__u64 eval_start;
	__u64 eval_end;
	/* Runtime address of _PyRuntime. */
	__u64 runtime;
	/* ANDed with a frame's code word (3.14 tags it). */
	__u64 code_mask;
	/* _PyRuntime.interpreters.head; PyInterpreterState's first thread. */
	__u32 interpreters_head;
	__u32 threads_head;
	/* PyThreadState: next; the id compared with the sampled thread's
	 * (3.11+: native_thread_id, its tid; 3.10: thread_id, pthread_self(),
	 * its fs base); where the current frame is. */
	__u32 tstate_next;
	__u32 tstate_thread_id;
	__u32 tstate_frame;
	/* 3.11/3.12: tstate_frame points at a _PyCFrame, whose current
	 * frame is here; KILN_PY_NONE elsewhere. */
	__u32 cframe_current_frame;
	/* The frame (3.10 PyFrameObject, 3.11+ _PyInterpreterFrame). */
	__u32 frame_previous;
	__u32 frame_code;
	__u32 frame_instr;
	/* is_entry (3.11) or owner (3.12+), a byte; see enum kiln_py_entry. */
	__u32 frame_entry;
	/* enum kiln_py_entry. */
	__u8 entry;
	/* The owner value of the shim frame (see KILN_PY_ENTRY_SHIM). */
	__u8 owner_cstack;
	/* 1 when frame_instr is a pointer into the code object (3.11+),
	 * 0 when it is 3.10's int f_lasti. */
	__u8 instr_is_pointer;
	/* 1 when tstate_thread_id holds the tid (3.11+), 0 when it holds
	 * pthread_self() (3.10). */
	__u8 thread_id_is_tid;
	/* 0 when the version has no layout: each activation becomes a
	 * KILN_PY_MARK_UNSUPPORTED marker. */
	__u32 supported;
};
_Static_assert(sizeof(struct kiln_python_proc) == 80, "kiln_python_proc layout");

/*
 * JVM frames. Where the walk meets a pc in a JVM's code cache, jvm_step()
 * reads that frame the JVM's way (interpreter frames by their frame
 * pointer, compiled code by its code blob's frame size) and puts in one
 * entry per physical frame:
 *
 *   KILN_JVM_FRAME | kind << KILN_JVM_KIND_SHIFT | payload
 *
 * INTERPRETED: bits 0..43 the Method* >> 3, bits 44..59 the bytecode
 *   index (KILN_JVM_NO_BCI when unknown).
 * CODE: bits 0..24 the code blob's segment index from the code cache's
 *   start (blob = code_start + (index << log2_segment) + heapblock_size),
 *   bits 25..46 the pc's offset in the blob (saturated). User space reads
 *   what the blob is: a compiled method (its Method*), or a stub.
 * MARKER: bits 0..15 an enum kiln_jvm_marker; the walk ends there.
 */
#define KILN_JVM_FRAME (3ULL << 62)
#define KILN_JVM_KIND_SHIFT 60
#define KILN_JVM_NO_BCI 0xffffULL
#define KILN_JVM_SEGMENT_BITS 25
#define KILN_JVM_OFFSET_MAX ((1ULL << 22) - 1)

enum kiln_jvm_kind {
	KILN_JVM_INTERPRETED = 0,
	KILN_JVM_CODE = 1,
	KILN_JVM_MARKER = 3,
};

enum kiln_jvm_marker {
	/* A JVM the agent has no layout for. */
	KILN_JVM_MARK_UNSUPPORTED = 1,
	/* A code-cache pc in no code blob. */
	KILN_JVM_MARK_NO_BLOB = 2,
	/* A JVM frame whose caller could not be found. */
	KILN_JVM_MARK_BAD_FRAME = 3,
};

/* Code heaps of one code cache: three when segmented, one otherwise. */
#define KILN_JVM_MAX_HEAPS 4

struct kiln_jvm_heap {
	/* The heap's code, [start, end), and its segment map. */
	__u64 start;
	__u64 end;
	__u64 segmap;
};

/* enum kiln_jvm_flags: how this build lays out a code blob. */
enum kiln_jvm_flags {
	/* _code_begin/_code_end are int offsets from the blob (JDK 23+),
	 * not pointers. */
	KILN_JVM_CODE_OFFSETS = 1,
};

/*
 * Value of the `jvm_procs` hash map (key: tgid): a JVM's code cache and
 * the offsets of the fields jvm_step() reads, written by user space
 * (agent/src/jvm/) from the JVM's own vmStructs tables. Offsets in bytes.
 */
struct kiln_jvm_proc {
	/* CodeCache::_low_bound, _high_bound. */
	__u64 code_start;
	__u64 code_end;
	/* The template interpreter's code, [start, end). */
	__u64 interp_start;
	__u64 interp_end;
	struct kiln_jvm_heap heaps[KILN_JVM_MAX_HEAPS];
	/* CodeBlob::_frame_size (int, words), _code_begin/_code_end
	 * (pointers, or int offsets: KILN_JVM_CODE_OFFSETS). */
	__u16 blob_frame_size;
	__u16 blob_code_begin;
	__u16 blob_code_end;
	/* Method::_constMethod; sizeof(ConstMethod) (its bytecodes follow
	 * it); ConstMethod::_code_size (u2). */
	__u16 method_const_method;
	__u16 const_method_size;
	__u16 const_method_code_size;
	__u8 heap_count;
	/* log2 of the code cache's segment size. */
	__u8 log2_segment;
	/* sizeof(HeapBlock): the header before each blob. */
	__u8 heapblock_size;
	/* enum kiln_jvm_flags. */
	__u8 flags;
	/* 0: each code-cache pc gives a KILN_JVM_MARK_UNSUPPORTED marker. */
	__u32 supported;
	__u32 reserved;
};
_Static_assert(sizeof(struct kiln_jvm_proc) == 152, "kiln_jvm_proc layout");

#endif /* KILN_TYPES_H */
