//! Links the GNU C++ demangler (libiberty's `cp-demangle.o` inside GCC's
//! `libsupc++.a`) statically, so that C++ names read as `c++filt` prints
//! them, with a small C shim that bounds the text it writes
//! (`src/extract/demangle_bounded.c`); only that object is pulled in, and
//! the binaries gain no run-time dependency. Where the C compiler has no
//! `libsupc++.a` (no GCC), the crate builds with `cpp_demangle` alone and
//! says so in a cargo warning.
//!
//! Environment: `CC` (default `cc`), asked where `libsupc++.a` is.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gnu_demangler)");
    println!("cargo::rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let found = Command::new(&cc)
        .arg("-print-file-name=libsupc++.a")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        // An answer without a directory means "not found".
        .filter(|path| path.is_absolute() && path.exists());
    match found.as_deref().and_then(std::path::Path::parent) {
        Some(dir) => {
            println!("cargo::rerun-if-changed=src/extract/demangle_bounded.c");
            cc::Build::new()
                .file("src/extract/demangle_bounded.c")
                .warnings(true)
                .compile("kiln_demangle_bounded");
            println!("cargo::rustc-link-search=native={}", dir.display());
            println!("cargo::rustc-link-lib=static=supc++");
            println!("cargo::rustc-cfg=gnu_demangler");
        }
        None => println!(
            "cargo::warning=kiln-symbolizer-workers: {cc} has no libsupc++.a (install g++): \
             C++ names are demangled by cpp_demangle, which drops parts of some signatures"
        ),
    }
}
