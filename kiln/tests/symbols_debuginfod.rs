//! The debuginfod fallback against a real `debuginfod` (elfutils, Debian's
//! package) serving a directory: frames of a stripped program, whose
//! symbols nobody uploaded, show function names once the server fetched
//! the debug information by build id — and the fetched symbols land in the
//! global store.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
use kiln_test_support::programs::ALPHA_BETA;
use kiln_test_support::{CBuild, strip};
use object::{Object, ObjectSymbol};
use support::Server;

/// A `debuginfod` child, killed on drop.
struct Debuginfod {
    child: Child,
    url: String,
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds the program with `-g` and a build id into `served`, and a
/// stripped copy (what runs, and what frames point into) into `dir`.
fn build(dir: &Path, served: &Path) -> (PathBuf, PathBuf) {
    let full = CBuild::cc()
        .args(["-O0", "-g", "-Wl,--build-id"])
        .program(served, "prog", ALPHA_BETA);
    let stripped = dir.join("prog");
    strip(&full, &stripped);
    (full, stripped)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `debuginfod` scanning `served` and waits until it serves the
/// debug information of `build_id` (it indexes in the background).
fn start_debuginfod(dir: &Path, served: &Path, build_id: &str) -> Debuginfod {
    let port = free_port();
    let child = Command::new("debuginfod")
        .args(["-p", &port.to_string(), "-F", "-d"])
        .arg(dir.join("debuginfod.sqlite"))
        .arg(served)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start debuginfod");
    let server = Debuginfod {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let probe = format!("{}/buildid/{build_id}/debuginfo", server.url);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = agent.get(&probe).call()
            && r.status() == 200
        {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "debuginfod did not index {} within 60 s",
            served.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn function_start(elf: &Path, name: &str) -> u64 {
    let data = std::fs::read(elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} not in the symtab"))
        .address()
}

fn has_debuginfod() -> bool {
    Command::new("debuginfod")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn stripped_program_gets_names_from_debuginfod() {
    if !has_debuginfod() {
        eprintln!(
            "SKIP stripped_program_gets_names_from_debuginfod: no `debuginfod` on PATH (Debian package debuginfod; scripts/setup.sh installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let (full, stripped) = build(dir.path(), &served);
    // What the agent reports for the file it sampled: id and build id.
    let info = kiln_agent::FileInfo::read(&stripped, "prog").unwrap();
    let build_id = info.build_id.clone().expect("built with --build-id");
    let debuginfod = start_debuginfod(dir.path(), &served, &build_id);

    let server = Server::start_with_env(
        &dir.path().join("data"),
        &["--no-agent"],
        &[("DEBUGINFOD_URLS", &debuginfod.url)],
    );
    let global = format!("{}/api/v1/symbols/global/{}", server.url, info.file_id);
    let head = |url: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .head(url)
            .header("authorization", server.bearer())
            .call()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(head(&global), 404, "nothing stored before the query");

    // Inside each function, as a return address minus one would be.
    let beta = function_start(&full, "beta") + 4;
    let alpha = function_start(&full, "alpha") + 4;
    let frame = |addr| Frame::Address {
        kind: FrameKind::Native,
        file_id: info.file_id,
        addr,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut batch = BatchBuilder::new("test-host", now, 10_000_000);
    batch.add(
        now,
        &[frame(beta), frame(alpha)],
        &LabelSet::new().with("host", "test-host"),
        3,
    );
    batch.add_executable(info.executable());
    let (status, text) = server
        .post("/api/v1/ingest", &batch.finish().encode())
        .unwrap();
    assert_eq!(status, 200, "{text}");

    // Ingest starts the fetch (without waiting for it) and so do queries;
    // the names show once it has been stored.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = server.collapsed("");
        if lines.iter().any(|l| l == "beta;alpha 3") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no names from debuginfod; the flamegraph has {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(head(&global), 200, "fetched symbols are stored globally");
    let (status, json) = server.get("/api/v1/flamegraph?from=now-1d&format=json");
    assert_eq!(status, 200);
    assert!(json.contains("prog.c"), "file names come along: {json}");
}
