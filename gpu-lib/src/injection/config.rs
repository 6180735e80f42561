//! The library's settings, from the environment.

use std::path::PathBuf;
use std::time::Duration;

use crate::aggregate::Limits;

use crate::log::{Level, log};
use crate::marking::MarkPolicy;
use crate::pc_sampler::{Collection, DrainPolicy, PcSamplingSettings};
use crate::socket::DEFAULT_SOCKET_PATH;

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
    /// Which launches the agent's probe walks the stack of
    /// (`KILN_CUDA_MARKS_PER_SECOND`, per thread, default 200).
    pub marking: MarkPolicy,
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
            marking: MarkPolicy::default(),
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
        if let Some(n) = number("KILN_CUDA_MARKS_PER_SECOND").and_then(|n| u32::try_from(n).ok()) {
            config.marking.per_second = n;
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
                worker_sleep: number("KILN_CUDA_PC_SAMPLING_WORKER_SLEEP_MS")
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
                hardware_buffer_bytes: number("KILN_CUDA_PC_SAMPLING_HW_BUFFER_MB")
                    .filter(|mb| (1..=1 << 20).contains(mb))
                    .and_then(|mb| usize::try_from(mb << 20).ok()),
                collection: match var("KILN_CUDA_PC_SAMPLING_MODE").as_deref().map(str::trim) {
                    Some("idle") => Collection::EnabledIdle,
                    _ => Collection::Continuous,
                },
                ..default
            });
        }
        config
    }
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
                    "KILN_CUDA_MARKS_PER_SECOND" => "50",
                    "KILN_CUDA_TIMELINE" => "/tmp/t.jsonl",
                    "KILN_CUDA_PC_SAMPLING" => "1",
                    "KILN_CUDA_PC_SAMPLING_PERIOD" => "40",
                    "KILN_CUDA_PC_SAMPLING_DRAIN_MS" => "100",
                    "KILN_CUDA_PC_SAMPLING_CALL_BOUND_MS" => "0",
                    "KILN_CUDA_PC_SAMPLING_WORKER_SLEEP_MS" => "1000",
                    "KILN_CUDA_PC_SAMPLING_HW_BUFFER_MB" => "64",
                    "KILN_CUDA_PC_SAMPLING_MODE" => "idle",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let c = Config::from_vars(vars);
        assert_eq!(c.socket_path, PathBuf::from("/tmp/k.sock"));
        assert_eq!(c.snapshot_interval, Duration::from_millis(250));
        assert_eq!(c.timeline, Some(PathBuf::from("/tmp/t.jsonl")));
        assert_eq!(c.marking.per_second, 50);
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
        assert_eq!(pc.worker_sleep, Some(Duration::from_secs(1)));
        assert_eq!(pc.hardware_buffer_bytes, Some(64 << 20));
        assert_eq!(pc.collection, Collection::EnabledIdle);

        let c = Config::from_vars(|_| None);
        assert_eq!(c.socket_path, PathBuf::from(DEFAULT_SOCKET_PATH));
        assert!(c.pc_sampling.is_none() && c.timeline.is_none());
    }
}
