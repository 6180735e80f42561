//! The distributed-mode harness: `kiln gateway`, `kiln worker` and `kiln
//! query` child processes on Kafka (tansu) and PostgreSQL, tenants made
//! with `kiln tenant create`, HTTP helpers, and servers of a test's own
//! to kill and restart ([`ScriptServer`]). Shared by distributed.rs,
//! attacks_distributed.rs and faults.rs (a directory module, so that cargo
//! does not build it as a test binary of its own).
//!
//! The tests run when `KILN_TEST_KAFKA` and `KILN_TEST_POSTGRES` name a
//! broker and a server (scripts/kafka-test-server.sh and
//! scripts/pg-test-server.sh print them), and skip with a message
//! otherwise ([`servers`]).

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_test_support::KilnProcess;

use crate::support::aggregate;

/// The query nodes' shared secret.
pub(crate) const CLUSTER_SECRET: &str = "distributed-test-cluster-secret";
/// The operator's token, the same on every gateway and query node.
pub(crate) const ADMIN_TOKEN: &str = "distributed-test-admin-token";
/// What the gateway signs bus records with and the workers verify.
pub(crate) const BUS_KEY: &str = "distributed-test-bus-key";

/// The broker and PostgreSQL URLs, or `None` (after saying why).
pub(crate) fn servers() -> Option<(String, String)> {
    let kafka = std::env::var("KILN_TEST_KAFKA")
        .ok()
        .filter(|v| !v.is_empty());
    let postgres = std::env::var("KILN_TEST_POSTGRES")
        .ok()
        .filter(|v| !v.is_empty());
    match (kafka, postgres) {
        (Some(k), Some(p)) => Some((k, p)),
        (k, p) => {
            eprintln!(
                "skipped: the distributed tests need KILN_TEST_KAFKA{} and KILN_TEST_POSTGRES{} \
                 (scripts/kafka-test-server.sh start DIR, scripts/pg-test-server.sh start DIR)",
                if k.is_some() { " (set)" } else { " (unset)" },
                if p.is_some() { " (set)" } else { " (unset)" },
            );
            None
        }
    }
}

/// A name no other run uses: the process id and the time.
pub(crate) fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{nanos}", std::process::id())
}

/// A fresh database on the test server; returns its URL.
pub(crate) fn fresh_database(server_url: &str) -> String {
    let name = format!("kiln_dist_{}", unique());
    psql(server_url, &format!("CREATE DATABASE {name}"));
    let (base, _) = server_url.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{name}")
}

/// Runs one SQL statement with `psql` against `database_url`.
pub(crate) fn psql(database_url: &str, sql: &str) {
    let status = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", database_url, "-c", sql])
        .status()
        .expect("run psql (Debian's postgresql-client)");
    assert!(status.success(), "psql failed: {sql}");
}

/// `kiln store migrate` of `store`.
pub(crate) fn migrate(store: &str) {
    let migrated = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["store", "migrate", "--store", store])
        .status()
        .unwrap();
    assert!(migrated.success(), "kiln store migrate failed");
}

/// A `kiln` role process of this build.
pub(crate) struct Role(KilnProcess);

impl Role {
    /// Runs `kiln ARGS` and waits for its "is up" line.
    pub(crate) fn start(name: &'static str, args: &[&str]) -> Role {
        Role(KilnProcess::start(
            Path::new(env!("CARGO_BIN_EXE_kiln")),
            name,
            args,
        ))
    }

    pub(crate) fn url(&self) -> &str {
        self.0.url()
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// SIGKILL: no chance to commit, flush or leave the group.
    pub(crate) fn kill9(&mut self) {
        self.0.kill9();
    }
}

/// What a deployment's processes share: a fresh, migrated database (the
/// profile store and the metadata store), a topic of its own, and an
/// object store in a temporary directory.
pub(crate) struct Backends {
    /// The PostgreSQL URL of the store.
    pub store: String,
    /// The `kafka://` bus URL, topic and partitions included.
    pub bus: String,
    /// The `file://` object store URL.
    pub objects: String,
    /// The temporary directory the objects live in.
    pub dir: tempfile::TempDir,
}

impl Backends {
    /// Fresh backends on the test servers; `topic` prefixes the topic's
    /// name, which has `partitions` partitions.
    pub(crate) fn new(kafka: &str, postgres: &str, topic: &str, partitions: u32) -> Backends {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh_database(postgres);
        migrate(&store);
        let bus = format!("{kafka}/{topic}-{}?partitions={partitions}", unique());
        let objects = format!("file://{}", dir.path().join("objects").display());
        Backends {
            store,
            bus,
            objects,
            dir,
        }
    }

    /// The object store's root directory.
    pub(crate) fn objects_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("objects")
    }

    /// `kiln gateway` on a free port, checking keys against the store.
    pub(crate) fn gateway(&self) -> Role {
        self.gateway_at("127.0.0.1:0")
    }

    /// [`Backends::gateway`] listening on `listen` (a gateway started
    /// again where agents expect it).
    pub(crate) fn gateway_at(&self, listen: &str) -> Role {
        Role::start(
            "gateway",
            &[
                "gateway",
                "--listen",
                listen,
                "--bus",
                &self.bus,
                "--store",
                &self.store,
                "--objects",
                &self.objects,
                "--metadata",
                &self.store,
                "--admin-token",
                ADMIN_TOKEN,
                "--bus-key",
                BUS_KEY,
            ],
        )
    }

    /// `kiln worker`, verifying records with [`BUS_KEY`].
    pub(crate) fn worker(&self) -> Role {
        Role::start(
            "worker",
            &[
                "worker",
                "--listen",
                "127.0.0.1:0",
                "--bus",
                &self.bus,
                "--store",
                &self.store,
                "--objects",
                &self.objects,
                "--bus-key",
                BUS_KEY,
            ],
        )
    }

    /// `kiln query` on a free port, without peers.
    pub(crate) fn query(&self) -> Role {
        Role::start(
            "query",
            &[
                "query",
                "--listen",
                "127.0.0.1:0",
                "--store",
                &self.store,
                "--objects",
                &self.objects,
                "--metadata",
                &self.store,
                "--admin-token",
                ADMIN_TOKEN,
            ],
        )
    }
}

/// A tenant made for a test: its name and a key with ingest and read
/// rights on its default project.
pub(crate) struct Tenant {
    pub name: String,
    pub key: String,
}

/// `kiln tenant create` of a tenant named after this run, through `server`
/// with the admin token; returns the key it prints as its last line.
pub(crate) fn create_tenant(server: &str) -> String {
    new_tenant(server).key
}

/// [`create_tenant`], with the tenant's name.
pub(crate) fn new_tenant(server: &str) -> Tenant {
    let name = format!("t{}", unique());
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["tenant", "create", "--server", server])
        .args(["--admin-token", ADMIN_TOKEN, &name])
        .env("KILN_LOG", "warn")
        .env_remove("KILN_API_KEY")
        .output()
        .expect("run kiln tenant create");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kiln tenant create {name}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = stdout.lines().last().expect("a key").trim().to_owned();
    assert!(key.starts_with("kiln_"), "not a key: {stdout}");
    Tenant { name, key }
}

/// A loopback address that was free a moment ago (the query nodes must
/// know each other's URLs before they start).
pub(crate) fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

pub(crate) fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// `GET base+path` with `Authorization: Bearer key`.
pub(crate) fn get(base: &str, key: &str, path: &str) -> (u16, String) {
    let mut response = http()
        .get(format!("{base}{path}"))
        .header("authorization", format!("Bearer {key}"))
        .call()
        .expect("GET");
    let mut body = String::new();
    response
        .body_mut()
        .as_reader()
        .read_to_string(&mut body)
        .unwrap();
    (response.status().as_u16(), body)
}

/// `POST base+path` with `Authorization: Bearer key`.
pub(crate) fn post(base: &str, key: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut response = http()
        .post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {key}"))
        .send(body)
        .expect("POST");
    let mut text = String::new();
    response
        .body_mut()
        .as_reader()
        .read_to_string(&mut text)
        .unwrap();
    (response.status().as_u16(), text)
}

/// `stack count` lines of the last day matching `filter`, summed by stack,
/// as `key` sees them.
pub(crate) fn collapsed(query: &str, key: &str, filter: &str) -> Vec<String> {
    let (status, body) = get(
        query,
        key,
        &format!("/api/v1/flamegraph?from=now-1d&format=collapsed{filter}"),
    );
    assert_eq!(status, 200, "{body}");
    aggregate(body.lines().filter(|l| !l.is_empty()).map(str::to_owned))
}

/// A throwaway server of a test's own, started by one of
/// `scripts/*-test-server.sh` in a temporary directory, so that a fault
/// test can kill and restart it without touching a server other tests
/// share. Stopped when dropped.
pub(crate) struct ScriptServer {
    script: PathBuf,
    dir: tempfile::TempDir,
    /// What `start` printed (its URL).
    pub url: String,
}

impl ScriptServer {
    /// `scripts/SCRIPT start DIR`; `Err` with its messages when it fails.
    pub(crate) fn start(script: &str) -> Result<ScriptServer, String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts")
            .join(script);
        let dir = tempfile::tempdir().unwrap();
        let url = run_script(&script, "start", dir.path())?;
        Ok(ScriptServer { script, dir, url })
    }

    /// The directory it keeps its data, log, port and pid in.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `start` again, in the same directory: it must come back at the
    /// same URL (the scripts take their old ports back).
    pub(crate) fn start_again(&self) {
        let url = run_script(&self.script, "start", self.dir.path())
            .unwrap_or_else(|e| panic!("{} start again: {e}", self.script.display()));
        assert_eq!(url, self.url, "restarted at another address");
    }

    /// `stop`: the server's own orderly shutdown.
    pub(crate) fn stop(&self) {
        run_script(&self.script, "stop", self.dir.path())
            .unwrap_or_else(|e| panic!("{} stop: {e}", self.script.display()));
    }

    /// SIGKILL of the process whose id the script keeps in `DIR/pid`
    /// (the JVM servers'), waiting until it is gone (or a zombie, when
    /// nothing reaps it); the pid file is removed, so that the next
    /// `start` does not take it for a running server.
    pub(crate) fn kill9(&self) {
        let pid_file = self.dir.path().join("pid");
        let pid = std::fs::read_to_string(&pid_file).expect("a pid file");
        let pid = pid.trim();
        let status = Command::new("kill").args(["-9", pid]).status().unwrap();
        assert!(status.success(), "kill -9 {pid}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name in parentheses.
            if stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} outlived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::remove_file(&pid_file).unwrap();
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = run_script(&self.script, "stop", self.dir.path());
    }
}

/// `SCRIPT COMMAND DIR`: its last line of stdout, or its stderr.
fn run_script(script: &Path, command: &str, dir: &Path) -> Result<String, String> {
    let out = Command::new(script)
        .arg(command)
        .arg(dir)
        .output()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_owned())
}
