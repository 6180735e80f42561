//! The `kiln import` and `kiln flamegraph` commands against `kiln up`.

mod support;

use std::process::Command;

use support::{Server, sorted_lines};

fn kiln(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("KILN_LOG", "warn")
        .output()
        .expect("run kiln")
}

/// `kiln ARGS` on the server's machine: it finds the server's API key in
/// the server's data directory.
fn kiln_against(server: &Server, args: &[&str]) -> std::process::Output {
    server.cli().args(args).output().expect("run kiln")
}

#[test]
fn import_guesses_formats_and_flamegraph_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let folded = dir.path().join("profile.folded");
    std::fs::write(&folded, "main;work 4\nmain 1\n").unwrap();
    let perf = format!(
        "{}/../formats/tests/data/real-c-threads-syscalls.perf",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = kiln_against(
        &server,
        &[
            "import",
            "--server",
            &server.url,
            "--label",
            "host=laptop",
            folded.to_str().unwrap(),
            &perf,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"samples\":5"), "{stdout}");

    let out = kiln_against(
        &server,
        &[
            "flamegraph",
            "--server",
            &server.url,
            "--filter",
            "host=laptop",
            "--filter",
            "process=app",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "perf's process is not app"
    );

    // The key given by flag, from anywhere.
    let out = kiln(&[
        "flamegraph",
        "--server",
        &server.url,
        "--api-key",
        &server.key,
        "--from",
        "now-1d",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = sorted_lines(&String::from_utf8_lossy(&out.stdout));
    assert!(lines.contains(&"main;work 4".to_owned()), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("start_thread;worker")),
        "{lines:?}"
    );
}

#[test]
fn import_failures_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let bad = dir.path().join("bad.folded");
    std::fs::write(&bad, "main;work four\n").unwrap();
    let out = kiln_against(
        &server,
        &["import", "--server", &server.url, bad.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.folded") && stderr.contains("line 1"),
        "{stderr}"
    );

    let out = kiln(&[
        "import",
        "--server",
        "http://127.0.0.1:9",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());

    // A key the server does not know: refused, saying so.
    let good = dir.path().join("good.folded");
    std::fs::write(&good, "main;work 4\n").unwrap();
    let unknown = format!("kiln_{}", "0".repeat(64));
    let out = kiln(&[
        "import",
        "--server",
        &server.url,
        "--api-key",
        &unknown,
        good.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("good.folded") && stderr.contains("401"),
        "{stderr}"
    );
}

/// `kiln up --agent-cgroup` with a directory that is no cgroup v2 fails at
/// once, naming it, before the server starts.
#[test]
fn up_refuses_an_agent_cgroup_that_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = kiln(&[
        "up",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--agent-cgroup",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(dir.path().to_str().unwrap())
            && stderr.contains("not a cgroup v2 directory"),
        "{stderr}"
    );
}
