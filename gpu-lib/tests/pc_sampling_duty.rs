//! The `duty` measurement mode (`KILN_CUDA_PC_SAMPLING_MODE=duty`):
//! collection started and stopped from launch exits on the launching
//! threads, under the fake CUPTI's rules (see `support`): every `Start`
//! and `Stop` from a callback on the program's own thread, one call per
//! context at a time, `Start` only on a context configured with
//! start/stop control and not collecting, `Stop` only on one collecting;
//! and a read after each `Stop`.
//!
//! One runtime test per file: the runtime is process-wide.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kiln_cuda::cupti::abi;
use kiln_cuda::injection::{self, Config};
use kiln_cuda::pcsampling::control::{Experiment, PcSamplingSettings};
use support::{FakeCupti, GetDataFaults};

const CTX: usize = 0xd000_0000;

#[test]
fn duty_mode_starts_and_stops_from_launch_exits_within_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, reader) = support::listen(dir.path());
    let cupti = Arc::new(FakeCupti::new(GetDataFaults::default()));
    let config = Config {
        socket_path: socket,
        snapshot_interval: Duration::from_millis(20),
        pc_sampling: Some(PcSamplingSettings {
            max_pcs: 16,
            experiment: Experiment::DutyAtLaunchExit {
                on: Duration::from_millis(10),
                off: Duration::from_millis(10),
            },
            ..PcSamplingSettings::default()
        }),
        flush_at_exit: false,
        ..Config::default()
    };
    injection::start(cupti.clone(), config).unwrap();
    cupti.resource(
        abi::resource_cbid::CONTEXT_CREATED,
        CTX,
        std::ptr::null_mut(),
    );
    assert_eq!(
        cupti.starts.load(Ordering::Relaxed),
        1,
        "started in the context-created callback"
    );

    // Two threads launch for 200 ms: about ten phases of 10 ms each.
    let launcher = |first_id: u32| {
        let cupti = cupti.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_millis(200);
            let mut id = first_id;
            while Instant::now() < until {
                cupti.launch(CTX, id, abi::driver_cbid::LAUNCH_KERNEL);
                id += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            id - first_id
        })
    };
    let threads = [launcher(0), launcher(1_000_000)];
    let launches: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    injection::shutdown();
    let snapshots = reader.join().unwrap();

    assert_eq!(cupti.violations(), Vec::<String>::new());
    let (starts, stops) = (
        cupti.starts.load(Ordering::Relaxed),
        cupti.stops.load(Ordering::Relaxed),
    );
    assert!(stops >= 3, "{stops} stops in 200 ms of 10 ms phases");
    assert!(
        starts == stops || starts == stops + 1,
        "start and stop alternate: {starts} starts, {stops} stops"
    );
    let c = snapshots.last().unwrap().counters;
    assert_eq!(u64::from(launches), c.launches);
    assert_eq!(c.cupti_errors, 0);
    assert!(
        c.pc_drains >= stops,
        "a read after every stop: {} reads, {stops} stops",
        c.pc_drains
    );
    assert_eq!(cupti.disables.load(Ordering::Relaxed), 1);
}
