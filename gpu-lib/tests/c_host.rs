//! A C host program `dlopen`s the built `libkiln_cuda.so`, as the CUDA
//! driver does for `CUDA_INJECTION64_PATH`, and calls `InitializeInjection`
//! with no CUDA on the machine: it must return 1 (twice), log the missing
//! CUPTI once, and leave the program running normally.

use std::path::PathBuf;
use std::process::Command;

use kiln_test_support::CBuild;

const HOST: &str = r#"
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int (*init)(void) = (int (*)(void))dlsym(lib, "InitializeInjection");
    void (*marker)(unsigned, unsigned) =
        (void (*)(unsigned, unsigned))dlsym(lib, "kiln_cuda_launch_marker");
    if (!init || !marker) { fprintf(stderr, "missing symbol\n"); return 3; }
    int first = init();
    int second = init();
    marker(1, 2);
    printf("%d %d\n", first, second);
    return 0;
}
"#;

fn cdylib() -> PathBuf {
    kiln_test_support::kiln_cuda_cdylib("c-host-cdylib")
}

#[test]
fn initialize_injection_succeeds_without_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let host = CBuild::cc()
        .args(["-ldl"])
        .program(dir.path(), "host", HOST);
    let lib = cdylib();
    // No CUPTI anywhere: an override that does not exist, no CUDA_HOME,
    // and this machine has no CUDA install.
    let output = Command::new(&host)
        .arg(&lib)
        .env("KILN_CUPTI_PATH", dir.path().join("no-such-libcupti.so"))
        .env_remove("CUDA_HOME")
        .env("KILN_CUDA_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "host failed: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1 1\n");
    assert_eq!(
        stderr.matches("libcupti not found").count(),
        1,
        "logged once: {stderr}"
    );
    assert!(stderr.contains("no-such-libcupti.so"), "{stderr}");

    // KILN_CUDA_LOG=off silences it.
    let output = Command::new(&host)
        .arg(&lib)
        .env("KILN_CUPTI_PATH", dir.path().join("no-such-libcupti.so"))
        .env("KILN_CUDA_LOG", "off")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(
        output.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A file that is not CUPTI (here: the C library) is refused with the
/// missing function named, and injection still succeeds.
#[test]
fn a_library_that_is_not_cupti_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let host = CBuild::cc()
        .args(["-ldl"])
        .program(dir.path(), "host", HOST);
    let output = Command::new(&host)
        .arg(cdylib())
        .env("KILN_CUPTI_PATH", "libc.so.6")
        .env("KILN_CUDA_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1 1\n");
    assert!(stderr.contains("has no cuptiActivityEnable"), "{stderr}");
}
