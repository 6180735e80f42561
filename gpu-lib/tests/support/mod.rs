//! A fake CUPTI for the runtime tests: it keeps what the library
//! registered and calls it back the way CUPTI does (contexts, modules,
//! launches from any thread, activity buffers), and it enforces the rules
//! the real CUPTI punishes with a deadlock or a refusal, recording every
//! breach as a violation the tests assert empty:
//!
//! - **No PC Sampling call from a thread outside CUPTI's callbacks while a
//!   launch is in flight.** On an H200 a Kiln thread in
//!   `cuptiPCSamplingStart` deadlocked against launching threads inside
//!   `cuLaunchKernel` (`../shared/gpucheck/hang-2026-11-26-h200.txt`).
//!   Only the program's own threads, inside a callback, or any thread
//!   when nothing is launching (exit), may call.
//! - **Enable and configure only in the context-created callback**, and
//!   nothing before `Enable` or after `Disable` (CUPTI returns
//!   `CUPTI_ERROR_INVALID_OPERATION`).
//! - **One PC Sampling call per context at a time.**
//!
//! Shared by several test binaries, each using part of it.
#![allow(dead_code, reason = "each test binary uses its own part")]

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use kiln_cuda::cupti::{ContextHandle, CuptiError, PcSamplingSetup};
use kiln_cuda::cupti_abi::{
    self as abi, BufferCompletedFunc, BufferRequestedFunc, CallbackData, CallbackFunc,
    PcSamplingData, PcSamplingStallReason, ResourceData,
};
use kiln_cuda::pcsampling::PcSamplingBuffers;
use kiln_cuda::wire::StallReasonName;
use kiln_cuda::{Cupti, Snapshot, SnapshotListener};

/// The name CUPTI gives the sampled function.
pub(crate) const FUNCTION: &str = "_Z5k_addPfS_";
/// The CRC its PCs carry.
pub(crate) const CUBIN_CRC: u64 = 4007;
/// The kernel name pointer kernel records carry.
pub(crate) const KERNEL_NAME_PTR: u64 = 0xa000;
/// Samples per PC per `GetData`: two PCs, at 0x10 (stall 3) and 0x20
/// (stall 8).
pub(crate) const SAMPLES_PER_PC: u32 = 5;
/// What `Disable` leaves in the configured buffer: one PC at 0x30.
pub(crate) const SAMPLES_AT_DISABLE: u32 = 7;

/// Where the calling thread is, as CUPTI would know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Site {
    DriverEnter,
    DriverExit,
    Resource(u32),
}

thread_local! {
    static SITE: Cell<Option<Site>> = const { Cell::new(None) };
}

/// A context's PC sampling state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PcState {
    Enabled,
    Configured { configured: usize },
    Disabled,
}

/// How `GetData` behaves.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GetDataFaults {
    /// The first this many calls fail with `CUPTI_ERROR_OUT_OF_MEMORY`
    /// and a full hardware buffer.
    pub fail_first: u64,
    /// The call after those sleeps this long (past the watchdog's bound).
    pub hang_once: Option<Duration>,
}

/// Plays CUPTI.
#[derive(Default)]
pub(crate) struct FakeCupti {
    requested: Mutex<Option<BufferRequestedFunc>>,
    completed: Mutex<Option<BufferCompletedFunc>>,
    callback: Mutex<Option<CallbackFunc>>,
    clock: AtomicU64,
    pc_name: Option<CString>,
    pc_contexts: Mutex<HashMap<usize, PcState>>,
    pc_busy: Mutex<Vec<usize>>,
    launches_in_flight: AtomicUsize,
    violations: Mutex<Vec<String>>,
    /// `GetData` calls that returned PCs.
    pub get_data_ok: AtomicU64,
    /// Every PC Sampling call made.
    pub pc_calls: AtomicU64,
    /// `Disable` calls.
    pub disables: AtomicU64,
    faults: GetDataFaults,
    get_data_calls: AtomicU64,
    hung: AtomicBool,
}

impl FakeCupti {
    /// A fake whose `GetData` returns PCs of [`FUNCTION`].
    pub(crate) fn new(faults: GetDataFaults) -> Self {
        Self {
            pc_name: Some(CString::new(FUNCTION).unwrap()),
            faults,
            ..Self::default()
        }
    }

    /// Every breach of the rules so far.
    pub(crate) fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn callback(&self) -> CallbackFunc {
        self.callback.lock().unwrap().expect("subscribed")
    }

    fn in_site<T>(site: Site, f: impl FnOnce() -> T) -> T {
        let before = SITE.with(|s| s.replace(Some(site)));
        let out = f();
        SITE.with(|s| s.set(before));
        out
    }

    /// A resource callback on this thread.
    pub(crate) fn resource(&self, cbid: u32, ctx: usize, descriptor: *mut c_void) {
        let data = ResourceData {
            context: ctx as *mut c_void,
            resource_handle: std::ptr::null_mut(),
            resource_descriptor: descriptor,
        };
        let callback = self.callback();
        Self::in_site(Site::Resource(cbid), || {
            // SAFETY: the library's callback, with the resource domain's data.
            unsafe {
                callback(
                    std::ptr::null_mut(),
                    abi::domain::RESOURCE,
                    cbid,
                    (&raw const data).cast(),
                )
            }
        });
    }

    /// A launch on `ctx` from this thread: the enter and exit callbacks,
    /// with the launch "in the driver" in between.
    pub(crate) fn launch(&self, ctx: usize, correlation_id: u32, cbid: u32) {
        let _in_flight = self.launch_in_flight();
        self.driver_call(ctx, correlation_id, cbid, std::ptr::null(), 0);
    }

    /// A driver call with `params` from this thread: enter and exit
    /// callbacks, the exit with `result` as the call's CUresult.
    pub(crate) fn driver_call(
        &self,
        ctx: usize,
        correlation_id: u32,
        cbid: u32,
        params: *const c_void,
        result: i32,
    ) {
        let mut result = result;
        let data = CallbackData {
            callback_site: abi::API_ENTER,
            _pad0: 0,
            function_name: c"cuDriverCall".as_ptr(),
            function_params: params,
            function_return_value: (&raw mut result).cast(),
            symbol_name: std::ptr::null(),
            context: ctx as *mut c_void,
            context_uid: 1,
            _pad1: 0,
            correlation_data: std::ptr::null_mut(),
            correlation_id,
            _pad2: 0,
        };
        let exit = CallbackData {
            callback_site: abi::API_EXIT,
            ..data
        };
        let callback = self.callback();
        for (site, data) in [(Site::DriverEnter, &data), (Site::DriverExit, &exit)] {
            Self::in_site(site, || {
                // SAFETY: the driver-API domain's data, with the call's
                // params.
                unsafe {
                    callback(
                        std::ptr::null_mut(),
                        abi::domain::DRIVER_API,
                        cbid,
                        (data as *const CallbackData).cast(),
                    )
                }
            });
        }
    }

    /// `cuMemAlloc_v2` returning `address`, or failing when `result` is
    /// not 0.
    pub(crate) fn mem_alloc(
        &self,
        ctx: usize,
        correlation_id: u32,
        address: u64,
        bytes: usize,
        result: i32,
    ) {
        let mut out = address;
        let params = abi::MemAllocParams {
            dptr: &raw mut out,
            bytesize: bytes,
        };
        self.driver_call(
            ctx,
            correlation_id,
            abi::driver_cbid::MEM_ALLOC_V2,
            (&raw const params).cast(),
            result,
        );
    }

    /// `cuMemCreate` of `bytes` at a location of `location_type`
    /// (`abi::MEM_LOCATION_TYPE_DEVICE` or another), returning `handle`.
    pub(crate) fn mem_create(
        &self,
        ctx: usize,
        correlation_id: u32,
        handle: u64,
        bytes: usize,
        location_type: u32,
    ) {
        let mut out = handle;
        let prop = abi::MemAllocationProp {
            allocation_type: 1,
            requested_handle_types: 0,
            location_type,
            location_id: 0,
        };
        let params = abi::MemCreateParams {
            handle: &raw mut out,
            size: bytes,
            prop: &raw const prop,
            flags: 0,
        };
        self.driver_call(
            ctx,
            correlation_id,
            abi::driver_cbid::MEM_CREATE,
            (&raw const params).cast(),
            0,
        );
    }

    /// `cuMemRelease` of `handle`.
    pub(crate) fn mem_release(&self, ctx: usize, correlation_id: u32, handle: u64) {
        let params = abi::MemReleaseParams { handle };
        self.driver_call(
            ctx,
            correlation_id,
            abi::driver_cbid::MEM_RELEASE,
            (&raw const params).cast(),
            0,
        );
    }

    /// `cuMemFree_v2` of `address`.
    pub(crate) fn mem_free(&self, ctx: usize, correlation_id: u32, address: u64) {
        let params = abi::MemFreeParams { dptr: address };
        self.driver_call(
            ctx,
            correlation_id,
            abi::driver_cbid::MEM_FREE_V2,
            (&raw const params).cast(),
            0,
        );
    }

    /// Holds a launch "in the driver" until the guard drops.
    pub(crate) fn launch_in_flight(&self) -> InFlight<'_> {
        self.launches_in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self)
    }

    /// Asks for a buffer, fills it with `records`, hands it back.
    pub(crate) fn complete_buffer(&self, records: &[u8]) {
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

    /// The checks every PC Sampling call goes through; the guard marks
    /// the context busy.
    fn pc_call(&self, call: &str, ctx: ContextHandle) -> Busy<'_> {
        self.pc_calls.fetch_add(1, Ordering::Relaxed);
        let site = SITE.with(Cell::get);
        if site.is_none() && self.launches_in_flight.load(Ordering::Acquire) > 0 {
            self.violation(format!(
                "{call} from a thread outside CUPTI's callbacks while a launch was in flight \
                 (the real CUPTI deadlocks here)"
            ));
        }
        let mut busy = self.pc_busy.lock().unwrap();
        if busy.contains(&ctx.0) {
            self.violation(format!(
                "{call} on context {:#x} while another call on it ran",
                ctx.0
            ));
        }
        busy.push(ctx.0);
        Busy {
            fake: self,
            ctx: ctx.0,
        }
    }

    fn state(&self, ctx: ContextHandle) -> MutexGuard<'_, HashMap<usize, PcState>> {
        let _ = ctx;
        self.pc_contexts.lock().unwrap()
    }

    fn refuse(call: &'static str) -> CuptiError {
        CuptiError {
            call,
            code: 1,
            message: "CUPTI_ERROR_INVALID_OPERATION".into(),
        }
    }
}

/// A launch held in flight.
pub(crate) struct InFlight<'a>(&'a FakeCupti);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.launches_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A context busy with a PC Sampling call.
struct Busy<'a> {
    fake: &'a FakeCupti,
    ctx: usize,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut busy = self.fake.pc_busy.lock().unwrap();
        if let Some(at) = busy.iter().position(|c| *c == self.ctx) {
            busy.swap_remove(at);
        }
    }
}

impl Cupti for FakeCupti {
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
        self.clock.fetch_add(10, Ordering::Relaxed) + 10
    }

    fn kernel_name(&self, name_ptr: u64) -> Option<String> {
        (name_ptr == KERNEL_NAME_PTR).then(|| FUNCTION.to_owned())
    }

    fn cubin_crc(&self, cubin: &[u8]) -> Option<u64> {
        Some(cubin.len() as u64 * 1000 + 7)
    }

    fn pc_sampling_enable(&self, ctx: ContextHandle) -> Result<Vec<StallReasonName>, CuptiError> {
        let _busy = self.pc_call("cuptiPCSamplingEnable", ctx);
        if SITE.with(Cell::get) != Some(Site::Resource(abi::resource_cbid::CONTEXT_CREATED)) {
            self.violation("cuptiPCSamplingEnable outside the context-created callback".into());
        }
        let mut states = self.state(ctx);
        if states.contains_key(&ctx.0) {
            self.violation(format!("cuptiPCSamplingEnable twice on {:#x}", ctx.0));
            return Err(Self::refuse("cuptiPCSamplingEnable"));
        }
        states.insert(ctx.0, PcState::Enabled);
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
        ctx: ContextHandle,
        configured: &mut PcSamplingBuffers,
        setup: &PcSamplingSetup<'_>,
    ) -> Result<(), CuptiError> {
        let _busy = self.pc_call("cuptiPCSamplingSetConfigurationAttribute", ctx);
        if SITE.with(Cell::get) != Some(Site::Resource(abi::resource_cbid::CONTEXT_CREATED)) {
            self.violation("configuration outside the context-created callback".into());
        }
        assert_eq!(setup.stall_reasons, &[3, 8], "every stall reason collected");
        assert_eq!(configured.stall_reasons_per_pc(), 2);
        let mut states = self.state(ctx);
        if states.get(&ctx.0) != Some(&PcState::Enabled) {
            self.violation(format!("configured {:#x} before Enable", ctx.0));
            return Err(Self::refuse("cuptiPCSamplingSetConfigurationAttribute"));
        }
        states.insert(
            ctx.0,
            PcState::Configured {
                configured: configured.data_mut() as usize,
            },
        );
        Ok(())
    }

    /// Two PCs of [`FUNCTION`], [`SAMPLES_PER_PC`] samples each, per call.
    fn pc_sampling_get_data(
        &self,
        ctx: ContextHandle,
        buffers: &mut PcSamplingBuffers,
    ) -> Result<(), CuptiError> {
        let _busy = self.pc_call("cuptiPCSamplingGetData", ctx);
        if !matches!(
            self.state(ctx).get(&ctx.0),
            Some(PcState::Configured { .. })
        ) {
            self.violation(format!("GetData on {:#x}, not enabled or disabled", ctx.0));
            return Err(Self::refuse("cuptiPCSamplingGetData"));
        }
        let n = self.get_data_calls.fetch_add(1, Ordering::Relaxed);
        if n < self.faults.fail_first {
            // SAFETY: the header is the buffers' own.
            unsafe { (*buffers.data_mut()).hardware_buffer_full = 1 };
            return Err(CuptiError {
                call: "cuptiPCSamplingGetData",
                code: 13,
                message: "CUPTI_ERROR_OUT_OF_MEMORY".into(),
            });
        }
        if let Some(hang) = self.faults.hang_once
            && !self.hung.swap(true, Ordering::AcqRel)
        {
            std::thread::sleep(hang);
        }
        // A little time inside the call, so that overlapping calls overlap.
        std::thread::sleep(Duration::from_micros(200));
        let name = self.pc_name.as_ref().unwrap().as_ptr().cast_mut();
        for (i, pc) in buffers.pcs_mut()[..2].iter_mut().enumerate() {
            pc.function_name = name;
            pc.cubin_crc = CUBIN_CRC;
            pc.pc_offset = 0x10 * (i as u64 + 1);
            pc.stall_reason_count = 1;
            // SAFETY: two slots per PC were allocated.
            unsafe {
                *pc.stall_reason = PcSamplingStallReason {
                    stall_reason_index: if i == 0 { 3 } else { 8 },
                    samples: SAMPLES_PER_PC,
                };
            }
        }
        buffers.set_filled(2);
        self.get_data_ok.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Leaves one PC at 0x30 in the configured buffer, as CUPTI copies
    /// what it still holds there.
    fn pc_sampling_disable(&self, ctx: ContextHandle) -> Result<(), CuptiError> {
        let _busy = self.pc_call("cuptiPCSamplingDisable", ctx);
        self.disables.fetch_add(1, Ordering::Relaxed);
        let mut states = self.state(ctx);
        let Some(PcState::Configured { configured }) = states.get(&ctx.0).copied() else {
            self.violation(format!("Disable on {:#x}, not configured", ctx.0));
            return Err(Self::refuse("cuptiPCSamplingDisable"));
        };
        states.insert(ctx.0, PcState::Disabled);
        let data = configured as *mut PcSamplingData;
        let name = self.pc_name.as_ref().unwrap().as_ptr().cast_mut();
        // SAFETY: the library keeps the configured buffer alive until
        // after Disable; it has room for PCs of two stall reasons.
        unsafe {
            let pc = &mut *(*data).pc_data;
            pc.function_name = name;
            pc.cubin_crc = CUBIN_CRC;
            pc.pc_offset = 0x30;
            pc.stall_reason_count = 1;
            *pc.stall_reason = PcSamplingStallReason {
                stall_reason_index: 3,
                samples: SAMPLES_AT_DISABLE,
            };
            (*data).total_num_pcs = 1;
        }
        Ok(())
    }
}

/// Listens on a socket in `dir` and collects every snapshot of one
/// connection on a thread.
pub(crate) fn listen(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::thread::JoinHandle<Vec<Snapshot>>) {
    let socket = dir.join("gpu.sock");
    let listener = SnapshotListener::bind(&socket).unwrap();
    let reader = std::thread::spawn(move || {
        let stream = listener.accept().unwrap();
        stream.map(|s| s.unwrap()).collect::<Vec<Snapshot>>()
    });
    (socket, reader)
}

/// PC samples per (offset, stall reason), summed over snapshots.
pub(crate) fn pc_totals(snapshots: &[Snapshot]) -> HashMap<(u64, u32), u64> {
    let mut totals = HashMap::new();
    for p in snapshots.iter().flat_map(|s| &s.pc_samples) {
        assert_eq!(p.function_name, FUNCTION);
        assert_eq!(p.cubin_crc, CUBIN_CRC);
        *totals.entry((p.pc_offset, p.stall_reason)).or_default() += p.samples;
    }
    totals
}
