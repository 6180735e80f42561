//! Saved comparisons on a real `kiln up`: two versions of a program
//! imported with a `version` label, a comparison of them saved, its
//! result read back (the grown function flagged) and scraped as
//! Prometheus metrics with the tenant's key; another tenant sees none of
//! it; bad names and parameters are refused with a 400 naming them, the
//! 51st comparison with a 409 saying the limit; a deleted one is gone.

mod support;

use serde_json::Value;
use support::{Exposition, Server, key_with, request};

/// Version 1.4: 10,000 samples. Version 1.5: `hash` takes 2,000 more.
const V14: &str = "main;parse 3000\nmain;work;hash 5000\nmain;idle 2000\n";
const V15: &str = "main;parse 3000\nmain;work;hash 7000\nmain;idle 2000\n";

/// The most comparisons a project keeps (`MAX_PER_PROJECT`).
const MAX_PER_PROJECT: usize = 50;

fn call(server: &Server, method: &str, path: &str, bearer: &str, body: &str) -> (u16, String) {
    let headers: &[(&str, &str)] = match body.is_empty() {
        true => &[],
        false => &[("content-type", "application/json")],
    };
    request(
        &server.url,
        method,
        path,
        Some(bearer),
        headers,
        body.as_bytes(),
    )
}

fn save(server: &Server, bearer: &str, body: &str) -> (u16, String) {
    call(server, "POST", "/api/v1/comparisons", bearer, body)
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn saved_comparisons_answer_and_alert_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import_versions(&[("1.4", V14), ("1.5", V15)]);
    server.collapsed_once(
        "&version=1.5",
        &["main;idle 2000", "main;parse 3000", "main;work;hash 7000"],
    );
    let key = &server.key;

    // Saved: by version over a relative range, kept as text.
    let by_version = r#"{"name":"api-version","params":
        {"from":"now-1d","base.version":"1.4","target.version":"1.5"}}"#;
    let (status, body) = save(&server, key, by_version);
    assert_eq!(status, 201, "{body}");
    let saved = json(&body);
    assert_eq!(saved["name"], "api-version");
    assert_eq!(saved["params"]["from"], "now-1d");
    // The same version against itself over two ranges: nothing moves.
    let (status, body) = save(
        &server,
        key,
        r#"{"name":"same","params":{"version":"1.4","base_from":"now-1d","target_from":"now-2d"}}"#,
    );
    assert_eq!(status, 201, "{body}");

    let (status, body) = call(&server, "GET", "/api/v1/comparisons", key, "");
    assert_eq!(status, 200, "{body}");
    let names: Vec<String> = json(&body)
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["api-version", "same"]);
    let (status, body) = call(&server, "GET", "/api/v1/comparisons/api-version", key, "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["params"]["target.version"], "1.5");

    // Its result: run now, as /api/v1/compare answers it.
    let (status, body) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version/result",
        key,
        "",
    );
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(answer["comparison"]["name"], "api-version");
    let result = &answer["result"];
    assert_eq!(result["base"]["samples"], 10_000);
    assert_eq!(result["target"]["samples"], 12_000);
    assert_eq!(result["flagged"], 4, "all but main, whose total is all");
    let hash = result["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "hash")
        .expect("hash");
    assert_eq!(hash["significant"], true);
    assert_eq!(hash["direction"], "grew");
    let (status, text) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version/result?format=text",
        key,
        "",
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("comparison api-version\n"), "{text}");
    assert!(text.contains("Grew:") && text.contains("hash"), "{text}");

    // Its metrics, scraped with the key as Prometheus would.
    let (status, text) = call(&server, "GET", "/api/v1/comparisons/metrics", key, "");
    assert_eq!(status, 200, "{text}");
    let metrics = Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let value = |name: &str, labels: &[(&str, &str)]| {
        metrics
            .value(name, labels)
            .unwrap_or_else(|| panic!("{name}{labels:?} in\n{text}"))
    };
    let api = ("comparison", "api-version");
    assert_eq!(value("kiln_comparison_ok", &[api]), 1.0);
    assert_eq!(value("kiln_comparison_flagged_functions", &[api]), 4.0);
    // hash and work grew by 100 × (7/12 − 1/2) = 8.33 points; parse
    // shrank by 5 (idle by 3.33).
    let grew = value(
        "kiln_comparison_largest_change_points",
        &[api, ("direction", "grew")],
    );
    assert!((grew - 100.0 * (7.0 / 12.0 - 0.5)).abs() < 1e-9, "{grew}");
    let shrank = value(
        "kiln_comparison_largest_change_points",
        &[api, ("direction", "shrank")],
    );
    assert!((shrank - 5.0).abs() < 1e-9, "{shrank}");
    assert_eq!(
        value("kiln_comparison_samples", &[api, ("side", "target")]),
        12_000.0
    );
    let same = ("comparison", "same");
    assert_eq!(value("kiln_comparison_flagged_functions", &[same]), 0.0);
    assert_eq!(
        value(
            "kiln_comparison_largest_change_points",
            &[same, ("direction", "grew")]
        ),
        0.0
    );
    println!("comparisons' metrics:\n{text}");

    // Another tenant sees none of it, and its own list is empty.
    let other = server.tenant_key("other-co", "read,admin");
    let (status, body) = call(&server, "GET", "/api/v1/comparisons", &other, "");
    assert_eq!((status, body.as_str()), (200, "[]"));
    for path in [
        "/api/v1/comparisons/api-version",
        "/api/v1/comparisons/api-version/result",
    ] {
        let (status, body) = call(&server, "GET", path, &other, "");
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = call(
        &server,
        "DELETE",
        "/api/v1/comparisons/api-version",
        &other,
        "",
    );
    assert_eq!(status, 404, "another tenant deleted ours");
    let (status, text) = call(&server, "GET", "/api/v1/comparisons/metrics", &other, "");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("api-version"), "{text}");
    // The same name saved by the other tenant is its own.
    let (status, body) = save(&server, &other, by_version);
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version/result",
        &other,
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["result"]["target"]["samples"], 0);

    // Saving and deleting need the admin role; reading, the read role.
    let (reader, _) = key_with(&server.url, &server.admin_token, "default", "read");
    let (status, body) = save(&server, &reader, r#"{"name":"x","params":{"base.v":"1"}}"#);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("admin role"), "{body}");
    let (status, _) = call(
        &server,
        "DELETE",
        "/api/v1/comparisons/api-version",
        &reader,
        "",
    );
    assert_eq!(status, 403);
    let (status, body) = call(&server, "GET", "/api/v1/comparisons/metrics", &reader, "");
    assert_eq!(status, 200, "{body}");

    // Bad names and parameters: 400 naming the problem.
    for (body, named) in [
        (
            r#"{"name":"a/b","params":{"base.v":"1"}}"#,
            "is not a comparison name",
        ),
        (r#"{"name":"metrics","params":{"base.v":"1"}}"#, "reserved"),
        (r#"{"name":"","params":{"base.v":"1"}}"#, "name: "),
        (
            r#"{"name":"x","params":{"base_from":"yesterday","target.v":"1"}}"#,
            "base_from: ",
        ),
        (r#"{"name":"x","params":{"base.v":"1","fdr":"2"}}"#, "fdr: "),
        (r#"{"name":"x","params":{"v":"1"}}"#, "nothing to compare"),
        (
            r#"{"name":"x","params":{"base.v":"1","format":"text"}}"#,
            "format is not saved",
        ),
        (r#"{"name":"x"}"#, "not a saved comparison"),
        (r#"{"name":"x","params":{},"extra":1}"#, "unknown field"),
    ] {
        let (status, text) = save(&server, key, body);
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(named), "{body}: {text} should name {named}");
    }
    let (status, text) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version/result?from=now-1h",
        key,
        "",
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("only format"), "{text}");
    let (status, text) = call(&server, "GET", "/api/v1/comparisons/a%20b", key, "");
    assert_eq!(status, 400, "{text}");
    // A name taken: 409.
    let (status, text) = save(&server, key, by_version);
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("exists already"), "{text}");

    // The limit: the 51st is refused saying so.
    for i in 2..MAX_PER_PROJECT {
        let (status, body) = save(
            &server,
            key,
            &format!(r#"{{"name":"c{i}","params":{{"base.v":"1","target.v":"{i}"}}}}"#),
        );
        assert_eq!(status, 201, "c{i}: {body}");
    }
    let (status, text) = save(
        &server,
        key,
        r#"{"name":"one-more","params":{"base.v":"1","target.v":"2"}}"#,
    );
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains("the most it may keep is 50") && text.contains("DELETE"),
        "{text}"
    );

    // Deleted: gone from the list, the result and the metrics; room for
    // another.
    let (status, text) = call(
        &server,
        "DELETE",
        "/api/v1/comparisons/api-version",
        key,
        "",
    );
    assert_eq!(status, 204, "{text}");
    let (status, _) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version/result",
        key,
        "",
    );
    assert_eq!(status, 404);
    let (status, _) = call(
        &server,
        "DELETE",
        "/api/v1/comparisons/api-version",
        key,
        "",
    );
    assert_eq!(status, 404);
    let (status, body) = call(&server, "GET", "/api/v1/comparisons", key, "");
    assert_eq!(status, 200);
    assert_eq!(json(&body).as_array().unwrap().len(), MAX_PER_PROJECT - 1);
    let (status, text) = save(
        &server,
        key,
        r#"{"name":"one-more","params":{"base.v":"1","target.v":"2"}}"#,
    );
    assert_eq!(status, 201, "{text}");
    // The other tenant's comparison of the same name is still there.
    let (status, _) = call(
        &server,
        "GET",
        "/api/v1/comparisons/api-version",
        &other,
        "",
    );
    assert_eq!(status, 200);
}
