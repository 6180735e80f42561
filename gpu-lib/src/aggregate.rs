//! Pre-aggregation: joined kernels and PC samples summed into bounded
//! tables, emptied into a [`Snapshot`] every interval.
//!
//! Memory is bounded by the table limits in [`Limits`]: entries that do not
//! fit are counted ([`Counters::kernels_over_limit`], …) rather than kept.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::join::Joined;
use crate::pcsampling::PcSample;
use crate::wire::{
    Counters, Cubin, EXEMPLARS, KernelAggregate, PcSampleAggregate, Snapshot, StallReasonName,
};

/// Table sizes: together they bound the aggregator's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Distinct (thread, device, kernel) entries per interval.
    pub kernels: usize,
    /// Distinct (function, cubin, PC, stall reason) entries per interval.
    pub pc_samples: usize,
    /// Cubin bytes held until the next snapshot.
    pub cubin_bytes: usize,
    /// Entries of each join table.
    pub join: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            kernels: 16 << 10,
            pc_samples: 64 << 10,
            cubin_bytes: 64 << 20,
            join: 64 << 10,
        }
    }
}

impl Limits {
    /// An upper bound of the aggregator's and joiner's memory in bytes,
    /// names and cubins aside (they are bounded separately).
    pub fn table_bytes(&self) -> usize {
        // Per entry: key + value + hashbrown's control byte, rounded up,
        // doubled for the table's load factor; the join tables also keep
        // an order queue entry.
        let kernel = 2 * (16 + 24 + 4 * EXEMPLARS + 8);
        let pc = 2 * (48 + 8 + 8);
        let join = 2 * (4 + 8 + 24 + 8) + 16 + 2 * (4 + 8 + 24 + 8) + 16;
        self.kernels * kernel + self.pc_samples * pc + self.join * join
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct KernelKey {
    tid: u32,
    device_id: u32,
    name_ptr: u64,
}

#[derive(Debug, Clone, Default)]
struct KernelSum {
    launches: u64,
    /// Launches that called the marker: the exemplars' reservoir.
    marked: u64,
    total_ns: u64,
    exemplars: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PcKey {
    function_name: Arc<str>,
    cubin_crc: u64,
    function_index: u32,
    pc_offset: u64,
    stall_reason: u32,
}

/// The per-interval tables.
#[derive(Debug)]
pub struct Aggregator {
    limits: Limits,
    kernels: FxHashMap<KernelKey, KernelSum>,
    pc: FxHashMap<PcKey, u64>,
    function_names: FxHashMap<String, Arc<str>>,
    stall_reasons: Vec<StallReasonName>,
    stall_reasons_sent: bool,
    cubins: Vec<Cubin>,
    cubin_bytes: usize,
    counters: Counters,
    rng: u64,
    sequence: u64,
}

impl Aggregator {
    /// Empty tables of the given sizes.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            kernels: FxHashMap::default(),
            pc: FxHashMap::default(),
            function_names: FxHashMap::default(),
            stall_reasons: Vec::new(),
            stall_reasons_sent: false,
            cubins: Vec::new(),
            cubin_bytes: 0,
            counters: Counters::default(),
            rng: 0x9e37_79b9_7f4a_7c15,
            sequence: 0,
        }
    }

    /// Adds one kernel execution.
    pub fn add_kernel(&mut self, joined: &Joined) {
        let key = KernelKey {
            tid: joined.launch.map_or(0, |l| l.tid),
            device_id: joined.kernel.device_id,
            name_ptr: joined.kernel.name_ptr,
        };
        let full = self.kernels.len() >= self.limits.kernels;
        let sum = match self.kernels.get_mut(&key) {
            Some(sum) => sum,
            None if full => {
                self.counters.kernels_over_limit += 1;
                return;
            }
            None => self.kernels.entry(key).or_default(),
        };
        sum.launches += 1;
        sum.total_ns += joined.kernel.duration_ns();
        if let Some(launch) = joined.launch.filter(|l| l.marked) {
            // Reservoir sampling: every marked launch (the agent has the
            // stacks of those only) has the same chance to be an
            // exemplar, whatever the count.
            sum.marked += 1;
            if sum.exemplars.len() < EXEMPLARS {
                sum.exemplars.push(launch.correlation_id);
            } else {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let slot = self.rng % sum.marked;
                if let Some(exemplar) = sum.exemplars.get_mut(slot as usize) {
                    *exemplar = launch.correlation_id;
                }
            }
        }
    }

    /// Adds the samples of one PC.
    pub fn add_pc_sample(&mut self, sample: &PcSample) {
        let function_name = match self.function_names.get(&sample.function_name) {
            Some(name) => name.clone(),
            None => {
                let name: Arc<str> = sample.function_name.as_str().into();
                if self.function_names.len() < self.limits.kernels {
                    self.function_names
                        .insert(sample.function_name.clone(), name.clone());
                }
                name
            }
        };
        for &(stall_reason, samples) in &sample.stalls {
            let key = PcKey {
                function_name: function_name.clone(),
                cubin_crc: sample.cubin_crc,
                function_index: sample.function_index,
                pc_offset: sample.pc_offset,
                stall_reason,
            };
            let full = self.pc.len() >= self.limits.pc_samples;
            match self.pc.get_mut(&key) {
                Some(count) => *count += u64::from(samples),
                None if full => self.counters.pc_samples_over_limit += u64::from(samples),
                None => {
                    self.pc.insert(key, u64::from(samples));
                }
            }
        }
    }

    /// Sets the stall reason table (sent with the next snapshot).
    pub fn set_stall_reasons(&mut self, reasons: Vec<StallReasonName>) {
        if reasons != self.stall_reasons {
            self.stall_reasons = reasons;
            self.stall_reasons_sent = false;
        }
    }

    /// Keeps a module's cubin for the next snapshot, if it fits.
    pub fn add_cubin(&mut self, crc: u64, image: Vec<u8>) {
        if self.cubin_bytes + image.len() > self.limits.cubin_bytes {
            self.counters.cubins_dropped += 1;
            return;
        }
        if self.cubins.iter().any(|c| c.crc == crc) {
            return;
        }
        self.cubin_bytes += image.len();
        self.cubins.push(Cubin { crc, image });
    }

    /// The counters the aggregator keeps, for the pipeline to add to.
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Empties the tables into a snapshot. `kernel_name` turns a kernel
    /// record's name address into its name.
    pub fn snapshot(
        &mut self,
        pid: u32,
        start_ns: u64,
        end_ns: u64,
        mut kernel_name: impl FnMut(u64) -> Arc<str>,
    ) -> Snapshot {
        let mut kernels: Vec<KernelAggregate> = self
            .kernels
            .drain()
            .map(|(key, sum)| KernelAggregate {
                tid: key.tid,
                device_id: key.device_id,
                name: kernel_name(key.name_ptr).to_string(),
                launches: sum.launches,
                total_ns: sum.total_ns,
                exemplar_correlation_ids: sum.exemplars,
            })
            .collect();
        kernels.sort_by(|a, b| (a.tid, a.device_id, &a.name).cmp(&(b.tid, b.device_id, &b.name)));
        let mut pc_samples: Vec<PcSampleAggregate> = self
            .pc
            .drain()
            .map(|(key, samples)| PcSampleAggregate {
                function_name: key.function_name.to_string(),
                cubin_crc: key.cubin_crc,
                function_index: key.function_index,
                pc_offset: key.pc_offset,
                stall_reason: key.stall_reason,
                samples,
            })
            .collect();
        pc_samples.sort_by(|a, b| {
            (&a.function_name, a.pc_offset, a.stall_reason).cmp(&(
                &b.function_name,
                b.pc_offset,
                b.stall_reason,
            ))
        });
        let stall_reasons = if self.stall_reasons_sent {
            Vec::new()
        } else {
            self.stall_reasons_sent = true;
            self.stall_reasons.clone()
        };
        self.cubin_bytes = 0;
        let snapshot = Snapshot {
            pid,
            sequence: self.sequence,
            start_ns,
            end_ns,
            kernels,
            pc_samples,
            stall_reasons,
            cubins: std::mem::take(&mut self.cubins),
            counters: self.counters,
            // Filled by the pipeline, which tracks memory.
            ..Snapshot::default()
        };
        self.sequence += 1;
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::synth;
    use crate::join::Launch;

    fn joined(id: u32, tid: Option<u32>, name_ptr: u64, ns: u64) -> Joined {
        Joined {
            kernel: synth::kernel(id, name_ptr, 1000, 1000 + ns),
            launch: tid.map(|tid| Launch {
                correlation_id: id,
                tid,
                timestamp_ns: 0,
                graph: false,
                marked: true,
            }),
        }
    }

    fn names(ptr: u64) -> Arc<str> {
        format!("k{ptr}").into()
    }

    #[test]
    fn sums_kernels_per_thread_and_name() {
        let mut agg = Aggregator::new(Limits::default());
        agg.add_kernel(&joined(1, Some(10), 1, 100));
        agg.add_kernel(&joined(2, Some(10), 1, 50));
        agg.add_kernel(&joined(3, Some(11), 1, 5));
        agg.add_kernel(&joined(4, None, 2, 7));
        let s = agg.snapshot(1, 0, 10, names);
        let got: Vec<_> = s
            .kernels
            .iter()
            .map(|k| {
                (
                    k.tid,
                    k.name.as_str(),
                    k.launches,
                    k.total_ns,
                    k.exemplar_correlation_ids.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "k2", 1, 7, vec![]),
                (10, "k1", 2, 150, vec![1, 2]),
                (11, "k1", 1, 5, vec![3]),
            ]
        );
        // The tables are empty after a snapshot, the sequence moves on.
        let next = agg.snapshot(1, 10, 20, names);
        assert!(next.kernels.is_empty());
        assert_eq!(next.sequence, 1);
    }

    /// Exemplars stay at most EXEMPLARS and come from across the launches,
    /// not only the first ones.
    #[test]
    fn exemplars_are_bounded_and_spread() {
        let mut agg = Aggregator::new(Limits::default());
        for id in 0..10_000 {
            agg.add_kernel(&joined(id, Some(1), 1, 1));
        }
        let s = agg.snapshot(1, 0, 1, names);
        let ex = &s.kernels[0].exemplar_correlation_ids;
        assert_eq!(ex.len(), EXEMPLARS);
        assert!(ex.iter().any(|&id| id >= 5000), "{ex:?}");
    }

    /// The agent has the stacks of marked launches only: an unmarked
    /// launch counts, but is never an exemplar.
    #[test]
    fn only_marked_launches_are_exemplars() {
        let mut agg = Aggregator::new(Limits::default());
        for id in 0..10_000 {
            let mut j = joined(id, Some(1), 1, 1);
            if let Some(launch) = &mut j.launch {
                launch.marked = id % 1000 == 7;
            }
            agg.add_kernel(&j);
        }
        let s = agg.snapshot(1, 0, 1, names);
        assert_eq!(s.kernels[0].launches, 10_000);
        let ex = &s.kernels[0].exemplar_correlation_ids;
        assert_eq!(ex.len(), EXEMPLARS);
        assert!(ex.iter().all(|id| id % 1000 == 7), "{ex:?}");
    }

    #[test]
    fn tables_are_bounded() {
        let limits = Limits {
            kernels: 2,
            pc_samples: 1,
            cubin_bytes: 10,
            join: 4,
        };
        let mut agg = Aggregator::new(limits);
        for ptr in 0..5 {
            agg.add_kernel(&joined(1, Some(1), ptr, 1));
        }
        agg.add_pc_sample(&PcSample {
            function_name: "f".into(),
            cubin_crc: 1,
            function_index: 0,
            pc_offset: 0,
            correlation_id: 0,
            stalls: vec![(1, 3), (2, 4)],
        });
        agg.add_cubin(1, vec![0; 8]);
        agg.add_cubin(2, vec![0; 8]);
        let s = agg.snapshot(1, 0, 1, names);
        assert_eq!(s.kernels.len(), 2);
        assert_eq!(s.counters.kernels_over_limit, 3);
        assert_eq!(s.pc_samples.len(), 1);
        assert_eq!(s.counters.pc_samples_over_limit, 4);
        assert_eq!(s.cubins.len(), 1);
        assert_eq!(s.counters.cubins_dropped, 1);
    }

    #[test]
    fn sums_pc_samples_per_pc_and_reason() {
        let mut agg = Aggregator::new(Limits::default());
        let sample = |pc, stalls: Vec<(u32, u32)>| PcSample {
            function_name: "_Z3fooPf".into(),
            cubin_crc: 9,
            function_index: 2,
            pc_offset: pc,
            correlation_id: 0,
            stalls,
        };
        agg.add_pc_sample(&sample(0x10, vec![(1, 3), (2, 1)]));
        agg.add_pc_sample(&sample(0x10, vec![(1, 4)]));
        agg.add_pc_sample(&sample(0x20, vec![(2, 2)]));
        agg.set_stall_reasons(vec![StallReasonName {
            index: 1,
            name: "long_scoreboard".into(),
        }]);
        let s = agg.snapshot(1, 0, 1, names);
        let got: Vec<_> = s
            .pc_samples
            .iter()
            .map(|p| (p.pc_offset, p.stall_reason, p.samples))
            .collect();
        assert_eq!(got, vec![(0x10, 1, 7), (0x10, 2, 1), (0x20, 2, 2)]);
        assert_eq!(s.stall_reasons.len(), 1);
        // The table goes once, not with every snapshot.
        assert!(agg.snapshot(1, 1, 2, names).stall_reasons.is_empty());
    }
}
