//! `kiln up` on a full disk (issue 38): its data dir on a small tmpfs,
//! which another file fills. Ingest must refuse with a 507 that names the
//! cause, lose nothing it accepted, and take batches again by itself once
//! room is made; and a restart afterwards must find every accepted sample
//! once. Needs root (to mount the tmpfs), as CI runs it.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Exposition, Server, aggregate, sorted_lines};

/// A tmpfs mounted on a directory for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "the full-disk test mounts a tmpfs and must run as root (CI does)"
        );
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "kiln-full-disk",
            ])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount a tmpfs on {}: {status}",
            dir.display()
        );
        Tmpfs(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem of `dir` to its last byte with one file.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x55u8; 1 << 20];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    while file.write(&[0]).is_ok_and(|n| n == 1) {}
    path
}

/// `stacks` distinct collapsed stacks under `root`, one sample each: large
/// enough (about 100 KiB) that a full disk cannot take it in the spare
/// bytes of pages already allocated.
fn import_body(root: &str, stacks: usize) -> String {
    (0..stacks)
        .map(|j| format!("main;{root};f{j} 1\n"))
        .collect()
}

/// The flamegraph of the last day, summed per stack's two outermost
/// frames under main (`main;before`), as sorted lines.
fn totals(server: &Server) -> Vec<String> {
    let (status, body) = server.get("/api/v1/flamegraph?from=now-1d&format=collapsed");
    assert_eq!(status, 200, "{body}");
    aggregate(sorted_lines(&body).into_iter().map(|line| {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let top: Vec<&str> = stack.split(';').take(2).collect();
        format!("{} {count}", top.join(";"))
    }))
}

fn wait_for(server: &Server, want: &[&str], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = totals(server);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the flamegraph has {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// Guards "a full disk: ingest refuses with a clear 507 naming the cause,
// nothing accepted is lost, and service resumes by itself once space is
// freed" for `kiln up`. The embedded bus once failed its partition for
// good on the first failed write, answering 503 "reopen the bus" until a
// restart.
#[test]
fn a_full_disk_refuses_ingest_by_name_and_service_resumes_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let _tmpfs = Tmpfs::mount(dir.path(), "96m");
    let data = dir.path().join("kiln");
    let server = Server::start(&data);
    server.import("collapsed", import_body("before", 3000).as_bytes());
    wait_for(
        &server,
        &["main;before 3000"],
        "the import before the disk filled",
    );

    let filler = fill(dir.path());
    println!(
        "the data dir's filesystem filled by a {} MiB file",
        std::fs::metadata(&filler).unwrap().len() >> 20
    );
    for i in 0..3 {
        let (status, text) = server
            .post(
                "/api/v1/import?format=collapsed",
                import_body(&format!("during_{i}"), 3000).as_bytes(),
            )
            .expect("POST an import on a full disk");
        println!("an import on a full disk: {status} {text}");
        assert_eq!(status, 507, "{text}");
        assert!(
            text.contains("disk is full") && text.contains("No space left on device"),
            "{text}"
        );
    }
    // What was accepted before is still served, and the refusals are
    // counted by their cause.
    wait_for(&server, &["main;before 3000"], "a read on a full disk");
    let refused = Exposition::scrape(&server.url)
        .sum("kiln_ingest_rejections_total", &[("reason", "disk_full")]);
    assert_eq!(
        refused, 3.0,
        "kiln_ingest_rejections_total{{reason=disk_full}}"
    );

    std::fs::remove_file(&filler).unwrap();
    let started = Instant::now();
    let (status, text) = server
        .post(
            "/api/v1/import?format=collapsed",
            import_body("after", 3000).as_bytes(),
        )
        .expect("POST an import once there is room");
    assert_eq!(status, 200, "the first import once there is room: {text}");
    wait_for(
        &server,
        &["main;after 3000", "main;before 3000"],
        "the first import once there is room",
    );
    println!(
        "once the filler was removed, the next import was accepted and read back in {:?}",
        started.elapsed()
    );

    // A restart finds every accepted sample, once.
    server.stop();
    let server = Server::start(&data);
    wait_for(
        &server,
        &["main;after 3000", "main;before 3000"],
        "after a restart",
    );
}

// Guards the same for the profile store: its own disk full while the bus
// still takes batches. The batch waits on the bus (nothing is lost, none
// is set aside), the store takes it once room is made, and a restart
// finds it once. fjall refuses every write after a failed one
// ("Poisoned") until it is opened again, which the store once left to a
// restart of Kiln.
#[test]
fn a_full_profile_store_takes_what_waited_once_room_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("kiln");
    let profiles = data.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    let _tmpfs = Tmpfs::mount(&profiles, "64m");
    let server = Server::start(&data);
    server.import("collapsed", import_body("before", 3000).as_bytes());
    wait_for(
        &server,
        &["main;before 3000"],
        "the import before the disk filled",
    );

    let filler = fill(&profiles);
    let url = server.url.clone();
    let key = server.key.clone();
    let during = std::thread::spawn(move || {
        support::request(
            &url,
            "POST",
            "/api/v1/import?format=collapsed",
            Some(&key),
            &[],
            import_body("during", 3000).as_bytes(),
        )
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        totals(&server),
        ["main;before 3000"],
        "the store took a batch on a full disk"
    );

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    wait_for(
        &server,
        &["main;before 3000", "main;during 3000"],
        "the batch that waited while the store's disk was full",
    );
    println!(
        "the batch that waited on the bus was queryable {:?} after room was made",
        freed.elapsed()
    );
    let retries = Exposition::scrape(&server.url).sum("kiln_worker_write_retries_total", &[]);
    println!("store writes retried while its disk was full: {retries}");
    assert!(retries >= 1.0, "no store write retry counted");
    let (status, text) = during.join().unwrap();
    println!("the import sent while the store's disk was full: {status} {text}");
    assert_eq!(status, 200, "{text}");
    let dead_letters = data.join("objects");
    assert!(
        !walk(&dead_letters)
            .iter()
            .any(|p| p.to_string_lossy().contains("dead-letters")),
        "a batch was set aside"
    );

    server.stop();
    let server = Server::start(&data);
    wait_for(
        &server,
        &["main;before 3000", "main;during 3000"],
        "after a restart",
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// A batch of one stack `main;work_N`, counted `n`, at `ts_ns`.
fn agent_batch(n: u64, ts_ns: i64) -> kiln_model::Batch {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
    let mut b = BatchBuilder::new("agent-on-a-full-disk", ts_ns, 10_000_000);
    let frames = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, format!("work_{n}")),
    ];
    b.add(ts_ns, &frames, &LabelSet::new().with("check", "spool"), n);
    b.finish()
}

/// An agent whose spool's disk is full while its backend is away: its
/// batches are held in memory (not lost), go to the spool once room is
/// made, and reach the backend, every one, once it is there.
#[test]
fn an_agent_whose_spool_disk_is_full_loses_nothing() {
    use kiln_agent::{Delivery, HttpSink, Sink, Spool};
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    let _tmpfs = Tmpfs::mount(&spool_dir, "1m");
    // A backend that is away: a port nothing listens on.
    let away = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let spool = Spool::open(spool_dir.join("batches"), 64 << 20).unwrap();
    let mut sink = HttpSink::new(&away, None, Some(spool));
    let filler = fill(&spool_dir);
    let t0 = support::now_ns() - 60_000_000_000;
    let mut deliveries = Vec::new();
    for n in 1..=5u64 {
        deliveries.push(sink.send(&agent_batch(n, t0 + n as i64)).unwrap());
    }
    assert!(
        deliveries.iter().all(|d| *d == Delivery::Held),
        "{deliveries:?}"
    );
    assert_eq!(sink.held(), 5);
    // Room again, the backend still away: the held batches go to the
    // spool first, in order, then the new one.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(
        sink.send(&agent_batch(6, t0 + 6)).unwrap(),
        Delivery::Spooled
    );
    assert_eq!(sink.held(), 0);
    assert_eq!(sink.spool().unwrap().files().unwrap().len(), 6);
    println!("spool disk full: 5 batches held in memory, then spooled in order once room was made");
    // The backend there (the agent started again with its spool): every
    // batch arrives once.
    drop(sink);
    let server = Server::start(&dir.path().join("kiln"));
    let spool = Spool::open(spool_dir.join("batches"), 64 << 20).unwrap();
    let mut sink = HttpSink::new(&server.url, Some(&server.key), Some(spool));
    assert_eq!(
        sink.send(&agent_batch(7, t0 + 7)).unwrap(),
        Delivery::Delivered
    );
    let expected: Vec<String> = (1..=7).map(|n| format!("main;work_{n} {n}")).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    server.collapsed_once("&check=spool", &expected);
    println!("all 7 batches stored once");
}
