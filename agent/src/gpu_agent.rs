//! The agent without eBPF (`kiln-agent --no-ebpf`): GPU profiles only, for
//! hosts and containers that cannot load eBPF programs.
//!
//! It loads no program and opens no perf event, so it needs no privilege:
//! it listens on the GPU socket for the snapshots of CUDA processes
//! running `libkiln_cuda.so` and sends them, as kernel-time and PC-sample
//! batches, every interval through the same loop as the eBPF agent
//! (`run.rs`). What it cannot have is the CPU side: no CPU samples, and no
//! launching CPU stacks (those come from the eBPF uprobe), so kernels are
//! rooted at the kernel frame under the process and thread labels.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use tracing::debug;

use crate::gpu::{GpuReceiver, GpuReport};
use crate::run::{self, Periodic};
use crate::sink::Sink;
use crate::{AgentError, DEFAULT_GPU_SOCKET, DEFAULT_INTERVAL, host_name, nanos};

/// How the eBPF-free agent runs.
#[derive(Debug, Clone)]
pub struct GpuAgentConfig {
    /// Time between batches, 100 ms..=10 min.
    pub interval: Duration,
    /// The host name sent with every batch.
    pub host: String,
    /// Where CUDA processes send their snapshots (their
    /// `KILN_GPU_SOCKET`).
    pub socket: PathBuf,
}

impl Default for GpuAgentConfig {
    fn default() -> Self {
        GpuAgentConfig {
            interval: DEFAULT_INTERVAL,
            host: host_name(),
            socket: PathBuf::from(DEFAULT_GPU_SOCKET),
        }
    }
}

impl GpuAgentConfig {
    /// Checks every field, naming the first that is out of range.
    pub fn validate(&self) -> Result<(), AgentError> {
        crate::config::check_interval(self.interval)?;
        crate::config::check_host(&self.host)
    }
}

/// The running eBPF-free agent: a listening GPU socket.
///
/// # Examples
///
/// ```no_run
/// use std::sync::atomic::AtomicBool;
/// use kiln_agent::{GpuAgent, GpuAgentConfig, MemorySink};
///
/// let config = GpuAgentConfig {
///     socket: "/tmp/kiln-gpu.sock".into(),
///     ..GpuAgentConfig::default()
/// };
/// let mut agent = GpuAgent::start(config)?;
/// let mut sink = MemorySink::default();
/// // Until another thread (a signal handler) sets it.
/// let stop = AtomicBool::new(false);
/// agent.run(&mut sink, &stop)?;
/// # Ok::<(), kiln_agent::AgentError>(())
/// ```
#[derive(Debug)]
pub struct GpuAgent {
    config: GpuAgentConfig,
    receiver: GpuReceiver,
}

impl GpuAgent {
    /// Validates `config` and listens on its socket.
    pub fn start(config: GpuAgentConfig) -> Result<GpuAgent, AgentError> {
        config.validate()?;
        let receiver =
            GpuReceiver::start(&config.socket, config.host.clone()).map_err(|source| {
                AgentError::GpuSocket {
                    path: config.socket.clone(),
                    source,
                }
            })?;
        Ok(GpuAgent { config, receiver })
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &GpuAgentConfig {
        &self.config
    }

    /// Snapshots dropped because the agent fell behind.
    pub fn dropped_snapshots(&self) -> u64 {
        self.receiver.dropped()
    }

    /// Sends the batches of the snapshots received since the last call.
    pub fn tick(&mut self, sink: &mut dyn Sink) -> Result<GpuReport, AgentError> {
        Ok(self.receiver.send(sink, nanos(SystemTime::now()))?)
    }

    /// Ticks every interval until `stop` is set, then sends what was
    /// received since the last tick. Sink failures are logged and do not
    /// stop it.
    pub fn run(&mut self, sink: &mut dyn Sink, stop: &AtomicBool) -> Result<(), AgentError> {
        run::run(self, sink, stop)
    }
}

impl Periodic for GpuAgent {
    fn interval(&self) -> Duration {
        self.config.interval
    }

    fn send_batches(&mut self, sink: &mut dyn Sink) -> Result<(), AgentError> {
        let report = self.tick(sink)?;
        debug!(
            batches = report.batches,
            kernel_ns = report.kernel_ns,
            pc_samples = report.pc_samples,
            dropped_snapshots = self.receiver.dropped(),
            "gpu batches"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_cuda::SnapshotSender;
    use kiln_cuda::wire::KernelAggregate;
    use kiln_model::{Frame, FrameKind, label_names};

    use super::*;
    use crate::MemorySink;

    /// Guards the message a socket the agent cannot create gets: it names
    /// the path (the default one needs root to create).
    #[test]
    fn socket_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let socket = file.join("gpu.sock");
        let e = GpuAgent::start(GpuAgentConfig {
            socket: socket.clone(),
            ..GpuAgentConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!(
                "cannot listen for GPU profiles at {}",
                socket.display()
            )),
            "{e}"
        );
        let e = GpuAgent::start(GpuAgentConfig {
            interval: Duration::from_millis(1),
            ..GpuAgentConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("interval must be 100ms..=10m, got 1ms"), "{e}");
    }

    /// A kernel of this very thread comes out rooted at the kernel frame
    /// (no launch stack without eBPF), labelled with this process's and
    /// thread's names, and a kernel whose launch was not seen (tid 0)
    /// without thread labels.
    #[test]
    fn kernels_under_process_and_thread_labels() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gpu.sock");
        let mut agent = GpuAgent::start(GpuAgentConfig {
            socket: socket.clone(),
            host: "gpu-host".into(),
            ..GpuAgentConfig::default()
        })
        .unwrap();
        let pid = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let kernel = |tid, name: &str, total_ns| KernelAggregate {
            tid,
            device_id: 0,
            name: name.into(),
            launches: 3,
            total_ns,
            exemplar_correlation_ids: vec![1, 2, 3],
        };
        let snapshot = kiln_cuda::Snapshot {
            pid,
            kernels: vec![kernel(tid, "gemm", 3000), kernel(0, "early", 500)],
            ..kiln_cuda::Snapshot::default()
        };
        SnapshotSender::new(&socket).send(&snapshot).unwrap();

        let mut sink = MemorySink::default();
        for _ in 0..500 {
            if agent.tick(&mut sink).unwrap().batches > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            sink.batches.len(),
            2,
            "one batch of kernel time, one of launches"
        );
        let launches = &sink.batches[1];
        assert_eq!(launches.sample_count(), 6, "3 launches of each kernel");
        assert!(
            launches
                .label_sets
                .iter()
                .all(|l| l.labels.get("gpu_weight") == Some("launches"))
        );
        let batch = &sink.batches[0];
        assert_eq!(batch.sample_count(), 3500);
        let comm = |path: String| std::fs::read_to_string(path).unwrap().trim().to_owned();
        let process = comm(format!("/proc/{pid}/comm"));
        let thread = comm(format!("/proc/{pid}/task/{tid}/comm"));
        let frame_of = |id| &batch.frames.iter().find(|f| f.id == id).unwrap().frame;
        let labels_of = |id| &batch.label_sets.iter().find(|l| l.id == id).unwrap().labels;
        let mut seen = Vec::new();
        for sample in &batch.samples {
            let stack = &batch.stacks.iter().find(|s| s.id == sample.stack).unwrap();
            let frames: Vec<&Frame> = stack.frames.iter().map(|&id| frame_of(id)).collect();
            let labels = labels_of(sample.labels);
            assert_eq!(labels.get(label_names::HOST), Some("gpu-host"));
            assert_eq!(labels.get(label_names::PID), Some(pid.to_string().as_str()));
            assert_eq!(labels.get(label_names::PROCESS), Some(process.as_str()));
            assert_eq!(labels.get("gpu_weight"), Some("nanoseconds"));
            seen.push((
                frames,
                labels.get(label_names::TID).map(str::to_owned),
                labels.get(label_names::THREAD).map(str::to_owned),
                sample.count,
            ));
        }
        seen.sort_by_key(|s| s.3);
        let early = Frame::named(FrameKind::GpuKernel, "early");
        let gemm = Frame::named(FrameKind::GpuKernel, "gemm");
        assert_eq!(
            seen,
            vec![
                (vec![&early], None, None, 500),
                (vec![&gemm], Some(tid.to_string()), Some(thread), 3000),
            ]
        );
    }
}
