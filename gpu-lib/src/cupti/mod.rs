//! The seam between Kiln and CUPTI: the [`Cupti`] trait, its real
//! implementation over the run-time-loaded library, and how that library
//! is found.
//!
//! Everything above this module (parsing, joining, aggregation, the
//! callbacks' logic) only sees the trait, so tests drive it with recorded
//! or synthesized buffers where no GPU exists.

mod errors;
mod loader;
mod real;

use std::ffi::c_void;

pub use errors::ErrorLog;

pub use loader::{LoadError, candidate_paths, load_library};
pub use real::{OpenError, RealCupti};

use crate::cupti_abi as abi;
use crate::pcsampling::PcSamplingBuffers;
use crate::wire::StallReasonName;

/// A CUDA context handle, as a number so it can cross threads. Only CUPTI
/// ever dereferences it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContextHandle(pub usize);

impl ContextHandle {
    /// The handle as CUPTI takes it.
    pub fn as_ptr(self) -> abi::CuContext {
        self.0 as *mut c_void
    }
}

/// A CUPTI call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: CUPTI error {code} ({message})")]
pub struct CuptiError {
    /// The CUPTI function.
    pub call: &'static str,
    /// Its `CUptiResult`.
    pub code: u32,
    /// CUPTI's text for the code, when it has one.
    pub message: String,
}

/// What Kiln asks of CUPTI.
///
/// The callbacks handed in are the library's `extern "C"` trampolines; an
/// implementation calls them as CUPTI would (from any thread).
pub trait Cupti: Send + Sync {
    /// Turns on `CONCURRENT_KERNEL` activity records and registers the
    /// buffer callbacks (`cuptiActivityRegisterCallbacks`,
    /// `cuptiActivityEnable`).
    fn enable_kernel_activity(
        &self,
        requested: abi::BufferRequestedFunc,
        completed: abi::BufferCompletedFunc,
    ) -> Result<(), CuptiError>;

    /// Subscribes `callback` to the driver's launch calls
    /// and device memory calls ([`abi::driver_cbid::subscribed`]) and to
    /// the resource domain (contexts,
    /// modules) (`cuptiSubscribe`, `cuptiEnableCallback`,
    /// `cuptiEnableDomain`).
    fn subscribe(&self, callback: abi::CallbackFunc) -> Result<(), CuptiError>;

    /// Hands back every buffer holding records (`cuptiActivityFlushAll`);
    /// `forced` also hands back buffers that are not full.
    fn flush_all(&self, forced: bool) -> Result<(), CuptiError>;

    /// Now, on the clock activity records use (`cuptiGetTimestamp`), ns.
    fn timestamp_ns(&self) -> u64;

    /// Calls `each` with the bytes of every record in a completed buffer.
    /// The default walks the buffer knowing only kernel records (see
    /// [`crate::activity::walk`]); the real CUPTI asks
    /// `cuptiActivityGetNextRecord` for each record's place, so other
    /// kinds are skipped whole. Returns the bytes left unwalked.
    fn for_each_record(&self, buffer: &[u8], each: &mut dyn FnMut(&[u8])) -> usize {
        crate::activity::walk(buffer, each)
    }

    /// The kernel name a record's name address points to.
    fn kernel_name(&self, name_ptr: u64) -> Option<String>;

    /// CUPTI's CRC of a cubin (`cuptiGetCubinCrc`): PC samples carry it.
    fn cubin_crc(&self, cubin: &[u8]) -> Option<u64>;

    /// Turns PC sampling on for a context and returns CUPTI's stall reason
    /// table (`cuptiPCSamplingEnable`, `…GetNumStallReasons`,
    /// `…GetStallReasons`). Called in the context-created callback, on the
    /// thread creating the context.
    fn pc_sampling_enable(&self, ctx: ContextHandle) -> Result<Vec<StallReasonName>, CuptiError>;

    /// Configures an enabled context (`cuptiPCSamplingSetConfigurationAttribute`):
    /// continuous collection, start/stop control as `setup` says (off:
    /// sampling runs from here to `Disable`), every stall reason in
    /// `setup`, `configured` as the buffer CUPTI fills at `Disable`, and
    /// the sampling period, worker sleep and hardware buffer size when
    /// given.
    fn pc_sampling_configure(
        &self,
        ctx: ContextHandle,
        configured: &mut PcSamplingBuffers,
        setup: &PcSamplingSetup<'_>,
    ) -> Result<(), CuptiError>;

    /// Fills `buffers` with PCs sampled since the last call
    /// (`cuptiPCSamplingGetData`). Called only on the program's threads,
    /// from CUPTI callbacks or at exit (see
    /// [`crate::pc_sampler`]).
    fn pc_sampling_get_data(
        &self,
        ctx: ContextHandle,
        buffers: &mut PcSamplingBuffers,
    ) -> Result<(), CuptiError>;

    /// Turns PC sampling off for a context (`cuptiPCSamplingDisable`);
    /// CUPTI copies what it still holds into the configured buffer.
    fn pc_sampling_disable(&self, ctx: ContextHandle) -> Result<(), CuptiError>;
}

/// How a context's PC sampling is configured.
#[derive(Debug, Clone, Copy)]
pub struct PcSamplingSetup<'a> {
    /// Sampling period, 2^n cycles (5..=31); CUPTI's default when `None`.
    pub period: Option<u32>,
    /// The stall reason indices to collect (all CUPTI reported).
    pub stall_reasons: &'a [u32],
    /// Sleep of CUPTI's PC-sampling worker threads, ms; CUPTI's default
    /// (100) when `None`.
    pub worker_sleep_ms: Option<u32>,
    /// The hardware buffer's size; CUPTI's default (512 MiB) when `None`.
    pub hardware_buffer_bytes: Option<usize>,
    /// CUPTI's start/stop control: on, nothing is collected, since Kiln
    /// never calls `Start` (the `idle` measurement of
    /// [`crate::pc_sampler::Collection`]); off, collection runs
    /// from `Enable` to `Disable`.
    pub start_stop_control: bool,
}
