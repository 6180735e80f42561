//! [`Cupti`] over the real libcupti, its functions looked up once at load.
//!
//! Nothing here runs without a GPU; the layouts it passes are pinned by
//! the tests in [`crate::cupti_abi`].

use std::ffi::{CStr, c_char, c_void};
use std::path::PathBuf;

use libloading::os::unix::Library;

use super::{ContextHandle, Cupti, CuptiError, LoadError, PcSamplingSetup};
use crate::cupti_abi::{self as abi, CuptiResult};
use crate::pcsampling::PcSamplingBuffers;
use crate::wire::StallReasonName;

type ActivityEnable = unsafe extern "C" fn(kind: u32) -> CuptiResult;
type RegisterCallbacks =
    unsafe extern "C" fn(abi::BufferRequestedFunc, abi::BufferCompletedFunc) -> CuptiResult;
type FlushAll = unsafe extern "C" fn(flag: u32) -> CuptiResult;
type GetNextRecord =
    unsafe extern "C" fn(buffer: *mut u8, valid: usize, record: *mut *mut c_void) -> CuptiResult;
type Subscribe = unsafe extern "C" fn(
    subscriber: *mut abi::SubscriberHandle,
    callback: abi::CallbackFunc,
    userdata: *mut c_void,
) -> CuptiResult;
type EnableCallback = unsafe extern "C" fn(
    enable: u32,
    sub: abi::SubscriberHandle,
    domain: u32,
    cbid: u32,
) -> CuptiResult;
type EnableDomain =
    unsafe extern "C" fn(enable: u32, sub: abi::SubscriberHandle, domain: u32) -> CuptiResult;
type GetTimestamp = unsafe extern "C" fn(timestamp: *mut u64) -> CuptiResult;
type GetResultString =
    unsafe extern "C" fn(result: CuptiResult, text: *mut *const c_char) -> CuptiResult;
type ParamsCall = unsafe extern "C" fn(params: *mut c_void) -> CuptiResult;

/// The PC Sampling API (CUDA 11.3+), absent from older libraries.
/// `cuptiPCSamplingStart`/`Stop` are not among them: Kiln never calls
/// them (see `pc_sampler`).
struct PcSamplingFns {
    enable: ParamsCall,
    disable: ParamsCall,
    get_data: ParamsCall,
    get_num_stall_reasons: ParamsCall,
    get_stall_reasons: ParamsCall,
    set_configuration_attribute: ParamsCall,
    get_cubin_crc: ParamsCall,
}

/// libcupti, loaded.
pub struct RealCupti {
    path: PathBuf,
    activity_enable: ActivityEnable,
    register_callbacks: RegisterCallbacks,
    flush_all: FlushAll,
    get_next_record: GetNextRecord,
    subscribe: Subscribe,
    enable_callback: EnableCallback,
    enable_domain: EnableDomain,
    get_timestamp: GetTimestamp,
    get_result_string: Option<GetResultString>,
    pc: Option<PcSamplingFns>,
    /// Keeps the functions above mapped; never unloaded.
    _library: Library,
}

/// What loading libcupti can fail with.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No library found.
    #[error(transparent)]
    NotFound(#[from] LoadError),
    /// A library without a function Kiln needs (too old, or not CUPTI).
    #[error("{path} has no {symbol}: {message}")]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The function.
        symbol: &'static str,
        /// The loader's message.
        message: String,
    },
}

impl RealCupti {
    /// Finds and opens libcupti (see [`super::load_library`]).
    pub fn open() -> Result<Self, OpenError> {
        let (library, path) = super::load_library()?;
        Self::from_library(library, path)
    }

    fn from_library(library: Library, path: PathBuf) -> Result<Self, OpenError> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the type is the function's C prototype.
                match unsafe { library.get(concat!($name, "\0").as_bytes()) } {
                    Ok(symbol) => *symbol,
                    Err(e) => {
                        return Err(OpenError::MissingSymbol {
                            path,
                            symbol: $name,
                            message: e.to_string(),
                        });
                    }
                }
            }};
        }
        macro_rules! optional {
            ($name:literal) => {{
                // SAFETY: as above.
                unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .ok()
                    .map(|symbol| *symbol)
            }};
        }
        let pc = (|| {
            Some(PcSamplingFns {
                enable: optional!("cuptiPCSamplingEnable")?,
                disable: optional!("cuptiPCSamplingDisable")?,
                get_data: optional!("cuptiPCSamplingGetData")?,
                get_num_stall_reasons: optional!("cuptiPCSamplingGetNumStallReasons")?,
                get_stall_reasons: optional!("cuptiPCSamplingGetStallReasons")?,
                set_configuration_attribute: optional!("cuptiPCSamplingSetConfigurationAttribute")?,
                get_cubin_crc: optional!("cuptiGetCubinCrc")?,
            })
        })();
        Ok(Self {
            activity_enable: sym!("cuptiActivityEnable"),
            register_callbacks: sym!("cuptiActivityRegisterCallbacks"),
            flush_all: sym!("cuptiActivityFlushAll"),
            get_next_record: sym!("cuptiActivityGetNextRecord"),
            subscribe: sym!("cuptiSubscribe"),
            enable_callback: sym!("cuptiEnableCallback"),
            enable_domain: sym!("cuptiEnableDomain"),
            get_timestamp: sym!("cuptiGetTimestamp"),
            get_result_string: optional!("cuptiGetResultString"),
            pc,
            path,
            _library: library,
        })
    }

    /// Where the library was found.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn check(&self, call: &'static str, code: CuptiResult) -> Result<(), CuptiError> {
        if code == abi::CUPTI_SUCCESS {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        let message = match self.get_result_string {
            // SAFETY: CUPTI returns a static string.
            Some(f) if unsafe { f(code, &mut text) } == abi::CUPTI_SUCCESS && !text.is_null() => {
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => "no description".to_owned(),
        };
        Err(CuptiError {
            call,
            code,
            message,
        })
    }

    fn pc(&self) -> Result<&PcSamplingFns, CuptiError> {
        self.pc.as_ref().ok_or(CuptiError {
            call: "cuptiPCSamplingEnable",
            code: u32::MAX,
            message: "this libcupti has no PC Sampling API".into(),
        })
    }

    fn ctx_call(
        &self,
        call: &'static str,
        f: ParamsCall,
        ctx: ContextHandle,
    ) -> Result<(), CuptiError> {
        let mut params = abi::PcSamplingContextParams {
            size: std::mem::size_of::<abi::PcSamplingContextParams>(),
            p_priv: std::ptr::null_mut(),
            ctx: ctx.as_ptr(),
        };
        // SAFETY: the params struct is the one this call takes.
        self.check(call, unsafe { f((&raw mut params).cast()) })
    }
}

impl Cupti for RealCupti {
    fn enable_kernel_activity(
        &self,
        requested: abi::BufferRequestedFunc,
        completed: abi::BufferCompletedFunc,
    ) -> Result<(), CuptiError> {
        // SAFETY: plain calls with valid function pointers.
        self.check("cuptiActivityRegisterCallbacks", unsafe {
            (self.register_callbacks)(requested, completed)
        })?;
        self.check("cuptiActivityEnable", unsafe {
            (self.activity_enable)(abi::activity_kind::CONCURRENT_KERNEL)
        })
    }

    fn subscribe(&self, callback: abi::CallbackFunc) -> Result<(), CuptiError> {
        let mut subscriber: abi::SubscriberHandle = std::ptr::null_mut();
        // SAFETY: CUPTI writes the handle; userdata is unused.
        self.check("cuptiSubscribe", unsafe {
            (self.subscribe)(&mut subscriber, callback, std::ptr::null_mut())
        })?;
        for cbid in abi::driver_cbid::subscribed() {
            // SAFETY: a valid subscriber and ids from the header.
            self.check("cuptiEnableCallback", unsafe {
                (self.enable_callback)(1, subscriber, abi::domain::DRIVER_API, cbid)
            })?;
        }
        self.check("cuptiEnableDomain", unsafe {
            (self.enable_domain)(1, subscriber, abi::domain::RESOURCE)
        })
    }

    fn flush_all(&self, forced: bool) -> Result<(), CuptiError> {
        let flag = if forced {
            abi::ACTIVITY_FLAG_FLUSH_FORCED
        } else {
            0
        };
        // SAFETY: a plain call.
        self.check("cuptiActivityFlushAll", unsafe { (self.flush_all)(flag) })
    }

    fn timestamp_ns(&self) -> u64 {
        let mut ts = 0;
        // SAFETY: CUPTI writes one u64.
        unsafe { (self.get_timestamp)(&mut ts) };
        ts
    }

    fn for_each_record(&self, buffer: &[u8], each: &mut dyn FnMut(&[u8])) -> usize {
        let base = buffer.as_ptr();
        let mut record: *mut c_void = std::ptr::null_mut();
        let mut previous: Option<usize> = None;
        loop {
            // SAFETY: CUPTI reads the buffer it filled and moves `record`
            // to the next record; it does not write the buffer.
            let code =
                unsafe { (self.get_next_record)(base.cast_mut(), buffer.len(), &mut record) };
            if code != abi::CUPTI_SUCCESS || record.is_null() {
                break;
            }
            let at = (record as usize).wrapping_sub(base as usize);
            if at >= buffer.len() || previous.is_some_and(|p| at <= p) {
                break;
            }
            if let Some(p) = previous {
                each(&buffer[p..at]);
            }
            previous = Some(at);
        }
        if let Some(p) = previous {
            each(&buffer[p..]);
        }
        0
    }

    fn kernel_name(&self, name_ptr: u64) -> Option<String> {
        if name_ptr == 0 {
            return None;
        }
        // SAFETY: CUPTI's kernel names are NUL-terminated and live as long
        // as the module.
        let name = unsafe { CStr::from_ptr(name_ptr as usize as *const c_char) };
        Some(name.to_string_lossy().into_owned())
    }

    fn cubin_crc(&self, cubin: &[u8]) -> Option<u64> {
        #[repr(C)]
        struct Params {
            size: usize,
            cubin_size: usize,
            cubin: *const c_void,
            cubin_crc: u64,
        }
        let pc = self.pc.as_ref()?;
        let mut params = Params {
            size: std::mem::size_of::<Params>(),
            cubin_size: cubin.len(),
            cubin: cubin.as_ptr().cast(),
            cubin_crc: 0,
        };
        // SAFETY: CUpti_GetCubinCrcParams' layout; CUPTI reads the cubin.
        let code = unsafe { (pc.get_cubin_crc)((&raw mut params).cast()) };
        (code == abi::CUPTI_SUCCESS).then_some(params.cubin_crc)
    }

    fn pc_sampling_enable(&self, ctx: ContextHandle) -> Result<Vec<StallReasonName>, CuptiError> {
        let pc = self.pc()?;
        self.ctx_call("cuptiPCSamplingEnable", pc.enable, ctx)?;
        let head = abi::PcSamplingContextParams {
            size: 0,
            p_priv: std::ptr::null_mut(),
            ctx: ctx.as_ptr(),
        };
        let mut count = 0usize;
        let mut params = abi::PcSamplingGetNumStallReasonsParams {
            head: abi::PcSamplingContextParams {
                size: std::mem::size_of::<abi::PcSamplingGetNumStallReasonsParams>(),
                ..head
            },
            num_stall_reasons: &mut count,
        };
        // SAFETY: the params struct of this call.
        self.check("cuptiPCSamplingGetNumStallReasons", unsafe {
            (pc.get_num_stall_reasons)((&raw mut params).cast())
        })?;
        let mut indices = vec![0u32; count];
        let mut names = vec![[0 as c_char; abi::STALL_REASON_STRING_SIZE]; count];
        let mut name_ptrs: Vec<*mut c_char> = names.iter_mut().map(|n| n.as_mut_ptr()).collect();
        let mut params = abi::PcSamplingGetStallReasonsParams {
            head: abi::PcSamplingContextParams {
                size: std::mem::size_of::<abi::PcSamplingGetStallReasonsParams>(),
                ..head
            },
            num_stall_reasons: count,
            stall_reason_index: indices.as_mut_ptr(),
            stall_reasons: name_ptrs.as_mut_ptr(),
        };
        // SAFETY: `count` entries of each array, names of the header's size.
        self.check("cuptiPCSamplingGetStallReasons", unsafe {
            (pc.get_stall_reasons)((&raw mut params).cast())
        })?;
        Ok(indices
            .iter()
            .zip(&names)
            .map(|(&index, name)| {
                let bytes: Vec<u8> = name
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                StallReasonName {
                    index,
                    name: String::from_utf8_lossy(&bytes).into_owned(),
                }
            })
            .collect())
    }

    fn pc_sampling_configure(
        &self,
        ctx: ContextHandle,
        configured: &mut PcSamplingBuffers,
        setup: &PcSamplingSetup<'_>,
    ) -> Result<(), CuptiError> {
        use abi::pc_sampling_attr as attr;
        let pc = self.pc()?;
        let info = |attribute_type, data: [u64; 3]| abi::PcSamplingConfigurationInfo {
            attribute_type,
            attribute_status: 0,
            data,
        };
        let mut info = vec![
            // Off: sampling runs from Enable to Disable. On (the idle
            // measurement) nothing is collected: Start is never called.
            info(
                attr::ENABLE_START_STOP_CONTROL,
                [u64::from(setup.start_stop_control), 0, 0],
            ),
            info(
                attr::COLLECTION_MODE,
                [abi::PC_SAMPLING_COLLECTION_MODE_CONTINUOUS, 0, 0],
            ),
            info(
                attr::STALL_REASON,
                [
                    setup.stall_reasons.len() as u64,
                    setup.stall_reasons.as_ptr() as usize as u64,
                    0,
                ],
            ),
            info(
                attr::SAMPLING_DATA_BUFFER,
                [configured.data_mut() as usize as u64, 0, 0],
            ),
        ];
        // The optional attributes, each only when set: CUPTI's default
        // stays otherwise.
        let optional = [
            (attr::SAMPLING_PERIOD, setup.period.map(u64::from)),
            (
                attr::WORKER_THREAD_PERIODIC_SLEEP_SPAN,
                setup.worker_sleep_ms.map(u64::from),
            ),
            (
                attr::HARDWARE_BUFFER_SIZE,
                setup.hardware_buffer_bytes.map(|b| b as u64),
            ),
        ];
        info.extend(optional.into_iter().filter_map(|(attribute_type, value)| {
            value.map(|v| abi::PcSamplingConfigurationInfo {
                attribute_type,
                attribute_status: 0,
                data: [v, 0, 0],
            })
        }));
        let mut params = abi::PcSamplingConfigurationInfoParams {
            head: abi::PcSamplingContextParams {
                size: std::mem::size_of::<abi::PcSamplingConfigurationInfoParams>(),
                p_priv: std::ptr::null_mut(),
                ctx: ctx.as_ptr(),
            },
            num_attributes: info.len(),
            info: info.as_mut_ptr(),
        };
        // SAFETY: the params struct of this call; the stall reason indices
        // and the configured buffer outlive sampling on this context (the
        // context's state keeps them until after Disable).
        self.check("cuptiPCSamplingSetConfigurationAttribute", unsafe {
            (pc.set_configuration_attribute)((&raw mut params).cast())
        })?;
        // CUPTI says per attribute which one it refused.
        match info
            .iter()
            .find(|i| i.attribute_status != abi::CUPTI_SUCCESS)
        {
            Some(refused) => self.check(
                "cuptiPCSamplingSetConfigurationAttribute (an attribute)",
                refused.attribute_status,
            ),
            None => Ok(()),
        }
    }

    fn pc_sampling_get_data(
        &self,
        ctx: ContextHandle,
        buffers: &mut PcSamplingBuffers,
    ) -> Result<(), CuptiError> {
        let pc = self.pc()?;
        let mut params = abi::PcSamplingGetDataParams {
            head: abi::PcSamplingContextParams {
                size: std::mem::size_of::<abi::PcSamplingGetDataParams>(),
                p_priv: std::ptr::null_mut(),
                ctx: ctx.as_ptr(),
            },
            pc_sampling_data: buffers.data_mut().cast(),
        };
        // SAFETY: the params struct of this call; the buffers were
        // allocated for the stall reason count CUPTI reported.
        self.check("cuptiPCSamplingGetData", unsafe {
            (pc.get_data)((&raw mut params).cast())
        })
    }

    fn pc_sampling_disable(&self, ctx: ContextHandle) -> Result<(), CuptiError> {
        let pc = self.pc()?;
        self.ctx_call("cuptiPCSamplingDisable", pc.disable, ctx)
    }
}
