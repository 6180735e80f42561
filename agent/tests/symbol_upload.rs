//! Symbols extracted by the agent, uploaded as a ksym, name frames in a
//! real backend's queries: a program runs, a batch of its frames (as
//! addresses) is ingested, the agent's uploader extracts the program's
//! symbols through the process's mapping and sends them, and the
//! flamegraph then shows the function names — with `--upload-dwarf`, the
//! inlined function and lines too. The backend refuses a malformed ksym
//! with a 400 that names the fault.
//!
//! Run as root (CI does): the program's file is opened through
//! `/proc/<pid>/map_files`, which needs CAP_SYS_ADMIN. No eBPF.
//!
//! `peak_memory_of_extraction` (ignored; `--ignored --nocapture`)
//! reports the peak RSS of extracting a big library
//! (`KILN_EXTRACT_FILE`, by default rustc's driver library) with and
//! without DWARF, against reading it whole, and of what the uploader does
//! with it (`prepare_upload`: a sparse image, over the local limits).

mod backend;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use backend::{Backend, Killed};
use kiln_agent::{
    FileInfo, HttpSink, LocalLimits, MappedSource, Sink, SymbolUpload, SymbolUploader,
};
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
use kiln_symbolizer_workers::ksym;
use kiln_test_support::CBuild;
use object::{Object, ObjectSymbol};

/// `mix` is inlined into `alpha`; the program runs until killed.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <unistd.h>
volatile long sink;
static inline __attribute__((always_inline)) long mix(long x) { return (x * 2654435761L) ^ (x >> 7); }
__attribute__((noinline)) void alpha(long n) { for (long i = 0; i < n; i++) sink += mix(i); }
__attribute__((noinline)) void beta(long n) { for (long i = 0; i < n; i++) alpha(i); sink ^= n; }
int main(int argc, char **argv) {
    (void)argv;
    beta(argc * 100);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"#;

impl Backend {
    fn agent(&self) -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }

    fn flamegraph(&self) -> serde_json::Value {
        // A node per line: the lines DWARF gives are part of what is checked.
        self.get_json("/api/v1/flamegraph?from=now-1d&format=json&lines=true")
    }

    fn has_symbols(&self, id: kiln_model::FileId) -> bool {
        let url = format!("{}/api/v1/symbols/{id}", self.url);
        let response = self
            .agent()
            .head(&url)
            .header("authorization", self.bearer())
            .call()
            .unwrap();
        response.status() == 200
    }
}

/// The node named `name` in `module` somewhere in a flamegraph's JSON
/// tree.
fn find_node<'a>(
    node: &'a serde_json::Value,
    name: &str,
    module: &str,
) -> Option<&'a serde_json::Value> {
    if node["name"] == name && node["module"] == module {
        return Some(node);
    }
    node["children"]
        .as_array()?
        .iter()
        .find_map(|c| find_node(c, name, module))
}

fn address_of(elf: &Path, name: &str) -> u64 {
    let data = std::fs::read(elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} not in the symtab"))
        .address()
}

/// An address in `alpha` where `mix` is inlined, by the extractor.
fn inlined_address(elf: &Path) -> u64 {
    let extracted = kiln_symbolizer_workers::extract(
        elf,
        &kiln_symbolizer_workers::ExtractOptions {
            no_debug_file: true,
            ..Default::default()
        },
    )
    .unwrap();
    let bytes = ksym::encode(&extracted.table);
    let symbols = ksym::Ksym::open(&bytes).unwrap();
    let start = address_of(elf, "alpha");
    let mut frames = Vec::new();
    (start..start + 256)
        .find(|&addr| {
            symbols.lookup(addr, &mut frames);
            frames.len() >= 2
        })
        .expect("mix is inlined into alpha")
}

/// Runs the program built as `name`, ingests a sample of its frames, has
/// the agent's uploader send its symbols (`dwarf` or not), and returns
/// the flamegraph once `alpha` and `beta` are named in it.
fn upload_and_query(
    backend: &Backend,
    dir: &Path,
    name: &str,
    dwarf: bool,
    local: LocalLimits,
    link: &[&str],
) -> serde_json::Value {
    let elf = CBuild::cc()
        .args(["-O2", "-g"])
        .args(link)
        .program(dir, name, PROGRAM);
    let mut child = Killed(Command::new(&elf).stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.0.id();
    let info = FileInfo::read(&elf, name).unwrap();
    let beta = address_of(&elf, "beta") + 4;
    let alpha = inlined_address(&elf);

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let frame = |addr| Frame::Address {
        kind: FrameKind::Native,
        file_id: info.file_id,
        addr,
    };
    let mut batch = BatchBuilder::new("test-host", now, 10_000_000);
    batch.add(
        now,
        &[frame(beta), frame(alpha)],
        &LabelSet::new().with("host", "test-host"),
        5,
    );
    batch.add_executable(info.executable());
    let mut sink = HttpSink::new(&backend.url, Some(&backend.key), None);
    sink.send(&batch.finish()).unwrap();
    assert!(!backend.has_symbols(info.file_id));

    // The uploader gets what the batcher gives it: the process and its
    // mapping of the file (the executable's text).
    let mapping = kiln_agent::read_maps(pid)
        .unwrap()
        .into_iter()
        .find(|m| Path::new(&m.path) == elf)
        .expect("the program's text is mapped");
    let how = SymbolUpload {
        debug_dirs: vec![],
        dwarf,
        local,
        ..SymbolUpload::default()
    };
    let mut uploader = SymbolUploader::start(&backend.url, Some(&backend.key), how).unwrap();
    uploader.offer(info.file_id, &MappedSource { pid, mapping });

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let graph = backend.flamegraph();
        if find_node(&graph, "alpha", name).is_some() && find_node(&graph, "beta", name).is_some() {
            assert!(backend.has_symbols(info.file_id));
            return graph;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: alpha and beta never named: {graph}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn symbols_extracted_by_the_agent_name_frames_in_queries() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "reading /proc/<pid>/map_files needs CAP_SYS_ADMIN: run as root (CI does)"
    );
    let backend = Backend::start();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();

    // By default: function names, no lines, no inlined frames.
    let graph = upload_and_query(
        &backend,
        dir.path(),
        "names_only",
        false,
        LocalLimits::default(),
        &[],
    );
    let beta = find_node(&graph, "beta", "names_only").unwrap();
    assert!(beta["line"].as_u64().is_none_or(|l| l == 0), "{beta}");
    assert!(find_node(&graph, "mix", "names_only").is_none(), "{graph}");

    // With DWARF: the inlined function as a frame of its own, and lines.
    let graph = upload_and_query(
        &backend,
        dir.path(),
        "with_dwarf",
        true,
        LocalLimits::default(),
        &[],
    );
    for name in ["beta", "alpha", "mix"] {
        let node =
            find_node(&graph, name, "with_dwarf").unwrap_or_else(|| panic!("no {name} in {graph}"));
        assert!(node["line"].as_u64().is_some_and(|l| l > 0), "{node}");
    }
}

/// A file with more symbols (or DWARF) than the agent extracts in its own
/// memory goes to the backend as a sparse image: the same names (and with
/// DWARF, lines and inlined frames) come back, and the image holds the
/// symbol tables but none of the file's code.
#[test]
fn a_large_files_symbols_go_as_a_sparse_image_the_backend_extracts() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "reading /proc/<pid>/map_files needs CAP_SYS_ADMIN: run as root (CI does)"
    );
    let backend = Backend::start();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Every file is "large".
    let none = LocalLimits {
        symbol_bytes: 0,
        dwarf_bytes: 0,
    };

    let graph = upload_and_query(&backend, dir.path(), "image_names", false, none, &[]);
    let beta = find_node(&graph, "beta", "image_names").unwrap();
    assert!(beta["line"].as_u64().is_none_or(|l| l == 0), "{beta}");
    assert!(find_node(&graph, "mix", "image_names").is_none(), "{graph}");

    let graph = upload_and_query(&backend, dir.path(), "image_dwarf", true, none, &[]);
    for name in ["beta", "alpha", "mix"] {
        let node = find_node(&graph, name, "image_dwarf")
            .unwrap_or_else(|| panic!("no {name} in {graph}"));
        assert!(node["line"].as_u64().is_some_and(|l| l > 0), "{node}");
    }

    // Without a build id the file id is a hash of the file's ends, which
    // the image keeps; the DWARF it does not send stays zeros.
    let graph = upload_and_query(
        &backend,
        dir.path(),
        "image_no_id",
        false,
        none,
        &["-Wl,--build-id=none"],
    );
    assert!(
        find_node(&graph, "beta", "image_no_id").is_some(),
        "{graph}"
    );

    // What such an upload holds: the file's symbol table, its build id
    // (so the backend's file id check passes), no code, and without
    // DWARF wanted, DWARF sections marked empty rather than zeros.
    let elf = dir.path().join("image_names");
    let data = std::fs::read(&elf).unwrap();
    let file = std::fs::File::open(&elf).unwrap();
    let prepared = kiln_agent::prepare_upload(&file, &elf, None, false, true, none).unwrap();
    let kiln_agent::PreparedSymbols::Image(image) = prepared else {
        panic!("a file over the limits is sent as an image");
    };
    assert!(!image.dwarf && !image.used_debug_file);
    let sent = zstd::decode_all(&image.zstd[..]).unwrap();
    assert_eq!(sent.len(), data.len());
    assert_eq!(
        kiln_symbolizer_workers::file_id(&sent),
        FileInfo::read(&elf, "image_names").unwrap().file_id
    );
    let original = object::File::parse(&data[..]).unwrap();
    let image_elf = object::File::parse(&sent[..]).unwrap();
    use object::ObjectSection;
    let text = original
        .section_by_name(".text")
        .unwrap()
        .file_range()
        .unwrap();
    let text = text.0 as usize..(text.0 + text.1) as usize;
    assert!(sent[text.clone()].iter().all(|&b| b == 0), "code was sent");
    assert!(data[text].iter().any(|&b| b != 0));
    let symtab = original.section_by_name(".symtab").unwrap();
    assert_eq!(
        image_elf
            .section_by_name(".symtab")
            .unwrap()
            .data()
            .unwrap(),
        symtab.data().unwrap()
    );
    let debug_info = image_elf.section_by_name(".debug_info").unwrap();
    assert!(debug_info.file_range().is_none(), "DWARF not marked empty");
}

#[test]
fn a_malformed_ksym_is_refused_naming_the_fault() {
    let backend = Backend::start();
    let url = format!("{}/api/v1/symbols/{}", backend.url, "0".repeat(32));
    let put = |body: &[u8]| {
        let mut response = backend
            .agent()
            .put(&url)
            .header("authorization", backend.bearer())
            .header("content-type", ksym::MEDIA_TYPE)
            .send(body)
            .unwrap();
        (
            response.status().as_u16(),
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    let (status, body) = put(b"KSYM but nothing else");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not a valid ksym file"), "{body}");
    let (status, body) = put(&std::fs::read(std::env::current_exe().unwrap()).unwrap()[..4096]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("bad magic"), "{body}");
    assert!(!backend.has_symbols(kiln_model::FileId(0)));

    // Only tenants take ksyms: the global store checks file ids.
    let global = format!("{}/api/v1/symbols/global/{}", backend.url, "0".repeat(32));
    let status = backend
        .agent()
        .put(&global)
        .header("authorization", backend.bearer())
        .header("content-type", ksym::MEDIA_TYPE)
        .send(&b"KSYM"[..])
        .unwrap()
        .status()
        .as_u16();
    assert!(status == 400 || status == 401 || status == 403, "{status}");
}

/// A `/proc/self/status` field in KiB: `VmHWM` (peak RSS) or `VmRSS`.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn peak_rss_kib() -> u64 {
    status_kib("VmHWM")
}

fn default_big_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let toolchains = Path::new(&home).join(".rustup/toolchains");
    std::fs::read_dir(toolchains).ok()?.flatten().find_map(|t| {
        std::fs::read_dir(t.path().join("lib"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("librustc_driver-") && n.ends_with(".so"))
            })
    })
}

/// The measuring half: extracts `KILN_EXTRACT_FILE` (DWARF when
/// `KILN_EXTRACT_DWARF` is set) in this fresh process and prints its peak
/// RSS before and after.
#[test]
#[ignore]
fn extract_once_in_this_process() {
    let Some(path) = std::env::var_os("KILN_EXTRACT_FILE") else {
        return;
    };
    let dwarf = std::env::var_os("KILN_EXTRACT_DWARF").is_some();
    let before = peak_rss_kib();
    let file = std::fs::File::open(&path).unwrap();
    if std::env::var_os("KILN_EXTRACT_WHOLE").is_some() {
        // For comparison: the whole file read into memory, as the backend
        // extracts an uploaded ELF.
        let data = std::fs::read(&path).unwrap();
        let options = kiln_symbolizer_workers::ExtractOptions {
            no_debug_file: true,
            names_only: !dwarf,
            ..Default::default()
        };
        let table = kiln_symbolizer_workers::extract_bytes(Path::new(&path), &data, &options)
            .unwrap()
            .table;
        let bytes = ksym::encode(&table);
        println!(
            "MEASURED whole-file dwarf={dwarf} ksym_bytes={} peak_rss_before_kib={before} \
             peak_rss_after_kib={}",
            bytes.len(),
            peak_rss_kib()
        );
        return;
    }
    let started = Instant::now();
    if std::env::var_os("KILN_EXTRACT_PREPARE").is_some() {
        // What the uploader does: a file over the local limits becomes a
        // sparse image for the backend.
        let info = FileInfo::read(Path::new(&path), "big").unwrap();
        let prepared = kiln_agent::prepare_upload(
            &file,
            Path::new(&path),
            None,
            dwarf,
            info.build_id.is_some(),
            LocalLimits::default(),
        )
        .unwrap();
        let (how, bytes) = match prepared {
            kiln_agent::PreparedSymbols::Ksym(k) => ("ksym", k.ksym.len()),
            kiln_agent::PreparedSymbols::Image(i) => ("image", i.zstd.len()),
        };
        println!(
            "MEASURED prepare dwarf={dwarf} sent={how} body_bytes={bytes} \
             peak_rss_before_kib={before} peak_rss_after_kib={} took_ms={}",
            peak_rss_kib(),
            started.elapsed().as_millis()
        );
        return;
    }
    let out = kiln_agent::extract_symbols(&file, Path::new(&path), None, dwarf).unwrap();
    let took = started.elapsed();
    let after = peak_rss_kib();
    println!(
        "MEASURED dwarf={} file_bytes={} read_bytes={} ksym_bytes={} ranges={} with_dwarf={} \
         peak_rss_before_kib={before} peak_rss_after_kib={after} rss_after_kib={} took_ms={}",
        dwarf,
        file.metadata().unwrap().len(),
        out.bytes_read,
        out.ksym.len(),
        out.ranges,
        out.dwarf,
        status_kib("VmRSS"),
        took.as_millis()
    );
}

/// Runs [`extract_once_in_this_process`] in fresh processes, with and
/// without DWARF, and prints what each measured.
#[test]
#[ignore]
fn peak_memory_of_extraction() {
    let path = std::env::var_os("KILN_EXTRACT_FILE")
        .map(PathBuf::from)
        .or_else(default_big_file)
        .expect("set KILN_EXTRACT_FILE to a big ELF file");
    for (dwarf, mode) in [
        (false, ""),
        (true, ""),
        (false, "KILN_EXTRACT_WHOLE"),
        (true, "KILN_EXTRACT_WHOLE"),
        (false, "KILN_EXTRACT_PREPARE"),
        (true, "KILN_EXTRACT_PREPARE"),
    ] {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "extract_once_in_this_process",
                "--ignored",
                "--nocapture",
            ])
            .env("KILN_EXTRACT_FILE", &path);
        if dwarf {
            command.env("KILN_EXTRACT_DWARF", "1");
        }
        if !mode.is_empty() {
            command.env(mode, "1");
        }
        let out = command.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("MEASURED"))
            .unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&out.stderr)));
        println!("{}: {line}", path.display());
    }
}
