//! The subset of CUPTI's C ABI Kiln uses, declared by hand.
//!
//! Declared rather than generated so that the crate builds with no CUDA
//! toolkit: every constant and struct here mirrors `cupti_activity.h`,
//! `cupti_callbacks.h` and `cupti_pcsampling.h` of CUDA 12.x on LP64 Linux.
//! The `layout` test at the bottom pins every size and offset; if you add a
//! field here, add it there too.
//!
//! Activity records are not declared as structs: they are read field by
//! field from byte slices ([`kernel_record`] holds the offsets), so a short
//! or damaged buffer can never be read out of bounds.

use std::ffi::{c_char, c_void};

/// `CUptiResult`: 0 is success, anything else an error code.
pub type CuptiResult = u32;
/// `CUPTI_SUCCESS`.
pub const CUPTI_SUCCESS: CuptiResult = 0;

/// `CUcontext`: an opaque driver handle.
pub type CuContext = *mut c_void;
/// `CUpti_SubscriberHandle`: an opaque CUPTI handle.
pub type SubscriberHandle = *mut c_void;

/// `CUpti_ActivityKind` values Kiln knows.
pub mod activity_kind {
    /// `CUPTI_ACTIVITY_KIND_KERNEL`: serialized kernel records.
    pub const KERNEL: u32 = 3;
    /// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`: the kind Kiln enables.
    pub const CONCURRENT_KERNEL: u32 = 10;
}

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush buffers that are not full yet.
pub const ACTIVITY_FLAG_FLUSH_FORCED: u32 = 1;

/// `CUpti_CallbackDomain` values.
pub mod domain {
    /// `CUPTI_CB_DOMAIN_DRIVER_API`.
    pub const DRIVER_API: u32 = 1;
    /// `CUPTI_CB_DOMAIN_RESOURCE`.
    pub const RESOURCE: u32 = 3;
}

/// `CUpti_driver_api_trace_cbid` values of the launch calls Kiln records.
pub mod driver_cbid {
    /// `cuLaunchKernel`.
    pub const LAUNCH_KERNEL: u32 = 307;
    /// `cuLaunchKernel_ptsz` (per-thread default stream).
    pub const LAUNCH_KERNEL_PTSZ: u32 = 442;
    /// `cuLaunchCooperativeKernel`.
    pub const LAUNCH_COOPERATIVE_KERNEL: u32 = 477;
    /// `cuLaunchCooperativeKernel_ptsz`.
    pub const LAUNCH_COOPERATIVE_KERNEL_PTSZ: u32 = 478;
    /// `cuGraphLaunch`: one correlation id for every kernel of the graph.
    pub const GRAPH_LAUNCH: u32 = 514;
    /// `cuGraphLaunch_ptsz`.
    pub const GRAPH_LAUNCH_PTSZ: u32 = 515;
    /// `cuLaunchKernelEx` (CUDA 12: clusters, launch attributes).
    pub const LAUNCH_KERNEL_EX: u32 = 652;
    /// `cuLaunchKernelEx_ptsz`.
    pub const LAUNCH_KERNEL_EX_PTSZ: u32 = 653;

    /// Every launch call Kiln subscribes to.
    pub const ALL: [u32; 8] = [
        LAUNCH_KERNEL,
        LAUNCH_KERNEL_PTSZ,
        LAUNCH_COOPERATIVE_KERNEL,
        LAUNCH_COOPERATIVE_KERNEL_PTSZ,
        GRAPH_LAUNCH,
        GRAPH_LAUNCH_PTSZ,
        LAUNCH_KERNEL_EX,
        LAUNCH_KERNEL_EX_PTSZ,
    ];

    /// `cuMemAlloc_v2` (what `cudaMalloc` calls).
    pub const MEM_ALLOC_V2: u32 = 243;
    /// `cuMemAllocPitch_v2`.
    pub const MEM_ALLOC_PITCH_V2: u32 = 244;
    /// `cuMemFree_v2` (what `cudaFree` calls).
    pub const MEM_FREE_V2: u32 = 245;
    /// `cuMemAllocManaged` (`cudaMallocManaged`).
    pub const MEM_ALLOC_MANAGED: u32 = 371;
    /// `cuMemAllocAsync` (`cudaMallocAsync`, stream-ordered pools).
    pub const MEM_ALLOC_ASYNC: u32 = 598;
    /// `cuMemAllocAsync_ptsz`.
    pub const MEM_ALLOC_ASYNC_PTSZ: u32 = 599;
    /// `cuMemFreeAsync`.
    pub const MEM_FREE_ASYNC: u32 = 600;
    /// `cuMemFreeAsync_ptsz`.
    pub const MEM_FREE_ASYNC_PTSZ: u32 = 601;
    /// `cuMemAllocFromPoolAsync`.
    pub const MEM_ALLOC_FROM_POOL_ASYNC: u32 = 611;
    /// `cuMemAllocFromPoolAsync_ptsz`.
    pub const MEM_ALLOC_FROM_POOL_ASYNC_PTSZ: u32 = 612;

    /// `cuMemCreate`: physical memory of the virtual memory management API
    /// (PyTorch's expandable segments), reserved until `cuMemRelease`.
    /// `cuMemMap` (551) and `cuMemUnmap` (552) only map it at addresses,
    /// so they are not watched.
    pub const MEM_CREATE: u32 = 549;
    /// `cuMemRelease`.
    pub const MEM_RELEASE: u32 = 550;

    /// Calls whose params start with `CUdeviceptr *dptr; size_t bytesize`
    /// ([`super::MemAllocParams`]).
    pub const MEMORY_ALLOC: [u32; 6] = [
        MEM_ALLOC_V2,
        MEM_ALLOC_MANAGED,
        MEM_ALLOC_ASYNC,
        MEM_ALLOC_ASYNC_PTSZ,
        MEM_ALLOC_FROM_POOL_ASYNC,
        MEM_ALLOC_FROM_POOL_ASYNC_PTSZ,
    ];
    /// Calls whose params start with `CUdeviceptr dptr`
    /// ([`super::MemFreeParams`]).
    pub const MEMORY_FREE: [u32; 3] = [MEM_FREE_V2, MEM_FREE_ASYNC, MEM_FREE_ASYNC_PTSZ];

    /// The device memory calls Kiln watches (values checked against an
    /// H200's CUDA 13.0 headers by `scripts/gpucheck/field.sh`).
    pub const MEMORY: [u32; 12] = [
        MEM_CREATE,
        MEM_RELEASE,
        MEM_ALLOC_V2,
        MEM_ALLOC_PITCH_V2,
        MEM_FREE_V2,
        MEM_ALLOC_MANAGED,
        MEM_ALLOC_ASYNC,
        MEM_ALLOC_ASYNC_PTSZ,
        MEM_FREE_ASYNC,
        MEM_FREE_ASYNC_PTSZ,
        MEM_ALLOC_FROM_POOL_ASYNC,
        MEM_ALLOC_FROM_POOL_ASYNC_PTSZ,
    ];

    /// Every driver call Kiln subscribes to.
    pub fn subscribed() -> impl Iterator<Item = u32> {
        ALL.into_iter().chain(MEMORY)
    }
}

/// `cuMemAlloc_v2_params`: where the driver writes the new address, and
/// the size asked for; also the head of `cuMemAllocManaged_params`,
/// `cuMemAllocAsync_params` and `cuMemAllocFromPoolAsync_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAllocParams {
    /// `CUdeviceptr *dptr`.
    pub dptr: *mut u64,
    /// `size_t bytesize`.
    pub bytesize: usize,
}

/// `cuMemAllocPitch_v2_params`: the allocation is `*pitch * height` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAllocPitchParams {
    /// `CUdeviceptr *dptr`.
    pub dptr: *mut u64,
    /// `size_t *pPitch`, written by the driver.
    pub pitch: *mut usize,
    /// `size_t WidthInBytes`.
    pub width_in_bytes: usize,
    /// `size_t Height`.
    pub height: usize,
    /// `unsigned int ElementSizeBytes`.
    pub element_size_bytes: u32,
}

/// `cuMemFree_v2_params`; also the head of `cuMemFreeAsync_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemFreeParams {
    /// `CUdeviceptr dptr`.
    pub dptr: u64,
}

/// `cuMemCreate_params`: where the driver writes the new handle, the
/// size, and the allocation's properties.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemCreateParams {
    /// `CUmemGenericAllocationHandle *handle`.
    pub handle: *mut u64,
    /// `size_t size`.
    pub size: usize,
    /// `const CUmemAllocationProp *prop`.
    pub prop: *const MemAllocationProp,
    /// `unsigned long long flags`.
    pub flags: u64,
}

/// The head of `CUmemAllocationProp`, as far as its location.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAllocationProp {
    /// `CUmemAllocationType type`.
    pub allocation_type: u32,
    /// `CUmemAllocationHandleType requestedHandleTypes`.
    pub requested_handle_types: u32,
    /// `CUmemLocation location`: its `type`.
    pub location_type: u32,
    /// Its `id` (the device ordinal for a device location).
    pub location_id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`: memory on a GPU (others are the host's).
pub const MEM_LOCATION_TYPE_DEVICE: u32 = 1;

/// `cuMemRelease_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemReleaseParams {
    /// `CUmemGenericAllocationHandle handle`.
    pub handle: u64,
}

/// `CUpti_CallbackIdResource` values.
pub mod resource_cbid {
    /// `CUPTI_CBID_RESOURCE_CONTEXT_CREATED`.
    pub const CONTEXT_CREATED: u32 = 1;
    /// `CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING`.
    pub const CONTEXT_DESTROY_STARTING: u32 = 2;
    /// `CUPTI_CBID_RESOURCE_MODULE_LOADED`.
    pub const MODULE_LOADED: u32 = 6;
}

/// `CUPTI_API_ENTER`: the callback site before the driver call runs.
pub const API_ENTER: u32 = 0;
/// `CUPTI_API_EXIT`: the callback site after the driver call returned.
pub const API_EXIT: u32 = 1;

/// `CUpti_CallbackFunc`.
pub type CallbackFunc =
    unsafe extern "C" fn(userdata: *mut c_void, domain: u32, cbid: u32, cbdata: *const c_void);
/// `CUpti_BuffersCallbackRequestFunc`.
pub type BufferRequestedFunc =
    unsafe extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_num_records: *mut usize);
/// `CUpti_BuffersCallbackCompleteFunc`.
pub type BufferCompletedFunc = unsafe extern "C" fn(
    context: CuContext,
    stream_id: u32,
    buffer: *mut u8,
    size: usize,
    valid_size: usize,
);

/// `CUpti_CallbackData`: what a driver-API callback receives.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CallbackData {
    /// `CUpti_ApiCallbackSite`: [`API_ENTER`] or exit.
    pub callback_site: u32,
    /// Padding the C compiler inserts before the pointer.
    pub _pad0: u32,
    /// Name of the driver function.
    pub function_name: *const c_char,
    /// The driver function's parameter struct.
    pub function_params: *const c_void,
    /// The driver function's return value (valid at exit).
    pub function_return_value: *mut c_void,
    /// Kernel symbol name for launch calls, else null.
    pub symbol_name: *const c_char,
    /// The driver context.
    pub context: CuContext,
    /// Unique id of the context.
    pub context_uid: u32,
    /// Padding before the pointer.
    pub _pad1: u32,
    /// Per-call scratch space shared by the enter and exit callbacks.
    pub correlation_data: *mut u64,
    /// The id that also appears in the activity record of the work.
    pub correlation_id: u32,
    /// Tail padding.
    pub _pad2: u32,
}

/// `CUpti_ResourceData`: what a resource-domain callback receives.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceData {
    /// The context the resource belongs to.
    pub context: CuContext,
    /// `resourceHandle` (a union of a stream handle).
    pub resource_handle: *mut c_void,
    /// For module callbacks, a [`ModuleResourceData`].
    pub resource_descriptor: *mut c_void,
}

/// `CUpti_ModuleResourceData`: the cubin of a loaded module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleResourceData {
    /// The module id.
    pub module_id: u32,
    /// Padding before `size_t`.
    pub _pad0: u32,
    /// Size of the cubin in bytes.
    pub cubin_size: usize,
    /// The cubin (an ELF image).
    pub cubin: *const c_char,
}

/// Byte offsets of the fields Kiln reads in a kernel activity record.
///
/// `CUpti_ActivityKernel4` … `CUpti_ActivityKernel9` are packed and only
/// ever append fields, so these offsets hold for every version CUDA 11 and
/// 12 emit; [`kernel_record::MIN_LEN`] is the shortest record that has them
/// all (`CUpti_ActivityKernel7` and later).
pub mod kernel_record {
    /// `CUpti_ActivityKind kind` (u32).
    pub const KIND: usize = 0;
    /// `uint64_t start`, ns.
    pub const START: usize = 16;
    /// `uint64_t end`, ns.
    pub const END: usize = 24;
    /// `uint32_t deviceId`.
    pub const DEVICE_ID: usize = 40;
    /// `uint32_t contextId`.
    pub const CONTEXT_ID: usize = 44;
    /// `uint32_t streamId`.
    pub const STREAM_ID: usize = 48;
    /// `int32_t gridX, gridY, gridZ`.
    pub const GRID: usize = 52;
    /// `int32_t blockX, blockY, blockZ`.
    pub const BLOCK: usize = 64;
    /// `uint32_t correlationId`.
    pub const CORRELATION_ID: usize = 92;
    /// `const char *name`: owned by CUPTI, shared by every record of the
    /// kernel.
    pub const NAME: usize = 104;
    /// `uint64_t graphNodeId`: 0 unless launched by a graph.
    pub const GRAPH_NODE_ID: usize = 144;
    /// `uint32_t graphId`: 0 unless launched by a graph.
    pub const GRAPH_ID: usize = 156;
    /// Shortest record holding every field above.
    pub const MIN_LEN: usize = 160;
    /// Size of `CUpti_ActivityKernel9` (CUDA 12.x), the record the
    /// synthesized buffers of the tests and the benchmark use.
    pub const KERNEL9_LEN: usize = 200;
}

/// Records in an activity buffer start at multiples of this.
pub const ACTIVITY_RECORD_ALIGNMENT: usize = 8;

/// `CUpti_PCSamplingStallReason`: samples of one stall reason at one PC.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcSamplingStallReason {
    /// Index into the table `cuptiPCSamplingGetStallReasons` returns.
    pub stall_reason_index: u32,
    /// Samples.
    pub samples: u32,
}

/// `CUpti_PCSamplingPCData`: one sampled PC.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingPcData {
    /// Size of this struct, set by the caller.
    pub size: usize,
    /// CRC of the cubin the function lives in.
    pub cubin_crc: u64,
    /// Offset of the PC from the function's start.
    pub pc_offset: u64,
    /// The function's symbol index in its module.
    pub function_index: u32,
    /// Padding.
    pub _pad: u32,
    /// The function's (mangled) name, owned by CUPTI.
    pub function_name: *mut c_char,
    /// Valid entries in `stall_reason`.
    pub stall_reason_count: usize,
    /// Caller-allocated array of stall reasons.
    pub stall_reason: *mut PcSamplingStallReason,
    /// Correlation id of the launch (CUDA 12.4+; 0 before).
    pub correlation_id: u32,
    /// Tail padding.
    pub _pad2: u32,
}

/// `CUpti_PCSamplingData` (packed, 8-aligned): a batch of sampled PCs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingData {
    /// Size of this struct, set by the caller.
    pub size: usize,
    /// Capacity of `pc_data`, set by the caller.
    pub collect_num_pcs: usize,
    /// Samples across all PCs, non-user kernels and dropped samples too.
    pub total_samples: u64,
    /// Samples the hardware dropped.
    pub dropped_samples: u64,
    /// Entries of `pc_data` filled.
    pub total_num_pcs: usize,
    /// PCs left for the next call.
    pub remaining_num_pcs: usize,
    /// Range id (start/stop control).
    pub range_id: u64,
    /// Caller-allocated array of `collect_num_pcs` entries.
    pub pc_data: *mut PcSamplingPcData,
    /// Samples in kernels CUPTI gives no PCs for.
    pub non_user_kernels_total_samples: u64,
    /// Nonzero when the hardware buffer overflowed.
    pub hardware_buffer_full: u8,
    /// Tail padding to the 8-byte alignment.
    pub _pad: [u8; 7],
}

/// The common head of every PC sampling parameter struct
/// (`CUpti_PCSamplingEnableParams`, `…DisableParams`, `…StartParams`,
/// `…StopParams`): size, a reserved pointer and the context.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingContextParams {
    /// Size of the struct.
    pub size: usize,
    /// Must be null.
    pub p_priv: *mut c_void,
    /// The context.
    pub ctx: CuContext,
}

/// `CUpti_PCSamplingGetDataParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingGetDataParams {
    /// Size, context and reserved pointer.
    pub head: PcSamplingContextParams,
    /// A [`PcSamplingData`] to fill.
    pub pc_sampling_data: *mut c_void,
}

/// `CUpti_PCSamplingGetNumStallReasonsParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingGetNumStallReasonsParams {
    /// Size, context and reserved pointer.
    pub head: PcSamplingContextParams,
    /// Out: the number of stall reasons.
    pub num_stall_reasons: *mut usize,
}

/// `CUpti_PCSamplingGetStallReasonsParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingGetStallReasonsParams {
    /// Size, context and reserved pointer.
    pub head: PcSamplingContextParams,
    /// Entries of the two arrays.
    pub num_stall_reasons: usize,
    /// Out: each reason's index.
    pub stall_reason_index: *mut u32,
    /// Out: each reason's name, into caller-allocated buffers of
    /// [`STALL_REASON_STRING_SIZE`] bytes.
    pub stall_reasons: *mut *mut c_char,
}

/// `CUPTI_STALL_REASON_STRING_SIZE`.
pub const STALL_REASON_STRING_SIZE: usize = 128;

/// `CUpti_PCSamplingConfigurationInfo`: one attribute to set.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingConfigurationInfo {
    /// `CUpti_PCSamplingConfigurationAttributeType`.
    pub attribute_type: u32,
    /// Out: `CUptiResult` of this attribute.
    pub attribute_status: u32,
    /// The value, a union of at most 3 × u64 (first fields used).
    pub data: [u64; 3],
}

/// `CUpti_PCSamplingConfigurationInfoParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingConfigurationInfoParams {
    /// Size, context and reserved pointer.
    pub head: PcSamplingContextParams,
    /// Entries of `info`.
    pub num_attributes: usize,
    /// The attributes.
    pub info: *mut PcSamplingConfigurationInfo,
}

/// `CUpti_PCSamplingConfigurationAttributeType` values Kiln sets.
pub mod pc_sampling_attr {
    /// Sampling period, 2^n cycles, n in 5..=31 (u32).
    pub const SAMPLING_PERIOD: u32 = 1;
    /// The stall reasons to collect: a count (size_t) and a pointer to
    /// their indices (u32 array).
    pub const STALL_REASON: u32 = 2;
    /// Scratch buffer size in bytes (size_t).
    pub const SCRATCH_BUFFER_SIZE: u32 = 3;
    /// Hardware buffer size in bytes (size_t; CUPTI's default 512 MiB).
    pub const HARDWARE_BUFFER_SIZE: u32 = 4;
    /// [`COLLECTION_MODE_CONTINUOUS`](super::PC_SAMPLING_COLLECTION_MODE_CONTINUOUS)
    /// or kernel-serialized (u32).
    pub const COLLECTION_MODE: u32 = 5;
    /// 1: collection runs only between `cuptiPCSamplingStart` and `Stop`
    /// (u32). Kiln sets 1 only to measure an enabled context that never
    /// collects: Start and Stop deadlock against launching threads, from
    /// a thread of Kiln's and from a launch exit alike (seen on an H200,
    /// CUDA 13.0), so Kiln never calls them.
    pub const ENABLE_START_STOP_CONTROL: u32 = 6;
    /// Where CUPTI copies what is left at `cuptiPCSamplingDisable`
    /// (pointer to a `CUpti_PCSamplingData`).
    pub const SAMPLING_DATA_BUFFER: u32 = 8;
    /// How long CUPTI's PC-sampling worker threads sleep between wakes, in
    /// ms (u32, CUDA 12.0+; CUPTI's default 100): they decode the hardware
    /// buffer and correlate PCs to SASS.
    pub const WORKER_THREAD_PERIODIC_SLEEP_SPAN: u32 = 9;
}

/// `CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS`: kernels run
/// concurrently, as without a profiler.
pub const PC_SAMPLING_COLLECTION_MODE_CONTINUOUS: u64 = 1;

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// Guards the hand-written layouts against the C headers' (LP64).
    #[test]
    fn layout() {
        assert_eq!(size_of::<CallbackData>(), 72);
        assert_eq!(offset_of!(CallbackData, function_name), 8);
        assert_eq!(offset_of!(CallbackData, symbol_name), 32);
        assert_eq!(offset_of!(CallbackData, context), 40);
        assert_eq!(offset_of!(CallbackData, context_uid), 48);
        assert_eq!(offset_of!(CallbackData, correlation_data), 56);
        assert_eq!(offset_of!(CallbackData, correlation_id), 64);

        // Checked against generated_cuda_meta.h on an H200 (field.sh).
        assert_eq!(offset_of!(MemAllocParams, bytesize), 8);
        assert_eq!(offset_of!(MemAllocPitchParams, height), 24);
        assert_eq!(size_of::<MemAllocPitchParams>(), 40);
        assert_eq!(size_of::<MemFreeParams>(), 8);

        assert_eq!(size_of::<ResourceData>(), 24);
        assert_eq!(offset_of!(ResourceData, resource_descriptor), 16);
        assert_eq!(size_of::<ModuleResourceData>(), 24);
        assert_eq!(offset_of!(ModuleResourceData, cubin_size), 8);
        assert_eq!(offset_of!(ModuleResourceData, cubin), 16);

        assert_eq!(size_of::<PcSamplingStallReason>(), 8);
        assert_eq!(offset_of!(PcSamplingPcData, cubin_crc), 8);
        assert_eq!(offset_of!(PcSamplingPcData, pc_offset), 16);
        assert_eq!(offset_of!(PcSamplingPcData, function_index), 24);
        assert_eq!(offset_of!(PcSamplingPcData, function_name), 32);
        assert_eq!(offset_of!(PcSamplingPcData, stall_reason_count), 40);
        assert_eq!(offset_of!(PcSamplingPcData, stall_reason), 48);
        assert_eq!(offset_of!(PcSamplingPcData, correlation_id), 56);
        assert_eq!(size_of::<PcSamplingPcData>(), 64);

        assert_eq!(offset_of!(PcSamplingData, total_samples), 16);
        assert_eq!(offset_of!(PcSamplingData, total_num_pcs), 32);
        assert_eq!(offset_of!(PcSamplingData, remaining_num_pcs), 40);
        assert_eq!(offset_of!(PcSamplingData, pc_data), 56);
        assert_eq!(
            offset_of!(PcSamplingData, non_user_kernels_total_samples),
            64
        );
        assert_eq!(offset_of!(PcSamplingData, hardware_buffer_full), 72);
        assert_eq!(size_of::<PcSamplingData>(), 80);

        assert_eq!(size_of::<PcSamplingContextParams>(), 24);
        assert_eq!(size_of::<PcSamplingGetDataParams>(), 32);
        assert_eq!(size_of::<PcSamplingGetNumStallReasonsParams>(), 32);
        assert_eq!(size_of::<PcSamplingGetStallReasonsParams>(), 48);
        assert_eq!(size_of::<PcSamplingConfigurationInfo>(), 32);
        assert_eq!(offset_of!(PcSamplingConfigurationInfo, data), 8);
        assert_eq!(size_of::<PcSamplingConfigurationInfoParams>(), 40);
    }

    /// The kernel record's fields are in order and inside the minimum length.
    #[test]
    fn kernel_record_offsets_fit() {
        use kernel_record::*;
        let offsets = [
            (KIND, 4),
            (START, 8),
            (END, 8),
            (DEVICE_ID, 4),
            (CONTEXT_ID, 4),
            (STREAM_ID, 4),
            (GRID, 12),
            (BLOCK, 12),
            (CORRELATION_ID, 4),
            (NAME, 8),
            (GRAPH_NODE_ID, 8),
            (GRAPH_ID, 4),
        ];
        for pair in offsets.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:?} overlap");
        }
        let (last, len) = offsets[offsets.len() - 1];
        assert!(last + len <= MIN_LEN);
        const { assert!(MIN_LEN <= KERNEL9_LEN) };
        const { assert!(KERNEL9_LEN.is_multiple_of(ACTIVITY_RECORD_ALIGNMENT)) };
    }
}
