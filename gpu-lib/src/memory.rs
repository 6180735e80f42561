//! Device memory: allocations and frees seen at the driver's allocation
//! calls (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemFree_v2`, their
//! managed and stream-ordered kin, and the virtual memory management
//! API's `cuMemCreate`/`cuMemRelease`), kept by
//! the call that allocated them, so the agent can draw "GPU memory by call
//! path": bytes allocated over an interval, and bytes still live at its
//! end, each under the CPU stack of the allocating call (the same launch
//! marker and uprobe as kernels, keyed by the call's correlation id).
//!
//! Runs on the aggregator thread. Both tables are bounded: allocations
//! past [`MemoryLimits::live`] are counted and not tracked (their frees
//! then count as unknown), and an interval's aggregates past
//! [`MemoryLimits::per_snapshot`] fold into one per thread with no call
//! (correlation id 0: rooted at the process, not at a stack).

use rustc_hash::FxHashMap;

use crate::wire::{MemoryAggregate, MemoryStats};

/// An allocation or a free, as the callback saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryEvent {
    /// `bytes` at `address`, by the call `correlation_id` on thread `tid`.
    Alloc {
        /// The allocating call's correlation id.
        correlation_id: u32,
        /// The calling thread.
        tid: u32,
        /// Device address.
        address: u64,
        /// Size.
        bytes: u64,
    },
    /// The allocation at `address` freed.
    Free {
        /// Device address.
        address: u64,
    },
    /// `bytes` of physical device memory created (`cuMemCreate`), known
    /// by its handle until released.
    Create {
        /// The creating call's correlation id.
        correlation_id: u32,
        /// The calling thread.
        tid: u32,
        /// The allocation handle.
        handle: u64,
        /// Size.
        bytes: u64,
    },
    /// The physical memory of `handle` released (`cuMemRelease`).
    Release {
        /// The allocation handle.
        handle: u64,
    },
}

/// What a live allocation is known by: a device address, or a
/// virtual-memory handle (a number of its own, which may equal an
/// address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Block {
    Address(u64),
    Handle(u64),
}

/// Table sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Live allocations tracked.
    pub live: usize,
    /// Aggregates per snapshot, in each of its two lists.
    pub per_snapshot: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            live: 1 << 20,
            per_snapshot: 10_000,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Live {
    bytes: u64,
    correlation_id: u32,
    tid: u32,
}

/// What a snapshot says of device memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Bytes allocated during the interval, per allocating call.
    pub allocated: Vec<MemoryAggregate>,
    /// Bytes live at the interval's end, per allocating call.
    pub live: Vec<MemoryAggregate>,
    /// Process totals.
    pub stats: MemoryStats,
}

/// Live allocations and the interval's allocations.
#[derive(Debug, Default)]
pub struct MemoryTracker {
    limits: MemoryLimits,
    live: FxHashMap<Block, Live>,
    /// (tid, correlation id) → (bytes, allocations) this interval.
    allocated: FxHashMap<(u32, u32), (u64, u64)>,
    stats: MemoryStats,
}

impl MemoryTracker {
    /// A tracker with these limits.
    pub fn new(limits: MemoryLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Takes in one event.
    pub fn on_event(&mut self, event: MemoryEvent) {
        match event {
            MemoryEvent::Alloc {
                correlation_id,
                tid,
                address,
                bytes,
            } => self.on_alloc(correlation_id, tid, Block::Address(address), bytes),
            MemoryEvent::Free { address } => self.on_free(Block::Address(address)),
            MemoryEvent::Create {
                correlation_id,
                tid,
                handle,
                bytes,
            } => self.on_alloc(correlation_id, tid, Block::Handle(handle), bytes),
            MemoryEvent::Release { handle } => self.on_free(Block::Handle(handle)),
        }
    }

    fn on_alloc(&mut self, correlation_id: u32, tid: u32, block: Block, bytes: u64) {
        self.stats.allocations += 1;
        self.stats.allocated_bytes = self.stats.allocated_bytes.saturating_add(bytes);
        let entry = self.allocated.entry((tid, correlation_id)).or_default();
        entry.0 = entry.0.saturating_add(bytes);
        entry.1 += 1;
        if self.live.len() >= self.limits.live && !self.live.contains_key(&block) {
            self.stats.untracked_allocations += 1;
            return;
        }
        let live = Live {
            bytes,
            correlation_id,
            tid,
        };
        // An address handed out again without a free seen in between: the
        // free was missed (a call Kiln does not watch); the old one is gone.
        if let Some(old) = self.live.insert(block, live) {
            self.stats.live_bytes = self.stats.live_bytes.saturating_sub(old.bytes);
        }
        self.stats.live_bytes = self.stats.live_bytes.saturating_add(bytes);
        self.stats.peak_live_bytes = self.stats.peak_live_bytes.max(self.stats.live_bytes);
    }

    fn on_free(&mut self, block: Block) {
        self.stats.frees += 1;
        match self.live.remove(&block) {
            Some(old) => {
                self.stats.live_bytes = self.stats.live_bytes.saturating_sub(old.bytes);
            }
            None => self.stats.unknown_frees += 1,
        }
    }

    /// Ends the interval: what was allocated in it, what is live now (both
    /// by allocating call, largest first, bounded), and the totals. The
    /// live table stays.
    pub fn report(&mut self) -> MemoryReport {
        let allocated = bounded(aggregates(self.allocated.drain()), self.limits.per_snapshot);
        let mut by_call: FxHashMap<(u32, u32), (u64, u64)> = FxHashMap::default();
        for live in self.live.values() {
            let entry = by_call.entry((live.tid, live.correlation_id)).or_default();
            entry.0 = entry.0.saturating_add(live.bytes);
            entry.1 += 1;
        }
        let live = bounded(aggregates(by_call), self.limits.per_snapshot);
        let report = MemoryReport {
            allocated,
            live,
            stats: self.stats,
        };
        // The peak is the interval's: it starts again from what is live.
        self.stats.peak_live_bytes = self.stats.live_bytes;
        report
    }
}

/// ((tid, correlation id), (bytes, count)) pairs as aggregates.
fn aggregates(by_call: impl IntoIterator<Item = ((u32, u32), (u64, u64))>) -> Vec<MemoryAggregate> {
    by_call
        .into_iter()
        .map(|((tid, correlation_id), (bytes, count))| MemoryAggregate {
            tid,
            correlation_id,
            bytes,
            count,
        })
        .collect()
}

/// The `limit` largest aggregates (ties by thread and call, so the order
/// is stable), the rest folded into one per thread with no call.
fn bounded(mut all: Vec<MemoryAggregate>, limit: usize) -> Vec<MemoryAggregate> {
    all.sort_unstable_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.tid.cmp(&b.tid))
            .then(a.correlation_id.cmp(&b.correlation_id))
    });
    if all.len() <= limit {
        return all;
    }
    let rest = all.split_off(limit.saturating_sub(1).max(1).min(all.len()));
    let mut folded: FxHashMap<u32, MemoryAggregate> = FxHashMap::default();
    for a in rest {
        let entry = folded.entry(a.tid).or_insert(MemoryAggregate {
            tid: a.tid,
            correlation_id: 0,
            bytes: 0,
            count: 0,
        });
        entry.bytes = entry.bytes.saturating_add(a.bytes);
        entry.count += a.count;
    }
    let mut folded: Vec<MemoryAggregate> = folded.into_values().collect();
    folded.sort_unstable_by_key(|a| a.tid);
    all.extend(folded);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(correlation_id: u32, tid: u32, address: u64, bytes: u64) -> MemoryEvent {
        MemoryEvent::Alloc {
            correlation_id,
            tid,
            address,
            bytes,
        }
    }

    #[test]
    fn allocated_and_live_by_call_with_the_interval_peak() {
        let mut t = MemoryTracker::new(MemoryLimits::default());
        t.on_event(alloc(1, 10, 0x1000, 100));
        t.on_event(alloc(2, 10, 0x2000, 50));
        t.on_event(alloc(3, 11, 0x3000, 30));
        t.on_event(MemoryEvent::Free { address: 0x2000 });
        let r = t.report();
        assert_eq!(
            r.allocated,
            vec![
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 1,
                    bytes: 100,
                    count: 1
                },
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 2,
                    bytes: 50,
                    count: 1
                },
                MemoryAggregate {
                    tid: 11,
                    correlation_id: 3,
                    bytes: 30,
                    count: 1
                },
            ]
        );
        assert_eq!(
            r.live,
            vec![
                MemoryAggregate {
                    tid: 10,
                    correlation_id: 1,
                    bytes: 100,
                    count: 1
                },
                MemoryAggregate {
                    tid: 11,
                    correlation_id: 3,
                    bytes: 30,
                    count: 1
                },
            ]
        );
        assert_eq!(r.stats.live_bytes, 130);
        assert_eq!(r.stats.peak_live_bytes, 180);
        assert_eq!((r.stats.allocations, r.stats.frees), (3, 1));

        // Next interval: nothing allocated, the same live set, the peak
        // starts from what is live.
        t.on_event(MemoryEvent::Free { address: 0x9999 });
        let r = t.report();
        assert!(r.allocated.is_empty());
        assert_eq!(r.live.len(), 2);
        assert_eq!(r.stats.peak_live_bytes, 130);
        assert_eq!(r.stats.unknown_frees, 1);
    }

    #[test]
    fn a_reused_address_replaces_the_missed_allocation() {
        let mut t = MemoryTracker::new(MemoryLimits::default());
        t.on_event(alloc(1, 1, 0x1000, 100));
        t.on_event(alloc(2, 1, 0x1000, 40));
        let r = t.report();
        assert_eq!(r.stats.live_bytes, 40);
        assert_eq!(r.live.len(), 1);
        assert_eq!(r.live[0].correlation_id, 2);
    }

    /// PyTorch's expandable segments: physical memory by handle, apart
    /// from device addresses even where the numbers are equal.
    #[test]
    fn created_memory_is_live_until_released() {
        let mut t = MemoryTracker::new(MemoryLimits::default());
        t.on_event(alloc(1, 1, 0x1000, 100));
        t.on_event(MemoryEvent::Create {
            correlation_id: 2,
            tid: 1,
            handle: 0x1000,
            bytes: 2 << 20,
        });
        t.on_event(MemoryEvent::Free { address: 0x1000 });
        let r = t.report();
        assert_eq!(r.stats.live_bytes, 2 << 20);
        assert_eq!(r.live.len(), 1);
        assert_eq!(r.live[0].correlation_id, 2);
        t.on_event(MemoryEvent::Release { handle: 0x1000 });
        t.on_event(MemoryEvent::Release { handle: 0x2000 });
        let r = t.report();
        assert_eq!(r.stats.live_bytes, 0);
        assert_eq!(r.stats.unknown_frees, 1);
    }

    #[test]
    fn tables_are_bounded() {
        let mut t = MemoryTracker::new(MemoryLimits {
            live: 3,
            per_snapshot: 2,
        });
        for i in 0..5u32 {
            t.on_event(alloc(
                i + 1,
                7 + i % 2,
                0x1000 * u64::from(i + 1),
                u64::from(i + 1) * 10,
            ));
        }
        let r = t.report();
        assert_eq!(r.stats.untracked_allocations, 2);
        assert_eq!(r.stats.live_bytes, 10 + 20 + 30);
        // Allocated: the largest one, then the rest folded per thread.
        assert_eq!(r.allocated[0].bytes, 50);
        let folded: u64 = r.allocated[1..].iter().map(|a| a.bytes).sum();
        assert_eq!(folded, 10 + 20 + 30 + 40);
        assert!(r.allocated[1..].iter().all(|a| a.correlation_id == 0));
        let total: u64 = r.allocated.iter().map(|a| a.count).sum();
        assert_eq!(total, 5);
    }
}
