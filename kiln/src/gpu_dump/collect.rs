//! What one connection (one CUDA process) sent, added up over its
//! snapshots, and the figures the report prints from it. No I/O here: the
//! caller feeds snapshots in and names instructions.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use kiln_cuda::sass::CubinStore;
use kiln_cuda::wire::{Counters, MemoryStats};
use kiln_cuda::{FoldOptions, Snapshot, StallReasonTable, fold_snapshot};
use kiln_model::Frame;

/// One kernel's launches over the whole connection.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct KernelTotal {
    /// Executions.
    pub launches: u64,
    /// GPU time, ns.
    pub total_ns: u64,
    /// The launching threads (0: a launch the library did not see).
    pub tids: BTreeSet<u32>,
    /// The devices it ran on.
    pub devices: BTreeSet<u32>,
}

impl KernelTotal {
    /// Mean GPU time per launch, ns.
    pub(super) fn mean_ns(&self) -> f64 {
        self.total_ns as f64 / self.launches.max(1) as f64
    }
}

/// Where PC samples were taken: function, cubin CRC, PC offset, stall
/// reason index.
pub(super) type PcKey = (String, u64, u64, u32);

/// How a connection ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum End {
    /// Still open when the dump stopped (at the timeout).
    #[default]
    Open,
    /// The library closed it after its last whole frame.
    Closed,
    /// A frame could not be decoded (the message names it); the dump
    /// closed the connection there.
    Failed(String),
}

/// Everything one connection sent.
#[derive(Debug, Default)]
pub(super) struct Connection {
    /// The pids its snapshots carried (one, unless something is wrong).
    pub pids: BTreeSet<u32>,
    /// Snapshot sequence numbers in arrival order.
    pub sequences: Vec<u64>,
    /// Kernels by (mangled) name.
    pub kernels: BTreeMap<String, KernelTotal>,
    /// PC samples per place and stall reason.
    pub pc: BTreeMap<PcKey, u64>,
    /// CUPTI's stall reason table as sent (index → CUPTI's name).
    pub stall_names: BTreeMap<u32, String>,
    /// The same table as the agent keeps it, for folding and short names.
    stalls: StallReasonTable,
    /// CRCs of the cubins it sent.
    pub cubin_crcs: BTreeSet<u64>,
    /// Cubins sent.
    pub cubins: u64,
    /// Their bytes.
    pub cubin_bytes: u64,
    /// The library's counters as of the last snapshot (they are
    /// cumulative since it started).
    pub counters: Counters,
    /// Device memory as of the last snapshot, with the highest interval
    /// peak seen.
    pub memory: MemoryStats,
    /// Folded stacks, as the agent builds them: (unit, `kind:name;…`) →
    /// weight.
    pub folded: BTreeMap<(&'static str, String), u64>,
    /// How it ended.
    pub end: End,
}

impl Connection {
    /// Adds one snapshot. Its cubins go into `cubins`, which names the
    /// SASS instructions of the stacks folded here and in [`Self::pc_summary`].
    pub(super) fn take(&mut self, snapshot: &Snapshot, cubins: &RefCell<CubinStore>) {
        self.pids.insert(snapshot.pid);
        self.sequences.push(snapshot.sequence);
        for k in &snapshot.kernels {
            let total = self.kernels.entry(k.name.clone()).or_default();
            total.launches += k.launches;
            total.total_ns += k.total_ns;
            total.tids.insert(k.tid);
            total.devices.insert(k.device_id);
        }
        for p in &snapshot.pc_samples {
            let key = (
                p.function_name.clone(),
                p.cubin_crc,
                p.pc_offset,
                p.stall_reason,
            );
            *self.pc.entry(key).or_default() += p.samples;
        }
        for r in &snapshot.stall_reasons {
            self.stall_names.insert(r.index, r.name.clone());
        }
        for c in &snapshot.cubins {
            self.cubins += 1;
            self.cubin_crcs.insert(c.crc);
            self.cubin_bytes += c.image.len() as u64;
            cubins.borrow_mut().add(c);
        }
        self.counters = snapshot.counters;
        let peak = self
            .memory
            .peak_live_bytes
            .max(snapshot.memory.peak_live_bytes);
        self.memory = snapshot.memory;
        self.memory.peak_live_bytes = peak;
        self.stalls.update(snapshot);
        let options = FoldOptions {
            instruction_name: Some(Box::new(|crc: u64, function: &str, pc: u64| {
                cubins.borrow_mut().instruction(crc, function, pc)
            })),
        };
        // No CPU stacks: those come from the agent's eBPF uprobe.
        for stack in fold_snapshot(snapshot, &self.stalls, &options, |_tid, _corr| None) {
            let text: Vec<String> = stack.frames.iter().map(frame_text).collect();
            *self
                .folded
                .entry((stack.unit.as_str(), text.join(";")))
                .or_default() += stack.weight;
        }
    }

    /// The short name of a stall reason (`long_scoreboard`), or `stall_<n>`
    /// when CUPTI's table did not name it.
    pub(super) fn stall_name(&self, index: u32) -> String {
        self.stalls.name(index)
    }

    /// Whether the sequences run 0, 1, 2, … without a gap, and which are
    /// missing.
    pub(super) fn sequence_check(&self) -> SequenceCheck {
        SequenceCheck::of(&self.sequences)
    }

    /// The PC sample figures; `instruction(crc, function, pc_offset)`
    /// names SASS instructions (a [`CubinStore`]).
    pub(super) fn pc_summary(
        &self,
        mut instruction: impl FnMut(u64, &str, u64) -> Option<String>,
    ) -> PcSummary {
        let mut summary = PcSummary::default();
        let mut pcs: BTreeSet<(&str, u64, u64)> = BTreeSet::new();
        let mut by_function_stall: BTreeMap<(&str, String), u64> = BTreeMap::new();
        for ((function, crc, offset, stall), &samples) in &self.pc {
            summary.total_samples += samples;
            *summary.by_function.entry(function.clone()).or_default() += samples;
            *summary.by_stall.entry(self.stall_name(*stall)).or_default() += samples;
            *by_function_stall
                .entry((function.as_str(), self.stall_name(*stall)))
                .or_default() += samples;
            pcs.insert((function.as_str(), *crc, *offset));
        }
        summary.distinct_pcs = pcs.len();
        // SASS instructions are 16 bytes on every architecture CUPTI's PC
        // sampling supports: another offset is a misread record.
        summary.misaligned_offsets = pcs.iter().filter(|(_, _, off)| off % 16 != 0).count();
        summary.known_cubin_pcs = pcs
            .iter()
            .filter(|(_, crc, _)| self.cubin_crcs.contains(crc))
            .count();
        let mut names: BTreeMap<(&str, u64, u64), Option<String>> = BTreeMap::new();
        for &(function, crc, offset) in &pcs {
            names.insert((function, crc, offset), instruction(crc, function, offset));
        }
        summary.named_pcs = names.values().filter(|n| n.is_some()).count();
        for ((function, stall), samples) in by_function_stall {
            summary
                .stalls_by_function
                .entry(function.to_owned())
                .or_default()
                .push((stall, samples));
        }
        for stalls in summary.stalls_by_function.values_mut() {
            stalls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        }
        let mut top: Vec<(&PcKey, u64)> = self.pc.iter().map(|(k, &v)| (k, v)).collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        summary.top = top
            .into_iter()
            .take(TOP_PCS)
            .map(|((function, crc, offset, stall), samples)| TopPc {
                function: function.clone(),
                cubin_crc: *crc,
                pc_offset: *offset,
                instruction: names
                    .get(&(function.as_str(), *crc, *offset))
                    .cloned()
                    .flatten(),
                stall: self.stall_name(*stall),
                samples,
            })
            .collect();
        summary
    }

    /// Folded stacks per unit: (stacks, total weight).
    pub(super) fn folded_units(&self) -> BTreeMap<&'static str, (usize, u64)> {
        let mut units: BTreeMap<&'static str, (usize, u64)> = BTreeMap::new();
        for ((unit, _), weight) in &self.folded {
            let entry = units.entry(*unit).or_default();
            entry.0 += 1;
            entry.1 += weight;
        }
        units
    }

    /// The heaviest folded stacks, heaviest first.
    pub(super) fn top_folded(&self, n: usize) -> Vec<(&'static str, &str, u64)> {
        let mut folded: Vec<(&'static str, &str, u64)> = self
            .folded
            .iter()
            .map(|((unit, stack), &weight)| (*unit, stack.as_str(), weight))
            .collect();
        folded.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(b.1)));
        folded.truncate(n);
        folded
    }
}

/// PCs listed with their instruction.
pub(super) const TOP_PCS: usize = 20;

/// `kind:name`, as the stacks print.
fn frame_text(frame: &Frame) -> String {
    match frame {
        Frame::Named { function, .. } => format!("{}:{function}", frame.kind().as_str()),
        Frame::Address { addr, .. } => format!("{}:{addr:#x}", frame.kind().as_str()),
    }
}

/// Snapshot sequences against 0, 1, 2, …
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SequenceCheck {
    /// Missing sequences, as inclusive ranges.
    pub gaps: Vec<(u64, u64)>,
    /// Sequences that came again or went backwards.
    pub out_of_order: usize,
}

impl SequenceCheck {
    fn of(sequences: &[u64]) -> Self {
        let mut check = Self::default();
        let mut next = 0u64;
        for &s in sequences {
            if s < next {
                check.out_of_order += 1;
                continue;
            }
            if s > next {
                check.gaps.push((next, s - 1));
            }
            next = s.saturating_add(1);
        }
        check
    }

    /// Every sequence from 0 on, once, in order.
    pub(super) fn ok(&self) -> bool {
        self.gaps.is_empty() && self.out_of_order == 0
    }
}

/// One of the most sampled PCs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopPc {
    /// The function, mangled.
    pub function: String,
    /// Its cubin's CRC.
    pub cubin_crc: u64,
    /// Offset from the function's start, bytes.
    pub pc_offset: u64,
    /// The SASS instruction there, when nvdisasm named it.
    pub instruction: Option<String>,
    /// The stall reason's short name.
    pub stall: String,
    /// Samples.
    pub samples: u64,
}

/// PC sample figures of one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PcSummary {
    /// All samples.
    pub total_samples: u64,
    /// Distinct (function, cubin, offset).
    pub distinct_pcs: usize,
    /// PCs whose offset is not on a 16-byte instruction.
    pub misaligned_offsets: usize,
    /// PCs in a cubin this connection sent.
    pub known_cubin_pcs: usize,
    /// PCs whose instruction nvdisasm named.
    pub named_pcs: usize,
    /// Samples per function.
    pub by_function: BTreeMap<String, u64>,
    /// Samples per stall reason (short names).
    pub by_stall: BTreeMap<String, u64>,
    /// Per function, its stall reasons, most samples first.
    pub stalls_by_function: BTreeMap<String, Vec<(String, u64)>>,
    /// The [`TOP_PCS`] most sampled (PC, stall reason), most first.
    pub top: Vec<TopPc>,
}

/// Every counter of the library with its name, in the wire type's order.
///
/// The struct is destructured without `..`: a counter added to
/// [`Counters`] stops this from compiling until it is listed here, so the
/// dump can never leave one out.
pub(super) fn counter_fields(counters: &Counters) -> Vec<(&'static str, u64)> {
    macro_rules! fields {
        ($($field:ident),* $(,)?) => {{
            let Counters { $($field),* } = *counters;
            vec![$((stringify!($field), $field)),*]
        }};
    }
    fields!(
        launches,
        kernels,
        kernels_unjoined,
        launches_evicted,
        events_dropped,
        buffers_refused,
        records_unknown,
        records_malformed,
        kernels_over_limit,
        pc_samples_over_limit,
        pc_samples_dropped_by_hw,
        cubins_dropped,
        snapshots_dropped,
        pc_drains,
        pc_drains_skipped,
        cupti_errors,
        pc_sampling_watchdog_trips,
    )
}

#[cfg(test)]
mod tests {
    use kiln_cuda::wire::{Cubin, KernelAggregate, PcSampleAggregate, StallReasonName};

    use super::*;

    fn snapshot(sequence: u64) -> Snapshot {
        Snapshot {
            pid: 31,
            sequence,
            start_ns: 0,
            end_ns: 1,
            kernels: vec![
                KernelAggregate {
                    tid: 7,
                    device_id: 0,
                    name: "gemm".into(),
                    launches: 3,
                    total_ns: 3000,
                    exemplar_correlation_ids: vec![1],
                },
                KernelAggregate {
                    tid: 8,
                    device_id: 1,
                    name: "gemm".into(),
                    launches: 1,
                    total_ns: 5000,
                    exemplar_correlation_ids: vec![2],
                },
            ],
            pc_samples: vec![
                PcSampleAggregate {
                    function_name: "gemm".into(),
                    cubin_crc: 0xc0,
                    function_index: 0,
                    pc_offset: 0x40,
                    stall_reason: 2,
                    samples: 10,
                },
                PcSampleAggregate {
                    function_name: "gemm".into(),
                    cubin_crc: 0xbad,
                    function_index: 0,
                    pc_offset: 0x44,
                    stall_reason: 9,
                    samples: 1,
                },
            ],
            stall_reasons: if sequence == 0 {
                vec![StallReasonName {
                    index: 2,
                    name: "smsp__pcsamp_warps_issue_stalled_barrier".into(),
                }]
            } else {
                Vec::new()
            },
            cubins: if sequence == 0 {
                vec![Cubin {
                    crc: 0xc0,
                    image: vec![0; 100],
                }]
            } else {
                Vec::new()
            },
            counters: Counters {
                launches: 4 * (sequence + 1),
                pc_drains: sequence + 1,
                ..Counters::default()
            },
            ..Snapshot::default()
        }
    }

    /// Guards the sums the kit checks against the workload's own counts:
    /// launches and GPU time add up over snapshots and threads, PC samples
    /// per function and stall reason (a reason missing from CUPTI's table
    /// is `stall_<n>`, as in the agent), counters are the last snapshot's
    /// (they are cumulative), and only PCs in a cubin the library sent are
    /// "known".
    #[test]
    fn adds_snapshots_up() {
        let cubins = RefCell::new(CubinStore::new(1 << 20));
        let mut conn = Connection::default();
        for sequence in [0, 1, 3] {
            conn.take(&snapshot(sequence), &cubins);
        }
        let gemm = &conn.kernels["gemm"];
        assert_eq!(gemm.launches, 12);
        assert_eq!(gemm.total_ns, 24_000);
        assert_eq!(gemm.mean_ns(), 2000.0);
        assert_eq!(gemm.tids, BTreeSet::from([7, 8]));
        assert_eq!(gemm.devices, BTreeSet::from([0, 1]));
        assert_eq!(conn.counters.launches, 16);
        assert_eq!(conn.counters.pc_drains, 4);
        assert_eq!((conn.cubins, conn.cubin_bytes), (1, 100));

        let check = conn.sequence_check();
        assert_eq!(check.gaps, vec![(2, 2)]);
        assert!(!check.ok());

        let pc = conn.pc_summary(|crc, function, offset| {
            (crc == 0xc0 && function == "gemm" && offset == 0x40).then(|| "BAR.SYNC 0x0".into())
        });
        assert_eq!(pc.total_samples, 33);
        assert_eq!(pc.distinct_pcs, 2);
        assert_eq!(pc.misaligned_offsets, 1);
        assert_eq!(pc.known_cubin_pcs, 1);
        assert_eq!(pc.named_pcs, 1);
        assert_eq!(pc.by_function["gemm"], 33);
        assert_eq!(
            pc.by_stall,
            BTreeMap::from([("barrier".into(), 30), ("stall_9".into(), 3)])
        );
        assert_eq!(
            pc.stalls_by_function["gemm"],
            vec![("barrier".into(), 30), ("stall_9".into(), 3)]
        );
        assert_eq!(pc.top[0].instruction.as_deref(), Some("BAR.SYNC 0x0"));
        assert_eq!((pc.top[0].samples, pc.top[1].samples), (30, 3));

        // Kernel time in ns and PC samples fold apart, as in the agent.
        let units = conn.folded_units();
        assert_eq!(units["nanoseconds"].1, 24_000);
        assert_eq!(units["samples"].1, 33);
        let (unit, stack, _) = conn.top_folded(1)[0];
        assert_eq!(unit, "nanoseconds");
        assert!(stack.contains("gemm"), "{stack}");
    }

    /// Guards the gap report: missing sequences as ranges, and repeats.
    #[test]
    fn sequence_gaps() {
        assert!(SequenceCheck::of(&[0, 1, 2]).ok());
        assert!(SequenceCheck::of(&[]).ok());
        let check = SequenceCheck::of(&[2, 3, 7, 7, 5]);
        assert_eq!(check.gaps, vec![(0, 1), (4, 6)]);
        assert_eq!(check.out_of_order, 2);
    }

    /// Every counter comes out once, under its field's name.
    #[test]
    fn counters_by_name() {
        let fields = counter_fields(&Counters {
            launches: 1,
            pc_sampling_watchdog_trips: 2,
            ..Counters::default()
        });
        let names: BTreeSet<&str> = fields.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), fields.len());
        assert_eq!(fields[0], ("launches", 1));
        assert!(fields.contains(&("pc_sampling_watchdog_trips", 2)));
    }
}
