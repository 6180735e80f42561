//! CUDA kernel launches reported by the uprobe on libkiln_cuda.so's launch
//! marker, with their launching stacks.

use std::collections::HashMap;
use std::sync::Arc;

use aya::Ebpf;
use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use aya::programs::UProbe;

use super::{RawStack, SamplerError, program_error, take_map, typed_program};
use crate::abi::{GpuLaunch, Stack};

/// The uprobe on libkiln_cuda.so's launch marker.
pub(super) const GPU_LAUNCH_PROGRAM: &str = "kiln_gpu_launch";
/// The function of libkiln_cuda.so (gpu-lib) called at every kernel launch.
pub(crate) const GPU_LAUNCH_MARKER: &str = "kiln_cuda_launch_marker";

/// A CUDA kernel launch the uprobe reported.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The launching process.
    pub tgid: u32,
    /// CUPTI's correlation id of the launch.
    pub correlation_id: u32,
    /// Id of the launching stack: launches with the same id were made
    /// from the same stack.
    pub stack_id: u64,
    /// The launching user stack, leaf first; `None` when it left the
    /// program's LRU map before it was read.
    pub stack: Option<Arc<RawStack>>,
}

/// Launch stacks kept read; past this many the cache starts over.
const MAX_KNOWN_LAUNCH_STACKS: usize = 8192;

/// The GPU launch uprobe's output: small launch records in a ring buffer,
/// and the stacks they name in an LRU map, read once each.
pub(super) struct LaunchFeed {
    ring: RingBuf<MapData>,
    stacks: BpfHashMap<MapData, u64, Stack>,
    known: HashMap<u64, Arc<RawStack>>,
}

impl LaunchFeed {
    pub(super) fn read(&mut self, out: &mut Vec<Launch>) {
        while let Some(item) = self.ring.next() {
            let Some(record) = GpuLaunch::read(&item) else {
                continue;
            };
            let stack = match self.known.get(&record.stack_id) {
                Some(stack) => Some(stack.clone()),
                None => self.stacks.get(&record.stack_id, 0).ok().map(|stack| {
                    if self.known.len() >= MAX_KNOWN_LAUNCH_STACKS {
                        self.known.clear();
                    }
                    let stack = RawStack::of(&stack);
                    self.known.insert(record.stack_id, stack.clone());
                    stack
                }),
            };
            out.push(Launch {
                tgid: record.tgid,
                correlation_id: record.correlation_id,
                stack_id: record.stack_id,
                stack,
            });
        }
    }
}

/// Loads (without attaching) the GPU launch uprobe and takes its maps; it
/// is attached per library as processes map one.
pub(super) fn load_gpu_probe(ebpf: &mut Ebpf) -> Result<LaunchFeed, SamplerError> {
    let ring = RingBuf::try_from(take_map(ebpf, "gpu_launches")?)
        .map_err(SamplerError::map("gpu_launches"))?;
    let stacks = BpfHashMap::try_from(take_map(ebpf, "launch_stacks")?)
        .map_err(SamplerError::map("launch_stacks"))?;
    let program: &mut UProbe = typed_program(ebpf, GPU_LAUNCH_PROGRAM)?;
    program.load().map_err(program_error)?;
    Ok(LaunchFeed {
        ring,
        stacks,
        known: HashMap::new(),
    })
}
