//! The GPU launch uprobe on the real kernel, without a GPU: a program
//! calls `kiln_cuda_launch_marker(correlation_id, tid)` in a library named
//! `libkiln_cuda.so` (the symbol and ABI of gpu-lib's marker, built here
//! from C), as the injection library does at every kernel launch; the agent
//! must attach to it on its own and record each launch's CPU stack, so the
//! launch's kernels can hang under the code that launched them.
//!
//! Root test, like `profile.rs`.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{Agent, AgentConfig, MemorySink, UnwindTable};
use kiln_test_support::CBuild;

use support::{Symbols, TestCgroup, Workload, require_root};

const LIBRARY: &str = r#"
#include <stdint.h>
/* gpu-lib's marker: a no-op that the agent's uprobe attaches to. */
__attribute__((noinline)) void kiln_cuda_launch_marker(uint32_t correlation_id, uint32_t tid)
{
	(void)correlation_id;
	(void)tid;
	__asm__ volatile("");
}

static volatile uint64_t driver_state;

/* Stands for the CUDA driver's launch path: CPU work in a library built
 * without frame pointers (so a frame-pointer walk through it skips its
 * caller, and only its unwind table gets the stack right), then the
 * marker, as the injection library's launch callback calls it. */
__attribute__((noinline)) void launch_kernel(uint32_t correlation_id, uint32_t tid)
{
	for (uint64_t i = 0; i < 500000; i++)
		driver_state = driver_state * 2862933555777941757ULL + i;
	kiln_cuda_launch_marker(correlation_id, tid);
	__asm__ volatile("");
}
"#;

/// Launches "kernels" for `argv[1]` seconds, each through main ->
/// launch_path -> launch_kernel (in the library) -> the marker, with
/// correlation ids 1, 2, 3, …; spins between launches so that the sampler
/// sees the process. Built with `-DLATE_LOAD`, it first spins half a
/// second and then `dlopen()`s the library, as CUDA loads the injection
/// library (`CUDA_INJECTION64_PATH`) when it initialises, long after the
/// process started.
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void (*launch_fn)(uint32_t correlation_id, uint32_t tid);
#ifndef LATE_LOAD
void launch_kernel(uint32_t correlation_id, uint32_t tid);
#endif

static volatile uint64_t sink;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin(void)
{
	for (uint64_t i = 0; i < 2000000; i++)
		sink = sink * 6364136223846793005ULL + i;
}

__attribute__((noinline)) void launch_path(launch_fn launch, uint32_t correlation_id)
{
	launch(correlation_id, (uint32_t)gettid());
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double end = now() + atof(argv[1]);
	launch_fn launch;
#ifdef LATE_LOAD
	while (now() < end - atof(argv[1]) + 0.5)
		spin();
	void *library = dlopen(LIBRARY_PATH, RTLD_NOW);
	if (!library || !(launch = (launch_fn)dlsym(library, "launch_kernel"))) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
#else
	launch = launch_kernel;
#endif
	uint32_t correlation_id = 0;
	while (now() < end) {
		spin();
		launch_path(launch, ++correlation_id);
	}
	return 0;
}
"#;

/// gpu-lib's side of a launch through a driver: the marker, and the
/// callback the driver calls at each launch (as CUPTI calls the injection
/// library's), which calls the marker.
const CALLBACK_LIBRARY: &str = r#"
#include <stdint.h>
__attribute__((noinline)) void kiln_cuda_launch_marker(uint32_t correlation_id, uint32_t tid)
{
	(void)correlation_id;
	(void)tid;
	__asm__ volatile("");
}

__attribute__((noinline)) void kiln_launch_callback(uint32_t correlation_id, uint32_t tid)
{
	kiln_cuda_launch_marker(correlation_id, tid);
	__asm__ volatile("");
}
"#;

/// A stand-in CUDA driver: `launch_kernel` goes three frames deep, with
/// rbp used as a plain register (zeroed, so a frame-pointer walk from
/// inside it ends there), before calling back into the injection library.
/// Linked with [`driver_padding`]'s functions, its `.eh_frame` is as big as
/// a real driver's share of one.
const DRIVER: &str = r#"
#include <stdint.h>
void kiln_launch_callback(uint32_t correlation_id, uint32_t tid);

static volatile uint64_t driver_state;

__attribute__((noinline)) void driver_submit(uint32_t correlation_id, uint32_t tid)
{
	for (uint64_t i = 0; i < 200000; i++)
		driver_state = driver_state * 2862933555777941757ULL + i;
	__asm__ volatile("xor %%ebp, %%ebp" ::: "rbp");
	kiln_launch_callback(correlation_id, tid);
	__asm__ volatile("");
}

__attribute__((noinline)) void driver_enqueue(uint32_t correlation_id, uint32_t tid)
{
	driver_submit(correlation_id, tid);
	__asm__ volatile("");
}

__attribute__((noinline)) void launch_kernel(uint32_t correlation_id, uint32_t tid)
{
	driver_enqueue(correlation_id, tid);
	__asm__ volatile("");
}
"#;

/// Rows the first unwinder refused a file beyond: half its default map.
const REFUSED_BEFORE: usize = 128 * 1024;

/// Assembly of `functions` small functions with call-frame information
/// (three table rows each), to make a library's `.eh_frame` big without
/// minutes of compiling C.
fn driver_padding(functions: usize) -> String {
    let mut asm = String::from(".text\n");
    for i in 0..functions {
        asm.push_str(&format!(
            ".globl pad_{i}\n.type pad_{i},@function\npad_{i}:\n.cfi_startproc\npush %rbx\n\
             .cfi_def_cfa_offset 16\n.cfi_offset %rbx,-16\npop %rbx\n.cfi_def_cfa_offset 8\nret\n\
             .cfi_endproc\n.size pad_{i},.-pad_{i}\n"
        ));
    }
    asm.push_str(".section .note.GNU-stack,\"\",@progbits\n");
    asm
}

/// How the host program gets the library.
#[derive(Clone, Copy)]
enum Load {
    /// Linked against it: ld.so maps it before `main`, maybe after the
    /// agent first read the process's maps.
    Linked,
    /// `dlopen()`ed half a second after start.
    Late,
}

/// Builds [`LIBRARY`] as `dir`/libkiln_cuda.so, without frame pointers.
fn build_marker_library(dir: &Path) -> std::path::PathBuf {
    let library = dir.join("libkiln_cuda.so");
    std::fs::write(dir.join("marker.c"), LIBRARY).unwrap();
    CBuild::clang()
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .file(&dir.join("marker.c"), &library);
    library
}

/// The launch stacks of `pid` the agent has recorded once it has at
/// least `enough` (ticking every half second), or all it has after
/// [`GIVE_UP_AFTER`].
fn record_launches(
    agent: &mut Agent,
    sink: &mut MemorySink,
    pid: u32,
    enough: usize,
) -> Vec<Vec<kiln_model::Frame>> {
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(sink).unwrap();
        let found: Vec<Vec<kiln_model::Frame>> = (1..=100_000)
            .filter_map(|id| agent.gpu_launch_stack(pid, id))
            .collect();
        if found.len() >= enough || started.elapsed() > GIVE_UP_AFTER {
            return found;
        }
    }
}

fn compile(dir: &Path, load: Load) -> std::path::PathBuf {
    let library = build_marker_library(dir);
    let linking = match load {
        Load::Linked => vec![
            format!("-L{}", dir.display()),
            "-lkiln_cuda".into(),
            format!("-Wl,-rpath,{}", dir.display()),
        ],
        Load::Late => vec![
            "-DLATE_LOAD".into(),
            format!("-DLIBRARY_PATH=\"{}\"", library.display()),
            "-ldl".into(),
        ],
    };
    CBuild::clang()
        .args(["-O2", "-fno-omit-frame-pointer"])
        .args(linking)
        .program(dir, "host", PROGRAM)
}

// Guards the launch path end to end: library found in the process's maps,
// uprobe attached by symbol, stack walked in BPF (through the library with
// its unwind table), frames placed in the program's file, filed by (pid,
// correlation id).
#[test]
fn launches_are_recorded_with_their_cpu_stacks() {
    launches_are_recorded(Load::Linked);
}

// The library arrives by dlopen() while the process runs: the agent learns
// of it when a stack walk meets its code (the program announces the
// process as remapped), then attaches and loads its table.
#[test]
fn launches_from_a_library_loaded_late_are_recorded() {
    launches_are_recorded(Load::Late);
}

/// The host, linked against a stand-in driver (`libfakecuda.so`, built
/// without frame pointers, with a `.eh_frame` of over [`REFUSED_BEFORE`]
/// rows) that calls back into `libkiln_cuda.so` at each launch.
fn compile_with_driver(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let callback = dir.join("libkiln_cuda.so");
    std::fs::write(dir.join("callback.c"), CALLBACK_LIBRARY).unwrap();
    CBuild::clang()
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .file(&dir.join("callback.c"), &callback);
    std::fs::write(dir.join("padding.s"), driver_padding(70_000)).unwrap();
    CBuild::clang()
        .args(["-c"])
        .file(&dir.join("padding.s"), &dir.join("padding.o"));
    let driver = dir.join("libfakecuda.so");
    std::fs::write(dir.join("driver.c"), DRIVER).unwrap();
    CBuild::clang()
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .args([dir.join("padding.o").into_os_string()])
        .args([
            format!("-L{}", dir.display()),
            "-lkiln_cuda".into(),
            format!("-Wl,-rpath,{}", dir.display()),
        ])
        .file(&dir.join("driver.c"), &driver);
    let host = CBuild::clang()
        .args(["-O2", "-fno-omit-frame-pointer"])
        .args([
            format!("-L{}", dir.display()),
            "-lfakecuda".into(),
            "-lkiln_cuda".into(),
            format!("-Wl,-rpath,{}", dir.display()),
        ])
        .program(dir, "host", PROGRAM);
    (host, driver)
}

// Guards GPU launch stacks through the driver (issue 14): the walk from
// the marker goes through the injection library and a driver built
// without frame pointers, whose table the first unwinder refused for its
// size, to the code that launched. At least 99% of the launches recorded
// hang under main -> launch_path.
#[test]
fn launches_through_a_big_driver_without_frame_pointers_keep_their_callers() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (host, driver) = compile_with_driver(dir.path());
    let rows = UnwindTable::from_path(&driver, u64::MAX).unwrap().len();
    assert!(
        rows > REFUSED_BEFORE,
        "the stand-in driver's table has {rows} rows: not big enough to stand for a real one"
    );
    let symbols = Symbols::of(&host);
    let mut agent = start_gpu_agent(dir.path(), None);
    let mut sink = MemorySink::default();
    let child = run_host(Command::new(&host));
    let pid = child.0.id();
    let recorded = record_launches(&mut agent, &mut sink, pid, 200);
    drop(child);
    assert!(
        recorded.len() >= 50,
        "only {} launches were recorded in {GIVE_UP_AFTER:?}",
        recorded.len()
    );
    let under_caller = recorded
        .iter()
        .filter(|stack| {
            let names: Vec<_> = stack.iter().filter_map(|f| symbols.name(f)).collect();
            let main = names.iter().position(|n| *n == "main");
            let path = names.iter().position(|n| *n == "launch_path");
            matches!((main, path), (Some(m), Some(p)) if m < p)
        })
        .count();
    eprintln!(
        "{under_caller} of {} launches under main -> launch_path (driver table: {rows} rows)",
        recorded.len()
    );
    assert!(
        under_caller * 100 >= recorded.len() * 99,
        "only {under_caller} of {} launches hang under main -> launch_path; one: {:?}",
        recorded.len(),
        recorded.first()
    );
}

/// How long the agent has to find the library, attach and report: on a
/// loaded machine (CI's tests beside each other) the unwinder thread may
/// be building other processes' tables first.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

// A FIFO was renamed over the library's path before
// the agent learned of the process: the probe must still attach, to the
// mapped file itself, and the FIFO must never be opened (an open of it
// blocks until a writer comes, and the agent's tick with it).
#[test]
fn the_launch_probe_attaches_to_the_mapped_library_when_its_path_was_swapped() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let host = compile(dir.path(), Load::Linked);
    let library = dir.path().join("libkiln_cuda.so");
    let child = run_host(Command::new(&host));
    let pid = child.0.id();
    support::wait_until_mapped(pid, "libkiln_cuda.so");
    let fifo = support::SwappedFifo::rename_over(&library);

    let mut agent = start_gpu_agent(dir.path(), None);
    let mut sink = MemorySink::default();
    let recorded = record_launches(&mut agent, &mut sink, pid, 5);
    let opened = fifo.opened();
    drop(child);
    assert!(
        !opened,
        "the agent opened the FIFO put at the library's path since it was mapped"
    );
    assert!(
        recorded.len() >= 5,
        "only {} launches of pid {pid} were recorded in {GIVE_UP_AFTER:?}: the probe did not \
         attach to the mapped library (see the agent's log)",
        recorded.len()
    );
}

fn launches_are_recorded(load: Load) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let host = compile(dir.path(), load);
    let symbols = Symbols::of(&host);
    let mut agent = start_gpu_agent(dir.path(), None);
    let mut sink = MemorySink::default();

    // Without cargo's LD_LIBRARY_PATH, whose target directory may hold
    // gpu-lib's real libkiln_cuda.so, which ld.so would then prefer to the
    // one built here (the host's rpath is a RUNPATH, searched after it).
    let child = run_host(Command::new(&host));
    let pid = child.0.id();
    // The agent attaches at a tick after it has learned the process; ids
    // climb by one per launch, so the launches after that are recorded.
    let started = Instant::now();
    let recorded = loop {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
        let found: Vec<(u32, Vec<kiln_model::Frame>)> = (1..=100_000)
            .filter_map(|id| Some((id, agent.gpu_launch_stack(pid, id)?)))
            .collect();
        if found.len() >= 5 || started.elapsed() > GIVE_UP_AFTER {
            break found;
        }
    };
    drop(child);
    assert!(
        recorded.len() >= 5,
        "only {} launches of pid {pid} were recorded in {GIVE_UP_AFTER:?}: the GPU launch probe did not \
         attach or report (see the agent's log)",
        recorded.len()
    );
    for (id, stack) in &recorded {
        let names: Vec<_> = stack.iter().filter_map(|f| symbols.name(f)).collect();
        // Root first: ... main, launch_path, then launch_kernel and the
        // marker in the library.
        let main = names.iter().position(|n| *n == "main");
        let path = names.iter().position(|n| *n == "launch_path");
        assert!(
            matches!((main, path), (Some(m), Some(p)) if m < p),
            "launch {id}: the stack does not run main -> launch_path: {names:?} in {stack:?}"
        );
    }
    // Consecutive ids: each launch was seen once, under its own id.
    let ids: Vec<u32> = recorded.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "launch ids recorded with gaps: {ids:?}"
    );
}

// Guards the cgroup filter in the launch uprobe: a uprobe is on a file,
// so it fires in every process that calls the library, and an agent told
// to profile one cgroup must record the launches of the processes in it
// only. Both processes run the same program on the same library: once
// the one inside has launches recorded, the probe is attached and the
// one outside has been launching through it too.
#[test]
fn launches_outside_the_profiled_cgroup_are_not_recorded() {
    require_root();
    let Some(cgroup) = TestCgroup::create("gpu-launch") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = compile(dir.path(), Load::Linked);
    let mut agent = start_gpu_agent(dir.path(), Some(cgroup.path()));
    let mut sink = MemorySink::default();

    // Without LD_LIBRARY_PATH, as in launches_are_recorded().
    let inside = run_host(cgroup.command(&host));
    let outside = run_host(Command::new(&host));
    let recorded = |agent: &kiln_agent::Agent, pid: u32| {
        (1..=100_000)
            .filter(|&id| agent.gpu_launch_stack(pid, id).is_some())
            .count()
    };
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
        if recorded(&agent, inside.0.id()) >= 5 || started.elapsed() > GIVE_UP_AFTER {
            break;
        }
    }
    // Another tick's worth of launches from both.
    std::thread::sleep(Duration::from_millis(500));
    agent.tick(&mut sink).unwrap();
    let (inside_launches, outside_launches) = (
        recorded(&agent, inside.0.id()),
        recorded(&agent, outside.0.id()),
    );
    assert!(
        inside_launches >= 5,
        "only {inside_launches} launches of the process in the cgroup were recorded in \
         {GIVE_UP_AFTER:?}: the probe did not attach or report"
    );
    assert_eq!(
        outside_launches, 0,
        "launches of the process outside the cgroup were recorded ({inside_launches} inside)"
    );
}

/// An agent sampling at 499 Hz (of `cgroup` only, when given) that takes
/// GPU snapshots on `dir`/gpu.sock.
fn start_gpu_agent(dir: &Path, cgroup: Option<&Path>) -> Agent {
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: 499,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        cgroup: cgroup.map(Path::to_owned),
        ..AgentConfig::default()
    });
    agent
        .receive_gpu_from(&dir.join("gpu.sock"))
        .expect("listen for GPU snapshots");
    agent
}

/// Runs the host `command` names, launching for 45 s, without
/// LD_LIBRARY_PATH (see launches_are_recorded_with_their_cpu_stacks).
fn run_host(mut command: Command) -> Workload {
    Workload(
        command
            .arg("45")
            .env_remove("LD_LIBRARY_PATH")
            .spawn()
            .unwrap(),
    )
}

/// A PyTorch-like host in Python: `train()` calls `training_step()`, which
/// launches through ctypes into the library (`launch_kernel`, then the
/// marker), as a PyTorch op reaches the CUDA driver through
/// libtorch_python's native frames.
const PYTHON_HOST: &str = r#"
import ctypes, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
def training_step(i):
    lib.launch_kernel(i, threading.get_native_id())
def train(seconds):
    end = time.time() + seconds
    i = 1
    while time.time() < end:
        training_step(i)
        i += 1
train(float(sys.argv[2]))
"#;

fn python_frame_at(stack: &[kiln_model::Frame], function: &str) -> Option<usize> {
    stack.iter().position(|f| {
        matches!(f, kiln_model::Frame::Named { kind: kiln_model::FrameKind::Python, function: name, .. } if name == function)
    })
}

// Guards GPU launch stacks through Python (issue 15): a kernel launched
// from Python hangs under the Python function that launched it, with the
// native launch path below that frame.
#[test]
fn launches_from_python_hang_under_their_python_caller() {
    require_root();
    let python = Path::new("/usr/bin/python3.11");
    assert!(
        python.exists(),
        "Debian's python3.11 is missing: scripts/setup-tests.sh installs it"
    );
    let dir = tempfile::tempdir().unwrap();
    let library = build_marker_library(dir.path());
    let script = dir.path().join("train.py");
    std::fs::write(&script, PYTHON_HOST).unwrap();
    let symbols = Symbols::of(&library);
    let mut agent = start_gpu_agent(dir.path(), None);
    let mut sink = MemorySink::default();
    let child = Workload(
        Command::new(python)
            .arg(&script)
            .arg(&library)
            .arg("45")
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let recorded = record_launches(&mut agent, &mut sink, pid, 200);
    drop(child);
    assert!(
        recorded.len() >= 50,
        "only {} launches were recorded in {GIVE_UP_AFTER:?}",
        recorded.len()
    );
    // Root first: <module>, train, training_step, then the native path
    // (ctypes, libffi) down to launch_kernel.
    let under_caller = recorded
        .iter()
        .filter(|stack| {
            let module = python_frame_at(stack, "<module>");
            let train = python_frame_at(stack, "train");
            let step = python_frame_at(stack, "training_step");
            let launch = stack.iter().position(|f| symbols.name(f) == Some("launch_kernel"));
            matches!((module, train, step, launch), (Some(m), Some(t), Some(s), Some(l)) if m < t && t < s && s < l)
        })
        .count();
    eprintln!(
        "{under_caller} of {} launches under <module> -> train -> training_step -> launch_kernel",
        recorded.len()
    );
    assert!(
        under_caller * 100 >= recorded.len() * 99,
        "only {under_caller} of {} launches hang under their Python caller; one: {:?}",
        recorded.len(),
        recorded.first()
    );
}
