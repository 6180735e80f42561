//! A map bounded by entry count. When full it is emptied and refilled: the
//! cached values are content-addressed and never go stale, so the only cost
//! of forgetting is a reload, and this keeps the bookkeeping free.

use std::collections::HashMap;
use std::hash::Hash;

#[derive(Debug)]
pub(crate) struct BoundedCache<K, V> {
    map: HashMap<K, V>,
    capacity: usize,
}

impl<K: Eq + Hash, V> BoundedCache<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::new(),
            capacity,
        }
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
