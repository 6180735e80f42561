//! [`Nvml`]: NVML initialized, its GPUs found once, read on demand.

use std::collections::HashSet;
use std::ffi::{CStr, c_char, c_uint};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing::{debug, info, warn};

use super::abi::{self, NvmlReturn};
use super::library::Api;
use super::{DeviceReading, GpuProcess, GpuReadings, NvmlError};

/// Compute processes read per GPU and pass, at most: the buffer NVML
/// fills is sized for this many (32 KiB), so a pass allocates no more
/// however many processes a GPU has. Beyond it (far past MPS's 48 clients
/// a GPU), that GPU's processes are left out and a warning says so once.
pub const MAX_GPU_PROCESSES: usize = 1024;

/// Calls for the process list per GPU and pass: processes may start
/// between the call that says how many there are and the next.
const PROCESS_TRIES: usize = 4;

/// NVML's handle for a GPU.
#[derive(Debug, Clone, Copy)]
struct Handle(abi::Device);

// SAFETY: an `nvmlDevice_t` is an opaque token NVML hands out and checks
// itself, valid until `nvmlShutdown` (which only `Nvml::drop` calls), and
// NVML is thread-safe: any thread may pass it.
unsafe impl Send for Handle {}
// SAFETY: as above; nothing is read through the pointer on Kiln's side.
unsafe impl Sync for Handle {}

#[derive(Debug)]
struct Gpu {
    index: u32,
    handle: Handle,
    name: String,
    uuid: String,
}

/// What a failed read is logged under, once per GPU and NVML error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Metric {
    Utilization,
    SmClock,
    MemoryClock,
    Memory,
    Power,
    Temperature,
    PcieRx,
    PcieTx,
    Processes,
}

/// NVML, initialized, with the GPUs it saw at [`Nvml::open`]. Shut down
/// (and the library closed) when dropped.
///
/// # Examples
///
/// ```no_run
/// use kiln_agent::Nvml;
///
/// match Nvml::open() {
///     Ok(nvml) => {
///         for (name, labels, value) in nvml.read().points() {
///             println!("{name} {labels:?} {value}");
///         }
///     }
///     Err(e) if e.is_absent() => println!("no NVIDIA GPU here"),
///     Err(e) => eprintln!("{e}"),
/// }
/// ```
pub struct Nvml {
    api: Api,
    gpus: Vec<Gpu>,
    /// The rows NVML writes compute processes into, kept between passes;
    /// at most [`MAX_GPU_PROCESSES`]. Rows are sized for the widest layout
    /// any driver writes (see [`abi::ProcessInfoCc`]).
    rows: Mutex<Vec<abi::ProcessInfoCc>>,
    /// The (GPU, metric, error) triples already logged.
    reported: Mutex<HashSet<(u32, Metric, NvmlReturn)>>,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("path", &self.api.path)
            .field("gpus", &self.gpus)
            .finish_non_exhaustive()
    }
}

impl Nvml {
    /// Loads the library `KILN_NVML_PATH` names, else the driver's
    /// `libnvidia-ml.so.1` (then `libnvidia-ml.so`), initializes NVML and
    /// finds the GPUs. On a host without NVIDIA's driver this fails with
    /// an error whose [`NvmlError::is_absent`] is true.
    pub fn open() -> Result<Nvml, NvmlError> {
        Nvml::start(Api::find()?)
    }

    /// As [`Nvml::open`], with the library at `path` and no other.
    pub fn open_path(path: impl AsRef<Path>) -> Result<Nvml, NvmlError> {
        Nvml::start(Api::load(path.as_ref())?)
    }

    fn start(api: Api) -> Result<Nvml, NvmlError> {
        // SAFETY: nvmlInit_v2 takes nothing and may be called from any
        // thread; NVML counts initializations, and `Drop` balances this one.
        api.check("nvmlInit_v2", unsafe { (api.init)() })?;
        // Built now so that a failure below shuts NVML down again.
        let mut nvml = Nvml {
            api,
            gpus: Vec::new(),
            rows: Mutex::new(Vec::new()),
            reported: Mutex::new(HashSet::new()),
        };
        let mut count: c_uint = 0;
        // SAFETY: NVML is initialized; `count` is a live c_uint.
        let code = unsafe { (nvml.api.device_get_count)(&mut count) };
        nvml.api.check("nvmlDeviceGetCount_v2", code)?;
        for index in 0..count {
            let mut handle: abi::Device = std::ptr::null_mut();
            // SAFETY: NVML is initialized; `handle` is a live pointer slot.
            let code = unsafe { (nvml.api.device_get_handle_by_index)(index, &mut handle) };
            if code != abi::SUCCESS {
                // A container may see only some of the host's GPUs: NVML
                // then answers NO_PERMISSION for the others.
                warn!(gpu = index, error = %nvml.api.error_string(code), "GPU left out: NVML gives no handle for it");
                continue;
            }
            let handle = Handle(handle);
            let name = nvml.text(handle, index, "nvmlDeviceGetName", nvml.api.device_get_name);
            let uuid = nvml.text(handle, index, "nvmlDeviceGetUUID", nvml.api.device_get_uuid);
            nvml.gpus.push(Gpu {
                index,
                handle,
                name,
                uuid,
            });
        }
        match nvml.api.processes {
            Some(call) => info!(
                path = %nvml.api.path.display(),
                gpus = nvml.gpus.len(),
                processes = call.name,
                "reading GPU metrics through NVML"
            ),
            None => info!(
                path = %nvml.api.path.display(),
                gpus = nvml.gpus.len(),
                "reading GPU metrics through NVML; it has no \
                 nvmlDeviceGetComputeRunningProcesses_v3 or _v2: no per-process GPU memory"
            ),
        }
        Ok(nvml)
    }

    /// A name or uuid; empty, with a warning, when NVML does not give it.
    fn text(
        &self,
        handle: Handle,
        index: u32,
        call: &'static str,
        function: abi::DeviceGetString,
    ) -> String {
        const LEN: usize = if abi::DEVICE_NAME_BUFFER_SIZE > abi::DEVICE_UUID_BUFFER_SIZE {
            abi::DEVICE_NAME_BUFFER_SIZE
        } else {
            abi::DEVICE_UUID_BUFFER_SIZE
        };
        let mut buffer = [0u8; LEN];
        // SAFETY: the handle is live; NVML writes at most `LEN` bytes,
        // NUL included.
        let code = unsafe {
            function(
                handle.0,
                buffer.as_mut_ptr().cast::<c_char>(),
                LEN as c_uint,
            )
        };
        if code != abi::SUCCESS {
            warn!(gpu = index, call, error = %self.api.error_string(code), "GPU left unnamed");
            return String::new();
        }
        CStr::from_bytes_until_nul(&buffer)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The library loaded.
    pub fn path(&self) -> &Path {
        &self.api.path
    }

    /// How many GPUs are read.
    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    /// Reads every GPU's metrics and compute processes. Never fails: a
    /// metric NVML does not give is `None` (logged once per GPU, metric
    /// and error; "not supported" at info level, other errors as
    /// warnings).
    ///
    /// Takes about 40 ms per GPU on real hardware: NVML measures PCIe
    /// throughput by sampling a counter over 20 ms, once per direction.
    pub fn read(&self) -> GpuReadings {
        let mut readings = GpuReadings {
            devices: Vec::with_capacity(self.gpus.len()),
            processes: Vec::new(),
        };
        let api = &self.api;
        for gpu in &self.gpus {
            // SAFETY (each call below): NVML is initialized until `Drop`,
            // the handle is one it gave, and the out-pointer points to a
            // live value of the type nvml.h declares for it.
            let utilization = self.get(gpu, Metric::Utilization, |h, out| unsafe {
                (api.device_get_utilization_rates)(h, out)
            });
            let memory = self.get(gpu, Metric::Memory, |h, out| unsafe {
                (api.device_get_memory_info)(h, out)
            });
            let uint_of = |metric, function: abi::DeviceGetUintOf, which| {
                self.get(gpu, metric, |h, out| unsafe { function(h, which, out) })
            };
            let power_mw = self.get(gpu, Metric::Power, |h, out| unsafe {
                (api.device_get_power_usage)(h, out)
            });
            readings.devices.push(DeviceReading {
                index: gpu.index,
                name: gpu.name.clone(),
                uuid: gpu.uuid.clone(),
                utilization_percent: utilization.map(|u| u.gpu),
                memory_utilization_percent: utilization.map(|u| u.memory),
                sm_clock_mhz: uint_of(Metric::SmClock, api.device_get_clock_info, abi::CLOCK_SM),
                memory_clock_mhz: uint_of(
                    Metric::MemoryClock,
                    api.device_get_clock_info,
                    abi::CLOCK_MEM,
                ),
                memory_used_bytes: memory.map(|m| m.used),
                memory_total_bytes: memory.map(|m| m.total),
                power_watts: power_mw.map(|mw| f64::from(mw) / 1000.0),
                temperature_celsius: uint_of(
                    Metric::Temperature,
                    api.device_get_temperature,
                    abi::TEMPERATURE_GPU,
                ),
                pcie_rx_bytes_per_second: uint_of(
                    Metric::PcieRx,
                    api.device_get_pcie_throughput,
                    abi::PCIE_UTIL_RX_BYTES,
                )
                .map(kb_per_second_to_bytes),
                pcie_tx_bytes_per_second: uint_of(
                    Metric::PcieTx,
                    api.device_get_pcie_throughput,
                    abi::PCIE_UTIL_TX_BYTES,
                )
                .map(kb_per_second_to_bytes),
            });
            self.processes(gpu, &mut readings.processes);
        }
        readings
    }

    /// One value through `call`, or `None` (logged) when NVML refuses.
    fn get<T: Default>(
        &self,
        gpu: &Gpu,
        metric: Metric,
        call: impl FnOnce(abi::Device, *mut T) -> NvmlReturn,
    ) -> Option<T> {
        let mut value = T::default();
        let code = call(gpu.handle.0, &mut value);
        if code == abi::SUCCESS {
            Some(value)
        } else {
            self.unavailable(gpu, metric, code);
            None
        }
    }

    /// Appends `gpu`'s compute processes to `out`, growing the row buffer
    /// (up to [`MAX_GPU_PROCESSES`]) while NVML says it is too small.
    fn processes(&self, gpu: &Gpu, out: &mut Vec<GpuProcess>) {
        let Some(call) = self.api.processes else {
            return;
        };
        let mut rows = lock(&self.rows);
        for _ in 0..PROCESS_TRIES {
            let mut count = rows.len() as c_uint;
            let infos = if rows.is_empty() {
                std::ptr::null_mut()
            } else {
                rows.as_mut_ptr().cast()
            };
            // SAFETY: the handle is live; `infos` has room for `count` rows
            // of `call.stride` bytes (each row is allocated at the widest
            // stride, so NVML writes inside it whichever it uses), or is
            // null with a count of 0, which asks for the count.
            let code = unsafe { (call.function)(gpu.handle.0, &mut count, infos) };
            match code {
                abi::SUCCESS => {
                    let written = (count as usize).min(rows.len());
                    let base = rows.as_ptr().cast::<u8>();
                    for i in 0..written {
                        // SAFETY: row i of `call.stride` bytes ends within
                        // the `written * stride <= rows.len() * 32` bytes
                        // allocated; NVML wrote a ProcessInfo at its start.
                        let row = unsafe {
                            base.add(i * call.stride)
                                .cast::<abi::ProcessInfo>()
                                .read_unaligned()
                        };
                        out.push(GpuProcess {
                            pid: row.pid,
                            gpu: gpu.index,
                            used_bytes: Some(row.used_gpu_memory)
                                .filter(|&b| b != abi::VALUE_NOT_AVAILABLE),
                        });
                    }
                    return;
                }
                abi::ERROR_INSUFFICIENT_SIZE if rows.len() < MAX_GPU_PROCESSES => {
                    let needed = count as usize;
                    // Room for processes starting before the next call.
                    let grown = needed.saturating_add(needed / 4 + 8);
                    let grown = grown.clamp(rows.len() + 1, MAX_GPU_PROCESSES);
                    debug!(
                        gpu = gpu.index,
                        needed,
                        rows = grown,
                        "growing the GPU process rows"
                    );
                    rows.resize(grown, abi::ProcessInfoCc::default());
                }
                abi::ERROR_INSUFFICIENT_SIZE => {
                    if self.first_report(gpu, Metric::Processes, code) {
                        warn!(
                            gpu = gpu.index,
                            processes = count,
                            max = MAX_GPU_PROCESSES,
                            "too many compute processes on this GPU: their memory is not reported"
                        );
                    }
                    return;
                }
                code => {
                    self.unavailable(gpu, Metric::Processes, code);
                    return;
                }
            }
        }
        self.unavailable(gpu, Metric::Processes, abi::ERROR_INSUFFICIENT_SIZE);
    }

    /// Logs, once per GPU, metric and error, that a metric was not read.
    fn unavailable(&self, gpu: &Gpu, metric: Metric, code: NvmlReturn) {
        if !self.first_report(gpu, metric, code) {
            return;
        }
        if code == abi::ERROR_NOT_SUPPORTED {
            info!(gpu = gpu.index, name = %gpu.name, ?metric, "this GPU does not report the metric");
        } else {
            warn!(
                gpu = gpu.index,
                name = %gpu.name,
                ?metric,
                code,
                error = %self.api.error_string(code),
                "reading a GPU metric failed: left out while it fails"
            );
        }
    }

    fn first_report(&self, gpu: &Gpu, metric: Metric, code: NvmlReturn) -> bool {
        lock(&self.reported).insert((gpu.index, metric, code))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the nvmlInit_v2 of `start`; the handles die
        // with `self`.
        let code = unsafe { (self.api.shutdown)() };
        if code != abi::SUCCESS {
            debug!(error = %self.api.error_string(code), "nvmlShutdown failed");
        }
    }
}

/// NVML's PCIe "KB/s" in bytes per second. NVML does not say which
/// kilobyte; Kiln takes 1024 bytes, as NVIDIA's tools count memory (KiB,
/// MiB).
fn kb_per_second_to_bytes(kb: c_uint) -> u64 {
    u64::from(kb) * 1024
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data stays consistent however a holder panicked: a buffer to
    // overwrite, a set of log keys.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the unit conversion: the largest u32 KB/s must not overflow.
    #[test]
    fn kb_per_second_is_1024_bytes() {
        assert_eq!(kb_per_second_to_bytes(0), 0);
        assert_eq!(kb_per_second_to_bytes(3), 3072);
        assert_eq!(kb_per_second_to_bytes(u32::MAX), u64::from(u32::MAX) * 1024);
    }

    // Guards that the reader can move to the sampler's thread.
    #[test]
    fn nvml_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Nvml>();
    }
}
