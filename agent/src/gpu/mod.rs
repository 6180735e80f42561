//! GPU profiles from CUDA processes running `libkiln_cuda.so`
//! (`CUDA_INJECTION64_PATH`): the library's snapshots, received on a Unix
//! socket, folded into `gpu_kernel` → `gpu_instruction` → `gpu_stall`
//! stacks and handed out as batches beside the CPU ones.
//!
//! Each connection (one per CUDA process) gets a reader thread; snapshots
//! wait in a bounded queue (the oldest go, counted, when the agent falls
//! behind). [`GpuReceiver::batches`] empties it into at most two batches:
//! kernel time (weights in ns, `period_ns` = 1, so counts × period is GPU
//! time) and PC samples (label `gpu_weight=samples`), since the two units
//! do not add up.
//!
//! The launching CPU stacks come from [`LaunchStacks`], filled by the
//! uprobe (`kiln_gpu_launch` in `profiler.bpf.c`) that the agent attaches
//! to `kiln_cuda_launch_marker(correlation_id, tid)` in every
//! `libkiln_cuda.so` it sees mapped; kernels whose launch it did not see
//! are rooted at the kernel, under the process and thread labels.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kiln_cuda::sass::CubinStore;
use kiln_cuda::{
    FoldOptions, Snapshot, SnapshotListener, StallReasonTable, WeightUnit, fold_snapshot,
};
use kiln_model::{Batch, BatchBuilder, Frame, LabelSet, label_names};

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
    snapshots: VecDeque<Snapshot>,
    dropped: AtomicU64,
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

    /// Folds every queued snapshot into batches stamped `now_ns`: the
    /// kernel-time batch first, then the PC-sample batch, each only when
    /// it has samples.
    pub fn batches(&mut self, now_ns: i64) -> Vec<Batch> {
        let snapshots: Vec<Snapshot> = match self.queue.lock() {
            Ok(mut q) => q.snapshots.drain(..).collect(),
            Err(_) => return Vec::new(),
        };
        let mut time = BatchBuilder::new(self.host.clone(), now_ns, 1);
        let mut samples = BatchBuilder::new(self.host.clone(), now_ns, 0);
        let (mut any_time, mut any_samples) = (false, false);
        for snapshot in &snapshots {
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
            let stacks = fold_snapshot(snapshot, stalls, &options, |_tid, correlation_id| {
                launch_stacks.get(pid, correlation_id)
            });
            let pid_label = snapshot.pid.to_string();
            for stack in stacks {
                let labels = LabelSet::new()
                    .with(label_names::PID, pid_label.as_str())
                    .with(label_names::DEVICE_KIND, "gpu")
                    .with(GPU_WEIGHT_LABEL, stack.unit.as_str());
                let builder = match stack.unit {
                    WeightUnit::Nanoseconds => {
                        any_time = true;
                        &mut time
                    }
                    WeightUnit::Samples => {
                        any_samples = true;
                        &mut samples
                    }
                };
                builder.add(now_ns, &stack.frames, &labels, stack.weight);
            }
        }
        let mut out = Vec::new();
        if any_time {
            out.push(time.finish());
        }
        if any_samples {
            out.push(samples.finish());
        }
        out
    }
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
                for snapshot in stream {
                    let snapshot = match snapshot {
                        Ok(snapshot) => snapshot,
                        Err(e) => {
                            tracing::warn!(error = %e, "gpu snapshot stream closed");
                            return;
                        }
                    };
                    let Ok(mut q) = queue.lock() else { return };
                    if q.snapshots.len() >= MAX_QUEUED_SNAPSHOTS {
                        q.snapshots.pop_front();
                        q.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    q.snapshots.push_back(snapshot);
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
    use kiln_cuda::wire::{KernelAggregate, PcSampleAggregate, StallReasonName};
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
        assert_eq!(batches.len(), 2);
        let time = &batches[0];
        assert_eq!(time.period_ns, 1);
        assert_eq!(time.sample_count(), 5000);
        let samples = &batches[1];
        assert_eq!(samples.sample_count(), 9);
        let frames: Vec<&Frame> = time.frames.iter().map(|f| &f.frame).collect();
        assert!(frames.contains(&&Frame::named(FrameKind::Native, "train_step")));
        assert!(frames.contains(&&Frame::named(FrameKind::GpuKernel, "gemm")));
        let stall = Frame::named(FrameKind::GpuStall, "barrier");
        assert!(samples.frames.iter().any(|f| f.frame == stall));
        assert_eq!(receiver.dropped(), 0);
    }
}
