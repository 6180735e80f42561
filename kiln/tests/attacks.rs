//! The attack suite: a real `kiln up`, attacked the ways the security
//! review found open (issue 18). Each case checks that the attack gets a
//! fast, clear 4xx (or, for the all-time query, a correct answer), that
//! the server's memory stays bounded, and that it keeps serving.

mod support;

use support::{Server, hostile, key_with, request, rss};

/// Every route a tenant's key (or the admin token) opens, with a body
/// where the route takes one.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/v1/flamegraph?from=now-1h&format=collapsed"),
    ("GET", "/api/v1/top?from=now-1h"),
    ("GET", "/api/v1/timeline?from=now-1h"),
    ("GET", "/api/v1/labels?from=now-1h"),
    ("GET", "/api/v1/metrics?name=gpu.power_watts&from=now-1h"),
    ("GET", "/api/v1/metrics/names?from=now-1h"),
    ("POST", "/api/v1/import?format=collapsed"),
    ("POST", "/api/v1/ingest"),
    ("HEAD", "/api/v1/symbols/0123456789abcdef0123456789abcdef"),
    ("PUT", "/api/v1/symbols/0123456789abcdef0123456789abcdef"),
    (
        "HEAD",
        "/api/v1/symbols/global/0123456789abcdef0123456789abcdef",
    ),
    (
        "PUT",
        "/api/v1/symbols/global/0123456789abcdef0123456789abcdef",
    ),
    ("GET", "/api/v1/symbols/global"),
    (
        "GET",
        "/api/v1/symbols/global/0123456789abcdef0123456789abcdef",
    ),
    ("GET", "/api/v1/whoami"),
    ("GET", "/api/v1/keys"),
    ("POST", "/api/v1/keys"),
    ("DELETE", "/api/v1/keys/1"),
    ("GET", "/api/v1/admin/tenants"),
    ("POST", "/api/v1/admin/tenants"),
    ("GET", "/api/v1/admin/tenants/default/limits"),
    ("PUT", "/api/v1/admin/tenants/default/limits"),
    ("GET", "/api/v1/admin/tenants/default/keys"),
    ("POST", "/api/v1/admin/tenants/default/keys"),
    ("DELETE", "/api/v1/admin/tenants/default/keys/1"),
    ("POST", "/api/v1/admin/tenants/default/projects"),
];

/// One request to `server`: see [`support::request`].
fn call(
    server: &Server,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    request(&server.url, method, path, bearer, headers, body)
}

fn local_secret(server: &Server, file: &str) -> String {
    std::fs::read_to_string(server.data_dir.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .to_owned()
}

/// Makes a tenant with the admin token; its key (ingest and read).
fn tenant(server: &Server, admin: &str, name: &str) -> String {
    let (status, text) = call(
        server,
        "POST",
        "/api/v1/admin/tenants",
        Some(admin),
        &[("content-type", "application/json")],
        format!(r#"{{"tenant":"{name}"}}"#).as_bytes(),
    );
    assert_eq!(status, 201, "creating tenant {name}: {text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    answer["key"].as_str().expect("a key").to_owned()
}

/// Guards "no route answers without a valid credential".
#[test]
fn every_route_refuses_missing_wrong_and_revoked_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let admin = local_secret(&server, "admin-token");
    let acme = tenant(&server, &admin, "acme");
    let (revoked, revoked_id) = key_with(&server.url, &admin, "acme", "ingest,read,admin");
    let (status, _) = call(
        &server,
        "DELETE",
        &format!("/api/v1/admin/tenants/acme/keys/{revoked_id}"),
        Some(&admin),
        &[],
        b"",
    );
    assert_eq!(status, 204);
    let unknown = format!("kiln_{}", "0".repeat(64));
    for &(method, path) in ROUTES {
        for (what, bearer) in [
            ("no key", None),
            ("a well-formed unknown key", Some(unknown.as_str())),
            ("a malformed key", Some("hunter2")),
            ("a revoked key", Some(revoked.as_str())),
        ] {
            let (status, text) = call(&server, method, path, bearer, &[], b"x");
            assert_eq!(status, 401, "{method} {path} with {what}: {status} {text}");
        }
    }
    // And a valid key is let in where its roles allow.
    let (status, text) = call(&server, "GET", "/api/v1/whoami", Some(&acme), &[], b"");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""tenant":"acme""#), "{text}");
    println!(
        "checked {} routes × 4 bad credentials: all 401",
        ROUTES.len()
    );
}

/// Guards "a key does exactly what its roles say".
#[test]
fn roles_bound_what_a_key_may_do() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let admin = local_secret(&server, "admin-token");
    tenant(&server, &admin, "acme");
    let (read, _) = key_with(&server.url, &admin, "acme", "read");
    let (ingest, _) = key_with(&server.url, &admin, "acme", "ingest");
    let import = "/api/v1/import?format=collapsed";
    let (status, text) = call(&server, "POST", import, Some(&read), &[], b"main 1\n");
    assert_eq!(status, 403, "a read key imported: {text}");
    assert!(text.contains("ingest role"), "{text}");
    let (status, _) = call(&server, "POST", import, Some(&ingest), &[], b"main 1\n");
    assert_eq!(status, 200);
    let flame = "/api/v1/flamegraph?from=now-1h&format=collapsed";
    let (status, _) = call(&server, "GET", flame, Some(&ingest), &[], b"");
    assert_eq!(status, 403, "an ingest key read");
    let (status, text) = call(&server, "GET", flame, Some(&read), &[], b"");
    assert_eq!((status, text.trim()), (200, "main 1"));
    // Tenant keys cannot act as the operator, nor the operator as a tenant.
    let (status, _) = call(
        &server,
        "GET",
        "/api/v1/admin/tenants",
        Some(&read),
        &[],
        b"",
    );
    assert_eq!(status, 403);
    // The global store's listing and bytes are for peer regions (the
    // operator's token), not tenants.
    let (status, _) = call(
        &server,
        "GET",
        "/api/v1/symbols/global",
        Some(&read),
        &[],
        b"",
    );
    assert_eq!(status, 403, "a tenant key listed the global store");
    let (status, text) = call(
        &server,
        "GET",
        "/api/v1/symbols/global",
        Some(&admin),
        &[],
        b"",
    );
    assert_eq!((status, text.as_str()), (200, r#"{"file_ids":[]}"#));
    let (status, _) = call(&server, "GET", flame, Some(&admin), &[], b"");
    assert_eq!(status, 403, "the admin token read a tenant's profiles");
    // A key without the admin role cannot make keys.
    let (status, _) = call(
        &server,
        "POST",
        "/api/v1/keys",
        Some(&read),
        &[],
        br#"{"roles":"admin"}"#,
    );
    assert_eq!(status, 403);
}

/// Guards "tenant B sees nothing of tenant A's".
#[test]
fn tenants_see_nothing_of_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let admin = local_secret(&server, "admin-token");
    let a = tenant(&server, &admin, "tenant-a");
    let b = tenant(&server, &admin, "tenant-b");
    let (status, text) = call(
        &server,
        "POST",
        "/api/v1/import?format=collapsed&service=secret-a",
        Some(&a),
        &[],
        b"main;a_private_function 7\n",
    );
    assert_eq!(status, 200, "{text}");
    // A symbol upload of A's: B must not see that it exists.
    // A small shared library: its dynamic symbols are enough.
    let elf = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .expect("libz");
    let id = kiln_symbolizer_workers::file_id(&elf);
    let path = format!("/api/v1/symbols/{id}");
    let (status, text) = call(&server, "PUT", &path, Some(&a), &[], &elf);
    assert_eq!(status, 200, "{text}");
    assert_eq!(call(&server, "HEAD", &path, Some(&a), &[], b"").0, 200);
    assert_eq!(call(&server, "HEAD", &path, Some(&b), &[], b"").0, 404);

    let reads = [
        "/api/v1/flamegraph?from=now-1d&format=collapsed",
        "/api/v1/top?from=now-1d",
        "/api/v1/labels?from=now-1d",
        "/api/v1/timeline?from=now-1d",
        "/api/v1/metrics/names?from=now-1d",
    ];
    for path in reads {
        let (status, seen_by_a) = call(&server, "GET", path, Some(&a), &[], b"");
        assert_eq!(status, 200, "{path}: {seen_by_a}");
        let (status, seen_by_b) = call(&server, "GET", path, Some(&b), &[], b"");
        assert_eq!(status, 200, "{path}: {seen_by_b}");
        assert!(
            !seen_by_b.contains("a_private_function") && !seen_by_b.contains("secret-a"),
            "{path} shows tenant a's data to tenant b: {seen_by_b}"
        );
    }
    let (_, flame_a) = call(&server, "GET", reads[0], Some(&a), &[], b"");
    assert!(flame_a.contains("a_private_function"), "{flame_a}");
    // A tenant cannot name another in the query string either: "tenant"
    // is only a label filter.
    let (_, forged) = call(
        &server,
        "GET",
        "/api/v1/flamegraph?from=now-1d&format=collapsed&tenant=tenant-a",
        Some(&b),
        &[],
        b"",
    );
    assert!(!forged.contains("a_private_function"), "{forged}");
}

/// Guards "a web page cannot post to the user's Kiln".
#[test]
fn cross_origin_posts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let key = local_secret(&server, "api-key");
    let import = "/api/v1/import?format=collapsed";
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let (status, text) = call(
            &server,
            "POST",
            import,
            Some(&key),
            &[("origin", origin)],
            b"main 1\n",
        );
        assert_eq!(status, 403, "origin {origin}: {text}");
        assert!(text.contains("cross-origin"), "{text}");
    }
    let (status, _) = call(
        &server,
        "POST",
        import,
        Some(&key),
        &[("sec-fetch-site", "cross-site")],
        b"main 1\n",
    );
    assert_eq!(status, 403);
    // The login form too: it would set a session cookie.
    let (status, _) = call(
        &server,
        "POST",
        "/login",
        None,
        &[
            ("origin", "http://evil.example"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        format!("key={key}").as_bytes(),
    );
    assert_eq!(status, 403);
    // The server's own origin is fine.
    let own = server.url.clone();
    let (status, _) = call(
        &server,
        "POST",
        import,
        Some(&key),
        &[("origin", &own)],
        b"main 1\n",
    );
    assert_eq!(status, 200);
}

/// Guards "hostile bodies get a fast 4xx, memory stays bounded, and the
/// server keeps serving": the decompression bomb, the oversized name, the
/// overflowing counts, the pprof line bomb, and the all-time query.
#[test]
fn hostile_input_is_refused_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let key = local_secret(&server, "api-key");
    let pid = server.pid();
    let (status, _) = call(
        &server,
        "POST",
        "/api/v1/import?format=collapsed",
        Some(&key),
        &[],
        b"main;work 5\n",
    );
    assert_eq!(status, 200);
    let before = rss(pid);

    // 1. A decompression bomb: 512 MiB of zeros in a few KB of zstd,
    // sent four times.
    let bomb = hostile::zstd_bomb();
    for path in ["/api/v1/ingest", "/api/v1/import?format=collapsed"] {
        for _ in 0..2 {
            let (status, text) = call(
                &server,
                "POST",
                path,
                Some(&key),
                &[("content-encoding", "zstd")],
                &bomb,
            );
            assert_eq!(status, 413, "{path}: {text}");
            assert!(
                text.contains("after decompression") || text.contains("decompressed"),
                "{text}"
            );
        }
    }
    println!("decompression bomb: {} bytes sent, 413", bomb.len());

    // 2. An oversized function name (1 MiB), and a 250 MiB one that
    // compresses to little.
    let (status, text) = call(
        &server,
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[],
        &hostile::batch_with_function_name(1 << 20),
    );
    assert_eq!(status, 400, "{text}");
    let huge = zstd::encode_all(&hostile::batch_with_function_name(250 << 20)[..], 3).unwrap();
    let (status, text) = call(
        &server,
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[("content-encoding", "zstd")],
        &huge,
    );
    assert!(status == 400 || status == 413, "{status} {text}");

    // 3. Counts that overflow when summed.
    let (status, text) = call(
        &server,
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[],
        &hostile::overflowing_counts_batch(),
    );
    assert!(status == 400 || status == 200, "{status} {text}");
    let flame = "/api/v1/flamegraph?from=now-1h&format=json";
    let (status, text) = call(&server, "GET", flame, Some(&key), &[], b"");
    assert_eq!(status, 200, "a flamegraph after overflowing counts: {text}");

    // 4. A pprof line bomb: one location with two million lines, gzipped.
    let pprof = hostile::gzipped_line_bomb(2_000_000);
    let (status, text) = call(
        &server,
        "POST",
        "/api/v1/import?format=pprof",
        Some(&key),
        &[],
        &pprof,
    );
    assert_eq!(status, 400, "{text}");
    println!("pprof line bomb: {} bytes sent, 400: {text}", pprof.len());

    // 5. All time: answered, and correctly (the sample imported above).
    let (status, text) = call(
        &server,
        "GET",
        "/api/v1/flamegraph?from=0&to=4102444800&format=collapsed",
        Some(&key),
        &[],
        b"",
    );
    assert!(status == 200 || status == 400, "{status} {text}");
    if status == 200 {
        assert!(text.contains("main;work 5"), "{text}");
    }

    // Memory stayed bounded, and the server still serves.
    let after = rss(pid);
    println!(
        "server RSS: {} MiB before, {} MiB after the attacks",
        before >> 20,
        after >> 20
    );
    assert!(
        after < before + (300 << 20),
        "RSS grew from {before} to {after} bytes"
    );
    let (status, text) = call(
        &server,
        "GET",
        "/api/v1/flamegraph?from=now-1h&format=collapsed",
        Some(&key),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert!(text.contains("main;work 5"), "{text}");
}

/// Guards the UI's login: the one-time link, the key form, and what the
/// session cookie may do.
#[test]
fn login_links_work_once_and_sessions_read() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let link = server.login_path().expect("kiln up printed a login link");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let response = agent.get(format!("{}{link}", server.url)).call().unwrap();
    assert_eq!(response.status().as_u16(), 303);
    let cookie = response
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    // The link works once.
    let again = agent.get(format!("{}{link}", server.url)).call().unwrap();
    assert_eq!(again.status().as_u16(), 200, "the form, not a session");
    assert!(again.headers().get("set-cookie").is_none());
    // The session reads.
    let mut response = agent
        .get(format!("{}/api/v1/whoami", server.url))
        .header("cookie", &session)
        .call()
        .unwrap();
    let text = response.body_mut().read_to_string().unwrap();
    assert!(text.contains(r#""via":"session""#), "{text}");
    // A state change with the cookie but without Origin is refused.
    let response = agent
        .post(format!("{}/api/v1/import?format=collapsed", server.url))
        .header("cookie", &session)
        .send(&b"main 1\n"[..])
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    // A forged cookie is not a session.
    let forged = session.replace('a', "b");
    let response = agent
        .get(format!("{}/api/v1/whoami", server.url))
        .header("cookie", &forged)
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}
