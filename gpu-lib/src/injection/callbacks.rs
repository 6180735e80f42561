//! What CUPTI calls on the program's threads: launches (and PC sampling's
//! reads at their exit), device memory calls, and resource events
//! (contexts, modules). Nothing here waits on Kiln.

use std::panic::catch_unwind;
use std::sync::atomic::Ordering;

use super::{Event, RUNTIME, Runtime};
use crate::cupti::ContextHandle;
use crate::cupti_abi::{self as abi, CallbackData, ModuleResourceData, ResourceData};
use crate::join::Launch;
use crate::log::{Level, log};
use crate::marking::ThreadMarks;
use crate::memory::{Block, MemoryEvent};

impl Runtime {
    /// The snapshot interval in ns (at least 1): launches are marked per
    /// interval.
    fn snapshot_interval_ns(&self) -> u64 {
        u64::try_from(self.config.snapshot_interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(super) fn on_launch(&self, data: &CallbackData, cbid: u32) {
        if data.callback_site == abi::API_EXIT {
            if let Some(pc) = &self.pc {
                let ctx = ContextHandle(data.context as usize);
                pc.on_launch_exit(ctx, &|output| self.send(output.into()));
            }
            return;
        }
        if data.callback_site != abi::API_ENTER {
            return;
        }
        let tid = current_tid();
        let timestamp_ns = self.cupti.timestamp_ns();
        let graph = matches!(
            cbid,
            abi::driver_cbid::GRAPH_LAUNCH | abi::driver_cbid::GRAPH_LAUNCH_PTSZ
        );
        // The kernel's name: CUPTI hands the same string per function.
        let kernel = data.symbol_name as usize;
        let interval = timestamp_ns / self.snapshot_interval_ns();
        let marked = THREAD_MARKS.with_borrow_mut(|marks| {
            marks
                .get_or_insert_with(|| ThreadMarks::new(u64::from(tid) ^ timestamp_ns))
                .mark(&self.config.marking, timestamp_ns, kernel, interval, graph)
        });
        if marked {
            crate::kiln_cuda_launch_marker(data.correlation_id, tid);
        }
        self.counts.launches.fetch_add(1, Ordering::Relaxed);
        self.send(Event::Launch(Launch {
            correlation_id: data.correlation_id,
            tid,
            timestamp_ns,
            graph,
            marked,
        }));
    }

    /// A device memory call returned: its allocation (with the launch
    /// marker, so that the agent captures the allocating stack under the
    /// call's correlation id) or its free.
    pub(super) fn on_memory(&self, data: &CallbackData, cbid: u32) {
        if data.callback_site != abi::API_EXIT || data.function_params.is_null() {
            return;
        }
        // A call that failed allocated or freed nothing.
        if !data.function_return_value.is_null()
            // SAFETY: at exit CUPTI points it to the call's CUresult.
            && unsafe { *(data.function_return_value as *const i32) } != 0
        {
            return;
        }
        // SAFETY: each call's params struct, as CUPTI passes it; the out
        // pointers were written by the call that just returned.
        let event = unsafe {
            match cbid {
                id if abi::driver_cbid::MEMORY_ALLOC.contains(&id) => {
                    let p = &*(data.function_params as *const abi::MemAllocParams);
                    (!p.dptr.is_null()).then(|| (Block::Address(*p.dptr), p.bytesize as u64))
                }
                abi::driver_cbid::MEM_ALLOC_PITCH_V2 => {
                    let p = &*(data.function_params as *const abi::MemAllocPitchParams);
                    (!p.dptr.is_null() && !p.pitch.is_null()).then(|| {
                        let bytes = (*p.pitch as u64).saturating_mul(p.height as u64);
                        (Block::Address(*p.dptr), bytes)
                    })
                }
                id if abi::driver_cbid::MEMORY_FREE.contains(&id) => {
                    let p = &*(data.function_params as *const abi::MemFreeParams);
                    self.send(Event::Memory(MemoryEvent::Free { address: p.dptr }));
                    None
                }
                abi::driver_cbid::MEM_CREATE => {
                    let p = &*(data.function_params as *const abi::MemCreateParams);
                    // Only a GPU's memory: the VMM API also creates host
                    // memory.
                    let on_device = p.prop.is_null()
                        || (*p.prop).location_type == abi::MEM_LOCATION_TYPE_DEVICE;
                    (!p.handle.is_null() && on_device)
                        .then(|| (Block::Handle(*p.handle), p.size as u64))
                }
                abi::driver_cbid::MEM_RELEASE => {
                    let p = &*(data.function_params as *const abi::MemReleaseParams);
                    self.send(Event::Memory(MemoryEvent::Release { handle: p.handle }));
                    None
                }
                _ => None,
            }
        };
        if let Some((block, bytes)) = event {
            let tid = current_tid();
            crate::kiln_cuda_launch_marker(data.correlation_id, tid);
            let correlation_id = data.correlation_id;
            self.send(Event::Memory(match block {
                Block::Address(address) => MemoryEvent::Alloc {
                    correlation_id,
                    tid,
                    address,
                    bytes,
                },
                Block::Handle(handle) => MemoryEvent::Create {
                    correlation_id,
                    tid,
                    handle,
                    bytes,
                },
            }));
        }
    }

    pub(super) fn on_resource(&self, data: &ResourceData, cbid: u32) {
        let ctx = ContextHandle(data.context as usize);
        match cbid {
            abi::resource_cbid::MODULE_LOADED if !data.resource_descriptor.is_null() => {
                // SAFETY: CUPTI passes a CUpti_ModuleResourceData here.
                let module = unsafe { &*(data.resource_descriptor as *const ModuleResourceData) };
                if module.cubin.is_null() || module.cubin_size == 0 {
                    return;
                }
                if module.cubin_size > self.config.max_cubin_bytes {
                    log(
                        Level::Debug,
                        format_args!(
                            "cubin of {} bytes not kept (over the limit)",
                            module.cubin_size
                        ),
                    );
                    return;
                }
                // Copied (and its CRC computed) on the loading thread:
                // the image is only valid during this callback. Module
                // loads are rare next to launches.
                // SAFETY: CUPTI's pointer and size of the module's image.
                let image = unsafe {
                    std::slice::from_raw_parts(module.cubin.cast::<u8>(), module.cubin_size)
                };
                let crc = self
                    .cupti
                    .cubin_crc(image)
                    // Without CUPTI's CRC (no PC Sampling API) no PC sample
                    // will name this cubin; any stable id will do.
                    .unwrap_or_else(|| u64::from(crc32fast::hash(image)));
                self.send(Event::Cubin {
                    crc,
                    image: image.to_vec(),
                });
                if let Some(pc) = &self.pc {
                    pc.on_module_loaded(ctx, &|output| self.send(output.into()));
                }
            }
            abi::resource_cbid::CONTEXT_CREATED => {
                if let Some(pc) = &self.pc {
                    pc.on_context_created(ctx, &|output| self.send(output.into()));
                }
            }
            abi::resource_cbid::CONTEXT_DESTROY_STARTING => {
                if let Some(pc) = &self.pc {
                    pc.on_context_destroying(ctx, &|output| self.send(output.into()));
                }
            }
            _ => {}
        }
    }
}

pub(super) unsafe extern "C" fn on_callback(
    _userdata: *mut std::ffi::c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const std::ffi::c_void,
) {
    if cbdata.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        let Some(rt) = RUNTIME.get() else { return };
        if rt.stopping.load(Ordering::Relaxed) {
            return;
        }
        match domain {
            abi::domain::DRIVER_API if abi::driver_cbid::MEMORY.contains(&cbid) => {
                // SAFETY: the driver-API domain passes a CUpti_CallbackData.
                rt.on_memory(unsafe { &*(cbdata as *const CallbackData) }, cbid);
            }
            abi::domain::DRIVER_API if abi::driver_cbid::ALL.contains(&cbid) => {
                // SAFETY: the driver-API domain passes a CUpti_CallbackData.
                rt.on_launch(unsafe { &*(cbdata as *const CallbackData) }, cbid);
            }
            abi::domain::RESOURCE => {
                // SAFETY: the resource domain passes a CUpti_ResourceData.
                rt.on_resource(unsafe { &*(cbdata as *const ResourceData) }, cbid);
            }
            _ => {}
        }
    });
}

thread_local! {
    /// Which of this thread's launches call the marker.
    static THREAD_MARKS: std::cell::RefCell<Option<ThreadMarks>> =
        const { std::cell::RefCell::new(None) };
}

/// The calling thread's Linux thread id, read once per thread.
pub(super) fn current_tid() -> u32 {
    thread_local! {
        static TID: u32 = {
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::gettid() }) as u32
        };
    }
    TID.with(|tid| *tid)
}
