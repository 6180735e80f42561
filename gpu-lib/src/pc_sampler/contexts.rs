//! The contexts being sampled, found by handle with plain loads.
//!
//! Every launch exit looks its context up, on the program's thread, at
//! launch rates. On an H200 with 8 threads launching empty kernels, a
//! lookup through an `RwLock<Vec<Arc<_>>>` (a read lock and a reference
//! count, four atomic read-modify-writes on two shared cache lines) went
//! with 8.1–9.4 µs per launch against 1.4–1.5 µs without PC sampling.
//! Here a lookup only loads: slots are claimed once and never freed or
//! reused, so a reference to a context stays valid for the process's life
//! without counting. A torn-down context keeps its slot (marked retired,
//! its buffers released); a process that creates more than [`MAX`]
//! contexts over its life samples the first ones only, and says so.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Contexts a process can sample over its life.
pub(super) const MAX: usize = 256;

/// A slot being written: not yet visible to lookups.
const CLAIMED: usize = usize::MAX;

struct Slot<T> {
    /// The context handle once `value` is set; 0 while free.
    key: AtomicUsize,
    value: OnceLock<T>,
}

/// A fixed table of `T` by context handle.
pub(super) struct ContextTable<T> {
    slots: Box<[Slot<T>]>,
}

impl<T> Default for ContextTable<T> {
    fn default() -> Self {
        Self {
            slots: (0..MAX)
                .map(|_| Slot {
                    key: AtomicUsize::new(0),
                    value: OnceLock::new(),
                })
                .collect(),
        }
    }
}

impl<T> ContextTable<T> {
    /// Adds `value` under `handle` (non-zero); gives it back when the table
    /// is full.
    pub(super) fn insert(&self, handle: usize, value: T) -> Result<&T, T> {
        debug_assert!(handle != 0 && handle != CLAIMED);
        for slot in self.slots.iter() {
            if slot
                .key
                .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let stored = slot.value.get_or_init(|| value);
                slot.key.store(handle, Ordering::Release);
                return Ok(stored);
            }
        }
        Err(value)
    }

    /// Every value under `handle`, oldest first (a handle the driver
    /// reused after a context was destroyed has several).
    pub(super) fn find(&self, handle: usize) -> impl Iterator<Item = &T> {
        self.claimed()
            .filter(move |slot| slot.key.load(Ordering::Acquire) == handle)
            .filter_map(|slot| slot.value.get())
    }

    /// The slots claimed so far. Slots are claimed in order and never
    /// freed, so they are a prefix: a lookup reads as many slots as the
    /// process has had contexts, not [`MAX`].
    fn claimed(&self) -> impl Iterator<Item = &Slot<T>> {
        self.slots
            .iter()
            .take_while(|slot| slot.key.load(Ordering::Acquire) != 0)
    }

    /// Every value.
    pub(super) fn all(&self) -> impl Iterator<Item = &T> {
        self.claimed()
            .filter(|slot| slot.key.load(Ordering::Acquire) != CLAIMED)
            .filter_map(|slot| slot.value.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_under_its_handle() {
        let table = ContextTable::default();
        table.insert(0x10, "a").unwrap();
        table.insert(0x20, "b").unwrap();
        table.insert(0x10, "a again").unwrap();
        assert_eq!(
            table.find(0x10).copied().collect::<Vec<_>>(),
            ["a", "a again"]
        );
        assert_eq!(table.find(0x20).copied().collect::<Vec<_>>(), ["b"]);
        assert_eq!(table.find(0x30).count(), 0);
        assert_eq!(table.all().count(), 3);
    }

    #[test]
    fn a_full_table_gives_the_value_back() {
        let table = ContextTable::default();
        for handle in 1..=MAX {
            table.insert(handle, handle).unwrap();
        }
        assert_eq!(table.insert(MAX + 1, 7), Err(7));
        assert_eq!(table.find(MAX).copied().collect::<Vec<_>>(), [MAX]);
    }

    #[test]
    fn inserts_from_many_threads_land_once_each() {
        let table = ContextTable::default();
        std::thread::scope(|s| {
            for t in 0..8usize {
                let table = &table;
                s.spawn(move || {
                    for i in 0..16 {
                        let handle = 1 + t * 100 + i;
                        table.insert(handle, handle).unwrap();
                    }
                });
            }
        });
        assert_eq!(table.all().count(), 128);
        for t in 0..8usize {
            for i in 0..16 {
                let handle = 1 + t * 100 + i;
                assert_eq!(table.find(handle).copied().collect::<Vec<_>>(), [handle]);
            }
        }
    }
}
