//! A small map whose entries expire: credentials and limits are read from
//! the metadata store at most once per entry and TTL, not per request.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most; past it the map is emptied (it refills from the
/// store). Bounds the memory a flood of distinct, well-formed but unknown
/// keys can take, since misses are cached too.
const MAX_ENTRIES: usize = 100_000;

/// Values that expire `ttl` after they were inserted.
pub(super) struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(super) fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant)>> {
        // Entries are whole values: a panic elsewhere cannot leave one torn.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key`, unless it is missing or expired.
    pub(super) fn get(&self, key: &K) -> Option<V> {
        let entries = self.lock();
        let (value, at) = entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    /// The value of `key` when it is no older than `max_age`, expired or
    /// not: the last answer, for when the source cannot be asked now.
    pub(super) fn get_stale(&self, key: &K, max_age: Duration) -> Option<V> {
        let entries = self.lock();
        let (value, at) = entries.get(key)?;
        (at.elapsed() < max_age).then(|| value.clone())
    }

    pub(super) fn insert(&self, key: K, value: V) {
        let mut entries = self.lock();
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    pub(super) fn remove(&self, key: &K) {
        self.lock().remove(key);
    }

    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_can_be_forgotten() {
        let cache = TtlCache::new(Duration::from_millis(50));
        cache.insert("a", 1);
        cache.insert("b", 2);
        assert_eq!(cache.get(&"a"), Some(1));
        cache.remove(&"a");
        assert_eq!(cache.get(&"a"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&"b"), None, "an expired entry was served");
    }
}
