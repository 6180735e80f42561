//! `kiln-agent --no-ebpf` end to end, with no GPU and no privilege: a C
//! host program loads the real `libkiln_cuda.so`, which finds a stand-in
//! libcupti (`tests/cupti/fake_cupti.c`, the one thing faked: CUPTI cannot
//! run without a GPU) and sends its snapshots to the agent, which sends
//! GPU batches to a real Kiln backend; the flamegraph must then hold the
//! kernels, rooted at the kernel, with their exact GPU time, under the
//! process and thread labels.
//!
//! Run as root, the agent runs as `nobody` (`setpriv`), and the test
//! checks it holds no BPF or perf-event file descriptor; run as another
//! user, it is unprivileged anyway.

mod backend;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backend::{Backend, Killed};
use kiln_test_support::CBuild;
use object::{Object, ObjectSymbol};

/// Launches per kernel, and each execution's GPU time (`tests/cupti/host.c`).
const GEMM: (u64, u64) = (24, 1500);
const COPY: (u64, u64) = (16, 700);
const FINAL: (u64, u64) = (3, 300);

/// What `RealCupti::from_library` (gpu-lib/src/cupti/real.rs) requires; the
/// fake exports these and no other CUPTI function.
const REQUIRED_CUPTI: [&str; 8] = [
    "cuptiActivityEnable",
    "cuptiActivityFlushAll",
    "cuptiActivityGetNextRecord",
    "cuptiActivityRegisterCallbacks",
    "cuptiEnableCallback",
    "cuptiEnableDomain",
    "cuptiGetTimestamp",
    "cuptiSubscribe",
];

/// The uid and gid the agent runs as when the test is root.
const NOBODY: u32 = 65534;

fn cdylib() -> PathBuf {
    kiln_test_support::kiln_cuda_cdylib("no-ebpf-cdylib")
}

impl Backend {
    /// The flamegraph of the last hour with `filters` (`&name=value`…):
    /// its roots by name, as (kind, value).
    fn roots(&self, filters: &str) -> BTreeMap<String, (String, u64)> {
        let graph = self.get_json(&format!(
            "/api/v1/flamegraph?from=now-1h&format=json{filters}"
        ));
        graph["children"]
            .as_array()
            .unwrap_or_else(|| panic!("no children in {graph}"))
            .iter()
            .map(|node| {
                (
                    node["name"].as_str().unwrap().to_owned(),
                    (
                        node["kind"].as_str().unwrap().to_owned(),
                        node["value"].as_u64().unwrap(),
                    ),
                )
            })
            .collect()
    }

    /// Polls [`Backend::roots`] until it equals `expected`.
    fn wait_for(&self, filters: &str, expected: &[(&str, u64)], agent_log: &Path) {
        let expected: BTreeMap<String, (String, u64)> = expected
            .iter()
            .map(|(name, ns)| (name.to_string(), ("gpu_kernel".to_string(), *ns)))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let roots = self.roots(filters);
            if roots == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "flamegraph{filters}: {roots:?}, expected {expected:?}; the agent's log:\n{}",
                std::fs::read_to_string(agent_log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The fake libcupti and the host, built from `tests/cupti/`.
fn build_c(dir: &Path) -> (PathBuf, PathBuf) {
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cupti");
    let cupti = dir.join("libcupti_fake.so");
    CBuild::cc()
        .args([
            "-O2",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-pthread",
        ])
        .file(&sources.join("fake_cupti.c"), &cupti);
    let host = dir.join("gpu_host");
    CBuild::cc()
        .args(["-O2", "-Wall", "-Werror", "-pthread", "-ldl"])
        .file(&sources.join("host.c"), &host);
    (cupti, host)
}

/// The CUPTI functions a shared library exports.
fn exported_cupti(library: &Path) -> Vec<String> {
    let data = std::fs::read(library).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut names: Vec<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .filter(|name| name.starts_with("cupti"))
        .collect();
    names.sort();
    names
}

/// Whether this test runs as root.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The BPF and perf-event file descriptors `pid` holds.
fn bpf_and_perf_fds(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|target| target.contains("bpf") || target.contains("perf_event"))
        .collect()
}

#[test]
fn gpu_kernels_reach_the_flamegraph_without_ebpf() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, host) = build_c(dir.path());
    assert_eq!(exported_cupti(&cupti), REQUIRED_CUPTI);
    let library = cdylib();
    let backend = Backend::start();

    // The agent's own directory (socket, spool), writable by whoever it
    // runs as.
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir(&agent_dir).unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_kiln-agent"));
    if is_root() {
        // tempfile makes its directory private to root.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&agent_dir, Some(NOBODY), Some(NOBODY)).unwrap();
        agent = Command::new("setpriv");
        agent
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .args(["--clear-groups", "--inh-caps=-all", "--"])
            .arg(env!("CARGO_BIN_EXE_kiln-agent"));
    }
    let socket = agent_dir.join("gpu.sock");
    let log = dir.path().join("agent.log");
    let mut agent = Killed(
        agent
            .arg("--no-ebpf")
            .arg("--server")
            .arg(&backend.url)
            .arg("--api-key")
            .arg(&backend.key)
            .arg("--gpu-socket")
            .arg(&socket)
            .arg("--spool-dir")
            .arg(agent_dir.join("spool"))
            .args(["--interval", "500ms", "--host", "gpu-box"])
            .env("RUST_LOG", "info,kiln_agent=debug")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start kiln-agent (as root, through setpriv from util-linux)"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if let Some(status) = agent.0.try_wait().unwrap() {
            panic!(
                "kiln-agent exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no socket at {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let host_log = dir.path().join("host.log");
    let mut host = Killed(
        Command::new(&host)
            .arg(&library)
            .arg(&cupti)
            .args([GEMM.0, COPY.0, FINAL.0].map(|n| n.to_string()))
            .env("KILN_CUPTI_PATH", &cupti)
            .env("KILN_GPU_SOCKET", &socket)
            .env("KILN_CUDA_SNAPSHOT_MS", "100")
            .env("KILN_CUDA_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&host_log).unwrap())
            .spawn()
            .expect("start the host"),
    );
    let mut line = String::new();
    BufReader::new(host.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        format!("launched {}", GEMM.0 + COPY.0),
        "the host failed: {}",
        std::fs::read_to_string(&host_log).unwrap()
    );

    // Exact GPU time per kernel, the kernels at the root (no launch
    // stacks without eBPF), while both threads live.
    let (gemm_ns, copy_ns) = (GEMM.0 * GEMM.1, COPY.0 * COPY.1);
    backend.wait_for(
        "",
        &[("gemm_kernel", gemm_ns), ("copy_kernel", copy_ns)],
        &log,
    );
    backend.wait_for("&thread=trainer", &[("gemm_kernel", gemm_ns)], &log);
    backend.wait_for("&thread=loader", &[("copy_kernel", copy_ns)], &log);
    backend.wait_for(
        &format!("&process=gpu_host&pid={}&host=gpu-box", host.0.id()),
        &[("gemm_kernel", gemm_ns), ("copy_kernel", copy_ns)],
        &log,
    );
    let agent_pid = agent.0.id();
    assert_eq!(bpf_and_perf_fds(agent_pid), Vec::<String>::new());
    if is_root() {
        let status = std::fs::read_to_string(format!("/proc/{agent_pid}/status")).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid.split_whitespace().skip(1).all(|id| id == "65534"),
            "{uid}"
        );
    }

    // The last kernels come only in the library's last snapshot, sent
    // from its atexit handler.
    let host_pid = host.0.id();
    drop(host.0.stdin.take());
    let status = host.0.wait().unwrap();
    let host_stderr = std::fs::read_to_string(&host_log).unwrap();
    assert!(status.success(), "host: {status}: {host_stderr}");
    assert!(
        host_stderr.contains(&format!("using {}", cupti.display())),
        "{host_stderr}"
    );
    assert!(!host_stderr.contains("no kiln agent"), "{host_stderr}");
    // SAFETY: kill(2) with a pid we own and a valid signal number.
    assert_eq!(unsafe { libc::kill(agent_pid as i32, libc::SIGTERM) }, 0);
    let status = agent.0.wait().unwrap();
    let agent_log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "kiln-agent: {status}: {agent_log}");
    assert!(agent_log.contains("no eBPF program loaded"), "{agent_log}");
    assert!(agent_log.contains("stopped"), "{agent_log}");
    assert!(!agent_log.contains("not delivered"), "{agent_log}");
    // Nothing counted twice, the last kernels under the main thread.
    backend.wait_for(
        "",
        &[
            ("gemm_kernel", gemm_ns),
            ("copy_kernel", copy_ns),
            ("final_kernel", FINAL.0 * FINAL.1),
        ],
        &log,
    );
    // Its thread may be gone (and unnamed) by the time its snapshot is
    // read, but not its id.
    backend.wait_for(
        &format!("&tid={host_pid}"),
        &[("final_kernel", FINAL.0 * FINAL.1)],
        &log,
    );

    // The GPU view's kernel table: every launch counted once, the mean
    // time per launch exact.
    let table = backend.get_json("/api/v1/gpu/kernels?from=now-1h");
    let rows: BTreeMap<String, (u64, u64, u64)> = table["kernels"]
        .as_array()
        .unwrap_or_else(|| panic!("no kernels in {table}"))
        .iter()
        .map(|k| {
            let figure = |name: &str| k[name].as_u64().unwrap();
            (
                k["name"].as_str().unwrap().to_owned(),
                (figure("launches"), figure("total_ns"), figure("mean_ns")),
            )
        })
        .collect();
    let row = |(launches, ns): (u64, u64)| (launches, launches * ns, ns);
    assert_eq!(
        rows,
        BTreeMap::from([
            ("gemm_kernel".to_owned(), row(GEMM)),
            ("copy_kernel".to_owned(), row(COPY)),
            ("final_kernel".to_owned(), row(FINAL)),
        ])
    );
}

/// `--no-ebpf` with `--no-gpu` would profile nothing: refused, saying so,
/// before anything starts.
#[test]
fn no_ebpf_with_no_gpu_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-agent"))
        .args(["--no-ebpf", "--no-gpu"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--no-ebpf and --no-gpu") && stderr.contains("leave nothing to profile"),
        "{stderr}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-agent"))
        .arg("--no-gpu")
        .env("KILN_NO_EBPF", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("leave nothing to profile"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Agents no longer publish straight to Kafka (the bus takes only records
/// a gateway authenticated): a kafka:// server is refused, saying so,
/// before anything starts.
#[test]
fn a_kafka_server_is_refused_saying_why() {
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-agent"))
        .args(["--no-ebpf", "--server", "kafka://broker:9092/kiln-ingest"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("agents send to a gateway over HTTP(S)")
            && stderr.contains("publishing straight to Kafka was removed"),
        "{stderr}"
    );
}
