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
 * User stacks of processes whose unwind tables user space has loaded are
 * walked with them (record_unwound_stack(), unwind_step()); others by the
 * kernel's frame-pointer walk (bpf_get_stack with BPF_F_USER_STACK).
 *
 * No kernel struct is read field by field (the user registers of a task in
 * the kernel are copied whole from bpf_task_pt_regs()), so nothing here
 * needs CO-RE: the UAPI headers (linux-libc-dev) and libbpf's
 * bpf_helpers.h are all it includes.
 *
 * Minimum kernel: 5.17 (bpf_loop; bpf_task_pt_regs is 5.15).
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#include "types.h"

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

/* .eh_frame unwind tables of all files, appended by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct kiln_unwind_row);
} unwind_rows SEC(".maps");

/* Per process (tgid): its mappings that have unwind tables. LRU, so the
 * entries of exited processes age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct kiln_proc_mappings);
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

static __always_inline void stat_inc(__u32 stat)
{
	__u64 *slot = bpf_map_lookup_elem(&stats, &stat);

	/* Per-CPU slot: no other CPU writes it, so no atomic is needed. */
	if (slot)
		*slot += 1;
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

/* Stores the stack in `buf` under its hash; returns the hash. */
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

/* Stores the stack in `buf` in `stacks` under its id unless it is there
 * already, and returns the id. */
static __always_inline __u64 store_stack(struct kiln_stack *buf, __u64 seed)
{
	__u64 h = stack_id(buf, seed);

	if (!bpf_map_lookup_elem(&stacks, &h)) {
		long err = bpf_map_update_elem(&stacks, &h, buf, BPF_NOEXIST);

		/* -EEXIST: another CPU stored the same stack just now. */
		if (err && err != -17)
			stat_inc(KILN_STAT_STACKS_FULL);
	}
	return h;
}

/*
 * Walks one stack (kernel, or user when flags has BPF_F_USER_STACK) into
 * the per-CPU scratch buffer, stores it in `stacks` under its hash unless
 * it is there already, and returns the hash; 0 when there is no stack.
 */
static __always_inline __u64 record_stack(struct bpf_perf_event_data *ctx, __u64 flags)
{
	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&scratch, &zero);
	int user = (flags & BPF_F_USER_STACK) != 0;

	if (!buf)
		return 0;

	long bytes = bpf_get_stack(ctx, buf->addrs, sizeof(buf->addrs), flags);
	if (bytes < 0) {
		stat_inc(user ? KILN_STAT_USER_STACK_ERRORS : KILN_STAT_KERNEL_STACK_ERRORS);
		return 0;
	}
	__u32 len = (__u32)bytes / sizeof(__u64);
	if (len == 0)
		return 0;
	buf->len = len;
	buf->flags = len >= KILN_MAX_STACK_DEPTH ? KILN_STACK_TRUNCATED : 0;

	return store_stack(buf, user ? 0x75736572ULL /* "user" */ : 0x6b65726eULL /* "kern" */);
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
 * Tells user space that the current process maps code it was not told of:
 * the first time at once, then backing off (see `remapped_at`). A global
 * function, verified once on its own: inlined into the unwinder's loop it
 * multiplies the states the verifier walks.
 */
__attribute__((noinline)) int announce_remapped(void)
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
	announce(tgid, KILN_PROCESS_REMAPPED);
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
	struct kiln_proc_mappings *procs;
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 n;
	__u32 done;
};

/*
 * The index in procs->mappings of the mapping of `pc`, or -1. A global
 * function, so the verifier checks it once with unknown arguments instead
 * of following every path of the search at every call.
 */
__attribute__((noinline)) int find_mapping(struct kiln_proc_mappings *procs, __u64 pc)
{
	if (!procs)
		return -1;
	__u32 lo = 0, hi = procs->len;

	if (hi > KILN_MAX_MAPPINGS)
		return -1;
	/* First mapping whose start is > pc; 7 halvings cover 64. */
	for (int i = 0; i < 7; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;

		/* Keep the bound check clang would prove away; the verifier
		 * does not follow clang's reasoning. */
		asm volatile("" : "+r"(mid));
		if (mid >= KILN_MAX_MAPPINGS)
			return -1;
		if (procs->mappings[mid].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	__u32 idx = lo - 1;

	asm volatile("" : "+r"(idx));

	/* lo == 0 wraps to a large idx: no mapping starts at or below pc. */
	if (idx >= KILN_MAX_MAPPINGS)
		return -1;
	if (pc >= procs->mappings[idx].end)
		return -1;
	return idx;
}

/* The index in `unwind_rows` of the row of the table [start, start + len)
 * that covers vaddr, or -1. Global for the same reason. */
__attribute__((noinline)) int find_row(__u32 start, __u32 len, __u64 vaddr)
{
	__u32 lo = start, hi = start + len;

	/* First row whose pc is > vaddr; 24 halvings cover 16M rows. */
	for (int i = 0; i < 24; i++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2;
		struct kiln_unwind_row *row = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!row)
			return -1;
		if (row->pc <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == start || lo - 1 > 0x7fffffff)
		return -1;
	return lo - 1;
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

	if (!buf || !st->procs || n >= KILN_MAX_STACK_DEPTH)
		return 1;
	buf->addrs[n] = st->pc;
	st->n = n + 1;

	/* Past the leaf, pc is a return address: look up the call. */
	__u64 lookup = n == 0 ? st->pc : st->pc - 1;
	__u64 cfa = 0, ra = 0, bp = st->bp;
	struct kiln_unwind_row *row = NULL;
	int mi = find_mapping(st->procs, lookup);

	/* clang knows find_mapping()'s range and would drop this check, which
	 * the verifier (seeing a global function's result as unknown) needs. */
	asm volatile("" : "+r"(mi));
	if (mi >= 0 && mi < KILN_MAX_MAPPINGS) {
		struct kiln_mapping *m = &st->procs->mappings[mi];
		int ri = find_row(m->rows_start, m->rows_len, lookup - m->bias);

		if (ri >= 0)
			row = bpf_map_lookup_elem(&unwind_rows, &ri);
	} else if (st->procs->len) {
		/* An address in none of the mappings user space gave: it
		 * mapped code since. (An empty list is no_mappings, for a
		 * process with no tables: nothing is known to miss.) */
		announce_remapped();
	}
	__u8 cfa_type = row ? row->cfa_type : KILN_CFA_NONE;

	switch (cfa_type) {
	case KILN_CFA_END:
		goto stop;
	case KILN_CFA_RSP:
		cfa = st->sp + (__s64)row->cfa_offset;
		break;
	case KILN_CFA_RBP:
		cfa = st->bp + (__s64)row->cfa_offset;
		break;
	case KILN_CFA_PLT:
		cfa = st->sp + 8 + ((st->pc & 15) >= (__u64)row->cfa_offset ? 8 : 0);
		break;
	default:
		/* Frame pointers: the caller's rbp at [rbp], return address
		 * above it. */
		if (st->bp == 0)
			goto stop;
		cfa = st->bp + 16;
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)st->bp))
			goto stop;
		break;
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
		goto stop;
	if (row && cfa_type != KILN_CFA_NONE && cfa_type != KILN_CFA_UNSUPPORTED) {
		if (row->rbp_type == KILN_RBP_AT_CFA) {
			if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + (__s64)row->rbp_offset)))
				bp = 0;
		} else if (row->rbp_type == KILN_RBP_UNSUPPORTED) {
			bp = 0;
		}
	}
	/* The stack grows down: a caller's frame is above its callee's. */
	if (ra == 0 || cfa <= st->sp)
		goto stop;
	st->pc = ra;
	st->sp = cfa;
	st->bp = bp;
	return 0;
stop:
	st->done = 1;
	return 1;
}

/*
 * Walks the user stack of a process that has unwind tables, from its user
 * registers: the interrupted ones when the sample hit user code, else the
 * ones saved at kernel entry.
 */
static __always_inline __u64 record_unwound_stack(struct bpf_perf_event_data *ctx,
						  struct kiln_proc_mappings *procs)
{
	__u32 zero = 0;
	struct kiln_stack *buf = bpf_map_lookup_elem(&scratch, &zero);
	struct unwind_state st = { .buf = buf, .procs = procs };

	if (!buf)
		return 0;
	if ((ctx->regs.cs & 3) == 3) {
		st.pc = ctx->regs.rip;
		st.sp = ctx->regs.rsp;
		st.bp = ctx->regs.rbp;
	} else {
		struct pt_regs regs;
		struct pt_regs *user = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		if (bpf_probe_read_kernel(&regs, sizeof(regs), user))
			return 0;
		st.pc = regs.rip;
		st.sp = regs.rsp;
		st.bp = regs.rbp;
	}
	if (st.pc == 0)
		return 0;
	bpf_loop(KILN_MAX_STACK_DEPTH, unwind_step, &st, 0);
	if (st.n == 0)
		return 0;
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
		key.kernel_stack_id = record_stack(ctx, 0);
	/* With unwind tables for the process, walk them; else let the kernel
	 * follow frame pointers. */
	struct kiln_proc_mappings *procs = bpf_map_lookup_elem(&proc_mappings, &key.tgid);
	key.user_stack_id = procs ? record_unwound_stack(ctx, procs)
				  : record_stack(ctx, BPF_F_USER_STACK);
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

/* An empty mapping list: unwind_step() on it follows frame pointers, for
 * launches from processes that have no tables (yet). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_proc_mappings);
} no_mappings SEC(".maps");

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
	struct kiln_proc_mappings *procs = bpf_map_lookup_elem(&proc_mappings, &tgid);

	/* Without tables for the process, the walk follows frame pointers. */
	if (!procs)
		procs = bpf_map_lookup_elem(&no_mappings, &zero);
	if (!buf || !procs)
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
			.procs = procs,
			.pc = ra,
			.sp = ctx->rsp + 8,
			.bp = ctx->rbp,
			.n = 1,
		};
		bpf_loop(KILN_MAX_STACK_DEPTH, unwind_step, &st, 0);
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
