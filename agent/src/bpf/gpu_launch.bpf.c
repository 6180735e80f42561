// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only

#include "walk.bpf.h"

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
