//! End-to-end test of metric series: an agent-style batch with GPU
//! readings posted to a real `kiln up`, read back through
//! `/api/v1/metrics` exactly, downsampled, and filtered.
//!
//! The batch is also the browser test's fixture
//! (`frontend/e2e/fixtures/gpu-metrics.batch`, which `npm test` posts);
//! `ui_fixture_is_the_batch_built_here` keeps the two the same. Regenerate
//! it with `KILN_WRITE_FIXTURES=1 cargo test -p kiln --test metrics`.

mod support;

use std::time::{Duration, Instant};

use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet, label_names, metric_names};
use serde_json::Value;
use support::Server;

const S: i64 = 1_000_000_000;
/// 2023-11-14T22:20:00Z, a whole minute.
const T0_SECS: i64 = 1_700_000_400;
const T0: i64 = T0_SECS * S;
/// Readings: one a second for ten minutes.
const READINGS: i64 = 600;
const GPU_NAME: &str = "NVIDIA H100 80GB HBM3";

fn gpu_labels(index: u32) -> LabelSet {
    LabelSet::new()
        .with(label_names::HOST, "gpu-host")
        .with(label_names::GPU, index.to_string())
        .with(label_names::GPU_NAME, GPU_NAME)
}

/// GPU 0's utilization at reading `i`: a sawtooth, so that averages of
/// whole steps are easy to check.
fn utilization(gpu: u32, i: i64) -> f64 {
    match gpu {
        0 => (i % 100) as f64,
        _ => 50.0 + (i % 10) as f64 * 0.5,
    }
}

/// What an agent on a host with two GPUs and one training process sends
/// after ten minutes: utilization and memory of both GPUs and the
/// process's memory every second, and a little CPU.
fn gpu_batch() -> Batch {
    let mut b = BatchBuilder::new("gpu-host", T0 + READINGS * S, 52_631_578);
    let train = LabelSet::new()
        .with(label_names::HOST, "gpu-host")
        .with(label_names::PROCESS, "train")
        .with(label_names::PID, "4242");
    let stack = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, "train_step"),
    ];
    for i in 0..READINGS {
        let t = T0 + i * S;
        for gpu in 0..2 {
            let labels = gpu_labels(gpu);
            b.metric(
                metric_names::GPU_UTILIZATION,
                &labels,
                t,
                utilization(gpu, i),
            )
            .unwrap();
            let used = 1e9 * (gpu as f64 + 1.0) + i as f64 * 1e6;
            b.metric(metric_names::GPU_MEMORY_USED, &labels, t, used)
                .unwrap();
        }
        let process = gpu_labels(0)
            .with(label_names::PROCESS, "train")
            .with(label_names::PID, "4242");
        b.metric(metric_names::GPU_PROCESS_MEMORY, &process, t, 7.5e8)
            .unwrap();
        if i % 10 == 0 {
            b.add(t, &stack, &train, 19);
        }
    }
    b.finish()
}

fn fixture_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../frontend/e2e/fixtures/gpu-metrics.batch")
}

/// Guards that the browser test posts the batch this file checks.
#[test]
fn ui_fixture_is_the_batch_built_here() {
    let path = fixture_path();
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, gpu_batch().encode()).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with KILN_WRITE_FIXTURES=1",
            path.display()
        )
    });
    assert_eq!(Batch::decode(&bytes).unwrap(), gpu_batch());
}

fn json(server: &Server, path_and_query: &str) -> Value {
    let (status, body) = server.get(path_and_query);
    assert_eq!(status, 200, "{path_and_query}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// `(t_ns, value)` of a series' points.
fn points(series: &Value) -> Vec<(i64, f64)> {
    series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["t_ns"].as_i64().unwrap(), p["value"].as_f64().unwrap()))
        .collect()
}

/// The readings of GPU `gpu` averaged over steps of `step` seconds from
/// `from` (seconds since T0), steps without readings left out.
fn averaged(gpu: u32, from: i64, step: i64) -> Vec<(i64, f64)> {
    let mut steps = std::collections::BTreeMap::<i64, Vec<f64>>::new();
    for i in 0..READINGS {
        let bucket = (i - from).div_euclid(step);
        steps.entry(bucket).or_default().push(utilization(gpu, i));
    }
    steps
        .into_iter()
        .map(|(k, v)| {
            let t = T0 + (from + k * step) * S;
            (t, v.iter().sum::<f64>() / v.len() as f64)
        })
        .collect()
}

#[test]
fn gpu_metrics_read_back_exactly_downsampled_and_filtered() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let bytes = gpu_batch().encode();
    let (status, body) = server.post("/api/v1/ingest", &bytes).unwrap();
    assert_eq!(status, 200, "{body}");
    let accepted: Value = serde_json::from_str(&body).unwrap();
    // Per second: utilization and memory of two GPUs, one process's memory.
    assert_eq!(accepted["metric_points"], 5 * READINGS);
    // At-least-once delivery: the same batch again changes nothing.
    let (status, body) = server.post("/api/v1/ingest", &bytes).unwrap();
    assert_eq!(status, 200, "{body}");

    let range = format!("from={T0_SECS}&to={}", T0_SECS + READINGS);
    // Agent batches are answered once durable; wait until written.
    let started = Instant::now();
    let names = loop {
        let names = json(&server, &format!("/api/v1/metrics/names?{range}"));
        if names["names"].as_array().unwrap().len() == 3 {
            break names;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "metrics never became queryable: {names}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        names["names"],
        serde_json::json!([
            metric_names::GPU_MEMORY_USED,
            metric_names::GPU_PROCESS_MEMORY,
            metric_names::GPU_UTILIZATION,
        ])
    );

    // Every reading exactly, one series per GPU, sorted by labels. The
    // names show once the first points are stored, before the last ones
    // are: wait until every reading of both GPUs reads back.
    let util = format!("/api/v1/metrics?name={}", metric_names::GPU_UTILIZATION);
    let set = loop {
        let set = json(&server, &format!("{util}&{range}&step=1s"));
        let complete = set["series"].as_array().is_some_and(|series| {
            series.len() == 2 && series.iter().all(|s| points(s).len() == READINGS as usize)
        });
        if complete || started.elapsed() > Duration::from_secs(60) {
            break set;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(set["step_ns"], S);
    let series = set["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{set}");
    for (gpu, s) in series.iter().enumerate() {
        let labels = serde_json::json!({
            "gpu": gpu.to_string(),
            "gpu_name": GPU_NAME,
            "host": "gpu-host",
        });
        assert_eq!(s["labels"], labels);
        let expected: Vec<(i64, f64)> = (0..READINGS)
            .map(|i| (T0 + i * S, utilization(gpu as u32, i)))
            .collect();
        assert_eq!(points(s), expected, "GPU {gpu}");
    }
    // Without a step, 10 minutes need no averaging: 1 s steps.
    let set = json(&server, &format!("{util}&{range}"));
    assert_eq!(set["step_ns"], S);
    assert_eq!(points(&set["series"][1]).len(), READINGS as usize);

    // Averages per step: 10 steps of a minute.
    let set = json(&server, &format!("{util}&{range}&step=1m"));
    assert_eq!(points(&set["series"][0]), averaged(0, 0, 60));
    assert_eq!(points(&set["series"][0])[0], (T0, 29.5)); // (0 + … + 59) / 60
    assert_eq!(points(&set["series"][1]), averaged(1, 0, 60));

    // Two days around the readings: the step is chosen to keep 1000 points
    // at most (172 800 s / 1000, rounded up to 173 s), steps start at
    // `from`, and steps without readings are gaps.
    let wide_from = T0_SECS - 86_400;
    let wide = format!("from={wide_from}&to={}", T0_SECS + 86_400);
    let set = json(&server, &format!("{util}&{wide}"));
    assert_eq!(set["step_ns"], 173 * S);
    let got = points(&set["series"][0]);
    let expected = averaged(0, wide_from - T0_SECS, 173);
    assert_eq!(got.len(), expected.len());
    for ((t, v), (et, ev)) in got.iter().zip(&expected) {
        assert_eq!(t, et);
        assert!((v - ev).abs() < 1e-9, "{v} vs {ev} at {t}");
    }

    // Label filters, as the flamegraph's.
    let set = json(&server, &format!("{util}&{range}&step=1m&gpu=1"));
    let series = set["series"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!(series[0]["labels"]["gpu"], "1");
    assert_eq!(points(&series[0]), averaged(1, 0, 60));
    let set = json(&server, &format!("{util}&{range}&process=train"));
    assert_eq!(set["series"], serde_json::json!([]));
    let process = format!("/api/v1/metrics?name={}", metric_names::GPU_PROCESS_MEMORY);
    let set = json(&server, &format!("{process}&{range}&process=train"));
    assert_eq!(set["series"][0]["labels"]["pid"], "4242");
    assert!(points(&set["series"][0]).iter().all(|&(_, v)| v == 7.5e8));

    // The samples of the same batch are there too.
    let (status, body) = server.get(&format!("/api/v1/flamegraph?format=collapsed&{range}"));
    assert_eq!(status, 200);
    assert_eq!(
        body.trim(),
        format!("main;train_step {}", 19 * READINGS / 10)
    );
}

/// Bad requests get a 400 naming the problem.
#[test]
fn metric_queries_are_bounded_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let cases = [
        (
            "/api/v1/metrics?from=now-1h",
            "missing query parameter name",
        ),
        ("/api/v1/metrics?name=GPU%20util", "invalid metric name"),
        (
            "/api/v1/metrics?name=m&from=now-1h&step=1s",
            "use at least 3s 600ms",
        ),
        ("/api/v1/metrics?name=m&step=ten", "not a duration"),
        ("/api/v1/metrics?name=m&from=now&to=now-1h", "before"),
        ("/api/v1/metrics?name=m&bad%20label=x", "not a label name"),
    ];
    for (path, expected) in cases {
        let (status, body) = server.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        let message = error["error"].as_str().unwrap();
        assert!(message.contains(expected), "{path}: {message:?}");
    }
    // An empty range has no metrics, and that is no error.
    let names = json(&server, "/api/v1/metrics/names?from=now-1h");
    assert_eq!(names["names"], serde_json::json!([]));
    let set = json(&server, "/api/v1/metrics?name=gpu.power_watts&from=now-1h");
    assert_eq!(set["series"], serde_json::json!([]));
    // Nor is a long one: a range is narrowed to the hours that hold the
    // metric's points (none here), and the names index has no limit.
    let set = json(&server, "/api/v1/metrics?name=m&from=now-40d");
    assert_eq!(set["series"], serde_json::json!([]));
    let names = json(&server, "/api/v1/metrics/names?from=now-1y");
    assert_eq!(names["names"], serde_json::json!([]));

    // Points of one metric 40 days apart: a range holding both is refused,
    // saying how far a metric query reads; one holding either is answered.
    const DAY: i64 = 86_400;
    let far = T0 + 40 * DAY * S;
    for (t, value) in [(T0, 1.0), (far, 2.0)] {
        let mut b = BatchBuilder::new("gpu-host", t, 10_000_000);
        b.metric("m", &gpu_labels(0), t, value).unwrap();
        let (status, body) = server.post("/api/v1/ingest", &b.finish().encode()).unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let both = format!("from={}&to={}", T0_SECS - DAY, T0_SECS + 41 * DAY);
    // Both written: each shows in a day around it.
    for t in [T0_SECS, far / S] {
        let around = format!("/api/v1/metrics?name=m&from={}&to={}", t - DAY, t + DAY);
        let started = Instant::now();
        while json(&server, &around)["series"] == serde_json::json!([]) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the point at {t} never became queryable"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let path = format!("/api/v1/metrics?name=m&{both}");
    let (status, body) = server.get(&path);
    assert_eq!(status, 400, "{path}: {body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("at most 31 days"), "{path}: {message:?}");
    let first = format!("from={}&to={}", T0_SECS - DAY, T0_SECS + 30 * DAY);
    let set = json(&server, &format!("/api/v1/metrics?name=m&{first}"));
    let series = set["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{set}");
    assert_eq!(series[0]["points"].as_array().unwrap().len(), 1, "{set}");
    assert_eq!(series[0]["points"][0]["value"], 1.0, "{set}");
}

/// Batches of format version 1, from agents older than metric points and
/// from their spools, are still accepted and their samples stored.
#[test]
fn version_1_batches_are_still_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let v1 = include_bytes!("../../model/tests/fixtures/batch-v1.bin");
    let (status, body) = server.post("/api/v1/ingest", v1).unwrap();
    assert_eq!(status, 200, "{body}");
    let accepted: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(accepted["samples"], 10);
    assert_eq!(accepted["metric_points"], 0);
    let started = Instant::now();
    loop {
        let (_, body) = server.get("/api/v1/top?from=1699999990&to=1700000010&limit=5");
        if body.contains("main") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
