//! The agent on a host where processes come and go by the thousand, and
//! new binaries keep appearing (a CI runner, a build farm): the unwind
//! tables of exited processes make room for new ones, and what the agent
//! holds returns to what the live processes need.
//!
//! Root tests on the real kernel, like `profile.rs`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink, UnwindTable};
use kiln_test_support::CBuild;

use support::{Symbols, Workload, require_root, resolve};

const FREQUENCY_HZ: u64 = 499;

/// Functions in the padding object linked into every binary: each adds a
/// few rows to the binary's unwind table, so that a handful of binaries
/// fill a small table map.
const PAD_FUNCTIONS: usize = 8000;

/// Builds of the workload without frame pointers, each with its own GNU
/// build id (so its own FileId and its own unwind table) and
/// [`PAD_FUNCTIONS`] extra functions: objects compiled once, linked per
/// binary.
struct DistinctBinaries {
    dir: PathBuf,
    linked: usize,
}

impl DistinctBinaries {
    fn compile(dir: &Path) -> DistinctBinaries {
        let workload = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c");
        let pad = dir.join("pad.c");
        let mut source =
            String::from("__attribute__((noinline)) int pad_sink(int x) { return x; }\n");
        for i in 0..PAD_FUNCTIONS {
            source.push_str(&format!(
                "int pad_{i}(int x) {{ int y = pad_sink(x + {i}); return pad_sink(y) * {}; }}\n",
                i + 1
            ));
        }
        std::fs::write(&pad, source).unwrap();
        for (source, object) in [(workload.as_path(), "shares.o"), (pad.as_path(), "pad.o")] {
            CBuild::clang()
                .args(["-O2", "-fomit-frame-pointer", "-c"])
                .file(source, &dir.join(object));
        }
        DistinctBinaries {
            dir: dir.to_owned(),
            linked: 0,
        }
    }

    fn next(&mut self) -> PathBuf {
        self.linked += 1;
        let out = self.dir.join(format!("shares-{}", self.linked));
        CBuild::clang()
            .args([self.dir.join("pad.o").into_os_string()])
            // The FileId is the build id's first 16 bytes: the counter
            // goes first.
            .args([format!(
                "-Wl,--build-id=0x{:08x}{:032x}",
                self.linked, 0x6b696c6e_u128
            )])
            .file(&self.dir.join("shares.o"), &out);
        out
    }
}

/// Rows of the unwind table of the file mapped at `path_suffix` in this
/// process (libc, the dynamic loader), as the agent would build it.
fn rows_of_mapped(path_suffix: &str) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains(path_suffix))
        .unwrap_or_else(|| panic!("this test process maps no {path_suffix}"));
    rows_of(Path::new(path))
}

fn rows_of(path: &Path) -> usize {
    UnwindTable::from_path(path, u64::MAX)
        .unwrap_or_else(|e| panic!("unwind table of {}: {e}", path.display()))
        .rows()
        .len()
}

/// Rows of the table map that the rest of the host (in CI, the other test
/// tiers' servers; here, builds) takes now, as measured by a first agent,
/// and may take while a test runs, for the test to size its agent's map:
/// the default size holds what one machine runs, not what a builder
/// running compilers beside the test needs.
fn rows_for_the_rest_of_the_host() -> usize {
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        ..AgentConfig::default()
    });
    std::thread::sleep(Duration::from_secs(2));
    agent.tick(&mut MemorySink::default()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let now = agent.unwind_stats().unwrap().rows_used as usize;
    // Room to grow: a server idle at the start and sampled later (in CI,
    // PostgreSQL's table is ~100k rows), a compiler starting.
    const GROWTH: usize = 192 * 1024;
    now + GROWTH
}

// Guards eviction: the table map holds what the host runs now, libc, the
// loader and about three of the workload's binaries, and distinct binaries
// run one after the other until several tables were evicted. Without
// eviction the later ones would find the map full and fall back to frame
// pointers, which these builds do not keep, so their stacks would break
// off before `main`.
//
// The binaries are all linked before the agents start: the compiler and
// linker are big programs whose tables, while they run, took the room the
// test had measured for its binaries (in CI, where the test failed so, a
// link between two runs took ~130k rows).
#[test]
#[ignore = "flaky in CI: processes idle during the first agent's 2 s measurement (the test \
            runner, servers of other tiers) are sampled later and their tables take the room \
            the test set aside (once: 6 of 28 binaries placed, the rest of the host grew from \
            131k to ~370k rows); making it exact needs the agent to profile only chosen \
            processes. `--run-ignored all` runs it"]
fn tables_of_exited_binaries_make_room_for_new_ones() {
    require_root();
    const AT_MOST: usize = 28;
    let dir = tempfile::tempdir().unwrap();
    let mut distinct = DistinctBinaries::compile(dir.path());
    let binaries: Vec<PathBuf> = (0..AT_MOST).map(|_| distinct.next()).collect();
    let per_binary = rows_of(&binaries[0]);

    let others = rows_for_the_rest_of_the_host();
    let capacity = others + rows_of_mapped("libc.so") + rows_of_mapped("ld-linux") + 3 * per_binary;
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        unwind_table_rows: u32::try_from(capacity).unwrap(),
        ..AgentConfig::default()
    });
    let mut sink = MemorySink::default();

    // Enough binaries to overflow the room left for them by three tables
    // (whatever the rest of the host evicts meanwhile).
    const EVICTIONS: u64 = 3;
    let at_least = (capacity - others) / per_binary + 3;
    assert!(
        at_least + 4 <= AT_MOST,
        "{at_least} binaries needed: link more"
    );
    // (pid, symbols, index of the first batch after its tables loaded)
    let mut runs = Vec::new();
    let mut attempts = 0;
    for exe in &binaries {
        attempts += 1;
        let child = Workload(Command::new(exe).args(["30", "cpu"]).spawn().unwrap());
        let pid = child.0.id();
        // Its first samples come before its tables are loaded (the program
        // announces a process at its first sample): count from then on.
        // When the rest of the host's running processes fill the map, the
        // binary gets no table (and the test another try).
        let waited = Instant::now();
        while !agent.unwind_tables_loaded(pid) && waited.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if agent.unwind_tables_loaded(pid) {
            agent.tick(&mut sink).unwrap();
            let first = sink.batches.len();
            std::thread::sleep(Duration::from_secs(1));
            agent.tick(&mut sink).unwrap();
            runs.push((pid.to_string(), Symbols::of(exe), first));
        }
        drop(child);
        let evicted = agent.unwind_stats().unwrap().evicted;
        if evicted >= EVICTIONS && runs.len() >= at_least {
            break;
        }
    }
    let stats = agent.unwind_stats().unwrap();
    eprintln!(
        "{} of {attempts} binaries of {per_binary} rows placed in {capacity} rows ({others} kept \
         for the rest of the host): {stats:?}",
        runs.len()
    );
    assert!(
        runs.len() >= at_least,
        "only {} of {attempts} binaries found room for their tables: {stats:?}",
        runs.len()
    );
    assert!(
        stats.evicted >= EVICTIONS,
        "{} binaries ran and only {} tables were evicted: {stats:?}",
        runs.len(),
        stats.evicted
    );

    // (samples, samples reaching main) of each binary, all printed before
    // the first assertion, so a failure shows the whole picture.
    let counts: Vec<(u64, u64)> = runs
        .iter()
        .enumerate()
        .map(|(i, (pid, symbols, first))| {
            let samples = resolve(&sink.batches, *first);
            let ours: Vec<_> = samples
                .iter()
                .filter(|s| s.0.as_deref() == Some(pid.as_str()))
                .collect();
            let n: u64 = ours.iter().map(|s| s.2).sum();
            let reaching_main: u64 = ours
                .iter()
                .filter(|s| s.1.iter().any(|f| symbols.name(f) == Some("main")))
                .map(|s| s.2)
                .sum();
            eprintln!("binary {i}: {reaching_main} of {n} samples reach main");
            if std::env::var_os("KILN_TEST_DEBUG").is_some() {
                for s in ours.iter().take(3) {
                    eprintln!(
                        "  {:?}",
                        s.1.iter().map(|f| (symbols.name(f), f)).collect::<Vec<_>>()
                    );
                }
            }
            (n, reaching_main)
        })
        .collect();
    for (i, &(n, reaching_main)) in counts.iter().enumerate() {
        assert!(n >= 20, "binary {i} got only {n} samples in a second");
        assert!(
            reaching_main as f64 >= 0.9 * n as f64,
            "binary {i}: only {reaching_main} of {n} samples reach main: its table did \
             not find room"
        );
    }
    assert!(stats.rows_used <= stats.rows_capacity);
}

// Guards the process bookkeeping: a thousand processes that live a few
// milliseconds each, two at a time (those sampled before they exit are
// loaded). Each is announced, loaded and, once
// it has exited, reaped; what the unwinder holds afterwards is what the
// processes alive need, not the history of the host.
#[test]
fn thousands_of_short_processes_are_reaped() {
    require_root();
    const PROCESSES: usize = 1000;
    const REAPED_AT_LEAST: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let exe = support::compile_workload(dir.path(), &["-O2", "-fomit-frame-pointer"]);
    let capacity = rows_for_the_rest_of_the_host()
        + rows_of_mapped("libc.so")
        + rows_of_mapped("ld-linux")
        + 2 * rows_of(&exe);
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        unwind_table_rows: u32::try_from(capacity).unwrap(),
        ..AgentConfig::default()
    });
    let mut sink = MemorySink::default();
    agent.tick(&mut sink).unwrap();
    let before = agent.unwind_stats().unwrap();

    let spawners: Vec<_> = (0..2)
        .map(|_| {
            let exe = exe.clone();
            std::thread::spawn(move || {
                for _ in 0..PROCESSES / 2 {
                    let status = Command::new(&exe).args(["0.01", "cpu"]).status().unwrap();
                    assert!(status.success());
                }
            })
        })
        .collect();
    let mut peak = 0;
    while spawners.iter().any(|s| !s.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
        peak = peak.max(agent.unwind_stats().unwrap().processes);
    }
    for s in spawners {
        s.join().unwrap();
    }

    // The unwinder reaps when it is idle for a while.
    let deadline = Instant::now() + 4 * Duration::from_secs(5);
    let after = loop {
        agent.tick(&mut sink).unwrap();
        let stats = agent.unwind_stats().unwrap();
        if stats.processes <= before.processes + 50 || Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    eprintln!(
        "{PROCESSES} processes: before {before:?}, peak {peak} processes loaded, after {after:?}"
    );
    assert!(
        after.reaped >= REAPED_AT_LEAST,
        "only {} exited processes were reaped of {PROCESSES}",
        after.reaped
    );
    assert!(
        after.processes <= before.processes + 50,
        "{} processes still held after the churn (before: {})",
        after.processes,
        before.processes
    );
    // Dead processes' tables are unused, not lost: the workload's binary
    // is still placed, ready for the next process that maps it.
    assert!(after.files >= 1);
}
