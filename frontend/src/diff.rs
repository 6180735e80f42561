//! Diff of two time ranges: each node of the current graph next to the
//! same call path in the baseline graph.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::graph::Graph;

/// Baseline shares aligned with the current graph's nodes.
#[derive(Debug, Clone)]
pub struct Diff {
    /// Share (0 to 1) of the baseline's samples in the same call path as
    /// each node of the current graph; 0 where the baseline lacks it.
    pub base_share: Vec<f64>,
}

impl Diff {
    /// Aligns `base` with `current` by call path (function and binary names
    /// from the root down).
    pub fn new(current: &Graph, base: &Graph) -> Self {
        let base_root = base.root_total().max(1) as f64;
        let base_paths = path_keys(base);
        let by_path: HashMap<u64, u64> = base_paths
            .iter()
            .enumerate()
            .map(|(i, &key)| (key, base.total(i)))
            .collect();
        let base_share = path_keys(current)
            .iter()
            .map(|key| by_path.get(key).map_or(0.0, |&t| t as f64 / base_root))
            .collect();
        Self { base_share }
    }

    /// Change of node `i`'s share in percentage points (positive: grew).
    pub fn delta_points(&self, current: &Graph, i: usize) -> f64 {
        let share = current.total(i) as f64 / current.root_total().max(1) as f64;
        (share - self.base_share[i]) * 100.0
    }
}

/// A hash of each node's call path.
fn path_keys(graph: &Graph) -> Vec<u64> {
    let n = graph.node_count();
    let mut keys = Vec::with_capacity(n);
    let mut open: Vec<u64> = Vec::new();
    for i in 0..n {
        let depth = graph.depth(i) as usize;
        open.truncate(depth);
        let mut h = DefaultHasher::new();
        open.last().copied().unwrap_or(0).hash(&mut h);
        graph.name(i).hash(&mut h);
        graph.module(i).hash(&mut h);
        let key = h.finish();
        open.push(key);
        keys.push(key);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph_of;

    #[test]
    fn shares_are_compared_by_call_path() {
        let base = graph_of("main;a 50\nmain;b 50");
        let now = graph_of("main;a 75\nmain;b 20\nmain;c 5");
        let diff = Diff::new(&now, &base);
        let at = |path: &[&str]| now.find_path(path).unwrap();
        assert!((diff.delta_points(&now, at(&["main", "a"])) - 25.0).abs() < 1e-9);
        assert!((diff.delta_points(&now, at(&["main", "b"])) + 30.0).abs() < 1e-9);
        assert!((diff.delta_points(&now, at(&["main", "c"])) - 5.0).abs() < 1e-9);
        assert!(diff.delta_points(&now, 0).abs() < 1e-9);
    }
}
