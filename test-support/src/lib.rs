//! What the workspace's integration tests share: building the small C
//! programs they profile or symbolize, and running the tools around them
//! (`objcopy`), each failing the test with the command and its output
//! when something is missing or goes wrong; and making a host busy the
//! way a real one is ([`busy_host`]); running `kiln` roles as child
//! processes ([`KilnProcess`]).
//!
//! A dev-dependency of the tests, and a dependency of the agent's bench
//! binaries (which share [`busy_host`] with its test); nothing here is
//! linked into what ships.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod busy_host;
mod kiln_process;
pub mod programs;

pub use kiln_process::KilnProcess;

/// A C compiler invocation: `CC -o OUT SOURCE ARGS…`. Flags and libraries
/// both go after the source, where the compiler driver takes either.
#[derive(Debug, Clone)]
pub struct CBuild {
    cc: String,
    args: Vec<OsString>,
}

impl CBuild {
    /// With `$KILN_TEST_CC`, else the system's `cc`.
    pub fn cc() -> CBuild {
        CBuild::with_default("cc")
    }

    /// With `$KILN_TEST_CC`, else `clang`: for the agent's tests, since
    /// GCC 12 leaves leaf functions frameless even with
    /// `-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer`, and the agent
    /// needs clang to build anyway.
    pub fn clang() -> CBuild {
        CBuild::with_default("clang")
    }

    fn with_default(default: &str) -> CBuild {
        CBuild {
            cc: std::env::var("KILN_TEST_CC").unwrap_or_else(|_| default.into()),
            args: Vec::new(),
        }
    }

    /// Adds arguments (flags, objects, libraries).
    pub fn args<I, S>(mut self, args: I) -> CBuild
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Writes `text` to `dir/<name>.c` and builds `dir/<name>`.
    pub fn program(self, dir: &Path, name: &str, text: &str) -> PathBuf {
        let source = dir.join(format!("{name}.c"));
        std::fs::write(&source, text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", source.display()));
        let out = dir.join(name);
        self.file(&source, &out);
        out
    }

    /// Builds the source (or object) file `source` into `out`.
    pub fn file(self, source: &Path, out: &Path) {
        let mut command = Command::new(&self.cc);
        command.arg("-o").arg(out).arg(source).args(&self.args);
        run(&mut command);
    }
}

/// Runs `command` and returns its output; fails the test, naming the
/// command and printing its stderr, when it cannot start or fails.
pub fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} did not start ({e}): is it installed?"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Copies the ELF file `full` to `stripped` without symbols or debug
/// information (what a distribution ships), with `objcopy`.
pub fn strip(full: &Path, stripped: &Path) {
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(full)
        .arg(stripped));
}

/// `libkiln_cuda.so`, built (or found up to date) by cargo for a test.
///
/// Built in `target/<own_dir>`, not the workspace's target directory: a
/// cdylib's rlib has no hash in its file name, so building `-p kiln-gpu`
/// alone (other features unified) there would overwrite the
/// `deps/libkiln_cuda.rlib` that other crates, and their doctests, were
/// built against (E0460). Always asked of cargo, so a copy from before a
/// change to gpu-lib is never used.
pub fn kiln_cuda_cdylib(own_dir: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/debug/deps/<test> → target
    let target_dir = exe
        .ancestors()
        .nth(3)
        .expect("a test binary under target/<profile>/deps");
    let own_dir = target_dir.join(own_dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "kiln-gpu", "--lib"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("CARGO_TARGET_DIR", &own_dir)
        .status()
        .expect("running cargo");
    assert!(status.success(), "cargo build -p kiln-gpu failed");
    let lib = own_dir.join("debug").join("libkiln_cuda.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}
