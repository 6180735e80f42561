//! Symbols that arrive after the profile: a batch of unsymbolized address
//! frames is ingested, shows as `prog+0x…`, and after `kiln symbols
//! upload` the same query shows function names — nothing re-ingested.
//! Also: the upload endpoints' idempotence and their errors.

mod support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract, ksym};
use kiln_test_support::CBuild;
use kiln_test_support::programs::ALPHA_BETA_INLINED;
use object::{Object, ObjectSymbol};
use support::Server;

/// The address range of the function `name`, from the symtab.
fn function_range(elf: &Path, name: &str) -> std::ops::Range<u64> {
    let data = std::fs::read(elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} not in the symtab"));
    symbol.address()..symbol.address() + symbol.size()
}

/// An address in `alpha` where `mix` is inlined, and its inline chain
/// outermost first, as Kiln's own extraction sees it.
fn inlined_address(elf: &Path) -> (u64, Vec<String>) {
    let extracted =
        extract(elf, &ExtractOptions::default()).expect("extract the program's symbols");
    let bytes = ksym::encode(&extracted.table);
    let symbols = Ksym::open(&bytes).unwrap();
    let mut frames = Vec::new();
    for addr in function_range(elf, "alpha") {
        symbols.lookup(addr, &mut frames);
        if frames.len() >= 2 {
            let chain = frames
                .iter()
                .rev()
                .map(|f| f.function().unwrap().into_owned())
                .collect();
            return (addr, chain);
        }
    }
    panic!("no address of alpha has mix inlined");
}

/// The node named `name` somewhere in a d3-style JSON tree.
fn find_node<'a>(node: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    if node["name"] == name {
        return Some(node);
    }
    node["children"]
        .as_array()?
        .iter()
        .find_map(|c| find_node(c, name))
}

/// `kiln ARGS` on the server's machine: it finds the server's API key in
/// the server's data directory.
fn kiln(server: &Server, args: &[&str]) -> Output {
    server.cli().args(args).output().expect("run kiln")
}

/// Polls the collapsed flamegraph until `want` is among its lines.
fn wait_for_line(server: &Server, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = server.collapsed("");
        if lines.iter().any(|l| l == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no line {want:?} in the flamegraph; it has {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `method url` with the server's API key.
fn http(server: &Server, method: &str, url: &str, body: &[u8]) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let bearer = server.bearer();
    let mut response = match method {
        "HEAD" => agent.head(url).header("authorization", &bearer).call(),
        "PUT" => agent.put(url).header("authorization", &bearer).send(body),
        _ => unreachable!(),
    }
    .expect("request");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, text)
}

#[test]
fn frames_ingested_before_their_symbols_show_names_after_upload() {
    let dir = tempfile::tempdir().unwrap();
    let elf = CBuild::cc()
        .args(["-O2", "-g"])
        .program(dir.path(), "prog", ALPHA_BETA_INLINED);
    let server = Server::start(&dir.path().join("data"));

    // The id the agent gives the file, by the agent's own code.
    let info = kiln_agent::FileInfo::read(&elf, "prog").unwrap();
    // Return addresses minus one, as the agent sends them: inside the
    // function.
    let beta = function_range(&elf, "beta").start + 4;
    let (alpha, chain) = inlined_address(&elf);
    assert_eq!(chain.first().map(String::as_str), Some("alpha"));
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
        5,
    );
    batch.add_executable(info.executable());
    let (status, text) = server
        .post("/api/v1/ingest", &batch.finish().encode())
        .unwrap();
    assert_eq!(status, 200, "{text}");

    wait_for_line(&server, &format!("prog+{beta:#x};prog+{alpha:#x} 5"));

    let symbols_url = format!("{}/api/v1/symbols/{}", server.url, info.file_id);
    assert_eq!(http(&server, "HEAD", &symbols_url, b"").0, 404);

    let elf_arg = elf.to_str().unwrap();
    let out = kiln(
        &server,
        &["symbols", "upload", "--server", &server.url, elf_arg],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "upload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("uploaded"), "{stdout}");
    assert_eq!(http(&server, "HEAD", &symbols_url, b"").0, 200);

    // The same query, no re-ingest: names now, the inlined function as a
    // frame of its own under its caller.
    let symbolized = format!("beta;{} 5", chain.join(";"));
    wait_for_line(&server, &symbolized);
    let (status, json) = server.get("/api/v1/flamegraph?from=now-1d&format=json&lines=true");
    assert_eq!(status, 200, "{json}");
    let tree: serde_json::Value = serde_json::from_str(&json).unwrap();
    for name in ["beta", "alpha", "mix"] {
        let node = find_node(&tree, name).unwrap_or_else(|| panic!("no {name} in {json}"));
        assert_eq!(node["module"], "prog", "{node}");
        assert!(
            node["file"].as_str().is_some_and(|f| f.ends_with("prog.c")),
            "{node}"
        );
        assert!(node["line"].as_u64().is_some_and(|l| l > 0), "{node}");
    }

    // Idempotent: a second upload is skipped, a forced one accepted.
    let out = kiln(
        &server,
        &["symbols", "upload", "--server", &server.url, elf_arg],
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("already has symbols"));
    let out = kiln(
        &server,
        &[
            "symbols",
            "upload",
            "--force",
            "--server",
            &server.url,
            elf_arg,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_line(&server, &symbolized);
}

#[test]
fn uploads_that_cannot_be_symbols_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let elf = CBuild::cc()
        .args(["-O2", "-g"])
        .program(dir.path(), "prog", ALPHA_BETA_INLINED);
    let server = Server::start(&dir.path().join("data"));
    let base = format!("{}/api/v1/symbols", server.url);

    let (status, text) = http(&server, "HEAD", &format!("{base}/not-an-id"), b"");
    assert_eq!(status, 400, "{text}");
    let (status, text) = http(&server, "PUT", &format!("{base}/../../etc"), b"x");
    assert!(status == 400 || status == 404, "{status} {text}");

    // An ELF under another file's id.
    let data = std::fs::read(&elf).unwrap();
    let (status, text) = http(&server, "PUT", &format!("{base}/{:032x}", 1), &data);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("file id"), "{text}");

    // Not an ELF: the CLI says why and exits non-zero, naming the file.
    let junk = dir.path().join("notes.txt");
    std::fs::write(&junk, "not an executable\n").unwrap();
    let out = kiln(
        &server,
        &[
            "symbols",
            "upload",
            "--server",
            &server.url,
            junk.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("notes.txt") && stderr.contains("400"),
        "{stderr}"
    );
}
