// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * Kiln's CPU sampler: a BPF_PROG_TYPE_PERF_EVENT program attached by
 * agent/src/sampler.rs to a CPU-clock perf event on every online CPU.
 *
 * Per sample it records the thread, its name, and its kernel and user
 * stacks, and adds one to a counter keyed by all of them. User space drains
 * the counters once per interval (agent/src/sampler.rs, Sampler::drain).
 *
 * Why aggregate here rather than push every sample through a ring buffer:
 * a sample with both stacks is up to 2 KiB, and most samples of an interval
 * repeat a stack seen before. Counting in a hash map costs the program one
 * lookup and an atomic add on the hot path, and user space reads each
 * distinct stack once per interval rather than once per sample, so the
 * agent's work grows with the number of distinct stacks, not the sampling
 * rate. The price is a bound on distinct keys per interval (map sizes are
 * set by user space from CPUs x frequency x interval, and overflows are
 * counted in `stats`, never silent).
 *
 * Stacks are stored in `stacks` under a content hash, so the same stack has
 * the same id in every interval and on every CPU. Kernel and user stacks
 * share the map (the hash is seeded with the kind).
 *
 * User stacks are walked here (record_user_stack(), unwind_step()): with
 * the .eh_frame tables user space loaded for the process's files, by frame
 * pointers where a file has none (or its table is not loaded yet). How each
 * walk ended is counted in `stats` (KILN_STAT_WALK_*), so a user can see
 * what share of stacks reached their root.
 *
 * Where the walk meets CPython's bytecode loop, the Python frames it runs
 * take its place (python_frame()), read from the interpreter's memory with
 * the offsets user space gives per process (`python_procs`).
 *
 * One kernel field is read by name, the thread's fs base, with CO-RE (for
 * CPython 3.10, which knows threads by pthread_self()); every other
 * kernel struct is copied whole (the user registers, from
 * bpf_task_pt_regs()): the UAPI headers (linux-libc-dev) and libbpf's
 * headers are all it includes.
 *
 * Minimum kernel: 5.17 (bpf_loop; bpf_task_pt_regs is 5.15).
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "types.h"

/*
 * The one kernel field read by name: the sampled thread's fs base, which
 * is its pthread_self() and what CPython 3.10 stores as a thread state's
 * thread_id. CO-RE: the loader finds the field in this kernel's BTF.
 */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
} __attribute__((preserve_access_index));

/* bpf_get_stack() is GPL-only, so the program must declare a GPL-compatible
 * licence for the kernel to load it; this file is dual-licensed for that. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Sizes are placeholders: sampler.rs sets max_entries before loading. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct kiln_sample_key);
	__type(value, struct kiln_sample_value);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct kiln_stack);
} stacks SEC(".maps");

/* One struct kiln_stack per CPU: bpf_get_stack() needs a buffer larger
 * than the program's 512-byte stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_stack);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_control);
} control SEC(".maps");

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

/* Table ids user space evicted for room (and has not loaded again): a walk
 * that misses one of these says EVICTED rather than NO_TABLE. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} evicted_tables SEC(".maps");

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
} proc_mappings SEC(".maps");

/* Processes announced recently; LRU, so a process evicted by newer ones is
 * announced again, which user space's cache makes cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} known_processes SEC(".maps");

/* When a process was last announced as remapped, and how long it waits
 * before the next announcement. */
struct remap_backoff {
	__u64 at_ns;
	__u64 wait_ns;
};

/* Remap announcements back off per process: an address outside every
 * known mapping may be JIT code or a broken walk's garbage, which re-reading
 * the maps does not cure, so each announcement doubles the wait for the
 * next, from KILN_REMAP_FIRST_WAIT_NS to KILN_REMAP_MAX_WAIT_NS. A process
 * that loads a library now and then (a plugin, a CUDA runtime after its
 * start) is re-read within seconds; one that runs JIT code costs a read
 * a minute. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct remap_backoff);
} remapped_at SEC(".maps");

#define KILN_REMAP_FIRST_WAIT_NS (1000000000ULL)
#define KILN_REMAP_MAX_WAIT_NS (64ULL * 1000000000ULL)

/* Python processes (by tgid): where their interpreter is and its layout.
 * Written by user space; see struct kiln_python_proc. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct kiln_python_proc);
} python_procs SEC(".maps");

/* A Python thread's PyThreadState, by pid_tgid, once found among its
 * interpreter's threads: a cache, checked against the thread's id at each
 * use (a thread state can be freed and its thread id reused). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} python_threads SEC(".maps");

/* struct kiln_new_process records, read by user space every few ms. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} new_processes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KILN_STAT_NR);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_add(__u32 stat, __u64 n)
{
	__u64 *slot = bpf_map_lookup_elem(&stats, &stat);

	/* Per-CPU slot: no other CPU writes it, so no atomic is needed. */
	if (slot)
		*slot += n;
}

static __always_inline void stat_inc(__u32 stat)
{
	stat_add(stat, 1);
}

/*
 * Whether the current task is one the agent profiles: every task, or, when
 * user space set a cgroup, those in it or in a cgroup below it (its
 * ancestor at the cgroup's level is the cgroup). The GPU launch uprobe, on
 * a file any process may map, and the exec tracepoint, which fires for
 * every process on the host, filter too: outside tasks must cost user
 * space no /proc reads, no unwind tables and no GPU stacks.
 */
static __always_inline int profiled(const struct kiln_control *ctl)
{
	return ctl->cgroup_id == 0 ||
	       bpf_get_current_ancestor_cgroup_id(ctl->cgroup_level) == ctl->cgroup_id;
}

/* A 64-bit mix (the finaliser of MurmurHash3), so that ids of stacks that
 * differ in one frame spread over the whole map. */
static __always_inline __u64 mix64(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* The id of the stack in `buf`: a hash of (seed, addrs[0..len]), never 0
 * (which means "no stack" in a kiln_sample_key). */
static __always_inline __u64 stack_id(struct kiln_stack *buf, __u64 seed)
{
	__u32 len = buf->len;
	__u64 h = mix64(seed);

	for (__u32 i = 0; i < KILN_MAX_STACK_DEPTH; i++) {
		if (i >= len)
			break;
		h = mix64(h ^ buf->addrs[i]) + i;
	}
	return h ? h : 1;
}

/* Stores the stack in `buf` in `map` (`stacks`, or `off_cpu_stacks`)
 * under its id unless it is there already, and returns the id. */
static __always_inline __u64 store_stack_in(void *map, struct kiln_stack *buf, __u64 seed)
{
	__u64 h = stack_id(buf, seed);

	if (!bpf_map_lookup_elem(map, &h)) {
		long err = bpf_map_update_elem(map, &h, buf, BPF_NOEXIST);

		/* -EEXIST: another CPU stored the same stack just now. */
		if (err && err != -17)
			stat_inc(KILN_STAT_STACKS_FULL);
	}
	return h;
}

static __always_inline __u64 store_stack(struct kiln_stack *buf, __u64 seed)
{
	return store_stack_in(&stacks, buf, seed);
}

/*
 * Walks the kernel stack into the per-CPU scratch buffer, stores it in
 * `stacks` under its hash unless it is there already, and returns the
 * hash; 0 when there is no stack.
 */
static __always_inline __u64 record_kernel_stack(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&scratch, &zero);

	if (!buf)
		return 0;

	long bytes = bpf_get_stack(ctx, buf->addrs, sizeof(buf->addrs), 0);
	if (bytes < 0) {
		stat_inc(KILN_STAT_KERNEL_STACK_ERRORS);
		return 0;
	}
	__u32 len = (__u32)bytes / sizeof(__u64);
	if (len == 0)
		return 0;
	buf->len = len;
	buf->flags = len >= KILN_MAX_STACK_DEPTH ? KILN_STACK_TRUNCATED : 0;

	return store_stack(buf, 0x6b65726eULL /* "kern" */);
}

static __always_inline void announce(__u32 tgid, __u32 why)
{
	struct kiln_new_process event = { .tgid = tgid, .event = why };
	/* No wakeup: user space polls on a timer, so announcing costs no
	 * interrupt work here. */
	if (bpf_ringbuf_output(&new_processes, &event, sizeof(event), BPF_RB_NO_WAKEUP)) {
		stat_inc(KILN_STAT_ANNOUNCE_DROPPED);
		/* Forget it, so a later sample announces it again. */
		bpf_map_delete_elem(&known_processes, &tgid);
	}
}

/* Tells user space about a process the first time it is sampled. */
static __always_inline void announce_sampled(__u32 tgid)
{
	__u32 one = 1;

	if (bpf_map_lookup_elem(&known_processes, &tgid))
		return;
	if (bpf_map_update_elem(&known_processes, &tgid, &one, BPF_NOEXIST))
		return; /* another CPU announced it just now */
	announce(tgid, KILN_PROCESS_SAMPLED);
}

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
 * Every execve on the host: the process keeps its pid but gets new
 * mappings, and a short-lived program may exit before it is sampled twice.
 * The tracepoint fires once the new image is mapped. A raw tracepoint, as
 * it attaches by name without tracefs, which hosts do not always mount.
 */
SEC("raw_tracepoint/sched_process_exec")
int kiln_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	struct kiln_control *ctl = bpf_map_lookup_elem(&control, &zero);

	if (!ctl || ctl->abi_version != KILN_ABI_VERSION || !profiled(ctl))
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	/* Its first sample is announced again: user space reads the maps of
	 * every new program, but builds unwind tables only for programs that
	 * are sampled, which most short-lived ones never are at 19 Hz. */
	bpf_map_delete_elem(&known_processes, &tgid);
	bpf_map_delete_elem(&remapped_at, &tgid);
	announce(tgid, KILN_PROCESS_EXEC);
	return 0;
}

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
};

/* What find_row() returns when the table is not loaded, and when no row
 * covers the address; a row's top byte (its rules) is never 0xff. */
#define KILN_ROW_TABLE_MISSING (~0ULL)
#define KILN_ROW_NONE (~0ULL - 1)

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
} python_step_out SEC(".maps");

/* python_step()'s return value: the activation has more frames. */
#define KILN_PY_MORE 1

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
	if (instr > 0xffff)
		instr = 0xffff;
	out->entry = KILN_PY_FRAME | (instr << KILN_PY_INSTR_SHIFT) | code;
	stat_inc(KILN_STAT_PY_FRAMES);
	if (py->entry == KILN_PY_ENTRY_ONE || (py->entry == KILN_PY_ENTRY_FLAG && entry))
		return 0;
	return prev ? KILN_PY_MORE : 0;
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

	if (py) {
		st->py_eval_start = py->eval_start;
		st->py_eval_end = py->eval_end;
	}
	st->has_mappings = bpf_map_lookup_elem(&proc_mappings, &st->tgid) != NULL;
	/* Not loaded yet: whatever breaks the walk, a table would have
	 * helped. */
	if (!st->has_mappings)
		st->suspect = KILN_STAT_WALK_NO_TABLE;
	st->outcome = KILN_STAT_WALK_DEPTH;
	bpf_loop(KILN_MAX_STACK_DEPTH, unwind_step, st, 0);
}

/*
 * Walks the user stack of the sampled task from its user registers: the
 * interrupted ones when the sample hit user code, else the ones saved at
 * kernel entry. Counts how the walk ended.
 */
static __always_inline __u64 record_user_stack(struct bpf_perf_event_data *ctx, __u32 tgid)
{
	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&scratch, &zero);
	struct unwind_state st = { .buf = buf, .tgid = tgid };

	if (!buf)
		return 0;
	if ((ctx->regs.cs & 3) == 3) {
		st.pc = ctx->regs.rip;
		st.sp = ctx->regs.rsp;
		st.bp = ctx->regs.rbp;
	} else {
		struct pt_regs regs;
		struct pt_regs *user = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		if (bpf_probe_read_kernel(&regs, sizeof(regs), user)) {
			stat_inc(KILN_STAT_USER_STACK_ERRORS);
			return 0;
		}
		st.pc = regs.rip;
		st.sp = regs.rsp;
		st.bp = regs.rbp;
	}
	/* A kernel thread: no user stack. */
	if (st.pc == 0)
		return 0;
	walk_user(&st);
	if (st.n == 0)
		return 0;
	stat_inc(st.outcome);
	buf->len = st.n;
	buf->flags = (st.n >= KILN_MAX_STACK_DEPTH && !st.done) ? KILN_STACK_TRUNCATED : 0;
	return store_stack(buf, 0x75736572ULL /* "user" */);
}

static __always_inline void count(struct kiln_sample_key *key)
{
	struct kiln_sample_value *value = bpf_map_lookup_elem(&counts, key);

	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		return;
	}

	struct kiln_sample_value fresh;

	__builtin_memset(&fresh, 0, sizeof(fresh));
	fresh.count = 1;
	bpf_get_current_comm(fresh.comm, sizeof(fresh.comm));
	long err = bpf_map_update_elem(&counts, key, &fresh, BPF_NOEXIST);
	if (err == -17 /* EEXIST: another CPU inserted it first */) {
		value = bpf_map_lookup_elem(&counts, key);
		if (value)
			__sync_fetch_and_add(&value->count, 1);
	} else if (err) {
		stat_inc(KILN_STAT_COUNTS_FULL);
	}
}

SEC("perf_event")
int kiln_sample(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct kiln_control *ctl = bpf_map_lookup_elem(&control, &zero);

	/* Until user space has written a matching ABI version, record
	 * nothing: a mismatched agent must not read half-understood data. */
	if (!ctl || ctl->abi_version != KILN_ABI_VERSION)
		return 0;
	/* First, so that nothing follows from a sample of another task: no
	 * count, no announcement, so no maps read and no tables loaded. The
	 * idle task is in the root cgroup, so it is dropped too: idle time
	 * is the host's, not the cgroup's. */
	if (!profiled(ctl)) {
		stat_inc(KILN_STAT_OUTSIDE_CGROUP);
		return 0;
	}

	stat_inc(KILN_STAT_SAMPLES);

	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct kiln_sample_key key = {
		.generation = ctl->generation,
		.tgid = pid_tgid >> 32,
		.tid = (__u32)pid_tgid,
		.second = bpf_ktime_get_boot_ns() / 1000000000ULL,
	};

	/* The idle task (pid 0, one per CPU): counted, with no stacks, so
	 * that absolute CPU use is right on idle machines without paying
	 * for two stack walks per idle tick. */
	if (key.tid == 0) {
		stat_inc(KILN_STAT_IDLE);
		count(&key);
		return 0;
	}

	announce_sampled(key.tgid);
	/* A sample that interrupted user code has no kernel stack: skip the
	 * helper call. */
	if ((ctx->regs.cs & 3) != 3)
		key.kernel_stack_id = record_kernel_stack(ctx);
	key.user_stack_id = record_user_stack(ctx, key.tgid);
	count(&key);
	return 0;
}

/* Launches of CUDA kernels (struct kiln_gpu_launch, 24 bytes); see
 * kiln_gpu_launch(). 1 MiB holds about 32k launches between two reads. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} gpu_launches SEC(".maps");

/* The stacks launches were made from, by id. LRU: user space keeps the
 * stacks it has read, so an entry is read about once, and those of
 * launch paths no longer taken make room by themselves. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kiln_stack);
} launch_stacks SEC(".maps");

/*
 * Attached by user space to kiln_cuda_launch_marker() in each
 * libkiln_cuda.so it finds mapped: the injection library calls it at every
 * kernel launch with (correlation id, thread id). The launching thread's
 * user stack is walked as a sample's would be, with unwind tables where
 * the process has them, and sent with the ids; user space keys it by
 * (process, correlation id) for the GPU snapshot's kernels to find.
 */
SEC("uprobe")
int kiln_gpu_launch(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct kiln_control *ctl = bpf_map_lookup_elem(&control, &zero);

	if (!ctl || ctl->abi_version != KILN_ABI_VERSION || !profiled(ctl))
		return 0;

	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct kiln_stack *buf = bpf_map_lookup_elem(&scratch, &zero);

	if (!buf)
		return 0;
	/*
	 * At the marker's first instruction its frame is not set up: the
	 * return address is at [rsp] and rbp is still its caller's. So the
	 * walk starts from the caller, which a frame-pointer walk from here
	 * would skip.
	 */
	__u64 ra = 0;

	buf->addrs[0] = ctx->rip;
	buf->len = 1;
	if (!bpf_probe_read_user(&ra, sizeof(ra), (void *)ctx->rsp) && ra) {
		struct unwind_state st = {
			.buf = buf,
			.tgid = tgid,
			.pc = ra,
			.sp = ctx->rsp + 8,
			.bp = ctx->rbp,
			.n = 1,
		};
		walk_user(&st);
		buf->len = st.n;
	}

	buf->flags = buf->len >= KILN_MAX_STACK_DEPTH ? KILN_STACK_TRUNCATED : 0;

	struct kiln_gpu_launch event = {
		.tgid = tgid,
		.tid = (__u32)pid_tgid,
		.correlation_id = (__u32)ctx->rdi,
		.stack_id = stack_id(buf, 0x6770756cULL /* "gpul" */),
	};

	if (!bpf_map_lookup_elem(&launch_stacks, &event.stack_id))
		bpf_map_update_elem(&launch_stacks, &event.stack_id, buf, BPF_ANY);
	if (bpf_ringbuf_output(&gpu_launches, &event, sizeof(event), 0))
		stat_inc(KILN_STAT_LAUNCHES_DROPPED);
	return 0;
}

/*
 * Off-CPU profiling (`kiln-agent --off-cpu`): where threads wait, weighted
 * by how long. kiln_switch() runs at every context switch of the host.
 * When a thread the agent profiles leaves the CPU to wait (it blocked: a
 * lock, I/O, a sleep, a wait on a GPU stream), its user stack is walked
 * with the CPU samples' walker and remembered with the time; when it is
 * switched back in, the time it was off CPU, if at least
 * kiln_control.off_cpu_threshold_ns, is added to `off_cpu_counts` under
 * (thread, user stack, kernel stack). User space drains that map like
 * `counts` and sends it as a profile of its own, in nanoseconds.
 *
 * Why tp_btf and not raw_tracepoint (as kiln_exec is): its arguments are
 * typed pointers, so `next`, a task that is not running, can be handed to
 * bpf_get_task_stack(). Its kernel stack, where it waited, is then taken
 * only for the waits that are counted, at switch-in, instead of for every
 * switch-out; and the stack is the task's own, without the tracing
 * frames a walk from the tracepoint would add. Neither task's fields are
 * read (no CO-RE): a thread is keyed by its task_struct's address, and
 * its ids and name come from the bpf_get_current_*() helpers at
 * switch-out, when it is still the current task. Needs the kernel's BTF
 * (/sys/kernel/btf/vmlinux) and Linux 5.18 (sched_switch's prev_state).
 *
 * Only waits are counted, not preemptions: a preempted thread was
 * runnable, and its user stack is wherever it was computing, which the
 * CPU profile already shows; its wait is CPU contention. Kernel threads
 * (no user stack) are left out too: their waits are the kernel's idle
 * work queues.
 */

/* TASK_DEAD in prev_state: the thread's last switch, at exit. */
#define KILN_TASK_DEAD 0x80

/* Threads off CPU now, by task_struct address. LRU: on a host with more
 * waiting threads than entries, those that have waited longest (an idle
 * pool blocked for hours) make room. Sizes: sampler.rs sets them when
 * off-CPU profiling is on; otherwise they stay at 1. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct kiln_off_cpu_start);
} off_cpu_start SEC(".maps");

/* Nanoseconds off CPU per (generation, thread, user stack, kernel stack);
 * drained like `counts`. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct kiln_sample_key);
	__type(value, struct kiln_sample_value);
} off_cpu_counts SEC(".maps");

/* Stacks of off-CPU waits, by id (as in `stacks`). LRU, because a user
 * stack is stored at every switch-out, before it is known whether the
 * wait will be long enough to count: stacks of short waits, which no
 * count refers to, age out by themselves. User space reads each id once
 * and keeps it, and deletes nothing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct kiln_stack);
} off_cpu_stacks SEC(".maps");

/* kiln_switch()'s own buffer: a CPU sample never interrupts it (the
 * scheduler runs it with interrupts off), but a hardware sampling event
 * would, in an NMI, and must not overwrite a walk in progress. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_stack);
} off_cpu_scratch SEC(".maps");

/*
 * `next` is about to run: if it was waiting, counts the wait (when long
 * enough) under its stacks. The kernel stack is `next`'s own, saved when
 * it switched out: it is not running, so its stack holds still.
 */
static __noinline void off_cpu_end(struct kiln_control *ctl, struct task_struct *next, __u64 now)
{
	__u64 task = (__u64)next;
	struct kiln_off_cpu_start *start = bpf_map_lookup_elem(&off_cpu_start, &task);

	if (!start)
		return;
	/* Copied before the delete, which frees the entry for reuse. */
	__u64 waited = now - start->at_ns;
	struct kiln_sample_key key = {
		.generation = ctl->generation,
		.tgid = start->tgid,
		.tid = start->tid,
		.second = bpf_ktime_get_boot_ns() / 1000000000ULL,
		.user_stack_id = start->user_stack_id,
	};
	struct kiln_sample_value fresh = { .count = waited };

	__builtin_memcpy(fresh.comm, start->comm, sizeof(fresh.comm));
	bpf_map_delete_elem(&off_cpu_start, &task);
	/* A negative span (clocks of two CPUs) counts as short. */
	if ((__s64)waited < 0 || waited < ctl->off_cpu_threshold_ns) {
		stat_inc(KILN_STAT_OFF_CPU_SHORT);
		return;
	}
	stat_inc(KILN_STAT_OFF_CPU_WAITS);

	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&off_cpu_scratch, &zero);

	if (buf) {
		long bytes = bpf_get_task_stack(next, buf->addrs, sizeof(buf->addrs), 0);

		if (bytes > 0) {
			__u32 len = (__u32)bytes / sizeof(__u64);

			buf->len = len;
			buf->flags = len >= KILN_MAX_STACK_DEPTH ? KILN_STACK_TRUNCATED : 0;
			key.kernel_stack_id = store_stack_in(&off_cpu_stacks, buf, 0x6b65726eULL /* "kern" */);
		} else if (bytes < 0) {
			stat_inc(KILN_STAT_KERNEL_STACK_ERRORS);
		}
	}
	/* Marks the user stack used, so the LRU keeps it until the drain. */
	bpf_map_lookup_elem(&off_cpu_stacks, &key.user_stack_id);

	struct kiln_sample_value *value = bpf_map_lookup_elem(&off_cpu_counts, &key);

	if (value) {
		__sync_fetch_and_add(&value->count, waited);
	} else {
		long err = bpf_map_update_elem(&off_cpu_counts, &key, &fresh, BPF_NOEXIST);

		if (err == -17 /* EEXIST: another CPU inserted it first */) {
			value = bpf_map_lookup_elem(&off_cpu_counts, &key);
			if (value)
				__sync_fetch_and_add(&value->count, waited);
		} else if (err) {
			stat_add(KILN_STAT_OFF_CPU_LOST_NS, waited);
		}
	}
	/* A process that mostly waits may never be CPU-sampled: its maps
	 * must be read for its stacks to be placed. */
	announce_sampled(key.tgid);
}

/*
 * The current task (`prev`) leaves the CPU in `prev_state`: if it is a
 * profiled user thread going to wait, walks its user stack now, while its
 * memory is the one bpf_probe_read_user() reads, and remembers it with
 * the time.
 */
static __noinline void off_cpu_begin(struct kiln_control *ctl, __u64 preempt, __u64 prev_state,
				     __u64 now)
{
	/* Preempted (runnable), or still running after all (a signal was
	 * pending): no wait. Exiting: its task_struct is about to be freed,
	 * and its address may come back as another task's. */
	if (preempt || (__u32)prev_state == 0 || (prev_state & KILN_TASK_DEAD))
		return;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct kiln_off_cpu_start start = {
		.at_ns = now,
		.tgid = pid_tgid >> 32,
		.tid = (__u32)pid_tgid,
	};

	if (start.tid == 0 || !profiled(ctl))
		return;

	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&off_cpu_scratch, &zero);
	struct unwind_state st = { .buf = buf, .tgid = start.tgid };
	struct pt_regs regs;

	if (!buf)
		return;
	/* Switched out in the kernel: the user registers are those saved at
	 * kernel entry. */
	if (bpf_probe_read_kernel(&regs, sizeof(regs),
				  (void *)bpf_task_pt_regs(bpf_get_current_task_btf())))
		return;
	/* A kernel thread: no user stack. */
	if (regs.rip == 0)
		return;
	st.pc = regs.rip;
	st.sp = regs.rsp;
	st.bp = regs.rbp;
	/* Not counted in KILN_STAT_WALK_*: those are the CPU samples'. */
	walk_user(&st);
	if (st.n == 0)
		return;
	buf->len = st.n;
	buf->flags = (st.n >= KILN_MAX_STACK_DEPTH && !st.done) ? KILN_STACK_TRUNCATED : 0;
	start.user_stack_id = store_stack_in(&off_cpu_stacks, buf, 0x75736572ULL /* "user" */);
	bpf_get_current_comm(start.comm, sizeof(start.comm));

	__u64 task = bpf_get_current_task();

	bpf_map_update_elem(&off_cpu_start, &task, &start, BPF_ANY);
}

/* sched_switch(preempt, prev, next, prev_state); prev is the current task. */
SEC("tp_btf/sched_switch")
int kiln_switch(__u64 *ctx)
{
	__u32 zero = 0;
	struct kiln_control *ctl = bpf_map_lookup_elem(&control, &zero);

	if (!ctl || ctl->abi_version != KILN_ABI_VERSION)
		return 0;
	__u64 now = bpf_ktime_get_ns();

	off_cpu_end(ctl, (struct task_struct *)ctx[2], now);
	off_cpu_begin(ctl, ctx[0], ctx[3], now);
	return 0;
}
