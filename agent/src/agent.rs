//! [`Agent`]: the running profiler, from start to each interval's batches.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kiln_model::Batch;
use tracing::{debug, warn};

use crate::sink::{Delivery, Sink};
use crate::watcher::{GPU_PROBE_WAITS_FOR_TABLES, GpuLibraries, Watcher};
use crate::{
    AgentConfig, AgentError, JitCoverage, Kallsyms, StackCoverage, SymbolUpload, SymbolUploader,
    UnwindStats, batcher, gpu, nanos, run, sampler, unwinder,
};

/// What one [`Agent::tick`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    /// Samples in the batch (idle and lost included).
    pub samples: u64,
    /// Distinct stacks newly described in the batch.
    pub new_stacks: usize,
    /// How the interval's user-stack walks ended.
    pub coverage: StackCoverage,
    /// How the interval's samples that ran JIT-compiled code had it named.
    pub jit: JitCoverage,
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
        batcher.read_perf_maps(config.perf_maps);
        let mut unwinder = sampler.take_unwinder().filter(|_| config.unwind_tables);
        if let Some(unwinder) = &mut unwinder {
            unwinder.read_python(config.python);
            unwinder.read_java(config.java);
        }
        let unwind_shared = unwinder.as_ref().map(unwinder::Unwinder::shared);
        if let Some(shared) = &unwind_shared {
            batcher.expect_unwind_tables();
            batcher.name_runtimes_with(shared.clone());
        }
        if let Some(names) = &config.container_names {
            batcher.name_containers_with(crate::containers::Containers::new(names));
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
            if let Err(e) = self.sampler.attach_gpu_probe(pid, &library) {
                if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    warn!(library = %library.path, pid, error = %e, "attaching the GPU launch probe failed");
                } else {
                    debug!(library = %library.path, pid, error = %e, "GPU process exited before its launch probe was attached");
                }
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
    /// `server` (with `api_key`, a key with the ingest role), each once per
    /// run, from a background thread within a CPU budget, extracted here
    /// and sent as a ksym, as `how` says (see [`SymbolUploader`]). Off
    /// until called.
    pub fn upload_symbols_to(
        &mut self,
        server: &str,
        api_key: Option<&str>,
        how: SymbolUpload,
    ) -> std::io::Result<()> {
        self.uploader = Some(SymbolUploader::start(server, api_key, how)?);
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

    /// The JVM `pid` runs, once the agent has found and read it; `None`
    /// before, for other processes, and when unwind tables or Java are
    /// off.
    pub fn jvm(&self, pid: u32) -> Option<std::sync::Arc<crate::jvm::Jvm>> {
        let shared = self.unwind_shared.as_ref()?;
        let shared = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        shared.jvm.get(&pid).cloned()
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
            jit: self.batcher.jit_coverage(),
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
