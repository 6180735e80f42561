//! What the agent's root tests share: starting the agent, compiling the
//! C workload, resolving the batches it sends, naming the workload's
//! frames.

#![allow(dead_code, reason = "Each test binary uses its own part")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;

use kiln_agent::{Agent, AgentConfig, AgentError, FileInfo, SamplerError};
use kiln_model::{Batch, FileId, Frame, LabelSet, label_names};
use kiln_test_support::CBuild;
use object::{Object, ObjectSymbol, SymbolKind};

pub(crate) fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads an eBPF program and must run as root (or with CAP_BPF and \
         CAP_PERFMON); CI runs it as root. Run `sudo -E cargo test -p kiln-agent`."
    );
}

/// Starts the agent with `config`, or fails the test saying what is
/// missing.
pub(crate) fn start_agent(config: AgentConfig) -> Agent {
    match Agent::start(config) {
        Ok(agent) => agent,
        Err(AgentError::Sampler(e @ SamplerError::PermissionDenied(_))) => {
            panic!("the kernel refused the eBPF sampler: {e}")
        }
        Err(AgentError::Sampler(e @ SamplerError::NotBuilt(_))) => panic!(
            "{e}. Install Debian's clang and libbpf-dev (apt-get install clang libbpf-dev) \
             and rebuild."
        ),
        Err(e) => panic!("starting the agent failed: {e:?}"),
    }
}

/// Compiles the workload with `flags` into `dir`.
pub(crate) fn compile_workload(dir: &Path, flags: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c");
    let out = dir.join("shares");
    CBuild::clang().args(flags).file(&source, &out);
    out
}

/// Kills the child when the test ends, however it ends.
pub(crate) struct Workload(pub Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every sample of the batches from index `first` on with its stack
/// resolved, as (pid label, frames root first, count). Dictionary entries
/// come from the batch itself or an earlier one, as the backend sees them.
pub(crate) fn resolve(batches: &[Batch], first: usize) -> Vec<(Option<String>, Vec<Frame>, u64)> {
    resolve_labelled(batches, first)
        .into_iter()
        .map(|s| {
            (
                s.labels.get(label_names::PID).map(str::to_string),
                s.frames,
                s.count,
            )
        })
        .collect()
}

/// One sample as the backend would see it.
pub(crate) struct Resolved {
    pub labels: LabelSet,
    /// Root first.
    pub frames: Vec<Frame>,
    pub count: u64,
    /// Its batch's: what one count weighs (1 for nanoseconds).
    pub period_ns: u64,
}

/// The percentage of `samples`' counts whose frames satisfy `pred`.
pub(crate) fn share_of(samples: &[Resolved], pred: impl Fn(&[Frame]) -> bool) -> f64 {
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let matching: u64 = samples
        .iter()
        .filter(|s| pred(&s.frames))
        .map(|s| s.count)
        .sum();
    100.0 * matching as f64 / total.max(1) as f64
}

impl Resolved {
    pub(crate) fn pid(&self) -> Option<&str> {
        self.labels.get(label_names::PID)
    }
}

/// As [`resolve`], keeping each sample's labels whole.
pub(crate) fn resolve_labelled(batches: &[Batch], first: usize) -> Vec<Resolved> {
    let mut frames = HashMap::new();
    let mut stacks = HashMap::new();
    let mut labels = HashMap::new();
    let mut out = Vec::new();
    for (i, batch) in batches.iter().enumerate() {
        for e in &batch.frames {
            frames.insert(e.id, e.frame.clone());
        }
        for e in &batch.stacks {
            stacks.insert(e.id, e.frames.clone());
        }
        for e in &batch.label_sets {
            labels.insert(e.id, e.labels.clone());
        }
        if i < first {
            continue;
        }
        for s in &batch.samples {
            let stack = stacks
                .get(&s.stack)
                .unwrap_or_else(|| panic!("stack {} was never sent", s.stack));
            let resolved = stack
                .iter()
                .map(|id| {
                    frames
                        .get(id)
                        .unwrap_or_else(|| panic!("frame {id} was never sent"))
                        .clone()
                })
                .collect();
            let labels = labels
                .get(&s.labels)
                .unwrap_or_else(|| panic!("label set {} was never sent", s.labels))
                .clone();
            out.push(Resolved {
                labels,
                frames: resolved,
                count: s.count,
                period_ns: batch.period_ns,
            });
        }
    }
    out
}

/// The executables the batches name, by id: what a native frame's
/// `file_id` stands for.
pub(crate) fn executables(batches: &[Batch]) -> HashMap<FileId, String> {
    batches
        .iter()
        .flat_map(|b| &b.executables)
        .map(|e| (e.file_id, e.name.clone()))
        .collect()
}

/// The workload's function symbols, to name its frames (the test's own
/// stand-in for the symbolizer).
pub(crate) struct Symbols {
    pub file_id: FileId,
    functions: Vec<(u64, u64, String)>,
}

impl Symbols {
    pub(crate) fn of(exe: &Path) -> Symbols {
        let data = std::fs::read(exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let mut functions: Vec<_> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.size(), s.name().unwrap_or("").to_string()))
            .collect();
        functions.sort();
        Symbols {
            file_id: FileInfo::read(exe, "shares").unwrap().file_id,
            functions,
        }
    }

    pub(crate) fn name(&self, frame: &Frame) -> Option<&str> {
        let Frame::Address { file_id, addr, .. } = frame else {
            return None;
        };
        if *file_id != self.file_id {
            return None;
        }
        let i = self.functions.partition_point(|f| f.0 <= *addr);
        let (start, size, name) = self.functions.get(i.checked_sub(1)?)?;
        (*addr < start + size).then_some(name.as_str())
    }
}

/// A cgroup v2 made for one test, removed when the test ends, however it
/// ends: what is still running in it is killed first.
pub(crate) struct TestCgroup {
    path: PathBuf,
    /// `path/cgroup.procs`, ready for `pre_exec`, which must not allocate.
    procs: std::ffi::CString,
}

impl TestCgroup {
    /// Makes a cgroup named after `name` and this process under the cgroup
    /// v2 mount; `None` (saying why on stderr, for the test to skip) when
    /// cgroup v2 is not mounted.
    pub(crate) fn create(name: &str) -> Option<TestCgroup> {
        use std::os::unix::ffi::OsStrExt;

        let Some(mount) = kiln_agent::cgroup2_mount() else {
            eprintln!(
                "skipped: cgroup v2 is not mounted on this host (no cgroup2 filesystem in \
                 /proc/self/mountinfo), so no cgroup can be made to profile"
            );
            return None;
        };
        let path = mount.join(format!("kiln-test-{name}-{}", std::process::id()));
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("making the test cgroup {}: {e}", path.display()));
        let procs = std::ffi::CString::new(path.join("cgroup.procs").as_os_str().as_bytes())
            .expect("no NUL in a path we made");
        Some(TestCgroup { path, procs })
    }

    /// A cgroup below this one, removed when dropped (drop it first).
    pub(crate) fn child(&self, name: &str) -> TestCgroup {
        use std::os::unix::ffi::OsStrExt;

        let path = self.path.join(name);
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("making the test cgroup {}: {e}", path.display()));
        let procs = std::ffi::CString::new(path.join("cgroup.procs").as_os_str().as_bytes())
            .expect("no NUL in a path we made");
        TestCgroup { path, procs }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `program`, to be started in this cgroup: the child moves itself in
    /// before it executes `program`, so the program's every sample and
    /// its execve are in it.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        use std::os::unix::process::CommandExt;

        let mut command = std::process::Command::new(program);
        let procs = self.procs.clone();
        // SAFETY: the closure runs between fork and exec, where only
        // async-signal-safe calls are allowed: open, write and close are,
        // and it allocates nothing (the path was made before the fork).
        unsafe {
            command.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" moves the writing process.
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written == 1 { Ok(()) } else { Err(error) }
            });
        }
        command
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // cgroup.kill (Linux 5.14) kills every process in it; the
        // directory can go once they have exited, which takes a moment.
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if std::time::Instant::now() > deadline => {
                    eprintln!(
                        "could not remove the test cgroup {}: {e}",
                        self.path.display()
                    );
                    return;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }
}

/// Makes a FIFO at `path`.
pub(crate) fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Whether any process has the FIFO at `path` open for reading: a writer's
/// non-blocking open succeeds only then.
pub(crate) fn fifo_has_reader(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .is_ok()
}

/// Waits, up to 10 s, until process `pid` maps a file named `name`.
pub(crate) fn wait_until_mapped(pid: u32, name: &str) {
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .contains(name)
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "process {pid} never mapped {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A FIFO renamed over a mapped file's path, as an attacker would (the
/// mapped file is unlinked, its maps line says "(deleted)", and the path
/// is the FIFO's), watched for anyone opening it.
pub(crate) struct SwappedFifo {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    watch: std::thread::JoinHandle<bool>,
}

impl SwappedFifo {
    /// Renames a new FIFO over `path` and starts watching it.
    pub(crate) fn rename_over(path: &Path) -> SwappedFifo {
        let fifo = path.with_extension("fifo");
        mkfifo(&fifo);
        std::fs::rename(&fifo, path).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            let (stop, path) = (stop.clone(), path.to_owned());
            // Notes an opener, and lets it go: a writer's open wakes a
            // reader blocked in its own, and its close gives it EOF.
            std::thread::spawn(move || {
                let mut opened = false;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    opened |= fifo_has_reader(&path);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                opened
            })
        };
        SwappedFifo { stop, watch }
    }

    /// Stops watching: whether anyone opened the FIFO meanwhile.
    pub(crate) fn opened(self) -> bool {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.watch.join().unwrap()
    }
}
