//! End-to-end test of the GPU view's API: the batches an agent sends for
//! ten seconds of a CUDA process (built by `kiln_cuda::fold_snapshot` from
//! the library's snapshots, labelled as `agent/src/gpu` labels them),
//! posted to a real `kiln up`, then read back through
//! `/api/v1/gpu/kernels`, `/api/v1/gpu/instructions` and
//! `/api/v1/gpu/trace` exactly, filtered by label, scoped to the tenant.
//!
//! The batches are also the browser test's fixtures
//! (`frontend/e2e/fixtures/gpu-view-*.batch`, which `npm test` posts);
//! `ui_fixtures_are_the_batches_built_here` keeps them the same.
//! Regenerate them with `KILN_WRITE_FIXTURES=1 cargo test -p kiln --test
//! gpu_view`.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kiln_cuda::wire::{KernelAggregate, PcSampleAggregate, StallReasonName};
use kiln_cuda::{FoldOptions, Snapshot, StallReasonTable, WeightUnit, fold_snapshot};
use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet, label_names};
use serde_json::Value;
use support::Server;

const S: i64 = 1_000_000_000;
/// 2023-11-15T02:00:00Z: an hour of its own, away from other fixtures.
const T0_SECS: i64 = 1_700_013_600;
const T0: i64 = T0_SECS * S;
/// One snapshot a second.
const SECONDS: i64 = 10;

const GEMM: &str = "_Z4gemmPKfS0_Pfi";
const GEMM_DEMANGLED: &str = "gemm(float const*, float const*, float*, int)";
const RELU: &str = "relu_kernel";
/// gemm: launches and ns per launch every second, from the trainer.
const GEMM_RATE: (u64, u64) = (240, 1_500_000);
/// relu: from the loader, in the last five seconds only.
const RELU_RATE: (u64, u64) = (100, 200_000);
const RELU_FROM: i64 = 5;
const CUBIN: u64 = 0xab;

/// gemm's sampled instructions each second: offset, text, stall, samples.
const GEMM_PCS: [(u64, &str, u32, u64); 5] = [
    (0x90, "LDG.E R2, desc[UR4][R2.64]", 1, 30),
    (0x90, "LDG.E R2, desc[UR4][R2.64]", 2, 5),
    (0x1a0, "FFMA R4, R2, R3, R4", 3, 12),
    (0x1a0, "FFMA R4, R2, R3, R4", 4, 3),
    (0x2f0, "STG.E desc[UR4][R6.64], R4", 5, 4),
];
const STALLS: [(u32, &str); 5] = [
    (1, "long_scoreboard"),
    (2, "selected"),
    (3, "math_pipe_throttle"),
    (4, "not_selected"),
    (5, "lg_throttle"),
];

fn snapshot(second: i64) -> Snapshot {
    let mut kernels = vec![KernelAggregate {
        tid: 101,
        device_id: 0,
        name: GEMM.into(),
        launches: GEMM_RATE.0,
        total_ns: GEMM_RATE.0 * GEMM_RATE.1,
        exemplar_correlation_ids: vec![1],
    }];
    let mut pc_samples: Vec<PcSampleAggregate> = GEMM_PCS
        .iter()
        .map(|&(pc_offset, _, stall_reason, samples)| PcSampleAggregate {
            function_name: GEMM.into(),
            cubin_crc: CUBIN,
            function_index: 0,
            pc_offset,
            stall_reason,
            samples,
        })
        .collect();
    if second >= RELU_FROM {
        kernels.push(KernelAggregate {
            tid: 102,
            device_id: 0,
            name: RELU.into(),
            launches: RELU_RATE.0,
            total_ns: RELU_RATE.0 * RELU_RATE.1,
            exemplar_correlation_ids: vec![2],
        });
        pc_samples.push(PcSampleAggregate {
            function_name: RELU.into(),
            cubin_crc: CUBIN,
            function_index: 1,
            pc_offset: 0x40,
            stall_reason: 1,
            samples: 6,
        });
    }
    Snapshot {
        pid: 4242,
        kernels,
        pc_samples,
        stall_reasons: STALLS
            .iter()
            .map(|&(index, name)| StallReasonName {
                index,
                name: format!("smsp__pcsamp_warps_issue_stalled_{name}"),
            })
            .collect(),
        ..Snapshot::default()
    }
}

/// The agent's batches for the ten seconds, one per `gpu_weight` unit:
/// kernel time (period 1 ns, as the agent sends it), launches, PC samples.
fn gpu_batches() -> Vec<(WeightUnit, Batch)> {
    let units = [
        (WeightUnit::Nanoseconds, 1),
        (WeightUnit::Launches, 0),
        (WeightUnit::Samples, 0),
    ];
    let mut builders: Vec<(WeightUnit, BatchBuilder)> = units
        .iter()
        .map(|&(unit, period)| (unit, BatchBuilder::new("gpu-box", T0 + SECONDS * S, period)))
        .collect();
    let options = FoldOptions {
        instruction_name: Some(Box::new(|crc, function, pc| {
            GEMM_PCS
                .iter()
                .find(|p| crc == CUBIN && function == GEMM && p.0 == pc)
                .map(|p| p.1.to_owned())
        })),
    };
    let launch_stack = |_tid, correlation_id| {
        let leaf = if correlation_id == 1 {
            "train_step"
        } else {
            "load_batch"
        };
        Some(vec![
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, leaf),
        ])
    };
    let process = LabelSet::new()
        .with(label_names::HOST, "gpu-box")
        .with(label_names::PID, "4242")
        .with(label_names::PROCESS, "train")
        .with(label_names::DEVICE_KIND, "gpu");
    for second in 0..SECONDS {
        let snapshot = snapshot(second);
        let mut stalls = StallReasonTable::default();
        stalls.update(&snapshot);
        let at = T0 + second * S;
        for stack in fold_snapshot(&snapshot, &stalls, &options, launch_stack) {
            let trainer = Frame::named(FrameKind::Native, "train_step");
            let thread = match stack.frames.contains(&trainer) {
                _ if stack.unit == WeightUnit::Samples => None,
                true => Some(("101", "trainer")),
                false => Some(("102", "loader")),
            };
            let mut labels = process.clone().with("gpu_weight", stack.unit.as_str());
            if let Some((tid, name)) = thread {
                labels.insert(label_names::TID, tid);
                labels.insert(label_names::THREAD, name);
            }
            let (_, builder) = builders
                .iter_mut()
                .find(|(unit, _)| *unit == stack.unit)
                .expect("only time, launches and samples are folded");
            builder.add(at, &stack.frames, &labels, stack.weight);
        }
    }
    builders
        .into_iter()
        .map(|(unit, b)| (unit, b.finish()))
        .collect()
}

fn fixture_path(unit: WeightUnit) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../frontend/e2e/fixtures/gpu-view-{}.batch",
        unit.as_str()
    ))
}

/// Guards that the browser test posts the batches this file checks.
#[test]
fn ui_fixtures_are_the_batches_built_here() {
    for (unit, batch) in gpu_batches() {
        let path = fixture_path(unit);
        if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
            std::fs::write(&path, batch.encode()).unwrap();
        }
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; write it with KILN_WRITE_FIXTURES=1",
                path.display()
            )
        });
        assert_eq!(Batch::decode(&bytes).unwrap(), batch, "{}", path.display());
    }
}

fn json(server: &Server, path_and_query: &str) -> Value {
    let (status, body) = server.get(path_and_query);
    assert_eq!(status, 200, "{path_and_query}: {body}");
    serde_json::from_str(&body).unwrap()
}

const RANGE: &str = "from=1700013600&to=1700013610";

/// Kernel rows by name: (launches, total ns, mean ns, share, PC samples).
fn kernel_rows(server: &Server, query: &str) -> BTreeMap<String, (u64, u64, u64, f64, u64)> {
    let table = json(server, &format!("/api/v1/gpu/kernels?{query}"));
    table["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                (
                    k["launches"].as_u64().unwrap(),
                    k["total_ns"].as_u64().unwrap(),
                    k["mean_ns"].as_u64().unwrap(),
                    k["gpu_time_share"].as_f64().unwrap(),
                    k["pc_samples"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn gpu_view_reads_kernels_instructions_and_trace_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for (unit, batch) in gpu_batches() {
        let (status, body) = server
            .post("/api/v1/ingest", &batch.encode())
            .unwrap_or_else(|e| panic!("posting the {} batch: {e}", unit.as_str()));
        assert_eq!(status, 200, "{body}");
    }
    let seconds = SECONDS as u64;
    let relu_seconds = (SECONDS - RELU_FROM) as u64;
    let gemm_ns = seconds * GEMM_RATE.0 * GEMM_RATE.1;
    let relu_ns = relu_seconds * RELU_RATE.0 * RELU_RATE.1;
    let gemm_samples = seconds * GEMM_PCS.iter().map(|p| p.3).sum::<u64>();
    let share = gemm_ns as f64 / (gemm_ns + relu_ns) as f64;
    let expected = BTreeMap::from([
        (
            GEMM.to_owned(),
            (
                seconds * GEMM_RATE.0,
                gemm_ns,
                GEMM_RATE.1,
                share,
                gemm_samples,
            ),
        ),
        (
            RELU.to_owned(),
            (
                relu_seconds * RELU_RATE.0,
                relu_ns,
                RELU_RATE.1,
                relu_ns as f64 / (gemm_ns + relu_ns) as f64,
                relu_seconds * 6,
            ),
        ),
    ]);
    // Agent batches are answered once durable; wait until written.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rows = kernel_rows(&server, RANGE);
    while rows != expected {
        assert!(
            Instant::now() < deadline,
            "kernels: {rows:?}, expected {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        rows = kernel_rows(&server, RANGE);
    }
    println!(
        "kernels: {} rows, exact launches, time, mean, share and PC samples",
        rows.len()
    );

    let table = json(&server, &format!("/api/v1/gpu/kernels?{RANGE}"));
    assert_eq!(table["kernels"][0]["name"], GEMM, "most time first");
    assert_eq!(table["kernels"][0]["demangled"], GEMM_DEMANGLED);
    assert_eq!(table["kernels"][1]["demangled"], Value::Null);
    assert_eq!(table["total_ns"].as_u64(), Some(gemm_ns + relu_ns));

    // Label filters narrow it like a flamegraph: the loader's thread
    // launched relu only. PC samples have no thread, so none are left.
    let loader = kernel_rows(&server, &format!("{RANGE}&thread=loader"));
    assert_eq!(
        loader,
        BTreeMap::from([(
            RELU.to_owned(),
            (relu_seconds * RELU_RATE.0, relu_ns, RELU_RATE.1, 1.0, 0)
        )])
    );

    // The unfiltered flamegraph holds GPU time, not launch counts.
    let (status, collapsed) = server.get(&format!(
        "/api/v1/flamegraph?{RANGE}&format=collapsed&gpu_weight=nanoseconds"
    ));
    assert_eq!(status, 200);
    assert!(
        collapsed.contains(&format!("main;train_step;{GEMM} {gemm_ns}")),
        "{collapsed}"
    );
    let (_, everything) = server.get(&format!("/api/v1/flamegraph?{RANGE}&format=json"));
    let everything: Value = serde_json::from_str(&everything).unwrap();
    assert_eq!(
        everything["value"].as_u64(),
        Some(gemm_ns + relu_ns),
        "launch counts and PC samples are read only by a query naming gpu_weight"
    );
    let (_, sampled) = server.get(&format!(
        "/api/v1/flamegraph?{RANGE}&format=json&gpu_weight=samples"
    ));
    let sampled: Value = serde_json::from_str(&sampled).unwrap();
    assert_eq!(
        sampled["value"].as_u64(),
        Some(gemm_samples + relu_seconds * 6)
    );

    // CPU over time leaves GPU time out (there is no CPU sample here);
    // naming the device draws it, in GPUs busy.
    let cpu = json(&server, &format!("/api/v1/timeline?{RANGE}&step=1s"));
    let busy: Vec<f64> = cpu["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cores"].as_f64().unwrap())
        .collect();
    assert!(busy.iter().all(|&c| c == 0.0), "CPU over time: {busy:?}");
    let gpu = json(
        &server,
        &format!("/api/v1/timeline?{RANGE}&step=1s&device_kind=gpu&gpu_weight=nanoseconds"),
    );
    let busy: Vec<f64> = gpu["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["cores"].as_f64().unwrap() * 1000.0).round() / 1000.0)
        .collect();
    assert_eq!(
        busy[..SECONDS as usize],
        [0.36, 0.36, 0.36, 0.36, 0.36, 0.38, 0.38, 0.38, 0.38, 0.38]
    );

    // One kernel's instructions, in address order, stalls most first.
    // A mangled C++ name needs no escaping in a query string.
    let kernel = GEMM;
    let view = json(
        &server,
        &format!("/api/v1/gpu/instructions?kernel={kernel}&{RANGE}"),
    );
    assert_eq!(view["kernel"], GEMM);
    assert_eq!(view["total_samples"].as_u64(), Some(gemm_samples));
    assert_eq!(view["stalls"][0]["reason"], "long_scoreboard");
    assert_eq!(view["stalls"][0]["samples"].as_u64(), Some(seconds * 30));
    let rows: Vec<(u64, String, u64, String)> = view["instructions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["offset"].as_u64().unwrap(),
                i["text"].as_str().unwrap().to_owned(),
                i["samples"].as_u64().unwrap(),
                i["stalls"][0]["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                0x90,
                GEMM_PCS[0].1.to_owned(),
                seconds * 35,
                "long_scoreboard".to_owned()
            ),
            (
                0x1a0,
                GEMM_PCS[2].1.to_owned(),
                seconds * 15,
                "math_pipe_throttle".to_owned()
            ),
            (
                0x2f0,
                GEMM_PCS[4].1.to_owned(),
                seconds * 4,
                "lg_throttle".to_owned()
            ),
        ]
    );
    assert_eq!(view["instructions"][0]["cubin"], "cubin:00000000000000ab");
    let (status, body) = server.get(&format!("/api/v1/gpu/instructions?{RANGE}"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("kernel"), "{body}");

    // The trace: a counter per kernel and second, in GPUs busy.
    let trace = json(&server, &format!("/api/v1/gpu/trace?{RANGE}&step=1s"));
    let counters: Vec<(String, f64, f64)> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["ts"].as_f64().unwrap(),
                e["args"]["gpus"].as_f64().unwrap(),
            )
        })
        .collect();
    let relu_busy: Vec<f64> = counters
        .iter()
        .filter(|c| c.0 == RELU)
        .map(|c| c.2)
        .collect();
    let busy = (RELU_RATE.0 * RELU_RATE.1) as f64 / 1e9;
    let mut expected_relu = vec![0.0; RELU_FROM as usize];
    expected_relu.extend(vec![busy; (SECONDS - RELU_FROM) as usize]);
    expected_relu.push(0.0);
    assert_eq!(relu_busy, expected_relu);
    let gemm_first = counters.iter().find(|c| c.0 == GEMM_DEMANGLED).unwrap();
    assert_eq!(gemm_first.1, (T0 / 1000) as f64);
    assert_eq!(gemm_first.2, (GEMM_RATE.0 * GEMM_RATE.1) as f64 / 1e9);
    println!("trace: {} counter points over 2 kernels", counters.len());

    // Another tenant sees none of it.
    let (status, text) = support::request(
        &server.url,
        "POST",
        "/api/v1/admin/tenants",
        Some(&server.admin_token),
        &[],
        br#"{"tenant":"other-co"}"#,
    );
    assert_eq!(status, 201, "{text}");
    let (other, _) = support::key_with(&server.url, &server.admin_token, "other-co", "read");
    let (status, body) = support::request(
        &server.url,
        "GET",
        &format!("/api/v1/gpu/kernels?{RANGE}"),
        Some(&other),
        &[],
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let theirs: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(theirs["kernels"], Value::Array(Vec::new()));
    println!("another tenant's key: no kernels");
    server.stop();
}

/// Device memory live at a snapshot's end is a gauge: a range reads each
/// process's last reading (across hour partitions), not their sum; bytes
/// allocated add up.
#[test]
fn live_device_memory_reads_the_last_snapshot_not_a_sum() {
    const MIB: u64 = 1 << 20;
    // An hour boundary, with snapshots on both sides of it.
    let hour = (T0_SECS / 3600 + 5) * 3600;
    let stack = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, "allocate_cache"),
        Frame::named(FrameKind::GpuMemory, kiln_cuda::MEMORY_FRAME),
    ];
    let labels = |pid: &str, unit: WeightUnit| {
        LabelSet::new()
            .with(label_names::HOST, "gpu-box")
            .with(label_names::PID, pid)
            .with(label_names::DEVICE_KIND, "gpu")
            .with("gpu_weight", unit.as_str())
    };
    let mut live = BatchBuilder::new("gpu-box", hour * S, 0);
    let mut allocated = BatchBuilder::new("gpu-box", hour * S, 0);
    // Process 1 grows to 400 MiB; process 2 holds 60 MiB and ends before
    // the hour does.
    for (offset, one, two) in [
        (-10, 100, Some(50)),
        (-5, 200, Some(60)),
        (0, 300, None),
        (5, 400, None),
    ] {
        let at = (hour + offset) * S;
        live.add(at, &stack, &labels("1", WeightUnit::LiveBytes), one * MIB);
        allocated.add(
            at,
            &stack,
            &labels("1", WeightUnit::AllocatedBytes),
            100 * MIB,
        );
        if let Some(two) = two {
            live.add(at, &stack, &labels("2", WeightUnit::LiveBytes), two * MIB);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for batch in [live.finish(), allocated.finish()] {
        let (status, body) = server.post("/api/v1/ingest", &batch.encode()).unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let total = |query: &str| -> u64 {
        let (status, body) = server.get(&format!("/api/v1/flamegraph?format=json&{query}"));
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["value"]
            .as_u64()
            .unwrap_or(0)
    };
    let range = format!("from={}&to={}", hour - 60, hour + 60);
    let deadline = Instant::now() + Duration::from_secs(30);
    while total(&format!("{range}&gpu_weight=allocated_bytes")) != 400 * MIB {
        assert!(
            Instant::now() < deadline,
            "the batches were never queryable"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        total(&format!("{range}&gpu_weight=live_bytes")),
        (400 + 60) * MIB
    );
    assert_eq!(
        total(&format!("{range}&gpu_weight=live_bytes&pid=1")),
        400 * MIB
    );
    // A range that ends before the hour: each process's reading then.
    let before = format!("from={}&to={}", hour - 60, hour - 1);
    assert_eq!(
        total(&format!("{before}&gpu_weight=live_bytes")),
        (200 + 60) * MIB
    );
    println!("live bytes: the last reading per process, across hour partitions");
    server.stop();
}
