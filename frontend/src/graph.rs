//! A fetched Flamewire, validated once and then read in place.

use kiln_model::FrameKind;
use kiln_model::flamewire::{ArchivedFlamewire, Flamewire, FlamewireError, access};
use rkyv::util::AlignedVec;

/// A flamegraph the UI shows: the rkyv bytes, validated when built, read
/// zero-copy from then on (a million nodes are never deserialized).
#[derive(Debug)]
pub struct Graph {
    bytes: AlignedVec,
}

impl Graph {
    /// Validates `bytes` (a Flamewire body) and keeps them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FlamewireError> {
        let mut aligned = AlignedVec::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        access(&aligned)?;
        Ok(Self { bytes: aligned })
    }

    /// A graph built in the browser (transforms, sandwich, tests).
    pub fn from_wire(wire: &Flamewire) -> Self {
        Self {
            bytes: wire.to_bytes(),
        }
    }

    /// The archived graph.
    pub fn wire(&self) -> &ArchivedFlamewire {
        // SAFETY: `bytes` passed `access` (full bytecheck validation and the
        // index consistency check) when this value was built, or were
        // serialized by rkyv itself in `from_wire`, and are never mutated.
        unsafe { rkyv::access_unchecked::<ArchivedFlamewire>(&self.bytes) }
    }

    /// Size of the archive in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.wire().node_count()
    }

    /// Samples of the whole graph.
    pub fn root_total(&self) -> u64 {
        self.wire().nodes.total[0].to_native()
    }

    /// Total of node `i`.
    pub fn total(&self, i: usize) -> u64 {
        self.wire().nodes.total[i].to_native()
    }

    /// Depth of node `i`.
    pub fn depth(&self, i: usize) -> u32 {
        self.wire().nodes.depth[i].to_native()
    }

    /// Subtree size of node `i`.
    pub fn skip(&self, i: usize) -> usize {
        self.wire().nodes.skip[i].to_native() as usize
    }

    /// Frame index of node `i`.
    pub fn frame(&self, i: usize) -> u32 {
        self.wire().nodes.frame[i].to_native()
    }

    /// Function name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        self.wire().node_name(i)
    }

    /// Binary or module of node `i` ("" when unknown).
    pub fn module(&self, i: usize) -> &str {
        let wire = self.wire();
        wire.string(wire.node_frame(i).module.to_native())
    }

    /// Kind of code of node `i`.
    pub fn kind(&self, i: usize) -> FrameKind {
        FrameKind::from(&self.wire().node_frame(i).kind)
    }

    /// Converts samples to average cores over the graph's time range (0 when
    /// the graph does not say how long a sample is).
    pub fn cores(&self, samples: u64) -> f64 {
        let meta = &self.wire().meta;
        let span = meta.to_ns.to_native() - meta.from_ns.to_native();
        if span <= 0 {
            return 0.0;
        }
        samples as f64 * meta.ns_per_count.to_native() as f64 / span as f64
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
        let wire = self.wire();
        let mut at = 0;
        for name in path {
            at = wire.children(at).find(|&c| wire.node_name(c) == *name)?;
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
