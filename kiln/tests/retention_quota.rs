//! Retention and the stored-bytes quota against a real `kiln up` (issue
//! 18): a tenant over its `max_stored_bytes` is refused (429, naming the
//! quota and its usage) while another tenant still ingests, and a
//! retention pass deletes what is older than a tenant's `retention_days`
//! from the store on disk, keeping the rest.

mod support;

use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, NANOS_PER_HOUR};
use kiln_storage::{EmbeddedProfileStore, ProfileStore, Scope};
use support::{Server, now_ns, request};

/// Makes tenant `name` and returns a key of it with ingest and read.
fn tenant(server: &Server, name: &str) -> String {
    server.tenant_key(name, "ingest,read")
}

fn set_limits(server: &Server, tenant: &str, json: &str) {
    let (status, text) = request(
        &server.url,
        "PUT",
        &format!("/api/v1/admin/tenants/{tenant}/limits"),
        Some(&server.admin_token),
        &[],
        json.as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
}

fn import(server: &Server, key: &str, body: &str) -> (u16, String) {
    request(
        &server.url,
        "POST",
        "/api/v1/import?format=collapsed",
        Some(key),
        &[],
        body.as_bytes(),
    )
}

/// Guards `max_stored_bytes`: once a tenant's stored bytes reach it, its
/// imports and batches get 429 saying so (within the usage cache's few
/// seconds), another tenant is unaffected, and nothing stored is lost.
#[test]
fn a_tenant_over_its_stored_bytes_is_refused_and_others_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let tiny = tenant(&server, "tiny");
    set_limits(&server, "tiny", r#"{"max_stored_bytes":1000}"#);

    // Under the quota: accepted (and stored: imports wait for that).
    let stacks: String = (0..50).map(|i| format!("main;work;f{i} 3\n")).collect();
    let (status, text) = import(&server, &tiny, &stacks);
    assert_eq!(status, 200, "{text}");

    // Over it now (50 rows of ~75 bytes); the gateway sees that once its
    // usage cache (5 s) is refreshed.
    let started = std::time::Instant::now();
    let refusal = loop {
        let (status, text) = import(&server, &tiny, "main;more 1\n");
        if status == 429 {
            break text;
        }
        assert_eq!(status, 200, "{text}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "tiny was never refused"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert!(refusal.contains("max_stored_bytes is 1000"), "{refusal}");
    assert!(refusal.contains("bytes stored"), "{refusal}");
    // Agent batches too.
    let labels = LabelSet::new().with("process", "p");
    let mut builder = BatchBuilder::new("agent", 1, 10_000_000);
    builder.add(
        now_ns(),
        &[Frame::named(FrameKind::Native, "x")],
        &labels,
        1,
    );
    let (status, text) = request(
        &server.url,
        "POST",
        "/api/v1/ingest",
        Some(&tiny),
        &[],
        &builder.finish().encode(),
    );
    assert_eq!(status, 429, "{text}");

    // Another tenant still ingests.
    let (status, text) = import(&server, &server.key, "main;other 2\n");
    assert_eq!(status, 200, "{text}");

    // What tiny stored is still there.
    let (status, text) = request(
        &server.url,
        "GET",
        "/api/v1/flamegraph?from=now-1h&format=collapsed",
        Some(&tiny),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("main;work;f49 3"), "{text}");

    // The operator sees the usage.
    let (status, text) = request(
        &server.url,
        "GET",
        "/api/v1/admin/tenants/tiny/limits",
        Some(&server.admin_token),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{text}");
    let view: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(view["stored_bytes"].as_u64().unwrap() >= 1000, "{text}");
    server.stop();
}

/// Guards retention: a pass deletes a tenant's hours older than its
/// `retention_days` from the store on disk, keeps its recent data and
/// every other tenant's, and says what it deleted.
#[test]
fn a_retention_pass_deletes_old_data_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let key = tenant(&server, "old");
    let now = now_ns();
    let day = 24 * NANOS_PER_HOUR;
    let labels = LabelSet::new().with("process", "p");
    let mut builder = BatchBuilder::new("agent", 1, 10_000_000);
    let frames = [Frame::named(FrameKind::Native, "aged")];
    for back in [3 * day, 3 * day + 2 * NANOS_PER_HOUR, 10 * day] {
        builder.add(now - back, &frames, &labels, 1);
    }
    builder.add(now - 1_000_000_000, &frames, &labels, 7);
    let batch = builder.finish().encode();
    for bearer in [&key, &server.key] {
        let (status, text) = request(
            &server.url,
            "POST",
            "/api/v1/ingest",
            Some(bearer),
            &[],
            &batch,
        );
        assert_eq!(status, 200, "{text}");
    }
    // The batches are written once a query over all time sees them.
    let all_time = "/api/v1/flamegraph?from=0&format=collapsed";
    let started = std::time::Instant::now();
    for bearer in [&key, &server.key] {
        loop {
            let (status, text) = request(&server.url, "GET", all_time, Some(bearer), &[], b"");
            assert_eq!(status, 200, "{text}");
            if text.contains("aged 10") {
                break;
            }
            assert!(started.elapsed().as_secs() < 30, "never written: {text}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    set_limits(&server, "old", r#"{"retention_days":1}"#);
    let (status, text) = request(
        &server.url,
        "POST",
        "/api/v1/admin/retention",
        Some(&server.admin_token),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let deleted = report["deleted"].as_array().unwrap();
    assert_eq!(deleted.len(), 1, "{text}");
    assert_eq!(deleted[0]["scope"], "old/default", "{text}");
    assert_eq!(deleted[0]["sample_hours"], 3, "{text}");
    // A second pass finds nothing.
    let (_, text) = request(
        &server.url,
        "POST",
        "/api/v1/admin/retention",
        Some(&server.admin_token),
        &[],
        b"",
    );
    assert!(text.contains(r#""deleted":[]"#), "{text}");
    server.stop();

    // On disk: the old hours are gone, the recent sample and the other
    // tenant's data are not.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = EmbeddedProfileStore::open(&dir.path().join("profiles")).unwrap();
        let old = Scope::new("old", "default").unwrap();
        let left = store.scan_samples(&old, i64::MIN, i64::MAX).await.unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].count, 7);
        assert_eq!(
            store
                .sample_hours(&old, i64::MIN, i64::MAX)
                .await
                .unwrap()
                .len(),
            1
        );
        let other = Scope::new("default", "default").unwrap();
        let kept = store
            .scan_samples(&other, i64::MIN, i64::MAX)
            .await
            .unwrap();
        assert_eq!(kept.len(), 4, "{kept:?}");
        assert_eq!(
            store.stored_bytes("old").await.unwrap(),
            kiln_storage::sample_row_bytes(&old)
        );
    });
}
