//! Off-CPU profiling: the program on the scheduler's `sched_switch`, its
//! maps, and the waits drained from them.

use std::collections::HashMap;
use std::sync::Arc;

use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf};

use super::{
    RawSample, RawStack, SamplerError, is_not_found, program_error, raw_sample, take_map,
    take_old_counts, typed_program,
};
use crate::abi::{SampleKey, SampleValue, Stack};

/// The off-CPU program, on the scheduler's `sched_switch`.
pub(super) const OFF_CPU_PROGRAM: &str = "kiln_switch";

/// Threads that may be off CPU at once and still be counted when they come
/// back (`off_cpu_start`, an LRU of 40-byte entries: about 6 MiB of kernel
/// memory with the hash's overhead). A busy host has a few thousand
/// threads; past this many waiting at once, those waiting longest are
/// forgotten.
pub(super) const OFF_CPU_THREADS: u32 = 1 << 16;
/// Distinct (thread, user stack, kernel stack) of off-CPU waits per two
/// intervals (`off_cpu_counts`; 56 bytes an entry); past it, waits are
/// counted as lost.
pub(super) const OFF_CPU_COUNTS: u32 = 1 << 15;
/// Stacks of off-CPU waits (`off_cpu_stacks`, an LRU of 1 KiB entries:
/// 16 MiB).
pub(super) const OFF_CPU_STACKS: u32 = 1 << 14;
/// Stacks of off-CPU waits kept read in user space; past this many the
/// cache starts over.
const MAX_KNOWN_OFF_CPU_STACKS: usize = 1 << 16;

/// What off-CPU profiling recorded in one interval.
#[derive(Debug, Default)]
pub(crate) struct OffCpuDrained {
    /// Time off CPU by thread and stacks (`count` in nanoseconds).
    pub waits: Vec<RawSample>,
    /// Nanoseconds of waits lost because the counts map was full.
    pub lost_ns: u64,
    /// Waits counted in the interval.
    pub counted: u64,
    /// Waits shorter than the threshold, left out.
    pub short: u64,
}

/// The off-CPU program's maps.
pub(super) struct OffCpuMaps {
    counts: BpfHashMap<MapData, SampleKey, SampleValue>,
    stacks: BpfHashMap<MapData, u64, Stack>,
    /// Stacks read so far, by id: an id is a hash of the stack's content,
    /// so it always names the same stack.
    known: HashMap<u64, Arc<RawStack>>,
}

impl OffCpuMaps {
    /// Takes the waits of generations before `generation`, with their
    /// stacks.
    pub(super) fn drain(&mut self, generation: u32) -> Result<OffCpuDrained, SamplerError> {
        let taken = take_old_counts(&mut self.counts, generation, "off_cpu_counts")?;
        let mut waits = Vec::with_capacity(taken.len());
        for (key, value) in taken {
            waits.push(raw_sample(&key, &value, |id, lost| self.stack(id, lost))?);
        }
        Ok(OffCpuDrained {
            waits,
            ..OffCpuDrained::default()
        })
    }

    /// The stack `id` names (0: none), from the cache or the LRU map;
    /// `lost` is set when the map no longer has it.
    fn stack(&mut self, id: u64, lost: &mut bool) -> Result<Option<Arc<RawStack>>, SamplerError> {
        if id == 0 {
            return Ok(None);
        }
        if let Some(s) = self.known.get(&id) {
            return Ok(Some(s.clone()));
        }
        let stack = match self.stacks.get(&id, 0) {
            Ok(stack) => RawStack::of(&stack),
            Err(e) if is_not_found(&e) => {
                *lost = true;
                return Ok(None);
            }
            Err(e) => return Err(SamplerError::map("off_cpu_stacks")(e)),
        };
        if self.known.len() >= MAX_KNOWN_OFF_CPU_STACKS {
            self.known.clear();
        }
        self.known.insert(id, stack.clone());
        Ok(Some(stack))
    }
}

/// Loads and attaches the off-CPU program to `sched_switch`, and takes
/// its maps.
///
/// # Minimum kernel version
///
/// 5.18 (the `prev_state` argument of `sched_switch`), with BTF.
pub(super) fn load_off_cpu(ebpf: &mut Ebpf) -> Result<OffCpuMaps, SamplerError> {
    let counts = BpfHashMap::try_from(take_map(ebpf, "off_cpu_counts")?)
        .map_err(SamplerError::map("off_cpu_counts"))?;
    let stacks = BpfHashMap::try_from(take_map(ebpf, "off_cpu_stacks")?)
        .map_err(SamplerError::map("off_cpu_stacks"))?;
    let btf = Btf::from_sys_fs().map_err(|e| SamplerError::Btf(Box::new(e)))?;
    let program: &mut BtfTracePoint = typed_program(ebpf, OFF_CPU_PROGRAM)?;
    program.load("sched_switch", &btf).map_err(program_error)?;
    program.attach().map_err(program_error)?;
    Ok(OffCpuMaps {
        counts,
        stacks,
        known: HashMap::new(),
    })
}
