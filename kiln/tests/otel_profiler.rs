//! The OpenTelemetry eBPF profiler as a client, the way the OpenTelemetry
//! project ships it to users: its collector distribution (the `profiling`
//! receiver) with the collector's own `otlp_grpc` and `otlp_http`
//! exporters, built by `scripts/otel-collector.sh` from the Go module
//! proxy, profiling this whole host and sending to a real `kiln up`.
//!
//! One collector feeds three tenants at once, one per exporter (gRPC,
//! OTLP/HTTP protobuf, OTLP/HTTP JSON), so the test shows every route
//! keeps exactly what the profiler measured (the tenants' stacks are the
//! same, count for count), and that those are the
//! workload's true shares (60/30/10 of its CPU, within 3 points), named
//! from symbols uploaded with `kiln symbols upload` (the profiler sends
//! native frames as addresses and GNU build ids).
//!
//! Needs root (eBPF) and the collector; without them it says why and
//! passes. `scripts/setup-tests.sh` builds the collector.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_test_support::CBuild;
use support::{Server, key_with};

/// The profiler's sampling rate, per CPU: 20 Hz (its default) gives too
/// few samples in a test's seconds for 3-point shares on a busy host.
const SAMPLES_PER_SECOND: u32 = 250;
/// How long the collector profiles the workload.
const PROFILE_FOR: Duration = Duration::from_secs(30);

/// The collector, when it is built: `$KILN_OTELCOL_EBPF_PROFILER`, else
/// where `scripts/otel-collector.sh` puts it.
fn collector_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("KILN_OTELCOL_EBPF_PROFILER") {
        return Some(PathBuf::from(path));
    }
    let peers = std::env::var("KILN_PEERS_DIR").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kiln-peers"),
        PathBuf::from,
    );
    let path = peers.join("otelcol-ebpf-profiler-v0.0.202633/otelcol-ebpf-profiler");
    path.is_file().then_some(path)
}

/// Kills a child process when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The collector's configuration: the profiling receiver, and one
/// exporter per route, each with its tenant's key as a header.
fn collector_config(server: &Server, grpc_key: &str, http_key: &str, json_key: &str) -> String {
    let grpc = server.otlp_grpc.expect("kiln up serves gRPC");
    format!(
        r#"receivers:
  profiling:
    samples_per_second: {SAMPLES_PER_SECOND}
    reporter_interval: 2s
exporters:
  otlp_grpc/kiln:
    endpoint: {grpc}
    tls:
      insecure: true
    headers:
      authorization: "Bearer {grpc_key}"
    compression: gzip
  otlp_http/kiln:
    endpoint: {url}
    headers:
      authorization: "Bearer {http_key}"
    compression: zstd
  otlp_http/json:
    endpoint: {url}
    encoding: json
    headers:
      authorization: "Bearer {json_key}"
service:
  pipelines:
    profiles:
      receivers: [profiling]
      exporters: [otlp_grpc/kiln, otlp_http/kiln, otlp_http/json]
"#,
        url = server.url,
    )
}

/// Uploads `elf`'s symbols to `server` with `key`, as a user does.
fn upload_symbols(server: &Server, key: &str, elf: &Path) {
    let out = server
        .cli()
        .env("KILN_API_KEY", key)
        .args(["symbols", "upload", "--server", &server.url])
        .arg(elf)
        .output()
        .expect("run kiln symbols upload");
    assert!(
        out.status.success(),
        "kiln symbols upload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tenant's collapsed stacks of process `pid`, with `key`.
fn stacks_of(server: &Server, key: &str, pid: u32) -> Vec<String> {
    let (status, body) = support::request(
        &server.url,
        "GET",
        &format!("/api/v1/flamegraph?from=now-1h&format=collapsed&pid={pid}"),
        Some(key),
        &[],
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let mut lines: Vec<String> = body.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Samples per function among `stacks` (collapsed lines): those whose
/// stack has the function, for each of `functions`.
fn counts(stacks: &[String], functions: &[&str]) -> Vec<u64> {
    functions
        .iter()
        .map(|function| {
            stacks
                .iter()
                .filter_map(|line| {
                    let (stack, count) = line.rsplit_once(' ')?;
                    stack
                        .split(';')
                        .any(|frame| frame == *function)
                        .then(|| count.parse::<u64>().unwrap())
                })
                .sum()
        })
        .collect()
}

#[test]
fn the_opentelemetry_profiler_in_its_collector_sends_to_kiln_over_grpc_http_and_json() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP: the OpenTelemetry eBPF profiler needs root to load eBPF");
        return;
    }
    let Some(collector) = collector_binary() else {
        println!(
            "SKIP: the OpenTelemetry collector with the eBPF profiler is not built \
             (scripts/otel-collector.sh builds it from the Go module proxy)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/workloads/shares.c");
    let shares = dir.path().join("shares");
    CBuild::clang()
        .args(["-O2", "-g", "-Wl,--build-id"])
        .file(&source, &shares);

    let server = Server::start(&dir.path().join("kiln"));
    let tenant_key = |tenant: &str| {
        let (status, text) = support::request(
            &server.url,
            "POST",
            "/api/v1/admin/tenants",
            Some(&server.admin_token),
            &[],
            format!(r#"{{"tenant":"{tenant}"}}"#).as_bytes(),
        );
        assert_eq!(status, 201, "{text}");
        key_with(&server.url, &server.admin_token, tenant, "ingest,read").0
    };
    let http_key = tenant_key("over-http");
    let json_key = tenant_key("over-json");
    for key in [&server.key, &http_key, &json_key] {
        upload_symbols(&server, key, &shares);
    }

    // Long enough to outlast the profiler's start and its last report.
    let workload = Killed(
        Command::new(&shares)
            .args([&(PROFILE_FOR.as_secs() + 60).to_string(), "cpu"])
            .spawn()
            .expect("start the workload"),
    );
    let pid = workload.0.id();
    let config = dir.path().join("otelcol.yaml");
    std::fs::write(
        &config,
        collector_config(&server, &server.key, &http_key, &json_key),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("otelcol.log")).unwrap();
    let mut running = Killed(
        Command::new(&collector)
            .arg("--feature-gates=+service.profilesSupport")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the collector"),
    );
    std::thread::sleep(PROFILE_FOR);
    // SIGTERM: the collector flushes what its exporters hold, then exits.
    // SAFETY: kill(2) on our own child with a valid signal.
    unsafe { libc::kill(running.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while running.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the collector did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(dir.path().join("otelcol.log")).unwrap();
    for line in log.lines().filter(|l| l.contains("\terror\t")) {
        println!("collector: {line}");
    }
    drop(workload);

    // Ingest is asynchronous: wait until both tenants' counts settle.
    let functions = ["work_sixty", "work_thirty", "work_ten"];
    let mut last = (Vec::new(), Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = (
            stacks_of(&server, &server.key, pid),
            stacks_of(&server, &http_key, pid),
            stacks_of(&server, &json_key, pid),
        );
        if !now.0.is_empty() && now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tenants' stacks did not settle: {now:?}"
        );
        last = now;
        std::thread::sleep(Duration::from_secs(2));
    }
    let (over_grpc, over_http, over_json) = last;
    assert_eq!(
        over_grpc, over_http,
        "the gRPC and HTTP exporters carried the same profiles"
    );
    assert_eq!(
        over_grpc, over_json,
        "the gRPC and OTLP/JSON exporters carried the same profiles"
    );
    let got = counts(&over_grpc, &functions);
    let total: u64 = got.iter().sum();
    println!(
        "otel profiler -> kiln: {total} samples of the workload in its three functions \
         ({} stacks): {got:?}",
        over_grpc.len()
    );
    for line in &over_grpc {
        println!("  {line}");
    }
    assert!(
        total >= 500,
        "too few samples to judge shares: {over_grpc:?}"
    );
    for (function, (count, truth)) in functions.iter().zip(got.iter().zip([60.0, 30.0, 10.0])) {
        let share = 100.0 * *count as f64 / total as f64;
        println!("  {function}: {share:.1}% (truth {truth}%)");
        assert!(
            (share - truth).abs() <= 3.0,
            "{function}: {share:.1}%, truth {truth}%: {over_grpc:?}"
        );
    }
    // Named from the uploaded symbols, whole from main down.
    for path in [
        "main;path_a;work_sixty",
        "main;path_b;work_thirty",
        "main;path_c;work_ten",
    ] {
        assert!(
            over_grpc.iter().any(|line| line.contains(path)),
            "no stack with {path}: {over_grpc:?}"
        );
    }
    // The resource's process attributes became labels.
    let (status, labels) = server.get("/api/v1/labels?from=now-1h");
    assert_eq!(status, 200, "{labels}");
    let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
    assert!(
        labels["process"].get("shares").is_some(),
        "no process=shares: {labels}"
    );
    assert!(
        labels["pid"].get(pid.to_string()).is_some(),
        "no pid={pid}: {labels}"
    );
    server.stop();
}
