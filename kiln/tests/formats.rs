//! Real captures through `kiln up`: what is read back is exactly what the
//! file holds (the parsers themselves are checked against inferno and
//! hand-made expectations in `formats/tests`).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use kiln_formats::{Format, ImportOptions, import};
use kiln_model::{Frame, FrameId};
use support::Server;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../formats/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The collapsed lines a file's stacks make: the expectation.
fn expected(format: Format, input: &[u8]) -> Vec<String> {
    let batch = import(format, input, &ImportOptions::new(0)).unwrap().batch;
    let names: HashMap<FrameId, String> = batch
        .frames
        .iter()
        .map(|f| match &f.frame {
            Frame::Named { function, .. } => (f.id, function.clone()),
            Frame::Address { .. } => panic!("imports name their frames"),
        })
        .collect();
    let stacks: HashMap<_, _> = batch.stacks.iter().map(|s| (s.id, &s.frames)).collect();
    let mut lines = BTreeMap::<String, u64>::new();
    for s in &batch.samples {
        let line: Vec<&str> = stacks[&s.stack].iter().map(|f| names[f].as_str()).collect();
        *lines.entry(line.join(";")).or_default() += s.count;
    }
    lines.into_iter().map(|(s, n)| format!("{s} {n}")).collect()
}

#[test]
fn real_perf_script_captures_read_back_exactly() {
    for name in [
        "real-c-threads-syscalls.perf",
        "real-cpp-templates.perf",
        "real-rust-pid-tid.perf",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path());
        let input = fixture(name);
        let summary = server.import("perf-script", &input);
        let want = expected(Format::PerfScript, &input);
        let total: u64 = want
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(summary["samples"], total, "{name}");
        assert_eq!(server.collapsed(""), want, "{name}");
    }
}

#[test]
fn kernel_frames_sit_under_user_frames_of_a_syscall_heavy_capture() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import("perf-script", &fixture("real-c-threads-syscalls.perf"));
    let lines = server.collapsed("");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("worker;read;entry_SYSCALL_64_after_hwframe;do_syscall_64")),
        "no kernel path under a user frame: {lines:#?}"
    );
    let (status, body) = server.get("/api/v1/top?from=now-1d&limit=1000");
    assert_eq!(status, 200, "{body}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let kind = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .map(|r| r["kind"].as_str().unwrap().to_owned())
    };
    assert_eq!(kind("do_syscall_64").as_deref(), Some("kernel"));
    assert_eq!(kind("worker").as_deref(), Some("native"));
}

#[test]
fn pprof_gzipped_reads_back_exactly() {
    use kiln_formats::pprof_proto::{Function, Line, Location, Profile, Sample, ValueType};
    use prost::Message;

    let mut profile = Profile {
        string_table: [
            "",
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "main",
            "work",
            "a.c",
        ]
        .map(String::from)
        .to_vec(),
        sample_type: vec![
            ValueType { r#type: 1, unit: 2 },
            ValueType { r#type: 3, unit: 4 },
        ],
        period_type: Some(ValueType { r#type: 3, unit: 4 }),
        period: 10_000_000,
        ..Default::default()
    };
    profile.function = vec![
        Function {
            id: 1,
            name: 5,
            filename: 7,
            ..Default::default()
        },
        Function {
            id: 2,
            name: 6,
            filename: 7,
            ..Default::default()
        },
    ];
    profile.location = vec![
        Location {
            id: 1,
            line: vec![Line {
                function_id: 1,
                line: 3,
                ..Default::default()
            }],
            ..Default::default()
        },
        Location {
            id: 2,
            line: vec![Line {
                function_id: 2,
                line: 9,
                ..Default::default()
            }],
            ..Default::default()
        },
    ];
    profile.sample = vec![
        Sample {
            location_id: vec![2, 1],
            value: vec![7, 70_000_000],
            ..Default::default()
        },
        Sample {
            location_id: vec![1],
            value: vec![2, 20_000_000],
            ..Default::default()
        },
    ];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec()).unwrap();
    let body = gz.finish().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let summary = server.import("pprof", &body);
    assert_eq!(summary["samples"], 9);
    assert_eq!(server.collapsed(""), ["main 2", "main;work 7"]);
    assert_eq!(Format::detect(&body), Format::Pprof);
}
