//! Finding libnvidia-ml at run time and looking its functions up, once.
//!
//! The library is opened with `dlopen`, never linked: the agent must start
//! on hosts without NVIDIA's driver. In order: `KILN_NVML_PATH` alone when
//! set (an operator who names a library means that one, and tests rely on
//! never falling through to a real driver), else the sonames the driver
//! installs, through the dynamic loader's search path.

use std::ffi::{CStr, OsString};
use std::path::{Path, PathBuf};

use libloading::os::unix::{Library, Symbol};

use super::NvmlError;
use super::abi::{self, NvmlReturn};

/// The environment variable naming the library to load instead of the
/// driver's.
pub const NVML_PATH_ENV: &str = "KILN_NVML_PATH";

/// What the driver package installs: the versioned soname everywhere, the
/// bare name only with development files.
const SONAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// Where to look, in order, given `KILN_NVML_PATH`'s value.
pub(super) fn candidate_paths(override_path: Option<OsString>) -> Vec<PathBuf> {
    match override_path.filter(|p| !p.is_empty()) {
        Some(path) => vec![PathBuf::from(path)],
        None => SONAMES.iter().map(PathBuf::from).collect(),
    }
}

/// How to call for the compute processes, where the library can tell.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProcessCall {
    pub(super) function: abi::DeviceGetComputeRunningProcesses,
    /// `nvmlDeviceGetComputeRunningProcesses_v3` or `_v2`, for logs.
    pub(super) name: &'static str,
    /// Bytes between rows as this library writes them (see
    /// [`abi::ProcessInfoCc`]).
    pub(super) stride: usize,
}

/// libnvidia-ml, loaded, with the functions Kiln calls.
pub(super) struct Api {
    pub(super) path: PathBuf,
    pub(super) init: abi::Init,
    pub(super) shutdown: abi::Shutdown,
    error_string: abi::ErrorString,
    pub(super) device_get_count: abi::DeviceGetCount,
    pub(super) device_get_handle_by_index: abi::DeviceGetHandleByIndex,
    pub(super) device_get_name: abi::DeviceGetString,
    pub(super) device_get_uuid: abi::DeviceGetString,
    pub(super) device_get_utilization_rates: abi::DeviceGetUtilizationRates,
    pub(super) device_get_clock_info: abi::DeviceGetUintOf,
    pub(super) device_get_memory_info: abi::DeviceGetMemoryInfo,
    pub(super) device_get_power_usage: abi::DeviceGetUint,
    pub(super) device_get_temperature: abi::DeviceGetUintOf,
    pub(super) device_get_pcie_throughput: abi::DeviceGetUintOf,
    /// `None` on drivers older than R450, which have neither `_v3` nor
    /// `_v2`: no per-process memory then.
    pub(super) processes: Option<ProcessCall>,
    /// Keeps the functions above mapped; closed (after `nvmlShutdown`)
    /// when the [`Nvml`](super::Nvml) owning it goes.
    _library: Library,
}

impl Api {
    /// Opens the library `KILN_NVML_PATH` names, else the driver's.
    pub(super) fn find() -> Result<Api, NvmlError> {
        let mut tried = Vec::new();
        for path in candidate_paths(std::env::var_os(NVML_PATH_ENV)) {
            match open(&path) {
                Ok(library) => return Api::from_library(library, path),
                Err(e) => tried.push((path, e.to_string())),
            }
        }
        Err(NvmlError::NotFound { tried })
    }

    /// Opens the library at `path`.
    pub(super) fn load(path: &Path) -> Result<Api, NvmlError> {
        match open(path) {
            Ok(library) => Api::from_library(library, path.to_owned()),
            Err(e) => Err(NvmlError::NotFound {
                tried: vec![(path.to_owned(), e.to_string())],
            }),
        }
    }

    fn from_library(library: Library, path: PathBuf) -> Result<Api, NvmlError> {
        let required = Required {
            library: &library,
            path: &path,
        };
        let has = |name: &[u8]| {
            // SAFETY: only whether the symbol exists is asked; it is never
            // called through this type.
            unsafe { library.get::<*const ()>(name) }.is_ok()
        };
        let processes = required
            .optional::<abi::DeviceGetComputeRunningProcesses>(
                "nvmlDeviceGetComputeRunningProcesses_v3",
            )
            .map(|function| ProcessCall {
                function,
                name: "nvmlDeviceGetComputeRunningProcesses_v3",
                // R535 has the confidential-computing calls but not yet the
                // detail list that took the extra field away again (the
                // test nvitop uses).
                stride: if has(b"nvmlDeviceGetConfComputeMemSizeInfo\0")
                    && !has(b"nvmlDeviceGetRunningProcessDetailList\0")
                {
                    size_of::<abi::ProcessInfoCc>()
                } else {
                    size_of::<abi::ProcessInfo>()
                },
            })
            .or_else(|| {
                required
                    .optional("nvmlDeviceGetComputeRunningProcesses_v2")
                    .map(|function| ProcessCall {
                        function,
                        name: "nvmlDeviceGetComputeRunningProcesses_v2",
                        stride: size_of::<abi::ProcessInfo>(),
                    })
            });
        Ok(Api {
            init: required.get("nvmlInit_v2")?,
            shutdown: required.get("nvmlShutdown")?,
            error_string: required.get("nvmlErrorString")?,
            device_get_count: required.get("nvmlDeviceGetCount_v2")?,
            device_get_handle_by_index: required.get("nvmlDeviceGetHandleByIndex_v2")?,
            device_get_name: required.get("nvmlDeviceGetName")?,
            device_get_uuid: required.get("nvmlDeviceGetUUID")?,
            device_get_utilization_rates: required.get("nvmlDeviceGetUtilizationRates")?,
            device_get_clock_info: required.get("nvmlDeviceGetClockInfo")?,
            device_get_memory_info: required.get("nvmlDeviceGetMemoryInfo")?,
            device_get_power_usage: required.get("nvmlDeviceGetPowerUsage")?,
            device_get_temperature: required.get("nvmlDeviceGetTemperature")?,
            device_get_pcie_throughput: required.get("nvmlDeviceGetPcieThroughput")?,
            processes,
            path,
            _library: library,
        })
    }

    /// What `nvmlErrorString` says of `code`.
    pub(super) fn error_string(&self, code: NvmlReturn) -> String {
        // SAFETY: nvmlErrorString may be called at any time, initialized
        // or not, and returns a static string (or null, defensively).
        let text = unsafe { (self.error_string)(code) };
        if text.is_null() {
            return format!("error {code}");
        }
        // SAFETY: a non-null answer is a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// `Ok` for `NVML_SUCCESS`, else the error naming `call`.
    pub(super) fn check(&self, call: &'static str, code: NvmlReturn) -> Result<(), NvmlError> {
        if code == abi::SUCCESS {
            return Ok(());
        }
        Err(NvmlError::Call {
            call,
            code,
            message: self.error_string(code),
        })
    }
}

fn open(path: &Path) -> Result<Library, libloading::Error> {
    // SAFETY: libnvidia-ml's initializers only set up its own state; the
    // driver's tools load it into arbitrary processes.
    unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_LOCAL) }
}

/// Looks functions up, naming the library and the function when one is
/// missing.
struct Required<'a> {
    library: &'a Library,
    path: &'a Path,
}

impl Required<'_> {
    fn get<T: Copy>(&self, name: &'static str) -> Result<T, NvmlError> {
        self.lookup(name)
            .map_err(|source| NvmlError::MissingSymbol {
                path: self.path.to_owned(),
                symbol: name,
                source,
            })
    }

    fn optional<T: Copy>(&self, name: &'static str) -> Option<T> {
        self.lookup(name).ok()
    }

    fn lookup<T: Copy>(&self, name: &'static str) -> Result<T, libloading::Error> {
        let mut symbol = Vec::with_capacity(name.len() + 1);
        symbol.extend_from_slice(name.as_bytes());
        symbol.push(0);
        // SAFETY: every `T` asked for is the function type nvml.h declares
        // for `name` (see `abi`); the pointer is copied out and stays valid
        // while `Api` keeps the library open.
        let found: Symbol<T> = unsafe { self.library.get(&symbol) }?;
        Ok(*found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the search order: an override is the only candidate.
    #[test]
    fn override_then_sonames() {
        assert_eq!(
            candidate_paths(Some("/opt/fake/libnvidia-ml.so".into())),
            [PathBuf::from("/opt/fake/libnvidia-ml.so")]
        );
        assert_eq!(
            candidate_paths(Some("".into())),
            [
                PathBuf::from("libnvidia-ml.so.1"),
                PathBuf::from("libnvidia-ml.so")
            ]
        );
        assert_eq!(candidate_paths(None).len(), 2);
    }
}
