//! `kiln-agent`: Kiln's whole-system CPU profiler. An eBPF program
//! (`src/bpf/profiler.bpf.c`, compiled by clang in `build.rs`, loaded with
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
//!   first. `unwind_step()` in `profiler.bpf.c` walks frames with
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
//! a `tp_btf/sched_switch` program (`kiln_switch` in `profiler.bpf.c`)
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
//! # Not built yet
//!
//! - A reused pid may use its predecessor's `proc_mappings` entry until
//!   the new process is announced or the exited one is reaped (at most
//!   10 s while processes come and go).
//! - Interpreters other than CPython (JVM, Node, Ruby, …), and
//!   free-threaded CPython builds.
//! - Symbol upload ([`Agent::upload_symbols_to`]) extracts each file's
//!   symbols here and sends them as a ksym (never the file); it reads a
//!   file again for each run, with no cache of what was sent.

mod abi;
mod batcher;
mod cgroup;
mod coverage;
mod fileid;
pub mod gpu;
mod gpu_agent;
mod kallsyms;
mod mapped_file;
mod nvml;
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_model::Batch;
use tracing::{debug, warn};

pub use batcher::{
    BROKEN_CHAIN_FRAME, IDLE_FRAME, OFF_CPU_DEVICE_KIND, PROCESS_GONE_MODULE, SAMPLES_LOST_FRAME,
    STACK_LOST_FRAME, TRUNCATED_FRAME,
};
pub use cgroup::{Cgroup, CgroupError, cgroup2_mount};
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
    DEFAULT_DEBUG_DIR, ExtractedSymbols, SymbolUploader, SymbolsError, extract_symbols,
};

/// Default sampling frequency: a prime, so sampling does not fall into
/// step with work that runs at round rates (timers at 10 ms, 100 Hz ticks).
pub const DEFAULT_FREQUENCY_HZ: u64 = 19;
/// Default interval between batches.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// Shortest interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Longest interval accepted.
pub const MAX_INTERVAL: Duration = Duration::from_secs(600);
/// Default kernel memory for unwind tables: 256 MiB, 32M rows of 8 bytes,
/// room for libc a thousand times or for LLVM's library thirty times.
/// Tables are loaded only for processes that get sampled, and shared by
/// every process that maps a file.
pub const DEFAULT_UNWIND_TABLE_BYTES: u64 = 256 << 20;
/// Budgets accepted for unwind tables: from a few small programs (tests
/// size it for theirs) to 64 GiB.
pub const UNWIND_TABLE_BYTES: std::ops::RangeInclusive<u64> = (64 << 10)..=(64 << 30);
/// Default budget of the on-disk unwind table cache.
pub const DEFAULT_UNWIND_CACHE_BYTES: u64 = 1 << 30;
/// Default shortest off-CPU wait counted. The program pays for a user
/// stack walk at every switch-out of a profiled thread whatever the
/// threshold; what the threshold saves is the rest, paid per counted wait
/// at switch-in: the kernel stack walk, the stack's hash and store, and
/// the count's update. At 1 ms a thread adds at most a thousand counted
/// waits a second however often it switches, so a server making hundreds
/// of thousands of microsecond lock handoffs a second is not charged for
/// each; and the waits a user acts on (I/O, contended locks, sleeps,
/// `cudaStreamSynchronize`) are usually milliseconds long. Lower it
/// (down to 0, every wait) to see short waits that add up.
pub const DEFAULT_OFF_CPU_THRESHOLD: Duration = Duration::from_millis(1);
/// Longest off-CPU threshold accepted.
pub const MAX_OFF_CPU_THRESHOLD: Duration = Duration::from_secs(60);

/// How the agent profiles.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Samples per second on each CPU, 1..=1000.
    pub frequency_hz: u64,
    /// Time between batches, 100 ms..=10 min.
    pub interval: Duration,
    /// The host name sent with every batch and sample.
    pub host: String,
    /// Walk user stacks with `.eh_frame` unwind tables where a process's
    /// files have them; when off, frame pointers only.
    pub unwind_tables: bool,
    /// Kernel memory the loaded unwind tables may take (8 bytes a row,
    /// in whole pages per file; libc takes 28k rows): past it, tables no
    /// running process maps are evicted first, then the least recently
    /// used.
    pub unwind_table_bytes: u64,
    /// Where built unwind tables are saved, by FileId, so that a restart
    /// does not build them again; `None` saves none.
    pub unwind_cache_dir: Option<std::path::PathBuf>,
    /// Most bytes the unwind table cache holds on disk.
    pub unwind_cache_bytes: u64,
    /// Profile only the tasks in this cgroup v2 directory and the cgroups
    /// below it (a container's, a systemd unit's), e.g.
    /// `/sys/fs/cgroup/system.slice/nginx.service`; `None` profiles every
    /// task on the host. Tasks outside it are not sampled, announced or
    /// given unwind tables, and the host's idle time is not counted.
    pub cgroup: Option<std::path::PathBuf>,
    /// Off-CPU profiling: also record where threads wait off CPU (locks,
    /// I/O, sleeps), weighted by the nanoseconds they wait, and send it as
    /// a profile of its own (`device_kind=off_cpu`). Off by default: the
    /// program then runs at every context switch of the host. Needs Linux
    /// 5.18 with BTF; where it cannot load, the agent says so and profiles
    /// CPU only.
    pub off_cpu: bool,
    /// With [`AgentConfig::off_cpu`], the shortest wait counted (see
    /// [`DEFAULT_OFF_CPU_THRESHOLD`]), 0..=1 min.
    pub off_cpu_threshold: Duration,
    /// Read CPython's frames where a stack meets its bytecode loop (3.10
    /// and later; needs [`AgentConfig::unwind_tables`]): Python functions
    /// with file and line in place of `_PyEval_EvalFrameDefault`, and the
    /// `script` label. On by default.
    pub python: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            interval: DEFAULT_INTERVAL,
            host: host_name(),
            unwind_tables: true,
            unwind_table_bytes: DEFAULT_UNWIND_TABLE_BYTES,
            unwind_cache_dir: None,
            unwind_cache_bytes: DEFAULT_UNWIND_CACHE_BYTES,
            cgroup: None,
            off_cpu: false,
            off_cpu_threshold: DEFAULT_OFF_CPU_THRESHOLD,
            python: true,
        }
    }
}

impl AgentConfig {
    /// Checks every field, naming the first that is out of range.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.frequency_hz == 0 || self.frequency_hz > MAX_FREQUENCY_HZ {
            return Err(AgentError::Config(format!(
                "frequency must be 1..={MAX_FREQUENCY_HZ} Hz, got {}",
                self.frequency_hz
            )));
        }
        check_interval(self.interval)?;
        if !UNWIND_TABLE_BYTES.contains(&self.unwind_table_bytes) {
            return Err(AgentError::Config(format!(
                "unwind table memory must be {} KiB..={} GiB, got {} bytes",
                UNWIND_TABLE_BYTES.start() >> 10,
                UNWIND_TABLE_BYTES.end() >> 30,
                self.unwind_table_bytes
            )));
        }
        if self.off_cpu_threshold > MAX_OFF_CPU_THRESHOLD {
            return Err(AgentError::Config(format!(
                "off-CPU threshold must be 0..={}, got {}",
                humantime::format_duration(MAX_OFF_CPU_THRESHOLD),
                humantime::format_duration(self.off_cpu_threshold)
            )));
        }
        check_host(&self.host)?;
        self.resolve_cgroup()?;
        Ok(())
    }

    /// The cgroup to profile, with its id and level.
    fn resolve_cgroup(&self) -> Result<Option<Cgroup>, CgroupError> {
        self.cgroup.as_deref().map(Cgroup::resolve).transpose()
    }
}

/// Checks an interval between batches (either agent's).
fn check_interval(interval: Duration) -> Result<(), AgentError> {
    if interval < MIN_INTERVAL || interval > MAX_INTERVAL {
        return Err(AgentError::Config(format!(
            "interval must be {}..={}, got {}",
            humantime::format_duration(MIN_INTERVAL),
            humantime::format_duration(MAX_INTERVAL),
            humantime::format_duration(interval)
        )));
    }
    Ok(())
}

/// Checks the host name sent with batches (either agent's).
fn check_host(host: &str) -> Result<(), AgentError> {
    if host.is_empty() {
        return Err(AgentError::Config("host name is empty".into()));
    }
    Ok(())
}

/// Why the agent could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The cgroup to profile is not one.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The eBPF sampler failed.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// The sink could not take a batch; the error holds the batch.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The GPU socket could not be made to listen on (`/run/kiln` needs
    /// root to create; `--gpu-socket` moves it).
    #[error("cannot listen for GPU profiles at {}", path.display())]
    GpuSocket {
        /// The socket's path.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What one [`Agent::tick`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    /// Samples in the batch (idle and lost included).
    pub samples: u64,
    /// Distinct stacks newly described in the batch.
    pub new_stacks: usize,
    /// How the interval's user-stack walks ended.
    pub coverage: StackCoverage,
    /// What became of the batch.
    pub delivery: Delivery,
    /// Nanoseconds off CPU in the off-CPU batch (0 when off-CPU profiling
    /// is off).
    pub off_cpu_ns: u64,
}

/// The running profiler: the attached sampler and what it knows of the
/// host. Dropping it detaches the eBPF program.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    sampler: sampler::Sampler,
    batcher: batcher::Batcher,
    last_drain: SystemTime,
    // Held for its Drop, which stops and joins the thread.
    _watcher: Option<Watcher>,
    unwind_shared: Option<Arc<Mutex<unwinder::Shared>>>,
    uploader: Option<SymbolUploader>,
    gpu: Option<gpu::GpuReceiver>,
    /// GPU libraries seen mapped, not yet probed.
    gpu_libraries: GpuLibraries,
    /// How the last collected interval's stack walks ended.
    last_coverage: StackCoverage,
    /// The last collected interval's off-CPU batch, until sent.
    off_cpu_batch: Option<Batch>,
}

/// How often the new-process feed is read: a process must live about this
/// long for the agent to read its maps before it exits.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// The threads that read new processes' maps while they are alive, and
/// load their unwind tables into the program. Apart, so that building a big
/// library's table (seconds, the first time) never delays reading the maps
/// of a process that lives for milliseconds.
#[derive(Debug)]
struct Watcher {
    stop: Arc<AtomicBool>,
    /// The unwinder thread's queue, to tell it to stop.
    to_unwinder: Option<std::sync::mpsc::Sender<Option<unwinder::Work>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Processes whose mappings the unwinder thread should load.
type Learned = Vec<(u32, unwinder::ProcessMappings)>;

/// File name of the CUDA injection library (gpu-lib), whose launch marker
/// the GPU launch uprobe attaches to.
const GPU_LIBRARY: &str = "libkiln_cuda.so";

/// GPU libraries seen mapped, for the agent to attach its uprobe to: the
/// process, the path (under `/proc/<pid>/root`), and when it was seen.
type GpuLibraries = Arc<Mutex<Vec<(u32, std::path::PathBuf, Instant)>>>;

/// How long the launch probe waits for a process's unwind tables before
/// attaching anyway (a table that finds no room never arrives).
const GPU_PROBE_WAITS_FOR_TABLES: Duration = Duration::from_secs(60);

/// Queues the GPU libraries among `pid`'s `mappings` for the launch probe
/// (which attaches to each file once).
fn found_gpu_libraries(
    pid: u32,
    mappings: &[(procfs::Mapping, Arc<fileid::FileInfo>)],
    queue: &GpuLibraries,
) {
    let found = mappings.iter().filter(|(m, _)| m.name() == GPU_LIBRARY);
    for (m, _) in found {
        let [_, rooted] = fileid::file_paths(pid, m);
        queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((pid, rooted, Instant::now()));
    }
}

impl Watcher {
    fn start(
        mut feed: sampler::NewProcessFeed,
        state: Arc<Mutex<batcher::HostState>>,
        unwinder: Option<unwinder::Unwinder>,
        gpu_libraries: GpuLibraries,
    ) -> std::io::Result<Watcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let gpu_found = gpu_libraries.clone();
        // The unwinder thread takes processes learned here and tables its
        // builder finished; `None` stops it.
        let to_unwinder = match unwinder {
            Some(mut unwinder) => {
                let (tx, rx) = std::sync::mpsc::channel::<Option<unwinder::Work>>();
                let built = tx.clone();
                unwinder.start_builder(move |table| {
                    built.send(Some(unwinder::Work::Built(table))).is_ok()
                })?;
                threads.push(
                    std::thread::Builder::new()
                        .name("kiln-unwind".into())
                        .spawn(move || {
                            use std::sync::mpsc::RecvTimeoutError;
                            loop {
                                match rx.recv_timeout(crate::unwinder::REAP_EVERY) {
                                    Ok(Some(work)) => {
                                        if let unwinder::Work::Learned(learned) = &work {
                                            for (pid, mappings) in learned {
                                                found_gpu_libraries(*pid, mappings, &gpu_found);
                                            }
                                        }
                                        unwinder.work(work);
                                    }
                                    // Quiet: a good time to let exited
                                    // processes go.
                                    Err(RecvTimeoutError::Timeout) => unwinder.reap_exited(),
                                    Ok(None) | Err(RecvTimeoutError::Disconnected) => break,
                                }
                            }
                        })?,
                );
                Some(tx)
            }
            None => None,
        };
        let stopping = stop.clone();
        let feed_unwinder = to_unwinder.clone();
        threads.push(
            std::thread::Builder::new()
                .name("kiln-new-procs".into())
                .spawn(move || {
                    let mut pids = Vec::new();
                    while !stopping.load(Ordering::Relaxed) {
                        std::thread::sleep(WATCH_EVERY);
                        pids.clear();
                        feed.read(&mut pids);
                        if pids.is_empty() {
                            continue;
                        }
                        // /proc is read before taking the lock, which the
                        // batcher holds while it builds a batch.
                        let read: Vec<_> = pids
                            .iter()
                            .filter_map(|a| Some((*a, procfs::read_process_now(a.pid)?)))
                            .collect();
                        let learned: Learned = {
                            let mut state = batcher::lock(&state);
                            read.into_iter()
                                .map(|(a, p)| (a, state.learn(a.pid, p)))
                                // Tables only for processes that get
                                // sampled: the program announces their
                                // first sample after an execve too.
                                .filter(|(a, _)| a.why != sampler::Why::Exec)
                                .map(|(a, mappings)| (a.pid, mappings))
                                .collect()
                        };
                        match &feed_unwinder {
                            Some(tx) if !learned.is_empty() => {
                                let _ = tx.send(Some(unwinder::Work::Learned(learned)));
                            }
                            Some(_) => {}
                            None => {
                                for (pid, mappings) in &learned {
                                    found_gpu_libraries(*pid, mappings, &gpu_libraries);
                                }
                            }
                        }
                    }
                })?,
        );
        Ok(Watcher {
            stop,
            to_unwinder,
            threads,
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(tx) = &self.to_unwinder {
            let _ = tx.send(None);
        }
        // The watcher thread first, then the unwinder, whose builder may
        // finish the table it is building.
        for t in self.threads.drain(..).rev() {
            let _ = t.join();
        }
    }
}

impl Agent {
    /// Validates `config`, loads the eBPF program and starts sampling.
    pub fn start(config: AgentConfig) -> Result<Agent, AgentError> {
        config.validate()?;
        let mut sampler = sampler::Sampler::start(sampler::SamplerConfig {
            frequency_hz: config.frequency_hz,
            interval: config.interval,
            unwind_budget_bytes: config.unwind_table_bytes,
            unwind_cache: config
                .unwind_cache_dir
                .clone()
                .map(|dir| (dir, config.unwind_cache_bytes)),
            cgroup: config.resolve_cgroup()?,
            off_cpu_threshold: config.off_cpu.then_some(config.off_cpu_threshold),
        })?;
        let kallsyms = match Kallsyms::load() {
            Ok(k) => Some(k),
            Err(e) => {
                warn!(error = %e, "kernel frames will not be named");
                None
            }
        };
        let period_ns = 1_000_000_000 / config.frequency_hz;
        let mut batcher = batcher::Batcher::new(config.host.clone(), period_ns, kallsyms);
        let mut unwinder = sampler.take_unwinder().filter(|_| config.unwind_tables);
        if let Some(unwinder) = &mut unwinder {
            unwinder.read_python(config.python);
        }
        let unwind_shared = unwinder.as_ref().map(unwinder::Unwinder::shared);
        if let Some(shared) = &unwind_shared {
            batcher.name_python_with(shared.clone());
        }
        let gpu_libraries = GpuLibraries::default();
        let watcher = match sampler.take_new_processes() {
            Some(feed) => {
                match Watcher::start(feed, batcher.state(), unwinder, gpu_libraries.clone()) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        warn!(error = %e, "no new-process thread: short-lived processes will be unnamed");
                        None
                    }
                }
            }
            None => None,
        };
        Ok(Agent {
            config,
            sampler,
            batcher,
            last_drain: SystemTime::now(),
            _watcher: watcher,
            unwind_shared,
            uploader: None,
            gpu: None,
            gpu_libraries,
            last_coverage: StackCoverage::default(),
            off_cpu_batch: None,
        })
    }

    /// Listens at `socket` for CUDA processes running `libkiln_cuda.so`;
    /// from then on every tick also sends their GPU profiles (see
    /// [`gpu`]). Off until called.
    pub fn receive_gpu_from(&mut self, socket: &std::path::Path) -> std::io::Result<()> {
        self.gpu = Some(gpu::GpuReceiver::start(socket, self.config.host.clone())?);
        Ok(())
    }

    /// Attaches the launch uprobe to GPU libraries newly seen, and files
    /// the launching stacks it reported for the GPU receiver to put the
    /// launches' kernels under.
    fn record_gpu_launches(&mut self) {
        if self.gpu.is_none() {
            return;
        }
        let libraries = std::mem::take(
            &mut *self
                .gpu_libraries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut later = Vec::new();
        for (pid, library, seen) in libraries {
            // The process's tables first: a launch walked before them
            // would follow frame pointers through libraries built without
            // them, and skip its callers.
            let waiting = self.unwind_shared.is_some()
                && !self.unwind_tables_loaded(pid)
                && seen.elapsed() < GPU_PROBE_WAITS_FOR_TABLES
                && std::path::Path::new(&format!("/proc/{pid}")).exists();
            if waiting {
                later.push((pid, library, seen));
                continue;
            }
            if let Err(e) = self.sampler.attach_gpu_probe(&library) {
                warn!(library = %library.display(), error = %e, "attaching the GPU launch probe failed");
            }
        }
        if !later.is_empty() {
            self.gpu_libraries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(later);
        }
        let Some(gpu) = &mut self.gpu else {
            return;
        };
        let mut launches = Vec::new();
        self.sampler.read_gpu_launches(&mut launches);
        // A training loop launches from a few stacks: each is placed once.
        let mut placed: HashMap<(u32, u64), Arc<[kiln_model::Frame]>> = HashMap::new();
        for launch in &launches {
            let Some(stack) = &launch.stack else {
                continue;
            };
            let frames = placed
                .entry((launch.tgid, launch.stack_id))
                .or_insert_with(|| self.batcher.user_stack_frames(launch.tgid, stack).into())
                .clone();
            gpu.launch_stacks_mut()
                .insert(launch.tgid, launch.correlation_id, frames);
        }
    }

    /// The CPU stack (root first) a CUDA kernel launch was made from, as
    /// the launch uprobe reported it; `None` when unknown or GPU profiling
    /// is off.
    pub fn gpu_launch_stack(
        &self,
        pid: u32,
        correlation_id: u32,
    ) -> Option<Vec<kiln_model::Frame>> {
        self.gpu.as_ref()?.launch_stack(pid, correlation_id)
    }

    /// Uploads the symbols of the files it samples to the backend at
    /// `server` (with `api_key`, a key with the ingest role), each once per run, from a background thread, extracted
    /// here (with a file's separate debug file under `debug_dirs`) and
    /// sent as a ksym: function names, and with `dwarf` lines and inline
    /// chains (see [`SymbolUploader`]). Off until called.
    pub fn upload_symbols_to(
        &mut self,
        server: &str,
        api_key: Option<&str>,
        debug_dirs: Vec<std::path::PathBuf>,
        dwarf: bool,
    ) -> std::io::Result<()> {
        self.uploader = Some(SymbolUploader::start(server, api_key, debug_dirs, dwarf)?);
        Ok(())
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Number of CPUs sampled.
    pub fn cpus(&self) -> usize {
        self.sampler.cpus()
    }

    /// Whether the program walks `pid`'s user stacks with `.eh_frame`
    /// tables yet, with a table for each of its files that has one (they
    /// are loaded in the background once the process is first sampled).
    pub fn unwind_tables_loaded(&self, pid: u32) -> bool {
        self.unwind_shared.as_ref().is_some_and(|shared| {
            shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .loaded
                .contains(&pid)
        })
    }

    /// The version (major, minor) of the Python interpreter `pid` runs,
    /// once the agent has found it (with its tables); `None` before, for
    /// other processes, and when unwind tables are off.
    pub fn python_version(&self, pid: u32) -> Option<(u8, u8)> {
        let shared = self.unwind_shared.as_ref()?;
        let shared = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let v = shared.python.get(&pid)?.version;
        Some((v.major, v.minor))
    }

    /// What the `.eh_frame` unwinder holds now; `None` when unwind tables
    /// are off.
    pub fn unwind_stats(&self) -> Option<UnwindStats> {
        self.unwind_shared.as_ref().map(|shared| {
            shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .stats
                .clone()
        })
    }

    /// Time the kernel spent in the eBPF program, and its number of runs
    /// (samples): the agent's cost that `getrusage` does not see, since it
    /// is charged to whichever task was interrupted. Zero unless BPF
    /// run-time statistics are enabled.
    pub fn kernel_cost(&self) -> Result<(Duration, u64), AgentError> {
        Ok(self.sampler.program_stats()?)
    }

    /// Whether off-CPU profiling is on: asked for in the configuration,
    /// and its program loaded.
    pub fn off_cpu(&self) -> bool {
        self.sampler.off_cpu()
    }

    /// [`Agent::kernel_cost`] of the off-CPU program, whose runs are the
    /// host's context switches (all of them: it runs before it can tell
    /// whose they are); `None` when off-CPU profiling is off.
    pub fn off_cpu_kernel_cost(&self) -> Option<Result<(Duration, u64), AgentError>> {
        Some(self.sampler.off_cpu_program_stats()?.map_err(Into::into))
    }

    /// Drains what was sampled since the last call into a batch, without
    /// sending it. Call [`Agent::delivered`] once the backend has it. With
    /// off-CPU profiling, the interval's off-CPU waits go into a batch of
    /// their own, which waits in [`Agent::take_off_cpu_batch`].
    pub fn collect(&mut self) -> Result<Batch, AgentError> {
        let now = SystemTime::now();
        let drained = self.sampler.drain()?;
        // Samples are stamped with the second they were counted in.
        let start = nanos(self.last_drain);
        let end = nanos(now);
        self.last_drain = now;
        let clock = batcher::SampleClock::now(start, end);
        let batch = self.batcher.build(&drained, &clock, end);
        self.off_cpu_batch = self.batcher.build_off_cpu(&drained, &clock, end);
        drained.coverage.log();
        self.last_coverage = drained.coverage;
        if let Some(uploader) = &mut self.uploader {
            for (file_id, paths) in self.batcher.files() {
                uploader.offer(*file_id, paths);
            }
        }
        Ok(batch)
    }

    /// The off-CPU batch of the last [`Agent::collect`], if it made one
    /// (off-CPU profiling on, and some thread waited long enough): apart
    /// from the CPU batch, weighted in nanoseconds, labelled
    /// `device_kind=off_cpu`. Call [`Agent::delivered`] once the backend
    /// has it.
    pub fn take_off_cpu_batch(&mut self) -> Option<Batch> {
        self.off_cpu_batch.take()
    }

    /// Tells the agent the backend has `batch`, so its dictionary entries
    /// are left out of the next batches.
    pub fn delivered(&mut self, batch: &Batch) {
        self.batcher.delivered(batch);
    }

    /// Collects one batch and hands it to `sink`.
    pub fn tick(&mut self, sink: &mut dyn Sink) -> Result<TickReport, AgentError> {
        let batch = self.collect()?;
        let delivery = sink.send(&batch)?;
        if delivery == Delivery::Delivered {
            self.delivered(&batch);
        }
        let mut off_cpu_ns = 0;
        if let Some(off_cpu) = self.take_off_cpu_batch() {
            off_cpu_ns = off_cpu.sample_count();
            if sink.send(&off_cpu)? == Delivery::Delivered {
                self.delivered(&off_cpu);
            }
        }
        self.record_gpu_launches();
        if let Some(gpu) = &mut self.gpu {
            gpu.send(sink, nanos(SystemTime::now()))?;
        }
        Ok(TickReport {
            samples: batch.sample_count(),
            new_stacks: batch.stacks.len(),
            coverage: self.last_coverage,
            delivery,
            off_cpu_ns,
        })
    }

    /// Ticks every interval until `stop` is set, then sends what was
    /// sampled since the last tick. Sink failures are logged and do not
    /// stop the agent; sampler failures do.
    pub fn run(&mut self, sink: &mut dyn Sink, stop: &AtomicBool) -> Result<(), AgentError> {
        run::run(self, sink, stop)
    }
}

impl run::Periodic for Agent {
    fn interval(&self) -> Duration {
        self.config.interval
    }

    /// Takes the GPU launches: their ring buffer holds a few seconds of a
    /// busy training loop's, not a whole interval's.
    fn meanwhile(&mut self) {
        self.record_gpu_launches();
    }

    fn send_batches(&mut self, sink: &mut dyn Sink) -> Result<(), AgentError> {
        let started = Instant::now();
        let report = self.tick(sink)?;
        debug!(
            samples = report.samples,
            new_stacks = report.new_stacks,
            delivery = ?report.delivery,
            took_ms = started.elapsed().as_millis() as u64,
            processes = self.batcher.processes(),
            "batch"
        );
        Ok(())
    }
}

fn nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// This machine's host name, from the kernel.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the messages users see for bad configuration.
    #[test]
    fn bad_configuration_is_named() {
        let bad = |c: AgentConfig| c.validate().unwrap_err().to_string();
        let base = AgentConfig::default();
        assert!(base.validate().is_ok());
        let e = bad(AgentConfig {
            frequency_hz: 0,
            ..base.clone()
        });
        assert!(e.contains("frequency must be 1..=1000 Hz, got 0"), "{e}");
        let e = bad(AgentConfig {
            frequency_hz: 5000,
            ..base.clone()
        });
        assert!(e.contains("got 5000"), "{e}");
        let e = bad(AgentConfig {
            interval: Duration::from_millis(1),
            ..base.clone()
        });
        assert!(e.contains("interval must be 100ms..=10m, got 1ms"), "{e}");
        let e = bad(AgentConfig {
            unwind_table_bytes: 10,
            ..base.clone()
        });
        assert!(
            e.contains("unwind table memory must be 64 KiB..=64 GiB, got 10 bytes"),
            "{e}"
        );
        let e = bad(AgentConfig {
            off_cpu: true,
            off_cpu_threshold: Duration::from_secs(61),
            ..base.clone()
        });
        assert!(
            e.contains("off-CPU threshold must be 0..=1m, got 1m 1s"),
            "{e}"
        );
        assert!(
            AgentConfig {
                off_cpu_threshold: Duration::ZERO,
                ..base.clone()
            }
            .validate()
            .is_ok(),
            "0 counts every wait"
        );
        assert!(!base.off_cpu, "off by default");
        let not_a_cgroup = tempfile::tempdir().unwrap();
        let e = bad(AgentConfig {
            cgroup: Some(not_a_cgroup.path().to_owned()),
            ..base.clone()
        });
        assert!(
            e.contains(&format!(
                "{} is not a cgroup v2 directory",
                not_a_cgroup.path().display()
            )),
            "{e}"
        );
    }
}
