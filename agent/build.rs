//! Compiles Kiln's eBPF programs (`src/bpf/*.bpf.c`, one program per file
//! sharing `kiln.bpf.h` and `walk.bpf.h`) with clang, and links them with
//! `bpftool gen object` into `$OUT_DIR/profiler.bpf.o`, one object with one
//! set of maps, which `src/sampler.rs` embeds.
//!
//! Needs Debian's `clang`, `libbpf-dev` (for `bpf/bpf_helpers.h`) and
//! `bpftool` (libbpf's static linker); `linux-libc-dev` provides the UAPI
//! headers and comes with `build-essential`. The programs read one kernel
//! field by name, with CO-RE (`kiln.bpf.h`), and need no `vmlinux.h`.
//!
//! When a tool or libbpf's headers are missing, the crate still builds so
//! that the rest of the workspace does: the object is left empty, a cargo
//! warning names the packages, and the agent refuses to start with the same
//! message (`SamplerError::NotBuilt`). A compile or link error in the C
//! source is a bug, and fails the build.
//!
//! Environment: `KILN_BPF_CLANG` (default `clang`), `KILN_BPF_BPFTOOL`
//! (default `bpftool`), `KILN_BPF_CFLAGS` (extra flags, split on
//! whitespace).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const DIR: &str = "src/bpf";
/// The translation units, each compiled on its own: one program per file,
/// and the walker's global functions.
const UNITS: [&str; 5] = ["sample", "exec", "gpu_launch", "off_cpu", "walk"];
const HEADER: &str = "src/bpf/types.h";
const INSTALL: &str = "install Debian's `clang`, `libbpf-dev` and `bpftool` packages \
     (apt-get install clang libbpf-dev bpftool) and rebuild";

fn main() {
    println!("cargo::rerun-if-changed={DIR}");
    println!("cargo::rerun-if-env-changed=KILN_BPF_CLANG");
    println!("cargo::rerun-if-env-changed=KILN_BPF_BPFTOOL");
    println!("cargo::rerun-if-env-changed=KILN_BPF_CFLAGS");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("profiler.bpf.o");

    let abi = abi_version(Path::new(HEADER));
    println!("cargo::rustc-env=KILN_BPF_ABI_VERSION={abi}");

    match build(&out_dir, &object) {
        Ok(()) => println!("cargo::rustc-env=KILN_BPF_NOT_BUILT="),
        Err(Missing(why)) => {
            println!("cargo::warning=kiln-agent: eBPF program not built: {why}");
            fs::write(&object, b"").expect("write the empty BPF object placeholder");
            println!("cargo::rustc-env=KILN_BPF_NOT_BUILT={why}");
        }
    }
}

/// A build tool or header that is not installed (as opposed to a compile
/// error, which panics).
struct Missing(String);

fn build(out_dir: &Path, object: &Path) -> Result<(), Missing> {
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => {
            return Err(Missing(format!(
                "target architecture {other} is not supported by the eBPF sampler yet"
            )));
        }
        Err(_) => return Err(Missing("CARGO_CFG_TARGET_ARCH is not set".into())),
    };
    let clang = tool("KILN_BPF_CLANG", "clang")?;
    let bpftool = tool("KILN_BPF_BPFTOOL", "bpftool")?;
    let mut units = Vec::new();
    for unit in UNITS {
        let out = out_dir.join(format!("{unit}.o"));
        compile(
            &clang,
            arch,
            &Path::new(DIR).join(format!("{unit}.bpf.c")),
            &out,
        )?;
        units.push(out);
    }
    let mut link = Command::new(&bpftool);
    link.args(["gen", "object"]).arg(object).args(&units);
    run(link, "linking the eBPF programs")
}

/// The program `var` names, else `default` from `PATH` or `/usr/sbin`
/// (where Debian puts bpftool, and which a user's `PATH` may lack), once it
/// is known to run.
fn tool(var: &str, default: &str) -> Result<String, Missing> {
    let candidates = match env::var(var) {
        Ok(named) => vec![named],
        Err(_) => vec![default.to_string(), format!("/usr/sbin/{default}")],
    };
    candidates
        .iter()
        .find(|tool| Command::new(tool).arg("--version").output().is_ok())
        .cloned()
        .ok_or_else(|| Missing(format!("`{}` was not found; {INSTALL}", candidates[0])))
}

fn compile(clang: &str, arch: &str, source: &Path, object: &Path) -> Result<(), Missing> {
    let mut cmd = Command::new(clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"));
    // `<linux/types.h>` includes `<asm/types.h>`, which Debian keeps under
    // the multiarch directory that `-target bpf` does not search.
    for dir in multiarch_include_dirs() {
        cmd.arg(format!("-I{}", dir.display()));
    }
    if let Ok(extra) = env::var("KILN_BPF_CFLAGS") {
        cmd.args(extra.split_whitespace());
    }
    cmd.arg("-c").arg(source).arg("-o").arg(object);
    run(cmd, &format!("compiling {}", source.display()))
}

/// Runs `cmd`; a missing libbpf header is [`Missing`], any other failure
/// a bug in the C source that fails the build.
fn run(mut cmd: Command, what: &str) -> Result<(), Missing> {
    let output = cmd
        .output()
        .map_err(|e| Missing(format!("{what}: running {cmd:?} failed: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("bpf/bpf_helpers.h") && stderr.contains("not found") {
        return Err(Missing(format!(
            "libbpf's headers (bpf/bpf_helpers.h) were not found; {INSTALL}"
        )));
    }
    panic!("{what} failed ({cmd:?}):\n{stderr}");
}

fn multiarch_include_dirs() -> Vec<PathBuf> {
    let triple = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    let dir = Path::new("/usr/include").join(triple);
    if dir.is_dir() { vec![dir] } else { Vec::new() }
}

/// Reads `#define KILN_ABI_VERSION <n>` from the shared header, so the Rust
/// mirror can check at compile time that it describes the same layout.
fn abi_version(header: &Path) -> u32 {
    let text = fs::read_to_string(header).expect("read src/bpf/types.h");
    text.lines()
        .find_map(|line| {
            let rest = line.trim().strip_prefix("#define KILN_ABI_VERSION")?;
            rest.trim().parse().ok()
        })
        .expect("src/bpf/types.h defines KILN_ABI_VERSION as a number")
}
