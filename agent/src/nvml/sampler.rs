//! [`GpuMetricsSampler`]: reads NVML every second on its own thread and
//! keeps the readings until the agent takes them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use super::{GpuReadings, Nvml};

/// How often the sampler reads the GPUs.
pub const GPU_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Readings kept for the agent to take, by default: ten minutes at one a
/// second, the longest interval between batches (`MAX_INTERVAL`). More
/// and the oldest go, counted.
pub const MAX_QUEUED_GPU_READINGS: usize = 600;

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    queue: Mutex<VecDeque<(i64, GpuReadings)>>,
    dropped: AtomicU64,
}

/// Reads every GPU once a second on a thread of its own (`kiln-gpu-metrics`)
/// until dropped, keeping at most a bounded number of readings, each
/// stamped with the time its pass started.
///
/// # Examples
///
/// ```no_run
/// use kiln_agent::GpuMetricsSampler;
///
/// // `None`, after one info line, on hosts without NVIDIA.
/// if let Some(sampler) = GpuMetricsSampler::start_if_available() {
///     std::thread::sleep(std::time::Duration::from_secs(3));
///     for (timestamp_ns, readings) in sampler.take() {
///         println!("{timestamp_ns}: {} points", readings.points().len());
///     }
/// }
/// ```
#[derive(Debug)]
pub struct GpuMetricsSampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl GpuMetricsSampler {
    /// Opens NVML ([`Nvml::open`]) and starts sampling; `None` when there
    /// is nothing to read. A host without NVIDIA's driver, or whose NVML
    /// sees no GPU, gets one info line; any other failure a warning. The
    /// agent runs on either way.
    pub fn start_if_available() -> Option<GpuMetricsSampler> {
        let nvml = match Nvml::open() {
            Ok(nvml) => nvml,
            Err(e) if e.is_absent() => {
                info!(reason = %e, "no NVIDIA driver: no GPU metrics");
                return None;
            }
            Err(e) => {
                warn!(error = %e, "NVML is unusable: no GPU metrics");
                return None;
            }
        };
        if nvml.gpu_count() == 0 {
            info!(path = %nvml.path().display(), "NVML sees no GPU: no GPU metrics");
            return None;
        }
        match GpuMetricsSampler::start(nvml) {
            Ok(sampler) => Some(sampler),
            Err(e) => {
                warn!(error = %e, "no GPU metrics thread");
                None
            }
        }
    }

    /// Samples `nvml` every [`GPU_SAMPLE_INTERVAL`], keeping up to
    /// [`MAX_QUEUED_GPU_READINGS`]; the first pass runs at once.
    pub fn start(nvml: Nvml) -> std::io::Result<GpuMetricsSampler> {
        GpuMetricsSampler::start_with(nvml, GPU_SAMPLE_INTERVAL, MAX_QUEUED_GPU_READINGS)
    }

    /// As [`GpuMetricsSampler::start`], every `interval`, keeping up to
    /// `capacity` readings (at least one).
    pub fn start_with(
        nvml: Nvml,
        interval: Duration,
        capacity: usize,
    ) -> std::io::Result<GpuMetricsSampler> {
        let capacity = capacity.max(1);
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-gpu-metrics".into())
            .spawn(move || run(&nvml, &state, interval, capacity))?;
        Ok(GpuMetricsSampler {
            shared,
            thread: Some(thread),
        })
    }

    /// The readings since the last call, oldest first, each with its time
    /// in nanoseconds since the Unix epoch.
    pub fn take(&self) -> Vec<(i64, GpuReadings)> {
        let mut queue = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        queue.drain(..).collect()
    }

    /// Readings dropped so far because nobody took them in time.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for GpuMetricsSampler {
    /// Stops the thread, waking it from its wait, and joins it: at most
    /// one pass (tens of milliseconds a GPU) later.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

fn run(nvml: &Nvml, shared: &Shared, interval: Duration, capacity: usize) {
    // Passes are due at fixed times from the start, so the period does
    // not drift by the time each pass takes.
    let mut due = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < due {
            // Woken early by `Drop` (or spuriously): the loop rechecks.
            std::thread::park_timeout(due - now);
            continue;
        }
        let timestamp_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let readings = nvml.read();
        {
            let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.len() >= capacity {
                queue.pop_front();
                shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            queue.push_back((timestamp_ns, readings));
        }
        due += interval;
        // Behind by more than a pass (the host was suspended, or reading
        // took longer than the interval): skip the missed ones.
        if due + interval < Instant::now() {
            due = Instant::now() + interval;
        }
    }
}
