//! Compiles the eBPF program (`src/bpf/profiler.bpf.c`) with clang into
//! `$OUT_DIR/profiler.bpf.o`, which `src/sampler.rs` embeds.
//!
//! Needs Debian's `clang` and `libbpf-dev` (for `bpf/bpf_helpers.h`);
//! `linux-libc-dev` provides the UAPI headers and comes with
//! `build-essential`. The program reads no kernel structs, so it needs no
//! `vmlinux.h` (and no bpftool) and no CO-RE relocations.
//!
//! When clang or libbpf's headers are missing, the crate still builds so
//! that the rest of the workspace does: the object is left empty, a cargo
//! warning names the packages, and the agent refuses to start with the same
//! message (`SamplerError::NotBuilt`). A compile error in the C source is a
//! bug, and fails the build.
//!
//! Environment: `KILN_BPF_CLANG` (default `clang`), `KILN_BPF_CFLAGS`
//! (extra flags, split on whitespace).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "src/bpf/profiler.bpf.c";
const HEADER: &str = "src/bpf/types.h";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-changed={HEADER}");
    println!("cargo::rerun-if-env-changed=KILN_BPF_CLANG");
    println!("cargo::rerun-if-env-changed=KILN_BPF_CFLAGS");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("profiler.bpf.o");

    let abi = abi_version(Path::new(HEADER));
    println!("cargo::rustc-env=KILN_BPF_ABI_VERSION={abi}");

    match compile(&object) {
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

fn compile(object: &Path) -> Result<(), Missing> {
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
    let clang = env::var("KILN_BPF_CLANG").unwrap_or_else(|_| "clang".into());
    if Command::new(&clang).arg("--version").output().is_err() {
        return Err(Missing(format!(
            "`{clang}` was not found; install Debian's `clang` and `libbpf-dev` packages \
             (apt-get install clang libbpf-dev) and rebuild"
        )));
    }
    let mut cmd = Command::new(&clang);
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
    cmd.args(["-c", SOURCE, "-o"]).arg(object);
    let output = cmd
        .output()
        .map_err(|e| Missing(format!("running `{clang}` failed: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("bpf/bpf_helpers.h") && stderr.contains("not found") {
        return Err(Missing(
            "libbpf's headers (bpf/bpf_helpers.h) were not found; install Debian's \
             `libbpf-dev` package (apt-get install libbpf-dev) and rebuild"
                .into(),
        ));
    }
    panic!("compiling {SOURCE} failed ({:?}):\n{stderr}", cmd);
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
