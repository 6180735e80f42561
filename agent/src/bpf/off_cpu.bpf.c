// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
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
#include "walk.bpf.h"

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
	st.r13 = regs.r13;
	/* Not counted in KILN_STAT_WALK_*: those are the CPU samples'. */
	walk_user(&st);
	if (st.n == 0)
		return;
	buf->len = st.n;
	buf->flags = ((st.n >= KILN_MAX_STACK_DEPTH && !st.done) ? KILN_STACK_TRUNCATED : 0) |
		     (st.outcome == KILN_STAT_WALK_NO_TABLE ? KILN_STACK_NO_TABLE : 0);
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
