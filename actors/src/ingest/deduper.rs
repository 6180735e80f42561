//! `Deduper`: drops dictionary entries (frames, stacks, label sets,
//! executables) this worker has already written, so that steady-state
//! ingest writes little more than samples.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use kiln_model::{FileId, FrameId, KnownEntries, LabelSetId, StackId};

use super::decoder::Decoded;
use crate::fast_hash::FastSet;

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

impl KnownEntries for TenantCache {
    fn knows_frame(&self, id: FrameId) -> bool {
        self.frames.contains(&id)
    }

    fn knows_stack(&self, id: StackId) -> bool {
        self.stacks.contains(&id)
    }

    fn knows_label_set(&self, id: LabelSetId) -> bool {
        self.label_sets.contains(&id)
    }

    fn knows_executable(&self, id: FileId) -> bool {
        self.executables.contains(&id)
    }
}

/// What one tenant's entries this worker has written: all of them are
/// held, or none when it has written none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Known<'a>(Option<&'a TenantCache>);

impl KnownEntries for Known<'_> {
    fn knows_frame(&self, id: FrameId) -> bool {
        self.0.is_some_and(|c| c.knows_frame(id))
    }

    fn knows_stack(&self, id: StackId) -> bool {
        self.0.is_some_and(|c| c.knows_stack(id))
    }

    fn knows_label_set(&self, id: LabelSetId) -> bool {
        self.0.is_some_and(|c| c.knows_label_set(id))
    }

    fn knows_executable(&self, id: FileId) -> bool {
        self.0.is_some_and(|c| c.knows_executable(id))
    }
}

/// The dictionary caches of every tenant this worker has seen, shared by
/// the pipeline's two halves (clones are handles to the same caches).
///
/// Only the store stage adds to them, once a poll is durable, so that
/// what they hold was made durable by an earlier poll. The store stage
/// filters each poll with them; the decoding threads, which run ahead,
/// consult them too ([`with_known`](Self::with_known)), to leave out of a
/// batch, unbuilt and unchecked, the entries already written. What they
/// see may lag what the store stage knows by a poll or two: an entry they
/// keep is still dropped by [`filter`](Self::filter).
#[derive(Debug, Clone)]
pub(crate) struct Deduper {
    tenants: Arc<RwLock<HashMap<String, TenantCache>>>,
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
            tenants: Arc::default(),
            capacity,
        }
    }

    /// The caches, to read. A thread that panicked while holding them
    /// left them as sets of ids, each insert whole or not made: still
    /// true, so poisoning is ignored.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, TenantCache>> {
        self.tenants.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// `f` of what `tenant`'s entries are known to be written, the caches
    /// held for reading meanwhile (briefly: [`remember`](Self::remember)
    /// waits for it).
    pub(crate) fn with_known<T>(&self, tenant: &str, f: impl FnOnce(Known<'_>) -> T) -> T {
        let tenants = self.read();
        f(Known(tenants.get(tenant)))
    }

    /// `decoded` without the dictionary entries already written.
    pub(crate) fn filter(&self, mut decoded: Decoded) -> Decoded {
        self.with_known(decoded.header.scope.tenant(), |known| {
            decoded.batch.leave_out(&known)
        });
        decoded
    }

    /// Remembers what batches wrote; call only once they are durable.
    pub(crate) fn remember(&self, written: impl IntoIterator<Item = Remember>) {
        let capacity = self.capacity;
        let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        for r in written {
            let cache = tenants
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
