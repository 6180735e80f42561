//! `KILN_NVML_PATH`: the library it names is the one loaded, and only that
//! one, so a path to nothing means "no GPU" even on a host with NVIDIA's
//! driver. Alone in its binary because it changes the environment.

mod nvml;

use kiln_agent::{GpuMetricsSampler, NVML_PATH_ENV, Nvml};

use nvml::build_fake_nvml;

#[test]
fn kiln_nvml_path_picks_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let fake = build_fake_nvml(dir.path(), &[]);

    // SAFETY: the only test in this binary: no other thread reads the
    // environment meanwhile.
    unsafe { std::env::set_var(NVML_PATH_ENV, &fake) };
    let nvml = Nvml::open().unwrap();
    assert_eq!(nvml.path(), fake);
    assert_eq!(nvml.gpu_count(), 2);
    assert_eq!(nvml.read().devices[1].name, "Kiln Fake T4");
    drop(nvml);
    let sampler = GpuMetricsSampler::start_if_available().expect("a sampler over the stand-in");
    drop(sampler);

    let missing = dir.path().join("missing/libnvidia-ml.so.1");
    // SAFETY: as above.
    unsafe { std::env::set_var(NVML_PATH_ENV, &missing) };
    let e = Nvml::open().unwrap_err();
    assert!(e.is_absent(), "{e:?}");
    assert!(e.to_string().contains("missing/libnvidia-ml.so.1"), "{e}");
    assert!(GpuMetricsSampler::start_if_available().is_none());
}
