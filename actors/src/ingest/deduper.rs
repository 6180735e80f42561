//! `Deduper`: drops dictionary entries (frames, stacks, label sets,
//! executables) this worker has already written, so that steady-state
//! ingest writes little more than samples.

use std::collections::HashMap;
use std::hash::Hash;

use kiln_model::{FileId, FrameId, LabelSetId, StackId};

use super::decoder::Decoded;
use crate::query::cache::FastSet;

/// Entries remembered per kind before the cache turns over.
const GENERATION_SIZE: usize = 1 << 20;

/// A set bounded by two generations: when the young one fills up, the old
/// one is dropped and the young one becomes old. Ids seen in either are
/// known; forgetting only costs a redundant (idempotent) write. Hashed
/// with foldhash, not SipHash: the ids are content hashes the decoder has
/// checked, and a worker looks up every dictionary entry of every batch
/// here (SipHash was 3% of a worker's time under `fleet_bench`).
#[derive(Debug)]
struct Generations<T> {
    young: FastSet<T>,
    old: FastSet<T>,
    capacity: usize,
}

impl<T: Eq + Hash> Generations<T> {
    fn new(capacity: usize) -> Self {
        Self {
            young: FastSet::default(),
            old: FastSet::default(),
            capacity,
        }
    }

    fn contains(&self, id: &T) -> bool {
        self.young.contains(id) || self.old.contains(id)
    }

    fn insert(&mut self, id: T) {
        if self.young.len() >= self.capacity {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(id);
    }
}

/// What a batch wrote: remembered once the write is durable.
#[derive(Debug, Default)]
pub(crate) struct Remember {
    pub tenant: String,
    pub frames: Vec<FrameId>,
    pub stacks: Vec<StackId>,
    pub label_sets: Vec<LabelSetId>,
    pub executables: Vec<FileId>,
}

impl Remember {
    /// What `decoded` will have written.
    pub(crate) fn of(decoded: &Decoded) -> Self {
        let b = &decoded.batch;
        Remember {
            tenant: decoded.header.scope.tenant().to_owned(),
            frames: b.frames.iter().map(|f| f.id).collect(),
            stacks: b.stacks.iter().map(|s| s.id).collect(),
            label_sets: b.label_sets.iter().map(|l| l.id).collect(),
            executables: b.executables.iter().map(|e| e.file_id).collect(),
        }
    }
}

/// One tenant's caches. Ids are scoped by tenant: one tenant's write never
/// vouches for another's.
#[derive(Debug)]
struct TenantCache {
    frames: Generations<FrameId>,
    stacks: Generations<StackId>,
    label_sets: Generations<LabelSetId>,
    executables: Generations<FileId>,
}

impl TenantCache {
    fn new(capacity: usize) -> Self {
        Self {
            frames: Generations::new(capacity),
            stacks: Generations::new(capacity),
            label_sets: Generations::new(capacity),
            executables: Generations::new(capacity),
        }
    }
}

/// The dictionary caches of every tenant this worker has seen. Only the
/// pipeline's store stage uses it, one poll after the other, so that a
/// poll is filtered with everything the polls before it made durable.
#[derive(Debug)]
pub(crate) struct Deduper {
    tenants: HashMap<String, TenantCache>,
    capacity: usize,
}

impl Default for Deduper {
    fn default() -> Self {
        Self::with_capacity(GENERATION_SIZE)
    }
}

impl Deduper {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            tenants: HashMap::new(),
            capacity,
        }
    }

    /// `decoded` without the dictionary entries already written.
    pub(crate) fn filter(&self, mut decoded: Decoded) -> Decoded {
        let Some(cache) = self.tenants.get(decoded.header.scope.tenant()) else {
            return decoded;
        };
        let b = &mut decoded.batch;
        b.frames.retain(|f| !cache.frames.contains(&f.id));
        b.stacks.retain(|s| !cache.stacks.contains(&s.id));
        b.label_sets.retain(|l| !cache.label_sets.contains(&l.id));
        b.executables
            .retain(|e| !cache.executables.contains(&e.file_id));
        decoded
    }

    /// Remembers what a batch wrote; call only once it is durable.
    pub(crate) fn remember(&mut self, r: Remember) {
        let capacity = self.capacity;
        let cache = self
            .tenants
            .entry(r.tenant)
            .or_insert_with(|| TenantCache::new(capacity));
        r.frames.into_iter().for_each(|id| cache.frames.insert(id));
        r.stacks.into_iter().for_each(|id| cache.stacks.insert(id));
        r.label_sets
            .into_iter()
            .for_each(|id| cache.label_sets.insert(id));
        r.executables
            .into_iter()
            .for_each(|id| cache.executables.insert(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_forget_only_after_two_turnovers() {
        let mut g = Generations::new(2);
        g.insert(1);
        g.insert(2);
        g.insert(3); // 1, 2 become old
        assert!(g.contains(&1) && g.contains(&3));
        g.insert(4);
        g.insert(5); // 3, 4 become old; 1, 2 forgotten
        assert!(!g.contains(&1));
        assert!(g.contains(&3) && g.contains(&5));
    }
}
