//! Loads the eBPF programs (`src/bpf/*.bpf.c`, linked into one object), attaches the sampler to a
//! CPU-clock perf event on every online CPU, and drains its counters. The other programs' user
//! space is a module each: `off_cpu` (`sched_switch`), `exec` (processes announced as they are
//! first sampled or exec) and `gpu_launch` (the CUDA launch uprobe).

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{
    Array, HashMap as BpfHashMap, HashOfMaps, MapData, MapError, PerCpuArray, RingBuf,
};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::uprobe::UProbeScope;
use aya::programs::{PerfEvent, ProgramError, RawTracePoint, UProbe};
use aya::{BtfError, Ebpf, EbpfError, EbpfLoader};
use tracing::{debug, info, warn};

use crate::abi::{self, Control, SampleKey, SampleValue, Stack, Stat};
use crate::cgroup::Cgroup;
use crate::coverage::StackCoverage;
use crate::idle::IdleTime;
use crate::table_cache::TableCache;
use crate::unwinder::{UnwindMaps, Unwinder};

mod exec;
mod gpu_launch;
mod off_cpu;

pub(crate) use exec::{NewProcessFeed, Why};
pub(crate) use gpu_launch::{GPU_LAUNCH_MARKER, Launch};
use gpu_launch::{GPU_LAUNCH_PROGRAM, LaunchFeed, load_gpu_probe};
pub(crate) use off_cpu::OffCpuDrained;
use off_cpu::{
    OFF_CPU_COUNTS, OFF_CPU_PROGRAM, OFF_CPU_STACKS, OFF_CPU_THREADS, OffCpuMaps, load_off_cpu,
};

/// The compiled program, or an empty slice when build.rs could not build it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler.bpf.o"));

/// Why build.rs did not build the program; empty when it did.
const NOT_BUILT: &str = env!("KILN_BPF_NOT_BUILT");

/// The CPU sampler's function (`sample.bpf.c`).
const PROGRAM: &str = "kiln_sample";
/// The program that announces every execve.
const EXEC_PROGRAM: &str = "kiln_exec";
/// Highest sampling frequency accepted: above it the sampler's own cost
/// stops being negligible, and 1 kHz already resolves 1 ms of CPU.
pub const MAX_FREQUENCY_HZ: u64 = 1000;

/// How the sampler samples.
#[derive(Debug, Clone)]
pub(crate) struct SamplerConfig {
    /// Samples per second on each CPU (1..=1000).
    pub frequency_hz: u64,
    /// How often [`Sampler::drain`] will be called: sizes the maps.
    pub interval: Duration,
    /// Kernel memory the loaded unwind tables may take.
    pub unwind_budget_bytes: u64,
    /// Where built unwind tables are saved (directory, byte budget); `None`
    /// keeps none.
    pub unwind_cache: Option<(std::path::PathBuf, u64)>,
    /// The cgroup whose tasks (with those of the cgroups below it) are
    /// profiled; `None` profiles every task.
    pub cgroup: Option<Cgroup>,
    /// Off-CPU profiling, counting waits of at least this long; `None`
    /// leaves it off (its program is not loaded, its maps take no room).
    pub off_cpu_threshold: Option<Duration>,
}

/// Why the sampler could not start or be drained.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// build.rs could not compile the eBPF program (clang or libbpf-dev was
    /// missing when the agent was built).
    #[error("this kiln-agent was built without its eBPF program: {0}")]
    NotBuilt(&'static str),
    /// The configuration is out of range.
    #[error("invalid sampler configuration: {0}")]
    Config(String),
    /// The kernel refused the program or a map for lack of privilege.
    #[error(
        "the kernel refused to load the eBPF sampler ({0}): run as root, or grant \
         CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE; also check kernel.perf_event_paranoid"
    )]
    PermissionDenied(String),
    /// Loading the object or creating its maps failed.
    #[error("loading the eBPF object failed")]
    Load(#[source] Box<EbpfError>),
    /// The verifier rejected the program, or attaching it failed.
    #[error("loading or attaching the eBPF program failed")]
    Program(#[source] Box<ProgramError>),
    /// A map is missing or could not be read or written.
    #[error("eBPF map `{map}`")]
    Map {
        /// Which map.
        map: &'static str,
        /// What went wrong.
        #[source]
        source: Box<MapError>,
    },
    /// Listing the online CPUs failed.
    #[error("listing online CPUs ({0})")]
    Cpus(&'static str, #[source] io::Error),
    /// The kernel's BTF, which the off-CPU program is loaded against,
    /// could not be read (a kernel built without CONFIG_DEBUG_INFO_BTF).
    #[error("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")]
    Btf(#[source] Box<BtfError>),
}

impl SamplerError {
    fn map(map: &'static str) -> impl FnOnce(MapError) -> SamplerError {
        move |e| SamplerError::Map {
            map,
            source: Box::new(e),
        }
    }

    /// `e` as `PermissionDenied` when an EPERM/EACCES is at its root.
    fn classify<E: std::error::Error + 'static>(
        e: E,
        wrap: impl FnOnce(E) -> SamplerError,
    ) -> SamplerError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<io::Error>()
                && matches!(io.raw_os_error(), Some(libc::EPERM | libc::EACCES))
            {
                return SamplerError::PermissionDenied(e.to_string());
            }
            cause = c.source();
        }
        wrap(e)
    }
}

/// A stack read from the kernel, leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawStack {
    /// Instruction pointer, then return addresses.
    pub addrs: Vec<u64>,
    /// The walk filled every slot, so the stack was probably cut.
    pub truncated: bool,
    /// The walk stopped at a file whose unwind table was not loaded yet.
    pub no_table: bool,
}

impl RawStack {
    /// A stack as one of the program's stack maps holds it.
    fn of(stack: &Stack) -> Arc<RawStack> {
        Arc::new(RawStack {
            addrs: stack.frames().to_vec(),
            truncated: stack.flags & abi::STACK_TRUNCATED != 0,
            no_table: stack.flags & abi::STACK_NO_TABLE != 0,
        })
    }
}

/// One drained counter: `count` samples of one thread with one pair of
/// stacks.
#[derive(Debug, Clone)]
pub(crate) struct RawSample {
    /// Process id; 0 for idle.
    pub pid: u32,
    /// Thread id; 0 for idle.
    pub tid: u32,
    /// The second (CLOCK_BOOTTIME) the samples were counted in.
    pub second: u32,
    /// Thread name.
    pub comm: String,
    /// Samples.
    pub count: u64,
    /// The kernel stack, when the sample was in the kernel.
    pub kernel: Option<Arc<RawStack>>,
    /// The user stack, when there was one.
    pub user: Option<Arc<RawStack>>,
    /// A stack id was recorded, but its stack could not be stored or found
    /// (map full): the sample counts, its stack is unknown.
    pub stack_lost: bool,
}

impl RawSample {
    /// Whether this is the idle task.
    pub(crate) fn is_idle(&self) -> bool {
        self.tid == 0
    }
}

/// What one [`Sampler::drain`] returns.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    /// The counters of the interval.
    pub samples: Vec<RawSample>,
    /// Off-CPU profiling: the interval's waits, each `count` in
    /// nanoseconds off CPU (its stacks are where the thread waited);
    /// `None` when off-CPU profiling is off.
    pub off_cpu: Option<OffCpuDrained>,
    /// Samples the program saw since the previous drain.
    pub seen: u64,
    /// Of those, samples of the idle task.
    pub idle: u64,
    /// Samples lost because the counts map was full.
    pub lost: u64,
    /// How the interval's user-stack walks ended.
    pub coverage: StackCoverage,
}

/// The loaded and attached sampler. Dropping it detaches the program.
pub(crate) struct Sampler {
    // Owns the program (and its perf events): dropping it detaches them.
    ebpf: Ebpf,
    counts: BpfHashMap<MapData, SampleKey, SampleValue>,
    stacks: BpfHashMap<MapData, u64, Stack>,
    control: Array<MapData, Control>,
    stats: PerCpuArray<MapData, u64>,
    new_processes: Option<NewProcessFeed>,
    unwinder: Option<Unwinder>,
    /// Launches reported by the uprobe; `None` when it did not load.
    gpu_launches: Option<LaunchFeed>,
    /// (device, inode) of each library the uprobe is attached to: a uprobe
    /// is per file, however many paths lead to it.
    gpu_attached: std::collections::HashSet<(u64, u64)>,
    generation: u32,
    /// What the program filters by: written with every generation.
    cgroup: Option<Cgroup>,
    /// Off-CPU profiling's maps; `None` when it is off or did not load.
    off_cpu: Option<OffCpuMaps>,
    /// Shortest wait counted, for the control entry.
    off_cpu_threshold_ns: u64,
    /// Stacks read in this drain and the one before, for counts that refer
    /// to a stack already deleted from the map (see `drain`).
    stack_cache: [HashMap<u64, Arc<RawStack>>; 2],
    last_stats: [u64; abi::STAT_NR as usize],
    cpus: usize,
    /// The sampled CPUs' idle time, counted from the kernel's accounting
    /// rather than from idle ticks (`idle.rs`); `None` with a cgroup, whose
    /// samples leave idle time out.
    idle: Option<IdleTime>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("generation", &self.generation)
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Loads the program and starts sampling every online CPU.
    ///
    /// # Minimum kernel version
    ///
    /// 5.17 (`bpf_loop` in the `.eh_frame` walker; CAP_BPF/CAP_PERFMON from 5.8).
    pub(crate) fn start(config: SamplerConfig) -> Result<Self, SamplerError> {
        if !NOT_BUILT.is_empty() || OBJECT.is_empty() {
            return Err(SamplerError::NotBuilt(NOT_BUILT));
        }
        if config.frequency_hz == 0 || config.frequency_hz > MAX_FREQUENCY_HZ {
            return Err(SamplerError::Config(format!(
                "frequency {} Hz is out of range 1..={MAX_FREQUENCY_HZ}",
                config.frequency_hz
            )));
        }
        raise_memlock_limit();
        // A cgroup's samples leave idle time out (it is the host's).
        let count_idle = config.cgroup.is_none();
        let cpus = aya::util::online_cpus().map_err(|(what, e)| SamplerError::Cpus(what, e))?;

        // Room for every sample of two intervals (the one being drained
        // and the one being filled) with no repeats, which is more than any
        // real workload needs, bounded to keep locked kernel memory small:
        // the stacks map costs 1 KiB per entry.
        let per_interval =
            cpus.len() as u64 * config.frequency_hz * config.interval.as_secs().max(1);
        let counts_entries = (2 * per_interval).next_power_of_two().clamp(1024, 1 << 18) as u32;
        let stacks_entries = (2 * per_interval).next_power_of_two().clamp(1024, 1 << 15) as u32;

        let mut loader = EbpfLoader::new();
        loader
            .map_max_entries("counts", counts_entries)
            .map_max_entries("stacks", stacks_entries);
        // Off, the off-CPU maps keep their one entry each.
        if config.off_cpu_threshold.is_some() {
            loader
                .map_max_entries("off_cpu_start", OFF_CPU_THREADS)
                .map_max_entries("off_cpu_counts", OFF_CPU_COUNTS)
                .map_max_entries("off_cpu_stacks", OFF_CPU_STACKS);
        }
        let off_cpu_threshold_ns = config
            .off_cpu_threshold
            .map_or(0, |t| t.as_nanos().min(u64::MAX as u128) as u64);
        let mut ebpf = loader
            .load(OBJECT)
            .map_err(|e| SamplerError::classify(e, |e| SamplerError::Load(Box::new(e))))?;

        let counts = take_map(&mut ebpf, "counts")?;
        let counts = BpfHashMap::try_from(counts).map_err(SamplerError::map("counts"))?;
        let stacks = BpfHashMap::try_from(take_map(&mut ebpf, "stacks")?)
            .map_err(SamplerError::map("stacks"))?;
        let mut control: Array<MapData, Control> = Array::try_from(take_map(&mut ebpf, "control")?)
            .map_err(SamplerError::map("control"))?;
        let stats = PerCpuArray::try_from(take_map(&mut ebpf, "stats")?)
            .map_err(SamplerError::map("stats"))?;
        let new_processes = RingBuf::try_from(take_map(&mut ebpf, "new_processes")?)
            .map_err(SamplerError::map("new_processes"))?;
        let unwind_maps = UnwindMaps {
            tables: HashOfMaps::try_from(take_map(&mut ebpf, "unwind_tables")?)
                .map_err(SamplerError::map("unwind_tables"))?,
            evicted: BpfHashMap::try_from(take_map(&mut ebpf, "evicted_tables")?)
                .map_err(SamplerError::map("evicted_tables"))?,
            processes: HashOfMaps::try_from(take_map(&mut ebpf, "proc_mappings")?)
                .map_err(SamplerError::map("proc_mappings"))?,
            python: BpfHashMap::try_from(take_map(&mut ebpf, "python_procs")?)
                .map_err(SamplerError::map("python_procs"))?,
            jvm: BpfHashMap::try_from(take_map(&mut ebpf, "jvm_procs")?)
                .map_err(SamplerError::map("jvm_procs"))?,
        };
        let cache = config.unwind_cache.as_ref().and_then(|(dir, max_bytes)| {
            TableCache::open(dir, *max_bytes)
                .inspect_err(|e| {
                    warn!(dir = %dir.display(), error = %e, "no unwind table cache: tables are rebuilt after a restart");
                })
                .ok()
        });
        control
            .set(
                0,
                control_value(0, config.cgroup.as_ref(), off_cpu_threshold_ns),
                0,
            )
            .map_err(SamplerError::map("control"))?;

        let program: &mut PerfEvent = typed_program(&mut ebpf, PROGRAM)?;
        program.load().map_err(program_error)?;
        // CPU-clock counts nanoseconds, so a period in ns is exact: unlike
        // frequency mode, the kernel never has to adjust it on the fly.
        let period_ns = 1_000_000_000 / config.frequency_hz;
        for &cpu in &cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(period_ns),
                    false,
                )
                .map_err(program_error)?;
        }
        let exec: &mut RawTracePoint = typed_program(&mut ebpf, EXEC_PROGRAM)?;
        exec.load().map_err(program_error)?;
        exec.attach("sched_process_exec").map_err(program_error)?;
        let gpu_launches = match load_gpu_probe(&mut ebpf) {
            Ok(feed) => Some(feed),
            Err(e) => {
                warn!(error = %e, "no GPU launch probe: GPU kernels will not show their CPU stacks");
                None
            }
        };
        let off_cpu = match config.off_cpu_threshold {
            Some(threshold) => match load_off_cpu(&mut ebpf) {
                Ok(maps) => {
                    info!(threshold = %humantime::format_duration(threshold), "off-CPU profiling on");
                    Some(maps)
                }
                Err(e) => {
                    warn!(error = %e, "off-CPU profiling could not start (it needs Linux 5.18 with BTF); CPU profiling goes on");
                    None
                }
            },
            None => None,
        };
        info!(
            cpus = cpus.len(),
            frequency_hz = config.frequency_hz,
            counts_entries,
            stacks_entries,
            cgroup = config.cgroup.as_ref().map(|c| c.path.display().to_string()),
            "eBPF sampler attached"
        );
        Ok(Sampler {
            ebpf,
            counts,
            stacks,
            control,
            stats,
            new_processes: Some(NewProcessFeed(new_processes)),
            unwinder: Some(Unwinder::new(
                unwind_maps,
                config.unwind_budget_bytes,
                cache,
            )),
            gpu_launches,
            gpu_attached: Default::default(),
            generation: 0,
            cgroup: config.cgroup,
            off_cpu,
            off_cpu_threshold_ns,
            stack_cache: [HashMap::new(), HashMap::new()],
            last_stats: [0; abi::STAT_NR as usize],
            cpus: cpus.len(),
            idle: count_idle.then(|| {
                let mut idle = IdleTime::new(cpus.clone(), period_ns);
                // The baseline: the first drain counts from here.
                if let Err(e) = idle.take(boot_second(), &HashMap::new()) {
                    warn!(error = %e, "cannot read /proc/stat: idle time comes from idle ticks");
                }
                idle
            }),
        })
    }

    /// Attaches the GPU launch uprobe to the libkiln_cuda.so that process
    /// `pid` maps in `mapping` (once per file). Returns whether it attached
    /// now.
    ///
    /// The file is opened as every mapped file is ([`open_mapped`]: the
    /// mapped file itself, a regular file, never what its path holds now),
    /// and both aya (which reads the marker's offset from it) and the
    /// kernel (which resolves the probe's path) reach it through that
    /// descriptor's `/proc/self/fd` link: a FIFO or a symlink swapped onto
    /// the library's path is never opened and never probed.
    pub(crate) fn attach_gpu_probe(
        &mut self,
        pid: u32,
        mapping: &crate::procfs::Mapping,
    ) -> Result<bool, SamplerError> {
        if self.gpu_launches.is_none() {
            return Ok(false);
        }
        // Before opening: a library seen again (another process, or the
        // same one's maps read twice, perhaps after it exited) is done.
        if self.gpu_attached.contains(&(mapping.dev, mapping.inode)) {
            return Ok(false);
        }
        let file = crate::mapped_file::open_mapped(pid, mapping)
            .map_err(|e| SamplerError::Config(format!("GPU library: {e}")))?;
        self.gpu_attached.insert((mapping.dev, mapping.inode));
        let through = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let program: &mut UProbe = typed_program(&mut self.ebpf, GPU_LAUNCH_PROGRAM)?;
        if let Err(e) = program.attach(GPU_LAUNCH_MARKER, &through, UProbeScope::AllProcesses) {
            self.gpu_attached.remove(&(mapping.dev, mapping.inode));
            return Err(SamplerError::Program(Box::new(e)));
        }
        info!(library = %mapping.path, pid, "GPU launch probe attached");
        Ok(true)
    }

    /// Appends the launches the uprobe reported since the last call.
    pub(crate) fn read_gpu_launches(&mut self, out: &mut Vec<Launch>) {
        if let Some(feed) = &mut self.gpu_launches {
            feed.read(out);
        }
    }

    /// The feed of processes the program sees for the first time; `None`
    /// once taken.
    pub(crate) fn take_new_processes(&mut self) -> Option<NewProcessFeed> {
        self.new_processes.take()
    }

    /// The owner of the program's unwind-table maps; `None` once taken.
    pub(crate) fn take_unwinder(&mut self) -> Option<Unwinder> {
        self.unwinder.take()
    }

    /// Number of CPUs sampled.
    pub(crate) fn cpus(&self) -> usize {
        self.cpus
    }

    /// Total time the kernel has spent running the program, and how many
    /// times it ran. Both stay 0 unless BPF run-time statistics are on
    /// (`kernel.bpf_stats_enabled`, or `aya::sys::enable_stats`).
    pub(crate) fn program_stats(&self) -> Result<(Duration, u64), SamplerError> {
        self.run_stats(PROGRAM)
    }

    /// Whether off-CPU profiling is on (asked for, and its program loaded).
    pub(crate) fn off_cpu(&self) -> bool {
        self.off_cpu.is_some()
    }

    /// [`Sampler::program_stats`] of the off-CPU program, which runs at
    /// every context switch of the host; `None` when off-CPU profiling is
    /// off.
    pub(crate) fn off_cpu_program_stats(&self) -> Option<Result<(Duration, u64), SamplerError>> {
        self.off_cpu.as_ref()?;
        Some(self.run_stats(OFF_CPU_PROGRAM))
    }

    /// The kernel's run time and run count of program `name`.
    fn run_stats(&self, name: &str) -> Result<(Duration, u64), SamplerError> {
        let info = self
            .ebpf
            .program(name)
            .ok_or(SamplerError::NotBuilt(
                "the eBPF object lacks one of its programs",
            ))?
            .info()
            .map_err(|e| SamplerError::Program(Box::new(e)))?;
        Ok((info.run_time(), info.run_count()))
    }

    /// Takes every counter recorded since the previous drain.
    ///
    /// It flips the generation the program stamps into new keys, then reads
    /// and deletes every key of an older generation: those only ever see
    /// increments from a program that read the generation just before the
    /// flip, a window of microseconds. A key that such a program adds after
    /// the drain keeps its old generation and is taken by the next drain.
    pub(crate) fn drain(&mut self) -> Result<Drained, SamplerError> {
        let old = self.generation;
        self.generation = self.generation.wrapping_add(1);
        self.control
            .set(
                0,
                control_value(
                    self.generation,
                    self.cgroup.as_ref(),
                    self.off_cpu_threshold_ns,
                ),
                0,
            )
            .map_err(SamplerError::map("control"))?;

        let taken = take_old_counts(&mut self.counts, self.generation, "counts")?;
        debug!(generation = old, keys = taken.len(), "drained counts");

        // Stacks: read each referenced stack once, then delete it from the
        // map so that the map holds only what the next interval records. A
        // count of the current generation may still refer to a stack
        // deleted here; the cache of the last two drains answers for it.
        self.stack_cache.swap(0, 1);
        self.stack_cache[0].clear();
        let mut samples = Vec::with_capacity(taken.len());
        for (key, value) in taken {
            samples.push(raw_sample(&key, &value, |id, lost| self.stack(id, lost))?);
        }
        for id in self.stack_cache[0].keys() {
            match self.stacks.remove(id) {
                Err(e) if !is_not_found(&e) => return Err(SamplerError::map("stacks")(e)),
                _ => {}
            }
        }

        let stats = self.read_stats()?;
        let delta = |s: Stat| stats[s as usize].saturating_sub(self.last_stats[s as usize]);
        let mut idle = delta(Stat::Idle);
        if let Some(idle_time) = &mut self.idle {
            // The kernel's idle time replaces the idle ticks, which an
            // idle vCPU may never deliver; it goes to the seconds the busy
            // samples left room in.
            let mut busy: HashMap<u32, u64> = HashMap::new();
            for sample in samples.iter().filter(|s| !s.is_idle()) {
                *busy.entry(sample.second).or_default() += sample.count;
            }
            match idle_time.take(boot_second(), &busy) {
                Ok(seconds) => {
                    samples.retain(|s| !s.is_idle());
                    idle = seconds.iter().map(|&(_, n)| n).sum();
                    samples.extend(seconds.into_iter().map(|(second, count)| RawSample {
                        pid: 0,
                        tid: 0,
                        second,
                        comm: String::new(),
                        count,
                        kernel: None,
                        user: None,
                        stack_lost: false,
                    }));
                }
                Err(e) => {
                    warn!(error = %e, "cannot read /proc/stat: idle time comes from idle ticks");
                }
            }
        }
        let off_cpu = match &mut self.off_cpu {
            Some(maps) => {
                let mut drained = maps.drain(self.generation)?;
                drained.lost_ns = delta(Stat::OffCpuLostNs);
                drained.counted = delta(Stat::OffCpuWaits);
                drained.short = delta(Stat::OffCpuShort);
                debug!(
                    keys = drained.waits.len(),
                    counted = drained.counted,
                    short = drained.short,
                    "drained off-CPU waits"
                );
                if drained.lost_ns > 0 {
                    warn!(
                        ns = drained.lost_ns,
                        "off-CPU counts map full: waits counted as lost"
                    );
                }
                Some(drained)
            }
            None => None,
        };
        let drained = Drained {
            samples,
            off_cpu,
            seen: delta(Stat::Samples) - delta(Stat::Idle).min(delta(Stat::Samples)) + idle,
            idle,
            lost: delta(Stat::CountsFull),
            coverage: StackCoverage::from_deltas(delta),
        };
        for (stat, name) in [
            (Stat::StacksFull, "stacks map full"),
            (Stat::KernelStackErrors, "kernel stack walk failed"),
            (Stat::UserStackErrors, "user stack walk failed"),
            (Stat::AnnounceDropped, "new-process ring buffer full"),
            (Stat::LaunchesDropped, "GPU launch ring buffer full"),
        ] {
            let n = delta(stat);
            if n > 0 {
                warn!(samples = n, "{name}");
            }
        }
        debug!(
            frames = delta(Stat::PyFrames),
            unreadable = delta(Stat::PyUnreadable),
            unsupported = delta(Stat::PyUnsupported),
            no_thread = delta(Stat::PyNoThread),
            "Python frames read"
        );
        debug!(
            frames = delta(Stat::JvmFrames),
            no_blob = delta(Stat::JvmNoBlob),
            bad_frame = delta(Stat::JvmBadFrame),
            guessed = delta(Stat::JvmGuessed),
            "JVM frames read"
        );
        debug!(
            seen = drained.seen,
            idle = drained.idle,
            lost = drained.lost,
            outside_cgroup = delta(Stat::OutsideCgroup),
            keys = drained.samples.len(),
            "sampler drained"
        );
        if drained.lost > 0 {
            warn!(
                samples = drained.lost,
                "counts map full: samples counted as lost"
            );
        }
        self.last_stats = stats;
        Ok(drained)
    }

    fn stack(&mut self, id: u64, lost: &mut bool) -> Result<Option<Arc<RawStack>>, SamplerError> {
        if id == 0 {
            return Ok(None);
        }
        if let Some(s) = self.stack_cache[0].get(&id) {
            return Ok(Some(s.clone()));
        }
        let stack = match self.stacks.get(&id, 0) {
            Ok(stack) => RawStack::of(&stack),
            Err(e) if is_not_found(&e) => match self.stack_cache[1].get(&id) {
                Some(s) => s.clone(),
                None => {
                    *lost = true;
                    return Ok(None);
                }
            },
            Err(e) => return Err(SamplerError::map("stacks")(e)),
        };
        self.stack_cache[0].insert(id, stack.clone());
        Ok(Some(stack))
    }

    fn read_stats(&self) -> Result<[u64; abi::STAT_NR as usize], SamplerError> {
        let mut out = [0u64; abi::STAT_NR as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let values = self
                .stats
                .get(&(i as u32), 0)
                .map_err(SamplerError::map("stats"))?;
            *slot = values.iter().sum();
        }
        Ok(out)
    }
}

/// The `control` entry for `generation`: the ABI version that lets the
/// program record, the cgroup it filters by (id 0: none), and the shortest
/// off-CPU wait counted.
fn control_value(generation: u32, cgroup: Option<&Cgroup>, off_cpu_threshold_ns: u64) -> Control {
    Control {
        abi_version: abi::ABI_VERSION,
        generation,
        cgroup_id: cgroup.map_or(0, |c| c.id),
        cgroup_level: cgroup.map_or(0, |c| c.level),
        reserved: 0,
        off_cpu_threshold_ns,
    }
}

/// Reads and deletes every key of `counts` (a counts map, named `name`)
/// not of `generation`, the one the program stamps now.
/// A drained counter with its stacks, read by `stack` (the CPU sampler's
/// maps or the off-CPU ones), which flags a stack it cannot find as lost.
fn raw_sample(
    key: &SampleKey,
    value: &SampleValue,
    mut stack: impl FnMut(u64, &mut bool) -> Result<Option<Arc<RawStack>>, SamplerError>,
) -> Result<RawSample, SamplerError> {
    let mut stack_lost = false;
    let kernel = stack(key.kernel_stack_id, &mut stack_lost)?;
    let user = stack(key.user_stack_id, &mut stack_lost)?;
    Ok(RawSample {
        pid: key.tgid,
        tid: key.tid,
        second: key.second,
        comm: comm_str(&value.comm),
        count: value.count,
        kernel,
        user,
        stack_lost,
    })
}

fn take_old_counts(
    counts: &mut BpfHashMap<MapData, SampleKey, SampleValue>,
    generation: u32,
    name: &'static str,
) -> Result<HashMap<SampleKey, SampleValue>, SamplerError> {
    // Collect first, delete after: deleting while walking a hash map
    // with get_next_key restarts the walk.
    let mut taken: HashMap<SampleKey, SampleValue> = HashMap::new();
    for entry in counts.iter() {
        let (key, value) = match entry {
            Ok(kv) => kv,
            // Deleted between get_next_key and lookup: cannot happen
            // for old keys (only we delete), fine to skip for others.
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(SamplerError::map(name)(e)),
        };
        if key.generation != generation {
            taken.insert(key, value);
        }
    }
    for key in taken.keys() {
        match counts.remove(key) {
            Err(e) if !is_not_found(&e) => return Err(SamplerError::map(name)(e)),
            _ => {}
        }
    }
    Ok(taken)
}

/// The program `name` of the object, as its type.
fn typed_program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, SamplerError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(SamplerError::NotBuilt(
            "the eBPF object lacks one of its programs",
        ))?
        .try_into()
        .map_err(|e| SamplerError::Program(Box::new(e)))
}

/// A failed load or attach, as `PermissionDenied` when privilege is what
/// is missing.
fn program_error(e: ProgramError) -> SamplerError {
    SamplerError::classify(e, |e| SamplerError::Program(Box::new(e)))
}

/// Whether a map operation failed only because the key is absent: aya
/// reports that as `KeyNotFound` from lookups but as a plain ENOENT from
/// deletes.
fn is_not_found(e: &MapError) -> bool {
    match e {
        MapError::KeyNotFound => true,
        MapError::SyscallError(e) => e.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, SamplerError> {
    ebpf.take_map(name).ok_or(SamplerError::NotBuilt(
        "the eBPF object lacks one of its maps",
    ))
}

fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones to the
/// memory cgroup. Raising the limit is harmless where it is not used.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
    if rc != 0 {
        debug!(error = %io::Error::last_os_error(), "could not raise RLIMIT_MEMLOCK");
    }
}

/// The current second of CLOCK_BOOTTIME, the clock the program stamps
/// samples with (`bpf_ktime_get_boot_ns`).
fn boot_second() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    u32::try_from(ts.tv_sec).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards that a thread name of exactly 16 bytes (no NUL) is kept whole.
    #[test]
    fn comm_without_nul_is_kept() {
        assert_eq!(comm_str(b"0123456789abcdef"), "0123456789abcdef");
        assert_eq!(comm_str(b"bash\0\0\0\0\0\0\0\0\0\0\0\0"), "bash");
    }
}
