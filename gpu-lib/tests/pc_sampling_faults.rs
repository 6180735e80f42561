//! PC sampling when CUPTI misbehaves: `GetData` fails (a full hardware
//! buffer), then one call hangs past the watchdog's bound. Errors are
//! counted; the watchdog turns PC sampling off; from then on the library
//! makes no PC Sampling call at all (not even `Disable` at exit), and the
//! program's launches go on being recorded.
//!
//! One runtime test per file: the runtime is process-wide.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kiln_cuda::cupti_abi as abi;
use kiln_cuda::injection::{self, Config};
use kiln_cuda::pc_sampler::{DrainPolicy, PcSamplingSettings};
use support::{FakeCupti, GetDataFaults};

const CTX: usize = 0xc000_0000;

#[test]
fn a_hung_call_turns_pc_sampling_off_and_errors_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, reader) = support::listen(dir.path());
    let cupti = Arc::new(FakeCupti::new(GetDataFaults {
        fail_first: 3,
        // Far past the bound, so the watchdog's thread sees it even on a
        // loaded machine.
        hang_once: Some(Duration::from_millis(1500)),
    }));
    let config = Config {
        socket_path: socket,
        snapshot_interval: Duration::from_millis(50),
        pc_sampling: Some(PcSamplingSettings {
            max_pcs: 16,
            drain: DrainPolicy {
                interval: Duration::ZERO,
                pending_pcs: 1,
            },
            call_bound: Duration::from_millis(100),
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
    let calls_at_start = cupti.pc_calls.load(Ordering::Relaxed);

    // Launch exits 1-3 fail to read, the 4th hangs (and then returns),
    // the rest find PC sampling off.
    for id in 0..200 {
        cupti.launch(CTX, id, abi::driver_cbid::LAUNCH_KERNEL);
    }
    let calls_after_launches = cupti.pc_calls.load(Ordering::Relaxed);
    injection::shutdown();
    let snapshots = reader.join().unwrap();

    assert_eq!(cupti.violations(), Vec::<String>::new());
    assert_eq!(
        calls_after_launches - calls_at_start,
        4,
        "three failed reads and the hung one, then nothing"
    );
    assert_eq!(
        cupti.pc_calls.load(Ordering::Relaxed),
        calls_after_launches,
        "no PC Sampling call at exit once off"
    );
    assert_eq!(cupti.disables.load(Ordering::Relaxed), 0);
    let c = snapshots.last().unwrap().counters;
    assert_eq!(
        c.launches, 200,
        "the program's launches go on being recorded"
    );
    assert_eq!(c.cupti_errors, 3);
    assert_eq!(c.pc_sampling_watchdog_trips, 1);
    assert_eq!(c.pc_drains, 1, "the hung read returned in the end");
}
