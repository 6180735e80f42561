//! PC sampling under the rules the real CUPTI enforces with a deadlock
//! (see `support`): two contexts, four launching threads, module loads
//! and a context torn down while the other one launches; every PC
//! Sampling call must come from a CUPTI callback on the program's own
//! thread (or at exit), one at a time per context, and every PC read must
//! reach the agent's socket exactly once.
//!
//! One runtime test per file: the runtime is process-wide.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kiln_cuda::Cupti;
use kiln_cuda::cupti::ContextHandle;
use kiln_cuda::cupti_abi::{self as abi, ModuleResourceData};
use kiln_cuda::injection::{self, Config};
use kiln_cuda::pc_sampler::{DrainPolicy, PcSamplingSettings};
use kiln_cuda::pcsampling::PcSamplingBuffers;
use support::{FakeCupti, GetDataFaults, SAMPLES_AT_DISABLE, SAMPLES_PER_PC};

const CTX_A: usize = 0xa000_0000;
const CTX_B: usize = 0xb000_0000;

/// The rule is real: a PC Sampling call made the way the old library
/// made it (a thread of its own, while the program launches) is caught.
#[test]
fn the_fake_catches_a_call_from_a_kiln_thread_during_a_launch() {
    let fake = FakeCupti::new(GetDataFaults::default());
    let mut buffers = PcSamplingBuffers::new(4, 2);
    let launch = fake.launch_in_flight();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = fake.pc_sampling_get_data(ContextHandle(CTX_A), &mut buffers);
        });
    });
    drop(launch);
    let violations = fake.violations();
    assert!(
        violations
            .iter()
            .any(|v| v.contains("outside CUPTI's callbacks while a launch was in flight")),
        "{violations:?}"
    );
}

#[test]
fn pc_sampling_keeps_the_rules_under_concurrent_launches() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, reader) = support::listen(dir.path());
    let cupti = Arc::new(FakeCupti::new(GetDataFaults::default()));
    let config = Config {
        socket_path: socket,
        snapshot_interval: Duration::from_millis(20),
        pc_sampling: Some(PcSamplingSettings {
            max_pcs: 16,
            // Every launch exit wants to read: the threads collide.
            drain: DrainPolicy {
                interval: Duration::ZERO,
                pending_pcs: 1,
            },
            ..PcSamplingSettings::default()
        }),
        flush_at_exit: false,
        ..Config::default()
    };
    injection::start(cupti.clone(), config).unwrap();

    for ctx in [CTX_A, CTX_B] {
        cupti.resource(
            abi::resource_cbid::CONTEXT_CREATED,
            ctx,
            std::ptr::null_mut(),
        );
    }
    let launcher = |ctx: usize, first_id: u32, launches: u32| {
        let cupti = cupti.clone();
        std::thread::spawn(move || {
            for id in first_id..first_id + launches {
                cupti.launch(ctx, id, abi::driver_cbid::LAUNCH_KERNEL);
            }
        })
    };
    let on_a = [launcher(CTX_A, 0, 300), launcher(CTX_A, 10_000, 300)];
    let on_b = [launcher(CTX_B, 20_000, 900), launcher(CTX_B, 30_000, 900)];
    // Modules load on another thread while both contexts launch.
    let loader = {
        let cupti = cupti.clone();
        std::thread::spawn(move || {
            let cubin = [0x7fu8; 8];
            for i in 0..20 {
                let mut module = ModuleResourceData {
                    module_id: i,
                    _pad0: 0,
                    cubin_size: cubin.len(),
                    cubin: cubin.as_ptr().cast(),
                };
                let ctx = if i % 2 == 0 { CTX_A } else { CTX_B };
                cupti.resource(
                    abi::resource_cbid::MODULE_LOADED,
                    ctx,
                    (&raw mut module).cast(),
                );
            }
        })
    };
    for t in on_a {
        t.join().unwrap();
    }
    // Context A goes away while B's threads still launch.
    cupti.resource(
        abi::resource_cbid::CONTEXT_DESTROY_STARTING,
        CTX_A,
        std::ptr::null_mut(),
    );
    for t in on_b.into_iter().chain([loader]) {
        t.join().unwrap();
    }
    injection::shutdown();
    let snapshots = reader.join().unwrap();

    assert_eq!(cupti.violations(), Vec::<String>::new());
    let last = snapshots.last().unwrap();
    let c = last.counters;
    assert_eq!(c.launches, 2400);
    assert_eq!(c.events_dropped, 0);
    assert_eq!(c.cupti_errors, 0);
    assert_eq!(c.pc_sampling_watchdog_trips, 0);
    let reads = cupti.get_data_ok.load(Ordering::Relaxed);
    assert_eq!(c.pc_drains, reads, "every read counted");
    assert!(reads > 20, "{reads} reads");
    // A launch exit reads or, when another thread is reading, goes on.
    assert!(c.pc_drains + c.pc_drains_skipped <= 2400 + 20 + 2);
    // A at its teardown, B at exit.
    assert_eq!(cupti.disables.load(Ordering::Relaxed), 2);

    let totals: HashMap<(u64, u32), u64> = support::pc_totals(&snapshots);
    assert_eq!(totals[&(0x10, 3)], u64::from(SAMPLES_PER_PC) * reads);
    assert_eq!(totals[&(0x20, 8)], u64::from(SAMPLES_PER_PC) * reads);
    assert_eq!(totals[&(0x30, 3)], 2 * u64::from(SAMPLES_AT_DISABLE));
}
