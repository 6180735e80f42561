//! Joins launches (Callback API, on the launching thread) to kernel
//! completions (Activity API, later, in buffers) by correlation id.
//!
//! The two arrive by different routes, so either may come first. Both
//! tables are bounded: when one is full its oldest entry goes (a launch
//! whose kernel never came, a kernel whose launch never came — the latter
//! is still reported, without a launching thread). Age is insertion order,
//! never the id's value, so the u32 correlation id wrapping around changes
//! nothing; an id met again while its old entry is still held replaces it.
//!
//! A graph launch has one correlation id for all of its kernels, so its
//! entry stays until it is evicted rather than going at the first match.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::activity::KernelRecord;

/// A launch seen by the driver-API callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// CUPTI's correlation id, shared with the kernel record(s).
    pub correlation_id: u32,
    /// The launching thread (Linux tid).
    pub tid: u32,
    /// When the launch call was entered, ns (CUPTI's clock).
    pub timestamp_ns: u64,
    /// `cuGraphLaunch`: many kernels share this correlation id.
    pub graph: bool,
    /// The launch called the launch marker, so the agent has its CPU
    /// stack (see [`crate::marking`]): only such launches are exemplars.
    pub marked: bool,
}

/// A kernel with its launch, when the launch was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// The kernel's execution.
    pub kernel: KernelRecord,
    /// Its launch; `None` when the launch was never seen (launched before
    /// the library started, or its entry was evicted or dropped).
    pub launch: Option<Launch>,
}

/// What the joiner had to give up, for the library's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinStats {
    /// Kernels matched to their launch.
    pub joined: u64,
    /// Kernels reported without a launch.
    pub unjoined: u64,
    /// Launches evicted before any kernel matched them.
    pub launches_evicted: u64,
    /// Entries replaced because their id came round again.
    pub ids_reused: u64,
}

/// The two bounded tables and their counters.
#[derive(Debug)]
pub struct Joiner {
    capacity: usize,
    launches: Table<Launch>,
    /// Kernels that came before their launch.
    pending: Table<Vec<KernelRecord>>,
    /// Pending entries inserted before this sequence number have waited a
    /// whole interval and go out unjoined at the next [`Joiner::age_out`].
    age_mark: u64,
    stats: JoinStats,
}

impl Joiner {
    /// A joiner holding at most `capacity` launches and `capacity`
    /// early kernels' ids.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            launches: Table::default(),
            pending: Table::default(),
            age_mark: 0,
            stats: JoinStats::default(),
        }
    }

    /// Records a launch; emits any kernels that were waiting for it.
    pub fn on_launch(&mut self, launch: Launch, mut out: impl FnMut(Joined)) {
        if let Some(kernels) = self.pending.remove(launch.correlation_id) {
            for kernel in kernels {
                self.stats.joined += 1;
                out(Joined {
                    kernel,
                    launch: Some(launch),
                });
            }
            if !launch.graph {
                return;
            }
        }
        if self
            .launches
            .insert(launch.correlation_id, launch)
            .is_some()
        {
            self.stats.ids_reused += 1;
        }
        while self.launches.len() > self.capacity {
            if self.launches.pop_oldest().is_some() {
                self.stats.launches_evicted += 1;
            }
        }
    }

    /// Records a kernel; emits it joined when its launch is known, else
    /// holds it (and may push the oldest held kernel out unjoined).
    pub fn on_kernel(&mut self, kernel: KernelRecord, mut out: impl FnMut(Joined)) {
        let id = kernel.correlation_id;
        if let Some(launch) = self.launches.get(id).copied() {
            if !launch.graph {
                self.launches.remove(id);
            }
            self.stats.joined += 1;
            out(Joined {
                kernel,
                launch: Some(launch),
            });
            return;
        }
        match self.pending.get_mut(id) {
            // Graph kernels waiting together, bounded like everything else.
            Some(kernels) if kernels.len() < self.capacity => kernels.push(kernel),
            Some(_) => {
                self.stats.unjoined += 1;
                out(Joined {
                    kernel,
                    launch: None,
                });
            }
            None => {
                self.pending.insert(id, vec![kernel]);
            }
        }
        while self.pending.len() > self.capacity {
            if let Some(kernels) = self.pending.pop_oldest() {
                self.emit_unjoined(kernels, &mut out);
            }
        }
    }

    /// Emits, unjoined, the kernels that have waited for their launch since
    /// before the previous call: called once per snapshot interval.
    pub fn age_out(&mut self, mut out: impl FnMut(Joined)) {
        while let Some(kernels) = self.pending.pop_older_than(self.age_mark) {
            self.emit_unjoined(kernels, &mut out);
        }
        self.age_mark = self.pending.next_seq;
    }

    /// Emits every held kernel unjoined (at exit).
    pub fn drain(&mut self, mut out: impl FnMut(Joined)) {
        while let Some(kernels) = self.pending.pop_oldest() {
            self.emit_unjoined(kernels, &mut out);
        }
    }

    /// Counters since the joiner was made.
    pub fn stats(&self) -> JoinStats {
        self.stats
    }

    /// Launches and early kernels' ids held now.
    pub fn held(&self) -> (usize, usize) {
        (self.launches.len(), self.pending.len())
    }

    fn emit_unjoined(&mut self, kernels: Vec<KernelRecord>, out: &mut impl FnMut(Joined)) {
        for kernel in kernels {
            self.stats.unjoined += 1;
            out(Joined {
                kernel,
                launch: None,
            });
        }
    }
}

/// A map from correlation id to `T` that remembers insertion order.
///
/// The order queue is cleaned lazily: entries whose sequence number no
/// longer matches the map's were removed or replaced and are skipped; the
/// queue is compacted when it grows past twice the map, so it stays
/// bounded too.
#[derive(Debug)]
struct Table<T> {
    map: FxHashMap<u32, (u64, T)>,
    order: VecDeque<(u64, u32)>,
    next_seq: u64,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            map: FxHashMap::default(),
            order: VecDeque::new(),
            next_seq: 0,
        }
    }
}

impl<T> Table<T> {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn get(&self, id: u32) -> Option<&T> {
        self.map.get(&id).map(|(_, v)| v)
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.map.get_mut(&id).map(|(_, v)| v)
    }

    fn remove(&mut self, id: u32) -> Option<T> {
        self.map.remove(&id).map(|(_, v)| v)
    }

    /// Inserts; returns the entry the id held before.
    fn insert(&mut self, id: u32, value: T) -> Option<T> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.push_back((seq, id));
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(seq, id)| map.get(id).is_some_and(|(s, _)| s == seq));
        }
        self.map.insert(id, (seq, value)).map(|(_, v)| v)
    }

    fn pop_oldest(&mut self) -> Option<T> {
        self.pop_older_than(u64::MAX)
    }

    /// Removes the oldest live entry if it was inserted before `mark`.
    fn pop_older_than(&mut self, mark: u64) -> Option<T> {
        while let Some(&(seq, id)) = self.order.front() {
            if seq >= mark {
                return None;
            }
            self.order.pop_front();
            if self.map.get(&id).is_some_and(|(s, _)| *s == seq) {
                return self.map.remove(&id).map(|(_, v)| v);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::synth;

    fn launch(id: u32, tid: u32) -> Launch {
        Launch {
            correlation_id: id,
            tid,
            timestamp_ns: u64::from(id),
            graph: false,
            marked: true,
        }
    }

    fn collect(joiner: &mut Joiner, steps: &[Step]) -> Vec<(u32, Option<u32>)> {
        let mut out = Vec::new();
        for step in steps {
            let sink = |j: Joined| out.push((j.kernel.correlation_id, j.launch.map(|l| l.tid)));
            match *step {
                Step::Launch(id, tid) => joiner.on_launch(launch(id, tid), sink),
                Step::Kernel(id) => joiner.on_kernel(synth::kernel(id, 1, 0, 10), sink),
            }
        }
        out
    }

    #[derive(Clone, Copy)]
    enum Step {
        Launch(u32, u32),
        Kernel(u32),
    }
    use Step::{Kernel, Launch as L};

    #[test]
    fn joins_in_either_order() {
        let mut j = Joiner::new(16);
        let out = collect(&mut j, &[L(1, 100), Kernel(1), Kernel(2), L(2, 200)]);
        assert_eq!(out, vec![(1, Some(100)), (2, Some(200))]);
        assert_eq!(j.held(), (0, 0));
        assert_eq!(j.stats().joined, 2);
    }

    /// Ids that wrap from u32::MAX to 0 join like any others, and a reused
    /// id replaces its stale entry instead of matching it.
    #[test]
    fn ids_wrap_around() {
        let mut j = Joiner::new(16);
        let out = collect(
            &mut j,
            &[
                L(u32::MAX - 1, 1),
                L(u32::MAX, 2),
                L(0, 3),
                Kernel(0),
                Kernel(u32::MAX),
                Kernel(u32::MAX - 1),
            ],
        );
        assert_eq!(
            out,
            vec![(0, Some(3)), (u32::MAX, Some(2)), (u32::MAX - 1, Some(1))]
        );

        let out = collect(&mut j, &[L(5, 1), L(5, 2), Kernel(5)]);
        assert_eq!(out, vec![(5, Some(2))]);
        assert_eq!(j.stats().ids_reused, 1);
    }

    /// The oldest launch goes when the table is full, by arrival and not by
    /// id value (the newest ids here are the smallest).
    #[test]
    fn eviction_is_by_age_and_bounded() {
        let mut j = Joiner::new(2);
        collect(&mut j, &[L(u32::MAX, 1), L(0, 2), L(1, 3)]);
        assert_eq!(j.stats().launches_evicted, 1);
        let out = collect(&mut j, &[Kernel(u32::MAX), Kernel(0), Kernel(1)]);
        // u32::MAX's launch was evicted: it waits as a pending kernel.
        assert_eq!(out, vec![(0, Some(2)), (1, Some(3))]);
        assert_eq!(j.held(), (0, 1));

        // Pending kernels are bounded too: the oldest goes out unjoined.
        let out = collect(&mut j, &[Kernel(10), Kernel(11)]);
        assert_eq!(out, vec![(u32::MAX, None)]);
        assert_eq!(j.held(), (0, 2));
    }

    #[test]
    fn graph_launches_match_many_kernels() {
        let mut j = Joiner::new(8);
        let mut out = Vec::new();
        j.on_kernel(synth::kernel(9, 1, 0, 1), |x| out.push(x));
        let graph = Launch {
            graph: true,
            marked: true,
            ..launch(9, 42)
        };
        j.on_launch(graph, |x| out.push(x));
        for _ in 0..3 {
            j.on_kernel(synth::kernel(9, 1, 0, 1), |x| out.push(x));
        }
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(|x| x.launch == Some(graph)));
    }

    /// A kernel whose launch never comes goes out unjoined after waiting
    /// one whole interval, not at the first age-out.
    #[test]
    fn age_out_waits_one_interval() {
        let mut j = Joiner::new(8);
        collect(&mut j, &[Kernel(1)]);
        let mut out = Vec::new();
        j.age_out(|x| out.push(x.kernel.correlation_id));
        assert!(out.is_empty());
        collect(&mut j, &[Kernel(2)]);
        j.age_out(|x| out.push(x.kernel.correlation_id));
        assert_eq!(out, vec![1]);
        j.drain(|x| out.push(x.kernel.correlation_id));
        assert_eq!(out, vec![1, 2]);
        assert_eq!(j.stats().unjoined, 2);
    }

    /// Many matched launches do not grow the order queue without bound.
    #[test]
    fn order_queue_stays_bounded() {
        let mut j = Joiner::new(4);
        for id in 0..100_000u32 {
            j.on_launch(launch(id, 1), |_| {});
            j.on_kernel(synth::kernel(id, 1, 0, 1), |_| {});
        }
        assert!(j.launches.order.len() <= 2 * 4 + 64 + 1);
    }
}
