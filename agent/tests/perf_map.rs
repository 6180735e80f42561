//! JIT frames named from perf maps, on this machine's real kernel, the
//! agent as a user runs it: on the whole host, no cgroup. Node.js, run as
//! its users run it under `perf` (`--perf-basic-prof
//! --interpreted-frames-native-stack`; and `--no-turbo-inlining`, so that
//! the functions measured keep code of their own), writes
//! `/tmp/perf-PID.map`; its
//! workload (`workloads/node/shares.js`) spends 60/30/10% of its time in
//! `sixty()`, `thirty()` and `ten()`, all called from `main()`. Its
//! samples must name those JavaScript functions, with their script and
//! line, in those shares (±3 points), under `main()`, under Node's own
//! native frames down to its root (whole stacks, walked through the JIT
//! code by its frame pointers). With `--no-perf-maps`, the same stacks
//! are whole but their JIT frames all say `[unknown JIT]`. And a JVM read
//! only through the map `jcmd PID Compiler.perfmap` writes (the agent's
//! own JVM reading off, `--no-java`; `-XX:+PreserveFramePointer`, as
//! perf needs too): `workloads/java/JavaShares.java`'s methods in their
//! 50/35/15 shares, under the interpreter running `main`, down to libc.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON), the agent built with its eBPF
//! program, `node` and a JDK (scripts/setup-tests.sh installs Debian's
//! nodejs and OpenJDK 17).

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, JitCoverage, MemorySink, UNKNOWN_JIT_FRAME};
use kiln_model::{FileId, Frame, FrameKind, label_names};

use support::{Resolved, Workload, executables, require_root, resolve_labelled, share_of};

const FREQUENCY_HZ: u64 = 299;
/// Samples of the workload the shares are read from (±0.9 points of
/// noise at 60%: ±3 is over three standard deviations).
const MIN_SAMPLES: u64 = 3000;
const PROFILE_AT_MOST: Duration = Duration::from_secs(40);
const TOLERANCE_POINTS: f64 = 3.0;
/// Share of the workload's samples that must be under `main()` and
/// reach Node's root.
const WHOLE_AT_LEAST: f64 = 95.0;
const SCRIPT: &str = "shares.js";

/// One test at a time: each runs a workload whose CPU share the other's
/// would take.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js")
}

/// The line of `function name(` in the script (1-based): where V8 says
/// the function starts.
fn line_of(script: &str, name: &str) -> u32 {
    let at = script
        .lines()
        .position(|l| l.starts_with(&format!("function {name}(")))
        .unwrap_or_else(|| panic!("no function {name} in the script"));
    at as u32 + 1
}

/// `node --version`, or a failure saying how to get it.
fn node_version() -> String {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .expect("no `node` on PATH: scripts/setup-tests.sh installs Debian's nodejs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What [`profile`] measured: the workload's samples, the executables
/// their frames name, and the JIT coverage the agent reported meanwhile.
struct Profile {
    samples: Vec<Resolved>,
    files: HashMap<FileId, String>,
    jit: JitCoverage,
}

/// The Node.js workload, run as the test runs it, in `dir` (where Node
/// writes its V8 log, isolate-*.log).
fn node_workload(dir: &Path) -> Command {
    let mut node = Command::new("node");
    node.args([
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        // See the workload: each function keeps its own code.
        "--no-turbo-inlining",
    ])
    .arg(script_path())
    .arg("120")
    .current_dir(dir)
    .stdout(std::process::Stdio::null());
    node
}

/// Profiles the workload `command` starts with an agent of `config`
/// (1 s intervals at [`FREQUENCY_HZ`]): from once its tables are loaded
/// and `warm_up` more has passed, after which `ready` is called with its
/// pid, until its samples (of its thread `thread`, when given) number
/// [`MIN_SAMPLES`] or [`PROFILE_AT_MOST`] has passed.
fn profile(
    config: AgentConfig,
    mut command: Command,
    thread: Option<&str>,
    warm_up: Duration,
    ready: impl FnOnce(u32),
) -> Profile {
    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        ..config
    });
    let mut sink = MemorySink::default();
    let workload = Workload(command.spawn().expect("start the workload"));
    let pid = workload.0.id();
    let loading = Instant::now();
    while !agent.unwind_tables_loaded(pid) {
        std::thread::sleep(Duration::from_millis(300));
        agent.tick(&mut sink).unwrap();
        assert!(
            loading.elapsed() < Duration::from_secs(30),
            "the workload's unwind tables not loaded within 30 s"
        );
    }
    let warming = Instant::now();
    while warming.elapsed() < warm_up {
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
    }
    ready(pid);
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();
    let started = Instant::now();
    let mut jit = JitCoverage::default();
    let ours = |sink: &MemorySink| {
        resolve_labelled(&sink.batches, first)
            .into_iter()
            .filter(|s| s.labels.get(label_names::PID) == Some(pid.to_string().as_str()))
            .filter(|s| thread.is_none_or(|t| s.labels.get(label_names::THREAD) == Some(t)))
            .collect::<Vec<_>>()
    };
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let report = agent.tick(&mut sink).unwrap();
        jit.named += report.jit.named;
        jit.not_in_map += report.jit.not_in_map;
        jit.no_map += report.jit.no_map;
        let n: u64 = ours(&sink).iter().map(|s| s.count).sum();
        if n >= MIN_SAMPLES || started.elapsed() > PROFILE_AT_MOST {
            break;
        }
    }
    drop(workload);
    // The runtime leaves its map behind when killed.
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    Profile {
        samples: ours(&sink),
        files: executables(&sink.batches),
        jit,
    }
}

/// [`profile`] of the Node.js workload.
fn profile_node(perf_maps: bool) -> Profile {
    let dir = tempfile::tempdir().unwrap();
    profile(
        AgentConfig {
            perf_maps,
            ..AgentConfig::default()
        },
        node_workload(dir.path()),
        None,
        Duration::ZERO,
        |_| {},
    )
}

/// Where the JIT frame `function` is in `frames`, if it is.
fn jit_frame<'a>(frames: &'a [Frame], function: &str) -> Option<(usize, &'a Frame)> {
    frames.iter().enumerate().find(|(_, f)| {
        matches!(f, Frame::Named { kind: FrameKind::Jit, function: name, .. } if name == function)
    })
}

fn is_unknown_jit(frame: &Frame) -> bool {
    matches!(frame, Frame::Named { kind: FrameKind::Jit, function, .. } if function == UNKNOWN_JIT_FRAME)
}

/// Whether the stack reaches Node's root: its root frame is the `node`
/// executable's (or libc's, which `_start` calls into), not a marker.
fn rooted_in_node(frames: &[Frame], files: &HashMap<FileId, String>) -> bool {
    matches!(frames.first(), Some(Frame::Address { file_id, .. })
        if files.get(file_id).is_some_and(|n| n == "node" || n.starts_with("libc.so")))
}

/// Whether a native frame of the `node` executable is below (rootward of)
/// frame `at`.
fn node_below(
    frames: &[Frame],
    at: usize,
    files: &std::collections::HashMap<FileId, String>,
) -> bool {
    frames[..at].iter().any(|f| {
        matches!(f, Frame::Address { kind: FrameKind::Native, file_id, .. }
            if files.get(file_id).is_some_and(|n| n == "node"))
    })
}

// Guards perf-map naming end to end on a real JIT: Node's JavaScript
// functions by name, script and line, in their true shares, under their
// caller and Node's native frames, with whole stacks.
#[test]
fn node_functions_are_named_from_its_perf_map_in_their_shares() {
    require_root();
    let _serial = serial();
    let version = node_version();
    let script = std::fs::read_to_string(script_path()).unwrap();
    let Profile {
        samples,
        files,
        jit,
    } = profile_node(true);
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let share = |pred: &dyn Fn(&[Frame]) -> bool| share_of(&samples, pred);
    let under = |name: &'static str| move |f: &[Frame]| jit_frame(f, name).is_some();
    let sixty = share(&under("sixty"));
    let thirty = share(&under("thirty"));
    let ten = share(&under("ten"));
    // Each of them under main(), which is under Node's native frames,
    // down to Node's root.
    let whole = share(&|f: &[Frame]| {
        let Some((main, _)) = jit_frame(f, "main") else {
            return false;
        };
        let called = ["sixty", "thirty", "ten"]
            .iter()
            .any(|name| jit_frame(f, name).is_some_and(|(at, _)| at > main));
        called && node_below(f, main, &files) && rooted_in_node(f, &files)
    });
    let unknown = share(&|f: &[Frame]| f.iter().any(is_unknown_jit));
    let mut bad_lines = Vec::new();
    for name in ["main", "sixty", "thirty", "ten"] {
        let want = line_of(&script, name);
        for s in &samples {
            if let Some((_, Frame::Named { file, line, .. })) = jit_frame(&s.frames, name)
                && (*line != want || !file.as_deref().is_some_and(|f| f.ends_with(SCRIPT)))
            {
                bad_lines.push(format!(
                    "{name} at {file:?}:{line}, expected {SCRIPT}:{want}"
                ));
            }
        }
    }
    eprintln!(
        "node {version}: {total} samples; sixty {sixty:.1}%, thirty {thirty:.1}%, ten {ten:.1}%; \
         under main() and rooted in node {whole:.1}%; with an [unknown JIT] frame {unknown:.1}%; \
         frames off their function's line: {}; host's JIT samples: {jit:?}",
        bad_lines.len()
    );
    // The heaviest stack's JIT frames, root first, for the record.
    let heaviest = samples.iter().max_by_key(|s| s.count).map(|s| {
        let jit: Vec<String> = s
            .frames
            .iter()
            .filter_map(|f| match f {
                Frame::Named {
                    kind: FrameKind::Jit,
                    function,
                    line,
                    ..
                } => Some(format!("{function}:{line}")),
                _ => None,
            })
            .collect();
        jit.join(" > ")
    });
    eprintln!(
        "heaviest stack's JIT frames: {}",
        heaviest.unwrap_or_default()
    );
    let mut failures = Vec::new();
    if total < MIN_SAMPLES / 2 {
        failures.push(format!("only {total} samples"));
    }
    for (name, got, truth) in [
        ("sixty", sixty, 60.0),
        ("thirty", thirty, 30.0),
        ("ten", ten, 10.0),
    ] {
        if (got - truth).abs() > TOLERANCE_POINTS {
            failures.push(format!(
                "{name} has {got:.1}% of the samples, expected {truth}% ± {TOLERANCE_POINTS}"
            ));
        }
    }
    if whole < WHOLE_AT_LEAST {
        failures.push(format!(
            "only {whole:.1}% of the samples are under main() and rooted in node"
        ));
    }
    if unknown > 100.0 - WHOLE_AT_LEAST {
        failures.push(format!(
            "{unknown:.1}% of the samples have an [unknown JIT] frame"
        ));
    }
    if !bad_lines.is_empty() {
        failures.push(format!(
            "frames off their function's line: {:?}",
            &bad_lines[..bad_lines.len().min(5)]
        ));
    }
    if jit.named == 0 {
        failures.push(format!("the agent counted no named JIT samples: {jit:?}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Guards `--no-perf-maps`: no map is read, so no JIT frame is named (each
// says [unknown JIT]), and the stacks are as whole as with maps, since
// the walk through JIT code does not need them.
#[test]
fn without_perf_maps_jit_frames_are_unknown_and_stacks_still_whole() {
    require_root();
    let _serial = serial();
    let Profile {
        samples,
        files,
        jit,
    } = profile_node(false);
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let named = share_of(&samples, |f| {
        f.iter().any(|g| {
            matches!(
                g,
                Frame::Named {
                    kind: FrameKind::Jit,
                    ..
                }
            ) && !is_unknown_jit(g)
        })
    });
    let unknown = share_of(&samples, |f| f.iter().any(is_unknown_jit));
    let rooted = share_of(&samples, |f| rooted_in_node(f, &files));
    eprintln!(
        "--no-perf-maps: {total} samples; named JIT frames in {named:.1}%, [unknown JIT] in \
         {unknown:.1}%, rooted in node {rooted:.1}%; host's JIT samples: {jit:?}"
    );
    assert_eq!(named, 0.0, "JIT frames named with perf maps off");
    assert!(
        unknown >= WHOLE_AT_LEAST,
        "only {unknown:.1}% of the samples ran JIT code"
    );
    assert!(
        rooted >= WHOLE_AT_LEAST,
        "only {rooted:.1}% of the samples are rooted in node"
    );
    assert_eq!(jit.named + jit.not_in_map, 0, "{jit:?}");
}

// Guards the JVM's perf map (`jcmd PID Compiler.perfmap`, 0x-prefixed
// numbers) with the agent's own JVM reading off (`--no-java`): the
// workload's methods by the names HotSpot wrote, in their shares, under
// main.
#[test]
fn jvm_methods_are_named_from_its_perf_map_with_java_off() {
    require_root();
    let _serial = serial();
    let classes = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/java/JavaShares.java");
    let compiled = Command::new("javac")
        .args(["--release", "11", "-d"])
        .arg(classes.path())
        .arg(&source)
        .status()
        .expect("javac: scripts/setup-tests.sh installs Debian's openjdk-17-jdk-headless");
    assert!(compiled.success(), "javac failed");
    let mut java = Command::new("java");
    java.args([
        // Frame pointers in compiled code, as perf needs them too.
        "-XX:+PreserveFramePointer",
        // Each method keeps code of its own (see the Node workload).
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,JavaShares::*",
        "-cp",
    ])
    .arg(classes.path())
    .args(["JavaShares", "120"]);
    let Profile {
        samples,
        files,
        jit,
    } = profile(
        AgentConfig {
            java: false,
            ..AgentConfig::default()
        },
        java,
        Some("java"),
        Duration::from_secs(5),
        |pid| {
            let out = Command::new("jcmd")
                .arg(pid.to_string())
                .arg("Compiler.perfmap")
                .output()
                .expect("jcmd");
            assert!(
                out.status.success(),
                "jcmd Compiler.perfmap failed: {out:?}"
            );
        },
    );
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let method = |name: &'static str| {
        move |f: &[Frame]| {
            f.iter().any(|g| {
                matches!(g, Frame::Named { kind: FrameKind::Jit, function, .. }
                    if function.contains(&format!("JavaShares.{name}(")))
            })
        }
    };
    let parse = share_of(&samples, method("parse"));
    let render = share_of(&samples, method("render"));
    let digest = share_of(&samples, method("digest"));
    let unknown = share_of(&samples, |f| f.iter().any(is_unknown_jit));
    // Each method under the frame that called it, the interpreter
    // running main() (HotSpot's map names the interpreter, not the
    // method it interprets), under the JVM's call stub, down to the
    // thread's root in libc.
    let whole = share_of(&samples, |f| {
        let Some(interpreter) = f.iter().position(|g| {
            matches!(g, Frame::Named { kind: FrameKind::Jit, function, .. } if function == "Interpreter")
        }) else {
            return false;
        };
        let called = f[interpreter + 1..].iter().any(|g| {
            matches!(g, Frame::Named { kind: FrameKind::Jit, function, .. }
                if function.contains("JavaShares."))
        });
        let rooted = matches!(f.first(), Some(Frame::Address { file_id, .. })
            if files.get(file_id).is_some_and(|n| n.starts_with("libc.so")));
        called && rooted
    });
    eprintln!(
        "JVM with --no-java: {total} samples of its main thread; parse {parse:.1}%, render \
         {render:.1}%, digest {digest:.1}%; under main's interpreter frame and rooted in libc \
         {whole:.1}%; with an [unknown JIT] frame {unknown:.1}%; host's JIT samples: {jit:?}"
    );
    let mut failures = Vec::new();
    if total < MIN_SAMPLES / 2 {
        failures.push(format!("only {total} samples"));
    }
    for (name, got, truth) in [
        ("parse", parse, 50.0),
        ("render", render, 35.0),
        ("digest", digest, 15.0),
    ] {
        if (got - truth).abs() > TOLERANCE_POINTS {
            failures.push(format!(
                "{name} has {got:.1}% of the samples, expected {truth}% ± {TOLERANCE_POINTS}"
            ));
        }
    }
    if whole < WHOLE_AT_LEAST {
        failures.push(format!("only {whole:.1}% of the samples are whole"));
    }
    if unknown > 100.0 - WHOLE_AT_LEAST {
        failures.push(format!(
            "{unknown:.1}% of the samples have an [unknown JIT] frame"
        ));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
