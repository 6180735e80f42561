//! Pyroscope's push API (`POST /ingest`, `POST /push.v1.PusherService/Push`)
//! against a real `kiln up`: hand-made requests of every body shape the
//! SDKs send, read back exactly through the flamegraph with their labels;
//! malformed ones refused naming the problem; credentials as Bearer and as
//! basic auth; and the official SDKs as clients — pyroscope-io (PyPI) on
//! a Python program and pyroscope-go v1.5.0 (Go module proxy) on a Go
//! program, each with known CPU shares (installed by
//! `scripts/pyroscope-clients.sh`, which `scripts/setup-tests.sh` runs;
//! those two tests skip, saying why, when it cannot install them).

mod support;

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_formats::pprof_proto::{Function, Label, Line, Location, Profile, Sample, ValueType};
use kiln_formats::pyroscope::push::{LabelPair, PushRequest, RawProfileSeries, RawSample};
use prost::Message;
use support::{Server, gzip, key_with, now_ns};

/// How a request presents its credential.
#[derive(Clone, Copy)]
enum Auth<'a> {
    None,
    Bearer(&'a str),
    /// Basic auth with user `kiln` and this password.
    Basic(&'a str),
}

/// What a route answered.
struct Answer {
    status: u16,
    content_type: String,
    www_authenticate: String,
    body: String,
}

/// POSTs `body` to `path_and_query`.
fn post(
    server: &Server,
    path_and_query: &str,
    auth: Auth<'_>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut request = agent.post(format!("{}{path_and_query}", server.url));
    match auth {
        Auth::None => {}
        Auth::Bearer(key) => request = request.header("authorization", format!("Bearer {key}")),
        Auth::Basic(key) => {
            request = request.header(
                "authorization",
                format!("Basic {}", base64(format!("kiln:{key}").as_bytes())),
            )
        }
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut response = request.send(body).expect("POST");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (content_type, www_authenticate) = (header("content-type"), header("www-authenticate"));
    let mut text = String::new();
    response
        .body_mut()
        .as_reader()
        .read_to_string(&mut text)
        .unwrap();
    Answer {
        status: response.status().as_u16(),
        content_type,
        www_authenticate,
        body: text,
    }
}

/// Standard base64, for basic auth headers and Connect JSON's bytes.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A pprof of `stacks` (root first, each with its values), sample types
/// `types` (`type/unit`), period type `period`, and `labels` on every
/// sample.
fn pprof(
    types: &[(&str, &str)],
    period: (&str, &str, i64),
    stacks: &[(&[&str], &[i64])],
    labels: &[(&str, &str)],
) -> Vec<u8> {
    let mut strings = vec![String::new()];
    let mut string = |s: &str| -> i64 {
        if let Some(i) = strings.iter().position(|t| t == s) {
            return i as i64;
        }
        strings.push(s.to_owned());
        strings.len() as i64 - 1
    };
    let mut profile = Profile {
        sample_type: types
            .iter()
            .map(|(t, u)| ValueType {
                r#type: string(t),
                unit: string(u),
            })
            .collect(),
        period_type: Some(ValueType {
            r#type: string(period.0),
            unit: string(period.1),
        }),
        period: period.2,
        ..Profile::default()
    };
    let file = string("app/main.go");
    let labels: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label {
            key: string(k),
            str: string(v),
            ..Label::default()
        })
        .collect();
    for (frames, values) in stacks {
        let mut ids = Vec::new();
        for name in frames.iter().rev() {
            let name_index = string(name);
            let id = match profile
                .function
                .iter()
                .find(|f| f.name == name_index)
                .map(|f| f.id)
            {
                Some(id) => id,
                None => {
                    let id = profile.function.len() as u64 + 1;
                    profile.function.push(Function {
                        id,
                        name: name_index,
                        filename: file,
                        ..Function::default()
                    });
                    profile.location.push(Location {
                        id,
                        line: vec![Line {
                            function_id: id,
                            line: 10 + id as i64,
                            ..Line::default()
                        }],
                        ..Location::default()
                    });
                    id
                }
            };
            ids.push(id);
        }
        profile.sample.push(Sample {
            location_id: ids,
            value: values.to_vec(),
            label: labels.clone(),
        });
    }
    profile.string_table = strings;
    profile.encode_to_vec()
}

/// A Go CPU profile as pyroscope-go sends it: samples/count and
/// cpu/nanoseconds, a 10 ms cpu period.
fn go_cpu(stacks: &[(&[&str], i64)]) -> Vec<u8> {
    let values: Vec<[i64; 2]> = stacks.iter().map(|(_, n)| [*n, n * 10_000_000]).collect();
    let stacks: Vec<(&[&str], &[i64])> = stacks
        .iter()
        .zip(&values)
        .map(|((frames, _), v)| (*frames, &v[..]))
        .collect();
    gzip(&pprof(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &stacks,
        &[],
    ))
}

/// A Go heap profile as pyroscope-go sends it.
fn go_heap() -> Vec<u8> {
    gzip(&pprof(
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        ("space", "bytes", 524_288),
        &[(&["main.main", "main.alloc"], &[3, 300, 1, 100])],
        &[],
    ))
}

/// A multipart body of `parts` (name, bytes), boundary `b0undary`, as Go's
/// `mime/multipart` writes it.
fn multipart(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, bytes) in parts {
        b.extend_from_slice(
            format!(
                "--b0undary\r\nContent-Disposition: form-data; name=\"{name}\"; \
                 filename=\"{name}.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        b.extend_from_slice(bytes);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(b"--b0undary--\r\n");
    b
}

const MULTIPART: &str = "multipart/form-data; boundary=b0undary";

/// One series of a Push request: its labels and raw profiles.
type Series<'a> = (&'a [(&'a str, &'a str)], Vec<Vec<u8>>);

/// A Push request of `series`.
fn push_request(series: &[Series<'_>]) -> Vec<u8> {
    PushRequest {
        series: series
            .iter()
            .map(|(labels, profiles)| RawProfileSeries {
                labels: labels
                    .iter()
                    .map(|(n, v)| LabelPair {
                        name: n.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                samples: profiles
                    .iter()
                    .map(|p| RawSample {
                        raw_profile: p.clone(),
                        id: "7d2b".into(),
                    })
                    .collect(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// pyroscope-io's CPU profile: one cpu/nanoseconds type, values count ×
/// 10 ms.
fn python_cpu(stacks: &[(&[&str], i64)], labels: &[(&str, &str)]) -> Vec<u8> {
    let values: Vec<[i64; 1]> = stacks.iter().map(|(_, n)| [n * 10_000_000]).collect();
    let stacks: Vec<(&[&str], &[i64])> = stacks
        .iter()
        .zip(&values)
        .map(|((frames, _), v)| (*frames, &v[..]))
        .collect();
    pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &stacks,
        labels,
    )
}

fn labels(server: &Server) -> serde_json::Value {
    let (status, text) = server.get("/api/v1/labels?from=now-1d");
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_body_shape_reads_back_exactly_with_its_labels() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let key = server.key.clone();
    let secs = now_ns() / 1_000_000_000;

    // Folded stacks, the older SDKs' format: seconds, a type suffix, tags.
    let answer = post(
        &server,
        &format!(
            "/ingest?name=shop.cpu%7Benv%3Dprod%2C%20region%20%3D%20eu%7D&from={}&until={}\
             &format=folded&sampleRate=100&spyName=pyspy",
            secs - 10,
            secs
        ),
        Auth::Bearer(&key),
        &[("content-type", "binary/octet-stream")],
        b"main;parse;read 7\nmain;render 3\nmain;parse;read 1\n",
    );
    assert_eq!((answer.status, answer.body.as_str()), (200, ""));
    server.collapsed_once(
        "&service=shop&env=prod&region=eu",
        &["main;parse;read 8", "main;render 3"],
    );

    // A pprof, gzip-compressed, as format=pprof; from/until in ms.
    let ms = now_ns() / 1_000_000;
    let answer = post(
        &server,
        &format!(
            "/ingest?name=gosvc%7B__session_id__%3D1f%2Cprocess.runtime.name%3Dgo%7D\
             &from={}&until={ms}&format=pprof&spyName=gospy",
            ms - 10_000
        ),
        Auth::Bearer(&key),
        &[],
        &go_cpu(&[
            (&["main.main", "main.work"], 5),
            (&["main.main", "main.idle"], 2),
        ]),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    server.collapsed_once(
        "&service=gosvc",
        &["main.main;main.idle 2", "main.main;main.work 5"],
    );

    // pyroscope-go v1.5.0: multipart, ns times, no format; a heap profile
    // (with its sample_type_config) is kept under its sample types.
    let ns = now_ns();
    let go_query = format!(
        "/ingest?name=kiln-mp%7B__session_id__%3Dab%2Cenv%3Dstaging%2Cotel.scope.name%3Dcom.grafana.pyroscope%2Fgo%7D\
         &from={}&until={ns}&spyName=gospy&sampleRate=100",
        ns - 10_000_000_000
    );
    let config = br#"{"alloc_objects":{"units":"objects"},"alloc_space":{"units":"bytes"},
        "inuse_objects":{"units":"objects","aggregation":"average"},
        "inuse_space":{"units":"bytes","aggregation":"average"}}"#;
    let heap = multipart(&[("profile", &go_heap()), ("sample_type_config", config)]);
    let answer = post(
        &server,
        &format!("{go_query}&units=&aggregationType="),
        Auth::Basic(&key),
        &[("content-type", MULTIPART)],
        &heap,
    );
    assert_eq!((answer.status, answer.body.as_str()), (200, ""));
    let cpu = multipart(&[(
        "profile",
        &go_cpu(&[(&["runtime.main", "main.main", "main.workSixty"], 6)]),
    )]);
    let answer = post(
        &server,
        &format!("{go_query}&units=samples&aggregationType=sum"),
        Auth::Basic(&key),
        &[("content-type", MULTIPART)],
        &cpu,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    server.collapsed_once(
        "&service=kiln-mp&env=staging",
        &["runtime.main;main.main;main.workSixty 6"],
    );
    // Each heap type apart, in its own unit; heap in use is a snapshot.
    for (sample_type, weight) in [
        ("alloc_objects", 3),
        ("alloc_space", 300),
        ("inuse_objects", 1),
        ("inuse_space", 100),
    ] {
        server.collapsed_once(
            &format!("&service=kiln-mp&sample_type={sample_type}"),
            &[&format!("main.main;main.alloc {weight}")],
        );
    }

    // pyroscope-io 1.x: Push, protobuf, gzip; a memory series kept under
    // its sample types.
    let body = push_request(&[
        (
            &[
                ("__name__", "process_cpu"),
                ("service_name", "pysvc"),
                ("env", "test"),
                ("otel.scope.name", "com.grafana.pyroscope/python"),
                ("process.runtime.name", "cpython"),
            ],
            vec![python_cpu(
                &[
                    (&["<module>", "main", "parse"], 5),
                    (&["<module>", "main", "render"], 3),
                ],
                &[("thread_name", "MainThread")],
            )],
        ),
        (
            &[("__name__", "memory"), ("service_name", "pysvc")],
            vec![go_heap()],
        ),
    ]);
    let answer = post(
        &server,
        "/push.v1.PusherService/Push",
        Auth::Basic(&key),
        &[
            ("content-type", "application/proto"),
            ("content-encoding", "gzip"),
        ],
        &gzip(&body),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        (answer.content_type.as_str(), answer.body.as_str()),
        ("application/proto", "")
    );
    // CPU nanoseconds: a count is a nanosecond.
    server.collapsed_once(
        "&service=pysvc&env=test&thread=MainThread",
        &[
            "<module>;main;parse 50000000",
            "<module>;main;render 30000000",
        ],
    );

    // The same in Connect's JSON.
    let profile = python_cpu(&[(&["<module>", "json"], 2)], &[]);
    let json = serde_json::json!({"series": [{
        "labels": [{"name": "service_name", "value": "pyjson"}, {"name": "__name__", "value": "process_cpu"}],
        "samples": [{"rawProfile": base64(&profile), "ID": "1"}],
    }]});
    let answer = post(
        &server,
        "/push.v1.PusherService/Push",
        Auth::Bearer(&key),
        &[("content-type", "application/json")],
        json.to_string().as_bytes(),
    );
    assert_eq!((answer.status, answer.body.as_str()), (200, "{}"));
    server.collapsed_once("&service=pyjson", &["<module>;json 20000000"]);

    // Labels: the application as service, tags, no SDK bookkeeping.
    let labels = labels(&server);
    for service in ["shop", "gosvc", "kiln-mp", "pysvc", "pyjson"] {
        assert!(
            labels["service"][service].is_number(),
            "{service}: {labels}"
        );
    }
    assert!(labels["region"]["eu"].is_number(), "{labels}");
    for dropped in [
        "__session_id__",
        "__name__",
        "otel.scope.name",
        "process.runtime.name",
        "service_name",
    ] {
        assert!(labels.get(dropped).is_none(), "{dropped}: {labels}");
    }
    server.collapsed_once(
        "&service=pysvc&sample_type=alloc_space",
        &["main.main;main.alloc 300"],
    );
    // The memory series and the heap profile are not CPU time: the CPU
    // flamegraph leaves them out.
    assert!(server.collapsed("&service=kiln-mp&env=staging").len() == 1);
    assert!(labels["sample_type"]["inuse_space"].is_number(), "{labels}");
}

#[test]
fn malformed_requests_are_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let key = server.key.clone();
    let ingest = |query: &str, headers: &[(&str, &str)], body: &[u8]| {
        post(
            &server,
            &format!("/ingest?{query}"),
            Auth::Bearer(&key),
            headers,
            body,
        )
    };
    let refused = |answer: Answer, status: u16, needle: &str| {
        assert_eq!(answer.status, status, "{}", answer.body);
        assert!(
            answer.body.contains(needle),
            "{needle:?} not in {}",
            answer.body
        );
    };
    refused(
        ingest("name=app%7Ba%3D1&format=folded", &[], b"a 1\n"),
        400,
        "is never closed",
    );
    refused(
        ingest("format=folded", &[], b"a 1\n"),
        400,
        "no application name",
    );
    refused(
        ingest("name=app&from=yesterday&format=folded", &[], b"a 1\n"),
        400,
        "from: \\\"yesterday\\\" is not a time",
    );
    refused(
        ingest("name=app&format=folded", &[], b"a;b x\n"),
        400,
        "folded stacks: line 1: sample count \\\"x\\\" is not a number",
    );
    refused(
        ingest("name=app&format=pprof", &[], b"\x0a\xff\xff"),
        400,
        "pprof: pprof: not a valid profile.proto message",
    );
    refused(
        ingest("name=app&format=trie", &[], b"x"),
        415,
        "send format=pprof or format=folded",
    );
    refused(
        ingest(
            "name=app",
            &[("content-type", "binary/octet-stream+tree")],
            b"x",
        ),
        415,
        "trie and tree formats",
    );
    refused(
        ingest("name=app&format=jfr", &[], b"x"),
        415,
        "JFR is not read by Kiln",
    );
    refused(
        ingest(
            "name=app",
            &[("content-type", MULTIPART)],
            &multipart(&[("sample_type_config", b"{}")]),
        ),
        400,
        "multipart body has no part named \\\"profile\\\" (parts: \\\"sample_type_config\\\")",
    );
    refused(
        ingest(
            "name=app",
            &[("content-type", MULTIPART)],
            &multipart(&[("profile", b""), ("prev_profile", b"")]),
        ),
        400,
        "upgrade it",
    );
    refused(
        ingest(
            "name=app",
            &[("content-type", MULTIPART)],
            b"--b0undary\r\nX: y\r\n\r\nz",
        ),
        400,
        "part 1 has no Content-Disposition name",
    );
    refused(
        ingest("name=app", &[("content-type", "multipart/form-data")], b"x"),
        400,
        "no boundary parameter",
    );
    // Push: Connect's JSON errors.
    let push = |headers: &[(&str, &str)], body: &[u8]| {
        post(
            &server,
            "/push.v1.PusherService/Push",
            Auth::Bearer(&key),
            headers,
            body,
        )
    };
    let answer = push(&[("content-type", "application/proto")], b"\x0a\x05\x01");
    assert_eq!(answer.status, 400);
    let error: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(error["code"], "invalid_argument");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not a valid push.v1.PushRequest"),
        "{error}"
    );
    let bad_pprof = push_request(&[(&[("service_name", "x")], vec![b"\x0a\xff".to_vec()])]);
    let answer = push(&[("content-type", "application/proto")], &bad_pprof);
    assert_eq!(answer.status, 400);
    assert!(
        answer.body.contains("series 0 sample 0 (pprof)"),
        "{}",
        answer.body
    );
    let answer = push(&[("content-type", "text/plain")], b"x");
    assert_eq!(answer.status, 415);
    assert!(answer.body.contains("application/proto"), "{}", answer.body);
    // Nothing of what was refused was kept.
    assert!(server.collapsed("").is_empty());
}

#[test]
fn keys_come_as_bearer_or_basic_auth_on_these_routes_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let folded = "/ingest?name=authsvc&format=folded";
    let answer = post(&server, folded, Auth::None, &[], b"a 1\n");
    assert_eq!(answer.status, 401);
    assert_eq!(answer.www_authenticate, "Basic realm=\"kiln\"");
    let answer = post(&server, "/push.v1.PusherService/Push", Auth::None, &[], b"");
    assert_eq!(answer.status, 401);
    assert_eq!(answer.www_authenticate, "Basic realm=\"kiln\"");
    assert!(
        answer.body.contains("\"code\":\"unauthenticated\""),
        "{}",
        answer.body
    );
    let wrong = format!("kiln_{}", "0".repeat(64));
    assert_eq!(
        post(&server, folded, Auth::Basic(&wrong), &[], b"a 1\n").status,
        401
    );
    let (read_only, _) = key_with(&server.url, &server.admin_token, "default", "read");
    assert_eq!(
        post(&server, folded, Auth::Basic(&read_only), &[], b"a 1\n").status,
        403
    );
    assert_eq!(
        post(&server, folded, Auth::Basic(&server.key), &[], b"a 2\n").status,
        200
    );
    server.collapsed_once("&service=authsvc", &["a 2"]);
    // The rest of the API takes Bearer only.
    let answer = post(
        &server,
        "/api/v1/import?format=collapsed",
        Auth::Basic(&server.key),
        &[],
        b"a 1\n",
    );
    assert_eq!(answer.status, 401);
    assert_eq!(answer.www_authenticate, "Bearer");
}

/// Where `scripts/pyroscope-clients.sh` installs the SDK clients, after
/// running it; `None` (the test then skips, saying why) when it fails.
fn clients(which: &str) -> Option<PathBuf> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/pyroscope-clients.sh"
    );
    let output = Command::new(script)
        .arg(which)
        .output()
        .expect("run the script");
    if !output.status.success() {
        eprintln!(
            "SKIP: the {which} Pyroscope SDK client could not be installed \
             (scripts/pyroscope-clients.sh {which}; scripts/setup-tests.sh installs it):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    Some(PathBuf::from(
        String::from_utf8(output.stdout).unwrap().trim(),
    ))
}

/// The flamegraph of `filter` as JSON, once every batch the server
/// accepted (the SDK's uploads, all answered before this is called) is
/// stored: the workers' consumer lag is then 0. Not the accepted samples
/// against the graph's: the SDK's heap profiles are accepted too, in bytes
/// and objects, under their own sample types.
fn flamegraph_when_stored(server: &Server, filter: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = support::Exposition::scrape_with(&server.url, Some(&server.admin_token));
        let accepted = metrics.sum("kiln_ingest_samples_total", &[]);
        let lag = metrics.sum("kiln_worker_consumer_lag_records", &[]);
        let (status, text) = server.get(&format!(
            "/api/v1/flamegraph?from=now-1d&format=json{filter}"
        ));
        assert_eq!(status, 200, "{text}");
        let graph: serde_json::Value = serde_json::from_str(&text).unwrap();
        if accepted > 0.0 && lag == 0.0 && graph["value"].as_f64().is_some_and(|v| v > 0.0) {
            return graph;
        }
        assert!(
            Instant::now() < deadline,
            "{filter}: {} stored, {lag} records not yet stored",
            graph["value"]
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The nodes named `name` anywhere in `graph`: their summed value, and
/// their kinds and files.
fn nodes(graph: &serde_json::Value, name: &str, found: &mut Vec<serde_json::Value>) {
    if graph["name"] == name {
        found.push(graph.clone());
    }
    for child in graph["children"].as_array().into_iter().flatten() {
        nodes(child, name, found);
    }
}

/// Each of `functions`' share (percent) of their summed values, checked
/// against `truth` within `points`; each function's frames of `kind`.
fn check_shares(
    graph: &serde_json::Value,
    functions: &[&str],
    truth: &[f64],
    points: f64,
    kind: &str,
) -> Vec<f64> {
    let mut values = Vec::new();
    for function in functions {
        let mut found = Vec::new();
        nodes(graph, function, &mut found);
        assert!(!found.is_empty(), "no {function} in {graph}");
        for node in &found {
            assert_eq!(node["kind"], kind, "{node}");
            assert!(
                node["file"].as_str().is_some_and(|f| !f.is_empty()),
                "{node}"
            );
        }
        values.push(
            found
                .iter()
                .map(|n| n["value"].as_f64().unwrap())
                .sum::<f64>(),
        );
    }
    let total: f64 = values.iter().sum();
    let shares: Vec<f64> = values.iter().map(|v| 100.0 * v / total).collect();
    eprintln!("shares of {functions:?}: {shares:.1?} (truth {truth:?}) of {total} in all");
    for ((function, share), truth) in functions.iter().zip(&shares).zip(truth) {
        assert!(
            (share - truth).abs() <= points,
            "{function}: {share:.1}%, truth {truth}% (all: {shares:.1?})"
        );
    }
    shares
}

fn check_sdk_labels(server: &Server, service: &str) {
    let labels = labels(server);
    assert!(labels["service"][service].is_number(), "{labels}");
    assert!(labels["env"]["test"].is_number(), "{labels}");
    for dropped in ["__session_id__", "otel.scope.name", "otel.scope.version"] {
        assert!(labels.get(dropped).is_none(), "{dropped}: {labels}");
    }
}

/// How long each SDK profiles its program (the workloads divide work, or
/// the thread's CPU time, not wall time, so a busy host changes how many
/// samples they get, not their shares): at the SDKs' 100 Hz, 30 s of a
/// core give about 3,000 samples, so a 3-point bound on a 30 % share is over 3 standard
/// deviations of sampling noise (10 s gave 1.9).
const SDK_SECONDS: &str = "30";

#[test]
fn pyroscope_io_sdk_on_a_python_program() {
    let Some(cache) = clients("python") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/workloads/pyroscope_shares.py"
    );
    let output = Command::new(cache.join("venv/bin/python"))
        .args([script, &server.url, &server.key, SDK_SECONDS])
        .output()
        .expect("run the Python program");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let graph = flamegraph_when_stored(&server, "&service=kiln-py&env=test");
    // python_shares.py: parse 50 %, render 35 %, digest 15 %.
    check_shares(
        &graph,
        &["parse", "render", "digest"],
        &[50.0, 35.0, 15.0],
        3.0,
        "python",
    );
    check_sdk_labels(&server, "kiln-py");
}

#[test]
fn pyroscope_go_sdk_on_a_go_program() {
    let Some(cache) = clients("go") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let output = Command::new(cache.join("bin/pyroscope-shares"))
        .args([&server.url, &server.key, SDK_SECONDS])
        .output()
        .expect("run the Go program");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{log}");
    // Every upload, the heap profiles' included, was answered 200.
    assert!(!log.contains("upload profile: "), "{log}");
    let graph = flamegraph_when_stored(&server, "&service=kiln-go&env=test");
    check_shares(
        &graph,
        &["main.workSixty", "main.workThirty", "main.workTen"],
        &[60.0, 30.0, 10.0],
        3.0,
        "go",
    );
    check_sdk_labels(&server, "kiln-go");
}
