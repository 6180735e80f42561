//! The agent on a host where processes come and go by the thousand, and
//! new binaries keep appearing (a CI runner, a build farm): the unwind
//! tables of exited processes make room for new ones, and what the agent
//! holds returns to what the live processes need.
//!
//! Root tests on the real kernel, like `profile.rs`. Each runs its
//! processes in a cgroup of its own and profiles only that cgroup
//! (`AgentConfig::cgroup`), so that its table map can be sized for its own
//! processes exactly: the rest of the host (servers, compilers, other
//! tests) takes none of it. They skip, saying so, where cgroup v2 is not
//! mounted.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_agent::{Agent, AgentConfig, MemorySink, UnwindTable};
use kiln_test_support::CBuild;

use support::{Symbols, TestCgroup, Workload, require_root, resolve};

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

/// Kernel bytes of the unwind table of the file mapped at `path_suffix` in
/// this process (libc, the dynamic loader), as the agent would load it.
fn bytes_of_mapped(path_suffix: &str) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains(path_suffix))
        .unwrap_or_else(|| panic!("this test process maps no {path_suffix}"));
    bytes_of(Path::new(path))
}

fn bytes_of(path: &Path) -> u64 {
    UnwindTable::from_path(path, u64::MAX)
        .unwrap_or_else(|e| panic!("unwind table of {}: {e}", path.display()))
        .kernel_bytes()
}

/// The agent profiling only `cgroup`, with `bytes` of unwind tables.
fn start_agent(cgroup: &TestCgroup, bytes: u64) -> Agent {
    support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        unwind_table_bytes: bytes,
        cgroup: Some(cgroup.path().to_owned()),
        ..AgentConfig::default()
    })
}

// Guards eviction: the table map holds libc, the loader and three of the
// workload's binaries, and distinct binaries run one after the other until
// several tables were evicted. Without eviction the later ones would find
// the map full and fall back to frame pointers, which these builds do not
// keep, so their stacks would break off before `main`.
//
// Only the test's cgroup is profiled: before the filter, the test sized
// its map for the rest of the host as a first agent measured it, and
// failed in CI when processes idle then (the test runner, other tiers'
// servers) were sampled later and took the room (once: 6 of 28 binaries
// placed, the rest of the host grown from 131k to ~370k rows).
#[test]
fn tables_of_exited_binaries_make_room_for_new_ones() {
    require_root();
    let Some(cgroup) = TestCgroup::create("churn-tables") else {
        return;
    };
    const AT_MOST: usize = 28;
    let dir = tempfile::tempdir().unwrap();
    let mut distinct = DistinctBinaries::compile(dir.path());
    let binaries: Vec<PathBuf> = (0..AT_MOST).map(|_| distinct.next()).collect();
    let per_binary = bytes_of(&binaries[0]);

    let shared = bytes_of_mapped("libc.so") + bytes_of_mapped("ld-linux");
    let capacity = shared + 3 * per_binary;
    let mut agent = start_agent(&cgroup, capacity);
    let mut sink = MemorySink::default();

    // The map holds three binaries' tables; each binary after them needs
    // one evicted, so seven runs evict at least three (four, unless the
    // loader's or libc's table was evicted and reloaded instead).
    const EVICTIONS: u64 = 3;
    let at_least = 3 + EVICTIONS as usize + 1;
    assert!(
        at_least + 4 <= AT_MOST,
        "{at_least} binaries needed: link more"
    );
    // (pid, symbols, index of the first batch after its tables loaded)
    let mut runs = Vec::new();
    let mut attempts = 0;
    for exe in &binaries {
        attempts += 1;
        let child = Workload(cgroup.command(exe).args(["30", "cpu"]).spawn().unwrap());
        let pid = child.0.id();
        // Its first samples come before its tables are loaded (the program
        // announces a process at its first sample): count from then on.
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
        "{} of {attempts} binaries of {per_binary} bytes placed in {capacity} bytes ({shared} for \
         libc and the loader): {stats:?}",
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
    assert!(stats.bytes_used <= stats.bytes_budget);
}

// Guards the process bookkeeping: a thousand processes that live a few
// milliseconds each, two at a time (those sampled before they exit are
// loaded). Each is announced, loaded and, once
// it has exited, reaped; what the unwinder holds afterwards is what the
// processes alive need, not the history of the host.
#[test]
fn thousands_of_short_processes_are_reaped() {
    require_root();
    let Some(cgroup) = TestCgroup::create("churn-short") else {
        return;
    };
    const PROCESSES: usize = 1000;
    const REAPED_AT_LEAST: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let exe = support::compile_workload(dir.path(), &["-O2", "-fomit-frame-pointer"]);
    let capacity = bytes_of_mapped("libc.so") + bytes_of_mapped("ld-linux") + 2 * bytes_of(&exe);
    let mut agent = start_agent(&cgroup, capacity);
    let mut sink = MemorySink::default();
    agent.tick(&mut sink).unwrap();
    let before = agent.unwind_stats().unwrap();

    let peak = std::thread::scope(|scope| {
        let spawners: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..PROCESSES / 2 {
                        let status = cgroup.command(&exe).args(["0.01", "cpu"]).status();
                        assert!(status.unwrap().success());
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
        peak
    });

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
