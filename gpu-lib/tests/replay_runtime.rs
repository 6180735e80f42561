//! The whole library with CUPTI replaced by a fake that calls the
//! library's real callbacks the way CUPTI does: contexts and modules
//! created, kernels launched from two threads (correlation ids wrapping
//! past u32::MAX), activity buffers requested, filled with kernel records
//! and handed back out of order, PC samples returned. The snapshots are
//! read from a real Unix socket, as the agent reads them.
//!
//! One test per file: the runtime is process-wide.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln_cuda::activity::synth;
use kiln_cuda::cupti::abi::{
    self, BufferCompletedFunc, BufferRequestedFunc, CallbackData, CallbackFunc, ModuleResourceData,
    PcSamplingStallReason, ResourceData,
};
use kiln_cuda::cupti::{ContextHandle, CuptiError};
use kiln_cuda::injection::{self, Config, PcSamplingConfig};
use kiln_cuda::pcsampling::{DutyCycle, PcSamplingBuffers};
use kiln_cuda::wire::StallReasonName;
use kiln_cuda::{
    Cupti, FoldOptions, Snapshot, SnapshotListener, StallReasonTable, WeightUnit, fold_snapshot,
};
use kiln_model::FrameKind;

const KERNEL_NAME_PTR: u64 = 0xa000;

/// Plays CUPTI: keeps what the library registered and calls it back.
#[derive(Default)]
struct ReplayCupti {
    requested: Mutex<Option<BufferRequestedFunc>>,
    completed: Mutex<Option<BufferCompletedFunc>>,
    callback: Mutex<Option<CallbackFunc>>,
    clock: Mutex<u64>,
    pc_name: Option<CString>,
    pc_rounds: Mutex<u32>,
}

impl ReplayCupti {
    fn callback(&self) -> CallbackFunc {
        self.callback.lock().unwrap().expect("subscribed")
    }

    fn resource(&self, cbid: u32, ctx: usize, descriptor: *mut c_void) {
        let data = ResourceData {
            context: ctx as *mut c_void,
            resource_handle: std::ptr::null_mut(),
            resource_descriptor: descriptor,
        };
        // SAFETY: the library's callback, with the resource domain's data.
        unsafe {
            (self.callback())(
                std::ptr::null_mut(),
                abi::domain::RESOURCE,
                cbid,
                (&raw const data).cast(),
            )
        };
    }

    fn launch(&self, correlation_id: u32, cbid: u32) {
        let data = CallbackData {
            callback_site: abi::API_ENTER,
            _pad0: 0,
            function_name: c"cuLaunchKernel".as_ptr(),
            function_params: std::ptr::null(),
            function_return_value: std::ptr::null_mut(),
            symbol_name: std::ptr::null(),
            context: std::ptr::null_mut(),
            context_uid: 1,
            _pad1: 0,
            correlation_data: std::ptr::null_mut(),
            correlation_id,
            _pad2: 0,
        };
        let callback = self.callback();
        // SAFETY: the driver-API domain's data.
        unsafe {
            callback(
                std::ptr::null_mut(),
                abi::domain::DRIVER_API,
                cbid,
                (&raw const data).cast(),
            )
        };
        // The exit site is ignored.
        let exit = CallbackData {
            callback_site: 1,
            ..data
        };
        unsafe {
            callback(
                std::ptr::null_mut(),
                abi::domain::DRIVER_API,
                cbid,
                (&raw const exit).cast(),
            )
        };
    }

    /// Asks for a buffer, fills it with `records`, hands it back.
    fn complete_buffer(&self, records: &[u8]) {
        let requested = self.requested.lock().unwrap().expect("registered");
        let completed = self.completed.lock().unwrap().expect("registered");
        let (mut ptr, mut size, mut max) = (std::ptr::null_mut(), 0usize, 0usize);
        // SAFETY: valid out-pointers, as CUPTI passes.
        unsafe { requested(&mut ptr, &mut size, &mut max) };
        assert!(!ptr.is_null() && size >= records.len());
        assert_eq!(ptr as usize % 8, 0, "activity buffers are 8-byte aligned");
        // SAFETY: the library gave `size` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(records.as_ptr(), ptr, records.len());
            completed(std::ptr::null_mut(), 0, ptr, size, records.len());
        }
    }
}

impl Cupti for ReplayCupti {
    fn enable_kernel_activity(
        &self,
        requested: BufferRequestedFunc,
        completed: BufferCompletedFunc,
    ) -> Result<(), CuptiError> {
        *self.requested.lock().unwrap() = Some(requested);
        *self.completed.lock().unwrap() = Some(completed);
        Ok(())
    }

    fn subscribe(&self, callback: CallbackFunc) -> Result<(), CuptiError> {
        *self.callback.lock().unwrap() = Some(callback);
        Ok(())
    }

    fn flush_all(&self, _forced: bool) -> Result<(), CuptiError> {
        Ok(())
    }

    fn timestamp_ns(&self) -> u64 {
        let mut clock = self.clock.lock().unwrap();
        *clock += 10;
        *clock
    }

    fn kernel_name(&self, name_ptr: u64) -> Option<String> {
        (name_ptr == KERNEL_NAME_PTR).then(|| "_Z5k_addPfS_".to_owned())
    }

    fn cubin_crc(&self, cubin: &[u8]) -> Option<u64> {
        Some(cubin.len() as u64 * 1000 + 7)
    }

    fn pc_sampling_enable(&self, ctx: ContextHandle) -> Result<Vec<StallReasonName>, CuptiError> {
        assert_eq!(ctx, ContextHandle(0x1234));
        Ok(vec![
            StallReasonName {
                index: 3,
                name: "smsp__pcsamp_warps_issue_stalled_long_scoreboard".into(),
            },
            StallReasonName {
                index: 8,
                name: "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle".into(),
            },
        ])
    }

    fn pc_sampling_configure(
        &self,
        _ctx: ContextHandle,
        buffers: &mut PcSamplingBuffers,
        period: Option<u32>,
    ) -> Result<(), CuptiError> {
        assert_eq!(buffers.stall_reasons_per_pc(), 2);
        assert_eq!(period, Some(12));
        Ok(())
    }

    fn pc_sampling_run(&self, _ctx: ContextHandle, _on: bool) -> Result<(), CuptiError> {
        Ok(())
    }

    /// Every call returns the same two PCs of `_Z5k_addPfS_`.
    fn pc_sampling_get_data(
        &self,
        _ctx: ContextHandle,
        buffers: &mut PcSamplingBuffers,
    ) -> Result<(), CuptiError> {
        *self.pc_rounds.lock().unwrap() += 1;
        let name = self.pc_name.as_ref().unwrap().as_ptr().cast_mut();
        for (i, pc) in buffers.pcs_mut()[..2].iter_mut().enumerate() {
            pc.function_name = name;
            pc.cubin_crc = 4007;
            pc.pc_offset = 0x10 * (i as u64 + 1);
            pc.stall_reason_count = 1;
            // SAFETY: two slots per PC were allocated.
            unsafe {
                *pc.stall_reason = PcSamplingStallReason {
                    stall_reason_index: if i == 0 { 3 } else { 8 },
                    samples: 5,
                };
            }
        }
        buffers.set_filled(2);
        Ok(())
    }

    fn pc_sampling_disable(&self, _ctx: ContextHandle) -> Result<(), CuptiError> {
        Ok(())
    }
}

#[test]
fn replayed_cupti_reaches_the_agent_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gpu.sock");
    let timeline = dir.path().join("timeline.jsonl");
    let listener = SnapshotListener::bind(&socket).unwrap();
    let reader = std::thread::spawn(move || {
        let stream = listener.accept().unwrap();
        stream.map(|s| s.unwrap()).collect::<Vec<Snapshot>>()
    });

    let cupti = Arc::new(ReplayCupti {
        pc_name: Some(CString::new("_Z5k_addPfS_").unwrap()),
        ..ReplayCupti::default()
    });
    let config = Config {
        socket_path: socket.clone(),
        snapshot_interval: Duration::from_millis(50),
        timeline: Some(timeline.clone()),
        pc_sampling: Some(PcSamplingConfig {
            duty: DutyCycle {
                on: Duration::from_millis(5),
                off: Duration::from_millis(5),
            },
            period: Some(12),
            max_pcs: 16,
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
        0x1234,
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
        0x1234,
        (&raw mut module).cast(),
    );

    // Thread A launches ids u32::MAX-1, u32::MAX; thread B 0 and 1 (the
    // counter wrapped), one of them with cuLaunchKernelEx.
    let launch_from = |ids: Vec<(u32, u32)>| {
        let cupti = cupti.clone();
        std::thread::spawn(move || {
            for (id, cbid) in ids {
                cupti.launch(id, cbid);
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

    // PC samples: 5 per PC per round, as many rounds as the duty cycle
    // and the exit ran.
    let rounds = u64::from(*cupti.pc_rounds.lock().unwrap());
    assert!(rounds >= 1);
    let mut stalls = StallReasonTable::default();
    let mut samples_by_offset: HashMap<u64, u64> = HashMap::new();
    for s in &snapshots {
        stalls.update(s);
        for p in &s.pc_samples {
            *samples_by_offset.entry(p.pc_offset).or_default() += p.samples;
        }
    }
    assert_eq!(samples_by_offset[&0x10], 5 * rounds);
    assert_eq!(samples_by_offset[&0x20], 5 * rounds);
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
