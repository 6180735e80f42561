//! Links GNU's C++ demangler statically — libiberty's `cp-demangle.o`, the
//! one `c++filt` runs, from Debian's `libiberty-dev` — so that C++ names
//! read as `c++filt` prints them, through a small C shim that bounds the
//! text it writes (`src/extract/demangle_bounded.c`); only that object is
//! pulled in, and the binaries gain no run-time dependency.
//!
//! Not the copy inside GCC's `libsupc++.a` (`__cxa_demangle`): GCC 12's
//! loops forever on some damaged names (a 179-byte one, found by fuzzing,
//! kept it busy past 20 minutes), which the later libiberty refuses at
//! once. Where the C compiler finds no `libiberty.a`, the crate builds
//! with `cpp_demangle` alone and says so in a cargo warning.
//!
//! Environment: `CC` (default `cc`), asked where `libiberty.a` is.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gnu_demangler)");
    println!("cargo::rerun-if-env-changed=CC");
    println!("cargo::rerun-if-changed=src/extract/demangle_bounded.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let found = Command::new(&cc)
        .arg("-print-file-name=libiberty.a")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        // An answer without a directory means "not found".
        .filter(|path| path.is_absolute() && path.exists());
    match found.as_deref().and_then(std::path::Path::parent) {
        Some(dir) => {
            cc::Build::new()
                .file("src/extract/demangle_bounded.c")
                .warnings(true)
                .compile("kiln_demangle_bounded");
            println!("cargo::rustc-link-search=native={}", dir.display());
            println!("cargo::rustc-link-lib=static=iberty");
            println!("cargo::rustc-cfg=gnu_demangler");
        }
        None => println!(
            "cargo::warning=kiln-symbolizer-workers: {cc} finds no libiberty.a (install \
             libiberty-dev): C++ names are demangled by cpp_demangle, which drops parts of \
             some signatures"
        ),
    }
}
