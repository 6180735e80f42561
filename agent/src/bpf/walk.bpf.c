// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * The walk's searches (walk.bpf.h calls them): which mapping holds an
 * address, which unwind-table row covers it, and CPython's current frame
 * and the frames after it. Global functions, each verified once on its
 * own; the maps only they read are defined here.
 */
#include "walk.bpf.h"

/*
 * One file's unwind table (struct kiln_unwind_row, sorted by pc), an array
 * of exactly its rows: BPF_F_INNER_MAP lets tables of every size share
 * `unwind_tables`, and BPF_F_MMAPABLE lets user space fill a table of a
 * million rows with one copy instead of a million syscalls. This is the
 * template; user space creates the real ones.
 */
struct unwind_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	/* Sizes, not types: clang emits the row struct to BTF only as a
	 * forward declaration here, which the loader cannot size. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct kiln_unwind_row));
};

/* The tables loaded, by table id (user space gives each file one). A file
 * mapped by a thousand processes has one table here. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__array(values, struct unwind_table);
} unwind_tables SEC(".maps");

/* A row found for an address: (table id, table-relative address). */
struct row_cache_key {
	__u32 table_id;
	__u32 addr;
};

/*
 * Rows found, by table and address: a table's rows never change under its
 * id (user space never reuses one), so an entry is never stale, even once
 * the table is evicted. A walk meets the same return addresses sample
 * after sample; one hash lookup then stands for the ~20 of the binary
 * search. LRU: the hot addresses stay.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct row_cache_key);
	__type(value, __u64);
} row_cache SEC(".maps");

/* A Python thread's PyThreadState, by pid_tgid, once found among its
 * interpreter's threads: a cache, checked against the thread's id at each
 * use (a thread state can be freed and its thread id reused). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} python_threads SEC(".maps");

/*
 * Tells user space that the current process needs its mappings read again
 * (`why`: it maps code it was not told of, or one of its tables is
 * missing): the first time at once, then backing off (see `remapped_at`).
 * A global function, verified once on its own: inlined into the
 * unwinder's loop it multiplies the states the verifier walks.
 */
__attribute__((noinline)) int announce_again(__u32 why)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 now = bpf_ktime_get_ns();
	struct remap_backoff *last = bpf_map_lookup_elem(&remapped_at, &tgid);
	struct remap_backoff next = { .at_ns = now, .wait_ns = KILN_REMAP_FIRST_WAIT_NS };

	if (last) {
		if (now - last->at_ns < last->wait_ns)
			return 0;
		next.wait_ns = last->wait_ns * 2;
		if (next.wait_ns > KILN_REMAP_MAX_WAIT_NS)
			next.wait_ns = KILN_REMAP_MAX_WAIT_NS;
	}
	bpf_map_update_elem(&remapped_at, &tgid, &next, BPF_ANY);
	announce(tgid, why);
	return 1;
}


/*
 * The index in the process's `proc_mappings` list of the mapping of `pc`,
 * or -1. The list's length is not stored: a lookup past its end finds
 * nothing, which counts as a start above pc. A global function, so the
 * verifier checks it once with unknown arguments instead of following
 * every path of the search at every call; `max` (KILN_MAX_MAPPINGS) is an
 * argument for the same reason: a constant bound would let the verifier
 * tell every path of the search apart, 2^12 of them.
 */
__attribute__((noinline)) int find_mapping(__u32 tgid, __u64 pc, __u32 max)
{
	void *list = bpf_map_lookup_elem(&proc_mappings, &tgid);

	if (!list || max > KILN_MAX_MAPPINGS)
		return -1;
	__u32 lo = 0, hi = max;

	/* First mapping whose start is > pc; 12 halvings cover 4096. */
	for (int i = 0; i < 13; i++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2;
		struct kiln_mapping *m = bpf_map_lookup_elem(list, &mid);

		if (m && m->start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	__u32 idx = lo - 1;
	struct kiln_mapping *m = bpf_map_lookup_elem(list, &idx);

	if (!m || pc >= m->end)
		return -1;
	return idx;
}

/*
 * The row of table `table_id` (of `len` rows) that covers the
 * table-relative address `addr`, as its 8 bytes (struct kiln_unwind_row,
 * little-endian); KILN_ROW_TABLE_MISSING when the table is not loaded,
 * KILN_ROW_NONE when no row covers it. Global for the same reason; a row
 * fits the return value, so the caller needs no second lookup.
 */
__attribute__((noinline)) __u64 find_row(__u32 table_id, __u32 len, __u64 addr)
{
	void *rows = bpf_map_lookup_elem(&unwind_tables, &table_id);

	if (!rows)
		return KILN_ROW_TABLE_MISSING;
	if (addr > 0xffffffffULL)
		return KILN_ROW_NONE;
	__u32 lo = 0, hi = len;

	/* First row whose pc is > addr; 24 halvings cover 16M rows. */
	for (int i = 0; i < 25; i++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2;
		struct kiln_unwind_row *row = bpf_map_lookup_elem(rows, &mid);

		/* Past the array's end (len is only an upper bound until
		 * user space knows the table's size): above every pc. */
		if (row && row->pc <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return KILN_ROW_NONE;
	__u32 idx = lo - 1;
	struct kiln_unwind_row *row = bpf_map_lookup_elem(rows, &idx);

	if (!row)
		return KILN_ROW_NONE;
	__u64 packed;

	__builtin_memcpy(&packed, row, sizeof(packed));
	return packed;
}

/*
 * find_row() through `row_cache`: a row found is remembered. Global, like
 * find_row(): its two ways to a row, inlined into the walk's loop, doubled
 * the states the verifier walks at every frame.
 */
__attribute__((noinline)) __u64 cached_row(__u32 table_id, __u32 len, __u64 addr)
{
	if (addr > 0xffffffffULL)
		return KILN_ROW_NONE;
	struct row_cache_key key = { .table_id = table_id, .addr = (__u32)addr };
	__u64 *cached = bpf_map_lookup_elem(&row_cache, &key);

	if (cached)
		return *cached;
	__u64 row = find_row(table_id, len, addr);

	if (row != KILN_ROW_TABLE_MISSING && row != KILN_ROW_NONE)
		bpf_map_update_elem(&row_cache, &key, &row, BPF_ANY);
	return row;
}

/* Python frame pointers and markers apart: no frame is in the first page. */
#define KILN_PY_MIN_FRAME 4096

/* Reads a u64 of the interpreter's memory; nonzero when it cannot. */
static __always_inline long py_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr);
}

/*
 * The current Python frame of the sampled thread of process `tgid`: its
 * thread state is found in `python_threads`, or else among its
 * interpreter's threads (the main interpreter's, at most 64); 0 when the
 * thread runs no Python frame, a KILN_PY_MARK_* when it cannot tell. A
 * global function, verified once, like find_mapping().
 */
__attribute__((noinline)) __u64 python_current_frame(__u32 tgid)
{
	struct kiln_python_proc *py = bpf_map_lookup_elem(&python_procs, &tgid);

	if (!py)
		return KILN_PY_MARK_UNREADABLE;
	if (!py->supported)
		return KILN_PY_MARK_UNSUPPORTED;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 me;

	if (py->thread_id_is_tid) {
		me = (__u32)pid_tgid;
	} else {
		struct task_struct *task = bpf_get_current_task_btf();

		me = BPF_CORE_READ(task, thread.fsbase);
	}
	__u64 ts = 0, id = 0;
	__u64 *cached = bpf_map_lookup_elem(&python_threads, &pid_tgid);

	if (cached) {
		ts = *cached;
		if (py_read(&id, ts + py->tstate_thread_id) || id != me)
			ts = 0;
	}
	if (!ts) {
		__u64 t = 0;

		if (py_read(&t, py->runtime + py->interpreters_head) ||
		    py_read(&t, t + py->threads_head))
			return KILN_PY_MARK_UNREADABLE;
		for (int i = 0; i < 64 && t; i++) {
			if (py_read(&id, t + py->tstate_thread_id))
				return KILN_PY_MARK_UNREADABLE;
			if (id == me) {
				ts = t;
				break;
			}
			if (py_read(&t, t + py->tstate_next))
				return KILN_PY_MARK_UNREADABLE;
		}
		if (!ts)
			return KILN_PY_MARK_NO_THREAD;
		bpf_map_update_elem(&python_threads, &pid_tgid, &ts, BPF_ANY);
	}
	__u64 frame = 0;

	if (py_read(&frame, ts + py->tstate_frame))
		return KILN_PY_MARK_UNREADABLE;
	if (py->cframe_current_frame != KILN_PY_NONE && frame &&
	    py_read(&frame, frame + py->cframe_current_frame))
		return KILN_PY_MARK_UNREADABLE;
	if (frame && frame < KILN_PY_MIN_FRAME)
		return KILN_PY_MARK_UNREADABLE;
	return frame;
}

/* A marker entry, counted. */
static __always_inline __u64 python_marker(__u64 mark)
{
	stat_inc(mark == KILN_PY_MARK_UNSUPPORTED  ? KILN_STAT_PY_UNSUPPORTED
		 : mark == KILN_PY_MARK_NO_THREAD ? KILN_STAT_PY_NO_THREAD
						  : KILN_STAT_PY_UNREADABLE);
	return KILN_PY_FRAME | (mark << KILN_PY_INSTR_SHIFT);
}

/*
 * Reads Python frame `frame` of process `tgid` (a KILN_PY_MARK_* stands
 * for a marker, which ends the Python part of the walk): writes the entry
 * it makes (0 for a shim frame, which is no Python frame) and the frame
 * after it to `python_step_out`, and returns KILN_PY_MORE while the
 * current activation has more frames. A global function, verified once on
 * its own: inlined into the walk's loop, its branches multiplied the
 * states the verifier walks past its limit.
 */
__attribute__((noinline)) int python_step(__u32 tgid, __u64 frame)
{
	__u32 zero = 0;
	struct python_step_out *out = bpf_map_lookup_elem(&python_step_out, &zero);
	struct kiln_python_proc *py = bpf_map_lookup_elem(&python_procs, &tgid);

	if (!out)
		return 0;
	out->entry = 0;
	out->next = 0;
	if (frame == 0)
		return 0;
	if (frame < KILN_PY_MIN_FRAME || !py) {
		out->entry = python_marker(frame < KILN_PY_MIN_FRAME ? frame : KILN_PY_MARK_UNREADABLE);
		return 0;
	}
	__u64 code = 0, prev = 0, instr = 0;
	__u8 entry = 0;

	if (py_read(&prev, frame + py->frame_previous) || py_read(&code, frame + py->frame_code) ||
	    (py->entry != KILN_PY_ENTRY_ONE &&
	     bpf_probe_read_user(&entry, sizeof(entry), (const void *)(frame + py->frame_entry)))) {
		out->entry = python_marker(KILN_PY_MARK_UNREADABLE);
		return 0;
	}
	code &= py->code_mask;
	out->next = prev;
	/* 3.12+: the shim below an activation's first frame ends it. */
	if (py->entry == KILN_PY_ENTRY_SHIM && entry >= py->owner_cstack)
		return 0;
	if (code == 0 || code > KILN_PY_CODE_MASK) {
		out->entry = python_marker(KILN_PY_MARK_UNREADABLE);
		out->next = 0;
		return 0;
	}
	if (py->instr_is_pointer) {
		__u64 ip = 0;

		if (!py_read(&ip, frame + py->frame_instr) && ip > code)
			instr = (ip - code) / 2;
	} else {
		__s32 lasti = 0;

		if (!bpf_probe_read_user(&lasti, sizeof(lasti), (const void *)(frame + py->frame_instr)) &&
		    lasti > 0)
			instr = lasti;
	}
	if (instr > KILN_PY_INSTR_MAX)
		instr = KILN_PY_INSTR_MAX;
	out->entry = KILN_PY_FRAME | (instr << KILN_PY_INSTR_SHIFT) | code;
	stat_inc(KILN_STAT_PY_FRAMES);
	if (py->entry == KILN_PY_ENTRY_ONE || (py->entry == KILN_PY_ENTRY_FLAG && entry))
		return 0;
	return prev ? KILN_PY_MORE : 0;
}

/* Reads a u64 of the JVM's memory; nonzero when it cannot. */
static __always_inline long jvm_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr);
}

/* Words searched above sp for a return address into the code cache, where
 * a frame's own rule fails (a compiled method's prologue or epilogue at
 * the leaf). */
#define KILN_JVM_RA_SEARCH 6
/* Segment-map hops to a blob's start: the map's bytes lead back at most
 * 255 segments a hop. */
#define KILN_JVM_MAX_HOPS 32
/* The deepest a frame believed: 1 MiB. */
#define KILN_JVM_MAX_FRAME (1ULL << 20)

static __always_inline int jvm_in_code(struct kiln_jvm_proc *p, __u64 pc)
{
	return pc >= p->code_start && pc < p->code_end;
}

/* A marker entry ends the walk; counted. */
static __always_inline int jvm_marker(struct jvm_step_io *io, __u64 mark)
{
	if (mark == KILN_JVM_MARK_NO_BLOB)
		stat_inc(KILN_STAT_JVM_NO_BLOB);
	else if (mark == KILN_JVM_MARK_BAD_FRAME)
		stat_inc(KILN_STAT_JVM_BAD_FRAME);
	io->entry = KILN_JVM_FRAME | ((__u64)KILN_JVM_MARKER << KILN_JVM_KIND_SHIFT) | mark;
	return 0;
}

/* Finds, above `sp`, a word that is a return address into the code cache:
 * the caller is past it. 0 when none is. */
static __always_inline int jvm_search_ra(struct kiln_jvm_proc *p, struct jvm_step_io *io)
{
	for (int i = 0; i < KILN_JVM_RA_SEARCH; i++) {
		__u64 at = io->sp + 8 * i, ra = 0;

		if (jvm_read(&ra, at))
			return 0;
		if (jvm_in_code(p, ra)) {
			io->pc = ra;
			io->sp = at + 8;
			stat_inc(KILN_STAT_JVM_GUESSED);
			return 1;
		}
	}
	return 0;
}

/*
 * Reads one frame of the JVM of process `tgid`, whose (pc, sp, bp, r13)
 * are in `jvm_step_io` (`leaf`: the sampled frame, whose pc is not a
 * return address): writes the entry it makes and its caller's frame
 * there. Returns 1 when the walk goes on with that caller, 0 when it ends
 * (the entry is then a marker).
 *
 * - The interpreter's frames are rbp-framed, with the Method* at fp[-3],
 *   the bytecode pointer at fp[-8] (in r13 while the leaf runs), the
 *   caller's sp at fp[-1] (frame_x86.hpp; user space checks the JVM
 *   describes the same slots).
 * - Any other pc's code blob is found through its heap's segment map; a
 *   blob with a frame size (compiled Java, runtime stubs) is unwound by
 *   it: the return address is below sp + size, rbp saved below that. A
 *   blob without one (the call stub, adapters) keeps rbp framed, or, at
 *   the leaf, only pushed the return address.
 *
 * A global function, verified once on its own.
 */
__attribute__((noinline)) int jvm_step(__u32 tgid, __u32 leaf)
{
	__u32 zero = 0;
	struct jvm_step_io *io = bpf_map_lookup_elem(&jvm_step_io, &zero);
	struct kiln_jvm_proc *p = bpf_map_lookup_elem(&jvm_procs, &tgid);

	if (!io)
		return 0;
	io->entry = 0;
	if (!p || !p->supported)
		return jvm_marker(io, KILN_JVM_MARK_UNSUPPORTED);
	__u64 pc = io->pc, sp = io->sp, bp = io->bp;
	__u64 lookup = leaf ? pc : pc - 1;

	stat_inc(KILN_STAT_JVM_FRAMES);
	if (lookup >= p->interp_start && lookup < p->interp_end) {
		__u64 frame[2] = {}, sender_sp = 0, method = 0, bcp = 0;

		if (bp >= sp && bp - sp < KILN_JVM_MAX_FRAME &&
		    !bpf_probe_read_user(frame, sizeof(frame), (const void *)bp) &&
		    !jvm_read(&sender_sp, bp - 8) && !jvm_read(&method, bp - 24) &&
		    !jvm_read(&bcp, bp - 64) && sender_sp >= bp + 16 &&
		    sender_sp - bp < KILN_JVM_MAX_FRAME && method && !(method & 7) &&
		    method < (1ULL << 47)) {
			__u64 cm = 0, bci = KILN_JVM_NO_BCI;
			__u16 code_size = 0;

			if (!jvm_read(&cm, method + p->method_const_method) &&
			    !bpf_probe_read_user(&code_size, sizeof(code_size),
						 (const void *)(cm + p->const_method_code_size))) {
				__u64 codes = cm + p->const_method_size;

				if (leaf && io->r13 >= codes && io->r13 < codes + code_size)
					bcp = io->r13;
				if (bcp >= codes && bcp < codes + code_size)
					bci = bcp - codes;
			}
			io->entry = KILN_JVM_FRAME |
				    ((__u64)KILN_JVM_INTERPRETED << KILN_JVM_KIND_SHIFT) |
				    (bci << 44) | (method >> 3);
			io->pc = frame[1];
			io->sp = sender_sp;
			io->bp = frame[0];
			return 1;
		}
		/* The interpreter's entry code, before it built the frame. */
		io->entry = KILN_JVM_FRAME | ((__u64)KILN_JVM_INTERPRETED << KILN_JVM_KIND_SHIFT) |
			    (KILN_JVM_NO_BCI << 44);
		if (leaf && jvm_search_ra(p, io))
			return 1;
		return jvm_marker(io, KILN_JVM_MARK_BAD_FRAME);
	}

	/* The blob: its heap, then its segment map back to its start. */
	__u64 start = 0, segmap = 0;

	for (int i = 0; i < KILN_JVM_MAX_HEAPS; i++) {
		if (i < p->heap_count && lookup >= p->heaps[i].start && lookup < p->heaps[i].end) {
			start = p->heaps[i].start;
			segmap = p->heaps[i].segmap;
			break;
		}
	}
	__u32 log2 = p->log2_segment & 31;

	if (!start)
		return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
	__u64 seg = (lookup - start) >> log2;
	int found = 0;

	for (int i = 0; i < KILN_JVM_MAX_HOPS; i++) {
		__u8 hop = 0xff;

		if (bpf_probe_read_user(&hop, sizeof(hop), (const void *)(segmap + seg)) ||
		    hop == 0xff)
			break;
		if (hop == 0) {
			found = 1;
			break;
		}
		if (hop > seg)
			break;
		seg -= hop;
	}
	if (!found)
		return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
	__u64 blob = start + (seg << log2) + p->heapblock_size;
	__s32 frame_size = 0;
	__u64 begin = 0, end = 0;

	if (bpf_probe_read_user(&frame_size, sizeof(frame_size),
				(const void *)(blob + p->blob_frame_size)))
		return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
	if (p->flags & KILN_JVM_CODE_OFFSETS) {
		__s32 b = 0, e = 0;

		if (bpf_probe_read_user(&b, sizeof(b), (const void *)(blob + p->blob_code_begin)) ||
		    bpf_probe_read_user(&e, sizeof(e), (const void *)(blob + p->blob_code_end)))
			return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
		begin = blob + b;
		end = blob + e;
	} else if (jvm_read(&begin, blob + p->blob_code_begin) ||
		   jvm_read(&end, blob + p->blob_code_end)) {
		return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
	}
	if (lookup < begin || lookup >= end)
		return jvm_marker(io, KILN_JVM_MARK_NO_BLOB);
	__u64 offset = pc - blob;

	if (offset > KILN_JVM_OFFSET_MAX)
		offset = KILN_JVM_OFFSET_MAX;
	__u64 index = (blob - p->code_start) >> log2;

	io->entry = KILN_JVM_FRAME | ((__u64)KILN_JVM_CODE << KILN_JVM_KIND_SHIFT) |
		    (offset << KILN_JVM_SEGMENT_BITS) |
		    (index & ((1ULL << KILN_JVM_SEGMENT_BITS) - 1));

	if (frame_size > 0) {
		/* The caller's sp is sp + frame size; the return address and
		 * the saved rbp are just below it. */
		__u64 caller_sp = sp + 8 * (__u64)frame_size, ra = 0, saved_bp = 0;

		if (frame_size < (KILN_JVM_MAX_FRAME >> 3) && !jvm_read(&ra, caller_sp - 8) &&
		    jvm_in_code(p, ra) && !jvm_read(&saved_bp, caller_sp - 16)) {
			io->pc = ra;
			io->sp = caller_sp;
			io->bp = saved_bp;
			return 1;
		}
		/* A prologue or an epilogue: the frame is not (or no longer)
		 * its full size. */
		if (leaf && jvm_search_ra(p, io))
			return 1;
		return jvm_marker(io, KILN_JVM_MARK_BAD_FRAME);
	}
	/* No frame size: rbp-framed stubs (the call stub, whose caller is
	 * native), or, at the leaf, one that only pushed its return address
	 * (or none: an adapter jumps). */
	if (!leaf || (bp >= sp && bp - sp < 4096)) {
		__u64 frame[2] = {};

		if (!bpf_probe_read_user(frame, sizeof(frame), (const void *)bp) && frame[1] &&
		    bp + 16 > sp) {
			io->pc = frame[1];
			io->sp = bp + 16;
			io->bp = frame[0];
			return 1;
		}
		if (!leaf)
			return jvm_marker(io, KILN_JVM_MARK_BAD_FRAME);
	}
	if (jvm_search_ra(p, io))
		return 1;
	return jvm_marker(io, KILN_JVM_MARK_BAD_FRAME);
}
