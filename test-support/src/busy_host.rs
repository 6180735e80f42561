//! A host made busy the way a real one is, for the agent's busy-host test
//! and its peer bench (`load-tests/src/bin/peer_bench.rs`): hundreds of
//! distinct live programs, each with a sizeable `.eh_frame` and each
//! waking now and then (so that a profiler samples each and needs its
//! unwind tables), and a real large binary (rustc, which maps the rustc
//! driver and LLVM libraries, 150 and 200 MB) compiling now and then.
//!
//! Sized for a 2-core CI machine: the [`PROGRAMS`] programs take about a
//! fifth of a core together, rustc about half of one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::CBuild;

/// Distinct live programs besides the workload.
pub const PROGRAMS: usize = 200;
/// Functions in each: about 70 KiB of table each, 14 MiB for all.
pub const PAD_FUNCTIONS: usize = 3000;

/// A program that spins for about 1 ms every second (so that the sampler
/// meets it now and then) through its [`PAD_FUNCTIONS`] pad functions,
/// until killed.
pub fn program_source() -> String {
    let mut source = String::from(
        "#include <time.h>\n#include <unistd.h>\n\
         __attribute__((noinline)) int pad_sink(int x) { __asm__ volatile(\"\"); return x; }\n",
    );
    for i in 0..PAD_FUNCTIONS {
        source.push_str(&format!(
            "__attribute__((noinline)) int pad_{i}(int x) {{ int y = pad_sink(x + {i}); \
             return pad_sink(y) * {}; }}\n",
            i + 1
        ));
    }
    source.push_str("int main(void) {\n  volatile int x = 0;\n  for (;;) {\n");
    source.push_str(
        "    struct timespec start, now;\n    clock_gettime(CLOCK_MONOTONIC, &start);\n    do {\n",
    );
    for i in (0..PAD_FUNCTIONS).step_by(PAD_FUNCTIONS / 16) {
        source.push_str(&format!("      x = pad_{i}(x);\n"));
    }
    source.push_str(
        "      clock_gettime(CLOCK_MONOTONIC, &now);\n    } while ((now.tv_sec - start.tv_sec) * \
         1000000000L + (now.tv_nsec - start.tv_nsec) < 1000000L);\n    usleep(1000000);\n  }\n}\n",
    );
    source
}

/// [`PROGRAMS`] builds of the program in `dir`, each with its own build id
/// (so its own FileId and its own table): compiled once (clang, `-O2
/// -fomit-frame-pointer`), linked per binary.
pub fn build_programs(dir: &Path) -> Vec<PathBuf> {
    let source = dir.join("program.c");
    std::fs::write(&source, program_source())
        .unwrap_or_else(|e| panic!("writing {}: {e}", source.display()));
    let object = dir.join("program.o");
    CBuild::clang()
        .args(["-O2", "-fomit-frame-pointer", "-c"])
        .file(&source, &object);
    (0..PROGRAMS)
        .map(|i| {
            let out = dir.join(format!("program-{i}"));
            CBuild::clang()
                .args([format!("-Wl,--build-id=0x{i:08x}{:032x}", 0x6275_7379_u128)])
                .file(&object, &out);
            out
        })
        .collect()
}

/// Compiles a small Rust program with rustc (`$RUSTC`, else `rustc`) in
/// `dir`, resting a second between runs, until `stop`: a real big binary
/// (its libraries' tables are the largest on most hosts), mapped by a new
/// process every second or two. The thread returns how many times rustc
/// ran.
pub fn compile_in_a_loop(dir: &Path, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
    let source = dir.join("hello.rs");
    std::fs::write(
        &source,
        "fn main() { let v: Vec<u64> = (0..100).map(|x| x * x).collect(); println!(\"{}\", v.iter().sum::<u64>()); }\n",
    )
    .unwrap_or_else(|e| panic!("writing {}: {e}", source.display()));
    let out = dir.join("hello");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    std::thread::spawn(move || {
        let mut runs = 0;
        while !stop.load(Ordering::Relaxed) {
            let status = Command::new(&rustc)
                .args(["-O", "--edition", "2021", "-o"])
                .arg(&out)
                .arg(&source)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run rustc");
            assert!(status.success(), "rustc failed");
            runs += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        runs
    })
}

/// The busy host running: the programs [`build_programs`] built, started,
/// and rustc compiling in a loop. Dropping it stops rustc's loop and kills
/// the programs, however the caller ends.
pub struct BusyHost {
    programs: Vec<Child>,
    stop: Arc<AtomicBool>,
    rustc: Option<JoinHandle<u32>>,
}

impl BusyHost {
    /// Starts every program in `programs` and rustc's loop (working in
    /// `dir`).
    pub fn start(dir: &Path, programs: &[PathBuf]) -> BusyHost {
        let mut host = BusyHost {
            programs: Vec::with_capacity(programs.len()),
            stop: Arc::new(AtomicBool::new(false)),
            rustc: None,
        };
        for p in programs {
            host.programs.push(
                Command::new(p)
                    .spawn()
                    .unwrap_or_else(|e| panic!("starting {}: {e}", p.display())),
            );
        }
        host.rustc = Some(compile_in_a_loop(dir, host.stop.clone()));
        host
    }

    /// The programs' process ids.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.programs.iter().map(Child::id)
    }

    /// Stops rustc's loop (after the run under way) and returns how many
    /// times rustc ran; the programs go on until dropped.
    pub fn stop_compiling(&mut self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.rustc
            .take()
            .map_or(0, |r| r.join().expect("the rustc loop panicked"))
    }
}

impl Drop for BusyHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in &mut self.programs {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Not joined when the loop panicked (the panic is the news), nor
        // waited on while unwinding from another panic.
        if let Some(r) = self.rustc.take()
            && !std::thread::panicking()
        {
            let _ = r.join();
        }
    }
}
