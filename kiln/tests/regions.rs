//! Two regions of one deployment, each a whole Kiln (`kiln up --region`:
//! its own bus, profile store, object store, gateway, worker and query
//! node) in its own network namespace. The only way between them is a
//! relay on the host that holds every chunk 40 ms in each direction, as a
//! link between two cloud regions would (tc netem is the usual tool, but
//! this kernel is built without `CONFIG_NET_SCH_NETEM`; the relay gives
//! the same delay at the TCP level).
//!
//! Tenant `alpha` is homed in region a, `beta` in region b. The test
//! checks, and says as it goes:
//! - keys are given tagged with their home region;
//! - forwarding: a tenant's imports and queries sent to the other region
//!   are answered by its home region, the same as there;
//! - residency: the other region keeps nothing of it (its tenants, its
//!   metrics per tenant, its metadata and data files);
//! - a key of a region nobody knows, or a request forwarded twice, is a
//!   421 naming the region;
//! - global symbols (public libraries, no tenant's) uploaded to one
//!   region are pulled by the other, and by a region that was down once
//!   it is back;
//! - region loss: with region b stopped, alpha is served in a as before,
//!   beta's requests at a get a 503 with Retry-After (agents spool and
//!   retry on it), and once b is back they reach it again, with its data.
//!
//! Run as root (CI does): it makes network namespaces.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::request;

/// One way's delay on the link between the regions.
const LINK_DELAY: Duration = Duration::from_millis(40);
/// The port every region's `kiln up` listens on, inside its namespace.
const PORT: u16 = 7070;
/// The operator's token, the same in every region of a deployment (how
/// regions pull each other's global symbols).
const ADMIN_TOKEN: &str = "kiln-regions-test-admin-token";

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

    /// The region's public URL, as the host (a client) reaches it.
    fn url(&self) -> String {
        format!("http://{}:{PORT}", self.inside)
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

/// A region's `kiln up`, in its namespace.
struct Region {
    name: &'static str,
    child: Child,
    url: String,
    data_dir: PathBuf,
    admin_token: String,
    own_key: String,
}

impl Region {
    fn start(
        name: &'static str,
        namespace: &Namespace,
        data_dir: &Path,
        peer: (&str, String),
    ) -> Region {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &namespace.name])
            .arg(env!("CARGO_BIN_EXE_kiln"))
            .args(["up", "--no-agent", "--listen", &format!("0.0.0.0:{PORT}")])
            .args(["--region", name, "--peer-region"])
            .arg(format!("{}={}", peer.0, peer.1))
            .args(["--admin-token", ADMIN_TOKEN, "--global-symbols-every", "1s"])
            .arg("--data-dir")
            .arg(data_dir)
            .env("KILN_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kiln up in the namespace");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let said = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("region {name}'s kiln up exited before it was up"))
                .unwrap();
            if let Some(region) = line.trim().strip_prefix("region:") {
                break region.trim().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        assert!(
            said.starts_with(name),
            "kiln up says its region is {said:?}"
        );
        let read = |file: &str| {
            std::fs::read_to_string(data_dir.join(file))
                .unwrap()
                .trim()
                .to_owned()
        };
        Region {
            name,
            child,
            url: namespace.url(),
            data_dir: data_dir.to_owned(),
            admin_token: ADMIN_TOKEN.to_owned(),
            own_key: read(kiln_actors::API_KEY_FILE),
        }
    }

    /// A new tenant homed here: its key, as given to its owner.
    fn create_tenant(&self, tenant: &str) -> String {
        let (status, text) = request(
            &self.url,
            "POST",
            "/api/v1/admin/tenants",
            Some(&self.admin_token),
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
            &self.url,
            "GET",
            "/api/v1/admin/tenants",
            Some(&self.admin_token),
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
            &self.url,
            "PUT",
            &format!("/api/v1/symbols/global/{id}"),
            Some(&self.admin_token),
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
            let (status, text) = request(&self.url, "HEAD", &path, Some(key), &[], b"");
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

    fn stop(mut self) -> PathBuf {
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        // The namespace's `ip netns exec` ends with it; its child too.
        self.data_dir.clone()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: as in `stop`.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
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

#[test]
fn tenants_live_in_their_home_region_and_are_served_from_any() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let (net_a, net_b) = (Namespace::create(1), Namespace::create(2));
    // Each region reaches the other only through the delaying link, which
    // listens on the host's side of its own veth.
    let to_b = delay_link(&net_a.host_side, format!("{}:{PORT}", net_b.inside));
    let to_a = delay_link(&net_b.host_side, format!("{}:{PORT}", net_a.inside));
    let peer_b = ("b", format!("http://{}:{to_b}", net_a.host_side));
    let peer_a = ("a", format!("http://{}:{to_a}", net_b.host_side));
    let (dir_a, dir_b) = (work.path().join("a"), work.path().join("b"));
    let a = Region::start("a", &net_a, &dir_a, peer_b.clone());
    let b = Region::start("b", &net_b, &dir_b, peer_a.clone());

    // Keys say where their tenant lives.
    let alpha = a.create_tenant("alpha");
    let beta = b.create_tenant("beta");
    assert!(alpha.starts_with("kiln_a_"), "{alpha}");
    assert!(beta.starts_with("kiln_b_"), "{beta}");
    assert!(
        a.own_key.starts_with("kiln_a_"),
        "kiln up's own key: {}",
        a.own_key
    );
    println!("keys: alpha's kiln_a_…, beta's kiln_b_…, kiln up's own kiln_a_… and kiln_b_…");

    // The tenant directory: a tenant made at a for its home in b lives in
    // b; every region says where a tenant lives; a name is one across
    // the regions.
    let (status, text) = request(
        &a.url,
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
    for (region, tenant, home) in [(&a, "gamma", "b"), (&b, "gamma", "b"), (&b, "alpha", "a")] {
        let path = format!("/api/v1/admin/tenants/{tenant}/region");
        let (status, text) = request(&region.url, "GET", &path, Some(ADMIN_TOKEN), &[], b"");
        assert_eq!(
            (status, text),
            (200, format!(r#"{{"tenant":"{tenant}","region":"{home}"}}"#)),
            "{tenant}'s region asked at {}",
            region.name
        );
    }
    let (status, _) = request(
        &a.url,
        "GET",
        "/api/v1/admin/tenants/nobody/region",
        Some(ADMIN_TOKEN),
        &[],
        b"",
    );
    assert_eq!(status, 404);
    let (status, text) = request(
        &b.url,
        "POST",
        "/api/v1/admin/tenants",
        Some(ADMIN_TOKEN),
        &[],
        br#"{"tenant":"alpha"}"#,
    );
    assert_eq!(status, 409, "alpha made again in b: {text}");
    assert!(text.contains(r#"region \"a\""#), "{text}");
    println!(
        "tenant directory: gamma made at a for b lives in b, both regions say so, \
         and alpha's name cannot be taken in b (409)"
    );

    // Forwarding: each tenant imports at both regions.
    const ALPHA_MARKER: &str = "alpha_only_function_7c3e9";
    let alpha_here = format!("main;{ALPHA_MARKER};here 3\n");
    let alpha_there = format!("main;{ALPHA_MARKER};there 5\n");
    for (url, stacks) in [(&a.url, &alpha_here), (&b.url, &alpha_there)] {
        let (status, text) = import(url, &alpha, stacks);
        assert_eq!(status, 200, "alpha's import at {url}: {text}");
    }
    let (status, text) = import(&a.url, &beta, "main;beta_work 7\n");
    assert_eq!(status, 200, "beta's import at region a: {text}");
    let want_alpha = vec![
        format!("main;{ALPHA_MARKER};here 3"),
        format!("main;{ALPHA_MARKER};there 5"),
    ];
    for url in [&a.url, &b.url] {
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
    println!("forwarding: alpha's and beta's imports at either region are queryable at both");

    // What a forwarded query costs: one round trip between the regions.
    let timed = |url: &str| {
        let started = Instant::now();
        for _ in 0..5 {
            assert_eq!(collapsed(url, &alpha).0, 200);
        }
        started.elapsed() / 5
    };
    let (direct, forwarded) = (timed(&a.url), timed(&b.url));
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
    let (_, metrics_b) = request(&b.url, "GET", "/metrics", None, &[], b"");
    assert!(
        !metrics_b.contains("tenant=\"alpha\""),
        "region b counted alpha's requests"
    );
    let (_, metrics_a) = request(&a.url, "GET", "/metrics", None, &[], b"");
    assert!(
        metrics_a.contains("tenant=\"alpha\""),
        "region a counts alpha's ingest"
    );
    for needle in ["alpha", ALPHA_MARKER] {
        if let Err(file) = files_without(&b.data_dir, needle) {
            panic!("region b's {} holds {needle:?}", file.display());
        }
    }
    println!(
        "residency: region b has no tenant, metric or file byte of alpha (and a none of beta)"
    );

    // Keys of regions nobody knows, and requests forwarded twice.
    let stranger = alpha.replacen("kiln_a_", "kiln_zz_", 1);
    let (status, text) = import(&a.url, &stranger, "x 1\n");
    assert_eq!(status, 421, "{text}");
    assert!(text.contains("\\\"zz\\\"") || text.contains("zz"), "{text}");
    let (status, text) = request(
        &a.url,
        "GET",
        "/api/v1/whoami",
        Some(&beta),
        &[("x-kiln-forwarded-from", "c")],
        b"",
    );
    assert_eq!(status, 421, "{text}");
    println!("misdirected: a key of an unknown region and a twice-forwarded request are 421");

    // What operators see of it: region a's forwards, by region and outcome.
    let metrics = support::Exposition::scrape(&a.url);
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
    let (_, text) = request(&a.url, "GET", "/metrics", None, &[], b"");
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
        &b.url,
        "GET",
        "/api/v1/symbols/global",
        Some(&b.admin_token),
        &[],
        b"",
    );
    assert_eq!(status, 200, "{list}");
    assert!(list.contains(&id), "region b's global store: {list}");
    println!("global symbols: uploaded to region a, in region b's global store {took:?} later");

    // Region loss: b stops.
    let dir_b = b.stop();
    let (status, text) = import(&a.url, &alpha, &alpha_here);
    assert_eq!(status, 200, "alpha, homed in a, with b down: {text}");
    let (status, text) = import(&a.url, &beta, "main;beta_work 1\n");
    assert_eq!(status, 503, "beta's import at a with b down: {text}");
    assert!(
        text.contains("\\\"b\\\"") || text.contains("region"),
        "{text}"
    );
    println!("region loss: with b down alpha is served in a; beta's requests at a get 503");
    let (status, text) = request(
        &a.url,
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

    let b = Region::start("b", &net_b, &dir_b, peer_a);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, text) = loop {
        let (status, text) = import(&a.url, &beta, "main;beta_work 1\n");
        if status == 200 || Instant::now() > deadline {
            break (status, text);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 200, "beta's import at a once b is back: {text}");
    assert_eq!(
        collapsed(&b.url, &beta),
        (200, vec!["main;beta_work 8".to_owned()]),
        "beta's data, before and after b's outage"
    );
    println!("region return: beta's requests at a reach b again, and b kept beta's data");
    let took = b.wait_for_global(&missed, &beta);
    println!("global symbols: b pulled the upload it missed while down, {took:?} after its return");
    drop((a, b));
}
