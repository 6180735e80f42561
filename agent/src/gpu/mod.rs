//! GPU profiles from CUDA processes running `libkiln_cuda.so`
//! (`CUDA_INJECTION64_PATH`): the library's snapshots, received on a Unix
//! socket, folded into `gpu_kernel` → `gpu_instruction` → `gpu_stall`
//! stacks and handed out as batches beside the CPU ones.
//!
//! Each connection (one per CUDA process) gets a reader thread; snapshots
//! wait in a bounded queue (the oldest go, counted, when the agent falls
//! behind). [`GpuReceiver::batches`] empties it into one batch per unit,
//! since the units do not add up: kernel time (weights in ns, `period_ns`
//! = 1, so counts × period is GPU time), kernel launches, PC samples and
//! device memory, each named by its `gpu_weight` label; and one of metric
//! points.
//!
//! The launching CPU stacks come from [`LaunchStacks`], filled by the
//! uprobe (`kiln_gpu_launch` in `gpu_launch.bpf.c`) that the agent attaches
//! to `kiln_cuda_launch_marker(correlation_id, tid)` in every
//! `libkiln_cuda.so` it sees mapped; kernels whose launch it did not see
//! (all of them without eBPF, `kiln-agent --no-ebpf`) are rooted at the
//! kernel, under the process and thread labels.
//!
//! Kernel-time samples carry `host`, `pid`, `process`, `tid` and `thread`
//! labels, as CPU samples do; PC-sample ones all but `tid` and `thread` (a
//! PC sample has no thread).
//! Names are read from this host's `/proc` when a snapshot arrives, while
//! the process most likely still runs (its last snapshot comes from an
//! `atexit` handler); so the agent must see the CUDA processes' pid
//! namespace for names, and a thread that ended before its kernels were
//! reported has its `tid` label only.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kiln_cuda::sass::CubinStore;
use kiln_cuda::wire::KernelAggregate;
use kiln_cuda::{
    FoldOptions, Snapshot, SnapshotListener, StallReasonTable, WeightUnit, fold_snapshot,
};
use kiln_model::{Batch, BatchBuilder, Frame, LabelSet, label_names};

use crate::nvml::GpuMetricsSampler;
use crate::sink::{Sink, SinkError};

/// Snapshots held between two batches; more and the oldest go.
pub const MAX_QUEUED_SNAPSHOTS: usize = 256;
/// Cubin bytes kept for disassembly.
pub const MAX_CUBIN_BYTES: usize = 256 << 20;
/// Launch stacks kept (the most recent launches).
pub const MAX_LAUNCH_STACKS: usize = 64 << 10;

/// The label that says what a GPU sample's count is.
pub const GPU_WEIGHT_LABEL: &str = "gpu_weight";

#[derive(Debug, Default)]
struct Queue {
    snapshots: VecDeque<Received>,
    dropped: AtomicU64,
}

/// A snapshot and the names of its process and threads, read when it
/// arrived.
#[derive(Debug)]
struct Received {
    snapshot: Snapshot,
    names: Names,
}

/// A CUDA process's name and its threads' (`/proc/<pid>/comm`,
/// `/proc/<pid>/task/<tid>/comm`), `None` where it could not be read.
#[derive(Debug, Clone, Default)]
struct Names {
    process: Option<String>,
    threads: HashMap<u32, Option<String>>,
}

impl Names {
    /// Reads the names `snapshot` needs that are not known yet: the
    /// process's until it is found, each thread's once (a thread gone by
    /// now stays unnamed; `/proc/<pid>/task/<tid>` only holds threads of
    /// that process, so a reused tid elsewhere is never taken for it).
    fn learn(&mut self, snapshot: &Snapshot) {
        let pid = snapshot.pid;
        if self.process.is_none() {
            self.process = read_comm(&format!("/proc/{pid}/comm"));
        }
        for kernel in &snapshot.kernels {
            if kernel.tid != 0 {
                self.threads
                    .entry(kernel.tid)
                    .or_insert_with(|| read_comm(&format!("/proc/{pid}/task/{}/comm", kernel.tid)));
            }
        }
    }

    fn thread(&self, tid: u32) -> Option<&str> {
        self.threads.get(&tid)?.as_deref()
    }
}

fn read_comm(path: &str) -> Option<String> {
    let comm = std::fs::read_to_string(path).ok()?;
    let comm = comm.trim_end_matches('\n');
    (!comm.is_empty()).then(|| comm.to_owned())
}

/// What [`GpuReceiver::send`] handed the sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuReport {
    /// Batches sent (0 to 6).
    pub batches: usize,
    /// GPU kernel time in them, ns.
    pub kernel_ns: u64,
    /// Kernel launches in them.
    pub launches: u64,
    /// PC samples in them.
    pub pc_samples: u64,
    /// Device memory bytes allocated, in them.
    pub allocated_bytes: u64,
    /// Metric points in them.
    pub metric_points: u64,
}

/// A snapshot's end as a batch timestamp: CUPTI's clock is the wall
/// clock's; one far from `now_ns` (a clock that is not) gives `now_ns`.
fn snapshot_time(end_ns: u64, now_ns: i64) -> i64 {
    const DAY_NS: i64 = 86_400 * 1_000_000_000;
    i64::try_from(end_ns)
        .ok()
        .filter(|end| (end - now_ns).abs() < DAY_NS)
        .unwrap_or(now_ns)
}

/// CPU stacks of recent launches, by (pid, correlation id), bounded.
#[derive(Debug, Default)]
pub struct LaunchStacks {
    stacks: HashMap<(u32, u32), Arc<[Frame]>>,
    order: VecDeque<(u32, u32)>,
}

impl LaunchStacks {
    /// Records the stack (root first) a launch was made from.
    pub fn insert(&mut self, pid: u32, correlation_id: u32, stack: Arc<[Frame]>) {
        if self.stacks.insert((pid, correlation_id), stack).is_none() {
            self.order.push_back((pid, correlation_id));
        }
        while self.order.len() > MAX_LAUNCH_STACKS {
            if let Some(old) = self.order.pop_front() {
                self.stacks.remove(&old);
            }
        }
    }

    fn get(&self, pid: u32, correlation_id: u32) -> Option<Vec<Frame>> {
        self.stacks.get(&(pid, correlation_id)).map(|s| s.to_vec())
    }
}

/// Receives snapshots and turns them into batches.
#[derive(Debug)]
pub struct GpuReceiver {
    queue: Arc<Mutex<Queue>>,
    stalls: HashMap<u32, StallReasonTable>,
    cubins: RefCell<CubinStore>,
    launch_stacks: LaunchStacks,
    host: String,
    /// NVML's readings every second, where NVML is (see `crate::nvml`).
    nvml: Option<GpuMetricsSampler>,
}

/// What a GPU batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBatchKind {
    /// Stacks weighing this unit.
    Profile(WeightUnit),
    /// Metric series: NVML's per-GPU readings and each process's device
    /// memory (live and interval peak).
    Metrics,
}

/// Metric names of a process's device memory, from the library's snapshots.
pub mod memory_metrics {
    /// Bytes live at the snapshot's end (labels host, pid, process).
    pub const LIVE: &str = "gpu.process_live_bytes";
    /// The most bytes live at once during the snapshot's interval.
    pub const PEAK: &str = "gpu.process_peak_live_bytes";
}

impl GpuReceiver {
    /// Listens at `socket` (e.g. `/run/kiln/gpu.sock`, what the library's
    /// `KILN_GPU_SOCKET` defaults to) and starts accepting.
    pub fn start(socket: &Path, host: impl Into<String>) -> std::io::Result<Self> {
        let listener = SnapshotListener::bind(socket)?;
        let queue = Arc::new(Mutex::new(Queue::default()));
        let accept_queue = queue.clone();
        std::thread::Builder::new()
            .name("kiln-gpu-accept".into())
            .spawn(move || accept(listener, accept_queue))?;
        Ok(Self {
            queue,
            stalls: HashMap::new(),
            cubins: RefCell::new(CubinStore::new(MAX_CUBIN_BYTES)),
            launch_stacks: LaunchStacks::default(),
            host: host.into(),
            nvml: GpuMetricsSampler::start_if_available(),
        })
    }

    /// The launch stack recorded for (pid, correlation id), root first.
    pub fn launch_stack(&self, pid: u32, correlation_id: u32) -> Option<Vec<Frame>> {
        self.launch_stacks.get(pid, correlation_id)
    }

    /// Where the launch uprobe's stacks go.
    pub fn launch_stacks_mut(&mut self) -> &mut LaunchStacks {
        &mut self.launch_stacks
    }

    /// Snapshots dropped because the agent fell behind.
    pub fn dropped(&self) -> u64 {
        self.queue
            .lock()
            .map(|q| q.dropped.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// Folds every queued snapshot into batches stamped `now_ns`: kernel
    /// time, PC samples, device memory allocated, device memory live at the
    /// snapshot's end; each only when it has samples, each with its unit in
    /// the `gpu_weight` label.
    pub fn batches(&mut self, now_ns: i64) -> Vec<(GpuBatchKind, Batch)> {
        let received: Vec<Received> = match self.queue.lock() {
            Ok(mut q) => q.snapshots.drain(..).collect(),
            Err(_) => return Vec::new(),
        };
        let mut time = BatchBuilder::new(self.host.clone(), now_ns, 1);
        let mut launches = BatchBuilder::new(self.host.clone(), now_ns, 0);
        let mut samples = BatchBuilder::new(self.host.clone(), now_ns, 0);
        let mut allocated = BatchBuilder::new(self.host.clone(), now_ns, 0);
        let mut live = BatchBuilder::new(self.host.clone(), now_ns, 0);
        let mut metrics = BatchBuilder::new(self.host.clone(), now_ns, 0);
        self.add_nvml_readings(&mut metrics);
        for Received { snapshot, names } in &received {
            for cubin in &snapshot.cubins {
                self.cubins.borrow_mut().add(cubin);
            }
            let stalls = self.stalls.entry(snapshot.pid).or_default();
            stalls.update(snapshot);
            let cubins = &self.cubins;
            let options = FoldOptions {
                instruction_name: Some(Box::new(move |crc, function, pc| {
                    cubins.borrow_mut().instruction(crc, function, pc)
                })),
            };
            let launch_stacks = &self.launch_stacks;
            let pid = snapshot.pid;
            let launch_stack = |_tid, correlation_id| launch_stacks.get(pid, correlation_id);
            let mut process = LabelSet::new()
                .with(label_names::HOST, self.host.as_str())
                .with(label_names::PID, pid.to_string())
                .with(label_names::DEVICE_KIND, "gpu");
            if let Some(name) = &names.process {
                process.insert(label_names::PROCESS, name.as_str());
            }
            // Kernel time, one launching thread at a time, so that each
            // thread's kernels carry its labels.
            for (tid, kernels) in by_thread(snapshot) {
                let part = Snapshot {
                    pid,
                    kernels,
                    ..Snapshot::default()
                };
                let mut thread = process.clone();
                if tid != 0 {
                    thread.insert(label_names::TID, tid.to_string());
                    if let Some(name) = names.thread(tid) {
                        thread.insert(label_names::THREAD, name);
                    }
                }
                let time_labels = thread
                    .clone()
                    .with(GPU_WEIGHT_LABEL, WeightUnit::Nanoseconds.as_str());
                let launch_labels = thread.with(GPU_WEIGHT_LABEL, WeightUnit::Launches.as_str());
                for stack in fold_snapshot(&part, stalls, &options, launch_stack) {
                    let (builder, labels) = match stack.unit {
                        WeightUnit::Nanoseconds => (&mut time, &time_labels),
                        WeightUnit::Launches => (&mut launches, &launch_labels),
                        _ => continue,
                    };
                    builder.add(now_ns, &stack.frames, labels, stack.weight);
                }
            }
            // PC samples, spread over wherever their kernel's time went,
            // every thread's: the whole snapshot is folded for them; and
            // device memory, under the allocating calls.
            let has_memory =
                !snapshot.memory_allocated.is_empty() || !snapshot.memory_live.is_empty();
            if snapshot.memory.allocations > 0 {
                let at = snapshot_time(snapshot.end_ns, now_ns);
                for (name, bytes) in [
                    (memory_metrics::LIVE, snapshot.memory.live_bytes),
                    (memory_metrics::PEAK, snapshot.memory.peak_live_bytes),
                ] {
                    // Byte counts are finite: a refusal cannot happen.
                    let _ = metrics.metric(name, &process, at, bytes as f64);
                }
            }
            if !snapshot.pc_samples.is_empty() || has_memory {
                let label =
                    |unit: WeightUnit| process.clone().with(GPU_WEIGHT_LABEL, unit.as_str());
                let units = [
                    (WeightUnit::Samples, label(WeightUnit::Samples)),
                    (
                        WeightUnit::AllocatedBytes,
                        label(WeightUnit::AllocatedBytes),
                    ),
                    (WeightUnit::LiveBytes, label(WeightUnit::LiveBytes)),
                ];
                for stack in fold_snapshot(snapshot, stalls, &options, launch_stack) {
                    let (builder, labels) = match stack.unit {
                        WeightUnit::Samples => (&mut samples, &units[0].1),
                        WeightUnit::AllocatedBytes => (&mut allocated, &units[1].1),
                        WeightUnit::LiveBytes => (&mut live, &units[2].1),
                        WeightUnit::Nanoseconds | WeightUnit::Launches => continue,
                    };
                    builder.add(now_ns, &stack.frames, labels, stack.weight);
                }
            }
        }
        [
            (
                GpuBatchKind::Profile(WeightUnit::Nanoseconds),
                time.finish(),
            ),
            (
                GpuBatchKind::Profile(WeightUnit::Launches),
                launches.finish(),
            ),
            (GpuBatchKind::Profile(WeightUnit::Samples), samples.finish()),
            (
                GpuBatchKind::Profile(WeightUnit::AllocatedBytes),
                allocated.finish(),
            ),
            (GpuBatchKind::Profile(WeightUnit::LiveBytes), live.finish()),
            (GpuBatchKind::Metrics, metrics.finish()),
        ]
        .into_iter()
        .filter(|(_, batch)| !batch.samples.is_empty() || !batch.metrics.is_empty())
        .collect()
    }

    /// NVML's readings since the last batch, as metric points labelled by
    /// host and GPU (and pid for per-process memory).
    fn add_nvml_readings(&self, metrics: &mut BatchBuilder) {
        let Some(nvml) = &self.nvml else { return };
        for (at, readings) in nvml.take() {
            for (name, labels, value) in readings.points() {
                let mut set = LabelSet::new().with(label_names::HOST, self.host.as_str());
                for (label, value) in labels {
                    set.insert(label, value);
                }
                if let Err(e) = metrics.metric(name, &set, at, value) {
                    tracing::debug!(metric = name, error = %e, "GPU metric point not sent");
                }
            }
        }
    }

    /// Hands the batches of every queued snapshot ([`GpuReceiver::batches`])
    /// to `sink`. GPU batches carry their whole dictionary, so there is no
    /// delivery bookkeeping: spooled is as good as delivered. Stops at the
    /// first batch the sink cannot take (the error holds it).
    pub fn send(&mut self, sink: &mut dyn Sink, now_ns: i64) -> Result<GpuReport, SinkError> {
        let mut report = GpuReport::default();
        for (kind, batch) in self.batches(now_ns) {
            sink.send(&batch)?;
            report.batches += 1;
            let total = batch.sample_count();
            match kind {
                GpuBatchKind::Profile(WeightUnit::Nanoseconds) => report.kernel_ns += total,
                GpuBatchKind::Profile(WeightUnit::Launches) => report.launches += total,
                GpuBatchKind::Profile(WeightUnit::Samples) => report.pc_samples += total,
                GpuBatchKind::Profile(WeightUnit::AllocatedBytes) => {
                    report.allocated_bytes += total
                }
                GpuBatchKind::Profile(WeightUnit::LiveBytes) => {}
                GpuBatchKind::Metrics => report.metric_points += batch.metrics.len() as u64,
            }
        }
        Ok(report)
    }
}

/// The snapshot's kernels by launching thread (0: launch not seen).
fn by_thread(snapshot: &Snapshot) -> BTreeMap<u32, Vec<KernelAggregate>> {
    let mut threads: BTreeMap<u32, Vec<KernelAggregate>> = BTreeMap::new();
    for kernel in &snapshot.kernels {
        threads.entry(kernel.tid).or_default().push(kernel.clone());
    }
    threads
}

fn accept(listener: SnapshotListener, queue: Arc<Mutex<Queue>>) {
    loop {
        let Ok(stream) = listener.accept() else {
            continue;
        };
        let queue = queue.clone();
        let spawned = std::thread::Builder::new()
            .name("kiln-gpu-read".into())
            .spawn(move || {
                // One connection is one process: its names are kept.
                let mut names = Names::default();
                for snapshot in stream {
                    let snapshot = match snapshot {
                        Ok(snapshot) => snapshot,
                        Err(e) => {
                            tracing::warn!(error = %e, "gpu snapshot stream closed");
                            return;
                        }
                    };
                    names.learn(&snapshot);
                    let received = Received {
                        snapshot,
                        names: names.clone(),
                    };
                    let Ok(mut q) = queue.lock() else { return };
                    if q.snapshots.len() >= MAX_QUEUED_SNAPSHOTS {
                        q.snapshots.pop_front();
                        q.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    q.snapshots.push_back(received);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for a gpu snapshot connection");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_cuda::SnapshotSender;
    use kiln_cuda::wire::{
        KernelAggregate, MemoryAggregate, MemoryStats, PcSampleAggregate, StallReasonName,
    };
    use kiln_model::FrameKind;

    use super::*;

    /// A snapshot sent by the library's sender over a real socket comes
    /// out as a kernel-time batch and a PC-sample batch, the kernel under
    /// the launch stack the uprobe recorded.
    #[test]
    fn snapshots_become_batches() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gpu.sock");
        let mut receiver = GpuReceiver::start(&socket, "host-a").unwrap();
        receiver.launch_stacks_mut().insert(
            77,
            5,
            vec![Frame::named(FrameKind::Native, "train_step")].into(),
        );
        let snapshot = Snapshot {
            pid: 77,
            kernels: vec![KernelAggregate {
                tid: 78,
                device_id: 0,
                name: "gemm".into(),
                launches: 2,
                total_ns: 5000,
                exemplar_correlation_ids: vec![5],
            }],
            pc_samples: vec![PcSampleAggregate {
                function_name: "gemm".into(),
                cubin_crc: 1,
                function_index: 0,
                pc_offset: 0x40,
                stall_reason: 2,
                samples: 9,
            }],
            stall_reasons: vec![StallReasonName {
                index: 2,
                name: "smsp__pcsamp_warps_issue_stalled_barrier".into(),
            }],
            // cudaMalloc'ed from the same stack as the launch (id 5), and
            // from an unknown one (id 6): rooted at the memory frame.
            memory_allocated: vec![
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 5,
                    bytes: 1 << 20,
                    count: 1,
                },
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 6,
                    bytes: 512,
                    count: 1,
                },
            ],
            memory_live: vec![MemoryAggregate {
                tid: 10,
                correlation_id: 5,
                bytes: 1 << 20,
                count: 1,
            }],
            memory: MemoryStats {
                live_bytes: 1 << 20,
                peak_live_bytes: 1 << 20,
                allocations: 2,
                ..MemoryStats::default()
            },
            ..Snapshot::default()
        };
        SnapshotSender::new(&socket).send(&snapshot).unwrap();

        // Wait for the reader thread to queue it (no timing asserted).
        let mut batches = Vec::new();
        for _ in 0..500 {
            batches = receiver.batches(1_000);
            if !batches.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let kinds: Vec<GpuBatchKind> = batches.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(
            kinds,
            [
                GpuBatchKind::Profile(WeightUnit::Nanoseconds),
                GpuBatchKind::Profile(WeightUnit::Launches),
                GpuBatchKind::Profile(WeightUnit::Samples),
                GpuBatchKind::Profile(WeightUnit::AllocatedBytes),
                GpuBatchKind::Profile(WeightUnit::LiveBytes),
                GpuBatchKind::Metrics,
            ]
        );
        let time = &batches[0].1;
        assert_eq!(time.period_ns, 1);
        assert_eq!(time.sample_count(), 5000);
        let launches = &batches[1].1;
        assert_eq!(launches.sample_count(), 2);
        let launch_labels = &launches.label_sets[0].labels;
        assert_eq!(launch_labels.get(GPU_WEIGHT_LABEL), Some("launches"));
        assert_eq!(launch_labels.get(label_names::TID), Some("78"));
        let samples = &batches[2].1;
        assert_eq!(samples.sample_count(), 9);
        let allocated = &batches[3].1;
        assert_eq!(allocated.sample_count(), (1 << 20) + 512);
        let live = &batches[4].1;
        assert_eq!(live.sample_count(), 1 << 20);
        let memory = Frame::named(FrameKind::GpuMemory, kiln_cuda::MEMORY_FRAME);
        let live_frames: Vec<&Frame> = live.frames.iter().map(|f| &f.frame).collect();
        assert!(live_frames.contains(&&Frame::named(FrameKind::Native, "train_step")));
        assert!(live_frames.contains(&&memory));
        // The process's live and peak bytes, as metric points at `now`
        // (the snapshot's clock is not the wall clock here).
        let metrics = &batches[5].1;
        let mut points: Vec<(&str, f64)> = metrics
            .metrics
            .iter()
            .map(|m| (m.name.as_str(), m.value))
            .collect();
        points.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            points,
            [
                (memory_metrics::LIVE, f64::from(1u32 << 20)),
                (memory_metrics::PEAK, f64::from(1u32 << 20))
            ]
        );
        let frames: Vec<&Frame> = time.frames.iter().map(|f| &f.frame).collect();
        assert!(frames.contains(&&Frame::named(FrameKind::Native, "train_step")));
        assert!(frames.contains(&&Frame::named(FrameKind::GpuKernel, "gemm")));
        let stall = Frame::named(FrameKind::GpuStall, "barrier");
        assert!(samples.frames.iter().any(|f| f.frame == stall));
        assert_eq!(receiver.dropped(), 0);
    }
}
