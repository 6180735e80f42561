//! Python frames on this machine's real kernel, the agent as a user runs
//! it: on the whole host, no cgroup. A Python workload
//! (`workloads/python_shares.py`) spends 50/35/15% of its time in three
//! functions, the last of them hashing (native libcrypto code under a
//! Python frame), run by every CPython 3.10+ this machine has: Debian's
//! static `python3.11`, the same copied into a venv, and pyenv's shared
//! builds (3.10 to 3.14 where installed; each one missing is named in the
//! output). For each, its
//! samples must carry the Python functions, with file and line, in those
//! shares (±3 points), rooted in the script's `<module>` frame (≥ 95%),
//! with libcrypto's frames below `digest`, and a `script` label.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON) and the agent built with its
//! eBPF program.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink};
use kiln_model::{Frame, FrameKind, label_names};

use support::{Workload, executables, require_root, resolve_labelled, share_of};

const FREQUENCY_HZ: u64 = 299;
/// Samples of the workload the shares are read from (±0.9 points of
/// noise at 50%: ±3 is over three standard deviations).
const MIN_SAMPLES: u64 = 3000;
const PROFILE_AT_MOST: Duration = Duration::from_secs(40);
const TOLERANCE_POINTS: f64 = 3.0;
const IN_MODULE_AT_LEAST: f64 = 95.0;
const SCRIPT: &str = "python_shares.py";

/// The interpreters to run the workload with: Debian's, the same copied
/// into a venv (`--copies`: a file of another name and place), then
/// pyenv's.
fn interpreters(venv: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let debian = PathBuf::from("/usr/bin/python3.11");
    assert!(
        debian.exists(),
        "Debian's python3.11 is not installed: scripts/setup-tests.sh installs it"
    );
    found.push(debian.clone());
    let made = Command::new(&debian)
        .args(["-m", "venv", "--copies", "--without-pip"])
        .arg(venv)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "{} -m venv --copies failed", debian.display());
    found.push(venv.join("bin/python3"));
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
    for minor in 10..=14 {
        let versions = std::fs::read_dir(root.join("versions"))
            .into_iter()
            .flatten()
            .flatten();
        let dir = versions
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("3.{minor}.")) && !n.contains('t'))
            })
            .max();
        match dir.map(|d| d.join(format!("bin/python3.{minor}"))) {
            Some(exe) if exe.exists() => found.push(exe),
            _ => eprintln!(
                "skipped: no pyenv CPython 3.{minor} under {}",
                root.display()
            ),
        }
    }
    found
}

/// The lines `def name` spans in the script.
fn lines_of(script: &str, name: &str) -> std::ops::RangeInclusive<u32> {
    let lines: Vec<&str> = script.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("def {name}(")))
        .unwrap_or_else(|| panic!("no def {name} in the script"));
    let end = lines[start + 1..]
        .iter()
        .position(|l| !l.is_empty() && !l.starts_with(' '))
        .map_or(lines.len(), |n| start + 1 + n);
    (start as u32 + 1)..=(end as u32)
}

fn python_frame<'a>(frames: &'a [Frame], function: &str) -> Option<(usize, &'a Frame)> {
    frames.iter().enumerate().find(|(_, f)| {
        matches!(f, Frame::Named { kind: FrameKind::Python, function: name, .. } if name == function)
    })
}

// Guards the CPython unwinder end to end on every installed interpreter:
// Python functions with file and line in their true shares, under
// <module>, native frames below the Python frame that called them, and
// the script label.
#[test]
fn python_functions_in_their_shares_on_every_installed_interpreter() {
    require_root();
    let venv = tempfile::tempdir().unwrap();
    let interpreters = interpreters(venv.path());
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads")
        .join(SCRIPT);
    let script = std::fs::read_to_string(&script_path).unwrap();

    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        ..AgentConfig::default()
    });
    let mut sink = MemorySink::default();
    let mut failures = Vec::new();
    for python in &interpreters {
        let workload = Workload(
            Command::new(python)
                .arg(&script_path)
                .arg("120")
                .spawn()
                .expect("start the Python workload"),
        );
        let pid = workload.0.id();
        // From once its tables are loaded and its interpreter found.
        let loading = Instant::now();
        while !(agent.unwind_tables_loaded(pid) && agent.python_version(pid).is_some()) {
            std::thread::sleep(Duration::from_millis(300));
            agent.tick(&mut sink).unwrap();
            assert!(
                loading.elapsed() < Duration::from_secs(30),
                "{}: not ready within 30 s (tables loaded: {}, Python found: {:?})",
                python.display(),
                agent.unwind_tables_loaded(pid),
                agent.python_version(pid)
            );
        }
        let (major, minor) = agent.python_version(pid).unwrap();
        agent.tick(&mut sink).unwrap();
        let first = sink.batches.len();
        let started = Instant::now();
        let ours = |sink: &MemorySink| {
            resolve_labelled(&sink.batches, first)
                .into_iter()
                .filter(|s| s.labels.get(label_names::PID) == Some(pid.to_string().as_str()))
                .collect::<Vec<_>>()
        };
        loop {
            std::thread::sleep(Duration::from_secs(1));
            agent.tick(&mut sink).unwrap();
            let n: u64 = ours(&sink).iter().map(|s| s.count).sum();
            if n >= MIN_SAMPLES || started.elapsed() > PROFILE_AT_MOST {
                break;
            }
        }
        drop(workload);
        let samples = ours(&sink);
        let files = executables(&sink.batches);
        let total: u64 = samples.iter().map(|s| s.count).sum();
        let share = |pred: &dyn Fn(&[Frame]) -> bool| share_of(&samples, pred);
        let under = |name: &'static str| move |f: &[Frame]| python_frame(f, name).is_some();
        let parse = share(&under("parse"));
        let render = share(&under("render"));
        let digest = share(&under("digest"));
        let in_module = share(&under("<module>"));
        // The hashing: a native frame of libcrypto below digest's frame.
        let crypto = share(&|f: &[Frame]| {
            python_frame(f, "digest").is_some_and(|(at, _)| {
                f[at + 1..].iter().any(|g| {
                    matches!(g, Frame::Address { kind: FrameKind::Native, file_id, .. }
                        if files.get(file_id).is_some_and(|n| n.starts_with("libcrypto")))
                })
            })
        });
        let labelled = 100.0
            * samples
                .iter()
                .filter(|s| s.labels.get(label_names::SCRIPT) == Some(SCRIPT))
                .map(|s| s.count)
                .sum::<u64>() as f64
            / total.max(1) as f64;
        // Lines: each function's frames point into its own body.
        let mut bad_lines = Vec::new();
        for name in ["parse", "render", "digest"] {
            let body = lines_of(&script, name);
            for s in &samples {
                if let Some((_, Frame::Named { file, line, .. })) = python_frame(&s.frames, name) {
                    let file_ok = file.as_deref().is_some_and(|f| f.ends_with(SCRIPT));
                    if !file_ok || !body.contains(line) {
                        bad_lines.push(format!("{name} at {file:?}:{line} (body {body:?})"));
                    }
                }
            }
        }
        eprintln!(
            "{} (CPython {major}.{minor}): {total} samples; parse {parse:.1}%, render {render:.1}%, \
             digest {digest:.1}% (libcrypto below it: {crypto:.1}%), under <module> {in_module:.1}%, \
             script label on {labelled:.1}%, frames off their function's lines: {}",
            python.display(),
            bad_lines.len()
        );
        let mut fail = |what: String| failures.push(format!("{}: {what}", python.display()));
        if total < MIN_SAMPLES / 2 {
            fail(format!("only {total} samples"));
        }
        for (name, got, truth) in [
            ("parse", parse, 50.0),
            ("render", render, 35.0),
            ("digest", digest, 15.0),
        ] {
            if (got - truth).abs() > TOLERANCE_POINTS {
                fail(format!(
                    "{name} has {got:.1}% of the samples, expected {truth}% ± {TOLERANCE_POINTS}"
                ));
            }
        }
        if in_module < IN_MODULE_AT_LEAST {
            fail(format!(
                "only {in_module:.1}% of the samples are under <module>"
            ));
        }
        if crypto < 0.5 * digest {
            fail(format!(
                "libcrypto is below digest in {crypto:.1}% of the samples, digest has {digest:.1}%"
            ));
        }
        if labelled < 95.0 {
            fail(format!(
                "script={SCRIPT} on only {labelled:.1}% of the samples"
            ));
        }
        if !bad_lines.is_empty() {
            fail(format!(
                "frames outside their function's lines: {:?}",
                &bad_lines[..bad_lines.len().min(5)]
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
