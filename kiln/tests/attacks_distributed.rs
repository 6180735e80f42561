//! The attack suite's distributed half (issue 18): a real `kiln gateway`,
//! `kiln worker` and `kiln query`, each a separate process, on Kafka
//! (tansu) and PostgreSQL, attacked through their HTTP routes and straight
//! through the Kafka topic. attacks.rs is the same suite against `kiln up`.
//!
//! Runs when `KILN_TEST_KAFKA` and `KILN_TEST_POSTGRES` name a broker and a
//! server (scripts/kafka-test-server.sh and scripts/pg-test-server.sh print
//! them); each test says it skipped, and why, otherwise. Each test gets a
//! database, a topic and an object store of its own.

mod support;
mod support_distributed;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_actors::envelope::{BusKey, EnvelopeHeader};
use kiln_actors::http::RouteSet;
use kiln_ingest_bus::{BusUrl, Published};
use kiln_model::{BatchBuilder, Envelope, Frame, FrameKind, LabelSet};
use kiln_storage::Scope;
use support::{credential_routes, hostile, key_with, now_ns, request, rss};
use support_distributed::{
    ADMIN_TOKEN, BUS_KEY, Backends, Role, Tenant, collapsed, new_tenant, psql, servers,
};

/// How long a test waits for the worker to store what it was sent before
/// failing (a hang guard, not a performance check).
const CATCH_UP: Duration = Duration::from_secs(120);

/// A deployment of one gateway, one worker and one query node. The roles
/// come first, so that they are stopped before the object store's
/// directory is removed.
struct Deployment {
    gateway: Role,
    _worker: Role,
    query: Role,
    backends: Backends,
}

impl Deployment {
    /// A deployment on fresh backends, or `None` (having said why) when
    /// the test servers are not configured.
    fn start(test: &str) -> Option<Deployment> {
        let Some((kafka, postgres)) = servers() else {
            eprintln!(
                "{test}: skipped, as it needs a Kafka broker and a PostgreSQL server (above)"
            );
            return None;
        };
        let backends = Backends::new(&kafka, &postgres, "attacks", 2);
        let gateway = backends.gateway();
        let worker = backends.worker();
        let query = backends.query();
        Some(Deployment {
            gateway,
            _worker: worker,
            query,
            backends,
        })
    }

    fn gateway(&self) -> &str {
        self.gateway.url()
    }

    fn query(&self) -> &str {
        self.query.url()
    }

    /// A new tenant, made through the gateway with the admin token.
    fn tenant(&self) -> Tenant {
        new_tenant(self.gateway())
    }

    /// The objects kept under `prefix` (a directory of the object store),
    /// by file name.
    fn objects_under(&self, prefix: &str) -> Vec<String> {
        list(&self.backends.objects_dir().join(prefix))
    }
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    names.sort();
    names
}

/// An encoded batch from `source`: one sample of the stack `main;function`
/// with `count`, a minute ago.
fn batch(source: &str, function: &str, count: u64) -> Vec<u8> {
    let ts = now_ns() - 60_000_000_000;
    let mut b = BatchBuilder::new(source, ts, 10_000_000);
    let frames = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, function),
    ];
    b.add(ts, &frames, &LabelSet::new().with("host", source), count);
    b.finish().encode()
}

/// `POST /api/v1/ingest` of `body` through the gateway, expecting 200.
fn ingest(d: &Deployment, key: &str, body: &[u8]) {
    let (status, text) = request(d.gateway(), "POST", "/api/v1/ingest", Some(key), &[], body);
    assert_eq!(status, 200, "ingest: {text}");
}

/// Waits until `key` reads exactly `expected` (collapsed stacks of the
/// last day) on the query node.
fn wait_for(d: &Deployment, key: &str, expected: &[&str], why: &str) {
    let started = Instant::now();
    loop {
        let got = collapsed(d.query(), key, "");
        if got == expected {
            return;
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "{why}: after {CATCH_UP:?} the query node reads {got:?}, expected {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The tenant and project `key` is scoped to (`GET /api/v1/whoami`).
fn scope_of(base: &str, key: &str) -> Scope {
    let (status, text) = request(base, "GET", "/api/v1/whoami", Some(key), &[], b"");
    assert_eq!(status, 200, "{text}");
    let who: serde_json::Value = serde_json::from_str(&text).unwrap();
    Scope::new(
        who["tenant"].as_str().expect("a tenant"),
        who["project"].as_str().expect("a project"),
    )
    .unwrap()
}

/// Publishes `(key, payload)` records straight to the deployment's Kafka
/// topic, as anyone who can reach the brokers could; where each landed.
fn publish_to_kafka(bus_url: &str, records: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Published> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url: BusUrl = bus_url.parse().expect("the deployment's bus URL");
        let bus = url.open(1).await.expect("connect to the test broker");
        let mut published = Vec::new();
        for (key, payload) in records {
            let at = bus
                .publish(&key, payload)
                .await
                .unwrap_or_else(|e| panic!("publish straight to Kafka: {}", e.source));
            published.push(at);
        }
        published
    })
}

/// The dead letter of the record at `at` under `prefix`: the record's
/// bytes and the reason kept beside them.
fn dead_letter(d: &Deployment, prefix: &str, at: &Published) -> (Vec<u8>, String) {
    let dir = d.backends.objects_dir().join(prefix);
    let name = format!("p{}-o{}", at.partition, at.offset);
    let read = |ext: &str| {
        let path = dir.join(format!("{name}.{ext}"));
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "no dead letter {} ({e}); {prefix} holds {:?}",
                path.display(),
                list(&dir)
            )
        })
    };
    let reason = String::from_utf8(read("reason")).unwrap();
    (read("envelope"), reason)
}

/// Guards "no route answers without a valid credential", "tenant B sees
/// nothing of tenant A's", "a read key cannot ingest" and "a web page
/// cannot post", across processes: keys made and revoked through the
/// gateway are checked by the query node against the same PostgreSQL
/// metadata, and the scope a worker stores under is the one the gateway
/// authenticated.
#[test]
fn credentials_roles_tenants_and_origins_hold_across_gateway_and_query_node() {
    let Some(d) = Deployment::start(
        "credentials_roles_tenants_and_origins_hold_across_gateway_and_query_node",
    ) else {
        return;
    };
    let a = d.tenant();
    let b = d.tenant();

    // Tenant A's data, with a label value of its own.
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/import?format=collapsed&service=secret-a",
        Some(&a.key),
        &[],
        b"main;a_private_function 7\n",
    );
    assert_eq!(status, 200, "{text}");
    wait_for(
        &d,
        &a.key,
        &["main;a_private_function 7"],
        "tenant a's import",
    );

    // B reads nothing of A's on the query node, whatever it asks.
    let reads = [
        "/api/v1/flamegraph?from=now-1d&format=collapsed",
        "/api/v1/flamegraph?from=now-1d&format=json",
        "/api/v1/top?from=now-1d",
        "/api/v1/labels?from=now-1d",
        "/api/v1/timeline?from=now-1d",
        "/api/v1/metrics/names?from=now-1d",
        "/api/v1/flamegraph?from=now-1d&format=collapsed&service=secret-a",
    ];
    for path in reads {
        let (status, seen_by_a) = request(d.query(), "GET", path, Some(&a.key), &[], b"");
        assert_eq!(status, 200, "{path}: {seen_by_a}");
        let (status, seen_by_b) = request(d.query(), "GET", path, Some(&b.key), &[], b"");
        assert_eq!(status, 200, "{path}: {seen_by_b}");
        assert!(
            !seen_by_b.contains("a_private_function") && !seen_by_b.contains("secret-a"),
            "{path} shows tenant a's data to tenant b: {seen_by_b}"
        );
    }
    let (_, labels_of_a) = request(
        d.query(),
        "GET",
        "/api/v1/labels?from=now-1d",
        Some(&a.key),
        &[],
        b"",
    );
    assert!(labels_of_a.contains("secret-a"), "{labels_of_a}");
    // Naming A in the query string is only a label filter.
    let forged = format!(
        "/api/v1/flamegraph?from=now-1d&format=collapsed&tenant={}",
        a.name
    );
    let (status, text) = request(d.query(), "GET", &forged, Some(&b.key), &[], b"");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("a_private_function"), "{text}");
    // Nor can B make keys for A, on either node.
    for node in [d.gateway(), d.query()] {
        let (status, _) = request(
            node,
            "POST",
            &format!("/api/v1/admin/tenants/{}/keys", a.name),
            Some(&b.key),
            &[],
            br#"{"roles":"read"}"#,
        );
        assert_eq!(status, 403, "{node}: a tenant's key used an admin route");
    }

    // A read key reads, and cannot ingest or import at the gateway.
    let (read, _) = key_with(d.gateway(), ADMIN_TOKEN, &a.name, "read");
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/ingest",
        Some(&read),
        &[],
        &batch("reader", "read_key_ingest", 1),
    );
    assert_eq!(status, 403, "a read key ingested: {text}");
    assert!(text.contains("ingest role"), "{text}");
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/import?format=collapsed",
        Some(&read),
        &[],
        b"read_key_import 1\n",
    );
    assert_eq!(status, 403, "a read key imported: {text}");
    assert_eq!(
        collapsed(d.query(), &read, ""),
        ["main;a_private_function 7"]
    );
    // An ingest key does not read; the operator's token reads no tenant.
    let (ingest_only, _) = key_with(d.gateway(), ADMIN_TOKEN, &a.name, "ingest");
    let flame = "/api/v1/flamegraph?from=now-1d&format=collapsed";
    for (who, bearer) in [
        ("an ingest key", &ingest_only[..]),
        ("the admin token", ADMIN_TOKEN),
    ] {
        let (status, text) = request(d.query(), "GET", flame, Some(bearer), &[], b"");
        assert_eq!(status, 403, "{who} read profiles: {text}");
    }

    // Cross-origin state changes at the gateway are refused; its own
    // origin is not.
    let import = "/api/v1/import?format=collapsed&check=origin";
    for headers in [
        &[("origin", "http://evil.example")][..],
        &[("origin", "null")],
        &[("sec-fetch-site", "cross-site")],
    ] {
        let (status, text) = request(
            d.gateway(),
            "POST",
            import,
            Some(&a.key),
            headers,
            b"cross_origin 1\n",
        );
        assert_eq!(status, 403, "{headers:?}: {text}");
    }
    let (status, text) = request(
        d.gateway(),
        "POST",
        import,
        Some(&a.key),
        &[("origin", "http://evil.example")],
        b"cross_origin 1\n",
    );
    assert!(text.contains("cross-origin"), "{status} {text}");
    let own = d.gateway().to_owned();
    let (status, text) = request(
        d.gateway(),
        "POST",
        import,
        Some(&a.key),
        &[("origin", &own)],
        b"same_origin 1\n",
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        collapsed(d.query(), &a.key, "&check=origin"),
        ["same_origin 1"]
    );

    // A key revoked at the gateway: known to both nodes first (so that
    // both have it cached), refused by the gateway at once and by the
    // query node within its key cache's lifetime.
    let (revoked, revoked_id) = key_with(d.gateway(), ADMIN_TOKEN, &a.name, "ingest,read,admin");
    for node in [d.gateway(), d.query()] {
        let (status, text) = request(node, "GET", "/api/v1/whoami", Some(&revoked), &[], b"");
        assert_eq!(status, 200, "{node}: {text}");
    }
    let (status, text) = request(
        d.gateway(),
        "DELETE",
        &format!("/api/v1/admin/tenants/{}/keys/{revoked_id}", a.name),
        Some(ADMIN_TOKEN),
        &[],
        b"",
    );
    assert_eq!(status, 204, "{text}");
    let whoami = |node: &str| request(node, "GET", "/api/v1/whoami", Some(&revoked), &[], b"").0;
    assert_eq!(whoami(d.gateway()), 401, "the gateway revoked it");
    let revoked_at = Instant::now();
    let grace = kiln_actors::http::auth::KEY_CACHE_TTL + Duration::from_secs(10);
    while whoami(d.query()) != 401 {
        assert!(
            revoked_at.elapsed() < grace,
            "the query node still takes a key revoked {:?} ago",
            revoked_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "a key revoked at the gateway was refused by the query node after {:?}",
        revoked_at.elapsed()
    );

    // No key, a wrong one, a malformed one, a revoked one: 401 on every
    // route of each node.
    let unknown = format!("kiln_{}", "0".repeat(64));
    let mut checked = 0;
    for (node, routes) in [
        (d.gateway(), credential_routes(RouteSet::Gateway)),
        (
            d.query(),
            credential_routes(RouteSet::Query { internal: false }),
        ),
    ] {
        for (method, path) in &routes {
            for (what, bearer) in [
                ("no key", None),
                ("a well-formed unknown key", Some(unknown.as_str())),
                ("a malformed key", Some("hunter2")),
                ("a revoked key", Some(revoked.as_str())),
                ("a wrong admin token", Some("distributed-test-admin-tokeN")),
            ] {
                let (status, text) = request(node, method, path, bearer, &[], b"x");
                assert_eq!(
                    status, 401,
                    "{node} {method} {path} with {what}: {status} {text}"
                );
                checked += 1;
            }
        }
    }
    println!("{checked} requests with bad credentials on the gateway and the query node: all 401");
    // The refused writes stored nothing.
    assert_eq!(
        collapsed(d.query(), &a.key, ""),
        ["main;a_private_function 7", "same_origin 1"]
    );
}

/// Guards "a forged Kafka record naming another tenant is refused and
/// dead-lettered": records produced straight to the topic, naming tenant
/// A, under a MAC of the wrong key, under no MAC (a version-1 envelope),
/// and not envelopes at all, are refused by the worker, kept whole under
/// `dead-letters/` (no tenant's area) with the reason, and none of their
/// samples is queryable; the valid batches the gateway publishes after
/// them, on the same partition, are stored.
#[test]
fn forged_kafka_records_are_dead_lettered_and_ingest_goes_on() {
    let Some(d) = Deployment::start("forged_kafka_records_are_dead_lettered_and_ingest_goes_on")
    else {
        return;
    };
    let a = d.tenant();
    let scope = scope_of(d.gateway(), &a.key);
    ingest(&d, &a.key, &batch("host-x", "before_forgery", 1));

    // The key the gateway would give a batch of host-x from A: the same
    // partition as A's next batch, so that the worker reads them in order.
    let header = EnvelopeHeader {
        scope: scope.clone(),
        received_at_ns: now_ns(),
    };
    let key = header.bus_key("host-x");
    let wrong_key = Envelope::new(
        scope.tenant(),
        scope.project(),
        now_ns(),
        &batch("host-x", "forged_under_a_wrong_key", 7),
    )
    .unwrap()
    .encode(b"a bus key guessed by the attacker");
    let mut unsigned = vec![b'K', b'L', b'N', b'E', 1];
    for name in [scope.tenant(), scope.project()] {
        unsigned.push(name.len() as u8);
        unsigned.extend_from_slice(name.as_bytes());
    }
    unsigned.extend_from_slice(&now_ns().to_le_bytes());
    unsigned.extend_from_slice(&batch("host-x", "forged_unsigned", 9));
    // Signed with a key the gateways hold, but not the workers': a
    // misconfigured gateway is refused too.
    let other_key = BusKey::new("a-gateway-key-the-workers-do-not-hold").unwrap();
    let other = header.wrap(&batch("host-x", "forged_other_key", 11), &other_key);
    let records = vec![
        (key.clone(), wrong_key),
        (key.clone(), unsigned),
        (key.clone(), other),
        (key, b"not an envelope".to_vec()),
    ];
    let published = publish_to_kafka(&d.backends.bus, records.clone());

    ingest(&d, &a.key, &batch("host-x", "after_forgery", 3));
    wait_for(
        &d,
        &a.key,
        &["main;after_forgery 3", "main;before_forgery 1"],
        "the valid batches around the forged records",
    );

    // Each forged record is kept whole, with its reason, outside every
    // tenant's area.
    let expected_reasons = [
        "envelope MAC does not verify",
        "envelope MAC does not verify",
        "envelope MAC does not verify",
        "not a kiln envelope",
    ];
    for ((at, (_, payload)), expected) in published.iter().zip(&records).zip(expected_reasons) {
        let (kept, reason) = dead_letter(&d, "dead-letters", at);
        assert_eq!(&kept, payload, "the dead letter at {at:?} is the record");
        assert!(reason.contains(expected), "{at:?}: {reason}");
    }
    assert_eq!(
        d.objects_under("dead-letters").len(),
        2 * records.len(),
        "{:?}",
        d.objects_under("dead-letters")
    );
    let tenant_area = format!("tenants/{}/dead-letters", a.name);
    assert_eq!(d.objects_under(&tenant_area), Vec::<String>::new());
    // Still nothing of them, on any stack, after the worker moved past.
    let flame = collapsed(d.query(), &a.key, "");
    assert!(
        flame.iter().all(|l| !l.contains("forged")),
        "a forged record was stored under tenant a: {flame:?}"
    );
}

/// Guards "a record the worker refuses for good does not stop ingest",
/// the part a client can reach: a record straight to Kafka, signed with
/// the deployment's own bus key (what only a gateway could publish)
/// around a batch the gateway would have refused (a function name over
/// the limit). The worker sets it aside under its tenant's dead letters
/// with the reason, and the batches after it are stored.
#[test]
fn a_signed_record_the_worker_refuses_is_dead_lettered_and_ingest_goes_on() {
    let Some(d) =
        Deployment::start("a_signed_record_the_worker_refuses_is_dead_lettered_and_ingest_goes_on")
    else {
        return;
    };
    let a = d.tenant();
    let scope = scope_of(d.gateway(), &a.key);
    ingest(&d, &a.key, &batch("host-y", "before_refusal", 1));

    // A batch the gateway refuses itself (a 64 KiB function name)...
    let refused = {
        let mut b = BatchBuilder::new("host-y", now_ns(), 10_000_000);
        b.add(
            now_ns() - 1_000_000_000,
            &[Frame::named(FrameKind::Native, "x")],
            &LabelSet::new(),
            5,
        );
        let mut batch = b.finish();
        batch.frames[0].frame = Frame::named(FrameKind::Native, "f".repeat(64 << 10));
        batch.encode()
    };
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/ingest",
        Some(&a.key),
        &[],
        &refused,
    );
    assert_eq!(status, 400, "{text}");
    // ... so it goes straight to Kafka, signed with the bus key.
    let header = EnvelopeHeader {
        scope: scope.clone(),
        received_at_ns: now_ns(),
    };
    let bus_key = BusKey::new(BUS_KEY).unwrap();
    let record = header.wrap(&refused, &bus_key);
    let published = publish_to_kafka(
        &d.backends.bus,
        vec![(header.bus_key("host-y"), record.clone())],
    );

    ingest(&d, &a.key, &batch("host-y", "after_refusal", 2));
    wait_for(
        &d,
        &a.key,
        &["main;after_refusal 2", "main;before_refusal 1"],
        "the batches after a refused record",
    );
    let tenant_area = format!("tenants/{}/dead-letters", a.name);
    let (kept, reason) = dead_letter(&d, &tenant_area, &published[0]);
    assert_eq!(kept, record);
    assert!(reason.contains("batch refused"), "{reason}");
    assert!(reason.contains("more than the"), "{reason}");
    assert_eq!(d.objects_under("dead-letters"), Vec::<String>::new());
}

/// A sample count PostgreSQL is made to refuse (see below).
const POISON_COUNT: u64 = 424_242;

/// Guards "a store that fails permanently on one record does not stop
/// ingest" against the real PostgreSQL: the test's database is given a
/// CHECK constraint that refuses one sample count, as a database's own
/// rule (a DBA's constraint, a trigger) would; a batch with that count,
/// valid at the gateway, is one the store refuses for good. It should be
/// set aside under its tenant's dead letters with the store's reason, and
/// the batches after it stored. (The PostgreSQL store reports SQLSTATE
/// classes 22, 23 and 54 as `StoreError::Refused`, which the worker
/// dead-letters; connection and resource errors it retries.) The store has
/// no refusal of its own that a decoded batch can reach (names, metric
/// points and sizes are all checked by `Batch::decode` first), so a
/// database rule is the only way a real PostgreSQL refuses a record.
#[test]
fn a_record_postgresql_refuses_for_good_does_not_stop_ingest() {
    let Some(d) = Deployment::start("a_record_postgresql_refuses_for_good_does_not_stop_ingest")
    else {
        return;
    };
    psql(
        &d.backends.store,
        &format!(
            "ALTER TABLE samples ADD CONSTRAINT attack_suite_refuses_one_count \
             CHECK (count <> {POISON_COUNT}) NOT VALID"
        ),
    );
    let a = d.tenant();
    ingest(&d, &a.key, &batch("host-z", "before_poison", 1));
    ingest(&d, &a.key, &batch("host-z", "poison", POISON_COUNT));
    ingest(&d, &a.key, &batch("host-z", "after_poison", 2));
    wait_for(
        &d,
        &a.key,
        &["main;after_poison 2", "main;before_poison 1"],
        "ingest after a record PostgreSQL refused",
    );
    let tenant_area = format!("tenants/{}/dead-letters", a.name);
    let kept = d.objects_under(&tenant_area);
    let reason = kept
        .iter()
        .find(|name| name.ends_with(".reason"))
        .unwrap_or_else(|| panic!("no dead letter in {tenant_area}: {kept:?}"));
    let reason =
        std::fs::read_to_string(d.backends.objects_dir().join(&tenant_area).join(reason)).unwrap();
    assert!(reason.contains("the store refused the batch"), "{reason}");
}

/// Guards "hostile bodies get a fast 4xx, memory stays bounded, and the
/// server keeps serving", at a gateway: the decompression bomb, the
/// oversized name, the overflowing counts and the pprof line bomb; and
/// the all-time query at the query node.
#[test]
fn hostile_bodies_at_the_gateway_are_refused_and_it_keeps_serving() {
    let Some(d) =
        Deployment::start("hostile_bodies_at_the_gateway_are_refused_and_it_keeps_serving")
    else {
        return;
    };
    let key = d.tenant().key;
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/import?format=collapsed",
        Some(&key),
        &[],
        b"main;work 5\n",
    );
    assert_eq!(status, 200, "{text}");
    wait_for(&d, &key, &["main;work 5"], "the first import");
    let (gateway_before, query_before) = (rss(d.gateway.pid()), rss(d.query.pid()));

    // 1. A decompression bomb: 512 MiB of zeros in a few KB of zstd, sent
    // twice to each body-taking route of the gateway.
    let bomb = hostile::zstd_bomb();
    for path in ["/api/v1/ingest", "/api/v1/import?format=collapsed"] {
        for _ in 0..2 {
            let started = Instant::now();
            let (status, text) = request(
                d.gateway(),
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
            println!(
                "decompression bomb ({} bytes) to {path}: 413 in {:?}",
                bomb.len(),
                started.elapsed()
            );
        }
    }

    // 2. An oversized function name (1 MiB), and a 250 MiB one that
    // compresses to little.
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[],
        &hostile::batch_with_function_name(1 << 20),
    );
    assert_eq!(status, 400, "{text}");
    let huge = zstd::encode_all(&hostile::batch_with_function_name(250 << 20)[..], 3).unwrap();
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[("content-encoding", "zstd")],
        &huge,
    );
    assert!(status == 400 || status == 413, "{status} {text}");
    drop(huge);

    // 3. Counts that overflow when summed.
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/ingest",
        Some(&key),
        &[],
        &hostile::overflowing_counts_batch(),
    );
    assert_eq!(status, 400, "{text}");

    // 4. A pprof line bomb: one location with two million lines, gzipped.
    let pprof = hostile::gzipped_line_bomb(2_000_000);
    let (status, text) = request(
        d.gateway(),
        "POST",
        "/api/v1/import?format=pprof",
        Some(&key),
        &[],
        &pprof,
    );
    assert_eq!(status, 400, "{text}");
    println!("pprof line bomb: {} bytes sent, 400: {text}", pprof.len());

    // 5. All time, at the query node: answered, and correctly.
    let (status, text) = request(
        d.query(),
        "GET",
        "/api/v1/flamegraph?from=0&to=4102444800&format=collapsed",
        Some(&key),
        &[],
        b"",
    );
    assert!(status == 200 || status == 400, "{status} {text}");
    if status == 200 {
        assert_eq!(text.trim(), "main;work 5");
    }

    // Memory stayed bounded, and both still serve: a batch through the
    // gateway is stored and read back.
    let (gateway_after, query_after) = (rss(d.gateway.pid()), rss(d.query.pid()));
    println!(
        "gateway RSS: {} MiB before, {} MiB after the attacks; query node: {} MiB, {} MiB",
        gateway_before >> 20,
        gateway_after >> 20,
        query_before >> 20,
        query_after >> 20
    );
    assert!(
        gateway_after < gateway_before + (300 << 20),
        "the gateway's RSS grew from {gateway_before} to {gateway_after} bytes"
    );
    assert!(
        query_after < query_before + (300 << 20),
        "the query node's RSS grew from {query_before} to {query_after} bytes"
    );
    ingest(&d, &key, &batch("survivor", "still_serving", 4));
    wait_for(
        &d,
        &key,
        &["main;still_serving 4", "main;work 5"],
        "a batch after the attacks",
    );
}
