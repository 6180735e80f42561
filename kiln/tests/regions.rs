//! Two regions of one deployment, each in its own network namespace with
//! its own processes, as a cloud region runs them: PostgreSQL (profile
//! store and metadata), a Kafka-protocol broker (tansu), an object store
//! directory, `kiln gateway`, `kiln worker` and `kiln query`. The only way
//! between the regions is a relay on the host that holds every chunk 40 ms
//! in each direction, as a link between two cloud regions would (tc netem
//! is the usual tool, but this kernel is built without
//! `CONFIG_NET_SCH_NETEM`; the relay gives the same delay at the TCP
//! level). Gateways pass requests on to the other region's gateway and
//! query nodes to its query node, as the load balancer in front of each
//! region routes them by path.
//!
//! Tenant `alpha` is homed in region a, `beta` in region b. The test
//! checks, and says as it goes:
//! - keys are given tagged with their home region;
//! - forwarding: a tenant's imports and queries sent to the other region
//!   are answered by its home region, the same as there;
//! - residency: the other region keeps nothing of it, byte for byte: not
//!   in its PostgreSQL's files (write-ahead log included), its object
//!   store, its broker's directory, its tenants or its metrics;
//! - a key of a region nobody knows, or a request forwarded twice, is a
//!   421 naming the region;
//! - global symbols (public libraries, no tenant's) uploaded to one
//!   region are pulled by the other, and by a region that was down once
//!   it is back;
//! - region loss: with all of region b's processes stopped, alpha is
//!   served in a as before; beta's requests at a get a 503 with
//!   Retry-After, beta's agent (the agent's own sending code) spools its
//!   batches, and once b is back they are delivered, with b's data kept.
//!
//! Run as root (CI does): it makes network namespaces, and PostgreSQL
//! (Debian's) and tansu (`cargo install`) must be installed, as
//! scripts/setup-tests.sh does.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_agent::{Delivery, HttpSink, Sink, Spool};
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, label_names};
use kiln_test_support::KilnProcess;
use support::request;

/// One way's delay on the link between the regions.
const LINK_DELAY: Duration = Duration::from_millis(40);
/// The ports every region's gateway and query node listen on, inside its
/// namespace.
const GATEWAY_PORT: u16 = 7071;
const QUERY_PORT: u16 = 7072;
/// The operator's token, the same in every region of a deployment (how
/// regions pull each other's global symbols).
const ADMIN_TOKEN: &str = "kiln-regions-test-admin-token";
/// What a region's gateway signs bus records with and its worker checks.
const BUS_KEY: &str = "kiln-regions-test-bus-key";

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the regions test makes network namespaces and must run as root (CI does)"
    );
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("run ip");
    assert!(status.success(), "ip {}: {status}", args.join(" "));
}

/// A region's network namespace, joined to the host by a veth pair:
/// `10.231.N.1` on the host, `10.231.N.2` inside.
struct Namespace {
    name: String,
    host_side: String,
    inside: String,
}

impl Namespace {
    fn create(n: u8) -> Namespace {
        let pid = std::process::id();
        let name = format!("kiln-region-{n}-{pid}");
        // Interface names: 15 bytes at most.
        let host_if = format!("kr{n}h{}", pid % 100_000);
        let ns_if = format!("kr{n}n{}", pid % 100_000);
        let host_side = format!("10.231.{n}.1");
        let inside = format!("10.231.{n}.2");
        ip(&["netns", "add", &name]);
        let namespace = Namespace {
            name: name.clone(),
            host_side: host_side.clone(),
            inside: inside.clone(),
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&["addr", "add", &format!("{host_side}/24"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{inside}/24"),
            "dev",
            &ns_if,
        ]);
        ip(&["-n", &name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        namespace
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth, and with it
        // the host's.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Relays TCP from `listen` to `to`, holding each chunk [`LINK_DELAY`] in
/// each direction: the link between two regions.
fn delay_link(listen: &str, to: String) -> u16 {
    let listener = TcpListener::bind(format!("{listen}:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&to) else {
                continue;
            };
            for (from, into) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                delayed_pump(from, into);
            }
        }
    });
    port
}

/// Copies `from` to `into`, each chunk sent [`LINK_DELAY`] after it came.
fn delayed_pump(mut from: TcpStream, mut into: TcpStream) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + LINK_DELAY, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, chunk) in rx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if into.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = into.shutdown(std::net::Shutdown::Write);
    });
}

/// The repository's `scripts/` (the test servers' start and stop scripts).
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

/// Runs `program ARGS` in the namespace `namespace`; its output, trimmed.
/// Panics, naming the command, when it fails.
fn run_in(namespace: &str, program: &Path, args: &[&str]) -> String {
    let output = Command::new("ip")
        .args(["netns", "exec", namespace])
        .arg(program)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {} in {namespace}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {} in {namespace}: {}",
        program.display(),
        args.join(" "),
        output.status
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// How a region's peers reach it: its gateway and its query node, each
/// through a delaying link on the host. Gateways pass requests on to
/// gateways (ingest, imports, the tenant directory) and query nodes to
/// query nodes (queries, global symbols), as a load balancer in front of
/// each region routes them by path.
#[derive(Clone)]
struct PeerUrls {
    name: &'static str,
    gateway: String,
    query: String,
}

impl PeerUrls {
    /// Links from `from`'s side of the host to `to`'s gateway and query
    /// node.
    fn link(name: &'static str, from: &Namespace, to: &Namespace) -> PeerUrls {
        let url = |port| {
            let link = delay_link(&from.host_side, format!("{}:{port}", to.inside));
            format!("http://{}:{link}", from.host_side)
        };
        PeerUrls {
            name,
            gateway: url(GATEWAY_PORT),
            query: url(QUERY_PORT),
        }
    }
}

/// A region: in its own network namespace, its own PostgreSQL (profile
/// store and metadata), Kafka-protocol broker (tansu), object store
/// directory, `kiln gateway`, `kiln worker` and `kiln query`, each a
/// process of its own.
struct Region {
    name: &'static str,
    /// Everything the region keeps on disk: `pg/` (the database's files,
    /// write-ahead log included), `kafka/`, `objects/`.
    dir: PathBuf,
    gateway: String,
    query: String,
    peer: PeerUrls,
    /// Gateway, worker and query node; killed when dropped.
    roles: Vec<KilnProcess>,
    /// Stopped already (its servers too).
    down: bool,
}

impl Region {
    fn start(name: &'static str, namespace: &Namespace, dir: &Path, peer: PeerUrls) -> Region {
        let ns = namespace.name.as_str();
        std::fs::create_dir_all(dir).unwrap();
        let path = |sub: &str| dir.join(sub).display().to_string();
        let store = run_in(
            ns,
            &scripts().join("pg-test-server.sh"),
            &["start", &path("pg")],
        );
        let broker = run_in(
            ns,
            &scripts().join("kafka-test-server.sh"),
            &["start", &path("kafka")],
        );
        let kiln = Path::new(env!("CARGO_BIN_EXE_kiln"));
        run_in(ns, kiln, &["store", "migrate", "--store", &store]);
        let bus = format!("{broker}/kiln-ingest");
        let objects = format!("file://{}", path("objects"));
        let kiln = kiln.to_str().unwrap();
        let backends = [
            "--store",
            &store,
            "--objects",
            &objects,
            "--bus-key",
            BUS_KEY,
        ];
        let region = [
            "--region",
            name,
            "--peer-region",
            &format!("{}={}", peer.name, peer.gateway),
        ];
        let role = |role: &str, args: &[&[&str]]| {
            let command = [&["netns", "exec", ns, kiln, role][..], &args.concat()].concat();
            KilnProcess::start(
                Path::new("ip"),
                &format!("{role} of region {name}"),
                &command,
            )
        };
        let served = |port| format!("0.0.0.0:{port}");
        let gateway = role(
            "gateway",
            &[
                &["--listen", &served(GATEWAY_PORT), "--bus", &bus],
                &backends,
                &["--metadata", &store, "--admin-token", ADMIN_TOKEN],
                &region,
            ],
        );
        let worker = role(
            "worker",
            &[&["--listen", "127.0.0.1:7073", "--bus", &bus], &backends],
        );
        let query = role(
            "query",
            &[
                &["--listen", &served(QUERY_PORT)],
                &backends[..4],
                &["--metadata", &store, "--admin-token", ADMIN_TOKEN],
                &["--region", name, "--peer-region"],
                &[&format!("{}={}", peer.name, peer.query)],
                &["--global-symbols-every", "1s"],
            ],
        );
        Region {
            name,
            dir: dir.to_owned(),
            gateway: format!("http://{}:{GATEWAY_PORT}", namespace.inside),
            query: format!("http://{}:{QUERY_PORT}", namespace.inside),
            peer,
            roles: vec![gateway, worker, query],
            down: false,
        }
    }

    /// The region goes down, all of it: its three roles are killed
    /// (SIGKILL) and its PostgreSQL and broker stopped. The broker kept its
    /// records in memory, so what it held is gone, as a region that lost
    /// its Kafka cluster; PostgreSQL's data stays. Returns what `start`
    /// needs to bring it back.
    fn stop(mut self) -> (&'static str, PathBuf, PeerUrls) {
        self.shut_down();
        println!(
            "region {} down: its gateway, worker and query node killed (SIGKILL), its PostgreSQL \
             and broker stopped",
            self.name
        );
        (self.name, self.dir.clone(), self.peer.clone())
    }

    fn shut_down(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        // Dropping a role kills it (SIGKILL): no chance to flush or commit.
        self.roles.clear();
        for (script, sub) in [
            ("pg-test-server.sh", "pg"),
            ("kafka-test-server.sh", "kafka"),
        ] {
            let _ = Command::new(scripts().join(script))
                .arg("stop")
                .arg(self.dir.join(sub))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// A new tenant homed here: its key, as given to its owner.
    fn create_tenant(&self, tenant: &str) -> String {
        let (status, text) = request(
            &self.gateway,
            "POST",
            "/api/v1/admin/tenants",
            Some(ADMIN_TOKEN),
            &[],
            format!(r#"{{"tenant":"{tenant}"}}"#).as_bytes(),
        );
        assert_eq!(
            status, 201,
            "creating {tenant} in region {}: {text}",
            self.name
        );
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
        answer["key"].as_str().unwrap().to_owned()
    }

    fn tenants(&self) -> String {
        let (status, text) = request(
            &self.gateway,
            "GET",
            "/api/v1/admin/tenants",
            Some(ADMIN_TOKEN),
            &[],
            b"",
        );
        assert_eq!(status, 200, "{text}");
        text
    }

    /// Uploads `elf` into this region's global store; its file id.
    fn upload_global(&self, elf: &Path) -> String {
        let id = kiln_agent::FileInfo::read(elf, "elf")
            .unwrap()
            .file_id
            .to_string();
        let (status, text) = request(
            &self.gateway,
            "PUT",
            &format!("/api/v1/symbols/global/{id}"),
            Some(ADMIN_TOKEN),
            &[],
            &std::fs::read(elf).unwrap(),
        );
        assert_eq!(
            status, 200,
            "a global upload to region {}: {text}",
            self.name
        );
        id
    }

    /// Waits up to 30 s for this region's global store to hold `id`,
    /// asked with `key` (any key may ask); how long it took.
    fn wait_for_global(&self, id: &str, key: &str) -> Duration {
        let started = Instant::now();
        loop {
            let path = format!("/api/v1/symbols/global/{id}");
            let (status, text) = request(&self.query, "HEAD", &path, Some(key), &[], b"");
            if status == 200 {
                return started.elapsed();
            }
            assert_eq!(status, 404, "{text}");
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "region {} never pulled global symbols {id}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Imports collapsed stacks for `key` at `url`: the status and answer.
fn import(url: &str, key: &str, stacks: &str) -> (u16, String) {
    request(
        url,
        "POST",
        "/api/v1/import?format=collapsed",
        Some(key),
        &[],
        stacks.as_bytes(),
    )
}

/// The day's collapsed stacks of `key`'s tenant, asked at `url`, sorted.
fn collapsed(url: &str, key: &str) -> (u16, Vec<String>) {
    let (status, text) = request(
        url,
        "GET",
        "/api/v1/flamegraph?from=now-1d&format=collapsed",
        Some(key),
        &[],
        b"",
    );
    (status, support::sorted_lines(&text))
}

/// Every file under `dir` holds none of `needle`'s bytes.
fn files_without(dir: &Path, needle: &str) -> Result<(), PathBuf> {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_without(&path, needle)?;
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        {
            return Err(path);
        }
    }
    Ok(())
}

/// Polls `url` until `key`'s collapsed stacks are `want` (30 s at most).
fn wait_for_stacks(url: &str, key: &str, want: &[String], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = collapsed(url, key);
        if got == (200, want.to_vec()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:?}, want {want:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One agent batch of `count` samples of `main;FUNCTION`, stamped now.
fn agent_batch(function: &str, count: u64) -> kiln_model::Batch {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let labels = LabelSet::new().with(label_names::HOST, "beta-host");
    let mut batch = BatchBuilder::new("beta-host".to_owned(), now, 10_000_000);
    let frames = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, function),
    ];
    batch.add(now, &frames, &labels, count);
    batch.finish()
}

#[test]
fn tenants_live_in_their_home_region_and_are_served_from_any() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    // PostgreSQL runs as the postgres user, which must reach its directory.
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (net_a, net_b) = (Namespace::create(1), Namespace::create(2));
    // Each region reaches the other only through the delaying links, which
    // listen on the host's side of its own veth.
    let (peer_b, peer_a) = (
        PeerUrls::link("b", &net_a, &net_b),
        PeerUrls::link("a", &net_b, &net_a),
    );
    let (dir_a, dir_b) = (work.path().join("a"), work.path().join("b"));
    let a = Region::start("a", &net_a, &dir_a, peer_b);
    let b = Region::start("b", &net_b, &dir_b, peer_a);
    println!(
        "regions: a and b, each in its namespace with its own PostgreSQL, broker, object store, \
         gateway, worker and query node"
    );

    // Keys say where their tenant lives.
    let alpha = a.create_tenant("alpha");
    let beta = b.create_tenant("beta");
    assert!(alpha.starts_with("kiln_a_"), "{alpha}");
    assert!(beta.starts_with("kiln_b_"), "{beta}");
    println!("keys: alpha's kiln_a_…, beta's kiln_b_…");

    // The tenant directory: a tenant made at a for its home in b lives in
    // b; every region says where a tenant lives; a name is one across
    // the regions.
    let (status, text) = request(
        &a.gateway,
        "POST",
        "/api/v1/admin/tenants",
        Some(ADMIN_TOKEN),
        &[],
        br#"{"tenant":"gamma","region":"b"}"#,
    );
    assert_eq!(status, 201, "gamma made at a for region b: {text}");
    let gamma: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(
        gamma["key"].as_str().unwrap().starts_with("kiln_b_"),
        "{text}"
    );
    assert!(b.tenants().contains("\"gamma\""), "{}", b.tenants());
    assert!(!a.tenants().contains("gamma"), "{}", a.tenants());
    for (url, tenant, home) in [
        (&a.gateway, "gamma", "b"),
        (&a.query, "gamma", "b"),
        (&b.gateway, "gamma", "b"),
        (&b.query, "alpha", "a"),
    ] {
        let path = format!("/api/v1/admin/tenants/{tenant}/region");
        let (status, text) = request(url, "GET", &path, Some(ADMIN_TOKEN), &[], b"");
        assert_eq!(
            (status, text),
            (200, format!(r#"{{"tenant":"{tenant}","region":"{home}"}}"#)),
            "{tenant}'s region asked at {url}"
        );
    }
    let (status, _) = request(
        &a.gateway,
        "GET",
        "/api/v1/admin/tenants/nobody/region",
        Some(ADMIN_TOKEN),
        &[],
        b"",
    );
    assert_eq!(status, 404);
    let (status, text) = request(
        &b.gateway,
        "POST",
        "/api/v1/admin/tenants",
        Some(ADMIN_TOKEN),
        &[],
        br#"{"tenant":"alpha"}"#,
    );
    assert_eq!(status, 409, "alpha made again in b: {text}");
    assert!(text.contains(r#"region \"a\""#), "{text}");
    println!(
        "tenant directory: gamma made at a for b lives in b, gateways and query nodes of both \
         regions say so, and alpha's name cannot be taken in b (409)"
    );

    // Forwarding: each tenant imports at both regions' gateways, and asks
    // both regions' query nodes.
    const ALPHA_MARKER: &str = "alpha_only_function_7c3e9";
    let alpha_here = format!("main;{ALPHA_MARKER};here 3\n");
    let alpha_there = format!("main;{ALPHA_MARKER};there 5\n");
    for (url, stacks) in [(&a.gateway, &alpha_here), (&b.gateway, &alpha_there)] {
        let (status, text) = import(url, &alpha, stacks);
        assert_eq!(status, 200, "alpha's import at {url}: {text}");
    }
    let (status, text) = import(&a.gateway, &beta, "main;beta_work 7\n");
    assert_eq!(status, 200, "beta's import at region a: {text}");
    let want_alpha = vec![
        format!("main;{ALPHA_MARKER};here 3"),
        format!("main;{ALPHA_MARKER};there 5"),
    ];
    for url in [&a.query, &b.query] {
        assert_eq!(
            collapsed(url, &alpha),
            (200, want_alpha.clone()),
            "alpha at {url}"
        );
        assert_eq!(
            collapsed(url, &beta),
            (200, vec!["main;beta_work 7".to_owned()]),
            "beta at {url}"
        );
    }
    println!(
        "forwarding: alpha's and beta's imports at either region's gateway are queryable at \
         both regions' query nodes"
    );

    // What a forwarded query costs: one round trip between the regions.
    let timed = |url: &str| {
        let started = Instant::now();
        for _ in 0..5 {
            assert_eq!(collapsed(url, &alpha).0, 200);
        }
        started.elapsed() / 5
    };
    let (direct, forwarded) = (timed(&a.query), timed(&b.query));
    println!(
        "query latency: {direct:?} in alpha's home region, {forwarded:?} through region b \
         ({:?} round trip on the link)",
        LINK_DELAY * 2
    );
    assert!(
        forwarded >= LINK_DELAY * 2,
        "the forwarded query did not cross the link"
    );

    // Residency: nothing of alpha in region b, nothing of beta in a.
    assert!(
        !b.tenants().contains("alpha"),
        "region b lists alpha: {}",
        b.tenants()
    );
    assert!(
        !a.tenants().contains("beta"),
        "region a lists beta: {}",
        a.tenants()
    );
    // Scraped with the admin token, which sees tenants by name.
    for url in [&b.gateway, &b.query] {
        let (_, metrics) = request(url, "GET", "/metrics", Some(ADMIN_TOKEN), &[], b"");
        assert!(
            !metrics.contains("tenant=\"alpha\""),
            "region b's {url} counted alpha's requests"
        );
    }
    let (_, metrics_a) = request(&a.gateway, "GET", "/metrics", Some(ADMIN_TOKEN), &[], b"");
    assert!(
        metrics_a.contains("tenant=\"alpha\""),
        "region a's gateway counts alpha's ingest"
    );
    // Byte for byte: alpha's function name is in region a's files (the
    // check can see it) and in none of region b's.
    assert!(
        files_without(&a.dir, ALPHA_MARKER).is_err(),
        "alpha's stacks are not in region a's files: the residency check would see nothing"
    );
    for needle in ["alpha", ALPHA_MARKER] {
        if let Err(file) = files_without(&b.dir, needle) {
            panic!("region b's {} holds {needle:?}", file.display());
        }
    }
    println!(
        "residency: region b's PostgreSQL files (write-ahead log included), object store and \
         broker directory hold no byte of alpha's name or stacks, which region a's do; no \
         tenant or metric of alpha in b, none of beta in a"
    );

    // Keys of regions nobody knows, and requests forwarded twice.
    let stranger = alpha.replacen("kiln_a_", "kiln_zz_", 1);
    let (status, text) = import(&a.gateway, &stranger, "x 1\n");
    assert_eq!(status, 421, "{text}");
    assert!(text.contains("\\\"zz\\\"") || text.contains("zz"), "{text}");
    let (status, text) = request(
        &a.query,
        "GET",
        "/api/v1/whoami",
        Some(&beta),
        &[("x-kiln-forwarded-from", "c")],
        b"",
    );
    assert_eq!(status, 421, "{text}");
    println!("misdirected: a key of an unknown region and a twice-forwarded request are 421");

    // What operators see of it: region a's forwards, by region and outcome.
    let metrics = support::Exposition::scrape(&a.gateway);
    let answered = metrics.sum(
        "kiln_region_forwarded_requests_total",
        &[("region", "b"), ("outcome", "answered")],
    );
    assert!(answered >= 1.0, "region a counted no answered forward to b");
    let misdirected = metrics.sum(
        "kiln_region_forwarded_requests_total",
        &[("region", "unknown"), ("outcome", "misdirected")],
    );
    assert_eq!(
        misdirected, 1.0,
        "the zz key counts once, as region \"unknown\""
    );
    let (_, text) = request(&a.gateway, "GET", "/metrics", None, &[], b"");
    assert!(
        !text.contains("region=\"zz\""),
        "a forged region became a label value"
    );
    println!(
        "metrics: kiln_region_forwarded_requests_total by region and outcome, forged regions as \"unknown\""
    );

    // Global symbols: a public library uploaded to a's global store is
    // pulled by b, checked, and served there.
    let libc_like = Path::new("/usr/bin/true");
    let id = a.upload_global(libc_like);
    let took = b.wait_for_global(&id, &beta);
    let (status, list) = request(
        &b.gateway,
        "GET",
        "/api/v1/symbols/global",
        Some(ADMIN_TOKEN),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{list}");
    assert!(list.contains(&id), "region b's global store: {list}");
    println!("global symbols: uploaded to region a, in region b's global store {took:?} later");

    // Beta's agent, sent (by DNS, say) to region a: its batches are passed
    // on to b.
    let spool_dir = work.path().join("beta-agent-spool");
    let spool = Spool::open(&spool_dir, 1 << 26).unwrap();
    let mut beta_agent = HttpSink::new(&a.gateway, Some(&beta), Some(spool));
    assert_eq!(
        beta_agent
            .send(&agent_batch("beta_agent_tick", 10))
            .unwrap(),
        Delivery::Delivered
    );
    let before_outage = vec![
        "main;beta_agent_tick 10".to_owned(),
        "main;beta_work 7".to_owned(),
    ];
    wait_for_stacks(&b.query, &beta, &before_outage, "beta's agent batch in b");

    // Region loss: all of b stops.
    let (name_b, dir_b, peer_a) = b.stop();
    let (status, text) = import(&a.gateway, &alpha, &alpha_here);
    assert_eq!(status, 200, "alpha, homed in a, with b down: {text}");
    assert_eq!(
        collapsed(&a.query, &alpha).0,
        200,
        "alpha's query with b down"
    );
    let (status, text) = import(&a.gateway, &beta, "main;beta_work 1\n");
    assert_eq!(status, 503, "beta's import at a with b down: {text}");
    assert!(
        text.contains("\\\"b\\\"") || text.contains("region"),
        "{text}"
    );
    for _ in 0..3 {
        assert_eq!(
            beta_agent
                .send(&agent_batch("beta_agent_tick", 10))
                .unwrap(),
            Delivery::Spooled,
            "beta's agent with b down"
        );
    }
    let spooled = beta_agent.spool().unwrap().files().unwrap().len();
    assert_eq!(spooled, 3);
    println!(
        "region loss: with b's processes stopped alpha is served in a; beta's requests at a get \
         503 and beta's agent spools ({spooled} batches)"
    );
    let (status, text) = request(
        &a.gateway,
        "POST",
        "/api/v1/admin/tenants",
        Some(ADMIN_TOKEN),
        &[],
        br#"{"tenant":"delta"}"#,
    );
    assert_eq!(
        status, 503,
        "a tenant made while b cannot check the name: {text}"
    );
    println!(
        "region loss: a new tenant's name cannot be checked against b, so it is not made (503)"
    );

    // A global upload while b is down reaches it once it is back.
    let missed = a.upload_global(Path::new("/usr/bin/env"));

    let b = Region::start(name_b, &net_b, &dir_b, peer_a);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, text) = loop {
        let (status, text) = import(&a.gateway, &beta, "main;beta_work 1\n");
        if status == 200 || Instant::now() > deadline {
            break (status, text);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 200, "beta's import at a once b is back: {text}");
    // The agent's next batch goes after the spooled ones.
    assert_eq!(
        beta_agent
            .send(&agent_batch("beta_agent_tick", 10))
            .unwrap(),
        Delivery::Delivered
    );
    assert!(beta_agent.spool().unwrap().files().unwrap().is_empty());
    let after_return = vec![
        "main;beta_agent_tick 50".to_owned(),
        "main;beta_work 8".to_owned(),
    ];
    wait_for_stacks(
        &b.query,
        &beta,
        &after_return,
        "beta's data from before, during and after b's outage",
    );
    println!(
        "region return: beta's requests at a reach b again, the agent's spooled batches are \
         delivered, and b kept beta's data"
    );
    let took = b.wait_for_global(&missed, &beta);
    println!("global symbols: b pulled the upload it missed while down, {took:?} after its return");
    drop((a, b));
}
