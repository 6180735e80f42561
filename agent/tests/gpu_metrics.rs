//! GPU metrics through NVML, without a GPU: the agent loads a stand-in
//! libnvidia-ml built from `tests/nvml/fake_nvml.c`, with two GPUs (the
//! second without power or PCIe readings) and three compute processes,
//! whose every value grows by a known step each time it is read.
//!
//! What the stand-in answers, pass n (from 0):
//!
//! | metric            | GPU 0                 | GPU 1           |
//! |-------------------|-----------------------|-----------------|
//! | utilization       | 40 + n %, 20 + n %    | 50 + n, 21 + n  |
//! | SM, memory clock  | 1400 + n, 2600 + n    | 1500 + n, 2700 + n |
//! | memory used/total | 1 GiB + n MiB / 80 GiB| 2 GiB + n MiB / 16 GiB |
//! | power             | 123456 + 1000 n mW    | not supported   |
//! | temperature       | 60 + n                | 61 + n          |
//! | PCIe TX, RX       | 1000 + n, 2000 + n KB/s | not supported |
//! | processes         | 1001, 1002: (256, 512 MiB) + n MiB | 2001: 256 MiB + n MiB |

mod nvml;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_agent::{DeviceReading, GpuMetricsSampler, GpuProcess, Nvml, NvmlError};
use libloading::Library;

use nvml::build_fake_nvml;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The stand-in's test hooks, reached through the same loaded copy the
/// agent uses (the loader hands out one copy per file).
struct Hooks(Library);

impl Hooks {
    fn open(path: &Path) -> Hooks {
        // SAFETY: the stand-in has no initializers.
        Hooks(unsafe { Library::new(path) }.unwrap())
    }

    fn set_processes(&self, gpu: u32, processes: u32) {
        // SAFETY: the signature in fake_nvml.c.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn(u32, u32)>(b"fake_nvml_set_processes\0")
                .unwrap()(gpu, processes)
        }
    }

    fn hide_process_memory(&self, gpu: u32) {
        // SAFETY: the signature in fake_nvml.c.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn(u32)>(b"fake_nvml_hide_process_memory\0")
                .unwrap()(gpu)
        }
    }

    fn insufficient_answers(&self) -> u32 {
        // SAFETY: the signature in fake_nvml.c.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn() -> u32>(b"fake_nvml_insufficient_answers\0")
                .unwrap()()
        }
    }

    fn initialized(&self) -> i32 {
        // SAFETY: the signature in fake_nvml.c.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn() -> i32>(b"fake_nvml_initialized\0")
                .unwrap()()
        }
    }
}

/// What the stand-in's GPU 0 answers on pass `n`.
fn gpu0(n: u32) -> DeviceReading {
    DeviceReading {
        index: 0,
        name: "Kiln Fake H100".into(),
        uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
        utilization_percent: Some(40 + n),
        memory_utilization_percent: Some(20 + n),
        sm_clock_mhz: Some(1400 + n),
        memory_clock_mhz: Some(2600 + n),
        memory_used_bytes: Some(GIB + u64::from(n) * MIB),
        memory_total_bytes: Some(80 * GIB),
        power_watts: Some(f64::from(123456 + 1000 * n) / 1000.0),
        temperature_celsius: Some(60 + n),
        pcie_rx_bytes_per_second: Some(u64::from(2000 + n) * 1024),
        pcie_tx_bytes_per_second: Some(u64::from(1000 + n) * 1024),
    }
}

/// What the stand-in's GPU 1 answers on pass `n`.
fn gpu1(n: u32) -> DeviceReading {
    DeviceReading {
        index: 1,
        name: "Kiln Fake T4".into(),
        uuid: "GPU-55555555-6666-7777-8888-999999999999".into(),
        utilization_percent: Some(50 + n),
        memory_utilization_percent: Some(21 + n),
        sm_clock_mhz: Some(1500 + n),
        memory_clock_mhz: Some(2700 + n),
        memory_used_bytes: Some(2 * GIB + u64::from(n) * MIB),
        memory_total_bytes: Some(16 * GIB),
        power_watts: None,
        temperature_celsius: Some(61 + n),
        pcie_rx_bytes_per_second: None,
        pcie_tx_bytes_per_second: None,
    }
}

/// The stand-in's three compute processes on pass `n`.
fn processes(n: u64) -> Vec<GpuProcess> {
    let process = |pid, gpu, used| GpuProcess {
        pid,
        gpu,
        used_bytes: Some(used + n * MIB),
    };
    vec![
        process(1001, 0, 256 * MIB),
        process(1002, 0, 512 * MIB),
        process(2001, 1, 256 * MIB),
    ]
}

// Guards values and units end to end: mW to W, KB/s to bytes/s, and the
// values changing from one pass to the next.
#[test]
fn reads_exact_values_in_the_right_units() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &[]);
    let nvml = Nvml::open_path(&path).unwrap();
    assert_eq!(nvml.path(), path);
    assert_eq!(nvml.gpu_count(), 2);
    for n in 0..3 {
        let readings = nvml.read();
        assert_eq!(readings.devices, [gpu0(n), gpu1(n)], "pass {n}");
        assert_eq!(readings.processes, processes(u64::from(n)), "pass {n}");
    }
    assert_eq!(gpu0(0).power_watts, Some(123.456));
}

// Guards that what a GPU does not support is left out, not zero, and
// that its other metrics still come.
#[test]
fn unsupported_metrics_are_absent_from_the_points() {
    let dir = tempfile::tempdir().unwrap();
    let nvml = Nvml::open_path(build_fake_nvml(dir.path(), &[])).unwrap();
    let points = nvml.read().points();
    let of = |gpu: &str| -> Vec<&str> {
        points
            .iter()
            .filter(|p| p.1[0] == ("gpu", gpu.to_string()))
            .map(|p| p.0)
            .collect()
    };
    assert_eq!(of("0").len(), 10 + 2, "{:?}", of("0"));
    assert_eq!(
        of("1"),
        [
            "gpu.utilization_percent",
            "gpu.memory_utilization_percent",
            "gpu.sm_clock_mhz",
            "gpu.memory_clock_mhz",
            "gpu.memory_used_bytes",
            "gpu.memory_total_bytes",
            "gpu.temperature_celsius",
            "gpu.process_memory_used_bytes",
        ]
    );
    let power = points.iter().find(|p| p.0 == "gpu.power_watts").unwrap();
    assert_eq!(power.2, 123.456);
    assert_eq!(
        power.1,
        [
            ("gpu", "0".to_string()),
            ("gpu_name", "Kiln Fake H100".to_string()),
            (
                "gpu_uuid",
                "GPU-00000000-1111-2222-3333-444444444444".to_string()
            ),
        ]
    );
    let rx = points
        .iter()
        .find(|p| p.0 == "gpu.pcie_rx_bytes_per_second")
        .unwrap();
    assert_eq!(rx.2, 2000.0 * 1024.0);
    let process = points
        .iter()
        .find(|p| p.0 == "gpu.process_memory_used_bytes" && p.1[0].1 == "1")
        .unwrap();
    assert_eq!(process.1[3], ("pid", "2001".to_string()));
    assert_eq!(process.2, (256 * MIB) as f64);
}

/// Log lines written while `f` runs on this thread.
fn logs_of(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

// Guards the log volume: a metric a GPU lacks is said once, not every
// second.
#[test]
fn unsupported_metrics_are_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &[]);
    let logs = logs_of(|| {
        let nvml = Nvml::open_path(&path).unwrap();
        for _ in 0..3 {
            nvml.read();
        }
    });
    let unsupported: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("does not report"))
        .collect();
    assert_eq!(unsupported.len(), 3, "{logs}");
    for metric in ["Power", "PcieRx", "PcieTx"] {
        assert!(
            unsupported
                .iter()
                .any(|l| l.contains("gpu=1") && l.contains(metric)),
            "{logs}"
        );
    }
    assert!(!logs.contains("WARN"), "{logs}");
}

// Guards the INSUFFICIENT_SIZE protocol: the rows grow to what NVML asks
// for, are kept for the next passes, and stop at MAX_GPU_PROCESSES.
#[test]
fn process_rows_grow_past_insufficient_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &[]);
    let nvml = Nvml::open_path(&path).unwrap();
    let hooks = Hooks::open(&path);

    assert_eq!(nvml.read().processes, processes(0));
    assert_eq!(
        hooks.insufficient_answers(),
        1,
        "the first call asks for the count"
    );
    assert_eq!(nvml.read().processes, processes(1));
    assert_eq!(hooks.insufficient_answers(), 1, "the rows are kept");

    hooks.set_processes(0, 300);
    let read = nvml.read().processes;
    assert_eq!(hooks.insufficient_answers(), 2);
    let on_gpu0: Vec<_> = read.iter().filter(|p| p.gpu == 0).collect();
    assert_eq!(on_gpu0.len(), 300);
    assert_eq!(on_gpu0[299].pid, 1001 + 299);
    assert_eq!(on_gpu0[299].used_bytes, Some(300 * 256 * MIB + 2 * MIB));

    // More than the agent reads: that GPU's processes are left out, the
    // others' still come.
    hooks.set_processes(0, kiln_agent::MAX_GPU_PROCESSES as u32 + 1);
    let readings = nvml.read();
    assert_eq!(readings.devices.len(), 2);
    let pids: Vec<_> = readings.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [2001]);

    hooks.set_processes(0, kiln_agent::MAX_GPU_PROCESSES as u32);
    let read = nvml.read().processes;
    assert_eq!(read.len(), kiln_agent::MAX_GPU_PROCESSES + 1);
}

// Guards the R535 layout: its _v3 writes 32-byte rows; read at 24 bytes,
// the second process would be garbage.
#[test]
fn r535_rows_are_read_at_their_width() {
    let dir = tempfile::tempdir().unwrap();
    let nvml = Nvml::open_path(build_fake_nvml(dir.path(), &["-DCC_V3"])).unwrap();
    assert_eq!(nvml.read().processes, processes(0));
    assert_eq!(nvml.read().processes, processes(1));
}

// Guards the fallback for drivers before R510.
#[test]
fn falls_back_to_v2_without_v3() {
    let dir = tempfile::tempdir().unwrap();
    let nvml = Nvml::open_path(build_fake_nvml(dir.path(), &["-DNO_V3"])).unwrap();
    assert_eq!(nvml.read().processes, processes(0));
}

#[test]
fn unknown_process_memory_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &[]);
    let nvml = Nvml::open_path(&path).unwrap();
    Hooks::open(&path).hide_process_memory(1);
    let readings = nvml.read();
    let on_gpu1: Vec<_> = readings.processes.iter().filter(|p| p.gpu == 1).collect();
    assert_eq!(on_gpu1.len(), 1);
    assert_eq!(on_gpu1[0].used_bytes, None);
    let process_points = readings
        .points()
        .into_iter()
        .filter(|p| p.0 == "gpu.process_memory_used_bytes")
        .count();
    assert_eq!(process_points, 2);
}

#[test]
fn a_missing_function_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &["-DOMIT_MEMORY_INFO"]);
    let e = Nvml::open_path(&path).unwrap_err();
    assert!(
        matches!(
            e,
            NvmlError::MissingSymbol {
                symbol: "nvmlDeviceGetMemoryInfo",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{} has no nvmlDeviceGetMemoryInfo (not NVML, or too old a driver)",
            path.display()
        )
    );
    assert!(!e.is_absent());
}

#[test]
fn a_missing_library_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libnvidia-ml.so.1");
    let e = Nvml::open_path(&path).unwrap_err();
    assert!(e.is_absent(), "{e:?}");
    let message = e.to_string();
    assert!(message.starts_with("libnvidia-ml not found"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

// Guards the message naming the call and NVML's own words, and that a
// library without its driver counts as no GPU.
#[test]
fn no_driver_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    let e = Nvml::open_path(build_fake_nvml(dir.path(), &["-DINIT_RESULT=9"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)"
    );
    assert!(e.is_absent());
}

#[test]
fn dropping_shuts_nvml_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_fake_nvml(dir.path(), &[]);
    let hooks = Hooks::open(&path);
    let nvml = Nvml::open_path(&path).unwrap();
    assert_eq!(hooks.initialized(), 1);
    drop(nvml);
    assert_eq!(hooks.initialized(), 0);
}

#[test]
fn the_sampler_reads_every_second_and_stops_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let nvml = Nvml::open_path(build_fake_nvml(dir.path(), &[])).unwrap();
    let sampler = GpuMetricsSampler::start(nvml).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let taken = sampler.take();
    // Passes at 0, 1 and 2 s; a loaded machine may run late.
    assert!((2..=3).contains(&taken.len()), "{} readings", taken.len());
    for (n, (_, readings)) in taken.iter().enumerate() {
        assert_eq!(readings.devices, [gpu0(n as u32), gpu1(n as u32)]);
    }
    for pair in taken.windows(2) {
        let gap = Duration::from_nanos((pair[1].0 - pair[0].0) as u64);
        assert!(
            gap > Duration::from_millis(900) && gap < Duration::from_millis(1500),
            "{gap:?} between readings"
        );
    }
    assert!(sampler.take().is_empty(), "taken readings are gone");
    assert_eq!(sampler.dropped(), 0);

    let stopping = Instant::now();
    drop(sampler);
    assert!(
        stopping.elapsed() < Duration::from_millis(300),
        "stopping took {:?}",
        stopping.elapsed()
    );
}

// Guards the bound: readings nobody takes are dropped oldest first, and
// counted.
#[test]
fn the_sampler_keeps_the_newest_readings() {
    let dir = tempfile::tempdir().unwrap();
    let nvml = Nvml::open_path(build_fake_nvml(dir.path(), &[])).unwrap();
    let sampler = GpuMetricsSampler::start_with(nvml, Duration::from_millis(10), 3).unwrap();
    let started = Instant::now();
    while sampler.dropped() < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no reading dropped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop_sampler_and_check(sampler);
}

fn drop_sampler_and_check(sampler: GpuMetricsSampler) {
    let taken = sampler.take();
    let dropped = sampler.dropped();
    assert_eq!(taken.len(), 3);
    let utilization: Vec<_> = taken
        .iter()
        .map(|(_, r)| r.devices[0].utilization_percent.unwrap())
        .collect();
    // The pass numbers of the newest three: consecutive, after the
    // dropped ones. A pass may finish between `take` and `dropped`.
    let first = utilization[0] - 40;
    assert_eq!(utilization, [40 + first, 41 + first, 42 + first]);
    assert!(u64::from(first) <= dropped, "{first} > {dropped}");
    assert!(taken.windows(2).all(|w| w[0].0 < w[1].0));
}

// The real NVML on a host with an NVIDIA GPU (run with `--ignored`):
// plausible values from every GPU, and the row of a process holding a
// CUDA context (tests/nvml/cuda_context.c), which checks the process rows'
// layout against this driver.
#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn reads_this_hosts_gpus() {
    let nvml = match Nvml::open() {
        Ok(nvml) => nvml,
        Err(e) if e.is_absent() => return eprintln!("no NVIDIA driver: {e}"),
        Err(e) => panic!("{e}"),
    };
    assert!(nvml.gpu_count() > 0);
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvml/cuda_context.c");
    let holder = dir.path().join("cuda_context");
    kiln_test_support::CBuild::cc()
        .args(["-O2", "-ldl"])
        .file(&source, &holder);
    let mut child = Command::new(&holder)
        .arg("30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n", "the CUDA context holder failed");

    // NVML lists a process once the driver has accounted its memory.
    let started = Instant::now();
    let readings = loop {
        let readings = nvml.read();
        if !readings.processes.is_empty() || started.elapsed() > Duration::from_secs(10) {
            break readings;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    for d in &readings.devices {
        eprintln!("{d:?}");
        assert!(d.uuid.starts_with("GPU-"), "{d:?}");
        assert!(!d.name.is_empty());
        let total = d.memory_total_bytes.unwrap();
        assert!(
            total > GIB && d.memory_used_bytes.unwrap() <= total,
            "{d:?}"
        );
        assert!(d.utilization_percent.is_none_or(|u| u <= 100), "{d:?}");
        assert!(
            d.memory_utilization_percent.is_none_or(|u| u <= 100),
            "{d:?}"
        );
        assert!(
            d.sm_clock_mhz.is_none_or(|c| (1..10_000).contains(&c)),
            "{d:?}"
        );
        assert!(d.temperature_celsius.is_none_or(|t| t < 120), "{d:?}");
        assert!(d.power_watts.is_none_or(|w| w > 0.0 && w < 5000.0), "{d:?}");
    }
    eprintln!("{:?}", readings.processes);
    assert!(!readings.processes.is_empty(), "no compute process listed");
    for p in &readings.processes {
        // A misread row layout shows as pids of 0 or beyond pid_max, and
        // memory beyond the GPU's.
        assert!(p.pid > 0 && p.pid < 1 << 22, "{p:?}");
        assert!(p.used_bytes.is_none_or(|b| b < 1 << 40), "{p:?}");
    }
    // In a container NVML gives host pids, which need not be ours.
    if let Some(ours) = readings.processes.iter().find(|p| p.pid == child.id()) {
        assert!(ours.used_bytes.is_none_or(|b| b >= 256 * MIB), "{ours:?}");
    }
    for (name, labels, value) in readings.points() {
        eprintln!("{name} {labels:?} {value}");
        assert!(value.is_finite());
    }
}
