//! The `kiln-agent` command: parses flags, wires the library together, and
//! runs until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kiln_agent::{Agent, AgentConfig, GpuAgent, GpuAgentConfig, HttpSink, Sink, Spool};
use tracing_subscriber::EnvFilter;

/// Kiln's eBPF profiling agent: samples every process on this host and
/// sends the stacks to a Kiln backend. With --no-ebpf, sends only the GPU
/// profiles of CUDA processes running libkiln_cuda.so, unprivileged.
#[derive(Debug, Parser)]
#[command(name = "kiln-agent", version)]
struct Args {
    /// Where batches (and symbol uploads) go: a Kiln backend,
    /// http(s)://HOST:PORT (`kiln up` listens on 7070 by default; or a
    /// gateway).
    #[arg(long, env = "KILN_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    /// The API key batches and symbol uploads are sent with: a key with the
    /// ingest role (`kiln tenant create` or `kiln key create --roles
    /// ingest` print one). The backend puts what it receives under the
    /// key's tenant and project.
    #[arg(long, env = "KILN_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Samples per second on each CPU (1..=1000).
    #[arg(long, env = "KILN_FREQUENCY", default_value_t = kiln_agent::DEFAULT_FREQUENCY_HZ)]
    frequency: u64,
    /// Time between batches (`5s`, `500ms`, `1m`).
    #[arg(long, env = "KILN_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Where batches wait while the backend is away.
    #[arg(
        long,
        env = "KILN_SPOOL_DIR",
        default_value = "/var/lib/kiln-agent/spool"
    )]
    spool_dir: PathBuf,
    /// Cap on the spool's size in bytes; past it the oldest batches are
    /// dropped. 0 disables the spool.
    #[arg(long, env = "KILN_SPOOL_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    spool_max_bytes: u64,
    /// The host name to report (default: the kernel's).
    #[arg(long, env = "KILN_HOST")]
    host: Option<String>,
    /// Walk user stacks by frame pointers only, not with .eh_frame tables.
    #[arg(long, env = "KILN_NO_EH_FRAME")]
    no_eh_frame: bool,
    /// Kernel memory for unwind tables, in MiB (8 bytes a row: libc takes
    /// 28k rows, LLVM's library about a million). Tables are loaded for
    /// the files of sampled processes, once per file; past the budget,
    /// those no running process maps are evicted first, then the least
    /// recently used (their frames are walked by frame pointers until they
    /// are loaded again, from the cache).
    #[arg(long, env = "KILN_UNWIND_TABLE_MIB", default_value_t = kiln_agent::DEFAULT_UNWIND_TABLE_BYTES >> 20)]
    unwind_table_mib: u64,
    /// Where built unwind tables are kept, so that a restart loads them
    /// instead of building them again ("" keeps none).
    #[arg(
        long,
        env = "KILN_UNWIND_CACHE_DIR",
        default_value = "/var/lib/kiln-agent/unwind-cache"
    )]
    unwind_cache_dir: PathBuf,
    /// Most MiB the unwind table cache takes on disk; the least recently
    /// used tables go first.
    #[arg(long, env = "KILN_UNWIND_CACHE_MIB", default_value_t = kiln_agent::DEFAULT_UNWIND_CACHE_BYTES >> 20)]
    unwind_cache_mib: u64,
    /// Do not send the backend the symbols of the executables and
    /// libraries sampled (extracted here, from their ELF symbol tables, so
    /// their frames get names; the files themselves are never sent).
    #[arg(long, env = "KILN_NO_SYMBOL_UPLOAD")]
    no_symbol_upload: bool,
    /// Upload DWARF line tables and inline chains too (file, line and
    /// inlined functions in frames), for files that have them: more CPU
    /// and memory for the agent while it extracts, and larger uploads.
    /// Files with more than 256 MiB of DWARF go with names only.
    #[arg(long, env = "KILN_UPLOAD_DWARF")]
    upload_dwarf: bool,
    /// Most CPU the symbol upload thread may use, in percent of all this
    /// machine's CPUs: it pauses after each file (the busiest programs'
    /// first) and runs at nice 19. A busy host's backlog is spread over
    /// minutes; raise it to get names sooner.
    #[arg(long, env = "KILN_SYMBOL_UPLOAD_CPU_PERCENT", default_value_t = kiln_agent::DEFAULT_SYMBOL_CPU_PERCENT)]
    symbol_upload_cpu_percent: f64,
    /// Directories holding separate debug files by build id
    /// (`DIR/.build-id/xx/rest.debug`, where -dbg packages install them);
    /// a sampled file's symbols are extracted with its debug file's (the
    /// symbol table stripped binaries lack, and with --upload-dwarf its
    /// lines and inlined functions).
    #[arg(
        long = "debug-dir",
        env = "KILN_DEBUG_DIRS",
        value_delimiter = ',',
        default_value = kiln_agent::DEFAULT_DEBUG_DIR
    )]
    debug_dirs: Vec<PathBuf>,

    /// Where CUDA processes running libkiln_cuda.so send their GPU
    /// profiles (the library's KILN_GPU_SOCKET).
    #[arg(long, env = "KILN_GPU_SOCKET", default_value = kiln_cuda::socket::DEFAULT_SOCKET_PATH)]
    gpu_socket: std::path::PathBuf,

    /// Do not receive GPU profiles.
    #[arg(long, env = "KILN_NO_GPU")]
    no_gpu: bool,

    /// Load no eBPF program and open no perf event: only receive the GPU
    /// profiles of CUDA processes running libkiln_cuda.so on --gpu-socket
    /// and send them every --interval. Needs no privilege (for hosts and
    /// containers without CAP_BPF), but profiles no CPU, and kernels are
    /// not placed under the CPU stacks that launched them (those come from
    /// eBPF): they are rooted at the kernel, under process and thread
    /// labels. The sampling flags (--frequency, --cgroup, unwinding,
    /// symbol upload) do not apply.
    #[arg(
        long,
        env = "KILN_NO_EBPF",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_ebpf: bool,

    /// Profile only the processes in this cgroup v2 directory and the
    /// cgroups below it (a container's, or a systemd unit's such as
    /// /sys/fs/cgroup/system.slice/nginx.service); by default, every
    /// process on the host. Idle CPU is then not counted.
    #[arg(long, env = "KILN_CGROUP")]
    cgroup: Option<PathBuf>,

    /// Also profile where threads wait off CPU (locks, I/O, sleeps),
    /// weighted by the time they wait, sent apart from CPU samples (label
    /// device_kind=off_cpu: pick it in the UI's label filter). Its eBPF
    /// program runs at every context switch of the host. Needs Linux 5.18
    /// with BTF.
    #[arg(
        long,
        env = "KILN_OFF_CPU",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    off_cpu: bool,

    /// With --off-cpu, the shortest wait recorded (`1ms`, `100us`, `0`
    /// for every wait): lower sees more short waits, at more cost on
    /// hosts that switch often.
    #[arg(
        long,
        env = "KILN_OFF_CPU_THRESHOLD",
        default_value = "1ms",
        value_parser = humantime::parse_duration
    )]
    off_cpu_threshold: Duration,

    /// Do not read Python frames: CPython programs then show the
    /// interpreter's native frames (_PyEval_EvalFrameDefault) instead of
    /// their Python functions, and get no `script` label.
    #[arg(
        long,
        env = "KILN_NO_PYTHON",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_python: bool,

    /// Do not look at JVM processes: their samples get no `script` label
    /// (main class or jar), and unsupported JVMs no marker frame.
    #[arg(
        long,
        env = "KILN_NO_JAVA",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_java: bool,

    /// Do not read perf maps (/tmp/perf-PID.map, written by Node with
    /// --perf-basic-prof, .NET with DOTNET_PerfMapEnabled=1, the JVM on
    /// `jcmd PID Compiler.perfmap`, LuaJIT, Julia, Wasmtime): JIT-compiled
    /// frames then all show as [unknown JIT].
    #[arg(
        long,
        env = "KILN_NO_PERF_MAPS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_perf_maps: bool,

    /// Label samples with their container's id only: do not read the
    /// container runtimes' state files (containerd, CRI-O, kubelet's logs,
    /// Docker, Podman) for container_name, pod and namespace.
    #[arg(
        long,
        env = "KILN_NO_CONTAINER_NAMES",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_container_names: bool,

    /// Where the host's root is, for the container runtimes' state
    /// (its /run, /var/log and /var/lib under it): in a Kubernetes
    /// DaemonSet, where the host's are mounted (e.g. /host).
    #[arg(long, env = "KILN_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,

    /// Also label samples with their pod's labels whose keys start with
    /// one of these prefixes (comma-separated, e.g. app.kubernetes.io/),
    /// as pod_label_<key, non-alphanumerics made _>; at most 16 a
    /// container. From CRI-O's and cri-dockerd's sandboxes; with
    /// containerd, the pod annotations it passes to the runtime.
    #[arg(long, env = "KILN_POD_LABELS", value_delimiter = ',')]
    pod_labels: Vec<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match try_main(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn try_main(args: Args) -> anyhow::Result<()> {
    let url = args.server.trim().to_owned();
    if url.starts_with("kafka://") {
        bail!("{KAFKA_REMOVED} (--server {url:?})");
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("--server must be an http:// or https:// URL, got {url:?}");
    }
    if args.no_ebpf && args.no_gpu {
        bail!(
            "--no-ebpf and --no-gpu (or KILN_NO_EBPF and KILN_NO_GPU) leave nothing to profile: \
             without eBPF the agent only receives GPU profiles; drop one of them"
        );
    }
    let host = args.host.clone().unwrap_or_else(kiln_agent::host_name);
    if args.no_ebpf {
        return without_ebpf(&args, &url, host);
    }
    let config = AgentConfig {
        frequency_hz: args.frequency,
        interval: args.interval,
        host,
        unwind_tables: !args.no_eh_frame,
        unwind_table_bytes: args.unwind_table_mib.saturating_mul(1 << 20),
        unwind_cache_dir: (!args.unwind_cache_dir.as_os_str().is_empty())
            .then(|| args.unwind_cache_dir.clone()),
        unwind_cache_bytes: args.unwind_cache_mib.saturating_mul(1 << 20),
        cgroup: args.cgroup.clone(),
        off_cpu: args.off_cpu,
        off_cpu_threshold: args.off_cpu_threshold,
        python: !args.no_python,
        java: !args.no_java,
        perf_maps: !args.no_perf_maps,
        container_names: (!args.no_container_names).then(|| kiln_agent::ContainerNames {
            host_root: args.host_root.clone(),
            // An empty KILN_POD_LABELS (a manifest's placeholder) is none.
            pod_label_prefixes: args
                .pod_labels
                .iter()
                .filter(|p| !p.is_empty())
                .cloned()
                .collect(),
        }),
    };
    // Before touching the kernel: a typo should not need root to report.
    config.validate()?;
    let mut sink = open_sink(&args, &url)?;

    stop_on_signals();
    let mut agent = Agent::start(config).context("starting the sampler")?;
    if !args.no_symbol_upload {
        agent
            .upload_symbols_to(
                &url,
                args.api_key.as_deref(),
                kiln_agent::SymbolUpload {
                    debug_dirs: args.debug_dirs.clone(),
                    dwarf: args.upload_dwarf,
                    cpu_percent: args.symbol_upload_cpu_percent,
                    ..Default::default()
                },
            )
            .context("starting the symbol upload thread")?;
    }
    if !args.no_gpu
        && let Err(e) = agent.receive_gpu_from(&args.gpu_socket)
    {
        tracing::warn!(socket = %args.gpu_socket.display(), error = %e, "GPU profiles not received");
    }
    tracing::info!(
        server = url,
        frequency_hz = agent.config().frequency_hz,
        interval = %humantime::format_duration(agent.config().interval),
        cpus = agent.cpus(),
        cgroup = agent.config().cgroup.as_ref().map(|c| c.display().to_string()),
        off_cpu = agent.off_cpu(),
        container_names = agent.config().container_names.is_some(),
        "kiln-agent profiling this host"
    );
    agent.run(sink.as_mut(), &STOP)?;
    Ok(())
}

/// `--no-ebpf`: GPU profiles only, no privilege needed.
fn without_ebpf(args: &Args, url: &str, host: String) -> anyhow::Result<()> {
    let config = GpuAgentConfig {
        interval: args.interval,
        host,
        socket: args.gpu_socket.clone(),
    };
    config.validate()?;
    if let Some(cgroup) = &args.cgroup {
        tracing::warn!(
            cgroup = %cgroup.display(),
            "--cgroup does not apply with --no-ebpf: GPU profiles are not filtered by cgroup"
        );
    }
    if args.off_cpu {
        tracing::warn!("--off-cpu does not apply with --no-ebpf: off-CPU profiling needs eBPF");
    }
    let mut sink = open_sink(args, url)?;
    stop_on_signals();
    let mut agent = GpuAgent::start(config)?;
    tracing::info!(
        server = url,
        gpu_socket = %agent.config().socket.display(),
        interval = %humantime::format_duration(agent.config().interval),
        "kiln-agent without eBPF: no eBPF program loaded, no perf event opened, no CPU \
         profiled; sending the GPU profiles of CUDA processes running libkiln_cuda.so \
         (kernels rooted at the kernel, under process and thread labels)"
    );
    agent.run(sink.as_mut(), &STOP)?;
    Ok(())
}

/// Why `--server kafka://…` is refused.
const KAFKA_REMOVED: &str = "agents send to a gateway over HTTP(S); publishing straight to \
     Kafka was removed because the bus only accepts records a gateway authenticated";

/// The HTTP sink `--server` names, with the spool.
fn open_sink(args: &Args, url: &str) -> anyhow::Result<Box<dyn Sink>> {
    let spool = if args.spool_max_bytes == 0 {
        None
    } else {
        Some(
            Spool::open(&args.spool_dir, args.spool_max_bytes).with_context(|| {
                format!("opening the spool directory {}", args.spool_dir.display())
            })?,
        )
    };
    Ok(Box::new(HttpSink::new(url, args.api_key.as_deref(), spool)))
}

/// Sets [`STOP`] on SIGINT and SIGTERM.
fn stop_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the cast is how libc takes a handler.
        unsafe {
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
}
