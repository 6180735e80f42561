//! A `kiln` role (`gateway`, `worker`, `query`) run as a child process, as
//! a deployment runs it: the distributed tests and the fleet bench start
//! their clusters with it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `kiln` process, killed when dropped.
#[derive(Debug)]
pub struct KilnProcess {
    /// What the test calls it (`gateway`, `worker-2`).
    pub name: String,
    child: Child,
    /// The HTTP base URL it printed, for roles that serve.
    url: Option<String>,
}

impl KilnProcess {
    /// Runs `binary ARGS` (logging warnings only, unless `KILN_LOG` says
    /// otherwise) and waits for its "… is up[: URL]" line; panics, naming
    /// the process, when it cannot start or exits before that line.
    pub fn start(binary: &Path, name: &str, args: &[&str]) -> KilnProcess {
        let mut command = Command::new(binary);
        command.args(args);
        if std::env::var_os("KILN_LOG").is_none() {
            command.env("KILN_LOG", "warn");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {} {name}: {e}", binary.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("kiln {name} exited before it was up"))
                .expect("read kiln's output");
            if line.contains(" is up") {
                break line
                    .split_once(": ")
                    .map(|(_, url)| url.trim_end_matches('/').to_owned());
            }
        };
        // Keep reading, so that the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        KilnProcess {
            name: name.to_owned(),
            child,
            url,
        }
    }

    /// The HTTP base URL; panics for a role that printed none.
    pub fn url(&self) -> &str {
        self.url.as_deref().expect("a role that serves HTTP")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no chance to commit, flush or leave a consumer group.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill");
        let _ = self.child.wait();
        eprintln!("killed kiln {} with SIGKILL", self.name);
    }
}

impl Drop for KilnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
