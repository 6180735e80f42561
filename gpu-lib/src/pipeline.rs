//! The aggregation path: activity buffers parsed, kernels joined to their
//! launches, everything summed, a snapshot taken every interval. Runs on
//! the library's one aggregator thread; nothing here is shared.

use std::collections::HashMap;
use std::sync::Arc;

use crate::activity::{self, ParseStats, Record};
use crate::aggregate::{Aggregator, Limits};
use crate::join::{Joined, Joiner, Launch};
use crate::memory::{MemoryEvent, MemoryLimits, MemoryTracker};
use crate::pcsampling::PcSample;
use crate::timeline::{TimelineKernel, TimelineWriter};
use crate::wire::{Snapshot, StallReasonName};

/// Turns a kernel record's name address into the name.
pub type NameResolver = Box<dyn Fn(u64) -> Option<String> + Send>;

/// Parse, join, aggregate, and optionally write the timeline.
pub struct Pipeline {
    pid: u32,
    joiner: Joiner,
    aggregator: Aggregator,
    parse: ParseStats,
    launches: u64,
    names: HashMap<u64, Arc<str>>,
    resolve: NameResolver,
    timeline: Option<TimelineWriter>,
    interval_start_ns: u64,
    scratch: Vec<Joined>,
    memory: MemoryTracker,
}

impl Pipeline {
    /// A pipeline for process `pid`, with the given table limits.
    pub fn new(pid: u32, limits: Limits, resolve: NameResolver) -> Self {
        Self {
            pid,
            joiner: Joiner::new(limits.join),
            aggregator: Aggregator::new(limits),
            parse: ParseStats::default(),
            launches: 0,
            names: HashMap::new(),
            resolve,
            timeline: None,
            interval_start_ns: 0,
            scratch: Vec::new(),
            memory: MemoryTracker::new(MemoryLimits::default()),
        }
    }

    /// Also writes every kernel to a timeline file.
    pub fn with_timeline(mut self, timeline: TimelineWriter) -> Self {
        self.timeline = Some(timeline);
        self
    }

    /// Records a launch.
    pub fn on_launch(&mut self, launch: Launch) {
        self.launches += 1;
        let mut out = std::mem::take(&mut self.scratch);
        self.joiner.on_launch(launch, |j| out.push(j));
        self.emit(out);
    }

    /// Parses one record (its bytes, as [`crate::Cupti::for_each_record`]
    /// gives them) and takes in the kernel it holds.
    pub fn on_record(&mut self, bytes: &[u8]) {
        let record = activity::parse_record(bytes);
        self.parse.count(&record);
        if let Record::Kernel(kernel) = record {
            let mut out = std::mem::take(&mut self.scratch);
            self.joiner.on_kernel(kernel, |j| out.push(j));
            self.emit(out);
        }
    }

    /// Counts bytes of a buffer that could not be walked.
    pub fn on_unwalked(&mut self, bytes: usize) {
        if bytes > 0 {
            self.parse.malformed += 1;
        }
    }

    /// Takes in one batch of PC samples.
    pub fn on_pc_samples(&mut self, samples: &[PcSample], dropped_by_hw: u64) {
        for sample in samples {
            self.aggregator.add_pc_sample(sample);
        }
        self.aggregator.counters_mut().pc_samples_dropped_by_hw += dropped_by_hw;
    }

    /// Takes in a device memory allocation or free.
    pub fn on_memory(&mut self, event: MemoryEvent) {
        self.memory.on_event(event);
    }

    /// Sets the stall reason table.
    pub fn on_stall_reasons(&mut self, reasons: Vec<StallReasonName>) {
        self.aggregator.set_stall_reasons(reasons);
    }

    /// Keeps a module's cubin for the agent.
    pub fn on_cubin(&mut self, crc: u64, image: Vec<u8>) {
        self.aggregator.add_cubin(crc, image);
    }

    /// Ends the interval at `now_ns`: kernels that waited a whole interval
    /// for their launch go in unjoined, and the tables are emptied into a
    /// snapshot. `producer` holds the counters kept outside this thread
    /// (launches, drops at the queue, refused buffers, undelivered
    /// snapshots); they are added in.
    pub fn snapshot(&mut self, now_ns: u64, producer: ProducerCounts) -> Snapshot {
        let mut aged = Vec::new();
        self.joiner.age_out(|j| aged.push(j));
        for j in &aged {
            self.on_joined(j);
        }
        self.take_snapshot(now_ns, producer)
    }

    /// The last snapshot: every held kernel goes in, the timeline is
    /// flushed.
    pub fn final_snapshot(&mut self, now_ns: u64, producer: ProducerCounts) -> Snapshot {
        let mut held = Vec::new();
        self.joiner.drain(|j| held.push(j));
        for j in &held {
            self.on_joined(j);
        }
        if let Some(timeline) = &mut self.timeline {
            let _ = timeline.flush();
        }
        self.take_snapshot(now_ns, producer)
    }

    fn take_snapshot(&mut self, now_ns: u64, producer: ProducerCounts) -> Snapshot {
        let join = self.joiner.stats();
        let counters = self.aggregator.counters_mut();
        counters.launches = producer.launches.max(self.launches);
        counters.kernels = self.parse.kernels;
        counters.records_unknown = self.parse.unknown;
        counters.records_malformed = self.parse.malformed;
        counters.kernels_unjoined = join.unjoined;
        counters.launches_evicted = join.launches_evicted;
        counters.events_dropped = producer.events_dropped;
        counters.buffers_refused = producer.buffers_refused;
        counters.snapshots_dropped = producer.snapshots_dropped;
        counters.pc_drains = producer.pc_drains;
        counters.pc_drains_skipped = producer.pc_drains_skipped;
        counters.cupti_errors = producer.cupti_errors;
        counters.pc_sampling_watchdog_trips = producer.pc_sampling_watchdog_trips;
        let start = self.interval_start_ns;
        self.interval_start_ns = now_ns;
        let names = &mut self.names;
        let resolve = &self.resolve;
        let mut snapshot = self.aggregator.snapshot(self.pid, start, now_ns, |ptr| {
            kernel_name(names, resolve, ptr)
        });
        let memory = self.memory.report();
        snapshot.memory_allocated = memory.allocated;
        snapshot.memory_live = memory.live;
        snapshot.memory = memory.stats;
        snapshot
    }

    /// Takes in what the joiner emitted; the vector is kept for reuse so
    /// the per-record path does not allocate.
    fn emit(&mut self, mut out: Vec<Joined>) {
        for j in out.drain(..) {
            self.on_joined(&j);
        }
        self.scratch = out;
    }

    fn on_joined(&mut self, joined: &Joined) {
        self.aggregator.add_kernel(joined);
        if self.timeline.is_some() {
            let name = kernel_name(&mut self.names, &self.resolve, joined.kernel.name_ptr);
            let k = &joined.kernel;
            let line = TimelineKernel {
                pid: self.pid,
                tid: joined.launch.map_or(0, |l| l.tid),
                device: k.device_id,
                stream: k.stream_id,
                name: name.to_string(),
                launch_ns: joined.launch.map_or(0, |l| l.timestamp_ns),
                start_ns: k.start_ns,
                end_ns: k.end_ns,
                correlation_id: k.correlation_id,
                grid: k.grid,
                block: k.block,
                graph_id: k.graph_id,
            };
            if let Some(timeline) = &mut self.timeline {
                // A full disk must not stop profiling: the line is lost.
                let _ = timeline.write(&line);
            }
        }
    }
}

/// Counters kept by the CUDA threads and the sender (atomics), handed to
/// [`Pipeline::snapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerCounts {
    /// Launches the callback saw.
    pub launches: u64,
    /// Events dropped at the full queue.
    pub events_dropped: u64,
    /// Buffers refused to CUPTI.
    pub buffers_refused: u64,
    /// Snapshots not delivered.
    pub snapshots_dropped: u64,
    /// PC reads that returned.
    pub pc_drains: u64,
    /// PC reads skipped (another thread was reading the context).
    pub pc_drains_skipped: u64,
    /// CUPTI calls that failed.
    pub cupti_errors: u64,
    /// 1 once the watchdog turned PC sampling off.
    pub pc_sampling_watchdog_trips: u64,
}

/// Names are looked up once per address; the cache is bounded by the
/// number of distinct kernels CUPTI names, which is the program's.
fn kernel_name(cache: &mut HashMap<u64, Arc<str>>, resolve: &NameResolver, ptr: u64) -> Arc<str> {
    if let Some(name) = cache.get(&ptr) {
        return name.clone();
    }
    let name: Arc<str> = resolve(ptr)
        .unwrap_or_else(|| format!("[kernel {ptr:#x}]"))
        .into();
    cache.insert(ptr, name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::synth;

    fn resolver() -> NameResolver {
        Box::new(|ptr| (ptr == 0x10).then(|| "_Z6vecAddPfS_S_i".to_owned()))
    }

    fn launch(id: u32, tid: u32) -> Launch {
        Launch {
            correlation_id: id,
            tid,
            timestamp_ns: 1,
            graph: false,
            marked: true,
        }
    }

    fn feed(p: &mut Pipeline, buffer: &[u8]) {
        let left = activity::walk(buffer, |bytes| p.on_record(bytes));
        p.on_unwalked(left);
    }

    /// Buffers and launches in any order end up as the same sums; ids
    /// that wrap are no different.
    #[test]
    fn joins_and_sums_across_orders() {
        let mut buffer = Vec::new();
        for (i, id) in [u32::MAX, 0, 1].into_iter().enumerate() {
            let start = 1000 * i as u64;
            synth::push_kernel(&mut buffer, &synth::kernel(id, 0x10, start, start + 100));
        }
        let mut early = Pipeline::new(1, Limits::default(), resolver());
        for id in [u32::MAX, 0, 1] {
            early.on_launch(launch(id, 9));
        }
        feed(&mut early, &buffer);
        let mut late = Pipeline::new(1, Limits::default(), resolver());
        feed(&mut late, &buffer);
        for id in [1, 0, u32::MAX] {
            late.on_launch(launch(id, 9));
        }
        for p in [&mut early, &mut late] {
            let s = p.snapshot(5000, ProducerCounts::default());
            assert_eq!(s.kernels.len(), 1);
            let k = &s.kernels[0];
            assert_eq!(
                (k.tid, k.name.as_str(), k.launches, k.total_ns),
                (9, "_Z6vecAddPfS_S_i", 3, 300)
            );
            assert_eq!(s.counters.kernels, 3);
            assert_eq!(s.counters.kernels_unjoined, 0);
        }
    }

    /// A kernel whose launch never comes is reported after one interval,
    /// under thread 0, with a placeholder name when CUPTI has none.
    #[test]
    fn unjoined_kernels_come_out_after_an_interval() {
        let mut p = Pipeline::new(1, Limits::default(), resolver());
        let mut buffer = Vec::new();
        synth::push_kernel(&mut buffer, &synth::kernel(5, 0x99, 0, 10));
        feed(&mut p, &buffer);
        assert!(p.snapshot(1, ProducerCounts::default()).kernels.is_empty());
        let s = p.snapshot(2, ProducerCounts::default());
        assert_eq!(s.kernels[0].tid, 0);
        assert_eq!(s.kernels[0].name, "[kernel 0x99]");
        assert_eq!(s.counters.kernels_unjoined, 1);
        assert_eq!((s.start_ns, s.end_ns), (1, 2));
    }

    #[test]
    fn final_snapshot_writes_the_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timeline.jsonl");
        let mut p = Pipeline::new(7, Limits::default(), resolver())
            .with_timeline(TimelineWriter::new(&path, 1 << 20).unwrap());
        p.on_launch(launch(3, 70));
        let mut buffer = Vec::new();
        synth::push_kernel(&mut buffer, &synth::kernel(3, 0x10, 100, 300));
        synth::push_kernel(&mut buffer, &synth::kernel(4, 0x10, 400, 500));
        feed(&mut p, &buffer);
        let s = p.final_snapshot(
            1000,
            ProducerCounts {
                launches: 1,
                ..Default::default()
            },
        );
        assert_eq!(s.counters.kernels, 2);
        let lines = crate::timeline::read_timeline(std::io::BufReader::new(
            std::fs::File::open(&path).unwrap(),
        ))
        .unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0].tid, lines[0].launch_ns, lines[0].correlation_id),
            (70, 1, 3)
        );
        assert_eq!((lines[1].tid, lines[1].correlation_id), (0, 4));
    }
}
