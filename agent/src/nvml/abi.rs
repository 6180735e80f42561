//! NVML's C ABI, declared by hand from `nvml.h` (no bindgen, no CUDA
//! headers at build time): the return codes, enum values, structs and
//! function types of the calls Kiln makes. The tests at the bottom pin
//! every value and layout; `tests/nvml/fake_nvml.c` declares the same
//! ones for the stand-in library, with `_Static_assert`s. If you change
//! one side, change the other.

use std::ffi::{c_char, c_uint, c_void};

/// `nvmlReturn_t`, a C enum: passed and returned as an `int`-sized value.
pub(super) type NvmlReturn = c_uint;

/// `NVML_SUCCESS`.
pub(super) const SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_NOT_SUPPORTED`: this GPU does not have the metric.
pub(super) const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
/// `NVML_ERROR_INSUFFICIENT_SIZE`: the array passed is too small; the
/// count then holds the size needed.
pub(super) const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
/// `NVML_ERROR_DRIVER_NOT_LOADED`: the library is installed, the kernel
/// driver is not running (no GPU, or a container image with the library
/// but no device).
pub(super) const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
/// `NVML_ERROR_LIBRARY_NOT_FOUND`: NVML could not load a library it needs.
pub(super) const ERROR_LIBRARY_NOT_FOUND: NvmlReturn = 12;

/// `NVML_CLOCK_SM` (`nvmlClockType_t`).
pub(super) const CLOCK_SM: c_uint = 1;
/// `NVML_CLOCK_MEM` (`nvmlClockType_t`).
pub(super) const CLOCK_MEM: c_uint = 2;
/// `NVML_TEMPERATURE_GPU` (`nvmlTemperatureSensors_t`): the die.
pub(super) const TEMPERATURE_GPU: c_uint = 0;
/// `NVML_PCIE_UTIL_TX_BYTES` (`nvmlPcieUtilCounter_t`).
pub(super) const PCIE_UTIL_TX_BYTES: c_uint = 0;
/// `NVML_PCIE_UTIL_RX_BYTES` (`nvmlPcieUtilCounter_t`).
pub(super) const PCIE_UTIL_RX_BYTES: c_uint = 1;

/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`: the largest name buffer NVML asks
/// for (the older `NVML_DEVICE_NAME_BUFFER_SIZE` is 64).
pub(super) const DEVICE_NAME_BUFFER_SIZE: usize = 96;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE` (the older one is 80).
pub(super) const DEVICE_UUID_BUFFER_SIZE: usize = 96;
/// `NVML_VALUE_NOT_AVAILABLE`: `usedGpuMemory` when the driver cannot say
/// (Windows WDDM, or no permission to see the process).
pub(super) const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// `nvmlDevice_t`: an opaque pointer, valid until `nvmlShutdown`.
pub(super) type Device = *mut c_void;

/// `nvmlUtilization_t`: percent of the last sample period (1/6 s to 1 s,
/// by product) in which a kernel ran, and in which device memory was
/// read or written.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Utilization {
    pub(super) gpu: c_uint,
    pub(super) memory: c_uint,
}

/// `nvmlMemory_t` (v1, as `nvmlDeviceGetMemoryInfo` fills it), in bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Memory {
    pub(super) total: u64,
    pub(super) free: u64,
    pub(super) used: u64,
}

/// `nvmlProcessInfo_v2_t`, which `nvmlDeviceGetComputeRunningProcesses_v2`
/// fills, and `_v3` too on every driver but R535 (see [`ProcessInfoCc`]).
/// The padding after `pid` is implicit in C; it is spelled out here.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ProcessInfo {
    pub(super) pid: c_uint,
    pub(super) _padding: u32,
    /// Bytes, or [`VALUE_NOT_AVAILABLE`].
    pub(super) used_gpu_memory: u64,
    /// `0xFFFFFFFF` unless MIG is on.
    pub(super) gpu_instance_id: c_uint,
    pub(super) compute_instance_id: c_uint,
}

/// The `nvmlProcessInfo_t` that R535 drivers (CUDA 12.2) fill from
/// `nvmlDeviceGetComputeRunningProcesses_v3`: [`ProcessInfo`] plus
/// `usedGpuCcProtectedMemory`, 32 bytes a row instead of 24, with no
/// version bump. Later drivers moved that field to
/// `nvmlDeviceGetRunningProcessDetailList` and went back to 24 bytes
/// (nvitop PR #79 tells the story). Kiln never reads the extra field; it
/// sizes its buffer by this struct so that no driver writes past it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ProcessInfoCc {
    pub(super) info: ProcessInfo,
    pub(super) used_gpu_cc_protected_memory: u64,
}

pub(super) type Init = unsafe extern "C" fn() -> NvmlReturn;
pub(super) type Shutdown = unsafe extern "C" fn() -> NvmlReturn;
pub(super) type ErrorString = unsafe extern "C" fn(result: NvmlReturn) -> *const c_char;
pub(super) type DeviceGetCount = unsafe extern "C" fn(count: *mut c_uint) -> NvmlReturn;
pub(super) type DeviceGetHandleByIndex =
    unsafe extern "C" fn(index: c_uint, device: *mut Device) -> NvmlReturn;
/// `nvmlDeviceGetName` and `nvmlDeviceGetUUID`.
pub(super) type DeviceGetString =
    unsafe extern "C" fn(device: Device, text: *mut c_char, length: c_uint) -> NvmlReturn;
pub(super) type DeviceGetUtilizationRates =
    unsafe extern "C" fn(device: Device, utilization: *mut Utilization) -> NvmlReturn;
pub(super) type DeviceGetMemoryInfo =
    unsafe extern "C" fn(device: Device, memory: *mut Memory) -> NvmlReturn;
/// `nvmlDeviceGetPowerUsage` (milliwatts).
pub(super) type DeviceGetUint =
    unsafe extern "C" fn(device: Device, value: *mut c_uint) -> NvmlReturn;
/// `nvmlDeviceGetClockInfo` (MHz), `nvmlDeviceGetTemperature` (°C),
/// `nvmlDeviceGetPcieThroughput` (KB/s): a device, an enum, a value.
pub(super) type DeviceGetUintOf =
    unsafe extern "C" fn(device: Device, which: c_uint, value: *mut c_uint) -> NvmlReturn;
/// `nvmlDeviceGetComputeRunningProcesses_v3` and `_v2`: `count` holds the
/// rows `infos` has room for, and on return the rows written (or needed,
/// with [`ERROR_INSUFFICIENT_SIZE`]).
pub(super) type DeviceGetComputeRunningProcesses =
    unsafe extern "C" fn(device: Device, count: *mut c_uint, infos: *mut c_void) -> NvmlReturn;

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;

    // Guards the values declared by hand against nvml.h: a wrong one would
    // ask for another metric, or misread an answer, without any error.
    #[test]
    fn constants_are_nvml_h() {
        assert_eq!(SUCCESS, 0);
        assert_eq!(ERROR_NOT_SUPPORTED, 3);
        assert_eq!(ERROR_INSUFFICIENT_SIZE, 7);
        assert_eq!(ERROR_DRIVER_NOT_LOADED, 9);
        assert_eq!(ERROR_LIBRARY_NOT_FOUND, 12);
        assert_eq!(CLOCK_SM, 1);
        assert_eq!(CLOCK_MEM, 2);
        assert_eq!(TEMPERATURE_GPU, 0);
        assert_eq!(PCIE_UTIL_TX_BYTES, 0);
        assert_eq!(PCIE_UTIL_RX_BYTES, 1);
        assert_eq!(DEVICE_NAME_BUFFER_SIZE, 96);
        assert_eq!(DEVICE_UUID_BUFFER_SIZE, 96);
        assert_eq!(VALUE_NOT_AVAILABLE, 0xFFFF_FFFF_FFFF_FFFF);
    }

    // Guards the struct layouts NVML writes into.
    #[test]
    fn layouts_are_nvml_h() {
        assert_eq!(size_of::<Utilization>(), 8);
        assert_eq!(offset_of!(Utilization, memory), 4);
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(offset_of!(Memory, free), 8);
        assert_eq!(offset_of!(Memory, used), 16);
        assert_eq!(size_of::<ProcessInfo>(), 24);
        assert_eq!(align_of::<ProcessInfo>(), 8);
        assert_eq!(offset_of!(ProcessInfo, pid), 0);
        assert_eq!(offset_of!(ProcessInfo, used_gpu_memory), 8);
        assert_eq!(offset_of!(ProcessInfo, gpu_instance_id), 16);
        assert_eq!(offset_of!(ProcessInfo, compute_instance_id), 20);
        assert_eq!(size_of::<ProcessInfoCc>(), 32);
        assert_eq!(offset_of!(ProcessInfoCc, used_gpu_cc_protected_memory), 24);
    }
}
