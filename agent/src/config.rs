//! The agent's configuration, its limits and defaults, and why it could not
//! start or run.

use std::time::Duration;

use crate::cgroup::{Cgroup, CgroupError};
use crate::containers::ContainerNames;
use crate::host_name;
use crate::sampler::{MAX_FREQUENCY_HZ, SamplerError};
use crate::sink::SinkError;

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
    /// Find JVM processes (HotSpot, through its own vmStructs tables;
    /// needs [`AgentConfig::unwind_tables`]): their samples get the
    /// `script` label (main class or jar), and a JVM whose frames are not
    /// read (OpenJ9) a root frame saying so. On by default.
    pub java: bool,
    /// Name JIT-compiled code (in anonymous executable memory) from the
    /// perf map its process writes, `/tmp/perf-PID.map` (Node with
    /// `--perf-basic-prof`, .NET with `DOTNET_PerfMapEnabled=1`, the JVM
    /// on `jcmd PID Compiler.perfmap`, LuaJIT, Julia, Wasmtime), read
    /// safely and as it grows. Off, such frames are all `[unknown JIT]`.
    /// On by default.
    pub perf_maps: bool,
    /// Name the containers of sampled processes (`container_name`, and
    /// under Kubernetes `pod`, `namespace`, chosen pod labels) from their
    /// runtimes' state files; `None` labels them with their id only.
    pub container_names: Option<ContainerNames>,
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
            java: true,
            perf_maps: true,
            container_names: Some(ContainerNames::default()),
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
        if let Some(names) = &self.container_names {
            names.check().map_err(AgentError::Config)?;
        }
        self.resolve_cgroup()?;
        Ok(())
    }

    /// The cgroup to profile, with its id and level.
    pub(crate) fn resolve_cgroup(&self) -> Result<Option<Cgroup>, CgroupError> {
        self.cgroup.as_deref().map(Cgroup::resolve).transpose()
    }
}

/// Checks an interval between batches (either agent's).
pub(crate) fn check_interval(interval: Duration) -> Result<(), AgentError> {
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
pub(crate) fn check_host(host: &str) -> Result<(), AgentError> {
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
        let e = bad(AgentConfig {
            container_names: Some(ContainerNames {
                pod_label_prefixes: vec![String::new()],
                ..ContainerNames::default()
            }),
            ..base.clone()
        });
        assert!(
            e.contains("a pod label prefix must be 1..=256 bytes"),
            "{e}"
        );
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
