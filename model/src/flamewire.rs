//! `Flamewire`: the flamegraph wire format, read zero-copy (also in WASM).
//!
//! A flamegraph is one array of nodes in depth-first order, children
//! ordered by name. The wire keeps only what cannot be derived, by column
//! ([`Nodes`]), each at the narrowest width its values need ([`Column`]):
//! each node's depth, total, and frame as a position in its parent frame's
//! list of callees ([`Callees`]). Strings and frames are interned once.
//!
//! Readers derive the rest once, in one pass at load ([`Tree::of`]): each
//! node's frame and `skip`, the size of its subtree (node `i`'s next
//! sibling is at `i + skip`), so that a renderer walks the array once and
//! jumps over every subtree narrower than a pixel or off screen. A node's
//! self count is its total less its children's. [`FlameGraph`] is the one
//! accessor over both.
//!
//! On a 1M-node graph (`flamewire_bench`) this is 9.3 B a node, 3.3×
//! fewer bytes than version 1 (which stored every column whole, at 4 or 8
//! bytes), and 1.4 MB with zstd, 1.5× fewer than version 1 with zstd: its
//! frame ids were most of its compressed bytes; the callee positions and
//! lists that replace them take about half.
//!
//! ```
//! use kiln_model::flamewire::{FlameFrame, FlameGraph, FlamewireBuilder, Tree, access};
//! use kiln_model::FrameKind;
//!
//! let mut b = FlamewireBuilder::new();
//! let main = b.intern(FlameFrame::new(FrameKind::Native, "main"));
//! let work = b.intern(FlameFrame::new(FrameKind::Native, "work"));
//! b.add_stack(&[main, work], 3);
//! b.add_stack(&[main], 1);
//! let bytes = b.finish(Default::default()).to_bytes();
//!
//! let wire = access(&bytes).unwrap();
//! let tree = Tree::of(wire).unwrap();
//! let graph = FlameGraph::new(wire, &tree);
//! assert_eq!(graph.node_count(), 3); // root, main, work
//! assert_eq!(graph.node(0).total, 4);
//! assert_eq!(graph.node_name(1), "main");
//! assert_eq!(graph.self_count(1), 1);
//! ```

mod column;
mod encode;
mod read;

use std::collections::HashMap;

pub use column::{ArchivedColumn, Column};
use encode::DepthFirst;
pub use read::{Children, FlameGraph, Tree, access, read};

use crate::frame::FrameKind;

/// The format version in [`Flamewire::version`]. Version 2 dropped the
/// self and skip columns, replaced frame ids by callee positions and made
/// the column widths adapt to their values.
pub const FLAMEWIRE_VERSION: u32 = 2;

/// Name of the root node.
pub const ROOT_NAME: &str = "all";

/// A flamegraph.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Flamewire {
    /// [`FLAMEWIRE_VERSION`].
    pub version: u32,
    /// What the graph covers and how to turn counts into time.
    pub meta: FlameMeta,
    /// Interned strings; index 0 is the empty string ("none").
    pub strings: Vec<String>,
    /// Interned frames; index 0 is the root.
    pub frames: Vec<WireFrame>,
    /// The frames each frame calls somewhere in the graph.
    pub callees: Callees,
    /// Nodes in depth-first order; node 0 is the root, children ordered by
    /// name.
    pub nodes: Nodes,
}

/// The node array, by column: every column has one entry per node.
#[derive(Debug, Clone, Default, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Nodes {
    /// Samples in the node and everything it called.
    pub total: Column,
    /// Depth; the root is 0, every other node at most one deeper than the
    /// node before it.
    pub depth: Column,
    /// The node's frame, as a position in its parent frame's callees
    /// ([`Callees`]); 0 for the root, whose frame is frame 0.
    pub callee: Column,
}

impl Nodes {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.depth.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.depth.is_empty()
    }
}

/// For each frame, the frames it calls in this graph, as one list per
/// frame in frame order: frame `f`'s callees are the `count[f]` entries of
/// `frame` after those of frames `0..f`.
#[derive(Debug, Clone, Default, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Callees {
    /// Callees of each frame; one entry per frame.
    pub count: Column,
    /// The callees, as indices into [`Flamewire::frames`].
    pub frame: Column,
}

/// Metadata of a flamegraph.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    serde::Serialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct FlameMeta {
    /// Start of the time range, nanoseconds since the epoch.
    pub from_ns: i64,
    /// End of the time range (exclusive).
    pub to_ns: i64,
    /// Average CPU nanoseconds one count stands for (0 when unknown), so
    /// that `total * ns_per_count / (to_ns - from_ns)` is cores.
    pub ns_per_count: u64,
}

/// An interned frame: indices into [`Flamewire::strings`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct WireFrame {
    /// What kind of code.
    pub kind: FrameKind,
    /// Function name.
    pub name: u32,
    /// Binary or module; 0 when unknown.
    pub module: u32,
    /// Source file; 0 when unknown.
    pub file: u32,
    /// Source line; 0 when unknown.
    pub line: u32,
}

/// One node of the graph, every column gathered ([`FlameGraph::node`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Samples in this node and everything it called.
    pub total: u64,
    /// Samples in this node itself.
    pub self_count: u64,
    /// Index into [`Flamewire::frames`].
    pub frame: u32,
    /// Depth; the root is 0.
    pub depth: u32,
    /// Nodes in this subtree, this one included.
    pub skip: u32,
}

/// A frame to intern, by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlameFrame<'a> {
    /// What kind of code.
    pub kind: FrameKind,
    /// Function name.
    pub name: &'a str,
    /// Binary or module.
    pub module: Option<&'a str>,
    /// Source file.
    pub file: Option<&'a str>,
    /// Source line; 0 when unknown.
    pub line: u32,
}

impl<'a> FlameFrame<'a> {
    /// A frame with only a kind and a name.
    pub fn new(kind: FrameKind, name: &'a str) -> Self {
        Self {
            kind,
            name,
            module: None,
            file: None,
            line: 0,
        }
    }
}

/// Errors reading a Flamewire.
#[derive(Debug, thiserror::Error)]
pub enum FlamewireError {
    /// The bytes are not a valid archive.
    #[error("flamewire archive is invalid: {0}")]
    Invalid(String),
    /// A version this build does not read.
    #[error(
        "flamewire version {0} is not supported (this build reads version {FLAMEWIRE_VERSION})"
    )]
    UnsupportedVersion(u32),
    /// An index points outside its table, or the tree structure is broken.
    #[error("flamewire is inconsistent: {0}")]
    Inconsistent(&'static str),
}

impl Flamewire {
    /// The rkyv archive of this graph.
    pub fn to_bytes(&self) -> rkyv::util::AlignedVec {
        rkyv::to_bytes::<rkyv::rancor::Error>(self)
            .expect("serializing a flamegraph into memory cannot fail")
    }
}

/// Builds a [`Flamewire`] from stacks, merging common prefixes.
///
/// Built for a million nodes (the query API's largest graphs): strings and
/// frames are interned once; stacks go into a trie whose nodes live in one
/// vector and whose edges are found through one hash map keyed by (parent,
/// frame) with a fast non-cryptographic hasher (the keys are our own
/// indices, not attacker-chosen strings); [`add_stack`](Self::add_stack)
/// only adds the count to the leaf, and totals are summed once in
/// [`finish`](Self::finish), which also ranks the frames by name once and
/// then orders every node's children by those ranks (integers) instead of
/// comparing strings per node.
#[derive(Debug)]
pub struct FlamewireBuilder {
    strings: Vec<String>,
    string_index: FastMap<String, u32>,
    frames: Vec<WireFrame>,
    frame_index: FastMap<WireFrame, u32>,
    trie: Vec<TrieNode>,
    /// `(parent << 32) | frame` → child.
    edges: FastMap<u64, u32>,
}

/// A `HashMap` with foldhash: several times faster than SipHash on the
/// small keys interned here.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy)]
struct TrieNode {
    frame: u32,
    parent: u32,
    self_count: u64,
    first_child: u32,
    next_sibling: u32,
}

const NONE: u32 = u32::MAX;

impl Default for FlamewireBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FlamewireBuilder {
    /// An empty graph (just the root).
    pub fn new() -> Self {
        let mut b = Self {
            strings: Vec::new(),
            string_index: FastMap::default(),
            frames: Vec::new(),
            frame_index: FastMap::default(),
            trie: Vec::new(),
            edges: FastMap::default(),
        };
        b.intern_string("");
        let root = b.intern(FlameFrame::new(FrameKind::Label, ROOT_NAME));
        b.trie.push(TrieNode {
            frame: root,
            parent: NONE,
            self_count: 0,
            first_child: NONE,
            next_sibling: NONE,
        });
        b
    }

    fn intern_string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.string_index.insert(s.to_owned(), i);
        i
    }

    /// Interns a frame and returns its index for [`add_stack`](Self::add_stack).
    pub fn intern(&mut self, frame: FlameFrame<'_>) -> u32 {
        let wire = WireFrame {
            kind: frame.kind,
            name: self.intern_string(frame.name),
            module: frame.module.map_or(0, |m| self.intern_string(m)),
            file: frame.file.map_or(0, |f| self.intern_string(f)),
            line: frame.line,
        };
        if let Some(&i) = self.frame_index.get(&wire) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(wire);
        self.frame_index.insert(wire, i);
        i
    }

    /// Adds `count` samples of the stack `frames` (interned indices, root
    /// first).
    pub fn add_stack(&mut self, frames: &[u32], count: u64) {
        let mut at = 0u32;
        for &frame in frames {
            let key = (u64::from(at) << 32) | u64::from(frame);
            let next = self.trie.len() as u32;
            at = *self.edges.entry(key).or_insert_with(|| {
                let parent = &mut self.trie[at as usize];
                let sibling = std::mem::replace(&mut parent.first_child, next);
                self.trie.push(TrieNode {
                    frame,
                    parent: at,
                    self_count: 0,
                    first_child: NONE,
                    next_sibling: sibling,
                });
                next
            });
        }
        self.trie[at as usize].self_count += count;
    }

    /// Number of nodes so far, the root included.
    pub fn node_count(&self) -> usize {
        self.trie.len()
    }

    /// The finished graph.
    pub fn finish(self, meta: FlameMeta) -> Flamewire {
        // Totals: a child is always created after its parent, so one pass
        // from the last node back sums every subtree.
        let mut totals: Vec<u64> = self.trie.iter().map(|t| t.self_count).collect();
        for (i, t) in self.trie.iter().enumerate().skip(1).rev() {
            totals[t.parent as usize] += totals[i];
        }
        let rank = self.frame_ranks();
        let mut nodes = DepthFirst::with_capacity(self.trie.len());
        // Explicit stack: deep stacks must not overflow the call stack.
        let mut todo: Vec<(u32, u32)> = vec![(0, 0)];
        let mut children = Vec::new();
        while let Some((at, depth)) = todo.pop() {
            let t = self.trie[at as usize];
            nodes.push(t.frame, depth, totals[at as usize]);
            children.clear();
            let mut c = t.first_child;
            while c != NONE {
                children.push(c);
                c = self.trie[c as usize].next_sibling;
            }
            // Descending, so that they pop in ascending order.
            children.sort_unstable_by_key(|&c| {
                std::cmp::Reverse(rank[self.trie[c as usize].frame as usize])
            });
            todo.extend(children.iter().map(|&c| (c, depth + 1)));
        }
        let (nodes, callees) = nodes.encode(self.frames.len());
        Flamewire {
            version: FLAMEWIRE_VERSION,
            meta,
            strings: self.strings,
            frames: self.frames,
            callees,
            nodes,
        }
    }

    /// Each frame's position when frames are ordered as siblings are shown:
    /// by name, then kind, module, line (and index, so the order is total).
    fn frame_ranks(&self) -> Vec<u32> {
        let key = |frame: u32| {
            let f = &self.frames[frame as usize];
            (
                self.strings[f.name as usize].as_str(),
                f.kind as u8,
                self.strings[f.module as usize].as_str(),
                f.line,
                frame,
            )
        };
        let mut order: Vec<u32> = (0..self.frames.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
        let mut rank = vec![0u32; order.len()];
        for (position, &frame) in order.iter().enumerate() {
            rank[frame as usize] = position as u32;
        }
        rank
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn build(stacks: &[(Vec<&str>, u64)]) -> rkyv::util::AlignedVec {
        let mut b = FlamewireBuilder::new();
        for (names, count) in stacks {
            let ids: Vec<u32> = names
                .iter()
                .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
                .collect();
            b.add_stack(&ids, *count);
        }
        b.finish(FlameMeta::default()).to_bytes()
    }

    /// Runs `f` on the graph in `bytes`, validated and derived.
    fn read<T>(bytes: &[u8], f: impl FnOnce(FlameGraph<'_>) -> T) -> T {
        super::read(bytes, f).unwrap()
    }

    /// Validation of a graph that `access` accepts but whose tree is broken.
    fn tree_error(wire: &Flamewire) -> FlamewireError {
        let bytes = wire.to_bytes();
        match access(&bytes) {
            Ok(archived) => Tree::of(archived).unwrap_err(),
            Err(e) => e,
        }
    }

    #[test]
    fn merges_common_prefixes_and_orders_children_by_name() {
        let bytes = build(&[
            (vec!["main", "b"], 2),
            (vec!["main", "a"], 3),
            (vec!["main"], 1),
            (vec!["other"], 4),
        ]);
        read(&bytes, |g| {
            let names: Vec<&str> = (0..g.node_count()).map(|i| g.node_name(i)).collect();
            assert_eq!(names, ["all", "main", "a", "b", "other"]);
            assert_eq!(g.node(0).total, 10);
            assert_eq!(g.node(1).total, 6);
            assert_eq!(g.node(1).self_count, 1);
            assert_eq!(g.node(1).skip, 3);
            assert_eq!(g.children(0).collect::<Vec<_>>(), [1, 4]);
            assert_eq!(g.children(1).collect::<Vec<_>>(), [2, 3]);
        });
    }

    /// Guards the callee encoding: a frame called from two callers, and a
    /// caller with several callees, each decode to their own frame.
    #[test]
    fn frames_decode_through_their_callers_lists() {
        let bytes = build(&[
            (vec!["main", "x", "leaf"], 1),
            (vec!["main", "y", "leaf"], 1),
            (vec!["main", "y", "x"], 1),
            (vec!["other", "leaf"], 1),
        ]);
        read(&bytes, |g| {
            let names: Vec<&str> = (0..g.node_count()).map(|i| g.node_name(i)).collect();
            assert_eq!(
                names,
                [
                    "all", "main", "x", "leaf", "y", "leaf", "x", "other", "leaf"
                ]
            );
            assert_eq!(g.frame(3), g.frame(5));
            assert_eq!(g.frame(2), g.frame(6));
        });
    }

    #[test]
    fn columns_take_the_narrowest_width() {
        let wire = FlamewireBuilder::new().finish(FlameMeta::default());
        assert_eq!(wire.nodes.total.width(), 1);
        let names: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
        let mut b = FlamewireBuilder::new();
        let ids: Vec<u32> = names
            .iter()
            .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
            .collect();
        b.add_stack(&ids, 5_000_000_000);
        let wire = b.finish(FlameMeta::default());
        assert_eq!(wire.nodes.total.width(), 8);
        assert_eq!(wire.nodes.depth.width(), 2);
        assert_eq!(wire.nodes.callee.width(), 1);
        read(&wire.to_bytes(), |g| {
            assert_eq!(g.depth(300), 300);
            assert_eq!(g.self_count(300), 5_000_000_000);
            assert_eq!(g.node_name(300), "f299");
        });
    }

    #[test]
    fn collapsed_output_lists_each_stack_once() {
        let bytes = build(&[
            (vec!["main", "b"], 2),
            (vec!["main"], 1),
            (vec!["main", "b"], 5),
        ]);
        let mut out = Vec::new();
        read(&bytes, |g| g.write_collapsed(&mut out)).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "main 1\nmain;b 7\n");
    }

    #[test]
    fn json_output_nests_children() {
        let bytes = build(&[(vec!["m\"x", "b"], 2)]);
        let mut out = Vec::new();
        read(&bytes, |g| g.write_json(&mut out)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["value"], 2);
        assert_eq!(v["children"][0]["name"], "m\"x");
        assert_eq!(v["children"][0]["children"][0]["name"], "b");
        assert_eq!(v["children"][0]["children"][0]["self"], 2);
    }

    #[test]
    fn deep_stacks_do_not_overflow() {
        let names: Vec<String> = (0..100_000).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let bytes = build(&[(refs, 1)]);
        read(&bytes, |g| {
            assert_eq!(g.node_count(), 100_001);
            assert_eq!(g.skip(0), 100_001);
            let mut out = Vec::new();
            g.write_json(&mut out).unwrap();
        });
    }

    #[test]
    fn corrupt_archives_are_refused() {
        assert!(access(&rkyv::util::AlignedVec::<16>::new()).is_err());
        let good = FlamewireBuilder::new().finish(FlameMeta::default());

        let mut wire = good.clone();
        wire.nodes.total = Column::narrowest(&[1, 1]);
        assert!(matches!(tree_error(&wire), FlamewireError::Inconsistent(_)));

        let mut wire = good.clone();
        wire.version = 99;
        assert!(matches!(
            access(&wire.to_bytes()),
            Err(FlamewireError::UnsupportedVersion(99))
        ));

        let bytes = build(&[(vec!["main", "work"], 3)]);
        let wire: Flamewire =
            rkyv::deserialize::<Flamewire, rkyv::rancor::Error>(access(&bytes).unwrap()).unwrap();
        type Corruption = (&'static str, fn(&mut Flamewire));
        let cases: [Corruption; 6] = [
            ("two roots", |w| {
                w.nodes.depth = Column::narrowest(&[0, 0, 1])
            }),
            ("a depth jump", |w| {
                w.nodes.depth = Column::narrowest(&[0, 1, 3])
            }),
            ("children over the parent", |w| {
                w.nodes.total = Column::narrowest(&[3, 4, 3])
            }),
            ("a callee past its list", |w| {
                w.nodes.callee = Column::narrowest(&[0, 0, 1])
            }),
            ("a callee frame missing", |w| {
                w.callees.frame = Column::narrowest(&[1, 9])
            }),
            ("counts that miss the list", |w| {
                w.callees.count = Column::narrowest(&[1, 0, 0])
            }),
        ];
        for (what, corrupt) in cases {
            let mut broken = wire.clone();
            corrupt(&mut broken);
            assert!(
                matches!(tree_error(&broken), FlamewireError::Inconsistent(_)),
                "{what} was accepted"
            );
        }
    }

    fn arb_stacks() -> impl Strategy<Value = Vec<(Vec<u8>, u64)>> {
        prop::collection::vec((prop::collection::vec(0u8..6, 0..8), 1u64..100), 0..40)
    }

    /// The reference tree of `stacks`: every prefix path with its total and
    /// self count, in depth-first order with children by name (the order
    /// the builder promises).
    fn reference(stacks: &[(Vec<String>, u64)]) -> Vec<(Vec<String>, u64, u64)> {
        let mut totals: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
        totals.insert(Vec::new(), (0, 0));
        for (path, count) in stacks {
            for len in 0..=path.len() {
                totals.entry(path[..len].to_vec()).or_default().0 += count;
            }
            totals.get_mut(path).unwrap().1 += count;
        }
        // BTreeMap order on paths is depth-first order with children by name.
        totals.into_iter().map(|(p, (t, s))| (p, t, s)).collect()
    }

    proptest! {
        /// The archive round-trips, and every derived column (frame, skip,
        /// self) and stored one (total, depth) equals the reference tree.
        #[test]
        fn round_trip_matches_the_reference_tree(stacks in arb_stacks()) {
            let mut b = FlamewireBuilder::new();
            let mut named = Vec::new();
            for (path, count) in &stacks {
                let names: Vec<String> = path.iter().map(|n| format!("f{n}")).collect();
                let ids: Vec<u32> = names.iter()
                    .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
                    .collect();
                b.add_stack(&ids, *count);
                named.push((names, *count));
            }
            let wire = b.finish(FlameMeta { from_ns: 1, to_ns: 2, ns_per_count: 3 });
            let bytes = wire.to_bytes();
            let archived = access(&bytes).unwrap();
            let back: Flamewire =
                rkyv::deserialize::<Flamewire, rkyv::rancor::Error>(archived).unwrap();
            prop_assert_eq!(&back, &wire);
            let tree = Tree::of(archived).unwrap();
            let g = FlameGraph::new(archived, &tree);
            let expected = reference(&named);
            prop_assert_eq!(g.node_count(), expected.len());
            let self_counts = g.self_counts();
            let mut path: Vec<String> = Vec::new();
            for (i, (want_path, total, self_count)) in expected.iter().enumerate() {
                let depth = g.depth(i) as usize;
                if i > 0 {
                    path.truncate(depth - 1);
                    path.push(g.node_name(i).to_owned());
                }
                prop_assert_eq!(&path, want_path);
                prop_assert_eq!(g.total(i), *total);
                prop_assert_eq!(g.self_count(i), *self_count);
                prop_assert_eq!(self_counts[i], *self_count);
                let subtree = expected[i + 1..]
                    .iter()
                    .take_while(|(p, ..)| p.starts_with(want_path))
                    .count();
                prop_assert_eq!(g.skip(i), subtree + 1);
            }
            prop_assert_eq!(g.meta(), FlameMeta { from_ns: 1, to_ns: 2, ns_per_count: 3 });
        }

        /// Guards the reader: arbitrary bytes give an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
            let mut aligned = rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(&bytes);
            if let Ok(wire) = access(&aligned) {
                let _ = Tree::of(wire);
            }
        }
    }
}
