//! The MCP server (`/mcp`) on a real `kiln up`, driven by the protocol's
//! official Python SDK (`mcp` 2.3.0 from PyPI, installed by
//! `scripts/mcp-client.sh`; the client is `kiln/tests/mcp_client.py`) in
//! both of its eras: the handshake (`initialize`, 2025-11-25) and the SDK's
//! default, `server/discover` then 2026-07-28's per-request envelope.
//!
//! Two versions of a program are imported as collapsed stacks with a
//! `version` label, and the GPU view's fixture batches (ten seconds of a
//! CUDA process: frontend/e2e/fixtures, built by kiln/tests/gpu_view.rs)
//! are posted; each tool is called and its text and structured answer
//! checked exactly. Another tenant's key sees none of it; bad arguments
//! are tool errors naming the argument. The transport's own answers (no
//! key, GET, old handshake versions, a bad version header,
//! notifications) are checked with plain HTTP.
//!
//! Without the SDK (no Python, no PyPI) the SDK part skips saying why,
//! except under `CI`, where it fails.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::{Server, key_with, request};

/// Version 1.4: 10,000 samples; 1.5: hash takes 3,000 more.
const V14: &str = "main;parse 3000\nmain;work;hash 6000\nmain;idle 1000\n";
const V15: &str = "main;parse 3000\nmain;work;hash 9000\nmain;idle 1000\n";
/// The GPU fixtures' ten seconds.
const GPU_FROM: &str = "1700013600";
const GPU_TO: &str = "1700013610";
const GEMM: &str = "_Z4gemmPKfS0_Pfi";

/// The SDK's virtual environment, after `scripts/mcp-client.sh install`;
/// `None` (the caller skips, saying why) when it cannot be installed,
/// unless `CI` is set.
fn sdk() -> Option<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mcp-client.sh");
    let output = Command::new(script)
        .arg("install")
        .output()
        .expect("run scripts/mcp-client.sh");
    if !output.status.success() {
        let why = format!(
            "the MCP Python SDK could not be installed (scripts/mcp-client.sh install; \
             scripts/setup-tests.sh runs it):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(std::env::var_os("CI").is_none(), "under CI: {why}");
        eprintln!("SKIP: {why}");
        return None;
    }
    Some(PathBuf::from(String::from_utf8(output.stdout).unwrap().trim()).join("venv/bin/python"))
}

/// Runs the SDK client with `key` in `mode` on `calls` (tool, arguments).
fn client(
    python: &PathBuf,
    server: &Server,
    key: &str,
    mode: &str,
    calls: &[(&str, Value)],
) -> Value {
    let plan = json!({
        "url": format!("{}/mcp", server.url),
        "key": key,
        "mode": mode,
        "calls": calls.iter().map(|(tool, arguments)| json!({"tool": tool, "arguments": arguments})).collect::<Vec<_>>(),
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the MCP client");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the MCP client failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the client prints JSON")
}

/// The result of call `i`, which must have succeeded.
fn ok(answer: &Value, i: usize) -> (&str, &Value) {
    let call = &answer["calls"][i];
    assert_eq!(call["is_error"], false, "call {i}: {call}");
    (call["text"].as_str().unwrap(), &call["structured"])
}

/// The text of call `i`, which must be a tool error.
fn tool_error(answer: &Value, i: usize) -> &str {
    let call = &answer["calls"][i];
    assert_eq!(call["is_error"], true, "call {i}: {call}");
    call["text"].as_str().unwrap()
}

fn mcp(
    server: &Server,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, String) {
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    request(
        &server.url,
        "POST",
        "/mcp",
        key,
        &all,
        body.to_string().as_bytes(),
    )
}

#[test]
fn mcp_tools_answer_an_official_sdk_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import_versions(&[("1.4", V14), ("1.5", V15)]);
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../frontend/e2e/fixtures");
    for unit in ["nanoseconds", "launches", "samples"] {
        let batch = std::fs::read(format!("{fixtures}/gpu-view-{unit}.batch")).unwrap();
        let (status, body) = server.post("/api/v1/ingest", &batch).unwrap();
        assert_eq!(status, 200, "{body}");
    }
    server.collapsed_once(
        "&version=1.5",
        &["main;idle 1000", "main;parse 3000", "main;work;hash 9000"],
    );
    server.collapsed_once(
        "&version=1.4",
        &["main;idle 1000", "main;parse 3000", "main;work;hash 6000"],
    );
    wait_for_gpu(&server);

    transport_answers(&server);

    let Some(python) = sdk() else { return };
    let v15 = json!({"version": "1.5"});
    let calls: Vec<(&str, Value)> = vec![
        (
            "top_functions",
            json!({"from": "now-1d", "filters": v15, "limit": 3}),
        ),
        (
            "flamegraph",
            json!({"from": "now-1d", "filters": v15, "min_share": 10}),
        ),
        (
            "diff",
            json!({"from": "now-1d", "base": {"filters": {"version": "1.4"}}, "target": {"filters": {"version": 1.5}}}),
        ),
        (
            "gpu_kernels",
            json!({"from": GPU_FROM, "to": GPU_TO, "kernel": GEMM, "instructions": 2}),
        ),
        ("labels", json!({"from": "now-1d"})),
        // Bad arguments.
        ("top_functions", json!({"limit": -3})),
        ("flamegraph", json!({"from": "yesterday"})),
        ("diff", json!({"base": {"filters": {"version": "1.4"}}})),
        ("labels", json!({"filters": {"bad name": "x"}})),
        ("top_functions", json!({"limt": 3})),
        ("gpu_kernels", json!({"kernel": 5})),
        (
            "diff",
            json!({"base": {"from": "now-1d"}, "target": {"from": "now-1d"}}),
        ),
        ("no_such_tool", json!({})),
    ];
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let answer = client(&python, &server, &server.key, mode, &calls);
        assert_eq!(answer["protocol_version"], version, "{mode}");
        assert_eq!(answer["server"]["name"], "kiln");
        let names: Vec<&str> = answer["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "top_functions",
                "flamegraph",
                "diff",
                "gpu_kernels",
                "labels"
            ]
        );
        for tool in answer["tools"].as_array().unwrap() {
            assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
            assert_eq!(tool["output_schema"]["type"], "object", "{tool}");
        }
        check_answers(&answer, mode);
    }

    // Another tenant's key: the same calls see nothing.
    let other = server.tenant_key("other-co", "read");
    let theirs = client(&python, &server, &other, "legacy", &calls[..5]);
    let (text, top) = ok(&theirs, 0);
    assert_eq!(top["samples"], 0);
    assert_eq!(top["functions"], json!([]));
    assert!(text.contains("No samples"), "{text}");
    let (text, graph) = ok(&theirs, 1);
    assert_eq!(graph["lines"], json!([]));
    assert!(text.contains("No samples"), "{text}");
    let (text, diff) = ok(&theirs, 2);
    assert_eq!(
        (diff["base"]["samples"].as_u64(), diff["functions"].clone()),
        (Some(0), json!([]))
    );
    assert!(text.contains("holds no samples"), "{text}");
    let (text, gpu) = ok(&theirs, 3);
    assert_eq!(gpu["kernels"]["kernels"], json!([]));
    assert!(text.contains("no GPU kernels"), "{text}");
    let (_, labels) = ok(&theirs, 4);
    assert_eq!(labels["labels"], json!({}));
    println!("another tenant's key: every tool answers empty");
}

/// The GPU fixtures are stored once the kernels read back.
fn wait_for_gpu(server: &Server) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, body) =
            server.get(&format!("/api/v1/gpu/kernels?from={GPU_FROM}&to={GPU_TO}"));
        assert_eq!(status, 200, "{body}");
        let kernels: Value = serde_json::from_str(&body).unwrap();
        if kernels["total_pc_samples"] == 570 && kernels["kernels"][0]["launches"] == 2400 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "GPU fixtures not stored: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The answers to `mcp_tools_answer_an_official_sdk_client`'s calls.
fn check_answers(answer: &Value, mode: &str) {
    // top_functions: hottest first, shares of 13,000 samples.
    let (text, top) = ok(answer, 0);
    assert_eq!(top["samples"], 13_000, "{mode}");
    let first = &top["functions"][0];
    assert_eq!(
        (first["name"].as_str(), first["self_samples"].as_u64()),
        (Some("hash"), Some(9_000))
    );
    assert!((first["self_share"].as_f64().unwrap() - 9.0 / 13.0).abs() < 1e-12);
    assert_eq!(top["functions"].as_array().unwrap().len(), 3);
    assert!(text.contains(" 69.23%") && text.contains("hash"), "{text}");
    assert!(text.contains("(2 more functions not listed.)"), "{text}");

    // flamegraph: idle (7.69%) is under min_share 10 and left out.
    let (text, graph) = ok(answer, 1);
    let lines: Vec<(u64, String, u64)> = graph["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let frames: Vec<&str> = l["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            (
                l["depth"].as_u64().unwrap(),
                frames.join(" > "),
                l["total_samples"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (0, "main".to_owned(), 13_000),
            (1, "work > hash".to_owned(), 9_000),
            (1, "parse".to_owned(), 3_000)
        ]
    );
    assert!((graph["left_out_share"].as_f64().unwrap() - 1.0 / 13.0).abs() < 1e-12);
    assert!(
        text.contains("Left out: 7.69% of the samples, in paths under 10% each."),
        "{text}"
    );
    assert!(text.contains(" 69.23%   69.23%    work > hash"), "{text}");

    // diff: hash and work grew, parse and idle shrank; main is all of both.
    let (text, diff) = ok(answer, 2);
    assert_eq!(
        (
            diff["base"]["samples"].as_u64(),
            diff["target"]["samples"].as_u64()
        ),
        (Some(10_000), Some(13_000))
    );
    assert_eq!(diff["flagged"], 4);
    assert_eq!(diff["target"]["filters"]["version"], "1.5");
    let direction = |name: &str| {
        diff["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()["direction"]
            .clone()
    };
    assert_eq!(
        [
            direction("hash"),
            direction("work"),
            direction("parse"),
            direction("idle"),
            direction("main")
        ],
        [
            json!("grew"),
            json!("grew"),
            json!("shrank"),
            json!("shrank"),
            Value::Null
        ]
    );
    let (grew, shrank) = (
        text.find("Grew:").expect(text),
        text.find("Shrank:").expect(text),
    );
    assert!(
        text[grew..shrank].contains("hash") && text[shrank..].contains("parse"),
        "{text}"
    );
    assert!(text[grew..shrank].contains("60.00%→69.23%"), "{text}");

    // gpu_kernels: both kernels, gemm's stall reasons and hottest two
    // instructions.
    let (text, gpu) = ok(answer, 3);
    let kernels = &gpu["kernels"]["kernels"];
    assert_eq!(kernels[0]["name"], GEMM);
    assert_eq!(
        (
            kernels[0]["launches"].as_u64(),
            kernels[0]["total_ns"].as_u64()
        ),
        (Some(2_400), Some(3_600_000_000))
    );
    assert_eq!(
        (kernels[1]["name"].as_str(), kernels[1]["launches"].as_u64()),
        (Some("relu_kernel"), Some(500))
    );
    assert_eq!(gpu["instructions"]["total_samples"], 540);
    assert!(
        text.contains("2 kernels, 3.700 s of GPU time, 570 PC samples."),
        "{text}"
    );
    assert!(text.contains(" 97.30%    3600.000      2400    1500.000         540  gemm(float const*, float const*, float*, int) [_Z4gemmPKfS0_Pfi]"), "{text}");
    assert!(
        text.contains("stall reasons: long_scoreboard 55.6%, math_pipe_throttle 22.2%, selected 9.3%, lg_throttle 7.4%, not_selected 5.6%."),
        "{text}"
    );
    assert!(text.contains("Hottest instructions (2 of 3):"), "{text}");
    assert!(
        text.contains("+0x0090  LDG.E R2, desc[UR4][R2.64]"),
        "{text}"
    );
    assert!(
        text.contains("64.81% of samples: long_scoreboard 85.7%, selected 14.3%"),
        "{text}"
    );
    assert!(!text.contains("+0x02f0"), "only the two hottest: {text}");

    // labels: the versions and their samples.
    let (text, labels) = ok(answer, 4);
    assert_eq!(
        labels["labels"]["version"],
        json!({"1.5": 13_000, "1.4": 10_000})
    );
    assert!(
        text.contains("version (2 values): 1.5 (13000), 1.4 (10000)"),
        "{text}"
    );

    // Bad arguments: tool errors naming the argument.
    assert!(tool_error(answer, 5).contains("limit: -3 is not a whole number from 1 to 500"));
    assert!(
        tool_error(answer, 6).starts_with("flamegraph: from: "),
        "{}",
        tool_error(answer, 6)
    );
    assert!(tool_error(answer, 7).contains("target: missing"));
    assert!(
        tool_error(answer, 8).contains("filters: \"bad name\" is not a label name"),
        "{}",
        tool_error(answer, 8)
    );
    assert!(tool_error(answer, 9).contains("limt: not an argument of this tool"));
    assert!(tool_error(answer, 10).contains("kernel: 5 is not a string"));
    assert!(tool_error(answer, 11).contains("nothing to compare"));
    let unknown = &answer["calls"][12]["error"];
    assert_eq!(unknown["code"], -32602, "{unknown}");
    assert!(
        unknown["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"no_such_tool\"")
    );
    println!("{mode}: every tool answered exactly; bad arguments named");
}

/// The transport's own answers, over plain HTTP.
fn transport_answers(server: &Server) {
    let initialize = |version: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "handshake-era client", "version": "0"}}})
    };
    // No key: 401 as any API route; a key without the read role: 403.
    let (status, _) = mcp(server, None, &[], &initialize("2025-06-18"));
    assert_eq!(status, 401);
    let (ingest_only, _) = key_with(&server.url, &server.admin_token, "default", "ingest");
    let (status, body) = mcp(server, Some(&ingest_only), &[], &initialize("2025-06-18"));
    assert_eq!(status, 403, "{body}");
    // Older clients get their own version; an unknown one the latest.
    for (asked, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let (status, body) = mcp(server, Some(&server.key), &[], &initialize(asked));
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["result"]["protocolVersion"], answered, "{body}");
        assert_eq!(answer["result"]["serverInfo"]["name"], "kiln");
        assert!(
            answer["result"]["capabilities"]["tools"].is_object(),
            "{body}"
        );
        assert!(
            answer["result"].get("resultType").is_none(),
            "handshake-era answers: {body}"
        );
    }
    // A notification: 202, no body.
    let (status, body) = mcp(
        server,
        Some(&server.key),
        &[("mcp-protocol-version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!((status, body.as_str()), (202, ""));
    // A version header the server does not speak: 400.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let (status, body) = mcp(
        server,
        Some(&server.key),
        &[("mcp-protocol-version", "1999-01-01")],
        &ping,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("1999-01-01"), "{body}");
    let (status, body) = mcp(
        server,
        Some(&server.key),
        &[("mcp-protocol-version", "2025-06-18")],
        &ping,
    );
    assert_eq!(
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap()["result"].clone()
        ),
        (200, json!({}))
    );
    // Not JSON: 400 with a parse error; an unknown method: method not found.
    let (status, body) = request(
        &server.url,
        "POST",
        "/mcp",
        Some(&server.key),
        &[("content-type", "application/json")],
        b"{not json",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("-32700"), "{body}");
    let (status, body) = mcp(
        server,
        Some(&server.key),
        &[],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32601,
        "{body}"
    );
    // No server-sent stream, no session: 405.
    let (status, _) = request(
        &server.url,
        "GET",
        "/mcp",
        Some(&server.key),
        &[("accept", "text/event-stream")],
        b"",
    );
    assert_eq!(status, 405);
    println!("transport: 401, 403, versions 2024-11-05 to 2025-11-25, 202, 400, 405 as expected");
}
