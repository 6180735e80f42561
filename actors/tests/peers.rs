//! Query nodes that share scans (`kiln query --peers`): three query nodes
//! in this process, each serving HTTP on a loopback port, over one shared
//! embedded store, plus a node without peers as the reference.

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use kiln_actors::query::{
    CLUSTER_SECRET_HEADER, ClusterSecret, PeerOptions, QueryNodes, ScanCounts,
};
use kiln_actors::roles::{self, HttpOptions};
use kiln_actors::{DEFAULT_PROJECT, DEFAULT_TENANT};
use kiln_model::{BatchBuilder, Executable, FileId, Frame, FrameKind, LabelSet};
use kiln_storage::{Roles, Scope};
use kiln_symbolizer_workers::SymbolizerConfig;
use kiln_test_support::programs::ALPHA_BETA;
use kiln_test_support::{CBuild, run};

use common::{Credentials, Pipeline, T0};

const SECRET: &str = "peers-test-secret-0123456789";
/// The first hour of the data, [`T0`] in unix seconds (hour-aligned:
/// 500 000 h).
const T0_S: i64 = T0 / 1_000_000_000;
/// Hours of data: one storage partition, so one scan, each.
const HOURS: i64 = 24;

/// The shared store, fed through the real ingest pipeline, for the scope
/// of the key the tests send, and that key.
async fn data() -> (Pipeline, Credentials) {
    let data = Pipeline::for_scope(Scope::new(DEFAULT_TENANT, DEFAULT_PROJECT).unwrap(), 2).await;
    let access = Credentials::new(data.dir.path(), &data.scope, Roles::INGEST_READ).await;
    (data, access)
}

/// One sample stack per hour, over [`HOURS`] hours, on two hosts;
/// returns the collapsed lines the whole range must show.
async fn write_hours(data: &Pipeline) -> Vec<String> {
    let mut expected = BTreeMap::<String, u64>::new();
    let mut b = BatchBuilder::new("host", T0_S * 1_000_000_000, 10_000_000);
    for hour in 0..HOURS {
        let leaf = format!("work{}", hour % 5);
        let host = if hour % 2 == 0 { "a" } else { "b" };
        let frames = [
            Frame::named(FrameKind::Native, "main"),
            Frame::named(FrameKind::Native, leaf.as_str()),
        ];
        let count = hour as u64 + 1;
        let ts = (T0_S + hour * 3600 + 59) * 1_000_000_000;
        b.add(ts, &frames, &LabelSet::new().with("host", host), count);
        *expected.entry(format!("main;{leaf}")).or_default() += count;
    }
    data.publish("host", &b.finish().encode()).await;
    expected
        .into_iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect()
}

/// A started query node, and the key the tests send it.
struct Node {
    /// The public API.
    url: String,
    /// The peers' listener (`/internal/` only), for a node with peers.
    peer_url: Option<String>,
    key: String,
    handle: ServerHandle,
}

impl Node {
    fn peer_url(&self) -> &str {
        self.peer_url.as_deref().expect("a node with peers")
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn start_node(
    data: &Pipeline,
    access: &Credentials,
    listen: SocketAddr,
    peers: Option<PeerOptions>,
) -> Node {
    let running = roles::start_query(
        data.store.clone(),
        data.objects.clone(),
        access.metadata.clone(),
        2,
        SymbolizerConfig::default(),
        peers,
        HttpOptions {
            workers: 1,
            ..HttpOptions::new(listen)
        },
    )
    .await
    .unwrap();
    let handle = running.server.handle();
    actix_rt::spawn(running.server);
    Node {
        url: format!("http://{}", running.local_addr),
        peer_url: running.peer_addr.map(|a| format!("http://{a}")),
        key: access.key.clone(),
        handle,
    }
}

/// `n` query nodes that are each other's peers, each serving them on a
/// listener of its own.
async fn start_peers(data: &Pipeline, access: &Credentials, n: usize) -> Vec<Node> {
    let addrs: Vec<SocketAddr> = (0..n).map(|_| free_addr()).collect();
    let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let mut nodes = Vec::new();
    for (addr, url) in addrs.iter().zip(&urls) {
        let options = PeerOptions {
            listen: *addr,
            advertise: url.clone(),
            peers: urls.clone(),
            secret: ClusterSecret::new(SECRET).unwrap(),
            timeout: Duration::from_secs(5),
        };
        let public = "127.0.0.1:0".parse().unwrap();
        nodes.push(start_node(data, access, public, Some(options)).await);
    }
    nodes
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// `GET url` with `key`.
async fn get(url: &str, key: &str) -> (u16, String) {
    let response = client().get(url).bearer_auth(key).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn range() -> String {
    format!("from={T0_S}&to={}", T0_S + HOURS * 3600)
}

async fn collapsed(node: &Node, filter: &str) -> Vec<String> {
    let (status, body) = get(
        &format!(
            "{}/api/v1/flamegraph?format=collapsed&{}{filter}",
            node.url,
            range()
        ),
        &node.key,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body.lines().map(str::to_owned).collect()
}

async fn scan_counts(node: &Node) -> ScanCounts {
    let response = client()
        .get(format!("{}/internal/v1/scan-counts", node.peer_url()))
        .header(CLUSTER_SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

// Guards the point of peers: every node answers the same exact totals,
// and each query's scans were spread over all three nodes rather than run
// where the query arrived.
#[actix_rt::test]
async fn scans_are_spread_over_peers_and_every_node_answers_the_same() {
    let (data, access) = data().await;
    let expected = write_hours(&data).await;
    let nodes = start_peers(&data, &access, 3).await;
    let reference = start_node(&data, &access, free_addr(), None).await;

    for node in &nodes {
        assert_eq!(collapsed(node, "").await, expected, "node {}", node.url);
    }
    // Per-time-bucket and per-label-set partials cross the wire too.
    for path in ["timeline", "labels"] {
        let url = |n: &Node| format!("{}/api/v1/{path}?{}&step=1h", n.url, range());
        let want = get(&url(&reference), &access.key).await;
        assert_eq!(want.0, 200, "{}", want.1);
        for node in &nodes {
            assert_eq!(
                get(&url(node), &access.key).await,
                want,
                "{path} on {}",
                node.url
            );
        }
    }
    assert_eq!(
        collapsed(&nodes[1], "&host=a").await,
        collapsed(&reference, "&host=a").await
    );

    // Each node was asked a flamegraph, a timeline and a labels query,
    // node 1 also the filtered flamegraph: one scan per hour each. Every
    // scan ran exactly once, on its owner.
    let counts: Vec<ScanCounts> =
        futures_util::future::join_all(nodes.iter().map(scan_counts)).await;
    let asked: u64 = counts.iter().map(|c| c.local + c.remote).sum();
    let served: u64 = counts.iter().map(|c| c.served).sum();
    let remote: u64 = counts.iter().map(|c| c.remote).sum();
    assert_eq!(asked, (3 * 3 + 1) * HOURS as u64, "{counts:?}");
    assert_eq!(served, remote, "{counts:?}");
    for (node, c) in nodes.iter().zip(&counts) {
        assert_eq!(c.fallback, 0, "{}: {c:?}", node.url);
        assert!(c.local > 0, "{} ran none of its own scans: {c:?}", node.url);
        assert!(c.remote > 0, "{} sent no scans to peers: {c:?}", node.url);
        assert!(c.served > 0, "{} served no peer's scans: {c:?}", node.url);
    }
}

// Guards that a query never fails because a peer died: the dead peer's
// scans run on the asking node, and the totals stay exact.
#[actix_rt::test]
async fn a_dead_peers_scans_run_on_the_asking_node() {
    let (data, access) = data().await;
    let expected = write_hours(&data).await;
    let nodes = start_peers(&data, &access, 3).await;
    nodes[2].handle.stop(false).await;

    assert_eq!(collapsed(&nodes[0], "").await, expected);
    let first = scan_counts(&nodes[0]).await;
    assert!(first.fallback > 0, "{first:?}");
    assert_eq!(first.local + first.remote + first.fallback, HOURS as u64);
    // Asked again, the dead peer is not tried until its retry time.
    assert_eq!(collapsed(&nodes[0], "").await, expected);
    let second = scan_counts(&nodes[0]).await;
    assert_eq!(second.fallback, 2 * first.fallback, "{second:?}");
}

// Guards tenant isolation: the internal endpoints trust the scope a scan
// names, so a caller without the cluster secret must be refused, and a
// node without peers must not serve them at all.
#[actix_rt::test]
async fn internal_endpoints_need_the_cluster_secret() {
    let (data, access) = data().await;
    let nodes = start_peers(&data, &access, 2).await;
    let alone = start_node(&data, &access, free_addr(), None).await;
    let scan = |node: &Node, secret: Option<&str>| {
        let base = node.peer_url.as_deref().unwrap_or(&node.url);
        let mut request = client()
            .post(format!("{base}/internal/v1/scan"))
            .body(b"KLNQ\x01\x01garbage".to_vec());
        if let Some(secret) = secret {
            request = request.header(CLUSTER_SECRET_HEADER, secret);
        }
        request.send()
    };
    assert_eq!(scan(&nodes[0], None).await.unwrap().status(), 403);
    let wrong = scan(&nodes[0], Some("peers-test-secret-0123456780"))
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403);
    assert!(wrong.text().await.unwrap().contains("wrong"));
    let garbage = scan(&nodes[0], Some(SECRET)).await.unwrap();
    assert_eq!(garbage.status(), 400);
    assert!(garbage.text().await.unwrap().contains("scan refused"));
    assert_eq!(scan(&alone, Some(SECRET)).await.unwrap().status(), 404);
    // The secret is checked before anything of the body is read, and a
    // body is read under its limit as it inflates: a zstd bomb (1 GiB of
    // zeros in a few dozen KB) costs neither caller memory.
    let bomb = common::zstd_bomb(1 << 30);
    let peak = common::peak_rss();
    for (secret, expected) in [(None, 403), (Some(SECRET), 413)] {
        let mut request = client()
            .post(format!("{}/internal/v1/scan", nodes[0].peer_url()))
            .header("content-encoding", "zstd")
            .body(bomb.clone());
        if let Some(secret) = secret {
            request = request.header(CLUSTER_SECRET_HEADER, secret);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), expected, "a bomb with secret {secret:?}");
    }
    let grown = common::peak_rss().saturating_sub(peak);
    assert!(grown < 256 << 20, "peak RSS grew {} MiB", grown >> 20);
    // A percent-encoded path is the path it decodes to: no peer route on
    // the public listener that way either.
    let encoded = client()
        .get(format!("{}/%69nternal/v1/scan-counts", nodes[1].url))
        .header(CLUSTER_SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(encoded.status(), 404);
    let counts = client()
        .get(format!("{}/internal/v1/scan-counts", nodes[1].peer_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(counts.status(), 403);
    // The listeners keep apart: no peer route on the public API, even with
    // the secret, and no API on the peers' listener.
    let public = client()
        .get(format!("{}/internal/v1/scan-counts", nodes[1].url))
        .header(CLUSTER_SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
    let (status, _) = get(
        &format!("{}/api/v1/flamegraph?format=collapsed", nodes[1].peer_url()),
        &nodes[1].key,
    )
    .await;
    assert_eq!(status, 404);
}

/// Builds a small C program with `-g` in `dir`; returns its path and the
/// address of its function `alpha`.
fn build_program(dir: &Path) -> (std::path::PathBuf, u64) {
    let elf = CBuild::cc()
        .args(["-O1", "-g"])
        .program(dir, "prog", ALPHA_BETA);
    let nm = run(std::process::Command::new("nm").arg(&elf));
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let addr = fields.next()?;
            (fields.nth(1)? == "alpha").then(|| u64::from_str_radix(addr, 16).unwrap())
        })
        .expect("alpha in nm's output");
    (elf, addr)
}

/// An encoded batch of 3 samples at the address after `alpha` in the file
/// `file_id` (a return address, as agents send them), with the file's
/// executable record when `with_executable`.
fn alpha_samples(file_id: FileId, alpha: u64, with_executable: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new("host", T0_S * 1_000_000_000, 10_000_000);
    let frame = Frame::Address {
        kind: FrameKind::Native,
        file_id,
        addr: alpha + 1,
    };
    b.add((T0_S + 1) * 1_000_000_000, &[frame], &LabelSet::new(), 3);
    if with_executable {
        b.add_executable(Executable {
            file_id,
            name: "prog".into(),
            build_id: None,
        });
    }
    b.finish().encode()
}

// Guards the symbol-upload notice: a node that just found no symbols for
// a file (and would remember that for 5 s) shows its names as soon as
// they are uploaded to another node.
#[actix_rt::test]
async fn a_symbol_upload_to_one_node_shows_on_its_peers() {
    let (data, access) = data().await;
    let dir = tempfile::tempdir().unwrap();
    let (elf, alpha) = build_program(dir.path());
    let bytes = std::fs::read(&elf).unwrap();
    let file_id = kiln_symbolizer_workers::file_id(&bytes);
    data.publish("host", &alpha_samples(file_id, alpha, true))
        .await;
    let nodes = start_peers(&data, &access, 2).await;

    let before = collapsed(&nodes[1], "").await;
    assert_eq!(before, [format!("prog+{:#x} 3", alpha + 1)]);
    let upload = client()
        .put(format!("{}/api/v1/symbols/{file_id}", nodes[0].url))
        .bearer_auth(&access.key)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 200, "{}", upload.text().await.unwrap());
    assert_eq!(collapsed(&nodes[1], "").await, ["alpha 3"]);
}

// Guards the notice from a gateway, where agents upload their symbols:
// the query nodes it names show the names at once.
#[actix_rt::test]
async fn a_symbol_upload_to_a_gateway_shows_on_the_query_nodes() {
    let (data, access) = data().await;
    let dir = tempfile::tempdir().unwrap();
    let (elf, alpha) = build_program(dir.path());
    let bytes = std::fs::read(&elf).unwrap();
    let file_id = kiln_symbolizer_workers::file_id(&bytes);
    data.publish("host", &alpha_samples(file_id, alpha, false))
        .await;
    let nodes = start_peers(&data, &access, 2).await;
    let gateway = roles::start_gateway(
        data.bus.clone(),
        data.store.clone(),
        data.objects.clone(),
        access.metadata.clone(),
        Some(QueryNodes {
            urls: nodes.iter().map(|n| n.peer_url().to_owned()).collect(),
            secret: ClusterSecret::new(SECRET).unwrap(),
        }),
        HttpOptions {
            workers: 1,
            ..HttpOptions::new(free_addr())
        },
        data.bus_key.clone(),
    )
    .await
    .unwrap();
    let gateway_url = format!("http://{}", gateway.local_addr);
    actix_rt::spawn(gateway.server);

    for node in &nodes {
        assert_eq!(collapsed(node, "").await.len(), 1);
        assert!(!collapsed(node, "").await[0].starts_with("alpha"));
    }
    let upload = client()
        .put(format!("{gateway_url}/api/v1/symbols/{file_id}"))
        .bearer_auth(&access.key)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 200, "{}", upload.text().await.unwrap());
    for node in &nodes {
        assert_eq!(collapsed(node, "").await, ["alpha 3"], "{}", node.url);
    }
}
