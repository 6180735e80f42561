//! Which rows of the program's `unwind_rows` array are free.
//!
//! Each file's unwind table takes one contiguous range of rows (the BPF
//! walker binary-searches `[start, start + len)`). Tables come and go as
//! executables do, so the array is managed like a heap: first-fit
//! allocation over a set of free ranges, and freed ranges merged with their
//! neighbours so that space does not crumble into unusable slivers.

use std::collections::BTreeMap;

/// Free ranges of an array of `capacity` rows.
#[derive(Debug, Clone)]
pub(crate) struct RowSpace {
    /// start → length of each free range; ranges never touch (touching
    /// ones are merged).
    free: BTreeMap<u32, u32>,
    free_rows: u32,
    capacity: u32,
}

impl RowSpace {
    /// All `capacity` rows free.
    pub(crate) fn new(capacity: u32) -> RowSpace {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        RowSpace {
            free,
            free_rows: capacity,
            capacity,
        }
    }

    /// Rows in all.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Rows free, in all ranges together.
    pub(crate) fn free_rows(&self) -> u32 {
        self.free_rows
    }

    /// The start of `len` contiguous rows, now taken; `None` when no free
    /// range is that long. First fit: the lowest such range.
    pub(crate) fn allocate(&mut self, len: u32) -> Option<u32> {
        if len == 0 {
            return None;
        }
        let (&start, &free_len) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&start);
        if free_len > len {
            self.free.insert(start + len, free_len - len);
        }
        self.free_rows -= len;
        Some(start)
    }

    /// Gives back rows `[start, start + len)`, taken by [`allocate`].
    ///
    /// [`allocate`]: RowSpace::allocate
    pub(crate) fn release(&mut self, start: u32, len: u32) {
        if len == 0 {
            return;
        }
        debug_assert!(u64::from(start) + u64::from(len) <= u64::from(self.capacity));
        self.free_rows += len;
        let mut start = start;
        let mut len = len;
        if let Some((&before, &before_len)) = self.free.range(..start).next_back() {
            debug_assert!(before + before_len <= start, "released rows were free");
            if before + before_len == start {
                self.free.remove(&before);
                start = before;
                len += before_len;
            }
        }
        if let Some(&after_len) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += after_len;
        }
        debug_assert!(
            self.free
                .range(start..)
                .next()
                .is_none_or(|(&s, _)| s >= start + len),
            "released rows were free"
        );
        self.free.insert(start, len);
    }

    /// Free ranges, lowest first (for tests and debug output).
    #[cfg(test)]
    fn ranges(&self) -> Vec<(u32, u32)> {
        self.free.iter().map(|(&s, &l)| (s, l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn freed_neighbours_merge_back_into_one_range() {
        let mut space = RowSpace::new(100);
        let a = space.allocate(10).unwrap();
        let b = space.allocate(20).unwrap();
        let c = space.allocate(30).unwrap();
        assert_eq!((a, b, c), (0, 10, 30));
        assert_eq!(space.free_rows(), 40);
        space.release(b, 20);
        // A hole of 20 is too small for 25: that goes after c.
        assert_eq!(space.allocate(25), Some(60));
        space.release(a, 10);
        space.release(c, 30);
        assert_eq!(space.ranges(), vec![(0, 60), (85, 15)]);
        space.release(60, 25);
        assert_eq!(space.ranges(), vec![(0, 100)]);
        assert_eq!(space.free_rows(), 100);
    }

    #[test]
    fn nothing_fits_in_a_full_or_fragmented_space() {
        let mut space = RowSpace::new(30);
        let starts: Vec<_> = (0..3).map(|_| space.allocate(10).unwrap()).collect();
        assert_eq!(space.allocate(1), None);
        space.release(starts[0], 10);
        space.release(starts[2], 10);
        // 20 rows free, but not 11 in a row.
        assert_eq!(space.free_rows(), 20);
        assert_eq!(space.allocate(11), None);
        assert_eq!(space.allocate(0), None);
    }

    proptest! {
        // Guards the heap against a model that marks each row: ranges
        // never overlap, the free count is exact, and everything released
        // comes back as one range.
        #[test]
        fn allocations_match_a_row_by_row_model(
            ops in proptest::collection::vec((1u32..40, any::<bool>(), any::<prop::sample::Index>()), 1..200)
        ) {
            const CAPACITY: u32 = 500;
            let mut space = RowSpace::new(CAPACITY);
            let mut used = vec![false; CAPACITY as usize];
            let mut live: Vec<(u32, u32)> = Vec::new();
            for (len, free_one, which) in ops {
                if free_one && !live.is_empty() {
                    let (start, len) = live.swap_remove(which.index(live.len()));
                    space.release(start, len);
                    used[start as usize..(start + len) as usize].fill(false);
                } else if let Some(start) = space.allocate(len) {
                    let rows = &mut used[start as usize..(start + len) as usize];
                    prop_assert!(rows.iter().all(|u| !u), "{start}+{len} overlaps a table");
                    rows.fill(true);
                    live.push((start, len));
                } else {
                    // First fit fails only when no run of free rows is long enough.
                    let longest = used
                        .split(|&u| u)
                        .map(<[bool]>::len)
                        .max()
                        .unwrap_or(0);
                    prop_assert!((longest as u32) < len, "{len} rows free in a row but refused");
                }
                let free = used.iter().filter(|u| !**u).count() as u32;
                prop_assert_eq!(space.free_rows(), free);
            }
            for (start, len) in live {
                space.release(start, len);
            }
            prop_assert_eq!(space.ranges(), vec![(0, CAPACITY)]);
        }
    }
}
