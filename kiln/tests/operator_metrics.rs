//! Operators' metrics end to end: a real `kiln up` takes an agent batch
//! and an import, refuses a batch that does not decode, answers
//! flamegraph queries, and then its `GET /metrics` (no credential, as
//! Prometheus scrapes) parses as Prometheus text and counts exactly that:
//! samples, bytes and batches of the tenant, the refusal by reason, each
//! query in the latency histogram, and the embedded worker's consumer lag
//! per partition, down to zero once everything is stored. A `kiln
//! worker` on its own serves the worker's share (its lag, dead letters,
//! stages) and nothing of the gateway's. The distributed test checks the
//! same on Kafka (`distributed.rs`).

mod support;
mod support_distributed;

use std::time::{Duration, Instant};

use kiln_actors::envelope::{BusKey, EnvelopeHeader};
use kiln_ingest_bus::{Bus, EmbeddedBus};
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, label_names};
use kiln_storage::Scope;
use support::{Exposition, Server, now_ns};
use support_distributed::{BUS_KEY, Role};

/// `kiln up`'s own tenant, which its API key belongs to.
const TENANT: &str = "default";

#[test]
fn metrics_count_what_the_server_did() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());

    // Before anything: the build, and no series of the tenant.
    let before = Exposition::scrape(&server.url);
    assert_eq!(
        before.value(
            "kiln_build_info",
            &[("version", env!("CARGO_PKG_VERSION")), ("role", "all")]
        ),
        Some(1.0)
    );
    assert_eq!(
        before.value("kiln_ingest_samples_total", &[("tenant", TENANT)]),
        None,
        "a tenant that sent nothing has no series"
    );

    // An agent batch: 3 stacks, 60 samples.
    let host = LabelSet::new().with(label_names::HOST, "metrics-host");
    let at = now_ns() - 60_000_000_000;
    let mut batch = BatchBuilder::new("metrics-host".to_owned(), at, 10_000_000);
    for (i, (name, count)) in [("serve", 10), ("parse", 20), ("write", 30)]
        .into_iter()
        .enumerate()
    {
        let frames = [
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, name),
        ];
        batch.add(at + i as i64, &frames, &host, count);
    }
    let batch = batch.finish().encode();
    let (status, text) = server.post("/api/v1/ingest", &batch).unwrap();
    assert_eq!(status, 200, "{text}");

    // An import: 7 samples (it answers once they are queryable).
    let collapsed = b"main;import_a 3\nmain;import_b 4\n";
    let imported = server.import("collapsed", collapsed);
    assert_eq!(imported["samples"], 7);

    // A batch that does not decode: refused at the gateway (400).
    let (status, _) = server
        .post("/api/v1/ingest", b"not a batch at all")
        .unwrap();
    assert_eq!(status, 400);

    // Queries until the agent batch is stored (ingest is asynchronous),
    // each one counted.
    let mut flamegraphs = 0u32;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = server.collapsed("");
        flamegraphs += 1;
        if lines.iter().any(|l| l == "main;write 30") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch was not stored: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Once more: its stacks come from the resolver's cache now.
    server.collapsed("");
    flamegraphs += 1;

    let tenant = [("tenant", TENANT)];
    // With the admin token: tenants by name (others see them hashed).
    let metrics = scrape_until(&server.url, Some(&server.admin_token), |m| {
        m.sum("kiln_worker_consumer_lag_records", &[]) == 0.0
    });
    assert_eq!(
        metrics.sum("kiln_worker_consumer_lag_records", &[]),
        0.0,
        "the worker committed everything"
    );
    assert_eq!(
        metrics.value("kiln_ingest_samples_total", &tenant),
        Some(67.0)
    );
    assert_eq!(
        metrics.value("kiln_ingest_bytes_total", &tenant),
        Some((batch.len() + collapsed.len()) as f64)
    );
    assert_eq!(
        metrics.value("kiln_ingest_batches_total", &tenant),
        Some(2.0)
    );
    assert_eq!(
        metrics.value(
            "kiln_ingest_rejections_total",
            &[("tenant", TENANT), ("reason", "bad_input")]
        ),
        Some(1.0)
    );
    assert_eq!(metrics.sum("kiln_quota_rejections_total", &[]), 0.0);
    // Refused at the gateway, nothing reached the bus to be set aside.
    assert_eq!(metrics.sum("kiln_dead_letters_total", &[]), 0.0);

    let route = [("route", "/api/v1/flamegraph")];
    assert_eq!(
        metrics.value("kiln_query_seconds_count", &route),
        Some(f64::from(flamegraphs)),
        "every flamegraph request timed, once"
    );
    assert!(metrics.value("kiln_query_seconds_sum", &route).unwrap() > 0.0);
    assert_eq!(
        metrics.value("kiln_query_seconds_count", &[("route", "/api/v1/top")]),
        Some(0.0)
    );
    // The resolver looked the stacks up (a miss first, hits after).
    let stacks = [("cache", "stacks")];
    assert!(
        metrics
            .value("kiln_query_cache_misses_total", &stacks)
            .unwrap()
            >= 1.0,
        "{:?}",
        metrics
            .series("kiln_query_cache_misses_total", &[])
            .collect::<Vec<_>>()
    );
    assert!(
        metrics
            .value("kiln_query_cache_hits_total", &stacks)
            .unwrap()
            >= 1.0
    );

    // The embedded worker holds all 4 partitions of the embedded bus.
    let mut lag: Vec<_> = metrics
        .series("kiln_worker_consumer_lag_records", &[("topic", "embedded")])
        .map(|s| s.labels["partition"].clone())
        .collect();
    lag.sort();
    assert_eq!(lag, ["0", "1", "2", "3"]);
    assert_eq!(metrics.types["kiln_worker_consumer_lag_records"], "gauge");
    // Two records (the batch, the import) went through every stage.
    assert_eq!(metrics.value("kiln_worker_records_total", &[]), Some(2.0));
    for stage in ["decode", "dedup", "symbolize", "write", "commit"] {
        let count = metrics
            .value("kiln_worker_stage_seconds_count", &[("stage", stage)])
            .unwrap();
        assert!((1.0..=2.0).contains(&count), "{stage}: {count} polls");
    }
    server.stop();
}

/// A `kiln worker` on the embedded bus (`--bus file://…`): records
/// published before it started (one signed batch, two that are not
/// signed with the bus key) are taken, stored or set aside, and its
/// `/metrics` says so: the lag of each of the bus's partitions down to
/// zero, the dead letters by reason, its stages; and nothing of the
/// gateway's or the query node's.
#[test]
fn a_worker_serves_its_lag_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let bus_dir = dir.path().join("bus");
    {
        // The embedded bus is one process's: publish, then close it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            // `kiln worker` opens a file:// bus with 4 partitions.
            let bus = EmbeddedBus::open(&bus_dir, 4).unwrap();
            let header = EnvelopeHeader {
                scope: Scope::new("acme", "web").unwrap(),
                received_at_ns: now_ns(),
            };
            let mut batch = BatchBuilder::new("h".to_owned(), now_ns(), 10_000_000);
            let host = LabelSet::new().with(label_names::HOST, "h");
            batch.add(
                now_ns(),
                &[Frame::named(FrameKind::Native, "main")],
                &host,
                5,
            );
            let key = BusKey::new(BUS_KEY).unwrap();
            let signed = header.wrap(&batch.finish().encode(), &key);
            bus.publish(&header.bus_key("h"), signed).await.unwrap();
            for forged in [&b"not an envelope"[..], b"KLNE nor this"] {
                bus.publish(b"forger", forged.to_vec()).await.unwrap();
            }
        });
    }
    let url = |name: &str| format!("file://{}", dir.path().join(name).display());
    let worker = Role::start(
        "worker",
        &[
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--bus",
            &url("bus"),
            "--store",
            &url("profiles"),
            "--objects",
            &url("objects"),
            "--bus-key",
            BUS_KEY,
        ],
    );
    let metrics = scrape_until(worker.url(), None, |m| {
        m.value("kiln_worker_records_total", &[]) == Some(3.0)
            && m.sum("kiln_worker_consumer_lag_records", &[]) == 0.0
    });
    assert_eq!(metrics.value("kiln_worker_records_total", &[]), Some(3.0));
    assert_eq!(
        metrics.value("kiln_dead_letters_total", &[("reason", "envelope")]),
        Some(2.0)
    );
    let mut partitions: Vec<_> = metrics
        .series("kiln_worker_consumer_lag_records", &[("topic", "embedded")])
        .map(|s| (s.labels["partition"].clone(), s.value))
        .collect();
    partitions.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        partitions,
        [("0", 0.0), ("1", 0.0), ("2", 0.0), ("3", 0.0)].map(|(p, v)| (p.to_owned(), v))
    );
    assert_eq!(
        metrics.value("kiln_worker_consumer_lag_errors_total", &[]),
        Some(0.0)
    );
    assert!(
        metrics
            .value("kiln_worker_stage_seconds_count", &[("stage", "write")])
            .unwrap()
            >= 1.0
    );
    assert_eq!(
        metrics.value(
            "kiln_build_info",
            &[("version", env!("CARGO_PKG_VERSION")), ("role", "worker")]
        ),
        Some(1.0)
    );
    for other in ["kiln_ingest_", "kiln_query_", "kiln_quota_"] {
        assert!(
            !metrics.types.keys().any(|name| name.starts_with(other)),
            "a worker exports {other}*: {:?}",
            metrics.types.keys()
        );
    }
    // The worker's listener serves its health check, and no API.
    let (status, _) = support::request(worker.url(), "GET", "/healthz", None, &[], b"");
    assert_eq!(status, 200);
    let (status, _) = support::request(worker.url(), "GET", "/api/v1/top", None, &[], b"");
    assert_eq!(status, 404);
}

/// Scrapes until `done` holds of the scrape (for what settles shortly
/// after a query sees the data: the commit follows the store's sync).
fn scrape_until(url: &str, bearer: Option<&str>, done: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = Exposition::scrape_with(url, bearer);
        if done(&metrics) || Instant::now() > deadline {
            return metrics;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
