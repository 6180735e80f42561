//! The running library: CUPTI's callbacks, the queue to the aggregator
//! thread, the ticker that flushes and snapshots, PC sampling's watchdog,
//! and the exit handshake.
//!
//! CUDA threads only ever do a `try_send` on a bounded queue (a full queue
//! drops the event and counts it), read a timestamp and call the launch
//! marker; with PC sampling on, they also read PCs from CUPTI now and then
//! at the exit of a launch, never waiting for another thread to do so
//! (see [`crate::pc_sampler`]). Nothing they do can block on
//! Kiln. All state lives in one process-wide [`Runtime`], because CUPTI's
//! buffer callbacks carry no user data.

mod buffers;
mod callbacks;
mod config;
mod threads;

use buffers::{ActivityBuffer, BufferPool, buffer_completed, buffer_requested};
use callbacks::on_callback;
pub use config::Config;
use threads::{aggregate, tick, watch};

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::cupti::{Cupti, ErrorLog};
use crate::join::Launch;
use crate::log::{Level, log};
use crate::memory::MemoryEvent;
use crate::pc_sampler::{PcOutput, PcSampler};
use crate::pcsampling::PcSample;
use crate::pipeline::ProducerCounts;
use crate::timeline::TimelineWriter;
use crate::watchdog::WatchedCall;
use crate::wire::StallReasonName;

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
}

impl From<PcOutput> for Event {
    fn from(output: PcOutput) -> Self {
        match output {
            PcOutput::StallReasons(reasons) => Event::StallReasons(reasons),
            PcOutput::Samples { samples, dropped } => Event::PcSamples { samples, dropped },
        }
    }
}
