// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * The user-stack walk, shared by the CPU sampler, the GPU launch uprobe
 * and the off-CPU program: with the .eh_frame tables user space loaded
 * for the process's files, by frame pointers where a file has none (or
 * its table is not loaded yet). How each CPU sample's walk ended is
 * counted in `stats` (KILN_STAT_WALK_*), so a user can see what share of
 * stacks reached their root.
 *
 * Where the walk meets CPython's bytecode loop, the Python frames it runs
 * take its place (python_frame()), read from the interpreter's memory with
 * the offsets user space gives per process (`python_procs`). Where it
 * meets a pc in a JVM's code cache, that frame is read the JVM's way
 * (jvm_step(), with the offsets in `jvm_procs`), one per iteration, until
 * a frame returns to native code again.
 *
 * The walk's loop body is here, static, so that each program's copy is
 * verified with its caller's state; the searches it calls are global
 * functions in walk.bpf.c, each verified once with unknown arguments.
 */
#ifndef KILN_WALK_BPF_H
#define KILN_WALK_BPF_H

#include "kiln.bpf.h"

/* Table ids user space evicted for room (and has not loaded again): a walk
 * that misses one of these says EVICTED rather than NO_TABLE. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} evicted_tables SEC(".maps") __weak;

/* One process's executable file mappings (struct kiln_mapping, sorted by
 * start), an array of exactly that many: past its end a lookup finds
 * nothing, which the binary search reads as "above every start". */
struct proc_mapping_list {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	/* Sizes, not types, as in struct unwind_table. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct kiln_mapping));
};

/* Per process (tgid): its mappings. User space replaces a process's list
 * whole, and deletes it when the process exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__array(values, struct proc_mapping_list);
} proc_mappings SEC(".maps") __weak;

/* Python processes (by tgid): where their interpreter is and its layout.
 * Written by user space; see struct kiln_python_proc. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct kiln_python_proc);
} python_procs SEC(".maps") __weak;

/* What python_step() found: the entry to put in the stack (0: none) and
 * the frame after it. */
struct python_step_out {
	__u64 entry;
	__u64 next;
};

/* python_step()'s answer, per CPU (a global function returns one scalar). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct python_step_out);
} python_step_out SEC(".maps") __weak;

/* python_step()'s return value: the activation has more frames. */
#define KILN_PY_MORE 1

/* JVM processes (by tgid): their code cache and the offsets jvm_step()
 * reads. Written by user space; see struct kiln_jvm_proc. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct kiln_jvm_proc);
} jvm_procs SEC(".maps") __weak;

/* jvm_step()'s arguments and answer, per CPU (a global function takes
 * and returns scalars only): the frame in, the entry to put in the stack
 * and the caller's frame out. */
struct jvm_step_io {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u64 r13;
	__u64 entry;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jvm_step_io);
} jvm_step_io SEC(".maps") __weak;

/* The walk's global functions (walk.bpf.c); each says why it is global. */
int announce_again(__u32 why);
int find_mapping(__u32 tgid, __u64 pc, __u32 max);
__u64 cached_row(__u32 table_id, __u32 len, __u64 addr);
__u64 python_current_frame(__u32 tgid);
int python_step(__u32 tgid, __u64 frame);
int jvm_step(__u32 tgid, __u32 leaf);

/* The state of one .eh_frame walk, shared with the bpf_loop() callback. */
struct unwind_state {
	struct kiln_stack *buf;
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 tgid;
	__u32 n;
	/* Whether the walk reached its last frame (rather than the depth
	 * limit). */
	__u32 done;
	/* KILN_STAT_WALK_* once done. */
	__u32 outcome;
	/* The first reason a frame was walked without its table
	 * (KILN_STAT_WALK_NO_TABLE, _EVICTED or _NO_MAPPING), 0 if none: if
	 * the walk then breaks, that is why. */
	__u32 suspect;
	/* Whether user space gave the process's mappings. */
	__u32 has_mappings;
	/* Whether the walk is past its leaf frame. (Flags, not counts,
	 * here: the verifier tells loop states apart by every value they
	 * branch on, and counters would keep it from ever seeing a state
	 * again.) */
	__u32 past_leaf;
	/* Python: the process's _PyEval_EvalFrameDefault, [start, end); 0
	 * when it is not a Python process. */
	__u64 py_eval_start;
	__u64 py_eval_end;
	/* The next Python frame to put in the stack; a KILN_PY_MARK_* (< 4096)
	 * for a marker; 0 when there are none. Looked up at the walk's first
	 * activation (py_looked_up). */
	__u64 py_frame;
	__u32 py_looked_up;
	/* Whether the walk is in an activation: its native frame is the
	 * current one, and its Python frames go in first. */
	__u32 py_active;
	/* Whether the current activation put a Python frame in the stack. */
	__u32 py_pushed;
	__u32 py_reserved;
	/* JVM: the process's code cache, [start, end); 0 when it is not a
	 * JVM (or its JVM is not read). */
	__u64 jvm_code_start;
	__u64 jvm_code_end;
	/* The leaf's r13: where the interpreter keeps its bytecode pointer. */
	__u64 r13;
};

/* What find_row() returns when the table is not loaded, and when no row
 * covers the address; a row's top byte (its rules) is never 0xff. */
#define KILN_ROW_TABLE_MISSING (~0ULL)
#define KILN_ROW_NONE (~0ULL - 1)

/* A frame's table is not loaded: remember why for the walk's outcome, and
 * ask user space (backing off) to load it. */
static __always_inline void table_missing(struct unwind_state *st, __u32 table_id)
{
	if (!st->suspect)
		st->suspect = bpf_map_lookup_elem(&evicted_tables, &table_id)
				      ? KILN_STAT_WALK_EVICTED
				      : KILN_STAT_WALK_NO_TABLE;
	announce_again(KILN_PROCESS_TABLE_MISSING);
}

/*
 * Puts the current activation's next Python frame in the stack (at most
 * one entry). Returns 1 while the activation has more frames, 0 once it
 * is over (its native frame is then stepped past, or, when it put no
 * frame at all, kept as a native frame).
 */
static __always_inline int python_frame(struct unwind_state *st)
{
	__u32 zero = 0;
	int more = python_step(st->tgid, st->py_frame);
	struct python_step_out *out = bpf_map_lookup_elem(&python_step_out, &zero);
	struct kiln_stack *buf = st->buf;
	__u32 n = st->n;

	if (!out || !buf) {
		st->py_frame = 0;
		return 0;
	}
	st->py_frame = out->next;
	if (out->entry && n < KILN_MAX_STACK_DEPTH) {
		buf->addrs[n] = out->entry;
		st->n = n + 1;
		st->py_pushed = 1;
	}
	return more == KILN_PY_MORE;
}

/*
 * One JVM frame (st->pc is in the code cache): jvm_step() reads it and its
 * caller; the entry it makes goes in the stack. Returns 1 when the walk
 * ends here (a marker, or a frame whose caller was not found), else 0,
 * with st's frame the caller's. Only copies and the call: branches here
 * would be multiplied by every state of the loop.
 */
static __always_inline int jvm_frame(struct unwind_state *st)
{
	__u32 zero = 0;
	struct jvm_step_io *io = bpf_map_lookup_elem(&jvm_step_io, &zero);
	struct kiln_stack *buf = st->buf;
	__u32 n = st->n;

	if (!io || !buf)
		return 1;
	io->pc = st->pc;
	io->sp = st->sp;
	io->bp = st->bp;
	io->r13 = st->r13;
	int more = jvm_step(st->tgid, !st->past_leaf);

	if (io->entry && n < KILN_MAX_STACK_DEPTH) {
		buf->addrs[n] = io->entry;
		st->n = n + 1;
	}
	st->past_leaf = 1;
	if (!more || io->sp <= st->sp) {
		st->outcome = st->suspect ? st->suspect : KILN_STAT_WALK_BAD_FRAME;
		st->done = 1;
		return 1;
	}
	st->pc = io->pc;
	st->sp = io->sp;
	st->bp = io->bp;
	return 0;
}

/*
 * One frame of the walk: from (pc, sp, bp) of a frame, find its caller's.
 * Where the table has a rule it is followed; elsewhere (no table, no FDE,
 * or a rule the table marks unsupported) the frame-pointer chain is, as
 * the kernel's own walk would.
 */
static long unwind_step(__u64 index, void *data)
{
	struct unwind_state *st = data;
	struct kiln_stack *buf = st->buf;
	__u32 n = st->n;

	if (!buf || n >= KILN_MAX_STACK_DEPTH)
		return 1;
	/* A JVM's code: its interpreter or compiled Java, or its stubs. */
	if (st->pc >= st->jvm_code_start && st->pc < st->jvm_code_end)
		return jvm_frame(st);
	/* Past the leaf, pc is a return address: look up the call. */
	__u64 lookup = st->past_leaf ? st->pc - 1 : st->pc;

	/* CPython's bytecode loop: its Python frames go in its place, one per
	 * iteration, before it is stepped past. */
	if (st->py_eval_end && lookup >= st->py_eval_start && lookup < st->py_eval_end) {
		if (!st->py_active) {
			st->py_active = 1;
			st->py_pushed = 0;
			if (!st->py_looked_up) {
				st->py_looked_up = 1;
				st->py_frame = python_current_frame(st->tgid);
			}
		}
		if (python_frame(st))
			return 0;
		st->py_active = 0;
	}
	if (!st->py_pushed) {
		n = st->n;
		if (n >= KILN_MAX_STACK_DEPTH)
			return 1;
		buf->addrs[n] = st->pc;
		st->n = n + 1;
	}
	st->py_pushed = 0;
	st->past_leaf = 1;
	__u64 cfa = 0, ra = 0, bp = st->bp;
	__u64 row = KILN_ROW_NONE;
	int mi = find_mapping(st->tgid, lookup, KILN_MAX_MAPPINGS);

	if (mi >= 0) {
		__u32 idx = mi;
		void *list = bpf_map_lookup_elem(&proc_mappings, &st->tgid);
		struct kiln_mapping *m = list ? bpf_map_lookup_elem(list, &idx) : NULL;

		if (m && m->table_id) {
			row = cached_row(m->table_id, m->rows_len, lookup - m->bias);
			if (row == KILN_ROW_TABLE_MISSING) {
				table_missing(st, m->table_id);
				row = KILN_ROW_NONE;
			}
		}
	} else {
		if (!st->suspect)
			st->suspect = KILN_STAT_WALK_NO_MAPPING;
		/* An address in none of the mappings user space gave: it
		 * mapped code since. (A process without mappings is not
		 * loaded yet: nothing is known to miss.) */
		if (st->has_mappings)
			announce_again(KILN_PROCESS_REMAPPED);
	}
	/* KILN_ROW_NONE's rules (0xff) are no CFA type: frame pointers. */
	__u8 rules = row >> 56;
	__u8 cfa_type = rules & 15;
	__u8 rbp_type = rules >> 4;
	__s64 cfa_offset = (__s16)(row >> 32);
	__s64 rbp_offset = (__s8)(row >> 48);

	switch (cfa_type) {
	case KILN_CFA_END:
		st->outcome = KILN_STAT_WALK_ROOTED;
		goto stop;
	case KILN_CFA_RSP:
		cfa = st->sp + cfa_offset;
		break;
	case KILN_CFA_RBP:
		cfa = st->bp + cfa_offset;
		break;
	case KILN_CFA_PLT:
		cfa = st->sp + 8 + ((st->pc & 15) >= (__u64)cfa_offset ? 8 : 0);
		break;
	default:
		/* Frame pointers: the caller's rbp at [rbp], return address
		 * above it. A zero rbp is where _start and clone's child
		 * begin the chain. */
		if (st->bp == 0) {
			st->outcome = st->suspect ? st->suspect : KILN_STAT_WALK_ROOTED;
			goto stop;
		}
		cfa = st->bp + 16;
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)st->bp))
			goto broken;
		break;
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
		goto broken;
	if (cfa_type != KILN_CFA_NONE && cfa_type <= KILN_CFA_PLT) {
		if (rbp_type == KILN_RBP_AT_CFA) {
			if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + rbp_offset)))
				bp = 0;
		} else if (rbp_type == KILN_RBP_UNSUPPORTED) {
			bp = 0;
		}
	}
	/* The stack grows down: a caller's frame is above its callee's. */
	if (ra == 0 || cfa <= st->sp)
		goto broken;
	st->pc = ra;
	st->sp = cfa;
	st->bp = bp;
	if (st->n >= KILN_MAX_STACK_DEPTH) {
		st->outcome = KILN_STAT_WALK_DEPTH;
		return 1;
	}
	return 0;
broken:
	st->outcome = st->suspect ? st->suspect : KILN_STAT_WALK_BAD_FRAME;
stop:
	st->done = 1;
	return 1;
}

/*
 * Walks the current task's user stack, from `pc`/`sp`/`bp` (leaf first),
 * into `buf` from slot `st->n`: with the process's tables where it has
 * them, by frame pointers elsewhere.
 */
static __always_inline void walk_user(struct unwind_state *st)
{
	struct kiln_python_proc *py = bpf_map_lookup_elem(&python_procs, &st->tgid);

	struct kiln_jvm_proc *jvm = bpf_map_lookup_elem(&jvm_procs, &st->tgid);

	if (py) {
		st->py_eval_start = py->eval_start;
		st->py_eval_end = py->eval_end;
	}
	if (jvm) {
		st->jvm_code_start = jvm->code_start;
		st->jvm_code_end = jvm->code_end;
	}
	st->has_mappings = bpf_map_lookup_elem(&proc_mappings, &st->tgid) != NULL;
	/* Not loaded yet: whatever breaks the walk, a table would have
	 * helped. */
	if (!st->has_mappings)
		st->suspect = KILN_STAT_WALK_NO_TABLE;
	st->outcome = KILN_STAT_WALK_DEPTH;
	bpf_loop(KILN_MAX_STACK_DEPTH, unwind_step, st, 0);
}

#endif /* KILN_WALK_BPF_H */
