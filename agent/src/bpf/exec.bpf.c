// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * Every execve on the host: the process keeps its pid but gets new
 * mappings, and a short-lived program may exit before it is sampled twice.
 * The tracepoint fires once the new image is mapped. A raw tracepoint, as
 * it attaches by name without tracefs, which hosts do not always mount.
 */
#include "kiln.bpf.h"

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
