//! The attack suite: a real `kiln up`, attacked the ways the security
//! review found open (issue 18). Each case checks that the attack gets a
//! fast, clear 4xx (or, for the all-time query, a correct answer), that
//! the server's memory stays bounded, and that it keeps serving.

mod support;

use kiln_actors::http::RouteSet;
use support::{
    Server, credential_routes, hostile, key_with, peak_rss, percent_encoded, request, rss,
};

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
    let routes = credential_routes(RouteSet::All);
    let mut encoded = 0;
    for (method, path) in &routes {
        for (what, bearer) in [
            ("no key", None),
            ("a well-formed unknown key", Some(unknown.as_str())),
            ("a malformed key", Some("hunter2")),
            ("a revoked key", Some(revoked.as_str())),
        ] {
            let (status, text) = call(&server, method, path, bearer, &[], b"x");
            assert_eq!(status, 401, "{method} {path} with {what}: {status} {text}");
        }
        // The same path percent-encoded is the same route to the router,
        // and so to authentication.
        for variant in percent_encoded(path) {
            let (status, text) = call(&server, method, &variant, None, &[], b"x");
            assert_eq!(
                status, 401,
                "{method} {variant} with no key: {status} {text}"
            );
            encoded += 1;
        }
    }
    // And a valid key is let in where its roles allow.
    let (status, text) = call(&server, "GET", "/api/v1/whoami", Some(&acme), &[], b"");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""tenant":"acme""#), "{text}");
    println!(
        "checked {} routes (the server's route table) × 4 bad credentials, and {encoded} \
         percent-encoded paths without one: all 401",
        routes.len()
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
    // sent four times; then four times more, which must cost nothing
    // more: what the first round's buffers took stays with the allocator
    // for reuse (an idle thread hands pages back only when it next
    // allocates), and a second round that grew it would be a leak: its
    // bodies, inflated up to their limits, are 640 MiB; one more idle
    // thread keeping an import's 256 MiB is not.
    let bomb = hostile::zstd_bomb();
    let mut after_round = Vec::new();
    for _round in 0..2 {
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
        after_round.push(rss(pid));
    }
    println!(
        "decompression bombs: RSS {} MiB after the first round, {} MiB after the second",
        after_round[0] >> 20,
        after_round[1] >> 20
    );
    assert!(
        after_round[1] < after_round[0] + (320 << 20),
        "a second round of bombs grew RSS from {} to {} bytes",
        after_round[0],
        after_round[1]
    );
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

    // Memory stayed bounded, and the server still serves. A body may take
    // its route's limit (256 MiB for an import) while it is read, its
    // buffer growing by doubling up to it; the allocator's threads keep
    // some of that for reuse (the second round above took no more).
    let after = rss(pid);
    println!(
        "server RSS: {} MiB before, {} MiB after the attacks",
        before >> 20,
        after >> 20
    );
    assert!(
        after < before + (1 << 30),
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

/// Guards "no body costs more memory than its route's limit, whoever
/// sends it": a zstd bomb (1 GiB of zeros in a few dozen KB) to every
/// route that takes a body, without a credential, and to the open login
/// form. Each is refused at once, and the server's peak memory does not
/// move.
#[test]
fn bombs_cost_nothing_on_any_route() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let pid = server.pid();
    let bomb = hostile::zstd_bomb_of(1024);
    let zstd = [("content-encoding", "zstd")];
    let peak = peak_rss(pid);
    let mut sent = 0;
    for (method, path) in credential_routes(RouteSet::All) {
        if !matches!(method.as_str(), "POST" | "PUT" | "DELETE") {
            continue;
        }
        let (status, text) = call(&server, &method, &path, None, &zstd, &bomb);
        assert_eq!(status, 401, "{method} {path}: {status} {text}");
        sent += 1;
    }
    let form = [
        ("content-encoding", "zstd"),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let (status, text) = call(&server, "POST", "/login", None, &form, &bomb);
    assert_eq!(status, 413, "the login form: {text}");
    assert!(text.contains("a login form may be at most"), "{text}");
    let grown = peak_rss(pid).saturating_sub(peak);
    println!(
        "a {} KB zstd bomb of 1 GiB to {sent} routes without a credential and to /login: \
         refused, peak RSS +{} MiB",
        bomb.len() >> 10,
        grown >> 20
    );
    assert!(
        grown < 64 << 20,
        "the server's peak RSS grew {} MiB",
        grown >> 20
    );
    // A login form still works after that.
    let key = local_secret(&server, "api-key");
    let form = format!("key={key}");
    let (status, _) = call(
        &server,
        "POST",
        "/login",
        None,
        &[("content-type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    );
    assert!(
        status == 200 || status == 303,
        "a login with the key: {status}"
    );
}

/// Guards "who sends what is not for anyone who can reach /metrics":
/// per-tenant series name a hash unless the admin token asks.
#[test]
fn metrics_name_tenants_only_to_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let admin = local_secret(&server, "admin-token");
    let acme = tenant(&server, &admin, "acme-corp");
    let import = "/api/v1/import?format=collapsed";
    let (status, _) = call(&server, "POST", import, Some(&acme), &[], b"main 3\n");
    assert_eq!(status, 200);
    let (status, anonymous) = call(&server, "GET", "/metrics", None, &[], b"");
    assert_eq!(status, 200);
    assert!(!anonymous.contains("acme-corp"), "{anonymous}");
    let hashed = anonymous
        .lines()
        .find(|l| l.starts_with("kiln_ingest_samples_total{tenant=\"t_"))
        .unwrap_or_else(|| panic!("no hashed ingest series in:\n{anonymous}"));
    assert!(hashed.ends_with(" 3"), "{hashed}");
    let (_, operator) = call(&server, "GET", "/metrics", Some(&admin), &[], b"");
    assert!(
        operator.contains("kiln_ingest_samples_total{tenant=\"acme-corp\"} 3"),
        "{operator}"
    );
    // A tenant's key is not the operator's.
    let (_, tenant_view) = call(&server, "GET", "/metrics", Some(&acme), &[], b"");
    assert!(!tenant_view.contains("acme-corp"), "{tenant_view}");
    println!("/metrics: {hashed} without the admin token, the name with it");

    // And with --metrics-tenants operator-only, none at all.
    drop(server);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        &["--metrics-tenants", "operator-only"],
    );
    let key = local_secret(&server, "api-key");
    let (status, _) = call(&server, "POST", import, Some(&key), &[], b"main 3\n");
    assert_eq!(status, 200);
    let (_, anonymous) = call(&server, "GET", "/metrics", None, &[], b"");
    assert!(!anonymous.contains("tenant="), "{anonymous}");
    assert!(anonymous.contains("kiln_build_info"), "{anonymous}");
    let admin = local_secret(&server, "admin-token");
    let (_, operator) = call(&server, "GET", "/metrics", Some(&admin), &[], b"");
    assert!(operator.contains("tenant=\"default\""), "{operator}");
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
