//! The local agent's automatic symbol upload, end to end: `kiln up` with
//! its agent samples a program built at test time, sends the program's
//! file to the server's symbol endpoint, and the flamegraph names the
//! program's function. Needs root (the agent loads an eBPF program), like
//! the agent's own tests.

mod support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use kiln_test_support::CBuild;

use support::Server;

const PROGRAM: &str = r#"
#include <stdlib.h>
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) void kiln_upload_spin(void) { for (int i = 0; i < 1000000; i++) sink += i; }
int main(int argc, char **argv) {
    time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 60);
    while (time(NULL) < end) kiln_upload_spin();
    return 0;
}
"#;

/// Kills the child when the test ends, however it ends.
struct Workload(Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_local_agent_uploads_what_it_samples_and_frames_get_names() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test runs kiln up's eBPF agent and must run as root; CI runs it as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = CBuild::cc()
        .args(["-O2", "-g"])
        .program(dir.path(), "spinner", PROGRAM);
    let _workload = Workload(
        Command::new(&exe)
            .arg("90")
            .spawn()
            .expect("start the workload"),
    );
    let server = Server::start_with(&dir.path().join("data"), &["--agent-frequency", "97"]);

    // The agent uploads files one at a time, in the order it first samples
    // them; `kiln up`'s own debug binary (hundreds of MB of DWARF, tens of
    // seconds to extract in a debug build) may be ahead of the spinner.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let lines = server.collapsed("&process=spinner");
        if lines.iter().any(|l| l.contains("kiln_upload_spin")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the spinner's function never got its name; its stacks: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
