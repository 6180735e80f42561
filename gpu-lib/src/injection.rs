//! The running library: CUPTI's callbacks, the queue to the aggregator
//! thread, the ticker that flushes and snapshots, PC sampling's watchdog,
//! and the exit handshake.
//!
//! CUDA threads only ever do a `try_send` on a bounded queue (a full queue
//! drops the event and counts it), read a timestamp and call the launch
//! marker; with PC sampling on, they also read PCs from CUPTI now and then
//! at the exit of a launch, never waiting for another thread to do so
//! (see [`crate::pcsampling::control`]). Nothing they do can block on
//! Kiln. All state lives in one process-wide [`Runtime`], because CUPTI's
//! buffer callbacks carry no user data.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::aggregate::Limits;
use crate::cupti::abi::{self, CallbackData, ModuleResourceData, ResourceData};
use crate::cupti::{ContextHandle, Cupti, ErrorLog};
use crate::join::Launch;
use crate::log::{Level, log};
use crate::memory::{Block, MemoryEvent};
use crate::pcsampling::PcSample;
use crate::pcsampling::control::{DrainPolicy, PcOutput, PcSampler, PcSamplingSettings};
use crate::pipeline::{Pipeline, ProducerCounts};
use crate::socket::{DEFAULT_SOCKET_PATH, SnapshotSender};
use crate::timeline::TimelineWriter;
use crate::watchdog::{Watchdog, WatchedCall};
use crate::wire::{Snapshot, StallReasonName};

/// What the library does, from the environment ([`Config::from_env`]).
#[derive(Debug, Clone)]
pub struct Config {
    /// The agent's socket (`KILN_GPU_SOCKET`).
    pub socket_path: PathBuf,
    /// Time between snapshots (`KILN_CUDA_SNAPSHOT_MS`, default 5000).
    pub snapshot_interval: Duration,
    /// Timeline file (`KILN_CUDA_TIMELINE`), if any.
    pub timeline: Option<PathBuf>,
    /// Timeline size cap (`KILN_CUDA_TIMELINE_MAX_MB`, default 1024).
    pub timeline_max_bytes: u64,
    /// PC sampling (`KILN_CUDA_PC_SAMPLING=1`), off by default.
    pub pc_sampling: Option<PcSamplingSettings>,
    /// Aggregation table sizes.
    pub limits: Limits,
    /// Events the queue to the aggregator holds.
    pub queue_len: usize,
    /// Bytes of one activity buffer.
    pub buffer_bytes: usize,
    /// Activity buffers CUPTI may hold at once; more are refused.
    pub max_buffers: usize,
    /// Largest cubin copied at module load.
    pub max_cubin_bytes: usize,
    /// Register an `atexit` handler that flushes and sends the last
    /// snapshot (off in tests, which call [`shutdown`]).
    pub flush_at_exit: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket_path: PathBuf::from(DEFAULT_SOCKET_PATH),
            snapshot_interval: Duration::from_secs(5),
            timeline: None,
            timeline_max_bytes: 1 << 30,
            pc_sampling: None,
            limits: Limits::default(),
            queue_len: 64 << 10,
            buffer_bytes: 4 << 20,
            max_buffers: 32,
            max_cubin_bytes: 32 << 20,
            flush_at_exit: true,
        }
    }
}

impl Config {
    /// Reads the `KILN_*` variables; values that do not parse keep the
    /// default.
    pub fn from_env() -> Self {
        for gone in [
            "KILN_CUDA_PC_SAMPLING_ON_MS",
            "KILN_CUDA_PC_SAMPLING_OFF_MS",
        ] {
            if std::env::var_os(gone).is_some() {
                log(
                    Level::Warn,
                    format_args!(
                        "{gone} is no longer read: PC sampling runs for each context's whole life \
                         (switching it on and off deadlocked launching programs); \
                         KILN_CUDA_PC_SAMPLING_PERIOD sets its cost"
                    ),
                );
            }
        }
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Config::from_env`] over any variable lookup (tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        let mut config = Config::default();
        if let Some(path) = var("KILN_GPU_SOCKET").filter(|p| !p.is_empty()) {
            config.socket_path = path.into();
        }
        if let Some(ms) = number("KILN_CUDA_SNAPSHOT_MS").filter(|ms| *ms > 0) {
            config.snapshot_interval = Duration::from_millis(ms);
        }
        config.timeline = var("KILN_CUDA_TIMELINE")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        if let Some(mb) = number("KILN_CUDA_TIMELINE_MAX_MB") {
            config.timeline_max_bytes = mb << 20;
        }
        if var("KILN_CUDA_PC_SAMPLING").is_some_and(|v| matches!(v.trim(), "1" | "true" | "on")) {
            let default = PcSamplingSettings::default();
            let millis = |name, default: Duration| {
                number(name)
                    .filter(|ms| *ms > 0)
                    .map_or(default, Duration::from_millis)
            };
            config.pc_sampling = Some(PcSamplingSettings {
                period: number("KILN_CUDA_PC_SAMPLING_PERIOD")
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|p| (5..=31).contains(p))
                    .or(default.period),
                drain: DrainPolicy {
                    interval: millis("KILN_CUDA_PC_SAMPLING_DRAIN_MS", default.drain.interval),
                    ..default.drain
                },
                call_bound: millis("KILN_CUDA_PC_SAMPLING_CALL_BOUND_MS", default.call_bound),
                ..default
            });
        }
        config
    }
}

/// Why the runtime did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// [`start`] was already called in this process.
    #[error("the kiln cuda runtime is already running")]
    AlreadyStarted,
    /// CUPTI refused a call.
    #[error(transparent)]
    Cupti(#[from] crate::cupti::CuptiError),
    /// A thread could not be spawned.
    #[error("spawning the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    /// The timeline file could not be created.
    #[error("creating the timeline file {0}: {1}")]
    Timeline(PathBuf, std::io::Error),
}

enum Event {
    Launch(Launch),
    Buffer(ActivityBuffer),
    Cubin {
        crc: u64,
        image: Vec<u8>,
    },
    Memory(MemoryEvent),
    PcSamples {
        samples: Vec<PcSample>,
        dropped: u64,
    },
    StallReasons(Vec<StallReasonName>),
    Tick,
    Finish(SyncSender<()>),
}

/// A completed activity buffer on its way to the aggregator.
struct ActivityBuffer {
    ptr: *mut u8,
    valid: usize,
}

// SAFETY: the buffer is the pool's allocation, handed over by CUPTI; only
// the aggregator reads it, then gives it back to the pool.
unsafe impl Send for ActivityBuffer {}

/// Activity buffers: 8-byte aligned, reused, at most `max` out at once.
struct BufferPool {
    words: usize,
    max: usize,
    out: AtomicUsize,
    free: Mutex<Vec<Box<[u64]>>>,
}

impl BufferPool {
    fn new(bytes: usize, max: usize) -> Self {
        Self {
            words: bytes.div_ceil(8).max(1),
            max,
            out: AtomicUsize::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    fn bytes(&self) -> usize {
        self.words * 8
    }

    fn take(&self) -> Option<*mut u8> {
        if self.out.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.out.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let reused = self.free.lock().ok().and_then(|mut f| f.pop());
        let buffer = reused.unwrap_or_else(|| vec![0u64; self.words].into_boxed_slice());
        Some(Box::into_raw(buffer).cast::<u8>())
    }

    /// # Safety
    ///
    /// `ptr` must come from [`BufferPool::take`] and not be used after.
    unsafe fn give_back(&self, ptr: *mut u8) {
        let slice = std::ptr::slice_from_raw_parts_mut(ptr.cast::<u64>(), self.words);
        // SAFETY: take() made this box.
        let buffer = unsafe { Box::from_raw(slice) };
        self.out.fetch_sub(1, Ordering::AcqRel);
        if let Ok(mut free) = self.free.lock()
            && free.len() < 4
        {
            free.push(buffer);
        }
    }
}

#[derive(Default)]
struct Counts {
    launches: AtomicU64,
    events_dropped: AtomicU64,
    buffers_refused: AtomicU64,
    snapshots_dropped: AtomicU64,
}

impl Counts {
    fn producer(&self, errors: &ErrorLog, pc: Option<&PcSampler>) -> ProducerCounts {
        let pc = pc.map(PcSampler::counts).unwrap_or_default();
        ProducerCounts {
            launches: self.launches.load(Ordering::Relaxed),
            events_dropped: self.events_dropped.load(Ordering::Relaxed),
            buffers_refused: self.buffers_refused.load(Ordering::Relaxed),
            snapshots_dropped: self.snapshots_dropped.load(Ordering::Relaxed),
            pc_drains: pc.drains,
            pc_drains_skipped: pc.drains_skipped,
            cupti_errors: errors.count(),
            pc_sampling_watchdog_trips: pc.watchdog_trips,
        }
    }
}

/// The library's process-wide state.
pub struct Runtime {
    cupti: Arc<dyn Cupti>,
    config: Config,
    events: SyncSender<Event>,
    counts: Counts,
    pool: BufferPool,
    errors: Arc<ErrorLog>,
    pc: Option<PcSampler>,
    stopping: AtomicBool,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Starts collecting through `cupti`: registers the callbacks, starts the
/// aggregator, ticker and (if configured) PC sampling threads.
pub fn start(cupti: Arc<dyn Cupti>, config: Config) -> Result<(), StartError> {
    let (tx, rx) = sync_channel(config.queue_len.max(1));
    let pool = BufferPool::new(config.buffer_bytes, config.max_buffers);
    let timeline = match &config.timeline {
        Some(path) => Some(
            TimelineWriter::new(path, config.timeline_max_bytes)
                .map_err(|e| StartError::Timeline(path.clone(), e))?,
        ),
        None => None,
    };
    let errors = Arc::new(ErrorLog::default());
    let pc = config
        .pc_sampling
        .map(|settings| PcSampler::new(cupti.clone(), settings, errors.clone()));
    let runtime = Runtime {
        cupti,
        config,
        events: tx,
        counts: Counts::default(),
        pool,
        errors,
        pc,
        stopping: AtomicBool::new(false),
    };
    if RUNTIME.set(runtime).is_err() {
        return Err(StartError::AlreadyStarted);
    }
    let rt = RUNTIME.get().expect("set above");
    spawn("kiln-cuda-agg", move || aggregate(rt, rx, timeline))?;
    rt.cupti
        .enable_kernel_activity(buffer_requested, buffer_completed)?;
    if let Err(e) = rt.cupti.subscribe(on_callback) {
        // Another tool may hold CUPTI's one subscriber slot; kernels are
        // still recorded, without their launching threads.
        log(
            Level::Warn,
            format_args!("{e}: kernels are reported without their launching threads"),
        );
    }
    spawn("kiln-cuda-tick", move || tick(rt))?;
    if let Some(pc) = &rt.pc {
        // Only atomics: this thread never calls CUPTI.
        spawn("kiln-cuda-watch", move || watch(rt, pc.watchdog()))?;
    }
    if rt.config.flush_at_exit {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::atexit(at_exit) };
    }
    log(
        Level::Info,
        format_args!(
            "collecting kernels; snapshots every {:?} to {}{}",
            rt.config.snapshot_interval,
            rt.config.socket_path.display(),
            match rt.config.pc_sampling {
                Some(pc) => format!(
                    "; PC sampling on (period 2^{} cycles, read every {:?} at launch exits, calls bounded to {:?})",
                    pc.period
                        .map_or_else(|| "CUPTI's default".to_owned(), |p| p.to_string()),
                    pc.drain.interval,
                    pc.call_bound
                ),
                None => String::new(),
            }
        ),
    );
    Ok(())
}

/// Flushes CUPTI, sends the last snapshot and stops the threads; waits at
/// most a few seconds. Safe to call more than once.
pub fn shutdown() {
    let Some(rt) = RUNTIME.get() else { return };
    if rt.stopping.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(pc) = &rt.pc {
        pc.finish(&|output| rt.send(output.into()));
    }
    if let Err(e) = rt.flush_all(true) {
        rt.errors
            .report(&e, "kernels still in CUPTI's buffers at exit are lost");
    }
    let (ack_tx, ack_rx) = sync_channel(1);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut finish = Event::Finish(ack_tx);
    loop {
        match rt.events.try_send(finish) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                finish = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = ack_rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}

extern "C" fn at_exit() {
    let _ = catch_unwind(shutdown);
}

fn spawn(name: &'static str, f: impl FnOnce() + Send + 'static) -> Result<(), StartError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if catch_unwind(AssertUnwindSafe(f)).is_err() {
                log(
                    Level::Error,
                    format_args!("the {name} thread panicked; GPU profiling stops"),
                );
            }
        })
        .map(|_| ())
        .map_err(|e| StartError::Thread(name, e))
}

impl Runtime {
    fn send(&self, event: Event) {
        match self.events.try_send(event) {
            Ok(()) => {}
            Err(
                TrySendError::Full(Event::Buffer(b)) | TrySendError::Disconnected(Event::Buffer(b)),
            ) => {
                self.counts.events_dropped.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the buffer is the pool's and nobody else holds it.
                unsafe { self.pool.give_back(b.ptr) };
            }
            Err(_) => {
                self.counts.events_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `cuptiActivityFlushAll`, watched when PC sampling is on.
    fn flush_all(&self, forced: bool) -> Result<(), crate::cupti::CuptiError> {
        let _watch = self
            .pc
            .as_ref()
            .map(|pc| pc.watchdog().watch(WatchedCall::ActivityFlushAll));
        self.cupti.flush_all(forced)
    }

    fn on_launch(&self, data: &CallbackData, cbid: u32) {
        if data.callback_site == abi::API_EXIT {
            if let Some(pc) = &self.pc {
                let ctx = ContextHandle(data.context as usize);
                pc.on_launch_exit(ctx, &|output| self.send(output.into()));
            }
            return;
        }
        if data.callback_site != abi::API_ENTER {
            return;
        }
        let tid = current_tid();
        let timestamp_ns = self.cupti.timestamp_ns();
        crate::kiln_cuda_launch_marker(data.correlation_id, tid);
        self.counts.launches.fetch_add(1, Ordering::Relaxed);
        self.send(Event::Launch(Launch {
            correlation_id: data.correlation_id,
            tid,
            timestamp_ns,
            graph: matches!(
                cbid,
                abi::driver_cbid::GRAPH_LAUNCH | abi::driver_cbid::GRAPH_LAUNCH_PTSZ
            ),
        }));
    }

    /// A device memory call returned: its allocation (with the launch
    /// marker, so that the agent captures the allocating stack under the
    /// call's correlation id) or its free.
    fn on_memory(&self, data: &CallbackData, cbid: u32) {
        if data.callback_site != abi::API_EXIT || data.function_params.is_null() {
            return;
        }
        // A call that failed allocated or freed nothing.
        if !data.function_return_value.is_null()
            // SAFETY: at exit CUPTI points it to the call's CUresult.
            && unsafe { *(data.function_return_value as *const i32) } != 0
        {
            return;
        }
        // SAFETY: each call's params struct, as CUPTI passes it; the out
        // pointers were written by the call that just returned.
        let event = unsafe {
            match cbid {
                id if abi::driver_cbid::MEMORY_ALLOC.contains(&id) => {
                    let p = &*(data.function_params as *const abi::MemAllocParams);
                    (!p.dptr.is_null()).then(|| (Block::Address(*p.dptr), p.bytesize as u64))
                }
                abi::driver_cbid::MEM_ALLOC_PITCH_V2 => {
                    let p = &*(data.function_params as *const abi::MemAllocPitchParams);
                    (!p.dptr.is_null() && !p.pitch.is_null()).then(|| {
                        let bytes = (*p.pitch as u64).saturating_mul(p.height as u64);
                        (Block::Address(*p.dptr), bytes)
                    })
                }
                id if abi::driver_cbid::MEMORY_FREE.contains(&id) => {
                    let p = &*(data.function_params as *const abi::MemFreeParams);
                    self.send(Event::Memory(MemoryEvent::Free { address: p.dptr }));
                    None
                }
                abi::driver_cbid::MEM_CREATE => {
                    let p = &*(data.function_params as *const abi::MemCreateParams);
                    // Only a GPU's memory: the VMM API also creates host
                    // memory.
                    let on_device = p.prop.is_null()
                        || (*p.prop).location_type == abi::MEM_LOCATION_TYPE_DEVICE;
                    (!p.handle.is_null() && on_device)
                        .then(|| (Block::Handle(*p.handle), p.size as u64))
                }
                abi::driver_cbid::MEM_RELEASE => {
                    let p = &*(data.function_params as *const abi::MemReleaseParams);
                    self.send(Event::Memory(MemoryEvent::Release { handle: p.handle }));
                    None
                }
                _ => None,
            }
        };
        if let Some((block, bytes)) = event {
            let tid = current_tid();
            crate::kiln_cuda_launch_marker(data.correlation_id, tid);
            let correlation_id = data.correlation_id;
            self.send(Event::Memory(match block {
                Block::Address(address) => MemoryEvent::Alloc {
                    correlation_id,
                    tid,
                    address,
                    bytes,
                },
                Block::Handle(handle) => MemoryEvent::Create {
                    correlation_id,
                    tid,
                    handle,
                    bytes,
                },
            }));
        }
    }

    fn on_resource(&self, data: &ResourceData, cbid: u32) {
        let ctx = ContextHandle(data.context as usize);
        match cbid {
            abi::resource_cbid::MODULE_LOADED if !data.resource_descriptor.is_null() => {
                // SAFETY: CUPTI passes a CUpti_ModuleResourceData here.
                let module = unsafe { &*(data.resource_descriptor as *const ModuleResourceData) };
                if module.cubin.is_null() || module.cubin_size == 0 {
                    return;
                }
                if module.cubin_size > self.config.max_cubin_bytes {
                    log(
                        Level::Debug,
                        format_args!(
                            "cubin of {} bytes not kept (over the limit)",
                            module.cubin_size
                        ),
                    );
                    return;
                }
                // Copied (and its CRC computed) on the loading thread:
                // the image is only valid during this callback. Module
                // loads are rare next to launches.
                // SAFETY: CUPTI's pointer and size of the module's image.
                let image = unsafe {
                    std::slice::from_raw_parts(module.cubin.cast::<u8>(), module.cubin_size)
                };
                let crc = self
                    .cupti
                    .cubin_crc(image)
                    // Without CUPTI's CRC (no PC Sampling API) no PC sample
                    // will name this cubin; any stable id will do.
                    .unwrap_or_else(|| u64::from(crc32fast::hash(image)));
                self.send(Event::Cubin {
                    crc,
                    image: image.to_vec(),
                });
                if let Some(pc) = &self.pc {
                    pc.on_module_loaded(ctx, &|output| self.send(output.into()));
                }
            }
            abi::resource_cbid::CONTEXT_CREATED => {
                if let Some(pc) = &self.pc {
                    pc.on_context_created(ctx, &|output| self.send(output.into()));
                }
            }
            abi::resource_cbid::CONTEXT_DESTROY_STARTING => {
                if let Some(pc) = &self.pc {
                    pc.on_context_destroying(ctx, &|output| self.send(output.into()));
                }
            }
            _ => {}
        }
    }
}

impl From<PcOutput> for Event {
    fn from(output: PcOutput) -> Self {
        match output {
            PcOutput::StallReasons(reasons) => Event::StallReasons(reasons),
            PcOutput::Samples { samples, dropped } => Event::PcSamples { samples, dropped },
        }
    }
}

/// The watchdog's thread: looks for a CUPTI call running past its bound
/// and says so once; the sampler stops calling CUPTI from then on.
fn watch(rt: &'static Runtime, watchdog: &'static Watchdog) {
    while !rt.stopping.load(Ordering::Acquire) {
        std::thread::sleep(Watchdog::POLL);
        if let Some(overdue) = watchdog.check() {
            log(
                Level::Error,
                format_args!(
                    "{} has not returned after {:?} (bound {:?}): PC sampling is off for this process",
                    overdue.call.name(),
                    overdue.running_for,
                    watchdog.bound()
                ),
            );
            return;
        }
    }
}

fn tick(rt: &'static Runtime) {
    loop {
        std::thread::sleep(rt.config.snapshot_interval);
        if rt.stopping.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = rt.flush_all(false) {
            rt.errors
                .report(&e, "kernels wait in CUPTI's buffers until a later flush");
        }
        // This thread is Kiln's own: waiting for room is fine.
        if rt.events.send(Event::Tick).is_err() {
            return;
        }
    }
}

fn aggregate(rt: &'static Runtime, events: Receiver<Event>, timeline: Option<TimelineWriter>) {
    let cupti = rt.cupti.clone();
    let mut pipeline = Pipeline::new(
        std::process::id(),
        rt.config.limits,
        Box::new(move |ptr| cupti.kernel_name(ptr)),
    );
    if let Some(timeline) = timeline {
        pipeline = pipeline.with_timeline(timeline);
    }
    let mut delivery = Delivery::new(rt);
    while let Ok(event) = events.recv() {
        match event {
            Event::Tick => {
                let snapshot = pipeline.snapshot(
                    rt.cupti.timestamp_ns(),
                    rt.counts.producer(&rt.errors, rt.pc.as_ref()),
                );
                delivery.deliver(&snapshot);
            }
            Event::Finish(ack) => {
                // Everything queued before the finish goes in the last
                // snapshot.
                while let Ok(event) = events.try_recv() {
                    take_in(rt, &mut pipeline, event);
                }
                let snapshot = pipeline.final_snapshot(
                    rt.cupti.timestamp_ns(),
                    rt.counts.producer(&rt.errors, rt.pc.as_ref()),
                );
                delivery.deliver(&snapshot);
                let _ = ack.send(());
                return;
            }
            event => take_in(rt, &mut pipeline, event),
        }
    }
}

fn take_in(rt: &Runtime, pipeline: &mut Pipeline, event: Event) {
    match event {
        Event::Launch(launch) => pipeline.on_launch(launch),
        Event::Buffer(buffer) => {
            // SAFETY: the pool's allocation, `valid` bytes filled by CUPTI.
            let bytes = unsafe { std::slice::from_raw_parts(buffer.ptr, buffer.valid) };
            let left = rt
                .cupti
                .for_each_record(bytes, &mut |record| pipeline.on_record(record));
            pipeline.on_unwalked(left);
            // SAFETY: nothing reads the buffer after this.
            unsafe { rt.pool.give_back(buffer.ptr) };
        }
        Event::Cubin { crc, image } => pipeline.on_cubin(crc, image),
        Event::Memory(event) => pipeline.on_memory(event),
        Event::PcSamples { samples, dropped } => pipeline.on_pc_samples(&samples, dropped),
        Event::StallReasons(reasons) => pipeline.on_stall_reasons(reasons),
        Event::Tick | Event::Finish(_) => {}
    }
}

/// Sends snapshots, counting the ones the agent did not get, and says
/// once when the agent is absent and once when it is back.
struct Delivery {
    rt: &'static Runtime,
    sender: SnapshotSender,
    absent: bool,
}

impl Delivery {
    fn new(rt: &'static Runtime) -> Self {
        Self {
            rt,
            sender: SnapshotSender::new(&rt.config.socket_path),
            absent: false,
        }
    }

    fn deliver(&mut self, snapshot: &Snapshot) {
        match self.sender.send(snapshot) {
            Ok(()) if self.absent => {
                self.absent = false;
                log(Level::Info, format_args!("agent reached again"));
            }
            Ok(()) => {}
            Err(e) => {
                self.rt
                    .counts
                    .snapshots_dropped
                    .fetch_add(1, Ordering::Relaxed);
                if !self.absent {
                    self.absent = true;
                    log(
                        Level::Warn,
                        format_args!(
                            "no kiln agent at {} ({e}); GPU snapshots are dropped until one listens",
                            self.rt.config.socket_path.display()
                        ),
                    );
                }
            }
        }
    }
}

unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let taken = catch_unwind(|| {
        let rt = RUNTIME.get()?;
        match rt.pool.take() {
            Some(ptr) => Some((ptr, rt.pool.bytes())),
            None => {
                rt.counts.buffers_refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    })
    .ok()
    .flatten();
    let (ptr, bytes) = taken.unwrap_or((std::ptr::null_mut(), 0));
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = ptr;
        *size = bytes;
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _context: abi::CuContext,
    _stream_id: u32,
    buffer: *mut u8,
    size: usize,
    valid_size: usize,
) {
    if buffer.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        if let Some(rt) = RUNTIME.get() {
            rt.send(Event::Buffer(ActivityBuffer {
                ptr: buffer,
                valid: valid_size.min(size),
            }));
        }
    });
}

unsafe extern "C" fn on_callback(
    _userdata: *mut std::ffi::c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const std::ffi::c_void,
) {
    if cbdata.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        let Some(rt) = RUNTIME.get() else { return };
        if rt.stopping.load(Ordering::Relaxed) {
            return;
        }
        match domain {
            abi::domain::DRIVER_API if abi::driver_cbid::MEMORY.contains(&cbid) => {
                // SAFETY: the driver-API domain passes a CUpti_CallbackData.
                rt.on_memory(unsafe { &*(cbdata as *const CallbackData) }, cbid);
            }
            abi::domain::DRIVER_API if abi::driver_cbid::ALL.contains(&cbid) => {
                // SAFETY: the driver-API domain passes a CUpti_CallbackData.
                rt.on_launch(unsafe { &*(cbdata as *const CallbackData) }, cbid);
            }
            abi::domain::RESOURCE => {
                // SAFETY: the resource domain passes a CUpti_ResourceData.
                rt.on_resource(unsafe { &*(cbdata as *const ResourceData) }, cbid);
            }
            _ => {}
        }
    });
}

/// The calling thread's Linux thread id, read once per thread.
fn current_tid() -> u32 {
    thread_local! {
        static TID: u32 = {
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::gettid() }) as u32
        };
    }
    TID.with(|tid| *tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_vars() {
        let vars = |name: &str| {
            Some(
                match name {
                    "KILN_GPU_SOCKET" => "/tmp/k.sock",
                    "KILN_CUDA_SNAPSHOT_MS" => "250",
                    "KILN_CUDA_TIMELINE" => "/tmp/t.jsonl",
                    "KILN_CUDA_PC_SAMPLING" => "1",
                    "KILN_CUDA_PC_SAMPLING_PERIOD" => "40",
                    "KILN_CUDA_PC_SAMPLING_DRAIN_MS" => "100",
                    "KILN_CUDA_PC_SAMPLING_CALL_BOUND_MS" => "0",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let c = Config::from_vars(vars);
        assert_eq!(c.socket_path, PathBuf::from("/tmp/k.sock"));
        assert_eq!(c.snapshot_interval, Duration::from_millis(250));
        assert_eq!(c.timeline, Some(PathBuf::from("/tmp/t.jsonl")));
        let pc = c.pc_sampling.unwrap();
        assert_eq!(
            pc.period,
            Some(20),
            "40 is outside 5..=31: the default stays"
        );
        assert_eq!(pc.drain.interval, Duration::from_millis(100));
        let default = PcSamplingSettings::default();
        assert_eq!(pc.call_bound, default.call_bound, "a bound of 0 is refused");
        assert_eq!(pc.drain.pending_pcs, default.drain.pending_pcs);

        let c = Config::from_vars(|_| None);
        assert_eq!(c.socket_path, PathBuf::from(DEFAULT_SOCKET_PATH));
        assert!(c.pc_sampling.is_none() && c.timeline.is_none());
    }

    #[test]
    fn pool_is_bounded_and_reuses() {
        let pool = BufferPool::new(100, 2);
        assert_eq!(pool.bytes(), 104);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert!(pool.take().is_none());
        assert_eq!(a as usize % 8, 0);
        // SAFETY: both came from take().
        unsafe {
            pool.give_back(a);
            pool.give_back(b);
        }
        assert!(pool.take().is_some());
    }
}
