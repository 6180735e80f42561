//! The agent opens the files other processes map only as they were
//! mapped (`kiln_agent::open_mapped`): a process maps a file with
//! PROT_EXEC, then its path is swapped for a symlink to another file, a
//! FIFO or a device node. Through `/proc/<pid>/map_files` the mapped file
//! itself is read (the link follows the mapping, not the path); through
//! the path (the fallback, taken with a mapping whose `map_files` entry
//! does not exist) nothing is opened. The symbol uploader, given such
//! mappings, sends nothing for them and goes on with the next file.
//!
//! The whole agent (eBPF sampling, unwind tables, symbol upload) on a
//! program whose library's path became a FIFO after it was mapped keeps
//! sampling it with whole stacks, uploads the mapped library's symbols,
//! and never opens the FIFO.
//!
//! Run as root (CI does): `map_files` needs CAP_SYS_ADMIN, the last test
//! loads the eBPF program.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_agent::{FileInfo, MappedFileError, MappedSource, Mapping, SymbolUploader, open_mapped};
use kiln_model::FileId;
use kiln_test_support::CBuild;
use support::{fifo_has_reader, mkfifo};

/// Maps its argument with PROT_EXEC, prints the address, and waits.
const MAPPER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) return 1;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror("open"); return 2; }
    void *p = mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 3; }
    close(fd);
    printf("%lx\n", (unsigned long)p);
    fflush(stdout);
    for (;;) pause();
}
"#;

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "reading /proc/<pid>/map_files needs CAP_SYS_ADMIN: run as root (CI does)"
    );
}

/// A directory where PROT_EXEC mappings are allowed (not a noexec /tmp).
fn workdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Kills the child when the test ends, however it ends.
struct Mapper(Child);

impl Drop for Mapper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `mapper` on `file` and returns it with its mapping of the file.
fn map(mapper: &Path, file: &Path) -> (Mapper, Mapping) {
    let mut child = Mapper(
        Command::new(mapper)
            .arg(file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let start = u64::from_str_radix(line.trim(), 16)
        .unwrap_or_else(|_| panic!("the mapper printed {line:?}"));
    let mapping = kiln_agent::read_maps(child.0.id())
        .unwrap()
        .into_iter()
        .find(|m| m.start == start)
        .expect("the mapping is executable and listed");
    assert_eq!(Path::new(&mapping.path), file);
    (child, mapping)
}

/// The same mapping at a range the process does not have: its
/// `map_files` entry does not exist, so `open_mapped` falls back to the
/// path.
fn by_path(mapping: &Mapping) -> Mapping {
    Mapping {
        start: 0x1000,
        end: 0x2000,
        ..mapping.clone()
    }
}

/// What a path is swapped for.
#[derive(Debug, Clone, Copy)]
enum Swap {
    /// A symlink to another readable file.
    Symlink,
    /// A FIFO.
    Fifo,
    /// A character device node (1:5, /dev/zero's).
    Device,
    /// A symlink to /dev/zero.
    SymlinkToDevice,
}

/// Puts `swap` at `path` by renaming it over (atomic, as an attacker
/// would): `decoy` is the other file a symlink points at.
fn swap(path: &Path, swap: Swap, decoy: &Path) {
    let new = path.with_extension("new");
    match swap {
        Swap::Symlink => std::os::unix::fs::symlink(decoy, &new).unwrap(),
        Swap::SymlinkToDevice => std::os::unix::fs::symlink("/dev/zero", &new).unwrap(),
        Swap::Fifo => mkfifo(&new),
        Swap::Device => {
            let c = std::ffi::CString::new(new.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path; root may make device nodes.
            let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 5)) };
            assert_eq!(rc, 0, "mknod: {}", std::io::Error::last_os_error());
        }
    }
    std::fs::rename(&new, path).unwrap();
}

fn programs(dir: &Path) -> (PathBuf, PathBuf) {
    let mapper = CBuild::cc().args(["-O1"]).program(dir, "mapper", MAPPER);
    let decoy = CBuild::cc().args(["-O1"]).program(
        dir,
        "decoy",
        "int decoy_secret_function(void) { return 7; }\nint main(void) { return decoy_secret_function(); }\n",
    );
    (mapper, decoy)
}

#[test]
fn swapped_paths_are_never_opened() {
    require_root();
    let dir = workdir();
    let (mapper, decoy) = programs(dir.path());
    let original = b"the mapped file's own bytes\n".repeat(200);
    for case in [
        Swap::Symlink,
        Swap::Fifo,
        Swap::Device,
        Swap::SymlinkToDevice,
    ] {
        let file = dir.path().join(format!("mapped-{case:?}"));
        std::fs::write(&file, &original).unwrap();
        let (child, mapping) = map(&mapper, &file);
        let pid = child.0.id();
        swap(&file, case, &decoy);

        // map_files leads to the mapped inode, not to the path.
        let mut opened = open_mapped(pid, &mapping)
            .unwrap_or_else(|e| panic!("{case:?}: the mapped file itself: {e}"));
        let mut bytes = Vec::new();
        opened.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes, original, "{case:?}: read the mapped file");

        // The path is refused, unopened.
        let e = open_mapped(pid, &by_path(&mapping)).unwrap_err();
        match (case, &e) {
            (Swap::Symlink | Swap::SymlinkToDevice, MappedFileError::Symlink { .. }) => {}
            (Swap::Fifo, MappedFileError::NotRegular { kind: "FIFO", .. }) => {}
            (
                Swap::Device,
                MappedFileError::NotRegular {
                    kind: "character device",
                    ..
                },
            ) => {}
            _ => panic!("{case:?}: refused for the wrong reason: {e}"),
        }
        if let Swap::Fifo = case {
            assert!(!fifo_has_reader(&file), "nobody holds the FIFO open");
        }
        // And so is a FileId through it.
        assert!(FileInfo::of_mapping(pid, &by_path(&mapping)).is_err());
        drop(child);
    }
}

/// One request the recording server received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// A backend stand-in that records every request: `HEAD` answers 404 (no
/// symbols yet), `PUT` 200.
struct Recorder {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Recorder {
    fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                std::thread::spawn(move || serve(stream, &log));
            }
        });
        Recorder { url, requests }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: std::net::TcpStream, log: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let status = if method == "HEAD" {
            "404 Not Found"
        } else {
            "200 OK"
        };
        log.lock().unwrap().push(Request {
            method,
            path,
            content_type: headers.get("content-type").cloned(),
            body,
        });
        let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The uploader, offered mappings whose paths were swapped (opened by
/// path: their `map_files` entries do not exist), opens none, asks and
/// sends nothing for them, and then uploads a good file as a ksym.
#[test]
fn the_uploader_sends_nothing_through_a_swapped_path() {
    require_root();
    let dir = workdir();
    let (mapper, decoy) = programs(dir.path());
    let decoy_id = FileInfo::read(&decoy, "decoy").unwrap().file_id;
    let recorder = Recorder::start();
    let how = kiln_agent::SymbolUpload {
        debug_dirs: vec![],
        // No pauses: the test offers files one after the other.
        cpu_percent: 100.0,
        ..Default::default()
    };
    let mut uploader = SymbolUploader::start(&recorder.url, None, how).unwrap();

    let mut children = Vec::new();
    let mut refused: Vec<(FileId, PathBuf)> = Vec::new();
    for case in [
        Swap::Symlink,
        Swap::Fifo,
        Swap::Device,
        Swap::SymlinkToDevice,
    ] {
        // An ELF of its own (its FileId is what was sampled).
        let file = CBuild::cc().args(["-O1", "-shared", "-fPIC"]).program(
            dir.path(),
            &format!("lib-{case:?}.so"),
            &format!("int f_{case:?}(void) {{ return 1; }}\n"),
        );
        let id = FileInfo::read(&file, "lib").unwrap().file_id;
        let (child, mapping) = map(&mapper, &file);
        swap(&file, case, &decoy);
        uploader.offer(
            id,
            &MappedSource {
                pid: child.0.id(),
                mapping: by_path(&mapping),
            },
        );
        children.push(child);
        refused.push((id, file));
    }
    // Offered last, so taken last (equal weights go in order of arrival):
    // once it is sent, the others were all dealt with.
    let good = CBuild::cc().args(["-O1"]).program(
        dir.path(),
        "good",
        "int good_function(void) { return 3; }\nint main(void) { return good_function(); }\n",
    );
    let good_id = FileInfo::read(&good, "good").unwrap().file_id;
    let (child, mapping) = map(&mapper, &good);
    uploader.offer(
        good_id,
        &MappedSource {
            pid: child.0.id(),
            mapping,
        },
    );
    children.push(child);

    let deadline = Instant::now() + Duration::from_secs(30);
    let put = loop {
        let requests = recorder.requests();
        if let Some(put) = requests.iter().find(|r| r.method == "PUT") {
            break put.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the good file was never uploaded: {requests:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(put.path, format!("/api/v1/symbols/{good_id}"));
    assert_eq!(
        put.content_type.as_deref(),
        Some(kiln_symbolizer_workers::ksym::MEDIA_TYPE)
    );
    let ksym = zstd::decode_all(&put.body[..]).unwrap();
    assert!(ksym.starts_with(b"KSYM"), "a ksym, not the file");
    let text = String::from_utf8_lossy(&ksym);
    assert!(text.contains("good_function"));
    assert!(!text.contains("decoy_secret_function"));

    for request in recorder.requests() {
        for (id, _) in &refused {
            assert!(
                !request.path.contains(&id.to_string()),
                "a request for a swapped file: {request:?}"
            );
        }
        assert!(!request.path.contains(&decoy_id.to_string()));
    }
    for (_, path) in &refused {
        if std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_fifo()
        }) {
            assert!(!fifo_has_reader(path));
        }
    }
    drop(uploader);
}

/// A library built without frame pointers, whose function the host spends
/// its time in.
const HOT_LIBRARY: &str = r#"
volatile unsigned long hot_state;
__attribute__((noinline)) void hot_spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) hot_state = hot_state * 6364136223846793005UL + i;
    __asm__ volatile("");
}
"#;

/// Calls into the library until killed: main -> work -> hot_spin.
const HOT_HOST: &str = r#"
void hot_spin(unsigned long n);
__attribute__((noinline)) void work(void) { hot_spin(1000000); __asm__ volatile(""); }
int main(void) { for (;;) work(); }
"#;

/// The whole agent on a process whose library's path holds a FIFO by the
/// time the agent starts: its unwind table and its symbols come from the
/// mapped file (through `map_files`), so its stacks stay whole and its
/// functions get names, and the FIFO is never opened (which would block
/// the thread that opened it for good).
#[test]
fn the_whole_agent_profiles_and_uploads_a_swapped_library_from_the_mapped_file() {
    require_root();
    let Some(cgroup) = support::TestCgroup::create("mapped-files-swap") else {
        return;
    };
    let dir = workdir();
    let library = CBuild::cc()
        .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .program(dir.path(), "libhot.so", HOT_LIBRARY);
    let host = CBuild::cc()
        .args(["-O2", "-fomit-frame-pointer"])
        .args([
            format!("-L{}", dir.path().display()),
            "-lhot".into(),
            format!("-Wl,-rpath,{}", dir.path().display()),
        ])
        .program(dir.path(), "hot-host", HOT_HOST);
    let library_id = FileInfo::read(&library, "libhot.so").unwrap().file_id;
    let host_symbols = support::Symbols::of(&host);
    let library_symbols = support::Symbols::of(&library);

    let child = support::Workload(
        cgroup
            .command(&host)
            .env_remove("LD_LIBRARY_PATH")
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    support::wait_until_mapped(pid, "libhot.so");
    let fifo = support::SwappedFifo::rename_over(&library);

    let recorder = Recorder::start();
    let mut agent = support::start_agent(kiln_agent::AgentConfig {
        frequency_hz: 199,
        interval: Duration::from_secs(1),
        host: "kiln-agent-test".into(),
        unwind_tables: true,
        cgroup: Some(cgroup.path().to_owned()),
        ..kiln_agent::AgentConfig::default()
    });
    agent
        .upload_symbols_to(
            &recorder.url,
            None,
            kiln_agent::SymbolUpload {
                cpu_percent: 100.0,
                ..Default::default()
            },
        )
        .unwrap();
    let mut sink = kiln_agent::MemorySink::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !agent.unwind_tables_loaded(pid) {
        assert!(Instant::now() < deadline, "the host's tables never loaded");
        std::thread::sleep(Duration::from_millis(500));
        agent.tick(&mut sink).unwrap();
    }
    let first = sink.batches.len();
    let (uploaded, whole, in_library) = loop {
        std::thread::sleep(Duration::from_secs(1));
        agent.tick(&mut sink).unwrap();
        let samples = support::resolve(&sink.batches, first);
        let ours = samples
            .iter()
            .filter(|s| s.0.as_deref() == Some(&*pid.to_string()));
        let (mut whole, mut in_library) = (0, 0);
        for (_, frames, count) in ours {
            let names: Vec<&str> = frames
                .iter()
                .filter_map(|f| host_symbols.name(f).or_else(|| library_symbols.name(f)))
                .collect();
            if names.ends_with(&["main", "work", "hot_spin"]) {
                whole += count;
            }
            if names.contains(&"hot_spin") {
                in_library += count;
            }
        }
        let put = recorder
            .requests()
            .into_iter()
            .find(|r| r.method == "PUT" && r.path == format!("/api/v1/symbols/{library_id}"));
        if (put.is_some() && in_library >= 200) || Instant::now() > deadline {
            break (put, whole, in_library);
        }
    };
    let opened = fifo.opened();
    drop(agent);
    drop(child);

    assert!(
        !opened,
        "the agent opened the FIFO put at the library's path since it was mapped"
    );
    assert!(
        in_library >= 200,
        "only {in_library} samples in hot_spin: sampling stopped"
    );
    assert!(
        whole * 100 >= in_library * 99,
        "{whole} of {in_library} samples in hot_spin run main -> work -> hot_spin: the \
         library's unwind table was not built from the mapped file"
    );
    let put = uploaded.expect("the mapped library's symbols were never uploaded");
    let ksym = zstd::decode_all(&put.body[..]).unwrap();
    assert!(String::from_utf8_lossy(&ksym).contains("hot_spin"));
}
