//! End-to-end tests of `kiln up`: the binary, over HTTP, on a real data
//! directory.

mod support;

use support::{Server, aggregate, now_ns, sorted_lines};

#[test]
fn collapsed_import_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let input = "main;parse;read_line 7\nmain;compute 12\nmain 1\nmain;compute 3\nsys_read_[k] 2\n";
    let summary = server.import("collapsed", input.as_bytes());
    assert_eq!(summary["samples"], 25);
    assert_eq!(summary["stacks"], 4);
    assert_eq!(summary["queryable"], true);
    assert_eq!(
        server.collapsed(""),
        aggregate(input.lines().map(str::to_owned))
    );
}

#[test]
fn label_filters_select_samples() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (status, body) = server
        .post("/api/v1/import?format=collapsed&process=web", b"a;b 5\n")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .post("/api/v1/import?format=collapsed&process=db", b"a;c 2\n")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.collapsed("&process=web"), ["a;b 5"]);
    assert_eq!(server.collapsed("&process=db"), ["a;c 2"]);
    assert_eq!(server.collapsed(""), ["a;b 5", "a;c 2"]);
    assert!(server.collapsed("&process=none").is_empty());
}

#[test]
fn restart_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import("collapsed", b"main;work 40\nmain;idle 2\n");
    server.stop();
    let server = Server::start(dir.path());
    assert_eq!(server.collapsed(""), ["main;idle 2", "main;work 40"]);
}

#[test]
fn malformed_input_is_refused_by_name_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import("collapsed", b"good;stack 3\n");
    let cases: [(&str, &[u8]); 6] = [
        ("collapsed", b"a;b 3\na;b three\n"),
        ("collapsed", b""),
        (
            "perf-script",
            b"this is not perf script output\n\tnor this\n",
        ),
        ("pprof", b"\x1f\x8b\x08 broken gzip"),
        ("pprof", b"\xff\xff\xff\xff not a protobuf"),
        ("flamegraph", b"a 1\n"),
    ];
    for (format, body) in cases {
        let (status, text) = server
            .post(&format!("/api/v1/import?format={format}"), body)
            .unwrap();
        assert_eq!(status, 400, "{format}: {text}");
        let error: serde_json::Value = serde_json::from_str(&text).unwrap();
        let message = error["error"].as_str().unwrap();
        assert!(message.len() > 10, "{format}: unhelpful error {message:?}");
    }
    let (status, text) = server.post("/api/v1/import", b"a 1\n").unwrap();
    assert_eq!(status, 400);
    assert!(text.contains("format"), "{text}");
    assert_eq!(server.collapsed(""), ["good;stack 3"]);
}

#[test]
fn top_functions_and_cpu_over_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    // 100 Hz: each sample is 10 ms of CPU.
    server.import("collapsed", b"main;hot 90\nmain;cold 10\n");
    let (status, body) = server.get("/api/v1/top?from=now-1h&limit=2");
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rows[0]["name"], "hot");
    assert_eq!(rows[0]["self_samples"], 90);
    assert_eq!(rows[1]["name"], "cold");
    let (status, body) = server.get("/api/v1/timeline?from=now-10m&step=1m");
    assert_eq!(status, 200, "{body}");
    let timeline: serde_json::Value = serde_json::from_str(&body).unwrap();
    let points = timeline["points"].as_array().unwrap();
    assert_eq!(points.len(), 10);
    let samples: u64 = points.iter().map(|p| p["samples"].as_u64().unwrap()).sum();
    assert_eq!(samples, 100);
    // 100 samples × 10 ms = 1 s of CPU in one 60 s step: 1/60 of a core.
    let cores: f64 = points.iter().map(|p| p["cores"].as_f64().unwrap()).sum();
    assert!((cores - 1.0 / 60.0).abs() < 1e-9, "{cores}");
}

/// Guards the CPU chart's truth (issue 17): an agent's idle samples are
/// idle cores, not busy ones, so an idle machine does not draw as busy.
#[test]
fn cpu_over_time_keeps_idle_apart() {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, label_names};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    // 10 ms per sample: 300 busy samples and 900 idle in one interval.
    let mut batch = BatchBuilder::new("host-a".to_owned(), now_ns(), 10_000_000);
    let host = LabelSet::new().with(label_names::HOST, "host-a".to_owned());
    let at = now_ns() - 30_000_000_000;
    batch.add(at, &[Frame::named(FrameKind::Native, "work")], &host, 300);
    batch.add(at, &[kiln_model::idle_frame()], &host, 900);
    let (status, text) = server
        .post("/api/v1/ingest", &batch.finish().encode())
        .unwrap();
    assert_eq!(status, 200, "{text}");
    // Ingest is asynchronous (gateway, bus, worker): wait for the batch.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let timeline = loop {
        let (status, body) = server.get("/api/v1/timeline?from=now-10m&step=10m");
        assert_eq!(status, 200, "{body}");
        let timeline: serde_json::Value = serde_json::from_str(&body).unwrap();
        if timeline["points"][0]["samples"] == 1200 || std::time::Instant::now() > deadline {
            break timeline;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let point = &timeline["points"][0];
    // 3 s busy and 9 s idle in a 600 s step.
    let (busy, idle) = (
        point["cores"].as_f64().unwrap(),
        point["idle_cores"].as_f64().unwrap(),
    );
    assert!((busy - 3.0 / 600.0).abs() < 1e-9, "busy {busy}");
    assert!((idle - 9.0 / 600.0).abs() < 1e-9, "idle {idle}");
    assert_eq!(point["samples"], 1200);
}

/// Guards off-CPU weight (blocked nanoseconds) from mixing into CPU
/// flamegraphs: left out unless the query filters on the device kind, and
/// still offered by the label picker.
#[test]
fn off_cpu_samples_only_when_asked_for() {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, label_names};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let at = now_ns() - 30_000_000_000;
    let host = LabelSet::new().with(label_names::HOST, "host-a".to_owned());
    let mut cpu = BatchBuilder::new("host-a".to_owned(), now_ns(), 10_000_000);
    cpu.add(at, &[Frame::named(FrameKind::Native, "work")], &host, 7);
    let waiting = host
        .clone()
        .with(label_names::DEVICE_KIND, label_names::OFF_CPU.to_owned());
    let mut off = BatchBuilder::new("host-a".to_owned(), now_ns(), 1);
    off.add(
        at,
        &[Frame::named(FrameKind::Native, "wait")],
        &waiting,
        5_000_000_000,
    );
    for batch in [cpu.finish(), off.finish()] {
        let (status, text) = server.post("/api/v1/ingest", &batch.encode()).unwrap();
        assert_eq!(status, 200, "{text}");
    }
    // Ingest is asynchronous: wait for both.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.collapsed("&device_kind=off_cpu").is_empty() || server.collapsed("").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the batches were not stored"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(server.collapsed(""), ["work 7"]);
    assert_eq!(
        server.collapsed("&device_kind=off_cpu"),
        ["wait 5000000000"]
    );
    let (status, body) = server.get("/api/v1/labels?from=now-1d");
    assert_eq!(status, 200, "{body}");
    let labels: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(labels["device_kind"]["off_cpu"].is_number(), "{body}");
}

/// Guards the Flamewire response coding: zstd when the client takes it,
/// whatever else it lists, the middleware's gzip or nothing otherwise, and
/// the same graph every way.
#[test]
fn flamewire_is_sent_with_zstd_when_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import("collapsed", b"main;a 3\nmain;b 4\n");
    // The graph in a Flamewire body, as collapsed stacks (the bodies differ
    // in their time range: `now` moves between requests).
    let collapsed = |body: &[u8]| {
        let mut aligned = rkyv::util::AlignedVec::<16>::new();
        aligned.extend_from_slice(body);
        let mut out = Vec::new();
        kiln_model::flamewire::read(&aligned, |g| g.write_collapsed(&mut out))
            .unwrap()
            .unwrap();
        String::from_utf8(out).unwrap()
    };
    let url = "/api/v1/flamegraph?from=now-1h&format=flamewire";
    let (status, coding, raw) = server.get_encoded(url, "identity");
    assert_eq!((status, coding), (200, None));
    assert_eq!(collapsed(&raw), "main;a 3\nmain;b 4\n");
    let (status, coding, sent) = server.get_encoded(url, "gzip, deflate, br, zstd");
    assert_eq!((status, coding.as_deref()), (200, Some("zstd")));
    assert_eq!(
        collapsed(&zstd::decode_all(&sent[..]).unwrap()),
        collapsed(&raw)
    );
    let (status, coding, sent) = server.get_encoded(url, "gzip");
    assert_eq!((status, coding.as_deref()), (200, Some("gzip")));
    let mut gunzipped = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&sent[..]), &mut gunzipped)
        .unwrap();
    assert_eq!(collapsed(&gunzipped), collapsed(&raw));
}

#[test]
fn flamegraph_formats_agree() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import("collapsed", b"main;a 3\nmain;b 4\n");
    let (status, json) = server.get("/api/v1/flamegraph?from=now-1h&format=json");
    assert_eq!(status, 200);
    let tree: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(tree["value"], 7);
    assert_eq!(tree["children"][0]["name"], "main");
    assert_eq!(tree["children"][0]["children"][1]["value"], 4);
    let (status, text) = server.get("/api/v1/flamegraph?from=now-1h&format=svg");
    assert_eq!(status, 400);
    assert!(text.contains("collapsed, json, flamewire"), "{text}");
    let (status, text) = server.get("/api/v1/flamegraph?from=now&to=now-1h");
    assert_eq!(status, 400);
    assert!(text.contains("before"), "{text}");
    assert_eq!(sorted_lines("b\na\n"), ["a", "b"]);
}
