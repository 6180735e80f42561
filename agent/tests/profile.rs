//! End-to-end test of the agent on this machine's real kernel: compiles a
//! C workload whose functions take known shares of CPU, profiles the whole
//! host in-process through the library API, and checks the shares and the
//! stacks it reports. The `.eh_frame` test profiles only a cgroup of its
//! own: on a whole host, the unwind tables of whatever else runs there
//! (servers other tests started, say) can fill the table map before the
//! workloads' are built, and the workloads then wait for room that live
//! processes never give back (the agent's documented behaviour, tested
//! in `churn.rs`), so the test would measure the host rather than the
//! unwinder.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON), a C compiler, and the agent built
//! with its eBPF program (clang and libbpf-dev at build time). CI runs as
//! root; elsewhere the test fails with a message saying what is missing.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{Agent, AgentConfig, MemorySink};
use kiln_model::{Frame, FrameKind};

use support::{Symbols, TestCgroup, Workload, compile_workload, require_root, resolve};

/// High enough that a 5 s profile holds thousands of the workload's
/// samples, so a share is known to about a point (at the default 19 Hz the
/// binomial noise alone would be ±5 points).
const FREQUENCY_HZ: u64 = 499;
/// Profile at least this long...
const PROFILE_FOR: Duration = Duration::from_secs(5);
/// ...and on until each workload has this many samples (a share is then
/// known to ±1.3 points, so ±5 is four standard deviations)...
const MIN_WORKLOAD_SAMPLES: u64 = 1500;
/// ...but no longer than this: on a machine so busy that the workloads
/// get little CPU, the test says so rather than run forever.
const PROFILE_AT_MOST: Duration = Duration::from_secs(30);
const TOLERANCE_POINTS: f64 = 5.0;

/// The agent, profiling the whole host or only `cgroup`.
fn start_agent(unwind_tables: bool, cgroup: Option<&TestCgroup>) -> Agent {
    support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        unwind_tables,
        cgroup: cgroup.map(|c| c.path().to_owned()),
        ..AgentConfig::default()
    })
}

/// The workload in `mode`, in `cgroup` when there is one.
fn spawn(exe: &Path, mode: &str, cgroup: Option<&TestCgroup>) -> Workload {
    // Runs past the profile so its maps are readable at every drain.
    let seconds = (PROFILE_AT_MOST + Duration::from_secs(5))
        .as_secs()
        .to_string();
    let mut command = cgroup.map_or_else(|| Command::new(exe), |c| c.command(exe));
    Workload(
        command
            .args([&seconds, mode])
            .spawn()
            .expect("start the workload"),
    )
}

/// Ticks once a second for at least [`PROFILE_FOR`], until every pid in
/// `pids` has [`MIN_WORKLOAD_SAMPLES`] in the batches from index `first`
/// on, or [`PROFILE_AT_MOST`] has passed.
fn profile(agent: &mut Agent, sink: &mut MemorySink, first: usize, pids: &[&str]) -> Duration {
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(sink).expect("tick");
        let elapsed = started.elapsed();
        if elapsed < PROFILE_FOR {
            continue;
        }
        let samples = resolve(&sink.batches, first);
        let enough = pids.iter().all(|pid| {
            let n: u64 = samples
                .iter()
                .filter(|s| s.0.as_deref() == Some(*pid))
                .map(|s| s.2)
                .sum();
            n >= MIN_WORKLOAD_SAMPLES
        });
        if enough || elapsed >= PROFILE_AT_MOST {
            return elapsed;
        }
    }
}

// Frame pointers only: the kernel's walk (bpf_get_stack).
#[test]
fn frame_pointer_build_shares_and_kernel_frames() {
    shares_and_kernel_frames(&["-fno-omit-frame-pointer"], false, "");
}

// The .eh_frame walker: the same checks on a build without frame pointers,
// where a frame-pointer walk breaks off after the leaf.
#[test]
fn eh_frame_build_shares_and_kernel_frames() {
    shares_and_kernel_frames(&["-fomit-frame-pointer"], true, "profile-eh-frame");
}

/// The same, linked by lld, as every Rust program is since Rust 1.90
/// (rust-lld): its text segment starts in the page where the read-only
/// segment ends, a page above its file offset in virtual addresses, so a
/// bias taken from the text mapping's first byte put every table lookup a
/// page off and broke every walk of such a program on a real host.
#[test]
fn lld_build_shares_and_kernel_frames() {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc runs");
    let sysroot = String::from_utf8(sysroot.stdout).unwrap();
    let gcc_ld = Path::new(sysroot.trim()).join(format!(
        "lib/rustlib/{}-unknown-linux-gnu/bin/gcc-ld",
        std::env::consts::ARCH
    ));
    assert!(
        gcc_ld.join("ld.lld").exists(),
        "rust-lld's ld.lld wrapper is not in {}",
        gcc_ld.display()
    );
    let gcc_ld = format!("-B{}", gcc_ld.display());
    shares_and_kernel_frames(
        &["-fomit-frame-pointer", &gcc_ld, "-fuse-ld=lld"],
        true,
        "profile-lld",
    );
}

fn shares_and_kernel_frames(flags: &[&str], unwind_tables: bool, cgroup_name: &str) {
    require_root();
    let cgroup = match unwind_tables {
        true => match TestCgroup::create(cgroup_name) {
            Some(cgroup) => Some(cgroup),
            None => return,
        },
        false => None,
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_workload(dir.path(), &[&["-O2"], flags].concat());
    if flags.contains(&"-fuse-ld=lld") {
        // The layout this case is about: text at a vaddr a page above its
        // file offset.
        let loads = kiln_agent::FileInfo::read(&exe, "shares").unwrap().loads;
        assert!(
            loads.iter().any(|s| s.vaddr != s.offset),
            "lld laid the workload out as GNU ld would: {loads:?}"
        );
    }
    let symbols = Symbols::of(&exe);

    let mut agent = start_agent(unwind_tables, cgroup.as_ref());
    let mut sink = MemorySink::default();
    let cpu = spawn(&exe, "cpu", cgroup.as_ref());
    let sys = spawn(&exe, "syscall", cgroup.as_ref());
    // Leave out the first second, while the agent was loading, and with
    // unwind tables, the time until the workloads' are in (the dictionary
    // of those batches still counts).
    let loading = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink).unwrap();
        let ready = [&cpu, &sys]
            .iter()
            .all(|w| agent.unwind_tables_loaded(w.0.id()));
        if !unwind_tables || ready {
            break;
        }
        assert!(
            loading.elapsed() < Duration::from_secs(30),
            "the workloads' unwind tables were not loaded within 30 s: {:?}",
            agent.unwind_stats()
        );
    }
    let first = sink.batches.len();
    let (cpu_pid, sys_pid) = (cpu.0.id().to_string(), sys.0.id().to_string());
    let elapsed = profile(&mut agent, &mut sink, first, &[&cpu_pid, &sys_pid]);
    drop((cpu, sys));

    let samples = resolve(&sink.batches, first);
    let total: u64 = samples.iter().map(|s| s.2).sum();
    let expected = agent.cpus() as f64 * FREQUENCY_HZ as f64 * elapsed.as_secs_f64();
    let scope = match cgroup {
        Some(_) => "in the test's cgroup",
        None => "on the host (idle included)",
    };
    eprintln!(
        "{total} samples {scope}, {expected:.0} expected on the host from \
         {} CPUs x {FREQUENCY_HZ} Hz x {:.2} s; {} bytes encoded",
        agent.cpus(),
        elapsed.as_secs_f64(),
        sink.encoded_bytes
    );
    // Idle is counted, so the host's samples are all its CPU time (when
    // the whole host is profiled).
    if cgroup.is_none() {
        assert!(
            (total as f64) > 0.8 * expected && (total as f64) < 1.2 * expected,
            "{total} samples, expected about {expected:.0}"
        );
    }

    // The CPU workload: each function's inclusive share.
    let cpu_samples: Vec<_> = samples
        .iter()
        .filter(|s| s.0.as_deref() == Some(cpu_pid.as_str()))
        .collect();
    let n: u64 = cpu_samples.iter().map(|s| s.2).sum();
    assert!(
        n >= MIN_WORKLOAD_SAMPLES,
        "only {n} samples of the CPU workload in {elapsed:?}: the machine is too busy for \
         a share to be measured to ±{TOLERANCE_POINTS} points"
    );
    let share = |function: &str| {
        let hits: u64 = cpu_samples
            .iter()
            .filter(|s| s.1.iter().any(|f| symbols.name(f) == Some(function)))
            .map(|s| s.2)
            .sum();
        100.0 * hits as f64 / n as f64
    };
    let reach_main = share("main");
    eprintln!(
        "CPU workload: {n} samples; work_sixty {:.1}%, work_thirty {:.1}%, work_ten {:.1}%, \
         stacks reaching main {reach_main:.1}%",
        share("work_sixty"),
        share("work_thirty"),
        share("work_ten"),
    );
    for (function, truth) in [
        ("work_sixty", 60.0),
        ("work_thirty", 30.0),
        ("work_ten", 10.0),
    ] {
        let got = share(function);
        assert!(
            (got - truth).abs() <= TOLERANCE_POINTS,
            "{function}: {got:.1}% of samples, expected {truth}% ± {TOLERANCE_POINTS}"
        );
    }
    assert!(
        reach_main >= 95.0,
        "only {reach_main:.1}% of stacks reach main"
    );
    // Beneath main, libc's __libc_start_call_main: a native frame of
    // another file, just rootward of main.
    let libc_beneath: u64 = cpu_samples
        .iter()
        .filter(|s| {
            let main = s.1.iter().position(|f| symbols.name(f) == Some("main"));
            matches!(main, Some(i) if i > 0 && matches!(&s.1[i - 1],
                Frame::Address { file_id, .. } if *file_id != symbols.file_id))
        })
        .map(|s| s.2)
        .sum();
    let libc_share = 100.0 * libc_beneath as f64 / n as f64;
    eprintln!("stacks with libc beneath main: {libc_share:.1}%");
    assert!(
        libc_share >= 90.0,
        "only {libc_share:.1}% of stacks have libc beneath main"
    );
    // Each path in order: main above path_a above work_sixty.
    let ordered = cpu_samples.iter().any(|s| {
        let names: Vec<_> = s.1.iter().filter_map(|f| symbols.name(f)).collect();
        names.ends_with(&["main", "path_a", "work_sixty"])
    });
    if !ordered {
        for s in cpu_samples.iter().take(5) {
            let names: Vec<_> =
                s.1.iter()
                    .map(|f| {
                        symbols
                            .name(f)
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("{f:?}"))
                    })
                    .collect();
            eprintln!("{names:?}");
        }
    }
    assert!(ordered, "no stack main → path_a → work_sixty (root first)");

    // The syscall workload: kernel frames under its user frames.
    let sys_samples: Vec<_> = samples
        .iter()
        .filter(|s| s.0.as_deref() == Some(sys_pid.as_str()))
        .collect();
    let n: u64 = sys_samples.iter().map(|s| s.2).sum();
    assert!(
        n >= MIN_WORKLOAD_SAMPLES / 3,
        "only {n} samples of the syscall workload in {elapsed:?}"
    );
    let in_kernel: u64 = sys_samples
        .iter()
        .filter(|s| {
            let first_kernel = s.1.iter().position(|f| f.kind() == FrameKind::Kernel);
            let reaches_main = s.1.iter().any(|f| symbols.name(f) == Some("main"));
            matches!(first_kernel, Some(k) if k > 0 && reaches_main
                && s.1[..k].iter().all(|f| f.kind() == FrameKind::Native)
                && s.1[k..].iter().all(|f| f.kind() == FrameKind::Kernel))
        })
        .map(|s| s.2)
        .sum();
    let write_path = sys_samples.iter().any(|s| {
        s.1.iter().any(|f| {
            matches!(f, Frame::Named { kind: FrameKind::Kernel, function, .. }
                if function.contains("sys_write") || function == "vfs_write")
        })
    });
    eprintln!(
        "syscall workload: {n} samples, {:.1}% with kernel frames under user frames reaching main",
        100.0 * in_kernel as f64 / n as f64
    );
    assert!(
        in_kernel as f64 >= 0.5 * n as f64,
        "only {in_kernel} of {n} samples show kernel frames under main's user frames"
    );
    assert!(write_path, "no kernel frame on the write(2) path");
}

// Guards the new-process path (the exec tracepoint and the thread that
// reads maps as processes appear): processes that live 100 ms, far less
// than an interval, still get their frames placed in their executable.
#[test]
fn short_lived_processes_are_named() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_workload(dir.path(), &["-O2", "-fno-omit-frame-pointer"]);
    let symbols = Symbols::of(&exe);
    let mut agent = start_agent(true, None);
    let mut sink = MemorySink::default();
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();

    const RUNS: usize = 40;
    let runner = {
        let exe = exe.clone();
        std::thread::spawn(move || {
            (0..RUNS)
                .map(|_| {
                    let mut child = Command::new(&exe).args(["0.1", "cpu"]).spawn().unwrap();
                    let pid = child.id().to_string();
                    assert!(child.wait().unwrap().success());
                    pid
                })
                .collect::<std::collections::HashSet<_>>()
        })
    };
    while !runner.is_finished() {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink).unwrap();
    }
    // The last interval, after every process has exited.
    agent.tick(&mut sink).unwrap();
    let pids = runner.join().unwrap();

    let samples = resolve(&sink.batches, first);
    let ours: Vec<_> = samples
        .iter()
        .filter(|s| s.0.as_ref().is_some_and(|p| pids.contains(p)))
        .collect();
    let n: u64 = ours.iter().map(|s| s.2).sum();
    let named: u64 = ours
        .iter()
        .filter(|s| s.1.iter().any(|f| symbols.name(f) == Some("main")))
        .map(|s| s.2)
        .sum();
    eprintln!(
        "{RUNS} processes of 100 ms: {n} samples, {:.1}% with stacks placed in the executable",
        100.0 * named as f64 / n.max(1) as f64
    );
    // The rest: the dynamic loader's start-up and exit_group's teardown,
    // where frame-pointer walks break off.
    assert!(n >= 300, "only {n} samples of {RUNS} short processes");
    assert!(
        named as f64 >= 0.9 * n as f64,
        "only {named} of {n} samples of short-lived processes reach main"
    );
}
