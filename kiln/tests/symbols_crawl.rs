//! `kiln symbols crawl`: the global symbol store filled from Debian debug
//! packages. A tiny package built here with `dpkg-deb` (fast, always
//! runs), and the real `libc6-dbg` of this system's glibc: frames in the
//! system's stripped libc.so.6 show names after the crawl. Global writes
//! need the admin token: the crawl finds the one `kiln up` keeps in its
//! data directory, or is given one.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_model::{BatchBuilder, FileId, Frame, FrameKind, LabelSet};
use kiln_test_support::programs::ALPHA_BETA;
use kiln_test_support::{CBuild, run, strip};
use object::{Object, ObjectSymbol};
use support::Server;

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("KILN_LOG", "warn")
        .env_remove("KILN_ADMIN_TOKEN")
        .env_remove("KILN_API_KEY")
        .output()
        .expect("run kiln")
}

/// `kiln symbols crawl` of `source` into `server`, on the same machine:
/// it finds the admin token in the server's data directory.
fn crawl(server: &Server, source: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["symbols", "crawl", "--server", &server.url, source])
        .env("KILN_LOG", "warn")
        .env_remove("KILN_ADMIN_TOKEN")
        .env_remove("KILN_API_KEY")
        .env("KILN_DATA_DIR", &server.data_dir)
        .output()
        .expect("run kiln")
}

/// The address of `name` in the symbol table (or the dynamic one).
fn function_start(elf: &Path, name: &str) -> u64 {
    let data = std::fs::read(elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} not in the symbol tables of {}", elf.display()))
        .address()
}

/// Ingests one sample whose stack is `addrs` (root first) in `file`.
fn ingest(server: &Server, file: &kiln_agent::FileInfo, addrs: &[u64], count: u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let frames: Vec<Frame> = addrs
        .iter()
        .map(|&addr| Frame::Address {
            kind: FrameKind::Native,
            file_id: file.file_id,
            addr,
        })
        .collect();
    let mut batch = BatchBuilder::new("test-host", now, 10_000_000);
    batch.add(
        now,
        &frames,
        &LabelSet::new().with("host", "test-host"),
        count,
    );
    batch.add_executable(file.executable());
    let (status, text) = server
        .post("/api/v1/ingest", &batch.finish().encode())
        .unwrap();
    assert_eq!(status, 200, "{text}");
}

/// Polls the collapsed flamegraph until a line satisfies `want`.
fn wait_for(server: &Server, what: &str, want: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = server.collapsed("");
        if lines.iter().any(|l| want(l)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no line with {what} in the flamegraph; it has {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether the global store has symbols for `id`, asked with the
/// server's own API key (any tenant's key may ask).
fn global_has(server: &Server, id: FileId) -> bool {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}/api/v1/symbols/global/{id}", server.url);
    let status = agent
        .head(&url)
        .header("authorization", server.bearer())
        .call()
        .unwrap()
        .status();
    assert!(
        status == 200 || status == 404,
        "HEAD {url} answered {status}"
    );
    status == 200
}

/// Builds the program, its stripped copy and a debug package holding its
/// debug file under its build id; returns (stripped, .deb).
fn build_debug_package(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("prog.c");
    std::fs::write(&src, ALPHA_BETA).unwrap();
    let full = dir.join("prog.full");
    CBuild::cc()
        .args(["-O0", "-g", "-Wl,--build-id"])
        .file(&src, &full);
    let stripped = dir.join("prog");
    strip(&full, &stripped);
    let info = kiln_agent::FileInfo::read(&stripped, "prog").unwrap();
    let build_id = info.build_id.expect("built with --build-id");
    let root = dir.join("pkg");
    let debug_dir = root.join("usr/lib/debug/.build-id").join(&build_id[..2]);
    std::fs::create_dir_all(&debug_dir).unwrap();
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: kiln-test-dbg\nVersion: 1.0\nArchitecture: all\nMaintainer: Kiln tests <tests@example.invalid>\nDescription: debug symbols of a test program\n",
    )
    .unwrap();
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(debug_dir.join(format!("{}.debug", &build_id[2..]))));
    let deb = dir.join("kiln-test-dbg_1.0_all.deb");
    run(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb));
    (stripped, deb)
}

#[test]
fn crawled_debug_package_names_frames_of_the_stripped_program() {
    let dir = tempfile::tempdir().unwrap();
    let (stripped, deb) = build_debug_package(dir.path());
    let info = kiln_agent::FileInfo::read(&stripped, "prog").unwrap();
    let server = Server::start(&dir.path().join("data"));

    // Frames that arrive before the symbols, as the agent sends them.
    let unstripped =
        kiln_symbolizer_workers::file_id(&std::fs::read(dir.path().join("prog.full")).unwrap());
    assert_eq!(
        unstripped, info.file_id,
        "the debug build and the stripped copy share an id"
    );
    let full = dir.path().join("prog.full");
    let beta = function_start(&full, "beta") + 4;
    let alpha = function_start(&full, "alpha") + 4;
    ingest(&server, &info, &[beta, alpha], 3);
    wait_for(&server, "addresses", |l| {
        l == format!("prog+{beta:#x};prog+{alpha:#x} 3")
    });
    assert!(!global_has(&server, info.file_id));

    let deb_arg = deb.to_str().unwrap();
    let out = crawl(&server, deb_arg);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 debug files, 1 uploaded"), "{stdout}");
    assert!(global_has(&server, info.file_id));
    wait_for(&server, "names", |l| l == "beta;alpha 3");

    // Idempotent: the same package again (as a directory) uploads nothing.
    let dir_arg = dir.path().to_str().unwrap();
    let out = crawl(&server, dir_arg);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 uploaded, 1 already present"), "{stdout}");
}

/// A `PUT` to the global store with `authorization` (if any): status and
/// body.
fn put_global(
    server: &Server,
    id: FileId,
    authorization: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}/api/v1/symbols/global/{id}", server.url);
    let mut request = agent.put(&url);
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    let mut response = request.send(body).unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// Guards issue 4's admin credential on global writes: no credential, one
/// that is not a bearer token, and a wrong token are each a 401, and a
/// tenant's key (even with every role) a 403, each saying what is wrong;
/// the right token stores; and a crawl with a wrong token stops at the
/// first refusal, saying why.
#[test]
fn global_writes_need_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let (stripped, deb) = build_debug_package(dir.path());
    let token = "test-admin-token-0123456789";
    let server = Server::start_with(
        &dir.path().join("data"),
        &["--no-agent", "--admin-token", token],
    );
    let full = std::fs::read(dir.path().join("prog.full")).unwrap();
    let id = kiln_agent::FileInfo::read(&stripped, "prog")
        .unwrap()
        .file_id;

    let (status, text) = put_global(&server, id, None, &full);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("needs an API key"), "{text}");
    let (status, text) = put_global(&server, id, Some("Basic dXNlcjpwYXNz"), &full);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("Bearer KEY"), "{text}");
    let (status, text) = put_global(&server, id, Some("Bearer not-the-admin-token"), &full);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("nor this server's admin token"), "{text}");
    let (status, text) = put_global(&server, id, Some(&server.bearer()), &full);
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("needs the server's admin token"), "{text}");
    assert!(!global_has(&server, id), "nothing stored by refused writes");

    let out = kiln(&[
        "symbols",
        "crawl",
        "--admin-token",
        "not-the-admin-token",
        "--server",
        &server.url,
        deb.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("401") && stderr.contains("refused"),
        "{stderr}"
    );

    let bearer = format!("Bearer {token}");
    let (status, text) = put_global(&server, id, Some(&bearer), &full);
    assert_eq!(status, 200, "{text}");
    assert!(global_has(&server, id));
    // Tenant uploads need no admin token: a tenant's key.
    let tenant_url = format!("{}/api/v1/symbols/{id}", server.url);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let status = agent
        .put(&tenant_url)
        .header("authorization", server.bearer())
        .send(&full[..])
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 200);
}

#[test]
fn crawl_refuses_what_is_not_a_package() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.deb");
    std::fs::write(&junk, "not an ar archive").unwrap();
    let out = kiln(&[
        "symbols",
        "crawl",
        "--server",
        "http://127.0.0.1:9",
        junk.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("junk.deb is not a Debian package"),
        "{stderr}"
    );

    let out = kiln(&[
        "symbols",
        "crawl",
        "--server",
        "http://127.0.0.1:9",
        "Not A Package",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("neither a .deb file"), "{stderr}");
}

/// The system's libc.so.6, found the way the dynamic loader would.
fn system_libc() -> Option<PathBuf> {
    [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// `libc6-dbg` for exactly the installed glibc: from apt's cache, else
/// fetched by `kiln symbols crawl libc6-dbg=VERSION` itself.
fn libc6_dbg_source() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "libc6"])
        .output()
        .ok()?;
    let version = String::from_utf8(out.stdout).ok()?;
    let cached = std::fs::read_dir("/var/cache/apt/archives")
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            // Epochs are spelled %3a in file names.
            name.starts_with(&format!("libc6-dbg_{}_", version.replace(':', "%3a")))
        });
    Some(match cached {
        Some(path) => path.to_string_lossy().into_owned(),
        None => format!("libc6-dbg={version}"),
    })
}

#[test]
fn crawled_libc6_dbg_names_frames_in_the_system_libc() {
    let (Some(libc), Some(source)) = (system_libc(), libc6_dbg_source()) else {
        eprintln!("SKIP crawled_libc6_dbg_names_frames_in_the_system_libc: no glibc or dpkg here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let out = crawl(&server, &source);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("apt-get download") {
        eprintln!(
            "SKIP crawled_libc6_dbg_names_frames_in_the_system_libc: cannot fetch {source}: {stderr}"
        );
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let info = kiln_agent::FileInfo::read(&libc, "libc.so.6").unwrap();
    assert!(global_has(&server, info.file_id), "{stdout}");
    // Inside malloc and getpid, as return addresses would be.
    let malloc = function_start(&libc, "malloc") + 4;
    let getpid = function_start(&libc, "getpid") + 2;
    ingest(&server, &info, &[getpid, malloc], 2);
    wait_for(&server, "malloc under getpid", |l| {
        let (stack, count) = l.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        count == "2"
            && frames.first().is_some_and(|f| f.contains("getpid"))
            && frames.last().is_some_and(|f| f.contains("malloc"))
            && !stack.contains("libc.so.6+")
    });
}
