//! Address ranges of JIT-compiled code and what each holds, where a later
//! entry wins over the earlier ones it overlaps: a JIT reuses the space
//! of code it freed (V8 after a deoptimization, .NET after re-JIT at a
//! higher tier), and its perf map only ever appends, so the newest line
//! covering an address names what is there now.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Disjoint `[start, end)` ranges, each with its value, kept sorted by
/// start. Inserting a range cuts it out of the ranges it overlaps (what
/// is left of them either side stays theirs), so lookups are one search
/// and overlaps are resolved once, as they are read.
#[derive(Debug, Clone)]
pub(crate) struct NewestRanges<T> {
    /// start → (end, value); never overlapping, never empty.
    ranges: BTreeMap<u64, (u64, Arc<T>)>,
}

impl<T> Default for NewestRanges<T> {
    fn default() -> Self {
        NewestRanges {
            ranges: BTreeMap::new(),
        }
    }
}

impl<T> NewestRanges<T> {
    /// Number of disjoint ranges held (an insert may split one in two).
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// `[start, end)` now holds `value`, over whatever held any of it
    /// before. An empty range changes nothing.
    pub(crate) fn insert(&mut self, start: u64, end: u64, value: Arc<T>) {
        if start >= end {
            return;
        }
        // A range starting before `start` that reaches into the new one:
        // its head stays, and its tail too when it reaches past `end`.
        if let Some((&before, &(before_end, ref held))) = self.ranges.range(..start).next_back()
            && before_end > start
        {
            let held = held.clone();
            self.ranges.insert(before, (start, held.clone()));
            if before_end > end {
                self.ranges.insert(end, (before_end, held));
            }
        }
        // Ranges starting inside the new one go; the last may leave a
        // tail past `end`.
        let inside: Vec<u64> = self.ranges.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some((old_end, held)) = self.ranges.remove(&s)
                && old_end > end
            {
                self.ranges.insert(end, (old_end, held));
            }
        }
        self.ranges.insert(start, (end, value));
    }

    /// The value of the range holding `addr`.
    pub(crate) fn get(&self, addr: u64) -> Option<&Arc<T>> {
        let (_, (end, value)) = self.ranges.range(..=addr).next_back()?;
        (addr < *end).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &NewestRanges<&'static str>) -> Vec<(u64, u64, &'static str)> {
        r.ranges.iter().map(|(&s, (e, v))| (s, *e, **v)).collect()
    }

    // Guards newest-wins: a later entry over part of an older one takes
    // that part only; one over several takes them all; lookups find the
    // newest name at every address, and none outside every range.
    #[test]
    fn later_entries_win_where_they_overlap() {
        let mut r = NewestRanges::default();
        r.insert(100, 200, Arc::new("old"));
        r.insert(150, 160, Arc::new("inner"));
        assert_eq!(
            names(&r),
            vec![(100, 150, "old"), (150, 160, "inner"), (160, 200, "old")]
        );
        r.insert(120, 180, Arc::new("wide"));
        assert_eq!(
            names(&r),
            vec![(100, 120, "old"), (120, 180, "wide"), (180, 200, "old")]
        );
        r.insert(50, 300, Arc::new("all"));
        assert_eq!(names(&r), vec![(50, 300, "all")]);
        r.insert(300, 310, Arc::new("next"));
        r.insert(310, 310, Arc::new("empty"));
        assert_eq!(r.get(49), None);
        assert_eq!(r.get(50).map(|v| **v), Some("all"));
        assert_eq!(r.get(299).map(|v| **v), Some("all"));
        assert_eq!(r.get(300).map(|v| **v), Some("next"));
        assert_eq!(r.get(310), None);
        // The same range again: the newer name.
        r.insert(300, 310, Arc::new("again"));
        assert_eq!(r.get(305).map(|v| **v), Some("again"));
        assert_eq!(r.len(), 2);
    }
}
