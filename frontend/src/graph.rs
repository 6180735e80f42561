//! A fetched Flamewire, validated once and then read in place.

use kiln_model::FrameKind;
use kiln_model::flamewire::{
    ArchivedFlamewire, FlameGraph, Flamewire, FlamewireError, Tree, access,
};
use rkyv::util::AlignedVec;

/// A flamegraph the UI shows: the rkyv bytes, validated when built and
/// read zero-copy from then on (a million nodes are never deserialized),
/// with the columns derived from them once ([`Tree`]: subtree sizes and
/// frames).
#[derive(Debug)]
pub struct Graph {
    bytes: AlignedVec,
    tree: Tree,
    /// Milliseconds validating the bytes and deriving the tree took, when
    /// the caller timed it (the browser bench reports it).
    load_ms: f64,
}

impl Graph {
    /// Validates `bytes` (a Flamewire body), derives its tree and keeps
    /// both.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FlamewireError> {
        let mut aligned = AlignedVec::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        let tree = Tree::of(access(&aligned)?)?;
        Ok(Self {
            bytes: aligned,
            tree,
            load_ms: 0.0,
        })
    }

    /// This graph, noting that loading it took `ms` milliseconds.
    pub fn with_load_ms(self, ms: f64) -> Self {
        Self {
            load_ms: ms,
            ..self
        }
    }

    /// Milliseconds loading took, as noted by [`with_load_ms`](Self::with_load_ms).
    pub fn load_ms(&self) -> f64 {
        self.load_ms
    }

    /// A graph built in the browser (transforms, sandwich, tests).
    pub fn from_wire(wire: &Flamewire) -> Self {
        let bytes = wire.to_bytes();
        let tree = access(&bytes)
            .and_then(Tree::of)
            .expect("the builder writes valid flamegraphs");
        Self {
            bytes,
            tree,
            load_ms: 0.0,
        }
    }

    /// The archived graph.
    pub fn wire(&self) -> &ArchivedFlamewire {
        // SAFETY: `bytes` passed `access` (full bytecheck validation and the
        // table checks) and `Tree::of` (the node checks) when this value was
        // built, and are never mutated.
        unsafe { rkyv::access_unchecked::<ArchivedFlamewire>(&self.bytes) }
    }

    /// The graph with its derived columns: the accessor every reader uses.
    pub fn view(&self) -> FlameGraph<'_> {
        FlameGraph::new(self.wire(), &self.tree)
    }

    /// Size of the archive in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.view().node_count()
    }

    /// Samples of the whole graph.
    pub fn root_total(&self) -> u64 {
        self.total(0)
    }

    /// Total of node `i`.
    pub fn total(&self, i: usize) -> u64 {
        self.view().total(i)
    }

    /// Samples in node `i` itself.
    pub fn self_count(&self, i: usize) -> u64 {
        self.view().self_count(i)
    }

    /// Depth of node `i`.
    pub fn depth(&self, i: usize) -> u32 {
        self.view().depth(i)
    }

    /// Subtree size of node `i`.
    pub fn skip(&self, i: usize) -> usize {
        self.view().skip(i)
    }

    /// Frame index of node `i`.
    pub fn frame(&self, i: usize) -> u32 {
        self.view().frame(i)
    }

    /// Function name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        self.view().node_name(i)
    }

    /// Binary or module of node `i` ("" when unknown).
    pub fn module(&self, i: usize) -> &str {
        let view = self.view();
        view.string(view.node_frame(i).module.to_native())
    }

    /// Kind of code of node `i`.
    pub fn kind(&self, i: usize) -> FrameKind {
        FrameKind::from(&self.view().node_frame(i).kind)
    }

    /// Converts samples to average cores over the graph's time range (0 when
    /// the graph does not say how long a sample is).
    pub fn cores(&self, samples: u64) -> f64 {
        let meta = self.view().meta();
        let span = meta.to_ns - meta.from_ns;
        if span <= 0 {
            return 0.0;
        }
        samples as f64 * meta.ns_per_count as f64 / span as f64
    }

    /// Parent of every node (the root's is itself), for walks up the tree.
    pub fn parents(&self) -> Vec<u32> {
        let n = self.node_count();
        let mut parents = vec![0u32; n];
        let mut open: Vec<u32> = Vec::new();
        for (i, parent) in parents.iter_mut().enumerate() {
            let depth = self.depth(i) as usize;
            open.truncate(depth);
            *parent = open.last().copied().unwrap_or(0);
            open.push(i as u32);
        }
        parents
    }

    /// The names from the root's child down to node `i`, for URLs.
    pub fn path_of(&self, i: usize, parents: &[u32]) -> Vec<&str> {
        let mut path = Vec::new();
        let mut at = i;
        while at != 0 {
            path.push(self.name(at));
            at = parents[at] as usize;
        }
        path.reverse();
        path
    }

    /// The node at `path` (names below the root), if the graph has it.
    pub fn find_path(&self, path: &[&str]) -> Option<usize> {
        let view = self.view();
        let mut at = 0;
        for name in path {
            at = view.children(at).find(|&c| view.node_name(c) == *name)?;
        }
        Some(at)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kiln_model::flamewire::{FlameFrame, FlameMeta, FlamewireBuilder};

    use super::*;

    /// A graph of collapsed-stack lines (`a;b;c 3`), native frames.
    pub(crate) fn graph_of(lines: &str) -> Graph {
        let mut b = FlamewireBuilder::new();
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let (stack, count) = line.trim().rsplit_once(' ').unwrap();
            let ids: Vec<u32> = stack
                .split(';')
                .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
                .collect();
            b.add_stack(&ids, count.parse().unwrap());
        }
        Graph::from_wire(&b.finish(FlameMeta {
            from_ns: 0,
            to_ns: 1_000_000_000,
            ns_per_count: 10_000_000,
        }))
    }

    #[test]
    fn paths_round_trip_and_cores_use_the_range() {
        let g = graph_of("main;a;b 3\nmain;c 1");
        let parents = g.parents();
        let b = g.find_path(&["main", "a", "b"]).unwrap();
        assert_eq!(g.path_of(b, &parents), ["main", "a", "b"]);
        assert_eq!(g.find_path(&["main", "zzz"]), None);
        // 4 samples of 10 ms over 1 s: 0.04 cores.
        assert!((g.cores(g.root_total()) - 0.04).abs() < 1e-9);
    }

    #[test]
    fn invalid_bytes_are_refused() {
        assert!(Graph::from_bytes(b"not a flamewire").is_err());
        let g = graph_of("a 1");
        assert!(Graph::from_bytes(&g.bytes).is_ok());
    }
}
