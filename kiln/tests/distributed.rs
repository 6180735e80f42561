//! Distributed mode end to end: tansu (Kafka), PostgreSQL, one gateway, two
//! workers and two query nodes that share scans (`--peers`), each a
//! separate `kiln` process.
//!
//! Runs when `KILN_TEST_KAFKA` and `KILN_TEST_POSTGRES` name a broker and a
//! server (scripts/kafka-test-server.sh and scripts/pg-test-server.sh print
//! them); skipped with a message otherwise. Each run gets a topic and a
//! database of its own.

mod support;
mod support_distributed;
mod support_otlp;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_agent::{Delivery, HttpSink, Sink, Spool};
use kiln_model::{Batch, BatchBuilder, Frame, FrameKind, LabelSet, label_names};
use support::{Exposition, aggregate};
use support_distributed::{
    ADMIN_TOKEN, BUS_KEY, CLUSTER_SECRET, Role, Tenant, collapsed, create_tenant, free_addr,
    fresh_database, get, http, new_tenant, post, servers, unique,
};

/// Hosts of the synthetic fleet, and the batches each sends.
const HOSTS: usize = 12;
const INTERVALS: usize = 10;
/// Time between one batch of the fleet and the next (host after host,
/// interval after interval): ten minutes, so that the fleet's data covers
/// about 20 hours of the last day, each a storage partition. Queries scan
/// only the hours that hold data; the query nodes spread those over each
/// other by rendezvous hashing, and with that many, each node owns some
/// (all 20 on one of two nodes: about one run in 500 000).
const BATCH_GAP: Duration = Duration::from_secs(10 * 60);
/// How long the test waits for the cluster to catch up before failing
/// (a hang guard, not a performance check).
const CATCH_UP: Duration = Duration::from_secs(180);

/// The cluster: its processes and the URLs they were given.
struct Cluster {
    gateway: Role,
    workers: Vec<Role>,
    /// Query nodes that are each other's peers.
    queries: Vec<Role>,
    /// Each query node's peers' listener (`/internal/` only).
    peer_urls: Vec<String>,
    /// A key (ingest and read) of a tenant made for this run.
    key: String,
    /// That tenant's name.
    tenant: String,
    /// The topic the bus is on.
    topic: String,
    /// Where the gateway serves OTLP over gRPC.
    otlp_grpc: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start(kafka: &str, postgres: &str) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh_database(postgres);
        let topic = format!("dist-{}", unique());
        let bus = format!("{kafka}/{topic}?partitions=4");
        let objects = format!("file://{}", dir.path().join("objects").display());
        let migrated = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["store", "migrate", "--store", &store])
            .status()
            .unwrap();
        assert!(migrated.success(), "kiln store migrate failed");
        let backends = ["--bus", &bus, "--store", &store, "--objects", &objects];
        // Tenants and keys live beside the profiles, in the same database.
        let metadata = ["--metadata", &store, "--admin-token", ADMIN_TOKEN];
        let bus_key = ["--bus-key", BUS_KEY];
        let otlp_grpc = free_addr();
        let grpc_listen = otlp_grpc.to_string();
        let gateway = Role::start(
            "gateway",
            &[
                &["gateway", "--listen", "127.0.0.1:0"][..],
                &["--otlp-grpc-listen", &grpc_listen],
                &backends,
                &metadata,
                &bus_key,
            ]
            .concat(),
        );
        // Each worker serves its /metrics on a port of its own.
        let worker = ["worker", "--listen", "127.0.0.1:0"];
        let workers = (0..2)
            .map(|_| Role::start("worker", &[&worker[..], &backends, &bus_key].concat()))
            .collect();
        // Each query node serves its peers on a listener of its own.
        let addrs = [free_addr(), free_addr()];
        let urls = addrs.map(|a| format!("http://{a}"));
        let peers = urls.join(",");
        let queries = addrs
            .iter()
            .zip(&urls)
            .map(|(addr, url)| {
                Role::start(
                    "query",
                    &[
                        "query",
                        "--listen",
                        "127.0.0.1:0",
                        "--peer-listen",
                        &addr.to_string(),
                        "--store",
                        &store,
                        "--objects",
                        &objects,
                        "--peers",
                        &peers,
                        "--advertise",
                        url,
                        "--cluster-secret",
                        CLUSTER_SECRET,
                        "--metadata",
                        &store,
                        "--admin-token",
                        ADMIN_TOKEN,
                    ],
                )
            })
            .collect();
        let Tenant { name, key } = new_tenant(gateway.url());
        Cluster {
            gateway,
            workers,
            queries,
            peer_urls: urls.to_vec(),
            key,
            tenant: name,
            topic,
            otlp_grpc,
            _dir: dir,
        }
    }
}

/// The synthetic fleet: every host sends `INTERVALS` batches of distinct
/// timestamps, the fleet's batches [`BATCH_GAP`] apart, so that the data
/// spans many hours (storage partitions) of the last day; each batch
/// draws stacks from a small population, so batches share dictionary
/// entries (what the workers' dedup caches skip). Returns the batches and
/// the expected per-stack totals.
fn fleet(run: &str) -> (Vec<Vec<u8>>, Vec<String>) {
    let functions = [
        "main", "serve", "parse", "encode", "hash", "write", "poll", "alloc",
    ];
    let gap = BATCH_GAP.as_nanos() as i64;
    // The last batch half an hour ago.
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
        - 30 * 60 * 1_000_000_000
        - (INTERVALS * HOSTS - 1) as i64 * gap;
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut batches = Vec::new();
    for interval in 0..INTERVALS {
        for host in 0..HOSTS {
            let ts = start + (interval * HOSTS + host) as i64 * gap;
            let host_name = format!("host-{host:02}");
            let labels = LabelSet::new()
                .with(label_names::HOST, host_name.clone())
                .with("run", run);
            let mut b = BatchBuilder::new(host_name, ts, 10_000_000);
            for k in 0..40usize {
                // A deterministic walk: stack shape from host, interval, k.
                let seed = host * 7 + interval * 3 + k;
                let depth = 2 + seed % 4;
                let names: Vec<&str> = (0..depth)
                    .map(|d| functions[(seed / (d + 1) + d) % functions.len()])
                    .collect();
                let frames: Vec<Frame> = names
                    .iter()
                    .map(|n| Frame::named(FrameKind::Native, *n))
                    .collect();
                let count = 1 + (seed % 5) as u64;
                // Distinct timestamps within the batch keep samples apart.
                b.add(ts + k as i64 * 1000, &frames, &labels, count);
                *expected.entry(names.join(";")).or_default() += count;
            }
            batches.push(b.finish().encode());
        }
    }
    let expected = expected
        .into_iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    (batches, expected)
}

/// A query node's scan counters (`GET /internal/v1/scan-counts`).
fn scan_counts(query: &str) -> serde_json::Value {
    let mut response = http()
        .get(format!("{query}/internal/v1/scan-counts"))
        .header("x-kiln-cluster-secret", CLUSTER_SECRET)
        .call()
        .expect("GET scan-counts");
    assert_eq!(response.status(), 200);
    serde_json::from_reader(response.body_mut().as_reader()).unwrap()
}

/// Streams a fleet through the gateway, SIGKILLs a worker halfway, and
/// finds every stack's total exactly: nothing lost with the dead worker's
/// uncommitted batches, nothing counted twice when the other rewrites
/// them. Both query nodes give the same totals, each having sent scans to
/// the other; with one of them SIGKILLed, the other still does. Then the
/// import checks of embedded mode, against this cluster.
#[test]
fn a_worker_killed_mid_stream_loses_and_doubles_nothing() {
    let Some((kafka, postgres)) = servers() else {
        return;
    };
    let mut cluster = Cluster::start(&kafka, &postgres);
    let run = unique();
    let (batches, expected) = fleet(&run);
    let gateway = cluster.gateway.url().to_owned();
    let query = cluster.queries[0].url().to_owned();
    let peer = cluster.queries[1].url().to_owned();
    let key = cluster.key.clone();

    for (i, batch) in batches.iter().enumerate() {
        if i == batches.len() / 2 {
            cluster.workers[0].kill9();
        }
        let (status, body) = post(&gateway, &key, "/api/v1/ingest", batch);
        assert_eq!(status, 200, "batch {i}: {body}");
    }

    let filter = format!("&run={run}");
    let started = Instant::now();
    loop {
        let got = collapsed(&query, &key, &filter);
        if got == expected {
            break;
        }
        let total = |lines: &[String]| -> u64 {
            lines
                .iter()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum()
        };
        assert!(
            total(&got) <= total(&expected),
            "more samples than were sent: {} > {}",
            total(&got),
            total(&expected)
        );
        assert!(
            started.elapsed() < CATCH_UP,
            "the surviving worker did not catch up: {} of {} samples",
            total(&got),
            total(&expected)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    assert_eq!(
        collapsed(&peer, &key, &filter),
        expected,
        "the second query node"
    );
    metrics_checks(&cluster, &batches);
    // The scope the gateway authenticated crossed the bus: another
    // tenant's key sees none of it, and no key is let in at all.
    let other = create_tenant(&gateway);
    assert_eq!(collapsed(&query, &other, &filter), Vec::<String>::new());
    let anonymous = http()
        .get(format!("{query}/api/v1/flamegraph?from=now-1d"))
        .call()
        .expect("GET");
    assert_eq!(anonymous.status(), 401);
    for node in &cluster.peer_urls {
        let counts = scan_counts(node);
        assert!(counts["remote"].as_u64() > Some(0), "{node}: {counts}");
        assert!(counts["served"].as_u64() > Some(0), "{node}: {counts}");
        assert_eq!(counts["fallback"], 0, "{node}: {counts}");
    }
    // The peers' routes are not on the public listener.
    let public = http()
        .get(format!("{peer}/internal/v1/scan-counts"))
        .header("x-kiln-cluster-secret", CLUSTER_SECRET)
        .call()
        .expect("GET");
    assert_eq!(public.status(), 404);
    cluster.queries[1].kill9();
    assert_eq!(
        collapsed(&query, &key, &filter),
        expected,
        "with its peer dead"
    );
    assert!(scan_counts(&cluster.peer_urls[0])["fallback"].as_u64() > Some(0));

    import_checks(&gateway, &query, &key);
    protocol_checks(&gateway, cluster.otlp_grpc, &query, &key);
}

/// Each role's `/metrics` after the fleet: the gateway counted every
/// sample and byte of the tenant, the surviving worker holds all four
/// partitions and its lag per partition drains to zero (read from Kafka:
/// the high watermark against the group's commits), and the query node
/// timed its flamegraphs.
fn metrics_checks(cluster: &Cluster, batches: &[Vec<u8>]) {
    // With the admin token: tenants by name (others see them hashed).
    let gateway = Exposition::scrape_with(cluster.gateway.url(), Some(ADMIN_TOKEN));
    let tenant = [("tenant", cluster.tenant.as_str())];
    let samples: u64 = batches
        .iter()
        .map(|b| Batch::decode(b).unwrap().sample_count())
        .sum();
    assert_eq!(
        gateway.value("kiln_ingest_samples_total", &tenant),
        Some(samples as f64)
    );
    let bytes: usize = batches.iter().map(Vec::len).sum();
    assert_eq!(
        gateway.value("kiln_ingest_bytes_total", &tenant),
        Some(bytes as f64)
    );
    assert_eq!(
        gateway.value("kiln_build_info", &[("role", "gateway")]),
        Some(1.0)
    );

    // workers[0] was SIGKILLed halfway; the other took its partitions.
    let worker = cluster.workers[1].url();
    let topic = [("topic", cluster.topic.as_str())];
    let started = Instant::now();
    let lag = loop {
        let metrics = Exposition::scrape(worker);
        let lag: Vec<(String, f64)> = metrics
            .series("kiln_worker_consumer_lag_records", &topic)
            .map(|s| (s.labels["partition"].clone(), s.value))
            .collect();
        if lag.len() == 4 && lag.iter().all(|(_, v)| *v == 0.0) {
            break lag;
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "the surviving worker's lag did not drain: {lag:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut partitions: Vec<&str> = lag.iter().map(|(p, _)| p.as_str()).collect();
    partitions.sort_unstable();
    assert_eq!(partitions, ["0", "1", "2", "3"]);

    let query = Exposition::scrape(cluster.queries[0].url());
    assert!(
        query
            .value(
                "kiln_query_seconds_count",
                &[("route", "/api/v1/flamegraph")]
            )
            .unwrap()
            >= 1.0
    );
}

/// An agent's HTTP sink through a gateway (agents never publish to Kafka
/// themselves): batches spooled while the gateway was unreachable, and
/// while the agent's key was refused, are all delivered once both are
/// right, consumed by a worker under the key's tenant, and queryable with
/// exact totals.
#[test]
fn an_agents_spooled_batches_reach_the_workers_through_the_gateway() {
    let Some((kafka, postgres)) = servers() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = fresh_database(&postgres);
    let migrated = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["store", "migrate", "--store", &store])
        .status()
        .unwrap();
    assert!(migrated.success(), "kiln store migrate failed");
    let bus = format!("{kafka}/agent-{}?partitions=2", unique());
    let objects = format!("file://{}", dir.path().join("objects").display());
    let backends = ["--bus", &bus, "--store", &store, "--objects", &objects];
    let metadata = ["--metadata", &store, "--admin-token", ADMIN_TOKEN];
    let bus_key = ["--bus-key", BUS_KEY];
    let worker = ["worker", "--listen", "127.0.0.1:0"];
    let _worker = Role::start("worker", &[&worker[..], &backends, &bus_key].concat());
    let gateway = Role::start(
        "gateway",
        &[
            &["gateway", "--listen", "127.0.0.1:0"][..],
            &backends,
            &metadata,
            &bus_key,
        ]
        .concat(),
    );
    let query = Role::start(
        "query",
        &[
            &[
                "query",
                "--listen",
                "127.0.0.1:0",
                "--store",
                &store,
                "--objects",
                &objects,
            ][..],
            &metadata,
        ]
        .concat(),
    );
    let key = create_tenant(gateway.url());

    let run = unique();
    let (encoded, expected) = fleet(&run);
    let batches: Vec<Batch> = encoded.iter().map(|b| Batch::decode(b).unwrap()).collect();
    let spool_dir = dir.path().join("spool");
    let sink = |server: &str, key: &str| {
        let spool = Spool::open(&spool_dir, 1 << 26).unwrap();
        HttpSink::new(server, Some(key), Some(spool))
    };
    {
        // Port 9 (discard) on loopback: nothing listens there.
        let mut down = sink("http://127.0.0.1:9", &key);
        for batch in &batches[..2] {
            assert_eq!(down.send(batch).unwrap(), Delivery::Spooled);
        }
    }
    {
        // The gateway, with a key it does not know: kept, not dropped.
        let unknown = format!("kiln_{}", "0".repeat(64));
        let mut refused = sink(gateway.url(), &unknown);
        assert_eq!(refused.send(&batches[2]).unwrap(), Delivery::Spooled);
    }
    // The agent again, with the gateway and its key right: the spool goes
    // first.
    let mut up = sink(gateway.url(), &key);
    for batch in &batches[3..] {
        assert_eq!(up.send(batch).unwrap(), Delivery::Delivered);
    }
    assert!(up.spool().unwrap().files().unwrap().is_empty());

    let filter = format!("&run={run}");
    let started = Instant::now();
    while collapsed(query.url(), &key, &filter) != expected {
        assert!(
            started.elapsed() < CATCH_UP,
            "the worker did not write the agent's batches: {:?}",
            collapsed(query.url(), &key, &filter)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The embedded mode's import-and-read-back checks, through the gateway
/// and the query node. Each check labels its samples, so they do not see
/// the fleet's or each other's.
fn import_checks(gateway: &str, query: &str, key: &str) {
    let check = unique();
    // Collapsed stacks read back exactly, queryable once the import answers.
    let input = "main;parse;read_line 7\nmain;compute 12\nmain 1\nmain;compute 3\nsys_read_[k] 2\n";
    let (status, body) = post(
        gateway,
        key,
        &format!("/api/v1/import?format=collapsed&check={check}"),
        input.as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(summary["samples"], 25);
    assert_eq!(summary["queryable"], true, "{summary}");
    assert_eq!(
        collapsed(query, key, &format!("&check={check}")),
        aggregate(input.lines().map(str::to_owned))
    );

    // Label filters select samples.
    for (process, body) in [("web", "a;b 5\n"), ("db", "a;c 2\n")] {
        let (status, text) = post(
            gateway,
            key,
            &format!("/api/v1/import?format=collapsed&check={check}-l&process={process}"),
            body.as_bytes(),
        );
        assert_eq!(status, 200, "{text}");
    }
    assert_eq!(
        collapsed(query, key, &format!("&check={check}-l&process=web")),
        ["a;b 5"]
    );
    assert_eq!(
        collapsed(query, key, &format!("&check={check}-l")),
        ["a;b 5", "a;c 2"]
    );

    // Malformed input is refused by name and changes nothing.
    let (status, text) = post(
        gateway,
        key,
        &format!("/api/v1/import?format=collapsed&check={check}"),
        b"a;b 3\na;b three\n",
    );
    assert_eq!(status, 400, "{text}");
    let (status, text) = post(gateway, key, "/api/v1/import", b"a 1\n");
    assert_eq!(status, 400);
    assert!(text.contains("format"), "{text}");
    assert_eq!(
        collapsed(query, key, &format!("&check={check}")),
        aggregate(input.lines().map(str::to_owned))
    );

    // Top functions on the query node.
    let (status, body) = get(
        query,
        key,
        &format!("/api/v1/top?from=now-1h&limit=1&check={check}"),
    );
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rows[0]["name"], "compute");
    assert_eq!(rows[0]["self_samples"], 15);

    // Each role serves its own part of the API.
    assert_eq!(get(gateway, key, "/api/v1/flamegraph?from=now-1h").0, 404);
    assert_eq!(
        post(query, key, "/api/v1/import?format=collapsed", b"a 1\n").0,
        404
    );
}

/// The other ways in, through the gateway and read back from the query
/// node: OTLP/HTTP, OTLP over the gateway's gRPC listener, and
/// Pyroscope's `/ingest` with the key as basic auth.
fn protocol_checks(gateway: &str, grpc: std::net::SocketAddr, query: &str, key: &str) {
    use std::io::Write;
    let check = unique();
    let profile = |service: &str, leaf: &'static str, events: u64| {
        support_otlp::request(
            "dist-host",
            service,
            "worker",
            &[&[(&["main.main", leaf], events)]],
            None,
        )
    };
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&prost::Message::encode_to_vec(&profile(
        &format!("http-{check}"),
        "main.serve",
        4,
    )))
    .unwrap();
    let response = http()
        .post(format!("{gateway}/v1development/profiles"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "gzip")
        .send(&gzip.finish().unwrap()[..])
        .expect("POST");
    assert_eq!(response.status().as_u16(), 200);

    let answer = support_otlp::grpc_export_to(
        grpc,
        Some(key),
        profile(&format!("grpc-{check}"), "main.render", 6),
        Some(tonic::codec::CompressionEncoding::Zstd),
    )
    .expect("Export through the gateway");
    assert_eq!(answer.partial_success, None);

    let basic = base64_basic("kiln", key);
    let response = http()
        .post(format!(
            "{gateway}/ingest?name=pyro-{check}%7Benv%3Ddist%7D&format=folded&sampleRate=100"
        ))
        .header("authorization", format!("Basic {basic}"))
        .send(&b"main;work 3\n"[..])
        .expect("POST");
    assert_eq!(response.status().as_u16(), 200);

    for (filter, expected) in [
        (format!("&service=http-{check}"), "main.main;main.serve 4"),
        (format!("&service=grpc-{check}"), "main.main;main.render 6"),
        (format!("&service=pyro-{check}&env=dist"), "main;work 3"),
    ] {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let got = collapsed(query, key, &filter);
            if got == [expected] {
                break;
            }
            assert!(Instant::now() < deadline, "{filter}: {got:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    println!("through the gateway: OTLP/HTTP, OTLP over gRPC and Pyroscope read back exactly");
}

/// `user:password` as HTTP basic auth sends it (base64).
fn base64_basic(user: &str, password: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// Bad URLs fail at once, naming the flag and what is wrong; needs no
/// servers.
#[test]
fn roles_refuse_bad_urls_by_name() {
    let metadata = ["--metadata", "file:///m/metadata.json"];
    let bus_key = ["--bus-key", BUS_KEY];
    let query = [
        &["query", "--store", "file:///s", "--objects", "file:///o"][..],
        &metadata,
    ]
    .concat();
    let gateway = [
        &["gateway", "--bus", "kafka://h:1", "--store", "file:///s"][..],
        &metadata,
        &bus_key,
    ]
    .concat();
    let secret = ["--cluster-secret", CLUSTER_SECRET];
    let peers = [
        "--peers",
        "http://a:1,http://b:1",
        "--peer-listen",
        "127.0.0.1:0",
    ];
    let cases: [(&[&str], &str); 11] = [
        (
            &[
                &gateway[..],
                &["--objects", "file:///o", "--query-nodes", "http://a:1"],
            ]
            .concat(),
            "--cluster-secret",
        ),
        (&[&query[..], &peers].concat(), "--advertise"),
        (
            &[&query[..], &peers, &["--advertise", "https://a:1"], &secret].concat(),
            "peer URL \"https://a:1\" is not http://HOST:PORT",
        ),
        (
            &[
                &query[..],
                &peers,
                &["--advertise", "http://a:1", "--cluster-secret", "x"],
            ]
            .concat(),
            "at least 16 characters",
        ),
        (
            &[
                &[
                    "worker",
                    "--bus",
                    "amqp://h:1",
                    "--store",
                    "file:///s",
                    "--objects",
                    "file:///o",
                ][..],
                &bus_key,
            ]
            .concat(),
            "bad --bus URL \"amqp://h:1\"",
        ),
        (
            &[
                &["query", "--store", "mysql://h/db", "--objects", "file:///o"][..],
                &metadata,
            ]
            .concat(),
            "bad --store URL",
        ),
        (
            &[&gateway[..], &["--objects", "gs://b"]].concat(),
            "bad --objects URL",
        ),
        (
            &[
                "query",
                "--store",
                "file:///s",
                "--objects",
                "file:///o",
                "--metadata",
                "mysql://h/db",
            ],
            "bad --metadata URL",
        ),
        // Gateways and query nodes check keys; gateways and workers share
        // the bus key: neither may be left out.
        (
            &["query", "--store", "file:///s", "--objects", "file:///o"],
            "--metadata",
        ),
        (
            &[
                "gateway",
                "--bus",
                "kafka://h:1",
                "--store",
                "file:///s",
                "--objects",
                "file:///o",
                "--metadata",
                "file:///m/metadata.json",
            ],
            "--bus-key",
        ),
        (
            &[
                "worker",
                "--bus",
                "kafka://h:1",
                "--store",
                "file:///s",
                "--objects",
                "file:///o",
            ],
            "--bus-key",
        ),
    ];
    for (args, message) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .env_remove("KILN_METADATA")
            .env_remove("KILN_BUS_KEY")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// A broker of this test's own (scripts/kafka-test-server.sh), to stop.
struct PrivateBroker {
    dir: tempfile::TempDir,
}

impl PrivateBroker {
    fn script() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka-test-server.sh")
    }

    fn start() -> (PrivateBroker, String) {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(Self::script())
            .arg("start")
            .arg(dir.path())
            .output()
            .expect("run scripts/kafka-test-server.sh");
        assert!(
            out.status.success(),
            "kafka-test-server.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        (PrivateBroker { dir }, url)
    }

    fn stop(&self) {
        let status = Command::new(Self::script())
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "kafka-test-server.sh stop failed");
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

/// With the broker gone, the gateway answers 503 with Retry-After (what
/// agents spool and retry on: agent/src/sink.rs) once the publish times
/// out, rather than holding the agent or dropping its batch.
#[test]
fn the_gateway_answers_503_while_kafka_is_down() {
    let Some(_) = servers() else { return };
    let (broker, kafka) = PrivateBroker::start();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().join("store").display());
    let objects = format!("file://{}", dir.path().join("objects").display());
    let metadata = format!("file://{}", dir.path().join("metadata.json").display());
    let bus = format!("{kafka}/down-{}?partitions=1", unique());
    let gateway = Role::start(
        "gateway",
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--bus",
            &bus,
            "--store",
            &store,
            "--objects",
            &objects,
            "--metadata",
            &metadata,
            "--admin-token",
            ADMIN_TOKEN,
            "--bus-key",
            BUS_KEY,
        ],
    );
    let key = create_tenant(gateway.url());
    let (batch, _) = fleet("down");
    let (status, body) = post(gateway.url(), &key, "/api/v1/ingest", &batch[0]);
    assert_eq!(status, 200, "{body}");

    broker.stop();
    let mut response = http()
        .post(format!("{}/api/v1/ingest", gateway.url()))
        .header("authorization", format!("Bearer {key}"))
        .send(&batch[1][..])
        .expect("POST");
    assert_eq!(response.status().as_u16(), 503);
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(retry_after.as_deref(), Some("5"));
    let mut body = String::new();
    response
        .body_mut()
        .as_reader()
        .read_to_string(&mut body)
        .unwrap();
    assert!(body.contains("Kafka: cannot publish"), "{body}");
}
