//! The query side's [`BoundedCache`], a map bounded by entry count. When full it is emptied and refilled: the cached values
//! are content-addressed and never go stale, so the only cost of
//! forgetting is a reload, and this keeps the bookkeeping free.

use std::hash::Hash;

use crate::fast_hash::FastMap;
use crate::telemetry::CacheCounters;

#[derive(Debug)]
pub(crate) struct BoundedCache<K, V> {
    map: FastMap<K, V>,
    capacity: usize,
    /// Hits and misses, as its users count them ([`Self::record`]).
    counters: CacheCounters,
}

impl<K: Eq + Hash, V> BoundedCache<K, V> {
    /// A cache whose lookups are counted in `counters`
    /// (`kiln_query_cache_hits_total`, `…_misses_total`).
    pub(crate) fn counted(capacity: usize, counters: CacheCounters) -> Self {
        Self {
            map: FastMap::default(),
            capacity,
            counters,
        }
    }

    /// Counts a lookup of many keys: `hits` found, `misses` not. Callers
    /// count once per batch of keys, not per key.
    pub(crate) fn record(&self, hits: usize, misses: usize) {
        self.counters.record(hits, misses);
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.map.len() >= self.capacity {
            self.map.clear();
        }
        self.map.insert(key, value);
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}
