//! The eBPF agent `kiln up` runs beside the server, so that a newcomer sees
//! their own machine's flamegraph within seconds.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use kiln_agent::{Agent, AgentConfig, HttpSink, Spool};
use tracing::{info, warn};

/// Spool cap for the local agent: the backend is in the same process, so
/// the spool only bridges its start and stop.
const SPOOL_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The local agent's symbol CPU budget, in percent of the machine: none
/// (no pauses). Its user is at this machine to see names; the upload
/// thread's nice 19 keeps it out of their programs' way. (At 5% of a
/// 2-core machine, the pauses after the machine's big binaries left a
/// program sampled at start unnamed for over three minutes.)
const LOCAL_SYMBOL_CPU_PERCENT: f64 = 100.0;

/// A running local agent.
#[derive(Debug)]
pub(crate) struct LocalAgent {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Checks the agent's configuration before anything starts, so that a bad
/// flag fails `kiln up` at once.
pub(crate) fn config(frequency_hz: u64, cgroup: Option<PathBuf>) -> anyhow::Result<AgentConfig> {
    let config = AgentConfig {
        frequency_hz,
        cgroup,
        ..AgentConfig::default()
    };
    config.validate()?;
    Ok(config)
}

/// Starts the agent, sending to the server at `addr` with `kiln up`'s own
/// key (read from the data directory). When the agent cannot start (no
/// root, no BPF), says why and returns `None`: the server is useful
/// without it.
pub(crate) fn start(
    mut config: AgentConfig,
    addr: SocketAddr,
    data_dir: &Path,
) -> Option<LocalAgent> {
    // Tables built once stay built across restarts of `kiln up`.
    config
        .unwind_cache_dir
        .get_or_insert_with(|| data_dir.join("unwind-cache"));
    let api_key = match std::fs::read_to_string(data_dir.join(kiln_actors::API_KEY_FILE)) {
        Ok(key) => key.trim().to_owned(),
        Err(e) => {
            warn!(error = %e, "not profiling this machine: kiln up's api key is unreadable");
            return None;
        }
    };
    let frequency_hz = config.frequency_hz;
    let mut agent = match Agent::start(config) {
        Ok(agent) => agent,
        Err(e) => {
            warn!(error = %e, "not profiling this machine: the local agent could not start (run as root, or pass --no-agent)");
            return None;
        }
    };
    let spool = match Spool::open(data_dir.join("agent-spool"), SPOOL_MAX_BYTES) {
        Ok(spool) => Some(spool),
        Err(e) => {
            warn!(error = %e, "local agent runs without a spool");
            None
        }
    };
    let server = format!("http://{addr}");
    // The files it samples get symbols on this server without a step of
    // the user's own.
    let how = kiln_agent::SymbolUpload {
        // With DWARF: the server is this machine, so nothing leaves it, and
        // lines and inlined functions are what `kiln up` showed before the
        // agent extracted symbols itself.
        dwarf: true,
        cpu_percent: LOCAL_SYMBOL_CPU_PERCENT,
        ..kiln_agent::SymbolUpload::default()
    };
    if let Err(e) = agent.upload_symbols_to(&server, Some(&api_key), how) {
        warn!(error = %e, "the local agent will not upload symbols");
    }
    // CUDA processes started with CUDA_INJECTION64_PATH=libkiln_cuda.so
    // send their GPU profiles here (the library's default socket).
    let gpu_socket = std::env::var_os("KILN_GPU_SOCKET").map_or_else(
        || kiln_agent::DEFAULT_GPU_SOCKET.into(),
        std::path::PathBuf::from,
    );
    if let Err(e) = agent.receive_gpu_from(&gpu_socket) {
        warn!(socket = %gpu_socket.display(), error = %e, "the local agent will not receive GPU profiles");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        let mut agent = agent;
        let mut sink = HttpSink::new(&server, Some(&api_key), spool);
        std::thread::Builder::new()
            .name("kiln-agent".into())
            .spawn(move || {
                if let Err(e) = agent.run(&mut sink, &stop) {
                    warn!(error = %e, "the local agent stopped");
                }
            })
            .ok()?
    };
    info!(frequency_hz, "profiling this machine");
    Some(LocalAgent { stop, thread })
}

impl LocalAgent {
    /// Stops the agent after it sends what it sampled since its last batch.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}
