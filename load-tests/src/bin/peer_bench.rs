//! `peer_bench`: the agent beside the profilers a user would pick instead,
//! on a busy host, one after the other, on the same workload. Needs root
//! and clang; `scripts/peer-bench.sh` builds the peers and runs it.
//!
//! The host is made busy as `tests/busy_host.rs` makes it
//! (`kiln_test_support::busy_host`: 200 distinct live programs with large
//! `.eh_frame`s, rustc compiling in a loop), once, for the whole bench.
//! Then for each profiler in turn (interleaved when `--runs` > 1, so that
//! a change in the shared machine's load falls on all of them):
//!
//! 1. the profiler starts on the whole host and settles (`--settle`, 60 s):
//!    its CPU until then, the one-time work of meeting the host's running
//!    programs, is reported apart, as start-up CPU seconds (what of that
//!    work is still going on after the settle falls in the window: see
//!    kiln-no-symbols below);
//! 2. the workload runs `--seconds`: by default (`--workload native`)
//!    `agent/tests/workloads/shares.c` built with `-fomit-frame-pointer`,
//!    spending 60/30/10% of its time in three functions under `main`; with
//!    `--workload java`, `agent/tests/workloads/java/JavaShares.java` on a
//!    JDK (`--java`, Debian's OpenJDK 17 by default), 50/35/15% in three
//!    methods under `JavaShares.main`, JIT-compiled as a service runs
//!    (only its main thread's samples count: the JVM's compiler and GC
//!    threads are not the workload);
//! 3. the profiler's cost is read over that window: its process's user +
//!    system time (`/proc/PID/stat`), plus the run time of the eBPF
//!    programs it holds (`run_time_ns` in `/proc/PID/fdinfo`, with BPF
//!    run-time statistics on; the kernel charges it to the interrupted
//!    task, where getrusage cannot see it), as a share of all CPUs; and its
//!    peak RSS (`VmHWM`);
//! 4. after one more report interval, it stops and its stacks are read.
//!
//! Per profiler it reports the workload's samples, the share whose stack
//! reaches its `main` (for Java: whole Java stacks), and the share under
//! each of its three functions; for Kiln also
//! the window's CPU by thread and the largest unwind table its log says it
//! built (it logs those that took over 200 ms).
//!
//! A binary of its own rather than a mode of `agent_bench`: that one runs
//! the agent in-process with every core burning a frame-pointer workload,
//! to isolate the agent's cost per sample; this one drives three
//! profilers as separate processes on a busy host and reads their stacks
//! back from each one's own output.
//!
//! The profilers, each at `--frequency` (19 Hz):
//!
//! - **kiln**: the `kiln-agent` binary, with its defaults (symbol upload
//!   on, a fresh unwind-table cache so that it starts cold), sending to a
//!   throwaway backend in this process that decodes the batches it is
//!   posted and answers symbol uploads as a backend without them would.
//!   Its log gives the largest unwind table it built and how long that
//!   took.
//! - **kiln-no-symbols**: the same with `--no-symbol-upload`, the sampler
//!   and unwinder alone, as the OpenTelemetry profiler runs (it uploads no
//!   symbols). Kiln's uploader works through the host's files a few per
//!   batch, so on this host its extraction (rustc's 150 and 200 MB
//!   libraries among the 200 programs) runs for minutes after start and
//!   falls in the window; this row is the cost without it.
//! - **otel**: the OpenTelemetry eBPF profiler
//!   (`go.opentelemetry.io/ebpf-profiler`) sending OTLP over gRPC to
//!   `scripts/peer-bench/receiver`, which writes each sample's frames
//!   (file, address in the file) for this bench to symbolize, and the
//!   names of the frames it symbolizes itself (Java methods).
//! - **perf**: `perf record -F <frequency> -a -g` (frame pointers), read
//!   back with `perf script`. perf's sampling and stack walks run in the
//!   kernel and are charged to the interrupted tasks: its CPU figure is
//!   only the `perf record` process's. Native workload only: it names no
//!   JIT-compiled Java without an agent inside the JVM.
//!
//! ```text
//! sudo target/release/peer_bench [--seconds 30] [--settle 60] [--runs 1] [--frequency 19]
//!     [--workload native|java] [--java PATH]
//!     [--profilers kiln,kiln-no-symbols,otel,perf] [--kiln-agent PATH] [--kiln-arg ARG]...
//!     [--otel-profiler PATH] [--otel-receiver PATH] [--perf PATH] [--logs DIR]
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kiln_agent::FileInfo;
use kiln_model::{Batch, Frame as KilnFrame, FrameKind, label_names};
use kiln_test_support::busy_host::{BusyHost, PROGRAMS, build_programs};
use object::{Object, ObjectSymbol, SymbolKind};

/// The native workload binary's name, unique on the host so that a peer's
/// frame can be told to be in it by file name alone.
const WORKLOAD_NAME: &str = "kiln-peer-shares";
/// The functions the native workload spends its time in, and the truth.
const NATIVE_SHARES: [(&str, f64); 3] = [
    ("work_sixty", 60.0),
    ("work_thirty", 30.0),
    ("work_ten", 10.0),
];
/// The methods the Java workload spends its time in, and the truth.
const JAVA_SHARES: [(&str, f64); 3] = [
    ("JavaShares.parse", 50.0),
    ("JavaShares.render", 35.0),
    ("JavaShares.digest", 15.0),
];
/// The JVM names its main thread after the launcher.
const JAVA_MAIN_THREAD: &str = "java";

/// Which workload runs under the profilers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WorkloadKind {
    Native,
    Java,
}

/// The workload, built and ready to start.
struct Workload {
    kind: WorkloadKind,
    /// The native binary, or the `java` launcher.
    program: PathBuf,
    /// The directory of the compiled Java classes.
    classes: PathBuf,
    /// The native binary's symbols (none for Java).
    symbols: Symbols,
}

impl Workload {
    fn shares(&self) -> &'static [(&'static str, f64); 3] {
        match self.kind {
            WorkloadKind::Native => &NATIVE_SHARES,
            WorkloadKind::Java => &JAVA_SHARES,
        }
    }

    /// The function every sample of the workload is under.
    fn main_function(&self) -> &'static str {
        match self.kind {
            WorkloadKind::Native => "main",
            WorkloadKind::Java => "JavaShares.main",
        }
    }

    /// The thread whose samples count, where not all do.
    fn thread(&self) -> Option<&'static str> {
        (self.kind == WorkloadKind::Java).then_some(JAVA_MAIN_THREAD)
    }

    fn command(&self, seconds: u64) -> Command {
        let mut command = Command::new(&self.program);
        match self.kind {
            WorkloadKind::Native => command.args([&seconds.to_string(), "cpu"]),
            WorkloadKind::Java => command
                .arg("-cp")
                .arg(&self.classes)
                .args(["JavaShares", &seconds.to_string()]),
        };
        command
    }

    fn describe(&self) -> String {
        match self.kind {
            WorkloadKind::Native => {
                format!("{WORKLOAD_NAME} (shares.c, -O2 -fomit-frame-pointer; truth 60/30/10)")
            }
            WorkloadKind::Java => format!(
                "JavaShares.java on {} (default JIT; its main thread's samples; truth 50/35/15)",
                self.program.display()
            ),
        }
    }

    /// The bench's frame for a Java method named as a profiler names it:
    /// `JavaShares.parse`, or with types, `long JavaShares.parse(long)`.
    fn java_frame(&self, name: &str) -> Frame {
        let without_types = name.split('(').next().unwrap_or(name);
        let method = without_types
            .rsplit(' ')
            .next()
            .unwrap_or(without_types)
            .to_string();
        match self.kind {
            WorkloadKind::Java => Frame::Workload(Some(method)),
            WorkloadKind::Native => Frame::Other(name.to_string()),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Profiler {
    Kiln,
    /// Kiln with `--no-symbol-upload`: the sampler alone, as the
    /// OpenTelemetry profiler (which uploads no symbols) runs.
    KilnNoSymbols,
    Otel,
    Perf,
}

impl Profiler {
    fn title(self) -> &'static str {
        match self {
            Profiler::Kiln => "Kiln (kiln-agent)",
            Profiler::KilnNoSymbols => "Kiln, --no-symbol-upload",
            Profiler::Otel => "OpenTelemetry eBPF profiler",
            Profiler::Perf => "perf record -g (frame pointers)",
        }
    }
}

struct Args {
    workload: WorkloadKind,
    /// The `java` launcher of the JDK the Java workload runs on.
    java: PathBuf,
    seconds: u64,
    settle: u64,
    runs: usize,
    frequency: u64,
    profilers: Vec<Profiler>,
    kiln_agent: PathBuf,
    kiln_args: Vec<String>,
    otel_profiler: Option<PathBuf>,
    otel_receiver: Option<PathBuf>,
    perf: PathBuf,
    /// Where the profilers' logs (and the OTLP receiver's samples) are
    /// kept; by default the bench's temporary directory, removed at the
    /// end.
    logs: Option<PathBuf>,
}

/// The directory the run's logs go to.
fn logs<'a>(args: &'a Args, dir: &'a Path) -> &'a Path {
    args.logs.as_deref().unwrap_or(dir)
}

const USAGE: &str = "peer_bench [--seconds 30] [--settle 60] [--runs 1] [--frequency 19] \
     [--workload native|java] [--java PATH] [--profilers kiln,kiln-no-symbols,otel,perf] [--kiln-agent PATH] [--kiln-arg ARG]... \
     [--otel-profiler PATH] [--otel-receiver PATH] [--perf PATH] [--logs DIR]";

fn parse_args() -> anyhow::Result<Args> {
    let own_dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut args = Args {
        workload: WorkloadKind::Native,
        java: PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64/bin/java"),
        seconds: 30,
        settle: 60,
        runs: 1,
        frequency: 19,
        profilers: vec![
            Profiler::Kiln,
            Profiler::KilnNoSymbols,
            Profiler::Otel,
            Profiler::Perf,
        ],
        kiln_agent: own_dir.join("kiln-agent"),
        kiln_args: Vec::new(),
        otel_profiler: None,
        otel_receiver: None,
        perf: PathBuf::from("perf"),
        logs: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{arg} needs a value ({USAGE})"))
        };
        match arg.as_str() {
            "--workload" => {
                args.workload = match value()?.as_str() {
                    "native" => WorkloadKind::Native,
                    "java" => WorkloadKind::Java,
                    other => bail!("unknown workload {other:?} (native, java)"),
                }
            }
            "--java" => args.java = value()?.into(),
            "--seconds" => args.seconds = value()?.parse()?,
            "--settle" => args.settle = value()?.parse()?,
            "--runs" => args.runs = value()?.parse()?,
            "--frequency" => args.frequency = value()?.parse()?,
            "--profilers" => {
                args.profilers = value()?
                    .split(',')
                    .map(|p| match p {
                        "kiln" => Ok(Profiler::Kiln),
                        "kiln-no-symbols" => Ok(Profiler::KilnNoSymbols),
                        "otel" => Ok(Profiler::Otel),
                        "perf" => Ok(Profiler::Perf),
                        other => {
                            bail!("unknown profiler {other:?} (kiln, kiln-no-symbols, otel, perf)")
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
            "--kiln-agent" => args.kiln_agent = value()?.into(),
            "--kiln-arg" => args.kiln_args.push(value()?),
            "--otel-profiler" => args.otel_profiler = Some(value()?.into()),
            "--otel-receiver" => args.otel_receiver = Some(value()?.into()),
            "--perf" => args.perf = value()?.into(),
            "--logs" => args.logs = Some(value()?.into()),
            other => bail!("unknown argument {other:?} ({USAGE})"),
        }
    }
    Ok(args)
}

/// A frame as the bench needs it: whether it is the workload's (in its
/// binary, or a Java method), and if so its function's name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Frame {
    Workload(Option<String>),
    /// Kiln's root marker of a walk that stopped at a file whose table it
    /// did not have yet (`[unwind table not loaded yet]`).
    NoTableYet,
    /// Any other frame, as the profiler gave it (for the stacks that miss
    /// `main`).
    Other(String),
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Frame::Workload(Some(name)) => f.write_str(name),
            Frame::Workload(None) => f.write_str("(workload, no symbol)"),
            Frame::NoTableYet => f.write_str("[unwind table not loaded yet]"),
            Frame::Other(what) => f.write_str(what),
        }
    }
}

/// The workload's stacks, as (frames, count).
type Stacks = Vec<(Vec<Frame>, u64)>;

/// The workload's function symbols, to name its frames.
#[derive(Default)]
struct Symbols {
    functions: Vec<(u64, u64, String)>,
}

impl Symbols {
    fn of(exe: &Path) -> anyhow::Result<Symbols> {
        let data = std::fs::read(exe)?;
        let file = object::File::parse(&*data)?;
        let mut functions: Vec<_> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.size(), s.name().unwrap_or("").to_string()))
            .collect();
        functions.sort();
        Ok(Symbols { functions })
    }

    fn name(&self, addr: u64) -> Option<String> {
        let i = self.functions.partition_point(|f| f.0 <= addr);
        let (start, size, name) = self.functions.get(i.checked_sub(1)?)?;
        (addr < start + size).then(|| name.clone())
    }
}

/// What one profiler's run measured.
struct Row {
    profiler: Profiler,
    run: usize,
    /// The workload's samples, and how many reach `main`.
    samples: u64,
    rooted: u64,
    /// Of the samples, how many Kiln took before it had the workload's
    /// unwind table. The OpenTelemetry profiler keeps no such samples (its
    /// eBPF program returns without a trace for a process it does not
    /// know yet), so Kiln's share over the others is the like-for-like one.
    before_tables: u64,
    /// Percent of the workload's samples under each of its three
    /// functions ([`Workload::shares`]).
    shares: Vec<f64>,
    /// Over the measured window, as a share of all CPUs: the process's
    /// user + system time, and its eBPF programs' run time (None when it
    /// holds none).
    process_cpu: f64,
    bpf_cpu: Option<f64>,
    /// CPU seconds from start to the end of settling.
    startup_cpu_s: f64,
    peak_rss_kib: u64,
    note: String,
    /// The most frequent stacks that miss `main`, with their share of the
    /// samples: what the profiler could not unwind.
    missed: Vec<(f64, String)>,
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("peer_bench loads eBPF programs and runs perf on the whole host: run it as root");
    }
    let cpus = std::thread::available_parallelism()?.get();
    let dir = std::env::temp_dir().join(format!("kiln-peer-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = RemoveDir(dir.clone());
    if let Some(logs) = &args.logs {
        std::fs::create_dir_all(logs)?;
    }

    let mut profilers = Vec::new();
    for &p in &args.profilers {
        match available(p, &args) {
            Ok(()) => profilers.push(p),
            Err(why) => println!("skipped {}: {why}", p.title()),
        }
    }
    if profilers.is_empty() {
        bail!("no profiler to run");
    }

    eprintln!(
        "building the workload and {PROGRAMS} busy-host programs in {}",
        dir.display()
    );
    let workload = build_workload(&args, &dir)?;
    let programs = build_programs(&dir);

    // Keeps BPF run-time statistics on while the fd lives.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (needs root)")?;
    let backend = Backend::start()?;

    eprintln!("starting the busy host");
    let mut busy = BusyHost::start(&dir, &programs);
    std::thread::sleep(Duration::from_secs(5));

    let mut rows = Vec::new();
    for run in 1..=args.runs {
        for &p in &profilers {
            eprintln!("run {run}: {}", p.title());
            let row = match p {
                Profiler::Kiln | Profiler::KilnNoSymbols => {
                    run_kiln(p, &args, &dir, &workload, &backend, cpus, run)
                }
                Profiler::Otel => run_otel(&args, &dir, &workload, cpus, run),
                Profiler::Perf => run_perf(&args, &dir, &workload, cpus, run),
            };
            match row {
                Ok(row) => {
                    print_row(&row, rows.is_empty());
                    for (share, stack) in &row.missed {
                        eprintln!("  missing main, {share:.1}%: {stack}");
                    }
                    rows.push(row);
                }
                Err(e) => println!("{} run {run} failed: {e:#}", p.title()),
            }
        }
    }
    let rustc_runs = busy.stop_compiling();
    drop(busy);
    println!(
        "\n{cpus} CPUs, {} Hz, {} s windows after {} s of settling; busy host: {PROGRAMS} programs \
         (clang -O2 -fomit-frame-pointer, ~70 KiB of .eh_frame each) and rustc compiling in a loop \
         ({rustc_runs} runs in all); workload {}",
        args.frequency,
        args.seconds,
        args.settle,
        workload.describe()
    );
    Ok(())
}

/// Builds the workload `args` name in `dir`.
fn build_workload(args: &Args, dir: &Path) -> anyhow::Result<Workload> {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/workloads");
    match args.workload {
        WorkloadKind::Native => {
            let program = dir.join(WORKLOAD_NAME);
            kiln_test_support::CBuild::clang()
                .args(["-O2", "-fomit-frame-pointer"])
                .file(&workloads.join("shares.c"), &program);
            Ok(Workload {
                kind: WorkloadKind::Native,
                symbols: Symbols::of(&program)?,
                program,
                classes: PathBuf::new(),
            })
        }
        WorkloadKind::Java => {
            let javac = args.java.with_file_name("javac");
            let classes = dir.join("java-classes");
            let status = Command::new(&javac)
                .arg("-d")
                .arg(&classes)
                .arg(workloads.join("java/JavaShares.java"))
                .status()
                .with_context(|| format!("starting {}", javac.display()))?;
            if !status.success() {
                bail!("{} failed ({status})", javac.display());
            }
            Ok(Workload {
                kind: WorkloadKind::Java,
                program: args.java.clone(),
                classes,
                symbols: Symbols::default(),
            })
        }
    }
}

fn print_row(row: &Row, header: bool) {
    if header {
        println!(
            "\n| profiler | run | workload samples | reach main | work_sixty/thirty/ten % \
             or parse/render/digest % (truth 60/30/10 or 50/35/15) | CPU % of machine: total (process + eBPF) | startup CPU s \
             | peak RSS MiB | notes |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    let rooted = if row.samples == 0 {
        "-".to_string()
    } else if row.before_tables > 0 {
        let after = row.samples - row.before_tables;
        format!(
            "{:.1}% ({}/{}); {:.1}% of the {after} taken once it had the tables",
            100.0 * row.rooted as f64 / row.samples as f64,
            row.rooted,
            row.samples,
            100.0 * row.rooted as f64 / after.max(1) as f64,
        )
    } else {
        format!(
            "{:.1}% ({}/{})",
            100.0 * row.rooted as f64 / row.samples as f64,
            row.rooted,
            row.samples
        )
    };
    let bpf = row
        .bpf_cpu
        .map_or("n/a".to_string(), |b| format!("{:.3}", 100.0 * b));
    println!(
        "| {} | {} | {} | {} | {:.1}/{:.1}/{:.1} | {:.3} ({:.3} + {}) | {:.1} | {:.1} | {} |",
        row.profiler.title(),
        row.run,
        row.samples,
        rooted,
        row.shares[0],
        row.shares[1],
        row.shares[2],
        100.0 * (row.process_cpu + row.bpf_cpu.unwrap_or(0.0)),
        100.0 * row.process_cpu,
        bpf,
        row.startup_cpu_s,
        row.peak_rss_kib as f64 / 1024.0,
        row.note,
    );
    let _ = std::io::stdout().flush();
}

/// Why `p` cannot run here, if it cannot.
fn available(p: Profiler, args: &Args) -> Result<(), String> {
    let exists = |path: &Path, what: &str| {
        if path.is_file() {
            Ok(())
        } else {
            Err(format!("{what} not found at {}", path.display()))
        }
    };
    match p {
        Profiler::Kiln | Profiler::KilnNoSymbols => exists(
            &args.kiln_agent,
            "kiln-agent (cargo build --release -p kiln-agent --bin kiln-agent, or --kiln-agent)",
        ),
        Profiler::Otel => {
            let profiler = args
                .otel_profiler
                .as_deref()
                .ok_or("no --otel-profiler given (scripts/peer-bench.sh builds it)".to_string())?;
            exists(profiler, "the OpenTelemetry eBPF profiler")?;
            let receiver = args
                .otel_receiver
                .as_deref()
                .ok_or("no --otel-receiver given (scripts/peer-bench.sh builds it)".to_string())?;
            exists(receiver, "the OTLP receiver")
        }
        Profiler::Perf if args.workload == WorkloadKind::Java => Err(
            "perf names no JIT-compiled Java (it needs a perf map written inside the JVM)".into(),
        ),
        Profiler::Perf => {
            let out = Command::new(&args.perf)
                .arg("version")
                .output()
                .map_err(|e| format!("{} did not start: {e}", args.perf.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "`{} version` failed: {}",
                    args.perf.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(())
        }
    }
}

/// A profiler process under measurement.
struct Measured {
    child: Child,
    started: Instant,
}

/// CPU time and eBPF run time of a process at one moment.
#[derive(Clone, Default)]
struct Cost {
    cpu: Duration,
    /// CPU time per thread name.
    threads: HashMap<String, Duration>,
    /// Run time per program id of the eBPF programs it holds fds of.
    bpf: HashMap<u64, u64>,
}

impl Measured {
    fn spawn(mut command: Command, log: &Path) -> anyhow::Result<Measured> {
        let log = File::create(log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        Ok(Measured {
            child,
            started: Instant::now(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has exited (it should profile until told to
    /// stop).
    fn alive(&mut self, log: &Path) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            bail!(
                "exited early ({status}); the end of its log ({}):\n{}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }

    fn cost(&self) -> anyhow::Result<Cost> {
        let pid = self.pid();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let (_, ticks) = name_and_ticks(&stat).context("unreadable /proc/PID/stat")?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let cpu = Duration::from_nanos(ticks * 1_000_000_000 / hz);
        let mut threads = HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let Ok(stat) = std::fs::read_to_string(task?.path().join("stat")) else {
                continue;
            };
            if let Some((name, ticks)) = name_and_ticks(&stat) {
                *threads.entry(name).or_default() +=
                    Duration::from_nanos(ticks * 1_000_000_000 / hz);
            }
        }
        let mut bpf = HashMap::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
            let Ok(text) = std::fs::read_to_string(entry?.path()) else {
                continue;
            };
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            if let (Some(id), Some(ns)) = (field("prog_id:"), field("run_time_ns:")) {
                bpf.insert(id, ns);
            }
        }
        Ok(Cost { cpu, threads, bpf })
    }

    fn peak_rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Sends `signal` and waits up to `grace` for the process to exit,
    /// then kills it.
    fn stop(mut self, signal: libc::c_int, grace: Duration) -> anyhow::Result<()> {
        // SAFETY: kill has no memory preconditions; the pid is our child's,
        // not yet reaped.
        unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!("did not exit within {grace:?} of signal {signal}: killed")
    }
}

/// The command name and user + system clock ticks in a `/proc/…/stat`
/// line (the name is in parentheses and may hold spaces; after it, utime
/// and stime are the 12th and 13th fields).
fn name_and_ticks(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((stat[open + 1..close].to_string(), ticks))
}

impl Drop for Measured {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What the common part of a run measured.
struct Window {
    workload_pid: u32,
    process_cpu: f64,
    bpf_cpu: Option<f64>,
    startup_cpu_s: f64,
    peak_rss_kib: u64,
    /// CPU seconds in the window per thread name, the busiest first.
    threads: Vec<(String, f64)>,
}

impl Window {
    /// The busiest threads, for a note: `name 1.23 s, …`.
    fn busiest_threads(&self, n: usize) -> String {
        let threads: Vec<String> = self
            .threads
            .iter()
            .take(n)
            .map(|(name, s)| format!("{name} {s:.2} s"))
            .collect();
        format!("window CPU by thread: {}", threads.join(", "))
    }
}

/// Settles, runs the workload for the window, measures `profiler` over
/// it, and waits `flush` for the last report to go out.
fn measure(
    profiler: &mut Measured,
    log: &Path,
    args: &Args,
    workload: &Workload,
    cpus: usize,
    flush: Duration,
) -> anyhow::Result<Window> {
    let settle_until = profiler.started + Duration::from_secs(args.settle);
    while Instant::now() < settle_until {
        std::thread::sleep(Duration::from_millis(250));
        profiler.alive(log)?;
    }
    let before = profiler.cost()?;
    let t0 = Instant::now();
    let mut child = workload
        .command(args.seconds)
        .spawn()
        .context("starting the workload")?;
    let workload_pid = child.id();
    let window = Duration::from_secs(args.seconds);
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_millis(250));
        profiler.alive(log)?;
    }
    let after = profiler.cost()?;
    let wall = t0.elapsed();
    let peak_rss_kib = profiler.peak_rss_kib();
    let _ = child.wait();
    let machine = wall.as_secs_f64() * cpus as f64;
    let bpf_ns: u64 = after
        .bpf
        .iter()
        .map(|(id, ns)| ns.saturating_sub(before.bpf.get(id).copied().unwrap_or(0)))
        .sum();
    let flush_until = Instant::now() + flush;
    while Instant::now() < flush_until {
        std::thread::sleep(Duration::from_millis(250));
        profiler.alive(log)?;
    }
    let mut threads: Vec<(String, f64)> = after
        .threads
        .iter()
        .map(|(name, t)| {
            let before = before.threads.get(name).copied().unwrap_or_default();
            (name.clone(), t.saturating_sub(before).as_secs_f64())
        })
        .filter(|t| t.1 > 0.0)
        .collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(Window {
        workload_pid,
        threads,
        process_cpu: (after.cpu - before.cpu).as_secs_f64() / machine,
        bpf_cpu: (!after.bpf.is_empty()).then(|| bpf_ns as f64 / 1e9 / machine),
        startup_cpu_s: before.cpu.as_secs_f64(),
        peak_rss_kib,
    })
}

/// The row of a run, from the window and the workload's stacks.
fn row(
    profiler: Profiler,
    run: usize,
    workload: &Workload,
    w: &Window,
    stacks: &Stacks,
    note: String,
) -> Row {
    let samples: u64 = stacks.iter().map(|s| s.1).sum();
    let under = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|s| {
                s.0.iter()
                    .any(|f| matches!(f, Frame::Workload(Some(n)) if n == name))
            })
            .map(|s| s.1)
            .sum()
    };
    let before_tables = stacks
        .iter()
        .filter(|s| s.0.contains(&Frame::NoTableYet))
        .map(|s| s.1)
        .sum();
    Row {
        profiler,
        run,
        samples,
        rooted: under(workload.main_function()),
        before_tables,
        shares: workload
            .shares()
            .iter()
            .map(|(f, _)| 100.0 * under(f) as f64 / samples.max(1) as f64)
            .collect(),
        process_cpu: w.process_cpu,
        bpf_cpu: w.bpf_cpu,
        startup_cpu_s: w.startup_cpu_s,
        peak_rss_kib: w.peak_rss_kib,
        note,
        missed: missed_main(stacks, workload.main_function(), samples),
    }
}

/// The three stacks most often missing `main`, each with its share of the
/// `samples` and its frames as the profiler gave them (outer ones elided).
fn missed_main(stacks: &Stacks, main: &str, samples: u64) -> Vec<(f64, String)> {
    let mut missed: HashMap<String, u64> = HashMap::new();
    for (frames, count) in stacks {
        if frames
            .iter()
            .any(|f| matches!(f, Frame::Workload(Some(n)) if n == main))
        {
            continue;
        }
        let shown: Vec<String> = frames.iter().take(8).map(Frame::to_string).collect();
        let more = frames.len().saturating_sub(shown.len());
        let mut text = shown.join("; ");
        if more > 0 {
            text.push_str(&format!("; … {more} more"));
        }
        *missed.entry(text).or_default() += count;
    }
    let mut missed: Vec<(f64, String)> = missed
        .into_iter()
        .map(|(text, count)| (100.0 * count as f64 / samples.max(1) as f64, text))
        .collect();
    missed.sort_by(|a, b| b.0.total_cmp(&a.0));
    missed.truncate(3);
    missed
}

// ---- Kiln ------------------------------------------------------------

#[allow(
    clippy::too_many_arguments,
    reason = "one run of one profiler: each argument is a different part of its setting"
)]
fn run_kiln(
    profiler: Profiler,
    args: &Args,
    dir: &Path,
    workload: &Workload,
    backend: &Backend,
    cpus: usize,
    run: usize,
) -> anyhow::Result<Row> {
    let name = match profiler {
        Profiler::KilnNoSymbols => "kiln-no-symbols",
        _ => "kiln",
    };
    let cache = dir.join(format!("{name}-unwind-cache-{run}"));
    let log = logs(args, dir).join(format!("{name}-{run}.log"));
    backend.take();
    let mut command = Command::new(&args.kiln_agent);
    command
        .arg("--server")
        .arg(format!("http://{}", backend.addr))
        .args(["--frequency", &args.frequency.to_string()])
        .args(["--interval", "5s", "--spool-max-bytes", "0", "--no-gpu"])
        .args(["--host", "peer-bench"])
        .arg("--unwind-cache-dir")
        .arg(&cache)
        .args(&args.kiln_args)
        .args((profiler == Profiler::KilnNoSymbols).then_some("--no-symbol-upload"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    let mut agent = Measured::spawn(command, &log)?;
    let w = measure(
        &mut agent,
        &log,
        args,
        workload,
        cpus,
        Duration::from_secs(7),
    )?;
    agent.stop(libc::SIGTERM, Duration::from_secs(30))?;
    let stacks = kiln_stacks(&backend.take(), w.workload_pid, workload)?;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let table = largest_table(&log_text).map_or_else(
        || "no unwind table took over 200 ms to build".to_string(),
        |(file, rows, ms)| {
            format!(
                "largest table built: {file}, {rows} rows ({:.1} MiB), {ms} ms",
                rows as f64 * 8.0 / (1 << 20) as f64
            )
        },
    );
    let note = format!("{table}; {}", w.busiest_threads(5));
    let _ = std::fs::remove_dir_all(&cache);
    Ok(row(profiler, run, workload, &w, &stacks, note))
}

/// The largest "built a large unwind table" the agent logged: (file, rows,
/// ms).
fn largest_table(log: &str) -> Option<(String, u64, u64)> {
    log.lines()
        .filter(|l| l.contains("built a large unwind table"))
        .map(strip_ansi)
        .filter_map(|l| {
            let field = |name: &str| {
                let start = l.find(&format!("{name}="))? + name.len() + 1;
                let rest = &l[start..];
                Some(
                    rest.split_whitespace()
                        .next()?
                        .trim_matches('"')
                        .to_string(),
                )
            };
            let file = field("file")?;
            let file = Path::new(&file)
                .file_name()
                .map_or(file.clone(), |n| n.to_string_lossy().into_owned());
            Some((
                file,
                field("rows")?.parse().ok()?,
                field("ms")?.parse().ok()?,
            ))
        })
        .max_by_key(|t| t.1)
}

/// `line` without the terminal colour codes tracing writes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ … letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The workload's stacks in the batches, resolved against the
/// dictionaries they carry (in order, as the backend reads them).
fn kiln_stacks(batches: &[Batch], pid: u32, workload: &Workload) -> anyhow::Result<Stacks> {
    let file_id = match workload.kind {
        WorkloadKind::Native => Some(FileInfo::read(&workload.program, WORKLOAD_NAME)?.file_id),
        WorkloadKind::Java => None,
    };
    let pid = pid.to_string();
    let mut frames = HashMap::new();
    let mut stacks = HashMap::new();
    let mut labels = HashMap::new();
    let mut out = HashMap::new();
    for batch in batches {
        for e in &batch.frames {
            frames.insert(e.id, e.frame.clone());
        }
        for e in &batch.stacks {
            stacks.insert(e.id, e.frames.clone());
        }
        for e in &batch.label_sets {
            labels.insert(e.id, e.labels.clone());
        }
        for s in &batch.samples {
            let ours = labels.get(&s.labels).is_some_and(|l| {
                l.get(label_names::PID).is_some_and(|p| *p == pid)
                    && workload
                        .thread()
                        .is_none_or(|t| l.get(label_names::THREAD).is_some_and(|n| *n == *t))
            });
            if ours {
                let stack = stacks
                    .get(&s.stack)
                    .with_context(|| format!("stack {} was never sent", s.stack))?;
                *out.entry(stack.clone()).or_insert(0u64) += s.count;
            }
        }
    }
    out.into_iter()
        .map(|(ids, count)| {
            let resolved = ids
                .iter()
                .map(|id| match frames.get(id) {
                    Some(KilnFrame::Address {
                        file_id: f, addr, ..
                    }) if Some(*f) == file_id => Ok(Frame::Workload(workload.symbols.name(*addr))),
                    Some(KilnFrame::Named {
                        kind: FrameKind::Jvm,
                        function,
                        ..
                    }) => Ok(workload.java_frame(function)),
                    Some(KilnFrame::Named { function, .. })
                        if function == kiln_agent::NO_TABLE_YET_FRAME =>
                    {
                        Ok(Frame::NoTableYet)
                    }
                    Some(KilnFrame::Named { function, .. }) => Ok(Frame::Other(function.clone())),
                    Some(KilnFrame::Address { addr, .. }) => Ok(Frame::Other(format!("{addr:#x}"))),
                    None => bail!("frame {id} was never sent"),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok((resolved, count))
        })
        .collect()
}

/// A throwaway Kiln backend: takes `POST /api/v1/ingest` (keeping the
/// decoded batches), answers `HEAD /api/v1/symbols/ID` with 404 (so the
/// agent extracts and uploads symbols as it would to a new backend) and
/// takes the `PUT` that follows.
struct Backend {
    addr: std::net::SocketAddr,
    batches: Arc<Mutex<Vec<Batch>>>,
}

impl Backend {
    fn start() -> anyhow::Result<Backend> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let batches = Arc::new(Mutex::new(Vec::new()));
        let kept = batches.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve(stream, &kept) {
                        eprintln!("backend: {e:#}");
                    }
                });
            }
        });
        Ok(Backend { addr, batches })
    }

    /// The batches received since the last call.
    fn take(&self) -> Vec<Batch> {
        std::mem::take(&mut *self.batches.lock().expect("backend lock"))
    }
}

/// Serves one keep-alive connection.
fn serve(stream: TcpStream, batches: &Mutex<Vec<Batch>>) -> anyhow::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse()?;
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let body = if chunked {
            read_chunked(&mut reader)?
        } else {
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            body
        };
        let status = match (method.as_str(), path.as_str()) {
            ("POST", "/api/v1/ingest") => match Batch::decode(&body) {
                Ok(batch) => {
                    batches.lock().expect("backend lock").push(batch);
                    "200 OK"
                }
                Err(e) => {
                    eprintln!("backend: a batch did not decode: {e}");
                    "400 Bad Request"
                }
            },
            ("HEAD", p) if p.starts_with("/api/v1/symbols/") => "404 Not Found",
            ("PUT", p) if p.starts_with("/api/v1/symbols/") => "200 OK",
            _ => "404 Not Found",
        };
        write!(writer, "HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n")?;
        writer.flush()?;
    }
}

fn read_chunked(reader: &mut impl BufRead) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)?;
        if size == 0 {
            // The trailer ends with an empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

// ---- The OpenTelemetry eBPF profiler --------------------------------------

fn run_otel(
    args: &Args,
    dir: &Path,
    workload: &Workload,
    cpus: usize,
    run: usize,
) -> anyhow::Result<Row> {
    let (Some(profiler_path), Some(receiver_path)) = (&args.otel_profiler, &args.otel_receiver)
    else {
        bail!("--otel-profiler and --otel-receiver are needed");
    };
    let port = free_port()?;
    let out = logs(args, dir).join(format!("otel-{run}.samples"));
    let receiver_log = logs(args, dir).join(format!("otel-receiver-{run}.log"));
    let log = logs(args, dir).join(format!("otel-{run}.log"));
    let mut command = Command::new(receiver_path);
    command
        .args(["-listen", &format!("127.0.0.1:{port}"), "-out"])
        .arg(&out);
    let receiver = Measured::spawn(command, &receiver_log)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut command = Command::new(profiler_path);
    command
        .args(["-collection-agent", &format!("127.0.0.1:{port}")])
        .args([
            "-disable-tls",
            "-samples-per-second",
            &args.frequency.to_string(),
        ]);
    let mut profiler = Measured::spawn(command, &log)?;
    // Its reporter sends every 5 s, ±20%.
    let w = measure(
        &mut profiler,
        &log,
        args,
        workload,
        cpus,
        Duration::from_secs(8),
    )?;
    profiler.stop(libc::SIGTERM, Duration::from_secs(30))?;
    receiver.stop(libc::SIGTERM, Duration::from_secs(10))?;
    let stacks = otel_stacks(&out, w.workload_pid, workload)?;
    Ok(row(
        Profiler::Otel,
        run,
        workload,
        &w,
        &stacks,
        String::new(),
    ))
}

/// The workload's stacks in the receiver's output (see
/// scripts/peer-bench/receiver/main.go for its lines).
fn otel_stacks(path: &Path, pid: u32, workload: &Workload) -> anyhow::Result<Stacks> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out: Stacks = Vec::new();
    let mut current: Option<(Vec<Frame>, u64)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("S ") {
            if let Some(s) = current.take() {
                out.push(s);
            }
            let mut f = rest.splitn(4, ' ');
            let sample_pid: u32 = f.next().unwrap_or("").parse().unwrap_or(0);
            let count: u64 = f.next().unwrap_or("").parse()?;
            let thread = f.nth(1).unwrap_or("");
            let ours = sample_pid == pid && workload.thread().is_none_or(|t| t == thread);
            current = ours.then(|| (Vec::new(), count));
        } else if let Some(rest) = line.strip_prefix("F ") {
            let Some((frames, _)) = current.as_mut() else {
                continue;
            };
            let mut names = rest.split('\t');
            let mut f = names.next().unwrap_or("").splitn(3, ' ');
            let (kind, addr, file) = (
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
            );
            match kind {
                "native" if Path::new(file).ends_with(WORKLOAD_NAME) => frames.push(
                    Frame::Workload(workload.symbols.name(u64::from_str_radix(addr, 16)?)),
                ),
                // One frame per line of the location: inlined methods too.
                "jvm" => frames.extend(names.map(|name| workload.java_frame(name))),
                _ => frames.push(Frame::Other(
                    format!("{kind} {file} {}", names.collect::<Vec<_>>().join(" "))
                        .trim_end()
                        .to_string(),
                )),
            }
        }
    }
    out.extend(current);
    Ok(out)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

// ---- perf -----------------------------------------------------------------

fn run_perf(
    args: &Args,
    dir: &Path,
    workload: &Workload,
    cpus: usize,
    run: usize,
) -> anyhow::Result<Row> {
    let data = dir.join(format!("perf-{run}.data"));
    let log = logs(args, dir).join(format!("perf-{run}.log"));
    let mut command = Command::new(&args.perf);
    command
        .args([
            "record",
            "-F",
            &args.frequency.to_string(),
            "-a",
            "-g",
            "-o",
        ])
        .arg(&data);
    let mut perf = Measured::spawn(command, &log)?;
    let w = measure(
        &mut perf,
        &log,
        args,
        workload,
        cpus,
        Duration::from_secs(1),
    )?;
    perf.stop(libc::SIGINT, Duration::from_secs(60))?;
    let script = Command::new(&args.perf)
        .args(["script", "-F", "pid,ip,sym,dso", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .context("perf script")?;
    if !script.status.success() {
        bail!("perf script failed ({})", script.status);
    }
    let stacks = perf_stacks(
        &String::from_utf8_lossy(&script.stdout),
        w.workload_pid,
        &workload.program,
    );
    let _ = std::fs::remove_file(&data);
    Ok(row(
        Profiler::Perf,
        run,
        workload,
        &w,
        &stacks,
        "CPU: the perf record process only (sampling and walks are in the kernel)".into(),
    ))
}

/// The workload's stacks in `perf script -F pid,ip,sym,dso` output: a
/// line with the pid (right-aligned: it may start with spaces), then one
/// line per frame (a tab, then `ip sym (dso)`), then a blank line.
fn perf_stacks(text: &str, pid: u32, workload: &Path) -> Stacks {
    let workload = workload.to_string_lossy();
    let mut out: Stacks = Vec::new();
    let mut current: Option<Vec<Frame>> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            out.extend(current.take().map(|f| (f, 1)));
        } else if !line.starts_with('\t') {
            out.extend(current.take().map(|f| (f, 1)));
            let sample_pid: u32 = line
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            current = (sample_pid == pid).then(Vec::new);
        } else if let Some(frames) = current.as_mut() {
            let line = line.trim();
            let rest = line.split_once(' ').map_or("", |(_, r)| r);
            let (sym, dso) = match rest.rfind(" (") {
                Some(i) => (&rest[..i], rest[i + 2..].trim_end_matches(')')),
                None => (rest, ""),
            };
            frames.push(if dso == workload {
                Frame::Workload((sym != "[unknown]").then(|| sym.to_string()))
            } else {
                Frame::Other(format!("{sym} ({dso})"))
            });
        }
    }
    out.extend(current.take().map(|f| (f, 1)));
    out
}

/// Removes the bench's directory at the end, however it ends.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
