//! The whole library with CUPTI replaced by a fake that calls the
//! library's real callbacks the way CUPTI does: contexts and modules
//! created, kernels launched from two threads (correlation ids wrapping
//! past u32::MAX), activity buffers requested, filled with kernel records
//! and handed back out of order, PC samples returned. The snapshots are
//! read from a real Unix socket, as the agent reads them.
//!
//! One test per file: the runtime is process-wide.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kiln_cuda::activity::synth;
use kiln_cuda::cupti_abi::{self as abi, ModuleResourceData};
use kiln_cuda::injection::{self, Config};
use kiln_cuda::pc_sampler::{DrainPolicy, PcSamplingSettings};
use kiln_cuda::{FoldOptions, StallReasonTable, WeightUnit, fold_snapshot};
use kiln_model::FrameKind;
use support::{FakeCupti, GetDataFaults, KERNEL_NAME_PTR, SAMPLES_AT_DISABLE, SAMPLES_PER_PC};

const CTX: usize = 0x1234;

#[test]
fn replayed_cupti_reaches_the_agent_socket() {
    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("timeline.jsonl");
    let (socket, reader) = support::listen(dir.path());

    let cupti = Arc::new(FakeCupti::new(GetDataFaults::default()));
    let config = Config {
        socket_path: socket.clone(),
        snapshot_interval: Duration::from_millis(50),
        timeline: Some(timeline.clone()),
        pc_sampling: Some(PcSamplingSettings {
            period: Some(12),
            max_pcs: 16,
            // Every launch exit reads.
            drain: DrainPolicy {
                interval: Duration::ZERO,
                pending_pcs: 1,
            },
            ..PcSamplingSettings::default()
        }),
        flush_at_exit: false,
        ..Config::default()
    };
    injection::start(cupti.clone(), config.clone()).unwrap();
    assert!(matches!(
        injection::start(cupti.clone(), config),
        Err(injection::StartError::AlreadyStarted)
    ));

    cupti.resource(
        abi::resource_cbid::CONTEXT_CREATED,
        CTX,
        std::ptr::null_mut(),
    );
    let cubin = vec![0x7fu8; 4];
    let mut module = ModuleResourceData {
        module_id: 1,
        _pad0: 0,
        cubin_size: cubin.len(),
        cubin: cubin.as_ptr().cast(),
    };
    cupti.resource(
        abi::resource_cbid::MODULE_LOADED,
        CTX,
        (&raw mut module).cast(),
    );

    // Thread A launches ids u32::MAX-1, u32::MAX; thread B 0 and 1 (the
    // counter wrapped), one of them with cuLaunchKernelEx.
    let launch_from = |ids: Vec<(u32, u32)>| {
        let cupti = cupti.clone();
        std::thread::spawn(move || {
            for (id, cbid) in ids {
                cupti.launch(CTX, id, cbid);
            }
            // SAFETY: no preconditions.
            unsafe { libc::gettid() as u32 }
        })
    };
    let tid_a = launch_from(vec![
        (u32::MAX - 1, abi::driver_cbid::LAUNCH_KERNEL),
        (u32::MAX, abi::driver_cbid::LAUNCH_KERNEL),
    ])
    .join()
    .unwrap();
    let tid_b = launch_from(vec![
        (0, abi::driver_cbid::LAUNCH_KERNEL_EX),
        (1, abi::driver_cbid::LAUNCH_KERNEL_PTSZ),
    ])
    .join()
    .unwrap();

    // Device memory: 1 MiB and 4 KiB allocated, the 4 KiB freed, and an
    // allocation that failed (nothing to count).
    cupti.mem_alloc(CTX, 500, 0x7000_0000, 1 << 20, 0);
    cupti.mem_alloc(CTX, 501, 0x7100_0000, 4096, 0);
    cupti.mem_alloc(CTX, 502, 0x7200_0000, 1 << 30, 2);
    cupti.mem_free(CTX, 503, 0x7100_0000);
    // PyTorch's expandable segments: 2 MiB of device memory created under
    // a handle equal to a live address (kept apart), host memory created
    // (not device memory), and a handle created and released.
    cupti.mem_create(
        CTX,
        504,
        0x7000_0000,
        2 << 20,
        abi::MEM_LOCATION_TYPE_DEVICE,
    );
    cupti.mem_create(CTX, 505, 0x9000, 1 << 20, 2);
    cupti.mem_create(CTX, 506, 0x9100, 4 << 20, abi::MEM_LOCATION_TYPE_DEVICE);
    cupti.mem_release(CTX, 507, 0x9100);

    // Completions arrive in two buffers, out of launch order, plus one
    // kernel whose launch was never seen (id 77).
    let mut first = Vec::new();
    synth::push_kernel(&mut first, &synth::kernel(1, KERNEL_NAME_PTR, 1000, 1100));
    synth::push_kernel(
        &mut first,
        &synth::kernel(u32::MAX, KERNEL_NAME_PTR, 2000, 2200),
    );
    let mut second = Vec::new();
    synth::push_kernel(&mut second, &synth::kernel(0, KERNEL_NAME_PTR, 3000, 3400));
    synth::push_kernel(
        &mut second,
        &synth::kernel(u32::MAX - 1, KERNEL_NAME_PTR, 4000, 4800),
    );
    synth::push_kernel(&mut second, &synth::kernel(77, KERNEL_NAME_PTR, 5000, 5010));
    cupti.complete_buffer(&first);
    cupti.complete_buffer(&second);

    injection::shutdown();
    injection::shutdown();
    let snapshots = reader.join().unwrap();
    assert!(!snapshots.is_empty());
    for (i, s) in snapshots.iter().enumerate() {
        assert_eq!(s.sequence, i as u64, "no snapshot lost");
        assert_eq!(s.pid, std::process::id());
    }
    let last = snapshots.last().unwrap();
    assert_eq!(last.counters.launches, 4);
    assert_eq!(last.counters.kernels, 5);
    assert_eq!(last.counters.kernels_unjoined, 1);
    assert_eq!(last.counters.events_dropped, 0);

    // Kernel time per launching thread, summed over the snapshots.
    let mut per_tid: HashMap<u32, (u64, u64)> = HashMap::new();
    for k in snapshots.iter().flat_map(|s| &s.kernels) {
        assert_eq!(k.name, "_Z5k_addPfS_");
        let entry = per_tid.entry(k.tid).or_default();
        entry.0 += k.launches;
        entry.1 += k.total_ns;
    }
    assert_eq!(per_tid[&tid_a], (2, 200 + 800));
    assert_eq!(per_tid[&tid_b], (2, 100 + 400));
    assert_eq!(per_tid[&0], (1, 10));

    let cubins: Vec<_> = snapshots.iter().flat_map(|s| &s.cubins).collect();
    assert_eq!(cubins.len(), 1);
    assert_eq!(
        (cubins[0].crc, cubins[0].image.as_slice()),
        (4007, cubin.as_slice())
    );

    // Device memory: allocated per allocating call, live at the end, and
    // the process's totals.
    let allocated: HashMap<u32, u64> = snapshots
        .iter()
        .flat_map(|s| &s.memory_allocated)
        .map(|m| (m.correlation_id, m.bytes))
        .collect();
    assert_eq!(
        allocated,
        HashMap::from([(500, 1 << 20), (501, 4096), (504, 2 << 20), (506, 4 << 20)])
    );
    let live: Vec<(u32, u64)> = last
        .memory_live
        .iter()
        .map(|m| (m.correlation_id, m.bytes))
        .collect();
    assert_eq!(live, vec![(504, 2 << 20), (500, 1 << 20)]);
    assert_eq!(last.memory.live_bytes, 3 << 20);
    assert_eq!(last.memory.allocations, 4);
    assert_eq!(last.memory.frees, 2);
    assert_eq!(last.memory.unknown_frees, 0);
    let peak = snapshots
        .iter()
        .map(|s| s.memory.peak_live_bytes)
        .max()
        .unwrap();
    assert_eq!(peak, (1 << 20) + (2 << 20) + (4 << 20));

    // PC samples: every GetData's (at the module load and each of the
    // four launch exits, then at exit before Disable) and what Disable
    // left in the configured buffer, nothing lost or counted twice.
    assert_eq!(cupti.violations(), Vec::<String>::new());
    let rounds = cupti.get_data_ok.load(Ordering::Relaxed);
    assert!(rounds >= 6, "{rounds} reads");
    assert_eq!(last.counters.pc_drains, rounds);
    assert_eq!(cupti.disables.load(Ordering::Relaxed), 1);
    let totals = support::pc_totals(&snapshots);
    let per_pc = u64::from(SAMPLES_PER_PC) * rounds;
    assert_eq!(totals[&(0x10, 3)], per_pc);
    assert_eq!(totals[&(0x20, 8)], per_pc);
    assert_eq!(totals[&(0x30, 3)], u64::from(SAMPLES_AT_DISABLE));
    let mut stalls = StallReasonTable::default();
    for s in &snapshots {
        stalls.update(s);
    }
    assert_eq!(stalls.name(8), "math_pipe_throttle");

    // Folded, the last snapshot's PC samples hang under the kernel.
    let with_pc = snapshots.iter().find(|s| !s.pc_samples.is_empty()).unwrap();
    let stacks = fold_snapshot(with_pc, &stalls, &FoldOptions::default(), |_, _| None);
    let stall_leaf = stacks
        .iter()
        .find(|s| s.unit == WeightUnit::Samples)
        .unwrap();
    let kinds: Vec<FrameKind> = stall_leaf.frames.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        vec![
            FrameKind::GpuKernel,
            FrameKind::GpuInstruction,
            FrameKind::GpuStall
        ]
    );

    // The timeline holds every kernel with its launching thread.
    let lines = kiln_cuda::timeline::read_timeline(std::io::BufReader::new(
        std::fs::File::open(&timeline).unwrap(),
    ))
    .unwrap();
    assert_eq!(lines.len(), 5);
    let by_id: HashMap<u32, u32> = lines.iter().map(|k| (k.correlation_id, k.tid)).collect();
    assert_eq!(by_id[&u32::MAX], tid_a);
    assert_eq!(by_id[&1], tid_b);
    assert_eq!(by_id[&77], 0);
}
