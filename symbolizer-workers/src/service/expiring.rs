//! A set whose members expire: what the symbolizer knows to be missing,
//! believed for a while only.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Members older than `ttl` are gone. Expired members are dropped when the
/// set reaches `capacity`; if it is still full then, it is emptied: an
/// entry forgotten early only costs one more look.
#[derive(Debug)]
pub(crate) struct ExpiringSet<K> {
    added: HashMap<K, Instant>,
    ttl: Duration,
    capacity: usize,
}

impl<K: Eq + Hash> ExpiringSet<K> {
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            added: HashMap::new(),
            ttl,
            capacity,
        }
    }

    /// Whether `key` was added less than the TTL ago.
    pub(crate) fn contains(&mut self, key: &K) -> bool {
        match self.added.get(key) {
            Some(at) if at.elapsed() < self.ttl => true,
            Some(_) => {
                self.added.remove(key);
                false
            }
            None => false,
        }
    }

    pub(crate) fn insert(&mut self, key: K) {
        if self.added.len() >= self.capacity {
            let ttl = self.ttl;
            self.added.retain(|_, at| at.elapsed() < ttl);
            if self.added.len() >= self.capacity {
                self.added.clear();
            }
        }
        self.added.insert(key, Instant::now());
    }

    /// Removes every member `keep` says no to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.added.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_expire() {
        let mut set = ExpiringSet::new(Duration::ZERO, 8);
        set.insert(1);
        assert!(!set.contains(&1));
        let mut set = ExpiringSet::new(Duration::from_secs(3600), 8);
        set.insert(1);
        assert!(set.contains(&1));
        set.retain(|&k| k != 1);
        assert!(!set.contains(&1));
    }

    /// Guards the bound: a full set of live members is emptied, not grown.
    #[test]
    fn full_set_stays_bounded() {
        let mut set = ExpiringSet::new(Duration::from_secs(3600), 4);
        for k in 0..10 {
            set.insert(k);
            assert!(set.added.len() <= 4);
        }
        assert!(set.contains(&9));
    }
}
