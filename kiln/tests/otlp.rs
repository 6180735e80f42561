//! OTLP profiles against a real `kiln up`, over HTTP (`POST
//! /v1development/profiles`) and gRPC (`ProfilesService/Export` on its
//! own listener): requests built with the `opentelemetry-proto` messages,
//! and OTLP/JSON ones written by hand, compressed as collectors send them,
//! read back through the flamegraph.

mod support;
mod support_otlp;

use std::io::Read;
use std::time::Duration;

use kiln_formats::otlp::proto::collector::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use kiln_formats::otlp::proto::profiles::ValueType;
use prost::Message;
use support::{Server, gzip, key_with, now_ns};
use support_otlp::request;
use tonic_types::Status;

const PATH: &str = "/v1development/profiles";

/// POSTs `body` to the OTLP route: the status, the `Content-Type` and
/// the body's bytes.
fn post(
    server: &Server,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut request = agent.post(format!("{}{PATH}", server.url));
    if let Some(bearer) = bearer {
        request = request.header("authorization", format!("Bearer {bearer}"));
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut response = request.send(body).expect("POST");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let mut bytes = Vec::new();
    response
        .body_mut()
        .as_reader()
        .read_to_end(&mut bytes)
        .unwrap();
    (status, content_type, bytes)
}

/// POSTs a protobuf request with `coding`, expecting 200: the answer.
fn export(server: &Server, body: &[u8], coding: &str) -> ExportProfilesServiceResponse {
    let (status, content_type, bytes) = post(
        server,
        Some(&server.key),
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", coding),
        ],
        body,
    );
    assert_eq!(status, 200, "{}", status_message(&bytes));
    assert_eq!(content_type, "application/x-protobuf");
    ExportProfilesServiceResponse::decode(&bytes[..]).expect("an ExportProfilesServiceResponse")
}

/// The message of a `google.rpc.Status` body.
fn status_message(bytes: &[u8]) -> String {
    match Status::decode(bytes) {
        Ok(status) => format!("code {}: {}", status.code, status.message),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

#[test]
fn gzip_and_zstd_requests_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let checkout = request(
        "web-1",
        "checkout",
        "worker",
        &[&[
            (&["main.main", "main.serve", "main.parse"], 7),
            (&["main.main", "main.render"], 3),
        ]],
        None,
    );
    let answer = export(&server, &gzip(&checkout.encode_to_vec()), "gzip");
    assert_eq!(answer.partial_success, None);
    let billing = request(
        "db-2",
        "billing",
        "io",
        &[&[(&["main.main", "main.bill"], 5)]],
        None,
    );
    let answer = export(&server, &zstd(&billing.encode_to_vec()), "zstd");
    assert_eq!(answer.partial_success, None);
    server.collapsed_once(
        "&service=checkout",
        &[
            "main.main;main.render 3",
            "main.main;main.serve;main.parse 7",
        ],
    );
    server.collapsed_once(
        "&service=billing&host=db-2&thread=io",
        &["main.main;main.bill 5"],
    );
    assert!(server.collapsed("&service=checkout&thread=io").is_empty());
    let (status, labels) = server.get("/api/v1/labels?from=now-1d");
    assert_eq!(status, 200, "{labels}");
    for name in [
        "\"service\"",
        "\"host\"",
        "\"thread\"",
        "\"web-1\"",
        "\"worker\"",
    ] {
        assert!(labels.contains(name), "{name} missing from {labels}");
    }
}

#[test]
fn one_bad_profile_of_two_is_a_partial_success() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let two = request(
        "h",
        "partial",
        "t",
        &[
            &[(&["main.main", "main.good"], 4)],
            &[(&["main.main", "main.bad"], 9)],
        ],
        Some(1),
    );
    let answer = export(&server, &two.encode_to_vec(), "identity");
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_profiles, 1);
    assert!(
        partial.error_message.starts_with(
            "1 of 2 profiles rejected: resourceProfiles[0].scopeProfiles[0].profiles[1]: \
             samples[0].stackIndex is 1000"
        ),
        "{}",
        partial.error_message
    );
    server.collapsed_once("&service=partial", &["main.main;main.good 4"]);
}

/// Headers, body, and the HTTP status, Status code and message part the
/// answer must have.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a [u8], u16, i32, &'a str);

#[test]
fn malformed_requests_and_other_content_types_are_refused_with_a_status() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let protobuf = [("content-type", "application/x-protobuf")];
    let cases: [Refusal; 3] = [
        (
            &protobuf,
            b"\x0a\x05\x01",
            400,
            3,
            "not a valid OTLP ExportProfilesServiceRequest",
        ),
        (&protobuf, b"", 400, 3, "the OTLP request is empty"),
        (
            &[("content-type", "text/plain")],
            b"x",
            415,
            3,
            "is not OTLP",
        ),
    ];
    for (headers, body, http, code, message) in cases {
        let (status, content_type, bytes) = post(&server, Some(&server.key), headers, body);
        assert_eq!(status, http, "{}", status_message(&bytes));
        assert_eq!(content_type, "application/x-protobuf");
        let decoded = Status::decode(&bytes[..]).expect("a google.rpc.Status body");
        assert_eq!(decoded.code, code);
        assert!(decoded.message.contains(message), "{}", decoded.message);
    }
    // A body past the limit once inflated: 413, still a Status.
    let bomb = zstd(&vec![0u8; 65 << 20]);
    let (status, _, bytes) = post(
        &server,
        Some(&server.key),
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "zstd"),
        ],
        &bomb,
    );
    assert_eq!(status, 413, "{}", status_message(&bytes));
    assert!(
        Status::decode(&bytes[..])
            .unwrap()
            .message
            .contains("OTLP profiles request")
    );
}

#[test]
fn wrong_missing_and_read_only_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let body = request("h", "s", "t", &[&[(&["main.main"], 1)]], None).encode_to_vec();
    let protobuf = [("content-type", "application/x-protobuf")];
    let (read_only, _) = key_with(&server.url, &server.admin_token, "default", "read");
    let cases: [(Option<&str>, u16, i32); 3] = [
        (None, 401, 16),
        (Some("kiln_not_a_key"), 401, 16),
        (Some(&read_only), 403, 7),
    ];
    for (key, http, code) in cases {
        let (status, content_type, bytes) = post(&server, key, &protobuf, &body);
        assert_eq!(status, http, "{key:?}: {}", status_message(&bytes));
        assert_eq!(content_type, "application/x-protobuf", "{key:?}");
        let decoded = Status::decode(&bytes[..]).expect("a google.rpc.Status body");
        assert_eq!(decoded.code, code, "{key:?}: {}", decoded.message);
        assert!(!decoded.message.is_empty());
    }
    assert!(server.collapsed("").is_empty());
}

#[test]
fn a_v1_9_request_is_read_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let new = request(
        "h",
        "old-sender",
        "t",
        &[&[(&["main.main", "main.old"], 2)]],
        None,
    );
    let old = kiln_formats::otlp::downgrade_to_v1_9(&new.encode_to_vec());
    let answer = export(&server, &gzip(&old), "gzip");
    let note = answer.partial_success.expect("the layout note");
    assert_eq!(note.rejected_profiles, 0);
    assert!(
        note.error_message.contains("1.9.0"),
        "{}",
        note.error_message
    );
    server.collapsed_once("&service=old-sender", &["main.main;main.old 2"]);
}

/// An OTLP/JSON request of one CPU profile of `service`: main.main →
/// main.serve → main.parse, 3 events and main.main → main.render, 2,
/// in the past minute; 64-bit integers as strings and as numbers.
fn json_request(service: &str) -> String {
    let t0 = (now_ns() as u64 / 1_000_000_000 - 60) * 1_000_000_000;
    let ts = |i: u64| t0 + i * 100_000_000;
    format!(
        r#"{{
  "resourceProfiles": [{{
    "resource": {{ "attributes": [
      {{ "key": "service.name", "value": {{ "stringValue": "{service}" }} }},
      {{ "key": "host.name", "value": {{ "stringValue": "json-host" }} }}
    ] }},
    "scopeProfiles": [{{ "profiles": [{{
      "sampleType": {{ "typeStrindex": 1, "unitStrindex": 2 }},
      "periodType": {{ "typeStrindex": 3, "unitStrindex": 4 }},
      "period": "50000000",
      "timeUnixNano": "{t0}",
      "durationNano": 5000000000,
      "samples": [
        {{ "stackIndex": 1, "attributeIndices": [1],
           "timestampsUnixNano": ["{}", {}, "{}"] }},
        {{ "stack_index": 2, "attribute_indices": [1],
           "timestamps_unix_nano": [{}, "{}"] }}
      ]
    }}] }}]
  }}],
  "dictionary": {{
    "locationTable": [{{}},
      {{ "lines": [{{ "functionIndex": 1 }}], "attributeIndices": [2] }},
      {{ "lines": [{{ "functionIndex": 2 }}], "attributeIndices": [2] }},
      {{ "lines": [{{ "functionIndex": 3 }}], "attributeIndices": [2] }},
      {{ "lines": [{{ "functionIndex": 4 }}], "attributeIndices": [2] }}
    ],
    "functionTable": [{{}},
      {{ "nameStrindex": 5 }}, {{ "nameStrindex": 6 }}, {{ "nameStrindex": 7 }}, {{ "nameStrindex": 8 }}
    ],
    "stringTable": ["", "samples", "count", "cpu", "nanoseconds",
      "main.main", "main.serve", "main.parse", "main.render",
      "thread.name", "json-thread", "profile.frame.type", "go"],
    "attributeTable": [{{}},
      {{ "keyStrindex": 9, "value": {{ "stringValueStrindex": 10 }} }},
      {{ "keyStrindex": 11, "value": {{ "stringValueStrindex": 12 }} }}
    ],
    "stackTable": [{{}},
      {{ "locationIndices": [3, 2, 1] }},
      {{ "locationIndices": ["4", "1"] }}
    ]
  }},
  "someFutureField": {{ "ignored": [1, 2] }}
}}"#,
        ts(0),
        ts(1),
        ts(2),
        ts(3),
        ts(4)
    )
}

/// POSTs an OTLP/JSON body with `coding`: the status, and the JSON answer.
fn export_json(server: &Server, body: &[u8], coding: &str) -> (u16, serde_json::Value) {
    let (status, content_type, bytes) = post(
        server,
        Some(&server.key),
        &[
            ("content-type", "application/json"),
            ("content-encoding", coding),
        ],
        body,
    );
    assert_eq!(content_type, "application/json", "{status}");
    let answer = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    (status, answer)
}

#[test]
fn json_requests_plain_and_gzip_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (status, answer) = export_json(&server, json_request("json-plain").as_bytes(), "identity");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, serde_json::json!({}));
    let (status, answer) =
        export_json(&server, &gzip(json_request("json-gzip").as_bytes()), "gzip");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, serde_json::json!({}));
    for service in ["json-plain", "json-gzip"] {
        server.collapsed_once(
            &format!("&service={service}&host=json-host&thread=json-thread"),
            &[
                "main.main;main.render 2",
                "main.main;main.serve;main.parse 3",
            ],
        );
    }
}

#[test]
fn malformed_json_is_a_400_with_a_json_status() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let cases: [(&str, &str); 3] = [
        (
            r#"{"dictionary":{"locationTable":[{},{"lines":[{"functionIndex":"x"}]}]}}"#,
            "OTLP: not valid OTLP/JSON: dictionary.locationTable[1].lines[0].functionIndex: \
             invalid value: string \"x\", expected a 32-bit integer at line 1 column 65",
        ),
        (
            r#"{"resourceProfiles": ["#,
            "resourceProfiles[0]: EOF while parsing",
        ),
        ("{}", "the OTLP request is empty"),
    ];
    for (body, message) in cases {
        let (status, answer) = export_json(&server, body.as_bytes(), "identity");
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["code"], 3, "{answer}");
        let got = answer["message"].as_str().expect("a message");
        assert!(got.contains(message), "{body}: {got}");
    }
    // Errors raised before the handler answer in JSON too.
    let (status, _, bytes) = post(
        &server,
        Some("kiln_not_a_key"),
        &[("content-type", "application/json")],
        b"{}",
    );
    assert_eq!(status, 401);
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(answer["code"], 16, "{answer}");
}

/// Calls Export on the server's gRPC listener (see
/// [`support_otlp::grpc_export_to`]).
fn grpc_export<M: Message + Send + Sync + 'static>(
    server: &Server,
    key: Option<&str>,
    message: M,
    compression: Option<tonic::codec::CompressionEncoding>,
) -> Result<ExportProfilesServiceResponse, tonic::Status> {
    let addr = server.otlp_grpc.expect("kiln up printed its gRPC listener");
    support_otlp::grpc_export_to(addr, key, message, compression)
}

#[test]
fn grpc_exports_gzip_and_zstd_read_back_exactly() {
    use tonic::codec::CompressionEncoding::{Gzip, Zstd};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let checkout = request(
        "web-1",
        "checkout",
        "worker",
        &[&[
            (&["main.main", "main.serve", "main.parse"], 7),
            (&["main.main", "main.render"], 3),
        ]],
        None,
    );
    let answer = grpc_export(&server, Some(&server.key), checkout, Some(Gzip)).unwrap();
    assert_eq!(answer.partial_success, None);
    let billing = request(
        "db-2",
        "billing",
        "io",
        &[&[(&["main.main", "main.bill"], 5)]],
        None,
    );
    let answer = grpc_export(&server, Some(&server.key), billing, Some(Zstd)).unwrap();
    assert_eq!(answer.partial_success, None);
    let plain = request("db-3", "ledger", "io", &[&[(&["main.main"], 2)]], None);
    let answer = grpc_export(&server, Some(&server.key), plain, None).unwrap();
    assert_eq!(answer.partial_success, None);
    server.collapsed_once(
        "&service=checkout&host=web-1&thread=worker",
        &[
            "main.main;main.render 3",
            "main.main;main.serve;main.parse 7",
        ],
    );
    server.collapsed_once("&service=billing", &["main.main;main.bill 5"]);
    server.collapsed_once("&service=ledger", &["main.main 2"]);
    // One bad profile of two: the other is kept, and the answer says so.
    let mixed = request(
        "web-1",
        "search",
        "worker",
        &[&[(&["main.main", "main.find"], 4)], &[(&["main.main"], 9)]],
        Some(1),
    );
    let answer = grpc_export(&server, Some(&server.key), mixed, Some(Gzip)).unwrap();
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_profiles, 1, "{}", partial.error_message);
    assert!(
        partial.error_message.contains("stackIndex"),
        "{}",
        partial.error_message
    );
    server.collapsed_once("&service=search", &["main.main;main.find 4"]);
}

/// A message whose field 1 (`resource_profiles`) is not a message.
#[derive(Clone, PartialEq, Message)]
struct Garbage {
    #[prost(bytes = "vec", tag = "1")]
    bytes: Vec<u8>,
}

#[test]
fn grpc_refusals_are_statuses_that_name_the_problem() {
    use tonic::Code;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let one = || request("h", "s", "t", &[&[(&["main.main"], 1)]], None);
    let refused = |key: Option<&str>, code: Code, says: &str| {
        let status = grpc_export(&server, key, one(), None).unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert!(status.message().contains(says), "{status:?}");
    };
    refused(None, Code::Unauthenticated, "authorization: Bearer KEY");
    refused(
        Some("kiln_nope"),
        Code::Unauthenticated,
        "not a Kiln API key",
    );
    refused(
        Some(&server.admin_token),
        Code::PermissionDenied,
        "tenant's key",
    );
    let (reader, _) = key_with(&server.url, &server.admin_token, "default", "read");
    refused(Some(&reader), Code::PermissionDenied, "ingest role");
    let garbage = Garbage {
        bytes: vec![0xff; 16],
    };
    let status = grpc_export(&server, Some(&server.key), garbage, None).unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with("OTLP: "), "{status:?}");
    // Nothing of the refused calls was kept; what came before still is.
    grpc_export(&server, Some(&server.key), one(), None).unwrap();
    server.collapsed_once("&service=s", &["main.main 1"]);
    // Calls past the credential check are counted by protocol.
    let metrics = support::Exposition::scrape_with(&server.url, Some(&server.admin_token));
    for (outcome, calls) in [("accepted", 1.0), ("refused", 1.0)] {
        let labels = [("protocol", "otlp_grpc"), ("outcome", outcome)];
        assert_eq!(
            metrics.value("kiln_ingest_requests_total", &labels),
            Some(calls)
        );
    }
}

#[test]
fn grpc_over_the_bytes_quota_is_resource_exhausted_with_a_retry_delay() {
    use tonic_types::StatusExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--no-agent", "--default-ingest-bytes-per-s", "200"],
    );
    let big = request(
        "h",
        "s",
        "t",
        &[&[(
            &[
                "main.main",
                "main.a_rather_long_function_name_to_pass_200_bytes",
            ],
            50,
        )]],
        None,
    );
    let mut refused = None;
    for _ in 0..4 {
        if let Err(status) = grpc_export(&server, Some(&server.key), big.clone(), None) {
            refused = Some(status);
            break;
        }
    }
    let status = refused.expect("a call over 200 bytes a second is refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("ingest_bytes_per_s"),
        "{status:?}"
    );
    assert!(status.get_details_retry_info().is_some(), "{status:?}");
}

/// A profiler's consecutive reports each hold part of a second: both
/// parts are kept (a row written again replaces its count, so they must
/// not share a stamp), while the same request sent again changes nothing.
#[test]
fn a_second_split_between_two_requests_keeps_both_parts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let at = |offsets_ms: &[u64]| {
        let mut r = request(
            "h",
            "split",
            "t",
            &[&[(&["main.main", "main.work"], 1)]],
            None,
        );
        let profile = &mut r.resource_profiles[0].scope_profiles[0].profiles[0];
        let t0 = profile.time_unix_nano;
        profile.samples[0].timestamps_unix_nano =
            offsets_ms.iter().map(|ms| t0 + ms * 1_000_000).collect();
        r.encode_to_vec()
    };
    // Report one ends 400 ms into a second, report two takes it on.
    let first = at(&[100, 300]);
    export(&server, &first, "identity");
    export(&server, &at(&[500, 700, 900]), "identity");
    // A retry of the first report.
    export(&server, &first, "identity");
    server.collapsed_once("&service=split", &["main.main;main.work 5"]);
}

/// `request`'s first profile as one of type `type_` (bytes): each sample
/// weighs `values[i]`, the profile covers the 10 s from `at_s` seconds
/// after its CPU events began.
fn typed_request(type_: &str, values: &[i64], at_s: u64) -> ExportProfilesServiceRequest {
    let mut r = request(
        "h",
        "heapsvc",
        "t",
        &[&[
            (&["main.main", "main.alloc"], 1),
            (&["main.main", "main.grow"], 1),
        ]],
        None,
    );
    let d = r.dictionary.as_mut().unwrap();
    d.string_table.push(type_.into());
    d.string_table.push("bytes".into());
    let unit = (d.string_table.len() - 1) as i32;
    let profile = &mut r.resource_profiles[0].scope_profiles[0].profiles[0];
    profile.sample_type = Some(ValueType {
        type_strindex: unit - 1,
        unit_strindex: unit,
    });
    profile.period_type = None;
    profile.period = 0;
    profile.time_unix_nano += at_s * 1_000_000_000;
    profile.duration_nano = 10_000_000_000;
    for (sample, value) in profile.samples.iter_mut().zip(values) {
        sample.timestamps_unix_nano.clear();
        sample.values = vec![*value];
    }
    r
}

/// Allocations and heap in use are kept under their `sample_type`: left
/// out of CPU views, read when named; allocations sum over the range,
/// heap in use is each label set's latest snapshot.
#[test]
fn other_sample_types_are_read_only_when_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for (type_, values, at_s) in [
        ("alloc_space", [100, 50], 0),
        ("alloc_space", [10, 5], 10),
        ("inuse_space", [1000, 400], 0),
        ("inuse_space", [300, 200], 10),
    ] {
        let answer = export(
            &server,
            &typed_request(type_, &values, at_s).encode_to_vec(),
            "identity",
        );
        assert_eq!(answer.partial_success, None);
    }
    server.collapsed_once(
        "&service=heapsvc&sample_type=alloc_space",
        &["main.main;main.alloc 110", "main.main;main.grow 55"],
    );
    server.collapsed_once(
        "&service=heapsvc&sample_type=inuse_space",
        &["main.main;main.alloc 300", "main.main;main.grow 200"],
    );
    assert!(server.collapsed("&service=heapsvc").is_empty());
    let (status, labels) = server.get("/api/v1/labels?from=now-1d");
    assert_eq!(status, 200, "{labels}");
    let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
    for type_ in ["alloc_space", "inuse_space"] {
        assert!(labels["sample_type"][type_].is_number(), "{labels}");
    }
    // CPU over time counts CPU only.
    let (status, timeline) = server.get("/api/v1/timeline?from=now-1d&step=1h&service=heapsvc");
    assert_eq!(status, 200, "{timeline}");
    let timeline: serde_json::Value = serde_json::from_str(&timeline).unwrap();
    let points = timeline["points"].as_array().cloned().unwrap_or_default();
    assert!(
        points
            .iter()
            .all(|p| p["samples"].as_f64().unwrap_or(0.0) == 0.0),
        "{timeline}"
    );
}
