//! Container names from a real runtime: Podman runs the shares workload
//! in a named container, and the agent's samples of it carry
//! `container=<its id>` and `container_name=<its name>`, read from the
//! state Podman wrote (containers/storage's `containers.json`).
//!
//! Root test on the real kernel, like `profile.rs`. Skips, saying why,
//! where Podman is not installed or cannot run a container here (the
//! parsing of every runtime's files is tested without one, in
//! `src/containers/runtimes.rs`). `scripts/setup-tests.sh` installs
//! Podman, and runc: crun, Podman's default runtime on Debian, refuses
//! hosts whose cgroup v2 hierarchy holds controllers beside v1's (hybrid
//! mode), which runc accepts.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kiln_agent::{AgentConfig, MemorySink};
use kiln_model::label_names;
use kiln_test_support::CBuild;

use support::{require_root, resolve_labelled};

const FREQUENCY_HZ: u64 = 499;
/// Samples of the container's process enough for the test to mean
/// something: at 499 Hz, a fraction of a second of its CPU.
const AT_LEAST: u64 = 50;

/// Removes the container when the test ends, however it ends.
struct Container {
    name: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
    }
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .output()
        .expect("running podman")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_string()
}

/// Limits no higher than the test's own: Podman asks for 1M open files
/// by default, which needs CAP_SYS_RESOURCE that a root in a container or
/// sandbox may not have.
fn ulimit(resource: libc::__rlimit_resource_t, name: &str) -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    unsafe { libc::getrlimit(resource, &mut limit) };
    let n = limit.rlim_cur.min(limit.rlim_max).min(1024);
    format!("{name}={n}:{n}")
}

/// Starts `exe` (static) as `/shares 60 cpu` in container `name`, with
/// Podman's default runtime, else runc; the container, or why none ran.
fn start(name: &str, rootfs: &Path) -> Result<Container, String> {
    let nofile = ulimit(libc::RLIMIT_NOFILE, "nofile");
    let nproc = ulimit(libc::RLIMIT_NPROC, "nproc");
    let rootfs = rootfs.to_str().unwrap();
    let mut failures = Vec::new();
    let runc = Command::new("runc").arg("--version").output().is_ok();
    for runtime in [None, Some("runc").filter(|_| runc)] {
        let mut args = Vec::new();
        if let Some(r) = runtime {
            args.extend(["--runtime", r]);
        }
        args.extend([
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "none",
            "--ulimit",
            &nofile,
            "--ulimit",
            &nproc,
            "--rootfs",
            rootfs,
            "/shares",
            "60",
            "cpu",
        ]);
        let container = Container {
            name: name.to_string(),
        };
        let out = podman(&args);
        if out.status.success() {
            eprintln!(
                "container {name} runs with {} ({} runtime(s) failed before)",
                runtime.unwrap_or("Podman's default runtime"),
                failures.len()
            );
            return Ok(container);
        }
        failures.push(format!("podman {}: {}", args.join(" "), text(&out)));
        drop(container);
    }
    Err(failures.join("\n"))
}

// Guards the names end to end on a real runtime: the container's process
// is sampled, and every sample of it carries its id and its name as
// Podman wrote them, and no Kubernetes label (it is not a pod).
#[test]
fn podman_container_samples_carry_its_name() {
    require_root();
    if Command::new("podman").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: podman is not installed (scripts/setup-tests.sh installs it); \
             container names are tested on fixture files only"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    // Static: the root file system holds nothing else.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c");
    CBuild::clang()
        .args(["-O2", "-static"])
        .file(&source, &rootfs.join("shares"));
    let name = format!("kiln-agent-test-{}", std::process::id());

    let mut agent = support::start_agent(AgentConfig {
        frequency_hz: FREQUENCY_HZ,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        ..AgentConfig::default()
    });
    let container = match start(&name, &rootfs) {
        Ok(c) => c,
        Err(why) => {
            eprintln!(
                "SKIPPED: Podman cannot run a container on this host; container names are \
                 tested on fixture files only. What it said:\n{why}"
            );
            return;
        }
    };
    let inspect = podman(&[
        "inspect",
        "--format",
        "{{.Id}} {{.State.Pid}}",
        &container.name,
    ]);
    assert!(
        inspect.status.success(),
        "podman inspect: {}",
        text(&inspect)
    );
    let inspected = text(&inspect);
    let (id, pid) = inspected.split_once(' ').expect("id and pid");
    eprintln!("container {name}: id {id}, host pid {pid}");

    let mut sink = MemorySink::default();
    let started = Instant::now();
    let samples = loop {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink).unwrap();
        let samples: Vec<_> = resolve_labelled(&sink.batches, 0)
            .into_iter()
            .filter(|s| s.pid() == Some(pid))
            .collect();
        let count: u64 = samples.iter().map(|s| s.count).sum();
        // A deadline for a machine too busy to run the container; the
        // assertions below say what was missing.
        if count >= AT_LEAST || started.elapsed() > Duration::from_secs(30) {
            break samples;
        }
    };
    let count: u64 = samples.iter().map(|s| s.count).sum();
    assert!(
        count >= AT_LEAST,
        "the container's process (pid {pid}) got {count} samples"
    );
    for s in &samples {
        assert_eq!(
            s.labels.get(label_names::CONTAINER),
            Some(id),
            "{:?}",
            s.labels
        );
        assert_eq!(
            s.labels.get(label_names::CONTAINER_NAME),
            Some(name.as_str()),
            "{:?}",
            s.labels
        );
        assert_eq!(s.labels.get(label_names::POD), None, "{:?}", s.labels);
        assert_eq!(s.labels.get(label_names::NAMESPACE), None, "{:?}", s.labels);
    }
    eprintln!(
        "{count} samples of {name} in {} label sets, each with container_name={name}",
        samples.len()
    );
}
