//! `kiln-agent`: Kiln's whole-system CPU profiler. An eBPF program
//! (`src/bpf/sample.bpf.c`, compiled by clang and linked with the other
//! programs by bpftool in `build.rs`, loaded with
//! aya) samples every CPU at a fixed frequency and counts (thread, kernel
//! stack, user stack) in the kernel; once per interval the agent drains the
//! counts, turns addresses into file-relative frames (`/proc/<pid>/maps`,
//! ELF load segments, GNU build ids) and kernel symbols (`/proc/kallsyms`),
//! and hands a [`kiln_model::Batch`] to a [`Sink`] — by default the backend's
//! `POST /api/v1/ingest` ([`HttpSink`]), a gateway, which spools to disk
//! while the backend is away. (Agents never publish to the ingest bus
//! themselves: workers store only records a gateway authenticated and
//! signed.)
//!
//! Frames are root first. A native frame's address is a file-relative
//! virtual address; for every frame but the leaf it is the return address
//! minus one, i.e. inside the call instruction, so symbolizers need no
//! adjustment of their own. Idle CPU is counted under an `idle` frame, so
//! absolute CPU use is right.
//!
//! # Examples
//!
//! Profile this machine for a few seconds into memory (needs root, or
//! CAP_BPF and CAP_PERFMON):
//!
//! ```no_run
//! use std::time::Duration;
//! use kiln_agent::{Agent, AgentConfig, MemorySink};
//!
//! let config = AgentConfig { interval: Duration::from_secs(1), ..AgentConfig::default() };
//! let mut agent = Agent::start(config)?;
//! let mut sink = MemorySink::default();
//! for _ in 0..3 {
//!     std::thread::sleep(Duration::from_secs(1));
//!     agent.tick(&mut sink)?;
//! }
//! println!("{} samples", sink.batches.iter().map(|b| b.sample_count()).sum::<u64>());
//! # Ok::<(), kiln_agent::AgentError>(())
//! ```
//!
//! # User stacks
//!
//! Two walks, chosen per process in the eBPF program:
//!
//! - **`.eh_frame` tables** (default): the program announces a process
//!   through a ring buffer on every execve, on its first sample (again
//!   after an execve), and when a walk of its stack meets an address in
//!   none of its known mappings (it mapped code since; backing off per
//!   process). A thread reads its maps at once, so that processes
//!   living milliseconds are still placed; for processes that were sampled,
//!   a builder thread builds, with gimli, a compact table per file
//!   (`unwind.rs`, smallest file first, saved on disk by FileId in
//!   `table_cache.rs`), loaded as an array map of its own into the
//!   `unwind_tables` hash of maps, shared by every process mapping the
//!   file; each process's sorted mappings go to `proc_mappings`
//!   (`unwinder.rs`). Tables are counted by the live processes mapping
//!   them; past the budget ([`AgentConfig::unwind_table_bytes`]), exited
//!   processes are reaped and unused tables evicted, least recently used
//!   first. `unwind_step()` in `walk.bpf.h` walks frames with
//!   `bpf_loop`, binary-searching both; where a mapping has no table it
//!   follows frame pointers. This is what makes code built without frame
//!   pointers (most distributions' libraries) unwind.
//! - **Frame pointers**: for frames in files without tables, and
//!   everything when [`AgentConfig::unwind_tables`] is off.
//!
//! # Python
//!
//! Where the walk meets CPython's bytecode loop (3.10 to 3.14), the Python
//! frames that activation runs take its place, read from the
//! interpreter's memory in eBPF; user space names them with file and line
//! and adds the `script` label ([`python`]; [`AgentConfig::python`]).
//!
//! # JIT code
//!
//! Frames in memory a JIT compiler writes code into (anonymous
//! executable mappings, or .NET's memfd) are walked by frame pointers
//! (the unwinder gives them to the program without a table) and named
//! from the process's perf map, `/tmp/perf-PID.map`, read safely and as
//! it grows, as [`FrameKind::Jit`](kiln_model::FrameKind::Jit) frames;
//! without an entry, [`UNKNOWN_JIT_FRAME`] (`src/perf_map/`;
//! [`AgentConfig::perf_maps`]; [`JitCoverage`] per interval).
//!
//! # Without eBPF
//!
//! [`GpuAgent`] (`kiln-agent --no-ebpf`) loads no program and opens no perf
//! event, so it runs unprivileged (a container without CAP_BPF): it only
//! receives the snapshots of CUDA processes running `libkiln_cuda.so` and
//! sends them, with kernels rooted at the kernel frame under process and
//! thread labels, since launching CPU stacks come from the eBPF uprobe.
//! Both agents send through the same loop (`run.rs`).
//!
//! # One cgroup
//!
//! With [`AgentConfig::cgroup`] the programs drop, first thing, the
//! samples, exec events and GPU launches of tasks outside that cgroup v2
//! and the cgroups below it (`bpf_get_current_ancestor_cgroup_id` at the
//! cgroup's level against its id, the inode of its directory; see
//! `cgroup.rs`). Since announcements follow samples and execs, and tables
//! follow announcements, no other process's maps are read or tables
//! loaded: the table map needs room for the cgroup's files only.
//!
//! Stacks stop at 127 frames (the kernel's `perf_event_max_stack` default)
//! with a truncation marker.
//!
//! # Off CPU
//!
//! With [`AgentConfig::off_cpu`] (`kiln-agent --off-cpu`; off by default)
//! a `tp_btf/sched_switch` program (`kiln_switch` in `off_cpu.bpf.c`)
//! records where profiled threads wait: their user stack, walked with the
//! same walker when they leave the CPU to wait (not when preempted), and
//! their kernel stack when they come back, if they were away at least
//! [`AgentConfig::off_cpu_threshold`]; the nanoseconds waited are counted
//! per (thread, user stack, kernel stack) and drained each interval like
//! the CPU counts. They are sent as a batch of their own
//! ([`Agent::take_off_cpu_batch`]; [`Agent::tick`] sends it), weighted in
//! nanoseconds (`period_ns` 1, like GPU kernel time), every sample
//! labelled `device_kind=`[`OFF_CPU_DEVICE_KIND`], so a query or the UI's
//! label filter picks them apart from CPU samples (which carry no
//! `device_kind`). [`Agent::off_cpu_kernel_cost`] gives the program's cost
//! per context switch.
//!
//! # Containers
//!
//! A process whose cgroup path names a container (`docker-<id>.scope`,
//! `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>`,
//! `/docker/<id>`) gets the `container` label, its 64-hex id; where a
//! runtime's state files under [`ContainerNames::host_root`] name it, also
//! `container_name`, and under Kubernetes `pod` and `namespace`, and with
//! [`ContainerNames::pod_label_prefixes`] the pod's labels that start
//! with one of them, as `pod_label_<key, sanitized>`
//! ([`pod_label_name`]). See `containers/mod.rs` for the runtimes read
//! (containerd, CRI-O, kubelet, Docker, Podman), the bounds on what is
//! read, and the cache.
//!
//! # Not built yet
//!
//! - A reused pid may use its predecessor's `proc_mappings` entry until
//!   the new process is announced or the exited one is reaped (at most
//!   10 s while processes come and go).
//! - Interpreters other than CPython and HotSpot (V8's and Ruby's own
//!   frames; V8's JIT code is named from its perf map when Node writes
//!   one), and free-threaded CPython builds.
//! - Symbol upload ([`Agent::upload_symbols_to`]) extracts each file's
//!   symbols here and sends them as a ksym (never the file); it reads a
//!   file again for each run, with no cache of what was sent.

mod abi;
mod agent;
mod batcher;
mod cgroup;
mod config;
mod containers;
mod coverage;
mod fileid;
pub mod gpu;
mod gpu_agent;
mod idle;
mod in_root;
pub mod jvm;
mod kallsyms;
mod mapped_file;
pub mod memory;
mod nvml;
mod perf_map;
mod procfs;
pub mod python;
mod run;
mod sampler;
mod sink;
mod table_builder;
mod table_cache;
mod unwind;
mod unwinder;
mod upload;
mod watcher;

pub use agent::{Agent, TickReport};
pub use batcher::{
    BROKEN_CHAIN_FRAME, IDLE_FRAME, NO_TABLE_YET_FRAME, OFF_CPU_DEVICE_KIND, PROCESS_GONE_MODULE,
    SAMPLES_LOST_FRAME, STACK_LOST_FRAME, TRUNCATED_FRAME,
};
pub use cgroup::{Cgroup, CgroupError, cgroup2_mount};
pub use config::{
    AgentConfig, AgentError, DEFAULT_FREQUENCY_HZ, DEFAULT_INTERVAL, DEFAULT_OFF_CPU_THRESHOLD,
    DEFAULT_UNWIND_CACHE_BYTES, DEFAULT_UNWIND_TABLE_BYTES, MAX_INTERVAL, MAX_OFF_CPU_THRESHOLD,
    MIN_INTERVAL, UNWIND_TABLE_BYTES,
};
pub use containers::{
    ContainerNames, HIT_TTL as CONTAINER_HIT_TTL, MAX_CACHED as MAX_CACHED_CONTAINERS,
    MAX_POD_LABEL_PREFIXES, MAX_POD_LABELS, MISS_TTL as CONTAINER_MISS_TTL, POD_LABEL_PREFIX,
    pod_label_name, pod_uid,
};
pub use coverage::{OUTCOME_LABEL, STACK_WALKS, StackCoverage};
pub use fileid::{FileIdError, FileInfo, LoadSegment};
pub use gpu::GpuReport;
pub use gpu_agent::{GpuAgent, GpuAgentConfig};
pub use kallsyms::{KERNEL_MODULE, Kallsyms, KallsymsError, KernelSymbol};
/// Where CUDA processes running libkiln_cuda.so send GPU profiles unless
/// `KILN_GPU_SOCKET` says otherwise (the library's default too).
pub use kiln_cuda::socket::DEFAULT_SOCKET_PATH as DEFAULT_GPU_SOCKET;
pub use mapped_file::{MappedFileError, MappedSource, open_mapped};
pub use nvml::{
    DeviceReading, GPU_SAMPLE_INTERVAL, GpuMetricsSampler, GpuPoint, GpuProcess, GpuReadings,
    MAX_GPU_PROCESSES, MAX_QUEUED_GPU_READINGS, NVML_PATH_ENV, Nvml, NvmlError,
};
pub use perf_map::{JIT_OUTCOME_LABEL, JIT_SAMPLES, JitCoverage, UNKNOWN_JIT_FRAME};
pub use procfs::{Mapping, ProcError, container_id, parse_maps, read_maps};
pub use sampler::{MAX_FREQUENCY_HZ, SamplerError};
pub use sink::{
    Attempt, Delivery, HttpSink, HttpTransport, MemorySink, Sink, SinkError, Spool, SpoolingSink,
    Transport,
};
pub use table_cache::{load_unwind_table, save_unwind_table};
pub use unwind::{CfaRule, MAX_EH_FRAME_BYTES, RbpRule, TableRow, UnwindError, UnwindTable};
pub use unwinder::UnwindStats;
pub use upload::{
    DEFAULT_DEBUG_DIR, DEFAULT_SYMBOL_CPU_PERCENT, ExtractedSymbols, LocalLimits, PreparedSymbols,
    SparseImage, SymbolUpload, SymbolUploader, SymbolsError, extract_symbols, prepare_upload,
};

/// This machine's host name, from the kernel.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Nanoseconds since the epoch of `t`.
pub(crate) fn nanos(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
