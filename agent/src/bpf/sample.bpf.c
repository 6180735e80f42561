// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * kiln_sample, Kiln's CPU sampler: a BPF_PROG_TYPE_PERF_EVENT program
 * attached by agent/src/sampler.rs to a CPU-clock perf event on every
 * online CPU.
 *
 * Per sample it records the thread, its name, and its kernel and user
 * stacks, and adds one to a counter keyed by all of them (`counts`; see
 * kiln.bpf.h for why in the kernel). Stacks are stored in `stacks` under a
 * content hash, so the same stack has the same id in every interval and
 * on every CPU. Kernel and user stacks share the map (the hash is seeded
 * with the kind).
 */
#include "walk.bpf.h"

/* bpf_get_stack() is GPL-only, so the object must declare a GPL-compatible
 * licence for the kernel to load it; these files are dual-licensed for
 * that. Declared in this file only: the linker would join the copies of
 * other files into one section, which no loader reads as one string. */
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
		st.r13 = ctx->regs.r13;
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
		st.r13 = regs.r13;
	}
	/* A kernel thread: no user stack. */
	if (st.pc == 0)
		return 0;
	walk_user(&st);
	if (st.n == 0)
		return 0;
	stat_inc(st.outcome);
	buf->len = st.n;
	buf->flags = ((st.n >= KILN_MAX_STACK_DEPTH && !st.done) ? KILN_STACK_TRUNCATED : 0) |
		     (st.outcome == KILN_STAT_WALK_NO_TABLE ? KILN_STACK_NO_TABLE : 0);
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
