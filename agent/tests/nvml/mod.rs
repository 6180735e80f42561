//! Builds the stand-in libnvidia-ml (`fake_nvml.c`) that the GPU metrics
//! tests load instead of NVIDIA's.

use std::path::{Path, PathBuf};

use kiln_test_support::CBuild;

/// Builds `fake_nvml.c` with `defines` (`-DNO_V3`, …; see its header) as
/// `dir/libnvidia-ml.so.1`. Each test builds its own copy, so that the
/// copies' call counters do not mix: the loader shares one copy per file.
pub(crate) fn build_fake_nvml(dir: &Path, defines: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvml/fake_nvml.c");
    let out = dir.join("libnvidia-ml.so.1");
    CBuild::cc()
        .args(["-O2", "-Wall", "-Werror", "-shared", "-fPIC"])
        .args(defines.iter().copied())
        .file(&source, &out);
    out
}
