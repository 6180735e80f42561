//! Turns one interval's drained counters into a [`Batch`]: frames for
//! every address, labels for every process, and only the dictionary
//! entries the backend has not had from this agent recently.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet, label_names};

use crate::containers::{ContainerInfo, Containers};
use crate::fileid::FileCache;
use crate::jvm::{Jvm, JvmNamer};
use crate::kallsyms::Kallsyms;
use crate::mapped_file::MappedSource;
use crate::perf_map::{JitCoverage, JitOutcome, PerfMaps};
use crate::procfs::{Mapping, Process, ProcessTable};
use crate::python::{self, Interpreter, ProcessMemory, PythonNamer};
use crate::sampler::{Drained, RawSample, RawStack};
use crate::unwinder;

/// The Python processes of the host, each with its interpreter.
/// The processes that run an interpreter or VM whose frames the walk
/// reads, with it.
#[derive(Debug, Default)]
struct Runtimes {
    python: HashMap<u32, Arc<Interpreter>>,
    jvm: HashMap<u32, Arc<Jvm>>,
}

/// When the samples of one drain were taken. Each counter carries the
/// second it was counted in (CLOCK_BOOTTIME, which keeps counting through
/// suspend); a sample is stamped at the middle of that second in wall-clock
/// time, kept within the interval the drain covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleClock {
    /// Wall-clock time (ns since the Unix epoch) of boot time zero.
    pub boot_to_wall_ns: i64,
    /// The interval the drain covers, wall clock; samples of its keys may
    /// date from up to a second before its start (counted just before the
    /// previous drain flipped the generation).
    pub from_ns: i64,
    pub to_ns: i64,
}

impl SampleClock {
    /// The clock of a drain covering `from_ns..to_ns`, read now.
    pub(crate) fn now(from_ns: i64, to_ns: i64) -> SampleClock {
        let read = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            ts.tv_sec * 1_000_000_000 + ts.tv_nsec
        };
        SampleClock {
            boot_to_wall_ns: read(libc::CLOCK_REALTIME) - read(libc::CLOCK_BOOTTIME),
            from_ns,
            to_ns,
        }
    }

    /// A clock that stamps every sample at `ns`.
    #[cfg(test)]
    pub(crate) fn at(ns: i64) -> SampleClock {
        SampleClock {
            boot_to_wall_ns: 0,
            from_ns: ns,
            to_ns: ns,
        }
    }

    /// The wall-clock time of boot second `second`.
    pub(crate) fn stamp(&self, second: u32) -> i64 {
        let t = self.boot_to_wall_ns + i64::from(second) * 1_000_000_000 + 500_000_000;
        t.clamp(
            self.from_ns.saturating_sub(1_000_000_000).min(self.to_ns),
            self.to_ns,
        )
    }

    /// The middle of the interval: for what is counted per interval
    /// (lost samples, walk outcomes).
    pub(crate) fn middle(&self) -> i64 {
        self.from_ns + (self.to_ns - self.from_ns) / 2
    }
}

/// Name of the frame that stands for the idle task.
pub const IDLE_FRAME: &str = kiln_model::IDLE_FRAME;
/// Root frame of a stack cut at the maximum depth.
pub const TRUNCATED_FRAME: &str = "[truncated]";
/// Frame of samples whose stack was recorded but could not be kept.
pub const STACK_LOST_FRAME: &str = "[stack lost]";
/// Root frame of a user stack whose frame-pointer walk left the process's
/// code: what follows was garbage and is dropped.
pub const BROKEN_CHAIN_FRAME: &str = "[broken frame chain]";
/// Module of the one frame that stands for the user stack of a process
/// that exited before the agent could read its maps.
pub const PROCESS_GONE_MODULE: &str = "[process exited]";
/// Root frame of a user stack whose walk stopped at a file whose unwind
/// table was not loaded yet: the process was new to the agent (its tables
/// are built in the background after its first sample).
pub const NO_TABLE_YET_FRAME: &str = "[unwind table not loaded yet]";
/// Frame of samples lost because the kernel's counter map was full.
pub const SAMPLES_LOST_FRAME: &str = "[samples lost]";
/// Value of the `device_kind` label of off-CPU samples: time threads spent
/// off CPU, waiting, in nanoseconds (`kiln-agent --off-cpu`), beside `gpu`
/// for GPU kernel time. CPU samples carry no `device_kind`.
pub const OFF_CPU_DEVICE_KIND: &str = label_names::OFF_CPU;

/// Builds batches. Holds the per-host knowledge that outlives an interval:
/// processes, files, kernel symbols, and what was sent.
#[derive(Debug)]
pub(crate) struct Batcher {
    host: String,
    period_ns: u64,
    state: Arc<Mutex<HostState>>,
    kallsyms: Option<Kallsyms>,
    sent: RecentlySent,
    /// The files the last batch's frames point into, each with a process
    /// mapping it: for symbol upload.
    files: Vec<(kiln_model::FileId, MappedSource)>,
    /// Where the unwinder says which processes run Python or a JVM;
    /// `None` when unwind tables (and with them their frames) are off.
    unwinder: Option<Arc<Mutex<unwinder::Shared>>>,
    /// How the last CPU batch's JIT frames were named.
    jit: JitCoverage,
}

impl Batcher {
    /// A batcher for `host`, whose samples each stand for `period_ns` of
    /// CPU. Without kernel symbols, kernel frames are named by address.
    pub(crate) fn new(host: impl Into<String>, period_ns: u64, kallsyms: Option<Kallsyms>) -> Self {
        Batcher {
            host: host.into(),
            period_ns,
            state: Arc::default(),
            kallsyms,
            sent: RecentlySent::new(RESEND_AFTER, MAX_REMEMBERED),
            files: Vec::new(),
            unwinder: None,
            jit: JitCoverage::default(),
        }
    }

    /// Whether to name JIT frames from the processes' perf maps (on
    /// unless set off; off, they are all `[unknown JIT]`).
    pub(crate) fn read_perf_maps(&mut self, on: bool) {
        lock(&self.state).perf_maps.read_maps(on);
    }

    /// How the JIT frames of the last CPU batch's samples were named.
    pub(crate) fn jit_coverage(&self) -> JitCoverage {
        self.jit
    }

    /// Says that the agent loads unwind tables, so that walks the program
    /// stopped at a file whose table was not loaded yet get a root marker
    /// saying so ([`NO_TABLE_YET_FRAME`]).
    pub(crate) fn expect_unwind_tables(&mut self) {
        lock(&self.state).unwind_tables = true;
    }

    /// Labels the samples of containers with their names, as `containers`
    /// finds them.
    pub(crate) fn name_containers_with(&mut self, containers: Containers) {
        lock(&self.state).containers = containers;
    }

    /// Names the Python and JVM frames of the processes that `shared` (the
    /// unwinder's) lists as running them.
    pub(crate) fn name_runtimes_with(&mut self, shared: Arc<Mutex<unwinder::Shared>>) {
        self.unwinder = Some(shared);
    }

    /// The Python and JVM processes now.
    fn runtimes(&self) -> Runtimes {
        self.unwinder
            .as_ref()
            .map_or_else(Runtimes::default, |shared| {
                let shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
                Runtimes {
                    python: shared.python.clone(),
                    jvm: shared.jvm.clone(),
                }
            })
    }

    /// The files the last interval's batches' frames point into (the CPU
    /// batch's, and the off-CPU batch's when there is one), each with a
    /// process and mapping it can be opened through (by
    /// [`crate::open_mapped`], which refuses a file swapped since).
    pub(crate) fn files(&self) -> &[(kiln_model::FileId, MappedSource)] {
        &self.files
    }

    /// Root-first frames of a user stack (leaf first, as the program
    /// walked it) of process `pid`, placed like a sample's.
    pub(crate) fn user_stack_frames(&mut self, pid: u32, stack: &RawStack) -> Vec<Frame> {
        let runtimes = self.runtimes();
        let state = self.state.clone();
        let mut state = lock(&state);
        user_frames(&mut state, &runtimes, pid, stack, &mut HashMap::new()).0
    }

    /// Builds the CPU batch of one interval; its samples are stamped by
    /// `clock`. Call [`Batcher::delivered`] once the sink has it.
    pub(crate) fn build(
        &mut self,
        drained: &Drained,
        clock: &SampleClock,
        sent_at_ns: i64,
    ) -> Batch {
        let timestamp_ns = clock.middle();
        let state = self.state.clone();
        let mut state = lock(&state);
        state.processes.next_drain();
        state.perf_maps.next_drain();
        let mut builder = BatchBuilder::new(self.host.clone(), sent_at_ns, self.period_ns);
        let host_only = LabelSet::new().with(label_names::HOST, self.host.clone());
        let mut executables = HashMap::new();
        let mut jit = JitCoverage::default();
        self.add_samples(
            &mut builder,
            &mut state,
            &drained.samples,
            None,
            clock,
            &mut executables,
            &mut jit,
        );
        if drained.coverage.walks() > 0 {
            drained
                .coverage
                .add_to(&mut builder, &self.host, timestamp_ns);
        }
        jit.add_to(&mut builder, &self.host, timestamp_ns);
        jit.log();
        self.jit = jit;
        if drained.lost > 0 {
            let frames = [Frame::named(FrameKind::Truncated, SAMPLES_LOST_FRAME)];
            builder.add(timestamp_ns, &frames, &host_only, drained.lost);
        }
        self.files.clear();
        self.finish(builder, executables)
    }

    /// Builds the off-CPU batch of one interval, apart from the CPU
    /// batch: each sample weighs the nanoseconds its thread waited off CPU
    /// with those stacks (`period_ns` 1, as GPU kernel time), and carries
    /// `device_kind=off_cpu` ([`OFF_CPU_DEVICE_KIND`]), which is how a
    /// query (and the UI's label filter) picks them. `None` when off-CPU
    /// profiling is off or nothing waited. Build it after
    /// [`Batcher::build`] of the same interval: its files are added to
    /// that batch's for symbol upload. Call [`Batcher::delivered`] once the
    /// sink has it.
    pub(crate) fn build_off_cpu(
        &mut self,
        drained: &Drained,
        clock: &SampleClock,
        sent_at_ns: i64,
    ) -> Option<Batch> {
        let timestamp_ns = clock.middle();
        let off_cpu = drained.off_cpu.as_ref()?;
        if off_cpu.waits.is_empty() && off_cpu.lost_ns == 0 {
            return None;
        }
        let state = self.state.clone();
        let mut state = lock(&state);
        let mut builder = BatchBuilder::new(self.host.clone(), sent_at_ns, 1);
        let mut executables = HashMap::new();
        // (Waits are no CPU samples: the JIT coverage counts the latter.)
        self.add_samples(
            &mut builder,
            &mut state,
            &off_cpu.waits,
            Some(OFF_CPU_DEVICE_KIND),
            clock,
            &mut executables,
            &mut JitCoverage::default(),
        );
        if off_cpu.lost_ns > 0 {
            let frames = [Frame::named(FrameKind::Truncated, SAMPLES_LOST_FRAME)];
            let labels = LabelSet::new()
                .with(label_names::HOST, self.host.clone())
                .with(label_names::DEVICE_KIND, OFF_CPU_DEVICE_KIND);
            builder.add(timestamp_ns, &frames, &labels, off_cpu.lost_ns);
        }
        Some(self.finish(builder, executables))
    }

    /// Adds `samples` to `builder`, each labelled with its process and
    /// thread, and `device_kind` when one is given; counts in `jit` how
    /// their JIT frames were named.
    #[allow(
        clippy::too_many_arguments,
        reason = "the per-batch state a sample is added with"
    )]
    fn add_samples(
        &self,
        builder: &mut BatchBuilder,
        state: &mut HostState,
        samples: &[RawSample],
        device_kind: Option<&str>,
        clock: &SampleClock,
        executables: &mut HashMap<kiln_model::FileId, (kiln_model::Executable, MappedSource)>,
        jit: &mut JitCoverage,
    ) {
        let host_only = LabelSet::new().with(label_names::HOST, self.host.clone());
        let runtimes = self.runtimes();
        let (python, jvms) = (&runtimes.python, &runtimes.jvm);
        state
            .scripts
            .retain(|pid, _| python.contains_key(pid) || jvms.contains_key(pid));
        // A JVM's label is what it runs, read from the JVM itself.
        for (&pid, jvm) in jvms {
            if let Some(main) = jvm.main() {
                state.scripts.insert(pid, main.to_owned());
            }
        }
        type Resolved = (Arc<Vec<Frame>>, Option<JitOutcome>);
        let mut user_cache: HashMap<(u32, *const RawStack), Resolved> = HashMap::new();
        let mut kernel_cache: HashMap<*const RawStack, Arc<Vec<Frame>>> = HashMap::new();
        let mut frames = Vec::new();

        for sample in samples {
            frames.clear();
            // (The off-CPU program never records the idle task.)
            if sample.is_idle() {
                // The one idle stack the query side tells apart from busy time.
                frames.push(kiln_model::idle_frame());
                builder.add(
                    clock.stamp(sample.second),
                    &frames,
                    &host_only,
                    sample.count,
                );
                continue;
            }
            // (A cut user stack carries its own marker.)
            if sample.user.is_none() && sample.kernel.as_ref().is_some_and(|s| s.truncated) {
                frames.push(Frame::named(FrameKind::Truncated, TRUNCATED_FRAME));
            }
            if sample.stack_lost {
                frames.push(Frame::named(FrameKind::Truncated, STACK_LOST_FRAME));
            }
            if let Some(user) = &sample.user {
                // A JVM whose Java frames are not read says so at the root.
                if let Some(marker) = jvms.get(&sample.pid).and_then(|jvm| jvm.marker()) {
                    frames.push(marker);
                }
                let key = (sample.pid, Arc::as_ptr(user));
                let (resolved, jit_outcome) = match user_cache.get(&key) {
                    Some(f) => f.clone(),
                    None => {
                        let (f, jit_outcome) =
                            user_frames(state, &runtimes, sample.pid, user, executables);
                        let f = Arc::new(f);
                        if python.contains_key(&sample.pid)
                            && let Some(script) = python::script_of(&f)
                        {
                            state.scripts.insert(sample.pid, script);
                        }
                        user_cache.insert(key, (f.clone(), jit_outcome));
                        (f, jit_outcome)
                    }
                };
                jit.count(jit_outcome, sample.count);
                frames.extend(resolved.iter().cloned());
            }
            if let Some(kernel) = &sample.kernel {
                let resolved = kernel_cache
                    .entry(Arc::as_ptr(kernel))
                    .or_insert_with(|| Arc::new(self.kernel_frames(kernel)))
                    .clone();
                frames.extend(resolved.iter().cloned());
            }
            if frames.is_empty() {
                frames.push(Frame::named(FrameKind::Truncated, STACK_LOST_FRAME));
            }
            let mut labels = labels(state, &self.host, sample);
            if let Some(kind) = device_kind {
                labels.insert(label_names::DEVICE_KIND, kind);
            }
            builder.add(clock.stamp(sample.second), &frames, &labels, sample.count);
        }
    }

    /// The batch of `builder`, with the files its frames point into, less
    /// the dictionary entries the backend has had recently; the files are
    /// added to [`Batcher::files`].
    fn finish(
        &mut self,
        mut builder: BatchBuilder,
        executables: HashMap<kiln_model::FileId, (kiln_model::Executable, MappedSource)>,
    ) -> Batch {
        for (file, source) in executables.into_values() {
            self.files.push((file.file_id, source));
            builder.add_executable(file);
        }
        let mut batch = builder.finish();
        self.sent.rotate_if_due();
        batch
            .frames
            .retain(|e| !self.sent.contains(Kind::Frame, e.id.0));
        batch
            .stacks
            .retain(|e| !self.sent.contains(Kind::Stack, e.id.0));
        batch
            .label_sets
            .retain(|e| !self.sent.contains(Kind::Labels, e.id.0));
        batch
            .executables
            .retain(|e| !self.sent.contains(Kind::File, e.file_id.0));
        batch
    }

    /// Records that the backend has `batch`'s dictionary entries, so later
    /// batches leave them out. Not called for spooled batches: until the
    /// backend is back, every batch carries all it needs on its own, so
    /// dropping the oldest spooled batch never orphans a later one.
    pub(crate) fn delivered(&mut self, batch: &Batch) {
        for e in &batch.frames {
            self.sent.insert(Kind::Frame, e.id.0);
        }
        for e in &batch.stacks {
            self.sent.insert(Kind::Stack, e.id.0);
        }
        for e in &batch.label_sets {
            self.sent.insert(Kind::Labels, e.id.0);
        }
        for e in &batch.executables {
            self.sent.insert(Kind::File, e.file_id.0);
        }
    }

    /// Number of processes known.
    pub(crate) fn processes(&self) -> usize {
        lock(&self.state).processes.count()
    }

    /// What the batcher knows of the host's processes and files, shared
    /// with the thread that learns new processes as they appear.
    pub(crate) fn state(&self) -> Arc<Mutex<HostState>> {
        self.state.clone()
    }

    /// Root-first named frames of a kernel stack.
    fn kernel_frames(&self, stack: &RawStack) -> Vec<Frame> {
        stack
            .addrs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &addr)| {
                let addr = if i == 0 { addr } else { addr.saturating_sub(1) };
                match self.kallsyms.as_ref().and_then(|k| k.lookup(addr)) {
                    Some(sym) => Frame::Named {
                        kind: FrameKind::Kernel,
                        function: sym.name.to_string(),
                        module: Some(sym.module.to_string()),
                        file: None,
                        line: 0,
                    },
                    None => unknown(FrameKind::Kernel, crate::kallsyms::KERNEL_MODULE),
                }
            })
            .collect()
    }
}

/// What the agent knows of the host's processes and files: filled by the
/// batcher at each drain and, as they appear, by the thread that reads the
/// eBPF program's new-process announcements (see [`crate::Agent`]).
#[derive(Debug, Default)]
pub(crate) struct HostState {
    processes: ProcessTable,
    files: FileCache,
    /// Names Python frames, remembering code objects.
    python: PythonNamer,
    /// Names JVM frames, remembering methods and code blobs.
    jvm: JvmNamer,
    /// The script each Python process runs (the `script` label), once a
    /// stack of its main thread showed it; the main class or jar of each
    /// JVM process.
    scripts: HashMap<u32, String>,
    /// Whether the agent loads unwind tables: only then is a walk that
    /// stopped for want of one marked so (without them, every walk would).
    unwind_tables: bool,
    /// Names JIT frames from the processes' perf maps.
    perf_maps: PerfMaps,
    /// Names containers (none by default): shared with the new-process
    /// thread, which looks new containers up outside this state's lock.
    containers: Containers,
}

impl HostState {
    /// What names containers.
    pub(crate) fn containers(&self) -> Containers {
        self.containers.clone()
    }

    /// Takes in a process read (outside the lock) as it appeared, and
    /// reads the ids of the files it maps: returns its code, for the
    /// unwinder.
    pub(crate) fn learn(&mut self, pid: u32, process: Process) -> unwinder::ProcessCode {
        let HostState {
            processes, files, ..
        } = self;
        let process = processes.insert(pid, process);
        let (jit, others): (Vec<&Mapping>, Vec<&Mapping>) =
            process.mappings.iter().partition(|m| m.is_jit());
        unwinder::ProcessCode {
            files: others
                .into_iter()
                .filter(|m| m.is_file())
                .filter_map(|m| Some((m.clone(), files.get(pid, m)?)))
                .collect(),
            jit: jit.into_iter().cloned().collect(),
        }
    }
}

/// Locks `state`; a panic elsewhere while it was held leaves caches that
/// are still consistent enough to use.
pub(crate) fn lock(state: &Mutex<HostState>) -> MutexGuard<'_, HostState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn labels(state: &mut HostState, host: &str, sample: &RawSample) -> LabelSet {
    let mut labels = LabelSet::new()
        .with(label_names::HOST, host.to_string())
        .with(label_names::PID, sample.pid.to_string())
        .with(label_names::THREAD, sample.comm.clone());
    match state.processes.get(sample.pid) {
        Some(p) => {
            let name = if p.name.is_empty() {
                &sample.comm
            } else {
                &p.name
            };
            labels.insert(label_names::PROCESS, name.clone());
            if let Some(c) = &p.container {
                labels.insert(label_names::CONTAINER, c.clone());
                // Cached per container id: a map lookup but for the first
                // sample of a container the new-process thread missed.
                if let Some(info) = state.containers.info(c, p.pod_uid.as_deref()) {
                    container_labels(&mut labels, &info);
                }
            }
        }
        None => labels.insert(label_names::PROCESS, sample.comm.clone()),
    }
    if let Some(script) = state.scripts.get(&sample.pid) {
        labels.insert(label_names::SCRIPT, script.clone());
    }
    labels
}

/// The labels of what is known of a sample's container beside its id.
fn container_labels(labels: &mut LabelSet, info: &ContainerInfo) {
    if let Some(name) = &info.name {
        labels.insert(label_names::CONTAINER_NAME, name.clone());
    }
    if let Some(pod) = &info.pod {
        labels.insert(label_names::POD, pod.clone());
    }
    if let Some(namespace) = &info.namespace {
        labels.insert(label_names::NAMESPACE, namespace.clone());
    }
    for (name, value) in &info.pod_labels {
        labels.insert(name.clone(), value.clone());
    }
}

/// Root-first native frames of a user stack (which comes leaf first),
/// with a marker at the root when the walk was cut; and, when it ran JIT
/// code, how that was named (its worst frame's outcome).
fn user_frames(
    state: &mut HostState,
    runtimes: &Runtimes,
    pid: u32,
    stack: &RawStack,
    executables: &mut HashMap<kiln_model::FileId, (kiln_model::Executable, MappedSource)>,
) -> (Vec<Frame>, Option<JitOutcome>) {
    if state.processes.get(pid).is_none() {
        // Exited before this drain could read its maps: its addresses
        // cannot be placed, so one frame stands for all of them.
        return (vec![unknown(FrameKind::Native, PROCESS_GONE_MODULE)], None);
    }
    let mut out = Vec::with_capacity(stack.addrs.len() + 1);
    let mut broken = false;
    let mut jit: Option<JitOutcome> = None;
    for (i, &addr) in stack.addrs.iter().enumerate() {
        // A Python frame the eBPF walk put in its interpreter's place.
        if addr & crate::abi::FRAME_TAG_MASK == crate::abi::JVM_FRAME {
            match runtimes.jvm.get(&pid) {
                Some(jvm) => state.jvm.frames(pid, jvm, addr, &mut out),
                None => out.push(unknown(FrameKind::Jvm, "[jvm]")),
            }
            continue;
        }
        if addr & crate::abi::FRAME_TAG_MASK == crate::abi::PY_FRAME {
            out.push(match runtimes.python.get(&pid) {
                Some(interp) => state
                    .python
                    .frame(pid, interp, addr, &ProcessMemory::new(pid)),
                None => unknown(FrameKind::Python, "[python]"),
            });
            continue;
        }
        // Past the leaf, addresses are return addresses: the call is
        // the instruction before, and at the end of a function the
        // return address may already belong to the next one.
        let addr = if i == 0 { addr } else { addr.saturating_sub(1) };
        let frame = match state.processes.mapping(pid, addr).cloned() {
            // JIT-compiled code, named by the process's perf map.
            Some(m) if m.is_jit() => {
                let (frame, outcome) = state.perf_maps.frame(pid, addr);
                jit = jit.max(Some(outcome));
                frame
            }
            Some(m) if m.is_file() => match state.files.get(pid, &m) {
                Some(file) => {
                    executables.entry(file.file_id).or_insert_with(|| {
                        (
                            file.executable(),
                            MappedSource {
                                pid,
                                mapping: m.clone(),
                            },
                        )
                    });
                    Frame::Address {
                        kind: FrameKind::Native,
                        file_id: file.file_id,
                        addr: file.vaddr(&m, addr),
                    }
                }
                None => unknown(FrameKind::Native, m.name()),
            },
            Some(m) => unknown(FrameKind::Native, m.name()),
            // A return address outside every executable mapping: the
            // frame-pointer walk went through code built without frame
            // pointers and is following garbage from here on.
            None if i > 0 => {
                broken = true;
                break;
            }
            None => unknown(FrameKind::Native, "[unknown]"),
        };
        out.push(frame);
    }
    if stack.no_table && state.unwind_tables {
        out.push(Frame::named(FrameKind::Truncated, NO_TABLE_YET_FRAME));
    } else if broken {
        out.push(Frame::named(FrameKind::Truncated, BROKEN_CHAIN_FRAME));
    } else if stack.truncated {
        out.push(Frame::named(FrameKind::Truncated, TRUNCATED_FRAME));
    }
    out.reverse();
    (out, jit)
}

/// A frame for code the agent cannot place: named by its module, so that
/// unknown addresses do not each become a frame of their own.
fn unknown(kind: FrameKind, module: &str) -> Frame {
    Frame::Named {
        kind,
        function: "[unknown]".into(),
        module: Some(module.into()),
        file: None,
        line: 0,
    }
}

/// Dictionary entries are sent again after this long, so a backend that
/// lost them (a wiped data directory) heals without an agent restart.
const RESEND_AFTER: Duration = Duration::from_secs(10 * 60);
/// Bound on remembered ids per generation (32 bytes each, twice).
const MAX_REMEMBERED: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Frame,
    Stack,
    Labels,
    File,
}

/// Ids sent recently, in two generations: an id is known while it is in
/// either. The current generation becomes the previous one every
/// `resend_after` or when it holds `max` ids, so each entry is sent again
/// within two rotations at most and memory stays bounded.
#[derive(Debug)]
struct RecentlySent {
    current: HashSet<(Kind, u128)>,
    previous: HashSet<(Kind, u128)>,
    rotated_at: Instant,
    resend_after: Duration,
    max: usize,
}

impl RecentlySent {
    fn new(resend_after: Duration, max: usize) -> Self {
        RecentlySent {
            current: HashSet::new(),
            previous: HashSet::new(),
            rotated_at: Instant::now(),
            resend_after,
            max,
        }
    }

    fn contains(&self, kind: Kind, id: u128) -> bool {
        self.current.contains(&(kind, id)) || self.previous.contains(&(kind, id))
    }

    fn insert(&mut self, kind: Kind, id: u128) {
        self.current.insert((kind, id));
    }

    fn rotate_if_due(&mut self) {
        if self.current.len() >= self.max || self.rotated_at.elapsed() >= self.resend_after {
            self.previous = std::mem::take(&mut self.current);
            self.rotated_at = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, user: Vec<u64>) -> RawSample {
        RawSample {
            pid,
            tid: pid,
            second: 0,
            comm: "worker".into(),
            count: 3,
            kernel: None,
            user: Some(Arc::new(RawStack {
                addrs: user,
                truncated: false,
                no_table: false,
            })),
            stack_lost: false,
        }
    }

    // Guards the dictionary cache: a delivered batch's entries are left out
    // of the next one, a spooled (undelivered) one's are not.
    #[test]
    fn second_batch_omits_delivered_entries_only() {
        let mut batcher = Batcher::new("h", 1_000_000, None);
        let drained = Drained {
            samples: vec![sample(u32::MAX - 1, vec![1, 2, 3])],
            seen: 3,
            idle: 0,
            lost: 0,
            ..Drained::default()
        };
        let first = batcher.build(&drained, &SampleClock::at(1), 1);
        assert!(!first.frames.is_empty() && !first.stacks.is_empty());
        let again = batcher.build(&drained, &SampleClock::at(2), 2);
        assert_eq!(again.stacks.len(), first.stacks.len(), "not delivered yet");
        batcher.delivered(&again);
        let third = batcher.build(&drained, &SampleClock::at(3), 3);
        assert!(third.frames.is_empty() && third.stacks.is_empty());
        assert!(third.label_sets.is_empty());
        assert_eq!(third.samples.len(), 1);
        assert_eq!(third.samples[0].count, 3);
    }

    // Guards idle and lost accounting: both keep totals right.
    #[test]
    fn idle_and_lost_samples_are_counted() {
        let mut batcher = Batcher::new("h", 1_000_000, None);
        let idle = RawSample {
            pid: 0,
            tid: 0,
            second: 0,
            comm: "swapper/0".into(),
            count: 7,
            kernel: None,
            user: None,
            stack_lost: false,
        };
        let drained = Drained {
            samples: vec![idle],
            seen: 9,
            idle: 7,
            lost: 2,
            ..Drained::default()
        };
        let batch = batcher.build(&drained, &SampleClock::at(1), 1);
        assert_eq!(batch.sample_count(), 9);
        let kinds: Vec<_> = batch.frames.iter().map(|f| f.frame.kind()).collect();
        assert!(kinds.contains(&FrameKind::Idle));
        assert!(kinds.contains(&FrameKind::Truncated));
    }

    // Guards the root marker of a walk that stopped at a file without its
    // table yet: it says why, in place of a bare short stack.
    #[test]
    fn walks_stopped_for_want_of_a_table_say_so_at_the_root() {
        let mut batcher = Batcher::new("h", 1_000_000, None);
        batcher.expect_unwind_tables();
        let me = std::process::id();
        let code =
            walks_stopped_for_want_of_a_table_say_so_at_the_root as *const () as usize as u64;
        let mut early = sample(me, vec![code]);
        early.user = Some(Arc::new(RawStack {
            addrs: vec![code],
            truncated: false,
            no_table: true,
        }));
        let drained = Drained {
            samples: vec![early],
            seen: 1,
            ..Drained::default()
        };
        let batch = batcher.build(&drained, &SampleClock::at(1), 1);
        let frames = &batch.stacks[0].frames;
        assert_eq!(frames.len(), 2, "marker, leaf");
        let root = batch.frames.iter().find(|f| f.id == frames[0]).unwrap();
        assert_eq!(
            root.frame,
            Frame::named(FrameKind::Truncated, NO_TABLE_YET_FRAME)
        );
    }

    // Guards the cut of frame-pointer walks that leave the process's code,
    // and the single frame for processes that are gone.
    #[test]
    fn garbage_return_addresses_are_cut_at_the_root() {
        let mut batcher = Batcher::new("h", 1_000_000, None);
        let me = std::process::id();
        let code = garbage_return_addresses_are_cut_at_the_root as *const () as usize as u64;
        let drained = Drained {
            samples: vec![sample(me, vec![code, code + 1, 0x10, code])],
            seen: 3,
            idle: 0,
            lost: 0,
            ..Drained::default()
        };
        let batch = batcher.build(&drained, &SampleClock::at(1), 1);
        let frames = &batch.stacks[0].frames;
        assert_eq!(frames.len(), 3, "marker, caller, leaf");
        let root = batch.frames.iter().find(|f| f.id == frames[0]).unwrap();
        assert_eq!(
            root.frame,
            Frame::named(FrameKind::Truncated, BROKEN_CHAIN_FRAME)
        );

        let gone = Drained {
            samples: vec![sample(u32::MAX - 1, vec![1, 2, 3])],
            seen: 3,
            idle: 0,
            lost: 0,
            ..Drained::default()
        };
        let batch = batcher.build(&gone, &SampleClock::at(1), 1);
        assert_eq!(batch.stacks[0].frames.len(), 1);
    }

    // Guards that off-CPU waits go apart from CPU samples: a batch of
    // their own, weighed in nanoseconds (`period_ns` 1), every label set
    // saying `device_kind=off_cpu`, lost nanoseconds kept; and none at all
    // when off-CPU profiling is off or nothing waited.
    #[test]
    fn off_cpu_waits_are_a_batch_of_their_own() {
        use crate::sampler::OffCpuDrained;

        let mut batcher = Batcher::new("h", 1_000_000, None);
        let mut wait = sample(u32::MAX - 1, vec![1, 2, 3]);
        wait.count = 7_000_000;
        let mut drained = Drained {
            samples: vec![sample(u32::MAX - 1, vec![1, 2, 3])],
            seen: 3,
            ..Drained::default()
        };
        assert!(
            batcher
                .build_off_cpu(&drained, &SampleClock::at(1), 1)
                .is_none(),
            "off"
        );
        drained.off_cpu = Some(OffCpuDrained::default());
        assert!(
            batcher
                .build_off_cpu(&drained, &SampleClock::at(1), 1)
                .is_none(),
            "no waits"
        );
        drained.off_cpu = Some(OffCpuDrained {
            waits: vec![wait],
            lost_ns: 5,
            ..OffCpuDrained::default()
        });

        let cpu = batcher.build(&drained, &SampleClock::at(1), 1);
        assert_eq!(cpu.period_ns, 1_000_000);
        assert_eq!(cpu.sample_count(), 3);
        assert!(
            cpu.label_sets
                .iter()
                .all(|e| e.labels.get(label_names::DEVICE_KIND).is_none())
        );

        let off = batcher
            .build_off_cpu(&drained, &SampleClock::at(1), 1)
            .expect("an off-CPU batch");
        assert_eq!(off.period_ns, 1);
        assert_eq!(off.sample_count(), 7_000_005);
        assert_eq!(off.label_sets.len(), 2, "the thread's, and the lost time's");
        assert!(
            off.label_sets
                .iter()
                .all(|e| e.labels.get(label_names::DEVICE_KIND) == Some(OFF_CPU_DEVICE_KIND))
        );
        let lost = off
            .frames
            .iter()
            .any(|f| f.frame == Frame::named(FrameKind::Truncated, SAMPLES_LOST_FRAME));
        assert!(lost, "lost nanoseconds under their frame");
        // The stack is the CPU sample's: its dictionary entries are left
        // out once the CPU batch is delivered, its label set is not.
        batcher.delivered(&cpu);
        let again = batcher
            .build_off_cpu(&drained, &SampleClock::at(2), 2)
            .unwrap();
        assert_eq!(off.stacks.len(), 2);
        assert_eq!(again.stacks.len(), 1, "only the lost frame's");
        assert_eq!(again.label_sets.len(), 2);
    }

    // Guards JIT frames end to end in user space: addresses in this
    // process's anonymous executable memory become the frames its perf
    // map names (its tiers one frame), an address the map lacks the
    // [unknown JIT] marker, under the native caller; the samples are
    // counted by outcome.
    #[test]
    fn jit_frames_are_named_from_the_perf_map_and_counted() {
        let _own = crate::perf_map::OWN_PERF_MAP
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        const LEN: usize = 0x2000;
        // SAFETY: a fresh anonymous mapping, unmapped at the end; nothing
        // in it is run.
        let jit = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(jit, libc::MAP_FAILED);
        let base = jit as u64;
        let me = std::process::id();
        let map = format!("/tmp/perf-{me}.map");
        std::fs::write(
            &map,
            format!(
                "{:x} 100 JS:~outer /srv/app.js:1:1\n{:x} 100 JS:*inner /srv/app.js:9:1\n",
                base,
                base + 0x100
            ),
        )
        .unwrap();
        let code = jit_frames_are_named_from_the_perf_map_and_counted as *const () as usize as u64;
        let mut batcher = Batcher::new("h", 1_000_000, None);
        // Leaf in inner, called from outer (a return address), called
        // from native code; then a stack whose leaf the map does not name.
        let named = sample(me, vec![base + 0x110, base + 0x21, code]);
        let mut unnamed = sample(me, vec![base + 0x1000, code]);
        unnamed.count = 2;
        let drained = Drained {
            samples: vec![named, unnamed],
            seen: 5,
            ..Drained::default()
        };
        let batch = batcher.build(&drained, &SampleClock::at(1), 1);
        std::fs::remove_file(&map).unwrap();
        // SAFETY: the mapping made above, not used after.
        unsafe { libc::munmap(jit, LEN) };

        let frame = |id| &batch.frames.iter().find(|f| f.id == id).unwrap().frame;
        let mut stacks: Vec<Vec<&Frame>> = batch
            .stacks
            .iter()
            .map(|s| s.frames.iter().map(|&id| frame(id)).collect())
            .collect();
        stacks.sort_by_key(|s| s.len());
        let jit_frame = |function: &str, line| Frame::Named {
            kind: FrameKind::Jit,
            function: function.into(),
            module: None,
            file: Some("/srv/app.js".into()),
            line,
        };
        assert!(
            matches!(stacks[1][0], Frame::Address { .. }),
            "{:?}",
            stacks[1]
        );
        assert_eq!(
            stacks[1][1..],
            [&jit_frame("outer", 1), &jit_frame("inner", 9)]
        );
        assert_eq!(
            stacks[0][1],
            &Frame::named(FrameKind::Jit, crate::UNKNOWN_JIT_FRAME)
        );
        assert_eq!(
            batcher.jit_coverage(),
            JitCoverage {
                named: 3,
                not_in_map: 2,
                no_map: 0
            }
        );
        let points: Vec<_> = batch
            .metrics
            .iter()
            .filter(|m| m.name == crate::JIT_SAMPLES)
            .collect();
        assert_eq!(points.len(), 3);
    }

    #[test]
    fn recently_sent_rotates_by_size() {
        let mut sent = RecentlySent::new(Duration::from_secs(3600), 2);
        sent.insert(Kind::Frame, 1);
        sent.insert(Kind::Frame, 2);
        sent.rotate_if_due();
        assert!(
            sent.contains(Kind::Frame, 1),
            "previous generation still counts"
        );
        sent.insert(Kind::Frame, 3);
        sent.insert(Kind::Frame, 4);
        sent.rotate_if_due();
        assert!(!sent.contains(Kind::Frame, 1));
        assert!(sent.contains(Kind::Frame, 4));
        assert!(!sent.contains(Kind::Stack, 4), "kinds are apart");
    }

    #[test]
    fn samples_keep_the_second_they_were_taken() {
        let clock = SampleClock {
            boot_to_wall_ns: 1_000_000_000_000,
            from_ns: 1_000_000_000_000 + 100_000_000_000,
            to_ns: 1_000_000_000_000 + 105_000_000_000,
        };
        // Second 102 of boot, in the middle of its second.
        assert_eq!(clock.stamp(102), 1_000_000_000_000 + 102_500_000_000);
        // A key counted just before the previous drain: within a second
        // before the interval.
        assert_eq!(clock.stamp(99), 1_000_000_000_000 + 99_500_000_000);
        // Nonsense seconds stay within the interval's bounds.
        assert_eq!(clock.stamp(0), clock.from_ns - 1_000_000_000);
        assert_eq!(clock.stamp(u32::MAX), clock.to_ns);
        let mut batcher = Batcher::new("h", 1_000_000, None);
        let mut a = sample(std::process::id(), vec![]);
        a.second = 101;
        let mut b = sample(std::process::id(), vec![]);
        b.second = 104;
        let drained = Drained {
            samples: vec![a, b],
            ..Drained::default()
        };
        let batch = batcher.build(&drained, &clock, clock.to_ns);
        let mut stamps: Vec<i64> = batch.samples.iter().map(|s| s.timestamp_ns).collect();
        stamps.sort();
        assert_eq!(stamps, vec![clock.stamp(101), clock.stamp(104)]);
    }
}
