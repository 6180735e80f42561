// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * What every Kiln eBPF program shares: the maps more than one program
 * touches, the agent's control block, statistics, stack ids and process
 * announcements.
 *
 * Kiln's eBPF side is one program per file, linked into one object by
 * `bpftool gen object` (agent/build.rs), which agent/src/sampler.rs
 * loads:
 *
 * - sample.bpf.c: kiln_sample, the CPU sampler, on a CPU-clock perf event
 *   of every online CPU: per sample the thread, its name, and its kernel
 *   and user stacks, counted in a hash map that user space drains once per
 *   interval (agent/src/sampler.rs, Sampler::drain).
 * - exec.bpf.c: kiln_exec, every execve on the host, so that user space
 *   reads a new program's mappings.
 * - gpu_launch.bpf.c: kiln_gpu_launch, a uprobe on the CUDA injection
 *   library's launch marker: the launching thread's stack.
 * - off_cpu.bpf.c: kiln_switch, at every context switch when off-CPU
 *   profiling is on: where threads wait, weighted by how long.
 * - walk.bpf.c: no program; the user-stack walker's global functions,
 *   each verified once on its own (walk.bpf.h has the walk itself).
 *
 * Why aggregate in the kernel rather than push every sample through a
 * ring buffer: a sample with both stacks is up to 2 KiB, and most samples
 * of an interval repeat a stack seen before. Counting in a hash map costs
 * the program one lookup and an atomic add on the hot path, and user space
 * reads each distinct stack once per interval rather than once per sample,
 * so the agent's work grows with the number of distinct stacks, not the
 * sampling rate. The price is a bound on distinct keys per interval (map
 * sizes are set by user space from CPUs x frequency x interval, and
 * overflows are counted in `stats`, never silent).
 *
 * A map more than one file uses is defined here, weak: each file that
 * includes this header defines it, and the linker keeps one. A map one
 * file uses is defined in that file. Sizes are placeholders: sampler.rs
 * sets max_entries before loading.
 *
 * One kernel field is read by name, the thread's fs base, with CO-RE (for
 * CPython 3.10, which knows threads by pthread_self()); every other
 * kernel struct is copied whole (the user registers, from
 * bpf_task_pt_regs()): the UAPI headers (linux-libc-dev) and libbpf's
 * headers are all it includes.
 *
 * Minimum kernel: 5.17 (bpf_loop; bpf_task_pt_regs is 5.15).
 */
#ifndef KILN_BPF_H
#define KILN_BPF_H

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

/* One struct kiln_stack per CPU: bpf_get_stack() needs a buffer larger
 * than the program's 512-byte stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_stack);
} scratch SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kiln_control);
} control SEC(".maps") __weak;

/* Processes announced recently; LRU, so a process evicted by newer ones is
 * announced again, which user space's cache makes cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} known_processes SEC(".maps") __weak;

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
} remapped_at SEC(".maps") __weak;

#define KILN_REMAP_FIRST_WAIT_NS (1000000000ULL)
#define KILN_REMAP_MAX_WAIT_NS (64ULL * 1000000000ULL)

/* struct kiln_new_process records, read by user space every few ms. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} new_processes SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KILN_STAT_NR);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps") __weak;

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

static __always_inline void announce(__u32 tgid, __u32 why)
{
	struct kiln_new_process event = { .tgid = tgid, .event = why };
	/* The default wakeup: user space sleeps on the ring buffer, and is
	 * woken only by a record it had not caught up to (once per batch),
	 * rather than polling it 100 times a second. */
	if (bpf_ringbuf_output(&new_processes, &event, sizeof(event), 0)) {
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

#endif /* KILN_BPF_H */
