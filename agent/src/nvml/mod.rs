//! GPU metrics through NVML, the NVIDIA Management Library that the
//! driver installs (`libnvidia-ml.so.1`): per GPU, utilization, SM and
//! memory clocks, memory used and total, power, temperature and PCIe
//! throughput; per compute process, the device memory it holds.
//!
//! The library is loaded at run time (`library.rs`), never linked, so the
//! agent runs on hosts without NVIDIA: there [`Nvml::open`] fails with an
//! error whose [`NvmlError::is_absent`] is true, and
//! [`GpuMetricsSampler::start_if_available`] logs one info line and
//! returns `None`. Only NVML's stable C API is called, declared by hand in
//! `abi.rs` (no CUDA headers at build time); a metric a GPU does not
//! support is `None`, logged once, never an error (`reader.rs`).
//! [`GpuMetricsSampler`] reads once a second on its own thread and keeps
//! the readings, bounded, until the agent takes them; [`GpuReadings::points`]
//! flattens them into named, labelled values (`readings.rs`).
//!
//! # Why not DCGM
//!
//! DCGM (the Data Center GPU Manager) adds profiling metrics, such as SM
//! occupancy, tensor-core activity and DRAM bandwidth, that NVML lacks. It
//! reads them from the GPU's hardware performance counters, the same ones
//! CUPTI's PC sampling and kernel profiling use, which `libkiln_cuda.so`
//! runs inside CUDA processes (see [`crate::gpu`]). One client at a time
//! can hold those counters: with DCGM's profiling module running, Kiln's
//! GPU profiler would fail to start sampling or DCGM would report gaps,
//! unless one were paused around the other (`dcgmi profile --pause`).
//! NVML's metrics come from the driver's own bookkeeping, not those
//! counters, so they coexist with both. Kiln therefore reads NVML only and
//! does not implement DCGM.

mod abi;
mod error;
mod library;
mod reader;
mod readings;
mod sampler;

pub use error::NvmlError;
pub use library::NVML_PATH_ENV;
pub use reader::{MAX_GPU_PROCESSES, Nvml};
pub use readings::{DeviceReading, GpuPoint, GpuProcess, GpuReadings};
pub use sampler::{GPU_SAMPLE_INTERVAL, GpuMetricsSampler, MAX_QUEUED_GPU_READINGS};
