//! Folding a snapshot into stacks of frames for the agent's batches:
//! `<launching CPU stack> → gpu_kernel → gpu_instruction → gpu_stall`.
//!
//! Kernel stacks weigh GPU time in ns ([`WeightUnit::Nanoseconds`]), and
//! again launches ([`WeightUnit::Launches`], for the GPU view's counts and
//! means); instruction stacks weigh PC samples ([`WeightUnit::Samples`]); device
//! memory stacks, `<allocating CPU stack> → gpu_memory`, weigh bytes
//! allocated in the interval ([`WeightUnit::AllocatedBytes`]) or live at
//! its end ([`WeightUnit::LiveBytes`]: a gauge, whose one interval is read,
//! not a sum over many). The agent keeps the units apart (a label on the
//! samples), since they do not add up.
//!
//! The launching stack of a kernel aggregate comes from its exemplar
//! correlation ids (see [`crate::wire::KernelAggregate`]): its time is split
//! evenly among them. PC samples carry no launch, so a kernel's samples are
//! split among the places its time went, in proportion to that time.

use std::collections::HashMap;

use kiln_model::{Frame, FrameKind, GpuWeight};

use crate::pcsampling::short_stall_name;
use crate::wire::{PcSampleAggregate, Snapshot};

/// What a folded stack's weight counts: the model's [`GpuWeight`], whose
/// name is the `gpu_weight` label the agent puts on the samples.
pub type WeightUnit = GpuWeight;

/// One stack (root first) and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedStack {
    /// Frames, root first: the CPU stack, then the GPU frames.
    pub frames: Vec<Frame>,
    /// The weight, in `unit`.
    pub weight: u64,
    /// What the weight counts.
    pub unit: WeightUnit,
}

/// Stall reason names by CUPTI index, kept across snapshots (the table
/// only comes when it changes).
#[derive(Debug, Clone, Default)]
pub struct StallReasonTable {
    names: HashMap<u32, String>,
}

impl StallReasonTable {
    /// Takes in the table a snapshot carries, if any.
    pub fn update(&mut self, snapshot: &Snapshot) {
        if snapshot.stall_reasons.is_empty() {
            return;
        }
        self.names = snapshot
            .stall_reasons
            .iter()
            .map(|r| (r.index, short_stall_name(&r.name).to_owned()))
            .collect();
    }

    /// The short name of a reason (`long_scoreboard`), or `stall_<n>`.
    pub fn name(&self, index: u32) -> String {
        self.names
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("stall_{index}"))
    }
}

/// Names SASS instructions: (cubin CRC, function, PC offset) → text, e.g.
/// from [`crate::pcsampling`]'s cubins run through `nvdisasm`.
pub type InstructionNamer<'a> = Box<dyn Fn(u64, &str, u64) -> Option<String> + 'a>;

/// How to name instructions; by default by PC offset alone.
#[derive(Default)]
pub struct FoldOptions<'a> {
    /// Disassembly, when the agent has it.
    pub instruction_name: Option<InstructionNamer<'a>>,
}

impl std::fmt::Debug for FoldOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoldOptions")
            .field("instruction_name", &self.instruction_name.is_some())
            .finish()
    }
}

/// Folds `snapshot` into stacks. `launch_stack(tid, correlation_id)` gives
/// the CPU stack (root first) the agent captured for a launch; kernels
/// whose launches it does not know are rooted at the kernel frame.
pub fn fold_snapshot(
    snapshot: &Snapshot,
    stalls: &StallReasonTable,
    options: &FoldOptions<'_>,
    mut launch_stack: impl FnMut(u32, u32) -> Option<Vec<Frame>>,
) -> Vec<FoldedStack> {
    let mut out = Vec::new();
    // Kernel name → (CPU stack, ns placed there).
    let mut placements: HashMap<&str, Vec<(Vec<Frame>, u64)>> = HashMap::new();
    for kernel in &snapshot.kernels {
        let mut bases: Vec<Vec<Frame>> = kernel
            .exemplar_correlation_ids
            .iter()
            .filter_map(|&id| launch_stack(kernel.tid, id))
            .collect();
        if bases.is_empty() {
            bases.push(Vec::new());
        }
        let even = vec![1; bases.len()];
        // (CPU stack, ns, launches) placed there.
        let mut merged: Vec<(Vec<Frame>, u64, u64)> = Vec::new();
        let shares = apportion(kernel.total_ns, &even)
            .into_iter()
            .zip(apportion(kernel.launches, &even));
        for (base, (ns, launches)) in bases.into_iter().zip(shares) {
            match merged.iter_mut().find(|(b, _, _)| *b == base) {
                Some(entry) => {
                    entry.1 += ns;
                    entry.2 += launches;
                }
                None => merged.push((base, ns, launches)),
            }
        }
        for (base, ns, launches) in merged {
            for (weight, unit) in [
                (ns, WeightUnit::Nanoseconds),
                (launches, WeightUnit::Launches),
            ] {
                if weight > 0 {
                    let mut frames = base.clone();
                    frames.push(kernel_frame(&kernel.name));
                    out.push(FoldedStack {
                        frames,
                        weight,
                        unit,
                    });
                }
            }
            placements.entry(&kernel.name).or_default().push((base, ns));
        }
    }
    let unplaced = vec![(Vec::new(), 1)];
    for pc in &snapshot.pc_samples {
        let places = placements
            .get(pc.function_name.as_str())
            .filter(|p| p.iter().any(|(_, ns)| *ns > 0))
            .unwrap_or(&unplaced);
        let weights: Vec<u64> = places.iter().map(|(_, ns)| *ns).collect();
        for ((base, _), samples) in places.iter().zip(apportion(pc.samples, &weights)) {
            if samples == 0 {
                continue;
            }
            let mut frames = base.clone();
            frames.push(kernel_frame(&pc.function_name));
            frames.push(instruction_frame(pc, options));
            frames.push(Frame::named(
                FrameKind::GpuStall,
                stalls.name(pc.stall_reason),
            ));
            out.push(FoldedStack {
                frames,
                weight: samples,
                unit: WeightUnit::Samples,
            });
        }
    }
    for (aggregates, unit) in [
        (&snapshot.memory_allocated, WeightUnit::AllocatedBytes),
        (&snapshot.memory_live, WeightUnit::LiveBytes),
    ] {
        for memory in aggregates.iter().filter(|m| m.bytes > 0) {
            let mut frames = match memory.correlation_id {
                0 => Vec::new(),
                id => launch_stack(memory.tid, id).unwrap_or_default(),
            };
            frames.push(Frame::named(FrameKind::GpuMemory, MEMORY_FRAME));
            out.push(FoldedStack {
                frames,
                weight: memory.bytes,
                unit,
            });
        }
    }
    out
}

/// The leaf of a device memory stack.
pub const MEMORY_FRAME: &str = "GPU device memory";

fn kernel_frame(name: &str) -> Frame {
    Frame::named(FrameKind::GpuKernel, name)
}

/// `+0x90 LDG.E R2, desc[UR4][R2.64]` with a disassembly, `+0x90` without;
/// the module names the cubin by CRC so equal offsets in different
/// builds stay apart.
fn instruction_frame(pc: &PcSampleAggregate, options: &FoldOptions<'_>) -> Frame {
    let offset = format!("+{:#x}", pc.pc_offset);
    let function = match options
        .instruction_name
        .as_ref()
        .and_then(|name| name(pc.cubin_crc, &pc.function_name, pc.pc_offset))
    {
        Some(text) => format!("{offset} {text}"),
        None => offset,
    };
    Frame::Named {
        kind: FrameKind::GpuInstruction,
        function,
        module: Some(format!("cubin:{:016x}", pc.cubin_crc)),
        file: None,
        line: 0,
    }
}

/// Splits `total` in proportion to `weights` (largest remainder, so the
/// parts add up to `total` exactly); evenly when all weights are 0.
fn apportion(total: u64, weights: &[u64]) -> Vec<u64> {
    if weights.is_empty() {
        return Vec::new();
    }
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let (weights, sum): (Vec<u128>, u128) = if sum == 0 {
        (vec![1; weights.len()], weights.len() as u128)
    } else {
        (weights.iter().map(|&w| u128::from(w)).collect(), sum)
    };
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let scaled = u128::from(total) * w;
            ((scaled / sum) as u64, scaled % sum)
        })
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{KernelAggregate, StallReasonName};

    fn native(name: &str) -> Frame {
        Frame::named(FrameKind::Native, name)
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            kernels: vec![KernelAggregate {
                tid: 10,
                device_id: 0,
                name: "gemm".into(),
                launches: 4,
                total_ns: 1001,
                exemplar_correlation_ids: vec![1, 2, 3],
            }],
            pc_samples: vec![
                PcSampleAggregate {
                    function_name: "gemm".into(),
                    cubin_crc: 0xab,
                    function_index: 0,
                    pc_offset: 0x90,
                    stall_reason: 4,
                    samples: 30,
                },
                PcSampleAggregate {
                    function_name: "not_seen".into(),
                    cubin_crc: 0xab,
                    function_index: 1,
                    pc_offset: 0x10,
                    stall_reason: 99,
                    samples: 5,
                },
            ],
            stall_reasons: vec![StallReasonName {
                index: 4,
                name: "smsp__pcsamp_warps_issue_stalled_long_scoreboard".into(),
            }],
            ..Snapshot::default()
        }
    }

    /// Exemplars 1 and 2 were launched from `train_step`, 3 from `eval`:
    /// two thirds of the time and of the samples go under `train_step`.
    #[test]
    fn folds_under_launching_stacks() {
        let s = snapshot();
        let mut stalls = StallReasonTable::default();
        stalls.update(&s);
        let stacks = fold_snapshot(&s, &stalls, &FoldOptions::default(), |tid, id| {
            assert_eq!(tid, 10);
            let leaf = if id == 3 { "eval" } else { "train_step" };
            Some(vec![native("main"), native(leaf)])
        });
        let train = [native("main"), native("train_step")];
        let eval = [native("main"), native("eval")];

        let kernel: Vec<_> = stacks
            .iter()
            .filter(|s| s.unit == WeightUnit::Nanoseconds)
            .collect();
        assert_eq!(kernel.len(), 2);
        assert_eq!(kernel[0].frames[..2], train);
        assert_eq!(
            kernel[0].frames[2],
            Frame::named(FrameKind::GpuKernel, "gemm")
        );
        assert_eq!(kernel[0].weight + kernel[1].weight, 1001);
        assert_eq!(kernel[0].weight, 668);
        assert_eq!(kernel[1].frames[..2], eval);

        // Its 4 launches split over the same places (3 exemplars, 2 from
        // train_step), under the same frames.
        let launches: Vec<_> = stacks
            .iter()
            .filter(|s| s.unit == WeightUnit::Launches)
            .collect();
        assert_eq!(launches.len(), 2);
        assert_eq!(launches[0].frames, kernel[0].frames);
        assert_eq!((launches[0].weight, launches[1].weight), (3, 1));

        let samples: Vec<_> = stacks
            .iter()
            .filter(|s| s.unit == WeightUnit::Samples)
            .collect();
        let gemm: Vec<_> = samples.iter().filter(|s| s.frames.len() == 5).collect();
        assert_eq!(
            gemm.iter().map(|s| s.weight).collect::<Vec<_>>(),
            vec![20, 10]
        );
        let leaf = &gemm[0].frames;
        assert_eq!(leaf[3].kind(), FrameKind::GpuInstruction);
        assert!(
            matches!(&leaf[3], Frame::Named { function, module: Some(m), .. }
            if function == "+0x90" && m == "cubin:00000000000000ab")
        );
        assert_eq!(
            leaf[4],
            Frame::named(FrameKind::GpuStall, "long_scoreboard")
        );

        // Samples of a kernel with no time this interval are rooted at it;
        // an unknown stall index is still named.
        let lone: Vec<_> = samples.iter().filter(|s| s.frames.len() == 3).collect();
        assert_eq!(lone.len(), 1);
        assert_eq!(lone[0].weight, 5);
        assert_eq!(
            lone[0].frames[2],
            Frame::named(FrameKind::GpuStall, "stall_99")
        );
    }

    /// Without launch stacks (no agent uprobe) the kernel is the root.
    #[test]
    fn unknown_launches_root_at_the_kernel() {
        let s = snapshot();
        let options = FoldOptions {
            instruction_name: Some(Box::new(|crc, f, pc| {
                (crc == 0xab && f == "gemm" && pc == 0x90).then(|| "LDG.E R2, [R2]".to_owned())
            })),
        };
        let stacks = fold_snapshot(&s, &StallReasonTable::default(), &options, |_, _| None);
        assert_eq!(
            stacks[0].frames,
            vec![Frame::named(FrameKind::GpuKernel, "gemm")]
        );
        assert_eq!(stacks[0].weight, 1001);
        assert_eq!(
            (stacks[1].unit, stacks[1].weight),
            (WeightUnit::Launches, 4)
        );
        assert_eq!(stacks[1].frames, stacks[0].frames);
        assert!(
            matches!(&stacks[2].frames[1], Frame::Named { function, .. } if function == "+0x90 LDG.E R2, [R2]")
        );
        assert_eq!(
            stacks[2].frames[2],
            Frame::named(FrameKind::GpuStall, "stall_4")
        );
    }

    #[test]
    fn apportion_adds_up() {
        assert_eq!(apportion(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(apportion(7, &[0, 0]), vec![4, 3]);
        assert_eq!(apportion(100, &[3, 1]), vec![75, 25]);
        assert_eq!(
            apportion(u64::MAX, &[u64::MAX, 1]).iter().sum::<u64>(),
            u64::MAX
        );
        assert!(apportion(5, &[]).is_empty());
    }

    #[test]
    fn memory_hangs_under_the_allocating_call() {
        use crate::wire::MemoryAggregate;
        let s = Snapshot {
            memory_allocated: vec![
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 5,
                    bytes: 4096,
                    count: 2,
                },
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 0,
                    bytes: 100,
                    count: 1,
                },
            ],
            memory_live: vec![MemoryAggregate {
                tid: 10,
                correlation_id: 5,
                bytes: 2048,
                count: 1,
            }],
            ..Snapshot::default()
        };
        let stacks = fold_snapshot(
            &s,
            &StallReasonTable::default(),
            &FoldOptions::default(),
            |tid, id| (tid == 10 && id == 5).then(|| vec![native("main"), native("cudaMalloc")]),
        );
        let leaf = Frame::named(FrameKind::GpuMemory, MEMORY_FRAME);
        assert_eq!(
            stacks,
            vec![
                FoldedStack {
                    frames: vec![native("main"), native("cudaMalloc"), leaf.clone()],
                    weight: 4096,
                    unit: WeightUnit::AllocatedBytes,
                },
                FoldedStack {
                    frames: vec![leaf.clone()],
                    weight: 100,
                    unit: WeightUnit::AllocatedBytes,
                },
                FoldedStack {
                    frames: vec![native("main"), native("cudaMalloc"), leaf],
                    weight: 2048,
                    unit: WeightUnit::LiveBytes,
                },
            ]
        );
    }
}
