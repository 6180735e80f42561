//! `GET /api/v1/compare` on a real `kiln up`: two versions of a program
//! imported as collapsed stacks with a `version` label, compared by label
//! (and by range), read back with exact shares and the significant
//! changes flagged; another tenant's key sees nothing of them; bad
//! parameters are refused with a 400 naming the parameter.

mod support;

use serde_json::Value;
use support::{Server, request};

/// Version 1.4: 10,000 samples. Version 1.5: `work` takes 2,000 more.
const V14: &str = "main;parse 3000\nmain;work;hash 5000\nmain;idle 2000\n";
const V15: &str = "main;parse 3000\nmain;work;hash 7000\nmain;idle 2000\n";

fn compare(server: &Server, bearer: &str, query: &str) -> (u16, String) {
    request(
        &server.url,
        "GET",
        &format!("/api/v1/compare?{query}"),
        Some(bearer),
        &[],
        b"",
    )
}

fn function<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {answer}"))
}

fn close(value: &Value, expected: f64) -> bool {
    (value.as_f64().unwrap() - expected).abs() < 1e-9
}

#[test]
fn compare_flags_what_changed_between_two_versions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.import_versions(&[("1.4", V14), ("1.5", V15)]);
    server.collapsed_once(
        "&version=1.5",
        &["main;idle 2000", "main;parse 3000", "main;work;hash 7000"],
    );
    server.collapsed_once(
        "&version=1.4",
        &["main;idle 2000", "main;parse 3000", "main;work;hash 5000"],
    );

    let query = "from=now-1d&base.version=1.4&target.version=1.5";
    let (status, body) = compare(&server, &server.key, query);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["base"]["samples"], 10_000);
    assert_eq!(answer["target"]["samples"], 12_000);
    assert_eq!(answer["base"]["filters"]["version"], "1.4");
    assert_eq!(answer["compared"], 5, "main, parse, work, hash, idle");
    assert_eq!(answer["flagged"], 4, "all but main, whose total is all");
    let order: Vec<&str> = answer["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    // work and hash moved 8.33 points (hash in self and total, work in
    // total), parse 5, idle 3.33.
    assert_eq!(order[2..], ["parse", "idle", "main"]);
    let hash = function(&answer, "hash");
    assert_eq!(hash["base"]["self_samples"], 5_000);
    assert_eq!(hash["target"]["self_samples"], 7_000);
    assert!(close(&hash["base"]["self_share"], 0.5));
    assert!(close(&hash["target"]["self_share"], 7.0 / 12.0));
    assert!(close(
        &hash["self"]["change_points"],
        100.0 * (7.0 / 12.0 - 0.5)
    ));
    assert_eq!(hash["significant"], true);
    assert_eq!(hash["direction"], "grew");
    assert!(hash["self"]["q"].as_f64().unwrap() < 1e-20);
    let work = function(&answer, "work");
    assert_eq!(work["base"]["self_samples"], 0);
    assert_eq!(work["target"]["total_samples"], 7_000);
    assert_eq!(work["direction"], "grew");
    let parse = function(&answer, "parse");
    assert!(close(&parse["self"]["change_points"], -5.0));
    assert_eq!(parse["direction"], "shrank");
    let main = function(&answer, "main");
    assert_eq!(main["significant"], false);
    assert_eq!(main["direction"], Value::Null);
    println!(
        "compare by version: {} of 5 flagged, order {order:?}",
        answer["flagged"]
    );

    // The text form names what grew and shrank.
    let (status, text) = compare(&server, &server.key, &format!("{query}&format=text"));
    assert_eq!(status, 200, "{text}");
    let grew = text.find("Grew:").expect(&text);
    let shrank = text.find("Shrank:").expect(&text);
    assert!(grew < shrank, "{text}");
    assert!(
        text[grew..shrank].contains("hash") && text[shrank..].contains("parse"),
        "{text}"
    );
    assert!(
        text.contains("10000 samples") && text.contains("12000 samples"),
        "{text}"
    );

    // The same version against itself over two overlapping ranges: no
    // change is flagged.
    let (status, body) = compare(
        &server,
        &server.key,
        "version=1.4&base_from=now-1d&target_from=now-2d",
    );
    assert_eq!(status, 200, "{body}");
    let same: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (same["flagged"].as_u64(), same["compared"].as_u64()),
        (Some(0), Some(5))
    );

    // Another tenant's key sees nothing of it.
    let other = server.tenant_key("other-co", "read");
    let (status, body) = compare(&server, &other, query);
    assert_eq!(status, 200, "{body}");
    let theirs: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(theirs["base"]["samples"], 0);
    assert_eq!(theirs["target"]["samples"], 0);
    assert_eq!(theirs["functions"], Value::Array(vec![]));

    // Bad parameters: 400 naming the parameter; no key: 401.
    for (query, named) in [
        ("base_from=yesterday&target.version=1.5", "base_from: "),
        (
            "from=now-1d&base.version=1.4&target.version=1.5&fdr=2",
            "fdr: ",
        ),
        (
            "from=now-1d&base.version=1.4&target.version=1.5&min_change=-1",
            "min_change: ",
        ),
        (
            "from=now-1d&base.version=1.4&target.version=1.5&format=xml",
            "format: ",
        ),
        (
            "from=now-1d&base.version=1.4&target.version=1.5&limit=0",
            "limit: ",
        ),
        ("from=now-1d&version=1.4&base.version=1.5", "base.version: "),
        (
            "from=now-1d&base.bad%20name=1",
            "\\\"base.bad name\\\" is not a label filter",
        ),
        ("from=now-1d&version=1.4", "nothing to compare"),
        (
            "base_from=now-1h&base_to=now-2h&target.version=1.5",
            "base_from",
        ),
    ] {
        let (status, body) = compare(&server, &server.key, query);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(named), "{query}: {body} should name {named}");
    }
    let (status, _) = request(
        &server.url,
        "GET",
        &format!("/api/v1/compare?{query}"),
        None,
        &[],
        b"",
    );
    assert_eq!(status, 401);
}
