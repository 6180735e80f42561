//! Diff of two time ranges, drawn as one merged tree (as Pyroscope and
//! Parca do): every call path of either range is a node, so functions that
//! disappeared still show (in blue), not only those of the current range.
//!
//! Each range is scaled to the same weight before merging, so a node's width
//! is its share of the current range plus its share of the baseline: a path
//! only in the baseline is as wide as it was there, one only in the current
//! range as wide as it is now. Beside the merged graph the diff keeps each
//! node's sample counts in both ranges, for colours and the tooltip.
//!
//! The server's statistics (`/api/v1/compare`) say which functions moved
//! beyond sampling noise; once they arrive ([`Diff::marked`]) a node of
//! any other function is drawn muted, so that what changed stands out
//! from what only wobbled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kiln_model::flamewire::{Flamewire, FlamewireBuilder};

use crate::graph::Graph;
use crate::transform::{meta_of, owned_frame};

/// The merged graph and both ranges' samples of each of its nodes.
#[derive(Debug, Clone)]
pub struct Diff {
    /// The union of both ranges' call paths, weighted as the module says.
    pub graph: Arc<Graph>,
    /// Samples of each merged node in the current range (0: the path is
    /// only in the baseline).
    now: Vec<u64>,
    /// Samples of each merged node in the baseline (0: the path is new).
    base: Vec<u64>,
    /// Whether each merged node's function changed significantly, once
    /// the server's comparison is in (`None` until then, or when it
    /// failed: every node then drawn by its change alone).
    significant: Option<Arc<Vec<bool>>>,
}

/// The functions a comparison flagged as changed beyond sampling noise:
/// each name with its modules (empty for none), as the flamegraph names
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Significant(HashMap<String, HashSet<String>>);

impl Significant {
    /// The flagged functions among `(name, module)` pairs.
    pub fn new(flagged: impl IntoIterator<Item = (String, Option<String>)>) -> Self {
        let mut names: HashMap<String, HashSet<String>> = HashMap::new();
        for (name, module) in flagged {
            names
                .entry(name)
                .or_default()
                .insert(module.unwrap_or_default());
        }
        Significant(names)
    }

    fn contains(&self, name: &str, module: &str) -> bool {
        self.0
            .get(name)
            .is_some_and(|modules| modules.contains(module))
    }
}

/// What each range weighs in the merged graph. Large, so that scaling
/// counts rounds away nothing visible; small enough that two ranges' worth
/// of it fits a `u64` many thousand times over.
const RANGE_WEIGHT: f64 = (1u64 << 40) as f64;

/// Which range a stack comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Now,
    Base,
}

impl Diff {
    /// Merges `current` and `base` by call path (frames from the root
    /// down).
    pub fn new(current: &Graph, base: &Graph) -> Self {
        let scale = |g: &Graph| RANGE_WEIGHT / g.root_total().max(1) as f64;
        let (now_scale, base_scale) = (scale(current), scale(base));
        let graph = union(current, base, |side, n| {
            let scale = if side == Side::Now {
                now_scale
            } else {
                base_scale
            };
            (n as f64 * scale).round() as u64
        });
        // The same stacks in the same order give the same tree, node for
        // node: only the counts differ.
        let totals = |side: Side| {
            let g = Graph::from_wire(&union(current, base, |s, n| if s == side { n } else { 0 }));
            (0..g.node_count())
                .map(|i| g.total(i))
                .collect::<Vec<u64>>()
        };
        Self {
            graph: Arc::new(Graph::from_wire(&graph)),
            now: totals(Side::Now),
            base: totals(Side::Base),
            significant: None,
        }
    }

    /// This diff with each node marked by whether its function is among
    /// `significant` (the same merged graph, shared).
    pub fn marked(&self, significant: &Significant) -> Self {
        let graph = &self.graph;
        let marks = (0..graph.node_count())
            .map(|i| i > 0 && significant.contains(graph.name(i), graph.module(i)))
            .collect();
        Self {
            significant: Some(Arc::new(marks)),
            ..self.clone()
        }
    }

    /// Whether node `i`'s function changed significantly; `None` when the
    /// comparison is not in.
    pub fn significant(&self, i: usize) -> Option<bool> {
        self.significant.as_ref().map(|marks| marks[i])
    }

    /// Samples of merged node `i` in the current range.
    pub fn now(&self, i: usize) -> u64 {
        self.now[i]
    }

    /// Samples of merged node `i` in the baseline.
    pub fn base(&self, i: usize) -> u64 {
        self.base[i]
    }

    /// Share (0 to 1) of the current range's samples in node `i`.
    pub fn now_share(&self, i: usize) -> f64 {
        self.now[i] as f64 / self.now[0].max(1) as f64
    }

    /// Share (0 to 1) of the baseline's samples in node `i`.
    pub fn base_share(&self, i: usize) -> f64 {
        self.base[i] as f64 / self.base[0].max(1) as f64
    }

    /// Change of node `i`'s share in percentage points (positive: grew;
    /// a path only in the baseline has lost all of its share).
    pub fn delta_points(&self, i: usize) -> f64 {
        (self.now_share(i) - self.base_share(i)) * 100.0
    }
}

/// One graph of both ranges' stacks, each stack weighted by `weight(side,
/// self samples)`.
fn union(current: &Graph, base: &Graph, weight: impl Fn(Side, u64) -> u64) -> Flamewire {
    let mut builder = FlamewireBuilder::new();
    for (side, graph) in [(Side::Now, current), (Side::Base, base)] {
        let wire = graph.wire();
        let mut interned: Vec<Option<u32>> = vec![None; wire.frames.len()];
        let mut path: Vec<u32> = Vec::new();
        for i in 1..graph.node_count() {
            let frame = graph.frame(i);
            let id = *interned[frame as usize]
                .get_or_insert_with(|| builder.intern(owned_frame(graph, frame)));
            path.truncate(graph.depth(i) as usize - 1);
            path.push(id);
            let own = graph.self_count(i);
            if own > 0 {
                builder.add_stack(&path, weight(side, own));
            }
        }
    }
    builder.finish(meta_of(current))
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
        let at = |path: &[&str]| diff.graph.find_path(path).unwrap();
        assert!((diff.delta_points(at(&["main", "a"])) - 25.0).abs() < 1e-9);
        assert!((diff.delta_points(at(&["main", "b"])) + 30.0).abs() < 1e-9);
        assert!((diff.delta_points(at(&["main", "c"])) - 5.0).abs() < 1e-9);
        assert!(diff.delta_points(0).abs() < 1e-9);
    }

    /// Guards the bug: a function that ran only in the baseline
    /// used to vanish from the diff, which drew the current graph alone.
    #[test]
    fn paths_only_in_the_baseline_are_drawn_as_wide_as_they_were() {
        // `gc` took 40 % of the baseline and is gone now; the current range
        // has twice the samples, which must not matter.
        let base = graph_of("main;work 60\nmain;gc;sweep 40");
        let now = graph_of("main;work 180\nmain;new 20");
        let diff = Diff::new(&now, &base);
        let g = &diff.graph;
        let gc = g
            .find_path(&["main", "gc"])
            .expect("gc is in the merged graph");
        let sweep = g
            .find_path(&["main", "gc", "sweep"])
            .expect("and its callee");
        assert_eq!((diff.now(gc), diff.base(gc)), (0, 40));
        assert_eq!((diff.now(sweep), diff.base(sweep)), (0, 40));
        assert!((diff.delta_points(gc) + 40.0).abs() < 1e-9);
        // Width: 40 % of the baseline's half of the merged graph.
        let width = g.total(gc) as f64 / g.root_total() as f64;
        assert!((width - 0.2).abs() < 1e-9, "gc is {width} of the width");
        let new = g.find_path(&["main", "new"]).unwrap();
        assert_eq!((diff.now(new), diff.base(new)), (20, 0));
        assert!((diff.delta_points(new) - 10.0).abs() < 1e-9);
        let work = g.find_path(&["main", "work"]).unwrap();
        assert_eq!((diff.now(work), diff.base(work)), (180, 60));
        assert_eq!((diff.now(0), diff.base(0)), (200, 100));
    }

    #[test]
    fn flagged_functions_are_marked_wherever_they_are_called() {
        let base = graph_of("main;a;hash 50\nmain;b;hash 10\nmain;b 40");
        let now = graph_of("main;a;hash 70\nmain;b;hash 10\nmain;b 20");
        let diff = Diff::new(&now, &base);
        let at = |path: &[&str]| diff.graph.find_path(path).unwrap();
        assert_eq!(diff.significant(at(&["main", "a", "hash"])), None);
        let marked = diff.marked(&Significant::new([
            ("hash".to_owned(), None),
            ("other".to_owned(), Some("libx.so".to_owned())),
        ]));
        assert!(Arc::ptr_eq(&marked.graph, &diff.graph));
        assert_eq!(marked.significant(at(&["main", "a", "hash"])), Some(true));
        assert_eq!(marked.significant(at(&["main", "b", "hash"])), Some(true));
        assert_eq!(marked.significant(at(&["main", "b"])), Some(false));
        assert_eq!(
            marked.significant(0),
            Some(false),
            "the root is no function"
        );
    }

    #[test]
    fn an_empty_baseline_shows_the_current_graph() {
        let now = graph_of("main;a 3");
        let diff = Diff::new(&now, &graph_of(""));
        assert_eq!(diff.graph.node_count(), 3);
        let a = diff.graph.find_path(&["main", "a"]).unwrap();
        assert!((diff.delta_points(a) - 100.0).abs() < 1e-9);
    }
}
